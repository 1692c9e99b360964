// SeqStateBuilder (llamacpp/seq_state.h): a sequence state written from chunk payloads.
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "llamacpp/seq_state.h"
#include "seq_state_internal.h"

namespace kvt::llamacpp {

using seq_state_internal::CellExt;
using seq_state_internal::PayloadLayout;
using seq_state_internal::PayloadOffsets;

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
      vs.n_layer_swa != spec_.n_layer_swa || vs.cell_ext != spec_.cell_ext ||
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

}  // namespace kvt::llamacpp
