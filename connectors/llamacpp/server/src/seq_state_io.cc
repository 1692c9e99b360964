#include "kvtier_server/seq_state_io.h"

#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "kvtier_server/seq_streams.h"
#include "kvtier_server/slot_snapshots.h"

namespace kvt::llamacpp {

absl::StatusOr<SeqStateSpec> ProbeServerContext(llama_context* ctx, uint32_t* n_stream,
                                                uint64_t* snapshot_bytes) {
  llama_memory_t mem = llama_get_memory(ctx);
  if (llama_memory_seq_pos_max(mem, 0) >= 0) {
    return absl::FailedPreconditionError("seq 0 is not empty at start-up");
  }
  const llama_vocab* vocab = llama_model_get_vocab(llama_get_model(ctx));
  llama_token tok = llama_vocab_bos(vocab);
  if (tok < 0) tok = 0;
  llama_batch batch = llama_batch_get_one(&tok, 1);
  if (int rc = llama_decode(ctx, batch); rc != 0) {
    llama_memory_seq_rm(mem, 0, -1, -1);
    return absl::InternalError(absl::StrCat("probe decode failed (llama_decode ", rc, ")"));
  }
  std::vector<std::byte> blob(llama_state_seq_get_size_ext(ctx, 0, 0));
  const size_t got =
      llama_state_seq_get_data_ext(ctx, reinterpret_cast<uint8_t*>(blob.data()), blob.size(), 0, 0);
  absl::StatusOr<std::vector<std::byte>> snapshot =
      snapshot_bytes != nullptr ? ReadSnapshot(ctx, 0) : std::vector<std::byte>();
  llama_memory_seq_rm(mem, 0, -1, -1);
  if (got != blob.size())
    return absl::InternalError("probe: llama_state_seq_get_data_ext short read");
  if (snapshot_bytes != nullptr) {
    if (!snapshot.ok()) return snapshot.status();
    if (blob.size() < snapshot->size() + 8 ||
        std::memcmp(blob.data() + blob.size() - snapshot->size(), snapshot->data(),
                    snapshot->size()) != 0) {
      return absl::UnimplementedError("the partial state is not the end of the whole state");
    }
    *snapshot_bytes = snapshot->size();
    blob.resize(blob.size() - snapshot->size());
    if (blob.size() == 8) {  // recurrent only: no rows
      *n_stream = 1;
      return SeqStateSpec{};
    }
  }
  absl::StatusOr<uint32_t> n = SeqStateStreamCount(blob);
  if (!n.ok()) return n.status();
  *n_stream = *n;
  absl::StatusOr<std::vector<std::byte>> single = ToSingleStream(blob);
  if (!single.ok()) return single.status();
  return InferSeqStateSpec(*single);
}

absl::StatusOr<std::span<const std::byte>> SeqStateIo::ReadSingleStream(llama_context* ctx,
                                                                        int32_t seq_id) {
  if (format_.iswa) {
    // llama_state_seq_get_data writes only the sliding-window layers' window; the
    // whole-context state has every token's rows of a full-size SWA cache (all slots').
    state_scratch_.resize(llama_state_get_size(ctx));
    const size_t got = llama_state_get_data(ctx, reinterpret_cast<uint8_t*>(state_scratch_.data()),
                                            state_scratch_.size());
    if (got != state_scratch_.size()) return absl::InternalError("llama_state_get_data short read");
    absl::StatusOr<std::vector<std::byte>> seq =
        SeqStateFromContextState(state_scratch_, seq_id, format_.spec);
    if (!seq.ok()) return seq.status();
    single_stream_ = std::move(*seq);
    return std::span<const std::byte>(single_stream_);
  }
  state_scratch_.resize(llama_state_seq_get_size_ext(ctx, seq_id, 0));
  const size_t got = llama_state_seq_get_data_ext(
      ctx, reinterpret_cast<uint8_t*>(state_scratch_.data()), state_scratch_.size(), seq_id, 0);
  if (got != state_scratch_.size()) {
    return absl::InternalError("llama_state_seq_get_data_ext short read");
  }
  if (format_.n_stream == 1) return std::span<const std::byte>(state_scratch_);
  absl::StatusOr<std::vector<std::byte>> single = ToSingleStream(state_scratch_);
  if (!single.ok()) return single.status();
  single_stream_ = std::move(*single);
  return std::span<const std::byte>(single_stream_);
}

absl::StatusOr<SeqStateView> SeqStateIo::ReadRows(llama_context* ctx, int32_t seq_id) {
  absl::StatusOr<std::span<const std::byte>> blob = ReadSingleStream(ctx, seq_id);
  if (!blob.ok()) return blob.status();
  if (format_.snapshot_bytes > 0) {  // a hybrid state: the attention rows, then the recurrent state
    if (blob->size() < format_.snapshot_bytes) {
      return absl::DataLossError("hybrid state shorter than its snapshot");
    }
    return ParseSeqState(blob->first(blob->size() - format_.snapshot_bytes), format_.spec);
  }
  return ParseSeqState(*blob, format_.spec);
}

bool SeqStateIo::Write(llama_context* ctx, int32_t seq_id, std::span<const std::byte> blob) {
  std::optional<std::vector<std::byte>> framed;
  if (format_.n_stream != 1) {
    absl::StatusOr<std::vector<std::byte>> f = ToStreams(blob, format_.n_stream);
    if (!f.ok()) return false;
    framed = std::move(*f);
    blob = *framed;
  }
  return llama_state_seq_set_data_ext(ctx, reinterpret_cast<const uint8_t*>(blob.data()),
                                      blob.size(), seq_id, 0) == blob.size();
}

}  // namespace kvt::llamacpp
