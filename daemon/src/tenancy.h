// Tenancy: what a tenant may see, put and evict. A chunk is visible to a tenant when the
// namespace in its record header is the tenant's (Catalog::Visible). The namespace comes
// from the store, which has it from each tier's index (ChunkStat::ns) in the same Lookup
// that finds the chunk: one store call per batch of keys, nothing kept here. So a chunk
// any tier holds is visible to its owner (after a restart, after its eviction from the
// host tier to disk, put into a shared tier by another kvtierd), and no lookup answers
// with another tenant's chunk.
#ifndef KVT_DAEMON_TENANCY_H_
#define KVT_DAEMON_TENANCY_H_

#include <functional>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "catalog.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/tiered_store.h"

namespace kvt::daemon {

// What Admit decided for a record.
enum class Admission : uint8_t {
  kStore,     // the tenant owns (or just claimed) its namespace: store it
  kConflict,  // a tier holds the key under another namespace: acknowledge, store nothing
};

// Thread-safe (the catalog and the store are).
class Tenancy {
 public:
  // REQUIRES: both outlive this object.
  Tenancy(Catalog* catalog, TieredStore* store) : catalog_(catalog), store_(store) {}

  // The namespaces `tenant` sees, for the store's List, Evict and Lookup filters. The
  // function refers to `tenant`: it must outlive the call the filter is passed to.
  std::function<bool(const NamespaceId&)> Filter(const std::string& tenant) const;
  bool Visible(const NamespaceId& ns, const std::string& tenant) const {
    return catalog_->Visible(ns, tenant);
  }
  // TieredStore::Lookup over `keys` as `tenant` sees them: another tenant's chunk is a
  // miss (never pinned, and the leading run stops there). One store call.
  LookupResult Lookup(std::span<const ChunkKey> keys, const std::string& tenant,
                      LookupOptions options) const;
  // The record size of `key` in the fastest tier holding it for `tenant` (0: a miss).
  uint64_t VisibleSize(const ChunkKey& key, const std::string& tenant) const;
  // Defence in depth for bytes read from a tier: a record of `key` whose header names a
  // namespace of `tenant`.
  bool RecordVisible(std::span<const std::byte> record, const ChunkKey& key,
                     const std::string& tenant) const;
  // A Put of the record with this (already checked) header by `tenant`: claims its
  // namespace (PermissionDenied when another tenant owns it; Internal when the claim
  // cannot be persisted), then kConflict when a tier holds the key under another
  // namespace (another tenant's chunk or a forged header: acknowledged without storing,
  // so the answer reveals nothing), else kStore.
  absl::StatusOr<Admission> Admit(const ChunkHeader& header, const std::string& tenant);

 private:
  Catalog* const catalog_;
  TieredStore* const store_;
};

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_TENANCY_H_
