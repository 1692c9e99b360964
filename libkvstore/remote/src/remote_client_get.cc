// RemoteClient::Get: reads a record from the raw GetResponse stream without copying
// the data field twice (ScanGetResponse finds it in the serialised message).
#include "remote_client_impl.h"

namespace kvt {

namespace {

// One GetResponse message as read from the wire, except `data`, whose place is noted.
struct RawGetResponse {
  bool found = false, header = false, has_shm = false, shm_overflow = false;
  bool shm_progressive = false;  // ShmSlice.progressive: the bytes follow the message
  uint64_t shm_offset = 0;
  uint64_t record_bytes = 0;
  int data_pos = -1;  // byte offset of the `data` bytes in the message; -1 = no data field
  uint32_t data_len = 0;
};

// Reads the ShmSlice fields a client needs (offset, progressive) from the next `len` bytes.
bool ScanShmSlice(google::protobuf::io::CodedInputStream* in, uint32_t len, RawGetResponse* out) {
  using google::protobuf::internal::WireFormatLite;
  const auto limit = in->PushLimit(static_cast<int>(len));
  bool ok = true;
  for (;;) {
    const uint32_t tag = in->ReadTag();
    if (tag == 0) break;
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    uint64_t v = 0;
    if ((field == 2 || field == 4) &&
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_VARINT) {
      ok = in->ReadVarint64(&v);
      if (field == 2) out->shm_offset = v;
      if (field == 4) out->shm_progressive = v != 0;
    } else {
      ok = WireFormatLite::SkipField(in, tag);
    }
    if (!ok) break;
  }
  ok = ok && in->ConsumedEntireMessage();
  in->PopLimit(limit);
  return ok;
}

// Scans a serialised GetResponse without copying `data` (the daemon writes the record
// bytes as the last field, but any field order is accepted).
absl::Status ScanGetResponse(grpc::ByteBuffer* bb, RawGetResponse* out) {
  using google::protobuf::internal::WireFormatLite;
  grpc::ProtoBufferReader reader(bb);
  if (!reader.status().ok())
    return absl::InternalError("Get: unreadable response: " + reader.status().error_message());
  google::protobuf::io::CodedInputStream in(&reader);
  *out = RawGetResponse{};
  for (;;) {
    const uint32_t tag = in.ReadTag();
    if (tag == 0) break;
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const auto wire = WireFormatLite::GetTagWireType(tag);
    uint64_t v = 0;
    uint32_t len = 0;
    bool ok = true;
    if (field >= 1 && field <= 8 && field != 4 && field != 5) {
      ok = wire == WireFormatLite::WIRETYPE_VARINT && in.ReadVarint64(&v);
      if (field == 2) out->found = v != 0;
      if (field == 3) out->record_bytes = v;
      if (field == 6) out->shm_overflow = v != 0;
      if (field == 8) out->header = v != 0;
    } else if (field == 4 || field == 5) {
      ok = wire == WireFormatLite::WIRETYPE_LENGTH_DELIMITED && in.ReadVarint32(&len);
      if (ok && field == 4) {
        out->data_pos = in.CurrentPosition();
        out->data_len = len;
      }
      if (ok && field == 5) {
        out->has_shm = true;
        ok = ScanShmSlice(&in, len, out);
      } else {
        ok = ok && in.Skip(static_cast<int>(len));
      }
    } else {
      ok = WireFormatLite::SkipField(&in, tag);
    }
    if (!ok)
      return absl::InternalError(absl::StrFormat("Get: malformed response (field %d)", field));
  }
  if (!in.ConsumedEntireMessage()) return absl::InternalError("Get: malformed response");
  return absl::OkStatus();
}

// Copies the `data` bytes of `msg` (located by ScanGetResponse) straight into `dest`.
bool CopyData(grpc::ByteBuffer* bb, const RawGetResponse& msg, std::byte* dest) {
  grpc::ProtoBufferReader reader(bb);
  if (!reader.status().ok() || !reader.Skip(msg.data_pos)) return false;
  uint64_t got = 0;
  const void* p = nullptr;
  int n = 0;
  while (got < msg.data_len && reader.Next(&p, &n)) {
    const uint64_t take = std::min<uint64_t>(static_cast<uint64_t>(n), msg.data_len - got);
    std::memcpy(dest + got, p, take);
    got += take;
  }
  return got == msg.data_len;
}

}  // namespace

// Reads a Get stream for one key into the span returned by `dest(record_bytes)`. Each
// GetResponse is read as raw bytes and its `data` copied from the received slices into
// the destination directly (no protobuf string in between).
grpc::Status ReadOneRecord(
    grpc::ClientReader<grpc::ByteBuffer>* reader, grpc::ClientContext& ctx,
    const std::function<absl::StatusOr<std::span<std::byte>>(uint64_t)>& dest,
    absl::StatusOr<uint64_t>* result, const ShmAnswerFn& on_shm) {
  grpc::ByteBuffer bb;
  RawGetResponse resp;
  bool seen_header = false;
  uint64_t total = 0, got = 0;
  std::span<std::byte> out;
  *result = absl::NotFoundError("Get: no answer");
  while (reader->Read(&bb)) {
    if (absl::Status s = ScanGetResponse(&bb, &resp); !s.ok()) {
      *result = s;
      ctx.TryCancel();
      break;
    }
    if (resp.header) {
      seen_header = true;
      if (!resp.found) {
        *result = absl::NotFoundError("Get: miss");
        continue;
      }
      total = resp.record_bytes;
      if (resp.has_shm) {
        *result = resp.shm_overflow
                      ? absl::StatusOr<uint64_t>(absl::OutOfRangeError(absl::StrFormat(
                            "Get: record needs %d bytes, shm slice too small", total)))
                      : absl::StatusOr<uint64_t>(total);
        if (result->ok() && on_shm) {
          if (absl::Status s = on_shm(resp.shm_offset, total, resp.shm_progressive); !s.ok()) {
            *result = s;
            ctx.TryCancel();
            break;
          }
        }
        continue;
      }
      auto d = dest(total);
      if (!d.ok()) {
        *result = d.status();
        ctx.TryCancel();
        break;
      }
      out = *d;
    }
    if (!seen_header) {
      *result = absl::InternalError("Get: data before header");
      ctx.TryCancel();
      break;
    }
    if (resp.data_len > 0) {
      if (got + resp.data_len > total) {
        *result = absl::InternalError("Get: daemon sent more bytes than announced");
        ctx.TryCancel();
        break;
      }
      if (!CopyData(&bb, resp, out.data() + got)) {
        *result = absl::InternalError("Get: truncated data in a response");
        ctx.TryCancel();
        break;
      }
      got += resp.data_len;
      if (got == total) *result = total;
    } else if (total == got && total > 0 && resp.header) {
      *result = total;
    }
  }
  grpc::Status st = reader->Finish();
  if (result->ok() && !st.ok()) *result = FromGrpcStatus(st);
  if (result->ok() && !seen_header)
    *result = absl::InternalError("Get: stream ended without header");
  if (!st.ok() && st.error_code() != grpc::StatusCode::CANCELLED) return st;
  return grpc::Status::OK;
}

absl::StatusOr<uint64_t> RemoteClient::Get(const ChunkKey& key, std::span<std::byte> out,
                                           uint64_t lease_id) {
  pb::GetRequest req;
  req.set_protocol_version(kKvtierProtocolVersion);
  ToProto(key, req.add_keys());
  req.set_max_part_bytes(options_.get_part_bytes);
  req.set_lease_id(lease_id);
  absl::StatusOr<uint64_t> result = absl::NotFoundError("Get: no answer");
  absl::Status s = impl_->Call([&](pb::KvTier::Stub&, grpc::ClientContext& ctx) {
    auto reader = impl_->StartRawGet(ctx, req);
    return ReadOneRecord(
        reader.get(), ctx,
        [&](uint64_t n) -> absl::StatusOr<std::span<std::byte>> {
          if (n > out.size())
            return absl::OutOfRangeError(
                absl::StrFormat("Get: record needs %d bytes, buffer has %d", n, out.size()));
          return out.first(n);
        },
        &result);
  });
  if (!s.ok()) return s;
  return result;
}

absl::StatusOr<std::vector<std::byte>> RemoteClient::Get(const ChunkKey& key) {
  return GetRecord(key, /*peek=*/false);
}

absl::StatusOr<std::vector<std::byte>> RemoteClient::Peek(const ChunkKey& key) {
  return GetRecord(key, /*peek=*/true);
}

absl::StatusOr<std::vector<std::byte>> RemoteClient::GetRecord(const ChunkKey& key, bool peek) {
  pb::GetRequest req;
  req.set_protocol_version(kKvtierProtocolVersion);
  ToProto(key, req.add_keys());
  req.set_max_part_bytes(options_.get_part_bytes);
  req.set_peek(peek);
  std::vector<std::byte> buf;
  absl::StatusOr<uint64_t> result = absl::NotFoundError("Get: no answer");
  absl::Status s = impl_->Call([&](pb::KvTier::Stub&, grpc::ClientContext& ctx) {
    auto reader = impl_->StartRawGet(ctx, req);
    return ReadOneRecord(
        reader.get(), ctx,
        [&](uint64_t n) -> absl::StatusOr<std::span<std::byte>> {
          if (n > (1ull << 30)) return absl::OutOfRangeError("Get: record over 1 GiB");
          buf.resize(n);
          return std::span<std::byte>(buf);
        },
        &result);
  });
  if (!s.ok()) return s;
  if (!result.ok()) return result.status();
  return buf;
}

}  // namespace kvt
