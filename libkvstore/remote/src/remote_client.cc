#include "kvstore/remote_client.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <thread>

#include "absl/random/random.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "proto/kvtier.grpc.pb.h"

namespace kvt {

namespace pb = ::kvtier::v1;

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status RemoteClientOptions::Validate() const {
  if (target.empty()) return absl::InvalidArgumentError("RemoteClientOptions.target: must not be empty");
  if (deadline < std::chrono::milliseconds(1) || deadline > std::chrono::minutes(10))
    return absl::InvalidArgumentError(absl::StrFormat(
        "RemoteClientOptions.deadline: %d ms, expected 1 ms .. 10 min", deadline.count()));
  if (max_attempts < 1 || max_attempts > 10)
    return absl::InvalidArgumentError(
        absl::StrFormat("RemoteClientOptions.max_attempts: %d, expected 1..10", max_attempts));
  if (initial_backoff.count() <= 0 || initial_backoff > max_backoff || max_backoff > std::chrono::seconds(10))
    return absl::InvalidArgumentError(absl::StrFormat(
        "RemoteClientOptions.initial_backoff/max_backoff: %d/%d ms, expected 0 < initial <= max <= 10000",
        initial_backoff.count(), max_backoff.count()));
  if (put_part_bytes < 4096 || put_part_bytes > kKvtierMaxPartBytes)
    return absl::InvalidArgumentError(absl::StrFormat(
        "RemoteClientOptions.put_part_bytes: %d, expected 4096..%d", put_part_bytes, kKvtierMaxPartBytes));
  if (get_part_bytes > kKvtierMaxPartBytes)
    return absl::InvalidArgumentError(absl::StrFormat(
        "RemoteClientOptions.get_part_bytes: %d, expected 0..%d", get_part_bytes, kKvtierMaxPartBytes));
  if (rebuild_after_failures < 1)
    return absl::InvalidArgumentError("RemoteClientOptions.rebuild_after_failures: expected >= 1");
  return absl::OkStatus();
}

namespace {

void ToProto(const Hash128<ChunkKeyTag>& k, pb::Key128* out) {
  out->set_lo(k.lo);
  out->set_hi(k.hi);
}
void ToProto(const NamespaceId& k, pb::Key128* out) {
  out->set_lo(k.lo);
  out->set_hi(k.hi);
}
ChunkKey KeyFromProto(const pb::Key128& k) { return ChunkKey{k.lo(), k.hi()}; }
NamespaceId NsFromProto(const pb::Key128& k) { return NamespaceId{k.lo(), k.hi()}; }

std::optional<TierKind> TierFromProto(int t) {
  switch (t) {
    case pb::TIER_HOST: return TierKind::kHost;
    case pb::TIER_DISK: return TierKind::kDisk;
    case pb::TIER_REMOTE: return TierKind::kRemote;
    default: return std::nullopt;
  }
}

void StatsFromProto(const pb::TierStatsProto& p, TierStats* s) {
  s->capacity_bytes = p.capacity_bytes();
  s->used_bytes = p.used_bytes();
  s->chunks = p.chunks();
  s->hits = p.hits();
  s->misses = p.misses();
  s->evictions = p.evictions();
  s->integrity_errors = p.integrity_errors();
  s->pinned_bytes = p.pinned_bytes();
  s->bytes_in = p.bytes_in();
  s->bytes_out = p.bytes_out();
  s->puts = p.puts();
}

using Clock = std::chrono::system_clock;

}  // namespace

class RemoteClient::Impl {
 public:
  Impl(const RemoteClientOptions& options, std::string client_id)
      : options_(options), client_id_(std::move(client_id)) {
    Rebuild();
  }

  std::shared_ptr<pb::KvTier::Stub> stub() {
    absl::MutexLock lock(&mu_);
    return stub_;
  }

  void Rebuild() {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(kKvtierMaxMessageBytes);
    args.SetMaxSendMessageSize(kKvtierMaxMessageBytes);
    const int max_backoff_ms = static_cast<int>(options_.max_backoff.count());
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, max_backoff_ms);
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, std::min(100, max_backoff_ms));
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, std::min(100, max_backoff_ms));
    // A private subchannel per client so one client's reconnect state is its own.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto channel = grpc::CreateCustomChannel(options_.target, grpc::InsecureChannelCredentials(), args);
    auto stub = std::make_shared<pb::KvTier::Stub>(channel);
    absl::MutexLock lock(&mu_);
    stub_ = std::move(stub);
    channel_ = std::move(channel);
  }

  // The channel of the current stub (for the raw Get call).
  std::shared_ptr<grpc::Channel> channel() {
    absl::MutexLock lock(&mu_);
    return channel_;
  }

  // Starts a Get call that reads each GetResponse as raw bytes (see ReadOneRecord).
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> StartRawGet(grpc::ClientContext& ctx,
                                                                    const pb::GetRequest& req) {
    std::shared_ptr<grpc::Channel> ch = channel();
    const grpc::internal::RpcMethod method("/kvtier.v1.KvTier/Get", grpc::internal::RpcMethod::SERVER_STREAMING, ch);
    return std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>>(
        grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(ch.get(), method, &ctx, req));
  }

  void Setup(grpc::ClientContext& ctx, Clock::time_point deadline) const {
    ctx.set_deadline(deadline);
    if (!options_.token.empty()) ctx.AddMetadata("authorization", "Bearer " + options_.token);
    ctx.AddMetadata("kvtier-client-id", client_id_);
  }

  // Runs `attempt` until it succeeds, fails with something other than UNAVAILABLE, runs
  // out of attempts or the call's deadline passes. The first attempt fails fast when the
  // channel is not connected; retries wait for the (re)connection for at most
  // 2 x max_backoff each. After `rebuild_after_failures` consecutive failed calls the
  // channel is rebuilt and, for a cool-down of 4 x max_backoff, calls fail at once
  // (one probe call per cool-down goes through), so a dead daemon costs engines
  // nothing but a miss.
  absl::Status Call(const std::function<grpc::Status(pb::KvTier::Stub&, grpc::ClientContext&)>& attempt) {
    const Clock::time_point deadline = Clock::now() + options_.deadline;
    {
      absl::MutexLock lock(&mu_);
      if (failures_ >= options_.rebuild_after_failures && Clock::now() < circuit_open_until_) {
        return absl::UnavailableError("kvtierd unreachable (recent calls failed; retrying after a cool-down)");
      }
      if (failures_ >= options_.rebuild_after_failures) circuit_open_until_ = Clock::now() + options_.max_backoff * 4;
    }
    auto backoff = options_.initial_backoff;
    absl::Status last;
    for (int i = 1; i <= options_.max_attempts; ++i) {
      auto s = stub();
      grpc::ClientContext ctx;
      Setup(ctx, deadline);
      if (options_.wait_for_connection) {
        ctx.set_wait_for_ready(true);  // the whole deadline (set by Setup)
      } else if (i > 1) {
        ctx.set_wait_for_ready(true);
        ctx.set_deadline(std::min(deadline, Clock::now() + options_.max_backoff * 2));
      }
      last = FromGrpcStatus(attempt(*s, ctx));
      if (last.ok() || (last.code() != absl::StatusCode::kUnavailable &&
                        last.code() != absl::StatusCode::kDeadlineExceeded)) {
        absl::MutexLock lock(&mu_);
        failures_ = 0;
        return last;
      }
      if (Clock::now() >= deadline) {
        last = absl::DeadlineExceededError("kvtierd did not answer within the deadline: " + last.ToString());
        break;
      }
      if (last.code() == absl::StatusCode::kDeadlineExceeded && i == 1) break;  // hung daemon: no retry
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (i == options_.max_attempts || left <= backoff) break;
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, options_.max_backoff);
    }
    bool rebuild = false;
    {
      absl::MutexLock lock(&mu_);
      rebuild = ++failures_ == options_.rebuild_after_failures;
      if (failures_ >= options_.rebuild_after_failures) circuit_open_until_ = Clock::now() + options_.max_backoff * 4;
    }
    if (rebuild) Rebuild();
    return last;
  }

  const RemoteClientOptions options_;
  const std::string client_id_;
  absl::Mutex mu_;
  std::shared_ptr<pb::KvTier::Stub> stub_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<grpc::Channel> channel_ ABSL_GUARDED_BY(mu_);
  int failures_ ABSL_GUARDED_BY(mu_) = 0;
  Clock::time_point circuit_open_until_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<RemoteClient>> RemoteClient::Create(const RemoteClientOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  absl::BitGen gen;
  std::string id = absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(gen), absl::Uniform<uint64_t>(gen));
  auto impl = std::make_unique<Impl>(options, id);
  return std::unique_ptr<RemoteClient>(new RemoteClient(options, std::move(impl)));
}

RemoteClient::RemoteClient(const RemoteClientOptions& options, std::unique_ptr<Impl> impl)
    : options_(options), client_id_(impl->client_id_), impl_(std::move(impl)) {}
RemoteClient::~RemoteClient() = default;

absl::StatusOr<RemoteLookup> RemoteClient::Lookup(std::span<const ChunkKey> keys, bool per_key) {
  if (keys.empty() || keys.size() > kKvtierMaxBatchKeys)
    return absl::InvalidArgumentError(
        absl::StrFormat("Lookup: %d keys, expected 1..%d", keys.size(), kKvtierMaxBatchKeys));
  pb::LookupRequest req;
  req.set_protocol_version(kKvtierProtocolVersion);
  req.set_per_key(per_key);
  for (const ChunkKey& k : keys) ToProto(k, req.add_keys());
  pb::LookupResponse resp;
  absl::Status s = impl_->Call([&](pb::KvTier::Stub& stub, grpc::ClientContext& ctx) {
    return stub.Lookup(&ctx, req, &resp);
  });
  if (!s.ok()) return s;
  RemoteLookup out;
  out.num_leading_hits = std::min<size_t>(resp.num_leading_hits(), keys.size());
  for (int t : resp.tier()) out.tier.push_back(TierFromProto(t));
  out.record_bytes.assign(resp.record_bytes().begin(), resp.record_bytes().end());
  return out;
}

absl::Status RemoteClient::Put(std::span<const std::byte> record) {
  std::span<const std::byte> one[1] = {record};
  return Put(std::span<const std::span<const std::byte>>(one, 1));
}

absl::Status RemoteClient::Put(std::span<const std::span<const std::byte>> records) {
  for (const auto& r : records) {
    if (r.size() < 128)
      return absl::InvalidArgumentError(
          absl::StrFormat("Put: record of %d bytes is shorter than a chunk header (128)", r.size()));
  }
  const size_t part = options_.put_part_bytes;
  return impl_->Call([&](pb::KvTier::Stub& stub, grpc::ClientContext& ctx) {
    pb::PutResponse resp;
    auto writer = stub.Put(&ctx, &resp);
    pb::PutRequest req;
    bool ok = true;
    for (const auto& r : records) {
      size_t off = 0;
      req.set_protocol_version(kKvtierProtocolVersion);
      req.set_record_bytes(r.size());
      while (ok && off < r.size()) {
        size_t n = std::min(part, r.size() - off);
        req.set_data(reinterpret_cast<const char*>(r.data() + off), n);
        ok = writer->Write(req);
        req.set_record_bytes(0);
        off += n;
      }
      if (!ok) break;
    }
    if (ok) writer->WritesDone();
    grpc::Status st = writer->Finish();
    if (st.ok() && resp.records_stored() != records.size())
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          absl::StrFormat("Put: daemon acknowledged %d of %d records", resp.records_stored(),
                                          records.size()));
    return st;
  });
}

namespace {

// One GetResponse message as read from the wire, except `data`, whose place is noted.
struct RawGetResponse {
  bool found = false, header = false, has_shm = false, shm_overflow = false;
  uint64_t record_bytes = 0;
  int data_pos = -1;  // byte offset of the `data` bytes in the message; -1 = no data field
  uint32_t data_len = 0;
};

// Scans a serialised GetResponse without copying `data` (the daemon writes the record
// bytes as the last field, but any field order is accepted).
absl::Status ScanGetResponse(grpc::ByteBuffer* bb, RawGetResponse* out) {
  using google::protobuf::internal::WireFormatLite;
  grpc::ProtoBufferReader reader(bb);
  if (!reader.status().ok()) return absl::InternalError("Get: unreadable response: " + reader.status().error_message());
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
      if (ok && field == 5) out->has_shm = true;
      ok = ok && in.Skip(static_cast<int>(len));
    } else {
      ok = WireFormatLite::SkipField(&in, tag);
    }
    if (!ok) return absl::InternalError(absl::StrFormat("Get: malformed response (field %d)", field));
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

// Reads a Get stream for one key into the span returned by `dest(record_bytes)`. Each
// GetResponse is read as raw bytes and its `data` copied from the received slices into
// the destination directly (no protobuf string in between).
grpc::Status ReadOneRecord(grpc::ClientReader<grpc::ByteBuffer>* reader, grpc::ClientContext& ctx,
                           const std::function<absl::StatusOr<std::span<std::byte>>(uint64_t)>& dest,
                           absl::StatusOr<uint64_t>* result) {
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
  if (result->ok() && !seen_header) *result = absl::InternalError("Get: stream ended without header");
  if (!st.ok() && st.error_code() != grpc::StatusCode::CANCELLED) return st;
  return grpc::Status::OK;
}

}  // namespace

absl::StatusOr<uint64_t> RemoteClient::Get(const ChunkKey& key, std::span<std::byte> out) {
  pb::GetRequest req;
  req.set_protocol_version(kKvtierProtocolVersion);
  ToProto(key, req.add_keys());
  req.set_max_part_bytes(options_.get_part_bytes);
  absl::StatusOr<uint64_t> result = absl::NotFoundError("Get: no answer");
  absl::Status s = impl_->Call([&](pb::KvTier::Stub&, grpc::ClientContext& ctx) {
    auto reader = impl_->StartRawGet(ctx, req);
    return ReadOneRecord(reader.get(), ctx,
                         [&](uint64_t n) -> absl::StatusOr<std::span<std::byte>> {
                           if (n > out.size())
                             return absl::OutOfRangeError(absl::StrFormat(
                                 "Get: record needs %d bytes, buffer has %d", n, out.size()));
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
    return ReadOneRecord(reader.get(), ctx,
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

absl::StatusOr<EvictResult> RemoteClient::Evict(const EvictSelector& sel, bool dry_run) {
  if (absl::Status v = sel.Validate(); !v.ok()) return v;
  pb::EvictRequest req;
  req.set_protocol_version(kKvtierProtocolVersion);
  req.set_dry_run(dry_run);
  if (!sel.keys.empty()) {
    for (const ChunkKey& k : sel.keys) ToProto(k, req.mutable_keys()->add_keys());
  } else if (sel.ns) {
    ToProto(*sel.ns, req.mutable_ns());
  } else if (sel.older_than) {
    req.set_older_than_ms(static_cast<uint64_t>(sel.older_than->count()));
  } else if (sel.prefix) {
    ToProto(*sel.prefix, req.mutable_prefix());
  } else {
    req.set_all(true);
  }
  if (sel.within_ns) ToProto(*sel.within_ns, req.mutable_within_ns());
  pb::EvictResponse resp;
  absl::Status s = impl_->Call([&](pb::KvTier::Stub& stub, grpc::ClientContext& ctx) {
    return stub.Evict(&ctx, req, &resp);
  });
  if (!s.ok()) return s;
  EvictResult out;
  out.chunks = resp.chunks();
  out.bytes = resp.bytes();
  for (const auto& c : resp.selected()) {
    StoredChunk sc;
    sc.info.key = KeyFromProto(c.key());
    sc.info.ns = NsFromProto(c.ns());
    sc.info.parent = KeyFromProto(c.parent());
    sc.info.token_count = c.token_count();
    sc.info.record_bytes = c.bytes();
    sc.info.last_access_unix_ms = c.last_access_unix_ms();
    sc.kinds.push_back(TierFromProto(c.tier()).value_or(TierKind::kHost));
    out.selected.push_back(std::move(sc));
  }
  for (uint64_t i = 0; i < resp.failed_chunks(); ++i) {
    out.failed.emplace_back(ChunkKey{}, absl::FailedPreconditionError("pinned by a reader"));
  }
  return out;
}

absl::StatusOr<RemoteListPage> RemoteClient::List(std::optional<NamespaceId> ns, const std::string& page_token,
                                                  uint32_t page_size) {
  pb::ListRequest req;
  req.set_protocol_version(kKvtierProtocolVersion);
  if (ns) ToProto(*ns, req.mutable_ns());
  req.set_page_token(page_token);
  req.set_page_size(page_size);
  pb::ListResponse resp;
  absl::Status s = impl_->Call([&](pb::KvTier::Stub& stub, grpc::ClientContext& ctx) {
    return stub.List(&ctx, req, &resp);
  });
  if (!s.ok()) return s;
  RemoteListPage page;
  page.next_page_token = resp.next_page_token();
  for (const auto& c : resp.chunks()) {
    RemoteChunkInfo info;
    info.info.key = KeyFromProto(c.key());
    info.info.ns = NsFromProto(c.ns());
    info.info.parent = KeyFromProto(c.parent());
    info.info.token_count = c.token_count();
    info.info.record_bytes = c.bytes();
    info.info.last_access_unix_ms = c.last_access_unix_ms();
    info.tier = TierFromProto(c.tier()).value_or(TierKind::kHost);
    page.chunks.push_back(info);
  }
  return page;
}

absl::StatusOr<RemoteStats> RemoteClient::Stats() {
  pb::StatsRequest req;
  req.set_protocol_version(kKvtierProtocolVersion);
  pb::StatsResponse resp;
  absl::Status s = impl_->Call([&](pb::KvTier::Stub& stub, grpc::ClientContext& ctx) {
    return stub.Stats(&ctx, req, &resp);
  });
  if (!s.ok()) return s;
  RemoteStats out;
  for (const auto& t : resp.tiers()) {
    RemoteTierStats ts;
    ts.name = t.name();
    ts.kind = TierFromProto(t.kind()).value_or(TierKind::kHost);
    StatsFromProto(t, &ts.stats);
    out.tiers.push_back(ts);
  }
  out.hits = resp.hits();
  out.misses = resp.misses();
  out.integrity_errors = resp.integrity_errors();
  out.connected_clients = resp.connected_clients();
  out.pending_write_bytes = resp.pending_write_bytes();
  out.explicit_evictions = resp.explicit_evictions();
  out.tenant = resp.tenant();
  return out;
}

absl::StatusOr<RemoteHealth> RemoteClient::Health() {
  pb::HealthRequest req;
  req.set_protocol_version(kKvtierProtocolVersion);
  pb::HealthResponse resp;
  absl::Status s = impl_->Call([&](pb::KvTier::Stub& stub, grpc::ClientContext& ctx) {
    return stub.Health(&ctx, req, &resp);
  });
  if (!s.ok()) return s;
  return RemoteHealth{resp.serving(), resp.detail(), resp.protocol_version(), resp.version(),
                      resp.shm_available()};
}

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

absl::StatusOr<uint64_t> RemoteClient::GetShm(const ShmSession& session, const ChunkKey& key, uint64_t offset,
                                              uint64_t capacity) {
  pb::GetRequest req;
  req.set_protocol_version(kKvtierProtocolVersion);
  ToProto(key, req.add_keys());
  req.mutable_shm()->set_region_id(session.region_id);
  req.mutable_shm()->set_offset(offset);
  req.mutable_shm()->set_length(capacity);
  absl::StatusOr<uint64_t> result = absl::NotFoundError("GetShm: no answer");
  absl::Status s = impl_->Call([&](pb::KvTier::Stub&, grpc::ClientContext& ctx) {
    auto reader = impl_->StartRawGet(ctx, req);
    return ReadOneRecord(reader.get(), ctx,
                         [](uint64_t) -> absl::StatusOr<std::span<std::byte>> {
                           return absl::InternalError("GetShm: daemon sent data instead of an shm slice");
                         },
                         &result);
  });
  if (!s.ok()) return s;
  return result;
}

}  // namespace kvt
