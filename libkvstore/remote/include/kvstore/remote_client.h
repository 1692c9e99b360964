// RemoteClient: a client of kvtierd (proto/kvtier.proto) with kvtier types, deadlines,
// retries with backoff, reconnects, bearer-token authentication and the same-host
// shared-memory path. Used by RemoteTier, the kvtier CLI and the tests.
//
// Failure model: every call has one deadline (options.deadline) covering all its
// attempts. Attempts that fail with UNAVAILABLE (daemon down, socket missing, connection
// reset) are retried with exponential backoff while time is left; the gRPC channel
// reconnects by itself (reconnect backoff capped at options.max_backoff), and the
// channel is rebuilt after `rebuild_after_failures` consecutive failed calls. A dead,
// paused (SIGSTOP) or unreachable daemon therefore yields Unavailable or
// DeadlineExceeded within about options.deadline, never a hang.
//
// Error codes (gRPC → absl, converted in one place): NOT_FOUND = miss, UNAVAILABLE and
// DEADLINE_EXCEEDED = daemon unreachable in time, INVALID_ARGUMENT = bad request,
// UNAUTHENTICATED = bad token, RESOURCE_EXHAUSTED = daemon full / limit reached.
#ifndef KVSTORE_REMOTE_CLIENT_H_
#define KVSTORE_REMOTE_CLIENT_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstore/absence_record.h"
#include "kvstore/clock.h"
#include "kvstore/evict_selector.h"
#include "kvstore/shm_region.h"
#include "kvstore/tier.h"
#include "kvstore/types.h"

namespace grpc {
class Channel;
class ClientContext;
class Status;
}  // namespace grpc
namespace kvtier::v1 {
class Key128;
}  // namespace kvtier::v1

namespace kvt {

// Protocol version spoken by this build (the `protocol_version` of every request).
inline constexpr uint32_t kKvtierProtocolVersion = 1;
// Largest gRPC message either side accepts (bytes): 8 MiB of data plus headroom.
inline constexpr int kKvtierMaxMessageBytes = 9 << 20;
// Largest `data` carried in one message (bytes).
inline constexpr uint32_t kKvtierMaxPartBytes = 8u << 20;
// Most keys in one Lookup/Get/Evict request.
inline constexpr uint32_t kKvtierMaxBatchKeys = 4096;
// Trailing metadata of every Put: records of the stream stored (decimal), also when the
// stream failed part-way (the records before the refused one stay stored).
inline constexpr char kKvtierRecordsStoredKey[] = "kvtier-records-stored";

struct RemoteClientOptions {
  // gRPC target: "unix:///path/to/kvtierd.sock" or "127.0.0.1:7470".
  std::string target;
  // Bearer token sent as `authorization` metadata; "" sends none.
  std::string token;
  // Deadline of one call including its retries. REQUIRES: 1 ms .. 10 min.
  std::chrono::milliseconds deadline{2000};
  // Attempts per call (1 = no retry). REQUIRES: 1..10.
  int max_attempts = 3;
  // Backoff between attempts: doubles from initial_backoff up to max_backoff (also the
  // channel's reconnect backoff cap). REQUIRES: 0 < initial <= max <= 10 s.
  std::chrono::milliseconds initial_backoff{20};
  std::chrono::milliseconds max_backoff{250};
  // Size of the data parts of a Put stream. REQUIRES: 4 KiB .. kKvtierMaxPartBytes.
  uint32_t put_part_bytes = 4u << 20;
  // Part size the daemon is asked to use for Get (0 = its default).
  uint32_t get_part_bytes = 0;
  // Consecutive failed calls after which the channel is replaced. REQUIRES: >= 1.
  int rebuild_after_failures = 3;
  // false (engines, RemoteTier): the first attempt fails fast when the channel is not
  // connected and retries wait at most 2 x max_backoff each, so a dead daemon costs a
  // quick miss. true (interactive tools such as the kvtier CLI): every attempt waits for
  // the connection (gRPC wait_for_ready) until the call's deadline, so `deadline` is the
  // time the caller is willing to wait for a daemon that is starting, paused or absent.
  bool wait_for_connection = false;
  // The time the call's deadline budget, the backoff between attempts, the cool-down and
  // the shm stall timeout are counted in (kvstore/clock.h); null = SystemClock(). Each
  // gRPC attempt's own deadline is real time: the budget left on this clock, from now.
  std::shared_ptr<Clock> clock;

  absl::Status Validate() const;
};

struct RemoteLookup {
  size_t num_leading_hits = 0;
  // Tier of each leading hit; with per_key, of every key (nullopt = miss).
  std::vector<std::optional<TierKind>> tier;
  // With per_key: record bytes of every key (0 for a miss).
  std::vector<uint64_t> record_bytes;
  // The namespace of each key answered, as `tier` (zero for a miss; empty from a daemon
  // that does not send it).
  std::vector<NamespaceId> ns;
  // With pin: the lease holding the leading hits (0 = nothing pinned; an old daemon
  // that does not know `pin` also answers 0), to pass to Get, and its lifetime.
  uint64_t lease_id = 0;
  std::chrono::milliseconds lease_timeout{0};
  // RemoteClient::Inspect only: why each key is not held, as `tier` (a hit's entry is
  // default); empty from a daemon older than this field (then `explained` is false).
  std::vector<Absence> absence;
  bool explained = false;
};

struct RemoteChunkInfo {
  ChunkInfo info;
  TierKind tier = TierKind::kHost;
};

struct RemoteListPage {
  std::vector<RemoteChunkInfo> chunks;
  std::string next_page_token;
};

struct RemoteTierStats {
  std::string name;
  TierKind kind = TierKind::kHost;
  TierStats stats;
};

struct RemoteStats {
  std::vector<RemoteTierStats> tiers;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t integrity_errors = 0;
  uint64_t connected_clients = 0;
  uint64_t pending_write_bytes = 0;
  uint64_t explicit_evictions = 0;
  // Bytes the daemon copied out of clients' shm regions for their puts, since it started.
  uint64_t shm_put_copy_bytes = 0;
  // Leases of Lookups with pin (see RemoteClient::Lookup), since the daemon started.
  uint64_t leases_granted = 0, leases_released = 0, leases_expired = 0, leases_active = 0;
  uint64_t pinned_bytes = 0;
  std::string tenant;
};

struct RemoteHealth {
  bool serving = false;
  std::string detail;
  uint32_t protocol_version = 0;
  std::string version;
  bool shm_available = false;
};

// A shared-memory region attached to the daemon (see shm_region.h). Destroying it does
// not detach it at the daemon; call RemoteClient::DetachShm (the daemon also frees every
// region when it exits).
struct ShmSession {
  uint64_t region_id = 0;
  std::unique_ptr<ShmRegion> region;
  // Set when a progressive Get failed midway: the daemon may still be writing into its
  // slot, so the session refuses further progressive calls (attach a new region).
  std::atomic<bool> broken{false};
};

// Thread-safe: all methods may be called concurrently.
class RemoteClient {
 public:
  static absl::StatusOr<std::unique_ptr<RemoteClient>> Create(const RemoteClientOptions& options);
  ~RemoteClient();

  // Leading hits of `keys` (1..kKvtierMaxBatchKeys) and their tiers at the daemon.
  // With `pin`, the daemon pins the leading hits under a lease (RemoteLookup::lease_id)
  // until a Get naming it finishes or lease_timeout passes: until then neither capacity
  // pressure nor Evict removes them; num_leading_hits counts only what was pinned.
  // `release`: earlier lease ids no longer needed (at most kKvtierMaxBatchKeys), released
  // by the daemon before it answers.
  absl::StatusOr<RemoteLookup> Lookup(std::span<const ChunkKey> keys, bool per_key = false,
                                      bool pin = false, std::span<const uint64_t> release = {});
  // Lookup with per_key that also asks why each missed key is not held
  // (RemoteLookup::absence; the daemon's view as this client's tenant). No pin.
  absl::StatusOr<RemoteLookup> Inspect(std::span<const ChunkKey> keys);
  // Stores whole records (each verified by the daemon) in one Put stream, in order. OK
  // means every record was acknowledged. A record the daemon refuses ends the stream
  // with its error; the records before it stay stored, and *stored (when given) is
  // their count (from the daemon's `kvtier-records-stored` trailing metadata; 0 when
  // the daemon could not be reached). InvalidArgument for a record shorter than a
  // header (nothing sent).
  absl::Status Put(std::span<const std::span<const std::byte>> records, size_t* stored = nullptr);
  absl::Status Put(std::span<const std::byte> record);
  // Copies the record of `key` into `out` and returns its length. NotFound on a miss;
  // OutOfRange when `out` is too small. The caller verifies the record (VerifyChunk).
  // `lease_id` (from Lookup with pin; 0 = none) is released when the call finishes.
  absl::StatusOr<uint64_t> Get(const ChunkKey& key, std::span<std::byte> out,
                               uint64_t lease_id = 0);
  // Allocating variant.
  absl::StatusOr<std::vector<std::byte>> Get(const ChunkKey& key);
  // An inspection: like Get, but the daemon neither promotes nor counts it (the CLI).
  absl::StatusOr<std::vector<std::byte>> Peek(const ChunkKey& key);

  // The daemon evicts what `selector` selects among the caller tenant's chunks
  // (`selector.visible` is not sent). InvalidArgument for a bad selector.
  absl::StatusOr<EvictResult> Evict(const EvictSelector& selector, bool dry_run = false);
  // page_size 0 = the daemon's default (1000).
  absl::StatusOr<RemoteListPage> List(std::optional<NamespaceId> ns, const std::string& page_token,
                                      uint32_t page_size = 0);
  absl::StatusOr<RemoteStats> Stats();
  absl::StatusOr<RemoteHealth> Health();

  // Same-host fast path. AttachShm asks the daemon for a region of `bytes` and maps it.
  // FailedPrecondition when the daemon is not on this host / shm is disabled.
  absl::StatusOr<std::unique_ptr<ShmSession>> AttachShm(uint64_t bytes);
  absl::Status DetachShm(const ShmSession& session);
  // Stores the record at [offset, offset + length) of the region (written there by the
  // caller). REQUIRES: the bytes stay unchanged until this returns. If they do change,
  // the daemon (which copies the slice before checking it) stores exactly the bytes it
  // copied and checked, or refuses them (INVALID_ARGUMENT, PERMISSION_DENIED); never a
  // mix, in any tier.
  absl::Status PutShm(const ShmSession& session, uint64_t offset, uint64_t length);
  // Has the daemon copy the record of `key` into the region at `offset` (at most
  // `capacity` bytes); returns its length. NotFound on a miss; OutOfRange when it does
  // not fit. The caller verifies the bytes (VerifyChunk) before use.
  absl::StatusOr<uint64_t> GetShm(const ShmSession& session, const ChunkKey& key, uint64_t offset,
                                  uint64_t capacity);

  // Progressive shm transfers (docs/daemon.md, "Progressive transfers"): the copy into or
  // out of the caller's buffer runs at the same time as the daemon's, piece by piece.
  // Each uses a slot of the region: [slot_offset, +64) holds the control block
  // (kvstore/shm_progress.h), the record goes at slot_offset + 64. One call per slot at
  // a time; different slots may be used concurrently.
  // REQUIRES: slot_offset is 64-byte aligned; slot_bytes >= 64 + the record's size.
  //
  // PutShmFrom copies `record` into the slot while the daemon copies and checks it;
  // errors as PutShm. InvalidArgument for a slot that does not fit.
  absl::Status PutShmFrom(ShmSession& session, uint64_t slot_offset, uint64_t slot_bytes,
                          std::span<const std::byte> record);
  // GetShmInto copies the record of `key` into `out` as the daemon writes it into the
  // slot (records of tier 0; others are written whole first); returns its length.
  // NotFound on a miss; OutOfRange when it does not fit the slot or `out`. A failure
  // after the daemon may have started writing marks the session broken; later
  // progressive calls on it return FailedPrecondition. The caller verifies the bytes
  // (VerifyChunk) before use. `lease_id`: as for Get.
  absl::StatusOr<uint64_t> GetShmInto(ShmSession& session, const ChunkKey& key,
                                      uint64_t slot_offset, uint64_t slot_bytes,
                                      std::span<std::byte> out, uint64_t lease_id = 0);

  const RemoteClientOptions& options() const { return options_; }
  // RPC attempts this client has sent since creation (retries included): what a caller
  // pays in round trips (kvtier-bench remote counts a pinned lookup's with it).
  uint64_t rpcs() const;
  // Random id sent as `kvtier-client-id` metadata (the daemon counts connected clients).
  const std::string& client_id() const { return client_id_; }

 private:
  class Impl;
  absl::StatusOr<std::vector<std::byte>> GetRecord(const ChunkKey& key, bool peek);
  // Lookup and Inspect: the one LookupRequest (explain: explain_misses).
  absl::StatusOr<RemoteLookup> LookupWith(std::span<const ChunkKey> keys, bool per_key, bool pin,
                                          std::span<const uint64_t> release, bool explain);
  explicit RemoteClient(const RemoteClientOptions& options, std::unique_ptr<Impl> impl);
  RemoteClientOptions options_;
  std::string client_id_;
  std::unique_ptr<Impl> impl_;
};

// The one place gRPC statuses become absl statuses (and back).
absl::Status FromGrpcStatus(const grpc::Status& status);
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace kvt

#endif  // KVSTORE_REMOTE_CLIENT_H_
