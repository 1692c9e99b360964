// kvtier stats and kvtier watch: per-tier capacity, use, hit rates, integrity errors.
#include <unistd.h>

#include <chrono>
#include <ostream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "commands.h"
#include "nlohmann/json.hpp"

namespace kvt::cli {

namespace {

std::string Rate(uint64_t hits, uint64_t misses) {
  const uint64_t n = hits + misses;
  if (n == 0) return "-";
  return absl::StrFormat("%.1f%%", 100.0 * static_cast<double>(hits) / static_cast<double>(n));
}

// The remote tier (kvtierd's Redis Cluster tier) does not count its chunks: a count would
// be a scan of the whole cluster, which other kvtierds fill too. Its 0 means "unknown".
bool ChunksKnown(const TierSummary& t) { return t.kind != TierKind::kRemote; }

nlohmann::json StatsJson(const StatsSnapshot& s) {
  nlohmann::json j;
  j["source"] = s.source;
  j["tiers"] = nlohmann::json::array();
  for (const auto& t : s.tiers) {
    const auto& x = t.stats;
    j["tiers"].push_back({{"name", t.name},
                          {"kind", std::string(TierName(t.kind))},
                          {"capacity_bytes", x.capacity_bytes},
                          {"used_bytes", x.used_bytes},
                          {"chunks", ChunksKnown(t) ? nlohmann::json(x.chunks) : nlohmann::json()},
                          {"pinned_bytes", x.pinned_bytes},
                          {"hits", x.hits},
                          {"misses", x.misses},
                          {"puts", x.puts},
                          {"admitted", x.puts},
                          {"admission_rejects", x.admission_rejects},
                          {"ttl_expired", x.ttl_expired},
                          {"bytes_in", x.bytes_in},
                          {"bytes_out", x.bytes_out},
                          {"evictions", x.evictions},
                          {"integrity_errors", x.integrity_errors},
                          {"io_errors", x.io_errors}});
  }
  j["hits"] = s.store_hits ? nlohmann::json(*s.store_hits) : nlohmann::json(nullptr);
  j["misses"] = s.store_misses ? nlohmann::json(*s.store_misses) : nlohmann::json(nullptr);
  j["integrity_errors"] = s.integrity_errors;
  j["explicit_evictions"] = s.explicit_evictions;
  j["pinned_bytes"] = s.pinned_bytes;
  j["leases"] = s.leases ? nlohmann::json{{"granted", s.leases->granted},
                                          {"released", s.leases->released},
                                          {"expired", s.leases->expired},
                                          {"active", s.leases->active}}
                         : nlohmann::json(nullptr);
  return j;
}

void PrintStats(const StatsSnapshot& s, const StatsSnapshot* prev, double dt_s, std::ostream& out) {
  out << "source            " << s.source << "\n";
  if (s.store_hits && s.store_misses) {
    out << absl::StrFormat("reads (Get)       %s hits, %s misses (hit rate %s)\n",
                           WithCommas(*s.store_hits), WithCommas(*s.store_misses),
                           Rate(*s.store_hits, *s.store_misses));
  }
  out << absl::StrFormat("integrity errors  %s\n", WithCommas(s.integrity_errors));
  out << absl::StrFormat("evicted (kvtier)  %s chunks\n", WithCommas(s.explicit_evictions));
  out << absl::StrFormat("pinned            %s B (%s)\n", WithCommas(s.pinned_bytes),
                         HumanBytes(s.pinned_bytes));
  if (s.leases) {
    out << absl::StrFormat("leases            %s active; %s granted, %s released, %s expired\n",
                           WithCommas(s.leases->active), WithCommas(s.leases->granted),
                           WithCommas(s.leases->released), WithCommas(s.leases->expired));
  }
  out << "\n";
  // PUTS = records the tier's cache policy admitted and the tier stored; REJECTED = offered
  // and declined by the policy; EXPIRED = dropped by its TTL (docs/cache-policy.md).
  std::vector<std::string> h = {"TIER",     "CAPACITY",  "USED",    "USE%",         "CHUNKS",
                                "PINNED",   "HITS",      "MISSES",  "HIT RATE",     "PUTS",
                                "REJECTED", "EVICTIONS", "EXPIRED", "INTEGRITY ERR"};
  std::vector<bool> r(h.size(), true);
  r[0] = false;
  if (prev) {
    h.insert(h.end(), {"HITS/S", "PUTS/S"});
    r.insert(r.end(), {true, true});
  }
  Table t(h, r);
  for (size_t i = 0; i < s.tiers.size(); ++i) {
    const auto& x = s.tiers[i].stats;
    std::vector<std::string> row = {
        std::string(TierName(s.tiers[i].kind)),
        HumanBytes(x.capacity_bytes),
        HumanBytes(x.used_bytes),
        x.capacity_bytes ? absl::StrFormat("%.1f%%", 100.0 * x.used_bytes / x.capacity_bytes) : "-",
        ChunksKnown(s.tiers[i]) ? WithCommas(x.chunks) : "?",
        HumanBytes(x.pinned_bytes),
        WithCommas(x.hits),
        WithCommas(x.misses),
        Rate(x.hits, x.misses),
        WithCommas(x.puts),
        WithCommas(x.admission_rejects),
        WithCommas(x.evictions),
        WithCommas(x.ttl_expired),
        WithCommas(x.integrity_errors)};
    if (prev) {
      const TierStats* p = i < prev->tiers.size() ? &prev->tiers[i].stats : nullptr;
      auto per_s = [&](uint64_t now, uint64_t before) {
        return dt_s > 0 && now >= before ? absl::StrFormat("%.1f", (now - before) / dt_s)
                                         : std::string("-");
      };
      row.push_back(p ? per_s(x.hits, p->hits) : "-");
      row.push_back(p ? per_s(x.puts, p->puts) : "-");
    }
    t.AddRow(std::move(row));
  }
  t.Print(out);
}

}  // namespace

int RunStats(const GlobalFlags& global, std::ostream& out, std::ostream& err) {
  auto backend = OpenBackend(global);
  if (!backend.ok()) return Fail(err, "stats", backend.status());
  auto s = (*backend)->Stats();
  if (!s.ok()) return Fail(err, "stats", s.status());
  if (global.json) {
    out << StatsJson(*s).dump(2) << "\n";
  } else {
    PrintStats(*s, nullptr, 0, out);
  }
  return kExitOk;
}

int RunWatch(const WatchFlags& flags, const GlobalFlags& global, std::ostream& out,
             std::ostream& err) {
  constexpr std::string_view kCmd = "watch";
  if (!(flags.interval_s > 0)) {
    return Fail(err, kCmd,
                absl::InvalidArgumentError(
                    absl::StrCat("--interval ", flags.interval_s, ": expected > 0 seconds")));
  }
  auto backend = OpenBackend(global);
  if (!backend.ok()) return Fail(err, kCmd, backend.status());
  // Refresh in place only on a terminal; a pipe or file gets one block per sample.
  const bool clear = !global.json && !flags.no_clear && ::isatty(STDOUT_FILENO);
  std::optional<StatsSnapshot> prev;
  auto prev_t = std::chrono::steady_clock::now();
  for (uint64_t i = 0; flags.count == 0 || i < flags.count; ++i) {
    if (i > 0) {
      std::this_thread::sleep_for(std::chrono::duration<double>(flags.interval_s));
    }
    auto s = (*backend)->Stats();
    if (!s.ok()) return Fail(err, kCmd, s.status());
    const auto now = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(now - prev_t).count();
    if (global.json) {
      nlohmann::json j = StatsJson(*s);
      j["sample"] = i;
      j["unix_ms"] = NowUnixMs();
      out << j.dump() << "\n";  // one JSON object per line
    } else {
      if (clear)
        out << "\x1b[H\x1b[2J";
      else if (i > 0)
        out << "\n";
      out << absl::StrFormat("kvtier watch: sample %d, every %.1fs (Ctrl-C to stop)\n", i + 1,
                             flags.interval_s);
      PrintStats(*s, prev ? &*prev : nullptr, dt, out);
    }
    out.flush();
    prev = std::move(*s);
    prev_t = now;
  }
  return kExitOk;
}

}  // namespace kvt::cli
