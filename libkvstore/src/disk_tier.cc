// DiskTier data path: Put, Get, eviction, index bookkeeping. See docs/disk-tier.md.
#include "kvstore/disk_tier.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "disk_tier_impl.h"
#include "kvstore/chunk_codec.h"
#include "spdlog/spdlog.h"

namespace kvt {

using internal::Extent;
using internal::IndexEntry;
using internal::IoRing;
using internal::RoundUpToIoAlign;

// ---------------------------------------------------------------- ring pool

class DiskTier::Impl::RingLease {
 public:
  RingLease(Impl* impl, std::unique_ptr<IoRing> ring) : impl_(impl), ring_(std::move(ring)) {}
  ~RingLease() { impl_->ReleaseRing(std::move(ring_)); }
  IoRing* operator->() { return ring_.get(); }
  IoRing& ring() { return *ring_; }

 private:
  Impl* impl_;
  std::unique_ptr<IoRing> ring_;
};

absl::StatusOr<std::unique_ptr<IoRing>> DiskTier::Impl::AcquireRing() {
  {
    absl::MutexLock l(&ring_mu_);
    if (!rings_.empty()) {
      auto r = std::move(rings_.back());
      rings_.pop_back();
      return r;
    }
  }
  internal::IoRingOptions ro;
  ro.queue_depth = options_.queue_depth;
  ro.io_bytes = options_.io_bytes;
  ro.force_pread = options_.force_pread || (index_ && backend_ == internal::IoBackend::kPread);
  return IoRing::Create(ro);
}

void DiskTier::Impl::ReleaseRing(std::unique_ptr<IoRing> ring) {
  if (!ring) return;
  absl::MutexLock l(&ring_mu_);
  rings_.push_back(std::move(ring));
}

// ---------------------------------------------------------------- bookkeeping

DiskTier::Impl::Entry DiskTier::Impl::DetachLocked(
    absl::flat_hash_map<ChunkKey, Entry>::iterator it, std::optional<RemoveReason> reason) {
  Entry e = it->second;
  if (!e.committed) --uncommitted_;
  if (reason) policy_->OnRemove(it->first, *reason);
  dirty_access_.erase(it->first);
  used_bytes_ -= e.padded;
  map_.erase(it);
  return e;
}

void DiskTier::Impl::ReleaseExtentLocked(const Entry& e) {
  const Extent ext{e.idx.file_id, e.idx.offset, e.padded};
  if (e.readers > 0) {
    doomed_[e.gen] = Doomed{ext, e.readers};
  } else {
    alloc_.Free(ext);
  }
}

void DiskTier::Impl::FinishReadLocked(const ChunkKey& key, uint64_t gen) {
  auto it = map_.find(key);
  if (it != map_.end() && it->second.gen == gen) {
    --it->second.readers;
    return;
  }
  if (auto ev = evicting_readers_.find(gen); ev != evicting_readers_.end()) {
    if (--ev->second == 0) evicting_readers_.erase(ev);
    return;
  }
  auto d = doomed_.find(gen);
  if (d != doomed_.end() && --d->second.readers == 0) {
    alloc_.Free(d->second.extent);
    doomed_.erase(d);
  }
}

void DiskTier::Impl::DropEntry(const ChunkKey& key, uint64_t gen) {
  absl::MutexLock il(&index_mu_);
  Entry e;
  {
    absl::MutexLock l(&mu_);
    auto it = map_.find(key);
    if (it == map_.end() || it->second.gen != gen) return;  // replaced or gone already
    e = DetachLocked(it, RemoveReason::kErased);
  }
  absl::Status s = index_->Delete(std::span<const ChunkKey>(&key, 1), /*sync=*/true);
  absl::MutexLock l(&mu_);
  if (s.ok()) {
    ReleaseExtentLocked(e);
  } else {
    // The index may still point at the extent: leak it until the next Open.
    ++counters_.io_errors;
    spdlog::error("disk tier: cannot drop index entry {}: {}", key.ToHex(), s.ToString());
  }
}

// ---------------------------------------------------------------- Put / Get

void DiskTier::Impl::DropExpired() {
  {
    absl::MutexLock l(&mu_);
    bool any = false;
    policy_->VisitExpired(ClockOrSystem(options_.clock).Now(),
                          [&](const ChunkKey&) { any = true; });
    if (!any) return;  // the common case: no TTL, or nothing expired
  }
  absl::MutexLock il(&index_mu_);
  std::vector<ChunkKey> keys;
  std::vector<Entry> dropped;
  {
    absl::MutexLock l(&mu_);
    std::vector<ChunkKey> expired;
    policy_->VisitExpired(ClockOrSystem(options_.clock).Now(),
                          [&](const ChunkKey& key) { expired.push_back(key); });
    for (const ChunkKey& key : expired) {
      auto it = map_.find(key);
      if (it == map_.end() || it->second.pins > 0 || it->second.readers > 0) continue;
      keys.push_back(key);
      dropped.push_back(DetachLocked(it, RemoveReason::kExpired));
    }
  }
  if (keys.empty()) return;
  // Synced: the deletion is durable before the extents are reused.
  absl::Status s = index_->Delete(keys, /*sync=*/true);
  absl::MutexLock l(&mu_);
  if (!s.ok()) {
    // The index may still point at the extents: leak them until the next Open.
    ++counters_.io_errors;
    spdlog::error("disk tier: cannot drop {} expired index entries: {}", keys.size(), s.ToString());
    return;
  }
  counters_.ttl_expired += dropped.size();
  for (const Entry& e : dropped) ReleaseExtentLocked(e);
}

absl::StatusOr<PutResult> DiskTier::Impl::Put(std::span<const std::byte> record,
                                              const PutContext& context) {
  auto hdr = DecodeChunkHeader(record);
  if (!hdr.ok()) return hdr.status();
  if (record.size() != hdr->record_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "record is ", record.size(), " bytes but its header says ", hdr->record_bytes()));
  }
  const uint64_t padded = RoundUpToIoAlign(record.size());
  if (padded > options_.file_bytes || padded > options_.capacity_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "record of ", record.size(), " bytes can never fit: file_bytes = ", options_.file_bytes,
        ", capacity_bytes = ", options_.capacity_bytes));
  }
  PutResult result;
  result.key = hdr->key;
  {
    absl::MutexLock l(&mu_);
    const CacheEntryInfo info{
        .key = hdr->key, .parent = hdr->parent, .ns = hdr->ns, .record_bytes = record.size()};
    if (!policy_->Admit(info, context.reason)) {
      ++counters_.admission_rejects;
      return result;
    }
  }
  DropExpired();
  auto ext = Reserve(padded, context.keep_victims ? &result.victims : nullptr);
  if (!ext.ok()) return ext.status();

  std::shared_ptr<RecordFile> file;
  {
    absl::MutexLock l(&mu_);
    auto f = files_.find(ext->file_id);
    if (f != files_.end()) file = f->second;
  }
  const bool grouped = options_.commit == DiskCommit::kGrouped;
  absl::Status s;
  uint64_t bounced = 0;
  if (!file) {
    s = absl::UnavailableError("record file removed during the write");
  } else {
    auto ring = AcquireRing();
    if (!ring.ok()) {
      s = ring.status();
    } else {
      RingLease lease(this, std::move(*ring));
      const uint64_t b0 = lease.ring().bounce_bytes();
      s = fs_->Write(lease.ring(), Ref(*file), ext->offset, record);
      bounced = lease.ring().bounce_bytes() - b0;
    }
    // kGrouped: the committer fdatasyncs the file before it writes the index entry.
    if (s.ok() && !grouped) s = fs_->Sync(Ref(*file));
  }
  if (s.ok()) {
    IndexEntry e;
    e.file_id = ext->file_id;
    e.offset = ext->offset;
    e.record_bytes = record.size();
    e.payload_checksum = hdr->payload_checksum;
    e.last_access_ms = ClockOrSystem(options_.clock).UnixMillis();
    e.ns = hdr->ns;
    e.parent = hdr->parent;
    e.token_count = hdr->token_count;
    // Publishes the entry in memory (readable from now on); REQUIRES mu_.
    auto publish = [&](bool committed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      Entry en;
      en.idx = e;
      en.padded = padded;
      en.gen = next_gen_++;
      en.committed = committed;
      if (auto old = map_.find(hdr->key); old != map_.end()) {
        en.pins = old->second.pins;  // pins follow the key
        Entry o = DetachLocked(old, RemoveReason::kReplaced);
        if (!committed && o.committed) {
          // The index still points at the old extent until the new entry is committed.
          ++o.readers;
          deferred_free_.emplace_back(hdr->key, o.gen);
        }
        ReleaseExtentLocked(o);
      }
      used_bytes_ += padded;
      map_.emplace(hdr->key, en);
      policy_->OnInsert(CacheEntryInfo{
          .key = hdr->key, .parent = hdr->parent, .ns = hdr->ns, .record_bytes = record.size()});
      ++counters_.puts;
      counters_.bytes_in += record.size();
      counters_.copy_bytes += bounced;
      if (!committed) {
        ++uncommitted_;
        if (pending_.empty()) first_pending_ = ClockOrSystem(options_.clock).Now();
        pending_.emplace_back(hdr->key, en.gen);
        commit_cv_.Signal();
      }
    };
    if (grouped) {
      absl::MutexLock l(&mu_);
      if (files_.count(ext->file_id) == 0) {
        s = absl::UnavailableError("record file removed during the write");
      } else {
        publish(/*committed=*/false);
        result.stored = true;
        return result;
      }
    } else {
      absl::MutexLock il(&index_mu_);
      {
        absl::MutexLock l(&mu_);
        if (files_.count(ext->file_id) == 0)
          s = absl::UnavailableError("record file removed during the write");
      }
      // The record is durable; only now may the index point at it.
      if (s.ok()) s = index_->Put(hdr->key, e, /*sync=*/true);
      if (s.ok()) {
        absl::MutexLock l(&mu_);
        publish(/*committed=*/true);
        result.stored = true;
        return result;
      }
    }
  }
  absl::MutexLock l(&mu_);
  alloc_.Free(*ext);
  ++counters_.io_errors;
  if (absl::IsResourceExhausted(s)) ++extra_.enospc;
  spdlog::warn("disk tier: put {} failed: {}", hdr->key.ToHex(), s.ToString());
  return s;
}

absl::Status DiskTier::Impl::ReadRecord(const IndexEntry& e,
                                        const std::shared_ptr<RecordFile>& file,
                                        std::span<std::byte> out,
                                        const internal::InOrderCallback& in_order) {
  auto ring = AcquireRing();
  if (!ring.ok()) return ring.status();
  RingLease lease(this, std::move(*ring));
  const uint64_t b0 = lease.ring().bounce_bytes();
  absl::Status s = fs_->Read(lease.ring(), Ref(*file), e.offset, e.record_bytes, out, in_order);
  // The read itself (into memory) and its bounce copies (out not 4096-aligned).
  absl::MutexLock l(&mu_);
  ++extra_.record_reads;
  counters_.copy_bytes += e.record_bytes + (lease.ring().bounce_bytes() - b0);
  return s;
}

absl::Status DiskTier::Impl::ReadVerified(const ChunkKey& key, const IndexEntry& e,
                                          const std::shared_ptr<RecordFile>& file,
                                          std::span<std::byte> out) {
  // The payload's one hash (ChunkChecksum's fastest kernel), computed as the pieces
  // arrive, while later pieces are still in flight: verifying costs no second pass.
  ChunkChecksummer sum;
  uint64_t seen = 0;
  auto hash = [&](std::span<const std::byte> b) {
    const uint64_t skip =
        seen < kChunkHeaderBytes ? std::min<uint64_t>(kChunkHeaderBytes - seen, b.size()) : 0;
    if (b.size() > skip) sum.Update(b.subspan(skip));
    seen += b.size();
  };
  absl::Status s = ReadRecord(e, file, out, hash);
  if (!s.ok()) return s;
  auto h = DecodeChunkHeader(out.first(e.record_bytes));
  if (!h.ok()) return absl::DataLossError(absl::StrCat("header: ", h.status().message()));
  if (h->key != key || h->ns != e.ns || h->record_bytes() != e.record_bytes ||
      h->payload_checksum != e.payload_checksum) {
    return absl::DataLossError("record header does not match the index entry");
  }
  const uint64_t digest = sum.Digest();
  if (digest != e.payload_checksum) {
    return absl::DataLossError(
        absl::StrCat("payload checksum ", digest, " != ", e.payload_checksum));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> DiskTier::Impl::Get(const ChunkKey& key, std::span<std::byte> out,
                                             bool client_read) {
  IndexEntry e;
  uint64_t gen;
  std::shared_ptr<RecordFile> file;
  bool flush = false;
  {
    absl::MutexLock l(&mu_);
    auto it = map_.find(key);
    if (it == map_.end()) {
      if (client_read) {
        ++counters_.misses;
        policy_->OnMiss(key);
      }
      return absl::NotFoundError(absl::StrCat("chunk ", key.ToHex(), " not on disk"));
    }
    Entry& en = it->second;
    if (out.size() < en.idx.record_bytes) {
      return absl::OutOfRangeError(absl::StrCat("chunk ", key.ToHex(), " needs ",
                                                en.idx.record_bytes, " bytes, buffer has ",
                                                out.size()));
    }
    if (client_read) {
      en.idx.last_access_ms = ClockOrSystem(options_.clock).UnixMillis();
      policy_->OnAccess(key);
      dirty_access_.insert(key);
      flush = dirty_access_.size() >= options_.access_flush_batch;
    }
    ++en.readers;
    e = en.idx;
    gen = en.gen;
    if (auto f = files_.find(e.file_id); f != files_.end()) file = f->second;
  }
  absl::Status s;
  bool lost = !file || !StillOnDisk(*file);
  if (lost) {
    s = absl::DataLossError("record file is gone");
  } else {
    s = ReadVerified(key, e, file, out);
    if (absl::IsOutOfRange(s)) {
      // The file ends inside the record: truncated behind the tier's back.
      RepairTruncatedFile(file);
      s = absl::DataLossError(s.message());
    }
  }
  {
    absl::MutexLock l(&mu_);
    FinishReadLocked(key, gen);
    if (s.ok()) {
      if (client_read) {
        ++counters_.hits;
        counters_.bytes_out += e.record_bytes;
      }
    } else {
      if (client_read) ++counters_.misses;
      if (absl::IsDataLoss(s)) {
        ++counters_.integrity_errors;
      } else {
        ++counters_.io_errors;
      }
    }
  }
  if (!s.ok()) {
    if (!absl::IsDataLoss(s)) return s;  // e.g. Unavailable: keep the entry, retry later
    spdlog::warn("disk tier: chunk {} failed verification ({}); dropped", key.ToHex(),
                 s.ToString());
    if (lost && file) {
      HandleLostFile(e.file_id);
    } else {
      DropEntry(key, gen);
    }
    return absl::DataLossError(absl::StrCat(
        "chunk ", key.ToHex(), " failed verification on disk and was dropped: ", s.message()));
  }
  if (flush) {
    if (absl::Status fs = FlushAccessTimes(); !fs.ok()) {
      spdlog::warn("disk tier: last-access flush failed: {}", fs.ToString());
    }
  }
  return e.record_bytes;
}

absl::Status DiskTier::Impl::FlushAccessTimes() {
  absl::MutexLock il(&index_mu_);
  std::vector<std::pair<ChunkKey, IndexEntry>> batch;
  {
    absl::MutexLock l(&mu_);
    batch.reserve(dirty_access_.size());
    for (const ChunkKey& k : dirty_access_) {
      auto it = map_.find(k);
      // An uncommitted record's index entry is written by its commit, after its fdatasync.
      if (it != map_.end() && it->second.committed) batch.emplace_back(k, it->second.idx);
    }
    dirty_access_.clear();
  }
  // Not synced: a lost access time only makes LRU slightly less exact after a crash.
  return index_->PutMany(batch, /*sync=*/false);
}

// ---------------------------------------------------------------- the rest of Tier

std::vector<ChunkStat> DiskTier::Impl::Stat(std::span<const ChunkKey> keys) {
  std::vector<ChunkStat> r(keys.size());
  absl::MutexLock l(&mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = map_.find(keys[i]);
    if (it != map_.end()) r[i] = ChunkStat{true, it->second.idx.record_bytes, it->second.idx.ns};
  }
  return r;
}

absl::Status DiskTier::Impl::Erase(const ChunkKey& key) {
  absl::MutexLock il(&index_mu_);
  Entry e;
  {
    absl::MutexLock l(&mu_);
    auto it = map_.find(key);
    if (it == map_.end()) return absl::OkStatus();
    if (it->second.pins > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("chunk ", key.ToHex(), " is pinned (", it->second.pins, " pins)"));
    }
    e = DetachLocked(it, RemoveReason::kErased);
  }
  absl::Status s = index_->Delete(std::span<const ChunkKey>(&key, 1), /*sync=*/true);
  absl::MutexLock l(&mu_);
  if (!s.ok()) {
    ++counters_.io_errors;
    return s;  // extent leaks until the next Open
  }
  ReleaseExtentLocked(e);
  return absl::OkStatus();
}

absl::StatusOr<ListPage> DiskTier::Impl::List(const ListOptions& options) {
  if (options.page_size < 1 || options.page_size > 100000) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size = ", options.page_size, ", expected 1..100000"));
  }
  std::string start;
  std::optional<ChunkKey> after;
  if (!options.page_token.empty()) {
    auto k = ChunkKey::FromHex(options.page_token);
    if (!k.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("page_token '", options.page_token, "' is not a 32-hex-digit chunk key"));
    }
    after = *k;
    start = internal::EncodeIndexKey(*k);
  }
  // The listing comes from the index: commit what is written first (kGrouped).
  if (absl::Status c = CommitPending(); !c.ok()) return c;
  ListPage page;
  bool more = false;
  absl::Status s = index_->Scan(
      start, [&](std::string_view, absl::StatusOr<ChunkKey> key, absl::StatusOr<IndexEntry> e) {
        if (!key.ok() || !e.ok()) return true;
        if (after && *key == *after) return true;
        if (options.ns && e->ns != *options.ns) return true;
        if (page.chunks.size() == options.page_size) {
          more = true;
          return false;
        }
        ChunkInfo ci;
        ci.key = *key;
        ci.ns = e->ns;
        ci.parent = e->parent;
        ci.token_count = e->token_count;
        ci.record_bytes = e->record_bytes;
        ci.last_access_unix_ms = e->last_access_ms;
        page.chunks.push_back(ci);
        return true;
      });
  if (!s.ok()) return s;
  {
    // Batched access times live in memory until flushed.
    absl::MutexLock l(&mu_);
    for (auto& ci : page.chunks) {
      if (auto it = map_.find(ci.key); it != map_.end())
        ci.last_access_unix_ms = it->second.idx.last_access_ms;
    }
  }
  if (more) page.next_page_token = page.chunks.back().key.ToHex();
  return page;
}

TierStats DiskTier::Impl::stats() const {
  absl::MutexLock l(&mu_);
  TierStats st = counters_;
  st.capacity_bytes = options_.capacity_bytes;
  st.used_bytes = used_bytes_;
  st.chunks = map_.size();
  st.pinned_bytes = 0;
  for (const auto& [k, e] : map_) {
    if (e.pins > 0) st.pinned_bytes += e.padded;
  }
  return st;
}

DiskTierExtraStats DiskTier::Impl::extra_stats() const {
  absl::MutexLock l(&mu_);
  DiskTierExtraStats x = extra_;
  x.files = files_.size();
  x.file_bytes_total = alloc_.total_bytes();
  const internal::DiskIndexStats is = index_->stats();
  x.index_write_stopped = is.write_stopped;
  x.index_reopens = is.reopens;
  x.index_low_space_refusals = is.low_space_refusals;
  x.uncommitted = uncommitted_;
  return x;
}

PinHandle DiskTier::Impl::Pin(const ChunkKey& key) {
  absl::MutexLock l(&mu_);
  auto it = map_.find(key);
  if (it == map_.end()) {
    policy_->OnMiss(key);
    return PinHandle();
  }
  ++it->second.pins;
  policy_->OnAccess(key);  // a pin announces a read (tier.h)
  return PinHandle(&DiskTier::Impl::Unpin, this, key, it->second.idx.record_bytes);
}

void DiskTier::Impl::Unpin(void* self_ptr, const ChunkKey& key) {
  auto* self = static_cast<DiskTier::Impl*>(self_ptr);
  absl::MutexLock l(&self->mu_);
  auto it = self->map_.find(key);
  if (it != self->map_.end() && it->second.pins > 0) --it->second.pins;
}

// ---------------------------------------------------------------- DiskTier

TierFactory DiskTier::Factory(DiskTierOptions options) {
  return [options]() -> absl::StatusOr<std::unique_ptr<Tier>> {
    absl::StatusOr<std::unique_ptr<DiskTier>> t = Open(options);
    if (!t.ok()) return t.status();
    return std::unique_ptr<Tier>(std::move(*t));
  };
}

DiskTier::DiskTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DiskTier::~DiskTier() = default;
absl::StatusOr<PutResult> DiskTier::Put(std::span<const std::byte> record,
                                        const PutContext& context) {
  return impl_->Put(record, context);
}
absl::StatusOr<uint64_t> DiskTier::Get(const ChunkKey& key, std::span<std::byte> out) {
  return impl_->Get(key, out);
}
absl::StatusOr<uint64_t> DiskTier::CopyForWriteBack(const ChunkKey& key, std::span<std::byte> out) {
  return impl_->Get(key, out, /*client_read=*/false);
}
std::vector<ChunkStat> DiskTier::Stat(std::span<const ChunkKey> keys) { return impl_->Stat(keys); }
absl::Status DiskTier::Erase(const ChunkKey& key) { return impl_->Erase(key); }
absl::StatusOr<ListPage> DiskTier::List(const ListOptions& options) { return impl_->List(options); }
TierStats DiskTier::stats() const { return impl_->stats(); }
TierCaps DiskTier::caps() const {
  return TierCaps{.name = "disk",
                  .kind = TierKind::kDisk,
                  .capacity_bytes = impl_->options_.capacity_bytes,
                  .durable = true,
                  .remote = false,
                  .verifies_reads = true,
                  .pinnable = true,
                  .evicts = true};
}
PinHandle DiskTier::Pin(const ChunkKey& key) { return impl_->Pin(key); }
DiskIoBackend DiskTier::backend() const {
  return impl_->backend_ == internal::IoBackend::kIoUring ? DiskIoBackend::kIoUring
                                                          : DiskIoBackend::kPread;
}
bool DiskTier::direct_io() const { return impl_->direct_io_.load(); }
DiskTierExtraStats DiskTier::extra_stats() const { return impl_->extra_stats(); }
absl::Status DiskTier::FlushAccessTimes() { return impl_->FlushAccessTimes(); }
absl::Status DiskTier::Sync() { return impl_->CommitPending(); }

}  // namespace kvt
