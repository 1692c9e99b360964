// The default policy ("adaptive"): prefix-aware LRU whose admission of first-seen chunks
// adapts, ARC-style, between "store only what was referenced before" and "store all".
//
// Why: on the Mooncake conversation trace 76 % of the chunks are never read again. A
// small tier (host memory, 1-2 % of the distinct chunks) that stores them flushes what
// is reused before its next use; one that stores only chunks referenced before (a
// doorkeeper remembering far more keys than the tier holds) doubles LRU's hit ratio.
// A large tier (disk, 10-50 %) keeps chunks long enough that their first reuse is a hit,
// and there skipping first-seen chunks costs a third of LRU's hits. Which regime a tier
// is in depends on its capacity and the workload, so the policy learns it:
//  - window: first-seen chunks (an LRU with a budget of `window` bytes);
//  - main: chunks referenced before (an LRU); a window chunk that is read moves here;
//  - while the window is within its budget, the older of the two lists' tails goes
//    first (one LRU over both); over it, the window's tail goes;
//  - a first-seen chunk beyond the budget (and the tier full) is either stored into the
//    window anyway, where it is the next to go (the default: it costs one record of
//    room, and TieredStore, which writes down only what tier 0 holds, still gets it to
//    the lower tiers), or declined (adaptive_declines_first_seen: no write at all);
//  - the budget adapts as ARC's p (Megiddo & Modha, FAST'03): a miss on a first-seen
//    chunk this policy did not keep (declined, or evicted from the window) grows it, a
//    miss on a chunk evicted from main shrinks it. At budget 0 no first-seen chunk stays;
//    at the tier's capacity the policy is LRU.
// "Referenced before" = the frequency sketch's estimate is not 0 (frequency_sketch.h):
// its doorkeeper remembers every key of the last `sample_factor` x capacity references,
// its counters (halved, not cleared, at each such period) keep the often-used keys
// longer.
// A lookup's pin and its load are one reference (counted once per store epoch), and a
// demotion of a key the tier has seen before is declined (the store wrote it through
// already; this tier's order let it go).
// Prefix-aware placement (cache_policy_list.h): a prompt's chain leaves tail first.
// Not thread-safe.
#include <algorithm>
#include <optional>

#include "cache_policy_impl.h"
#include "frequency_sketch.h"

namespace kvt::internal {
namespace {

constexpr uint8_t kWindow = 1, kMain = 2;

class AdaptivePolicy final : public StagedPolicy {
 public:
  AdaptivePolicy(uint64_t capacity_bytes, const AdaptiveParams& params)
      : capacity_bytes_(capacity_bytes), params_(params) {
    window_budget_ = static_cast<double>(capacity_bytes_) * params_.initial_window_fraction;
  }

  std::string_view name() const override { return "adaptive"; }

  bool Admit(const CacheEntryInfo& entry, AdmitReason reason) override {
    Init(entry.record_bytes);
    if (reason != AdmitReason::kPromotion) ++epoch_;  // a promotion comes within the loads
    const bool counted = entry.key == last_missed_;
    last_missed_ = ChunkKey{};
    if (reason == AdmitReason::kDemotion && !counted) {
      // A demotion is not a reference (the record was stored above, not read here). If
      // this tier has seen the key before, it was offered it already (the store writes
      // every put through) and its own order evicted or declined it: storing it again
      // costs a write and, measured on the Mooncake traces, brings no hits. A key never
      // seen here (a store without write-through) is judged as a store would be. The
      // key's ghost entry goes too (this is the measured variant): the tier has now
      // refused it, so its later return is not taken as a hit its window lost.
      if (sketch_->Estimate(entry.key) > 0) {
        first_ghost_.Take(entry.key);
        main_ghost_.Take(entry.key);
        return false;
      }
    }
    // A lookup's miss just before (OnMiss) is this same reference, counted already.
    bool seen = counted ? seen_at_miss_ : sketch_->Increment(entry.key) > 0;
    if (!counted) GhostCheck(entry.key, entry.record_bytes);
    // A promotion is a hit in a tier below: a reference.
    if (reason == AdmitReason::kPromotion) seen = true;
    admit_to_main_ = seen;
    admitted_key_ = entry.key;
    if (seen || window_budget_ >= static_cast<double>(entry.record_bytes)) return true;
    // Free room: storing costs no other chunk its place.
    const uint64_t held = window_.bytes() + main_.bytes() + victims_.bytes();
    if (held + entry.record_bytes <= capacity_bytes_) return true;
    if (!params_.decline_first_seen) return true;  // through the window, first to go
    first_ghost_.Add(entry.key, GhostLimit());
    return false;
  }

  void OnInsert(const CacheEntryInfo& entry) override {
    Init(entry.record_bytes);
    auto [it, inserted] = nodes_.try_emplace(entry.key);
    PolicyNode* n = &it->second;
    if (!inserted) {
      Unlink(n);
      n->seq = ++clock_;
      Place(n, kMain);
      return;
    }
    n->key = entry.key;
    n->parent = entry.parent;
    n->bytes = entry.record_bytes;
    n->seq = ++clock_;
    const bool main = admitted_key_ == entry.key && admit_to_main_;
    admitted_key_ = ChunkKey{};
    Place(n, main ? kMain : kWindow);
  }

  void OnAccess(const ChunkKey& key) override {
    auto it = nodes_.find(key);
    if (it == nodes_.end()) {
      if (sketch_) sketch_->Increment(key);
      return;
    }
    PolicyNode* n = &it->second;
    // An engine's lookup pins a prompt's held chunks, then loads them: two accesses, one
    // reference. Between them the tier is offered no store (each store starts a new
    // epoch), so a second access in the same epoch is not counted again (two requests
    // in a row that store nothing count a shared chunk once: rare, as every request of
    // the traces ends in new chunks). Counting both made the sketch age twice as fast
    // for hit chunks: 0.0782 instead of 0.0808 at 2 % of the synthetic trace through the
    // TieredStore.
    if (sketch_ && n->count != epoch_) sketch_->Increment(key);
    n->count = epoch_;
    Unlink(n);
    n->seq = ++clock_;
    Place(n, kMain);
  }

  void OnMiss(const ChunkKey& key) override {
    if (!sketch_) return;
    seen_at_miss_ = sketch_->Increment(key) > 0;
    GhostCheck(key, avg_bytes_);
    last_missed_ = key;
  }

  void OnRemove(const ChunkKey& key, RemoveReason) override {
    auto it = nodes_.find(key);
    if (it == nodes_.end()) return;
    Unlink(&it->second);
    nodes_.erase(it);
  }

 protected:
  PolicyNode* DesignateNext() override {
    PolicyNode* w = window_.back();
    PolicyNode* m = main_.back();
    NodeList* from = nullptr;
    if (w != nullptr && (m == nullptr || static_cast<double>(window_.bytes()) > window_budget_ ||
                         w->seq < m->seq)) {
      from = &window_;
    } else if (m != nullptr) {
      from = &main_;
    } else {
      return nullptr;
    }
    PolicyNode* n = from->back();
    from->Remove(n);
    (from == &window_ ? first_ghost_ : main_ghost_).Add(n->key, GhostLimit());
    return n;
  }

  void Revive(PolicyNode* n) override {
    n->seq = ++clock_;
    Place(n, kMain);
  }

  void Unlink(PolicyNode* n) override {
    switch (n->queue) {
      case kWindow:
        window_.Remove(n);
        break;
      case kMain:
        main_.Remove(n);
        break;
      default:
        victims_.Remove(n);
    }
  }

 private:
  void Place(PolicyNode* n, uint8_t queue) {
    PlaceAfterParent(queue == kWindow ? window_ : main_, queue, n);
  }

  void Init(uint64_t record_bytes) {
    if (sketch_) return;
    avg_bytes_ = std::max<uint64_t>(record_bytes, 1);
    entries_ = std::max<uint64_t>(capacity_bytes_ / avg_bytes_, 1);
    sketch_.emplace(entries_, params_.sample_factor);
  }

  size_t GhostLimit() const {
    return static_cast<size_t>(params_.ghost_fraction * static_cast<double>(entries_)) + 1;
  }

  // ARC's adaptation of p (here the window budget), in records of the missed key's size.
  void GhostCheck(const ChunkKey& key, uint64_t bytes) {
    const double cap = static_cast<double>(capacity_bytes_);
    const double b =
        std::max(static_cast<double>(bytes) * params_.step, cap * params_.step_fraction);
    if (first_ghost_.Take(key)) {
      const double ratio = std::max(1.0, static_cast<double>(main_ghost_.size()) /
                                             std::max<double>(1.0, first_ghost_.size()));
      window_budget_ = std::min(window_budget_ + ratio * b, cap);
    } else if (main_ghost_.Take(key)) {
      const double ratio = std::max(1.0, static_cast<double>(first_ghost_.size()) /
                                             std::max<double>(1.0, main_ghost_.size()));
      window_budget_ = std::max(window_budget_ - ratio * b, 0.0);
    }
  }

  uint64_t capacity_bytes_;
  AdaptiveParams params_;
  double window_budget_ = 0;
  uint64_t avg_bytes_ = 1, entries_ = 1;  // the first record's size; capacity in records
  uint64_t clock_ = 0;                    // last-use order (seq) across both lists
  NodeList window_, main_;
  GhostList first_ghost_, main_ghost_;
  std::optional<FrequencySketch> sketch_;  // sized at the first record (entries known)
  ChunkKey last_missed_;       // a miss then the Admit of its store count as one reference
  bool seen_at_miss_ = false;  // whether last_missed_ was referenced before its miss
  ChunkKey admitted_key_;      // the last key Admit said yes to, and where it goes
  bool admit_to_main_ = false;
  // Stores offered so far (promotions aside); PolicyNode::count holds the epoch of a
  // node's last counted access (a lookup's pin and its load count once).
  uint64_t epoch_ = 1;
};

}  // namespace

std::unique_ptr<CachePolicy> MakeAdaptivePolicy(uint64_t capacity_bytes,
                                                const AdaptiveParams& params) {
  return std::make_unique<AdaptivePolicy>(capacity_bytes, params);
}

}  // namespace kvt::internal
