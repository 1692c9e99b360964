// Internal (tests only): GatherChunk / ScatterChunk through the CPU emulation of the
// CUDA path (copy_exec.h EmulateCudaExecute) instead of the CPU path, on a view whose
// tensors are host memory. The same validation and copy plan as the public calls;
// what differs from a GPU run is only where the bytes live (tests/kernels/
// kv_copy_emul_test.cc checks the result bit for bit against the CPU path).
#ifndef KERNELS_SRC_KV_COPY_EMUL_H_
#define KERNELS_SRC_KV_COPY_EMUL_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "copy_exec.h"
#include "copy_grid.h"
#include "kernels/kv_copy.h"

namespace kvt::kernels_internal {

struct EmulOptions {
  uint64_t memcpy_min_bytes = 1ull << 20;  // as KvCopyOptions::cuda_memcpy_min_bytes
  uint32_t max_grid = kMaxCopyGrid;        // smaller exercises the grid-stride loop
};

// REQUIRES: the view's tensors are host memory (its `device` field is ignored).
// Errors: as GatherChunk / ScatterChunk for a kCpu view; nothing written on error.
absl::Status EmulatedCudaGather(const PagedKvView& view, std::span<const int64_t> slots,
                                std::span<std::byte> payload, const EmulOptions& options,
                                CudaEmulStats* stats = nullptr);
absl::Status EmulatedCudaScatter(const PagedKvView& view, std::span<const int64_t> slots,
                                 std::span<const std::byte> payload, const EmulOptions& options,
                                 CudaEmulStats* stats = nullptr);

}  // namespace kvt::kernels_internal

#endif  // KERNELS_SRC_KV_COPY_EMUL_H_
