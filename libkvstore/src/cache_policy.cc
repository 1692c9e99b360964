// MakeCachePolicy and the recency-only policy ("lru"), the historical behaviour of every
// tier. The other policies live in their own files (cache_policy_<name>.cc).
#include "kvstore/cache_policy.h"

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cache_policy_impl.h"
#include "lru_list.h"

namespace kvt {
namespace {

// Recency only; admits everything. Not thread-safe (the tier's lock guards it).
class LruPolicy final : public CachePolicy {
 public:
  std::string_view name() const override { return "lru"; }
  void OnInsert(const CacheEntryInfo& entry) override {
    auto [it, inserted] = pos_.try_emplace(entry.key);
    if (!inserted) {
      lru_.Touch(it->second);
      return;
    }
    it->second = lru_.Insert(entry.key);
  }
  void OnAccess(const ChunkKey& key) override {
    if (auto it = pos_.find(key); it != pos_.end()) lru_.Touch(it->second);
  }
  void OnRemove(const ChunkKey& key, RemoveReason) override {
    if (auto it = pos_.find(key); it != pos_.end()) {
      lru_.Remove(it->second);
      pos_.erase(it);
    }
  }
  void VisitVictims(const std::function<bool(const ChunkKey&)>& visit) const override {
    for (auto it = lru_.rbegin(); it != lru_.rend(); ++it) {
      if (!visit(*it)) return;
    }
  }
  size_t size() const override { return pos_.size(); }

 private:
  internal::LruList<ChunkKey> lru_;
  absl::flat_hash_map<ChunkKey, internal::LruList<ChunkKey>::Handle> pos_;
};

}  // namespace

namespace internal {
std::unique_ptr<CachePolicy> MakeLruPolicy() { return std::make_unique<LruPolicy>(); }
}  // namespace internal

const std::vector<std::string>& CachePolicyNames() {
  static const std::vector<std::string> names = {"lru",    "lfu",      "arc",
                                                 "s3fifo", "adaptive", "default"};
  return names;
}

absl::Status CachePolicyOptions::Validate() const {
  const auto& names = CachePolicyNames();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache policy name '", name,
                     "' is not known (expected one of: ", absl::StrJoin(names, ", "), ")"));
  }
  if (ttl.count() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache policy ttl ", ttl.count(), " s is negative (0 = no TTL)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CachePolicy>> MakeCachePolicy(const CachePolicyOptions& options,
                                                             uint64_t capacity_bytes) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  const std::string_view name = options.name == "default" ? kDefaultCachePolicy : options.name;
  std::unique_ptr<CachePolicy> policy;
  if (name == "lru") {
    policy = internal::MakeLruPolicy();
  } else if (name == "lfu") {
    policy = internal::MakeLfuPolicy();
  } else if (name == "arc") {
    policy = internal::MakeArcPolicy(capacity_bytes);
  } else if (name == "s3fifo") {
    policy = internal::MakeS3FifoPolicy(capacity_bytes);
  } else {
    internal::AdaptiveParams params;
    params.decline_first_seen = options.adaptive_declines_first_seen;
    policy = internal::MakeAdaptivePolicy(capacity_bytes, params);
  }
  if (options.ttl.count() > 0) {
    policy = internal::MakeTtlPolicy(std::move(policy), options.ttl, options.clock);
  }
  return policy;
}

}  // namespace kvt
