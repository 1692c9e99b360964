#include "kvstore/tier.h"

#include <memory>

#include "absl/strings/str_format.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/record_buffer.h"

namespace kvt {

std::string_view TierKindName(TierKind kind) {
  switch (kind) {
    case TierKind::kHost:
      return "host";
    case TierKind::kDisk:
      return "disk";
    case TierKind::kRemote:
      return "remote";
  }
  return "unknown";
}

absl::StatusOr<PutResult> Tier::PutInPlace(uint64_t record_bytes, const RecordFill& fill,
                                           const PutContext& context) {
  if (record_bytes < kChunkHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("PutInPlace: record_bytes = %d; a record has at least a %d-byte header",
                        record_bytes, kChunkHeaderBytes));
  }
  auto buf = std::make_unique<RecordBuffer>(RecordBuffer::Make(record_bytes));
  if (absl::Status s = fill(buf->span()); !s.ok()) return s;
  absl::StatusOr<ChunkHeader> header = DecodeChunkHeader(buf->span());
  if (!header.ok()) return header.status();
  PutContext inner = context;
  inner.view = false;
  absl::StatusOr<PutResult> result = Put(buf->span(), inner);
  if (!result.ok()) return result.status();
  result->key = header->key;
  if (context.view) {
    // The view owns the buffer: it is freed when the view is dropped.
    const std::span<const std::byte> bytes = buf->span();
    result->view = RecordView(
        bytes, +[](void*, void* token) { delete static_cast<RecordBuffer*>(token); }, nullptr,
        buf.release());
  }
  return result;
}

absl::StatusOr<ChunkKey> Tier::PutInPlace(uint64_t record_bytes, const RecordFill& fill) {
  absl::StatusOr<PutResult> result = PutInPlace(record_bytes, fill, PutContext{});
  if (!result.ok()) return result.status();
  return result->key;
}

std::vector<PinHandle> Tier::PinMany(std::span<const ChunkKey> keys) {
  std::vector<PinHandle> pins;
  pins.reserve(keys.size());
  for (const ChunkKey& key : keys) pins.push_back(Pin(key));
  return pins;
}

absl::StatusOr<uint64_t> Tier::CopyForWriteBack(const ChunkKey& key, std::span<std::byte> out) {
  return Get(key, out);
}

absl::StatusOr<RecordView> Tier::View(const ChunkKey& key) {
  return absl::UnimplementedError(absl::StrFormat(
      "tier '%s' cannot lend record %s in place; use Get", caps().name, key.ToHex()));
}

}  // namespace kvt
