#include "service.h"

#include <chrono>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/remote_client.h"
#include "spdlog/spdlog.h"

namespace kvt::daemon {

namespace pb = ::kvtier::v1;

absl::Status CheckVersion(uint32_t version) {
  if (version == 0)
    return absl::InvalidArgumentError(
        absl::StrFormat("protocol_version: missing (0), expected %d", kKvtierProtocolVersion));
  if (version != kKvtierProtocolVersion)
    return absl::FailedPreconditionError(absl::StrFormat("protocol_version: %d is not spoken by this daemon (%d)",
                                                         version, kKvtierProtocolVersion));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ChunkKey>> KeysFromProto(const google::protobuf::RepeatedPtrField<pb::Key128>& keys,
                                                    const char* field) {
  if (keys.empty() || keys.size() > static_cast<int>(kKvtierMaxBatchKeys))
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: %d keys, expected 1..%d", field, keys.size(), kKvtierMaxBatchKeys));
  std::vector<ChunkKey> out;
  out.reserve(keys.size());
  for (int i = 0; i < keys.size(); ++i) {
    ChunkKey k{keys[i].lo(), keys[i].hi()};
    if (k.is_zero()) return absl::InvalidArgumentError(absl::StrFormat("%s[%d]: zero key", field, i));
    out.push_back(k);
  }
  return out;
}

pb::TierKind TierToProto(TierKind kind) {
  switch (kind) {
    case TierKind::kHost: return pb::TIER_HOST;
    case TierKind::kDisk: return pb::TIER_DISK;
    case TierKind::kRemote: return pb::TIER_REMOTE;
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

KvTierService::KvTierService(const ServiceDeps& deps) : deps_(deps) {
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
  if (!deps_.store->healthy()) d += "store write-back thread died; ";
  if (deps_.pool->alive() != deps_.pool->size())
    d += absl::StrFormat("%d of %d worker threads alive; ", deps_.pool->alive(), deps_.pool->size());
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

absl::Status KvTierService::StoreRecord(std::span<const std::byte> record, const std::string& tenant,
                                        ChunkKey* key_out) {
  auto header = DecodeChunkHeader(record);
  if (!header.ok()) return absl::InvalidArgumentError("data: not a valid chunk record: " + header.status().ToString());
  if (record.size() != header->record_bytes())
    return absl::InvalidArgumentError(absl::StrFormat("record_bytes: %d, the record header says %d", record.size(),
                                                      header->record_bytes()));
  if (header->key.is_zero()) return absl::InvalidArgumentError("data: record key is zero");
  if (deps_.config->verify_on_put) {
    auto v = VerifyChunk(record, DecodeExpectations{.ns = header->ns, .key = header->key});
    if (!v.ok()) return absl::InvalidArgumentError("data: record failed verification: " + v.status().ToString());
  }
  *key_out = header->key;
  if (absl::Status s = deps_.catalog->Claim(header->ns, tenant); !s.ok()) return s;
  // A key already stored under another namespace (another tenant's chunk, or a forged
  // header): acknowledge without storing, so the answer reveals nothing.
  if (auto ns = deps_.catalog->NsOf(header->key); ns && *ns != header->ns) {
    ChunkKey k = header->key;
    auto present = deps_.store->Lookup(std::span<const ChunkKey>(&k, 1));
    if (present.num_leading_hits > 0) {
      deps_.metrics->AddPutConflict();
      return absl::OkStatus();
    }
  }
  deps_.catalog->NoteKey(header->key, header->ns);
  if (deps_.config->durability == Durability::kSync && deps_.disk_index >= 0) {
    absl::Status s = deps_.store->tier(static_cast<size_t>(deps_.disk_index)).Put(record);
    if (!s.ok()) return absl::Status(s.code(), "disk tier: " + std::string(s.message()));
  }
  return deps_.store->Put(record);
}

grpc::ServerUnaryReactor* KvTierService::RunUnary(grpc::CallbackServerContext* ctx, Rpc rpc, uint32_t version,
                                                  std::function<absl::Status(const std::string&)> fn) {
  const auto start = std::chrono::steady_clock::now();
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  CallStarted();
  auto finish = [this, reactor, rpc, start](const absl::Status& s) {
    deps_.metrics->RecordRpc(rpc, static_cast<int>(s.code()), std::chrono::steady_clock::now() - start);
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
  deps_.pool->Submit([fn = std::move(fn), finish, t = *tenant] { finish(fn(t)); });
  return reactor;
}

grpc::ServerUnaryReactor* KvTierService::Lookup(grpc::CallbackServerContext* ctx, const pb::LookupRequest* req,
                                                pb::LookupResponse* resp) {
  return RunUnary(ctx, Rpc::kLookup, req->protocol_version(), [this, req, resp](const std::string& tenant) {
    auto keys = KeysFromProto(req->keys(), "keys");
    if (!keys.ok()) return keys.status();
    TieredStore& store = *deps_.store;
    if (!req->per_key()) {
      size_t visible = 0;
      while (visible < keys->size() && deps_.catalog->KeyVisible((*keys)[visible], tenant)) ++visible;
      LookupResult r = visible == 0 ? LookupResult{} : store.Lookup(std::span<const ChunkKey>(keys->data(), visible));
      resp->set_num_leading_hits(static_cast<uint32_t>(r.num_leading_hits));
      for (size_t i = 0; i < r.num_leading_hits; ++i) resp->add_tier(TierToProto(r.tier_kind[i]));
      return absl::OkStatus();
    }
    std::vector<int> tier_of(keys->size(), -1);
    for (size_t t = 0; t < store.num_tiers(); ++t) {
      std::vector<bool> c = store.tier(t).Contains(*keys);
      for (size_t i = 0; i < keys->size(); ++i)
        if (tier_of[i] < 0 && c[i]) tier_of[i] = static_cast<int>(t);
    }
    bool leading = true;
    uint32_t n = 0;
    for (size_t i = 0; i < keys->size(); ++i) {
      uint64_t bytes = 0;
      if (tier_of[i] >= 0 && !deps_.catalog->KeyVisible((*keys)[i], tenant)) tier_of[i] = -1;
      if (tier_of[i] >= 0) {
        auto sz = store.tier(static_cast<size_t>(tier_of[i])).RecordSize((*keys)[i]);
        if (sz.ok()) bytes = *sz;
        else tier_of[i] = -1;
      }
      if (tier_of[i] < 0) leading = false;
      if (leading) ++n;
      resp->add_tier(tier_of[i] < 0 ? pb::TIER_NONE
                                    : TierToProto(store.tier(static_cast<size_t>(tier_of[i])).kind()));
      resp->add_record_bytes(bytes);
    }
    resp->set_num_leading_hits(n);
    return absl::OkStatus();
  });
}

namespace {

struct Listed {
  ChunkInfo info;
  int tier = 0;
};

// Lists the caller's chunks in key order after `token`, merging every tier (the fastest
// tier holding a key wins). At most `limit` entries; `next` = "" when exhausted.
absl::Status ListMerged(TieredStore& store, Catalog& catalog, const std::string& tenant,
                        std::optional<NamespaceId> ns, std::string token, size_t limit, std::vector<Listed>* out,
                        std::string* next) {
  next->clear();
  for (;;) {
    std::map<ChunkKey, Listed> merged;
    std::optional<ChunkKey> bound;  // keys above it may be missing from some tier's page
    for (size_t t = 0; t < store.num_tiers(); ++t) {
      ListOptions lo;
      lo.ns = ns;
      lo.page_token = token;
      lo.page_size = std::max<size_t>(limit, 256);
      auto page = store.tier(t).List(lo);
      if (!page.ok()) return page.status();
      for (const auto& c : page->chunks) merged.emplace(c.key, Listed{c, static_cast<int>(t)});
      if (!page->next_page_token.empty() && !page->chunks.empty()) {
        if (!bound || page->chunks.back().key < *bound) bound = page->chunks.back().key;
      }
    }
    for (const auto& [k, e] : merged) {
      if (bound && *bound < k) break;
      if (!catalog.NsVisible(e.info.ns, tenant)) continue;
      out->push_back(e);
      if (out->size() == limit) {
        *next = k.ToHex();
        return absl::OkStatus();
      }
    }
    if (!bound) return absl::OkStatus();
    token = bound->ToHex();
  }
}

}  // namespace

grpc::ServerUnaryReactor* KvTierService::List(grpc::CallbackServerContext* ctx, const pb::ListRequest* req,
                                              pb::ListResponse* resp) {
  return RunUnary(ctx, Rpc::kList, req->protocol_version(), [this, req, resp](const std::string& tenant) {
    uint32_t page_size = req->page_size() == 0 ? 1000 : req->page_size();
    if (page_size > 10000)
      return absl::InvalidArgumentError(absl::StrFormat("page_size: %d, expected 0..10000", req->page_size()));
    if (!req->page_token().empty() && !ChunkKey::FromHex(req->page_token()).ok())
      return absl::InvalidArgumentError("page_token: expected \"\" or a next_page_token (32 hex digits)");
    std::optional<NamespaceId> ns;
    if (req->has_ns()) {
      ns = NamespaceId{req->ns().lo(), req->ns().hi()};
      if (!deps_.catalog->NsVisible(*ns, tenant)) return absl::OkStatus();  // nothing of yours
    }
    std::vector<Listed> listed;
    std::string next;
    absl::Status s = ListMerged(*deps_.store, *deps_.catalog, tenant, ns, req->page_token(), page_size, &listed, &next);
    if (!s.ok()) return s;
    for (const auto& e : listed) {
      pb::ChunkEntry* c = resp->add_chunks();
      KeyToProto(e.info.key, c->mutable_key());
      c->mutable_ns()->set_lo(e.info.ns.lo);
      c->mutable_ns()->set_hi(e.info.ns.hi);
      KeyToProto(e.info.parent, c->mutable_parent());
      c->set_token_count(e.info.token_count);
      c->set_bytes(e.info.record_bytes);
      c->set_tier(TierToProto(deps_.store->tier(static_cast<size_t>(e.tier)).kind()));
      c->set_last_access_unix_ms(e.info.last_access_unix_ms);
    }
    resp->set_next_page_token(next);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* KvTierService::Evict(grpc::CallbackServerContext* ctx, const pb::EvictRequest* req,
                                               pb::EvictResponse* resp) {
  return RunUnary(ctx, Rpc::kEvict, req->protocol_version(), [this, req, resp](const std::string& tenant) {
    TieredStore& store = *deps_.store;
    std::vector<std::pair<ChunkKey, uint64_t>> victims;  // key, bytes
    auto all_of_tenant = [&](std::optional<NamespaceId> ns, std::vector<Listed>* out) -> absl::Status {
      std::string token, next;
      do {
        std::vector<Listed> page;
        if (auto s = ListMerged(store, *deps_.catalog, tenant, ns, token, 10000, &page, &next); !s.ok()) return s;
        out->insert(out->end(), page.begin(), page.end());
        token = next;
      } while (!token.empty());
      return absl::OkStatus();
    };
    switch (req->selector_case()) {
      case pb::EvictRequest::kKeys: {
        auto keys = KeysFromProto(req->keys().keys(), "keys.keys");
        if (!keys.ok()) return keys.status();
        for (const ChunkKey& k : *keys) {
          if (!deps_.catalog->KeyVisible(k, tenant)) continue;
          uint64_t bytes = 0;
          for (size_t t = 0; t < store.num_tiers() && bytes == 0; ++t)
            if (auto sz = store.tier(t).RecordSize(k); sz.ok()) bytes = *sz;
          if (bytes > 0) victims.emplace_back(k, bytes);
        }
        break;
      }
      case pb::EvictRequest::kNs: {
        NamespaceId ns{req->ns().lo(), req->ns().hi()};
        if (!deps_.catalog->NsVisible(ns, tenant)) break;
        std::vector<Listed> all;
        if (auto s = all_of_tenant(ns, &all); !s.ok()) return s;
        for (const auto& e : all) victims.emplace_back(e.info.key, e.info.record_bytes);
        break;
      }
      case pb::EvictRequest::kOlderThanMs: {
        if (req->older_than_ms() == 0) return absl::InvalidArgumentError("older_than_ms: must be > 0");
        const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count();
        const int64_t cutoff = now_ms - static_cast<int64_t>(std::min<uint64_t>(req->older_than_ms(), INT64_MAX / 2));
        std::vector<Listed> all;
        if (auto s = all_of_tenant(std::nullopt, &all); !s.ok()) return s;
        for (const auto& e : all)
          if (e.info.last_access_unix_ms < cutoff) victims.emplace_back(e.info.key, e.info.record_bytes);
        break;
      }
      case pb::EvictRequest::kPrefix: {
        ChunkKey root{req->prefix().lo(), req->prefix().hi()};
        if (root.is_zero()) return absl::InvalidArgumentError("prefix: zero key");
        auto ns = deps_.catalog->NsOf(root);
        if (!ns || !deps_.catalog->NsVisible(*ns, tenant)) break;
        std::vector<Listed> all;
        if (auto s = all_of_tenant(*ns, &all); !s.ok()) return s;
        std::multimap<ChunkKey, const Listed*> children;
        const Listed* root_entry = nullptr;
        for (const auto& e : all) {
          children.emplace(e.info.parent, &e);
          if (e.info.key == root) root_entry = &e;
        }
        std::vector<ChunkKey> frontier = {root};
        if (root_entry != nullptr) victims.emplace_back(root, root_entry->info.record_bytes);
        absl::flat_hash_map<ChunkKey, bool> seen;
        seen[root] = true;
        while (!frontier.empty()) {
          ChunkKey k = frontier.back();
          frontier.pop_back();
          auto [b, e] = children.equal_range(k);
          for (auto it = b; it != e; ++it) {
            if (seen.contains(it->second->info.key)) continue;
            seen[it->second->info.key] = true;
            victims.emplace_back(it->second->info.key, it->second->info.record_bytes);
            frontier.push_back(it->second->info.key);
          }
        }
        break;
      }
      case pb::EvictRequest::kAll: {
        if (!req->all()) return absl::InvalidArgumentError("all: must be true when set");
        std::vector<Listed> all;
        if (auto s = all_of_tenant(std::nullopt, &all); !s.ok()) return s;
        for (const auto& e : all) victims.emplace_back(e.info.key, e.info.record_bytes);
        break;
      }
      default:
        return absl::InvalidArgumentError("selector: one of keys, ns, older_than_ms, prefix, all is required");
    }
    uint64_t chunks = 0, bytes = 0;
    for (const auto& [k, b] : victims) {
      if (!req->dry_run()) {
        if (!store.Erase(k).ok()) continue;  // pinned: not evicted
        deps_.catalog->ForgetKey(k);
      }
      ++chunks;
      bytes += b;
    }
    resp->set_chunks(chunks);
    resp->set_bytes(bytes);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* KvTierService::Stats(grpc::CallbackServerContext* ctx, const pb::StatsRequest* req,
                                               pb::StatsResponse* resp) {
  return RunUnary(ctx, Rpc::kStats, req->protocol_version(), [this, resp](const std::string& tenant) {
    TieredStore& store = *deps_.store;
    for (size_t t = 0; t < store.num_tiers(); ++t) {
      Tier& tier = store.tier(t);
      TierStats s = tier.stats();
      pb::TierStatsProto* p = resp->add_tiers();
      p->set_name(std::string(tier.name()));
      p->set_kind(TierToProto(tier.kind()));
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
    }
    TieredStoreStats ss = store.stats();
    resp->set_hits(ss.hits);
    resp->set_misses(ss.misses);
    resp->set_integrity_errors(IntegrityErrorCount());
    resp->set_connected_clients(deps_.metrics->ConnectedClients());
    resp->set_pending_write_bytes(ss.pending_write_bytes);
    resp->set_tenant(tenant);
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* KvTierService::Health(grpc::CallbackServerContext* ctx, const pb::HealthRequest* req,
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
  deps_.metrics->RecordRpc(Rpc::kHealth, static_cast<int>(s.code()), std::chrono::steady_clock::now() - start);
  reactor->Finish(ToGrpcStatus(s));
  return reactor;
}

grpc::ServerUnaryReactor* KvTierService::ShmAttach(grpc::CallbackServerContext* ctx, const pb::ShmAttachRequest* req,
                                                   pb::ShmAttachResponse* resp) {
  return RunUnary(ctx, Rpc::kShmAttach, req->protocol_version(), [this, req, resp](const std::string& tenant) {
    const DaemonConfig& c = *deps_.config;
    if (!c.shm_enabled) return absl::FailedPreconditionError("shared memory is disabled in this daemon's config");
    if (req->bytes() < (1ull << 20) || req->bytes() > c.shm_max_region_bytes)
      return absl::InvalidArgumentError(
          absl::StrFormat("bytes: %d, expected 1 MiB .. %d", req->bytes(), c.shm_max_region_bytes));
    {
      absl::MutexLock lock(&shm_mu_);
      if (regions_.size() >= c.shm_max_regions)
        return absl::ResourceExhaustedError(absl::StrFormat("shm: all %d regions in use", c.shm_max_regions));
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

grpc::ServerUnaryReactor* KvTierService::ShmDetach(grpc::CallbackServerContext* ctx, const pb::ShmDetachRequest* req,
                                                   pb::ShmDetachResponse*) {
  return RunUnary(ctx, Rpc::kShmDetach, req->protocol_version(), [this, req](const std::string& tenant) {
    absl::MutexLock lock(&shm_mu_);
    auto it = regions_.find(req->region_id());
    if (it == regions_.end() || it->second.tenant != tenant)
      return absl::NotFoundError(absl::StrFormat("region_id: %d is not attached", req->region_id()));
    regions_.erase(it);  // unmapped when the last in-flight operation drops its reference
    return absl::OkStatus();
  });
}

}  // namespace kvt::daemon
