// CUDA executor of a copy plan (copy_plan.h): one kernel launch for the scattered
// segments (one thread block per segment, 16-/4-/1-byte units by alignment) plus
// cudaMemcpyAsync on the copy engine for long contiguous runs. Built only when
// KVT_HAVE_CUDA is on. Kept free of absl; kv_copy.cc turns CudaResult into a Status.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "copy_exec.h"

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

template <typename Unit>
__device__ void CopyRows(const CopySegment& s, char* payload, bool gather) {
  char* cache = reinterpret_cast<char*>(static_cast<uintptr_t>(s.cache_addr));
  char* pay = payload + s.payload_offset;
  const char* src = gather ? cache : pay;
  char* dst = gather ? pay : cache;
  if (s.contiguous()) {  // one flat run: no index division
    const uint64_t units = s.bytes() / sizeof(Unit);
    for (uint64_t i = threadIdx.x; i < units; i += blockDim.x) {
      reinterpret_cast<Unit*>(dst)[i] = reinterpret_cast<const Unit*>(src)[i];
    }
    return;
  }
  const uint64_t src_stride = gather ? s.cache_stride : s.payload_stride;
  const uint64_t dst_stride = gather ? s.payload_stride : s.cache_stride;
  // Strided rows (HND heads): rows <= block_size, so rows * units fits 32 bits in
  // practice; 32-bit division is much cheaper than 64-bit on the GPU.
  const uint32_t units_per_row = s.row_bytes / sizeof(Unit);
  const uint64_t units = uint64_t{s.rows} * units_per_row;
  if (units <= 0xffffffffull) {
    for (uint32_t i = threadIdx.x; i < units; i += blockDim.x) {
      const uint32_t r = i / units_per_row, c = i - r * units_per_row;
      reinterpret_cast<Unit*>(dst + r * dst_stride)[c] =
          reinterpret_cast<const Unit*>(src + r * src_stride)[c];
    }
    return;
  }
  for (uint32_t r = 0; r < s.rows; ++r) {
    for (uint32_t c = threadIdx.x; c < units_per_row; c += blockDim.x) {
      reinterpret_cast<Unit*>(dst + r * dst_stride)[c] =
          reinterpret_cast<const Unit*>(src + r * src_stride)[c];
    }
  }
}

__global__ void CopySegmentsKernel(const CopySegment* segments, uint32_t count, char* payload,
                                   bool gather) {
  for (uint32_t k = blockIdx.x; k < count; k += gridDim.x) {
    const CopySegment s = segments[k];
    const uint64_t bits = s.cache_addr | (reinterpret_cast<uintptr_t>(payload) + s.payload_offset) |
                          s.cache_stride | s.payload_stride | s.row_bytes;
    if ((bits & 15) == 0) {
      CopyRows<uint4>(s, payload, gather);
    } else if ((bits & 3) == 0) {
      CopyRows<uint32_t>(s, payload, gather);
    } else {
      CopyRows<unsigned char>(s, payload, gather);
    }
  }
}

// Contiguous runs longer than this are cut into pieces of this size for the kernel
// (a multiple of 16, so the pieces keep the run's alignment).
constexpr uint64_t kKernelPieceBytes = 64 * 1024;

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

  std::vector<CopySegment> small;
  small.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const CopySegment& s = segment_data[i];
    if (s.contiguous() && s.bytes() >= memcpy_min_bytes) {
      void* cache = reinterpret_cast<void*>(static_cast<uintptr_t>(s.cache_addr));
      void* pay = target + s.payload_offset;
      KVT_CUDA_TRY(cudaMemcpyAsync(gather ? pay : cache, gather ? cache : pay, s.bytes(),
                                   cudaMemcpyDefault, stream));
    } else if (s.contiguous() && s.bytes() > kKernelPieceBytes) {
      // Split long flat runs so one launch spreads them over many SMs.
      for (uint64_t off = 0; off < s.bytes(); off += kKernelPieceBytes) {
        const uint64_t n =
            s.bytes() - off < kKernelPieceBytes ? s.bytes() - off : kKernelPieceBytes;
        small.push_back(CopySegment{s.cache_addr + off, s.payload_offset + off, n, n, 1,
                                    static_cast<uint32_t>(n)});
      }
    } else {
      small.push_back(s);
    }
  }
  AsyncFree segments_guard{nullptr, stream};
  if (!small.empty()) {
    const size_t bytes = small.size() * sizeof(CopySegment);
    KVT_CUDA_TRY(cudaMallocAsync(&segments_guard.ptr, bytes, stream));
    auto* device_segments = static_cast<CopySegment*>(segments_guard.ptr);
    KVT_CUDA_TRY(
        cudaMemcpyAsync(device_segments, small.data(), bytes, cudaMemcpyHostToDevice, stream));
    const uint32_t n_small = static_cast<uint32_t>(small.size());
    const uint32_t grid = n_small < 65535u ? n_small : 65535u;
    CopySegmentsKernel<<<grid, 256, 0, stream>>>(device_segments, n_small, kernel_payload, gather);
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
