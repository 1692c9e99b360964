#include "trace_sim.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace kvt::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Seconds an empty timed region costs (two clock reads), the median of a few tries.
double TimerCost() {
  static const double cost = [] {
    std::vector<double> t;
    for (int round = 0; round < 5; ++round) {
      constexpr int kN = 20000;
      Clock::duration sum{};
      for (int i = 0; i < kN; ++i) {
        const auto a = Clock::now();
        sum += Clock::now() - a;
      }
      t.push_back(std::chrono::duration<double>(sum).count() / kN);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  }();
  return cost;
}

// The calling thread's CPU time (user + system) in seconds.
double ThreadCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

// Times the calls made through it.
class CallTimer {
 public:
  template <typename Fn>
  auto operator()(Fn&& fn) {
    const auto a = Clock::now();
    struct Done {
      CallTimer* self;
      Clock::time_point a;
      ~Done() {
        self->sum_ += Clock::now() - a;
        ++self->calls_;
      }
    } done{this, a};
    return fn();
  }
  double seconds() const {
    return std::max(0.0, std::chrono::duration<double>(sum_).count() -
                             TimerCost() * static_cast<double>(calls_));
  }
  uint64_t calls() const { return calls_; }

 private:
  Clock::duration sum_{};
  uint64_t calls_ = 0;
};

}  // namespace

SimResult SimulatePolicy(const Trace& trace, CachePolicy& policy, uint64_t capacity_records,
                         uint64_t record_bytes) {
  std::vector<ChunkKey> keys(trace.distinct_blocks);
  absl::flat_hash_map<ChunkKey, uint32_t> ids;
  ids.reserve(trace.distinct_blocks);
  for (uint32_t id = 0; id < trace.distinct_blocks; ++id) {
    keys[id] = TraceBlockKey(id);
    ids[keys[id]] = id;
  }
  SimResult res;
  std::vector<uint8_t> held(trace.distinct_blocks, 0);
  uint64_t used = 0;
  CallTimer timed;
  TimerCost();
  const double cpu_start = ThreadCpuSeconds();
  const auto start = std::chrono::steady_clock::now();
  for (const TraceRequest& r : trace.requests) {
    const size_t n = r.blocks.size();
    size_t hits = 0;
    while (hits < n && held[r.blocks[hits]]) ++hits;
    res.hit_tokens += HitTokens(trace, r, hits);
    res.total_tokens += r.input_tokens;
    res.chunks += n;
    for (size_t i = 0; i < hits; ++i) timed([&] { policy.OnAccess(keys[r.blocks[i]]); });
    if (hits < n) timed([&] { policy.OnMiss(keys[r.blocks[hits]]); });
    for (size_t i = hits; i < n; ++i) {
      CacheEntryInfo info;
      info.key = keys[r.blocks[i]];
      info.parent = i > 0 ? keys[r.blocks[i - 1]] : ChunkKey{};
      info.record_bytes = record_bytes;
      if (held[r.blocks[i]]) {  // held, but behind a block that is not: stored again
        timed([&] { policy.OnInsert(info); });
        continue;
      }
      if (capacity_records == 0 || !timed([&] { return policy.Admit(info, AdmitReason::kPut); })) {
        ++res.admission_rejects;
        continue;
      }
      while (used + 1 > capacity_records) {
        ChunkKey victim;
        bool found = false;
        timed([&] {
          policy.VisitVictims([&](const ChunkKey& k) {
            victim = k;
            found = true;
            return false;
          });
        });
        if (!found) break;
        timed([&] { policy.OnRemove(victim, RemoveReason::kEvicted); });
        held[ids.at(victim)] = 0;
        --used;
      }
      held[r.blocks[i]] = 1;
      ++used;
      ++res.records_written;
      timed([&] { policy.OnInsert(info); });
    }
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  res.policy_seconds = timed.seconds();
  res.policy_calls = timed.calls();
  res.cpu_seconds = std::max(
      0.0, ThreadCpuSeconds() - cpu_start - TimerCost() * static_cast<double>(timed.calls()));
  return res;
}

namespace {

// One tier of SimulateTwoTier: its policy, what it holds and its room.
struct SimTier {
  CachePolicy* policy;
  uint64_t capacity;
  std::vector<uint8_t> held;
  uint64_t used = 0;
  uint64_t written = 0;
};

}  // namespace

TwoTierResult SimulateTwoTier(const Trace& trace, CachePolicy& host_policy, uint64_t host_records,
                              CachePolicy& disk_policy, uint64_t disk_records,
                              uint64_t record_bytes) {
  std::vector<ChunkKey> keys(trace.distinct_blocks);
  std::vector<ChunkKey> parents(trace.distinct_blocks);
  absl::flat_hash_map<ChunkKey, uint32_t> ids;
  ids.reserve(trace.distinct_blocks);
  for (uint32_t id = 0; id < trace.distinct_blocks; ++id) {
    keys[id] = TraceBlockKey(id);
    ids[keys[id]] = id;
  }
  for (const TraceRequest& r : trace.requests) {  // an id is one prefix path: one parent
    for (size_t i = 1; i < r.blocks.size(); ++i) parents[r.blocks[i]] = keys[r.blocks[i - 1]];
  }
  SimTier host{&host_policy, host_records, std::vector<uint8_t>(trace.distinct_blocks, 0)};
  SimTier disk{&disk_policy, disk_records, std::vector<uint8_t>(trace.distinct_blocks, 0)};
  CallTimer timed;
  TimerCost();
  const double cpu_start = ThreadCpuSeconds();
  TwoTierResult res;
  auto info = [&](uint32_t id) {
    CacheEntryInfo e;
    e.key = keys[id];
    e.parent = parents[id];
    e.record_bytes = record_bytes;
    return e;
  };
  // Offers block `id` to `t`; `on_evict` receives what it evicts to make room.
  std::function<void(SimTier&, uint32_t, AdmitReason)> offer;
  offer = [&](SimTier& t, uint32_t id, AdmitReason reason) {
    if (t.held[id]) {
      timed([&] { t.policy->OnInsert(info(id)); });
      return;
    }
    if (t.capacity == 0 || !timed([&] { return t.policy->Admit(info(id), reason); })) return;
    while (t.used + 1 > t.capacity) {
      ChunkKey victim;
      bool found = false;
      timed([&] {
        t.policy->VisitVictims([&](const ChunkKey& k) {
          victim = k;
          found = true;
          return false;
        });
      });
      if (!found) return;
      timed([&] { t.policy->OnRemove(victim, RemoveReason::kEvicted); });
      const uint32_t v = ids.at(victim);
      t.held[v] = 0;
      --t.used;
      if (&t == &host && !disk.held[v]) offer(disk, v, AdmitReason::kDemotion);
    }
    t.held[id] = 1;
    ++t.used;
    ++t.written;
    timed([&] { t.policy->OnInsert(info(id)); });
  };
  for (const TraceRequest& r : trace.requests) {
    const size_t n = r.blocks.size();
    size_t hits = 0;
    while (hits < n && (host.held[r.blocks[hits]] || disk.held[r.blocks[hits]])) ++hits;
    res.total_tokens += r.input_tokens;
    res.chunks += n;
    for (size_t i = 0; i < hits; ++i) {
      const uint32_t id = r.blocks[i];
      const uint64_t tokens = HitTokens(trace, r, i + 1) - HitTokens(trace, r, i);
      if (host.held[id]) {
        res.host_hit_tokens += tokens;
        timed([&] { host_policy.OnAccess(keys[id]); });
      } else {
        res.disk_hit_tokens += tokens;
        timed([&] { disk_policy.OnAccess(keys[id]); });
        timed([&] { host_policy.OnMiss(keys[id]); });
        offer(host, id, AdmitReason::kPromotion);
      }
    }
    if (hits < n) {
      timed([&] { host_policy.OnMiss(keys[r.blocks[hits]]); });
      timed([&] { disk_policy.OnMiss(keys[r.blocks[hits]]); });
    }
    for (size_t i = hits; i < n; ++i) {
      offer(host, r.blocks[i], AdmitReason::kPut);
      // The write-through: TieredStore writes every store down, the ones host memory
      // declined too (their bytes go with the write-through), so the disk's own policy
      // decides; what host memory evicts meanwhile is demoted.
      offer(disk, r.blocks[i], AdmitReason::kPut);
    }
  }
  res.host_records_written = host.written;
  res.disk_records_written = disk.written;
  res.policy_seconds = timed.seconds();
  res.cpu_seconds = std::max(
      0.0, ThreadCpuSeconds() - cpu_start - TimerCost() * static_cast<double>(timed.calls()));
  return res;
}

SimResult SimulateOptimum(const Trace& trace, uint64_t capacity_records) {
  constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
  // next[t] = the position of the next reference to the block referenced at t.
  std::vector<uint64_t> next(trace.total_blocks, kNever);
  {
    std::vector<uint64_t> last(trace.distinct_blocks, kNever);
    uint64_t t = trace.total_blocks;
    for (auto r = trace.requests.rbegin(); r != trace.requests.rend(); ++r) {
      for (auto b = r->blocks.rbegin(); b != r->blocks.rend(); ++b) {
        --t;
        next[t] = last[*b];
        last[*b] = t;
      }
    }
  }
  SimResult res;
  std::vector<uint64_t> held_next(trace.distinct_blocks, 0);  // 0 = not held
  std::set<std::pair<uint64_t, uint32_t>> by_next;            // (next use, block)
  const auto start = std::chrono::steady_clock::now();
  uint64_t t = 0;
  for (const TraceRequest& r : trace.requests) {
    const size_t n = r.blocks.size();
    size_t hits = 0;
    while (hits < n && held_next[r.blocks[hits]] != 0) ++hits;
    res.hit_tokens += HitTokens(trace, r, hits);
    res.total_tokens += r.input_tokens;
    res.chunks += n;
    for (uint32_t b : r.blocks) {
      const uint64_t nu = next[t++];
      if (held_next[b] != 0) {
        by_next.erase({held_next[b], b});
        if (nu == kNever) {
          held_next[b] = 0;
        } else {
          held_next[b] = nu;
          by_next.insert({nu, b});
        }
        continue;
      }
      if (nu == kNever || capacity_records == 0) continue;
      if (by_next.size() >= capacity_records) {
        auto far = std::prev(by_next.end());
        if (far->first <= nu) continue;  // everything held is used sooner: bypass
        held_next[far->second] = 0;
        by_next.erase(far);
      }
      held_next[b] = nu;
      by_next.insert({nu, b});
      ++res.records_written;
    }
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return res;
}

}  // namespace kvt::bench
