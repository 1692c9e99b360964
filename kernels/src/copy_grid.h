// Internal: the CUDA path's index math as plain functions, compiled by nvcc for the
// kernel (kv_copy_cuda.cu) and by the host compiler for the CPU emulation of the
// launch grid (cuda_emul.cc), so a grid or indexing mistake is caught without a GPU
// (tests/kernels/kv_copy_emul_test.cc).
//
// What the CUDA path does with a copy plan (copy_plan.h):
//  1. SplitForCuda: contiguous segments of at least `memcpy_min_bytes` go to the copy
//     engine (cudaMemcpyAsync); longer contiguous runs are cut into kKernelPieceBytes
//     pieces; everything else goes to the kernel as is.
//  2. One launch of GridFor(n) blocks of kCopyBlockThreads threads over the kernel's
//     segments. Each (block, thread) runs CopySegmentsThread: block b takes segments
//     b, b + grid, ...; inside a segment, thread t copies units t, t + blockDim, ...,
//     16-, 4- or 1-byte units as the addresses, strides and row size allow.
// The kernel is a thin wrapper that passes blockIdx/threadIdx/blockDim/gridDim; the
// emulation calls the same function for every (block, thread) of the same launch.
// Kept free of absl and CUDA headers, and C++17, so nvcc can read it.
#ifndef KERNELS_SRC_COPY_GRID_H_
#define KERNELS_SRC_COPY_GRID_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "copy_plan.h"

namespace kvt::kernels_internal {

// 16-byte copy unit: CUDA's uint4 (one 128-bit load/store) in the kernel; the same
// size and alignment on the host.
#if defined(__CUDACC__)
using CopyUnit16 = uint4;
#else
struct alignas(16) CopyUnit16 {
  uint32_t x, y, z, w;
};
#endif
static_assert(sizeof(CopyUnit16) == 16, "16-byte copy unit");

// Launch shape of the copy kernel.
constexpr uint32_t kCopyBlockThreads = 256;
constexpr uint32_t kMaxCopyGrid = 65535;
// Contiguous runs longer than this are cut into pieces of this size for the kernel
// (a multiple of 16, so the pieces keep the run's alignment).
constexpr uint64_t kKernelPieceBytes = 64 * 1024;

// Where one CUDA thread is: blockIdx.x, gridDim.x, threadIdx.x, blockDim.x.
struct GridPos {
  uint32_t block;
  uint32_t grid_dim;
  uint32_t thread;
  uint32_t block_dim;
};

// Bytes per copy unit for segment `s` with the payload at `payload_addr`: 16 when
// every address, stride and the row size are 16-byte aligned, else 4 when 4-aligned,
// else 1.
KVT_HOST_DEVICE inline uint32_t CopyUnitBytes(const CopySegment& s, uint64_t payload_addr) {
  const uint64_t bits = s.cache_addr | (payload_addr + s.payload_offset) | s.cache_stride |
                        s.payload_stride | s.row_bytes;
  if ((bits & 15) == 0) return 16;
  if ((bits & 3) == 0) return 4;
  return 1;
}

// Thread `thread` of a block of `block_dim` copying segment `s` in `Unit`s.
template <typename Unit>
KVT_HOST_DEVICE inline void CopyRowsThread(const CopySegment& s, char* payload, bool gather,
                                           uint32_t thread, uint32_t block_dim) {
  char* cache = reinterpret_cast<char*>(static_cast<uintptr_t>(s.cache_addr));
  char* pay = payload + s.payload_offset;
  const char* src = gather ? cache : pay;
  char* dst = gather ? pay : cache;
  if (s.contiguous()) {  // one flat run: no index division
    const uint64_t units = s.bytes() / sizeof(Unit);
    for (uint64_t i = thread; i < units; i += block_dim) {
      reinterpret_cast<Unit*>(dst)[i] = reinterpret_cast<const Unit*>(src)[i];
    }
    return;
  }
  const uint64_t src_stride = gather ? s.cache_stride : s.payload_stride;
  const uint64_t dst_stride = gather ? s.payload_stride : s.cache_stride;
  // Strided rows (HND heads): rows <= block_size, so rows * units fits 32 bits in
  // practice; 32-bit division is much cheaper than 64-bit on the GPU.
  const uint32_t units_per_row = s.row_bytes / static_cast<uint32_t>(sizeof(Unit));
  const uint64_t units = uint64_t{s.rows} * units_per_row;
  if (units <= 0xffffffffull) {
    for (uint32_t i = thread; i < units; i += block_dim) {
      const uint32_t r = i / units_per_row, c = i - r * units_per_row;
      reinterpret_cast<Unit*>(dst + r * dst_stride)[c] =
          reinterpret_cast<const Unit*>(src + r * src_stride)[c];
    }
    return;
  }
  for (uint32_t r = 0; r < s.rows; ++r) {
    for (uint32_t c = thread; c < units_per_row; c += block_dim) {
      reinterpret_cast<Unit*>(dst + r * dst_stride)[c] =
          reinterpret_cast<const Unit*>(src + r * src_stride)[c];
    }
  }
}

// Everything thread `pos` of the copy kernel does: block pos.block takes segments
// pos.block, pos.block + pos.grid_dim, ... of `segments`.
KVT_HOST_DEVICE inline void CopySegmentsThread(const CopySegment* segments, uint32_t count,
                                               char* payload, bool gather, GridPos pos) {
  for (uint32_t k = pos.block; k < count; k += pos.grid_dim) {
    const CopySegment s = segments[k];
    switch (CopyUnitBytes(s, reinterpret_cast<uintptr_t>(payload))) {
      case 16:
        CopyRowsThread<CopyUnit16>(s, payload, gather, pos.thread, pos.block_dim);
        break;
      case 4:
        CopyRowsThread<uint32_t>(s, payload, gather, pos.thread, pos.block_dim);
        break;
      default:
        CopyRowsThread<unsigned char>(s, payload, gather, pos.thread, pos.block_dim);
        break;
    }
  }
}

// Host side: the launcher's split of a plan between the copy engine and the kernel.
struct CudaWork {
  std::vector<CopySegment> memcpys;  // each one cudaMemcpyAsync, in order
  std::vector<CopySegment> kernel;   // one launch over all of them
};

inline CudaWork SplitForCuda(const CopySegment* segments, size_t count, uint64_t memcpy_min_bytes) {
  CudaWork work;
  work.kernel.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const CopySegment& s = segments[i];
    if (s.contiguous() && s.bytes() >= memcpy_min_bytes) {
      work.memcpys.push_back(s);
    } else if (s.contiguous() && s.bytes() > kKernelPieceBytes) {
      // Split long flat runs so one launch spreads them over many SMs.
      for (uint64_t off = 0; off < s.bytes(); off += kKernelPieceBytes) {
        const uint64_t n =
            s.bytes() - off < kKernelPieceBytes ? s.bytes() - off : kKernelPieceBytes;
        work.kernel.push_back(CopySegment{s.cache_addr + off, s.payload_offset + off, n, n, 1,
                                          static_cast<uint32_t>(n)});
      }
    } else {
      work.kernel.push_back(s);
    }
  }
  return work;
}

// Blocks of the launch over `n` kernel segments (grid-stride beyond kMaxCopyGrid).
inline uint32_t GridFor(uint32_t n, uint32_t max_grid = kMaxCopyGrid) {
  return n < max_grid ? n : max_grid;
}

}  // namespace kvt::kernels_internal

#endif  // KERNELS_SRC_COPY_GRID_H_
