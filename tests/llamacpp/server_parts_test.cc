// kvtier-llama-server's parts without a model: ServerOverlap's split decision and its
// per-batch step for a slot without a split, SlotRestorer's early outs (a prompt shorter
// than a chunk, a prompt nothing is cached for). None of these paths touches a
// llama_context; the restores and joins themselves run in llamacpp_server_test.
#include <cstdint>
#include <memory>
#include <vector>

#include "connectors/kv_connector.h"
#include "gtest/gtest.h"
#include "kvstore/store_factory.h"
#include "kvtier_server/seq_state_io.h"
#include "kvtier_server/server_overlap.h"
#include "kvtier_server/server_stats.h"
#include "kvtier_server/slot_restorer.h"
#include "test_records.h"

namespace kvt::llamacpp {
namespace {

using Mode = ServerKvtierOptions::Overlap;
constexpr uint32_t kChunk = 16;

std::vector<TokenId> Prompt(size_t n) {
  std::vector<TokenId> p(n);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<TokenId>(100 + i);
  return p;
}

// A lookup that found `tokens` cached, every chunk in host memory.
ConnectorLookup Cached(uint64_t tokens) {
  ConnectorLookup l;
  l.cached_tokens = tokens;
  l.load_tokens = tokens;
  l.chunk_tiers.assign(tokens / kChunk, TierKind::kHost);
  return l;
}

class ServerPartsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions so;
    so.host.capacity_bytes = 4 << 20;
    absl::StatusOr<std::unique_ptr<TieredStore>> store = OpenTieredStore(so);
    ASSERT_TRUE(store.ok()) << store.status();
    ConnectorOptions co;
    co.ns.model_id = "server-parts-test";
    co.ns.layout = kvt::testing::Bytes32PerTokenLayout();  // 32 B/token
    co.ns.chunk_tokens = kChunk;
    absl::StatusOr<std::unique_ptr<KVConnector>> c =
        KVConnector::Create(co, std::shared_ptr<TieredStore>(std::move(*store)));
    ASSERT_TRUE(c.ok()) << c.status();
    connector_ = std::move(*c);
  }

  ServerOverlap MakeOverlap(Mode mode, int64_t front_tokens) {
    return ServerOverlap(mode, front_tokens, *connector_, io_, stats_);
  }

  std::unique_ptr<KVConnector> connector_;
  // A spec that matches no chunk payload: nothing here may load.
  SeqStateIo io_{SeqStateFormat{}};
  ServerStats stats_;
};

TEST_F(ServerPartsTest, OverlapOffNeverSplits) {
  ServerOverlap o = MakeOverlap(Mode::kOff, 0);
  EXPECT_EQ(o.PickFront(Cached(128), 0, 128, 0), 0u);
  ServerOverlap fixed = MakeOverlap(Mode::kOff, 32);
  EXPECT_EQ(fixed.PickFront(Cached(128), 0, 128, 0), 0u);
}

TEST_F(ServerPartsTest, FixedFrontIsUsedOnlyBetweenPrefillStartAndCachedEnd) {
  ServerOverlap o = MakeOverlap(Mode::kAlways, 32);
  EXPECT_EQ(o.PickFront(Cached(128), 0, 128, 128), 32u);
  EXPECT_EQ(o.PickFront(Cached(128), 16, 128, 128), 32u);
  EXPECT_EQ(o.PickFront(Cached(128), 32, 128, 128), 0u);  // front not past the start
  EXPECT_EQ(o.PickFront(Cached(32), 0, 32, 32), 0u);      // front not before the end
}

TEST_F(ServerPartsTest, OneChunkFrontNeedsTwoCachedChunks) {
  ServerOverlap o = MakeOverlap(Mode::kAlways, 16);
  EXPECT_EQ(o.PickFront(Cached(32), 0, 32, 32), 16u);
  EXPECT_EQ(o.PickFront(Cached(16), 0, 16, 16), 0u);
}

TEST_F(ServerPartsTest, AutoDoesNotSplitWhenTheCostDecisionLoadsEverything) {
  ServerOverlap o = MakeOverlap(Mode::kAuto, 0);
  EXPECT_EQ(o.PickFront(Cached(128), 0, 128, /*want=*/128), 0u);
}

TEST_F(ServerPartsTest, PlannedSplitNeedsAPrefillFromTokenZeroAndEveryChunksTier) {
  ServerOverlap o = MakeOverlap(Mode::kAlways, 0);
  EXPECT_EQ(o.PickFront(Cached(128), 16, 128, 128), 0u);
  ConnectorLookup partial = Cached(128);
  partial.chunk_tiers.resize(2);  // tiers of 2 of the 8 chunks
  EXPECT_EQ(o.PickFront(partial, 0, 128, 128), 0u);
}

TEST_F(ServerPartsTest, BatchOfASlotWithoutASplitIsLeftAlone) {
  ServerOverlap o = MakeOverlap(Mode::kAlways, 32);
  const std::vector<TokenId> prompt = Prompt(80);
  size_t n_limit = 80;
  bool asked = false;
  const ServerOverlap::BatchStep step =
      o.AtBatch(nullptr, 3, prompt, 5, &n_limit, [&] { return asked = true; });
  EXPECT_EQ(step.n_done, 5u);
  EXPECT_FALSE(step.cleared);
  EXPECT_EQ(n_limit, 80u);
  EXPECT_FALSE(asked);  // the model file is checked only for a slot with a split
}

TEST_F(ServerPartsTest, BackLoadThatCannotStartStartsNoSplit) {
  // The spec's payload (0 bytes per token) does not match the connector's chunks.
  ServerOverlap o = MakeOverlap(Mode::kAlways, 32);
  const std::vector<TokenId> prompt = Prompt(80);
  Lease lease;
  EXPECT_FALSE(o.Start(3, prompt, 32, 64, lease));
  EXPECT_EQ(stats_.overlapped.load(), 0u);
  size_t n_limit = 80;
  EXPECT_EQ(o.AtBatch(nullptr, 3, prompt, 0, &n_limit, [] { return true; }).n_done, 0u);
  EXPECT_EQ(n_limit, 80u);
}

TEST_F(ServerPartsTest, PromptShorterThanAChunkIsNoRequestWithoutTails) {
  ServerOverlap o = MakeOverlap(Mode::kAuto, 0);
  SlotRestorer r(*connector_, io_, /*tails=*/nullptr, /*snapshots=*/nullptr, o, stats_,
                 /*n_batch=*/64, /*n_ubatch=*/16);
  const SlotRestorer::Outcome out = r.Restore(nullptr, 0, Prompt(kChunk), 0);
  EXPECT_EQ(out.result, 0);
  EXPECT_FALSE(out.overlap_begin.has_value());
  EXPECT_EQ(stats_.requests.load(), 0u);
  EXPECT_EQ(stats_.misses.load(), 0u);
}

TEST_F(ServerPartsTest, UncachedPromptIsOneMissAndLeavesTheSlot) {
  ServerOverlap o = MakeOverlap(Mode::kAlways, 0);
  SlotRestorer r(*connector_, io_, /*tails=*/nullptr, /*snapshots=*/nullptr, o, stats_,
                 /*n_batch=*/64, /*n_ubatch=*/16);
  const SlotRestorer::Outcome out = r.Restore(nullptr, 0, Prompt(3 * kChunk + 5), 0);
  EXPECT_EQ(out.result, 0);
  EXPECT_FALSE(out.overlap_begin.has_value());
  EXPECT_EQ(stats_.requests.load(), 1u);
  EXPECT_EQ(stats_.misses.load(), 1u);
  EXPECT_EQ(stats_.hits.load(), 0u);
  EXPECT_EQ(stats_.cost_skips.load(), 0u);
  EXPECT_EQ(stats_.overlapped.load(), 0u);
}

}  // namespace
}  // namespace kvt::llamacpp
