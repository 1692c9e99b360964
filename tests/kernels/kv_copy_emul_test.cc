// The CUDA copy kernel's index math, checked without a GPU: the kernel body is
// CopySegmentsThread (kernels/src/copy_grid.h), compiled here by the host compiler and
// run by EmulateCudaExecute over every (block, thread) of the launch the CUDA launcher
// would make (same copy-engine/kernel split, same 64 KiB pieces, same grid and block
// size). Its result must equal the CPU path (the CPU twin) bit for bit, for every
// layout, every dtype, aligned and unaligned rows (16-, 4- and 1-byte units), payload
// bases at offsets 0, 4 and 1 from 16-byte alignment, random block tables with -1
// padding, the kernel-only and copy-engine-only splits, and a grid small enough to
// exercise the grid-stride loop. Label: unit (no CUDA needed).
#include "kv_copy_emul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/kv_copy.h"
#include "kv_copy_reference.h"

namespace kvt {
namespace {

using kernels_internal::CudaEmulStats;
using kernels_internal::EmulatedCudaGather;
using kernels_internal::EmulatedCudaScatter;
using kernels_internal::EmulOptions;
using testing::HostCache;
using testing::Shape;

constexpr std::byte kGuard{0xC3};
constexpr size_t kGuardBytes = 64;

// A payload at `misalign` bytes past a 16-byte boundary, with guard bytes around it.
struct GuardedPayload {
  std::vector<std::byte> storage;
  size_t offset;
  size_t bytes;
  GuardedPayload(size_t n, size_t misalign, std::byte fill) : bytes(n) {
    storage.assign(n + 2 * kGuardBytes + 32, kGuard);
    const auto base = reinterpret_cast<uintptr_t>(storage.data());
    offset = kGuardBytes + (16 - base % 16) % 16 + misalign;
    std::fill_n(storage.begin() + static_cast<std::ptrdiff_t>(offset), n, fill);
  }
  std::span<std::byte> span() { return {storage.data() + offset, bytes}; }
};

// vLLM-like slot mapping: a random block table (distinct blocks in random order), a
// random number of tokens starting at a random offset of the first block, and -1
// padding at random positions. Distinct real slots (scatter requires it).
std::vector<int64_t> RandomBlockTableSlots(const Shape& s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int64_t> table(s.num_blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  const int64_t B = s.block_size;
  const int64_t capacity = int64_t{s.num_blocks} * B;
  const int64_t start = static_cast<int64_t>(rng() % B);
  const int64_t tokens = 1 + static_cast<int64_t>(rng() % (capacity - start));
  std::vector<int64_t> slots;
  for (int64_t t = start; t < start + tokens; ++t) {
    if (rng() % 7 == 0) slots.push_back(-1);
    slots.push_back(table[t / B] * B + t % B);
  }
  return slots;
}

struct Variant {
  const char* name;
  uint64_t memcpy_min_bytes;
  uint32_t max_grid;
};
// Kernel only (as small chunks run), copy engine for every contiguous segment, the
// default 1 MiB split, and a 3-block grid (grid-stride loop over the segments).
const Variant kVariants[] = {{"Kernel", uint64_t{1} << 40, kernels_internal::kMaxCopyGrid},
                             {"CopyEngine", 0, kernels_internal::kMaxCopyGrid},
                             {"DefaultSplit", uint64_t{1} << 20, kernels_internal::kMaxCopyGrid},
                             {"Grid3", uint64_t{1} << 40, 3}};

// (kind, dtype, aligned rows, block_size)
using Param = std::tuple<LayoutKind, DType, bool, uint32_t>;

class KvCopyEmulTest : public ::testing::TestWithParam<Param> {
 protected:
  Shape shape() const {
    auto [kind, dtype, aligned, block_size] = GetParam();
    Shape s = testing::MakeShape(kind, dtype, block_size);
    if (kind == LayoutKind::kMLA) {
      s.head_dim = aligned ? 64 : 9;
    } else {
      s.head_dim = aligned ? 8 : 5;
    }
    return s;
  }
  std::vector<std::vector<int64_t>> SlotSets() const {
    return {testing::MixedSlots(shape(), 21), RandomBlockTableSlots(shape(), 22),
            RandomBlockTableSlots(shape(), 23)};
  }
};

TEST_P(KvCopyEmulTest, EmulatedGatherEqualsCpuGatherBitForBit) {
  HostCache cache(shape(), 31);
  for (const std::vector<int64_t>& slots : SlotSets()) {
    const size_t bytes = cache.PayloadBytes(slots.size());
    // The CPU twin and the naive reference agree first (the twin is itself tested).
    std::vector<std::byte> cpu(bytes, std::byte{0x5A});
    ASSERT_TRUE(GatherChunk(cache.View(), slots, cpu).ok());
    std::vector<std::byte> ref(bytes, std::byte{0x5A});
    cache.Reference(slots, ref, /*to_payload=*/true);
    ASSERT_EQ(cpu, ref);
    for (const Variant& v : kVariants) {
      for (size_t misalign : {0, 4, 1}) {
        SCOPED_TRACE(
            absl::StrCat(v.name, " payload misalign ", misalign, " tokens ", slots.size()));
        GuardedPayload emu(bytes, misalign, std::byte{0x5A});
        CudaEmulStats stats;
        absl::Status s = EmulatedCudaGather(cache.View(), slots, emu.span(),
                                            EmulOptions{v.memcpy_min_bytes, v.max_grid}, &stats);
        ASSERT_TRUE(s.ok()) << s;
        ASSERT_TRUE(std::equal(cpu.begin(), cpu.end(), emu.span().begin()));
        // Nothing written outside the payload.
        ASSERT_TRUE(std::all_of(emu.storage.begin(), emu.storage.begin() + emu.offset,
                                [](std::byte b) { return b == kGuard; }));
        ASSERT_TRUE(std::all_of(emu.storage.begin() + emu.offset + bytes, emu.storage.end(),
                                [](std::byte b) { return b == kGuard; }));
        EXPECT_LE(stats.grid, v.max_grid);
        if (stats.grid > 0) {
          EXPECT_EQ(stats.block_dim, kernels_internal::kCopyBlockThreads);
        }
      }
    }
  }
}

TEST_P(KvCopyEmulTest, EmulatedScatterEqualsCpuScatterBitForBit) {
  for (const std::vector<int64_t>& slots : SlotSets()) {
    HostCache cpu(shape(), 41);
    std::vector<std::byte> data(cpu.PayloadBytes(slots.size()));
    std::mt19937 rng(42);
    for (auto& b : data) b = static_cast<std::byte>(rng());
    ASSERT_TRUE(ScatterChunk(cpu.View(), slots, data).ok());
    ASSERT_FALSE(cpu.SameBytes(HostCache(shape(), 41)));  // it wrote something
    for (const Variant& v : kVariants) {
      for (size_t misalign : {0, 4, 1}) {
        SCOPED_TRACE(
            absl::StrCat(v.name, " payload misalign ", misalign, " tokens ", slots.size()));
        HostCache emu(shape(), 41);
        GuardedPayload payload(data.size(), misalign, std::byte{0});
        std::copy(data.begin(), data.end(), payload.span().begin());
        absl::Status s = EmulatedCudaScatter(emu.View(), slots, payload.span(),
                                             EmulOptions{v.memcpy_min_bytes, v.max_grid});
        ASSERT_TRUE(s.ok()) << s;
        // Every byte of every tensor, addressed or not.
        ASSERT_TRUE(emu.SameBytes(cpu));
      }
    }
  }
}

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  auto [kind, dtype, aligned, block_size] = info.param;
  return absl::StrCat(testing::KindName(kind), "_", std::string(DTypeName(dtype)),
                      aligned ? "_Aligned" : "_Odd", "_B", block_size);
}

INSTANTIATE_TEST_SUITE_P(
    AllLayoutsAllDtypes, KvCopyEmulTest,
    ::testing::Combine(::testing::ValuesIn(testing::AllKinds()),
                       ::testing::Values(DType::kF32, DType::kF16, DType::kBF16, DType::kFP8E4M3,
                                         DType::kFP8E5M2, DType::kI8, DType::kBytes),
                       ::testing::Bool(), ::testing::Values(1u, 16u)),
    ParamName);

// Realistic row sizes (8 KV heads x head_dim 128, bf16; MLA latent 576) with long
// consecutive runs: contiguous runs over 64 KiB are cut into pieces for the kernel.
class KvCopyEmulLargeTest : public ::testing::TestWithParam<LayoutKind> {};

TEST_P(KvCopyEmulLargeTest, LongRunsCutIntoPiecesEqualCpuBitForBit) {
  Shape s;
  s.kind = GetParam();
  s.layers = 2;
  s.heads = s.kind == LayoutKind::kMLA ? 1 : 8;
  s.head_dim = s.kind == LayoutKind::kMLA ? 576 : 128;
  s.block_size = 16;
  s.num_blocks = 12;
  s.dtype = DType::kBF16;
  HostCache cache(s, 51);
  // Blocks 2..9 in order (runs across block boundaries for the slot-linear kinds),
  // then a padding slot and two shuffled blocks.
  std::vector<int64_t> slots;
  for (int64_t x = 2 * 16; x < 10 * 16; ++x) slots.push_back(x);
  slots.push_back(-1);
  for (int64_t b : {11, 0}) {
    for (int64_t o = 0; o < 16; ++o) slots.push_back(b * 16 + o);
  }
  std::vector<std::byte> cpu(cache.PayloadBytes(slots.size()), std::byte{0x11});
  ASSERT_TRUE(GatherChunk(cache.View(), slots, cpu).ok());
  for (const Variant& v : kVariants) {
    SCOPED_TRACE(v.name);
    GuardedPayload emu(cpu.size(), 0, std::byte{0x11});
    CudaEmulStats stats;
    ASSERT_TRUE(EmulatedCudaGather(cache.View(), slots, emu.span(),
                                   EmulOptions{v.memcpy_min_bytes, v.max_grid}, &stats)
                    .ok());
    ASSERT_TRUE(std::equal(cpu.begin(), cpu.end(), emu.span().begin()));

    HostCache want(s, 52), got(s, 52);
    ASSERT_TRUE(ScatterChunk(want.View(), slots, cpu).ok());
    ASSERT_TRUE(EmulatedCudaScatter(got.View(), slots, emu.span(),
                                    EmulOptions{v.memcpy_min_bytes, v.max_grid})
                    .ok());
    ASSERT_TRUE(got.SameBytes(want));
  }
}

INSTANTIATE_TEST_SUITE_P(AllLayouts, KvCopyEmulLargeTest, ::testing::ValuesIn(testing::AllKinds()),
                         [](const ::testing::TestParamInfo<LayoutKind>& info) {
                           return testing::KindName(info.param);
                         });

// The cases above reach every branch of the kernel body: 16-, 4- and 1-byte units,
// the copy engine, pieces of long runs, and the grid-stride loop (fewer blocks than
// segments). Checked here so a change that stops reaching one is noticed.
TEST(KvCopyEmulCoverageTest, EveryUnitSizePiecesCopyEngineAndGridStrideAreReached) {
  CudaEmulStats all;
  uint64_t max_segments_per_block = 0;
  auto run = [&](Shape s, size_t misalign, const Variant& v) {
    HostCache cache(s, 61);
    const std::vector<int64_t> slots = testing::MixedSlots(s, 62);
    GuardedPayload p(cache.PayloadBytes(slots.size()), misalign, std::byte{0});
    CudaEmulStats st;
    ASSERT_TRUE(EmulatedCudaGather(cache.View(), slots, p.span(),
                                   EmulOptions{v.memcpy_min_bytes, v.max_grid}, &st)
                    .ok());
    all.memcpys += st.memcpys;
    all.unit16 += st.unit16;
    all.unit4 += st.unit4;
    all.unit1 += st.unit1;
    if (st.grid > 0) {
      max_segments_per_block =
          std::max<uint64_t>(max_segments_per_block, (st.kernel_segments + st.grid - 1) / st.grid);
    }
  };
  Shape aligned = testing::MakeShape(LayoutKind::kFlashAttnHND, DType::kBF16, 16);
  aligned.head_dim = 8;  // 16-byte rows
  run(aligned, 0, kVariants[0]);
  run(aligned, 4, kVariants[0]);
  run(aligned, 1, kVariants[0]);
  run(aligned, 0, kVariants[1]);
  run(aligned, 0, kVariants[3]);
  EXPECT_GT(all.unit16, 0u);
  EXPECT_GT(all.unit4, 0u);
  EXPECT_GT(all.unit1, 0u);
  EXPECT_GT(all.memcpys, 0u);
  EXPECT_GT(max_segments_per_block, 1u);  // some block ran the grid-stride loop

  // A 256 KiB contiguous run goes to the kernel as four 64 KiB pieces.
  Shape big;
  big.kind = LayoutKind::kMLA;
  big.layers = 1;
  big.heads = 1;
  big.head_dim = 1024;
  big.dtype = DType::kF32;
  big.block_size = 64;
  big.num_blocks = 2;
  HostCache cache(big, 63);
  std::vector<int64_t> slots(64);
  std::iota(slots.begin(), slots.end(), 0);
  GuardedPayload p(cache.PayloadBytes(slots.size()), 0, std::byte{0});
  CudaEmulStats st;
  ASSERT_TRUE(EmulatedCudaGather(cache.View(), slots, p.span(), EmulOptions{}, &st).ok());
  EXPECT_EQ(st.memcpys, 0u);
  EXPECT_EQ(st.kernel_segments, 4u);
  EXPECT_EQ(st.grid, 4u);
}

TEST(KvCopyEmulErrorsTest, RejectsWhatThePublicCallsRejectAndWritesNothing) {
  Shape s = testing::MakeShape(LayoutKind::kFlashAttnNHD, DType::kF16, 16);
  HostCache cache(s, 71);
  std::vector<int64_t> slots = {0, 1, int64_t{s.num_blocks} * s.block_size};
  std::vector<std::byte> payload(cache.PayloadBytes(slots.size()), std::byte{9});
  absl::Status st = EmulatedCudaGather(cache.View(), slots, payload, EmulOptions{});
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_TRUE(
      std::all_of(payload.begin(), payload.end(), [](std::byte b) { return b == std::byte{9}; }));
  slots = {3, 3};
  payload.assign(cache.PayloadBytes(slots.size()), std::byte{9});
  st = EmulatedCudaScatter(cache.View(), slots, payload, EmulOptions{});
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_TRUE(cache.SameBytes(HostCache(s, 71)));
}

// forbid_staging is about the CUDA path's payload only: a kCpu view copies as before.
TEST(KvCopyEmulErrorsTest, ForbidStagingDoesNotAffectCpuViews) {
  Shape s = testing::MakeShape(LayoutKind::kFlashAttnHND, DType::kBF16, 16);
  HostCache cache(s, 81);
  const std::vector<int64_t> slots = testing::MixedSlots(s, 82);
  KvCopyOptions o;
  o.forbid_staging = true;
  std::vector<std::byte> got(cache.PayloadBytes(slots.size()), std::byte{1});
  std::vector<std::byte> want = got;
  ASSERT_TRUE(GatherChunk(cache.View(), slots, got, o).ok());
  ASSERT_TRUE(GatherChunk(cache.View(), slots, want).ok());
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace kvt
