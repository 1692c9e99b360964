// CUDA copy kernels vs the CPU path, bit for bit, for every layout and element
// size, odd and 16-byte row sizes, with the payload in pinned host, pageable host and
// device memory, and with both the kernel and the copy-engine (cudaMemcpyAsync)
// paths. Label: gpu.
// Skipped (GTEST_SKIP with the reason) when no CUDA device is usable.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/kv_copy.h"
#include "kv_copy_reference.h"

namespace kvt {
namespace {

using testing::HostCache;
using testing::MixedSlots;
using testing::Shape;

// Device copies of every tensor of a HostCache.
struct DeviceCache {
  std::vector<void*> k_or_layer, v;
  ~DeviceCache() {
    for (void* p : k_or_layer) cudaFree(p);
    for (void* p : v) cudaFree(p);
  }
};

void Upload(const HostCache& h, DeviceCache& d) {
  auto up = [](const std::vector<std::byte>& t) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, t.size()), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(p, t.data(), t.size(), cudaMemcpyHostToDevice), cudaSuccess);
    return p;
  };
  for (const auto& t : h.k_or_layer) d.k_or_layer.push_back(up(t));
  for (const auto& t : h.v) d.v.push_back(up(t));
}

void Download(const DeviceCache& d, HostCache& h) {
  for (size_t i = 0; i < d.k_or_layer.size(); ++i)
    ASSERT_EQ(cudaMemcpy(h.k_or_layer[i].data(), d.k_or_layer[i], h.k_or_layer[i].size(),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
  for (size_t i = 0; i < d.v.size(); ++i)
    ASSERT_EQ(cudaMemcpy(h.v[i].data(), d.v[i], h.v[i].size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
}

PagedKvView DeviceView(HostCache& h, const DeviceCache& d) {
  PagedKvView v = h.View();
  v.device = KvDevice::kCuda;
  if (!v.layer_base.empty()) v.layer_base = d.k_or_layer;
  if (!v.k_base.empty()) {
    v.k_base = d.k_or_layer;
    v.v_base = d.v;
  }
  return v;
}

enum class PayloadMem { kPinned, kPageable, kDevice };

// A payload buffer of `bytes` in the given memory, filled with `fill`.
struct Payload {
  PayloadMem mem;
  size_t bytes;
  std::byte* ptr = nullptr;
  std::vector<std::byte> pageable;
  Payload(PayloadMem m, size_t n, std::byte fill) : mem(m), bytes(n) {
    if (m == PayloadMem::kPinned) {
      EXPECT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&ptr), n + 1, cudaHostAllocDefault),
                cudaSuccess);
      std::memset(ptr, static_cast<int>(fill), n);
    } else if (m == PayloadMem::kDevice) {
      EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&ptr), n + 1), cudaSuccess);
      EXPECT_EQ(cudaMemset(ptr, static_cast<int>(fill), n), cudaSuccess);
    } else {
      pageable.assign(n + 1, fill);
      ptr = pageable.data();
    }
  }
  ~Payload() {
    if (mem == PayloadMem::kPinned) cudaFreeHost(ptr);
    if (mem == PayloadMem::kDevice) cudaFree(ptr);
  }
  std::vector<std::byte> Read() const {
    std::vector<std::byte> out(bytes);
    if (bytes) {
      EXPECT_EQ(cudaMemcpy(out.data(), ptr, bytes, cudaMemcpyDefault), cudaSuccess);
    }
    return out;
  }
  void Write(const std::vector<std::byte>& in) {
    if (bytes) {
      EXPECT_EQ(cudaMemcpy(ptr, in.data(), bytes, cudaMemcpyDefault), cudaSuccess);
    }
  }
  std::span<std::byte> span() { return {ptr, bytes}; }
};

// (kind, dtype, block_size, payload memory, memcpy threshold, 16-byte rows)
using Param = std::tuple<LayoutKind, DType, uint32_t, PayloadMem, uint64_t, bool>;

class KvCopyGpuTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    if (!CudaCopyAvailable()) {
      GTEST_SKIP() << "no usable CUDA device (cudaGetDeviceCount found none or failed); "
                      "CUDA-vs-CPU checks need a GPU machine (bench/gpu_check.sh)";
    }
  }
  Shape shape() const {
    Shape s = testing::MakeShape(std::get<0>(GetParam()), std::get<1>(GetParam()),
                                 std::get<2>(GetParam()));
    // Rows of whole 16-byte units (the kernel's uint4 path, as real head sizes are):
    // head_dim 8 x 2 heads, MLA latent 64.
    if (std::get<5>(GetParam())) s.head_dim = s.kind == LayoutKind::kMLA ? 64 : 8;
    return s;
  }
  KvCopyOptions options() const {
    KvCopyOptions o;
    o.cuda_memcpy_min_bytes = std::get<4>(GetParam());
    return o;
  }
};

TEST_P(KvCopyGpuTest, GatherMatchesCpuBitForBit) {
  HostCache host(shape(), 11);
  DeviceCache dev;
  Upload(host, dev);
  const std::vector<int64_t> slots = MixedSlots(shape(), 12);
  const size_t bytes = host.PayloadBytes(slots.size());
  std::vector<std::byte> cpu(bytes, std::byte{0x5A});
  ASSERT_TRUE(GatherChunk(host.View(), slots, cpu).ok());
  Payload gpu(std::get<3>(GetParam()), bytes, std::byte{0x5A});
  absl::Status s = GatherChunk(DeviceView(host, dev), slots, gpu.span(), options());
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(gpu.Read(), cpu);
}

TEST_P(KvCopyGpuTest, ScatterMatchesCpuBitForBit) {
  HostCache host(shape(), 13);
  DeviceCache dev;
  Upload(host, dev);
  const std::vector<int64_t> slots = MixedSlots(shape(), 14);
  std::vector<std::byte> data(host.PayloadBytes(slots.size()));
  std::mt19937 rng(15);
  for (auto& b : data) b = static_cast<std::byte>(rng());
  Payload gpu(std::get<3>(GetParam()), data.size(), std::byte{0});
  gpu.Write(data);
  absl::Status s = ScatterChunk(DeviceView(host, dev), slots, gpu.span(), options());
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(ScatterChunk(host.View(), slots, data).ok());
  HostCache back(shape(), 99);
  Download(dev, back);
  EXPECT_TRUE(back.SameBytes(host));
}

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  auto [kind, dtype, block_size, mem, threshold, aligned] = info.param;
  const char* m = mem == PayloadMem::kPinned   ? "Pinned"
                  : mem == PayloadMem::kDevice ? "Device"
                                               : "Pageable";
  return absl::StrCat(testing::KindName(kind), "_E", testing::ElemSize(dtype), "_B", block_size,
                      "_", m, threshold == 0 ? "_CopyEngine" : "_Kernel", aligned ? "_Rows16" : "");
}

INSTANTIATE_TEST_SUITE_P(
    AllLayouts, KvCopyGpuTest,
    ::testing::Combine(::testing::ValuesIn(testing::AllKinds()),
                       ::testing::Values(DType::kF32, DType::kBF16, DType::kI8),
                       ::testing::Values(1u, 16u),
                       ::testing::Values(PayloadMem::kPinned, PayloadMem::kPageable,
                                         PayloadMem::kDevice),
                       ::testing::Values(uint64_t{0}, uint64_t{1} << 40), ::testing::Values(false)),
    ParamName);

// 16-byte-aligned rows, so the kernel copies uint4 units (MakeShape's odd head sizes
// reach only the 4- and 1-byte paths).
INSTANTIATE_TEST_SUITE_P(
    AlignedRows, KvCopyGpuTest,
    ::testing::Combine(::testing::ValuesIn(testing::AllKinds()),
                       ::testing::Values(DType::kF32, DType::kBF16, DType::kFP8E4M3),
                       ::testing::Values(1u, 16u),
                       ::testing::Values(PayloadMem::kPinned, PayloadMem::kPageable,
                                         PayloadMem::kDevice),
                       ::testing::Values(uint64_t{0}, uint64_t{1} << 40), ::testing::Values(true)),
    ParamName);

TEST(KvCopyGpuSetupTest, ReportsWhetherCudaIsUsable) {
  if (!CudaCopyAvailable()) {
    GTEST_SKIP() << "no usable CUDA device: the CUDA path is built but cannot run here";
  }
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_GE(count, 1);
}

}  // namespace
}  // namespace kvt
