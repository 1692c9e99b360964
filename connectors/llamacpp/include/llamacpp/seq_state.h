// llama.cpp per-sequence state blobs: validation, slicing into kvtier chunk payloads,
// and reassembly of a prefix.
//
// Format of llama_state_seq_get_data(ctx, dst, size, seq_id) in the pinned llama.cpp
// (commit 0c1e57098, from llama-cpp-python 0.3.36; src/llama-context.cpp
// state_seq_get_data and src/llama-kv-cache.cpp state_write / state_write_meta /
// state_write_data). All fields little-endian:
//
//   u32 magic = 0xaf143cd8, i32 source seq_id,
//   u32 n_stream                                    (kvtier requires 1)
//   per stream: u32 cell_count                      (kvtier requires > 0)
//     per cell: i32 pos, u32 n_seq_id (= 1), [ext], i32 seq_id
//               ext (llama_kv_cell_ext, 12 bytes; only in the cache of a model with
//               M-RoPE or PLE, llama_kv_cache::has_cell_ext): i32 x, i32 y (the 2D
//               position; apply_ubatch sets x = y = pos for a text token, the broadcast
//               position), i32 tok (the cell's token id; -1 for an embedding input).
//               kvtier reads M-RoPE models' cells (SeqStateSpec::cell_ext) and cuts
//               chunks only of text cells (x = y = pos, tok = the prompt's token).
//     u32 v_trans, u32 n_layer
//     per layer: i32 k_type, u64 k_row_bytes, cell_count * k_row_bytes bytes of K rows
//     (an MLA cache has no V tensors: the blob ends after the K layers; has_v = false)
//     v_trans == 0: per layer: i32 v_type, u64 v_row_bytes, cell_count rows of V
//     v_trans == 1: per layer: i32 v_type, u32 v_elem_bytes, u32 n_embd_v_gqa, then for
//                   each of the n_embd_v_gqa elements, cell_count elements (V^T)
//   An iSWA cache (llama-kv-cache-iswa.cpp) writes two such sections after the magic and
//   seq_id: the full-attention layers' cache (from n_stream on), then the sliding-window
//   layers' cache (n_stream, cells, v_trans, n_layer, layers). kvtier reads the second
//   section only with the same cells as the first (every token: a full-size SWA cache,
//   read from the whole-context state, SeqStateFromContextState) and the same row types.
//
// The whole-context state (llama_state_get_data) is: u32 length + the architecture name,
// then the same sections with seq_id -1: every non-empty cell of every sequence, with
// its n_seq_id sequence ids, in cell order, and no SWA masking (so a full-size SWA cache
// gives every token's rows there, while llama_state_seq_get_data writes only the window).
//
// kvtier chunk payload for tokens [a, b) (codec order, kvstore/chunk_codec.h, layout kind
// kLlamaCppRows): for each layer, the K rows of tokens a..b-1 (each k_row_bytes), then
// the V rows of tokens a..b-1 (each v_row_bytes), token-major even when the engine's V
// is transposed (it is transposed back on load). So a payload is identical whether or
// not v_trans is set; the namespace still separates flash attention on/off because the
// values differ. A payload holds no cell records: a restore writes a text cell's record
// back from its position and the prompt's token id (SeqStateBuilder's `tokens`).
#ifndef LLAMACPP_SEQ_STATE_H_
#define LLAMACPP_SEQ_STATE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvt::llamacpp {

inline constexpr uint32_t kSeqStateMagic = 0xaf143cd8u;  // llama-context.cpp io_magic

// What a blob of this engine must look like. Every layer has the same K and V types
// and row sizes (kvtier's payload layout is uniform across layers). Thread-compatible.
struct SeqStateSpec {
  uint32_t n_layer = 0;
  int32_t type_k = 0;         // ggml_type
  int32_t type_v = 0;         // ggml_type
  uint64_t k_row_bytes = 0;   // ggml_row_size(type_k, n_embd_k_gqa)
  uint64_t v_row_bytes = 0;   // ggml_row_size(type_v, n_embd_v_gqa)
  uint32_t n_embd_v_gqa = 0;  // V elements per token and layer
  uint32_t v_elem_bytes = 0;  // ggml_type_size(type_v); used when v_trans
  bool v_trans = false;
  // False for an MLA cache: K rows only (the compressed latent), no V layers in the blob;
  // then type_v = -1 and v_row_bytes = n_embd_v_gqa = v_elem_bytes = 0.
  bool has_v = true;

  // Layers of a second section that follows the first (an iSWA cache's sliding-window
  // layers; same row types and cells as the first); 0 = one section (a plain cache).
  uint32_t n_layer_swa = 0;
  // True when every cell record carries the 12-byte ext record (an M-RoPE model's cache;
  // see the file comment): a cell record is then 24 bytes instead of 12.
  bool cell_ext = false;

  // Bytes of one cell record: pos, n_seq_id, [ext], seq_id.
  uint64_t cell_bytes() const { return cell_ext ? 24 : 12; }

  // Layers of all sections; payload layer l < n_layer is in the first section.
  uint32_t total_layers() const { return n_layer + n_layer_swa; }
  // Payload bytes of one token across all layers:
  // total_layers() * (k_row_bytes + v_row_bytes).
  uint64_t payload_bytes_per_token() const {
    return uint64_t{total_layers()} * (k_row_bytes + v_row_bytes);
  }
  // InvalidArgument naming the field (zero sizes; v_trans with v_row_bytes !=
  // n_embd_v_gqa * v_elem_bytes, i.e. a block-quantized transposed V).
  absl::Status Validate() const;
  std::string DebugString() const;
};

// Exact size of a blob with `cell_count` cells.
uint64_t SeqStateBytes(const SeqStateSpec& spec, uint32_t cell_count);

// A validated blob: where each layer's K and V data start. Borrows the blob bytes
// (they must outlive the view). Thread-compatible.
struct SeqStateView {
  SeqStateSpec spec;
  uint32_t cell_count = 0;
  int32_t seq_id = 0;
  std::vector<uint64_t> k_offset;  // per layer: first byte of cell_count K rows
  std::vector<uint64_t> v_offset;  // per layer: first byte of V (rows, or V^T when v_trans)
  // Per section: first byte of its cell_count cell records (spec.cell_bytes() each).
  std::vector<uint64_t> cell_offset;
  std::span<const std::byte> blob;
};

// Validates every field of `blob` against `expect`, in order, and returns the offsets.
// Errors name the field and its offset:
//  * DataLoss: truncated at any field, wrong magic, n_stream != 1, cell_count == 0,
//    a cell whose pos != its index (positions must be contiguous from 0), n_seq_id != 1,
//    v_trans not 0/1, bytes left over after the last layer.
//  * FailedPrecondition: a well-formed field that does not match this engine: v_trans,
//    n_layer, k/v type, k/v row bytes, V element size, n_embd_v_gqa; a second section
//    (n_layer_swa) whose cell count differs from the first's.
// With expect.cell_ext the ext records are read but not judged (CheckTextCells does).
absl::StatusOr<SeqStateView> ParseSeqState(std::span<const std::byte> blob,
                                           const SeqStateSpec& expect);

// Reads the layout facts (v_trans, n_layer, layer 0's K/V types and row sizes) from a
// blob, assuming every layer is alike, then validates the whole blob with ParseSeqState.
// Cell records are tried at 12 bytes, then with the ext record (24 bytes; cell_ext set):
// only one of the two reads a blob to its exact size (the engine also checks cell_ext
// against the model's rope type).
// For v_trans == 0 the blob does not carry n_embd_v_gqa / v_elem_bytes: they are set to
// v_row_bytes and 1 (callers that know the ggml type may refine them). DataLoss as
// ParseSeqState; FailedPrecondition when layers differ. Bytes after the first section's
// layers are read as a second section (n_layer_swa; an iSWA cache).
absl::StatusOr<SeqStateSpec> InferSeqStateSpec(std::span<const std::byte> blob);

// The blob of sequence `seq_id` with its tokens [0, n) in the format of `spec` (one
// stream), cut from a whole-context state (llama_state_get_data; see the file comment).
// n is the longest run of positions 0, 1, ... that every section holds for `seq_id`
// (a cell the cache reused for another sequence ends it; with spec.cell_ext so does a
// cell that is not a text cell, see CheckTextCells). Cells in any stream, in any cell
// order. DataLoss for a malformed state, a position held twice, or no position 0;
// FailedPrecondition when a section's layers do not match `spec`.
absl::StatusOr<std::vector<std::byte>> SeqStateFromContextState(std::span<const std::byte> state,
                                                                int32_t seq_id,
                                                                const SeqStateSpec& spec);

// With view.spec.cell_ext: checks that cells [first, first + count) of every section are
// text cells, i.e. hold the ext record a text prompt's decode writes: x = y = the cell's
// position and tok = tokens[i - first] (when `tokens` is given; else any id >= 0).
// OutOfRange when the range exceeds cell_count or `tokens` is shorter than count;
// FailedPrecondition naming the first other cell (an embedding input: tok -1, or a 2D
// position of an image). OK without cell_ext.
absl::Status CheckTextCells(const SeqStateView& view, uint32_t first, uint32_t count,
                            std::span<const int32_t> tokens = {});

// Copies tokens [first, first + count) of `view` into `payload` in chunk codec order
// (see the file comment), after CheckTextCells(view, first, count, tokens): a chunk
// whose cells a restore could not write back as they are is never cut.
// REQUIRES: payload.size() == count * payload_bytes_per_token().
// OutOfRange when the range exceeds cell_count; InvalidArgument for a wrong payload size;
// FailedPrecondition from CheckTextCells.
absl::Status ExtractChunkPayload(const SeqStateView& view, uint32_t first, uint32_t count,
                                 std::span<std::byte> payload,
                                 std::span<const int32_t> tokens = {});

// Builds the blob of a sequence holding tokens [0, cell_count) from chunk payloads,
// for llama_state_seq_set_data. Writes all headers on creation; PutChunk scatters one
// chunk's K/V rows into place. Not thread-safe.
class SeqStateBuilder {
 public:
  // InvalidArgument for an invalid spec or cell_count == 0.
  //
  // `storage` is an optional buffer to build in (e.g. what TakeStorage returned for an
  // earlier request): when its capacity suffices, no memory is allocated or zeroed, so a
  // restore of a long prompt pays no page faults (a fresh 74 MB blob cost ~20 ms of page
  // faults per restore in kvtier-llama-server on the demo's 270M model; docs/llama-server.md).
  // Rows never written by PutChunk are then stale bytes of `storage`, not zero: hand
  // llama.cpp only a blob whose cells were all written (or Truncated to those that were).
  //
  // `tokens`: the prompt's token ids of cells [0, cell_count) (more are ignored). Needed
  // when spec.cell_ext: each cell's ext record is written as a text token's (x = y = pos,
  // tok = tokens[pos]); InvalidArgument when fewer than cell_count or one is negative.
  // Unused otherwise.
  static absl::StatusOr<SeqStateBuilder> Create(const SeqStateSpec& spec, uint32_t cell_count,
                                                int32_t seq_id = 0,
                                                std::vector<std::byte> storage = {},
                                                std::span<const int32_t> tokens = {});

  // Places tokens [first, first + count) from `payload` (codec order).
  // OutOfRange past cell_count; InvalidArgument for a wrong payload size.
  absl::Status PutChunk(uint32_t first, uint32_t count, std::span<const std::byte> payload);

  // Copies tokens [0, count) of `view` (another state of the same engine, e.g. the
  // computed front of a load-while-compute split) into place: one copy per layer for K
  // (and V rows), one per V element row when transposed. FailedPrecondition when the
  // view's spec differs or (cell_ext) its cells [0, count) are not the text cells of this
  // builder's tokens; OutOfRange when count exceeds either state's cells or is 0.
  absl::Status CopyPrefixFrom(const SeqStateView& view, uint32_t count);

  // The blob. Rows never written by PutChunk are zero (fresh storage; see Create).
  std::span<const std::byte> blob() const { return {blob_.data(), blob_bytes_}; }
  // The blob, exactly blob().size() bytes.
  std::vector<std::byte> TakeBlob() && {
    blob_.resize(blob_bytes_);
    return std::move(blob_);
  }
  // The memory to build the next state in (Create's `storage`): possibly larger than the
  // blob, so a later, longer state is built without zeroing the difference again.
  std::vector<std::byte> TakeStorage() && { return std::move(blob_); }
  uint32_t cell_count() const { return cell_count_; }

  // The blob of only the first `cells` tokens (e.g. after a partial load).
  // InvalidArgument when cells == 0 or cells > cell_count().
  absl::StatusOr<std::vector<std::byte>> Truncated(uint32_t cells) const;

 private:
  SeqStateBuilder(const SeqStateSpec& spec, uint32_t cell_count, int32_t seq_id);
  SeqStateSpec spec_;
  uint32_t cell_count_ = 0;
  int32_t seq_id_ = 0;
  std::vector<int32_t> tokens_;  // cell_ext: the token id of each cell; else empty
  std::vector<std::byte> blob_;  // at least blob_bytes_ (recycled storage may be larger)
  uint64_t blob_bytes_ = 0;
  std::vector<uint64_t> k_offset_;
  std::vector<uint64_t> v_offset_;
};

}  // namespace kvt::llamacpp

#endif  // LLAMACPP_SEQ_STATE_H_
