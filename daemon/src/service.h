// KvTierService: the gRPC callback-API implementation of proto/kvtier.proto.
//
// Threads: gRPC threads only parse, authenticate and validate; every operation that
// touches the store (memory copies, disk I/O, RocksDB) runs on the WorkerPool, which
// finishes the reactor (or starts its next read/write) when done.
#ifndef KVT_DAEMON_SERVICE_H_
#define KVT_DAEMON_SERVICE_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "catalog.h"
#include "daemon/config.h"
#include "kvstore/clock.h"
#include "kvstore/health_registry.h"
#include "kvstore/shm_progress.h"
#include "kvstore/shm_region.h"
#include "kvstore/tiered_store.h"
#include "leases.h"
#include "metrics.h"
#include "proto/kvtier.grpc.pb.h"
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

struct ShmEntry {
  std::shared_ptr<ShmRegion> region;
  std::string tenant;
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
  size_t shm_regions();

  // --- used by the reactors (service_rpcs.cc) ---
  const ServiceDeps& deps() const { return deps_; }
  // Tenant of the caller, or UNAUTHENTICATED. Also notes the client id.
  absl::StatusOr<std::string> Authenticate(grpc::CallbackServerContext* ctx);
  // Validates, checks tenancy and stores one whole record (runs on a worker).
  // REQUIRES: `record` is daemon-owned memory nobody else writes (never a client's shm
  // region: every check and the store must read the same bytes). `payload_checksum`,
  // when set, is the XXH3-64 of record's payload computed while copying it there
  // (CopyRecordHashingPayload); verification then compares it instead of hashing again.
  absl::Status StoreRecord(std::span<const std::byte> record, const std::string& tenant,
                           ChunkKey* key_out,
                           std::optional<uint64_t> payload_checksum = std::nullopt);
  // StoreRecord for a record in a client's shm region (`src`, which the client may
  // still be writing): the record is copied once, hashing its payload in the same pass
  // when verify_on_put, straight into the memory the store's tier 0 lends
  // (TieredStore::Write with a fill), and every check and the store read only that copy. With
  // durability: sync the disk tier is then written from that same copy in tier 0, held
  // by a reader count (no second copy). Counted in Stats' shm_put_copy_bytes.
  // With `progress` (a progressive Put: the client is still writing `src`, which lies at
  // region offset `src_offset`), each piece is copied once the client publishes it; no
  // progress for shm.stall_timeout_ms fails the Put (DeadlineExceeded, nothing stored).
  absl::Status StoreShmRecord(std::span<const std::byte> src, const std::string& tenant,
                              ChunkKey* key_out, const ShmProgress* progress = nullptr,
                              uint64_t src_offset = 0);
  // Region owned by `tenant`, or nullptr.
  std::shared_ptr<ShmRegion> FindRegion(uint64_t id, const std::string& tenant);
  // OK when `slice` names no progressive transfer, or one whose control block is
  // 64-byte aligned, inside `region` and outside the slice's data; InvalidArgument.
  static absl::Status CheckProgressBlock(const ShmRegion& region,
                                         const ::kvtier::v1::ShmSlice& slice);
  std::atomic<uint64_t>& inflight_bytes() { return inflight_bytes_; }
  // The gRPC leases (Lookup with pin; released by the Get naming them or by timeout).
  LeaseTable& leases() { return leases_; }

  // Graceful shutdown: after BeginDrain new calls are refused with UNAVAILABLE;
  // active_calls() counts the calls not finished yet.
  void BeginDrain() { draining_.store(true); }
  bool draining() const { return draining_.load(); }
  // Counts a call from its arrival to its last callback (CallStarted/CallDone pairs).
  void CallStarted() { active_calls_.fetch_add(1); }
  void CallDone() { active_calls_.fetch_sub(1); }
  int64_t active_calls() const { return active_calls_.load(); }
  // A Get (not a peek) of a key answered "not found" without asking the store (a key the
  // catalog does not know, or gone from every tier): the store counts no miss for it, so
  // Stats adds these to the store's misses.
  void CountUnservedMiss() { unserved_misses_.fetch_add(1, std::memory_order_relaxed); }

 private:
  // Runs `fn` on a worker, then finishes the unary reactor with its status and records metrics.
  grpc::ServerUnaryReactor* RunUnary(grpc::CallbackServerContext* ctx, Rpc rpc, uint32_t version,
                                     std::function<absl::Status(const std::string& tenant)> fn);

  // StoreRecord's checks (header, size, verification, tenant claim; notes the key) on
  // daemon-owned bytes. OK with *store false: a conflicting key, acknowledged unstored.
  absl::Status AdmitRecord(std::span<const std::byte> record, const std::string& tenant,
                           ChunkKey* key_out, std::optional<uint64_t> payload_checksum,
                           bool* store);
  PutAck StoreAck() const;  // durability: sync = PutAck::kDurable

  const ServiceDeps deps_;
  LeaseTable leases_;
  absl::flat_hash_map<std::string, std::string> token_to_tenant_;
  std::atomic<uint64_t> inflight_bytes_{0};
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> active_calls_{0};
  std::atomic<uint64_t> unserved_misses_{0};
  // Bytes copied out of clients' shm regions by StoreShmRecord's fill (Stats).
  std::atomic<uint64_t> shm_put_copy_bytes_{0};
  absl::Mutex shm_mu_;
  absl::flat_hash_map<uint64_t, ShmEntry> regions_ ABSL_GUARDED_BY(shm_mu_);
  uint64_t next_region_id_ ABSL_GUARDED_BY(shm_mu_) = 1;
};

// INVALID_ARGUMENT / FAILED_PRECONDITION for a bad protocol_version.
absl::Status CheckVersion(uint32_t version);
// Converts and validates a key list (1..4096 non-zero keys), naming `field` on error.
absl::StatusOr<std::vector<ChunkKey>> KeysFromProto(
    const google::protobuf::RepeatedPtrField<::kvtier::v1::Key128>& keys, const char* field);
::kvtier::v1::TierKind TierToProto(TierKind kind);

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_SERVICE_H_
