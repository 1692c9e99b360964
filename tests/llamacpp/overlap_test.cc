// Load while computing (issue 14 item 5) on the tiny synthetic model: the adapter
// computes the front of a cached prefix while a BackLoader loads the back, joins both
// into one state, and the logits and the whole sequence state are byte-identical to a
// cold run that recomputes everything.
#include <cstring>
#include <memory>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/chunk_key.h"
#include "llama_test_util.h"
#include "llamacpp/kv_adapter.h"
#include "llamacpp/overlap_load.h"

namespace kvt::llamacpp {
namespace {

using ::kvt::llamacpp::testing::kTestChunkTokens;
using ::kvt::llamacpp::testing::MakeConnector;
using ::kvt::llamacpp::testing::MakeStore;
using ::kvt::llamacpp::testing::RandomTokens;
using ::kvt::llamacpp::testing::TinyEngineOptions;
using ::testing::HasSubstr;

constexpr uint64_t T = kTestChunkTokens;

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && !a.empty() &&
         std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

size_t TopToken(const std::vector<float>& logits) {
  size_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

struct Rig {
  std::unique_ptr<LlamaEngine> engine;
  std::shared_ptr<TieredStore> store;
  std::shared_ptr<KVConnector> connector;
  std::unique_ptr<LlamaKvAdapter> adapter;
};

// `cost`: when set, the connector uses its cost model with these options; otherwise the
// test connector (cost model off: Lookup promises every cached chunk).
Rig MakeRig(bool flash_attn, const CostModelOptions* cost = nullptr) {
  Rig rig;
  auto engine = LlamaEngine::Create(TinyEngineOptions(flash_attn));
  EXPECT_TRUE(engine.ok()) << engine.status();
  rig.engine = std::move(*engine);
  auto store = MakeStore("");
  EXPECT_TRUE(store.ok()) << store.status();
  rig.store = *store;
  if (cost == nullptr) {
    auto c = MakeConnector(*rig.engine, rig.store);
    EXPECT_TRUE(c.ok()) << c.status();
    rig.connector = *c;
  } else {
    ConnectorOptions o;
    o.ns = rig.engine->MakeNamespaceParams(kTestChunkTokens);
    o.cost = *cost;
    o.use_cost_model = true;
    auto c = KVConnector::Create(o, rig.store);
    EXPECT_TRUE(c.ok()) << c.status();
    rig.connector = std::shared_ptr<KVConnector>(std::move(*c));
  }
  auto adapter = LlamaKvAdapter::Create(rig.engine.get(), rig.connector);
  EXPECT_TRUE(adapter.ok()) << adapter.status();
  rig.adapter = std::move(*adapter);
  return rig;
}

RunResult MustRun(LlamaKvAdapter& a, const std::vector<TokenId>& prompt, const RunOptions& o) {
  auto r = a.Run(prompt, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : RunResult{};
}

RunOptions Cold(uint64_t recompute_prefix) {
  RunOptions o;
  o.use_kvtier = false;
  o.recompute_prefix_tokens = recompute_prefix;
  return o;
}

RunOptions Forced(uint64_t front) {
  RunOptions o;
  o.overlap = OverlapMode::kPlan;
  o.overlap_front_tokens = front;
  o.store = false;
  return o;
}

std::vector<std::byte> State(LlamaEngine& e) {
  auto s = e.GetSeqState();
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : std::vector<std::byte>{};
}

// A request of m cached tokens (from a longer stored source) plus one new token.
struct Case {
  std::vector<TokenId> request;
  uint64_t m;
};
Case StoreAndRequest(Rig& rig, uint64_t m, uint64_t seed) {
  const std::vector<TokenId> source = RandomTokens(seed, m + 40, rig.engine->n_vocab());
  RunOptions store;
  store.overlap = OverlapMode::kOff;
  const RunResult r = MustRun(*rig.adapter, source, store);
  EXPECT_EQ(r.stored_chunks, source.size() / T);
  rig.connector->Flush();
  Case c{std::vector<TokenId>(source.begin(), source.begin() + m), m};
  c.request.push_back(7);
  return c;
}

class OverlapIdentityTest : public ::testing::TestWithParam<bool> {};

TEST_P(OverlapIdentityTest, ForcedSplitMatchesColdRunByteForByte) {
  const bool flash_attn = GetParam();
  Rig rig = MakeRig(flash_attn);
  const Case c = StoreAndRequest(rig, 8 * T, 77);
  const RunResult cold = MustRun(*rig.adapter, c.request, Cold(c.m));
  const std::vector<std::byte> cold_state = State(*rig.engine);
  // Front of one chunk, half, and all but one chunk.
  for (uint64_t front : {T, 4 * T, 7 * T}) {
    SCOPED_TRACE(front);
    const RunResult r = MustRun(*rig.adapter, c.request, Forced(front));
    EXPECT_EQ(r.overlap_front_tokens, front);
    EXPECT_EQ(r.cached_tokens, c.m);
    EXPECT_EQ(r.planned_tokens, c.m - front);
    EXPECT_EQ(r.loaded_tokens, c.m - front);
    EXPECT_EQ(r.computed_tokens, front + 1);
    EXPECT_TRUE(r.failed_chunks.empty());
    EXPECT_GT(r.join_s, 0);
    ASSERT_EQ(r.logits.size(), static_cast<size_t>(rig.engine->n_vocab()));
    EXPECT_TRUE(SameBits(r.logits, cold.logits)) << "flash_attn=" << flash_attn;
    EXPECT_EQ(TopToken(r.logits), TopToken(cold.logits));
    // The whole sequence (front computed, back loaded, last token decoded) is the
    // cold run's state, byte for byte.
    EXPECT_TRUE(State(*rig.engine) == cold_state);
  }
  // Sanity: the state and logits depend on the prefix (a different request differs).
  const Case other = StoreAndRequest(rig, 8 * T, 78);
  const RunResult r = MustRun(*rig.adapter, other.request, Forced(4 * T));
  EXPECT_EQ(r.overlap_front_tokens, 4 * T);
  EXPECT_FALSE(SameBits(r.logits, cold.logits));
}

INSTANTIATE_TEST_SUITE_P(FlashAttn, OverlapIdentityTest, ::testing::Bool());

TEST(OverlapTest, CostModelSplitsWhenTheCacheLoadsSlowerThanItComputes) {
  // Defaults the first request decides on (nothing observed yet): prefill 1 ms per token
  // (32 ms per chunk) and a host tier at 2 MB/s: a 65,664-byte record takes 32.8 ms, so
  // the Lookup loads nothing (kWhenLoadSlower fires) and PlanOverlap splits 8 chunks as
  // max(4 x 32 ms, 4 x 32.8 ms) + join.
  CostModelOptions cost;
  cost.tier_defaults[0] = {2e6, 0};
  cost.prefill_s_per_token = 1e-3;
  Rig rig = MakeRig(/*flash_attn=*/false, &cost);
  const Case c = StoreAndRequest(rig, 8 * T, 91);
  const RunResult cold = MustRun(*rig.adapter, c.request, Cold(c.m));

  const std::vector<std::byte> cold_state = State(*rig.engine);

  RunOptions o;  // the default mode: kWhenLoadSlower, adaptive
  o.store = false;
  const RunResult r = MustRun(*rig.adapter, c.request, o);
  EXPECT_EQ(r.cached_tokens, c.m);
  EXPECT_EQ(r.overlap_plan.total_chunks, 8u);
  EXPECT_TRUE(r.overlap_plan.overlap());
  EXPECT_EQ(r.overlap_plan.front_chunks, 4u);
  EXPECT_EQ(r.planned_tokens, 4 * T);
  EXPECT_LT(r.overlap_plan.predicted_s, r.overlap_plan.compute_only_s);
  EXPECT_LT(r.overlap_plan.predicted_s, r.overlap_plan.load_only_s);
  // Where the two sides met depends on the real speeds (the host tier is fast, so the
  // loader usually meets the engine after its first batch); every token is accounted.
  EXPECT_GE(r.overlap_front_tokens, T);
  EXPECT_LT(r.overlap_front_tokens, c.m);
  EXPECT_EQ(r.overlap_front_tokens % T, 0u);
  EXPECT_EQ(r.loaded_tokens, c.m - r.overlap_front_tokens);
  EXPECT_TRUE(SameBits(r.logits, cold.logits));
  EXPECT_TRUE(State(*rig.engine) == cold_state);

  // The planned split as is (not adaptive): exactly 4 chunks computed.
  o.overlap_adaptive = false;
  const RunResult fixed = MustRun(*rig.adapter, c.request, o);
  if (fixed.overlap_plan.overlap()) {  // the estimates have learned the real speeds now
    EXPECT_EQ(fixed.overlap_front_tokens, fixed.overlap_plan.front_chunks * T);
    EXPECT_EQ(fixed.loaded_tokens, c.m - fixed.overlap_front_tokens);
  }
  EXPECT_TRUE(SameBits(fixed.logits, cold.logits));
  o.overlap_adaptive = true;

  // kOff: the Lookup's decision stands (by now the model has seen the host tier's real
  // speed, so it loads everything).
  o.overlap = OverlapMode::kOff;
  const RunResult off = MustRun(*rig.adapter, c.request, o);
  EXPECT_EQ(off.overlap_front_tokens, 0u);
  EXPECT_EQ(off.loaded_tokens, off.planned_tokens);
  EXPECT_EQ(off.overlap_plan.total_chunks, 0u);
  EXPECT_TRUE(SameBits(off.logits, cold.logits));
}

TEST(OverlapTest, CostModelOffLoadsEverythingInTheDefaultMode) {
  // The test connector promises every cached chunk: kWhenLoadSlower never splits, so
  // the other adapter tests' exact counts hold whatever the estimates are.
  Rig rig = MakeRig(false);
  const Case c = StoreAndRequest(rig, 6 * T, 5);
  RunOptions o;
  o.store = false;
  const RunResult r = MustRun(*rig.adapter, c.request, o);
  EXPECT_EQ(r.overlap_front_tokens, 0u);
  EXPECT_EQ(r.overlap_plan.total_chunks, 0u);
  EXPECT_EQ(r.loaded_tokens, c.m);
}

TEST(OverlapTest, BadSplitRequestsAreRejectedWithTheValue) {
  Rig rig = MakeRig(false);
  const Case c = StoreAndRequest(rig, 4 * T, 11);
  RunOptions o = Forced(T + 1);
  auto r = rig.adapter->Run(c.request, o);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("overlap_front_tokens 33"));
  o = Forced(T);
  o.overlap = OverlapMode::kOff;
  EXPECT_EQ(rig.adapter->Run(c.request, o).status().code(), absl::StatusCode::kInvalidArgument);
  // A front at or past the cached prefix: no split, the prefix is loaded as usual.
  const RunResult past = MustRun(*rig.adapter, c.request, Forced(4 * T));
  EXPECT_EQ(past.overlap_front_tokens, 0u);
  EXPECT_EQ(past.loaded_tokens, 4 * T);
}

// The back loader on its own: a chunk missing from the store stops the back there, and
// continuing from loaded_end still gives the cold logits.
TEST(BackLoaderTest, MissingChunkStopsTheBackAndTheRestIsComputed) {
  Rig rig = MakeRig(false);
  const Case c = StoreAndRequest(rig, 6 * T, 21);
  // Erase chunk 4 (tokens [128, 160)) from every tier.
  std::vector<ChunkKey> keys =
      ComputeChunkKeys(rig.connector->ns(), std::span<const TokenId>(c.request).first(6 * T),
                       ChunkKeyOptions{.chunk_tokens = kTestChunkTokens});
  ASSERT_EQ(keys.size(), 6u);
  ASSERT_TRUE(rig.store->Erase(keys[4]).ok());

  LlamaEngine& e = *rig.engine;
  e.Clear();
  auto loader = BackLoader::Start(*rig.connector, c.request, 2 * T, 6 * T, e.state_spec());
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ((*loader)->Join(std::vector<std::byte>{}).status().code(),
            absl::StatusCode::kFailedPrecondition);  // before Wait
  ASSERT_TRUE(e.Prefill(std::span<const TokenId>(c.request).first(2 * T), 0, false).ok());
  const BackLoader::Result& got = (*loader)->Wait();
  EXPECT_EQ(got.loaded_end, 4 * T);
  EXPECT_THAT(got.failed_chunks, ::testing::ElementsAre(4u, 5u));
  EXPECT_EQ(got.first_error.code(), absl::StatusCode::kNotFound);
  // A front that leaves a gap before the loaded tokens is refused.
  e.Clear();
  ASSERT_TRUE(e.Prefill(std::span<const TokenId>(c.request).first(T), 0, false).ok());
  auto wrong = (*loader)->Join(State(e));
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(wrong.status().message(), HasSubstr("32 cells, the loaded tokens are [64, 128)"));
  ASSERT_TRUE(e.Prefill(std::span<const TokenId>(c.request).subspan(T, T), T, false).ok());
  auto joined = (*loader)->Join(State(e));
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ((*loader)->Join(State(e)).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(e.SetSeqState(*joined).ok());
  EXPECT_EQ(e.seq_tokens(), 4 * T);
  ASSERT_TRUE(e.Prefill(std::span<const TokenId>(c.request).subspan(4 * T), 4 * T, true).ok());
  auto logits = e.Logits();
  ASSERT_TRUE(logits.ok());
  const RunResult cold = MustRun(*rig.adapter, c.request, Cold(4 * T));
  EXPECT_TRUE(SameBits(*logits, cold.logits));
}

// Meet in the middle, the loader alone first: it walks down from the end, stops at a
// missing chunk, and the engine computes up to where the loader stopped.
TEST(BackLoaderTest, FromEndStopsAtAMissingChunkAndTheEngineComputesUpToIt) {
  Rig rig = MakeRig(false);
  const Case c = StoreAndRequest(rig, 6 * T, 31);
  std::vector<ChunkKey> keys =
      ComputeChunkKeys(rig.connector->ns(), std::span<const TokenId>(c.request).first(6 * T),
                       ChunkKeyOptions{.chunk_tokens = kTestChunkTokens});
  ASSERT_TRUE(rig.store->Erase(keys[2]).ok());

  LlamaEngine& e = *rig.engine;
  e.Clear();
  auto loader = BackLoader::StartFromEnd(*rig.connector, c.request, 6 * T, e.state_spec());
  ASSERT_TRUE(loader.ok()) << loader.status();
  const BackLoader::Result& got = (*loader)->Wait();  // the engine reported nothing
  EXPECT_EQ(got.loaded_begin, 3 * T);
  EXPECT_EQ(got.loaded_end, 6 * T);
  EXPECT_EQ((*loader)->loaded_begin(), 3 * T);
  EXPECT_THAT(got.failed_chunks, ::testing::ElementsAre(2u));
  EXPECT_EQ(got.first_error.code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(e.Prefill(std::span<const TokenId>(c.request).first(3 * T), 0, false).ok());
  auto joined = (*loader)->Join(State(e));
  ASSERT_TRUE(joined.ok()) << joined.status();
  ASSERT_TRUE(e.SetSeqState(*joined).ok());
  ASSERT_TRUE(e.Prefill(std::span<const TokenId>(c.request).subspan(6 * T), 6 * T, true).ok());
  auto logits = e.Logits();
  ASSERT_TRUE(logits.ok());
  const std::vector<std::byte> state = State(e);
  const RunResult cold = MustRun(*rig.adapter, c.request, Cold(6 * T));
  EXPECT_TRUE(SameBits(*logits, cold.logits));
  EXPECT_TRUE(state == State(e));

  // Everything cached and nothing computed: the loader delivers [0, end) and an empty
  // front joins.
  const Case d = StoreAndRequest(rig, 4 * T, 32);
  e.Clear();
  auto all = BackLoader::StartFromEnd(*rig.connector, d.request, 4 * T, e.state_spec());
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ((*all)->Wait().loaded_begin, 0u);
  auto whole = (*all)->Join({});
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_TRUE(e.SetSeqState(*whole).ok());
  EXPECT_EQ(e.seq_tokens(), 4 * T);

  // The engine already past the end: the loader loads nothing.
  auto none = BackLoader::StartFromEnd(*rig.connector, d.request, 4 * T, e.state_spec());
  ASSERT_TRUE(none.ok());
  (*none)->SetComputed(4 * T);
  const BackLoader::Result& n = (*none)->Wait();
  EXPECT_LE(n.loaded_begin, 4 * T);  // may have loaded before SetComputed landed
  EXPECT_TRUE(n.failed_chunks.empty());
  EXPECT_EQ(
      BackLoader::StartFromEnd(*rig.connector, d.request, T + 1, e.state_spec()).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(BackLoaderTest, StartRejectsBadRanges) {
  Rig rig = MakeRig(false);
  const std::vector<TokenId> prompt = RandomTokens(3, 4 * T, rig.engine->n_vocab());
  const SeqStateSpec& spec = rig.engine->state_spec();
  struct Bad {
    uint64_t front, end;
  };
  for (Bad b :
       {Bad{0, 2 * T}, Bad{2 * T, 2 * T}, Bad{T + 1, 2 * T}, Bad{T, 2 * T + 1}, Bad{T, 5 * T}}) {
    auto l = BackLoader::Start(*rig.connector, prompt, b.front, b.end, spec);
    EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument) << b.front << " " << b.end;
  }
  SeqStateSpec other = spec;
  other.n_layer += 1;
  auto l = BackLoader::Start(*rig.connector, prompt, T, 2 * T, other);
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(l.status().message(), HasSubstr("payload bytes per chunk"));
}

}  // namespace
}  // namespace kvt::llamacpp
