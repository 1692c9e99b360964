// Private to libkvstore: the one recency list of the tiers (HostTier over its entries,
// DiskTier over its keys). Front = most recently used, back = least. Handles are
// std::list iterators: they stay valid across Insert/Touch of other elements until
// their own Remove. Not thread-safe (each tier guards it with its lock).
#ifndef KVSTORE_SRC_LRU_LIST_H_
#define KVSTORE_SRC_LRU_LIST_H_

#include <cstddef>
#include <iterator>
#include <list>
#include <utility>

namespace kvt::internal {

template <typename T>
class LruList {
 public:
  using Handle = typename std::list<T>::iterator;

  // Adds `value` as the most recently used element and returns its handle.
  Handle Insert(T value) {
    items_.push_front(std::move(value));
    return items_.begin();
  }
  // Makes the element the most recently used (O(1)).
  // Inserts at the least recently used end (e.g. eviction victims put back).
  Handle InsertCold(T value) {
    items_.push_back(std::move(value));
    return std::prev(items_.end());
  }
  void Touch(Handle h) { items_.splice(items_.begin(), items_, h); }
  // Removes the element; `h` is invalid afterwards.
  void Remove(Handle h) { items_.erase(h); }

  // Most recent first: begin()/end(); least recent (eviction order) first:
  // rbegin()/rend().
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }
  auto rbegin() const { return items_.rbegin(); }
  auto rend() const { return items_.rend(); }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }

 private:
  std::list<T> items_;
};

}  // namespace kvt::internal

#endif  // KVSTORE_SRC_LRU_LIST_H_
