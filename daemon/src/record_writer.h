// RecordWriter: kvtierd's put path. Checks one whole record (header, size, verification
// when verify_on_put, tenancy: Tenancy::Admit) and writes it into the store, acknowledged
// as the durability setting says; from the daemon's own buffer (a gRPC Put) or from a
// client's shared-memory region (a shm Put, copied once into the memory tier 0 lends).
#ifndef KVT_DAEMON_RECORD_WRITER_H_
#define KVT_DAEMON_RECORD_WRITER_H_

#include <atomic>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/config.h"
#include "kvstore/clock.h"
#include "kvstore/shm_progress.h"
#include "kvstore/tiered_store.h"
#include "metrics.h"
#include "tenancy.h"

namespace kvt::daemon {

// Thread-safe.
class RecordWriter {
 public:
  // Reads verify_on_put, durability and shm_stall_timeout_ms from `config`; `clock` times
  // a progressive Put's stall (null: SystemClock()). REQUIRES: the pointers outlive this.
  RecordWriter(const DaemonConfig* config, TieredStore* store, Tenancy* tenancy, Metrics* metrics,
               std::shared_ptr<Clock> clock)
      : config_(config),
        store_(store),
        tenancy_(tenancy),
        metrics_(metrics),
        clock_(std::move(clock)) {}

  // Checks and stores one whole record of `tenant`; returns its key. A record whose key a
  // tier holds under another namespace is acknowledged (OK) and not stored (counted in
  // the put-conflict metric). InvalidArgument for a bad record, PermissionDenied for
  // another tenant's namespace; the store's errors (a full disk with durability: sync).
  // REQUIRES: `record` is daemon-owned memory nobody else writes (never a client's shm
  // region: every check and the store must read the same bytes).
  absl::StatusOr<ChunkKey> Store(std::span<const std::byte> record, const std::string& tenant);
  // Store of a record in a client's shm region (`src`, which the client may still be
  // writing): the record is copied once, hashing its payload in the same pass when
  // verify_on_put, straight into the memory the store's tier 0 lends (TieredStore::Write
  // with a fill), and every check and the store read only that copy. With durability:
  // sync the disk tier is then written from that same copy in tier 0, held by a reader
  // count (no second copy). Counted in shm_put_copy_bytes().
  // With `progress` (a progressive Put: the client is still writing `src`, which lies at
  // region offset `src_offset`), each piece is copied once the client publishes it; no
  // progress for shm.stall_timeout_ms fails the Put (DeadlineExceeded, nothing stored).
  absl::StatusOr<ChunkKey> StoreFromShm(std::span<const std::byte> src, const std::string& tenant,
                                        const ShmProgress* progress = nullptr,
                                        uint64_t src_offset = 0);
  // Bytes copied out of clients' shm regions by StoreFromShm, since start (Stats).
  uint64_t shm_put_copy_bytes() const { return shm_copy_bytes_.load(std::memory_order_relaxed); }

 private:
  // Store's checks on daemon-owned bytes. `payload_checksum`, when set, is the XXH3-64 of
  // the record's payload computed while copying it (CopyRecordHashingPayload):
  // verification then compares it instead of hashing again.
  absl::StatusOr<Admission> Admit(std::span<const std::byte> record, const std::string& tenant,
                                  ChunkKey* key_out, std::optional<uint64_t> payload_checksum);
  PutAck Ack() const;  // durability: sync = PutAck::kDurable

  const DaemonConfig* const config_;
  TieredStore* const store_;
  Tenancy* const tenancy_;
  Metrics* const metrics_;
  const std::shared_ptr<Clock> clock_;
  std::atomic<uint64_t> shm_copy_bytes_{0};
};

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_RECORD_WRITER_H_
