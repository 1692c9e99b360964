#include "cli_common.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <ostream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvt::cli {

int ExitCodeFor(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kUnimplemented:
      return kExitUsage;
    case absl::StatusCode::kNotFound:
      return kExitNotFound;
    default:
      return kExitRuntime;
  }
}

absl::StatusOr<DType> ParseDType(std::string_view name_sv) {
  const std::string name(name_sv);
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "fp16" || n == "float16" || n == "half") return DType::kF16;
  if (n == "fp32" || n == "float32" || n == "float") return DType::kF32;
  if (n == "bfloat16") return DType::kBF16;
  if (n == "int8") return DType::kI8;
  if (n == "fp8") return DType::kFP8E4M3;
  for (int v = 0; v <= static_cast<int>(DType::kBytes); ++v) {
    const auto d = static_cast<DType>(v);
    if (n == DTypeName(d)) return d;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--dtype '", name, "': expected one of f32, f16, bf16, fp8_e4m3, fp8_e5m2, i8, bytes"));
}

absl::StatusOr<LayoutKind> ParseLayoutKind(std::string_view name_sv) {
  const std::string name(name_sv);
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "nhd") return LayoutKind::kFlashAttnNHD;
  if (n == "hnd") return LayoutKind::kFlashAttnHND;
  if (n == "flashinfer") return LayoutKind::kFlashInfer;
  if (n == "mla") return LayoutKind::kMLA;
  if (n == "cross_layer" || n == "crosslayer") return LayoutKind::kCrossLayer;
  if (n == "llamacpp" || n == "llama.cpp") return LayoutKind::kLlamaCppRows;
  std::string all;
  for (int v = 0; v <= static_cast<int>(LayoutKind::kLlamaCppRows); ++v) {
    const auto k = static_cast<LayoutKind>(v);
    if (n == LayoutKindName(k)) return k;
    absl::StrAppend(&all, v ? ", " : "", std::string(LayoutKindName(k)));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--layout '", name, "': expected one of ", all,
                   " (or nhd, hnd, flashinfer, mla, cross_layer, llamacpp)"));
}

std::string_view TierName(TierKind kind) { return TierKindName(kind); }

absl::StatusOr<TierKind> ParseTierKind(std::string_view name_sv) {
  const std::string name(name_sv);
  const std::string n = absl::AsciiStrToLower(name);
  for (int v = 0; v <= static_cast<int>(TierKind::kRemote); ++v) {
    const auto k = static_cast<TierKind>(v);
    if (n == TierName(k)) return k;
  }
  if (n == "cluster") {
    return absl::InvalidArgumentError(
        absl::StrCat("tier '", name,
                     "': kvtierd's cluster tier is called 'remote' (expected host, disk or "
                     "remote)"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("tier '", name, "': expected host, disk or remote"));
}

absl::StatusOr<NamespaceParams> NamespaceFlags::Params() const {
  NamespaceParams p;
  if (model_id.empty()) {
    return absl::InvalidArgumentError(
        "namespace: --model is required (or give the namespace directly with --ns HEX)");
  }
  if (layers == 0 || kv_heads == 0 || head_dim == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "namespace: --layers, --kv-heads and --head-dim must all be > 0 (got %d, %d, %d)", layers,
        kv_heads, head_dim));
  }
  p.model_id = model_id;
  p.layout.num_layers = layers;
  p.layout.num_kv_heads = kv_heads;
  p.layout.head_dim = head_dim;
  auto d = ParseDType(dtype);
  if (!d.ok()) return d.status();
  p.layout.dtype = *d;
  auto k = ParseLayoutKind(layout);
  if (!k.ok()) return k.status();
  p.layout.kind = *k;
  p.tp_rank = tp_rank;
  p.tp_world_size = tp_size;
  p.chunk_tokens = chunk_tokens;
  p.tenant = tenant;
  p.engine_extra = engine_extra;
  if (absl::Status s = p.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("namespace flags: ", s.message()));
  }
  return p;
}

absl::StatusOr<NamespaceId> NamespaceFlags::Resolve() const {
  if (!ns_hex.empty()) {
    if (has_model()) {
      return absl::InvalidArgumentError(
          "give either --ns or the model flags (--model ...), not both");
    }
    auto ns = NamespaceId::FromHex(ns_hex);
    if (!ns.ok()) return absl::InvalidArgumentError(absl::StrCat("--ns: ", ns.status().message()));
    return *ns;
  }
  auto p = Params();
  if (!p.ok()) return p.status();
  return ComputeNamespace(*p);
}

namespace {

// Splits "1.5GiB" into number "1.5" and unit "gib".
void SplitNumberUnit(const std::string& text, std::string* number, std::string* unit) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    ++i;
  }
  *number = std::string(text.substr(0, i));
  *unit = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text.substr(i)));
}

}  // namespace

absl::StatusOr<int64_t> ParseDurationMs(std::string_view text_sv) {
  const std::string text(text_sv);
  std::string number, unit;
  SplitNumberUnit(std::string(absl::StripAsciiWhitespace(text)), &number, &unit);
  double value;
  if (number.empty() || !absl::SimpleAtod(number, &value) || value < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "duration '", text, "': expected a number with a unit (e.g. 90s, 30m, 2h, 7d)"));
  }
  double mult;
  if (unit == "ms") {
    mult = 1;
  } else if (unit == "s") {
    mult = 1e3;
  } else if (unit == "m" || unit == "min") {
    mult = 60e3;
  } else if (unit == "h") {
    mult = 3600e3;
  } else if (unit == "d") {
    mult = 86400e3;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("duration '", text, "': expected a unit ms, s, m, h or d"));
  }
  return static_cast<int64_t>(std::llround(value * mult));
}

std::string WithCommas(uint64_t value) {
  std::string digits = absl::StrCat(value);
  std::string out;
  const size_t n = digits.size();
  for (size_t i = 0; i < n; ++i) {
    out.push_back(digits[i]);
    if ((n - i - 1) % 3 == 0 && i + 1 < n) out.push_back(',');
  }
  return out;
}

namespace {
std::string Scaled(uint64_t bytes, double base, const char* const* units) {
  if (bytes < base) return absl::StrCat(bytes, " B");
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= base && units[u + 1] != nullptr) {
    v /= base;
    ++u;
  }
  if (v >= 100) return absl::StrFormat("%.0f %s", v, units[u]);
  if (v >= 10) return absl::StrFormat("%.1f %s", v, units[u]);
  return absl::StrFormat("%.2f %s", v, units[u]);
}
}  // namespace

std::string HumanBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", nullptr};
  return Scaled(bytes, 1024.0, kUnits);
}

std::string HumanBytesDecimal(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "kB", "MB", "GB", "TB", "PB", nullptr};
  return Scaled(bytes, 1000.0, kUnits);
}

std::string Age(int64_t unix_ms, int64_t now_unix_ms) {
  if (unix_ms <= 0) return "never";
  const int64_t s = std::max<int64_t>(0, (now_unix_ms - unix_ms) / 1000);
  if (s < 120) return absl::StrCat(s, "s ago");
  if (s < 7200) return absl::StrCat(s / 60, "m ago");
  if (s < 172800) return absl::StrCat(s / 3600, "h ago");
  return absl::StrCat(s / 86400, "d ago");
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string ShortHex(const std::string& hex) { return hex.substr(0, 12); }

Table::Table(std::vector<std::string> headers, std::vector<bool> right_align)
    : headers_(std::move(headers)), right_(std::move(right_align)) {
  right_.resize(headers_.size(), false);
}

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

void Table::Print(std::ostream& out) const {
  std::vector<size_t> width(headers_.size());
  for (size_t c = 0; c < headers_.size(); ++c) width[c] = headers_[c].size();
  for (const auto& row : rows_) {
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t c = 0; c < cells.size(); ++c) {
      const size_t pad = width[c] - cells[c].size();
      if (c) s += "  ";
      if (right_[c]) s += std::string(pad, ' ');
      s += cells[c];
      if (!right_[c] && c + 1 < cells.size()) s += std::string(pad, ' ');
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    out << s << "\n";
  };
  line(headers_);
  for (const auto& row : rows_) line(row);
}

}  // namespace kvt::cli
