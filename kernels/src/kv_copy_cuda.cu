// CUDA executor of a copy plan (copy_plan.h): one kernel launch for the scattered
// segments (one thread block per segment, 16-/4-/1-byte units by alignment) plus
// cudaMemcpyAsync on the copy engine for long contiguous runs. Built only when
// KVT_HAVE_CUDA is on. Kept free of absl; kv_copy.cc turns CudaResult into a Status.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "copy_exec.h"
#include "copy_grid.h"

namespace kvt::kernels_internal {
namespace {

CudaResult Fail(cudaError_t e, const char* call) {
  CudaResult r;
  r.error = static_cast<int>(e);
  r.what = std::string(call) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
  return r;
}

#define KVT_CUDA_TRY(call)                               \
  do {                                                   \
    cudaError_t kvt_e = (call);                          \
    if (kvt_e != cudaSuccess) return Fail(kvt_e, #call); \
  } while (0)

// The kernel is a thin wrapper: each thread's work is CopySegmentsThread
// (copy_grid.h), which the CPU emulation runs over the same grid.
__global__ void CopySegmentsKernel(const CopySegment* segments, uint32_t count, char* payload,
                                   bool gather) {
  CopySegmentsThread(segments, count, payload, gather,
                     GridPos{blockIdx.x, gridDim.x, threadIdx.x, blockDim.x});
}

// Frees a stream-ordered allocation on every return path (errors included).
struct AsyncFree {
  void* ptr = nullptr;
  cudaStream_t stream = nullptr;
  ~AsyncFree() {
    if (ptr != nullptr) cudaFreeAsync(ptr, stream);
  }
};

}  // namespace

int CudaDeviceCount(CudaResult* result) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    *result = Fail(e, "cudaGetDeviceCount");
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return 0;
  }
  return count;
}

bool CudaCanAccess(const void* ptr) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged ||
         (attr.type == cudaMemoryTypeHost && attr.devicePointer != nullptr);
}

CudaResult ExecuteOnCuda(const CopySegment* segment_data, size_t count, std::byte* payload,
                         uint64_t payload_bytes, CopyDirection direction, void* stream_ptr,
                         uint64_t memcpy_min_bytes, bool payload_has_gaps) {
  cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const bool gather = direction == CopyDirection::kGather;

  // Pageable host payloads cannot be touched by a kernel: stage through device memory.
  char* target = reinterpret_cast<char*>(payload);
  AsyncFree staging_guard{nullptr, stream};
  void*& staging = staging_guard.ptr;
  const bool staged = !CudaCanAccess(payload) && payload_bytes > 0;
  if (staged) {
    KVT_CUDA_TRY(cudaMallocAsync(&staging, payload_bytes, stream));
    target = static_cast<char*>(staging);
    // Scatter reads the payload; a gather with padding rows must hand them back
    // unchanged, so the staging copy starts as the caller's bytes.
    if (!gather || payload_has_gaps) {
      KVT_CUDA_TRY(
          cudaMemcpyAsync(staging, payload, payload_bytes, cudaMemcpyHostToDevice, stream));
    }
  }
  // The kernel's pointer for the payload: for pinned host memory, its device alias.
  char* kernel_payload = target;
  if (!staged) {
    cudaPointerAttributes attr{};
    KVT_CUDA_TRY(cudaPointerGetAttributes(&attr, payload));
    if (attr.type == cudaMemoryTypeHost) kernel_payload = static_cast<char*>(attr.devicePointer);
  }

  const CudaWork work = SplitForCuda(segment_data, count, memcpy_min_bytes);
  for (const CopySegment& s : work.memcpys) {
    void* cache = reinterpret_cast<void*>(static_cast<uintptr_t>(s.cache_addr));
    void* pay = target + s.payload_offset;
    KVT_CUDA_TRY(cudaMemcpyAsync(gather ? pay : cache, gather ? cache : pay, s.bytes(),
                                 cudaMemcpyDefault, stream));
  }
  const std::vector<CopySegment>& small = work.kernel;
  AsyncFree segments_guard{nullptr, stream};
  if (!small.empty()) {
    const size_t bytes = small.size() * sizeof(CopySegment);
    KVT_CUDA_TRY(cudaMallocAsync(&segments_guard.ptr, bytes, stream));
    auto* device_segments = static_cast<CopySegment*>(segments_guard.ptr);
    KVT_CUDA_TRY(
        cudaMemcpyAsync(device_segments, small.data(), bytes, cudaMemcpyHostToDevice, stream));
    const uint32_t n_small = static_cast<uint32_t>(small.size());
    CopySegmentsKernel<<<GridFor(n_small), kCopyBlockThreads, 0, stream>>>(device_segments, n_small,
                                                                           kernel_payload, gather);
    KVT_CUDA_TRY(cudaGetLastError());
    KVT_CUDA_TRY(cudaFreeAsync(segments_guard.ptr, stream));
    segments_guard.ptr = nullptr;
  }
  if (staged) {
    if (gather) {
      KVT_CUDA_TRY(
          cudaMemcpyAsync(payload, staging, payload_bytes, cudaMemcpyDeviceToHost, stream));
    }
    KVT_CUDA_TRY(cudaFreeAsync(staging, stream));
    staging = nullptr;
  }
  KVT_CUDA_TRY(cudaStreamSynchronize(stream));
  return CudaResult{};
}

}  // namespace kvt::kernels_internal
