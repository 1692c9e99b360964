// Model families (issue 22) on the llama.cpp adapter: every family kvtier-make-gguf
// writes either restores exactly through kvtier or is refused at start-up with a message
// naming its architecture and the piece kvtier lacks (never loaded as wrong KV). Exact:
// K and V caches of different types (-ctk q8_0 -ctv f16), MLA (deepseek2, K-only latent
// rows) and iSWA with a full-size sliding-window cache (gemma3, gpt-oss with attention
// sinks), logits bit for bit against recompute. docs/models.md.
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/chunk_key.h"
#include "llama.h"
#include "llama_test_util.h"
#include "llamacpp/gguf_generator.h"
#include "llamacpp/kv_adapter.h"
#include "store_test_util.h"

namespace kvt::llamacpp {
namespace {

using ::kvt::llamacpp::testing::kTestChunkTokens;
using ::kvt::llamacpp::testing::MakeConnector;
using ::kvt::llamacpp::testing::MakeStore;
using ::kvt::llamacpp::testing::MakeTempDir;
using ::kvt::llamacpp::testing::RandomTokens;
using ::kvt::llamacpp::testing::TinyEngineOptions;
using ::kvt::testing::GetRecord;
using ::kvt::testing::PutRecord;

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && !a.empty() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The tiny model of `arch`; `n_swa` > 0 replaces the preset's sliding window.
std::string FamilyModel(const std::string& arch, uint32_t n_swa = 0) {
  static const std::string dir = MakeTempDir("families");
  const std::string path =
      dir + "/" + arch + (n_swa > 0 ? "-swa" + std::to_string(n_swa) : "") + ".gguf";
  if (!std::filesystem::exists(path)) {
    auto spec = SyntheticArchPreset(arch, "tiny", "");
    EXPECT_TRUE(spec.ok()) << spec.status();
    if (!spec.ok()) return path;
    spec->vocab_size = 4096;  // token ids only: a small file
    if (n_swa > 0) spec->n_swa = n_swa;
    absl::Status s = WriteSyntheticModel(*spec, path);
    EXPECT_TRUE(s.ok()) << arch << ": " << s;
  }
  return path;
}

// What the engine says about each family, and which piece kvtier names as missing.
struct Family {
  std::string arch;
  std::string kind;      // in the refusal message
  std::string missing;   // in the refusal message
  bool swa_full = true;  // the engine's option (iSWA models are refused without it)
};

class RefusedFamilyTest : public ::testing::TestWithParam<Family> {};

TEST_P(RefusedFamilyTest, EngineRefusesNamingArchitectureAndMissingPiece) {
  const Family& f = GetParam();
  EngineOptions eo = TinyEngineOptions(/*flash_attn=*/false, FamilyModel(f.arch));
  eo.swa_full = f.swa_full;
  auto engine = LlamaEngine::Create(eo);
  ASSERT_FALSE(engine.ok()) << f.arch << " was accepted";
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kUnimplemented) << engine.status();
  const std::string msg(engine.status().message());
  EXPECT_NE(msg.find("'" + f.arch + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find(f.kind), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing: " + f.missing), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(Families, RefusedFamilyTest,
                         ::testing::Values(Family{"gemma3", "iSWA",
                                                  "every token's sliding-window rows: run with "
                                                  "--swa-full",
                                                  /*swa_full=*/false},
                                           Family{"gpt-oss", "iSWA",
                                                  "every token's sliding-window rows: run with "
                                                  "--swa-full",
                                                  /*swa_full=*/false}),
                         [](const ::testing::TestParamInfo<Family>& i) {
                           std::string n = i.param.arch;
                           for (char& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n;
                         });

// Families kvtier restores exactly: K and V rows of different sizes in one payload
// (-ctk q8_0 -ctv f16), MLA's K-only latent rows (deepseek2), and iSWA caches with a
// full-size sliding-window cache (gemma3; gpt-oss with attention sinks and MoE): a
// 4-chunk prompt of 137 tokens is longer than their 48-token window, so restoring 3
// chunks needs sliding-window rows that llama_state_seq_get_data no longer writes.
struct ExactCase {
  std::string name;
  std::string arch;  // "llama" = the tests' tiny model
  std::string type_k;
  std::string type_v;
  bool flash_attn;
  // The same model with other cache settings: another namespace, never a hit.
  std::string other_type_k;
  std::string other_type_v;
};

class ExactFamilyTest : public ::testing::TestWithParam<ExactCase> {};

TEST_P(ExactFamilyTest, LoadedPrefixMatchesRecomputeBitForBitAndOtherShapesNeverHit) {
  const ExactCase& c = GetParam();
  const std::string model =
      c.arch == "llama" ? ::kvt::llamacpp::testing::TinyModelPath() : FamilyModel(c.arch);
  EngineOptions eo = TinyEngineOptions(c.flash_attn, model);
  eo.type_k = c.type_k;
  eo.type_v = c.type_v;
  auto engine = LlamaEngine::Create(eo);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const SeqStateSpec& spec = (*engine)->state_spec();
  if (c.arch == "deepseek2") {
    EXPECT_FALSE(spec.has_v);
    EXPECT_EQ((*engine)->layout().kind, LayoutKind::kMLA) << (*engine)->layout().DebugString();
  } else if (c.arch == "gemma3" || c.arch == "gpt-oss") {
    // Two KV sections (full-attention layers, sliding-window layers), cut per token.
    EXPECT_GT(spec.n_layer, 0u) << spec.DebugString();
    EXPECT_GT(spec.n_layer_swa, 0u) << spec.DebugString();
    EXPECT_EQ((*engine)->layout().num_layers, spec.n_layer + spec.n_layer_swa);
    EXPECT_NE((*engine)->engine_extra().find(";memory=iswa;n_swa=48;"), std::string::npos)
        << (*engine)->engine_extra();
    EXPECT_NE((*engine)->engine_extra().find(";swa_full=1"), std::string::npos);
  } else {
    EXPECT_NE(spec.k_row_bytes, spec.v_row_bytes) << spec.DebugString();
  }
  auto store = MakeStore("");
  ASSERT_TRUE(store.ok()) << store.status();
  auto connector = MakeConnector(**engine, *store);
  ASSERT_TRUE(connector.ok()) << connector.status();
  auto adapter = LlamaKvAdapter::Create(engine->get(), *connector);
  ASSERT_TRUE(adapter.ok()) << adapter.status();
  const int32_t n_vocab = (*engine)->n_vocab();
  const std::vector<TokenId> source = RandomTokens(2201, 4 * kTestChunkTokens + 9, n_vocab);
  auto stored = (*adapter)->Run(source, RunOptions{});
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->stored_chunks, 4u);
  (*connector)->Flush();
  for (uint64_t m : {kTestChunkTokens, 3 * kTestChunkTokens}) {
    SCOPED_TRACE(m);
    std::vector<TokenId> request(source.begin(), source.begin() + static_cast<int64_t>(m));
    request.push_back(11);
    auto warm = (*adapter)->Run(request, RunOptions{});
    ASSERT_TRUE(warm.ok()) << warm.status();
    EXPECT_EQ(warm->loaded_tokens, m);
    EXPECT_EQ(warm->computed_tokens, 1u);
    RunOptions cold;
    cold.use_kvtier = false;
    cold.recompute_prefix_tokens = m;
    auto recompute = (*adapter)->Run(request, cold);
    ASSERT_TRUE(recompute.ok()) << recompute.status();
    EXPECT_EQ(recompute->loaded_tokens, 0u);
    EXPECT_TRUE(SameBits(warm->logits, recompute->logits)) << c.name;
  }

  // The same model with other cache types: another namespace, its connector finds nothing.
  EngineOptions other = TinyEngineOptions(c.flash_attn, model);
  other.type_k = c.other_type_k;
  other.type_v = c.other_type_v;
  auto engine2 = LlamaEngine::Create(other);
  ASSERT_TRUE(engine2.ok()) << engine2.status();
  auto connector2 = MakeConnector(**engine2, *store);
  ASSERT_TRUE(connector2.ok()) << connector2.status();
  EXPECT_NE((*connector)->ns().ToHex(), (*connector2)->ns().ToHex());
  auto lookup = (*connector2)->Lookup(source, 0);
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  EXPECT_EQ(lookup->cached_tokens, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Families, ExactFamilyTest,
    ::testing::Values(ExactCase{"llama_q8_0_f16", "llama", "q8_0", "f16", false, "f16", "f16"},
                      ExactCase{"llama_q8_0_f16_fa", "llama", "q8_0", "f16", true, "f16", "f16"},
                      ExactCase{"deepseek2_mla", "deepseek2", "f16", "f16", false, "f32", "f32"},
                      ExactCase{"deepseek2_mla_fa", "deepseek2", "f16", "f16", true, "f32", "f32"},
                      ExactCase{"gemma3_iswa", "gemma3", "f16", "f16", false, "f32", "f32"},
                      ExactCase{"gemma3_iswa_fa", "gemma3", "f16", "f16", true, "f32", "f32"},
                      ExactCase{"gpt_oss_iswa_sinks", "gpt-oss", "f16", "f16", false, "f32", "f32"},
                      ExactCase{"gpt_oss_iswa_sinks_fa", "gpt-oss", "f16", "f16", true, "f32",
                                "f32"}),
    [](const ::testing::TestParamInfo<ExactCase>& i) { return i.param.name; });

// A record from another family never hits: the llama and deepseek2 models' namespaces
// differ (model file, layout), so one store holding both answers each only for its own.
TEST(ModelFamiliesTest, RecordsOfOneFamilyNeverHitInAnother) {
  auto llama = LlamaEngine::Create(TinyEngineOptions(false));
  auto mla = LlamaEngine::Create(TinyEngineOptions(false, FamilyModel("deepseek2")));
  ASSERT_TRUE(llama.ok() && mla.ok()) << llama.status() << mla.status();
  auto store = MakeStore("");
  ASSERT_TRUE(store.ok());
  auto c1 = MakeConnector(**llama, *store);
  auto c2 = MakeConnector(**mla, *store);
  ASSERT_TRUE(c1.ok() && c2.ok());
  auto a1 = LlamaKvAdapter::Create(llama->get(), *c1);
  ASSERT_TRUE(a1.ok());
  const std::vector<TokenId> prompt = RandomTokens(77, 3 * kTestChunkTokens + 5, 4096);
  auto r = (*a1)->Run(prompt, RunOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stored_chunks, 3u);
  (*c1)->Flush();
  auto hit = (*c1)->Lookup(prompt, 0);
  auto miss = (*c2)->Lookup(prompt, 0);
  ASSERT_TRUE(hit.ok() && miss.ok());
  EXPECT_EQ(hit->cached_tokens, 3 * kTestChunkTokens);
  EXPECT_EQ(miss->cached_tokens, 0u);
}

// An iSWA record never hits for a plain model or for the same family with another
// window: gemma3 (window 48) stores; llama, gemma3 with window 32 and gemma3 without a
// full-size SWA cache (refused, naming --swa-full) find nothing of it.
TEST(ModelFamiliesTest, IswaRecordsNeverHitAcrossWindowsOrFamilies) {
  auto gemma = LlamaEngine::Create(TinyEngineOptions(false, FamilyModel("gemma3")));
  auto gemma32 = LlamaEngine::Create(TinyEngineOptions(false, FamilyModel("gemma3", 32)));
  auto llama = LlamaEngine::Create(TinyEngineOptions(false));
  ASSERT_TRUE(gemma.ok() && gemma32.ok() && llama.ok())
      << gemma.status() << gemma32.status() << llama.status();
  EXPECT_EQ((*gemma)->n_swa(), 48);
  EXPECT_EQ((*gemma32)->n_swa(), 32);
  auto store = MakeStore("");
  ASSERT_TRUE(store.ok());
  auto cg = MakeConnector(**gemma, *store);
  auto cg32 = MakeConnector(**gemma32, *store);
  auto cl = MakeConnector(**llama, *store);
  ASSERT_TRUE(cg.ok() && cg32.ok() && cl.ok());
  auto a = LlamaKvAdapter::Create(gemma->get(), *cg);
  ASSERT_TRUE(a.ok());
  const std::vector<TokenId> prompt = RandomTokens(78, 3 * kTestChunkTokens + 5, 4096);
  auto r = (*a)->Run(prompt, RunOptions{});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stored_chunks, 3u);
  (*cg)->Flush();
  auto hit = (*cg)->Lookup(prompt, 0);
  auto miss32 = (*cg32)->Lookup(prompt, 0);
  auto miss_llama = (*cl)->Lookup(prompt, 0);
  ASSERT_TRUE(hit.ok() && miss32.ok() && miss_llama.ok());
  EXPECT_EQ(hit->cached_tokens, 3 * kTestChunkTokens);
  EXPECT_EQ(miss32->cached_tokens, 0u);
  EXPECT_EQ(miss_llama->cached_tokens, 0u);
  EngineOptions no_full = TinyEngineOptions(false, FamilyModel("gemma3"));
  no_full.swa_full = false;
  auto refused = LlamaEngine::Create(no_full);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(refused.status().message().find("--swa-full"), std::string_view::npos)
      << refused.status();
}

// Recurrent and hybrid models (mamba2; granitehybrid, lfm2, qwen35 whose attention
// cells carry M-RoPE records): a chunk record is
// its attention rows and the recurrent state at its last token (a boundary snapshot);
// restoring k chunks = rows of chunks 1..k + snapshot k, logits bit for bit against a
// recompute. A prompt sharing 2 chunks then differing loads only those (its own chunks
// get their own snapshots). A chunk whose snapshot is corrupted on disk fails its
// checksum: the chunks before it load, the rest is computed, same logits.
class SnapshotFamilyTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SnapshotFamilyTest, RowsAndBoundarySnapshotRestoreBitForBit) {
  const std::string arch = GetParam();
  auto engine = LlamaEngine::Create(TinyEngineOptions(false, FamilyModel(arch)));
  ASSERT_TRUE(engine.ok()) << engine.status();
  ASSERT_TRUE((*engine)->has_snapshots());
  EXPECT_GT((*engine)->snapshot_bytes(), 0u);
  const bool recurrent = arch == "mamba2";
  EXPECT_EQ((*engine)->memory_kind(), recurrent ? MemoryKind::kRecurrent : MemoryKind::kHybrid);
  EXPECT_NE((*engine)->engine_extra().find(recurrent ? ";memory=recurrent;snapshot_bytes="
                                                     : ";memory=hybrid;snapshot_bytes="),
            std::string::npos)
      << (*engine)->engine_extra();
  // qwen35's attention uses interleaved M-RoPE: its cells carry ext records.
  EXPECT_EQ((*engine)->state_spec().cell_ext, arch == "qwen35");
  EXPECT_EQ((*engine)->engine_extra().find(";rope=imrope;") != std::string::npos, arch == "qwen35")
      << (*engine)->engine_extra();
  auto store = MakeStore(MakeTempDir("snap-" + arch), /*with_host=*/false);
  ASSERT_TRUE(store.ok()) << store.status();
  auto connector = MakeConnector(**engine, *store);
  ASSERT_TRUE(connector.ok()) << connector.status();
  // Record = rows + snapshot, padded to whole tokens.
  const uint64_t rows =
      recurrent ? 0 : (*engine)->state_spec().payload_bytes_per_token() * kTestChunkTokens;
  EXPECT_GE((*connector)->chunk_payload_bytes(), rows + (*engine)->snapshot_bytes());
  EXPECT_LT((*connector)->chunk_payload_bytes(),
            rows + (*engine)->snapshot_bytes() + 2 * kTestChunkTokens);
  auto adapter = LlamaKvAdapter::Create(engine->get(), *connector);
  ASSERT_TRUE(adapter.ok()) << adapter.status();
  const int32_t n_vocab = (*engine)->n_vocab();
  auto run = [&](const std::vector<TokenId>& p, const RunOptions& o) {
    auto r = (*adapter)->Run(p, o);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : RunResult{};
  };
  auto cold = [](uint64_t m) {
    RunOptions o;
    o.use_kvtier = false;
    if (m > 0) o.recompute_prefix_tokens = m;
    return o;
  };
  const std::vector<TokenId> source = RandomTokens(2301, 4 * kTestChunkTokens + 9, n_vocab);
  EXPECT_EQ(run(source, RunOptions{}).stored_chunks, 4u);
  (*connector)->Flush();
  for (uint64_t m : {kTestChunkTokens, 3 * kTestChunkTokens}) {
    SCOPED_TRACE(m);
    std::vector<TokenId> request(source.begin(), source.begin() + static_cast<int64_t>(m));
    request.push_back(11);
    const RunResult warm = run(request, RunOptions{});
    EXPECT_EQ(warm.loaded_tokens, m);
    EXPECT_EQ(warm.computed_tokens, 1u);
    EXPECT_TRUE(SameBits(warm.logits, run(request, cold(m)).logits)) << arch;
    EXPECT_TRUE(SameBits(warm.logits, run(request, cold(0)).logits)) << arch;
  }
  // Shares 2 chunks, then differs.
  std::vector<TokenId> other = RandomTokens(2302, 4 * kTestChunkTokens + 9, n_vocab);
  std::copy(source.begin(), source.begin() + 2 * kTestChunkTokens, other.begin());
  const RunResult diverged = run(other, RunOptions{});
  EXPECT_EQ(diverged.loaded_tokens, 2 * kTestChunkTokens);
  EXPECT_EQ(diverged.stored_chunks, 2u);
  EXPECT_TRUE(SameBits(diverged.logits, run(other, cold(0)).logits)) << arch;
  (*connector)->Flush();
  // Its own chunks 3 and 4 load with their own snapshots.
  const RunResult again = run(other, RunOptions{});
  EXPECT_EQ(again.loaded_tokens, 4 * kTestChunkTokens);
  EXPECT_TRUE(SameBits(again.logits, diverged.logits)) << arch;

  // Corrupt chunk 2's snapshot (the record's last payload bytes) on disk.
  const std::vector<ChunkKey> keys =
      ComputeChunkKeys((*connector)->ns(), source, ChunkKeyOptions{kTestChunkTokens, false});
  ASSERT_EQ(keys.size(), 4u);
  auto record = GetRecord(**store, keys[2], nullptr, GetOptions{.peek = true});
  ASSERT_TRUE(record.ok()) << record.status();
  std::vector<std::byte> bytes = *record;
  bytes[kChunkHeaderBytes + rows + (*engine)->snapshot_bytes() / 2] ^= std::byte{0x40};
  ASSERT_TRUE(PutRecord(**store, bytes).ok());
  std::vector<TokenId> request(source.begin(), source.begin() + 4 * kTestChunkTokens);
  request.push_back(12);
  const RunResult warm = run(request, RunOptions{});
  EXPECT_EQ(warm.loaded_tokens, 2 * kTestChunkTokens);
  EXPECT_THAT(warm.failed_chunks, ::testing::Contains(2u));
  EXPECT_TRUE(SameBits(warm.logits, run(request, cold(0)).logits)) << arch;
}

// qwen35's attention cells carry llama.cpp's M-RoPE record (x, y, tok; 12 bytes after
// n_seq_id). For a text prompt llama.cpp writes x = y = the position and tok = the token
// id, so the state kvtier rebuilds from the chunks' rows, the positions and the prompt's
// ids is byte-identical to llama.cpp's own. A chunk holding a cell of an embedding input
// (tok -1, as an image's is; here with x = y = pos, an image's first patch) is never cut.
TEST(ModelFamiliesTest, MropeTextCellsRebuildByteForByteAndEmbeddingCellsAreNeverCut) {
  auto engine = LlamaEngine::Create(TinyEngineOptions(false, FamilyModel("qwen35")));
  ASSERT_TRUE(engine.ok()) << engine.status();
  const SeqStateSpec& spec = (*engine)->state_spec();
  ASSERT_TRUE(spec.cell_ext) << spec.DebugString();
  constexpr uint32_t kT = kTestChunkTokens;
  const std::vector<TokenId> prompt = RandomTokens(2401, 3 * kT, (*engine)->n_vocab());
  ASSERT_TRUE((*engine)->Prefill(prompt, 0, /*want_logits=*/false).ok());
  auto blob = (*engine)->GetSeqState();
  ASSERT_TRUE(blob.ok()) << blob.status();
  auto view = ParseSeqState(*blob, spec);
  ASSERT_TRUE(view.ok()) << view.status();
  for (uint32_t i : {0u, 1u, 3 * kT - 1}) {
    int32_t ext[3];  // x, y, tok
    std::memcpy(ext, blob->data() + view->cell_offset[0] + i * spec.cell_bytes() + 8, sizeof ext);
    EXPECT_EQ(ext[0], static_cast<int32_t>(i));
    EXPECT_EQ(ext[1], static_cast<int32_t>(i));
    EXPECT_EQ(ext[2], prompt[i]);
  }
  auto builder = SeqStateBuilder::Create(spec, 3 * kT, 0, {}, prompt);
  ASSERT_TRUE(builder.ok()) << builder.status();
  std::vector<std::byte> payload(uint64_t{kT} * spec.payload_bytes_per_token());
  for (uint32_t c = 0; c < 3; ++c) {
    ASSERT_TRUE(ExtractChunkPayload(*view, c * kT, kT, payload,
                                    std::span<const TokenId>(prompt).subspan(c * kT, kT))
                    .ok());
    ASSERT_TRUE(builder->PutChunk(c * kT, kT, payload).ok());
  }
  ASSERT_EQ(builder->blob().size(), blob->size());
  EXPECT_EQ(std::memcmp(builder->blob().data(), blob->data(), blob->size()), 0);

  // Chunk 0 as text, then a chunk of embeddings (multimodal input) at the next positions.
  (*engine)->Clear();
  ASSERT_TRUE((*engine)->Prefill(std::span<const TokenId>(prompt).first(kT), 0, false).ok());
  const int32_t n_embd = llama_model_n_embd((*engine)->model());
  llama_batch batch = llama_batch_init(kT, n_embd, 1);
  batch.n_tokens = kT;
  for (uint32_t i = 0; i < kT; ++i) {
    for (int32_t e = 0; e < n_embd; ++e) batch.embd[i * n_embd + e] = 0.01f * ((i + e) % 7);
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = i + 1 == kT;
  }
  // llama_batch_init gives one position per token; M-RoPE embeddings take 4 (sections).
  std::vector<llama_pos> pos(4 * kT);
  for (uint32_t j = 0; j < 4; ++j) {
    for (uint32_t i = 0; i < kT; ++i) pos[j * kT + i] = static_cast<llama_pos>(kT + i);
  }
  llama_pos* own_pos = batch.pos;
  batch.pos = pos.data();
  const int32_t rc = llama_decode((*engine)->context(), batch);
  batch.pos = own_pos;
  llama_batch_free(batch);
  ASSERT_EQ(rc, 0);
  auto mixed = (*engine)->GetSeqState();
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  auto mv = ParseSeqState(*mixed, spec);
  ASSERT_TRUE(mv.ok()) << mv.status();
  ASSERT_EQ(mv->cell_count, 2 * kT);
  EXPECT_TRUE(
      ExtractChunkPayload(*mv, 0, kT, payload, std::span<const TokenId>(prompt).first(kT)).ok());
  const absl::Status s = ExtractChunkPayload(*mv, kT, kT, payload);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("tok=-1"), std::string_view::npos) << s;
  (*engine)->Clear();
}

INSTANTIATE_TEST_SUITE_P(Families, SnapshotFamilyTest,
                         ::testing::Values("mamba2", "granitehybrid", "lfm2", "qwen35"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace kvt::llamacpp
