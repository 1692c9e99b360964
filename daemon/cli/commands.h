// The `kvtier` commands. Each Run* function prints its result to `out` (a table, or one
// JSON document with --json), its errors to `err` as "kvtier <command>: <message>", and
// returns the process exit code (cli_common.h). Commands use only CacheBackend, so they
// behave the same against kvtierd and against an offline disk directory.
#ifndef KVTIER_CLI_COMMANDS_H_
#define KVTIER_CLI_COMMANDS_H_

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backend.h"
#include "cli_common.h"

namespace kvt::cli {

// Flags shared by every command.
struct GlobalFlags {
  std::string daemon;  // --daemon unix:/path | host:port (env KVTIER_DAEMON)
  // Where `daemon` came from, as errors name it: "--daemon" or "KVTIER_DAEMON".
  std::string daemon_source = "--daemon";
  std::string token;          // --token (env KVTIER_TOKEN): tenant bearer token
  std::string disk_dir;       // --disk-dir: open a disk tier directory offline
  std::string disk_capacity;  // --disk-capacity: capacity to open it with ("" = files' size)
  double timeout_s = 5.0;     // --timeout: per-RPC deadline
  bool json = false;          // --json
};

// Opens --daemon or --disk-dir. InvalidArgument when both or neither are given;
// Unavailable when the daemon cannot be reached; NotFound for a directory without a tier.
absl::StatusOr<std::unique_ptr<CacheBackend>> OpenBackend(const GlobalFlags& flags);

// Where a prompt comes from: --tokens FILE, or --text FILE with --tokenizer GGUF.
struct PromptFlags {
  std::string tokens_file;
  std::string text_file;
  std::string tokenizer_gguf;
  bool no_bos = false;
  bool given() const { return !tokens_file.empty() || !text_file.empty(); }
};
absl::StatusOr<std::vector<TokenId>> LoadPrompt(const PromptFlags& flags);

struct PlanFlags {
  std::string gguf;
  uint32_t layers = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  std::string dtype = "bf16";
  std::string layout = "flash_attn_nhd";
  uint32_t chunk_tokens = kDefaultChunkTokens;
  uint32_t context_tokens = 8192;
  std::vector<std::string> tiers;  // "name=size", e.g. host=64GiB
};
int RunPlan(const PlanFlags& plan, const GlobalFlags& global, std::ostream& out, std::ostream& err);

struct InspectFlags {
  NamespaceFlags ns;
  PromptFlags prompt;
  bool include_partial = false;
};
int RunInspect(const InspectFlags& flags, const GlobalFlags& global, std::ostream& out,
               std::ostream& err);

struct LsFlags {
  NamespaceFlags ns;  // optional filter
  std::string tier;
  std::string older_than;
  std::string newer_than;
  bool chunks = false;     // list chunks, not namespace groups
  bool layout = false;     // read one header per namespace to show its layout
  size_t limit = 50;       // groups (or chunks with --chunks) per page
  size_t offset = 0;       // groups to skip
  std::string page_token;  // with --chunks: continue a previous page
};
int RunLs(const LsFlags& flags, const GlobalFlags& global, std::ostream& out, std::ostream& err);

int RunStats(const GlobalFlags& global, std::ostream& out, std::ostream& err);

struct WatchFlags {
  double interval_s = 2.0;
  uint64_t count = 0;  // 0 = until interrupted
  bool no_clear = false;
};
int RunWatch(const WatchFlags& flags, const GlobalFlags& global, std::ostream& out,
             std::ostream& err);

struct EvictFlags {
  std::vector<std::string> keys;
  NamespaceFlags ns;
  PromptFlags prefix;
  std::string older_than;
  bool include_orphans = false;
  bool dry_run = false;
};
int RunEvict(const EvictFlags& flags, const GlobalFlags& global, std::ostream& out,
             std::ostream& err);

// Shared by commands: prints "kvtier <cmd>: <status message>" and returns its exit code.
int Fail(std::ostream& err, std::string_view command, const absl::Status& status);

}  // namespace kvt::cli

#endif  // KVTIER_CLI_COMMANDS_H_
