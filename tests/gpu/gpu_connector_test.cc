// The GPU half of the hierarchy (issue 27), at the C++ and C-ABI level, with CUDA
// tensors in vLLM's GPU layouts and random block tables. Label: gpu. Every test starts
// with RequireGpu(): without a usable CUDA device it is GTEST_SKIPped with the reason
// (never a silent pass), and ctest reports the test as Skipped.
//
//  * StoreFromDeviceLoadIntoFreshDeviceCache: connector Store from a device cache, the
//    stored payloads equal the CPU path's for the same tokens byte for byte, and a Load
//    into a fresh device cache (other block table, padding slots) equals the CPU path's
//    load and the independent reference. bf16, fp16, fp8 (e4m3, e5m2) for NHD, HND,
//    FlashInfer, MLA and cross-layer.
//  * CApiStoreLoadOnDevice: the same round trip through kvt_create /
//    kvt_register_kv_view / kvt_store / kvt_load.
//  * PinnedHostArenaIsTheGatherTarget: the host tier's arena is cudaHostAlloc'd and a
//    gather from the device writes the record straight into it (forbid_staging: no
//    pageable staging copy is possible), read back equal to the CPU gather.
//  * LoadFromHostTierScattersStraightFromThePinnedArena: a load from the host tier
//    with forbid_staging succeeds: the scatter reads the pinned arena directly.
//  * DeviceHostDiskEvictHostLoadBack: device -> host -> disk, the host copies erased,
//    load back to a fresh device cache from disk, byte-identical.
//  * StoreOnStreamSeesBytesAtItsEvent: the store ordered after an event on another
//    stream gathers the bytes written before the event, never the engine's later writes.
//  * CorruptDiskRecordWritesNoDeviceBlockOfThatChunk: a load that stops at a corrupted
//    disk record leaves every device block of that chunk (and the later ones) untouched.
//
// Built a second time with KVT_GPU_TEST_HOST_MEMORY=1 as gpu_connector_hostmem_test
// (label unit, every configuration): the same tests over host memory and kCpu views,
// without the two that only mean something on a device (pinned arena, streams). That
// run proves this file's own logic (expected bytes, keys, block tables, the disk record
// offset it corrupts) on the CPU, so a GPU run fails only for the GPU's reasons.
#if !KVT_GPU_TEST_HOST_MEMORY
#include <cuda_runtime.h>
#endif
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "connectors/kv_connector.h"
#include "connectors/kvtier_c.h"
#include "kernels/kv_copy.h"
#include "kv_copy_reference.h"
#include "kvstore/chunk_chain.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/disk_tier.h"
#include "kvstore/host_tier.h"
#include "kvstore/tiered_store.h"
#include "store_test_util.h"

namespace kvt {
namespace {

using ::kvt::testing::GetRecord;
using testing::HostCache;
using testing::Shape;

constexpr uint32_t kChunk = 32;
constexpr uint32_t kBlock = 16;
constexpr uint32_t kBlocks = 24;
constexpr std::byte kSentinel{0xEE};

#if KVT_GPU_TEST_HOST_MEMORY
constexpr KvDevice kTestDevice = KvDevice::kCpu;
constexpr int32_t kTestCDevice = KVT_DEVICE_CPU;
#define REQUIRE_GPU() \
  do {                \
  } while (0)
#else
constexpr KvDevice kTestDevice = KvDevice::kCuda;
constexpr int32_t kTestCDevice = KVT_DEVICE_CUDA;
// Skips the calling test (with the reason) when no CUDA device is usable.
#define REQUIRE_GPU()                                                                     \
  do {                                                                                    \
    if (!CudaCopyAvailable()) {                                                           \
      GTEST_SKIP() << "no usable CUDA device (cudaGetDeviceCount found none or failed); " \
                      "this GPU check needs a GPU machine (bench/gpu_check.sh)";          \
    }                                                                                     \
  } while (0)

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call
#endif

Shape MakeShape(LayoutKind kind, DType dtype) {
  Shape s;
  s.kind = kind;
  s.dtype = dtype;
  s.layers = 2;
  s.heads = kind == LayoutKind::kMLA ? 1 : 2;
  s.head_dim = kind == LayoutKind::kMLA ? 72 : 8;
  s.block_size = kBlock;
  s.num_blocks = kBlocks;
  return s;
}

KvLayout LayoutOf(const Shape& s) {
  return KvLayout{s.layers, s.heads, s.head_dim, s.dtype, s.kind};
}

void Fill(HostCache& h, std::byte b) {
  for (auto& t : h.k_or_layer) std::fill(t.begin(), t.end(), b);
  for (auto& t : h.v) std::fill(t.begin(), t.end(), b);
}

// Device memory (host memory in the host-memory build).
#if KVT_GPU_TEST_HOST_MEMORY
void* Alloc(size_t n) { return std::malloc(n); }
void Free(void* p) { std::free(p); }
void Copy(void* dst, const void* src, size_t n) { std::memcpy(dst, src, n); }
#else
void* Alloc(size_t n) {
  void* p = nullptr;
  return cudaMalloc(&p, n) == cudaSuccess ? p : nullptr;
}
void Free(void* p) { cudaFree(p); }
void Copy(void* dst, const void* src, size_t n) {
  EXPECT_EQ(cudaMemcpy(dst, src, n, cudaMemcpyDefault), cudaSuccess);
}
#endif

// Device copies of every tensor of a HostCache.
struct DeviceCache {
  std::vector<void*> k_or_layer, v;
  DeviceCache() = default;
  DeviceCache(const DeviceCache&) = delete;
  DeviceCache& operator=(const DeviceCache&) = delete;
  ~DeviceCache() {
    for (void* p : k_or_layer) Free(p);
    for (void* p : v) Free(p);
  }
  void Upload(const HostCache& h) {
    auto up = [](const std::vector<std::byte>& t) {
      void* p = Alloc(t.size());
      EXPECT_NE(p, nullptr);
      Copy(p, t.data(), t.size());
      return p;
    };
    for (const auto& t : h.k_or_layer) k_or_layer.push_back(up(t));
    for (const auto& t : h.v) v.push_back(up(t));
  }
  // The device bytes, in a HostCache of `shape`.
  HostCache Download(const Shape& shape) const {
    HostCache h(shape, 0);
    for (size_t i = 0; i < k_or_layer.size(); ++i) {
      Copy(h.k_or_layer[i].data(), k_or_layer[i], h.k_or_layer[i].size());
    }
    for (size_t i = 0; i < v.size(); ++i) Copy(h.v[i].data(), v[i], h.v[i].size());
    return h;
  }
  PagedKvView View(HostCache& shape_of) const {
    PagedKvView view = shape_of.View();
    view.device = kTestDevice;
    if (!view.layer_base.empty()) view.layer_base = k_or_layer;
    if (!view.k_base.empty()) {
      view.k_base = k_or_layer;
      view.v_base = v;
    }
    return view;
  }
};

std::vector<TokenId> Prompt(size_t n, uint32_t seed) {
  std::vector<TokenId> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<TokenId>(1000 + seed * 7919 + i * 13);
  return t;
}

// Slots of `n` tokens over a random block table (distinct blocks, shuffled), vLLM's
// slot = block * block_size + offset.
std::vector<int64_t> BlockTableSlots(size_t n, uint32_t seed) {
  std::vector<int64_t> table(kBlocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(seed));
  std::vector<int64_t> slots(n);
  for (size_t i = 0; i < n; ++i) slots[i] = table[i / kBlock] * kBlock + i % kBlock;
  return slots;
}

// A load's slot mapping: a random block table with a few -1 (padding) slots.
std::vector<int64_t> LoadSlots(size_t n, uint32_t seed) {
  std::vector<int64_t> slots = BlockTableSlots(n, seed);
  std::mt19937 rng(seed + 1);
  for (int i = 0; i < 3; ++i) slots[rng() % n] = -1;
  return slots;
}

// What a load of `tokens` slots `from` of `src` into `to` of a cache filled with
// kSentinel must leave, from the independent reference arithmetic.
HostCache ExpectedAfterLoad(HostCache& src, const std::vector<int64_t>& from,
                            const std::vector<int64_t>& to, size_t tokens) {
  std::vector<int64_t> f(from.begin(), from.begin() + static_cast<std::ptrdiff_t>(tokens));
  std::vector<int64_t> t(to.begin(), to.begin() + static_cast<std::ptrdiff_t>(tokens));
  std::vector<std::byte> payload(src.PayloadBytes(tokens), std::byte{0});
  src.Reference(f, payload, /*to_payload=*/true);
  HostCache want(src.shape, 0);
  Fill(want, kSentinel);
  want.Reference(t, payload, /*to_payload=*/false);
  return want;
}

std::shared_ptr<TieredStore> HostStore(HostTier** host = nullptr, uint64_t bytes = 64 << 20) {
  HostTierOptions ho;
  ho.capacity_bytes = bytes;
  ho.use_pinned_memory = true;
  HostTier* ignored = nullptr;
  std::vector<TierFactory> tiers;
  tiers.push_back(kvt::testing::Capturing(HostTier::Factory(ho), host ? host : &ignored));
  auto s = TieredStore::Create(std::move(tiers), TieredStoreOptions{});
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::shared_ptr<TieredStore>(std::move(*s)) : nullptr;
}

class ScopedTempDir {
 public:
  ScopedTempDir() {
    std::string tmpl = std::filesystem::temp_directory_path().string() + "/kvt-gpu-XXXXXX";
    if (::mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~ScopedTempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Host (pinned, `host_bytes`; none when 0) over a disk tier in `dir`.
std::shared_ptr<TieredStore> DiskStore(const std::string& dir, uint64_t host_bytes, HostTier** host,
                                       DiskTier** disk) {
  std::vector<TierFactory> tiers;
  if (host_bytes > 0) {
    HostTierOptions ho;
    ho.capacity_bytes = host_bytes;
    ho.use_pinned_memory = true;
    tiers.push_back(kvt::testing::Capturing(HostTier::Factory(ho), host));
  }
  DiskTierOptions d;
  d.dir = dir;
  d.capacity_bytes = 16 << 20;
  d.file_bytes = 4 << 20;
  tiers.push_back(kvt::testing::Capturing(DiskTier::Factory(d), disk));
  auto s = TieredStore::Create(std::move(tiers), TieredStoreOptions{});
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::shared_ptr<TieredStore>(std::move(*s)) : nullptr;
}

std::unique_ptr<KVConnector> MakeConnector(std::shared_ptr<TieredStore> store, const Shape& s,
                                           void* stream = nullptr) {
  ConnectorOptions o;
  o.ns.model_id = "gpu-test";
  o.ns.layout = LayoutOf(s);
  o.ns.chunk_tokens = kChunk;
  o.use_cost_model = false;
  o.copy.cuda_stream = stream;
  auto c = KVConnector::Create(o, std::move(store));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? std::move(*c) : nullptr;
}

// Payload bytes of every stored chunk of `tokens` (FetchPayloads), concatenated.
std::vector<std::byte> StoredPayloads(KVConnector& conn, const std::vector<TokenId>& tokens,
                                      uint64_t num_tokens) {
  auto fetched = conn.FetchPayloads(tokens, num_tokens);
  EXPECT_TRUE(fetched.ok()) << fetched.status();
  std::vector<std::byte> out;
  if (!fetched.ok()) return out;
  EXPECT_EQ(fetched->result.loaded_tokens, num_tokens);
  for (const auto& rec : fetched->records) {
    out.insert(out.end(), rec.get() + kChunkHeaderBytes,
               rec.get() + kChunkHeaderBytes + fetched->payload_bytes);
  }
  return out;
}

const std::vector<LayoutKind>& VllmGpuKinds() {
  static const std::vector<LayoutKind> kinds = {LayoutKind::kFlashAttnNHD,
                                                LayoutKind::kFlashAttnHND, LayoutKind::kFlashInfer,
                                                LayoutKind::kMLA, LayoutKind::kCrossLayer};
  return kinds;
}

using Param = std::tuple<LayoutKind, DType>;

class GpuConnectorTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override { REQUIRE_GPU(); }
  Shape shape() const { return MakeShape(std::get<0>(GetParam()), std::get<1>(GetParam())); }
};

TEST_P(GpuConnectorTest, StoreFromDeviceLoadIntoFreshDeviceCache) {
  const Shape s = shape();
  HostCache src(s, 101);
  DeviceCache dev;
  dev.Upload(src);
  const std::vector<TokenId> tokens = Prompt(3 * kChunk + 1, 1);
  const uint64_t n = 3 * kChunk;
  const std::vector<int64_t> slots = BlockTableSlots(n, 2);

  // GPU path: store from the device cache.
  auto gpu_store = HostStore();
  auto gpu = MakeConnector(gpu_store, s);
  ASSERT_NE(gpu, nullptr);
  ASSERT_TRUE(gpu->RegisterKvView(dev.View(src)).ok());
  auto taken = gpu->Store(tokens, slots);
  ASSERT_TRUE(taken.ok()) << taken.status();
  EXPECT_EQ(*taken, 3u);
  gpu->Flush();

  // CPU path: the same tokens from the host twin.
  auto cpu_store = HostStore();
  auto cpu = MakeConnector(cpu_store, s);
  ASSERT_TRUE(cpu->RegisterKvView(src.View()).ok());
  ASSERT_EQ(*cpu->Store(tokens, slots), 3u);
  cpu->Flush();

  const std::vector<std::byte> gpu_payloads = StoredPayloads(*gpu, tokens, n);
  const std::vector<std::byte> cpu_payloads = StoredPayloads(*cpu, tokens, n);
  ASSERT_EQ(gpu_payloads.size(), 3 * src.PayloadBytes(kChunk));
  ASSERT_TRUE(gpu_payloads == cpu_payloads) << "payload stored from the device differs";

  // Load into a fresh device cache at another block table, with padding slots.
  const std::vector<int64_t> to = LoadSlots(n, 3);
  HostCache fresh(s, 0);
  Fill(fresh, kSentinel);
  DeviceCache dev2;
  dev2.Upload(fresh);
  ASSERT_TRUE(gpu->RegisterKvView(dev2.View(fresh)).ok());
  auto loaded = gpu->Load(tokens, n, to, 0);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->loaded_tokens, n);
  EXPECT_TRUE(loaded->failed_chunks.empty());

  HostCache cpu_fresh(s, 0);
  Fill(cpu_fresh, kSentinel);
  ASSERT_TRUE(cpu->RegisterKvView(cpu_fresh.View()).ok());
  ASSERT_EQ(cpu->Load(tokens, n, to, 0)->loaded_tokens, n);

  const HostCache got = dev2.Download(s);
  EXPECT_TRUE(got.SameBytes(cpu_fresh)) << "device load differs from the CPU path's load";
  EXPECT_TRUE(got.SameBytes(ExpectedAfterLoad(src, slots, to, n)))
      << "device load differs from the reference";
}

std::string ParamName(const ::testing::TestParamInfo<Param>& info) {
  return absl::StrCat(testing::KindName(std::get<0>(info.param)), "_",
                      std::string(DTypeName(std::get<1>(info.param))));
}

INSTANTIATE_TEST_SUITE_P(VllmLayouts, GpuConnectorTest,
                         ::testing::Combine(::testing::ValuesIn(VllmGpuKinds()),
                                            ::testing::Values(DType::kBF16, DType::kF16,
                                                              DType::kFP8E4M3, DType::kFP8E5M2)),
                         ParamName);

// The same round trip through the C ABI (kvt_create makes its own store, host tier
// pinned when a device is present).
class GpuCApiTest : public ::testing::TestWithParam<LayoutKind> {
 protected:
  void SetUp() override { REQUIRE_GPU(); }
};

TEST_P(GpuCApiTest, CApiStoreLoadOnDevice) {
  const Shape s = MakeShape(GetParam(), DType::kBF16);
  HostCache src(s, 201);
  DeviceCache dev;
  dev.Upload(src);
  kvt_options o;
  kvt_options_init(&o);
  o.model_id = "gpu-c-api";
  o.num_layers = s.layers;
  o.num_kv_heads = s.heads;
  o.head_dim = s.head_dim;
  o.dtype = static_cast<int32_t>(s.dtype);
  o.layout_kind = static_cast<int32_t>(s.kind);
  o.chunk_tokens = kChunk;
  o.host_capacity_bytes = 32 << 20;
  o.use_cost_model = 0;
  kvt_connector* c = nullptr;
  ASSERT_EQ(kvt_create(&o, &c), KVT_OK) << kvt_last_error();
  std::unique_ptr<kvt_connector, void (*)(kvt_connector*)> guard(c, kvt_destroy);

  auto register_view = [&](const DeviceCache& d) {
    kvt_kv_view v{};
    v.device = kTestCDevice;
    v.num_layers = s.layers;
    v.num_kv_heads = s.heads;
    v.head_dim = s.head_dim;
    v.dtype = static_cast<int32_t>(s.dtype);
    v.layout_kind = static_cast<int32_t>(s.kind);
    v.block_size = kBlock;
    v.num_blocks = kBlocks;
    v.layer_base = d.k_or_layer.data();
    v.n_layer_base = d.k_or_layer.size();
    return kvt_register_kv_view(c, &v);
  };
  ASSERT_EQ(register_view(dev), KVT_OK) << kvt_last_error();
  const std::vector<TokenId> tokens = Prompt(2 * kChunk + 1, 4);
  const uint64_t n = 2 * kChunk;
  const std::vector<int64_t> slots = BlockTableSlots(n, 5);
  size_t taken = 0;
  ASSERT_EQ(kvt_store(c, tokens.data(), tokens.size(), slots.data(), slots.size(), &taken), KVT_OK)
      << kvt_last_error();
  EXPECT_EQ(taken, 2u);

  HostCache fresh(s, 0);
  Fill(fresh, kSentinel);
  DeviceCache dev2;
  dev2.Upload(fresh);
  ASSERT_EQ(register_view(dev2), KVT_OK) << kvt_last_error();
  const std::vector<int64_t> to = LoadSlots(n, 6);
  uint64_t loaded = 0;
  ASSERT_EQ(kvt_load(c, tokens.data(), tokens.size(), n, to.data(), to.size(), 0, &loaded), KVT_OK)
      << kvt_last_error();
  EXPECT_EQ(loaded, n);
  EXPECT_TRUE(dev2.Download(s).SameBytes(ExpectedAfterLoad(src, slots, to, n)));
}

INSTANTIATE_TEST_SUITE_P(VllmLayouts, GpuCApiTest, ::testing::ValuesIn(VllmGpuKinds()),
                         [](const ::testing::TestParamInfo<LayoutKind>& info) {
                           return testing::KindName(info.param);
                         });

class GpuHierarchyTest : public ::testing::Test {
 protected:
  void SetUp() override { REQUIRE_GPU(); }
};

// The host tier's arena is page-locked, and a device gather writes a record straight
// into it (TieredStore::Write with a fill lends the arena; forbid_staging makes any staging
// through pageable memory an error), no copy in between.
TEST_F(GpuHierarchyTest, PinnedHostArenaIsTheGatherTarget) {
  const Shape s = MakeShape(LayoutKind::kFlashAttnHND, DType::kBF16);
  HostCache src(s, 301);
  DeviceCache dev;
  dev.Upload(src);
  HostTier* host = nullptr;
  auto store = HostStore(&host);
  ASSERT_NE(host, nullptr);
#if !KVT_GPU_TEST_HOST_MEMORY
  ASSERT_TRUE(host->pinned_host_memory()) << "the host tier's arena is not cudaHostAlloc'd";
#endif

  NamespaceParams ns;
  ns.model_id = "gpu-pinned";
  ns.layout = LayoutOf(s);
  ns.chunk_tokens = kChunk;
  const NamespaceId id = ComputeNamespace(ns);
  const std::vector<TokenId> tokens = Prompt(kChunk, 7);
  const std::vector<ChunkKey> keys = ComputeChunkKeys(id, tokens, {.chunk_tokens = kChunk});
  ASSERT_EQ(keys.size(), 1u);
  const std::vector<int64_t> slots = LoadSlots(kChunk, 8);
  const uint64_t payload_bytes = ns.layout.payload_bytes(kChunk);
  const ChunkHeader header = ChainHeader(id, ns.layout, keys, 0, kChunk);

  KvCopyOptions direct;
  direct.forbid_staging = true;
  bool arena_was_pinned = false;
  auto key = store->Write(
      {.record_bytes = kChunkHeaderBytes + payload_bytes, .fill = [&](std::span<std::byte> rec) {
#if KVT_GPU_TEST_HOST_MEMORY
         arena_was_pinned = true;  // nothing to check without CUDA
#else
    cudaPointerAttributes attr{};
    arena_was_pinned = cudaPointerGetAttributes(&attr, rec.data()) == cudaSuccess &&
                       attr.type == cudaMemoryTypeHost;
#endif
         std::span<std::byte> payload = rec.subspan(kChunkHeaderBytes);
         // Padding rows stay as the arena had them: define them first.
         std::fill(payload.begin(), payload.end(), std::byte{0});
         if (absl::Status st = GatherChunk(dev.View(src), slots, payload, direct); !st.ok())
           return st;
         return EncodeChunk(header, payload, rec);
       }});
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_TRUE(arena_was_pinned);

  std::vector<std::byte> want(payload_bytes, std::byte{0});
  ASSERT_TRUE(GatherChunk(src.View(), slots, want).ok());
  auto record = GetRecord(*store, keys[0]);
  ASSERT_TRUE(record.ok()) << record.status();
  ASSERT_EQ(record->size(), kChunkHeaderBytes + payload_bytes);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), record->begin() + kChunkHeaderBytes));

#if !KVT_GPU_TEST_HOST_MEMORY
  // And the flag does refuse a pageable target, so the success above was direct.
  std::vector<std::byte> pageable(payload_bytes);
  absl::Status refused = GatherChunk(dev.View(src), slots, pageable, direct);
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_NE(refused.message().find("forbid_staging"), std::string_view::npos) << refused;
#endif
}

// A load served by the host tier scatters straight from its pinned arena into the
// device cache (TieredStore::View lends the record where it lies): with
// forbid_staging, any staging through pageable memory would fail the load.
TEST_F(GpuHierarchyTest, LoadFromHostTierScattersStraightFromThePinnedArena) {
  const Shape s = MakeShape(LayoutKind::kFlashAttnHND, DType::kFP8E4M3);
  HostCache src(s, 351);
  DeviceCache dev;
  dev.Upload(src);
  HostTier* host = nullptr;
  auto store = HostStore(&host);
  ASSERT_NE(host, nullptr);
#if !KVT_GPU_TEST_HOST_MEMORY
  ASSERT_TRUE(host->pinned_host_memory()) << "the host tier's arena is not cudaHostAlloc'd";
#endif
  auto writer = MakeConnector(store, s);
  ASSERT_TRUE(writer->RegisterKvView(dev.View(src)).ok());
  const std::vector<TokenId> tokens = Prompt(2 * kChunk + 1, 18);
  const uint64_t n = 2 * kChunk;
  const std::vector<int64_t> slots = BlockTableSlots(n, 19);
  ASSERT_EQ(*writer->Store(tokens, slots), 2u);
  writer->Flush();

  ConnectorOptions o;
  o.ns.model_id = "gpu-test";  // the writer's namespace (MakeConnector)
  o.ns.layout = LayoutOf(s);
  o.ns.chunk_tokens = kChunk;
  o.use_cost_model = false;
  o.copy.forbid_staging = true;
  auto reader = KVConnector::Create(o, store);
  ASSERT_TRUE(reader.ok()) << reader.status();
  HostCache fresh(s, 0);
  Fill(fresh, kSentinel);
  DeviceCache dev2;
  dev2.Upload(fresh);
  ASSERT_TRUE((*reader)->RegisterKvView(dev2.View(fresh)).ok());
  const std::vector<int64_t> to = LoadSlots(n, 20);
  auto loaded = (*reader)->Load(tokens, n, to, 0);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->loaded_tokens, n) << loaded->first_error;
  EXPECT_TRUE(dev2.Download(s).SameBytes(ExpectedAfterLoad(src, slots, to, n)));
}

// Device -> host -> disk; the host copies are erased; the load reads the disk records
// (promoting them) and writes a fresh device cache byte-identical to the source.
TEST_F(GpuHierarchyTest, DeviceHostDiskEvictHostLoadBack) {
  const Shape s = MakeShape(LayoutKind::kFlashAttnNHD, DType::kBF16);
  HostCache src(s, 401);
  DeviceCache dev;
  dev.Upload(src);
  ScopedTempDir dir;
  HostTier* host = nullptr;
  DiskTier* disk = nullptr;
  auto store = DiskStore(dir.path() + "/disk", 32 << 20, &host, &disk);
  ASSERT_NE(store, nullptr);
  ASSERT_NE(host, nullptr);
  ASSERT_NE(disk, nullptr);
  auto conn = MakeConnector(store, s);
  ASSERT_TRUE(conn->RegisterKvView(dev.View(src)).ok());
  const std::vector<TokenId> tokens = Prompt(4 * kChunk + 1, 9);
  const uint64_t n = 4 * kChunk;
  const std::vector<int64_t> slots = BlockTableSlots(n, 10);
  ASSERT_EQ(*conn->Store(tokens, slots), 4u);
  conn->Flush();

  const std::vector<ChunkKey> keys = ComputeChunkKeys(
      conn->ns(), std::span<const TokenId>(tokens).first(n), {.chunk_tokens = kChunk});
  for (const ChunkStat& st : disk->Stat(keys)) ASSERT_TRUE(st.present) << "not on disk";
  for (const ChunkKey& k : keys) ASSERT_TRUE(host->Erase(k).ok());
  for (const ChunkStat& st : host->Stat(keys)) ASSERT_FALSE(st.present) << "still in host";

  HostCache fresh(s, 0);
  Fill(fresh, kSentinel);
  DeviceCache dev2;
  dev2.Upload(fresh);
  ASSERT_TRUE(conn->RegisterKvView(dev2.View(fresh)).ok());
  const std::vector<int64_t> to = LoadSlots(n, 11);
  auto loaded = conn->Load(tokens, n, to, 0);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->loaded_tokens, n) << loaded->first_error;
  EXPECT_TRUE(dev2.Download(s).SameBytes(ExpectedAfterLoad(src, slots, to, n)));
}

#if !KVT_GPU_TEST_HOST_MEMORY
// vLLM stores a request's blocks while the model keeps running: the store is ordered
// after an event on the engine's stream; the engine then keeps writing other blocks,
// and rewrites the stored blocks once the store has returned. The stored bytes are
// those at the event: not the bytes before it (the event was waited for), not any
// later write.
TEST_F(GpuHierarchyTest, StoreOnStreamSeesBytesAtItsEvent) {
  const Shape s = MakeShape(LayoutKind::kFlashAttnNHD, DType::kBF16);
  HostCache before(s, 501);  // the cache's bytes before the engine's writes
  DeviceCache dev;
  dev.Upload(before);
  const std::vector<TokenId> tokens = Prompt(kChunk, 12);
  // The chunk's two blocks, and the rest of the cache ("other blocks").
  const std::vector<int64_t> slots = BlockTableSlots(kChunk, 13);
  const uint64_t tensor_bytes = before.k_or_layer[0].size();

  // What the engine writes before the event: the stored blocks get new bytes.
  HostCache at_event = before;
  std::mt19937 rng(14);
  std::vector<std::byte> new_rows(before.PayloadBytes(kChunk));
  for (auto& b : new_rows) b = static_cast<std::byte>(rng());
  at_event.Reference(slots, new_rows, /*to_payload=*/false);

  cudaStream_t engine = nullptr, store_stream = nullptr;
  CUDA_OK(cudaStreamCreateWithFlags(&engine, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamCreateWithFlags(&store_stream, cudaStreamNonBlocking));
  cudaEvent_t event = nullptr;
  CUDA_OK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  // Everything that allocates (the pinned host arena: cudaHostAlloc may synchronize the
  // device) is made before the engine's work is queued.
  auto store = HostStore();
  auto conn = MakeConnector(store, s, store_stream);
  ASSERT_TRUE(conn->RegisterKvView(dev.View(before)).ok());

  // Engine stream: a 200 ms host-side stall (the model still running), then the new
  // bytes (whole tensors from pinned copies: only the stored blocks differ), then the
  // event, then writes to every other block, then, once the store has returned, a
  // rewrite of everything (the engine reusing the stored blocks).
  struct Gate {
    std::atomic<bool> open{false};
  } gate;
  auto stall = [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(200)); };
  // Bounded: should the store ever wait for the engine stream (an implicit device
  // synchronization), the test fails on the bytes after 10 s instead of hanging.
  auto wait_gate = [](void* g) {
    for (int ms = 0; ms < 10000 && !static_cast<Gate*>(g)->open.load(); ++ms) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  // On every way out (a failed assertion included) the gate opens and the engine
  // stream drains, so no host function is left waiting on this frame.
  struct OpenOnExit {
    Gate& gate;
    cudaStream_t stream;
    ~OpenOnExit() {
      gate.open = true;
      cudaStreamSynchronize(stream);
    }
  } open_on_exit{gate, engine};
  std::vector<std::byte*> staged;
  for (size_t l = 0; l < at_event.k_or_layer.size(); ++l) {
    std::byte* p = nullptr;
    CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&p), tensor_bytes, 0));
    std::memcpy(p, at_event.k_or_layer[l].data(), tensor_bytes);
    staged.push_back(p);
  }
  CUDA_OK(cudaLaunchHostFunc(engine, stall, nullptr));
  for (size_t l = 0; l < staged.size(); ++l) {
    CUDA_OK(cudaMemcpyAsync(dev.k_or_layer[l], staged[l], tensor_bytes, cudaMemcpyHostToDevice,
                            engine));
  }
  CUDA_OK(cudaEventRecord(event, engine));
  // Other blocks: every block the chunk does not use, rewritten many times.
  std::vector<bool> used(kBlocks, false);
  for (int64_t slot : slots) used[slot / kBlock] = true;
  const uint64_t block_bytes = tensor_bytes / 2 / kBlocks;  // NHD: [2, N, B, H, D]
  for (int round = 0; round < 50; ++round) {
    for (size_t l = 0; l < dev.k_or_layer.size(); ++l) {
      for (uint32_t plane = 0; plane < 2; ++plane) {
        for (uint32_t b = 0; b < kBlocks; ++b) {
          if (used[b]) continue;
          auto* p =
              static_cast<std::byte*>(dev.k_or_layer[l]) + (plane * kBlocks + b) * block_bytes;
          CUDA_OK(cudaMemsetAsync(p, round, block_bytes, engine));
        }
      }
    }
  }
  // After the store returned: the engine reuses the stored blocks.
  CUDA_OK(cudaLaunchHostFunc(engine, wait_gate, &gate));
  for (size_t l = 0; l < dev.k_or_layer.size(); ++l) {
    CUDA_OK(cudaMemsetAsync(dev.k_or_layer[l], 0x77, tensor_bytes, engine));
  }

  // The store: ordered after the event on its own stream.
  CUDA_OK(cudaStreamWaitEvent(store_stream, event, 0));
  auto taken = conn->Store(tokens, slots);
  gate.open = true;
  ASSERT_TRUE(taken.ok()) << taken.status();
  ASSERT_EQ(*taken, 1u);
  conn->Flush();
  CUDA_OK(cudaStreamSynchronize(engine));

  std::vector<std::byte> want(before.PayloadBytes(kChunk), std::byte{0});
  at_event.Reference(slots, want, /*to_payload=*/true);
  EXPECT_TRUE(StoredPayloads(*conn, tokens, kChunk) == want)
      << "the stored bytes are not those at the store's event";
  // The engine's later writes did happen (the check above is not vacuous).
  std::vector<std::byte> after(tensor_bytes);
  CUDA_OK(cudaMemcpy(after.data(), dev.k_or_layer[0], tensor_bytes, cudaMemcpyDeviceToHost));
  EXPECT_TRUE(
      std::all_of(after.begin(), after.end(), [](std::byte b) { return b == std::byte{0x77}; }));

  for (std::byte* p : staged) cudaFreeHost(p);
  cudaEventDestroy(event);
  cudaStreamDestroy(store_stream);
  cudaStreamDestroy(engine);
}

#endif  // !KVT_GPU_TEST_HOST_MEMORY

// A load that stops at a corrupted disk record: the chunks before it are written, and
// no device block of the corrupted chunk (or of any later one) is touched.
TEST_F(GpuHierarchyTest, CorruptDiskRecordWritesNoDeviceBlockOfThatChunk) {
  const Shape s = MakeShape(LayoutKind::kFlashInfer, DType::kBF16);
  HostCache src(s, 601);
  DeviceCache dev;
  dev.Upload(src);
  ScopedTempDir dir;
  DiskTier* disk = nullptr;
  auto store = DiskStore(dir.path() + "/disk", /*host_bytes=*/0, nullptr, &disk);
  ASSERT_NE(store, nullptr);
  auto conn = MakeConnector(store, s);
  ASSERT_TRUE(conn->RegisterKvView(dev.View(src)).ok());
  const std::vector<TokenId> tokens = Prompt(4 * kChunk + 1, 15);
  const uint64_t n = 4 * kChunk;
  const std::vector<int64_t> slots = BlockTableSlots(n, 16);
  ASSERT_EQ(*conn->Store(tokens, slots), 4u);
  conn->Flush();
  // Flip one payload byte of chunk 1 in its record file (records land in the first
  // file in store order, each padded to 4 KiB: as kv_connector_test's corruption test).
  const uint64_t padded = (kChunkHeaderBytes + conn->chunk_payload_bytes() + 4095) / 4096 * 4096;
  {
    const std::string file = dir.path() + "/disk/records/rec-000000.dat";
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    ASSERT_TRUE(f.good()) << file;
    const auto at = static_cast<std::streamoff>(padded + kChunkHeaderBytes + 100);
    char b = 0;
    f.seekg(at);
    f.read(&b, 1);
    b ^= 0x40;
    f.seekp(at);
    f.write(&b, 1);
    ASSERT_TRUE(f.good());
  }

  HostCache fresh(s, 0);
  Fill(fresh, kSentinel);
  DeviceCache dev2;
  dev2.Upload(fresh);
  ASSERT_TRUE(conn->RegisterKvView(dev2.View(fresh)).ok());
  const std::vector<int64_t> to = BlockTableSlots(n, 17);
  auto loaded = conn->Load(tokens, n, to, 0);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->loaded_tokens, kChunk);
  EXPECT_EQ(loaded->failed_chunks, (std::vector<size_t>{1, 2, 3}));
  EXPECT_EQ(loaded->first_error.code(), absl::StatusCode::kDataLoss);
  // Exactly chunk 0's slots written; everything else (chunks 1..3) still the sentinel.
  EXPECT_TRUE(dev2.Download(s).SameBytes(ExpectedAfterLoad(src, slots, to, kChunk)));
}

#if !KVT_GPU_TEST_HOST_MEMORY
TEST(GpuSetupTest, ReportsWhetherCudaIsUsable) {
  REQUIRE_GPU();
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_GE(count, 1);
}
#endif

}  // namespace
}  // namespace kvt
