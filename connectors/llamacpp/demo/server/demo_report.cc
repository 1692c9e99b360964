#include "demo_report.h"

#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace kvt::llamacpp::demo {
namespace {

constexpr Config kAll[] = {Config::kCold,    Config::kServerCache, Config::kHost,     Config::kDisk,
                           Config::kKvtierd, Config::kUpstream,    Config::kSlotCache};

template <typename T>
std::optional<T> Median(std::vector<T> v) {
  if (v.empty()) return std::nullopt;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : static_cast<T>((v[n / 2 - 1] + v[n / 2]) / 2);
}

std::string Ms(std::optional<double> v) { return v ? absl::StrFormat("%.1f", *v) : "not run"; }
// "-" for a configuration that does not apply to a row (no sample at all).
std::string Cell(const Row& r, Config c) {
  if (r.samples[static_cast<int>(c)].empty()) return "-";
  return Ms(r.MedianTtft(c));
}
std::string Ratio(std::optional<double> num, std::optional<double> den) {
  return num && den && *den > 0 ? absl::StrFormat("%.2fx", *num / *den) : "-";
}

bool IsKvtier(Config c) {
  return c == Config::kHost || c == Config::kDisk || c == Config::kKvtierd;
}

}  // namespace

const char* ConfigName(Config c) {
  switch (c) {
    case Config::kCold:
      return "cold";
    case Config::kServerCache:
      return "server-cache";
    case Config::kHost:
      return "host";
    case Config::kDisk:
      return "disk";
    case Config::kKvtierd:
      return "kvtierd";
    case Config::kUpstream:
      return "llama-server";
    case Config::kSlotCache:
      return "slot-cache";
  }
  return "?";
}

Config ExactReference(const std::string& memory) {
  return memory == "iswa" ? Config::kSlotCache : Config::kServerCache;
}

std::string ExactReferenceWhy(const std::string& memory) {
  if (ExactReference(memory) == Config::kSlotCache) {
    return "this model has sliding-window layers, and llama-server's RAM cache saves a slot "
           "keeping only the window's cells of those layers, so its hit restores another cache "
           "than the prefill left; its slot-cache hit reuses the cache the prefill left, which "
           "is what kvtier restores";
  }
  return "llama-server's RAM-cache hit restores the cache its prefill left, which is what "
         "kvtier restores";
}

std::optional<double> Row::MedianTtft(Config c) const {
  std::vector<double> v;
  for (const Sample& s : samples[static_cast<int>(c)]) {
    if (s.ok) v.push_back(s.ttft_ms);
  }
  return Median(v);
}

std::optional<int> Row::MedianCached(Config c) const {
  std::vector<int> v;
  for (const Sample& s : samples[static_cast<int>(c)]) {
    if (s.ok) v.push_back(s.cache_n);
  }
  return Median(v);
}

std::optional<int> Row::MedianKvtierLoaded(Config c) const {
  std::vector<int> v;
  for (const Sample& s : samples[static_cast<int>(c)]) {
    if (s.ok) v.push_back(s.kvtier_loaded);
  }
  return Median(v);
}

std::optional<bool> Row::Identical(Config reference) const {
  bool any = false;
  const int all_but_last = static_cast<int>(tokens.size()) - 1;
  for (Config c : kAll) {
    if (!IsKvtier(c)) continue;
    for (const Sample& s : samples[static_cast<int>(c)]) {
      if (!s.ok) continue;
      // Restored up to the last token: plain llama-server's own cache hits (`reference`)
      // on this prompt (any repeat: their last bits depend on where its cache placed the
      // cells, so they can differ between repeats) must include this answer. Else: the
      // cold answer of the same repeat.
      if (s.cache_n == all_but_last) {
        bool compared = false, match = false;
        for (const Sample& ref : samples[static_cast<int>(reference)]) {
          if (!ref.ok || ref.cache_n != all_but_last) continue;
          compared = true;
          match = match || (s.first_token == ref.first_token && s.first_probs == ref.first_probs);
        }
        any = any || compared;
        if (compared && !match) return false;
        continue;
      }
      for (const Sample& ref : samples[static_cast<int>(Config::kCold)]) {
        if (!ref.ok || ref.repeat != s.repeat) continue;
        any = true;
        if (s.first_token != ref.first_token || s.first_probs != ref.first_probs) return false;
      }
      // Recurrent and hybrid models: restored up to where llama-server's own hit restores
      // (all but the last 4 tokens, from its context checkpoint): that hit's answer too.
      if (s.cache_n <= 0 || s.cache_n != all_but_last - 3) continue;
      bool compared = false, match = false;
      for (const Sample& ref : samples[static_cast<int>(reference)]) {
        if (!ref.ok || ref.cache_n != s.cache_n) continue;
        compared = true;
        match = match || (s.first_token == ref.first_token && s.first_probs == ref.first_probs);
      }
      any = any || compared;
      if (compared && !match) return false;
    }
  }
  if (!any) return std::nullopt;
  return true;
}

std::optional<bool> Row::RamCacheEqualsSlotCache() const {
  const int all_but_last = static_cast<int>(tokens.size()) - 1;
  bool any = false;
  for (const Sample& ram : samples[static_cast<int>(Config::kServerCache)]) {
    if (!ram.ok || ram.cache_n != all_but_last) continue;
    bool match = false;
    for (const Sample& slot : samples[static_cast<int>(Config::kSlotCache)]) {
      if (!slot.ok || slot.cache_n != all_but_last) continue;
      any = true;
      match = match || (ram.first_token == slot.first_token && ram.first_probs == slot.first_probs);
    }
    if (any && !match) return false;
  }
  if (!any) return std::nullopt;
  return true;
}

std::optional<double> Row::MedianPairedRatio(Config a, Config b) const {
  std::vector<double> r;
  for (const Sample& x : samples[static_cast<int>(a)]) {
    for (const Sample& y : samples[static_cast<int>(b)]) {
      if (x.ok && y.ok && x.repeat == y.repeat && y.ttft_ms > 0) r.push_back(x.ttft_ms / y.ttft_ms);
    }
  }
  return Median(r);
}

std::string EvidenceLine(const Row& row, Config c, int repeat, const Sample& s) {
  nlohmann::json j = {{"workload", row.workload},
                      {"index", row.index},
                      {"config", ConfigName(c)},
                      {"repeat", repeat + 1},
                      {"prompt_tokens", row.tokens.size()},
                      {"ok", s.ok}};
  if (s.ok) {
    j["ttft_ms"] = s.ttft_ms;
    j["cached_tokens"] = s.cache_n;
    j["kvtier_loaded_tokens"] = s.kvtier_loaded;
    if (s.kvtier_path_ms >= 0) j["kvtier_path_ms"] = s.kvtier_path_ms;
    if (s.prompt_ms >= 0) j["server_prompt_ms"] = s.prompt_ms;
    if (s.server_run_ms >= 0) j["server_cpu_ms"] = s.server_run_ms;
    if (s.server_wait_ms >= 0) j["server_runqueue_wait_ms"] = s.server_wait_ms;
    if (!s.busiest_other.empty()) j["busiest_other_process"] = s.busiest_other;
    j["first_token"] = s.first_token;
    j["first_probs_xxh64"] =
        absl::StrFormat("%016x", XXH64(s.first_probs.data(), s.first_probs.size(), 0));
    j["first_probs"] =
        nlohmann::json::parse(s.first_probs.empty() ? "null" : s.first_probs, nullptr, false);
  } else {
    j["error"] = s.error;
  }
  return j.dump();
}

int Report::Print(const std::string& run_dir, bool json, bool check) const {
  FILE* out = json ? stderr : stdout;
  std::fprintf(out, "\n%-9s %2s %6s %6s %10s %10s %10s %10s %10s %10s %7s %7s %7s %8s %5s\n",
               "workload", "#", "prompt", "loaded", "cold ms", "llama-srv", "srv-cache", "host ms",
               "disk ms", "kvtierd ms", "x srv", "x host", "x disk", "x kvtierd", "same");
  bool any_different = false, noise = false, partial_miss = false;
  const Config reference = ExactReference(memory);
  for (const Row& r : rows) {
    const auto cold = r.MedianTtft(Config::kCold);
    const int loaded = r.MedianKvtierLoaded(Config::kHost).value_or(0);
    std::string cells[kNumConfigs];
    for (Config c : kAll) {
      cells[static_cast<int>(c)] = Cell(r, c);
      if (IsKvtier(c) && r.MedianKvtierLoaded(c) && *r.MedianKvtierLoaded(c) < loaded) {
        cells[static_cast<int>(c)] += "*";
        partial_miss = true;
      }
    }
    const auto same = r.Identical(reference);
    any_different = any_different || (same && !*same);
    std::string flag = same ? (*same ? "yes" : "NO") : "-";
    if (loaded == 0 && cold && r.MedianTtft(Config::kHost)) {
      const double x = *cold / *r.MedianTtft(Config::kHost);
      if (x < 0.9 || x > 1.1) {
        flag += " noise";
        noise = true;
      }
    }
    std::fprintf(out, "%-9s %2d %6zu %6d %10s %10s %10s %10s %10s %10s %7s %7s %7s %8s %5s\n",
                 r.workload.c_str(), r.index, r.tokens.size(), loaded, cells[0].c_str(),
                 cells[5].c_str(), cells[1].c_str(), cells[2].c_str(), cells[3].c_str(),
                 cells[4].c_str(), Ratio(cold, r.MedianTtft(Config::kServerCache)).c_str(),
                 Ratio(cold, r.MedianTtft(Config::kHost)).c_str(),
                 Ratio(cold, r.MedianTtft(Config::kDisk)).c_str(),
                 Ratio(cold, r.MedianTtft(Config::kKvtierd)).c_str(), flag.c_str());
  }
  std::fprintf(out,
               "TTFT = client-side time to the first streamed token, median of each row's repeats; "
               "x = cold / config; loaded = tokens kvtier restored (host). cold = "
               "kvtier-llama-server without kvtier flags, llama-srv = llama.cpp's own "
               "llama-server binary of the same build. no-reuse rows: cold = plain llama-server "
               "(computed from token 0), host = kvtier-llama-server (a miss).\n");
  if (partial_miss)
    std::fprintf(out,
                 "* this configuration loaded fewer tokens than the host tier (a miss; see "
                 "evidence.jsonl)\n");
  if (noise) {
    std::fprintf(out,
                 "noise: a row that loaded 0 tokens should be ~1.00x; it is not, so this machine's "
                 "timing noise "
                 "is larger than the differences in that row\n");
  }
  if (!kvtierd_note.empty())
    std::fprintf(out, "kvtierd column not run: %s\n", kvtierd_note.c_str());
  if (started_busy > 0)
    std::fprintf(out,
                 "busy machine: %d of %d measured requests started while another process was "
                 "using the CPU (waited 1 s for it); on 2 cores their TTFT includes its share\n",
                 started_busy, measured_requests);

  // Targets (issue 10), each from medians of this run.
  struct Target {
    std::string name;
    std::optional<double> value;
    double limit;
    bool at_most;
    bool in_workload = true;  // false: the workload has nothing it measures (SKIP)
  };
  std::vector<Target> targets;
  {
    double host = 0, srv = 0;
    std::vector<double> nr_ratios, nr_path;  // no-reuse: paired ratios; kvtier path / TTFT
    double cold_sum = 0, upstream_sum = 0;
    std::optional<double> fresh_disk, fresh_kvtierd;
    for (const Row& r : rows) {
      const int loaded = r.MedianKvtierLoaded(Config::kHost).value_or(0);
      if (r.MedianTtft(Config::kCold) && r.MedianTtft(Config::kUpstream)) {
        cold_sum += *r.MedianTtft(Config::kCold);
        upstream_sum += *r.MedianTtft(Config::kUpstream);
      }
      if (r.workload == "doc-qa" && r.MedianTtft(Config::kHost) &&
          r.MedianTtft(Config::kServerCache)) {
        host += *r.MedianTtft(Config::kHost);
        srv += *r.MedianTtft(Config::kServerCache);
      }
      if (r.workload == "no-reuse") {
        if (auto x = r.MedianPairedRatio(Config::kHost, Config::kCold)) nr_ratios.push_back(*x);
        for (const Sample& k : r.samples[static_cast<int>(Config::kHost)]) {
          if (k.ok && k.kvtier_path_ms >= 0 && k.ttft_ms > 0)
            nr_path.push_back(k.kvtier_path_ms / k.ttft_ms);
        }
      }
      const auto cold = r.MedianTtft(Config::kCold);
      if (loaded >= 4096 && cold) {
        if (auto d = r.MedianTtft(Config::kDisk))
          fresh_disk = std::min(fresh_disk.value_or(1e300), *cold / *d);
        if (auto k = r.MedianTtft(Config::kKvtierd)) {
          fresh_kvtierd = std::min(fresh_kvtierd.value_or(1e300), *cold / *k);
        }
      }
    }
    targets.push_back({"host-tier hit / llama-server RAM-cache hit (doc-qa)",
                       srv > 0 ? std::optional<double>(host / srv) : std::nullopt, 1.3, true});
    targets.push_back({"cold / fresh server on disk, cached >= 4k prefix", fresh_disk, 10.0, false,
                       long_prefix_in_workload});
    targets.push_back({"cold / fresh server on kvtierd, cached >= 4k prefix", fresh_kvtierd, 10.0,
                       false, long_prefix_in_workload && kvtierd_note.empty()});
    // Wall clock, paired per repeat (median over the rows of each row's median ratio) ...
    targets.push_back({"no-reuse: kvtier-llama-server / plain llama-server", Median(nr_ratios),
                       1.02, true, no_reuse_in_workload});
    // ... and what kvtier itself spent on those requests' paths (its lookup of a miss),
    // measured inside the server: the part of the difference that is kvtier's, free of
    // the machine's noise.
    targets.push_back({"no-reuse: kvtier's time on the request path / TTFT", Median(nr_path), 0.02,
                       true, no_reuse_in_workload});
    // Issue 14 item 0: the demo's cold prefill runs the engine at full speed.
    targets.push_back(
        {"cold prefill: demo's cold / llama.cpp's llama-server",
         upstream_sum > 0 ? std::optional<double>(cold_sum / upstream_sum) : std::nullopt, 1.10,
         true});
  }
  bool missed = false;
  for (const Target& t : targets) {
    const bool pass = t.value && (t.at_most ? *t.value <= t.limit : *t.value >= t.limit);
    const bool skip = !t.value && !t.in_workload;
    missed = missed || (!pass && !skip);
    std::fprintf(out, "target %-55s %s %.2f: %s -> %s\n", t.name.c_str(),
                 t.at_most ? "<=" : ">=", t.limit,
                 t.value ? absl::StrFormat("%.3f", *t.value).c_str()
                 : skip  ? "not in this run's workload"
                         : "not measured",
                 pass   ? "PASS"
                 : skip ? "SKIP"
                        : "FAIL");
  }
  // Where a host-tier hit's time goes: kvtier's part (lookup + restore, measured in the
  // server) against the whole client-side TTFT, per repeat.
  for (const Row& r : rows) {
    if (r.workload != "doc-qa") continue;
    std::string per;
    for (const Sample& k : r.samples[static_cast<int>(Config::kHost)]) {
      if (k.ok && k.kvtier_path_ms >= 0)
        absl::StrAppend(&per, per.empty() ? "" : ", ",
                        absl::StrFormat("%.1f of %.1f", k.kvtier_path_ms, k.ttft_ms));
    }
    if (!per.empty())
      std::fprintf(out, "host-tier hit %s #%d: kvtier's lookup + restore ms of the TTFT ms: %s\n",
                   r.workload.c_str(), r.index, per.c_str());
  }
  // The exact-reuse reference, and whether llama-server's two cache hits agreed.
  std::string agree;
  for (const Row& r : rows) {
    if (auto eq = r.RamCacheEqualsSlotCache())
      absl::StrAppend(&agree, agree.empty() ? "" : ", ",
                      absl::StrFormat("%s #%d %s", r.workload, r.index, *eq ? "yes" : "NO"));
  }
  std::fprintf(out,
               "exact-reuse reference (model memory: %s): llama-server's %s hit of the same "
               "tokens when kvtier restored all but the last token, because %s; else its cold "
               "answer of the same repeat, and also that hit's where it restored as many tokens "
               "(recurrent and hybrid models: all but the last 4). RAM-cache hit = slot-cache "
               "hit: %s\n",
               memory.empty() ? "unknown" : memory.c_str(),
               reference == Config::kSlotCache ? "slot-cache" : "RAM-cache",
               ExactReferenceWhy(memory).c_str(), agree.empty() ? "not compared" : agree.c_str());
  std::fprintf(out,
               "identical first-token probabilities through kvtier (every repeat, vs that "
               "reference): %s\n",
               any_different ? "NO (see evidence.jsonl)" : "yes");
  std::fprintf(out, "run took %.0f s; evidence: %s/evidence.jsonl\n", seconds, run_dir.c_str());

  // CSV and plot.
  const std::string csv = run_dir + "/ttft.csv";
  {
    std::ofstream f(csv, std::ios::trunc);
    f << "workload,index,prompt_tokens,config,loaded_tokens,ttft_ms_median,runs\n";
    for (const Row& r : rows) {
      for (Config c : kAll) {
        const auto m = r.MedianTtft(c);
        if (!m) continue;
        size_t n = 0;
        for (const Sample& s : r.samples[static_cast<int>(c)]) n += s.ok;
        f << r.workload << "," << r.index << "," << r.tokens.size() << "," << ConfigName(c) << ","
          << r.MedianKvtierLoaded(c).value_or(0) << "," << absl::StrFormat("%.3f", *m) << "," << n
          << "\n";
      }
    }
  }
#ifdef KVT_SERVER_DEMO_PLOT
  // The first python3 on PATH that has matplotlib (Debian's python3-matplotlib is in
  // /usr/bin/python3 even when another python3 comes first on PATH).
  const std::string cmd = absl::StrFormat(
      "for py in python3 /usr/bin/python3; do if $py -c 'import matplotlib' 2>/dev/null; then "
      "exec $py '%s' '%s' '%s/ttft.png'; fi; done; exit 1",
      KVT_SERVER_DEMO_PLOT, csv, run_dir);
  const int rc = std::system(cmd.c_str());
  std::fprintf(out, "%s: %s\n", rc == 0 ? "plot" : "plot skipped (python3 with matplotlib needed)",
               rc == 0 ? (run_dir + "/ttft.png").c_str() : cmd.c_str());
#endif
  std::fprintf(out, "csv: %s\n", csv.c_str());

  if (json) {
    for (const Row& r : rows) {
      auto ms = [&](Config c) -> nlohmann::json {
        auto m = r.MedianTtft(c);
        return m ? nlohmann::json(*m) : nlohmann::json(nullptr);
      };
      const auto same = r.Identical(reference);
      nlohmann::json j = {{"workload", r.workload},
                          {"prompt_tokens", r.tokens.size()},
                          {"loaded_tokens", r.MedianKvtierLoaded(Config::kHost).value_or(0)},
                          {"ttft_cold_ms", ms(Config::kCold)},
                          {"ttft_server_cache_ms", ms(Config::kServerCache)},
                          {"ttft_host_ms", ms(Config::kHost)},
                          {"ttft_disk_ms", ms(Config::kDisk)},
                          {"ttft_kvtierd_ms", ms(Config::kKvtierd)},
                          {"ttft_llama_server_ms", ms(Config::kUpstream)},
                          {"ttft_slot_cache_ms", ms(Config::kSlotCache)},
                          {"identical", same ? nlohmann::json(*same) : nlohmann::json(nullptr)},
                          {"reference", ConfigName(reference)},
                          {"chunk_tokens", chunk_tokens},
                          {"kvtier_state", kvtier_state},
                          {"kvtier_memory", memory},
                          {"kvtier_bytes_per_token", bytes_per_token},
                          {"kvtier_snapshot_bytes", snapshot_bytes}};
      if (!kvtier_refused.empty()) j["kvtier_refused"] = kvtier_refused;
      std::printf("%s\n", j.dump().c_str());
    }
  }
  if (any_different) return 3;
  if (check && missed) return 1;
  return 0;
}

}  // namespace kvt::llamacpp::demo
