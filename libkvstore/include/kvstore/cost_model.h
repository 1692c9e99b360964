// Retrieve-vs-recompute cost model. No I/O: pure arithmetic over learned estimates.
// Full description, formulas and defaults: docs/cost-model.md.
//
// Load time of n bytes from a tier = latency + n / bandwidth. Both are learned online by
// EWMA from observed transfers, starting from configured defaults:
//  * a transfer whose predicted bandwidth part is smaller than the latency estimate
//    ("latency-dominated") updates the latency:   L <- (1-α) L + α (s - n/B);
//  * any other transfer updates the seconds per byte: 1/B <- (1-α)/B + α (s - L)/n.
//  With fixed-size transfers only (every chunk the same size) the latency stays at its
//  default and the bandwidth absorbs the rest, which predicts that size exactly.
// Estimates are only refreshed by loads, so a tier the model stopped loading from (after
// one stalled transfer, say) would keep a stale, too-slow estimate forever; Decide
// therefore probes: after
// probe_after_recomputes consecutive decisions that recompute although chunks are
// cached, the next one loads the first cached chunk (see CostModelOptions).
//
// Recompute time of t new tokens on top of c context tokens (the engine's prefill):
//     prefill(t, c) = f + a*t + b*x,   x = t * (c + (t + 1) / 2)
// x is the number of (query, key) pairs the new tokens attend to (causal attention:
// token i attends to i + 1 positions), so a is the per-token (MLP/projection) cost and b
// the attention cost per attended pair. f, a, b >= 0 are fitted by least squares over a
// window of observed prefills (non-negative: the best fit over the subsets of {f, a, b}
// whose solution is non-negative); until min_prefill_samples are seen, or when no
// usable fit exists, the configured defaults are used.
//
// Because x is additive over token ranges, prefill(0..N) - prefill(K..N) = a*K +
// b*K*(K+1)/2 exactly: the time saved by not computing the first K tokens does not
// depend on N, and f cancels (the engine computes at least one token either way).
//
// Decision rule (Decide): with chunk i covering tokens [i*T, (i+1)*T) and held in tier
// kind_i, for k = 0..n
//     saving(k) = recompute(0, k*T) - safety_factor * sum_{i<k} load(kind_i, chunk_bytes)
// and the connector loads the k with the largest saving, if that saving is > 0 (ties:
// the smaller k). k = 0 (recompute everything) has saving 0.
//
// Load-while-compute split (PlanOverlap; Cake, ICML'25): with k leading cached chunks,
// the engine computes chunks [0, s) while a loader fetches chunks [s, k), then joins both
// into one state. For s = 0..k (S = s*T tokens, K = k*T):
//     T(0)     = L(0, k) + r*K                                  (load only)
//     T(k)     = saved(K)                                       (compute only)
//     T(s)     = max(sc*(f + saved(S)), sl*L(s, k)) + j0 + j*S + r*K   (0 < s < k)
// with L(s, k) = safety_factor * sum_{i=s}^{k-1} load(kind_i, chunk_bytes),
// saved(K) = a*K + b*K*(K+1)/2 (as above; f is charged to the extra prefill call the
// front needs), and the join costs from OverlapJoinCost: r per restored token (building
// and set_data of the K-token state), j0 + j per front token (reading the front out of
// the engine and copying it into the state), and sl, sc >= 1 the measured slowdowns of
// loading and computing while both run at once. The tokens after K are computed the same
// way in every case, so they are left out. The split is the s with the smallest T(s)
// (ties: the smaller s).
#ifndef KVSTORE_COST_MODEL_H_
#define KVSTORE_COST_MODEL_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "kvstore/tier.h"

namespace kvt {

struct TierCostDefaults {
  double bandwidth_bytes_per_s = 0;  // > 0
  double latency_s = 0;              // >= 0
};

struct CostModelOptions {
  // Starting estimates per TierKind, indexed by its value (host, disk, remote). Sources:
  // DESIGN.md's measured limits on a 2-core CI machine (single-thread memcpy ~10 GB/s,
  // O_DIRECT io_uring read ~1.35 GB/s, loopback TCP ~3.5 GB/s), derated for the record
  // verification (XXH3) and copy into the engine's memory that every load also does.
  std::array<TierCostDefaults, 3> tier_defaults{{
      {8e9, 20e-6},     // host
      {1.2e9, 200e-6},  // disk
      {1.5e9, 500e-6},  // remote
  }};
  // EWMA weight of a new transfer observation, in (0, 1].
  double ewma_alpha = 0.2;
  // Default prefill model (used until the fit is usable): seconds per new token (a),
  // seconds per attended (query, key) pair (b), and seconds per prefill call (f).
  // 1 ms/token is a conservative GPU-less figure; engines should call ObservePrefill.
  double prefill_s_per_token = 1e-3;
  double prefill_s_per_token_ctx = 0;
  double prefill_fixed_s = 0;
  // Observed prefills needed before the fitted model replaces the defaults (>= 2).
  uint32_t min_prefill_samples = 8;
  // Most recent prefills kept for the least-squares fit (>= min_prefill_samples).
  uint32_t max_prefill_samples = 256;
  // Load only if safety_factor * load_time < recompute_time (>= 1.0 favours recompute).
  double safety_factor = 1.0;
  // After this many consecutive Decide calls that chose to recompute although chunks
  // were cached, the next such call loads the first cached chunk anyway (a probe), so
  // the tier estimate is measured again. Bounds what probing costs where recomputing
  // really is faster: one chunk's load in probe_after_recomputes + 1 such prompts.
  // 0 disables probing.
  uint32_t probe_after_recomputes = 32;

  // InvalidArgument naming the field for: bandwidth <= 0 or latency < 0 (or NaN) in any
  // tier default, ewma_alpha outside (0, 1], negative prefill defaults, a and b both 0,
  // min_prefill_samples < 2, max_prefill_samples < min_prefill_samples,
  // safety_factor <= 0.
  absl::Status Validate() const;
};

// Monotonic counters since creation (relaxed atomics; a snapshot, not a transaction).
struct CostModelStats {
  uint64_t decisions = 0;               // Decide calls
  uint64_t decisions_load_all = 0;      // chose every cached chunk (n > 0)
  uint64_t decisions_load_partial = 0;  // chose 0 < k < n
  uint64_t decisions_recompute = 0;     // chose k = 0 although n > 0
  uint64_t decisions_no_hit = 0;        // n == 0
  uint64_t decisions_probe = 0;         // loaded one chunk to re-measure a tier (see options)
  uint64_t chunks_considered = 0;       // sum of n
  uint64_t chunks_chosen = 0;           // sum of k
  uint64_t transfers_observed = 0;      // accepted ObserveTransfer calls
  uint64_t prefills_observed = 0;       // accepted ObservePrefill calls
  uint64_t observations_rejected = 0;   // non-finite / non-positive inputs ignored
  bool prefill_fit_active = false;      // the fitted model is in use (gauge)
};

// Thread-safe.
// Join costs of a load-while-compute split (see PlanOverlap). All >= 0; the engine
// adapter measures them (seconds).
struct OverlapJoinCost {
  double fixed_s = 0;               // j0: per join
  double s_per_front_token = 0;     // j: per computed front token copied into the state
  double s_per_restored_token = 0;  // r: per token of the restored state (load paths)
  // Measured slowdowns of the two sides while they run at once (>= 1; values below 1 or
  // non-finite count as 1): on a busy CPU the loader thread and the engine compete.
  double concurrent_load_slowdown = 1;     // sigma_l, multiplies L(s, k) for 0 < s < k
  double concurrent_compute_slowdown = 1;  // sigma_c, multiplies f + saved(S) for 0 < s < k
};

struct OverlapPlan {
  size_t front_chunks = 0;     // s: chunks [0, s) computed by the engine
  size_t total_chunks = 0;     // k: chunks [s, k) loaded meanwhile
  double predicted_s = 0;      // T(s)
  double compute_front_s = 0;  // sc*(f + saved(S)) (0 when s == 0; saved(K) when s == k)
  double load_back_s = 0;      // sl*L(s, k) (L(0, k) when s == 0)
  double join_s = 0;           // the join and restore terms of T(s)
  double load_only_s = 0;      // T(0)
  double compute_only_s = 0;   // T(k)
  // 0 < s < k: computing and loading at once is predicted to be fastest.
  bool overlap() const { return front_chunks > 0 && front_chunks < total_chunks; }
};

class CostModel {
 public:
  // REQUIRES: options.Validate().ok() (checked by the connector; invalid options are
  // clamped to the nearest valid value here rather than crash).
  explicit CostModel(const CostModelOptions& options);

  // Records a transfer of `bytes` from tier `kind` that took `seconds` (wall time of the
  // tier read, including its latency). Ignored (counted) when bytes == 0, seconds <= 0
  // or not finite.
  void ObserveTransfer(TierKind kind, uint64_t bytes, double seconds);
  // Records a prefill of `new_tokens` on top of `context_tokens` taking `seconds`.
  // Ignored (counted) when new_tokens == 0, seconds <= 0 or not finite.
  void ObservePrefill(uint64_t new_tokens, uint64_t context_tokens, double seconds);

  // Seconds to read `bytes` from a tier of `kind` (latency + bytes / bandwidth).
  double PredictLoadSeconds(TierKind kind, uint64_t bytes) const;
  // Seconds to prefill tokens [start_token, end_token) with start_token tokens of
  // context before them: f + a*t + b*t*(start + (t+1)/2), t = end - start. 0 when t == 0.
  double PredictPrefillSeconds(uint64_t start_token, uint64_t end_token) const;
  // Seconds saved by not computing tokens [0, tokens): PredictPrefillSeconds(0, tokens)
  // without the fixed term f (which is paid either way).
  double PredictPrefillSavingSeconds(uint64_t tokens) const;

  struct Decision {
    size_t chunks_to_load = 0;
    double load_s = 0;       // predicted time to load chunks_to_load chunks (no safety factor)
    double recompute_s = 0;  // predicted time saved by not recomputing those tokens
                             // (tokens [computed_tokens, chunks_to_load * chunk_tokens))
    double saving_s = 0;     // recompute_s - safety_factor * load_s (>= 0 unless probe)
    bool probe = false;      // a probe: one chunk loaded to re-measure its tier
  };
  // Given the tier of each leading cached chunk (chunk i covers tokens
  // [i*chunk_tokens, (i+1)*chunk_tokens)) and the payload bytes per chunk, returns the
  // number of leading chunks to load: the prefix length k maximising
  // saving(k) = recompute(0, k*chunk_tokens) - safety_factor * sum_{i<k} load(chunk i),
  // when that saving is positive; else 0 -- except for a probe (probe_after_recomputes),
  // which loads the first cached chunk. Logs inputs and decision at spdlog debug.
  //
  // `computed_tokens`: tokens the engine already holds. Chunks ending at or before it
  // are neither loaded nor credited; a chunk straddling it costs a whole load but saves
  // only the tokens after it: saving(k) = recompute(computed, k*T) - load(chunks c..k-1)
  // with c = computed_tokens / T, for k > c. The returned chunks_to_load is still the
  // absolute prefix length (load tokens [computed, k*T)); 0 means load nothing.
  Decision Decide(std::span<const TierKind> chunk_tiers, uint32_t chunk_tokens,
                  uint64_t chunk_bytes, uint64_t computed_tokens = 0) const;

  // The load-while-compute split of the chunks in `chunk_tiers` (all of them are to be
  // used: k = chunk_tiers.size(); chunk i covers tokens [i*chunk_tokens, (i+1)*chunk_tokens)),
  // by the formula in the file comment, from the current tier and prefill estimates.
  // k == 0 or chunk_tokens == 0: an empty plan. Negative or non-finite join costs count
  // as 0. Pure: counts nothing.
  OverlapPlan PlanOverlap(std::span<const TierKind> chunk_tiers, uint32_t chunk_tokens,
                          uint64_t chunk_bytes, const OverlapJoinCost& join = {}) const;

  // Current estimates (for logs, metrics and tests).
  struct TierEstimate {
    double bandwidth_bytes_per_s;
    double latency_s;
  };
  TierEstimate tier_estimate(TierKind kind) const;
  struct PrefillModel {
    double fixed_s;
    double s_per_token;      // a
    double s_per_token_ctx;  // b
    bool fitted;             // false: the configured defaults
    uint64_t samples;        // samples in the fit window
  };
  PrefillModel prefill_model() const;
  CostModelStats stats() const;

 private:
  struct Sample {
    double t, x, y;
  };
  void RefitLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  CostModelOptions options_;
  mutable absl::Mutex mu_;
  static constexpr size_t kTierSlots = 3;  // one per TierKind
  std::array<TierEstimate, kTierSlots> tiers_ ABSL_GUARDED_BY(mu_);
  std::vector<Sample> samples_ ABSL_GUARDED_BY(mu_);  // ring buffer, max_prefill_samples
  size_t next_sample_ ABSL_GUARDED_BY(mu_) = 0;
  PrefillModel model_ ABSL_GUARDED_BY(mu_);

  mutable std::atomic<uint64_t> decisions_{0}, load_all_{0}, load_partial_{0}, recompute_{0},
      no_hit_{0}, chunks_considered_{0}, chunks_chosen_{0}, probes_{0}, recompute_streak_{0};
  std::atomic<uint64_t> transfers_{0}, prefills_{0}, rejected_{0};
};

}  // namespace kvt

#endif  // KVSTORE_COST_MODEL_H_
