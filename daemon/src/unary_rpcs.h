// UnaryRpcs: what kvtierd's unary RPCs do (Lookup, List, Evict, Stats, ShmAttach,
// ShmDetach), as plain calls: a request, the caller's tenant (authenticated already),
// a response to fill, a status. They run on a worker (KvTierService::RunUnary); each call
// is answered from the store through Tenancy, so a tenant sees only its namespaces.
#ifndef KVT_DAEMON_UNARY_RPCS_H_
#define KVT_DAEMON_UNARY_RPCS_H_

#include <string>

#include "absl/status/status.h"
#include "kvstore/tiered_store.h"
#include "leases.h"
#include "metrics.h"
#include "proto/kvtier.pb.h"
#include "record_writer.h"
#include "shm_registry.h"
#include "tenancy.h"

namespace kvt::daemon {

struct UnaryRpcsDeps {
  TieredStore* store = nullptr;
  Tenancy* tenancy = nullptr;
  LeaseTable* leases = nullptr;
  ShmRegistry* shm = nullptr;
  const RecordWriter* writer = nullptr;  // its shm copy count (Stats)
  Metrics* metrics = nullptr;
};

// Thread-safe (its parts are). Every pointer in the deps outlives it.
class UnaryRpcs {
 public:
  explicit UnaryRpcs(const UnaryRpcsDeps& deps) : d_(deps) {}

  // Releases the leases the request names, then answers the keys as the tenant sees them
  // (another tenant's chunk is a miss), pinning the leading hits under a wire lease when
  // asked; one store Lookup for the whole batch.
  absl::Status Lookup(const ::kvtier::v1::LookupRequest& req, ::kvtier::v1::LookupResponse* resp,
                      const std::string& tenant);
  absl::Status List(const ::kvtier::v1::ListRequest& req, ::kvtier::v1::ListResponse* resp,
                    const std::string& tenant);
  // Only the tenant's namespaces are ever selected.
  absl::Status Evict(const ::kvtier::v1::EvictRequest& req, ::kvtier::v1::EvictResponse* resp,
                     const std::string& tenant);
  absl::Status Stats(::kvtier::v1::StatsResponse* resp, const std::string& tenant);
  absl::Status ShmAttach(const ::kvtier::v1::ShmAttachRequest& req,
                         ::kvtier::v1::ShmAttachResponse* resp, const std::string& tenant);
  absl::Status ShmDetach(const ::kvtier::v1::ShmDetachRequest& req, const std::string& tenant);

 private:
  const UnaryRpcsDeps d_;
};

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_UNARY_RPCS_H_
