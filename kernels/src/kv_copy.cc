// Validation, copy-plan construction and CPU/CUDA dispatch for kernels/kv_copy.h.
#include "kernels/kv_copy.h"

#include <algorithm>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "copy_exec.h"
#include "copy_plan.h"
#include "kv_copy_emul.h"
#include "spdlog/spdlog.h"

#ifndef KVT_HAVE_CUDA
#define KVT_HAVE_CUDA 0
#endif

namespace kvt {
namespace {

using kernels_internal::CopyDirection;
using kernels_internal::CopySegment;

bool KnownKind(LayoutKind kind) {
  switch (kind) {
    case LayoutKind::kFlashAttnNHD:
    case LayoutKind::kFlashAttnHND:
    case LayoutKind::kFlashInfer:
    case LayoutKind::kMLA:
    case LayoutKind::kCrossLayer:
    case LayoutKind::kLlamaCppRows:
      return true;
  }
  return false;
}

std::string_view KindName(LayoutKind kind) {
  switch (kind) {
    case LayoutKind::kFlashAttnNHD:
      return "kFlashAttnNHD";
    case LayoutKind::kFlashAttnHND:
      return "kFlashAttnHND";
    case LayoutKind::kFlashInfer:
      return "kFlashInfer";
    case LayoutKind::kMLA:
      return "kMLA";
    case LayoutKind::kCrossLayer:
      return "kCrossLayer";
    case LayoutKind::kLlamaCppRows:
      return "kLlamaCppRows";
  }
  return "unknown";
}

// a * b, or false on 64-bit overflow.
bool MulOk(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }

absl::Status CheckPointers(const std::string& name, const std::vector<void*>& ptrs, size_t expected,
                           const std::string& why) {
  if (ptrs.size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat("PagedKvView.", name, " has ", ptrs.size(),
                                                   " pointers; expected ", expected, " (", why,
                                                   ")"));
  }
  for (size_t i = 0; i < ptrs.size(); ++i) {
    if (ptrs[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("PagedKvView.", name, "[", i, "] is null; expected a tensor pointer"));
    }
  }
  return absl::OkStatus();
}

// Logs once which path kCuda views will take. Returns the cached probe result.
bool ProbeCuda() {
  static const bool available = [] {
#if KVT_HAVE_CUDA
    kernels_internal::CudaResult result;
    const int count = kernels_internal::CudaDeviceCount(&result);
    if (count > 0) {
      spdlog::info(
          "kvtier kernels: {} CUDA device(s) found; kCuda views use the CUDA copy "
          "kernels, kCpu views the CPU path",
          count);
      return true;
    }
    spdlog::info(
        "kvtier kernels: built with CUDA but no usable device ({}); copy kernels use "
        "the CPU path (kCuda views are rejected)",
        result.error != 0 ? result.what : std::string("0 devices"));
    return false;
#else
    spdlog::info(
        "kvtier kernels: built without CUDA; copy kernels use the CPU path "
        "(kCuda views are rejected)");
    return false;
#endif
  }();
  return available;
}

// True for kinds whose slot s and s+1 are adjacent in memory even across a block
// boundary (the block index is the outermost of the per-plane dims).
bool SlotsLinear(LayoutKind kind) {
  return kind == LayoutKind::kFlashAttnNHD || kind == LayoutKind::kMLA ||
         kind == LayoutKind::kLlamaCppRows;
}

// Address of token row (slot) for (layer, plane, head 0; for HND: head `head`).
// All products fit: Validate() proved the tensor size fits in 64 bits.
uint64_t RowAddress(const PagedKvView& v, uint32_t layer, uint32_t plane, int64_t slot,
                    uint32_t head) {
  const uint64_t E = KvElementSize(v.layout.dtype);
  const uint64_t H = v.layout.num_kv_heads, D = v.layout.head_dim;
  const uint64_t B = v.block_size, N = v.num_blocks, L = v.layout.num_layers;
  const uint64_t s = static_cast<uint64_t>(slot), b = s / B, o = s % B;
  const uint64_t row = H * D * E;
  switch (v.layout.kind) {
    case LayoutKind::kFlashAttnNHD:
      return reinterpret_cast<uintptr_t>(v.layer_base[layer]) + (plane * N * B + s) * row;
    case LayoutKind::kFlashAttnHND:
      return reinterpret_cast<uintptr_t>(v.layer_base[layer]) +
             (((plane * N + b) * H + head) * B + o) * D * E;
    case LayoutKind::kFlashInfer:
      return reinterpret_cast<uintptr_t>(v.layer_base[layer]) + ((b * 2 + plane) * B + o) * row;
    case LayoutKind::kMLA:
      return reinterpret_cast<uintptr_t>(v.layer_base[layer]) + s * row;
    case LayoutKind::kCrossLayer:
      return reinterpret_cast<uintptr_t>(v.layer_base[0]) +
             (((b * L + layer) * 2 + plane) * B + o) * row;
    case LayoutKind::kLlamaCppRows:
      return reinterpret_cast<uintptr_t>(plane == 0 ? v.k_base[layer] : v.v_base[layer]) + s * row;
  }
  return 0;
}

struct Run {
  uint32_t first_token;
  int64_t first_slot;
  uint32_t tokens;
};

// Maximal runs of consecutive tokens with consecutive slots that are adjacent in
// the cache (same block unless the kind is slot-linear). Padding ends a run.
std::vector<Run> FindRuns(const PagedKvView& v, std::span<const int64_t> slots) {
  std::vector<Run> runs;
  const bool linear = SlotsLinear(v.layout.kind);
  const int64_t B = v.block_size;
  for (uint32_t t = 0; t < slots.size(); ++t) {
    const int64_t s = slots[t];
    if (s < 0) continue;
    if (!runs.empty()) {
      Run& r = runs.back();
      const int64_t last = r.first_slot + r.tokens - 1;
      if (r.first_token + r.tokens == t && s == last + 1 && (linear || s / B == last / B)) {
        ++r.tokens;
        continue;
      }
    }
    runs.push_back(Run{t, s, 1});
  }
  return runs;
}

std::vector<CopySegment> BuildPlan(const PagedKvView& v, std::span<const int64_t> slots) {
  const std::vector<Run> runs = FindRuns(v, slots);
  const uint64_t E = KvElementSize(v.layout.dtype);
  const uint64_t H = v.layout.num_kv_heads, D = v.layout.head_dim;
  const uint64_t row = H * D * E, T = slots.size();
  const uint32_t planes = v.layout.kv_planes();
  const bool hnd = v.layout.kind == LayoutKind::kFlashAttnHND;
  std::vector<CopySegment> plan;
  plan.reserve(runs.size() * v.layout.num_layers * planes * (hnd ? H : 1));
  for (uint32_t l = 0; l < v.layout.num_layers; ++l) {
    for (uint32_t p = 0; p < planes; ++p) {
      const uint64_t plane_offset = (uint64_t{l} * planes + p) * T * row;
      for (const Run& r : runs) {
        const uint64_t payload = plane_offset + r.first_token * row;
        if (!hnd) {
          plan.push_back(CopySegment{RowAddress(v, l, p, r.first_slot, 0), payload, row, row,
                                     r.tokens, static_cast<uint32_t>(row)});
          continue;
        }
        // HND: within a block, head h's tokens are contiguous rows of D elements.
        for (uint32_t h = 0; h < H; ++h) {
          plan.push_back(CopySegment{RowAddress(v, l, p, r.first_slot, h), payload + h * D * E,
                                     D * E, row, r.tokens, static_cast<uint32_t>(D * E)});
        }
      }
    }
  }
  return plan;
}

absl::Status CheckCall(const PagedKvView& view, std::span<const int64_t> slots, size_t payload_size,
                       const KvCopyOptions& options, bool scatter) {
  if (absl::Status s = view.Validate(); !s.ok()) return s;
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (slots.size() > UINT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("slots has ", slots.size(), " entries; expected at most 2^32-1"));
  }
  uint64_t want = 0;
  if (!MulOk(view.payload_bytes(1), slots.size(), &want) || payload_size != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "payload is ", payload_size, " bytes; expected ", want, " (", slots.size(), " slots x ",
        view.payload_bytes(1), " bytes per token for ", view.DebugString(), ")"));
  }
  const int64_t n = view.num_slots();
  for (size_t i = 0; i < slots.size(); ++i) {
    if (slots[i] == -1) continue;
    if (slots[i] < 0 || slots[i] >= n) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "slots[%d] = %d is out of range; expected -1 (padding) or a slot in [0, %d) "
          "(num_blocks %d x block_size %d)",
          i, slots[i], n, view.num_blocks, view.block_size));
    }
  }
  if (scatter) {
    std::vector<int64_t> sorted;
    sorted.reserve(slots.size());
    for (int64_t s : slots) {
      if (s >= 0) sorted.push_back(s);
    }
    std::sort(sorted.begin(), sorted.end());
    auto dup = std::adjacent_find(sorted.begin(), sorted.end());
    if (dup != sorted.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("slot ", *dup, " appears more than once; a scatter expects distinct slots"));
    }
  }
  if (view.device == KvDevice::kCuda && !ProbeCuda()) {
    return absl::InvalidArgumentError(
        absl::StrCat("PagedKvView.device is kCuda but ",
                     KVT_HAVE_CUDA ? "no CUDA device is usable in this process"
                                   : "this build has no CUDA support (KVT_HAVE_CUDA off)",
                     "; pass a host (kCpu) view"));
  }
  return absl::OkStatus();
}

uint32_t ThreadCap(const KvCopyOptions& o) {
  if (o.max_threads != 0) return o.max_threads;
  return std::clamp<uint32_t>(std::thread::hardware_concurrency(), 1, 8);
}

absl::Status Execute(const PagedKvView& view, std::span<const int64_t> slots, std::byte* payload,
                     uint64_t payload_bytes, const KvCopyOptions& options,
                     CopyDirection direction) {
  const std::vector<CopySegment> plan = BuildPlan(view, slots);
  if (view.device == KvDevice::kCpu) {
    ProbeCuda();  // log the path once, whichever device the first view names
    kernels_internal::ExecuteOnCpu(plan.data(), plan.size(), payload, direction, ThreadCap(options),
                                   options.min_bytes_per_thread);
    return absl::OkStatus();
  }
#if KVT_HAVE_CUDA
  for (size_t i = 0; i < view.layer_base.size() + view.k_base.size() + view.v_base.size(); ++i) {
    const size_t nl = view.layer_base.size(), nk = view.k_base.size();
    const void* p = i < nl        ? view.layer_base[i]
                    : i < nl + nk ? view.k_base[i - nl]
                                  : view.v_base[i - nl - nk];
    if (!kernels_internal::CudaCanAccess(p)) {
      return absl::InvalidArgumentError(
          absl::StrCat("PagedKvView.device is kCuda but tensor pointer ", i,
                       " is not CUDA-accessible memory on the current device"));
    }
  }
  if (options.forbid_staging && payload_bytes > 0 && !kernels_internal::CudaCanAccess(payload)) {
    return absl::InvalidArgumentError(
        "KvCopyOptions.forbid_staging is set but the payload is pageable host memory (not "
        "device, pinned or registered memory); it would be staged through a device buffer");
  }
  kernels_internal::CudaResult r = kernels_internal::ExecuteOnCuda(
      plan.data(), plan.size(), payload, payload_bytes, direction, options.cuda_stream,
      options.cuda_memcpy_min_bytes, std::find(slots.begin(), slots.end(), -1) != slots.end());
  if (r.error != 0) {
    return absl::InternalError(absl::StrCat("CUDA copy failed: ", r.what));
  }
  return absl::OkStatus();
#else
  (void)payload_bytes;
  return absl::InvalidArgumentError("PagedKvView.device is kCuda but this build has no CUDA");
#endif
}

}  // namespace

std::string_view KvDeviceName(KvDevice device) {
  switch (device) {
    case KvDevice::kCpu:
      return "cpu";
    case KvDevice::kCuda:
      return "cuda";
  }
  return "unknown";
}

uint32_t KvElementSize(DType dtype) { return static_cast<uint32_t>(DTypeSize(dtype)); }

absl::Status PagedKvView::Validate() const {
  if (device != KvDevice::kCpu && device != KvDevice::kCuda) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PagedKvView.device = ", static_cast<int>(device), "; expected kCpu (0) or kCuda (1)"));
  }
  if (layout.num_layers == 0) {
    return absl::InvalidArgumentError("PagedKvView.layout.num_layers is 0; expected >= 1");
  }
  if (layout.num_kv_heads == 0) {
    return absl::InvalidArgumentError("PagedKvView.layout.num_kv_heads is 0; expected >= 1");
  }
  if (layout.head_dim == 0) {
    return absl::InvalidArgumentError("PagedKvView.layout.head_dim is 0; expected >= 1");
  }
  if (KvElementSize(layout.dtype) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("PagedKvView.layout.dtype = ", static_cast<int>(layout.dtype),
                     " is unknown; expected a kvt::DType value"));
  }
  if (!KnownKind(layout.kind)) {
    return absl::InvalidArgumentError(
        absl::StrCat("PagedKvView.layout.kind = ", static_cast<int>(layout.kind),
                     " is unknown; expected a kvt::LayoutKind"));
  }
  if (layout.kind == LayoutKind::kMLA && layout.num_kv_heads != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("PagedKvView.layout.num_kv_heads = ", layout.num_kv_heads,
                     " for kMLA; expected 1 (one latent vector per token)"));
  }
  if (block_size == 0) {
    return absl::InvalidArgumentError("PagedKvView.block_size is 0; expected >= 1");
  }
  if (num_blocks == 0) {
    return absl::InvalidArgumentError("PagedKvView.num_blocks is 0; expected >= 1");
  }
  // Tensor size must fit 64 bits so every offset computed later does.
  uint64_t bytes = 1;
  for (uint64_t f : {uint64_t{num_blocks}, uint64_t{block_size}, uint64_t{layout.num_kv_heads},
                     uint64_t{layout.head_dim}, uint64_t{KvElementSize(layout.dtype)},
                     uint64_t{layout.num_layers}, uint64_t{2}}) {
    if (!MulOk(bytes, f, &bytes)) {
      return absl::InvalidArgumentError(
          absl::StrCat("PagedKvView tensor size overflows 64 bits: ", DebugString()));
    }
  }
  const size_t L = layout.num_layers;
  const std::string kind(KindName(layout.kind));
  if (layout.kind == LayoutKind::kLlamaCppRows) {
    if (!layer_base.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("PagedKvView.layer_base has ", layer_base.size(),
                       " pointers; expected 0 for kLlamaCppRows (use k_base and v_base)"));
    }
    if (absl::Status s = CheckPointers("k_base", k_base, L, "one K tensor per layer"); !s.ok()) {
      return s;
    }
    return CheckPointers("v_base", v_base, L, "one V tensor per layer");
  }
  if (!k_base.empty() || !v_base.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("PagedKvView.k_base/v_base have ", k_base.size(), "/", v_base.size(),
                     " pointers; expected 0/0 for ", kind, " (use layer_base)"));
  }
  if (layout.kind == LayoutKind::kCrossLayer) {
    return CheckPointers("layer_base", layer_base, 1, "kCrossLayer is one tensor for all layers");
  }
  return CheckPointers("layer_base", layer_base, L,
                       absl::StrCat("one tensor per layer for ", kind, ", num_layers = ", L));
}

uint64_t PagedKvView::tensor_bytes() const {
  const uint64_t per_plane = uint64_t{num_blocks} * block_size * layout.num_kv_heads *
                             layout.head_dim * KvElementSize(layout.dtype);
  switch (layout.kind) {
    case LayoutKind::kMLA:
    case LayoutKind::kLlamaCppRows:
      return per_plane;
    case LayoutKind::kCrossLayer:
      return per_plane * 2 * layout.num_layers;
    default:
      return per_plane * 2;
  }
}

uint64_t PagedKvView::payload_bytes(uint64_t tokens) const {
  return uint64_t{layout.num_layers} * layout.kv_planes() * tokens * layout.num_kv_heads *
         layout.head_dim * KvElementSize(layout.dtype);
}

std::string PagedKvView::DebugString() const {
  return absl::StrFormat(
      "PagedKvView{device=%s kind=%s layers=%u kv_heads=%u head_dim=%u elem=%uB "
      "block_size=%u num_blocks=%u}",
      std::string(KvDeviceName(device)), std::string(KindName(layout.kind)), layout.num_layers,
      layout.num_kv_heads, layout.head_dim, KvElementSize(layout.dtype), block_size, num_blocks);
}

absl::Status KvCopyOptions::Validate() const {
  if (max_threads > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("KvCopyOptions.max_threads = ", max_threads, "; expected 0..256"));
  }
  return absl::OkStatus();
}

bool CudaCopyAvailable() { return ProbeCuda(); }

absl::Status GatherChunk(const PagedKvView& view, std::span<const int64_t> slots,
                         std::span<std::byte> payload, const KvCopyOptions& options) {
  if (absl::Status s = CheckCall(view, slots, payload.size(), options, false); !s.ok()) {
    return s;
  }
  return Execute(view, slots, payload.data(), payload.size(), options, CopyDirection::kGather);
}

absl::Status ScatterChunk(const PagedKvView& view, std::span<const int64_t> slots,
                          std::span<const std::byte> payload, const KvCopyOptions& options) {
  if (absl::Status s = CheckCall(view, slots, payload.size(), options, true); !s.ok()) {
    return s;
  }
  // The executor reads through this pointer only (direction kScatter).
  return Execute(view, slots, const_cast<std::byte*>(payload.data()), payload.size(), options,
                 CopyDirection::kScatter);
}

namespace kernels_internal {

absl::Status EmulatedCudaGather(const PagedKvView& view, std::span<const int64_t> slots,
                                std::span<std::byte> payload, const EmulOptions& options,
                                CudaEmulStats* stats) {
  PagedKvView host = view;
  host.device = KvDevice::kCpu;
  if (absl::Status s = CheckCall(host, slots, payload.size(), KvCopyOptions{}, false); !s.ok()) {
    return s;
  }
  const std::vector<CopySegment> plan = BuildPlan(host, slots);
  EmulateCudaExecute(plan.data(), plan.size(), payload.data(), CopyDirection::kGather,
                     options.memcpy_min_bytes, options.max_grid, stats);
  return absl::OkStatus();
}

absl::Status EmulatedCudaScatter(const PagedKvView& view, std::span<const int64_t> slots,
                                 std::span<const std::byte> payload, const EmulOptions& options,
                                 CudaEmulStats* stats) {
  PagedKvView host = view;
  host.device = KvDevice::kCpu;
  if (absl::Status s = CheckCall(host, slots, payload.size(), KvCopyOptions{}, true); !s.ok()) {
    return s;
  }
  const std::vector<CopySegment> plan = BuildPlan(host, slots);
  // The executor reads through this pointer only (direction kScatter).
  EmulateCudaExecute(plan.data(), plan.size(), const_cast<std::byte*>(payload.data()),
                     CopyDirection::kScatter, options.memcpy_min_bytes, options.max_grid, stats);
  return absl::OkStatus();
}

}  // namespace kernels_internal

}  // namespace kvt
