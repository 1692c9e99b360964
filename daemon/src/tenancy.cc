#include "tenancy.h"

namespace kvt::daemon {

std::function<bool(const NamespaceId&)> Tenancy::Filter(const std::string& tenant) const {
  return
      [catalog = catalog_, &tenant](const NamespaceId& ns) { return catalog->Visible(ns, tenant); };
}

LookupResult Tenancy::Lookup(std::span<const ChunkKey> keys, const std::string& tenant,
                             LookupOptions options) const {
  options.visible = Filter(tenant);
  return store_->Lookup(keys, options);
}

uint64_t Tenancy::VisibleSize(const ChunkKey& key, const std::string& tenant) const {
  LookupResult r = Lookup(std::span<const ChunkKey>(&key, 1), tenant, {.per_key = true});
  return r.record_bytes.empty() ? 0 : r.record_bytes[0];
}

bool Tenancy::RecordVisible(std::span<const std::byte> record, const ChunkKey& key,
                            const std::string& tenant) const {
  absl::StatusOr<ChunkHeader> h = DecodeChunkHeader(record);
  return h.ok() && h->key == key && catalog_->Visible(h->ns, tenant);
}

absl::StatusOr<Admission> Tenancy::Admit(const ChunkHeader& header, const std::string& tenant) {
  if (absl::Status s = catalog_->Claim(header.ns, tenant); !s.ok()) return s;
  const NamespaceId ns = header.ns;
  LookupResult other =
      store_->Lookup(std::span<const ChunkKey>(&header.key, 1),
                     {.per_key = true, .visible = [ns](const NamespaceId& n) { return n != ns; }});
  return other.num_leading_hits > 0 ? Admission::kConflict : Admission::kStore;
}

}  // namespace kvt::daemon
