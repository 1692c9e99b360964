#include "kvstore/tier.h"

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

absl::StatusOr<ChunkKey> Tier::PutInPlace(uint64_t record_bytes, const RecordFill& fill) {
  if (record_bytes < kChunkHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("PutInPlace: record_bytes = %d; a record has at least a %d-byte header",
                        record_bytes, kChunkHeaderBytes));
  }
  RecordBuffer buf = RecordBuffer::Make(record_bytes);
  if (absl::Status s = fill(buf.span()); !s.ok()) return s;
  absl::StatusOr<ChunkHeader> header = DecodeChunkHeader(buf.span());
  if (!header.ok()) return header.status();
  if (absl::Status s = Put(buf.span()); !s.ok()) return s;
  return header->key;
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
