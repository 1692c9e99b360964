// Copy kernels between an engine's paged KV cache and a contiguous chunk payload.
//
// Gather:  paged KV cache + slot mapping  ->  chunk payload (codec order)
// Scatter: chunk payload                  ->  paged KV cache at the given slots
//
// Both copy every layer in one call. Values are never interpreted: elements are
// copied as 1-, 2- or 4-byte units, so any dtype (including opaque bytes) round-trips
// bit for bit.
//
// Payload order (the chunk codec's, see kvstore/chunk_codec.h):
//   K/V layouts: [layer][k|v][token][kv_head][head_dim]
//   kMLA:        [layer][token][latent]
// where `token` is the index into `slots`. Payload bytes =
//   num_layers * kv_planes * slots.size() * num_kv_heads * head_dim * element_size.
//
// Slot mapping (vLLM's convention): slot = block_id * block_size + offset_in_block,
// int64. Slot -1 is padding: on gather its payload rows are LEFT UNTOUCHED (whatever
// the caller had there stays; zero the payload first if you need defined bytes); on
// scatter nothing is written for it. Any other slot outside [0, num_blocks *
// block_size) is InvalidArgument, detected before any byte is copied.
//
// Which implementation runs: a view with device == kCpu always uses the CPU path
// (multi-threaded memcpy of contiguous runs). A view with device == kCuda uses the
// CUDA path (kernels/src/kv_copy_cuda.cu) when the library was built with CUDA and
// cudaGetDeviceCount() reports a device; otherwise the call fails with
// InvalidArgument (device memory cannot be reached from the CPU). The first call
// logs (spdlog info, once per process) which path is available. See docs/kernels.md.
#ifndef KERNELS_KV_COPY_H_
#define KERNELS_KV_COPY_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kvstore/types.h"

namespace kvt {

// Where the paged KV cache lives.
enum class KvDevice : uint8_t {
  kCpu = 0,   // host memory, dereferenced by the CPU
  kCuda = 1,  // CUDA device memory (or any CUDA-accessible memory) of the current device
};
std::string_view KvDeviceName(KvDevice device);

// Bytes per element for `dtype` (4, 2, 2, 1, 1, 1, 1 for kF32..kBytes), 0 if unknown.
// Same numbers as kvt::DTypeSize; kept here so the kernels need no libkvstore code.
uint32_t KvElementSize(DType dtype);

// Describes an engine's paged KV cache. A value type that BORROWS the memory it
// points at: the pointed-to tensors must stay allocated for every call using the view.
// Thread-compatible.
//
// Tensors must be dense (C-contiguous) in the physical order stated for each kind
// (shapes from vLLM's attention backends' get_kv_cache_shape and llama.cpp's
// llama-kv-cache.cpp); E = element size, H = num_kv_heads, D = head_dim,
// B = block_size, N = num_blocks, L = num_layers:
//
//   kFlashAttnNHD  layer_base[l] -> [2, N, B, H, D]          (L pointers)
//   kFlashAttnHND  layer_base[l] -> [2, N, H, B, D]          (L pointers)
//   kFlashInfer    layer_base[l] -> [N, 2, B, H, D]          (L pointers)
//   kMLA           layer_base[l] -> [N, B, D] (H must be 1, D = latent dim, e.g. 576)
//   kCrossLayer    layer_base[0] -> [N, L, 2, B, H, D]       (exactly 1 pointer)
//   kLlamaCppRows  k_base[l] -> [N*B, H*D], v_base[l] -> [N*B, H*D]  (L pointers each;
//                  a llama.cpp cell is a slot; block_size 1 with num_blocks = cells is
//                  the natural choice. The transposed V cache (flash attention off) is
//                  not this layout and is not supported.)
//
// For every kind but kLlamaCppRows, k_base and v_base must be empty; for
// kLlamaCppRows, layer_base must be empty.
struct PagedKvView {
  KvDevice device = KvDevice::kCpu;
  KvLayout layout;          // num_layers, num_kv_heads, head_dim, dtype, kind
  uint32_t block_size = 0;  // tokens per block (vLLM default 16)
  uint32_t num_blocks = 0;  // blocks in each layer's tensor
  std::vector<void*> layer_base;
  std::vector<void*> k_base;
  std::vector<void*> v_base;

  // OK, or InvalidArgument naming the field and what was expected: zero or unknown
  // layout fields, unknown dtype/kind/device, kMLA with num_kv_heads != 1, zero
  // block_size/num_blocks, pointer-vector sizes that do not match the kind
  // (the message names both the size found and the size expected), null pointers,
  // or a tensor size that overflows 64 bits.
  absl::Status Validate() const;

  // Number of addressable slots: num_blocks * block_size.
  int64_t num_slots() const { return int64_t{num_blocks} * block_size; }
  // Bytes of one layer's tensor for the kind (for kCrossLayer: the whole tensor;
  // for kLlamaCppRows: one of K or V). REQUIRES: Validate() is OK.
  uint64_t tensor_bytes() const;
  // Payload bytes for `tokens` slots: L * kv_planes * tokens * H * D * E.
  // REQUIRES: Validate() is OK.
  uint64_t payload_bytes(uint64_t tokens) const;
  std::string DebugString() const;
};

// Per-call knobs. Defaults suit the connector; tests lower the thresholds to force
// the multi-threaded and copy-engine paths on small inputs.
struct KvCopyOptions {
  // CPU path: most worker threads (the calling thread counts as one). 0 = hardware
  // concurrency, capped at 8.
  uint32_t max_threads = 0;
  // CPU path: another thread is used only per this many bytes of copy work.
  uint64_t min_bytes_per_thread = 4ull << 20;
  // CUDA path: cudaStream_t to order the copy on (nullptr = the legacy default
  // stream, which orders against all other work on the device). The call returns
  // after the copy completed on that stream.
  void* cuda_stream = nullptr;
  // CUDA path: contiguous runs of at least this many bytes go to the copy engine
  // (cudaMemcpyAsync); smaller, scattered ones to one gather/scatter kernel.
  uint64_t cuda_memcpy_min_bytes = 1ull << 20;
  // CUDA path: refuse (InvalidArgument, nothing copied) instead of staging a
  // pageable host payload through a device buffer. For callers that hand over pinned
  // memory (the host tier's cudaHostAlloc arena) and must know the copy went there
  // directly, with no pageable staging copy. No effect on kCpu views.
  bool forbid_staging = false;

  absl::Status Validate() const;
};

// Copies the KV of `slots` (one entry per chunk token, in token order) from the
// paged cache into `payload` in codec order (see top of file).
// REQUIRES: payload is host memory for kCpu views; for kCuda views it may be device
// memory, pinned host memory (fastest from host: written directly by the kernel), or
// pageable host memory (staged through a device buffer; slower).
// Errors (nothing is written on any error):
//   InvalidArgument: view.Validate() fails; options invalid; payload.size() !=
//     view.payload_bytes(slots.size()) (both sizes named); a slot out of range
//     (index and value named); kCuda view without a usable CUDA device; a kCuda view
//     with options.forbid_staging and a pageable host payload.
//   Internal: a CUDA runtime error (the call and cudaGetErrorString named).
// Thread-safe: concurrent calls are fine as long as their payloads do not overlap.
absl::Status GatherChunk(const PagedKvView& view, std::span<const int64_t> slots,
                         std::span<std::byte> payload, const KvCopyOptions& options = {});

// Copies `payload` (codec order) into the paged cache at `slots`; padding slots (-1)
// are skipped and their payload rows ignored. Bytes of the cache not addressed by a
// slot are never written.
// Errors: as GatherChunk, plus InvalidArgument when a slot other than -1 appears
// twice (the result would depend on copy order). Nothing is written on any error
// detected before the copy starts (all argument errors); a CUDA error mid-copy may
// leave the addressed slots partly written.
// Thread-safe: concurrent calls are fine as long as they write disjoint slots.
absl::Status ScatterChunk(const PagedKvView& view, std::span<const int64_t> slots,
                          std::span<const std::byte> payload, const KvCopyOptions& options = {});

// True when this build has the CUDA path and cudaGetDeviceCount() found a device.
// The first call probes once and logs the result (spdlog info). Thread-safe.
bool CudaCopyAvailable();

}  // namespace kvt

#endif  // KERNELS_KV_COPY_H_
