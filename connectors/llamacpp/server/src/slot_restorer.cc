#include "kvtier_server/slot_restorer.h"

#include <algorithm>
#include <chrono>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_format.h"
#include "kvtier_server/seq_streams.h"
#include "spdlog/spdlog.h"

namespace kvt::llamacpp {

using Clock = std::chrono::steady_clock;

namespace {
// A loaded chunk's payload must be exactly one chunk of the model's layout; else DataLoss
// (that chunk and the rest of the prefix are computed instead).
absl::Status CheckPayloadSize(size_t chunk_index, std::span<const std::byte> payload,
                              uint64_t chunk_bytes) {
  if (payload.size() == chunk_bytes) return absl::OkStatus();
  return absl::DataLossError(absl::StrFormat("chunk %d payload is %d bytes, expected %d",
                                             chunk_index, payload.size(), chunk_bytes));
}
}  // namespace

uint64_t SlotRestorer::LoadChunks(std::span<const TokenId> prompt, uint64_t want,
                                  uint64_t chunk_bytes, const ChunkConsume& put) {
  if (want == 0) return 0;
  const uint32_t chunk = connector_.chunk_tokens();
  absl::StatusOr<ConnectorLoadResult> load = connector_.LoadPayloads(
      prompt, want, [&](size_t chunk_index, std::span<const std::byte> payload) -> absl::Status {
        if (absl::Status s = CheckPayloadSize(chunk_index, payload, chunk_bytes); !s.ok()) {
          return s;
        }
        return put(chunk_index, payload);
      });
  uint64_t loaded = load.ok() ? std::min<uint64_t>(load->loaded_tokens, want) : 0;
  loaded -= loaded % chunk;
  if (!load.ok() || !load->failed_chunks.empty()) {
    stats_.load_failures.fetch_add(1, std::memory_order_relaxed);
    spdlog::warn("kvtier: {} of {} tokens delivered ({}); recomputing the rest", loaded, want,
                 load.ok() ? load->first_error.ToString() : load.status().ToString());
  }
  return loaded;
}

SlotRestorer::Outcome SlotRestorer::Restore(llama_context* ctx, int32_t seq_id,
                                            std::span<const TokenId> prompt, uint64_t n_have) {
  if (snapshots_) return {StartWithSnapshots(ctx, seq_id, prompt, n_have)};
  std::optional<uint64_t> held;
  Outcome outcome = RestorePlain(ctx, seq_id, prompt, n_have, held);
  outcome.held_tokens = held;
  return outcome;
}

SlotRestorer::Outcome SlotRestorer::RestorePlain(llama_context* ctx, int32_t seq_id,
                                                 std::span<const TokenId> prompt, uint64_t n_have,
                                                 std::optional<uint64_t>& held) {
  const size_t n_tokens = prompt.size();
  const uint32_t chunk = connector_.chunk_tokens();
  // Complete chunks up to T (the last token is always computed), then the tail record of
  // tokens [T, n - 1) (tail_records.h) when the slot holds no more than T, or, for a
  // prompt shorter than one chunk (T == 0), less than the tail (e.g. only the BOS token).
  const uint64_t chunk_end = (n_tokens - 1) / chunk * chunk;
  const bool try_tail = tails_ && tails_->TailTokens(n_tokens) > 0 &&
                        (n_have <= chunk_end || (chunk_end == 0 && n_have < n_tokens - 1));
  if ((try_tail ? n_tokens - 1 : chunk_end) <= n_have) return {};
  stats_.requests.fetch_add(1, std::memory_order_relaxed);
  uint64_t want = 0;
  // The lookup's lease pins the chunks it found until this restore has loaded them.
  std::optional<ConnectorLookup> pinned;
  if (chunk_end > 0) {
    std::optional<ConnectorLookup> lookup = LookupOrMiss(prompt, n_have);
    if (!lookup) return {};
    if (lookup->looked_up_tokens > 0) held = lookup->cached_tokens;
    want = std::min<uint64_t>(lookup->load_tokens, chunk_end);
    want -= want % chunk;
    // Load while computing (server_overlap.h): the front from where the slot's prefill
    // starts, a chunk boundary (an unaligned prefix is dropped so the front's ubatches
    // are a cold prefill's; only when the front is longer than what is dropped).
    const uint64_t usable = std::min<uint64_t>(lookup->cached_tokens, chunk_end) / chunk * chunk;
    const uint64_t begin = n_have % chunk == 0 ? n_have : 0;
    if (const uint64_t front = overlap_.PickFront(*lookup, begin, usable, want);
        front > n_have && overlap_.Start(seq_id, prompt, front, usable, lookup->lease)) {
      if (begin == n_have) return {0, begin};
      llama_memory_seq_rm(llama_get_memory(ctx), seq_id, -1, -1);
      return {-1, begin};
    }
    if (want <= n_have && lookup->cached_tokens > n_have) {
      stats_.cost_skips.fetch_add(1, std::memory_order_relaxed);
    }
    pinned.emplace(std::move(*lookup));
  }
  // The tail follows the chunks' decision: only after every chunk before it is loaded.
  std::optional<std::vector<std::byte>> tail;
  if (try_tail && want == chunk_end) {
    absl::StatusOr<std::vector<std::byte>> t = tails_->Fetch(prompt);
    if (t.ok()) {
      tail = std::move(*t);
    } else if (!absl::IsNotFound(t.status())) {
      spdlog::warn("kvtier: tail record not used: {}", t.status().ToString());
    }
  }
  const uint64_t cells = tail ? n_tokens - 1 : want;
  if (cells <= n_have) {
    stats_.misses.fetch_add(1, std::memory_order_relaxed);
    // A miss whose slot holds a few tokens that end off a ubatch boundary (typically just
    // the BOS token of the slot's previous prompt): drop them, so this prompt is computed
    // from token 0 exactly as a cold prefill is and its tail record can be stored
    // (OnPromptDone stores tails only from aligned prefills). Costs recomputing at most
    // kMaxDroppedPrefix tokens.
    if (tails_ && n_have > 0 && n_have <= kMaxDroppedPrefix && n_have % n_ubatch_ != 0 &&
        tails_->TailTokens(n_tokens) > 0) {
      llama_memory_seq_rm(llama_get_memory(ctx), seq_id, -1, -1);
      stats_.dropped_prefixes.fetch_add(1, std::memory_order_relaxed);
      return {-1};
    }
    return {};
  }
  const auto t0 = Clock::now();
  absl::StatusOr<SeqStateBuilder> builder = SeqStateBuilder::Create(
      io_.spec(), static_cast<uint32_t>(cells), seq_id, std::move(restore_blob_), prompt);
  // The blob's memory is kept for the next restore, whatever happens below.
  absl::Cleanup keep_blob = [&] {
    if (builder.ok()) restore_blob_ = std::move(*builder).TakeStorage();
  };
  if (!builder.ok()) {
    spdlog::warn("kvtier: cannot build a {}-token state: {}", cells, builder.status().ToString());
    stats_.misses.fetch_add(1, std::memory_order_relaxed);
    return {};
  }
  const uint64_t chunk_bytes = uint64_t{chunk} * io_.spec().payload_bytes_per_token();
  uint64_t loaded = LoadChunks(
      prompt, want, chunk_bytes,
      [&](size_t chunk_index, std::span<const std::byte> payload) -> absl::Status {
        return builder->PutChunk(static_cast<uint32_t>(chunk_index * chunk), chunk, payload);
      });
  bool tail_used = false;
  if (tail && loaded == want) {
    absl::Status s =
        builder->PutChunk(static_cast<uint32_t>(want), static_cast<uint32_t>(cells - want), *tail);
    if (s.ok()) {
      loaded = cells;
      tail_used = true;
    } else {
      stats_.load_failures.fetch_add(1, std::memory_order_relaxed);
      spdlog::warn("kvtier: tail record not used: {}", s.ToString());
    }
  }
  if (loaded <= n_have) {
    stats_.misses.fetch_add(1, std::memory_order_relaxed);
    return {};
  }
  std::optional<std::vector<std::byte>> truncated;
  std::span<const std::byte> blob = builder->blob();
  if (loaded < cells) {
    absl::StatusOr<std::vector<std::byte>> t = builder->Truncated(static_cast<uint32_t>(loaded));
    if (!t.ok()) {
      stats_.misses.fetch_add(1, std::memory_order_relaxed);
      return {};
    }
    truncated = std::move(*t);
    blob = *truncated;
  }
  std::optional<std::vector<std::byte>> framed;
  if (io_.n_stream() != 1) {
    absl::StatusOr<std::vector<std::byte>> f = ToStreams(blob, io_.n_stream());
    if (!f.ok()) {
      stats_.misses.fetch_add(1, std::memory_order_relaxed);
      return {};
    }
    framed = std::move(*f);
    blob = *framed;
  }
  if (!ApplyRestoredState(ctx, seq_id, blob, loaded)) return {-1};
  stats_.hits.fetch_add(1, std::memory_order_relaxed);
  if (tail_used) stats_.tail_hits.fetch_add(1, std::memory_order_relaxed);
  stats_.loaded_tokens.fetch_add(loaded, std::memory_order_relaxed);
  stats_.load_bytes.fetch_add(loaded * io_.spec().payload_bytes_per_token(),
                              std::memory_order_relaxed);
  ServerStats::Add(stats_.load_seconds, std::chrono::duration<double>(Clock::now() - t0).count());
  return {static_cast<int64_t>(loaded)};
}

int64_t SlotRestorer::StartWithSnapshots(llama_context* ctx, int32_t seq_id,
                                         std::span<const TokenId> prompt, uint64_t n_have) {
  const uint64_t n_tokens = prompt.size();
  const uint32_t chunk = connector_.chunk_tokens();
  // Chunks only up to a boundary where a cold prefill's batches also stop (the rest is
  // then computed in the same batches as there); then the tail record, up to where
  // llama-server's last prompt batch begins, when every chunk before it loads.
  const uint64_t limit = SnapshotBoundaryLimit(n_tokens, n_batch_, n_ubatch_) / chunk * chunk;
  const bool try_tail =
      tails_ && tails_->TailTokens(n_tokens) > 0 && n_have <= tails_->TailStart(n_tokens);
  if ((try_tail ? tails_->TailEnd(n_tokens) : limit) <= n_have) return 0;
  stats_.requests.fetch_add(1, std::memory_order_relaxed);
  uint64_t want = 0;
  // The lookup's lease pins the chunks it found until this restore has loaded them.
  std::optional<ConnectorLookup> lookup;
  if (limit > 0) {
    std::optional<ConnectorLookup> l = LookupOrMiss(prompt, n_have);
    if (!l) return 0;
    want = std::min<uint64_t>(l->load_tokens, limit);
    want -= want % chunk;
    lookup.emplace(std::move(*l));
  }
  std::optional<std::vector<std::byte>> tail;
  if (try_tail && want == tails_->TailStart(n_tokens)) {
    absl::StatusOr<std::vector<std::byte>> t = tails_->Fetch(prompt);
    if (t.ok()) {
      tail = std::move(*t);
    } else if (!absl::IsNotFound(t.status())) {
      spdlog::warn("kvtier: tail record not used: {}", t.status().ToString());
    }
  }
  if (!tail && want <= n_have) {
    stats_.misses.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  return RestoreWithSnapshot(ctx, seq_id, prompt, want, n_have, tail ? &*tail : nullptr);
}

std::optional<ConnectorLookup> SlotRestorer::LookupOrMiss(std::span<const TokenId> prompt,
                                                          uint64_t n_have) {
  absl::StatusOr<ConnectorLookup> lookup = connector_.Lookup(prompt, n_have);
  if (!lookup.ok()) {
    spdlog::warn("kvtier: lookup failed, computing the prompt: {}", lookup.status().ToString());
    stats_.misses.fetch_add(1, std::memory_order_relaxed);
    return std::nullopt;
  }
  return std::move(*lookup);
}

int64_t SlotRestorer::RestoreWithSnapshot(llama_context* ctx, int32_t seq_id,
                                          std::span<const TokenId> prompt, uint64_t want,
                                          uint64_t n_have, const std::vector<std::byte>* tail) {
  const auto t0 = Clock::now();
  const uint32_t chunk = connector_.chunk_tokens();
  const bool rows = snapshots_->rows_bytes() > 0;
  const uint64_t tail_end = tail ? tails_->TailEnd(prompt.size()) : 0;
  const uint64_t tail_tokens = tail ? tail_end - want : 0;
  // A recurrent model's tail is the state at its end alone: no chunk is needed.
  if (tail && !rows) want = 0;
  std::optional<SeqStateBuilder> builder;
  if (rows) {
    const uint64_t cells = tail ? tail_end : want;
    absl::StatusOr<SeqStateBuilder> b =
        SeqStateBuilder::Create(io_.spec(), static_cast<uint32_t>(cells), seq_id, {}, prompt);
    if (!b.ok()) {
      spdlog::warn("kvtier: cannot build a {}-token state: {}", cells, b.status().ToString());
      stats_.misses.fetch_add(1, std::memory_order_relaxed);
      return 0;
    }
    builder.emplace(std::move(*b));
  }
  // Rows of chunks 1..k and the snapshot of chunk k (or the tail's rows and snapshot).
  std::vector<std::vector<std::byte>> snaps(want / chunk);
  const uint64_t chunk_bytes = connector_.chunk_payload_bytes();
  uint64_t loaded =
      LoadChunks(prompt, want, chunk_bytes,
                 [&](size_t chunk_index, std::span<const std::byte> payload) -> absl::Status {
                   if (chunk_index < snaps.size()) {
                     const std::span<const std::byte> s = snapshots_->SnapshotOf(payload);
                     snaps[chunk_index].assign(s.begin(), s.end());
                   }
                   if (!rows) return absl::OkStatus();
                   return builder->PutChunk(static_cast<uint32_t>(chunk_index * chunk), chunk,
                                            payload.first(snapshots_->rows_bytes()));
                 });
  std::span<const std::byte> snapshot;
  if (loaded > 0) snapshot = snaps[loaded / chunk - 1];
  bool tail_used = false;
  if (tail && loaded == want) {
    const uint64_t tail_rows = snapshots_->RowsBytes(tail_tokens);
    absl::Status s = tail->size() >= tail_rows + snapshots_->snapshot_bytes()
                         ? absl::OkStatus()
                         : absl::DataLossError("tail payload shorter than its rows and snapshot");
    if (s.ok() && rows) {
      s = builder->PutChunk(static_cast<uint32_t>(want), static_cast<uint32_t>(tail_tokens),
                            std::span<const std::byte>(*tail).first(tail_rows));
    }
    if (s.ok()) {
      snapshot = std::span<const std::byte>(*tail).subspan(tail_rows, snapshots_->snapshot_bytes());
      loaded = tail_end;
      tail_used = true;
    } else {
      stats_.load_failures.fetch_add(1, std::memory_order_relaxed);
      spdlog::warn("kvtier: tail record not used: {}", s.ToString());
    }
  }
  if (loaded <= n_have || snapshot.size() != snapshots_->snapshot_bytes()) {
    stats_.misses.fetch_add(1, std::memory_order_relaxed);
    return 0;
  }
  std::vector<std::byte> rows_blob;
  const uint64_t cells = tail ? tail_end : want;
  if (rows && loaded == cells) {
    rows_blob.assign(builder->blob().begin(), builder->blob().end());
  } else if (rows) {
    absl::StatusOr<std::vector<std::byte>> t = builder->Truncated(static_cast<uint32_t>(loaded));
    if (!t.ok()) {
      stats_.misses.fetch_add(1, std::memory_order_relaxed);
      return 0;
    }
    rows_blob = std::move(*t);
  }
  const std::vector<std::byte> state = snapshots_->Compose(rows_blob, snapshot, seq_id);
  if (!ApplyRestoredState(ctx, seq_id, state, loaded)) return -1;
  stats_.hits.fetch_add(1, std::memory_order_relaxed);
  if (tail_used) stats_.tail_hits.fetch_add(1, std::memory_order_relaxed);
  stats_.loaded_tokens.fetch_add(loaded, std::memory_order_relaxed);
  stats_.load_bytes.fetch_add(
      tail_used ? want / chunk * chunk_bytes + tail->size() : loaded / chunk * chunk_bytes,
      std::memory_order_relaxed);
  ServerStats::Add(stats_.load_seconds, std::chrono::duration<double>(Clock::now() - t0).count());
  return static_cast<int64_t>(loaded);
}

bool SlotRestorer::ApplyRestoredState(llama_context* ctx, int32_t seq_id,
                                      std::span<const std::byte> state, uint64_t loaded) {
  if (llama_state_seq_set_data_ext(ctx, reinterpret_cast<const uint8_t*>(state.data()),
                                   state.size(), seq_id, 0) == state.size()) {
    return true;
  }
  spdlog::warn("kvtier: llama.cpp refused a {}-token state for seq {}; recomputing", loaded,
               seq_id);
  llama_memory_seq_rm(llama_get_memory(ctx), seq_id, -1, -1);
  stats_.load_failures.fetch_add(1, std::memory_order_relaxed);
  stats_.misses.fetch_add(1, std::memory_order_relaxed);
  return false;
}

}  // namespace kvt::llamacpp
