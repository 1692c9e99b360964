// CPU copy kernels: gather/scatter against a naive reference for every layout,
// element sizes 1/2/4, several block sizes, partial blocks and padding; error paths.
#include "kernels/kv_copy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kv_copy_reference.h"

namespace kvt {
namespace {

using ::testing::HasSubstr;
using testing::HostCache;
using testing::MixedSlots;
using testing::Shape;

constexpr std::byte kSentinel{0xAB};

// (kind, dtype, block_size, threads): threads > 1 forces the multi-threaded path.
using Param = std::tuple<LayoutKind, DType, uint32_t, uint32_t>;

class KvCopyLayoutTest : public ::testing::TestWithParam<Param> {
 protected:
  Shape shape() const {
    auto [kind, dtype, block_size, threads] = GetParam();
    return testing::MakeShape(kind, dtype, block_size);
  }
  KvCopyOptions options() const {
    KvCopyOptions o;
    o.max_threads = std::get<3>(GetParam());
    o.min_bytes_per_thread = 1;  // split even tiny chunks when threads > 1
    return o;
  }
};

TEST_P(KvCopyLayoutTest, GatherMatchesReferenceAndLeavesPaddingRowsUntouched) {
  HostCache cache(shape(), 1);
  const std::vector<int64_t> slots = MixedSlots(shape(), 2);
  std::vector<std::byte> got(cache.PayloadBytes(slots.size()), kSentinel);
  std::vector<std::byte> want = got;
  ASSERT_TRUE(GatherChunk(cache.View(), slots, got, options()).ok());
  cache.Reference(slots, want, /*to_payload=*/true);
  ASSERT_EQ(got, want);
  // The first padding token's K row in layer 0 still holds the sentinel.
  const auto pad = std::find(slots.begin(), slots.end(), -1) - slots.begin();
  const uint64_t row =
      uint64_t{shape().heads} * shape().head_dim * testing::ElemSize(shape().dtype);
  for (uint64_t i = 0; i < row; ++i) EXPECT_EQ(got[pad * row + i], kSentinel);
}

TEST_P(KvCopyLayoutTest, ScatterMatchesReferenceAndWritesOnlyAddressedSlots) {
  HostCache got(shape(), 3);
  HostCache want(shape(), 3);
  const std::vector<int64_t> slots = MixedSlots(shape(), 4);
  std::vector<std::byte> payload(got.PayloadBytes(slots.size()));
  std::mt19937 rng(5);
  for (auto& b : payload) b = static_cast<std::byte>(rng());
  ASSERT_TRUE(ScatterChunk(got.View(), slots, payload, options()).ok());
  want.Reference(slots, payload, /*to_payload=*/false);
  EXPECT_TRUE(got.SameBytes(want));
  EXPECT_FALSE(got.SameBytes(HostCache(shape(), 3)));  // it did write something
}

TEST_P(KvCopyLayoutTest, GatherThenScatterRoundTripsBitForBit) {
  HostCache src(shape(), 6);
  const std::vector<int64_t> slots = MixedSlots(shape(), 7);
  std::vector<std::byte> payload(src.PayloadBytes(slots.size()), std::byte{0});
  ASSERT_TRUE(GatherChunk(src.View(), slots, payload, options()).ok());

  HostCache dst(shape(), 8);
  // Scatter into different slots of another cache (reversed order), gather back.
  std::vector<int64_t> other(slots.rbegin(), slots.rend());
  std::vector<std::byte> reversed(payload.size());
  const uint64_t per_token = src.PayloadBytes(1) / (src.Planes() * shape().layers);
  const size_t T = slots.size();
  for (size_t lp = 0; lp < size_t{src.Planes()} * shape().layers; ++lp)
    for (size_t t = 0; t < T; ++t)
      std::memcpy(&reversed[(lp * T + (T - 1 - t)) * per_token], &payload[(lp * T + t) * per_token],
                  per_token);
  ASSERT_TRUE(ScatterChunk(dst.View(), other, reversed, options()).ok());
  std::vector<std::byte> back(payload.size(), std::byte{0});
  ASSERT_TRUE(GatherChunk(dst.View(), slots, back, options()).ok());
  EXPECT_EQ(back, payload);
}

TEST_P(KvCopyLayoutTest, OutOfRangeSlotIsRejectedBeforeAnyCopy) {
  HostCache cache(shape(), 9);
  HostCache untouched(shape(), 9);
  std::vector<int64_t> slots = MixedSlots(shape(), 10);
  const int64_t bad = int64_t{shape().num_blocks} * shape().block_size;
  slots.push_back(bad);
  std::vector<std::byte> payload(cache.PayloadBytes(slots.size()), kSentinel);
  const std::vector<std::byte> before = payload;
  absl::Status g = GatherChunk(cache.View(), slots, payload, options());
  EXPECT_EQ(g.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(g.message(), HasSubstr(absl::StrCat("slots[", slots.size() - 1, "] = ", bad)));
  EXPECT_EQ(payload, before);
  absl::Status s = ScatterChunk(cache.View(), slots, payload, options());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(cache.SameBytes(untouched));
}

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  auto [kind, dtype, block_size, threads] = info.param;
  return absl::StrCat(testing::KindName(kind), "_E", testing::ElemSize(dtype), "_B", block_size,
                      "_T", threads);
}

INSTANTIATE_TEST_SUITE_P(
    AllLayouts, KvCopyLayoutTest,
    ::testing::Combine(::testing::ValuesIn(testing::AllKinds()),
                       ::testing::Values(DType::kF32, DType::kBF16, DType::kI8),
                       ::testing::Values(1u, 3u, 16u), ::testing::Values(1u, 3u)),
    ParamName);

// ---- Error paths and edge cases ---------------------------------------------

Shape Nhd() { return testing::MakeShape(LayoutKind::kFlashAttnNHD, DType::kF16, 16); }

TEST(KvCopyTest, EmptySlotsCopyNothing) {
  HostCache cache(Nhd(), 1);
  std::vector<std::byte> payload;
  EXPECT_TRUE(GatherChunk(cache.View(), {}, payload).ok());
  EXPECT_TRUE(ScatterChunk(cache.View(), {}, payload).ok());
}

TEST(KvCopyTest, AllPaddingScatterWritesNothing) {
  HostCache cache(Nhd(), 1);
  const std::vector<int64_t> slots(5, -1);
  std::vector<std::byte> payload(cache.PayloadBytes(5), std::byte{0});
  ASSERT_TRUE(ScatterChunk(cache.View(), slots, payload).ok());
  EXPECT_TRUE(cache.SameBytes(HostCache(Nhd(), 1)));
}

TEST(KvCopyTest, NegativeSlotOtherThanPaddingIsInvalidArgument) {
  HostCache cache(Nhd(), 1);
  const std::vector<int64_t> slots = {0, -2};
  std::vector<std::byte> payload(cache.PayloadBytes(2));
  absl::Status s = GatherChunk(cache.View(), slots, payload);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("slots[1] = -2"));
}

TEST(KvCopyTest, PayloadSizeMismatchNamesBothSizes) {
  HostCache cache(Nhd(), 1);
  const std::vector<int64_t> slots = {0, 1};
  const uint64_t want = cache.PayloadBytes(2);
  std::vector<std::byte> payload(want - 1);
  absl::Status s = GatherChunk(cache.View(), slots, payload);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr(absl::StrCat("payload is ", want - 1, " bytes; expected ", want)));
}

TEST(KvCopyTest, DuplicateSlotInScatterIsInvalidArgumentButGatherAllowsIt) {
  HostCache cache(Nhd(), 1);
  const std::vector<int64_t> slots = {4, 7, 4};
  std::vector<std::byte> payload(cache.PayloadBytes(3));
  absl::Status s = ScatterChunk(cache.View(), slots, payload);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("slot 4 appears more than once"));
  EXPECT_TRUE(cache.SameBytes(HostCache(Nhd(), 1)));
  EXPECT_TRUE(GatherChunk(cache.View(), slots, payload).ok());
}

struct BadView {
  const char* name;
  void (*mutate)(PagedKvView&);
  const char* message;
};

class KvCopyBadViewTest : public ::testing::TestWithParam<BadView> {};

TEST_P(KvCopyBadViewTest, ValidateAndCopiesReturnInvalidArgumentNamingTheField) {
  HostCache cache(Nhd(), 1);
  PagedKvView view = cache.View();
  GetParam().mutate(view);
  absl::Status v = view.Validate();
  EXPECT_EQ(v.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(v.message(), HasSubstr(GetParam().message));
  std::vector<int64_t> slots = {0};
  std::vector<std::byte> payload(cache.PayloadBytes(1));
  EXPECT_EQ(GatherChunk(view, slots, payload).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ScatterChunk(view, slots, payload).code(), absl::StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(
    Fields, KvCopyBadViewTest,
    ::testing::Values(
        BadView{"TooFewLayerPointers", [](PagedKvView& v) { v.layer_base.pop_back(); },
                "layer_base has 2 pointers; expected 3"},
        BadView{"NullLayerPointer", [](PagedKvView& v) { v.layer_base[1] = nullptr; },
                "layer_base[1] is null"},
        BadView{"KBaseOnFlashAttn", [](PagedKvView& v) { v.k_base = v.layer_base; },
                "k_base/v_base have 3/0 pointers; expected 0/0"},
        BadView{"CrossLayerNeedsOnePointer",
                [](PagedKvView& v) { v.layout.kind = LayoutKind::kCrossLayer; },
                "layer_base has 3 pointers; expected 1"},
        BadView{"LlamaRowsNeedKAndV",
                [](PagedKvView& v) {
                  v.layout.kind = LayoutKind::kLlamaCppRows;
                  v.k_base = v.layer_base;
                  v.layer_base.clear();
                },
                "v_base has 0 pointers; expected 3"},
        BadView{"MlaWithTwoHeads", [](PagedKvView& v) { v.layout.kind = LayoutKind::kMLA; },
                "num_kv_heads = 2 for kMLA; expected 1"},
        BadView{"ZeroBlockSize", [](PagedKvView& v) { v.block_size = 0; }, "block_size is 0"},
        BadView{"ZeroNumBlocks", [](PagedKvView& v) { v.num_blocks = 0; }, "num_blocks is 0"},
        BadView{"ZeroHeadDim", [](PagedKvView& v) { v.layout.head_dim = 0; }, "head_dim is 0"},
        BadView{"UnknownDType", [](PagedKvView& v) { v.layout.dtype = static_cast<DType>(99); },
                "dtype = 99 is unknown"},
        BadView{"UnknownKind", [](PagedKvView& v) { v.layout.kind = static_cast<LayoutKind>(42); },
                "kind = 42 is unknown"},
        BadView{"UnknownDevice", [](PagedKvView& v) { v.device = static_cast<KvDevice>(7); },
                "device = 7"},
        BadView{"SizeOverflows",
                [](PagedKvView& v) {
                  v.num_blocks = std::numeric_limits<uint32_t>::max();
                  v.block_size = std::numeric_limits<uint32_t>::max();
                  v.layout.head_dim = std::numeric_limits<uint32_t>::max();
                },
                "overflows 64 bits"}),
    [](const ::testing::TestParamInfo<BadView>& info) { return std::string(info.param.name); });

TEST(KvCopyTest, CudaViewOfHostMemoryIsInvalidArgument) {
  // Without a CUDA build or device: rejected because there is no device; with one:
  // rejected because the pointers are pageable host memory. Either way nothing is copied.
  HostCache cache(Nhd(), 1);
  PagedKvView view = cache.View();
  view.device = KvDevice::kCuda;
  std::vector<int64_t> slots = {0, 1};
  std::vector<std::byte> payload(cache.PayloadBytes(2), kSentinel);
  absl::Status s = GatherChunk(view, slots, payload);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("kCuda"));
  EXPECT_EQ(payload, std::vector<std::byte>(cache.PayloadBytes(2), kSentinel));
}

TEST(KvCopyTest, OptionsRejectAbsurdThreadCount) {
  KvCopyOptions o;
  o.max_threads = 100000;
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
}

TEST(KvCopyTest, PayloadBytesMatchesLlama3ChunkSize) {
  // Llama-3-8B: 32 layers, 8 KV heads, head_dim 128, bf16 = 128 KiB per token (DESIGN.md).
  PagedKvView v;
  v.layout = KvLayout{32, 8, 128, DType::kBF16, LayoutKind::kFlashAttnNHD};
  v.block_size = 16;
  v.num_blocks = 1;
  EXPECT_EQ(v.payload_bytes(256), 32ull << 20);
  v.layout = KvLayout{61, 1, 576, DType::kBF16, LayoutKind::kMLA};  // DeepSeek-V3 MLA
  EXPECT_EQ(v.payload_bytes(1), 61ull * 576 * 2);
}

}  // namespace
}  // namespace kvt
