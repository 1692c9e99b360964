// libFuzzer target: the llama.cpp sequence-state parser (connectors/llamacpp/src/seq_state.cc,
// compiled into this target on its own: no llama.cpp build needed).
//
// Input: a candidate llama_state_seq_get_data blob (one section, or two: iSWA); bytes
// that are not one are read as a whole-context state (SeqStateFromContextState). InferSeqStateSpec
// / ParseSeqState must return a status for any bytes. A blob they accept must have exactly the size
// the format implies (computed here in 128-bit arithmetic, so an overflowed length check is
// caught), every layer offset must lie inside it, and slicing it into a chunk payload and
// building a blob back from that payload must give the same payload again.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "llamacpp/seq_state.h"

namespace {
using u128 = unsigned __int128;

// magic + seq_id, then per section (one; two for an iSWA cache, n_layer_swa > 0):
// n_stream, cell_count, 12 bytes per cell (24 with the M-RoPE record), v_trans, n_layer;
// per layer a 12-byte K header
// and K rows, and (has_v) a 12-byte V header and V rows.
u128 ExactBytes(const kvt::llamacpp::SeqStateSpec& s, uint32_t cells) {
  const u128 c = cells;
  const u128 sections = s.n_layer_swa > 0 ? 2 : 1;
  const u128 layers = u128{s.n_layer} + s.n_layer_swa;
  u128 bytes = 8 + sections * (16 + c * (s.cell_ext ? 24 : 12));
  bytes += layers * (12 + c * s.k_row_bytes);
  if (s.has_v) bytes += layers * (12 + c * s.v_row_bytes);
  return bytes;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> blob(reinterpret_cast<const std::byte*>(data), size);
  auto spec = kvt::llamacpp::InferSeqStateSpec(blob);
  if (!spec.ok()) {
    // Read as a whole-context state (llama_state_get_data) of a small iSWA spec: a status
    // for any bytes, and a sequence cut from it is a valid state of that spec.
    kvt::llamacpp::SeqStateSpec iswa;
    iswa.n_layer = 1;
    iswa.n_layer_swa = 1;
    iswa.type_k = iswa.type_v = 1;
    iswa.k_row_bytes = iswa.v_row_bytes = 4;
    iswa.n_embd_v_gqa = 2;
    iswa.v_elem_bytes = 2;
    iswa.v_trans = size > 0 && (data[size - 1] & 1) != 0;
    auto cut = kvt::llamacpp::SeqStateFromContextState(blob, 0, iswa);
    if (cut.ok() && !kvt::llamacpp::ParseSeqState(*cut, iswa).ok()) std::abort();
    return 0;
  }
  auto view = kvt::llamacpp::ParseSeqState(blob, *spec);
  if (!view.ok()) std::abort();  // Infer validated it with the same parser
  if (ExactBytes(*spec, view->cell_count) != size) std::abort();
  if (kvt::llamacpp::SeqStateBytes(*spec, view->cell_count) != size) std::abort();
  for (uint32_t l = 0; l < spec->total_layers(); ++l) {
    if (view->k_offset[l] + u128{view->cell_count} * spec->k_row_bytes > size) std::abort();
    if (spec->has_v && view->v_offset[l] + u128{view->cell_count} * spec->v_row_bytes > size) {
      std::abort();
    }
  }
  // Round trip through a chunk payload (bounded: the blob is at most the input's size).
  const uint32_t cells = view->cell_count;
  std::vector<std::byte> payload(uint64_t{cells} * spec->payload_bytes_per_token());
  // Cells with M-RoPE records are cut only when they are text cells.
  const bool text = kvt::llamacpp::CheckTextCells(*view, 0, cells).ok();
  if (kvt::llamacpp::ExtractChunkPayload(*view, 0, cells, payload).ok() != text) std::abort();
  if (!text) return 0;
  // Text cells are rebuilt from their token ids (tok, 16 bytes into a 24-byte record).
  std::vector<int32_t> tokens;
  for (uint32_t i = 0; spec->cell_ext && i < cells; ++i) {
    int32_t tok;
    std::memcpy(&tok, blob.data() + view->cell_offset[0] + uint64_t{i} * 24 + 16, sizeof tok);
    tokens.push_back(tok);
  }
  auto builder = kvt::llamacpp::SeqStateBuilder::Create(*spec, cells, view->seq_id, {}, tokens);
  if (!builder.ok()) return 0;  // Validate() may refuse a spec the blob implies (logged)
  if (!builder->PutChunk(0, cells, payload).ok()) std::abort();
  auto view2 = kvt::llamacpp::ParseSeqState(builder->blob(), *spec);
  if (!view2.ok()) std::abort();
  std::vector<std::byte> payload2(payload.size());
  if (!kvt::llamacpp::ExtractChunkPayload(*view2, 0, cells, payload2).ok()) std::abort();
  if (payload != payload2) std::abort();
  // A partial range must be refused cleanly when out of bounds.
  if (kvt::llamacpp::ExtractChunkPayload(*view, cells, 1, std::span<std::byte>(payload).first(0))
          .ok()) {
    std::abort();
  }
  return 0;
}
