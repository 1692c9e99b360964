#include "record_writer.h"

#include <cstring>

#include "absl/strings/str_format.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/shm_copy.h"

namespace kvt::daemon {

absl::StatusOr<Admission> RecordWriter::Admit(std::span<const std::byte> record,
                                              const std::string& tenant, ChunkKey* key_out,
                                              std::optional<uint64_t> payload_checksum) {
  auto header = DecodeChunkHeader(record);
  if (!header.ok())
    return absl::InvalidArgumentError("data: not a valid chunk record: " +
                                      header.status().ToString());
  if (record.size() != header->record_bytes())
    return absl::InvalidArgumentError(absl::StrFormat("record_bytes: %d, the record header says %d",
                                                      record.size(), header->record_bytes()));
  if (header->key.is_zero()) return absl::InvalidArgumentError("data: record key is zero");
  if (config_->verify_on_put) {
    const DecodeExpectations expect{.ns = header->ns, .key = header->key};
    auto v = payload_checksum ? CheckChunkHeader(record, expect) : VerifyChunk(record, expect);
    // A mismatch is re-checked by VerifyChunk, which names it and counts the integrity error.
    if (v.ok() && payload_checksum && *payload_checksum != v->payload_checksum)
      v = VerifyChunk(record, expect);
    if (!v.ok())
      return absl::InvalidArgumentError("data: record failed verification: " +
                                        v.status().ToString());
  }
  *key_out = header->key;
  absl::StatusOr<Admission> a = tenancy_->Admit(*header, tenant);
  if (a.ok() && *a == Admission::kConflict) metrics_->AddPutConflict();
  return a;
}

PutAck RecordWriter::Ack() const {
  return config_->durability == Durability::kSync ? PutAck::kDurable : PutAck::kTopTier;
}

absl::StatusOr<ChunkKey> RecordWriter::Store(std::span<const std::byte> record,
                                             const std::string& tenant) {
  ChunkKey key;
  absl::StatusOr<Admission> a = Admit(record, tenant, &key, std::nullopt);
  if (!a.ok()) return a.status();
  if (*a == Admission::kConflict) return key;
  return store_->Write({.record = record, .ack = Ack()});
}

absl::StatusOr<ChunkKey> RecordWriter::StoreFromShm(std::span<const std::byte> src,
                                                    const std::string& tenant,
                                                    const ShmProgress* progress,
                                                    uint64_t src_offset) {
  ChunkKey key;
  bool conflict = false;
  const bool verify = config_->verify_on_put;
  const absl::Duration stall = absl::Milliseconds(config_->shm_stall_timeout_ms);
  uint64_t seen = 0;  // the last `ready` read (region offset)
  // Bytes of src the client has published, more than `have` (blocks; kvstore/shm_progress.h).
  auto available = [&](size_t have) -> absl::StatusOr<size_t> {
    if (progress == nullptr) return src.size();
    while (seen <= src_offset + have) {
      absl::StatusOr<uint64_t> r =
          progress->WaitBeyond(seen, src_offset + src.size(), stall, ClockOrSystem(clock_));
      if (!r.ok())
        return absl::Status(r.status().code(),
                            absl::StrFormat("shm Put after %d of %d bytes: %s", have, src.size(),
                                            r.status().message()));
      seen = *r;
    }
    return seen - src_offset;
  };
  // The only read of the client's memory is the copy into the tier's reserved record;
  // every check after it, and the store, read that copy (issue 11 #7).
  WriteRequest write;
  write.record_bytes = src.size();
  write.ack = Ack();
  write.fill = [&](std::span<std::byte> dst) -> absl::Status {
    std::optional<uint64_t> payload_checksum;
    if (verify || progress != nullptr) {
      absl::StatusOr<uint64_t> h = CopyRecordHashingPayload(src, dst, available);
      if (!h.ok()) return h.status();
      if (verify) payload_checksum = *h;
    } else {
      std::memcpy(dst.data(), src.data(), src.size());
    }
    shm_copy_bytes_.fetch_add(src.size(), std::memory_order_relaxed);
    absl::StatusOr<Admission> a = Admit(dst, tenant, &key, payload_checksum);
    if (!a.ok()) return a.status();
    if (*a == Admission::kConflict) {
      conflict = true;  // acknowledged without storing: abandon the reservation
      return absl::AbortedError("put conflict: not stored");
    }
    return absl::OkStatus();
  };
  absl::StatusOr<ChunkKey> stored = store_->Write(std::move(write));
  if (conflict) return key;
  return stored;
}

}  // namespace kvt::daemon
