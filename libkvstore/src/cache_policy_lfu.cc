// In-cache LFU: the held key with the fewest uses since it was stored goes first, the
// least recently used of those first. Admits everything. O(log n) per call (an ordered
// set of (uses, last use, key)). Not thread-safe.
#include <set>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "cache_policy_impl.h"

namespace kvt::internal {
namespace {

class LfuPolicy final : public CachePolicy {
 public:
  std::string_view name() const override { return "lfu"; }

  void OnInsert(const CacheEntryInfo& entry) override {
    auto [it, inserted] = uses_.try_emplace(entry.key, Order{0, 0, entry.key});
    if (!inserted) order_.erase(it->second);
    it->second = Order{std::get<0>(it->second) + 1, ++clock_, entry.key};
    order_.insert(it->second);
  }
  void OnAccess(const ChunkKey& key) override {
    auto it = uses_.find(key);
    if (it == uses_.end()) return;
    order_.erase(it->second);
    it->second = Order{std::get<0>(it->second) + 1, ++clock_, key};
    order_.insert(it->second);
  }
  void OnRemove(const ChunkKey& key, RemoveReason) override {
    auto it = uses_.find(key);
    if (it == uses_.end()) return;
    order_.erase(it->second);
    uses_.erase(it);
  }
  void VisitVictims(const std::function<bool(const ChunkKey&)>& visit) const override {
    for (const Order& o : order_) {
      if (!visit(std::get<2>(o))) return;
    }
  }
  size_t size() const override { return uses_.size(); }

 private:
  using Order = std::tuple<uint64_t, uint64_t, ChunkKey>;  // uses, last use, key
  absl::flat_hash_map<ChunkKey, Order> uses_;
  std::set<Order> order_;
  uint64_t clock_ = 0;
};

}  // namespace

std::unique_ptr<CachePolicy> MakeLfuPolicy() { return std::make_unique<LfuPolicy>(); }

}  // namespace kvt::internal
