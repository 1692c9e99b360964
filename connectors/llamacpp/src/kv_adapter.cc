#include "llamacpp/kv_adapter.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>

#include "absl/strings/str_format.h"
#include "kvstore/chunk_codec.h"
#include "llamacpp/overlap_load.h"
#include "spdlog/spdlog.h"

namespace kvt::llamacpp {
namespace {
using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
constexpr double kJoinEwmaAlpha = 0.25;
constexpr double kMaxSlowdown = 10;
double Ewma(double old, double sample) {
  return (1 - kJoinEwmaAlpha) * old + kJoinEwmaAlpha * sample;
}
}  // namespace

LlamaKvAdapter::LlamaKvAdapter(LlamaEngine* engine, std::shared_ptr<KVConnector> connector)
    : engine_(engine), connector_(std::move(connector)) {
  const double bytes = static_cast<double>(engine_->state_spec().payload_bytes_per_token());
  join_cost_.s_per_restored_token = bytes / 4e9;
  join_cost_.s_per_front_token = bytes / 2e9;
}

void LlamaKvAdapter::ObserveRestore(uint64_t tokens, double seconds) {
  if (tokens == 0 || !(seconds > 0)) return;
  join_cost_.s_per_restored_token =
      Ewma(join_cost_.s_per_restored_token, seconds / static_cast<double>(tokens));
}

absl::StatusOr<std::unique_ptr<LlamaKvAdapter>> LlamaKvAdapter::Create(
    LlamaEngine* engine, std::shared_ptr<KVConnector> connector) {
  if (engine == nullptr) return absl::InvalidArgumentError("LlamaKvAdapter: engine is null");
  if (connector != nullptr) {
    const KvLayout layout = engine->ChunkLayout(connector->chunk_tokens());
    if (!(connector->ns_params().layout == layout)) {
      return absl::FailedPreconditionError(
          absl::StrFormat("connector layout %s differs from the engine's %s",
                          connector->ns_params().layout.DebugString(), layout.DebugString()));
    }
    if (connector->chunk_tokens() == 0) {
      return absl::FailedPreconditionError("connector chunk_tokens is 0");
    }
    // With flash attention, ggml's CPU kernel picks its path (tiled or not) and splits
    // rows by the number of queries in the batch, so the KV of a token depends on the
    // batch it was computed in. Chunk-sized batches make every stored chunk come from
    // the same computation as a recompute of it.
    if (engine->options().flash_attn && engine->options().n_batch != connector->chunk_tokens()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "with flash attention n_batch (%d) must equal the chunk size (%d) for exact reuse",
          engine->options().n_batch, connector->chunk_tokens()));
    }
  }
  return std::unique_ptr<LlamaKvAdapter>(new LlamaKvAdapter(engine, std::move(connector)));
}

bool LlamaKvAdapter::ModelStillMatches() {
  absl::StatusOr<bool> changed = engine_->CheckModelFile();
  if (!changed.ok()) {
    spdlog::warn("kvtier llama.cpp: cannot check the model file, not using kvtier: {}",
                 changed.status().ToString());
    return false;
  }
  // The connector's namespace was made from the fingerprint at its creation; a
  // connector made after the change (for the new model) matches again.
  return connector_->ns_params().model_id == engine_->MakeNamespaceParams(1).model_id;
}

uint64_t LlamaKvAdapter::LoadPrefix(std::span<const TokenId> prompt, uint64_t tokens,
                                    RunResult* result) {
  const uint32_t chunk = connector_->chunk_tokens();
  const SeqStateSpec& spec = engine_->state_spec();
  const bool snap = engine_->has_snapshots();
  const bool rows = engine_->memory_kind() != MemoryKind::kRecurrent;
  absl::StatusOr<SeqStateBuilder> builder =
      rows ? SeqStateBuilder::Create(spec, static_cast<uint32_t>(tokens), 0, {}, prompt)
           : absl::StatusOr<SeqStateBuilder>(absl::FailedPreconditionError("no rows"));
  if (rows && !builder.ok()) {
    spdlog::warn("kvtier llama.cpp: cannot build a {}-token state: {}", tokens,
                 builder.status().ToString());
    return 0;
  }
  // A chunk's payload: its rows, then (recurrent/hybrid) the snapshot at its last token.
  const uint64_t rows_bytes = rows ? uint64_t{chunk} * spec.payload_bytes_per_token() : 0;
  const uint64_t chunk_bytes = connector_->chunk_payload_bytes();
  std::vector<std::vector<std::byte>> snapshots(snap ? tokens / chunk : 0);
  absl::StatusOr<ConnectorLoadResult> load = connector_->LoadPayloads(
      prompt, tokens, [&](size_t chunk_index, std::span<const std::byte> payload) -> absl::Status {
        if (payload.size() != chunk_bytes) {
          return absl::DataLossError(absl::StrFormat("chunk %d payload is %d bytes, expected %d",
                                                     chunk_index, payload.size(), chunk_bytes));
        }
        if (snap && chunk_index < snapshots.size()) {
          const auto s = payload.subspan(rows_bytes, engine_->snapshot_bytes());
          snapshots[chunk_index].assign(s.begin(), s.end());
        }
        if (!rows) return absl::OkStatus();
        return builder->PutChunk(static_cast<uint32_t>(chunk_index * chunk), chunk,
                                 payload.first(rows_bytes));
      });
  if (!load.ok()) {
    spdlog::warn("kvtier llama.cpp: LoadPayloads failed, recomputing: {}",
                 load.status().ToString());
    return 0;
  }
  result->failed_chunks = load->failed_chunks;
  uint64_t loaded = std::min<uint64_t>(load->loaded_tokens, tokens);
  loaded -= loaded % chunk;
  if (loaded == 0) return 0;
  absl::Status set;
  const auto t_set = Clock::now();
  if (snap) {
    // Rows of chunks 1..k and the snapshot of chunk k.
    const std::vector<std::byte>& snapshot = snapshots[loaded / chunk - 1];
    absl::StatusOr<std::vector<std::byte>> blob =
        !rows              ? std::vector<std::byte>()
        : loaded == tokens ? std::vector<std::byte>(builder->blob().begin(), builder->blob().end())
                           : builder->Truncated(static_cast<uint32_t>(loaded));
    set = blob.ok() ? engine_->SetSeqStateWithSnapshot(*blob, snapshot) : blob.status();
  } else if (loaded == tokens) {
    set = engine_->SetSeqState(builder->blob());
  } else {
    absl::StatusOr<std::vector<std::byte>> blob = builder->Truncated(static_cast<uint32_t>(loaded));
    set = blob.ok() ? engine_->SetSeqState(*blob) : blob.status();
  }
  if (!set.ok()) {
    spdlog::warn("kvtier llama.cpp: restoring {} tokens failed, recomputing: {}", loaded,
                 set.ToString());
    engine_->Clear();
    return 0;
  }
  ObserveRestore(loaded, Since(t_set));
  result->load_bytes = loaded / chunk * chunk_bytes;
  return loaded;
}

absl::Status LlamaKvAdapter::PrefillAligned(std::span<const TokenId> tokens, uint32_t first_pos,
                                            bool want_logits, const PrefillProgress& progress,
                                            bool capture) {
  if (!engine_->has_snapshots() || connector_ == nullptr) {
    return engine_->Prefill(tokens, first_pos, want_logits, progress);
  }
  // Every prefill of such a model stops at chunk boundaries (a cold one too), so a
  // restored run computes its rest in the very batches a recompute uses.
  const uint32_t chunk = connector_->chunk_tokens();
  absl::Status snapshot_error;
  const PrefillProgress at_batch = [&](uint64_t done, uint64_t total) {
    const uint64_t pos = first_pos + done;
    if (capture && pos % chunk == 0 && snapshot_error.ok()) {
      absl::StatusOr<std::vector<std::byte>> s = engine_->GetSnapshot();
      if (s.ok()) {
        if (snapshots_.size() < pos / chunk) snapshots_.resize(pos / chunk);
        snapshots_[pos / chunk - 1] = std::move(*s);
      } else {
        snapshot_error = s.status();
      }
    }
    if (progress) progress(done, total);
  };
  absl::Status s = engine_->Prefill(tokens, first_pos, want_logits, at_batch, chunk);
  if (s.ok() && !snapshot_error.ok()) {
    spdlog::warn("kvtier llama.cpp: boundary snapshot failed, not storing: {}",
                 snapshot_error.ToString());
    snapshots_.clear();
  }
  return s;
}

uint64_t LlamaKvAdapter::PickOverlapFront(const ConnectorLookup& lookup, uint64_t usable,
                                          uint64_t* want, const RunOptions& options,
                                          RunResult* result) {
  const uint32_t chunk = connector_->chunk_tokens();
  if (options.overlap == OverlapMode::kOff || usable < 2 * uint64_t{chunk}) return 0;
  if (engine_->has_snapshots()) return 0;  // a front would need its own snapshot
  if (options.overlap_front_tokens > 0) {
    return options.overlap_front_tokens < usable ? options.overlap_front_tokens : 0;
  }
  if (options.overlap == OverlapMode::kWhenLoadSlower && *want >= usable) return 0;
  const size_t chunks = usable / chunk;
  if (lookup.chunk_tiers.size() < chunks) return 0;
  result->overlap_plan = connector_->cost_model().PlanOverlap(
      std::span<const TierKind>(lookup.chunk_tiers).first(chunks), chunk,
      connector_->chunk_payload_bytes() + kChunkHeaderBytes, join_cost_);
  const OverlapPlan& plan = result->overlap_plan;
  // Compute only: overrides a Lookup that wanted everything (it does not count the
  // restore); a partial Lookup decision already weighed computing against loading.
  if (plan.front_chunks == plan.total_chunks && *want >= usable) *want = 0;
  if (!plan.overlap() || plan.predicted_s * options.overlap_min_gain >
                             std::min(plan.load_only_s, plan.compute_only_s)) {
    return 0;
  }
  return uint64_t{plan.front_chunks} * chunk;
}

absl::StatusOr<std::optional<uint64_t>> LlamaKvAdapter::RunOverlap(std::span<const TokenId> prompt,
                                                                   std::span<const TierKind> tiers,
                                                                   uint64_t front, uint64_t end,
                                                                   const RunOptions& options,
                                                                   RunResult* result) {
  // front > 0: the fixed split; 0: meet in the middle (the loader walks down from the
  // end while the engine computes up from 0; see overlap_load.h).
  const bool meet = front == 0;
  absl::StatusOr<std::unique_ptr<BackLoader>> loader =
      meet ? BackLoader::StartFromEnd(*connector_, prompt, end, engine_->state_spec())
           : BackLoader::Start(*connector_, prompt, front, end, engine_->state_spec());
  if (!loader.ok()) {
    spdlog::warn("kvtier llama.cpp: cannot start the back loader, not overlapping: {}",
                 loader.status().ToString());
    return std::optional<uint64_t>();
  }
  const auto tf = Clock::now();
  uint64_t computed = 0;
  PrefillProgress progress;
  if (options.progress) {
    progress = [&](uint64_t d, uint64_t) { options.progress(computed + d, prompt.size()); };
  }
  // The same calls as a recompute of [0, computed) (batches of n_batch from chunk-aligned
  // positions): bit-identical KV.
  const uint64_t chunk = connector_->chunk_tokens();
  const uint64_t step =
      meet ? std::max<uint64_t>(chunk, engine_->options().n_batch / chunk * chunk) : front;
  while (computed < end && (meet ? computed < (*loader)->loaded_begin() : computed < front)) {
    const uint64_t n = std::min<uint64_t>(step, end - computed);
    if (absl::Status s =
            engine_->Prefill(prompt.subspan(computed, n), static_cast<uint32_t>(computed),
                             /*want_logits=*/false, progress);
        !s.ok()) {
      return s;  // the loader's destructor waits for its thread
    }
    computed += n;
    (*loader)->SetComputed(computed);
  }
  result->front_prefill_s = Since(tf);
  const BackLoader::Result& got = (*loader)->Wait();
  // How much slower each side ran beside the other than the cost model predicts for it
  // alone (the front is not fed to the prefill fit: that one models the engine alone).
  CostModel& cost = connector_->cost_model();
  if (computed > 0) {
    const double alone = cost.PredictPrefillSeconds(0, computed);
    if (alone > 0) {
      join_cost_.concurrent_compute_slowdown =
          std::clamp(Ewma(join_cost_.concurrent_compute_slowdown, result->front_prefill_s / alone),
                     1.0, kMaxSlowdown);
    }
  }
  if (got.loaded_end > got.loaded_begin && got.loaded_end / chunk <= tiers.size()) {
    double alone = 0;
    for (uint64_t i = got.loaded_begin / chunk; i < got.loaded_end / chunk; ++i) {
      alone +=
          cost.PredictLoadSeconds(tiers[i], connector_->chunk_payload_bytes() + kChunkHeaderBytes);
    }
    if (alone > 0) {
      join_cost_.concurrent_load_slowdown = std::clamp(
          Ewma(join_cost_.concurrent_load_slowdown, got.load_s / alone), 1.0, kMaxSlowdown);
    }
  }
  result->overlap_front_tokens = computed;
  result->planned_tokens = end - (meet ? result->overlap_plan.front_chunks * chunk : front);
  result->load_s = got.load_s;
  result->failed_chunks = got.failed_chunks;
  if (got.loaded_end <= computed) return std::optional<uint64_t>(computed);

  const auto tj = Clock::now();
  absl::StatusOr<std::vector<std::byte>> front_blob =
      computed > 0 ? engine_->GetSeqState() : std::vector<std::byte>{};
  absl::StatusOr<std::vector<std::byte>> joined =
      front_blob.ok() ? (*loader)->Join(*front_blob) : front_blob.status();
  if (!joined.ok()) {
    spdlog::warn(
        "kvtier llama.cpp: joining the computed front with the loaded back failed, "
        "computing the back: {}",
        joined.status().ToString());
    return std::optional<uint64_t>(computed);  // seq 0 still holds the front
  }
  const double join_front_s = Since(tj);
  const auto ts = Clock::now();
  if (absl::Status set = engine_->SetSeqState(*joined); !set.ok()) {
    spdlog::warn("kvtier llama.cpp: restoring the joined {}-token state failed, recomputing: {}",
                 got.loaded_end, set.ToString());
    engine_->Clear();
    return std::optional<uint64_t>(0);
  }
  const double set_s = Since(ts);
  result->join_s = Since(tj);
  ObserveRestore(got.loaded_end, set_s);
  if (computed > 0) {
    join_cost_.s_per_front_token =
        Ewma(join_cost_.s_per_front_token, join_front_s / static_cast<double>(computed));
  }
  result->loaded_tokens = got.loaded_end - computed;
  result->load_bytes = result->loaded_tokens * engine_->state_spec().payload_bytes_per_token();
  return std::optional<uint64_t>(got.loaded_end);
}

size_t LlamaKvAdapter::StoreChunks(std::span<const TokenId> prompt) {
  // The state is fetched lazily: only when the connector wants at least one chunk.
  std::optional<std::vector<std::byte>> blob;
  std::optional<SeqStateView> view;
  const uint32_t chunk = connector_->chunk_tokens();
  const bool snap = engine_->has_snapshots();
  const uint64_t rows_bytes =
      engine_->memory_kind() == MemoryKind::kRecurrent
          ? 0
          : uint64_t{chunk} * engine_->state_spec().payload_bytes_per_token();
  absl::StatusOr<size_t> stored = connector_->StorePayloads(
      prompt, [&](size_t chunk_index, std::span<std::byte> payload) -> absl::Status {
        if (snap) {
          // [rows][the snapshot at the chunk's last token][zeros]; only chunks this run
          // computed have one.
          if (chunk_index >= snapshots_.size() || snapshots_[chunk_index].empty()) {
            return absl::NotFoundError(
                absl::StrFormat("no boundary snapshot of chunk %d in this run", chunk_index));
          }
          const std::vector<std::byte>& s = snapshots_[chunk_index];
          std::memcpy(payload.data() + rows_bytes, s.data(), s.size());
          std::fill(payload.begin() + static_cast<int64_t>(rows_bytes + s.size()), payload.end(),
                    std::byte{0});
          if (rows_bytes == 0) return absl::OkStatus();
          payload = payload.first(rows_bytes);
        }
        if (!view.has_value()) {
          absl::StatusOr<std::vector<std::byte>> b = engine_->GetSeqState();
          if (!b.ok()) return b.status();
          blob = std::move(*b);
          absl::StatusOr<SeqStateView> v = ParseSeqState(*blob, engine_->state_spec());
          if (!v.ok()) return v.status();
          view = std::move(*v);
        }
        // The cells' token ids must be the prompt's (an M-RoPE cell records its own).
        return ExtractChunkPayload(*view, static_cast<uint32_t>(chunk_index * chunk), chunk,
                                   payload, prompt.subspan(chunk_index * chunk, chunk));
      });
  if (!stored.ok()) {
    spdlog::warn("kvtier llama.cpp: StorePayloads failed: {}", stored.status().ToString());
    return 0;
  }
  return *stored;
}

absl::StatusOr<RunResult> LlamaKvAdapter::Run(std::span<const TokenId> prompt,
                                              const RunOptions& options) {
  if (prompt.empty()) return absl::InvalidArgumentError("empty prompt");
  bool kvtier = options.use_kvtier && connector_ != nullptr;
  if (options.use_kvtier && connector_ == nullptr) {
    return absl::FailedPreconditionError("use_kvtier requested but the adapter has no connector");
  }
  if (options.recompute_prefix_tokens.has_value() &&
      (kvtier || *options.recompute_prefix_tokens >= prompt.size())) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "recompute_prefix_tokens %d needs a cold run and must be < the %d prompt tokens",
        *options.recompute_prefix_tokens, prompt.size()));
  }
  if (!(options.overlap_min_gain >= 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("overlap_min_gain %g must be >= 1", options.overlap_min_gain));
  }
  if (options.overlap_front_tokens > 0 &&
      (options.overlap == OverlapMode::kOff || connector_ == nullptr ||
       options.overlap_front_tokens % connector_->chunk_tokens() != 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "overlap_front_tokens %d must be a multiple of the chunk size (%d) and needs an overlap "
        "mode other than kOff",
        options.overlap_front_tokens, connector_ == nullptr ? 0 : connector_->chunk_tokens()));
  }
  RunResult r;
  r.prompt_tokens = prompt.size();
  const auto t0 = Clock::now();
  engine_->Clear();
  snapshots_.clear();
  const bool capture = kvtier && options.store && engine_->has_snapshots();

  uint64_t done = 0;
  if (kvtier && !ModelStillMatches()) {
    kvtier = false;
    r.model_changed = true;
  }
  if (kvtier) {
    const auto tl = Clock::now();
    absl::StatusOr<ConnectorLookup> lookup = connector_->Lookup(prompt, 0);
    r.lookup_s = Since(tl);
    if (lookup.ok()) {
      const uint32_t chunk = connector_->chunk_tokens();
      r.cached_tokens = lookup->cached_tokens;
      uint64_t want = std::min<uint64_t>(lookup->load_tokens, options.max_load_tokens);
      want = std::min<uint64_t>(want, prompt.size() - 1);
      want -= want % chunk;
      r.planned_tokens = want;
      uint64_t usable = std::min<uint64_t>(lookup->cached_tokens, options.max_load_tokens);
      usable = std::min<uint64_t>(usable, prompt.size() - 1);
      usable -= usable % chunk;
      std::optional<uint64_t> overlapped;
      if (const uint64_t front = PickOverlapFront(*lookup, usable, &want, options, &r); front > 0) {
        const bool fixed = options.overlap_front_tokens > 0 || !options.overlap_adaptive;
        absl::StatusOr<std::optional<uint64_t>> o =
            RunOverlap(prompt, lookup->chunk_tiers, fixed ? front : 0, usable, options, &r);
        if (!o.ok()) return o.status();
        overlapped = *o;
      }
      if (overlapped.has_value()) {
        done = *overlapped;
      } else {
        r.planned_tokens = want;
        if (want > 0) {
          const auto t_load = Clock::now();
          done = LoadPrefix(prompt, want, &r);
          r.load_s = Since(t_load);
          r.loaded_tokens = done;
        }
      }
    } else {
      spdlog::warn("kvtier llama.cpp: Lookup failed, computing the whole prompt: {}",
                   lookup.status().ToString());
    }
  }

  const auto tp = Clock::now();
  if (options.recompute_prefix_tokens.has_value() && *options.recompute_prefix_tokens > 0) {
    const uint64_t m = *options.recompute_prefix_tokens;
    if (absl::Status s = PrefillAligned(prompt.first(m), 0, /*want_logits=*/false, options.progress,
                                        /*capture=*/false);
        !s.ok()) {
      return s;
    }
    done = m;
  }
  const std::span<const TokenId> rest = prompt.subspan(done);
  PrefillProgress progress;
  if (options.progress) {
    progress = [&, base = done](uint64_t d, uint64_t) {
      options.progress(base + d, prompt.size());
    };
  }
  const auto tt = Clock::now();
  if (absl::Status s = PrefillAligned(rest, static_cast<uint32_t>(done), /*want_logits=*/true,
                                      progress, capture);
      !s.ok()) {
    return s;
  }
  r.tail_prefill_s = Since(tt);
  absl::StatusOr<std::vector<float>> logits = engine_->Logits();
  if (!logits.ok()) return logits.status();
  r.prefill_s = Since(tp) + r.front_prefill_s;
  r.ttft_s = Since(t0);
  r.computed_tokens = prompt.size() - r.loaded_tokens;
  r.logits = std::move(*logits);

  if (kvtier) {
    connector_->ObservePrefill(rest.size(), prompt.size() - rest.size(),
                               std::chrono::duration<double>(r.prefill_s - r.front_prefill_s));
    if (options.store && !ModelStillMatches()) {
      r.model_changed = true;  // changed during prefill: store nothing under the old namespace
    } else if (options.store) {
      const auto ts = Clock::now();
      r.stored_chunks = StoreChunks(prompt);
      r.store_s = Since(ts);
    }
  }
  return r;
}

}  // namespace kvt::llamacpp
