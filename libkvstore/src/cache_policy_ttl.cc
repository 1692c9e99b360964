// The TTL decorator: any policy, plus "a record unused for `ttl` is dropped". It keeps
// its own recency list of (key, last use); VisitExpired walks it from the least recently
// used end. Uses come from the tier's calls (OnInsert, OnAccess), timed by the clock
// given (kvstore/clock.h: the tier's, or a test's ManualClock). Not thread-safe.
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "cache_policy_impl.h"
#include "lru_list.h"

namespace kvt::internal {
namespace {

using TimePoint = std::chrono::steady_clock::time_point;

class TtlPolicy final : public CachePolicy {
 public:
  TtlPolicy(std::unique_ptr<CachePolicy> inner, std::chrono::steady_clock::duration ttl,
            std::shared_ptr<Clock> clock)
      : inner_(std::move(inner)),
        ttl_(ttl),
        clock_(clock != nullptr ? std::move(clock) : SystemClock()) {}

  std::string_view name() const override { return inner_->name(); }
  bool Admit(const CacheEntryInfo& entry, AdmitReason reason) override {
    return inner_->Admit(entry, reason);
  }
  void OnInsert(const CacheEntryInfo& entry) override {
    inner_->OnInsert(entry);
    Used(entry.key);
  }
  void OnAccess(const ChunkKey& key) override {
    inner_->OnAccess(key);
    if (pos_.contains(key)) Used(key);
  }
  void OnMiss(const ChunkKey& key) override { inner_->OnMiss(key); }
  void OnRemove(const ChunkKey& key, RemoveReason reason) override {
    inner_->OnRemove(key, reason);
    if (auto it = pos_.find(key); it != pos_.end()) {
      lru_.Remove(it->second);
      pos_.erase(it);
    }
  }
  void VisitVictims(const std::function<bool(const ChunkKey&)>& visit) const override {
    inner_->VisitVictims(visit);
  }
  void VisitExpired(TimePoint now, const std::function<void(const ChunkKey&)>& visit) override {
    // Collected first: the tier may remove what it is shown before the visit ends.
    std::vector<ChunkKey> expired;
    for (auto it = lru_.rbegin(); it != lru_.rend() && it->second + ttl_ <= now; ++it) {
      expired.push_back(it->first);
    }
    for (const ChunkKey& k : expired) visit(k);
  }
  size_t size() const override { return inner_->size(); }

 private:
  void Used(const ChunkKey& key) {
    const TimePoint now = clock_->Now();
    auto [it, inserted] = pos_.try_emplace(key);
    if (inserted) {
      it->second = lru_.Insert({key, now});
    } else {
      it->second->second = now;
      lru_.Touch(it->second);
    }
  }

  std::unique_ptr<CachePolicy> inner_;
  std::chrono::steady_clock::duration ttl_;
  const std::shared_ptr<Clock> clock_;
  LruList<std::pair<ChunkKey, TimePoint>> lru_;
  absl::flat_hash_map<ChunkKey, LruList<std::pair<ChunkKey, TimePoint>>::Handle> pos_;
};

}  // namespace

std::unique_ptr<CachePolicy> MakeTtlPolicy(std::unique_ptr<CachePolicy> inner,
                                           std::chrono::steady_clock::duration ttl,
                                           std::shared_ptr<Clock> clock) {
  return std::make_unique<TtlPolicy>(std::move(inner), ttl, std::move(clock));
}

}  // namespace kvt::internal
