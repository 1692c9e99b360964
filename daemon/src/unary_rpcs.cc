#include "unary_rpcs.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <vector>

#include "absl/strings/str_format.h"
#include "kvstore/remote_client.h"
#include "wire.h"

namespace kvt::daemon {

namespace pb = ::kvtier::v1;

namespace {

void AbsenceToProto(const Absence& a, bool hit, pb::MissInfo* out) {
  if (hit) return;  // MISS_UNSPECIFIED
  // MissReason = AbsenceReason + 1 (kvtier.proto).
  out->set_reason(static_cast<pb::MissReason>(static_cast<int>(a.reason) + 1));
  if (a.reason == AbsenceReason::kNoRecord || a.reason == AbsenceReason::kNotStored) return;
  out->set_tier(TierToProto(a.tier));
  for (TierKind k : {TierKind::kHost, TierKind::kDisk, TierKind::kRemote}) {
    if (a.rejected_by & (1u << static_cast<unsigned>(k))) out->add_rejected_by(TierToProto(k));
  }
}

}  // namespace

absl::Status UnaryRpcs::Lookup(const pb::LookupRequest& req, pb::LookupResponse* resp,
                               const std::string& tenant) {
  if (req.release_leases_size() > static_cast<int>(kKvtierMaxBatchKeys))
    return absl::InvalidArgumentError(absl::StrFormat(
        "release_leases: %d, expected at most %d", req.release_leases_size(), kKvtierMaxBatchKeys));
  for (uint64_t id : req.release_leases()) d_.leases->Drop(id, tenant);
  auto keys = KeysFromProto(req.keys(), "keys");
  if (!keys.ok()) return keys.status();
  if (req.pin()) resp->set_lease_timeout_ms(static_cast<uint32_t>(d_.leases->timeout().count()));
  // Another tenant's chunk is a miss: not answered, not pinned, and it ends the leading run.
  // Why a miss is not held: as the tenant sees it (another tenant's key reads as unknown).
  const bool explain = req.per_key() && req.explain_misses();
  LookupResult r = d_.tenancy->Lookup(
      *keys, tenant, {.per_key = req.per_key(), .pin = req.pin(), .explain_misses = explain});
  if (r.lease)
    resp->set_lease_id(d_.leases->Add(
        std::move(r.lease), std::span<const ChunkKey>(keys->data(), r.num_leading_hits), tenant));
  resp->set_num_leading_hits(static_cast<uint32_t>(r.num_leading_hits));
  for (size_t i = 0; i < r.tier_index.size(); ++i) {
    const bool hit = r.tier_index[i] != kNoTier;
    resp->add_tier(hit ? TierToProto(r.tier_kind[i]) : pb::TIER_NONE);
    if (req.per_key()) resp->add_record_bytes(r.record_bytes[i]);
    HashToProto(r.ns[i], resp->add_ns());
    if (explain && i < r.absence.size()) AbsenceToProto(r.absence[i], hit, resp->add_miss());
  }
  return absl::OkStatus();
}

absl::Status UnaryRpcs::List(const pb::ListRequest& req, pb::ListResponse* resp,
                             const std::string& tenant) {
  const uint32_t page_size = req.page_size() == 0 ? 1000 : req.page_size();
  if (page_size > 10000)
    return absl::InvalidArgumentError(
        absl::StrFormat("page_size: %d, expected 0..10000", req.page_size()));
  if (!req.page_token().empty() && !ChunkKey::FromHex(req.page_token()).ok())
    return absl::InvalidArgumentError(
        "page_token: expected \"\" or a next_page_token (32 hex digits)");
  StoreListOptions lo;
  if (req.has_ns()) {
    lo.ns = NamespaceId{req.ns().lo(), req.ns().hi()};
    if (!d_.tenancy->Visible(*lo.ns, tenant)) return absl::OkStatus();  // nothing of yours
  }
  lo.visible = d_.tenancy->Filter(tenant);
  lo.page_token = req.page_token();
  lo.page_size = page_size;
  absl::StatusOr<StoreListPage> page = d_.store->List(lo);
  if (!page.ok()) return page.status();
  for (const StoredChunk& e : page->chunks) EntryToProto(e, resp->add_chunks());
  resp->set_next_page_token(page->next_page_token);
  return absl::OkStatus();
}

absl::Status UnaryRpcs::Evict(const pb::EvictRequest& req, pb::EvictResponse* resp,
                              const std::string& tenant) {
  EvictSelector sel;
  switch (req.selector_case()) {
    case pb::EvictRequest::kKeys: {
      auto keys = KeysFromProto(req.keys().keys(), "keys.keys");
      if (!keys.ok()) return keys.status();
      sel.keys = std::move(*keys);
      break;
    }
    case pb::EvictRequest::kNs:
      sel.ns = NamespaceId{req.ns().lo(), req.ns().hi()};
      break;
    case pb::EvictRequest::kOlderThanMs:
      if (req.older_than_ms() == 0) return absl::InvalidArgumentError("older_than_ms: must be > 0");
      sel.older_than = std::chrono::milliseconds(
          static_cast<int64_t>(std::min<uint64_t>(req.older_than_ms(), INT64_MAX / 2)));
      break;
    case pb::EvictRequest::kPrefix:
      sel.prefix = ChunkKey{req.prefix().lo(), req.prefix().hi()};
      if (sel.prefix->is_zero()) return absl::InvalidArgumentError("prefix: zero key");
      break;
    case pb::EvictRequest::kAll:
      if (!req.all()) return absl::InvalidArgumentError("all: must be true when set");
      sel.all = true;
      break;
    default:
      return absl::InvalidArgumentError(
          "selector: one of keys, ns, older_than_ms, prefix, all is required");
  }
  if (req.has_within_ns()) {
    if (req.selector_case() == pb::EvictRequest::kKeys ||
        req.selector_case() == pb::EvictRequest::kNs)
      return absl::InvalidArgumentError(
          "within_ns: narrows older_than_ms, prefix or all; not keys or ns");
    sel.within_ns = NamespaceId{req.within_ns().lo(), req.within_ns().hi()};
  }
  sel.visible = d_.tenancy->Filter(tenant);
  absl::StatusOr<EvictResult> r = d_.store->Evict(sel, EvictOptions{.dry_run = req.dry_run()});
  if (!r.ok()) return r.status();
  constexpr size_t kMaxListed = 10000;
  for (size_t i = 0; i < r->selected.size() && i < kMaxListed; ++i)
    EntryToProto(r->selected[i], resp->add_selected());
  resp->set_truncated(r->selected.size() > kMaxListed);
  resp->set_chunks(r->chunks);
  resp->set_bytes(r->bytes);
  resp->set_failed_chunks(r->failed.size());
  return absl::OkStatus();
}

absl::Status UnaryRpcs::Stats(pb::StatsResponse* resp, const std::string& tenant) {
  const std::vector<TierCaps> tiers = d_.store->tiers();
  const TieredStoreStats ss = d_.store->stats();
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
  resp->set_misses(ss.misses + d_.metrics->unserved_misses());
  resp->set_integrity_errors(ss.integrity_errors);
  resp->set_connected_clients(d_.metrics->ConnectedClients());
  resp->set_pending_write_bytes(ss.pending_write_bytes);
  resp->set_explicit_evictions(ss.explicit_evictions);
  const LeaseCounts lc = d_.leases->counts();
  resp->set_leases_granted(lc.granted);
  resp->set_leases_released(lc.released);
  resp->set_leases_expired(lc.expired);
  resp->set_leases_active(lc.active);
  resp->set_pinned_bytes(ss.pinned_bytes);
  resp->set_shm_put_copy_bytes(d_.writer->shm_put_copy_bytes());
  resp->set_tenant(tenant);
  return absl::OkStatus();
}

absl::Status UnaryRpcs::ShmAttach(const pb::ShmAttachRequest& req, pb::ShmAttachResponse* resp,
                                  const std::string& tenant) {
  absl::StatusOr<ShmRegistry::Attached> a = d_.shm->Attach(req.bytes(), tenant);
  if (!a.ok()) return a.status();
  resp->set_region_id(a->id);
  resp->set_path(a->path);
  resp->set_bytes(a->bytes);
  return absl::OkStatus();
}

absl::Status UnaryRpcs::ShmDetach(const pb::ShmDetachRequest& req, const std::string& tenant) {
  return d_.shm->Detach(req.region_id(), tenant);
}

}  // namespace kvt::daemon
