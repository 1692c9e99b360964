// ARC (Megiddo & Modha, "ARC: A Self-Tuning, Low Overhead Replacement Cache", FAST'03):
// T1 holds keys used once since they were stored, T2 keys used again; B1 and B2 remember
// the keys evicted from each. A miss on a B1 key grows T1's target share p, a miss on a
// B2 key shrinks it; the victim comes from T1 while T1 is over p, else from T2. Admits
// everything. Sizes in bytes (p, T1, T2); the ghost lists hold as many keys as the tier
// holds records. Not thread-safe.
#include <algorithm>

#include "cache_policy_impl.h"

namespace kvt::internal {
namespace {

constexpr uint8_t kT1 = 1, kT2 = 2;

class ArcPolicy final : public StagedPolicy {
 public:
  explicit ArcPolicy(uint64_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

  std::string_view name() const override { return "arc"; }

  bool Admit(const CacheEntryInfo& entry, AdmitReason) override {
    if (avg_bytes_ == 0) avg_bytes_ = std::max<uint64_t>(entry.record_bytes, 1);
    if (!(entry.key == last_missed_)) Adapt(entry.key, entry.record_bytes);
    last_missed_ = ChunkKey{};
    return true;
  }

  void OnInsert(const CacheEntryInfo& entry) override {
    if (avg_bytes_ == 0) avg_bytes_ = std::max<uint64_t>(entry.record_bytes, 1);
    auto [it, inserted] = nodes_.try_emplace(entry.key);
    PolicyNode* n = &it->second;
    if (!inserted) {
      Unlink(n);
      n->queue = kT2;
      t2_.PushFront(n);
      return;
    }
    n->key = entry.key;
    n->parent = entry.parent;
    n->bytes = entry.record_bytes;
    // A key remembered by a ghost list was used before: it goes to T2.
    const bool ghost = entry.key == ghost_hit_;
    ghost_hit_ = ChunkKey{};
    n->queue = ghost ? kT2 : kT1;
    (ghost ? t2_ : t1_).PushFront(n);
  }

  void OnAccess(const ChunkKey& key) override {
    auto it = nodes_.find(key);
    if (it == nodes_.end()) return;
    PolicyNode* n = &it->second;
    Unlink(n);
    n->queue = kT2;
    t2_.PushFront(n);
  }

  void OnMiss(const ChunkKey& key) override {
    Adapt(key, avg_bytes_);
    last_missed_ = key;
  }

  void OnRemove(const ChunkKey& key, RemoveReason reason) override {
    auto it = nodes_.find(key);
    if (it == nodes_.end()) return;
    PolicyNode* n = &it->second;
    const uint8_t from = n->queue == kVictimQueue ? n->origin : n->queue;
    Unlink(n);
    nodes_.erase(it);
    if (reason == RemoveReason::kEvicted && avg_bytes_ > 0) {
      (from == kT1 ? b1_ : b2_).Add(key, GhostLimit());
    }
  }

 protected:
  PolicyNode* DesignateNext() override {
    NodeList* from = nullptr;
    if (!t1_.empty() && (static_cast<double>(t1_.bytes()) > p_ || t2_.empty())) {
      from = &t1_;
    } else if (!t2_.empty()) {
      from = &t2_;
    } else {
      return nullptr;
    }
    PolicyNode* n = from->back();
    from->Remove(n);
    return n;
  }

  void Revive(PolicyNode* n) override {
    n->queue = kT2;
    t2_.PushFront(n);
  }

  void Unlink(PolicyNode* n) override {
    switch (n->queue) {
      case kT1:
        t1_.Remove(n);
        break;
      case kT2:
        t2_.Remove(n);
        break;
      default:
        victims_.Remove(n);
    }
  }

 private:
  size_t GhostLimit() const { return capacity_bytes_ / std::max<uint64_t>(avg_bytes_, 1) + 1; }

  // ARC's adaptation on a miss on `key`.
  void Adapt(const ChunkKey& key, uint64_t bytes) {
    const double b = static_cast<double>(bytes);
    if (b1_.Take(key)) {
      const double d = std::max(1.0, static_cast<double>(b2_.size()) /
                                         std::max<double>(1.0, static_cast<double>(b1_.size())));
      p_ = std::min(p_ + d * b, static_cast<double>(capacity_bytes_));
      ghost_hit_ = key;
    } else if (b2_.Take(key)) {
      const double d = std::max(1.0, static_cast<double>(b1_.size()) /
                                         std::max<double>(1.0, static_cast<double>(b2_.size())));
      p_ = std::max(p_ - d * b, 0.0);
      ghost_hit_ = key;
    }
  }

  uint64_t capacity_bytes_;
  uint64_t avg_bytes_ = 0;  // the first record's size (a tier's records are alike)
  double p_ = 0;            // T1's target bytes
  NodeList t1_, t2_;
  GhostList b1_, b2_;
  ChunkKey last_missed_;  // a miss then the Admit of its store are one reference
  ChunkKey ghost_hit_;    // the key whose miss hit a ghost list: it is stored into T2
};

}  // namespace

std::unique_ptr<CachePolicy> MakeArcPolicy(uint64_t capacity_bytes) {
  return std::make_unique<ArcPolicy>(capacity_bytes);
}

}  // namespace kvt::internal
