// RemoteClient's shared-memory fast path: attach/detach a region, Put and Get through it.
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

}  // namespace kvt
