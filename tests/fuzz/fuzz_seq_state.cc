// libFuzzer target: the llama.cpp sequence-state parser (connectors/llamacpp/src/seq_state.cc,
// compiled into this target on its own: no llama.cpp build needed).
//
// Input: a candidate llama_state_seq_get_data blob. InferSeqStateSpec / ParseSeqState
// must return a status for any bytes. A blob they accept must have exactly the size the
// format implies (computed here in 128-bit arithmetic, so an overflowed length check is
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

u128 ExactBytes(const kvt::llamacpp::SeqStateSpec& s, uint32_t cells) {
  const u128 c = cells;
  u128 bytes = 16 + c * 12 + 8;
  bytes += u128{s.n_layer} * (12 + c * s.k_row_bytes);
  // MLA states (has_v false: llama.cpp writes only the latent K rows) carry no V section.
  if (s.has_v) bytes += u128{s.n_layer} * (12 + c * s.v_row_bytes);
  return bytes;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> blob(reinterpret_cast<const std::byte*>(data), size);
  auto spec = kvt::llamacpp::InferSeqStateSpec(blob);
  if (!spec.ok()) return 0;
  auto view = kvt::llamacpp::ParseSeqState(blob, *spec);
  if (!view.ok()) std::abort();  // Infer validated it with the same parser
  if (ExactBytes(*spec, view->cell_count) != size) std::abort();
  if (kvt::llamacpp::SeqStateBytes(*spec, view->cell_count) != size) std::abort();
  for (uint32_t l = 0; l < spec->n_layer; ++l) {
    if (view->k_offset[l] + u128{view->cell_count} * spec->k_row_bytes > size) std::abort();
    if (spec->has_v && view->v_offset[l] + u128{view->cell_count} * spec->v_row_bytes > size) {
      std::abort();
    }
  }
  // Round trip through a chunk payload (bounded: the blob is at most the input's size).
  const uint32_t cells = view->cell_count;
  std::vector<std::byte> payload(uint64_t{cells} * spec->payload_bytes_per_token());
  if (!kvt::llamacpp::ExtractChunkPayload(*view, 0, cells, payload).ok()) std::abort();
  auto builder = kvt::llamacpp::SeqStateBuilder::Create(*spec, cells, view->seq_id);
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
