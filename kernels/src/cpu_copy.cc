// CPU executor of a copy plan: splits the segments over a few std::threads by bytes.
// A thread per call (not a pool): a 256-token Llama-3-8B chunk is 32 MiB, so the
// ~20 us of thread start-up is noise, and there is no pool to supervise.
#include <algorithm>
#include <cstring>
#include <span>
#include <thread>
#include <vector>

#include "copy_exec.h"

namespace kvt::kernels_internal {
namespace {

void RunRange(std::span<const CopySegment> segments, std::byte* payload, CopyDirection direction) {
  const bool gather = direction == CopyDirection::kGather;
  for (const CopySegment& s : segments) {
    auto* cache = reinterpret_cast<std::byte*>(static_cast<uintptr_t>(s.cache_addr));
    std::byte* pay = payload + s.payload_offset;
    if (s.contiguous()) {
      if (gather) {
        std::memcpy(pay, cache, s.bytes());
      } else {
        std::memcpy(cache, pay, s.bytes());
      }
      continue;
    }
    for (uint32_t r = 0; r < s.rows; ++r) {
      std::byte* c = cache + r * s.cache_stride;
      std::byte* p = pay + r * s.payload_stride;
      if (gather) {
        std::memcpy(p, c, s.row_bytes);
      } else {
        std::memcpy(c, p, s.row_bytes);
      }
    }
  }
}

}  // namespace

void ExecuteOnCpu(const CopySegment* segment_data, size_t count, std::byte* payload,
                  CopyDirection direction, uint32_t max_threads, uint64_t min_bytes_per_thread) {
  const std::span<const CopySegment> segments(segment_data, count);
  uint64_t total = 0;
  for (const CopySegment& s : segments) total += s.bytes();
  uint64_t want = min_bytes_per_thread == 0 ? segments.size() : total / min_bytes_per_thread;
  const uint32_t threads =
      static_cast<uint32_t>(std::clamp<uint64_t>(want, 1, std::max<uint32_t>(max_threads, 1)));
  if (threads <= 1 || segments.size() < 2) {
    RunRange(segments, payload, direction);
    return;
  }
  // Cut the segment list into `threads` ranges of about equal bytes.
  std::vector<size_t> cuts{0};
  uint64_t acc = 0;
  for (size_t i = 0; i < segments.size() && cuts.size() < threads; ++i) {
    acc += segments[i].bytes();
    if (acc * threads >= total * cuts.size()) cuts.push_back(i + 1);
  }
  if (cuts.back() != segments.size()) cuts.push_back(segments.size());
  std::vector<std::jthread> workers;
  workers.reserve(cuts.size());
  for (size_t k = 1; k + 1 < cuts.size(); ++k) {
    workers.emplace_back(RunRange, segments.subspan(cuts[k], cuts[k + 1] - cuts[k]), payload,
                         direction);
  }
  RunRange(segments.subspan(0, cuts[1]), payload, direction);
  // jthread joins on destruction.
}

}  // namespace kvt::kernels_internal
