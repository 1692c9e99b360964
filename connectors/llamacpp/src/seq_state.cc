#include "llamacpp/seq_state.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvt::llamacpp {
namespace {

constexpr uint64_t kCellMetaBytes = 4 + 4 + 4;  // pos, n_seq_id, seq_id (the smallest cell)
constexpr uint64_t kCellExtBytes = 4 + 4 + 4;   // llama_kv_cell_ext: x, y, tok

// llama_kv_cell_ext as llama.cpp writes it after a cell's n_seq_id.
struct CellExt {
  int32_t x = 0;
  int32_t y = 0;
  int32_t tok = -1;
};
static_assert(sizeof(CellExt) == kCellExtBytes);

// Bounds-checked little-endian reader; every failure names the field and offset.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> data) : data_(data) {}

  template <typename T>
  absl::StatusOr<T> Read(std::string_view field) {
    if (data_.size() - pos_ < sizeof(T) || pos_ > data_.size()) {
      return Truncated(field, sizeof(T));
    }
    T value;
    std::memcpy(&value, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }
  // Skips `n` bytes of data (rows), checking they are present.
  absl::Status Skip(uint64_t n, std::string_view field) {
    if (n > data_.size() - pos_) return Truncated(field, n);
    pos_ += n;
    return absl::OkStatus();
  }
  // Skips `count` rows of `row_bytes` each; a product that overflows 64 bits is
  // refused like a truncation (found by tests/fuzz/fuzz_seq_state).
  absl::Status SkipRows(uint64_t count, uint64_t row_bytes, std::string_view field) {
    uint64_t n = 0;
    if (__builtin_mul_overflow(count, row_bytes, &n)) {
      return absl::DataLossError(absl::StrFormat(
          "llama.cpp seq state field %s at offset %d: %d rows of %d bytes overflow 64 bits", field,
          pos_, count, row_bytes));
    }
    return Skip(n, field);
  }
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return data_.size() - pos_; }

 private:
  absl::Status Truncated(std::string_view field, uint64_t need) const {
    return absl::DataLossError(absl::StrFormat(
        "llama.cpp seq state truncated at %s (offset %d: need %d bytes, %d left of %d)", field,
        pos_, need, data_.size() - pos_, data_.size()));
  }
  std::span<const std::byte> data_;
  uint64_t pos_ = 0;
};

#define KVT_ASSIGN_OR_RETURN_IMPL(var, lhs, expr) \
  auto var = (expr);                              \
  if (!var.ok()) return var.status();             \
  lhs = *std::move(var)
#define KVT_CONCAT_INNER(a, b) a##b
#define KVT_CONCAT(a, b) KVT_CONCAT_INNER(a, b)
#define KVT_ASSIGN_OR_RETURN(lhs, expr) \
  KVT_ASSIGN_OR_RETURN_IMPL(KVT_CONCAT(_status_or_, __LINE__), lhs, expr)

absl::Status Mismatch(std::string_view field, uint64_t offset, int64_t got, int64_t expected) {
  return absl::FailedPreconditionError(
      absl::StrFormat("llama.cpp seq state field %s at offset %d is %d, this engine expects %d",
                      field, offset, got, expected));
}

// Byte offsets of one token range inside a chunk payload.
struct PayloadLayout {
  uint64_t layer_bytes;  // count * (k_row + v_row)
  uint64_t k_bytes;      // count * k_row
};
PayloadLayout PayloadOffsets(const SeqStateSpec& spec, uint32_t count) {
  return {uint64_t{count} * (spec.k_row_bytes + spec.v_row_bytes),
          uint64_t{count} * spec.k_row_bytes};
}

// Header bytes before the first layer's K data, and per-layer header sizes.
constexpr uint64_t kKLayerHeader = 4 + 8;
constexpr uint64_t kVLayerHeader = 4 + 8;
constexpr uint64_t kVTransLayerHeader = 4 + 4 + 4;

}  // namespace

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

SeqStateBuilder::SeqStateBuilder(const SeqStateSpec& spec, uint32_t cell_count, int32_t seq_id)
    : spec_(spec), cell_count_(cell_count), seq_id_(seq_id) {}

absl::StatusOr<SeqStateBuilder> SeqStateBuilder::Create(const SeqStateSpec& spec,
                                                        uint32_t cell_count, int32_t seq_id,
                                                        std::vector<std::byte> storage,
                                                        std::span<const int32_t> tokens) {
  if (absl::Status s = spec.Validate(); !s.ok()) return s;
  if (cell_count == 0) return absl::InvalidArgumentError("SeqStateBuilder: cell_count is 0");
  SeqStateBuilder b(spec, cell_count, seq_id);
  if (spec.cell_ext) {
    // Each cell's ext record is written as a text token's: it needs the token id.
    if (tokens.size() < cell_count) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "SeqStateBuilder: an M-RoPE state of %d cells needs their token ids, got %d", cell_count,
          tokens.size()));
    }
    tokens = tokens.first(cell_count);
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i] < 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("SeqStateBuilder: token id %d of cell %d is negative", tokens[i], i));
      }
    }
    b.tokens_.assign(tokens.begin(), tokens.end());
  }
  const uint64_t bytes = SeqStateBytes(spec, cell_count);
  if (storage.size() >= bytes) {
    b.blob_ = std::move(storage);  // no allocation, no zeroing
  } else if (storage.capacity() >= bytes) {
    storage.resize(bytes);  // within capacity: no allocation; only the growth is zeroed
    b.blob_ = std::move(storage);
  } else {
    b.blob_.assign(bytes, std::byte{0});
  }
  b.blob_bytes_ = bytes;
  std::byte* p = b.blob_.data();
  auto put = [&p](const auto& value) {
    std::memcpy(p, &value, sizeof(value));
    p += sizeof(value);
  };
  put(kSeqStateMagic);
  put(seq_id);
  const uint64_t cells = cell_count;
  b.k_offset_.resize(spec.total_layers());
  b.v_offset_.resize(spec.total_layers());
  for (int section = 0; section < (spec.n_layer_swa > 0 ? 2 : 1); ++section) {
    const uint32_t layer0 = section == 0 ? 0 : spec.n_layer;
    const uint32_t n_layer = section == 0 ? spec.n_layer : spec.n_layer_swa;
    put(uint32_t{1});  // n_stream
    put(cell_count);
    for (uint32_t i = 0; i < cell_count; ++i) {
      put(static_cast<int32_t>(i));
      put(uint32_t{1});
      if (spec.cell_ext) {
        // What apply_ubatch writes for a text token: its position broadcast to the 2D
        // position, and its token id.
        put(CellExt{static_cast<int32_t>(i), static_cast<int32_t>(i), b.tokens_[i]});
      }
      put(seq_id);
    }
    put(uint32_t{spec.v_trans ? 1u : 0u});
    put(n_layer);
    for (uint32_t l = layer0; l < layer0 + n_layer; ++l) {
      put(spec.type_k);
      put(spec.k_row_bytes);
      b.k_offset_[l] = static_cast<uint64_t>(p - b.blob_.data());
      p += cells * spec.k_row_bytes;
    }
    for (uint32_t l = layer0; spec.has_v && l < layer0 + n_layer; ++l) {
      put(spec.type_v);
      if (!spec.v_trans) {
        put(spec.v_row_bytes);
      } else {
        put(spec.v_elem_bytes);
        put(spec.n_embd_v_gqa);
      }
      b.v_offset_[l] = static_cast<uint64_t>(p - b.blob_.data());
      p += cells * spec.v_row_bytes;
    }
  }
  return b;
}

absl::Status SeqStateBuilder::PutChunk(uint32_t first, uint32_t count,
                                       std::span<const std::byte> payload) {
  if (count == 0 || uint64_t{first} + count > cell_count_) {
    return absl::OutOfRangeError(
        absl::StrFormat("token range [%d, %d) is outside the %d cells being built", first,
                        uint64_t{first} + count, cell_count_));
  }
  if (payload.size() != uint64_t{count} * spec_.payload_bytes_per_token()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("payload is %d bytes, %d tokens need %d", payload.size(), count,
                        uint64_t{count} * spec_.payload_bytes_per_token()));
  }
  const PayloadLayout pl = PayloadOffsets(spec_, count);
  std::byte* dst = blob_.data();
  for (uint32_t l = 0; l < spec_.total_layers(); ++l) {
    const std::byte* src = payload.data() + l * pl.layer_bytes;
    std::memcpy(dst + k_offset_[l] + uint64_t{first} * spec_.k_row_bytes, src, pl.k_bytes);
    const std::byte* vsrc = src + pl.k_bytes;
    if (!spec_.v_trans) {
      std::memcpy(dst + v_offset_[l] + uint64_t{first} * spec_.v_row_bytes, vsrc,
                  uint64_t{count} * spec_.v_row_bytes);
    } else {
      const uint64_t es = spec_.v_elem_bytes;
      std::byte* vt = dst + v_offset_[l];
      for (uint32_t j = 0; j < spec_.n_embd_v_gqa; ++j) {
        std::byte* row = vt + (uint64_t{j} * cell_count_ + first) * es;
        const std::byte* in = vsrc + j * es;
        for (uint32_t t = 0; t < count; ++t) {
          std::memcpy(row + t * es, in + t * spec_.v_row_bytes, es);
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status SeqStateBuilder::CopyPrefixFrom(const SeqStateView& view, uint32_t count) {
  const SeqStateSpec& vs = view.spec;
  if (vs.n_layer != spec_.n_layer || vs.type_k != spec_.type_k || vs.type_v != spec_.type_v ||
      vs.k_row_bytes != spec_.k_row_bytes || vs.v_row_bytes != spec_.v_row_bytes ||
      vs.v_trans != spec_.v_trans || vs.has_v != spec_.has_v ||
      vs.n_layer_swa != spec_.n_layer_swa ||
      (spec_.v_trans &&
       (vs.n_embd_v_gqa != spec_.n_embd_v_gqa || vs.v_elem_bytes != spec_.v_elem_bytes))) {
    return absl::FailedPreconditionError(
        absl::StrFormat("CopyPrefixFrom: state spec %s differs from the one being built (%s)",
                        vs.DebugString(), spec_.DebugString()));
  }
  if (count == 0 || count > view.cell_count || count > cell_count_) {
    return absl::OutOfRangeError(
        absl::StrFormat("CopyPrefixFrom: %d tokens, source holds %d and target %d cells", count,
                        view.cell_count, cell_count_));
  }
  // The rows only are copied: the source's cells must be the ones this builder wrote.
  if (absl::Status s = CheckTextCells(
          view, 0, count, std::span<const int32_t>(tokens_).first(spec_.cell_ext ? count : 0));
      !s.ok()) {
    return s;
  }
  const std::byte* src = view.blob.data();
  std::byte* dst = blob_.data();
  for (uint32_t l = 0; l < spec_.total_layers(); ++l) {
    std::memcpy(dst + k_offset_[l], src + view.k_offset[l], uint64_t{count} * spec_.k_row_bytes);
    if (!spec_.v_trans) {
      std::memcpy(dst + v_offset_[l], src + view.v_offset[l], uint64_t{count} * spec_.v_row_bytes);
    } else {
      // V^T: element row j holds cell_count elements; copy the first `count` of each.
      const uint64_t es = spec_.v_elem_bytes;
      for (uint32_t j = 0; j < spec_.n_embd_v_gqa; ++j) {
        std::memcpy(dst + v_offset_[l] + uint64_t{j} * cell_count_ * es,
                    src + view.v_offset[l] + uint64_t{j} * view.cell_count * es, count * es);
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::byte>> SeqStateBuilder::Truncated(uint32_t cells) const {
  if (cells == 0 || cells > cell_count_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("Truncated(%d): expected 1..%d cells", cells, cell_count_));
  }
  absl::StatusOr<SeqStateView> view = ParseSeqState(blob(), spec_);
  if (!view.ok()) return view.status();
  std::vector<std::byte> payload(uint64_t{cells} * spec_.payload_bytes_per_token());
  if (absl::Status s = ExtractChunkPayload(*view, 0, cells, payload); !s.ok()) return s;
  absl::StatusOr<SeqStateBuilder> out = Create(spec_, cells, seq_id_, {}, tokens_);
  if (!out.ok()) return out.status();
  if (absl::Status s = out->PutChunk(0, cells, payload); !s.ok()) return s;
  return std::move(*out).TakeBlob();
}

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
