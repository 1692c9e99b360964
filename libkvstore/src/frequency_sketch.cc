#include "frequency_sketch.h"

#include <algorithm>
#include <bit>

namespace kvt::internal {
namespace {

constexpr int kRows = 4;
constexpr uint64_t kSeeds[kRows] = {0x9E3779B97F4A7C15ull, 0xC2B2AE3D27D4EB4Full,
                                    0x165667B19E3779F9ull, 0xD6E8FEB86659FD93ull};

uint64_t Mix(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

FrequencySketch::FrequencySketch(size_t entries, uint32_t sample_factor) {
  sample_size_ = std::max<size_t>(entries, 1) * std::max<uint32_t>(sample_factor, 1);
  // Most references in a sample can be to distinct keys (a real trace's one-hit
  // wonders): the doorkeeper gets 8 bits per reference of a sample (2 hashes: a false
  // positive rate under 5 %), the counters one per 2 references (only keys referenced
  // twice reach them).
  const size_t width = std::bit_ceil(std::max<size_t>(sample_size_ / 2, 64));
  mask_ = width - 1;
  counters_.assign(kRows * width, 0);
  const size_t door_bits = std::bit_ceil(std::max<size_t>(8 * sample_size_, 512));
  door_.assign(door_bits / 64, 0);
  door_mask_ = door_bits - 1;
}

uint64_t FrequencySketch::Hash(const ChunkKey& key, int row) const {
  return Mix(key.lo ^ Mix(key.hi + kSeeds[row]));
}

bool FrequencySketch::DoorkeeperContains(const ChunkKey& key) const {
  const uint64_t h = Mix((key.lo + 0x2545F4914F6CDD1Dull) ^ key.hi);
  const size_t a = h & door_mask_, b = (h >> 32) & door_mask_;
  return (door_[a / 64] >> (a % 64) & 1) && (door_[b / 64] >> (b % 64) & 1);
}

void FrequencySketch::DoorkeeperAdd(const ChunkKey& key) {
  const uint64_t h = Mix((key.lo + 0x2545F4914F6CDD1Dull) ^ key.hi);
  const size_t a = h & door_mask_, b = (h >> 32) & door_mask_;
  door_[a / 64] |= uint64_t{1} << (a % 64);
  door_[b / 64] |= uint64_t{1} << (b % 64);
}

uint32_t FrequencySketch::Increment(const ChunkKey& key) {
  if (++additions_ >= sample_size_) Age();
  const size_t width = mask_ + 1;
  uint8_t* c[kRows];
  uint32_t m = 15;
  for (int r = 0; r < kRows; ++r) {
    c[r] = &counters_[r * width + (Hash(key, r) & mask_)];
    m = std::min<uint32_t>(m, *c[r]);
  }
  if (!DoorkeeperContains(key)) {
    DoorkeeperAdd(key);
    return m;
  }
  for (uint8_t* x : c) {
    if (*x < 15) ++*x;
  }
  return m + 1;
}

uint32_t FrequencySketch::Estimate(const ChunkKey& key) const {
  const size_t width = mask_ + 1;
  uint32_t m = 15;
  for (int r = 0; r < kRows; ++r) {
    m = std::min<uint32_t>(m, counters_[r * width + (Hash(key, r) & mask_)]);
  }
  return m + (DoorkeeperContains(key) ? 1 : 0);
}

void FrequencySketch::Age() {
  for (uint8_t& c : counters_) c >>= 1;
  std::fill(door_.begin(), door_.end(), 0);
  additions_ = 0;
}

}  // namespace kvt::internal
