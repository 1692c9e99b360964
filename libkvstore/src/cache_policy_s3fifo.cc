// S3-FIFO (Yang et al., "FIFO queues are all you need for cache eviction", SOSP'23):
// a small FIFO (10 % of the bytes) takes new keys; a key read while in it moves to the
// main FIFO when it reaches the small queue's end, the others leave and are remembered
// in a ghost FIFO of keys only; a ghost key stored again goes straight to main. Main is
// a FIFO with reinsertion (a key read since it was last looked at goes round again, up
// to 3 times). Admits everything. Not thread-safe.
#include "cache_policy_impl.h"

namespace kvt::internal {
namespace {

constexpr uint8_t kSmall = 1, kMain = 2;
constexpr uint8_t kMaxFreq = 3;

class S3FifoPolicy final : public StagedPolicy {
 public:
  explicit S3FifoPolicy(uint64_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

  std::string_view name() const override { return "s3fifo"; }

  void OnInsert(const CacheEntryInfo& entry) override {
    auto [it, inserted] = nodes_.try_emplace(entry.key);
    PolicyNode* n = &it->second;
    if (!inserted) {
      OnAccess(entry.key);
      return;
    }
    n->key = entry.key;
    n->parent = entry.parent;
    n->bytes = entry.record_bytes;
    if (avg_bytes_ == 0) avg_bytes_ = entry.record_bytes > 0 ? entry.record_bytes : 1;
    if (ghost_.Take(entry.key)) {
      n->queue = kMain;
      main_.PushFront(n);
    } else {
      n->queue = kSmall;
      small_.PushFront(n);
    }
  }

  void OnAccess(const ChunkKey& key) override {
    auto it = nodes_.find(key);
    if (it == nodes_.end()) return;
    PolicyNode* n = &it->second;
    if (n->freq < kMaxFreq) ++n->freq;
    if (n->queue == kVictimQueue) ReviveVictim(n);
  }

  void OnRemove(const ChunkKey& key, RemoveReason reason) override {
    auto it = nodes_.find(key);
    if (it == nodes_.end()) return;
    PolicyNode* n = &it->second;
    const bool from_small = n->queue == kSmall || (n->queue == kVictimQueue && n->origin == kSmall);
    Unlink(n);
    nodes_.erase(it);
    if (reason == RemoveReason::kEvicted && from_small) RememberGhost(key);
  }

 protected:
  PolicyNode* DesignateNext() override {
    for (;;) {
      const bool small_over = small_.bytes() > capacity_bytes_ / 10;
      if (!small_.empty() && (small_over || main_.empty())) {
        PolicyNode* n = small_.back();
        small_.Remove(n);
        if (n->freq > 0) {
          n->freq = 0;
          n->queue = kMain;
          main_.PushFront(n);
          continue;
        }
        return n;
      }
      if (main_.empty()) return nullptr;
      PolicyNode* n = main_.back();
      main_.Remove(n);
      if (n->freq > 0) {
        --n->freq;
        main_.PushFront(n);
        continue;
      }
      return n;
    }
  }

  void Revive(PolicyNode* n) override {
    n->queue = kMain;
    main_.PushFront(n);
  }

  void Unlink(PolicyNode* n) override {
    switch (n->queue) {
      case kSmall:
        small_.Remove(n);
        break;
      case kMain:
        main_.Remove(n);
        break;
      default:
        victims_.Remove(n);
    }
  }

 private:
  void RememberGhost(const ChunkKey& key) {
    // As many ghost keys as main holds records (the paper's choice).
    ghost_.Add(key, (capacity_bytes_ / avg_bytes_) * 9 / 10 + 1);
  }

  uint64_t capacity_bytes_;
  uint64_t avg_bytes_ = 0;  // the first record's size (a tier's records are alike)
  NodeList small_, main_;
  GhostList ghost_;
};

}  // namespace

std::unique_ptr<CachePolicy> MakeS3FifoPolicy(uint64_t capacity_bytes) {
  return std::make_unique<S3FifoPolicy>(capacity_bytes);
}

}  // namespace kvt::internal
