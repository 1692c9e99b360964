// RemoteClient's shared-memory fast path: attach/detach a region, Put and Get through it.
#include "kvstore/shm_progress.h"
#include "remote_client_impl.h"

namespace kvt {

absl::StatusOr<std::unique_ptr<ShmSession>> RemoteClient::AttachShm(uint64_t bytes) {
  pb::ShmAttachRequest req;
  req.set_protocol_version(kKvtierProtocolVersion);
  req.set_bytes(bytes);
  pb::ShmAttachResponse resp;
  absl::Status s = impl_->Call([&](pb::KvTier::Stub& stub, grpc::ClientContext& ctx) {
    return stub.ShmAttach(&ctx, req, &resp);
  });
  if (!s.ok()) return s;
  auto session = std::make_unique<ShmSession>();
  session->region_id = resp.region_id();
  auto region = ShmRegion::Open(resp.path(), resp.bytes());
  if (!region.ok()) {
    (void)DetachShm(*session);
    return absl::FailedPreconditionError(absl::StrFormat(
        "AttachShm: cannot map the daemon's region (%s); not on the same host or another user?",
        region.status().ToString()));
  }
  session->region = std::move(*region);
  return session;
}

absl::Status RemoteClient::DetachShm(const ShmSession& session) {
  pb::ShmDetachRequest req;
  req.set_protocol_version(kKvtierProtocolVersion);
  req.set_region_id(session.region_id);
  pb::ShmDetachResponse resp;
  return impl_->Call([&](pb::KvTier::Stub& stub, grpc::ClientContext& ctx) {
    return stub.ShmDetach(&ctx, req, &resp);
  });
}

absl::Status RemoteClient::PutShm(const ShmSession& session, uint64_t offset, uint64_t length) {
  return impl_->Call([&](pb::KvTier::Stub& stub, grpc::ClientContext& ctx) {
    pb::PutResponse resp;
    auto writer = stub.Put(&ctx, &resp);
    pb::PutRequest req;
    req.set_protocol_version(kKvtierProtocolVersion);
    req.set_record_bytes(length);
    req.mutable_shm()->set_region_id(session.region_id);
    req.mutable_shm()->set_offset(offset);
    req.mutable_shm()->set_length(length);
    if (writer->Write(req)) writer->WritesDone();
    grpc::Status st = writer->Finish();
    if (st.ok() && resp.records_stored() != 1)
      return grpc::Status(grpc::StatusCode::INTERNAL, "PutShm: record not acknowledged");
    return st;
  });
}

absl::StatusOr<uint64_t> RemoteClient::GetShm(const ShmSession& session, const ChunkKey& key,
                                              uint64_t offset, uint64_t capacity) {
  pb::GetRequest req;
  req.set_protocol_version(kKvtierProtocolVersion);
  ToProto(key, req.add_keys());
  req.mutable_shm()->set_region_id(session.region_id);
  req.mutable_shm()->set_offset(offset);
  req.mutable_shm()->set_length(capacity);
  absl::StatusOr<uint64_t> result = absl::NotFoundError("GetShm: no answer");
  absl::Status s = impl_->Call([&](pb::KvTier::Stub&, grpc::ClientContext& ctx) {
    auto reader = impl_->StartRawGet(ctx, req);
    return ReadOneRecord(
        reader.get(), ctx,
        [](uint64_t) -> absl::StatusOr<std::span<std::byte>> {
          return absl::InternalError("GetShm: daemon sent data instead of an shm slice");
        },
        &result);
  });
  if (!s.ok()) return s;
  return result;
}

namespace {

absl::Status CheckSlot(const ShmSession& session, uint64_t slot_offset, uint64_t slot_bytes,
                       const char* what) {
  if (session.broken.load(std::memory_order_acquire))
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: the shm session is broken (an earlier progressive Get failed while the daemon "
        "may still write its slot); attach a new region",
        what));
  if (slot_offset % 64 != 0 || slot_bytes <= kShmProgressBlockBytes ||
      !session.region->Contains(slot_offset, slot_bytes))
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: slot [%d, +%d) is not a 64-byte aligned range of more than %d bytes in the "
        "%d-byte region",
        what, slot_offset, slot_bytes, kShmProgressBlockBytes, session.region->size()));
  return absl::OkStatus();
}

void SetProgressiveSlice(const ShmSession& session, uint64_t slot_offset, uint64_t length,
                         pb::ShmSlice* sl) {
  sl->set_region_id(session.region_id);
  sl->set_offset(slot_offset + kShmProgressBlockBytes);
  sl->set_length(length);
  sl->set_progressive(true);
  sl->set_progress_offset(slot_offset);
}

}  // namespace

absl::Status RemoteClient::PutShmFrom(ShmSession& session, uint64_t slot_offset,
                                      uint64_t slot_bytes, std::span<const std::byte> record) {
  if (absl::Status s = CheckSlot(session, slot_offset, slot_bytes, "PutShmFrom"); !s.ok()) return s;
  if (record.size() > slot_bytes - kShmProgressBlockBytes)
    return absl::InvalidArgumentError(absl::StrFormat(
        "PutShmFrom: a %d-byte record does not fit the %d-byte slot", record.size(), slot_bytes));
  const uint64_t at = slot_offset + kShmProgressBlockBytes;
  ShmProgress progress(session.region->data() + slot_offset);
  return impl_->Call([&](pb::KvTier::Stub& stub, grpc::ClientContext& ctx) {
    progress.Reset(at);  // also on a retry: the daemon waits for bytes published after it
    pb::PutResponse resp;
    auto writer = stub.Put(&ctx, &resp);
    pb::PutRequest req;
    req.set_protocol_version(kKvtierProtocolVersion);
    req.set_record_bytes(record.size());
    SetProgressiveSlice(session, slot_offset, record.size(), req.mutable_shm());
    // The request first: the daemon's worker copies each piece as it is published.
    if (writer->Write(req)) {
      CopyPublishing(record, session.region->data() + at, at, progress);
      writer->WritesDone();
    }
    grpc::Status st = writer->Finish();
    if (st.ok() && resp.records_stored() != 1)
      return grpc::Status(grpc::StatusCode::INTERNAL, "PutShmFrom: record not acknowledged");
    return st;
  });
}

absl::StatusOr<uint64_t> RemoteClient::GetShmInto(ShmSession& session, const ChunkKey& key,
                                                  uint64_t slot_offset, uint64_t slot_bytes,
                                                  std::span<std::byte> out, uint64_t lease_id) {
  if (absl::Status s = CheckSlot(session, slot_offset, slot_bytes, "GetShmInto"); !s.ok()) return s;
  const uint64_t start = slot_offset + kShmProgressBlockBytes;
  const uint64_t end = slot_offset + slot_bytes;
  pb::GetRequest req;
  req.set_protocol_version(kKvtierProtocolVersion);
  ToProto(key, req.add_keys());
  if (lease_id != 0) req.set_lease_id(lease_id);
  SetProgressiveSlice(session, slot_offset, slot_bytes - kShmProgressBlockBytes, req.mutable_shm());
  ShmProgress progress(session.region->data() + slot_offset);
  const absl::Duration stall = absl::FromChrono(options_.deadline);
  absl::StatusOr<uint64_t> result = absl::NotFoundError("GetShmInto: no answer");
  // Whether the daemon is known to be done writing the slot: it answered a record it had
  // written whole, or every byte of a progressive one was published.
  bool settled = false, answered = false;
  absl::Status s = impl_->Call([&](pb::KvTier::Stub&, grpc::ClientContext& ctx) {
    progress.Reset(start);
    settled = answered = false;
    auto reader = impl_->StartRawGet(ctx, req);
    return ReadOneRecord(
        reader.get(), ctx,
        [](uint64_t) -> absl::StatusOr<std::span<std::byte>> {
          return absl::InternalError("GetShmInto: daemon sent data instead of an shm slice");
        },
        &result,
        [&](uint64_t offset, uint64_t bytes, bool progressive) -> absl::Status {
          answered = true;
          if (offset < start || offset > end || bytes > end - offset)
            return absl::InternalError(
                absl::StrFormat("GetShmInto: daemon answered [%d, +%d), outside the slot [%d, %d)",
                                offset, bytes, start, end));
          if (bytes > out.size()) {
            // Let a progressive copy finish first, so the slot is free when this returns.
            for (uint64_t seen = 0; progressive && seen < offset + bytes;) {
              absl::StatusOr<uint64_t> r = progress.WaitBeyond(seen, end, stall, *impl_->clock_);
              if (!r.ok()) return r.status();
              seen = *r;
            }
            settled = true;
            return absl::OutOfRangeError(absl::StrFormat(
                "GetShmInto: record needs %d bytes, buffer has %d", bytes, out.size()));
          }
          std::span<std::byte> dst = out.first(bytes);
          if (!progressive) {  // written whole before the answer
            settled = true;
            CopyStreaming(dst.data(), session.region->data() + offset, bytes);
            return absl::OkStatus();
          }
          absl::Status c = CopyAsPublished(session.region->data() + offset, offset, dst, progress,
                                           end, stall, *impl_->clock_);
          settled = c.ok();
          return c;
        });
  });
  // A miss, or a record too big for the slot, is answered without writing the slot.
  const bool unwritten = s.ok() && !answered &&
                         (absl::IsNotFound(result.status()) || absl::IsOutOfRange(result.status()));
  if (!settled && !unwritten) session.broken.store(true, std::memory_order_release);
  if (!s.ok()) return s;
  return result;
}

}  // namespace kvt
