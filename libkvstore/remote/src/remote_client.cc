// RemoteClient: options, status conversion, and the control calls (Lookup, Put, Evict,
// List, Stats, Health). Record reads: remote_client_get.cc; shm: remote_client_shm.cc.
#include "absl/strings/numbers.h"
#include "remote_client_impl.h"

namespace kvt {

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status RemoteClientOptions::Validate() const {
  if (target.empty())
    return absl::InvalidArgumentError("RemoteClientOptions.target: must not be empty");
  if (deadline < std::chrono::milliseconds(1) || deadline > std::chrono::minutes(10))
    return absl::InvalidArgumentError(absl::StrFormat(
        "RemoteClientOptions.deadline: %d ms, expected 1 ms .. 10 min", deadline.count()));
  if (max_attempts < 1 || max_attempts > 10)
    return absl::InvalidArgumentError(
        absl::StrFormat("RemoteClientOptions.max_attempts: %d, expected 1..10", max_attempts));
  if (initial_backoff.count() <= 0 || initial_backoff > max_backoff ||
      max_backoff > std::chrono::seconds(10))
    return absl::InvalidArgumentError(
        absl::StrFormat("RemoteClientOptions.initial_backoff/max_backoff: %d/%d ms, expected 0 < "
                        "initial <= max <= 10000",
                        initial_backoff.count(), max_backoff.count()));
  if (put_part_bytes < 4096 || put_part_bytes > kKvtierMaxPartBytes)
    return absl::InvalidArgumentError(
        absl::StrFormat("RemoteClientOptions.put_part_bytes: %d, expected 4096..%d", put_part_bytes,
                        kKvtierMaxPartBytes));
  if (get_part_bytes > kKvtierMaxPartBytes)
    return absl::InvalidArgumentError(
        absl::StrFormat("RemoteClientOptions.get_part_bytes: %d, expected 0..%d", get_part_bytes,
                        kKvtierMaxPartBytes));
  if (rebuild_after_failures < 1)
    return absl::InvalidArgumentError("RemoteClientOptions.rebuild_after_failures: expected >= 1");
  return absl::OkStatus();
}
absl::StatusOr<std::unique_ptr<RemoteClient>> RemoteClient::Create(
    const RemoteClientOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  absl::BitGen gen;
  std::string id =
      absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(gen), absl::Uniform<uint64_t>(gen));
  auto impl = std::make_unique<Impl>(options, id);
  return std::unique_ptr<RemoteClient>(new RemoteClient(options, std::move(impl)));
}

RemoteClient::RemoteClient(const RemoteClientOptions& options, std::unique_ptr<Impl> impl)
    : options_(options), client_id_(impl->client_id_), impl_(std::move(impl)) {}
RemoteClient::~RemoteClient() = default;

uint64_t RemoteClient::rpcs() const { return impl_->rpcs(); }

absl::StatusOr<RemoteLookup> RemoteClient::Lookup(std::span<const ChunkKey> keys, bool per_key,
                                                  bool pin, std::span<const uint64_t> release) {
  return LookupWith(keys, per_key, pin, release, /*explain=*/false);
}

absl::StatusOr<RemoteLookup> RemoteClient::Inspect(std::span<const ChunkKey> keys) {
  return LookupWith(keys, /*per_key=*/true, /*pin=*/false, {}, /*explain=*/true);
}

absl::StatusOr<RemoteLookup> RemoteClient::LookupWith(std::span<const ChunkKey> keys, bool per_key,
                                                      bool pin, std::span<const uint64_t> release,
                                                      bool explain) {
  if (keys.empty() || keys.size() > kKvtierMaxBatchKeys)
    return absl::InvalidArgumentError(
        absl::StrFormat("Lookup: %d keys, expected 1..%d", keys.size(), kKvtierMaxBatchKeys));
  pb::LookupRequest req;
  req.set_protocol_version(kKvtierProtocolVersion);
  req.set_per_key(per_key);
  req.set_pin(pin);
  req.set_explain_misses(explain);
  if (release.size() > kKvtierMaxBatchKeys)
    return absl::InvalidArgumentError(absl::StrFormat(
        "Lookup: %d leases to release, expected at most %d", release.size(), kKvtierMaxBatchKeys));
  for (uint64_t id : release) req.add_release_leases(id);
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
  for (const pb::Key128& n : resp.ns()) out.ns.push_back(NamespaceId{n.lo(), n.hi()});
  out.lease_id = resp.lease_id();
  out.lease_timeout = std::chrono::milliseconds(resp.lease_timeout_ms());
  if (explain && resp.miss_size() > 0) {
    out.explained = true;
    for (const pb::MissInfo& m : resp.miss()) {
      Absence a;
      // MissReason = AbsenceReason + 1; MISS_UNSPECIFIED (a hit) and unknown values: default.
      if (m.reason() >= pb::MISS_NO_RECORD && m.reason() <= pb::MISS_ERASED)
        a.reason = static_cast<AbsenceReason>(m.reason() - 1);
      a.tier = TierFromProto(m.tier()).value_or(TierKind::kHost);
      for (int t : m.rejected_by()) {
        if (auto k = TierFromProto(t))
          a.rejected_by |= static_cast<uint8_t>(1u << static_cast<unsigned>(*k));
      }
      out.absence.push_back(a);
    }
  }
  return out;
}

absl::Status RemoteClient::Put(std::span<const std::byte> record) {
  std::span<const std::byte> one[1] = {record};
  return Put(std::span<const std::span<const std::byte>>(one, 1));
}

absl::Status RemoteClient::Put(std::span<const std::span<const std::byte>> records,
                               size_t* stored) {
  if (stored != nullptr) *stored = 0;
  for (const auto& r : records) {
    if (r.size() < 128)
      return absl::InvalidArgumentError(absl::StrFormat(
          "Put: record of %d bytes is shorter than a chunk header (128)", r.size()));
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
    if (stored != nullptr) {  // the daemon's count, OK or not (a retry overwrites it)
      *stored = st.ok() ? resp.records_stored() : 0;
      const auto& md = ctx.GetServerTrailingMetadata();
      if (auto it = md.find(kKvtierRecordsStoredKey); it != md.end()) {
        uint64_t n = 0;
        if (absl::SimpleAtoi(absl::string_view(it->second.data(), it->second.size()), &n))
          *stored = static_cast<size_t>(std::min<uint64_t>(n, records.size()));
      }
    }
    if (st.ok() && resp.records_stored() != records.size())
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          absl::StrFormat("Put: daemon acknowledged %d of %d records",
                                          resp.records_stored(), records.size()));
    return st;
  });
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

absl::StatusOr<RemoteListPage> RemoteClient::List(std::optional<NamespaceId> ns,
                                                  const std::string& page_token,
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
  out.shm_put_copy_bytes = resp.shm_put_copy_bytes();
  out.leases_granted = resp.leases_granted();
  out.leases_released = resp.leases_released();
  out.leases_expired = resp.leases_expired();
  out.leases_active = resp.leases_active();
  out.pinned_bytes = resp.pinned_bytes();
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

}  // namespace kvt
