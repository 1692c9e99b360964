// kvtier-llama-server's own flags (docs/llama-server.md). Everything else on the command
// line is llama-server's and passes through unchanged.
#ifndef KVTIER_SERVER_SERVER_OPTIONS_H_
#define KVTIER_SERVER_SERVER_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvt::llamacpp {

struct ServerKvtierOptions {
  // --kvtier-daemon ADDR: a kvtierd shared by many servers ("unix:///abs/path.sock",
  // "unix:rel.sock" or "host:port"). "" = none.
  std::string daemon;
  // --kvtier-dir DIR: an embedded disk tier (created if missing). "" = none.
  std::string dir;
  // --kvtier-host-mib N: embedded host-memory tier in MiB (0 = none). -1 = default:
  // 1024 with --kvtier-dir, else 0.
  int64_t host_mib = -1;
  // --kvtier-disk-mib N: capacity of the disk tier in MiB (multiple of 4 KiB records).
  int64_t disk_mib = 8192;
  // --kvtier-token T: the tenant token sent to kvtierd ("authorization: Bearer T").
  std::string token;
  // --kvtier-tenant NAME: the tenant that is part of the namespace ("" = default tenant).
  std::string tenant;
  // --kvtier-chunk-tokens N: tokens per chunk (part of the namespace).
  int64_t chunk_tokens = 256;
  // --kvtier-no-cost-model: load every cached leading chunk regardless of cost.
  bool cost_model = true;
  // --kvtier-cost-probe-after N: after N decisions in a row that recompute although
  // chunks are cached, the next loads one chunk to measure the tier again
  // (CostModelOptions::probe_after_recomputes; 0 = never probe). Default 32.
  int64_t cost_probe_after = 32;
  // --kvtier-no-tail: restore complete chunks only (no tail records, tail_records.h), so
  // an answer through kvtier is bit for bit the cold one rather than a RAM-cache hit's.
  bool tail = true;
  // --kvtier-timeout-ms N: deadline of one kvtierd call (a dead or paused daemon costs at
  // most this, then the request is answered cold).
  int64_t daemon_timeout_ms = 2000;
  // --kvtier-shm-slots N: with a kvtierd on a unix socket (same host), chunks move
  // through a shared-memory region of N slots of 40 MiB (progressive transfers,
  // docs/daemon.md; RemoteTierOptions::shm_slots), falling back to gRPC where the daemon
  // cannot share memory. 0 = gRPC only. Default 4; ignored for host:port targets.
  int64_t shm_slots = 4;
  // --kvtier-overlap MODE: load while computing (Cake; docs/llama-server.md "Load while
  // computing"). kOff: never; kAuto (default): when the cost model decided to load less
  // than the cached prefix (it loads slower than it computes) and CostModel::PlanOverlap
  // predicts a split faster than both load only and compute only; kAlways: plan a split
  // on every chunk hit (with --kvtier-overlap-front: always that split; tests).
  enum class Overlap : uint8_t { kOff, kAuto, kAlways };
  Overlap overlap = Overlap::kAuto;
  // --kvtier-overlap-front N: a fixed front of N tokens (a multiple of the chunk size,
  // > 0) computed while the chunks after it load. Needs --kvtier-overlap always. 0 = plan.
  int64_t overlap_front_tokens = 0;
  // --kvtier-throttle-gbps X (benchmarks only): every Get from the host tier takes at
  // least its bytes / X GB/s, a slow link in front of host memory. Needs the host tier
  // alone (no --kvtier-dir or --kvtier-daemon). 0 = off.
  double throttle_gbps = 0;
  // llama-server's own --swa-full (or LLAMA_ARG_SWA_FULL=1|true|on|enabled): a full-size
  // sliding-window cache, which kvtier needs for an iSWA model (gemma3, gpt-oss;
  // docs/models.md). Seen by ExtractKvtierFlags, which leaves the flag for llama-server.
  bool swa_full = false;
  // llama-server's own -ctxcp / --ctx-checkpoints / --swa-checkpoints N (or
  // LLAMA_ARG_CTX_CHECKPOINTS) with N <= 0: no context checkpoints, so a recurrent or
  // hybrid model's prompt batches do not stop 4 tokens before the end and kvtier stores
  // and restores no tail records for it (docs/models.md "Boundary snapshots"). Seen by
  // ExtractKvtierFlags, which leaves the flag for llama-server.
  bool no_ctx_checkpoints = false;

  // True when any tier is configured (daemon, dir or host_mib > 0).
  bool enabled() const;
  // host_mib with the default applied.
  int64_t effective_host_mib() const;
  // InvalidArgument whose message starts with the offending flag and value.
  absl::Status Validate() const;
};

// Removes every --kvtier-* flag (forms "--flag value" and "--flag=value") from `args`
// (args[0], the program name, is kept) and returns the parsed, validated options.
// InvalidArgument naming the flag: unknown --kvtier-* flag, missing value, a value that
// is not a number where one is expected, or what Validate() refuses.
absl::StatusOr<ServerKvtierOptions> ExtractKvtierFlags(std::vector<std::string>& args);

// The --kvtier-* section printed with --help.
std::string KvtierFlagsHelp();

}  // namespace kvt::llamacpp

#endif  // KVTIER_SERVER_SERVER_OPTIONS_H_
