#include "kvtier_server/server_overlap.h"

#include <algorithm>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_format.h"
#include "kvstore/chunk_codec.h"
#include "spdlog/spdlog.h"

namespace kvt::llamacpp {
namespace {

using Clock = std::chrono::steady_clock;

// A split must beat the better of load only and compute only by this factor (as the
// adapter's RunOptions::overlap_min_gain): the plan does not see the two threads slow
// each other down on a busy CPU.
constexpr double kMinGain = 1.15;
constexpr double kJoinEwmaAlpha = 0.25;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
double Ewma(double old, double v) { return old == 0 ? v : old + kJoinEwmaAlpha * (v - old); }

}  // namespace

uint64_t ServerOverlap::PickFront(const ConnectorLookup& lookup, uint64_t begin, uint64_t usable,
                                  uint64_t want) {
  using Mode = ServerKvtierOptions::Overlap;
  const uint32_t chunk = connector_.chunk_tokens();
  if (mode_ == Mode::kOff || usable < begin + 2 * uint64_t{chunk}) return 0;
  if (front_tokens_ > 0) {
    const uint64_t front = static_cast<uint64_t>(front_tokens_);
    return front > begin && front < usable ? front : 0;
  }
  // kAuto: only when the cost decision loads less than the cached prefix.
  if (mode_ == Mode::kAuto && want >= usable) return 0;
  // The plan prices a front computed from token 0.
  if (begin > 0) return 0;
  const size_t chunks = usable / chunk;
  if (lookup.chunk_tiers.size() < chunks) return 0;
  const OverlapPlan plan = connector_.cost_model().PlanOverlap(
      std::span<const TierKind>(lookup.chunk_tiers).first(chunks), chunk,
      connector_.chunk_payload_bytes() + kChunkHeaderBytes, join_cost_);
  spdlog::debug(
      "kvtier: overlap plan {}/{} chunks: predicted {:.1f} ms (load only {:.1f}, compute only "
      "{:.1f})",
      plan.front_chunks, plan.total_chunks, plan.predicted_s * 1e3, plan.load_only_s * 1e3,
      plan.compute_only_s * 1e3);
  if (!plan.overlap() ||
      plan.predicted_s * kMinGain > std::min(plan.load_only_s, plan.compute_only_s)) {
    return 0;
  }
  return uint64_t{plan.front_chunks} * chunk;
}

bool ServerOverlap::Start(int32_t seq_id, std::span<const TokenId> prompt, uint64_t front,
                          uint64_t usable, Lease& lease) {
  auto ov = std::make_unique<Overlap>();
  ov->prompt.assign(prompt.begin(), prompt.end());
  ov->t0 = Clock::now();
  // A planned split meets in the middle (the realized split follows the actual speeds,
  // as LlamaKvAdapter's default); a fixed front (--kvtier-overlap-front) is kept as is.
  ov->from_end = front_tokens_ == 0;
  absl::StatusOr<std::unique_ptr<BackLoader>> loader =
      ov->from_end ? BackLoader::StartFromEnd(connector_, ov->prompt, usable, io_.spec(), seq_id)
                   : BackLoader::Start(connector_, ov->prompt, front, usable, io_.spec(), seq_id);
  if (!loader.ok()) {
    spdlog::warn("kvtier: cannot start the back load, not overlapping: {}",
                 loader.status().ToString());
    return false;
  }
  ov->loader = std::move(*loader);
  ov->lease = std::move(lease);  // the pins hold until the back load is done, not the split
  ov->front = front;
  ov->end = usable;
  overlaps_[seq_id] = std::move(ov);
  stats_.overlapped.fetch_add(1, std::memory_order_relaxed);
  spdlog::debug("kvtier: seq {}: computing tokens [0, {}) while loading [{}, {})", seq_id, front,
                front, usable);
  return true;
}

ServerOverlap::BatchStep ServerOverlap::AtBatch(llama_context* ctx, int32_t seq_id,
                                                std::span<const TokenId> prompt, size_t n_done,
                                                size_t* n_limit,
                                                absl::FunctionRef<bool()> model_unchanged) {
  auto it = overlaps_.find(seq_id);
  if (it == overlaps_.end()) return {n_done};
  Overlap& ov = *it->second;
  if (prompt.size() != ov.prompt.size() ||
      !std::equal(ov.prompt.begin(), ov.prompt.end(), prompt.begin())) {
    overlaps_.erase(it);  // the slot moved on to another prompt (waits for the loader)
    return {n_done};
  }
  // The model file changed since the load started: its chunks name the old weights, so
  // none is joined; llama-server computes the rest (issue 21 item 1).
  if (!model_unchanged()) {
    overlaps_.erase(it);
    return {n_done};
  }
  if (ov.from_end) {
    // Meet in the middle: one chunk per batch while the loader walks down from the end;
    // once it has stopped (finished or failed), the gap before what it loaded at once.
    ov.loader->SetComputed(n_done);
    const bool finished = ov.loader->done();
    const uint64_t lowest = ov.loader->loaded_begin();
    if (n_done < ov.end && n_done < lowest) {
      const uint64_t chunk = connector_.chunk_tokens();
      *n_limit = std::min<size_t>(*n_limit, finished ? lowest : (n_done / chunk + 1) * chunk);
      return {n_done};
    }
  } else if (n_done < ov.front) {
    *n_limit = std::min<size_t>(*n_limit, ov.front);
    return {n_done};
  }
  // The front is computed: from here on the loader is done with, whatever happens.
  absl::Cleanup drop = [&] { overlaps_.erase(seq_id); };
  const Clock::time_point tw = Clock::now();
  const BackLoader::Result& got = ov.loader->Wait();
  ServerStats::Add(stats_.overlap_wait_seconds, Since(tw));
  if (!got.failed_chunks.empty() || !got.first_error.ok()) {
    stats_.load_failures.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("kvtier: back load delivered tokens [{}, {}) of [{}, {}) ({}); computing the rest",
                 got.loaded_begin, got.loaded_end, ov.front, ov.end, got.first_error.ToString());
  }
  if (got.loaded_end <= n_done) {  // nothing to join: a miss, the rest is computed
    stats_.misses.fetch_add(1, std::memory_order_relaxed);
    return {n_done};
  }
  const Clock::time_point tj = Clock::now();
  absl::StatusOr<std::span<const std::byte>> front =
      n_done > 0 ? io_.ReadSingleStream(ctx, seq_id) : std::span<const std::byte>();
  absl::StatusOr<std::vector<std::byte>> joined =
      front.ok() ? ov.loader->Join(*front) : absl::StatusOr<std::vector<std::byte>>(front.status());
  if (!joined.ok()) {
    stats_.load_failures.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn(
        "kvtier: joining the computed front of seq {} with its loaded back failed, "
        "computing the back: {}",
        seq_id, joined.status().ToString());
    stats_.misses.fetch_add(1, std::memory_order_relaxed);
    return {n_done};  // the sequence still holds the computed front
  }
  const double join_front_s = Since(tj);
  const Clock::time_point ts = Clock::now();
  if (!io_.Write(ctx, seq_id, *joined)) {
    spdlog::warn("kvtier: llama.cpp refused the joined {}-token state for seq {}; recomputing",
                 got.loaded_end, seq_id);
    llama_memory_seq_rm(llama_get_memory(ctx), seq_id, -1, -1);
    stats_.load_failures.fetch_add(1, std::memory_order_relaxed);
    stats_.misses.fetch_add(1, std::memory_order_relaxed);
    return {0, /*cleared=*/true};
  }
  const double set_s = Since(ts);
  const uint64_t loaded = got.loaded_end - n_done;
  stats_.hits.fetch_add(1, std::memory_order_relaxed);
  stats_.overlap_joined.fetch_add(1, std::memory_order_relaxed);
  stats_.overlap_front_tokens.fetch_add(n_done, std::memory_order_relaxed);
  stats_.overlap_loaded_tokens.fetch_add(loaded, std::memory_order_relaxed);
  stats_.loaded_tokens.fetch_add(loaded, std::memory_order_relaxed);
  stats_.load_bytes.fetch_add(loaded * io_.spec().payload_bytes_per_token(),
                              std::memory_order_relaxed);
  ServerStats::Add(stats_.load_seconds, got.load_s + Since(tj));
  // The join costs the next plans price (as LlamaKvAdapter measures them).
  if (n_done > 0) {
    join_cost_.s_per_front_token =
        Ewma(join_cost_.s_per_front_token, join_front_s / static_cast<double>(n_done));
  }
  join_cost_.s_per_restored_token =
      Ewma(join_cost_.s_per_restored_token, set_s / static_cast<double>(got.loaded_end));
  return {got.loaded_end};
}

}  // namespace kvt::llamacpp
