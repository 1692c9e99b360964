// Catalog: who owns what, for tenancy. Two maps:
//  * namespace → tenant, claimed by the first Put of a namespace and persisted (fsync'd)
//    in <data_dir>/namespaces.log before that Put is acknowledged, so ownership
//    survives restarts. Lines: "<32 hex digits of the namespace>\t<tenant>\n"; a torn
//    last line (crash while appending) is ignored.
//  * chunk key → namespace, learnt from record headers on Put and rebuilt on start from
//    the disk tier's index. A key is a prefix hash seeded by its namespace, so the
//    mapping of a stored key never changes; entries of evicted chunks are dropped when
//    a lookup misses them.
#ifndef KVT_DAEMON_CATALOG_H_
#define KVT_DAEMON_CATALOG_H_

#include <cstdio>
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
  static absl::StatusOr<std::unique_ptr<Catalog>> Open(const std::string& log_path);
  ~Catalog();

  // Registers `ns` to `tenant` if it has no owner (appends + fsyncs the log).
  // PermissionDenied when another tenant owns it; Internal on a write error.
  absl::Status Claim(const NamespaceId& ns, const std::string& tenant);
  std::optional<std::string> Owner(const NamespaceId& ns) const;
  bool NsVisible(const NamespaceId& ns, const std::string& tenant) const;

  // Records that `key` belongs to `ns` (replacing a stale entry).
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

 private:
  explicit Catalog(std::FILE* log) : log_(log) {}
  mutable absl::Mutex mu_;
  std::FILE* log_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<NamespaceId, std::string> owners_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<ChunkKey, NamespaceId> keys_ ABSL_GUARDED_BY(mu_);
  std::function<std::optional<NamespaceId>(const ChunkKey&)> shared_lookup_;  // set before serving
  std::optional<std::string> adopt_tenant_;
};

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_CATALOG_H_
