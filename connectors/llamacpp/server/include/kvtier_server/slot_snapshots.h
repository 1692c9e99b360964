// SlotSnapshots: boundary snapshots of recurrent and hybrid models in kvtier-llama-server
// (docs/models.md "Boundary snapshots"). A chunk record of such a model is the attention
// rows of its tokens, then the recurrent state after its last token (the
// LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY state without its 8-byte header), then zeros
// (docs/chunk-format.md). llama-server's prompt batches stop at chunk boundaries
// (OnPromptBatch: BatchLimit), and each slot's snapshot is taken there; a tail record's
// snapshot is taken where llama-server's last prompt batch begins (AtBatch's tail_at).
//
// Task-loop thread only (as the hooks that call it). Not thread-safe.
#ifndef KVTIER_SERVER_SLOT_SNAPSHOTS_H_
#define KVTIER_SERVER_SLOT_SNAPSHOTS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "llama.h"

namespace kvt::llamacpp {

class SlotSnapshots {
 public:
  // `rows_bytes`: the attention rows of one chunk in its payload (0: recurrent only);
  // `snapshot_bytes`: one snapshot; `payload_bytes`: a whole chunk payload (>= both).
  SlotSnapshots(uint32_t chunk_tokens, uint64_t rows_bytes, uint64_t snapshot_bytes,
                uint64_t payload_bytes);

  // A new prompt in `seq_id`: forgets the snapshots of the one before.
  void Reset(int32_t seq_id) { by_seq_.erase(seq_id); }
  // Before llama-server adds `seq_id`'s next prompt tokens to a batch: the sequence holds
  // the prompt's tokens [0, n_done). The first call after Reset records where the
  // prefill began (prefill_start). On a chunk boundary, takes the snapshot of the chunk
  // ending there; at `tail_at` (> 0: the end of the prompt's tail record, where
  // llama-server begins its last prompt batch), the tail's snapshot. Returns where this
  // batch must stop adding the prompt's tokens (the next chunk boundary).
  size_t AtBatch(llama_context* ctx, int32_t seq_id, size_t n_done, size_t tail_at = 0);
  // Where `seq_id`'s prefill of its current prompt began (its first batch); nullopt before.
  std::optional<size_t> prefill_start(int32_t seq_id) const;
  // Writes the snapshot taken at `tail_at` after the attention rows of a `tail_tokens`
  // token tail, then zeros: [rows][snapshot][zeros]. NotFound when this prompt's prefill
  // did not begin a batch at `tail_at`; InvalidArgument when the payload cannot hold it.
  absl::Status FillTail(int32_t seq_id, size_t tail_at, size_t tail_tokens,
                        std::span<std::byte> payload) const;
  // The attention rows of a `tokens` token record (tokens x rows per token).
  uint64_t RowsBytes(size_t tokens) const { return rows_bytes_ / chunk_ * tokens; }
  // Writes chunk `chunk_index`'s snapshot and the zero padding after the payload's rows.
  // NotFound when this prompt's prefill did not stop on that chunk's end.
  absl::Status Fill(int32_t seq_id, size_t chunk_index, std::span<std::byte> payload) const;
  // The snapshot part of a loaded payload.
  std::span<const std::byte> SnapshotOf(std::span<const std::byte> payload) const {
    return payload.subspan(rows_bytes_, snapshot_bytes_);
  }
  // The state to restore into `seq_id`: the rows blob (a single-stream state of the
  // attention rows; empty for a recurrent model) followed by `snapshot`.
  std::vector<std::byte> Compose(std::span<const std::byte> rows_blob,
                                 std::span<const std::byte> snapshot, int32_t seq_id) const;

  uint64_t rows_bytes() const { return rows_bytes_; }
  uint64_t snapshot_bytes() const { return snapshot_bytes_; }
  uint64_t snapshots_taken() const { return taken_; }

 private:
  uint32_t chunk_;
  uint64_t rows_bytes_;
  uint64_t snapshot_bytes_;
  uint64_t payload_bytes_;
  uint64_t taken_ = 0;
  struct Seq {
    std::optional<size_t> start;                 // where the prefill began
    std::vector<std::vector<std::byte>> chunks;  // [chunk index]
    size_t tail_at = 0;                          // where `tail` was taken (0: none)
    std::vector<std::byte> tail;
  };
  std::map<int32_t, Seq> by_seq_;
};

// Where kvtier may stop a prompt's batches and restore it, for a prompt of `n_tokens`
// on a server with `n_batch` / `n_ubatch`: chunk boundaries up to the returned token
// count (inclusive). llama-server computes such a model's prompt in batches of n_batch
// from token 0 (ubatches of n_ubatch: the grid kvtier's chunks sit on) up to
// n_tokens - min(n_batch, 4 + n_ubatch), then in two batches of its own that end 4
// tokens before the end and at the end (its context checkpoints). A boundary after that
// point would split one of those two batches, and a ubatch's size changes the last bits
// of what llama.cpp computes in it: the answer would no longer be plain llama-server's.
// 0 for a prompt shorter than that split.
size_t SnapshotBoundaryLimit(size_t n_tokens, uint32_t n_batch, uint32_t n_ubatch);

// The size of `seq_id`'s partial state (LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY), and the
// state itself without its 8-byte header. Internal on a short read.
absl::StatusOr<std::vector<std::byte>> ReadSnapshot(llama_context* ctx, int32_t seq_id);

}  // namespace kvt::llamacpp

#endif  // KVTIER_SERVER_SLOT_SNAPSHOTS_H_
