#include "kvtier_server/server_options.h"

#include <charconv>
#include <cstdlib>
#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kvstore/daemon_address.h"  // the one parser of kvtierd addresses

namespace kvt::llamacpp {
namespace {

absl::StatusOr<int64_t> ParseInt(const std::string& flag, const std::string& value) {
  int64_t v = 0;
  const char* end = value.data() + value.size();
  auto [ptr, ec] = std::from_chars(value.data(), end, v);
  if (value.empty() || ec != std::errc() || ptr != end) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " '", value, "': expected a whole number"));
  }
  return v;
}

}  // namespace

bool ServerKvtierOptions::enabled() const {
  return !daemon.empty() || !dir.empty() || effective_host_mib() > 0;
}

int64_t ServerKvtierOptions::effective_host_mib() const {
  if (host_mib >= 0) return host_mib;
  return dir.empty() ? 0 : 1024;
}

absl::Status ServerKvtierOptions::Validate() const {
  if (!daemon.empty()) {
#ifdef KVT_SERVER_HAVE_REMOTE
    if (auto a = ParseDaemonAddress(daemon); !a.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--kvtier-daemon ", a.status().message()));
    }
#else
    return absl::InvalidArgumentError(
        "--kvtier-daemon: this build has no daemon support (KVT_BUILD_DAEMON=OFF)");
#endif
  }
  if (host_mib < -1 || host_mib > (int64_t{1} << 22)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kvtier-host-mib '", host_mib, "': expected 0..4194304 (MiB)"));
  }
  if (disk_mib < 1 || disk_mib > (int64_t{1} << 30)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kvtier-disk-mib '", disk_mib, "': expected 1..1073741824 (MiB)"));
  }
  if (chunk_tokens < 16 || chunk_tokens > 8192) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kvtier-chunk-tokens '", chunk_tokens, "': expected 16..8192"));
  }
  if (daemon_timeout_ms < 1 || daemon_timeout_ms > 600000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kvtier-timeout-ms '", daemon_timeout_ms, "': expected 1..600000"));
  }
  if (shm_slots < 0 || shm_slots > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kvtier-shm-slots '", shm_slots, "': expected 0..64"));
  }
  if (overlap_front_tokens < 0 || overlap_front_tokens % chunk_tokens != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kvtier-overlap-front '", overlap_front_tokens,
        "': expected a positive multiple of --kvtier-chunk-tokens (", chunk_tokens, ")"));
  }
  if (overlap_front_tokens > 0 && overlap != Overlap::kAlways) {
    return absl::InvalidArgumentError(absl::StrCat("--kvtier-overlap-front '", overlap_front_tokens,
                                                   "': needs --kvtier-overlap always"));
  }
  if (!(throttle_gbps >= 0 && throttle_gbps <= 1e4)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kvtier-throttle-gbps '", throttle_gbps, "': expected 0..10000 (GB/s)"));
  }
  if (throttle_gbps > 0 && (!dir.empty() || !daemon.empty() || effective_host_mib() == 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kvtier-throttle-gbps '", throttle_gbps,
        "': throttles the host tier, so it needs --kvtier-host-mib and no other tier"));
  }
  if (!token.empty() && daemon.empty()) {
    return absl::InvalidArgumentError(
        "--kvtier-token: needs --kvtier-daemon (the token is kvtierd's)");
  }
  if (!tenant.empty() && !enabled()) {
    return absl::InvalidArgumentError(
        "--kvtier-tenant: needs a tier (--kvtier-daemon, --kvtier-dir or --kvtier-host-mib)");
  }
  return absl::OkStatus();
}

absl::StatusOr<ServerKvtierOptions> ExtractKvtierFlags(std::vector<std::string>& args) {
  ServerKvtierOptions o;
  if (const char* env = std::getenv("LLAMA_ARG_SWA_FULL"); env != nullptr) {
    const std::string v = env;
    o.swa_full = v == "1" || v == "true" || v == "on" || v == "enabled";
  }
  // llama-server's context checkpoints off (N <= 0; a value it cannot parse it refuses).
  auto checkpoints_off = [](const std::string& v) {
    int n = 0;
    return absl::SimpleAtoi(v, &n) && n <= 0;
  };
  if (const char* env = std::getenv("LLAMA_ARG_CTX_CHECKPOINTS"); env != nullptr) {
    o.no_ctx_checkpoints = checkpoints_off(env);
  }
  std::vector<std::string> rest;
  if (!args.empty()) rest.push_back(args[0]);
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--kvtier-", 0) != 0) {
      if (a == "--swa-full") o.swa_full = true;  // llama-server's flag: kept for it
      if ((a == "-ctxcp" || a == "--ctx-checkpoints" || a == "--swa-checkpoints") &&
          i + 1 < args.size()) {
        o.no_ctx_checkpoints = checkpoints_off(args[i + 1]);  // kept for llama-server too
      }
      rest.push_back(a);
      continue;
    }
    std::string flag = a;
    std::string value;
    bool has_value = false;
    if (size_t eq = a.find('='); eq != std::string::npos) {
      flag = a.substr(0, eq);
      value = a.substr(eq + 1);
      has_value = true;
    }
    if (flag == "--kvtier-no-cost-model") {
      if (has_value) return absl::InvalidArgumentError("--kvtier-no-cost-model: takes no value");
      o.cost_model = false;
      continue;
    }
    if (flag == "--kvtier-no-tail") {
      if (has_value) return absl::InvalidArgumentError("--kvtier-no-tail: takes no value");
      o.tail = false;
      continue;
    }
    static const char* kValued[] = {
        "--kvtier-daemon",          "--kvtier-dir",           "--kvtier-host-mib",
        "--kvtier-disk-mib",        "--kvtier-token",         "--kvtier-tenant",
        "--kvtier-chunk-tokens",    "--kvtier-timeout-ms",    "--kvtier-overlap",
        "--kvtier-overlap-front",   "--kvtier-throttle-gbps", "--kvtier-shm-slots",
        "--kvtier-cost-probe-after"};
    bool known = false;
    for (const char* k : kValued) known = known || flag == k;
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": unknown kvtier flag (see --help for the --kvtier-* flags)"));
    }
    if (!has_value) {
      if (i + 1 >= args.size())
        return absl::InvalidArgumentError(absl::StrCat(flag, ": missing value"));
      value = args[++i];
    }
    if (flag == "--kvtier-daemon") {
      o.daemon = value;
    } else if (flag == "--kvtier-dir") {
      if (value.empty()) return absl::InvalidArgumentError("--kvtier-dir '': expected a directory");
      o.dir = value;
    } else if (flag == "--kvtier-token") {
      o.token = value;
    } else if (flag == "--kvtier-tenant") {
      o.tenant = value;
    } else if (flag == "--kvtier-overlap") {
      if (value == "off") {
        o.overlap = ServerKvtierOptions::Overlap::kOff;
      } else if (value == "auto") {
        o.overlap = ServerKvtierOptions::Overlap::kAuto;
      } else if (value == "always") {
        o.overlap = ServerKvtierOptions::Overlap::kAlways;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("--kvtier-overlap '", value, "': expected off, auto or always"));
      }
    } else if (flag == "--kvtier-throttle-gbps") {
      double v = 0;
      const char* end = value.data() + value.size();
      auto [ptr, ec] = std::from_chars(value.data(), end, v);
      if (value.empty() || ec != std::errc() || ptr != end) {
        return absl::InvalidArgumentError(
            absl::StrCat("--kvtier-throttle-gbps '", value, "': expected a number (GB/s)"));
      }
      o.throttle_gbps = v;
    } else {
      absl::StatusOr<int64_t> v = ParseInt(flag, value);
      if (!v.ok()) return v.status();
      if (flag == "--kvtier-host-mib") {
        if (*v < 0)
          return absl::InvalidArgumentError(
              absl::StrCat("--kvtier-host-mib '", value, "': expected >= 0"));
        o.host_mib = *v;
      } else if (flag == "--kvtier-disk-mib") {
        o.disk_mib = *v;
      } else if (flag == "--kvtier-chunk-tokens") {
        o.chunk_tokens = *v;
      } else if (flag == "--kvtier-overlap-front") {
        if (*v <= 0)
          return absl::InvalidArgumentError(
              absl::StrCat("--kvtier-overlap-front '", value, "': expected > 0"));
        o.overlap_front_tokens = *v;
      } else if (flag == "--kvtier-shm-slots") {
        o.shm_slots = *v;
      } else if (flag == "--kvtier-cost-probe-after") {
        if (*v < 0 || *v > 1000000)
          return absl::InvalidArgumentError(
              absl::StrCat("--kvtier-cost-probe-after '", value, "': expected 0..1000000"));
        o.cost_probe_after = *v;
      } else {
        o.daemon_timeout_ms = *v;
      }
    }
  }
  if (absl::Status s = o.Validate(); !s.ok()) return s;
  args = std::move(rest);
  return o;
}

std::string KvtierFlagsHelp() {
  return R"(----- kvtier (kvtier-llama-server; docs/llama-server.md) -----

--kvtier-daemon ADDR        share one cache through kvtierd: unix:///abs/path.sock or host:port
--kvtier-dir DIR            embedded disk tier in DIR (created if missing; survives restarts)
--kvtier-host-mib N         embedded host-memory tier, MiB (default 1024 with --kvtier-dir, else 0)
--kvtier-disk-mib N         disk tier capacity, MiB (default 8192)
--kvtier-token TOKEN        tenant token sent to kvtierd
--kvtier-tenant NAME        tenant name (part of the namespace)
--kvtier-chunk-tokens N     tokens per chunk (default 256; part of the namespace)
--kvtier-timeout-ms N       deadline of one kvtierd call (default 2000)
--kvtier-shm-slots N        unix-socket kvtierd: move chunks through N shared-memory slots
                            of 40 MiB (default 4; 0 = gRPC only)
--kvtier-no-cost-model      load every cached leading chunk, even when recomputing is faster
--kvtier-cost-probe-after N after N prompts in a row whose cached chunks the cost model chose
                            to recompute, load one chunk of the next to measure the tier again
                            (default 32; 0 = never)
--kvtier-no-tail            restore complete chunks only (no tail records): an answer through
                            kvtier is then bit for bit the cold answer, not a RAM-cache hit's
--kvtier-overlap MODE       load while computing: off, auto (default: when the cost model sees
                            the cached prefix load slower than it computes) or always
--kvtier-overlap-front N    with --kvtier-overlap always: compute exactly the first N tokens
                            while the cached chunks after them load (tests)
--kvtier-throttle-gbps X    benchmarks only: the host tier (alone) reads at most X GB/s
                            (0, the default: not throttled)
Without any of these flags the server behaves exactly like llama-server.
Bad kvtier values exit with code 2 naming the flag. A missing or dead kvtierd means misses
(cold prefill), never an error.

)";
}

}  // namespace kvt::llamacpp
