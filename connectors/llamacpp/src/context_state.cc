// SeqStateFromContextState (llamacpp/seq_state.h): one sequence cut from llama.cpp's
// whole-context state.
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "llamacpp/seq_state.h"
#include "seq_state_internal.h"

namespace kvt::llamacpp {

using seq_state_internal::CellExt;
using seq_state_internal::kCellMetaBytes;
using seq_state_internal::Mismatch;
using seq_state_internal::PayloadLayout;
using seq_state_internal::PayloadOffsets;
using seq_state_internal::Reader;

namespace {

// Where one section of a whole-context state keeps each stream's rows, and which cell
// holds each position of the wanted sequence.
struct ContextSection {
  struct Stream {
    uint32_t cell_count = 0;
    std::vector<uint64_t> k_offset;  // per layer of the section
    std::vector<uint64_t> v_offset;
  };
  struct Where {
    uint32_t stream = UINT32_MAX;  // UINT32_MAX: no cell holds the position
    uint32_t index = 0;
  };
  std::vector<Stream> streams;
  std::vector<Where> at;      // by position
  std::vector<int32_t> toks;  // by position, with spec.cell_ext: the text cell's token id
};

absl::Status ParseContextSection(Reader& r, const SeqStateSpec& spec, int section, int32_t seq_id,
                                 uint64_t max_cells, ContextSection& out) {
  const std::string sec = section == 0 ? "" : "swa.";
  const uint32_t want_layers = section == 0 ? spec.n_layer : spec.n_layer_swa;
  KVT_ASSIGN_OR_RETURN(const uint32_t n_stream, r.Read<uint32_t>("n_stream"));
  if (n_stream == 0 || uint64_t{n_stream} * 4 > r.remaining()) {
    return absl::DataLossError(
        absl::StrFormat("llama.cpp context state field %sn_stream is %d with %d bytes left", sec,
                        n_stream, r.remaining()));
  }
  out.streams.resize(n_stream);
  for (uint32_t s = 0; s < n_stream; ++s) {
    ContextSection::Stream& st = out.streams[s];
    uint64_t at = r.pos();
    KVT_ASSIGN_OR_RETURN(st.cell_count, r.Read<uint32_t>("cell_count"));
    if (st.cell_count == 0) continue;
    if (uint64_t{st.cell_count} * kCellMetaBytes > r.remaining()) {
      return absl::DataLossError(absl::StrFormat(
          "llama.cpp context state field %scell_count at offset %d is %d: the %d bytes left "
          "cannot hold its cells",
          sec, at, st.cell_count, r.remaining()));
    }
    for (uint32_t i = 0; i < st.cell_count; ++i) {
      KVT_ASSIGN_OR_RETURN(const int32_t pos, r.Read<int32_t>("cell.pos"));
      at = r.pos();
      KVT_ASSIGN_OR_RETURN(const uint32_t n_seq_id, r.Read<uint32_t>("cell.n_seq_id"));
      CellExt ext;
      if (spec.cell_ext) {
        KVT_ASSIGN_OR_RETURN(ext, r.Read<CellExt>("cell.ext"));
      }
      if (uint64_t{n_seq_id} * 4 > r.remaining()) {
        return absl::DataLossError(absl::StrFormat(
            "llama.cpp context state field %scell[%d].n_seq_id at offset %d is %d with %d bytes "
            "left",
            sec, i, at, n_seq_id, r.remaining()));
      }
      bool mine = false;
      for (uint32_t k = 0; k < n_seq_id; ++k) {
        KVT_ASSIGN_OR_RETURN(const int32_t id, r.Read<int32_t>("cell.seq_id"));
        mine = mine || id == seq_id;
      }
      // A run of positions from 0 is no longer than the cells of the state (12 bytes each):
      // a larger position cannot be in it (and would only grow `at`).
      if (!mine || pos < 0 || static_cast<uint64_t>(pos) >= max_cells) continue;
      // Not a text cell (CheckTextCells): not restorable, so not part of the run.
      if (spec.cell_ext && (ext.x != pos || ext.y != pos || ext.tok < 0)) continue;
      if (out.at.size() <= static_cast<size_t>(pos)) {
        out.at.resize(static_cast<size_t>(pos) + 1);
        if (spec.cell_ext) out.toks.resize(static_cast<size_t>(pos) + 1, -1);
      }
      if (out.at[static_cast<size_t>(pos)].stream != UINT32_MAX) {
        return absl::DataLossError(
            absl::StrFormat("llama.cpp context state: %sposition %d of seq %d is held by two cells",
                            sec, pos, seq_id));
      }
      out.at[static_cast<size_t>(pos)] = {s, i};
      if (spec.cell_ext) out.toks[static_cast<size_t>(pos)] = ext.tok;
    }
    at = r.pos();
    KVT_ASSIGN_OR_RETURN(const uint32_t v_trans, r.Read<uint32_t>("v_trans"));
    if (v_trans != (spec.v_trans ? 1u : 0u))
      return Mismatch(sec + "v_trans", at, v_trans, spec.v_trans);
    at = r.pos();
    KVT_ASSIGN_OR_RETURN(const uint32_t n_layer, r.Read<uint32_t>("n_layer"));
    if (n_layer != want_layers) return Mismatch(sec + "n_layer", at, n_layer, want_layers);
    const uint64_t cells = st.cell_count;
    st.k_offset.resize(n_layer);
    st.v_offset.resize(n_layer);
    for (uint32_t l = 0; l < n_layer; ++l) {
      at = r.pos();
      KVT_ASSIGN_OR_RETURN(const int32_t k_type, r.Read<int32_t>("layer.k_type"));
      if (k_type != spec.type_k) return Mismatch(sec + "layer.k_type", at, k_type, spec.type_k);
      at = r.pos();
      KVT_ASSIGN_OR_RETURN(const uint64_t k_row, r.Read<uint64_t>("layer.k_row_bytes"));
      if (k_row != spec.k_row_bytes) {
        return Mismatch(sec + "layer.k_row_bytes", at, static_cast<int64_t>(k_row),
                        static_cast<int64_t>(spec.k_row_bytes));
      }
      st.k_offset[l] = r.pos();
      if (absl::Status x = r.SkipRows(cells, k_row, "layer.k_rows"); !x.ok()) return x;
    }
    for (uint32_t l = 0; spec.has_v && l < n_layer; ++l) {
      at = r.pos();
      KVT_ASSIGN_OR_RETURN(const int32_t v_type, r.Read<int32_t>("layer.v_type"));
      if (v_type != spec.type_v) return Mismatch(sec + "layer.v_type", at, v_type, spec.type_v);
      at = r.pos();
      if (!spec.v_trans) {
        KVT_ASSIGN_OR_RETURN(const uint64_t v_row, r.Read<uint64_t>("layer.v_row_bytes"));
        if (v_row != spec.v_row_bytes) {
          return Mismatch(sec + "layer.v_row_bytes", at, static_cast<int64_t>(v_row),
                          static_cast<int64_t>(spec.v_row_bytes));
        }
      } else {
        KVT_ASSIGN_OR_RETURN(const uint32_t v_el, r.Read<uint32_t>("layer.v_elem_bytes"));
        if (v_el != spec.v_elem_bytes)
          return Mismatch(sec + "layer.v_elem_bytes", at, v_el, spec.v_elem_bytes);
        at = r.pos();
        KVT_ASSIGN_OR_RETURN(const uint32_t n_embd, r.Read<uint32_t>("layer.n_embd_v_gqa"));
        if (n_embd != spec.n_embd_v_gqa)
          return Mismatch(sec + "layer.n_embd_v_gqa", at, n_embd, spec.n_embd_v_gqa);
      }
      st.v_offset[l] = r.pos();
      if (absl::Status x = r.SkipRows(cells, spec.v_row_bytes, "layer.v_data"); !x.ok()) return x;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::byte>> SeqStateFromContextState(std::span<const std::byte> state,
                                                                int32_t seq_id,
                                                                const SeqStateSpec& spec) {
  if (absl::Status s = spec.Validate(); !s.ok()) return s;
  Reader r(state);
  KVT_ASSIGN_OR_RETURN(const uint32_t arch_len, r.Read<uint32_t>("arch.length"));
  if (absl::Status s = r.Skip(arch_len, "arch"); !s.ok()) return s;
  const int n_sections = spec.n_layer_swa > 0 ? 2 : 1;
  ContextSection sections[2];
  for (int i = 0; i < n_sections; ++i) {
    if (absl::Status s =
            ParseContextSection(r, spec, i, seq_id, state.size() / kCellMetaBytes, sections[i]);
        !s.ok())
      return s;
  }
  if (r.remaining() != 0) {
    return absl::DataLossError(absl::StrFormat(
        "llama.cpp context state has %d bytes left over after its last section", r.remaining()));
  }
  uint32_t n = 0;
  while (true) {
    bool all = true;
    for (int i = 0; i < n_sections; ++i) {
      all = all && n < sections[i].at.size() && sections[i].at[n].stream != UINT32_MAX;
      // Both caches must hold the same token there.
      all = all && (!spec.cell_ext || sections[i].toks[n] == sections[0].toks[n]);
    }
    if (!all) break;
    ++n;
  }
  if (n == 0) {
    return absl::DataLossError(
        absl::StrFormat("llama.cpp context state holds no position 0 of seq %d", seq_id));
  }
  std::vector<std::byte> payload(uint64_t{n} * spec.payload_bytes_per_token());
  const PayloadLayout pl = PayloadOffsets(spec, n);
  const std::byte* src = state.data();
  for (uint32_t l = 0; l < spec.total_layers(); ++l) {
    const ContextSection& sec = sections[l < spec.n_layer ? 0 : 1];
    const uint32_t sl = l < spec.n_layer ? l : l - spec.n_layer;
    std::byte* kdst = payload.data() + l * pl.layer_bytes;
    std::byte* vdst = kdst + pl.k_bytes;
    for (uint32_t t = 0; t < n; ++t) {
      const ContextSection::Where w = sec.at[t];
      const ContextSection::Stream& st = sec.streams[w.stream];
      std::memcpy(kdst + uint64_t{t} * spec.k_row_bytes,
                  src + st.k_offset[sl] + uint64_t{w.index} * spec.k_row_bytes, spec.k_row_bytes);
      if (!spec.has_v) continue;
      std::byte* vrow = vdst + uint64_t{t} * spec.v_row_bytes;
      if (!spec.v_trans) {
        std::memcpy(vrow, src + st.v_offset[sl] + uint64_t{w.index} * spec.v_row_bytes,
                    spec.v_row_bytes);
      } else {
        const uint64_t es = spec.v_elem_bytes;
        for (uint32_t j = 0; j < spec.n_embd_v_gqa; ++j) {
          std::memcpy(vrow + j * es,
                      src + st.v_offset[sl] + (uint64_t{j} * st.cell_count + w.index) * es, es);
        }
      }
    }
  }
  absl::StatusOr<SeqStateBuilder> b =
      SeqStateBuilder::Create(spec, n, seq_id, {}, sections[0].toks);
  if (!b.ok()) return b.status();
  if (absl::Status s = b->PutChunk(0, n, payload); !s.ok()) return s;
  return std::move(*b).TakeBlob();
}

}  // namespace kvt::llamacpp
