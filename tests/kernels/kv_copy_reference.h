// Test-only helpers for the copy kernels: host caches of every layout and a naive
// reference gather/scatter written from the engine shapes with generic row-major
// index arithmetic, independent of kernels/src (which uses a copy plan).
#ifndef TESTS_KERNELS_KV_COPY_REFERENCE_H_
#define TESTS_KERNELS_KV_COPY_REFERENCE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/kv_copy.h"

namespace kvt::testing {

struct Shape {
  LayoutKind kind = LayoutKind::kFlashAttnNHD;
  uint32_t layers = 3;
  uint32_t heads = 2;
  uint32_t head_dim = 6;
  uint32_t block_size = 16;
  uint32_t num_blocks = 6;
  DType dtype = DType::kF16;
};

inline uint64_t ElemSize(DType d) {
  return d == DType::kF32 ? 4 : (d == DType::kF16 || d == DType::kBF16) ? 2 : 1;
}

// Row-major offset of `idx` in a tensor of `dims`.
inline uint64_t RowMajor(const std::vector<uint64_t>& dims, const std::vector<uint64_t>& idx) {
  uint64_t off = 0;
  for (size_t i = 0; i < dims.size(); ++i) off = off * dims[i] + idx[i];
  return off;
}

// A paged KV cache in host memory: one byte vector per engine tensor.
struct HostCache {
  Shape shape;
  std::vector<std::vector<std::byte>> k_or_layer;  // layer tensors, or llama K
  std::vector<std::vector<std::byte>> v;           // llama V

  // Engine tensor dims (elements) for `shape.kind`, per tensor.
  std::vector<uint64_t> Dims() const {
    const uint64_t N = shape.num_blocks, B = shape.block_size, H = shape.heads, D = shape.head_dim,
                   L = shape.layers;
    switch (shape.kind) {
      case LayoutKind::kFlashAttnNHD:
        return {2, N, B, H, D};
      case LayoutKind::kFlashAttnHND:
        return {2, N, H, B, D};
      case LayoutKind::kFlashInfer:
        return {N, 2, B, H, D};
      case LayoutKind::kMLA:
        return {N, B, D};
      case LayoutKind::kCrossLayer:
        return {N, L, 2, B, H, D};
      case LayoutKind::kLlamaCppRows:
        return {N * B, H * D};
    }
    return {};
  }

  explicit HostCache(const Shape& s, uint32_t seed) : shape(s) {
    uint64_t elems = 1;
    for (uint64_t d : Dims()) elems *= d;
    const uint64_t bytes = elems * ElemSize(s.dtype);
    const size_t tensors = s.kind == LayoutKind::kCrossLayer ? 1 : s.layers;
    std::mt19937 rng(seed);
    auto fill = [&](std::vector<std::byte>& t) {
      t.resize(bytes);
      for (auto& b : t) b = static_cast<std::byte>(rng());
    };
    k_or_layer.resize(tensors);
    for (auto& t : k_or_layer) fill(t);
    if (s.kind == LayoutKind::kLlamaCppRows) {
      v.resize(tensors);
      for (auto& t : v) fill(t);
    }
  }

  PagedKvView View() {
    PagedKvView view;
    view.device = KvDevice::kCpu;
    view.layout = KvLayout{shape.layers, shape.heads, shape.head_dim, shape.dtype, shape.kind};
    view.block_size = shape.block_size;
    view.num_blocks = shape.num_blocks;
    if (shape.kind == LayoutKind::kLlamaCppRows) {
      for (auto& t : k_or_layer) view.k_base.push_back(t.data());
      for (auto& t : v) view.v_base.push_back(t.data());
    } else {
      for (auto& t : k_or_layer) view.layer_base.push_back(t.data());
    }
    return view;
  }

  uint32_t Planes() const { return shape.kind == LayoutKind::kMLA ? 1 : 2; }

  // Address of element (layer, plane, slot, head, d) from the engine shapes.
  std::byte* Element(uint32_t l, uint32_t p, int64_t slot, uint32_t h, uint32_t d) {
    const uint64_t b = static_cast<uint64_t>(slot) / shape.block_size;
    const uint64_t o = static_cast<uint64_t>(slot) % shape.block_size;
    const uint64_t E = ElemSize(shape.dtype);
    const auto dims = Dims();
    switch (shape.kind) {
      case LayoutKind::kFlashAttnNHD:
        return k_or_layer[l].data() + E * RowMajor(dims, {p, b, o, h, d});
      case LayoutKind::kFlashAttnHND:
        return k_or_layer[l].data() + E * RowMajor(dims, {p, b, h, o, d});
      case LayoutKind::kFlashInfer:
        return k_or_layer[l].data() + E * RowMajor(dims, {b, p, o, h, d});
      case LayoutKind::kMLA:
        return k_or_layer[l].data() + E * RowMajor(dims, {b, o, d});
      case LayoutKind::kCrossLayer:
        return k_or_layer[0].data() + E * RowMajor(dims, {b, l, p, o, h, d});
      case LayoutKind::kLlamaCppRows:
        return (p == 0 ? k_or_layer[l] : v[l]).data() +
               E * RowMajor(dims, {static_cast<uint64_t>(slot), uint64_t{h} * shape.head_dim + d});
    }
    return nullptr;
  }

  uint64_t PayloadBytes(size_t tokens) const {
    return uint64_t{shape.layers} * Planes() * tokens * shape.heads * shape.head_dim *
           ElemSize(shape.dtype);
  }

  // Naive element-by-element gather (to_payload) or scatter, payload order
  // [layer][plane][token][head][d]; padding (-1) skipped.
  void Reference(const std::vector<int64_t>& slots, std::vector<std::byte>& payload,
                 bool to_payload) {
    const uint64_t E = ElemSize(shape.dtype);
    const std::vector<uint64_t> pdims = {shape.layers, Planes(), slots.size(), shape.heads,
                                         shape.head_dim};
    for (uint32_t l = 0; l < shape.layers; ++l)
      for (uint32_t p = 0; p < Planes(); ++p)
        for (uint64_t t = 0; t < slots.size(); ++t) {
          if (slots[t] == -1) continue;
          for (uint32_t h = 0; h < shape.heads; ++h)
            for (uint32_t d = 0; d < shape.head_dim; ++d) {
              std::byte* pay = payload.data() + E * RowMajor(pdims, {l, p, t, h, d});
              std::byte* c = Element(l, p, slots[t], h, d);
              if (to_payload) {
                std::memcpy(pay, c, E);
              } else {
                std::memcpy(c, pay, E);
              }
            }
        }
  }

  bool SameBytes(const HostCache& o) const { return k_or_layer == o.k_or_layer && v == o.v; }
};

// A slot mapping that covers the interesting cases: a partial block starting
// mid-block, a full block, a partial block ending mid-block, padding, scattered
// single slots, and a run of consecutive slots crossing a block boundary.
// All non-padding slots are distinct.
inline std::vector<int64_t> MixedSlots(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  const int64_t B = s.block_size, N = s.num_blocks;
  std::vector<int64_t> blocks(N);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::vector<int64_t> out;
  for (int64_t o = B / 2; o < B; ++o) out.push_back(blocks[0] * B + o);      // tail of a block
  for (int64_t o = 0; o < B; ++o) out.push_back(blocks[1] * B + o);          // full block
  for (int64_t o = 0; o < B / 3 + 1; ++o) out.push_back(blocks[2] * B + o);  // head of a block
  out.push_back(-1);
  out.push_back(-1);
  // Consecutive slots across the boundary between block b and b+1.
  const int64_t b = blocks[3] == N - 1 ? blocks[3] - 1 : blocks[3];
  for (int64_t x = b * B + B - 2; x < b * B + B + 2 && x < N * B; ++x) {
    if (x >= 0) out.push_back(x);
  }
  for (int i = 0; i < 6; ++i) out.push_back(static_cast<int64_t>(rng() % (N * B)));
  out.push_back(-1);
  // Keep the first occurrence of every real slot.
  std::vector<int64_t> unique;
  std::vector<bool> seen(N * B, false);
  for (int64_t x : out) {
    if (x == -1) {
      unique.push_back(x);
    } else if (!seen[x]) {
      seen[x] = true;
      unique.push_back(x);
    }
  }
  return unique;
}

inline std::string KindName(LayoutKind k) {
  switch (k) {
    case LayoutKind::kFlashAttnNHD:
      return "FlashAttnNHD";
    case LayoutKind::kFlashAttnHND:
      return "FlashAttnHND";
    case LayoutKind::kFlashInfer:
      return "FlashInfer";
    case LayoutKind::kMLA:
      return "MLA";
    case LayoutKind::kCrossLayer:
      return "CrossLayer";
    case LayoutKind::kLlamaCppRows:
      return "LlamaCppRows";
  }
  return "Unknown";
}

inline Shape MakeShape(LayoutKind kind, DType dtype, uint32_t block_size) {
  Shape s;
  s.kind = kind;
  s.dtype = dtype;
  s.block_size = block_size;
  s.num_blocks = block_size == 1 ? 48 : 6;
  if (kind == LayoutKind::kMLA) {
    s.heads = 1;
    s.head_dim = 9;  // odd latent size: exercises unaligned rows
  } else {
    s.heads = 2;
    s.head_dim = dtype == DType::kI8 ? 5 : 6;
  }
  return s;
}

inline const std::vector<LayoutKind>& AllKinds() {
  static const std::vector<LayoutKind> kinds = {
      LayoutKind::kFlashAttnNHD, LayoutKind::kFlashAttnHND, LayoutKind::kFlashInfer,
      LayoutKind::kMLA,          LayoutKind::kCrossLayer,   LayoutKind::kLlamaCppRows};
  return kinds;
}

}  // namespace kvt::testing

#endif  // TESTS_KERNELS_KV_COPY_REFERENCE_H_
