// Pieces shared by the llama.cpp sequence-state reader (seq_state.cc), the builder
// (seq_state_builder.cc) and the whole-context state reader (context_state.cc): the
// bounds-checked field reader, the fixed field sizes of llama.cpp's format
// (llamacpp/seq_state.h) and the payload offsets. Not part of the public API.
#ifndef LLAMACPP_SRC_SEQ_STATE_INTERNAL_H_
#define LLAMACPP_SRC_SEQ_STATE_INTERNAL_H_

#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "llamacpp/seq_state.h"

namespace kvt::llamacpp::seq_state_internal {

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

inline absl::Status Mismatch(std::string_view field, uint64_t offset, int64_t got,
                             int64_t expected) {
  return absl::FailedPreconditionError(
      absl::StrFormat("llama.cpp seq state field %s at offset %d is %d, this engine expects %d",
                      field, offset, got, expected));
}

// Byte offsets of one token range inside a chunk payload.
struct PayloadLayout {
  uint64_t layer_bytes;  // count * (k_row + v_row)
  uint64_t k_bytes;      // count * k_row
};
inline PayloadLayout PayloadOffsets(const SeqStateSpec& spec, uint32_t count) {
  return {uint64_t{count} * (spec.k_row_bytes + spec.v_row_bytes),
          uint64_t{count} * spec.k_row_bytes};
}

// Header bytes before the first layer's K data, and per-layer header sizes.
constexpr uint64_t kKLayerHeader = 4 + 8;
constexpr uint64_t kVLayerHeader = 4 + 8;
constexpr uint64_t kVTransLayerHeader = 4 + 4 + 4;

}  // namespace kvt::llamacpp::seq_state_internal

#endif  // LLAMACPP_SRC_SEQ_STATE_INTERNAL_H_
