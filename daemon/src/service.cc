#include "service.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/remote_client.h"
#include "kvstore/shm_copy.h"
#include "spdlog/spdlog.h"

namespace kvt::daemon {

namespace pb = ::kvtier::v1;

absl::Status CheckVersion(uint32_t version) {
  if (version == 0)
    return absl::InvalidArgumentError(
        absl::StrFormat("protocol_version: missing (0), expected %d", kKvtierProtocolVersion));
  if (version != kKvtierProtocolVersion)
    return absl::FailedPreconditionError(absl::StrFormat(
        "protocol_version: %d is not spoken by this daemon (%d)", version, kKvtierProtocolVersion));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ChunkKey>> KeysFromProto(
    const google::protobuf::RepeatedPtrField<pb::Key128>& keys, const char* field) {
  if (keys.empty() || keys.size() > static_cast<int>(kKvtierMaxBatchKeys))
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %d keys, expected 1..%d", field, keys.size(), kKvtierMaxBatchKeys));
  std::vector<ChunkKey> out;
  out.reserve(keys.size());
  for (int i = 0; i < keys.size(); ++i) {
    ChunkKey k{keys[i].lo(), keys[i].hi()};
    if (k.is_zero())
      return absl::InvalidArgumentError(absl::StrFormat("%s[%d]: zero key", field, i));
    out.push_back(k);
  }
  return out;
}

pb::TierKind TierToProto(TierKind kind) {
  switch (kind) {
    case TierKind::kHost:
      return pb::TIER_HOST;
    case TierKind::kDisk:
      return pb::TIER_DISK;
    case TierKind::kRemote:
      return pb::TIER_REMOTE;
  }
  return pb::TIER_NONE;
}

namespace {

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char d = 0;
  for (size_t i = 0; i < a.size(); ++i) d |= static_cast<unsigned char>(a[i] ^ b[i]);
  return d == 0;
}

void KeyToProto(const ChunkKey& k, pb::Key128* out) {
  out->set_lo(k.lo);
  out->set_hi(k.hi);
}

}  // namespace

KvTierService::KvTierService(const ServiceDeps& deps)
    : deps_(deps), leases_(deps.store, deps.config->lease_timeout) {
  {
    // Region ids start at a random value per daemon start, so a client that still holds
    // the id of a region of an earlier daemon process (restarted since) names no region
    // of this one: "not attached", never another client's region.
    absl::MutexLock lock(&shm_mu_);
    next_region_id_ = deps_.config->shm_first_region_id != 0
                          ? deps_.config->shm_first_region_id
                          : (absl::Uniform<uint64_t>(absl::BitGen()) >> 1) + 1;
  }
  for (const auto& t : deps_.config->tenants)
    for (const auto& tok : t.tokens) token_to_tenant_[tok] = t.name;
}

KvTierService::~KvTierService() = default;

absl::StatusOr<std::string> KvTierService::Authenticate(grpc::CallbackServerContext* ctx) {
  const auto& md = ctx->client_metadata();
  if (auto it = md.find("kvtier-client-id"); it != md.end())
    deps_.metrics->SeeClient(std::string(it->second.data(), it->second.size()));
  if (!deps_.config->auth_enabled()) return std::string();
  auto it = md.find("authorization");
  if (it == md.end()) {
    deps_.metrics->AddAuthFailure();
    return absl::UnauthenticatedError("authorization: missing bearer token");
  }
  std::string value(it->second.data(), it->second.size());
  if (!absl::StartsWith(value, "Bearer ")) {
    deps_.metrics->AddAuthFailure();
    return absl::UnauthenticatedError("authorization: expected 'Bearer <token>'");
  }
  std::string token = value.substr(7);
  const std::string* tenant = nullptr;
  for (const auto& [tok, name] : token_to_tenant_)  // every token compared: no early exit
    if (ConstantTimeEquals(tok, token)) tenant = &name;
  if (tenant == nullptr) {
    deps_.metrics->AddAuthFailure();
    return absl::UnauthenticatedError("authorization: unknown token");
  }
  return *tenant;
}

bool KvTierService::Healthy(std::string* detail) const {
  std::string d;
  if (!deps_.store->stats().healthy) d += "store write-back thread died; ";
  if (deps_.pool->alive() != deps_.pool->size())
    d +=
        absl::StrFormat("%d of %d worker threads alive; ", deps_.pool->alive(), deps_.pool->size());
  if (deps_.lookup_pool != nullptr && deps_.lookup_pool->alive() != deps_.lookup_pool->size())
    d += absl::StrFormat("%d of %d lookup threads alive; ", deps_.lookup_pool->alive(),
                         deps_.lookup_pool->size());
  if (std::string threads; deps_.health != nullptr && !deps_.health->Healthy(&threads))
    d += threads;
  if (detail != nullptr) *detail = d;
  return d.empty();
}

size_t KvTierService::shm_regions() {
  absl::MutexLock lock(&shm_mu_);
  return regions_.size();
}

std::shared_ptr<ShmRegion> KvTierService::FindRegion(uint64_t id, const std::string& tenant) {
  absl::MutexLock lock(&shm_mu_);
  auto it = regions_.find(id);
  if (it == regions_.end() || it->second.tenant != tenant) return nullptr;
  return it->second.region;
}

absl::Status KvTierService::AdmitRecord(std::span<const std::byte> record,
                                        const std::string& tenant, ChunkKey* key_out,
                                        std::optional<uint64_t> payload_checksum, bool* store) {
  *store = false;
  auto header = DecodeChunkHeader(record);
  if (!header.ok())
    return absl::InvalidArgumentError("data: not a valid chunk record: " +
                                      header.status().ToString());
  if (record.size() != header->record_bytes())
    return absl::InvalidArgumentError(absl::StrFormat("record_bytes: %d, the record header says %d",
                                                      record.size(), header->record_bytes()));
  if (header->key.is_zero()) return absl::InvalidArgumentError("data: record key is zero");
  if (deps_.config->verify_on_put) {
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
  if (absl::Status s = deps_.catalog->Claim(header->ns, tenant); !s.ok()) return s;
  // A key already stored under another namespace (another tenant's chunk, or a forged
  // header): acknowledge without storing, so the answer reveals nothing.
  if (auto ns = deps_.catalog->NsOf(header->key); ns && *ns != header->ns) {
    ChunkKey k = header->key;
    LookupResult present = deps_.store->Lookup(std::span<const ChunkKey>(&k, 1));
    if (present.num_leading_hits > 0) {
      deps_.metrics->AddPutConflict();
      return absl::OkStatus();
    }
  }
  deps_.catalog->NoteKey(header->key, header->ns);
  *store = true;
  return absl::OkStatus();
}

PutAck KvTierService::StoreAck() const {
  return deps_.config->durability == Durability::kSync ? PutAck::kDurable : PutAck::kTopTier;
}

absl::Status KvTierService::StoreRecord(std::span<const std::byte> record,
                                        const std::string& tenant, ChunkKey* key_out,
                                        std::optional<uint64_t> payload_checksum) {
  bool store = false;
  if (absl::Status s = AdmitRecord(record, tenant, key_out, payload_checksum, &store); !s.ok())
    return s;
  if (!store) return absl::OkStatus();
  return deps_.store->Write({.record = record, .ack = StoreAck()}).status();
}

absl::Status KvTierService::CheckProgressBlock(const ShmRegion& region, const pb::ShmSlice& slice) {
  if (!slice.progressive()) return absl::OkStatus();
  const uint64_t at = slice.progress_offset();
  if (at % 64 != 0 || !region.Contains(at, kShmProgressBlockBytes))
    return absl::InvalidArgumentError(absl::StrFormat(
        "shm.progress_offset: %d, expected a 64-byte aligned offset of the %d-byte region "
        "with %d bytes after it",
        at, region.size(), kShmProgressBlockBytes));
  if (at + kShmProgressBlockBytes > slice.offset() && at < slice.offset() + slice.length())
    return absl::InvalidArgumentError(
        absl::StrFormat("shm.progress_offset: the control block [%d, +%d) overlaps the slice's "
                        "data [%d, +%d)",
                        at, kShmProgressBlockBytes, slice.offset(), slice.length()));
  return absl::OkStatus();
}

absl::Status KvTierService::StoreShmRecord(std::span<const std::byte> src,
                                           const std::string& tenant, ChunkKey* key_out,
                                           const ShmProgress* progress, uint64_t src_offset) {
  bool conflict = false;
  const bool verify = deps_.config->verify_on_put;
  const absl::Duration stall = absl::Milliseconds(deps_.config->shm_stall_timeout_ms);
  uint64_t seen = 0;  // the last `ready` read (region offset)
  // Bytes of src the client has published, more than `have` (blocks; kvstore/shm_progress.h).
  auto available = [&](size_t have) -> absl::StatusOr<size_t> {
    if (progress == nullptr) return src.size();
    while (seen <= src_offset + have) {
      absl::StatusOr<uint64_t> r =
          progress->WaitBeyond(seen, src_offset + src.size(), stall, ClockOrSystem(deps_.clock));
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
  write.ack = StoreAck();
  write.fill = [&](std::span<std::byte> dst) -> absl::Status {
    std::optional<uint64_t> payload_checksum;
    if (verify || progress != nullptr) {
      absl::StatusOr<uint64_t> h = CopyRecordHashingPayload(src, dst, available);
      if (!h.ok()) return h.status();
      if (verify) payload_checksum = *h;
    } else {
      std::memcpy(dst.data(), src.data(), src.size());
    }
    shm_put_copy_bytes_.fetch_add(src.size(), std::memory_order_relaxed);
    bool store = false;
    absl::Status s = AdmitRecord(dst, tenant, key_out, payload_checksum, &store);
    if (s.ok() && !store) {
      conflict = true;  // acknowledged without storing: abandon the reservation
      return absl::AbortedError("put conflict: not stored");
    }
    return s;
  };
  absl::StatusOr<ChunkKey> key = deps_.store->Write(std::move(write));
  if (conflict) return absl::OkStatus();
  return key.status();
}

grpc::ServerUnaryReactor* KvTierService::RunUnary(
    grpc::CallbackServerContext* ctx, Rpc rpc, uint32_t version,
    std::function<absl::Status(const std::string&)> fn) {
  const auto start = std::chrono::steady_clock::now();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  CallStarted();
  auto finish = [this, reactor, rpc, start](const absl::Status& s) {
    deps_.metrics->RecordRpc(rpc, static_cast<int>(s.code()),
                             std::chrono::steady_clock::now() - start);
    reactor->Finish(ToGrpcStatus(s));
    CallDone();
  };
  if (draining()) {
    finish(absl::UnavailableError("kvtierd is shutting down"));
    return reactor;
  }
  auto tenant = Authenticate(ctx);
  if (!tenant.ok()) {
    finish(tenant.status());
    return reactor;
  }
  if (absl::Status s = CheckVersion(version); !s.ok()) {
    finish(s);
    return reactor;
  }
  WorkerPool* pool =
      rpc == Rpc::kLookup && deps_.lookup_pool != nullptr ? deps_.lookup_pool : deps_.pool;
  pool->Submit([fn = std::move(fn), finish, t = *tenant] { finish(fn(t)); }, finish);
  return reactor;
}

grpc::ServerUnaryReactor* KvTierService::Lookup(grpc::CallbackServerContext* ctx,
                                                const pb::LookupRequest* req,
                                                pb::LookupResponse* resp) {
  return RunUnary(
      ctx, Rpc::kLookup, req->protocol_version(), [this, req, resp](const std::string& tenant) {
        if (req->release_leases_size() > static_cast<int>(kKvtierMaxBatchKeys))
          return absl::InvalidArgumentError(
              absl::StrFormat("release_leases: %d, expected at most %d", req->release_leases_size(),
                              kKvtierMaxBatchKeys));
        for (uint64_t id : req->release_leases()) leases_.Drop(id, tenant);
        auto keys = KeysFromProto(req->keys(), "keys");
        if (!keys.ok()) return keys.status();
        TieredStore& store = *deps_.store;
        if (req->pin())
          resp->set_lease_timeout_ms(static_cast<uint32_t>(leases_.timeout().count()));
        // Pins the first `n` keys (all visible hits) under a lease; returns how many
        // were pinned (a key that left its tier meanwhile ends the run there).
        auto pin_leading = [&](size_t n) -> size_t {
          if (n == 0) return 0;
          LookupResult p =
              store.Lookup(std::span<const ChunkKey>(keys->data(), n), LookupOptions{.pin = true});
          if (p.lease)
            resp->set_lease_id(
                leases_.Add(std::move(p.lease),
                            std::span<const ChunkKey>(keys->data(), p.num_leading_hits), tenant));
          return p.num_leading_hits;
        };
        if (!req->per_key()) {
          size_t visible = 0;
          while (visible < keys->size() && deps_.catalog->KeyVisible((*keys)[visible], tenant))
            ++visible;
          LookupResult r = visible == 0
                               ? LookupResult{}
                               : store.Lookup(std::span<const ChunkKey>(keys->data(), visible),
                                              LookupOptions{.pin = req->pin()});
          if (r.lease)
            resp->set_lease_id(
                leases_.Add(std::move(r.lease),
                            std::span<const ChunkKey>(keys->data(), r.num_leading_hits), tenant));
          resp->set_num_leading_hits(static_cast<uint32_t>(r.num_leading_hits));
          for (size_t i = 0; i < r.num_leading_hits; ++i)
            resp->add_tier(TierToProto(r.tier_kind[i]));
          return absl::OkStatus();
        }
        LookupResult r = store.Lookup(*keys, LookupOptions{.per_key = true});
        bool leading = true;
        size_t n = 0;
        for (size_t i = 0; i < keys->size(); ++i) {
          // Another tenant's chunk reads as a miss.
          const bool hit =
              r.tier_index[i] != kNoTier && deps_.catalog->KeyVisible((*keys)[i], tenant);
          if (!hit) leading = false;
          if (leading) ++n;
          resp->add_tier(hit ? TierToProto(r.tier_kind[i]) : pb::TIER_NONE);
          resp->add_record_bytes(hit ? r.record_bytes[i] : 0);
        }
        if (req->pin()) n = pin_leading(n);  // only the visible leading hits are pinned
        resp->set_num_leading_hits(static_cast<uint32_t>(n));
        return absl::OkStatus();
      });
}

namespace {

void EntryToProto(const StoredChunk& e, pb::ChunkEntry* c) {
  KeyToProto(e.info.key, c->mutable_key());
  c->mutable_ns()->set_lo(e.info.ns.lo);
  c->mutable_ns()->set_hi(e.info.ns.hi);
  KeyToProto(e.info.parent, c->mutable_parent());
  c->set_token_count(e.info.token_count);
  c->set_bytes(e.info.record_bytes);
  c->set_tier(e.kinds.empty() ? pb::TIER_NONE : TierToProto(e.kinds.front()));
  c->set_last_access_unix_ms(e.info.last_access_unix_ms);
}

}  // namespace

grpc::ServerUnaryReactor* KvTierService::List(grpc::CallbackServerContext* ctx,
                                              const pb::ListRequest* req, pb::ListResponse* resp) {
  return RunUnary(ctx, Rpc::kList, req->protocol_version(),
                  [this, req, resp](const std::string& tenant) {
                    uint32_t page_size = req->page_size() == 0 ? 1000 : req->page_size();
                    if (page_size > 10000)
                      return absl::InvalidArgumentError(
                          absl::StrFormat("page_size: %d, expected 0..10000", req->page_size()));
                    if (!req->page_token().empty() && !ChunkKey::FromHex(req->page_token()).ok())
                      return absl::InvalidArgumentError(
                          "page_token: expected \"\" or a next_page_token (32 hex digits)");
                    std::optional<NamespaceId> ns;
                    if (req->has_ns()) {
                      ns = NamespaceId{req->ns().lo(), req->ns().hi()};
                      if (!deps_.catalog->NsVisible(*ns, tenant))
                        return absl::OkStatus();  // nothing of yours
                    }
                    StoreListOptions lo;
                    lo.ns = ns;
                    lo.visible = [this, &tenant](const NamespaceId& n) {
                      return deps_.catalog->NsVisible(n, tenant);
                    };
                    lo.page_token = req->page_token();
                    lo.page_size = page_size;
                    absl::StatusOr<StoreListPage> page = deps_.store->List(lo);
                    if (!page.ok()) return page.status();
                    for (const StoredChunk& e : page->chunks) EntryToProto(e, resp->add_chunks());
                    resp->set_next_page_token(page->next_page_token);
                    return absl::OkStatus();
                  });
}

grpc::ServerUnaryReactor* KvTierService::Evict(grpc::CallbackServerContext* ctx,
                                               const pb::EvictRequest* req,
                                               pb::EvictResponse* resp) {
  return RunUnary(
      ctx, Rpc::kEvict, req->protocol_version(), [this, req, resp](const std::string& tenant) {
        EvictSelector sel;
        switch (req->selector_case()) {
          case pb::EvictRequest::kKeys: {
            auto keys = KeysFromProto(req->keys().keys(), "keys.keys");
            if (!keys.ok()) return keys.status();
            sel.keys = std::move(*keys);
            break;
          }
          case pb::EvictRequest::kNs:
            sel.ns = NamespaceId{req->ns().lo(), req->ns().hi()};
            break;
          case pb::EvictRequest::kOlderThanMs:
            if (req->older_than_ms() == 0)
              return absl::InvalidArgumentError("older_than_ms: must be > 0");
            sel.older_than = std::chrono::milliseconds(
                static_cast<int64_t>(std::min<uint64_t>(req->older_than_ms(), INT64_MAX / 2)));
            break;
          case pb::EvictRequest::kPrefix:
            sel.prefix = ChunkKey{req->prefix().lo(), req->prefix().hi()};
            if (sel.prefix->is_zero()) return absl::InvalidArgumentError("prefix: zero key");
            break;
          case pb::EvictRequest::kAll:
            if (!req->all()) return absl::InvalidArgumentError("all: must be true when set");
            sel.all = true;
            break;
          default:
            return absl::InvalidArgumentError(
                "selector: one of keys, ns, older_than_ms, prefix, all is required");
        }
        if (req->has_within_ns()) {
          if (req->selector_case() == pb::EvictRequest::kKeys ||
              req->selector_case() == pb::EvictRequest::kNs)
            return absl::InvalidArgumentError(
                "within_ns: narrows older_than_ms, prefix or all; not keys or ns");
          sel.within_ns = NamespaceId{req->within_ns().lo(), req->within_ns().hi()};
        }
        // Tenancy: only the caller's namespaces are ever selected.
        sel.visible = [this, &tenant](const NamespaceId& n) {
          return deps_.catalog->NsVisible(n, tenant);
        };
        absl::StatusOr<EvictResult> r =
            deps_.store->Evict(sel, EvictOptions{.dry_run = req->dry_run()});
        if (!r.ok()) return r.status();
        if (!req->dry_run()) {
          for (const StoredChunk& c : r->selected) deps_.catalog->ForgetKey(c.info.key);
        }
        constexpr size_t kMaxListed = 10000;
        for (size_t i = 0; i < r->selected.size() && i < kMaxListed; ++i)
          EntryToProto(r->selected[i], resp->add_selected());
        resp->set_truncated(r->selected.size() > kMaxListed);
        resp->set_chunks(r->chunks);
        resp->set_bytes(r->bytes);
        resp->set_failed_chunks(r->failed.size());
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* KvTierService::Stats(grpc::CallbackServerContext* ctx,
                                               const pb::StatsRequest* req,
                                               pb::StatsResponse* resp) {
  return RunUnary(
      ctx, Rpc::kStats, req->protocol_version(), [this, resp](const std::string& tenant) {
        TieredStore& store = *deps_.store;
        const std::vector<TierCaps> tiers = store.tiers();
        const TieredStoreStats ss = store.stats();
        for (size_t t = 0; t < tiers.size() && t < ss.tiers.size(); ++t) {
          const TierCaps& caps = tiers[t];
          const TierStats& s = ss.tiers[t];
          pb::TierStatsProto* p = resp->add_tiers();
          p->set_name(caps.name);
          p->set_kind(TierToProto(caps.kind));
          p->set_capacity_bytes(s.capacity_bytes);
          p->set_used_bytes(s.used_bytes);
          p->set_chunks(s.chunks);
          p->set_hits(s.hits);
          p->set_misses(s.misses);
          p->set_evictions(s.evictions);
          p->set_integrity_errors(s.integrity_errors);
          p->set_pinned_bytes(s.pinned_bytes);
          p->set_bytes_in(s.bytes_in);
          p->set_bytes_out(s.bytes_out);
          p->set_puts(s.puts);
          p->set_copy_bytes(s.copy_bytes);
          p->set_admission_rejects(s.admission_rejects);
          p->set_ttl_expired(s.ttl_expired);
        }
        resp->set_hits(ss.hits);
        resp->set_misses(ss.misses + unserved_misses_.load(std::memory_order_relaxed));
        resp->set_integrity_errors(ss.integrity_errors);
        resp->set_connected_clients(deps_.metrics->ConnectedClients());
        resp->set_pending_write_bytes(ss.pending_write_bytes);
        resp->set_explicit_evictions(ss.explicit_evictions);
        const LeaseCounts lc = leases_.counts();
        resp->set_leases_granted(lc.granted);
        resp->set_leases_released(lc.released);
        resp->set_leases_expired(lc.expired);
        resp->set_leases_active(lc.active);
        resp->set_pinned_bytes(ss.pinned_bytes);
        resp->set_shm_put_copy_bytes(shm_put_copy_bytes_.load(std::memory_order_relaxed));
        resp->set_tenant(tenant);
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* KvTierService::Health(grpc::CallbackServerContext* ctx,
                                                const pb::HealthRequest* req,
                                                pb::HealthResponse* resp) {
  // Answered on the gRPC thread (no I/O), so a saturated worker pool still answers.
  const auto start = std::chrono::steady_clock::now();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::Status s = Authenticate(ctx).status();
  if (s.ok()) s = CheckVersion(req->protocol_version());
  if (s.ok()) {
    std::string detail;
    resp->set_serving(Healthy(&detail));
    resp->set_detail(detail);
    resp->set_protocol_version(kKvtierProtocolVersion);
    resp->set_version("kvtierd 0.1.0");
    resp->set_shm_available(deps_.config->shm_enabled);
  }
  deps_.metrics->RecordRpc(Rpc::kHealth, static_cast<int>(s.code()),
                           std::chrono::steady_clock::now() - start);
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

grpc::ServerUnaryReactor* KvTierService::ShmAttach(grpc::CallbackServerContext* ctx,
                                                   const pb::ShmAttachRequest* req,
                                                   pb::ShmAttachResponse* resp) {
  return RunUnary(
      ctx, Rpc::kShmAttach, req->protocol_version(), [this, req, resp](const std::string& tenant) {
        const DaemonConfig& c = *deps_.config;
        if (!c.shm_enabled)
          return absl::FailedPreconditionError(
              "shared memory is disabled in this daemon (shm.enabled: false or --no-shm)");
        if (req->bytes() < (1ull << 20) || req->bytes() > c.shm_max_region_bytes)
          return absl::InvalidArgumentError(absl::StrFormat("bytes: %d, expected 1 MiB .. %d",
                                                            req->bytes(), c.shm_max_region_bytes));
        {
          absl::MutexLock lock(&shm_mu_);
          if (regions_.size() >= c.shm_max_regions)
            return absl::ResourceExhaustedError(
                absl::StrFormat("shm: all %d regions in use", c.shm_max_regions));
        }
        auto region = ShmRegion::Create(req->bytes(), "kvtierd-shm");
        if (!region.ok()) return region.status();
        absl::MutexLock lock(&shm_mu_);
        const uint64_t id = next_region_id_++;
        resp->set_region_id(id);
        resp->set_path((*region)->path());
        resp->set_bytes((*region)->size());
        regions_[id] = ShmEntry{std::shared_ptr<ShmRegion>(std::move(*region)), tenant};
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* KvTierService::ShmDetach(grpc::CallbackServerContext* ctx,
                                                   const pb::ShmDetachRequest* req,
                                                   pb::ShmDetachResponse*) {
  return RunUnary(
      ctx, Rpc::kShmDetach, req->protocol_version(), [this, req](const std::string& tenant) {
        absl::MutexLock lock(&shm_mu_);
        auto it = regions_.find(req->region_id());
        if (it == regions_.end() || it->second.tenant != tenant)
          return absl::NotFoundError(
              absl::StrFormat("region_id: %d is not attached", req->region_id()));
        regions_.erase(it);  // unmapped when the last in-flight operation drops its reference
        return absl::OkStatus();
      });
}

}  // namespace kvt::daemon
