#include "kvtier_server/slot_snapshots.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "llamacpp/seq_state.h"
#include "spdlog/spdlog.h"

namespace kvt::llamacpp {

absl::StatusOr<std::vector<std::byte>> ReadSnapshot(llama_context* ctx, int32_t seq_id) {
  const size_t size = llama_state_seq_get_size_ext(ctx, seq_id, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
  std::vector<std::byte> blob(size);
  const size_t got = llama_state_seq_get_data_ext(ctx, reinterpret_cast<uint8_t*>(blob.data()),
                                                  size, seq_id, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
  if (size <= 8 || got != size) {
    return absl::InternalError(
        absl::StrFormat("partial state of seq %d: %d of %d bytes", seq_id, got, size));
  }
  blob.erase(blob.begin(), blob.begin() + 8);
  return blob;
}

size_t SnapshotBoundaryLimit(size_t n_tokens, uint32_t n_batch, uint32_t n_ubatch) {
  const size_t split = std::min<size_t>(n_batch, size_t{4} + n_ubatch);
  return n_tokens > split ? n_tokens - split : 0;
}

SlotSnapshots::SlotSnapshots(uint32_t chunk_tokens, uint64_t rows_bytes, uint64_t snapshot_bytes,
                             uint64_t payload_bytes)
    : chunk_(chunk_tokens),
      rows_bytes_(rows_bytes),
      snapshot_bytes_(snapshot_bytes),
      payload_bytes_(payload_bytes) {}

size_t SlotSnapshots::AtBatch(llama_context* ctx, int32_t seq_id, size_t n_done, size_t tail_at) {
  Seq& seq = by_seq_[seq_id];
  if (!seq.start) seq.start = n_done;
  const bool boundary = n_done > 0 && n_done % chunk_ == 0;
  const bool tail = tail_at > 0 && n_done == tail_at;
  if (boundary || tail) {
    absl::StatusOr<std::vector<std::byte>> s = ReadSnapshot(ctx, seq_id);
    if (s.ok() && s->size() == snapshot_bytes_) {
      if (tail) {
        seq.tail_at = tail_at;
        seq.tail = boundary ? *s : std::move(*s);
      }
      if (boundary) {
        const size_t i = n_done / chunk_ - 1;
        if (seq.chunks.size() <= i) seq.chunks.resize(i + 1);
        seq.chunks[i] = std::move(*s);
      }
      ++taken_;
    } else {
      spdlog::warn("kvtier: no boundary snapshot of seq {} at token {}: {}", seq_id, n_done,
                   s.ok() ? absl::StrFormat("%d bytes, expected %d", s->size(), snapshot_bytes_)
                          : s.status().ToString());
    }
  }
  return (n_done / chunk_ + 1) * chunk_;
}

std::optional<size_t> SlotSnapshots::prefill_start(int32_t seq_id) const {
  auto it = by_seq_.find(seq_id);
  return it == by_seq_.end() ? std::nullopt : it->second.start;
}

absl::Status SlotSnapshots::Fill(int32_t seq_id, size_t chunk_index,
                                 std::span<std::byte> payload) const {
  auto it = by_seq_.find(seq_id);
  if (it == by_seq_.end() || chunk_index >= it->second.chunks.size() ||
      it->second.chunks[chunk_index].size() != snapshot_bytes_) {
    return absl::NotFoundError(absl::StrFormat(
        "no boundary snapshot of chunk %d of seq %d (its prefill did not stop there)", chunk_index,
        seq_id));
  }
  if (payload.size() != payload_bytes_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("payload is %d bytes, expected %d", payload.size(), payload_bytes_));
  }
  const std::vector<std::byte>& s = it->second.chunks[chunk_index];
  std::memcpy(payload.data() + rows_bytes_, s.data(), s.size());
  std::fill(payload.begin() + static_cast<int64_t>(rows_bytes_ + s.size()), payload.end(),
            std::byte{0});
  return absl::OkStatus();
}

absl::Status SlotSnapshots::FillTail(int32_t seq_id, size_t tail_at, size_t tail_tokens,
                                     std::span<std::byte> payload) const {
  auto it = by_seq_.find(seq_id);
  if (it == by_seq_.end() || it->second.tail_at != tail_at ||
      it->second.tail.size() != snapshot_bytes_) {
    return absl::NotFoundError(absl::StrFormat(
        "no snapshot of seq %d at token %d (its prefill did not begin a batch there)", seq_id,
        tail_at));
  }
  const uint64_t rows = RowsBytes(tail_tokens);
  if (payload.size() < rows + snapshot_bytes_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a %d-token tail payload is %d bytes: no room for %d bytes of rows and a "
                        "%d-byte snapshot",
                        tail_tokens, payload.size(), rows, snapshot_bytes_));
  }
  const std::vector<std::byte>& s = it->second.tail;
  std::memcpy(payload.data() + rows, s.data(), s.size());
  std::fill(payload.begin() + static_cast<int64_t>(rows + s.size()), payload.end(), std::byte{0});
  return absl::OkStatus();
}

std::vector<std::byte> SlotSnapshots::Compose(std::span<const std::byte> rows_blob,
                                              std::span<const std::byte> snapshot,
                                              int32_t seq_id) const {
  std::vector<std::byte> out;
  if (rows_blob.empty()) {
    out.resize(8);
    std::memcpy(out.data(), &kSeqStateMagic, 4);
    std::memcpy(out.data() + 4, &seq_id, 4);
  } else {
    out.assign(rows_blob.begin(), rows_blob.end());
  }
  out.insert(out.end(), snapshot.begin(), snapshot.end());
  return out;
}

}  // namespace kvt::llamacpp
