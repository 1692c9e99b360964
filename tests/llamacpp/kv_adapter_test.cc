// End-to-end tests of the llama.cpp adapter on the tiny synthetic model: logits after a
// kvtier load are bit-identical to recompute, in-process, across processes, after a
// restart, with corrupted chunks, diverging prompts and mismatched settings.
#include "llamacpp/kv_adapter.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/chunk_key.h"
#include "llama_test_util.h"
#include "store_test_util.h"

namespace kvt::llamacpp {
namespace {

using ::kvt::llamacpp::testing::kTestChunkTokens;
using ::kvt::llamacpp::testing::MakeConnector;
using ::kvt::llamacpp::testing::MakeStore;
using ::kvt::llamacpp::testing::MakeTempDir;
using ::kvt::llamacpp::testing::RandomTokens;
using ::kvt::llamacpp::testing::TinyEngineOptions;
using ::kvt::llamacpp::testing::TinyModelPath;
using ::kvt::testing::GetRecord;
using ::kvt::testing::PutRecord;

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && !a.empty() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Rig {
  std::unique_ptr<LlamaEngine> engine;
  std::shared_ptr<TieredStore> store;
  std::shared_ptr<KVConnector> connector;
  std::unique_ptr<LlamaKvAdapter> adapter;
};

Rig MakeRig(const EngineOptions& eo, std::shared_ptr<TieredStore> store) {
  Rig rig;
  auto engine = LlamaEngine::Create(eo);
  EXPECT_TRUE(engine.ok()) << engine.status();
  rig.engine = std::move(*engine);
  rig.store = std::move(store);
  auto connector = MakeConnector(*rig.engine, rig.store);
  EXPECT_TRUE(connector.ok()) << connector.status();
  rig.connector = *connector;
  auto adapter = LlamaKvAdapter::Create(rig.engine.get(), rig.connector);
  EXPECT_TRUE(adapter.ok()) << adapter.status();
  rig.adapter = std::move(*adapter);
  return rig;
}

std::shared_ptr<TieredStore> HostStore() {
  auto s = MakeStore("");
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

RunResult MustRun(LlamaKvAdapter& a, const std::vector<TokenId>& prompt, RunOptions o) {
  auto r = a.Run(prompt, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : RunResult{};
}

RunOptions Cold(uint64_t recompute_prefix) {
  RunOptions o;
  o.use_kvtier = false;
  if (recompute_prefix > 0) o.recompute_prefix_tokens = recompute_prefix;
  return o;
}

// Stores `source` (all complete chunks) through the adapter and waits for the store.
void StoreSource(Rig& rig, const std::vector<TokenId>& source) {
  RunResult r = MustRun(*rig.adapter, source, RunOptions{});
  EXPECT_EQ(r.stored_chunks, source.size() / kTestChunkTokens);
  rig.connector->Flush();
}

class LogitsIdentityTest : public ::testing::TestWithParam<bool> {};

TEST_P(LogitsIdentityTest, LoadedPrefixThenOneTokenMatchesRecomputeBitForBit) {
  const bool flash_attn = GetParam();
  Rig rig = MakeRig(TinyEngineOptions(flash_attn), HostStore());
  const int32_t n_vocab = rig.engine->n_vocab();
  // m = 1 chunk, several chunks (3, and one not a multiple of the 64-token batch),
  // many chunks (20).
  for (uint64_t m : {32u, 96u, 160u, 640u}) {
    SCOPED_TRACE(m);
    // The chunks come from a longer prompt prefilled in its own batches.
    const std::vector<TokenId> source = RandomTokens(1000 + m, m + 50, n_vocab);
    StoreSource(rig, source);
    std::vector<TokenId> request(source.begin(), source.begin() + m);
    request.push_back(7);  // a next token the source did not have

    const RunResult warm = MustRun(*rig.adapter, request, RunOptions{});
    EXPECT_EQ(warm.cached_tokens, m);
    EXPECT_EQ(warm.loaded_tokens, m);
    EXPECT_EQ(warm.computed_tokens, 1u);
    EXPECT_TRUE(warm.failed_chunks.empty());

    const RunResult recompute = MustRun(*rig.adapter, request, Cold(m));
    EXPECT_EQ(recompute.loaded_tokens, 0u);
    ASSERT_EQ(warm.logits.size(), static_cast<size_t>(n_vocab));
    EXPECT_TRUE(SameBits(warm.logits, recompute.logits)) << "flash_attn=" << flash_attn;
    // Sanity: the logits are real numbers that depend on the prefix.
    EXPECT_TRUE(std::isfinite(warm.logits[0]));
  }
}

TEST_P(LogitsIdentityTest, PromptDivergingInsideAChunkUsesOnlyCommonFullChunks) {
  Rig rig = MakeRig(TinyEngineOptions(GetParam()), HostStore());
  const int32_t n_vocab = rig.engine->n_vocab();
  const std::vector<TokenId> source = RandomTokens(7, 200, n_vocab);
  StoreSource(rig, source);
  // Same first 100 tokens (3 full chunks + 4 tokens of chunk 3), then different.
  std::vector<TokenId> request(source.begin(), source.begin() + 100);
  const std::vector<TokenId> other = RandomTokens(8, 60, n_vocab);
  request.insert(request.end(), other.begin(), other.end());
  ASSERT_NE(request[100], source[100]);

  const RunResult warm = MustRun(*rig.adapter, request, RunOptions{});
  EXPECT_EQ(warm.cached_tokens, 96u);
  EXPECT_EQ(warm.loaded_tokens, 96u);
  EXPECT_EQ(warm.computed_tokens, 64u);
  const RunResult recompute = MustRun(*rig.adapter, request, Cold(96));
  EXPECT_TRUE(SameBits(warm.logits, recompute.logits));
}

INSTANTIATE_TEST_SUITE_P(FlashAttn, LogitsIdentityTest, ::testing::Bool(), [](const auto& info) {
  return info.param ? "FlashAttnOn" : "FlashAttnOff";
});

// Bytes that left the process (the disk tier) are verified once, by the tier: a record
// damaged on disk is DataLoss, and the chunk is recomputed with identical logits.
TEST(LlamaKvAdapterTest, CorruptedChunkOnDiskIsRecomputed) {
  auto disk_store = MakeStore(MakeTempDir("disk-only"), /*with_host=*/false);
  ASSERT_TRUE(disk_store.ok()) << disk_store.status();
  Rig rig = MakeRig(TinyEngineOptions(false), *disk_store);
  const std::vector<TokenId> source = RandomTokens(11, 170, rig.engine->n_vocab());
  StoreSource(rig, source);
  // Replace chunk 2's record on disk with one whose payload changed after its checksum
  // (header left valid).
  const std::vector<ChunkKey> keys =
      ComputeChunkKeys(rig.connector->ns(), source, ChunkKeyOptions{kTestChunkTokens, false});
  ASSERT_EQ(keys.size(), 5u);
  auto record = GetRecord(*rig.store, keys[2], nullptr, GetOptions{.peek = true});
  ASSERT_TRUE(record.ok()) << record.status();
  std::vector<std::byte> bytes = *record;
  bytes[kChunkHeaderBytes + 100] ^= std::byte{0x40};
  ASSERT_TRUE(PutRecord(*rig.store, bytes).ok());

  std::vector<TokenId> request(source.begin(), source.begin() + 161);
  const RunResult warm = MustRun(*rig.adapter, request, RunOptions{});
  EXPECT_EQ(warm.planned_tokens, 160u);
  EXPECT_EQ(warm.loaded_tokens, 64u);
  EXPECT_THAT(warm.failed_chunks, ::testing::Contains(2u));
  EXPECT_EQ(warm.computed_tokens, 161u - 64u);
  const RunResult recompute = MustRun(*rig.adapter, request, Cold(64));
  EXPECT_TRUE(SameBits(warm.logits, recompute.logits));
}

TEST(LlamaKvAdapterTest, DifferentModelOrSettingsGetNoHit) {
  auto store = HostStore();
  Rig base = MakeRig(TinyEngineOptions(false), store);
  const std::vector<TokenId> source = RandomTokens(21, 130, base.engine->n_vocab());
  StoreSource(base, source);
  EXPECT_EQ(MustRun(*base.adapter, source, RunOptions{}).loaded_tokens, 128u);

  EngineOptions fa = TinyEngineOptions(true);
  EngineOptions f32 = TinyEngineOptions(false);
  f32.type_k = "f32";
  f32.type_v = "f32";
  EngineOptions other_model = TinyEngineOptions(false, TinyModelPath(/*seed=*/43));
  for (const EngineOptions& eo : {fa, f32, other_model}) {
    SCOPED_TRACE(eo.model_path + (eo.flash_attn ? " fa" : "") + " " + eo.type_k);
    Rig rig = MakeRig(eo, store);
    EXPECT_NE(rig.connector->ns(), base.connector->ns());
    const RunResult r = MustRun(*rig.adapter, source, RunOptions{.store = false});
    EXPECT_EQ(r.cached_tokens, 0u);
    EXPECT_EQ(r.loaded_tokens, 0u);
  }
}

// Path of the helper binary (a second engine process).
std::string HelperPath() { return KVT_LLAMACPP_TEST_HELPER; }

// Runs the helper; returns its exit code. It writes "<loaded_tokens>\n" + logits to out.
int RunHelper(const std::string& mode, const std::string& disk, uint64_t seed, size_t n,
              const std::string& out) {
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string s = std::to_string(seed), len = std::to_string(n);
    execl(HelperPath().c_str(), HelperPath().c_str(), "--model", TinyModelPath().c_str(), "--disk",
          disk.c_str(), "--mode", mode.c_str(), "--seed", s.c_str(), "--tokens", len.c_str(),
          "--out", out.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

struct HelperOutput {
  uint64_t loaded = 0;
  std::vector<float> logits;
};
HelperOutput ReadHelperOutput(const std::string& path) {
  HelperOutput o;
  std::ifstream f(path, std::ios::binary);
  f.read(reinterpret_cast<char*>(&o.loaded), sizeof(o.loaded));
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), sizeof(n));
  o.logits.resize(n);
  f.read(reinterpret_cast<char*>(o.logits.data()), static_cast<std::streamsize>(n * sizeof(float)));
  return o;
}

TEST(LlamaKvAdapterTest, SecondProcessAndRestartHitChunksFromDiskTier) {
  const std::string disk = MakeTempDir("disk");
  const std::string out = MakeTempDir("disk-out") + "/out.bin";
  constexpr uint64_t kSeed = 31;
  constexpr size_t kTokens = 300;  // 9 full chunks + 12 tokens
  // Process A stores the prompt's chunks (host + disk tier) and exits.
  ASSERT_EQ(RunHelper("store", disk, kSeed, kTokens, out), 0);
  EXPECT_EQ(ReadHelperOutput(out).loaded, 0u);

  const std::vector<TokenId> prompt = RandomTokens(kSeed, kTokens, 32000);
  std::vector<float> reference;
  {
    // This process starts on the same disk tier: hits on every chunk A stored.
    auto store = MakeStore(disk);
    ASSERT_TRUE(store.ok()) << store.status();
    Rig rig = MakeRig(TinyEngineOptions(false), *store);
    const RunResult warm = MustRun(*rig.adapter, prompt, RunOptions{.store = false});
    EXPECT_EQ(warm.loaded_tokens, 288u);
    reference = MustRun(*rig.adapter, prompt, Cold(288)).logits;
    EXPECT_TRUE(SameBits(warm.logits, reference));
  }  // closes the disk tier (its index is single-process)
  // Process B, started later, loads from the disk tier too.
  ASSERT_EQ(RunHelper("load", disk, kSeed, kTokens, out), 0);
  const HelperOutput b = ReadHelperOutput(out);
  EXPECT_EQ(b.loaded, 288u);
  EXPECT_TRUE(SameBits(b.logits, reference));
}

TEST(LlamaKvAdapterTest, CorruptedDiskRecordIsRecomputedAfterRestart) {
  const std::string disk = MakeTempDir("disk-corrupt");
  const std::vector<TokenId> source = RandomTokens(41, 200, 32000);
  {
    auto store = MakeStore(disk);
    ASSERT_TRUE(store.ok()) << store.status();
    Rig rig = MakeRig(TinyEngineOptions(false), *store);
    StoreSource(rig, source);
    rig.store->Flush();
  }
  // Flip one byte in the payload of the first record of every record file.
  int flipped = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(disk)) {
    if (!entry.is_regular_file() || entry.path().string().find("record") == std::string::npos)
      continue;
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    char c = 0;
    f.seekg(kChunkHeaderBytes + 1000);
    f.read(&c, 1);
    c ^= 0x10;
    f.seekp(kChunkHeaderBytes + 1000);
    f.write(&c, 1);
    ++flipped;
  }
  ASSERT_GT(flipped, 0) << "no record files found under " << disk;
  auto store = MakeStore(disk);
  ASSERT_TRUE(store.ok()) << store.status();
  Rig rig = MakeRig(TinyEngineOptions(false), *store);
  std::vector<TokenId> request(source.begin(), source.begin() + 193);
  const RunResult warm = MustRun(*rig.adapter, request, RunOptions{.store = false});
  EXPECT_LT(warm.loaded_tokens, 192u);
  EXPECT_FALSE(warm.failed_chunks.empty());
  const RunResult recompute = MustRun(*rig.adapter, request, Cold(warm.loaded_tokens));
  EXPECT_TRUE(SameBits(warm.logits, recompute.logits));
}

}  // namespace
}  // namespace kvt::llamacpp

namespace kvt::llamacpp {
namespace {

TEST(LlamaKvAdapterTest, FlashAttentionNeedsChunkSizedBatches) {
  EngineOptions eo = testing::TinyEngineOptions(true);
  eo.n_batch = 2 * testing::kTestChunkTokens;
  auto engine = LlamaEngine::Create(eo);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto store = testing::MakeStore("");
  ASSERT_TRUE(store.ok());
  auto connector = testing::MakeConnector(**engine, *store);
  ASSERT_TRUE(connector.ok());
  EXPECT_EQ(LlamaKvAdapter::Create(engine->get(), *connector).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(LlamaKvAdapter::Create(engine->get(), nullptr).ok());  // cold runs only
}

}  // namespace
}  // namespace kvt::llamacpp
