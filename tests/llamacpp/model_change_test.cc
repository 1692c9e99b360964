// Issue 11, failure 2: the GGUF file is overwritten in place (same path, same size,
// other weights) under a running engine. llama.cpp's shared mapping sees the new
// weights, so chunks stored for the old model are wrong KV for it: the next request
// must not hit the old namespace, must store nothing under it, and its logits must be
// those of a cold run of the new model.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "llama_test_util.h"
#include "llamacpp/kv_adapter.h"

namespace kvt::llamacpp {
namespace {

namespace fs = std::filesystem;
using ::kvt::llamacpp::testing::kTestChunkTokens;
using ::kvt::llamacpp::testing::MakeConnector;
using ::kvt::llamacpp::testing::MakeStore;
using ::kvt::llamacpp::testing::MakeTempDir;
using ::kvt::llamacpp::testing::RandomTokens;
using ::kvt::llamacpp::testing::TinyEngineOptions;
using ::kvt::llamacpp::testing::TinyModelPath;

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && !a.empty() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<char> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}

// Overwrites `path` in place (same inode, no truncation) with `bytes`.
void OverwriteInPlace(const std::string& path, const std::vector<char>& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::pwrite(fd, bytes.data() + off, bytes.size() - off, static_cast<off_t>(off));
    ASSERT_GT(n, 0) << std::strerror(errno);
    off += static_cast<size_t>(n);
  }
  ASSERT_EQ(::fsync(fd), 0);
  ::close(fd);
}

RunResult MustRun(LlamaKvAdapter& a, const std::vector<TokenId>& prompt, RunOptions o) {
  auto r = a.Run(prompt, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : RunResult{};
}

std::vector<float> ColdLogits(const std::string& model, const std::vector<TokenId>& prompt) {
  auto engine = LlamaEngine::Create(TinyEngineOptions(false, model));
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return {};
  auto adapter = LlamaKvAdapter::Create(engine->get(), nullptr);
  EXPECT_TRUE(adapter.ok());
  RunOptions o;
  o.use_kvtier = false;
  return MustRun(**adapter, prompt, o).logits;
}

TEST(LlamaModelChangeTest, OverwrittenModelFileGetsNoHitAndStoresNothingUnderOldNamespace) {
  const std::string dir = MakeTempDir("model-change");
  const std::string model = dir + "/model.gguf";
  fs::copy_file(TinyModelPath(42), model);
  const std::vector<char> other = ReadAll(TinyModelPath(43));
  ASSERT_EQ(other.size(), fs::file_size(model)) << "the two tiny models must have the same size";

  auto engine = LlamaEngine::Create(TinyEngineOptions(false, model));
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto store = MakeStore("");
  ASSERT_TRUE(store.ok()) << store.status();
  auto connector = MakeConnector(**engine, *store);
  ASSERT_TRUE(connector.ok()) << connector.status();
  auto adapter = LlamaKvAdapter::Create(engine->get(), *connector);
  ASSERT_TRUE(adapter.ok()) << adapter.status();

  const std::vector<TokenId> prompt = RandomTokens(7, 130, (*engine)->n_vocab());
  RunResult first = MustRun(**adapter, prompt, RunOptions{});
  EXPECT_EQ(first.stored_chunks, 4u);
  (*connector)->Flush();
  // Touching the file (stamp moves, bytes do not) keeps the cache: same fingerprint.
  const std::string fp_before = (*engine)->model_fingerprint();
  fs::last_write_time(model, fs::last_write_time(model) + std::chrono::seconds(5));
  RunResult warm = MustRun(**adapter, prompt, RunOptions{.store = false});
  EXPECT_EQ(warm.loaded_tokens, 128u);
  EXPECT_EQ((*engine)->model_fingerprint(), fp_before);

  const uint64_t puts_before = (*store)->stats().tiers[0].puts;
  OverwriteInPlace(model, other);
  RunResult after = MustRun(**adapter, prompt, RunOptions{});
  (*connector)->Flush();
  EXPECT_EQ(after.loaded_tokens, 0u) << "loaded the old model's chunks";
  EXPECT_EQ(after.cached_tokens, 0u);
  EXPECT_EQ(after.stored_chunks, 0u);
  EXPECT_EQ((*store)->stats().tiers[0].puts, puts_before) << "stored under the old namespace";
  EXPECT_NE((*engine)->model_fingerprint(), fp_before);
  // The engine computes with the new weights: its logits are a cold run of the new model.
  const std::vector<float> cold_new = ColdLogits(model, prompt);
  EXPECT_TRUE(SameBits(after.logits, cold_new));
  // And it stays off for the old namespace on later requests too.
  RunResult again = MustRun(**adapter, prompt, RunOptions{});
  EXPECT_EQ(again.loaded_tokens, 0u);
  EXPECT_EQ(again.stored_chunks, 0u);

  // A connector made for the engine now names the new model and works again.
  auto connector2 = MakeConnector(**engine, *store);
  ASSERT_TRUE(connector2.ok()) << connector2.status();
  EXPECT_NE((*connector2)->ns(), (*connector)->ns());
  auto adapter2 = LlamaKvAdapter::Create(engine->get(), *connector2);
  ASSERT_TRUE(adapter2.ok());
  EXPECT_EQ(MustRun(**adapter2, prompt, RunOptions{}).stored_chunks, 4u);
  (*connector2)->Flush();
  RunResult new_warm = MustRun(**adapter2, prompt, RunOptions{.store = false});
  EXPECT_EQ(new_warm.loaded_tokens, 128u);
  EXPECT_TRUE(SameBits(new_warm.logits, cold_new));
}

}  // namespace
}  // namespace kvt::llamacpp
