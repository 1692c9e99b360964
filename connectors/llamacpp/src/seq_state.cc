// The llama.cpp sequence-state reader and chunk cutter (llamacpp/seq_state.h): the spec,
// ParseSeqState, InferSeqStateSpec, CheckTextCells, ExtractChunkPayload.
#include "llamacpp/seq_state.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "seq_state_internal.h"

namespace kvt::llamacpp {

using seq_state_internal::CellExt;
using seq_state_internal::kCellExtBytes;
using seq_state_internal::kKLayerHeader;
using seq_state_internal::kVLayerHeader;
using seq_state_internal::kVTransLayerHeader;
using seq_state_internal::Mismatch;
using seq_state_internal::PayloadLayout;
using seq_state_internal::PayloadOffsets;
using seq_state_internal::Reader;

absl::Status SeqStateSpec::Validate() const {
  if (!has_v) {
    if (n_layer == 0 || k_row_bytes == 0 || v_row_bytes != 0 || n_embd_v_gqa != 0 ||
        n_layer_swa != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SeqStateSpec without V needs n_layer, k_row_bytes > 0, no V sizes and one section: ",
          DebugString()));
    }
    return absl::OkStatus();
  }
  if (n_layer == 0 || k_row_bytes == 0 || v_row_bytes == 0 || n_embd_v_gqa == 0 ||
      v_elem_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("SeqStateSpec has a zero field: ", DebugString()));
  }
  if (v_trans && v_row_bytes != uint64_t{n_embd_v_gqa} * v_elem_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "SeqStateSpec: transposed V needs v_row_bytes == n_embd_v_gqa * v_elem_bytes: ",
        DebugString()));
  }
  return absl::OkStatus();
}

std::string SeqStateSpec::DebugString() const {
  return absl::StrFormat(
      "{n_layer=%d type_k=%d type_v=%d k_row_bytes=%d v_row_bytes=%d n_embd_v_gqa=%d "
      "v_elem_bytes=%d v_trans=%d has_v=%d n_layer_swa=%d cell_ext=%d}",
      n_layer, type_k, type_v, k_row_bytes, v_row_bytes, n_embd_v_gqa, v_elem_bytes, v_trans, has_v,
      n_layer_swa, cell_ext);
}

uint64_t SeqStateBytes(const SeqStateSpec& spec, uint32_t cell_count) {
  const uint64_t cells = cell_count;
  const uint64_t sections = spec.n_layer_swa > 0 ? 2 : 1;
  const uint64_t layers = spec.total_layers();
  // magic, seq_id; per section n_stream, cell_count, cells, v_trans, n_layer.
  uint64_t bytes = 4 + 4 + sections * (4 + 4 + cells * spec.cell_bytes() + 4 + 4);
  bytes += layers * (kKLayerHeader + cells * spec.k_row_bytes);
  if (spec.has_v) {
    bytes +=
        layers * ((spec.v_trans ? kVTransLayerHeader : kVLayerHeader) + cells * spec.v_row_bytes);
  }
  return bytes;
}

namespace {

// Parses one section of `view.blob` (from n_stream on; section 1 = an iSWA cache's
// sliding-window layers) and appends its layers' offsets to `view`.
absl::Status ParseSection(Reader& r, const SeqStateSpec& expect, int section, SeqStateView& view) {
  const std::string sec = section == 0 ? "" : "swa.";
  const uint32_t want_layers = section == 0 ? expect.n_layer : expect.n_layer_swa;
  const uint32_t layer0 = section == 0 ? 0 : expect.n_layer;
  uint64_t at = r.pos();
  KVT_ASSIGN_OR_RETURN(const uint32_t n_stream, r.Read<uint32_t>("n_stream"));
  if (n_stream != 1) {
    return absl::DataLossError(absl::StrFormat(
        "llama.cpp seq state field %sn_stream at offset %d is %d, expected 1", sec, at, n_stream));
  }
  at = r.pos();
  KVT_ASSIGN_OR_RETURN(const uint32_t cell_count, r.Read<uint32_t>("cell_count"));
  if (cell_count == 0) {
    return absl::DataLossError(absl::StrFormat(
        "llama.cpp seq state field %scell_count at offset %d is 0 (empty sequence)", sec, at));
  }
  if (section == 0) {
    view.cell_count = cell_count;
  } else if (cell_count != view.cell_count) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "llama.cpp seq state field %scell_count at offset %d is %d, the full-attention section "
        "holds %d (kvtier restores a sliding-window cache only with every token's rows)",
        sec, at, cell_count, view.cell_count));
  }
  // Cheap plausibility bound before looping over cells.
  if (uint64_t{cell_count} * expect.cell_bytes() > r.remaining()) {
    return absl::DataLossError(absl::StrFormat(
        "llama.cpp seq state field %scell_count at offset %d is %d: the %d bytes left cannot "
        "hold its cells",
        sec, at, cell_count, r.remaining()));
  }
  view.cell_offset.push_back(r.pos());
  for (uint32_t i = 0; i < cell_count; ++i) {
    at = r.pos();
    KVT_ASSIGN_OR_RETURN(const int32_t pos, r.Read<int32_t>("cell.pos"));
    if (pos != static_cast<int32_t>(i)) {
      return absl::DataLossError(absl::StrFormat(
          "llama.cpp seq state field %scell[%d].pos at offset %d is %d, expected %d (positions "
          "must be contiguous from 0)",
          sec, i, at, pos, i));
    }
    at = r.pos();
    KVT_ASSIGN_OR_RETURN(const uint32_t n_seq_id, r.Read<uint32_t>("cell.n_seq_id"));
    if (n_seq_id != 1) {
      return absl::DataLossError(absl::StrFormat(
          "llama.cpp seq state field %scell[%d].n_seq_id at offset %d is %d, expected 1", sec, i,
          at, n_seq_id));
    }
    if (expect.cell_ext) {  // judged per chunk by CheckTextCells
      if (absl::Status s = r.Skip(kCellExtBytes, "cell.ext"); !s.ok()) return s;
    }
    KVT_ASSIGN_OR_RETURN(const int32_t cell_seq, r.Read<int32_t>("cell.seq_id"));
    (void)cell_seq;
  }
  at = r.pos();
  KVT_ASSIGN_OR_RETURN(const uint32_t v_trans, r.Read<uint32_t>("v_trans"));
  if (v_trans > 1) {
    return absl::DataLossError(
        absl::StrFormat("llama.cpp seq state field %sv_trans at offset %d is %d, expected 0 or 1",
                        sec, at, v_trans));
  }
  if ((v_trans == 1) != expect.v_trans)
    return Mismatch(sec + "v_trans", at, v_trans, expect.v_trans);
  at = r.pos();
  KVT_ASSIGN_OR_RETURN(const uint32_t n_layer, r.Read<uint32_t>("n_layer"));
  if (n_layer != want_layers) return Mismatch(sec + "n_layer", at, n_layer, want_layers);
  if (uint64_t{n_layer} * kKLayerHeader > r.remaining()) {  // before sizing the offsets
    return absl::DataLossError(absl::StrFormat(
        "llama.cpp seq state field %sn_layer at offset %d is %d: the %d bytes left cannot hold "
        "its layer headers",
        sec, at, n_layer, r.remaining()));
  }

  const uint64_t cells = cell_count;
  view.k_offset.resize(layer0 + n_layer);
  view.v_offset.resize(layer0 + n_layer);
  for (uint32_t i = 0; i < n_layer; ++i) {
    const uint32_t l = layer0 + i;
    at = r.pos();
    KVT_ASSIGN_OR_RETURN(const int32_t k_type, r.Read<int32_t>("layer.k_type"));
    if (k_type != expect.type_k)
      return Mismatch(absl::StrCat("layer[", l, "].k_type"), at, k_type, expect.type_k);
    at = r.pos();
    KVT_ASSIGN_OR_RETURN(const uint64_t k_row, r.Read<uint64_t>("layer.k_row_bytes"));
    if (k_row != expect.k_row_bytes) {
      return Mismatch(absl::StrCat("layer[", l, "].k_row_bytes"), at, static_cast<int64_t>(k_row),
                      static_cast<int64_t>(expect.k_row_bytes));
    }
    view.k_offset[l] = r.pos();
    if (absl::Status s = r.SkipRows(cells, k_row, absl::StrCat("layer[", l, "].k_rows")); !s.ok())
      return s;
  }
  for (uint32_t i = 0; expect.has_v && i < n_layer; ++i) {
    const uint32_t l = layer0 + i;
    at = r.pos();
    KVT_ASSIGN_OR_RETURN(const int32_t v_type, r.Read<int32_t>("layer.v_type"));
    if (v_type != expect.type_v)
      return Mismatch(absl::StrCat("layer[", l, "].v_type"), at, v_type, expect.type_v);
    if (!expect.v_trans) {
      at = r.pos();
      KVT_ASSIGN_OR_RETURN(const uint64_t v_row, r.Read<uint64_t>("layer.v_row_bytes"));
      if (v_row != expect.v_row_bytes) {
        return Mismatch(absl::StrCat("layer[", l, "].v_row_bytes"), at, static_cast<int64_t>(v_row),
                        static_cast<int64_t>(expect.v_row_bytes));
      }
    } else {
      at = r.pos();
      KVT_ASSIGN_OR_RETURN(const uint32_t v_el, r.Read<uint32_t>("layer.v_elem_bytes"));
      if (v_el != expect.v_elem_bytes) {
        return Mismatch(absl::StrCat("layer[", l, "].v_elem_bytes"), at, v_el, expect.v_elem_bytes);
      }
      at = r.pos();
      KVT_ASSIGN_OR_RETURN(const uint32_t n_embd_v, r.Read<uint32_t>("layer.n_embd_v_gqa"));
      if (n_embd_v != expect.n_embd_v_gqa) {
        return Mismatch(absl::StrCat("layer[", l, "].n_embd_v_gqa"), at, n_embd_v,
                        expect.n_embd_v_gqa);
      }
    }
    view.v_offset[l] = r.pos();
    if (absl::Status s =
            r.SkipRows(cells, expect.v_row_bytes, absl::StrCat("layer[", l, "].v_data"));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SeqStateView> ParseSeqState(std::span<const std::byte> blob,
                                           const SeqStateSpec& expect) {
  if (absl::Status s = expect.Validate(); !s.ok()) return s;
  Reader r(blob);
  SeqStateView view;
  view.spec = expect;
  view.blob = blob;

  const uint64_t at = r.pos();
  KVT_ASSIGN_OR_RETURN(const uint32_t magic, r.Read<uint32_t>("magic"));
  if (magic != kSeqStateMagic) {
    return absl::DataLossError(
        absl::StrFormat("llama.cpp seq state field magic at offset %d is 0x%08x, expected 0x%08x",
                        at, magic, kSeqStateMagic));
  }
  KVT_ASSIGN_OR_RETURN(view.seq_id, r.Read<int32_t>("seq_id"));
  for (int section = 0; section < (expect.n_layer_swa > 0 ? 2 : 1); ++section) {
    if (absl::Status s = ParseSection(r, expect, section, view); !s.ok()) return s;
  }
  if (r.remaining() != 0) {
    return absl::DataLossError(absl::StrFormat(
        "llama.cpp seq state has %d bytes left over after the last layer (offset %d of %d)",
        r.remaining(), r.pos(), blob.size()));
  }
  return view;
}

namespace {

// InferSeqStateSpec with cell records of spec.cell_bytes() for this `cell_ext`.
absl::StatusOr<SeqStateSpec> InferWithCells(std::span<const std::byte> blob, bool cell_ext) {
  Reader r(blob);
  KVT_ASSIGN_OR_RETURN(const uint32_t magic, r.Read<uint32_t>("magic"));
  if (magic != kSeqStateMagic) {
    return absl::DataLossError(absl::StrFormat(
        "llama.cpp seq state field magic is 0x%08x, expected 0x%08x", magic, kSeqStateMagic));
  }
  KVT_ASSIGN_OR_RETURN(const int32_t seq_id, r.Read<int32_t>("seq_id"));
  (void)seq_id;
  KVT_ASSIGN_OR_RETURN(const uint32_t n_stream, r.Read<uint32_t>("n_stream"));
  if (n_stream != 1) {
    return absl::DataLossError(
        absl::StrFormat("llama.cpp seq state field n_stream is %d, expected 1", n_stream));
  }
  KVT_ASSIGN_OR_RETURN(const uint32_t cells, r.Read<uint32_t>("cell_count"));
  if (cells == 0)
    return absl::DataLossError("llama.cpp seq state field cell_count is 0 (empty sequence)");
  SeqStateSpec spec;
  spec.cell_ext = cell_ext;
  if (absl::Status s = r.SkipRows(cells, spec.cell_bytes(), "cells"); !s.ok()) return s;
  KVT_ASSIGN_OR_RETURN(const uint32_t v_trans, r.Read<uint32_t>("v_trans"));
  if (v_trans > 1)
    return absl::DataLossError(absl::StrFormat("llama.cpp seq state field v_trans is %d", v_trans));
  spec.v_trans = v_trans == 1;
  KVT_ASSIGN_OR_RETURN(spec.n_layer, r.Read<uint32_t>("n_layer"));
  if (spec.n_layer == 0) return absl::DataLossError("llama.cpp seq state field n_layer is 0");
  KVT_ASSIGN_OR_RETURN(spec.type_k, r.Read<int32_t>("layer.k_type"));
  KVT_ASSIGN_OR_RETURN(spec.k_row_bytes, r.Read<uint64_t>("layer.k_row_bytes"));
  if (spec.k_row_bytes == 0)
    return absl::DataLossError("llama.cpp seq state field k_row_bytes is 0");
  // Skip all K layers (assumed alike; ParseSeqState below checks it).
  uint64_t k_rows = 0, k_all = 0;
  if (__builtin_mul_overflow(uint64_t{cells}, spec.k_row_bytes, &k_rows) ||
      __builtin_add_overflow(k_rows, kKLayerHeader, &k_rows) ||
      __builtin_mul_overflow(k_rows, uint64_t{spec.n_layer}, &k_all)) {
    return absl::DataLossError(absl::StrFormat(
        "llama.cpp seq state: %d layers of %d cells x %d-byte K rows overflow 64 bits",
        spec.n_layer, cells, spec.k_row_bytes));
  }
  if (absl::Status s = r.Skip(k_all - kKLayerHeader, "k_layers"); !s.ok()) return s;
  if (r.remaining() == 0) {
    // No V layers: an MLA cache (one latent row per token and layer; llama-kv-cache.cpp
    // state_write_data skips layers without a V tensor).
    spec.has_v = false;
    spec.type_v = -1;
    spec.v_row_bytes = 0;
    spec.n_embd_v_gqa = 0;
    spec.v_elem_bytes = 0;
    absl::StatusOr<SeqStateView> view = ParseSeqState(blob, spec);
    if (!view.ok()) return view.status();
    return spec;
  }
  KVT_ASSIGN_OR_RETURN(spec.type_v, r.Read<int32_t>("layer.v_type"));
  if (!spec.v_trans) {
    KVT_ASSIGN_OR_RETURN(spec.v_row_bytes, r.Read<uint64_t>("layer.v_row_bytes"));
    spec.n_embd_v_gqa = static_cast<uint32_t>(spec.v_row_bytes);
    spec.v_elem_bytes = 1;
  } else {
    KVT_ASSIGN_OR_RETURN(spec.v_elem_bytes, r.Read<uint32_t>("layer.v_elem_bytes"));
    KVT_ASSIGN_OR_RETURN(spec.n_embd_v_gqa, r.Read<uint32_t>("layer.n_embd_v_gqa"));
    spec.v_row_bytes = uint64_t{spec.v_elem_bytes} * spec.n_embd_v_gqa;
  }
  // The rest of the V layers (assumed alike), then maybe a second section (iSWA).
  uint64_t v_rows = 0, v_rest = 0;
  if (__builtin_mul_overflow(uint64_t{cells}, spec.v_row_bytes, &v_rows) ||
      __builtin_add_overflow(v_rows, kVLayerHeader, &v_rest) ||
      __builtin_mul_overflow(v_rest, uint64_t{spec.n_layer} - 1, &v_rest) ||
      __builtin_add_overflow(v_rest, v_rows, &v_rest)) {
    return absl::DataLossError(absl::StrFormat(
        "llama.cpp seq state field v_data: %d layers of %d cells x %d-byte V rows overflow 64 "
        "bits",
        spec.n_layer, cells, spec.v_row_bytes));
  }
  if (absl::Status s = r.Skip(v_rest, "v_layers"); !s.ok()) return s;
  if (r.remaining() > 0) {
    KVT_ASSIGN_OR_RETURN(const uint32_t n_stream2, r.Read<uint32_t>("swa.n_stream"));
    (void)n_stream2;  // checked by ParseSeqState
    KVT_ASSIGN_OR_RETURN(const uint32_t cells2, r.Read<uint32_t>("swa.cell_count"));
    if (absl::Status s = r.SkipRows(cells2, spec.cell_bytes(), "swa.cells"); !s.ok()) return s;
    KVT_ASSIGN_OR_RETURN(const uint32_t v_trans2, r.Read<uint32_t>("swa.v_trans"));
    (void)v_trans2;
    KVT_ASSIGN_OR_RETURN(spec.n_layer_swa, r.Read<uint32_t>("swa.n_layer"));
    if (spec.n_layer_swa == 0 || uint64_t{spec.n_layer_swa} * kKLayerHeader > r.remaining()) {
      return absl::DataLossError(
          absl::StrFormat("llama.cpp seq state field swa.n_layer is %d with %d bytes left",
                          spec.n_layer_swa, r.remaining()));
    }
  }
  if (absl::Status s = spec.Validate(); !s.ok()) return absl::DataLossError(s.message());
  absl::StatusOr<SeqStateView> view = ParseSeqState(blob, spec);
  if (!view.ok()) return view.status();
  return spec;
}

}  // namespace

absl::StatusOr<SeqStateSpec> InferSeqStateSpec(std::span<const std::byte> blob) {
  absl::StatusOr<SeqStateSpec> plain = InferWithCells(blob, /*cell_ext=*/false);
  if (plain.ok()) return plain;
  // Read with 12-byte cells, a blob of 24-byte ones fails: its first cell's x, y and tok
  // land on seq_id, v_trans and n_layer, and the sizes read after them do not add up.
  absl::StatusOr<SeqStateSpec> ext = InferWithCells(blob, /*cell_ext=*/true);
  if (ext.ok()) return ext;
  return plain.status();
}

absl::Status CheckTextCells(const SeqStateView& view, uint32_t first, uint32_t count,
                            std::span<const int32_t> tokens) {
  if (uint64_t{first} + count > view.cell_count) {
    return absl::OutOfRangeError(
        absl::StrFormat("token range [%d, %d) is outside the %d cells of the state", first,
                        uint64_t{first} + count, view.cell_count));
  }
  if (!view.spec.cell_ext) return absl::OkStatus();
  if (!tokens.empty() && tokens.size() < count) {
    return absl::OutOfRangeError(
        absl::StrFormat("CheckTextCells: %d token ids for %d cells", tokens.size(), count));
  }
  for (size_t sec = 0; sec < view.cell_offset.size(); ++sec) {
    for (uint32_t i = first; i < first + count; ++i) {
      // Positions were checked by ParseSeqState: cell i holds position i.
      const uint64_t at = view.cell_offset[sec] + uint64_t{i} * view.spec.cell_bytes() + 4 + 4;
      CellExt ext;
      std::memcpy(&ext, view.blob.data() + at, sizeof ext);
      const int32_t pos = static_cast<int32_t>(i);
      const bool token_ok = tokens.empty() ? ext.tok >= 0 : ext.tok == tokens[i - first];
      if (ext.x != pos || ext.y != pos || !token_ok) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "llama.cpp seq state %scell[%d] at offset %d has the M-RoPE record x=%d y=%d tok=%d; "
            "a text token there has x = y = %d and tok = %s (kvtier stores and restores only "
            "text cells; an embedding input, e.g. an image, is not cut into chunks)",
            sec == 0 ? "" : "swa.", i, at, ext.x, ext.y, ext.tok, pos,
            tokens.empty() ? std::string("its token id >= 0") : absl::StrCat(tokens[i - first])));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ExtractChunkPayload(const SeqStateView& view, uint32_t first, uint32_t count,
                                 std::span<std::byte> payload, std::span<const int32_t> tokens) {
  const SeqStateSpec& spec = view.spec;
  if (uint64_t{first} + count > view.cell_count || count == 0) {
    return absl::OutOfRangeError(
        absl::StrFormat("token range [%d, %d) is outside the %d cells of the state", first,
                        uint64_t{first} + count, view.cell_count));
  }
  if (payload.size() != uint64_t{count} * spec.payload_bytes_per_token()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("payload is %d bytes, %d tokens need %d", payload.size(), count,
                        uint64_t{count} * spec.payload_bytes_per_token()));
  }
  if (absl::Status s = CheckTextCells(view, first, count, tokens); !s.ok()) return s;
  const PayloadLayout pl = PayloadOffsets(spec, count);
  const std::byte* src = view.blob.data();
  for (uint32_t l = 0; l < spec.total_layers(); ++l) {
    std::byte* dst = payload.data() + l * pl.layer_bytes;
    std::memcpy(dst, src + view.k_offset[l] + uint64_t{first} * spec.k_row_bytes, pl.k_bytes);
    std::byte* vdst = dst + pl.k_bytes;
    if (!spec.v_trans) {
      std::memcpy(vdst, src + view.v_offset[l] + uint64_t{first} * spec.v_row_bytes,
                  uint64_t{count} * spec.v_row_bytes);
    } else {
      // V^T: element j of cell c at (j * cell_count + c) * es  ->  payload row t, element j.
      const uint64_t es = spec.v_elem_bytes;
      const std::byte* vt = src + view.v_offset[l];
      for (uint32_t j = 0; j < spec.n_embd_v_gqa; ++j) {
        const std::byte* row = vt + (uint64_t{j} * view.cell_count + first) * es;
        std::byte* out = vdst + j * es;
        for (uint32_t t = 0; t < count; ++t) {
          std::memcpy(out + t * spec.v_row_bytes, row + t * es, es);
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace kvt::llamacpp
