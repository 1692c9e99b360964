// Internal: executors of a copy plan (copy_plan.h). The CPU executor is in
// cpu_copy.cc; the CUDA one in kv_copy_cuda.cu (built only with KVT_HAVE_CUDA).
// This header stays free of absl and CUDA headers, and C++17, so nvcc can read it.
#ifndef KERNELS_SRC_COPY_EXEC_H_
#define KERNELS_SRC_COPY_EXEC_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "copy_plan.h"

namespace kvt::kernels_internal {

// Runs `segments` between host memory and `payload` on up to `max_threads` threads
// (the caller's included), one more thread per `min_bytes_per_thread` bytes.
// Contiguous segments are one memcpy each. Cannot fail.
void ExecuteOnCpu(const CopySegment* segments, size_t count, std::byte* payload,
                  CopyDirection direction, uint32_t max_threads, uint64_t min_bytes_per_thread);

// Result of a CUDA call sequence: error == 0 is success; otherwise `what` names the
// CUDA call and cudaGetErrorString. The one place cudaError_t becomes a message.
struct CudaResult {
  int error = 0;
  std::string what;
};

// Number of CUDA devices, or a failure (e.g. no driver or no GPU) in `result`.
// Returns 0 devices in a build without CUDA.
int CudaDeviceCount(CudaResult* result);

// True when `ptr` is memory a CUDA kernel on the current device can dereference
// (device, managed, or pinned/registered host memory).
bool CudaCanAccess(const void* ptr);

// Runs `segments` (cache addresses are device-accessible) against `payload`
// (device, pinned host or pageable host memory of `payload_bytes`) on `stream`
// (a cudaStream_t; nullptr = legacy default stream) and waits for completion.
// Segments that are contiguous and at least `memcpy_min_bytes` long use
// cudaMemcpyAsync; the rest run in one kernel launch. `payload_has_gaps`: the plan
// leaves some payload bytes unwritten (padding slots), which a staged gather must
// preserve.
CudaResult ExecuteOnCuda(const CopySegment* segments, size_t count, std::byte* payload,
                         uint64_t payload_bytes, CopyDirection direction, void* stream,
                         uint64_t memcpy_min_bytes, bool payload_has_gaps);

// What the CPU emulation of the CUDA path did (cuda_emul.cc), so a test can tell
// which launch shapes and copy units it covered.
struct CudaEmulStats {
  uint64_t memcpys = 0;                       // segments given to the copy engine
  uint64_t kernel_segments = 0;               // segments (pieces) given to the kernel
  uint32_t grid = 0;                          // blocks launched (0: no launch)
  uint32_t block_dim = 0;                     // threads per block
  uint64_t unit16 = 0, unit4 = 0, unit1 = 0;  // kernel segments per copy-unit size
};

// Runs what ExecuteOnCuda would run for `segments`, on the CPU, with every pointer a
// host pointer: the copy-engine segments as memcpy (they are issued before the
// launch, on the same stream), then CopySegmentsThread (copy_grid.h) for every
// (block, thread) of the launch ExecuteOnCuda would make, with at most `max_grid`
// blocks (kMaxCopyGrid as on the GPU; smaller to exercise the grid-stride loop).
// Host memory only; no CUDA needed. Adds to *stats when not null.
void EmulateCudaExecute(const CopySegment* segments, size_t count, std::byte* payload,
                        CopyDirection direction, uint64_t memcpy_min_bytes, uint32_t max_grid,
                        CudaEmulStats* stats);

}  // namespace kvt::kernels_internal

#endif  // KERNELS_SRC_COPY_EXEC_H_
