// Internal: a copy plan is the list of 2-D byte copies that moves one chunk between
// a paged KV cache and its payload. The CPU and CUDA paths execute the same plan, so
// the index arithmetic lives in one place (copy_plan.cc) and is checked against an
// independent reference in tests/kernels/. Kept free of absl so nvcc compiles it.
#ifndef KERNELS_SRC_COPY_PLAN_H_
#define KERNELS_SRC_COPY_PLAN_H_

#include <cstdint>
#include <vector>

#if defined(__CUDACC__)
#define KVT_HOST_DEVICE __host__ __device__
#else
#define KVT_HOST_DEVICE
#endif

namespace kvt::kernels_internal {

// `rows` rows of `row_bytes` bytes each. Row r lives at cache_addr + r * cache_stride
// in the cache and at payload_offset + r * payload_stride in the payload.
struct CopySegment {
  uint64_t cache_addr;      // absolute address (host or device pointer value)
  uint64_t payload_offset;  // byte offset from the payload base
  uint64_t cache_stride;
  uint64_t payload_stride;
  uint32_t rows;
  uint32_t row_bytes;

  KVT_HOST_DEVICE uint64_t bytes() const { return uint64_t{rows} * row_bytes; }
  // True when the rows are back to back on both sides (one memcpy does it).
  KVT_HOST_DEVICE bool contiguous() const {
    return rows == 1 || (cache_stride == row_bytes && payload_stride == row_bytes);
  }
};

enum class CopyDirection : uint8_t { kGather = 0, kScatter = 1 };

}  // namespace kvt::kernels_internal

#endif  // KERNELS_SRC_COPY_PLAN_H_
