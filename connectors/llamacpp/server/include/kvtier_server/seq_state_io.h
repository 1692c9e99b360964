// SeqStateIo: one llama-server slot's sequence state, read and written in the framing
// kvtier's parser (llamacpp/seq_state.h) handles: one KV stream, the attention rows alone.
//
// The server's context may differ from that framing in three ways, each fixed here:
//  * non-unified KV cache (-np N > 1 without --kv-unified): N streams, all empty but the
//    slot's (seq_streams.h): read as one stream, written back framed for N;
//  * an iSWA model (with --swa-full): llama_state_seq_get_data writes only the window of
//    its sliding-window layers, so the sequence is cut out of the whole-context state
//    (SeqStateFromContextState);
//  * a recurrent or hybrid model: the state ends with the slot's recurrent state (its
//    boundary snapshot, slot_snapshots.h), dropped before the rows are parsed.
//
// Task-loop thread only (as the hooks that call it): reads reuse two buffers, so a long
// sequence's state costs no allocation after the first. Not thread-safe; spec(),
// n_stream() and iswa() never change after construction.
#ifndef KVTIER_SERVER_SEQ_STATE_IO_H_
#define KVTIER_SERVER_SEQ_STATE_IO_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "llama.h"
#include "llamacpp/seq_state.h"

namespace kvt::llamacpp {

// The sequence-state format of `ctx`: decodes one token into seq 0 of the (empty)
// context, reads its state, clears it again. Sets *n_stream to the state's stream count
// (once it is read; left as it is when the probe fails before). `snapshot_bytes` non-null
// (a recurrent or hybrid model): the partial state is cut off the end first and its size
// set there; a recurrent model's state then has no rows, returned as a spec with n_layer
// 0. FailedPrecondition when seq 0 is not empty; Internal when the decode or a read
// fails; Unimplemented when the partial state is not the end of the whole state;
// DataLoss from the stream framing; InferSeqStateSpec's errors.
absl::StatusOr<SeqStateSpec> ProbeServerContext(llama_context* ctx, uint32_t* n_stream,
                                                uint64_t* snapshot_bytes);

// What a slot's state holds besides the rows: set once by OnContextReady.
struct SeqStateFormat {
  SeqStateSpec spec;            // the rows' format (the adapter's, equal to the probed one)
  uint32_t n_stream = 1;        // the context's KV streams (non-unified cache: one per slot)
  bool iswa = false;            // read from the whole-context state (REQUIRES n_stream == 1)
  uint64_t snapshot_bytes = 0;  // the recurrent state ending each sequence state (0: none)
};

class SeqStateIo {
 public:
  explicit SeqStateIo(const SeqStateFormat& format) : format_(format) {}

  // Sequence `seq_id`'s whole state (rows, then a snapshot if any) as one stream. The span
  // stays valid until the next Read* call. Internal on a short read; DataLoss when the
  // streams are not one non-empty stream; SeqStateFromContextState's errors (iSWA).
  absl::StatusOr<std::span<const std::byte>> ReadSingleStream(llama_context* ctx, int32_t seq_id);
  // The same state parsed: its attention rows only (the snapshot cut off). Valid as the
  // span above. ReadSingleStream's errors; DataLoss when the state is shorter than its
  // snapshot; ParseSeqState's errors.
  absl::StatusOr<SeqStateView> ReadRows(llama_context* ctx, int32_t seq_id);
  // Writes a single-stream state into `seq_id` (framed for n_stream > 1 first). False
  // when the framing fails or llama.cpp does not take the whole blob; the sequence may
  // then hold a partial state (the caller clears it).
  bool Write(llama_context* ctx, int32_t seq_id, std::span<const std::byte> blob);

  const SeqStateSpec& spec() const { return format_.spec; }
  uint32_t n_stream() const { return format_.n_stream; }
  bool iswa() const { return format_.iswa; }

 private:
  const SeqStateFormat format_;
  // Grow to the largest sequence state seen (at most n_ctx x bytes per token) and kept.
  std::vector<std::byte> state_scratch_;  // what llama.cpp wrote
  std::vector<std::byte> single_stream_;  // n_stream > 1 or iSWA: that state as one stream
};

}  // namespace kvt::llamacpp

#endif  // KVTIER_SERVER_SEQ_STATE_IO_H_
