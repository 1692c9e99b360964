// KvTierService: the gRPC callback-API facade of proto/kvtier.proto. It authenticates,
// admits and counts each call (Authenticator, CallGate), then hands it to the part that
// does it:
//  * unary RPCs (Lookup, List, Evict, Stats, ShmAttach, ShmDetach): UnaryRpcs, run on a
//    worker (Lookup on the lookup pool); Health is answered here, on the gRPC thread;
//  * Put: a PutSession per call (put_session.h), which stores through RecordWriter;
//  * Get: a GetSession per call (get_session.h).
// Tenancy (tenancy.h) answers what a tenant sees; ShmRegistry holds the clients' shared
// memory regions; LeaseTable the wire leases of pinned Lookups.
//
// Threads: gRPC threads only parse, authenticate and validate; every operation that
// touches the store (memory copies, disk I/O, RocksDB) runs on the WorkerPool, which
// finishes the reactor (or starts its next read/write) when done.
#ifndef KVT_DAEMON_SERVICE_H_
#define KVT_DAEMON_SERVICE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "authenticator.h"
#include "call_gate.h"
#include "catalog.h"
#include "daemon/config.h"
#include "kvstore/clock.h"
#include "kvstore/health_registry.h"
#include "kvstore/tiered_store.h"
#include "leases.h"
#include "metrics.h"
#include "proto/kvtier.grpc.pb.h"
#include "record_writer.h"
#include "shm_registry.h"
#include "stream_deps.h"
#include "tenancy.h"
#include "unary_rpcs.h"
#include "worker_pool.h"

namespace kvt::daemon {

struct ServiceDeps {
  const DaemonConfig* config = nullptr;
  TieredStore* store = nullptr;
  Catalog* catalog = nullptr;
  Metrics* metrics = nullptr;
  WorkerPool* pool = nullptr;
  // Runs Lookups, so they never queue behind transfers that hold `pool`'s workers while
  // they wait for a client (a progressive shm Put or Get waits for the client's copy):
  // docs/performance.md "kvtierd under many clients". nullptr: Lookups run on `pool`.
  WorkerPool* lookup_pool = nullptr;
  // Every supervised thread of the daemon (Healthy() reports each failed one); nullptr:
  // not consulted.
  const HealthRegistry* health = nullptr;
  // The time of shm stall timeouts (the store's clock); nullptr: SystemClock().
  std::shared_ptr<Clock> clock;
};

// Thread-safe.
// Get is registered raw (grpc::ByteBuffer in and out) so the record bytes go from the
// daemon's buffer to the socket without being copied into and serialised out of a
// protobuf message; the bytes on the wire are still GetResponse messages.
class KvTierService final : public ::kvtier::v1::KvTier::WithRawCallbackMethod_Get<
                                ::kvtier::v1::KvTier::CallbackService> {
 public:
  explicit KvTierService(const ServiceDeps& deps);
  ~KvTierService() override;

  grpc::ServerUnaryReactor* Lookup(grpc::CallbackServerContext* ctx,
                                   const ::kvtier::v1::LookupRequest* req,
                                   ::kvtier::v1::LookupResponse* resp) override;
  grpc::ServerReadReactor<::kvtier::v1::PutRequest>* Put(grpc::CallbackServerContext* ctx,
                                                         ::kvtier::v1::PutResponse* resp) override;
  // Raw: `req` is a serialised GetRequest; every message written is a serialised GetResponse.
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Get(grpc::CallbackServerContext* ctx,
                                                  const grpc::ByteBuffer* req) override;
  grpc::ServerUnaryReactor* Evict(grpc::CallbackServerContext* ctx,
                                  const ::kvtier::v1::EvictRequest* req,
                                  ::kvtier::v1::EvictResponse* resp) override;
  grpc::ServerUnaryReactor* List(grpc::CallbackServerContext* ctx,
                                 const ::kvtier::v1::ListRequest* req,
                                 ::kvtier::v1::ListResponse* resp) override;
  grpc::ServerUnaryReactor* Stats(grpc::CallbackServerContext* ctx,
                                  const ::kvtier::v1::StatsRequest* req,
                                  ::kvtier::v1::StatsResponse* resp) override;
  grpc::ServerUnaryReactor* Health(grpc::CallbackServerContext* ctx,
                                   const ::kvtier::v1::HealthRequest* req,
                                   ::kvtier::v1::HealthResponse* resp) override;
  grpc::ServerUnaryReactor* ShmAttach(grpc::CallbackServerContext* ctx,
                                      const ::kvtier::v1::ShmAttachRequest* req,
                                      ::kvtier::v1::ShmAttachResponse* resp) override;
  grpc::ServerUnaryReactor* ShmDetach(grpc::CallbackServerContext* ctx,
                                      const ::kvtier::v1::ShmDetachRequest* req,
                                      ::kvtier::v1::ShmDetachResponse* resp) override;

  // Health: store write-back thread alive and every worker alive. `detail` says what died.
  bool Healthy(std::string* detail) const;
  size_t shm_regions() const { return shm_.size(); }
  // The gRPC leases (Lookup with pin; released by the Get naming them or by timeout).
  LeaseTable& leases() { return leases_; }

  // Graceful shutdown: after BeginDrain new calls are refused with UNAVAILABLE;
  // active_calls() counts the calls not finished yet.
  void BeginDrain() { gate_.BeginDrain(); }
  int64_t active_calls() const { return gate_.active(); }

 private:
  // Admits the call, then runs `fn` on a worker and finishes the unary reactor with its
  // status, recording metrics.
  grpc::ServerUnaryReactor* RunUnary(grpc::CallbackServerContext* ctx, Rpc rpc, uint32_t version,
                                     std::function<absl::Status(const std::string& tenant)> fn);

  const ServiceDeps deps_;
  Authenticator auth_;
  CallGate gate_;
  Tenancy tenancy_;
  ShmRegistry shm_;
  LeaseTable leases_;
  RecordWriter writer_;
  UnaryRpcs unary_;
  StreamDeps streams_;
};

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_SERVICE_H_
