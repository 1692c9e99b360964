#include "kvstore/evict_selector.h"

#include <deque>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"

namespace kvt {

absl::Status EvictSelector::Validate() const {
  const int set = static_cast<int>(!keys.empty()) + static_cast<int>(ns.has_value()) +
                  static_cast<int>(older_than.has_value()) + static_cast<int>(prefix.has_value()) +
                  static_cast<int>(all);
  if (set != 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "evict selector: %d of keys, ns, older_than, prefix, all are set; expected exactly one",
        set));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].is_zero()) {
      return absl::InvalidArgumentError(absl::StrFormat("evict selector: keys[%d] is zero", i));
    }
  }
  if (older_than && older_than->count() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("evict selector: older_than = %d ms; expected > 0", older_than->count()));
  }
  if (prefix && prefix->is_zero()) {
    return absl::InvalidArgumentError("evict selector: prefix is the zero key");
  }
  if (within_ns && (ns || !keys.empty())) {
    return absl::InvalidArgumentError(
        "evict selector: within_ns narrows older_than, prefix or all; not keys or ns");
  }
  return absl::OkStatus();
}

std::vector<size_t> SelectVictims(std::span<const StoredChunk> listing,
                                  const EvictSelector& selector, int64_t now_unix_ms) {
  auto admitted = [&](const ChunkInfo& c) {
    if (selector.visible && !selector.visible(c.ns)) return false;
    if (selector.within_ns && c.ns != *selector.within_ns) return false;
    return true;
  };
  std::vector<size_t> out;
  if (!selector.keys.empty()) {
    absl::flat_hash_set<ChunkKey> wanted(selector.keys.begin(), selector.keys.end());
    for (size_t i = 0; i < listing.size(); ++i) {
      if (wanted.contains(listing[i].info.key) && admitted(listing[i].info)) out.push_back(i);
    }
    return out;
  }
  if (selector.prefix) {
    // Walk parent links from the root: the root and everything that continues it.
    absl::flat_hash_map<ChunkKey, std::vector<size_t>> children;
    absl::flat_hash_set<size_t> chosen;
    for (size_t i = 0; i < listing.size(); ++i) {
      children[listing[i].info.parent].push_back(i);
      if (listing[i].info.key == *selector.prefix) chosen.insert(i);
    }
    absl::flat_hash_set<ChunkKey> seen = {*selector.prefix};
    std::deque<ChunkKey> todo = {*selector.prefix};
    while (!todo.empty()) {
      const ChunkKey k = todo.front();
      todo.pop_front();
      auto it = children.find(k);
      if (it == children.end()) continue;
      for (size_t i : it->second) {
        if (seen.insert(listing[i].info.key).second) {
          chosen.insert(i);
          todo.push_back(listing[i].info.key);
        }
      }
    }
    for (size_t i = 0; i < listing.size(); ++i) {
      if (chosen.contains(i) && admitted(listing[i].info)) out.push_back(i);
    }
    return out;
  }
  for (size_t i = 0; i < listing.size(); ++i) {
    const ChunkInfo& c = listing[i].info;
    if (!admitted(c)) continue;
    if (selector.ns && c.ns != *selector.ns) continue;
    if (selector.older_than && now_unix_ms - c.last_access_unix_ms < selector.older_than->count()) {
      continue;
    }
    out.push_back(i);
  }
  return out;
}

}  // namespace kvt
