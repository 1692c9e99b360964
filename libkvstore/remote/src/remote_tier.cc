#include "kvstore/remote_tier.h"

#include <chrono>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/shm_progress.h"
#include "spdlog/spdlog.h"

namespace kvt {
namespace {

// Milliseconds on `clock` (RemoteClientOptions::clock): the shm retry and stats refresh
// intervals.
int64_t NowMs(const std::shared_ptr<Clock>& clock) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             ClockOrSystem(clock).Now().time_since_epoch())
      .count();
}

bool IsUnreachable(const absl::Status& s) {
  return s.code() == absl::StatusCode::kUnavailable ||
         s.code() == absl::StatusCode::kDeadlineExceeded;
}

}  // namespace

absl::Status RemoteTierOptions::Validate() const {
  if (absl::Status s = client.Validate(); !s.ok()) return s;
  if (shm_slots > 256)
    return absl::InvalidArgumentError(absl::StrFormat("shm_slots: %d, expected 0..256", shm_slots));
  if (shm_slots > 0 && (shm_slot_bytes < (1ull << 20) || shm_slot_bytes % 4096 != 0 ||
                        shm_slots * shm_slot_bytes > (4ull << 30)))
    return absl::InvalidArgumentError(absl::StrFormat(
        "shm_slot_bytes: %d, expected a multiple of 4096, at least 1 MiB, and shm_slots x "
        "shm_slot_bytes at most 4 GiB",
        shm_slot_bytes));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RemoteTier>> RemoteTier::Create(const RemoteTierOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  auto client = RemoteClient::Create(options.client);
  if (!client.ok()) return client.status();
  return std::unique_ptr<RemoteTier>(new RemoteTier(options, std::move(*client)));
}

TierFactory RemoteTier::Factory(RemoteTierOptions options) {
  return [options]() -> absl::StatusOr<std::unique_ptr<Tier>> {
    absl::StatusOr<std::unique_ptr<RemoteTier>> t = Create(options);
    if (!t.ok()) return t.status();
    return std::unique_ptr<Tier>(std::move(*t));
  };
}

RemoteTier::RemoteTier(const RemoteTierOptions& options, std::unique_ptr<RemoteClient> client)
    : name_(options.name), options_(options), client_(std::move(client)) {}
RemoteTier::~RemoteTier() {
  absl::MutexLock lock(&shm_mu_);
  shm_.reset();  // detaches it (no call holds a slot: the tier is being destroyed)
}

// True when a shm call failed because of the region, not the record: the daemon does not
// know it (restarted since: "shm.region_id: N is not attached") or the session is broken
// (FailedPrecondition). The session is marked broken (a new region is attached for later
// calls) and the call goes again through gRPC.
bool RemoteTier::RegionLost(const absl::Status& s, ShmSession& session) {
  const bool lost =
      absl::IsFailedPrecondition(s) ||
      (absl::IsInvalidArgument(s) && absl::StrContains(s.message(), "shm.region_id:"));
  if (lost) session.broken.store(true, std::memory_order_release);
  return lost;
}

RemoteTier::Slot RemoteTier::TakeSlot(uint64_t bytes) {
  if (options_.shm_slots == 0 || bytes + kShmProgressBlockBytes > options_.shm_slot_bytes)
    return {};
  absl::MutexLock lock(&shm_mu_);
  if (shm_ != nullptr && shm_->broken.load(std::memory_order_acquire)) {
    // Detached by its deleter once no call uses it; new calls get a new region.
    shm_.reset();
  }
  if (shm_ == nullptr) {
    if (NowMs(options_.client.clock) < shm_next_try_ms_) return {};
    auto s = client_->AttachShm(options_.shm_slots * options_.shm_slot_bytes);
    if (!s.ok()) {
      shm_next_try_ms_ = NowMs(options_.client.clock) + options_.shm_retry.count();
      spdlog::warn(
          "remote tier: no shared memory with the daemon ({}); using gRPC, asking again "
          "in {} ms",
          s.status().ToString(), options_.shm_retry.count());
      return {};
    }
    RemoteClient* client = client_.get();
    shm_ = std::shared_ptr<ShmSession>(s->release(), [client](ShmSession* session) {
      (void)client->DetachShm(*session);
      delete session;
    });
    slot_busy_.assign(options_.shm_slots, false);
  }
  for (uint32_t i = 0; i < slot_busy_.size(); ++i) {
    if (slot_busy_[i]) continue;
    slot_busy_[i] = true;
    return Slot{shm_, i, uint64_t{i} * options_.shm_slot_bytes};
  }
  return {};  // every slot in use: gRPC
}

void RemoteTier::GiveSlot(const Slot& slot) {
  absl::MutexLock lock(&shm_mu_);
  if (slot.session == shm_ && slot.index < slot_busy_.size()) slot_busy_[slot.index] = false;
}

absl::StatusOr<PutResult> RemoteTier::Put(std::span<const std::byte> record,
                                          const PutContext& /*context*/) {
  auto header = DecodeChunkHeader(record);
  if (!header.ok()) return header.status();
  if (record.size() != header->record_bytes())
    return absl::InvalidArgumentError(
        absl::StrFormat("RemoteTier::Put: record is %d bytes, header says %d", record.size(),
                        header->record_bytes()));
  absl::Status s = absl::UnknownError("no attempt");
  bool sent = false;
  if (Slot slot = TakeSlot(record.size()); slot.session != nullptr) {
    s = client_->PutShmFrom(*slot.session, slot.offset, options_.shm_slot_bytes, record);
    GiveSlot(slot);
    sent = !RegionLost(s, *slot.session);
    if (s.ok()) shm_puts_.fetch_add(1, std::memory_order_relaxed);
  }
  if (!sent) s = client_->Put(record);
  if (s.ok()) {
    AtomicTierCounters::Add(counters_.puts, 1);
    AtomicTierCounters::Add(counters_.bytes_in, record.size());
  } else {
    AtomicTierCounters::Add(counters_.io_errors, 1);
    if (!IsUnreachable(s))  // an unreachable daemon is reported by the store already
      spdlog::warn("remote tier: put of {} ({} bytes) failed: {}", header->key.ToHex(),
                   record.size(), s.ToString());
    if (IsUnreachable(s)) return absl::UnavailableError("RemoteTier::Put: " + s.ToString());
    return s;
  }
  return PutResult{.key = header->key, .stored = true};
}

PinHandle RemoteTier::Pin(const ChunkKey& key) {
  return std::move(PinMany(std::span<const ChunkKey>(&key, 1))[0]);
}

std::vector<PinHandle> RemoteTier::PinMany(std::span<const ChunkKey> keys) {
  std::vector<PinHandle> pins(keys.size());
  for (size_t i = 0; i < keys.size(); i += kKvtierMaxBatchKeys) {
    const size_t n = std::min<size_t>(kKvtierMaxBatchKeys, keys.size() - i);
    const std::vector<uint64_t> release = TakeReleases();
    auto r = client_->Lookup(keys.subspan(i, n), /*per_key=*/true, /*pin=*/true, release);
    if (!r.ok()) {
      if (IsUnreachable(r.status())) AtomicTierCounters::Add(counters_.io_errors, 1);
      return pins;  // unreachable: the rest reads as absent
    }
    // The daemon pins the leading run of this batch under one lease.
    const size_t pinned = std::min<size_t>({r->num_leading_hits, n, r->record_bytes.size()});
    size_t held = 0;
    for (size_t j = 0; j < pinned && r->record_bytes[j] > 0; ++j) ++held;
    if (held == 0) return pins;  // gone since the store's Stat
    if (r->lease_id != 0) {      // 0: a daemon without leases (trusted as found)
      absl::MutexLock lock(&lease_mu_);
      for (size_t j = 0; j < held; ++j) leases_[keys[i + j]].push_back(r->lease_id);
      lease_refs_[r->lease_id].handles += static_cast<uint32_t>(held);
    }
    for (size_t j = 0; j < held; ++j)
      pins[i + j] = PinHandle(&RemoteTier::ReleasePin, this, keys[i + j], r->record_bytes[j]);
    if (held < n) return pins;  // the leading run ends in this batch
  }
  return pins;
}

void RemoteTier::ReleasePin(void* owner, const ChunkKey& key) {
  // The oldest lease of `key`, if no Get has used it: its pin is no longer wanted.
  auto* self = static_cast<RemoteTier*>(owner);
  const uint64_t id = self->TakeLease(key);
  if (id != 0) self->DropLeaseRef(id, /*unread=*/true);
}

void RemoteTier::DropLeaseRef(uint64_t id, bool unread) {
  // A lease covers a batch of keys: the daemon releases it by itself once Gets naming it
  // have read every key; when some key's pin was dropped unread, the lease is released
  // with the next Lookup RPC once no handle of it is left.
  absl::MutexLock lock(&lease_mu_);
  auto it = lease_refs_.find(id);
  if (it == lease_refs_.end()) return;
  it->second.unread = it->second.unread || unread;
  if (--it->second.handles > 0) return;
  const bool release = it->second.unread;
  lease_refs_.erase(it);
  if (release && to_release_.size() < 4 * kKvtierMaxBatchKeys) to_release_.push_back(id);
}

std::vector<uint64_t> RemoteTier::TakeReleases() {
  absl::MutexLock lock(&lease_mu_);
  const size_t n = std::min<size_t>(to_release_.size(), kKvtierMaxBatchKeys);
  std::vector<uint64_t> out(to_release_.end() - n, to_release_.end());
  to_release_.resize(to_release_.size() - n);
  return out;
}

size_t RemoteTier::leases_to_release() const {
  absl::MutexLock lock(&lease_mu_);
  return to_release_.size();
}

uint64_t RemoteTier::TakeLease(const ChunkKey& key) {
  absl::MutexLock lock(&lease_mu_);
  auto it = leases_.find(key);
  if (it == leases_.end()) return 0;
  const uint64_t id = it->second.front();
  it->second.erase(it->second.begin());
  if (it->second.empty()) leases_.erase(it);
  return id;
}

size_t RemoteTier::held_leases() const {
  absl::MutexLock lock(&lease_mu_);
  size_t n = 0;
  for (const auto& [k, v] : leases_) n += v.size();
  return n;
}

absl::StatusOr<uint64_t> RemoteTier::Get(const ChunkKey& key, std::span<std::byte> out) {
  // A lease Pin took for this key is released by the daemon when this Get finishes.
  const uint64_t lease = TakeLease(key);
  absl::Cleanup lease_done = [&] {
    if (lease != 0) DropLeaseRef(lease, /*unread=*/false);
  };
  absl::StatusOr<uint64_t> n = absl::UnknownError("no attempt");
  bool sent = false;
  // The record's size is not known here: any Get may try a slot, and one that does not
  // fit it (OutOfRange while `out` is larger than the slot) goes again through gRPC.
  const uint64_t slot_room = options_.shm_slot_bytes - kShmProgressBlockBytes;
  if (Slot slot = TakeSlot(std::min<uint64_t>(out.size(), slot_room)); slot.session != nullptr) {
    n = client_->GetShmInto(*slot.session, key, slot.offset, options_.shm_slot_bytes, out, lease);
    GiveSlot(slot);
    sent = !RegionLost(n.status(), *slot.session) &&
           !(absl::IsOutOfRange(n.status()) && out.size() > slot_room);
    if (n.ok()) shm_gets_.fetch_add(1, std::memory_order_relaxed);
  }
  if (!sent) n = client_->Get(key, out, lease);
  if (!n.ok()) {
    if (n.status().code() == absl::StatusCode::kNotFound) {
      AtomicTierCounters::Add(counters_.misses, 1);
    } else if (IsUnreachable(n.status())) {
      AtomicTierCounters::Add(counters_.misses, 1);
      AtomicTierCounters::Add(counters_.io_errors, 1);
      return absl::UnavailableError("RemoteTier::Get: " + n.status().ToString());
    }
    return n.status();
  }
  auto header = DecodeChunkHeader(out.first(*n));
  absl::StatusOr<ChunkHeader> verified =
      header.ok() ? VerifyChunk(out.first(*n), DecodeExpectations{.ns = header->ns, .key = key})
                  : absl::StatusOr<ChunkHeader>(header.status());
  if (!verified.ok()) {
    AtomicTierCounters::Add(counters_.integrity_errors, 1);
    AtomicTierCounters::Add(counters_.misses, 1);
    spdlog::warn("remote tier: record {} from the daemon failed verification: {}", key.ToHex(),
                 verified.status().ToString());
    return absl::DataLossError("RemoteTier::Get: " + verified.status().ToString());
  }
  AtomicTierCounters::Add(counters_.hits, 1);
  AtomicTierCounters::Add(counters_.bytes_out, *n);
  return *n;
}

std::vector<ChunkStat> RemoteTier::Stat(std::span<const ChunkKey> keys) {
  std::vector<ChunkStat> out(keys.size());
  for (size_t i = 0; i < keys.size(); i += kKvtierMaxBatchKeys) {
    size_t n = std::min<size_t>(kKvtierMaxBatchKeys, keys.size() - i);
    const std::vector<uint64_t> release = TakeReleases();
    auto r = client_->Lookup(keys.subspan(i, n), /*per_key=*/true, /*pin=*/false, release);
    if (!r.ok()) {
      AtomicTierCounters::Add(counters_.io_errors, 1);
      return out;  // unreachable: the rest reads as absent
    }
    for (size_t j = 0; j < n && j < r->tier.size(); ++j) {
      if (!r->tier[j].has_value()) continue;
      const uint64_t bytes = j < r->record_bytes.size() ? r->record_bytes[j] : 0;
      const NamespaceId ns = j < r->ns.size() ? r->ns[j] : NamespaceId{};
      if (bytes > 0) out[i + j] = ChunkStat{true, bytes, ns};
    }
  }
  return out;
}

absl::Status RemoteTier::Erase(const ChunkKey& key) {
  EvictSelector sel;
  sel.keys.push_back(key);
  auto r = client_->Evict(sel);
  if (!r.ok()) return r.status();
  AtomicTierCounters::Add(counters_.evictions, r->chunks);
  return absl::OkStatus();
}

absl::StatusOr<ListPage> RemoteTier::List(const ListOptions& options) {
  if (options.page_size < 1 || options.page_size > 100000)
    return absl::InvalidArgumentError(
        absl::StrFormat("RemoteTier::List: page_size %d, expected 1..100000", options.page_size));
  auto r = client_->List(options.ns, options.page_token,
                         static_cast<uint32_t>(std::min<size_t>(options.page_size, 10000)));
  if (!r.ok()) return r.status();
  ListPage page;
  page.next_page_token = r->next_page_token;
  for (const auto& c : r->chunks) page.chunks.push_back(c.info);
  return page;
}

void RemoteTier::RefreshStats() const {
  const int64_t now = NowMs(options_.client.clock);
  if (now - stats_at_ms_.load(std::memory_order_relaxed) < options_.stats_refresh.count()) return;
  stats_at_ms_.store(now, std::memory_order_relaxed);
  auto s = client_->Stats();
  if (!s.ok()) return;
  uint64_t cap = 0, used = 0, chunks = 0;
  for (const auto& t : s->tiers) {
    cap += t.stats.capacity_bytes;
    used += t.stats.used_bytes;
    chunks += t.stats.chunks;
  }
  capacity_.store(cap, std::memory_order_relaxed);
  used_.store(used, std::memory_order_relaxed);
  chunks_.store(chunks, std::memory_order_relaxed);
}

TierStats RemoteTier::stats() const {
  RefreshStats();
  TierStats s;
  s.capacity_bytes = capacity_.load(std::memory_order_relaxed);
  s.used_bytes = used_.load(std::memory_order_relaxed);
  s.chunks = chunks_.load(std::memory_order_relaxed);
  counters_.CopyTo(s);
  return s;
}

TierCaps RemoteTier::caps() const {
  // No call to the service here: caps() is asked at store construction and must not
  // fail, block or trip the client's circuit breaker. Capacity is the last stats() answer.
  return TierCaps{.name = name_,
                  .kind = TierKind::kRemote,
                  .capacity_bytes = capacity_.load(std::memory_order_relaxed),
                  .durable = true,
                  .remote = true,
                  .verifies_reads = true,
                  .pinnable = true,
                  .evicts = false};
}

}  // namespace kvt
