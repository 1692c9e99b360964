// The Tier interface: one level of the cache hierarchy (host memory, disk, remote).
//
// A tier stores whole chunk records (kvstore/chunk_codec.h) by ChunkKey. It parses the
// record header on Put for its index (namespace, parent, size). Verification happens
// once per trust boundary: a tier whose bytes come from outside the process (disk,
// remote: caps().verifies_reads) verifies every record it returns; the TieredStore
// trusts what such a tier returns, and records that never left the process (host
// memory) are not hashed again.
//
// Error codes (kvstore-wide, see STYLE.md): NotFound = miss; Unavailable = retry later;
// DataLoss = checksum/format failure; ResourceExhausted = tier full and nothing evictable;
// InvalidArgument = caller's bad input; OutOfRange = caller buffer too small.
#ifndef KVSTORE_TIER_H_
#define KVSTORE_TIER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstore/cache_policy.h"
#include "kvstore/record_buffer.h"
#include "kvstore/types.h"

namespace kvt {

// Values appear in metrics, protos and the CLI: never renumber.
enum class TierKind : uint8_t { kHost = 0, kDisk = 1, kRemote = 2 };
std::string_view TierKindName(TierKind kind);

// Counters since the tier was opened (monotonic) plus current gauges.
struct TierStats {
  uint64_t capacity_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t chunks = 0;
  uint64_t pinned_bytes = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t puts = 0;
  uint64_t bytes_in = 0;
  uint64_t bytes_out = 0;
  uint64_t evictions = 0;
  uint64_t integrity_errors = 0;
  uint64_t io_errors = 0;
  uint64_t admission_rejects = 0;  // records offered and declined by the tier's CachePolicy
  uint64_t ttl_expired = 0;        // records dropped because the policy's TTL ran out
  // Bytes this tier wrote into memory on its data path, to count the copies per loaded
  // byte (kvtier-bench tiers): a memcpy into or out of its memory (Put, Get, a victim's
  // copy), a read from a file into memory (by DMA with O_DIRECT, by the kernel without),
  // and every bounce copy of a file read or write. A fill (PutInPlace) counts for whoever
  // fills.
  uint64_t copy_bytes = 0;
};

// The counters of TierStats as relaxed atomics, for tiers that count without a lock
// (RemoteTier, ClusterTier). Thread-safe.
struct AtomicTierCounters {
  std::atomic<uint64_t> hits{0}, misses{0}, puts{0}, bytes_in{0}, bytes_out{0}, evictions{0},
      integrity_errors{0}, io_errors{0};

  static void Add(std::atomic<uint64_t>& counter, uint64_t n = 1) {
    counter.fetch_add(n, std::memory_order_relaxed);
  }
  // Copies the counters into `s`; its gauges (capacity, used, chunks, pinned) are untouched.
  void CopyTo(TierStats& s) const {
    s.hits = hits.load(std::memory_order_relaxed);
    s.misses = misses.load(std::memory_order_relaxed);
    s.puts = puts.load(std::memory_order_relaxed);
    s.bytes_in = bytes_in.load(std::memory_order_relaxed);
    s.bytes_out = bytes_out.load(std::memory_order_relaxed);
    s.evictions = evictions.load(std::memory_order_relaxed);
    s.integrity_errors = integrity_errors.load(std::memory_order_relaxed);
    s.io_errors = io_errors.load(std::memory_order_relaxed);
  }
};

// One cached chunk as listed by a tier.
struct ChunkInfo {
  ChunkKey key;
  NamespaceId ns;
  ChunkKey parent;
  uint32_t token_count = 0;
  uint64_t record_bytes = 0;
  int64_t last_access_unix_ms = 0;
};

struct ListOptions {
  std::optional<NamespaceId> ns;  // only this namespace when set
  std::string page_token;         // "" = from the start; else a previous next_page_token
  size_t page_size = 1000;        // REQUIRES: 1..100000
};

struct ListPage {
  std::vector<ChunkInfo> chunks;
  std::string next_page_token;  // "" when this is the last page
};

// What a tier is and can do. Callers decide by capability, never by kind.
// (The model: RocksDB's FileSystem::SupportedOps.)
struct TierCaps {
  std::string name;                 // metrics, logs, CLI ("host", "disk", ...)
  TierKind kind = TierKind::kHost;  // for display and the cost model's bandwidth class only
  uint64_t capacity_bytes = 0;      // 0 = unknown (a remote tier before its first stats)
  bool durable = false;             // records survive a restart of this process
  bool remote = false;              // calls cross a process or network boundary (slow Stat)
  bool verifies_reads = false;      // Get returns only records it verified with VerifyChunk,
                                    // because its bytes come from outside the process
  bool pinnable = false;            // Pin holds a chunk against this tier's own eviction
  bool evicts = false;              // evicts on its own to make room, and returns those
                                    // victims from Put/PutInPlace (PutContext::keep_victims)
};

// Presence of one key in a tier.
struct ChunkStat {
  bool present = false;
  uint64_t record_bytes = 0;  // whole record (header + payload) when present
  NamespaceId ns;             // the record header's namespace when present (tenancy)
};

// A pin on one chunk in one tier: while the handle lives, the tier does not evict the
// chunk (a replaced record keeps the pin). Move-only; releases on destruction, like
// LevelDB's Cache::Handle but RAII. An empty handle pins nothing.
// REQUIRES: the handle does not outlive the tier that issued it.
// Thread-compatible (one handle, one owner); the tier side is thread-safe.
class PinHandle {
 public:
  using ReleaseFn = void (*)(void* owner, const ChunkKey& key);

  PinHandle() = default;
  PinHandle(ReleaseFn release, void* owner, const ChunkKey& key, uint64_t record_bytes)
      : release_(release), owner_(owner), key_(key), record_bytes_(record_bytes) {}
  PinHandle(PinHandle&& other) noexcept { *this = std::move(other); }
  PinHandle& operator=(PinHandle&& other) noexcept {
    if (this != &other) {
      Release();
      release_ = std::exchange(other.release_, nullptr);
      owner_ = std::exchange(other.owner_, nullptr);
      key_ = other.key_;
      record_bytes_ = other.record_bytes_;
    }
    return *this;
  }
  PinHandle(const PinHandle&) = delete;
  PinHandle& operator=(const PinHandle&) = delete;
  ~PinHandle() { Release(); }

  // True while the handle holds a pin.
  explicit operator bool() const { return release_ != nullptr; }
  const ChunkKey& key() const { return key_; }
  // Record bytes when the pin was taken.
  uint64_t record_bytes() const { return record_bytes_; }

  // Drops the pin now (idempotent).
  void Release() {
    if (release_ != nullptr) std::exchange(release_, nullptr)(owner_, key_);
  }

 private:
  ReleaseFn release_ = nullptr;
  void* owner_ = nullptr;
  ChunkKey key_;
  uint64_t record_bytes_ = 0;
};

// A read-only view of one record in a tier's own memory (Tier::View), to send it without
// copying it first. While the view lives the tier neither changes, evicts, reuses nor
// frees those bytes (a record replaced or erased meanwhile stays readable through it).
// Move-only; releases on destruction, like PinHandle. An empty view holds nothing.
// REQUIRES: the view does not outlive the tier that issued it. Thread-compatible (one
// view, one owner); the tier side is thread-safe.
class RecordView {
 public:
  using ReleaseFn = void (*)(void* owner, void* token);

  RecordView() = default;
  RecordView(std::span<const std::byte> bytes, ReleaseFn release, void* owner, void* token)
      : bytes_(bytes), release_(release), owner_(owner), token_(token) {}
  RecordView(RecordView&& other) noexcept { *this = std::move(other); }
  RecordView& operator=(RecordView&& other) noexcept {
    if (this != &other) {
      Release();
      bytes_ = std::exchange(other.bytes_, {});
      release_ = std::exchange(other.release_, nullptr);
      owner_ = std::exchange(other.owner_, nullptr);
      token_ = std::exchange(other.token_, nullptr);
    }
    return *this;
  }
  RecordView(const RecordView&) = delete;
  RecordView& operator=(const RecordView&) = delete;
  ~RecordView() { Release(); }

  explicit operator bool() const { return release_ != nullptr; }
  // The whole record (header + payload); empty once released.
  std::span<const std::byte> bytes() const { return bytes_; }
  // Lets the tier reuse the bytes now (idempotent).
  void Release() {
    bytes_ = {};
    if (release_ != nullptr) std::exchange(release_, nullptr)(owner_, token_);
  }

 private:
  std::span<const std::byte> bytes_;
  ReleaseFn release_ = nullptr;
  void* owner_ = nullptr;
  void* token_ = nullptr;
};

// One record a tier evicted to make room for a Put (PutContext::keep_victims), for the
// caller (the store) to demote after the call. It owns a copy of the whole record
// (header + payload), taken before the tier reused the victim's space: readable until
// dropped, whatever the tier does meanwhile. Move-only. A tier copies its victims only
// when asked: a tier in memory copies it (one memcpy, the copy a demotion needs anyway);
// the disk tier reads it from its file once, unverified (its header still decodes; the
// tier it is demoted to checks it as every Put does).
struct Victim {
  ChunkKey key;
  RecordBuffer record;  // the whole record; record.size == its record_bytes
};

// Why a record is put into a tier, for the tier's admission policy (CachePolicy::Admit),
// and what the caller wants back from the Put. The store says which; a client's put (and
// a direct Tier::Put) is kPut and wants nothing back.
struct PutContext {
  AdmitReason reason = AdmitReason::kPut;
  // Return the records evicted to make room in PutResult::victims (with their bytes).
  // When false they are dropped as they are evicted (nothing copied or read).
  bool keep_victims = false;
  // Return a RecordView of the record's bytes in this tier in PutResult::view (a tier
  // whose memory can lend it: HostTier, and the default PutInPlace's buffer), without
  // counting a hit: the store writes a durable tier or answers a load from it. PutInPlace
  // returns the view also when the tier's policy declined the record (its bytes are then
  // freed when the view is dropped). Other tiers leave the view empty.
  bool view = false;
};

// What a Put or PutInPlace returns besides OK.
struct PutResult {
  ChunkKey key;                 // the record's key (from its header)
  bool stored = false;          // the tier holds it now (false: its policy declined it)
  std::vector<Victim> victims;  // PutContext::keep_victims: records evicted for it, in order
  RecordView view;              // PutContext::view: the stored bytes (may be empty)
};

// Builds a tier's CachePolicy for its capacity in bytes, in place of MakeCachePolicy
// (tests pass a recording or scripted policy, as DiskTierOptions::file_system takes a
// fault-injecting layer). Errors are returned by the tier's Create/Open.
using CachePolicyFactory =
    std::function<absl::StatusOr<std::unique_ptr<CachePolicy>>(uint64_t capacity_bytes)>;

// Writes and checks one whole record in memory a tier lends for the call (PutInPlace).
using RecordFill = std::function<absl::Status(std::span<std::byte> record)>;

// Thread-safe: every implementation allows concurrent calls to all methods.
// Eight methods; what differs between backends is in caps(). PutInPlace and View have
// defaults.
class Tier {
 public:
  virtual ~Tier() = default;

  // Name, kind, capacity and capabilities (capacity may change for a remote tier). Cheap:
  // never blocks on I/O or a remote call (a remote tier reports its last known capacity).
  virtual TierCaps caps() const = 0;

  // Stores a whole record (header verified with DecodeChunkHeader; the key is taken
  // from it). Replaces an existing record of the same key. May evict unpinned chunks
  // to make room: with context.keep_victims they are returned in PutResult::victims
  // (the caller demotes them after the call; the tier never calls anyone back), else
  // dropped. InvalidArgument/DataLoss for a bad header; ResourceExhausted when the
  // record can never fit or everything is pinned. On error nothing is stored and no
  // existing chunk is lost except by normal eviction (victims evicted before the error
  // are lost too: a tier evicts only when the record will fit). A tier with a
  // CachePolicy may decline the record (CachePolicy::Admit, told `context.reason`): then
  // nothing is stored, the tier counts it in stats().admission_rejects, and Put still
  // returns OK (a cache may decline; a later Get is a miss).
  virtual absl::StatusOr<PutResult> Put(std::span<const std::byte> record,
                                        const PutContext& context) = 0;
  // Put of a client's record (PutContext{}: AdmitReason::kPut; victims dropped).
  // Implementations add `using Tier::Put;` so both overloads stay visible.
  absl::Status Put(std::span<const std::byte> record) { return Put(record, PutContext{}).status(); }

  // Copies the whole record of `key` into `out` and returns its length.
  // NotFound on a miss; OutOfRange (message names the needed size) when `out` is
  // too small. Never copies a partial or torn record. A tier with caps().verifies_reads
  // returns DataLoss (and counts an integrity error) for a record that fails VerifyChunk;
  // other tiers return what they were given by Put.
  virtual absl::StatusOr<uint64_t> Get(const ChunkKey& key, std::span<std::byte> out) = 0;

  // Get for the store's own reads (write-back to the next tier): the same copy and errors,
  // but not a client's read, so it counts no hit or miss and does not touch recency (a
  // record written back must not look hotter, nor every write-back look like a hit in
  // `kvtier stats`). The default calls Get (tiers without hit counters or recency).
  virtual absl::StatusOr<uint64_t> CopyForWriteBack(const ChunkKey& key, std::span<std::byte> out);

  // For each key, whether the tier holds it now, its record length and its namespace (no
  // data moves, no LRU touch). An unreachable tier reports keys as absent.
  virtual std::vector<ChunkStat> Stat(std::span<const ChunkKey> keys) = 0;

  // Removes `key`. OK if it was absent. FailedPrecondition if it is pinned.
  virtual absl::Status Erase(const ChunkKey& key) = 0;

  // Lists chunks, paginated, in ChunkKey order (types.h); next_page_token = ToHex() of
  // the last key of the page, "" on the last page.
  virtual absl::StatusOr<ListPage> List(const ListOptions& options) = 0;

  virtual TierStats stats() const = 0;

  // Pins `key` (and touches its recency: a pin announces a read). Empty handle when the
  // key is absent, or always when !caps().pinnable.
  virtual PinHandle Pin(const ChunkKey& key) = 0;
  // Pin of many keys in one call: handle i pins keys[i] (empty when absent). A tier whose
  // calls cross a process boundary (RemoteTier) answers the whole span with one request,
  // so a store Lookup of a long prompt costs one round trip, not one per chunk. The
  // default calls Pin per key.
  virtual std::vector<PinHandle> PinMany(std::span<const ChunkKey> keys);

  // Put without the caller's buffer: the tier lends `record_bytes` of memory that only
  // this call writes or reads, `fill` writes the whole record there (header included)
  // and may check it there; then the tier checks the header as Put does, reading the
  // filled bytes, and stores exactly them. A record filled from memory someone else may
  // still write (a client's shared memory) costs one copy, and every check reads
  // bytes nobody else can change. An error from `fill` abandons the record (nothing
  // stored, nothing replaced) and is returned unchanged. `fill` runs without the tier's
  // locks; it may call other tiers and the store, never this tier's Put/PutInPlace.
  // Returns the stored record's key, victims and view as Put does (`context`). Errors as
  // Put's; ResourceExhausted may come before `fill` was called (no room), in which case
  // it was not called. The default (tiers whose memory a caller cannot write in place):
  // a RecordBuffer, `fill`, then Put; its view (context.view) is of that buffer.
  virtual absl::StatusOr<PutResult> PutInPlace(uint64_t record_bytes, const RecordFill& fill,
                                               const PutContext& context);
  // PutInPlace of a client's record (PutContext{}); returns its key. Implementations add
  // `using Tier::PutInPlace;`.
  absl::StatusOr<ChunkKey> PutInPlace(uint64_t record_bytes, const RecordFill& fill);

  // Get without the copy: the record of `key` where the tier holds it (RecordView). A hit
  // counts as Get's does (recency, hits, bytes_out). NotFound on a miss, which is NOT
  // counted (the caller falls back to Get, which counts it). The view delays eviction
  // of that record, so hold it only while sending it. The default (tiers whose records
  // are not in memory they own): Unimplemented.
  virtual absl::StatusOr<RecordView> View(const ChunkKey& key);
};

// Builds one tier of a store (HostTier::Factory, DiskTier::Factory, UseTier in
// tiered_store.h). The store asks each tier for its victims (PutContext::keep_victims)
// and demotes them itself.
using TierFactory = std::function<absl::StatusOr<std::unique_ptr<Tier>>()>;

}  // namespace kvt

#endif  // KVSTORE_TIER_H_
