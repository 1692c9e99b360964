// Private to libkvstore: the bookkeeping the cache policies share (cache_policy_*.cc).
//  - PolicyNode: what a policy tracks about one held key.
//  - NodeList: an intrusive doubly-linked list of nodes; front = newest / most recently
//    used, back = the next one out. O(1) insert, move and remove, no allocation.
//  - PlaceAfterParent: the prefix-aware placement. A hit is the leading run of cached
//    chunks of a prompt, so a chunk is worth nothing without its parent; the engine reads
//    and stores a prompt's chunks parent first, which in a plain recency list puts the
//    parent *behind* its children (evicted first, orphaning them). Placing a chunk right
//    behind its parent when the parent sits in the same list makes a prompt's chain leave
//    tail first (its last chunk, rarely reused, first; its first chunk last).
//  - GhostList: keys recently evicted (ARC's B1/B2, S3-FIFO's ghost queue), keys only.
// Not thread-safe (the policy's tier guards it).
#ifndef KVSTORE_SRC_CACHE_POLICY_LIST_H_
#define KVSTORE_SRC_CACHE_POLICY_LIST_H_

#include <cstddef>
#include <cstdint>
#include <deque>

#include "absl/container/flat_hash_set.h"
#include "absl/container/node_hash_map.h"
#include "kvstore/types.h"

namespace kvt::internal {

struct PolicyNode {
  ChunkKey key;
  ChunkKey parent;
  uint64_t bytes = 0;
  PolicyNode* prev = nullptr;
  PolicyNode* next = nullptr;
  uint8_t queue = 0;   // which of the policy's lists holds it (the policy's own numbering)
  uint8_t freq = 0;    // a small per-key counter (S3-FIFO's 0..3)
  uint8_t origin = 0;  // the list it was in before it was designated a victim
  uint64_t count = 0;  // LFU's use count; adaptive's epoch of the last counted access
  uint64_t seq = 0;    // LFU's tie-break: the order of last use
};

// Keys to nodes; node_hash_map keeps a node's address for its lifetime (lists hold
// pointers).
using NodeMap = absl::node_hash_map<ChunkKey, PolicyNode>;

class NodeList {
 public:
  NodeList() { head_.prev = head_.next = &head_; }
  NodeList(const NodeList&) = delete;
  NodeList& operator=(const NodeList&) = delete;

  void PushFront(PolicyNode* n) { Link(&head_, n); }
  void PushBack(PolicyNode* n) { Link(head_.prev, n); }
  // Links `n` right behind `pos` (closer to the back), `pos` already in this list.
  void InsertBehind(PolicyNode* pos, PolicyNode* n) { Link(pos, n); }
  void Remove(PolicyNode* n) {
    if (n == last_placed_) last_placed_ = nullptr;
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = nullptr;
    --size_;
    bytes_ -= n->bytes;
  }
  PolicyNode* front() const { return size_ == 0 ? nullptr : head_.next; }
  PolicyNode* back() const { return size_ == 0 ? nullptr : head_.prev; }
  // The next node toward the front (iterating from the back), nullptr after the front.
  PolicyNode* Warmer(const PolicyNode* n) const { return n->prev == &head_ ? nullptr : n->prev; }
  size_t size() const { return size_; }
  uint64_t bytes() const { return bytes_; }
  bool empty() const { return size_ == 0; }
  // The node placed last by PlaceAfterParent (nullptr once it is removed).
  PolicyNode* last_placed() const { return last_placed_; }
  void set_last_placed(PolicyNode* n) { last_placed_ = n; }

 private:
  // Links `n` right after `pos` in front-to-back order.
  void Link(PolicyNode* pos, PolicyNode* n) {
    n->prev = pos;
    n->next = pos->next;
    pos->next->prev = n;
    pos->next = n;
    ++size_;
    bytes_ += n->bytes;
  }
  PolicyNode head_;  // sentinel: head_.next = front, head_.prev = back
  size_t size_ = 0;
  uint64_t bytes_ = 0;
  PolicyNode* last_placed_ = nullptr;
};

// Puts `n` (in no list) into `list` with `queue` id: right behind its parent when the
// parent is the node placed last in this list (the engine reads and stores a prompt's
// chunks parent first, so a chain arrives in one run), else at the front. A parent placed
// earlier may sit anywhere, even next in line for eviction: its child goes to the front.
inline void PlaceAfterParent(NodeList& list, uint8_t queue, PolicyNode* n) {
  n->queue = queue;
  PolicyNode* last = list.last_placed();
  if (last != nullptr && !n->parent.is_zero() && last->key == n->parent) {
    list.InsertBehind(last, n);
  } else {
    list.PushFront(n);
  }
  list.set_last_placed(n);
}

// Keys recently evicted from one side of a policy: keys only, FIFO-bounded.
class GhostList {
 public:
  // Remembers `key` (no-op if remembered), forgetting the oldest beyond `limit` keys.
  void Add(const ChunkKey& key, size_t limit) {
    if (!set_.insert(key).second) return;
    fifo_.push_back(key);
    while (set_.size() > limit && !fifo_.empty()) {
      set_.erase(fifo_.front());
      fifo_.pop_front();
    }
    if (fifo_.size() > 2 * limit + 16) Compact();
  }
  // Forgets `key`; whether it was remembered.
  bool Take(const ChunkKey& key) { return set_.erase(key) > 0; }
  size_t size() const { return set_.size(); }

 private:
  void Compact() {
    std::deque<ChunkKey> kept;
    for (const ChunkKey& k : fifo_) {
      if (set_.contains(k)) kept.push_back(k);
    }
    fifo_.swap(kept);
  }
  absl::flat_hash_set<ChunkKey> set_;
  std::deque<ChunkKey> fifo_;  // may hold keys already taken (dropped when reached)
};

}  // namespace kvt::internal

#endif  // KVSTORE_SRC_CACHE_POLICY_LIST_H_
