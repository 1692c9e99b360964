// Shared pieces of the `kvtier` CLI: exit codes, namespace flags, parsing of sizes,
// durations and enum names, and output formatting (tables, byte counts, ages).
#ifndef KVTIER_CLI_CLI_COMMON_H_
#define KVTIER_CLI_CLI_COMMON_H_

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstore/byte_size.h"  // sizes in flags: kvt::ParseByteSize, shared with kvtierd
#include "kvstore/chunk_key.h"
#include "kvstore/tier.h"
#include "kvstore/types.h"

namespace kvt::cli {

// Process exit codes of `kvtier` (documented in docs/cli.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntime = 1;   // daemon unreachable, I/O error, partial failure
inline constexpr int kExitUsage = 2;     // bad flags or bad input (token file, GGUF, hex key)
inline constexpr int kExitNotFound = 3;  // key / namespace / chunks asked for are not cached

// InvalidArgument/OutOfRange/Unimplemented -> 2, NotFound -> 3, OK -> 0, everything else -> 1.
int ExitCodeFor(const absl::Status& status);

// The namespace parameters an engine hashes (kvstore/chunk_key.h), as CLI flags.
// Flag values are kept as strings until Resolve() so errors can name the flag.
struct NamespaceFlags {
  std::string ns_hex;  // --ns: a namespace given directly (32 hex digits)
  std::string model_id;
  uint32_t layers = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  std::string dtype = "bf16";
  std::string layout = "flash_attn_nhd";
  uint32_t tp_rank = 0;
  uint32_t tp_size = 1;
  uint32_t chunk_tokens = kDefaultChunkTokens;
  std::string tenant;
  std::string engine_extra;
  // --from-server http://host:port: the namespace (and chunk_tokens) a running
  // kvtier-llama-server reports at /kvtier; filled in by ApplyFromServer
  // (server_namespace.h) into ns_hex, chunk_tokens and bytes_per_token.
  std::string from_server;
  uint64_t bytes_per_token = 0;  // from --from-server; 0 = unknown

  // True when any model flag (--model ...) was given.
  bool has_model() const { return !model_id.empty(); }
  // Builds and validates NamespaceParams. InvalidArgument naming the flag.
  absl::StatusOr<NamespaceParams> Params() const;
  // --ns when given, else ComputeNamespace(Params()). InvalidArgument when neither.
  absl::StatusOr<NamespaceId> Resolve() const;
};

// "bf16", "f16"/"fp16", "f32"/"fp32", "fp8_e4m3", "fp8_e5m2", "i8", "bytes".
absl::StatusOr<DType> ParseDType(std::string_view name);
// The names of LayoutKindName(): "flash_attn_nhd", ..., plus short aliases
// "nhd", "hnd", "flashinfer", "mla", "cross_layer", "llamacpp".
absl::StatusOr<LayoutKind> ParseLayoutKind(std::string_view name);
// "host", "disk", "remote" (kvt::TierKindName).
std::string_view TierName(TierKind kind);
// "host" | "disk" | "remote".
absl::StatusOr<TierKind> ParseTierKind(std::string_view name);

// Byte sizes: kvt::ParseByteSize (kvstore/byte_size.h), the parser kvtierd uses too.
// Kept only as a name for cmd_plan.cc; new code calls ParseByteSize.
inline absl::StatusOr<uint64_t> ParseBytes(std::string_view text) { return ParseByteSize(text); }
// Durations: a number with unit ms, s, m, h or d ("90s", "2h", "7d"); result in ms.
absl::StatusOr<int64_t> ParseDurationMs(std::string_view text);

// 1,073,741,824
std::string WithCommas(uint64_t value);
// 1.00 GiB (binary units, 3 significant digits); "512 B" below 1 KiB.
std::string HumanBytes(uint64_t bytes);
// 4.29 GB (decimal units).
std::string HumanBytesDecimal(uint64_t bytes);
// "12s ago", "3m ago", "5h ago", "2d ago"; "never" for 0.
std::string Age(int64_t unix_ms, int64_t now_unix_ms);
int64_t NowUnixMs();
// First 12 hex digits of a hash, for tables (full hex in --json).
std::string ShortHex(const std::string& hex);

// A plain text table: header row, then rows; columns padded, numbers right-aligned
// when `right_align[i]`.
class Table {
 public:
  explicit Table(std::vector<std::string> headers, std::vector<bool> right_align = {});
  void AddRow(std::vector<std::string> cells);
  void Print(std::ostream& out) const;
  size_t num_rows() const { return rows_.size(); }

 private:
  std::vector<std::string> headers_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace kvt::cli

#endif  // KVTIER_CLI_CLI_COMMON_H_
