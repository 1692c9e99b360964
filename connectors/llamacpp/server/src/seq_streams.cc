#include "kvtier_server/seq_streams.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvt::llamacpp {
namespace {
constexpr size_t kStreamCountOffset = 8;  // after u32 magic, i32 seq_id

uint32_t ReadU32(std::span<const std::byte> b, size_t off) {
  uint32_t v;
  std::memcpy(&v, b.data() + off, sizeof v);
  return v;
}
void WriteU32(std::vector<std::byte>& b, size_t off, uint32_t v) {
  std::memcpy(b.data() + off, &v, sizeof v);
}
}  // namespace

absl::StatusOr<uint32_t> SeqStateStreamCount(std::span<const std::byte> blob) {
  if (blob.size() < kStreamCountOffset + 4) {
    return absl::DataLossError(
        absl::StrCat("seq state of ", blob.size(), " bytes has no stream count"));
  }
  return ReadU32(blob, kStreamCountOffset);
}

absl::StatusOr<std::vector<std::byte>> ToSingleStream(std::span<const std::byte> blob) {
  absl::StatusOr<uint32_t> n = SeqStateStreamCount(blob);
  if (!n.ok()) return n.status();
  if (*n == 1) return std::vector<std::byte>(blob.begin(), blob.end());
  // Leading empty streams are 4 zero bytes each; the one non-empty stream follows, and the
  // empty streams after it are 4 zero bytes each at the very end.
  size_t pos = kStreamCountOffset + 4;
  uint32_t s = 0;
  while (s < *n && pos + 4 <= blob.size() && ReadU32(blob, pos) == 0) {
    pos += 4;
    ++s;
  }
  if (s == *n || pos + 4 > blob.size()) {
    return absl::DataLossError(
        absl::StrCat("seq state with ", *n, " streams has no non-empty stream"));
  }
  const size_t tail = 4 * static_cast<size_t>(*n - s - 1);
  if (blob.size() < pos + 4 + tail) return absl::DataLossError("seq state streams truncated");
  for (size_t i = blob.size() - tail; i < blob.size(); ++i) {
    if (blob[i] != std::byte{0}) {
      return absl::DataLossError(
          absl::StrCat("seq state stream ", s, " is not the only non-empty one of ", *n));
    }
  }
  std::vector<std::byte> out(blob.begin(), blob.begin() + kStreamCountOffset + 4);
  WriteU32(out, kStreamCountOffset, 1);
  out.insert(out.end(), blob.begin() + static_cast<long>(pos),
             blob.end() - static_cast<long>(tail));
  return out;
}

absl::StatusOr<std::vector<std::byte>> ToStreams(std::span<const std::byte> blob,
                                                 uint32_t n_stream) {
  absl::StatusOr<uint32_t> n = SeqStateStreamCount(blob);
  if (!n.ok()) return absl::InvalidArgumentError(n.status().message());
  if (*n != 1 || n_stream == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ToStreams: blob has ", *n, " streams, target ", n_stream));
  }
  std::vector<std::byte> out(blob.begin(), blob.end());
  WriteU32(out, kStreamCountOffset, n_stream);
  out.resize(out.size() + 4 * static_cast<size_t>(n_stream - 1), std::byte{0});
  return out;
}

}  // namespace kvt::llamacpp
