// CPU emulation of the CUDA copy path's launch grid (copy_exec.h, copy_grid.h): the
// same split and the same per-thread function as kv_copy_cuda.cu, run over every
// (block, thread) one after another. Built in every configuration, so the kernel's
// index math is tested where there is no GPU.
#include <cstring>

#include "copy_exec.h"
#include "copy_grid.h"

namespace kvt::kernels_internal {

void EmulateCudaExecute(const CopySegment* segments, size_t count, std::byte* payload,
                        CopyDirection direction, uint64_t memcpy_min_bytes, uint32_t max_grid,
                        CudaEmulStats* stats) {
  const bool gather = direction == CopyDirection::kGather;
  const CudaWork work = SplitForCuda(segments, count, memcpy_min_bytes);
  // Copy engine first: on the GPU the memcpys are queued before the launch.
  for (const CopySegment& s : work.memcpys) {
    auto* cache = reinterpret_cast<std::byte*>(static_cast<uintptr_t>(s.cache_addr));
    std::byte* pay = payload + s.payload_offset;
    if (gather) {
      std::memcpy(pay, cache, s.bytes());
    } else {
      std::memcpy(cache, pay, s.bytes());
    }
  }
  const auto n = static_cast<uint32_t>(work.kernel.size());
  const uint32_t grid = n == 0 ? 0 : GridFor(n, max_grid == 0 ? 1 : max_grid);
  char* kernel_payload = reinterpret_cast<char*>(payload);
  for (uint32_t b = 0; b < grid; ++b) {
    for (uint32_t t = 0; t < kCopyBlockThreads; ++t) {
      CopySegmentsThread(work.kernel.data(), n, kernel_payload, gather,
                         GridPos{b, grid, t, kCopyBlockThreads});
    }
  }
  if (stats == nullptr) return;
  stats->memcpys += work.memcpys.size();
  stats->kernel_segments += n;
  stats->grid = grid;
  stats->block_dim = grid == 0 ? 0 : kCopyBlockThreads;
  for (const CopySegment& s : work.kernel) {
    const uint32_t unit = CopyUnitBytes(s, reinterpret_cast<uintptr_t>(kernel_payload));
    (unit == 16 ? stats->unit16 : unit == 4 ? stats->unit4 : stats->unit1) += 1;
  }
}

}  // namespace kvt::kernels_internal
