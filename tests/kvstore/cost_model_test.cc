// Hand-computed cases for the retrieve-vs-recompute cost model (docs/cost-model.md).
#include "kvstore/cost_model.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvt {
namespace {

using ::testing::HasSubstr;

// Llama-3-8B bf16: 128 KiB per token; 256-token chunks = 32 MiB (DESIGN.md).
constexpr uint32_t kChunkTokens = 256;
constexpr uint64_t kChunkBytes = 256ull * 131072;  // 33,554,432

CostModelOptions LinearPrefill(double s_per_token) {
  CostModelOptions o;
  o.prefill_s_per_token = s_per_token;
  o.prefill_s_per_token_ctx = 0;
  return o;
}

TEST(CostModelTest, DefaultOptionsValidate) { EXPECT_TRUE(CostModelOptions{}.Validate().ok()); }

TEST(CostModelTest, ValidateNamesTheBadField) {
  CostModelOptions o;
  o.ewma_alpha = 0;
  absl::Status s = o.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("ewma_alpha"));

  o = CostModelOptions{};
  o.tier_defaults[1].bandwidth_bytes_per_s = 0;
  s = o.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tier_defaults[disk].bandwidth_bytes_per_s"));

  o = CostModelOptions{};
  o.prefill_s_per_token = 0;
  o.prefill_s_per_token_ctx = 0;
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);

  o = CostModelOptions{};
  o.min_prefill_samples = 10;
  o.max_prefill_samples = 5;
  s = o.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("max_prefill_samples"));

  o = CostModelOptions{};
  o.tier_defaults[2].latency_s = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
}

// Host at 8 GB/s + 20 us per chunk: 0.004214304 s per 32 MiB chunk; prefill at
// 1e-4 s/token: 0.0256 s per chunk. Every one of 32 chunks (8k tokens) is worth loading.
TEST(CostModelTest, FastTierLongPrefixLoadsEverything) {
  CostModel m(LinearPrefill(1e-4));
  std::vector<TierKind> tiers(32, TierKind::kHost);
  CostModel::Decision d = m.Decide(tiers, kChunkTokens, kChunkBytes);
  EXPECT_EQ(d.chunks_to_load, 32u);
  EXPECT_NEAR(d.load_s, 32 * 0.004214304, 1e-12);
  EXPECT_NEAR(d.recompute_s, 32 * 0.0256, 1e-12);
  EXPECT_NEAR(d.saving_s, 32 * (0.0256 - 0.004214304), 1e-12);
  CostModelStats s = m.stats();
  EXPECT_EQ(s.decisions, 1u);
  EXPECT_EQ(s.decisions_load_all, 1u);
  EXPECT_EQ(s.chunks_considered, 32u);
  EXPECT_EQ(s.chunks_chosen, 32u);
}

// The published case: a disk hit slower than recomputing an 8k-token prompt.
// Disk at 1.2 GB/s + 200 us: 0.0002 + 33554432 / 1.2e9 = 0.028162027 s per chunk, 1 GiB
// in 0.90 s; prefill of 8192 tokens at 6e-5 s/token (~16.7k tokens/s, an 8B model on
// one H100-class GPU) = 0.49 s, 0.01536 s per chunk. Loading never wins: recompute.
TEST(CostModelTest, SlowDiskEightKPromptRecomputes) {
  CostModel m(LinearPrefill(6e-5));
  EXPECT_NEAR(m.PredictLoadSeconds(TierKind::kDisk, kChunkBytes), 0.0002 + 33554432 / 1.2e9, 1e-15);
  EXPECT_NEAR(m.PredictPrefillSeconds(0, 8192), 8192 * 6e-5, 1e-12);
  std::vector<TierKind> tiers(32, TierKind::kDisk);
  CostModel::Decision d = m.Decide(tiers, kChunkTokens, kChunkBytes);
  EXPECT_EQ(d.chunks_to_load, 0u);
  EXPECT_EQ(d.saving_s, 0.0);
  EXPECT_EQ(m.stats().decisions_recompute, 1u);
  // A short prefix from the same disk is no better.
  std::vector<TierKind> one(1, TierKind::kDisk);
  EXPECT_EQ(m.Decide(one, kChunkTokens, kChunkBytes).chunks_to_load, 0u);
}

// 16 host chunks, then 16 chunks on a slow remote (100 MB/s + 5 ms: 0.34054432 s per
// chunk, vs 0.0256 s recompute): load the host part, recompute the rest.
TEST(CostModelTest, MixedTiersLoadFastPartRecomputeRest) {
  CostModelOptions o = LinearPrefill(1e-4);
  o.tier_defaults[2] = {1e8, 5e-3};
  CostModel m(o);
  std::vector<TierKind> tiers(16, TierKind::kHost);
  tiers.insert(tiers.end(), 16, TierKind::kRemote);
  CostModel::Decision d = m.Decide(tiers, kChunkTokens, kChunkBytes);
  EXPECT_EQ(d.chunks_to_load, 16u);
  EXPECT_NEAR(d.load_s, 16 * 0.004214304, 1e-12);
  EXPECT_NEAR(d.recompute_s, 16 * 0.0256, 1e-12);
  EXPECT_EQ(m.stats().decisions_load_partial, 1u);
}

// Quadratic prefill: a = 0, b = 1e-4 s per attended pair; 4-token chunks costing 1e-3 s
// each to load. recompute(K) = 1e-4 * K(K+1)/2: 1e-3, 3.6e-3, 7.8e-3 for K = 4, 8, 12.
// saving(1) = 0 (not worth it alone) but saving(3) = 4.8e-3: load all three.
TEST(CostModelTest, QuadraticTermMakesLaterChunksWorthLoading) {
  CostModelOptions o;
  o.prefill_s_per_token = 0;
  o.prefill_s_per_token_ctx = 1e-4;
  o.tier_defaults[1] = {1e6, 0};
  CostModel m(o);
  std::vector<TierKind> tiers(3, TierKind::kDisk);
  CostModel::Decision d = m.Decide(tiers, 4, 1000);
  EXPECT_EQ(d.chunks_to_load, 3u);
  EXPECT_NEAR(d.load_s, 3e-3, 1e-15);
  EXPECT_NEAR(d.recompute_s, 7.8e-3, 1e-15);
  EXPECT_NEAR(d.saving_s, 4.8e-3, 1e-15);
  // Prefill of 4 tokens after 8 of context: 1e-4 * 4 * (8 + 5/2) = 4.2e-3.
  EXPECT_NEAR(m.PredictPrefillSeconds(8, 12), 4.2e-3, 1e-15);
}

// Engine already holds 300 tokens of a 4-chunk (1024-token) host hit at 1e-4 s/token:
// chunk 0 is skipped; chunk 1 (tokens 256..511) costs a full load (0.004214304 s) but saves
// only 212 tokens (0.0212 s); chunks 2, 3 save 0.0256 s each. Load through chunk 3.
TEST(CostModelTest, ComputedTokensAreNeitherLoadedNorCredited) {
  CostModel m(LinearPrefill(1e-4));
  std::vector<TierKind> tiers(4, TierKind::kHost);
  CostModel::Decision d = m.Decide(tiers, kChunkTokens, kChunkBytes, 300);
  EXPECT_EQ(d.chunks_to_load, 4u);
  EXPECT_NEAR(d.load_s, 3 * 0.004214304, 1e-12);
  EXPECT_NEAR(d.recompute_s, (1024 - 300) * 1e-4, 1e-12);
  EXPECT_EQ(m.stats().chunks_considered, 3u);
  EXPECT_EQ(m.stats().chunks_chosen, 3u);
  // Everything already held: nothing to decide.
  EXPECT_EQ(m.Decide(tiers, kChunkTokens, kChunkBytes, 1024).chunks_to_load, 0u);
  EXPECT_EQ(m.stats().decisions_no_hit, 1u);
  // Straddling chunk not worth it alone: 1023 held, chunk 3 saves 1 token (1e-4 s) but
  // costs 0.0042 s to load.
  EXPECT_EQ(m.Decide(tiers, kChunkTokens, kChunkBytes, 1023).chunks_to_load, 0u);
}

TEST(CostModelTest, SafetyFactorTipsCloseCallToRecompute) {
  CostModelOptions o = LinearPrefill(1e-4);
  o.tier_defaults[0] = {2e9, 0};  // 0.016777216 s per chunk vs 0.0256 recompute: load
  CostModel plain(o);
  std::vector<TierKind> tiers(4, TierKind::kHost);
  EXPECT_EQ(plain.Decide(tiers, kChunkTokens, kChunkBytes).chunks_to_load, 4u);
  o.safety_factor = 2.0;  // 0.033554432 > 0.0256: recompute
  CostModel careful(o);
  EXPECT_EQ(careful.Decide(tiers, kChunkTokens, kChunkBytes).chunks_to_load, 0u);
}

TEST(CostModelTest, NoHitsCountedSeparately) {
  CostModel m(CostModelOptions{});
  EXPECT_EQ(m.Decide({}, kChunkTokens, kChunkBytes).chunks_to_load, 0u);
  CostModelStats s = m.stats();
  EXPECT_EQ(s.decisions, 1u);
  EXPECT_EQ(s.decisions_no_hit, 1u);
  EXPECT_EQ(s.decisions_recompute, 0u);
}

// First EWMA step by hand from the host default (8e9 B/s, 20 us).
TEST(CostModelTest, EwmaFirstStepMatchesHandComputation) {
  CostModel m(CostModelOptions{});
  // seconds - latency = 0.2 s for 8e8 bytes: 2.5e-10 s/B.
  m.ObserveTransfer(TierKind::kHost, 800'000'000, 0.2 + 20e-6);
  // 0.8 / 8e9 + 0.2 * 2.5e-10 = 1e-10 + 5e-11 = 1.5e-10 s/B -> 6.6667e9 B/s.
  EXPECT_NEAR(m.tier_estimate(TierKind::kHost).bandwidth_bytes_per_s, 1.0 / 1.5e-10, 1.0);
  EXPECT_DOUBLE_EQ(m.tier_estimate(TierKind::kHost).latency_s, 20e-6);
  // Other tiers untouched.
  EXPECT_DOUBLE_EQ(m.tier_estimate(TierKind::kDisk).bandwidth_bytes_per_s, 1.2e9);
}

TEST(CostModelTest, EwmaConvergesToObservedBandwidthAndLatency) {
  CostModel m(CostModelOptions{});
  for (int i = 0; i < 100; ++i) {
    m.ObserveTransfer(TierKind::kDisk, kChunkBytes, 200e-6 + kChunkBytes / 0.5e9);
  }
  EXPECT_NEAR(m.tier_estimate(TierKind::kDisk).bandwidth_bytes_per_s, 0.5e9, 0.5e9 * 1e-6);
  // Small (latency-dominated) transfers from the remote tier teach it 2 ms latency.
  for (int i = 0; i < 100; ++i) m.ObserveTransfer(TierKind::kRemote, 1024, 2e-3 + 1024 / 1.5e9);
  EXPECT_NEAR(m.tier_estimate(TierKind::kRemote).latency_s, 2e-3, 1e-9);
  EXPECT_EQ(m.stats().transfers_observed, 200u);
  // The learned disk rate flips the 8k-prompt decision at 1e-4 s/token: 0.0671 s/chunk
  // to load vs 0.0256 s to recompute.
  CostModelOptions o = LinearPrefill(1e-4);
  o.tier_defaults[1] = {10e9, 200e-6};
  CostModel learner(o);
  std::vector<TierKind> tiers(32, TierKind::kDisk);
  EXPECT_EQ(learner.Decide(tiers, kChunkTokens, kChunkBytes).chunks_to_load, 32u);
  for (int i = 0; i < 100; ++i) {
    learner.ObserveTransfer(TierKind::kDisk, kChunkBytes, 200e-6 + kChunkBytes / 0.5e9);
  }
  EXPECT_EQ(learner.Decide(tiers, kChunkTokens, kChunkBytes).chunks_to_load, 0u);
}

// Remote at 1 s per chunk against 1e-4 s/token prefill (0.0256 s per chunk): recompute.
// The model never sees a remote transfer while it recomputes, so every 33rd such
// decision loads the first cached chunk to measure the tier again.
TEST(CostModelTest, ProbesOneChunkAfterARunOfRecomputes) {
  CostModelOptions o = LinearPrefill(1e-4);
  o.tier_defaults[2] = {1.5e9, 1.0};
  CostModel m(o);
  std::vector<TierKind> tiers(4, TierKind::kRemote);
  for (int i = 0; i < 32; ++i) {
    CostModel::Decision d = m.Decide(tiers, kChunkTokens, kChunkBytes);
    ASSERT_EQ(d.chunks_to_load, 0u) << i;
    EXPECT_FALSE(d.probe);
  }
  CostModel::Decision probe = m.Decide(tiers, kChunkTokens, kChunkBytes);
  EXPECT_TRUE(probe.probe);
  EXPECT_EQ(probe.chunks_to_load, 1u);
  EXPECT_LT(probe.saving_s, 0);  // a probe is a measured loss, bounded to one chunk
  // A straddled chunk: the probe is the chunk after the computed tokens.
  for (int i = 0; i < 32; ++i)
    ASSERT_EQ(m.Decide(tiers, kChunkTokens, kChunkBytes, 300).chunks_to_load, 0u);
  EXPECT_EQ(m.Decide(tiers, kChunkTokens, kChunkBytes, 300).chunks_to_load, 2u);
  EXPECT_EQ(m.stats().decisions_probe, 2u);
  // The probes' transfers teach the real latency (20 us): loads win again.
  for (int i = 0; i < 40; ++i)
    m.ObserveTransfer(TierKind::kRemote, kChunkBytes / 4, 20e-6 + kChunkBytes / 4 / 1.5e9);
  EXPECT_EQ(m.Decide(tiers, kChunkTokens, kChunkBytes).chunks_to_load, 4u);
  // A load resets the run; with probing off, no probe ever.
  o.probe_after_recomputes = 0;
  CostModel off(o);
  for (int i = 0; i < 100; ++i)
    ASSERT_EQ(off.Decide(tiers, kChunkTokens, kChunkBytes).chunks_to_load, 0u);
  EXPECT_EQ(off.stats().decisions_probe, 0u);
}

TEST(CostModelTest, BadObservationsIgnoredAndCounted) {
  CostModel m(CostModelOptions{});
  m.ObserveTransfer(TierKind::kHost, 0, 1.0);
  m.ObserveTransfer(TierKind::kHost, 100, 0.0);
  m.ObserveTransfer(TierKind::kHost, 100, std::numeric_limits<double>::quiet_NaN());
  m.ObservePrefill(0, 10, 1.0);
  m.ObservePrefill(10, 10, -1.0);
  EXPECT_EQ(m.stats().observations_rejected, 5u);
  EXPECT_EQ(m.stats().transfers_observed, 0u);
  EXPECT_DOUBLE_EQ(m.tier_estimate(TierKind::kHost).bandwidth_bytes_per_s, 8e9);
}

// Synthetic engine: y = 0.01 + 5e-5 t + 2e-9 t (c + (t+1)/2).
double SyntheticPrefill(uint64_t t, uint64_t c) {
  return 0.01 + 5e-5 * t + 2e-9 * t * (c + (t + 1) / 2.0);
}

TEST(CostModelTest, PrefillFitRecoversCoefficients) {
  CostModelOptions o;  // defaults: 1e-3 s/token, no quadratic term, 8 samples needed
  CostModel m(o);
  const std::vector<std::pair<uint64_t, uint64_t>> runs = {
      {128, 0},   {8192, 0},    {512, 4096}, {2048, 0},    {1024, 16384},
      {256, 256}, {4096, 4096}, {100000, 0}, {3000, 50000}};
  for (size_t i = 0; i < runs.size(); ++i) {
    auto [t, c] = runs[i];
    m.ObservePrefill(t, c, SyntheticPrefill(t, c));
    CostModel::PrefillModel pm = m.prefill_model();
    if (i + 1 < o.min_prefill_samples) {
      EXPECT_FALSE(pm.fitted) << i;
      EXPECT_DOUBLE_EQ(pm.s_per_token, 1e-3);
    }
  }
  CostModel::PrefillModel pm = m.prefill_model();
  ASSERT_TRUE(pm.fitted);
  EXPECT_EQ(pm.samples, runs.size());
  EXPECT_NEAR(pm.s_per_token, 5e-5, 5e-5 * 1e-6);
  EXPECT_NEAR(pm.s_per_token_ctx, 2e-9, 2e-9 * 1e-6);
  EXPECT_NEAR(pm.fixed_s, 0.01, 1e-7);
  EXPECT_TRUE(m.stats().prefill_fit_active);
  // Prediction for an unseen prompt, and the saving excludes the fixed term.
  EXPECT_NEAR(m.PredictPrefillSeconds(300, 700), SyntheticPrefill(400, 300), 1e-9);
  EXPECT_NEAR(m.PredictPrefillSavingSeconds(1000), SyntheticPrefill(1000, 0) - 0.01, 1e-9);
}

TEST(CostModelTest, PrefillFitNeverGoesNegative) {
  // A purely linear engine with noise that would pull b below 0 in an unconstrained fit.
  CostModel m(CostModelOptions{});
  const double noise[] = {1.02, 0.97, 1.01, 0.99, 1.03, 0.98, 1.0, 1.01};
  const uint64_t ts[] = {100, 8000, 300, 6000, 1000, 7000, 2000, 50};
  for (int i = 0; i < 8; ++i) m.ObservePrefill(ts[i], 0, 2e-4 * ts[i] * noise[i]);
  CostModel::PrefillModel pm = m.prefill_model();
  ASSERT_TRUE(pm.fitted);
  EXPECT_GE(pm.s_per_token, 0.0);
  EXPECT_GE(pm.s_per_token_ctx, 0.0);
  EXPECT_GE(pm.fixed_s, 0.0);
  EXPECT_NEAR(m.PredictPrefillSeconds(0, 4000), 0.8, 0.05);
}

TEST(CostModelTest, PrefillWindowForgetsOldSamples) {
  CostModelOptions o;
  o.min_prefill_samples = 4;
  o.max_prefill_samples = 4;
  CostModel m(o);
  for (uint64_t t : {100, 200, 300, 400}) m.ObservePrefill(t, 0, 1e-3 * t);
  EXPECT_NEAR(m.prefill_model().s_per_token, 1e-3, 1e-12);
  for (uint64_t t : {100, 200, 300, 400}) m.ObservePrefill(t, 0, 1e-4 * t);  // engine got faster
  EXPECT_NEAR(m.prefill_model().s_per_token, 1e-4, 1e-12);
  EXPECT_EQ(m.prefill_model().samples, 4u);
}

// ---- PlanOverlap: compute chunks [0, s) while loading [s, k) -----------------------
// 100-token chunks of 1 MB; prefill a = 1 ms/token (0.1 s per chunk), b = f = 0; every
// chunk on "disk" whose bandwidth is the parameter (latency 0).
CostModel OverlapModel(double disk_bytes_per_s, double a = 1e-3, double b = 0) {
  CostModelOptions o;
  o.prefill_s_per_token = a;
  o.prefill_s_per_token_ctx = b;
  o.tier_defaults[1] = {disk_bytes_per_s, 0};
  return CostModel(o);
}
constexpr uint32_t kOvChunkTokens = 100;
constexpr uint64_t kOvChunkBytes = 1'000'000;

TEST(CostModelOverlapTest, LoadAsSlowAsComputeSplitsInHalf) {
  // 10 MB/s: 0.1 s per chunk either way. T(s) = max(0.1 s, 0.1 (10 - s)) -> s = 5, 0.5 s.
  const std::vector<TierKind> tiers(10, TierKind::kDisk);
  OverlapPlan p = OverlapModel(1e7).PlanOverlap(tiers, kOvChunkTokens, kOvChunkBytes);
  EXPECT_EQ(p.front_chunks, 5u);
  EXPECT_EQ(p.total_chunks, 10u);
  EXPECT_TRUE(p.overlap());
  EXPECT_NEAR(p.predicted_s, 0.5, 1e-12);
  EXPECT_NEAR(p.compute_front_s, 0.5, 1e-12);
  EXPECT_NEAR(p.load_back_s, 0.5, 1e-12);
  EXPECT_NEAR(p.load_only_s, 1.0, 1e-12);
  EXPECT_NEAR(p.compute_only_s, 1.0, 1e-12);
}

TEST(CostModelOverlapTest, FasterLoadComputesFewerChunks) {
  // 20 MB/s: 0.05 s per chunk. s = 3: max(0.3, 0.35) = 0.35; s = 4: max(0.4, 0.3) = 0.4.
  const std::vector<TierKind> tiers(10, TierKind::kDisk);
  OverlapPlan p = OverlapModel(2e7).PlanOverlap(tiers, kOvChunkTokens, kOvChunkBytes);
  EXPECT_EQ(p.front_chunks, 3u);
  EXPECT_NEAR(p.predicted_s, 0.35, 1e-12);
  EXPECT_NEAR(p.load_only_s, 0.5, 1e-12);
  // 5 MB/s: 0.2 s per chunk. s = 6: max(0.6, 0.8) = 0.8; s = 7: max(0.7, 0.6) = 0.7;
  // s = 8: max(0.8, 0.4) = 0.8 -> 7.
  p = OverlapModel(5e6).PlanOverlap(tiers, kOvChunkTokens, kOvChunkBytes);
  EXPECT_EQ(p.front_chunks, 7u);
  EXPECT_NEAR(p.predicted_s, 0.7, 1e-12);
  EXPECT_NEAR(p.load_only_s, 2.0, 1e-12);
  EXPECT_NEAR(p.compute_only_s, 1.0, 1e-12);
}

TEST(CostModelOverlapTest, ExtremesNeedNoSplit) {
  const std::vector<TierKind> tiers(10, TierKind::kDisk);
  // 1 GB/s: 1 ms per chunk; any front (>= 0.1 s) is slower than loading all (0.01 s).
  OverlapPlan fast = OverlapModel(1e9).PlanOverlap(tiers, kOvChunkTokens, kOvChunkBytes);
  EXPECT_EQ(fast.front_chunks, 0u);
  EXPECT_FALSE(fast.overlap());
  EXPECT_NEAR(fast.predicted_s, 0.01, 1e-12);
  // 100 kB/s: 10 s per chunk; even one loaded chunk is slower than computing all (1 s).
  OverlapPlan slow = OverlapModel(1e5).PlanOverlap(tiers, kOvChunkTokens, kOvChunkBytes);
  EXPECT_EQ(slow.front_chunks, 10u);
  EXPECT_FALSE(slow.overlap());
  EXPECT_NEAR(slow.predicted_s, 1.0, 1e-12);
  EXPECT_NEAR(slow.compute_front_s, 1.0, 1e-12);
  EXPECT_EQ(slow.load_back_s, 0);
}

TEST(CostModelOverlapTest, JoinCostIsCharged) {
  const std::vector<TierKind> tiers(10, TierKind::kDisk);
  CostModel m = OverlapModel(1e7);
  // 0.2 s per join: 0.5 + 0.2 = 0.7 < 1.0, still split at 5.
  OverlapPlan p = m.PlanOverlap(tiers, kOvChunkTokens, kOvChunkBytes, {.fixed_s = 0.2});
  EXPECT_EQ(p.front_chunks, 5u);
  EXPECT_NEAR(p.predicted_s, 0.7, 1e-12);
  EXPECT_NEAR(p.join_s, 0.2, 1e-12);
  // 0.6 s per join: 1.1 > 1.0; load only (1.0) and compute only (1.0) tie -> smaller s.
  p = m.PlanOverlap(tiers, kOvChunkTokens, kOvChunkBytes, {.fixed_s = 0.6});
  EXPECT_EQ(p.front_chunks, 0u);
  // Per front token: j = 1e-4 s/token moves the split forward. T(s) = max(0.1 s,
  // 0.1 (10 - s)) + 0.01 s: s = 4 -> 0.64, s = 5 -> 0.55, s = 6 -> 0.66.
  p = m.PlanOverlap(tiers, kOvChunkTokens, kOvChunkBytes, {.s_per_front_token = 1e-4});
  EXPECT_EQ(p.front_chunks, 5u);
  EXPECT_NEAR(p.predicted_s, 0.55, 1e-12);
  // Restoring the state costs load-only too, not compute-only: r = 1e-4 s/token adds
  // 0.1 s to both T(0) and T(5) -> 1.1 and 0.6; compute only stays 1.0.
  p = m.PlanOverlap(tiers, kOvChunkTokens, kOvChunkBytes, {.s_per_restored_token = 1e-4});
  EXPECT_EQ(p.front_chunks, 5u);
  EXPECT_NEAR(p.predicted_s, 0.6, 1e-12);
  EXPECT_NEAR(p.load_only_s, 1.1, 1e-12);
  EXPECT_NEAR(p.compute_only_s, 1.0, 1e-12);
  // Negative / NaN join costs count as 0.
  p = m.PlanOverlap(tiers, kOvChunkTokens, kOvChunkBytes,
                    {.fixed_s = -1, .s_per_front_token = std::nan("")});
  EXPECT_EQ(p.front_chunks, 5u);
  EXPECT_NEAR(p.predicted_s, 0.5, 1e-12);
}

TEST(CostModelOverlapTest, ConcurrencySlowdownsShiftOrCancelTheSplit) {
  const std::vector<TierKind> tiers(10, TierKind::kDisk);
  CostModel m = OverlapModel(1e7);  // 0.1 s per chunk either way
  // Loading twice as slow beside the engine: max(0.1 s, 0.2 (10 - s)): s = 6 -> 0.8,
  // s = 7 -> max(0.7, 0.6) = 0.7, s = 8 -> 0.8.
  OverlapPlan p =
      m.PlanOverlap(tiers, kOvChunkTokens, kOvChunkBytes, {.concurrent_load_slowdown = 2});
  EXPECT_EQ(p.front_chunks, 7u);
  EXPECT_NEAR(p.predicted_s, 0.7, 1e-12);
  EXPECT_NEAR(p.load_back_s, 0.6, 1e-12);
  EXPECT_NEAR(p.load_only_s, 1.0, 1e-12);  // alone, the loader runs at full speed
  // Both sides twice as slow: the best split (s = 5, 1.0 s) only ties load only -> 0.
  p = m.PlanOverlap(tiers, kOvChunkTokens, kOvChunkBytes,
                    {.concurrent_load_slowdown = 2, .concurrent_compute_slowdown = 2});
  EXPECT_EQ(p.front_chunks, 0u);
  EXPECT_FALSE(p.overlap());
  // Slowdowns below 1 count as 1.
  p = m.PlanOverlap(tiers, kOvChunkTokens, kOvChunkBytes,
                    {.concurrent_load_slowdown = 0.5, .concurrent_compute_slowdown = 0});
  EXPECT_EQ(p.front_chunks, 5u);
  EXPECT_NEAR(p.predicted_s, 0.5, 1e-12);
}

TEST(CostModelOverlapTest, QuadraticPrefillAndFixedCost) {
  // a = 0, b = 1e-5 s per attended pair: saved(S) = 1e-5 * S (S + 1) / 2 =
  // 0.0505 / 0.201 / 0.4515 / 0.802 s for 1..4 chunks; 0.1 s per chunk to load.
  // T(1) = max(0.0505, 0.3) = 0.3, T(2) = max(0.201, 0.2) = 0.201, T(3) = 0.4515.
  const std::vector<TierKind> tiers(4, TierKind::kDisk);
  OverlapPlan p = OverlapModel(1e7, 0, 1e-5).PlanOverlap(tiers, kOvChunkTokens, kOvChunkBytes);
  EXPECT_EQ(p.front_chunks, 2u);
  EXPECT_NEAR(p.predicted_s, 0.201, 1e-12);
  EXPECT_NEAR(p.compute_only_s, 0.802, 1e-12);
  EXPECT_NEAR(p.load_only_s, 0.4, 1e-12);
  // f = 0.05 s on the front's extra prefill call: T(2) = max(0.251, 0.2) = 0.251,
  // T(1) = max(0.1005, 0.3) = 0.3 -> still 2.
  CostModelOptions o;
  o.prefill_s_per_token = 0;
  o.prefill_s_per_token_ctx = 1e-5;
  o.prefill_fixed_s = 0.05;
  o.tier_defaults[1] = {1e7, 0};
  p = CostModel(o).PlanOverlap(tiers, kOvChunkTokens, kOvChunkBytes);
  EXPECT_EQ(p.front_chunks, 2u);
  EXPECT_NEAR(p.predicted_s, 0.251, 1e-12);
  EXPECT_NEAR(p.compute_only_s, 0.802, 1e-12);  // one call either way: f not charged
}

TEST(CostModelOverlapTest, MixedTiersAndSafetyFactor) {
  // Host chunks cost ~0 (8 GB/s default: 125 us per MB); the slow disk tail is the back.
  // 4 host + 6 disk chunks at 10 MB/s: L(s) = 0.1 (10 - max(s, 4)) + 0.000125 (4 - s)+.
  // s = 5: max(0.5, 0.5) -> 0.5; s = 4: max(0.4, 0.6) = 0.6; s = 6: max(0.6, 0.4) = 0.6.
  std::vector<TierKind> tiers(4, TierKind::kHost);
  tiers.resize(10, TierKind::kDisk);
  CostModel m = OverlapModel(1e7);
  OverlapPlan p = m.PlanOverlap(tiers, kOvChunkTokens, kOvChunkBytes);
  EXPECT_EQ(p.front_chunks, 5u);
  EXPECT_NEAR(p.predicted_s, 0.5, 1e-12);
  // safety_factor 2 doubles every load: 0.2 s per disk chunk, as 5 MB/s above -> 7.
  CostModelOptions o;
  o.prefill_s_per_token = 1e-3;
  o.tier_defaults[1] = {1e7, 0};
  o.safety_factor = 2;
  p = CostModel(o).PlanOverlap(std::vector<TierKind>(10, TierKind::kDisk), kOvChunkTokens,
                               kOvChunkBytes);
  EXPECT_EQ(p.front_chunks, 7u);
  EXPECT_NEAR(p.predicted_s, 0.7, 1e-12);
}

TEST(CostModelOverlapTest, EmptyInputsGiveAnEmptyPlan) {
  CostModel m = OverlapModel(1e7);
  OverlapPlan p = m.PlanOverlap({}, kOvChunkTokens, kOvChunkBytes);
  EXPECT_EQ(p.total_chunks, 0u);
  EXPECT_EQ(p.front_chunks, 0u);
  EXPECT_FALSE(p.overlap());
  p = m.PlanOverlap(std::vector<TierKind>(3, TierKind::kDisk), 0, kOvChunkBytes);
  EXPECT_EQ(p.total_chunks, 0u);
  EXPECT_EQ(m.stats().decisions, 0u);  // pure: counts nothing
}

}  // namespace
}  // namespace kvt
