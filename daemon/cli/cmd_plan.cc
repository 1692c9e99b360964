// kvtier plan: KV bytes per token / chunk / context for a model shape, and what each
// tier holds. Bytes per token = kv_planes x layers x KV heads x head_dim x bytes per
// element (KvLayout::bytes_per_token, kvstore/types.h).
#include <cmath>
#include <limits>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "commands.h"
#include "gguf_shape.h"
#include "kvstore/chunk_codec.h"
#include "nlohmann/json.hpp"

namespace kvt::cli {

namespace {

struct PlanTier {
  std::string name;
  uint64_t capacity_bytes = 0;
  bool padded_4k = false;  // disk tiers store each record padded to 4096 bytes
};

absl::StatusOr<std::vector<PlanTier>> ParseTierFlags(const std::vector<std::string>& specs) {
  std::vector<PlanTier> tiers;
  for (const auto& spec : specs) {
    std::vector<std::string> parts = absl::StrSplit(spec, absl::MaxSplits('=', 1));
    if (parts.size() != 2 || parts[0].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tier '", spec, "': expected NAME=SIZE, e.g. host=64GiB or disk=2TB"));
    }
    auto bytes = ParseBytes(parts[1]);
    if (!bytes.ok())
      return absl::InvalidArgumentError(
          absl::StrCat("--tier '", spec, "': ", bytes.status().message()));
    auto kind = ParseTierKind(parts[0]);
    tiers.push_back(PlanTier{parts[0], *bytes, kind.ok() && *kind == TierKind::kDisk});
  }
  return tiers;
}

}  // namespace

int RunPlan(const PlanFlags& plan, const GlobalFlags& global, std::ostream& out,
            std::ostream& err) {
  constexpr std::string_view kCmd = "plan";
  KvLayout layout;
  std::string model_name;
  std::vector<std::string> notes;
  if (!plan.gguf.empty()) {
    auto shape = ReadGgufShape(plan.gguf);
    if (!shape.ok()) return Fail(err, kCmd, shape.status());
    layout.num_layers = shape->num_layers;
    layout.num_kv_heads = shape->num_kv_heads;
    layout.head_dim = shape->head_dim;
    if (shape->mla) layout.kind = LayoutKind::kMLA;
    model_name = absl::StrCat(shape->name.empty() ? "(unnamed)" : shape->name, " [",
                              shape->architecture, ", ", plan.gguf, "]");
    notes = shape->notes;
  }
  // Explicit flags override what the GGUF says.
  if (plan.layers) layout.num_layers = plan.layers;
  if (plan.kv_heads) layout.num_kv_heads = plan.kv_heads;
  if (plan.head_dim) layout.head_dim = plan.head_dim;
  auto dtype = ParseDType(plan.dtype);
  if (!dtype.ok()) return Fail(err, kCmd, dtype.status());
  layout.dtype = *dtype;
  auto kind = ParseLayoutKind(plan.layout);
  if (!kind.ok()) return Fail(err, kCmd, kind.status());
  // A GGUF MLA model keeps kMLA unless --layout was given explicitly.
  if (!(layout.kind == LayoutKind::kMLA && plan.layout == "flash_attn_nhd")) layout.kind = *kind;
  if (layout.num_layers == 0 || layout.num_kv_heads == 0 || layout.head_dim == 0) {
    // Name what is zero: a flag given as 0 is not the same mistake as a flag left out.
    std::vector<std::string> zero;
    if (layout.num_layers == 0) zero.push_back("--layers");
    if (layout.num_kv_heads == 0) zero.push_back("--kv-heads");
    if (layout.head_dim == 0) zero.push_back("--head-dim");
    return Fail(err, kCmd,
                absl::InvalidArgumentError(absl::StrCat(
                    "give the model shape: --layers, --kv-heads and --head-dim (each >= 1), or "
                    "--gguf FILE; missing or 0: ",
                    absl::StrJoin(zero, ", "))));
  }
  if (absl::Status s = layout.Validate(); !s.ok())
    return Fail(err, kCmd, absl::InvalidArgumentError(s.message()));
  if (plan.chunk_tokens == 0 || plan.context_tokens == 0) {
    return Fail(err, kCmd, absl::InvalidArgumentError("--chunk-tokens and --context must be > 0"));
  }

  std::vector<PlanTier> tiers;
  if (!plan.tiers.empty()) {
    auto t = ParseTierFlags(plan.tiers);
    if (!t.ok()) return Fail(err, kCmd, t.status());
    tiers = std::move(*t);
  } else if (!global.daemon.empty() || !global.disk_dir.empty()) {
    auto backend = OpenBackend(global);
    if (!backend.ok()) return Fail(err, kCmd, backend.status());
    auto stats = (*backend)->Stats();
    if (!stats.ok()) return Fail(err, kCmd, stats.status());
    for (const auto& t : stats->tiers) {
      tiers.push_back(PlanTier{t.name, t.stats.capacity_bytes, t.kind == TierKind::kDisk});
    }
  }

  // Every figure is computed in 128 bits and refused when it does not fit the uint64 byte
  // counts the store uses (e.g. --layers 65536 --kv-heads 65536 --head-dim 131072 gives
  // 2^64 bytes per 8K context).
  using u128 = unsigned __int128;
  const u128 per_token128 = static_cast<u128>(layout.kv_planes()) * layout.num_layers *
                            layout.num_kv_heads * layout.head_dim * DTypeSize(layout.dtype);
  const u128 per_chunk128 = per_token128 * plan.chunk_tokens;
  const u128 record128 = per_chunk128 + kChunkHeaderBytes;
  const u128 per_context128 = per_token128 * plan.context_tokens;
  constexpr u128 kMax = std::numeric_limits<uint64_t>::max() - 4096;  // room for 4 KiB padding
  if (per_token128 > kMax || record128 > kMax || per_context128 > kMax) {
    return Fail(
        err, kCmd,
        absl::InvalidArgumentError(absl::StrFormat(
            "shape too large: %d layers x %d KV heads x head_dim %d x %d B x %d-token %s does not "
            "fit "
            "in 64-bit byte counts (max %s B); check --layers, --kv-heads, --head-dim, "
            "--chunk-tokens "
            "and --context",
            layout.num_layers, layout.num_kv_heads, layout.head_dim, DTypeSize(layout.dtype),
            per_context128 > kMax ? plan.context_tokens : plan.chunk_tokens,
            per_context128 > kMax ? "context" : "chunk", WithCommas(static_cast<uint64_t>(kMax)))));
  }
  const uint64_t per_token = static_cast<uint64_t>(per_token128);
  const uint64_t per_chunk = static_cast<uint64_t>(per_chunk128);
  const uint64_t record = static_cast<uint64_t>(record128);
  const uint64_t per_context = static_cast<uint64_t>(per_context128);

  struct TierFit {
    PlanTier tier;
    uint64_t stored_chunk_bytes, chunks, tokens;
    double contexts;
  };
  std::vector<TierFit> fits;
  for (const auto& t : tiers) {
    const uint64_t stored = t.padded_4k ? (record + 4095) / 4096 * 4096 : record;
    const uint64_t chunks = t.capacity_bytes / stored;
    const uint64_t tokens = chunks * plan.chunk_tokens;
    fits.push_back(
        TierFit{t, stored, chunks, tokens, static_cast<double>(tokens) / plan.context_tokens});
  }

  if (global.json) {
    nlohmann::json j;
    if (!model_name.empty()) j["model"] = model_name;
    j["layout"] = {{"num_layers", layout.num_layers},
                   {"num_kv_heads", layout.num_kv_heads},
                   {"head_dim", layout.head_dim},
                   {"dtype", std::string(DTypeName(layout.dtype))},
                   {"bytes_per_element", DTypeSize(layout.dtype)},
                   {"kind", std::string(LayoutKindName(layout.kind))}};
    j["bytes_per_token"] = per_token;
    j["chunk_tokens"] = plan.chunk_tokens;
    j["bytes_per_chunk"] = per_chunk;
    j["record_bytes_per_chunk"] = record;
    j["context_tokens"] = plan.context_tokens;
    j["bytes_per_context"] = per_context;
    j["tiers"] = nlohmann::json::array();
    for (const auto& f : fits) {
      j["tiers"].push_back({{"name", f.tier.name},
                            {"capacity_bytes", f.tier.capacity_bytes},
                            {"stored_bytes_per_chunk", f.stored_chunk_bytes},
                            {"chunks", f.chunks},
                            {"tokens", f.tokens},
                            {"contexts", f.contexts}});
    }
    j["notes"] = notes;
    out << j.dump(2) << "\n";
    return kExitOk;
  }

  if (!model_name.empty()) out << "model           " << model_name << "\n";
  out << absl::StrFormat(
      "layout          %d layers x %d KV heads x head_dim %d, %s (%d B/element), %s\n",
      layout.num_layers, layout.num_kv_heads, layout.head_dim, DTypeName(layout.dtype),
      DTypeSize(layout.dtype), LayoutKindName(layout.kind));
  out << absl::StrFormat("KV per token    %s B (%s)\n", WithCommas(per_token),
                         HumanBytes(per_token));
  out << absl::StrFormat("KV per chunk    %s B (%s) for %s tokens; record %s B with its header\n",
                         WithCommas(per_chunk), HumanBytes(per_chunk),
                         WithCommas(plan.chunk_tokens), WithCommas(record));
  out << absl::StrFormat("KV per context  %s B (%s, %s) for %s tokens\n", WithCommas(per_context),
                         HumanBytes(per_context), HumanBytesDecimal(per_context),
                         WithCommas(plan.context_tokens));
  for (const auto& n : notes) out << "note            " << n << "\n";
  if (!fits.empty()) {
    out << "\n";
    const std::string ctx_header = plan.context_tokens % 1024 == 0
                                       ? absl::StrCat(plan.context_tokens / 1024, "K CONTEXTS")
                                       : absl::StrCat(plan.context_tokens, "-TOKEN CONTEXTS");
    Table t({"TIER", "CAPACITY", "CHUNKS", "TOKENS", ctx_header}, {false, true, true, true, true});
    for (const auto& f : fits) {
      t.AddRow({f.tier.name, HumanBytes(f.tier.capacity_bytes), WithCommas(f.chunks),
                WithCommas(f.tokens), absl::StrFormat("%.2f", f.contexts)});
    }
    t.Print(out);
  } else {
    out << "\n(add --tier NAME=SIZE, --daemon or --disk-dir to see what each tier holds)\n";
  }
  return kExitOk;
}

}  // namespace kvt::cli
