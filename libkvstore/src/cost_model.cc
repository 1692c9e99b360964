#include "kvstore/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"

namespace kvt {
namespace {

bool Finite(double v) { return std::isfinite(v); }

// Attended (query, key) pairs of t new tokens after c context tokens: sum_{i=c}^{c+t-1}(i+1).
double AttendedPairs(double t, double c) { return t * (c + (t + 1.0) / 2.0); }

// Solves the k x k system m * x = r in place (Gaussian elimination, partial pivoting).
// Returns false when a pivot is (relatively) zero.
template <size_t N>
bool Solve(std::array<std::array<double, N>, N> m, std::array<double, N> r, size_t k,
           std::array<double, N>* out) {
  for (size_t col = 0; col < k; ++col) {
    size_t piv = col;
    for (size_t row = col + 1; row < k; ++row) {
      if (std::abs(m[row][col]) > std::abs(m[piv][col])) piv = row;
    }
    if (!(std::abs(m[piv][col]) > 1e-12)) return false;
    std::swap(m[piv], m[col]);
    std::swap(r[piv], r[col]);
    for (size_t row = col + 1; row < k; ++row) {
      double f = m[row][col] / m[col][col];
      for (size_t j = col; j < k; ++j) m[row][j] -= f * m[col][j];
      r[row] -= f * r[col];
    }
  }
  for (size_t i = k; i-- > 0;) {
    double s = r[i];
    for (size_t j = i + 1; j < k; ++j) s -= m[i][j] * (*out)[j];
    (*out)[i] = s / m[i][i];
  }
  return true;
}

}  // namespace

absl::Status CostModelOptions::Validate() const {
  for (size_t i = 0; i < tier_defaults.size(); ++i) {
    const auto& d = tier_defaults[i];
    std::string_view name = TierKindName(static_cast<TierKind>(i));
    if (!(d.bandwidth_bytes_per_s > 0) || !Finite(d.bandwidth_bytes_per_s)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "CostModelOptions.tier_defaults[%s].bandwidth_bytes_per_s = %g; expected a finite "
          "value > 0",
          name, d.bandwidth_bytes_per_s));
    }
    if (!(d.latency_s >= 0) || !Finite(d.latency_s)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "CostModelOptions.tier_defaults[%s].latency_s = %g; expected a finite value >= 0", name,
          d.latency_s));
    }
  }
  if (!(ewma_alpha > 0 && ewma_alpha <= 1)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CostModelOptions.ewma_alpha = %g; expected a value in (0, 1]", ewma_alpha));
  }
  for (auto [name, v] : {std::pair<const char*, double>{"prefill_s_per_token", prefill_s_per_token},
                         {"prefill_s_per_token_ctx", prefill_s_per_token_ctx},
                         {"prefill_fixed_s", prefill_fixed_s}}) {
    if (!(v >= 0) || !Finite(v)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("CostModelOptions.%s = %g; expected a finite value >= 0", name, v));
    }
  }
  if (prefill_s_per_token == 0 && prefill_s_per_token_ctx == 0) {
    return absl::InvalidArgumentError(
        "CostModelOptions.prefill_s_per_token and prefill_s_per_token_ctx are both 0; expected "
        "a prefill model that costs something per token");
  }
  if (min_prefill_samples < 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CostModelOptions.min_prefill_samples = %u; expected >= 2", min_prefill_samples));
  }
  if (max_prefill_samples < min_prefill_samples) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CostModelOptions.max_prefill_samples = %u; expected >= min_prefill_samples (%u)",
        max_prefill_samples, min_prefill_samples));
  }
  if (!(safety_factor > 0) || !Finite(safety_factor)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CostModelOptions.safety_factor = %g; expected a finite value > 0", safety_factor));
  }
  return absl::OkStatus();
}

CostModel::CostModel(const CostModelOptions& options) : options_(options) {
  // Clamp rather than crash on invalid options (callers are expected to Validate()).
  options_.ewma_alpha =
      std::clamp(Finite(options_.ewma_alpha) ? options_.ewma_alpha : 0.2, 1e-6, 1.0);
  options_.min_prefill_samples = std::max<uint32_t>(options_.min_prefill_samples, 2);
  options_.max_prefill_samples =
      std::max(options_.max_prefill_samples, options_.min_prefill_samples);
  if (!(options_.safety_factor > 0) || !Finite(options_.safety_factor)) options_.safety_factor = 1;
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < tiers_.size(); ++i) {
    const auto& d = options_.tier_defaults[i];
    tiers_[i].bandwidth_bytes_per_s = d.bandwidth_bytes_per_s > 0 && Finite(d.bandwidth_bytes_per_s)
                                          ? d.bandwidth_bytes_per_s
                                          : 1e9;
    tiers_[i].latency_s = d.latency_s >= 0 && Finite(d.latency_s) ? d.latency_s : 0;
  }
  model_ = PrefillModel{std::max(0.0, options_.prefill_fixed_s),
                        std::max(0.0, options_.prefill_s_per_token),
                        std::max(0.0, options_.prefill_s_per_token_ctx), false, 0};
  samples_.reserve(options_.max_prefill_samples);
}

void CostModel::ObserveTransfer(TierKind kind, uint64_t bytes, double seconds) {
  size_t i = static_cast<size_t>(kind);
  if (i >= kTierSlots || bytes == 0 || !(seconds > 0) || !Finite(seconds)) {
    rejected_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  transfers_.fetch_add(1, std::memory_order_relaxed);
  const double alpha = options_.ewma_alpha;
  const double n = static_cast<double>(bytes);
  absl::MutexLock lock(&mu_);
  TierEstimate& e = tiers_[i];
  const double transfer_part = n / e.bandwidth_bytes_per_s;
  if (transfer_part < e.latency_s) {
    // Latency-dominated: what is left after the bandwidth part is latency.
    double sample = std::max(0.0, seconds - transfer_part);
    e.latency_s = (1 - alpha) * e.latency_s + alpha * sample;
  } else {
    // Bandwidth-dominated: EWMA of seconds per byte (so predicted times average
    // correctly), after removing the latency estimate. Never let the remainder fall
    // below 1% of the observed time (a latency estimate that is too high).
    double rest = std::max(seconds - e.latency_s, seconds * 0.01);
    double spb = (1 - alpha) / e.bandwidth_bytes_per_s + alpha * (rest / n);
    e.bandwidth_bytes_per_s = 1.0 / spb;
  }
  spdlog::debug("kvt cost model: transfer tier={} bytes={} s={:.6g} -> bw={:.4g} B/s lat={:.4g} s",
                TierKindName(kind), bytes, seconds, e.bandwidth_bytes_per_s, e.latency_s);
}

void CostModel::ObservePrefill(uint64_t new_tokens, uint64_t context_tokens, double seconds) {
  if (new_tokens == 0 || !(seconds > 0) || !Finite(seconds)) {
    rejected_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  prefills_.fetch_add(1, std::memory_order_relaxed);
  const double t = static_cast<double>(new_tokens);
  Sample s{t, AttendedPairs(t, static_cast<double>(context_tokens)), seconds};
  absl::MutexLock lock(&mu_);
  if (samples_.size() < options_.max_prefill_samples) {
    samples_.push_back(s);
  } else {
    samples_[next_sample_] = s;
  }
  next_sample_ = (next_sample_ + 1) % options_.max_prefill_samples;
  RefitLocked();
}

void CostModel::RefitLocked() {
  const size_t n = samples_.size();
  model_.samples = n;
  auto use_defaults = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    model_.fixed_s = options_.prefill_fixed_s;
    model_.s_per_token = options_.prefill_s_per_token;
    model_.s_per_token_ctx = options_.prefill_s_per_token_ctx;
    model_.fitted = false;
  };
  if (n < options_.min_prefill_samples) {
    use_defaults();
    return;
  }
  // Columns: 0 = 1 (fixed), 1 = t, 2 = x, each scaled by its largest magnitude so the
  // normal equations are well conditioned (t ~ 1e5 and x ~ 1e10 unscaled).
  std::array<double, 3> scale{1, 0, 0};
  for (const Sample& s : samples_) {
    scale[1] = std::max(scale[1], s.t);
    scale[2] = std::max(scale[2], s.x);
  }
  if (!(scale[1] > 0) || !(scale[2] > 0)) {
    use_defaults();
    return;
  }
  std::array<std::array<double, 3>, 3> g{};  // X^T X (scaled)
  std::array<double, 3> h{};                 // X^T y
  for (const Sample& s : samples_) {
    const std::array<double, 3> row{1.0, s.t / scale[1], s.x / scale[2]};
    for (size_t i = 0; i < 3; ++i) {
      for (size_t j = 0; j < 3; ++j) g[i][j] += row[i] * row[j];
      h[i] += row[i] * s.y;
    }
  }
  // Non-negative least squares by enumeration: every subset of columns that contains t
  // or x; keep solutions with all coefficients >= 0; pick the smallest residual.
  double best_sse = std::numeric_limits<double>::infinity();
  std::array<double, 3> best{};
  bool found = false;
  for (unsigned mask = 1; mask < 8; ++mask) {
    if ((mask & 6u) == 0) continue;  // fixed term alone predicts no per-token cost
    std::array<size_t, 3> cols{};
    size_t k = 0;
    for (size_t c = 0; c < 3; ++c) {
      if (mask & (1u << c)) cols[k++] = c;
    }
    std::array<std::array<double, 3>, 3> m{};
    std::array<double, 3> r{};
    for (size_t i = 0; i < k; ++i) {
      for (size_t j = 0; j < k; ++j) m[i][j] = g[cols[i]][cols[j]];
      r[i] = h[cols[i]];
    }
    std::array<double, 3> sol{};
    if (!Solve<3>(m, r, k, &sol)) continue;
    std::array<double, 3> coef{};
    bool ok = true;
    for (size_t i = 0; i < k; ++i) {
      if (!Finite(sol[i]) || sol[i] < -1e-12 * std::max(1.0, std::abs(sol[i]))) ok = false;
      coef[cols[i]] = std::max(0.0, sol[i]);
    }
    if (!ok) continue;
    double sse = 0;
    for (const Sample& s : samples_) {
      double pred = coef[0] + coef[1] * s.t / scale[1] + coef[2] * s.x / scale[2];
      sse += (pred - s.y) * (pred - s.y);
    }
    // Prefer fewer parameters on (near) ties so a pure-linear engine gets b = 0.
    if (sse < best_sse * (1 - 1e-9)) {
      best_sse = sse;
      best = coef;
      found = true;
    }
  }
  if (!found || (best[1] == 0 && best[2] == 0)) {
    use_defaults();
    return;
  }
  model_.fixed_s = best[0];
  model_.s_per_token = best[1] / scale[1];
  model_.s_per_token_ctx = best[2] / scale[2];
  model_.fitted = true;
  spdlog::debug(
      "kvt cost model: prefill fit over {} samples: f={:.4g} s a={:.4g} s/token "
      "b={:.4g} s/pair",
      n, model_.fixed_s, model_.s_per_token, model_.s_per_token_ctx);
}

double CostModel::PredictLoadSeconds(TierKind kind, uint64_t bytes) const {
  size_t i = std::min(static_cast<size_t>(kind), kTierSlots - 1);
  absl::MutexLock lock(&mu_);
  return tiers_[i].latency_s + static_cast<double>(bytes) / tiers_[i].bandwidth_bytes_per_s;
}

double CostModel::PredictPrefillSeconds(uint64_t start_token, uint64_t end_token) const {
  if (end_token <= start_token) return 0;
  const double t = static_cast<double>(end_token - start_token);
  absl::MutexLock lock(&mu_);
  return model_.fixed_s + model_.s_per_token * t +
         model_.s_per_token_ctx * AttendedPairs(t, static_cast<double>(start_token));
}

double CostModel::PredictPrefillSavingSeconds(uint64_t tokens) const {
  if (tokens == 0) return 0;
  const double t = static_cast<double>(tokens);
  absl::MutexLock lock(&mu_);
  return model_.s_per_token * t + model_.s_per_token_ctx * AttendedPairs(t, 0);
}

CostModel::Decision CostModel::Decide(std::span<const TierKind> chunk_tiers, uint32_t chunk_tokens,
                                      uint64_t chunk_bytes, uint64_t computed_tokens) const {
  decisions_.fetch_add(1, std::memory_order_relaxed);
  Decision d;
  const size_t n = chunk_tiers.size();
  const size_t first =
      chunk_tokens == 0 ? n : std::min<uint64_t>(computed_tokens / chunk_tokens, n);
  if (first >= n) {
    no_hit_.fetch_add(1, std::memory_order_relaxed);
    return d;
  }
  std::array<TierEstimate, 3> tiers;
  PrefillModel model;
  {
    absl::MutexLock lock(&mu_);
    tiers = tiers_;
    model = model_;
  }
  auto saved = [&](double tokens) {
    return model.s_per_token * tokens + model.s_per_token_ctx * AttendedPairs(tokens, 0);
  };
  const double already = saved(static_cast<double>(computed_tokens));
  double load = 0;
  for (size_t k = first + 1; k <= n; ++k) {
    const TierEstimate& e = tiers[std::min(static_cast<size_t>(chunk_tiers[k - 1]), size_t{2})];
    load += e.latency_s + static_cast<double>(chunk_bytes) / e.bandwidth_bytes_per_s;
    const double recompute = saved(static_cast<double>(k) * chunk_tokens) - already;
    const double saving = recompute - options_.safety_factor * load;
    if (saving > d.saving_s) {
      d = Decision{k, load, recompute, saving};
    }
  }
  if (d.chunks_to_load == 0) {
    // Recompute although chunks are cached: the estimates that said so are refreshed only
    // by loads. Every (probe_after_recomputes + 1)-th such decision in a row probes.
    const uint32_t every = options_.probe_after_recomputes;
    if (every > 0 && recompute_streak_.fetch_add(1, std::memory_order_relaxed) + 1 > every) {
      recompute_streak_.store(0, std::memory_order_relaxed);
      const TierEstimate& e = tiers[std::min(static_cast<size_t>(chunk_tiers[first]), size_t{2})];
      const double load = e.latency_s + static_cast<double>(chunk_bytes) / e.bandwidth_bytes_per_s;
      const double recompute = saved(static_cast<double>(first + 1) * chunk_tokens) - already;
      d = Decision{first + 1, load, recompute, recompute - options_.safety_factor * load,
                   /*probe=*/true};
      probes_.fetch_add(1, std::memory_order_relaxed);
    }
  } else {
    recompute_streak_.store(0, std::memory_order_relaxed);
  }
  chunks_considered_.fetch_add(n - first, std::memory_order_relaxed);
  chunks_chosen_.fetch_add(d.chunks_to_load == 0 ? 0 : d.chunks_to_load - first,
                           std::memory_order_relaxed);
  if (d.chunks_to_load == n) {
    load_all_.fetch_add(1, std::memory_order_relaxed);
  } else if (d.chunks_to_load == 0) {
    recompute_.fetch_add(1, std::memory_order_relaxed);
  } else {
    load_partial_.fetch_add(1, std::memory_order_relaxed);
  }
  if (spdlog::should_log(spdlog::level::debug)) {
    std::string tiers_str = absl::StrJoin(chunk_tiers, "", [](std::string* out, TierKind k) {
      out->push_back(TierKindName(k).empty() ? '?' : TierKindName(k)[0]);
    });
    spdlog::debug(
        "kvt cost model: decide chunks={} computed_tokens={} chunk_tokens={} chunk_bytes={} "
        "tiers={} "
        "prefill(f={:.4g},a={:.4g},b={:.4g},fitted={}) -> load {} chunks: load_s={:.6g} "
        "recompute_s={:.6g} saving_s={:.6g}",
        n, computed_tokens, chunk_tokens, chunk_bytes, tiers_str, model.fixed_s, model.s_per_token,
        model.s_per_token_ctx, model.fitted, d.chunks_to_load, d.load_s, d.recompute_s, d.saving_s);
  }
  return d;
}

OverlapPlan CostModel::PlanOverlap(std::span<const TierKind> chunk_tiers, uint32_t chunk_tokens,
                                   uint64_t chunk_bytes, const OverlapJoinCost& join) const {
  OverlapPlan plan;
  const size_t k = chunk_tiers.size();
  if (k == 0 || chunk_tokens == 0) return plan;
  std::array<TierEstimate, 3> tiers;
  PrefillModel model;
  {
    absl::MutexLock lock(&mu_);
    tiers = tiers_;
    model = model_;
  }
  auto clean = [](double v) { return std::isfinite(v) && v > 0 ? v : 0.0; };
  const double j0 = clean(join.fixed_s);
  const double j = clean(join.s_per_front_token);
  const double r = clean(join.s_per_restored_token);
  auto slowdown = [](double v) { return std::isfinite(v) && v > 1 ? v : 1.0; };
  const double sl = slowdown(join.concurrent_load_slowdown);
  const double sc = slowdown(join.concurrent_compute_slowdown);
  auto saved = [&](double tokens) {
    return model.s_per_token * tokens + model.s_per_token_ctx * AttendedPairs(tokens, 0);
  };
  // back[s] = L(s, k): suffix sums of the per-chunk load times.
  std::vector<double> back(k + 1, 0.0);
  for (size_t i = k; i-- > 0;) {
    const TierEstimate& e = tiers[std::min(static_cast<size_t>(chunk_tiers[i]), size_t{2})];
    back[i] = back[i + 1] +
              options_.safety_factor *
                  (e.latency_s + static_cast<double>(chunk_bytes) / e.bandwidth_bytes_per_s);
  }
  const double total_tokens = static_cast<double>(k) * chunk_tokens;
  const double restore = r * total_tokens;
  plan.total_chunks = k;
  plan.load_only_s = back[0] + restore;
  plan.compute_only_s = saved(total_tokens);
  // s = 0 first; strict < keeps the smaller s on ties.
  plan.front_chunks = 0;
  plan.predicted_s = plan.load_only_s;
  plan.load_back_s = back[0];
  plan.join_s = restore;
  for (size_t s = 1; s <= k; ++s) {
    const double front_tokens = static_cast<double>(s) * chunk_tokens;
    double compute, join_s, total;
    if (s == k) {
      compute = plan.compute_only_s;
      join_s = 0;
      total = compute;
    } else {
      compute = sc * (model.fixed_s + saved(front_tokens));
      join_s = j0 + j * front_tokens + restore;
      total = std::max(compute, sl * back[s]) + join_s;
    }
    if (total < plan.predicted_s) {
      plan.front_chunks = s;
      plan.predicted_s = total;
      plan.compute_front_s = compute;
      plan.load_back_s = s == k ? 0 : sl * back[s];
      plan.join_s = join_s;
    }
  }
  spdlog::debug(
      "kvt cost model: overlap plan chunks={} chunk_tokens={} chunk_bytes={} -> compute {} "
      "chunks, load {}: predicted {:.6g} s (front {:.6g} s, back {:.6g} s, join {:.6g} s; "
      "load only {:.6g} s, compute only {:.6g} s)",
      k, chunk_tokens, chunk_bytes, plan.front_chunks, k - plan.front_chunks, plan.predicted_s,
      plan.compute_front_s, plan.load_back_s, plan.join_s, plan.load_only_s, plan.compute_only_s);
  return plan;
}

CostModel::TierEstimate CostModel::tier_estimate(TierKind kind) const {
  absl::MutexLock lock(&mu_);
  return tiers_[std::min(static_cast<size_t>(kind), tiers_.size() - 1)];
}

CostModel::PrefillModel CostModel::prefill_model() const {
  absl::MutexLock lock(&mu_);
  return model_;
}

CostModelStats CostModel::stats() const {
  CostModelStats s;
  s.decisions = decisions_.load(std::memory_order_relaxed);
  s.decisions_load_all = load_all_.load(std::memory_order_relaxed);
  s.decisions_load_partial = load_partial_.load(std::memory_order_relaxed);
  s.decisions_recompute = recompute_.load(std::memory_order_relaxed);
  s.decisions_no_hit = no_hit_.load(std::memory_order_relaxed);
  s.decisions_probe = probes_.load(std::memory_order_relaxed);
  s.chunks_considered = chunks_considered_.load(std::memory_order_relaxed);
  s.chunks_chosen = chunks_chosen_.load(std::memory_order_relaxed);
  s.transfers_observed = transfers_.load(std::memory_order_relaxed);
  s.prefills_observed = prefills_.load(std::memory_order_relaxed);
  s.observations_rejected = rejected_.load(std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  s.prefill_fit_active = model_.fitted;
  return s;
}

}  // namespace kvt
