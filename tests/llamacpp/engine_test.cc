// LlamaEngine + GGUF generator + real sequence-state blobs on the tiny synthetic model.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "gtest/gtest.h"
#include "llama_test_util.h"
#include "llamacpp/gguf_generator.h"
#include "llamacpp/llama_engine.h"
#include "llamacpp/seq_state.h"

namespace kvt::llamacpp {
namespace {

using ::kvt::llamacpp::testing::MakeTempDir;
using ::kvt::llamacpp::testing::RandomTokens;
using ::kvt::llamacpp::testing::TinyEngineOptions;
using ::kvt::llamacpp::testing::TinyModelPath;

std::vector<char> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

TEST(GgufGeneratorTest, SameSpecWritesSameBytes) {
  const std::string dir = MakeTempDir("gen");
  auto spec = SyntheticModelPreset("tiny", DefaultVocabPath());
  ASSERT_TRUE(spec.ok());
  ASSERT_TRUE(WriteSyntheticModel(*spec, dir + "/a.gguf").ok());
  ASSERT_TRUE(WriteSyntheticModel(*spec, dir + "/b.gguf").ok());
  EXPECT_EQ(ReadFile(dir + "/a.gguf"), ReadFile(dir + "/b.gguf"));
  spec->seed = 43;
  ASSERT_TRUE(WriteSyntheticModel(*spec, dir + "/c.gguf").ok());
  EXPECT_NE(ReadFile(dir + "/a.gguf"), ReadFile(dir + "/c.gguf"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/a.gguf.tmp"));
}

TEST(GgufGeneratorTest, RejectsBadSpecsAndSizes) {
  EXPECT_EQ(SyntheticModelPreset("huge", "").status().code(), absl::StatusCode::kInvalidArgument);
  SyntheticModelSpec spec;
  spec.n_head = 3;  // 256 % 3 != 0
  EXPECT_EQ(WriteSyntheticModel(spec, MakeTempDir("bad") + "/x.gguf").code(),
            absl::StatusCode::kInvalidArgument);
  SyntheticModelSpec missing;
  missing.vocab_gguf = "/nonexistent/vocab.gguf";
  EXPECT_EQ(WriteSyntheticModel(missing, MakeTempDir("bad") + "/y.gguf").code(),
            absl::StatusCode::kNotFound);
}

TEST(GgufGeneratorTest, DemoPresetIsAbout270MParameters) {
  auto spec = SyntheticModelPreset("demo", "");
  ASSERT_TRUE(spec.ok());
  const uint64_t params = SyntheticModelParams(*spec, 32000);
  EXPECT_GT(params, 260'000'000u);
  EXPECT_LT(params, 290'000'000u);
}

TEST(LlamaEngineTest, TinyModelLoadsWithTokenizerAndExpectedKvLayout) {
  auto engine = LlamaEngine::Create(TinyEngineOptions(false));
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_TRUE((*engine)->has_vocab());
  EXPECT_EQ((*engine)->n_vocab(), 32000);
  const KvLayout& l = (*engine)->layout();
  EXPECT_EQ(l.num_layers, 4u);
  EXPECT_EQ(l.num_kv_heads, 2u);
  EXPECT_EQ(l.head_dim, 64u);
  EXPECT_EQ(l.dtype, DType::kF16);
  EXPECT_EQ(l.kind, LayoutKind::kLlamaCppRows);
  EXPECT_TRUE((*engine)->state_spec().v_trans);  // flash attention off -> V transposed
  auto ids = (*engine)->Tokenize("Hello world", /*add_bos=*/true);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_GE(ids->size(), 3u);
  EXPECT_EQ((*ids)[0], 1);  // SPM BOS
  EXPECT_EQ((*engine)->MakeNamespaceParams(32).model_id.rfind("gguf-xxh3:", 0), 0u);
  EXPECT_NE((*engine)->engine_extra().find("flash_attn=off"), std::string::npos);
}

TEST(LlamaEngineTest, MissingModelAndBadOptionsAreErrors) {
  EngineOptions o = TinyEngineOptions(false, "/nonexistent/model.gguf");
  EXPECT_EQ(LlamaEngine::Create(o).status().code(), absl::StatusCode::kNotFound);
  o = TinyEngineOptions(false);
  o.type_k = "f99";
  EXPECT_EQ(LlamaEngine::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = TinyEngineOptions(false);
  o.n_batch = 0;
  EXPECT_EQ(LlamaEngine::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
}

class EngineStateTest : public ::testing::TestWithParam<bool> {};

// Slicing a prefilled state into chunks and reassembling a leading prefix reproduces,
// byte for byte, the state of a prefill of just that prefix; set_data round-trips.
TEST_P(EngineStateTest, ChunkedStateReassemblesPrefixByteForByte) {
  auto engine = LlamaEngine::Create(TinyEngineOptions(GetParam()));
  ASSERT_TRUE(engine.ok()) << engine.status();
  LlamaEngine& e = **engine;
  const auto tokens = RandomTokens(5, 256, e.n_vocab());
  ASSERT_TRUE(e.Prefill(tokens, 0, true).ok());
  auto full = e.GetSeqState();
  ASSERT_TRUE(full.ok()) << full.status();
  auto view = ParseSeqState(*full, e.state_spec());
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->cell_count, 256u);

  constexpr uint32_t kChunk = 32, kPrefix = 128;
  auto builder = SeqStateBuilder::Create(e.state_spec(), kPrefix);
  ASSERT_TRUE(builder.ok());
  std::vector<std::byte> payload(kChunk * e.state_spec().payload_bytes_per_token());
  for (uint32_t c = 0; c < kPrefix / kChunk; ++c) {
    ASSERT_TRUE(ExtractChunkPayload(*view, c * kChunk, kChunk, payload).ok());
    ASSERT_TRUE(builder->PutChunk(c * kChunk, kChunk, payload).ok());
  }
  e.Clear();
  ASSERT_TRUE(e.Prefill(std::span(tokens).first(kPrefix), 0, false).ok());
  auto prefix_state = e.GetSeqState();
  ASSERT_TRUE(prefix_state.ok());
  EXPECT_TRUE(std::equal(builder->blob().begin(), builder->blob().end(), prefix_state->begin(),
                         prefix_state->end()));
  // Restore the assembled blob and read it back.
  ASSERT_TRUE(e.SetSeqState(builder->blob()).ok());
  EXPECT_EQ(e.seq_tokens(), kPrefix);
  auto again = e.GetSeqState();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *prefix_state);
}

TEST_P(EngineStateTest, MalformedRealBlobsAreRejectedAndLeaveSequenceEmpty) {
  auto engine = LlamaEngine::Create(TinyEngineOptions(GetParam()));
  ASSERT_TRUE(engine.ok()) << engine.status();
  LlamaEngine& e = **engine;
  const auto tokens = RandomTokens(6, 40, e.n_vocab());
  ASSERT_TRUE(e.Prefill(tokens, 0, true).ok());
  auto blob = e.GetSeqState();
  ASSERT_TRUE(blob.ok());

  std::vector<std::byte> truncated(blob->begin(), blob->end() - 3);
  EXPECT_EQ(e.SetSeqState(truncated).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(e.seq_tokens(), 0u);
  std::vector<std::byte> extra = *blob;
  extra.push_back(std::byte{1});
  EXPECT_EQ(e.SetSeqState(extra).code(), absl::StatusCode::kDataLoss);
  std::vector<std::byte> magic = *blob;
  magic[3] ^= std::byte{0xff};
  EXPECT_EQ(e.SetSeqState(magic).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(e.seq_tokens(), 0u);
  ASSERT_TRUE(e.SetSeqState(*blob).ok());
  EXPECT_EQ(e.seq_tokens(), 40u);
}

INSTANTIATE_TEST_SUITE_P(FlashAttn, EngineStateTest, ::testing::Bool(), [](const auto& info) {
  return info.param ? "FlashAttnOn" : "FlashAttnOff";
});

}  // namespace
}  // namespace kvt::llamacpp
