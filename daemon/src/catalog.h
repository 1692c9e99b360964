// Catalog: which tenant owns which namespace, for tenancy. A namespace is claimed by the
// first Put into it and the claim is persisted (fsync'd) in <data_dir>/namespaces.log
// before that Put is acknowledged, so ownership survives restarts. Lines:
// "<32 hex digits of the namespace>\t<tenant>\n"; a torn last line (crash while
// appending) is ignored.
//
// The catalog knows no chunk keys: which namespace a chunk belongs to is in its record
// header, and every tier's index already holds it (ChunkStat::ns), so tenancy asks the
// store (tenancy.h). A chunk any tier holds is therefore visible to its owner, whether it
// was put before a restart, evicted from the host tier to disk, or put into a shared
// tier by another kvtierd.
#ifndef KVT_DAEMON_CATALOG_H_
#define KVT_DAEMON_CATALOG_H_

#include <cstdio>
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
  // `unowned_tenant`: the tenant that sees the namespaces nobody here owns (chunks another
  // kvtierd put into a shared tier, or a disk whose log was lost); kvtierd sets "" when
  // no tenants are configured (every caller is then the tenant ""). Unset: such
  // namespaces are visible to nobody until a tenant claims them by a Put.
  static absl::StatusOr<std::unique_ptr<Catalog>> Open(
      const std::string& log_path, std::optional<std::string> unowned_tenant = std::nullopt);
  ~Catalog();

  // Registers `ns` to `tenant` if it has no owner (appends + fsyncs the log).
  // PermissionDenied when another tenant owns it; Internal on a write error.
  absl::Status Claim(const NamespaceId& ns, const std::string& tenant);
  std::optional<std::string> Owner(const NamespaceId& ns) const;
  // `tenant` owns `ns`, or nobody does and `tenant` is the unowned_tenant.
  bool Visible(const NamespaceId& ns, const std::string& tenant) const;

 private:
  Catalog(std::FILE* log, std::optional<std::string> unowned_tenant)
      : log_(log), unowned_tenant_(std::move(unowned_tenant)) {}

  mutable absl::Mutex mu_;
  std::FILE* log_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<NamespaceId, std::string> owners_ ABSL_GUARDED_BY(mu_);
  const std::optional<std::string> unowned_tenant_;
};

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_CATALOG_H_
