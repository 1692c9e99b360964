// Private to libkvstore: TinyLFU's frequency estimate (Einziger, Friedman, Manes,
// "TinyLFU: A Highly Efficient Cache Admission Policy", ACM TOS 2017; the layout follows
// Caffeine's FrequencySketch in spirit, not its code).
//  - A count-min sketch of 4 rows of saturating counters (0..15): the estimate of a key is
//    the minimum of its 4 counters.
//  - A doorkeeper (a Bloom filter) in front of it: a key's first reference only sets its
//    doorkeeper bits, so the one-hit wonders (three quarters of the chunks of a real
//    conversation trace are never reused) do not pollute the counters.
//  - Aging: after `sample_size` references every counter is halved and the doorkeeper is
//    cleared, so the estimate is a frequency over a recent window, not all time.
// Sized by the number of entries it must tell apart (a tier's capacity in records).
// Not thread-safe.
#ifndef KVSTORE_SRC_FREQUENCY_SKETCH_H_
#define KVSTORE_SRC_FREQUENCY_SKETCH_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvstore/types.h"

namespace kvt::internal {

class FrequencySketch {
 public:
  // `entries`: how many keys the cache holds (>= 1); `sample_factor`: references per
  // entry between two halvings (TinyLFU's W/C; 10 in Caffeine).
  FrequencySketch(size_t entries, uint32_t sample_factor);

  // Records one reference to `key`; returns Estimate(key) from before it (one pass over
  // the key's counters: a check-then-count costs no more than a count).
  uint32_t Increment(const ChunkKey& key);
  // The estimated number of references to `key` in the recent window (0..16).
  uint32_t Estimate(const ChunkKey& key) const;
  size_t sample_size() const { return sample_size_; }

 private:
  void Age();
  uint64_t Hash(const ChunkKey& key, int row) const;
  bool DoorkeeperContains(const ChunkKey& key) const;
  void DoorkeeperAdd(const ChunkKey& key);

  size_t mask_ = 0;                // width - 1 (width a power of two)
  std::vector<uint8_t> counters_;  // 4 rows x width
  std::vector<uint64_t> door_;     // doorkeeper bits (4 x width bits)
  size_t door_mask_ = 0;
  size_t sample_size_ = 0;
  size_t additions_ = 0;
};

}  // namespace kvt::internal

#endif  // KVSTORE_SRC_FREQUENCY_SKETCH_H_
