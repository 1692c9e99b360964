// Catalog: who owns what, for tenancy. Two maps:
//  * namespace → tenant, claimed by the first Put of a namespace and persisted (fsync'd)
//    in <data_dir>/namespaces.log before that Put is acknowledged, so ownership
//    survives restarts. Lines: "<32 hex digits of the namespace>\t<tenant>\n"; a torn
//    last line (crash while appending) is ignored.
//  * chunk key → namespace, learnt from record headers on Put and rebuilt on start from
//    the disk tier's index. A key is a prefix hash seeded by its namespace, so the
//    mapping of a stored key never changes; entries of evicted chunks are dropped when
//    a lookup misses them. The map holds at most `max_keys` entries: noting one more
//    drops the oldest noted key (FIFO). A dropped key is unknown, so it reads as a miss
//    (invisible to every tenant, never another tenant's chunk) until it is noted again.
#ifndef KVT_DAEMON_CATALOG_H_
#define KVT_DAEMON_CATALOG_H_

#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kvstore/types.h"

namespace kvt::daemon {

// Thread-safe.
class Catalog {
 public:
  // REQUIRES: max_keys >= 1.
  static absl::StatusOr<std::unique_ptr<Catalog>> Open(const std::string& log_path,
                                                       uint64_t max_keys = 1ull << 20);
  ~Catalog();

  // Registers `ns` to `tenant` if it has no owner (appends + fsyncs the log).
  // PermissionDenied when another tenant owns it; Internal on a write error.
  absl::Status Claim(const NamespaceId& ns, const std::string& tenant);
  std::optional<std::string> Owner(const NamespaceId& ns) const;
  bool NsVisible(const NamespaceId& ns, const std::string& tenant) const;

  // Records that `key` belongs to `ns` (replacing a stale entry); drops the oldest noted
  // key when the catalog holds max_keys.
  void NoteKey(const ChunkKey& key, const NamespaceId& ns);
  std::optional<NamespaceId> NsOf(const ChunkKey& key) const;
  void ForgetKey(const ChunkKey& key);
  // The key's namespace is known and owned by `tenant`. An unknown key is looked up
  // with the shared lookup, when set.
  bool KeyVisible(const ChunkKey& key, const std::string& tenant);
  // Set before serving. For a key this catalog does not know (a chunk another kvtierd
  // put into a shared tier), `lookup` answers its namespace (nullopt: unknown); the key
  // is then noted, and a namespace without an owner here is claimed for
  // `adopt_tenant` when set (no tenants configured), else stays invisible.
  void SetSharedLookup(std::function<std::optional<NamespaceId>(const ChunkKey&)> lookup,
                       std::optional<std::string> adopt_tenant);
  size_t num_keys() const;
  // Keys dropped because the catalog was full, since Open.
  uint64_t dropped_keys() const;

 private:
  struct KeyEntry {
    NamespaceId ns;
    uint64_t seq = 0;  // when it was (last) noted: matches its place in order_
  };
  Catalog(std::FILE* log, uint64_t max_keys) : log_(log), max_keys_(max_keys) {}
  void NoteKeyLocked(const ChunkKey& key, const NamespaceId& ns) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::FILE* log_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<NamespaceId, std::string> owners_ ABSL_GUARDED_BY(mu_);
  const uint64_t max_keys_;
  absl::flat_hash_map<ChunkKey, KeyEntry> keys_ ABSL_GUARDED_BY(mu_);
  // Noting order, oldest first; an element whose seq no longer matches keys_ is stale
  // (forgotten or noted again) and skipped. Compacted when it grows past 2 x max_keys.
  std::deque<std::pair<ChunkKey, uint64_t>> order_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<std::optional<NamespaceId>(const ChunkKey&)> shared_lookup_;  // set before serving
  std::optional<std::string> adopt_tenant_;
};

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_CATALOG_H_
