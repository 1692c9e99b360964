#include "kvstore/tiered_store.h"

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <exception>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kvstore/chunk_codec.h"
#include "spdlog/spdlog.h"

namespace kvt {

absl::Status TieredStoreOptions::Validate() const {
  if (lease_timeout.count() <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "TieredStoreOptions.lease_timeout = %d ms; expected > 0", lease_timeout.count()));
  }
  return absl::OkStatus();
}

// Lock order: a tier's own lock (held while it calls the eviction listener) may be
// followed by queue_mu_. No tier is ever called with queue_mu_ or lease_mu_ held.
class TieredStore::Impl {
 public:
  Impl(std::vector<std::unique_ptr<Tier>> tiers, const TieredStoreOptions& options)
      : tiers_(std::move(tiers)), options_(options) {
    for (size_t i = 0; i + 1 < tiers_.size(); ++i) {
      tiers_[i]->SetEvictionListener(
          [this, i](const ChunkKey& key, std::span<const std::byte> record) {
            OnEvicted(i, key, record);
          });
    }
    worker_ = std::thread([this] { WorkerMain(); });
  }

  ~Impl() {
    {
      absl::MutexLock lock(&queue_mu_);
      stop_ = true;
      queue_cv_.SignalAll();
    }
    worker_.join();  // the worker drains the queue before it exits
    for (size_t i = 0; i + 1 < tiers_.size(); ++i) tiers_[i]->SetEvictionListener(nullptr);
  }

  absl::Status Put(std::span<const std::byte> record) {
    absl::StatusOr<ChunkHeader> header = DecodeChunkHeader(record);
    if (!header.ok()) return header.status();
    if (record.size() != header->record_bytes()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("TieredStore::Put: record of key %s is %d bytes; its header says %d",
                          header->key.ToHex(), record.size(), header->record_bytes()));
    }
    absl::Status s = tiers_[0]->Put(record);
    if (tiers_.size() == 1) return s;
    if (s.ok()) {
      if (!options_.write_through) return s;
      auto [first, last] = WriteThroughRange();
      // Key only: the worker reads the record back from tier 0 when it gets to it
      // (no second copy on the Put path). If tier 0 evicts it first, the eviction
      // listener queues a demotion carrying the bytes.
      if (first <= last) Enqueue({}, record.size(), header->key, first, last);
      return s;
    }
    if (!absl::IsResourceExhausted(s)) return s;
    // Tier 0 cannot take it: the lower tiers still can.
    auto [first, last] = WriteThroughRange();
    if (!options_.write_through || first > last) first = last = 1;
    Enqueue(record, record.size(), header->key, first, last);
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> Get(const ChunkKey& key, std::span<std::byte> out, GetInfo* info) {
    for (size_t t = 0; t < tiers_.size(); ++t) {
      absl::StatusOr<uint64_t> n = tiers_[t]->Get(key, out);
      if (!n.ok()) {
        if (absl::IsOutOfRange(n.status())) return n.status();
        if (!absl::IsNotFound(n.status())) LogTierError(t, "Get", n.status());
        continue;
      }
      if (AfterHit(t, key, out.first(*n), info)) return n;
    }
    return Miss(key);
  }

  absl::StatusOr<std::vector<std::byte>> Get(const ChunkKey& key, GetInfo* info) {
    for (size_t t = 0; t < tiers_.size(); ++t) {
      std::vector<std::byte> buf;
      absl::StatusOr<uint64_t> n = absl::NotFoundError("");
      for (int attempt = 0; attempt < 3; ++attempt) {  // the size may change under us
        absl::StatusOr<uint64_t> size = tiers_[t]->RecordSize(key);
        if (!size.ok()) {
          n = size.status();
          break;
        }
        buf.resize(*size);
        n = tiers_[t]->Get(key, buf);
        if (!absl::IsOutOfRange(n.status())) break;
      }
      if (!n.ok()) {
        if (!absl::IsNotFound(n.status())) LogTierError(t, "Get", n.status());
        continue;
      }
      buf.resize(*n);
      if (AfterHit(t, key, buf, info)) return buf;
    }
    return Miss(key);
  }

  LookupResult Lookup(std::span<const ChunkKey> keys, bool pin) {
    ReapExpired();
    LookupResult result;
    std::vector<int> where(keys.size(), -1);
    std::vector<size_t> unresolved(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) unresolved[i] = i;
    for (size_t t = 0; t < tiers_.size() && !unresolved.empty(); ++t) {
      std::vector<ChunkKey> query;
      query.reserve(unresolved.size());
      for (size_t i : unresolved) query.push_back(keys[i]);
      std::vector<bool> present = tiers_[t]->Contains(query);
      std::vector<size_t> still;
      for (size_t j = 0; j < unresolved.size(); ++j) {
        if (j < present.size() && present[j]) {
          where[unresolved[j]] = static_cast<int>(t);
        } else {
          still.push_back(unresolved[j]);
        }
      }
      unresolved = std::move(still);
    }
    size_t leading = 0;
    while (leading < keys.size() && where[leading] >= 0) ++leading;

    if (pin && leading > 0) {
      Lease lease;
      lease.deadline = absl::Now() + absl::FromChrono(options_.lease_timeout);
      for (size_t i = 0; i < leading; ++i) {
        const int t = where[i];
        if (!tiers_[t]->Pin(keys[i])) {  // left that tier since Contains: stop here
          leading = i;
          break;
        }
        absl::StatusOr<uint64_t> size = tiers_[t]->RecordSize(keys[i]);
        lease.pins.push_back(PinnedChunk{t, keys[i], size.ok() ? *size : 0});
      }
      if (!lease.pins.empty()) {
        absl::MutexLock lock(&lease_mu_);
        result.lease = next_lease_++;
        for (const PinnedChunk& p : lease.pins) {
          PinRef& ref = pin_refs_[{p.tier, p.key}];
          if (ref.count++ == 0) {
            ref.bytes = p.bytes;
            pinned_bytes_ += p.bytes;
          }
        }
        leases_.emplace(result.lease, std::move(lease));
      }
    }
    result.num_leading_hits = leading;
    for (size_t i = 0; i < leading; ++i) {
      result.tier_index.push_back(where[i]);
      result.tier_kind.push_back(tiers_[where[i]]->kind());
    }
    return result;
  }

  void ReleaseLease(LeaseId id) {
    Lease lease;
    {
      absl::MutexLock lock(&lease_mu_);
      auto it = leases_.find(id);
      if (it == leases_.end()) return;
      lease = std::move(it->second);
      leases_.erase(it);
      DropPinRefsLocked(lease);
    }
    UnpinAll(lease);
  }

  uint64_t pinned_bytes() {
    ReapExpired();
    absl::MutexLock lock(&lease_mu_);
    return pinned_bytes_;
  }

  uint64_t expired_leases() const {
    absl::MutexLock lock(&lease_mu_);
    return expired_leases_;
  }

  absl::Status Erase(const ChunkKey& key) {
    {
      // Queued write-backs of the key would bring it back below.
      absl::MutexLock lock(&queue_mu_);
      for (auto it = queue_.begin(); it != queue_.end();) {
        if (it->key == key) {
          pending_bytes_ -= it->record_bytes;
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      if (in_progress_ && inflight_key_ == key) inflight_cancelled_ = true;
    }
    absl::Status first_error;
    for (auto& tier : tiers_) {
      absl::Status s = tier->Erase(key);
      if (!s.ok() && first_error.ok()) first_error = s;
    }
    return first_error;
  }

  void Flush() {
    absl::MutexLock lock(&queue_mu_);
    queue_mu_.Await(absl::Condition(
        +[](Impl* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->queue_mu_) {
          return (self->queue_.empty() && !self->in_progress_) || !self->healthy_;
        },
        this));
  }

  size_t num_tiers() const { return tiers_.size(); }
  Tier& tier(size_t index) { return *tiers_.at(index); }

  bool healthy() const {
    absl::MutexLock lock(&queue_mu_);
    return healthy_;
  }

  TieredStoreStats stats() const {
    TieredStoreStats s;
    {
      absl::MutexLock lock(&queue_mu_);
      s = counters_;
      s.pending_write_bytes = pending_bytes_;
    }
    absl::MutexLock lock(&stats_mu_);
    s.hits = hits_;
    s.misses = misses_;
    s.promotions = promotions_;
    s.integrity_errors = integrity_errors_;
    return s;
  }

 private:
  struct WriteItem {
    // The bytes to write; empty = read the record back from tier 0 at write time.
    std::vector<std::byte> record;
    uint64_t record_bytes = 0;  // counted in pending_bytes_
    ChunkKey key;
    size_t first_tier = 0;  // inclusive range of target tiers
    size_t last_tier = 0;
    bool demotion = false;  // skip a target that already holds the key
  };
  struct PinnedChunk {
    int tier = 0;
    ChunkKey key;
    uint64_t bytes = 0;  // record size when pinned
  };
  struct Lease {
    absl::Time deadline;
    std::vector<PinnedChunk> pins;
  };
  // A chunk pinned by several leases counts once in pinned_bytes().
  struct PinRef {
    uint32_t count = 0;
    uint64_t bytes = 0;
  };

  // Tiers a put is written through to: 1..n-1, without a trailing remote tier when
  // write_through_remote is false. Empty when first > last.
  std::pair<size_t, size_t> WriteThroughRange() const {
    size_t last = tiers_.size() - 1;
    while (last >= 1 && !options_.write_through_remote &&
           tiers_[last]->kind() == TierKind::kRemote) {
      --last;
    }
    return {1, last};
  }

  // Called by tier `t` with its lock held: copy and queue, never block. When the next
  // tier is local (not remote) and already holds the key (the usual case with
  // write-through), nothing is copied: asking it is an in-memory lookup, and the lock
  // order tier t -> tier t+1 -> queue_mu_ has no cycle (no tier calls a higher one).
  void OnEvicted(size_t t, const ChunkKey& key, std::span<const std::byte> record) {
    Tier& next = *tiers_[t + 1];
    if (next.kind() != TierKind::kRemote && next.Contains(std::span(&key, 1))[0]) {
      absl::MutexLock lock(&queue_mu_);
      ++counters_.demotions_skipped;
      return;
    }
    absl::MutexLock lock(&queue_mu_);
    if (!healthy_ || stop_) {
      ++counters_.writes_dropped;
      return;
    }
    const uint64_t limit = options_.max_pending_write_bytes;
    if (limit > 0 && pending_bytes_ + record.size() > 2 * limit) {
      ++counters_.demotions_dropped;
      return;
    }
    ++counters_.demotions_queued;
    PushLocked(record, record.size(), key, t + 1, t + 1, /*demotion=*/true);
  }

  // Queues a write-through (blocking while the queue is over the limit). `record` empty
  // means "read it back from tier 0".
  void Enqueue(std::span<const std::byte> record, uint64_t record_bytes, const ChunkKey& key,
               size_t first, size_t last) {
    absl::MutexLock lock(&queue_mu_);
    const uint64_t limit = options_.max_pending_write_bytes;
    if (limit > 0) {
      const uint64_t size = record_bytes;
      struct Args {
        Impl* self;
        uint64_t size;
        uint64_t limit;
      } args{this, size, limit};
      queue_mu_.Await(absl::Condition(
          +[](Args* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return a->self->pending_bytes_ == 0 || a->self->pending_bytes_ + a->size <= a->limit ||
                   !a->self->healthy_ || a->self->stop_;
          },
          &args));
    }
    if (!healthy_ || stop_) {
      ++counters_.writes_dropped;
      return;
    }
    PushLocked(record, record_bytes, key, first, last, /*demotion=*/false);
  }

  void PushLocked(std::span<const std::byte> record, uint64_t record_bytes, const ChunkKey& key,
                  size_t first, size_t last, bool demotion)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_) {
    WriteItem item;
    item.record.assign(record.begin(), record.end());
    item.record_bytes = record_bytes;
    item.key = key;
    item.first_tier = first;
    item.last_tier = last;
    item.demotion = demotion;
    pending_bytes_ += record_bytes;
    queue_.push_back(std::move(item));
    queue_cv_.Signal();
  }

  void WorkerMain() {
    try {
      WorkerLoop();
    } catch (const std::exception& e) {
      spdlog::error("TieredStore: write-back thread died: {}", e.what());
      MarkDead();
    } catch (...) {
      spdlog::error("TieredStore: write-back thread died: unknown exception");
      MarkDead();
    }
  }

  void MarkDead() {
    absl::MutexLock lock(&queue_mu_);
    healthy_ = false;
    in_progress_ = false;
  }

  void WorkerLoop() {
    const absl::Duration reap_period =
        std::clamp(absl::FromChrono(options_.lease_timeout) / 4, absl::Milliseconds(1),
                   absl::Milliseconds(100));
    absl::Time next_reap = absl::Now() + reap_period;
    for (;;) {
      WriteItem item;
      bool have_item = false;
      {
        absl::MutexLock lock(&queue_mu_);
        while (queue_.empty() && !stop_) {
          const absl::Duration wait = next_reap - absl::Now();
          if (wait <= absl::ZeroDuration()) break;
          queue_cv_.WaitWithTimeout(&queue_mu_, wait);
        }
        if (queue_.empty() && stop_) return;
        if (!queue_.empty()) {
          item = std::move(queue_.front());
          queue_.pop_front();
          in_progress_ = true;
          inflight_key_ = item.key;
          inflight_cancelled_ = false;
          have_item = true;
        }
      }
      if (have_item) {
        uint64_t ok = 0, failed = 0, gone = 0;
        std::span<const std::byte> record = item.record;
        if (record.empty()) {
          absl::StatusOr<std::span<const std::byte>> r = ReadBackFromTierZero(item.key);
          if (r.ok()) {
            record = *r;
          } else {
            ++gone;  // evicted (a demotion carries it) or erased since the Put
          }
        }
        for (size_t t = item.first_tier; !record.empty() && t <= item.last_tier; ++t) {
          if (item.demotion && tiers_[t]->Contains(std::span(&item.key, 1))[0]) continue;
          absl::Status s = tiers_[t]->Put(record);
          if (s.ok()) {
            ++ok;
          } else {
            ++failed;
            LogTierError(t, "write-back Put", s);
          }
        }
        bool cancelled;
        {
          absl::MutexLock lock(&queue_mu_);
          cancelled = inflight_cancelled_;
          counters_.writebacks += ok;
          counters_.writeback_errors += failed;
          counters_.writebacks_skipped += gone;
        }
        if (cancelled) {  // erased while we wrote it: erase what we wrote
          for (size_t t = item.first_tier; t <= item.last_tier && t < tiers_.size(); ++t) {
            (void)tiers_[t]->Erase(item.key);
          }
        }
        absl::MutexLock lock(&queue_mu_);
        pending_bytes_ -= item.record_bytes;
        in_progress_ = false;
      }
      if (absl::Now() >= next_reap) {
        ReapExpired();
        next_reap = absl::Now() + reap_period;
      }
    }
  }

  // Copies the record of `key` from tier 0 into the worker's 4096-aligned scratch
  // buffer (aligned so a disk tier can use it for O_DIRECT without a bounce copy).
  absl::StatusOr<std::span<const std::byte>> ReadBackFromTierZero(const ChunkKey& key) {
    for (int attempt = 0; attempt < 3; ++attempt) {
      absl::StatusOr<uint64_t> size = tiers_[0]->RecordSize(key);
      if (!size.ok()) return size.status();
      if (*size > scratch_bytes_) {
        const uint64_t bytes = (*size + 4095) / 4096 * 4096;
        scratch_.reset(static_cast<std::byte*>(std::aligned_alloc(4096, bytes)));
        if (scratch_ == nullptr) {
          scratch_bytes_ = 0;
          return absl::ResourceExhaustedError("write-back scratch buffer");
        }
        scratch_bytes_ = bytes;
      }
      absl::StatusOr<uint64_t> n = tiers_[0]->Get(key, std::span(scratch_.get(), scratch_bytes_));
      if (n.ok()) return std::span<const std::byte>(scratch_.get(), *n);
      if (!absl::IsOutOfRange(n.status())) return n.status();
    }
    return absl::UnavailableError("record size kept changing");
  }

  void ReapExpired() {
    std::vector<Lease> expired;
    {
      absl::MutexLock lock(&lease_mu_);
      const absl::Time now = absl::Now();
      for (auto it = leases_.begin(); it != leases_.end();) {
        if (it->second.deadline <= now) {
          DropPinRefsLocked(it->second);
          ++expired_leases_;
          expired.push_back(std::move(it->second));
          leases_.erase(it++);
        } else {
          ++it;
        }
      }
    }
    for (const Lease& lease : expired) UnpinAll(lease);
  }

  void UnpinAll(const Lease& lease) {
    for (const PinnedChunk& p : lease.pins) tiers_[p.tier]->Unpin(p.key);
  }

  void DropPinRefsLocked(const Lease& lease) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lease_mu_) {
    for (const PinnedChunk& p : lease.pins) {
      auto it = pin_refs_.find(std::make_pair(p.tier, p.key));
      if (it == pin_refs_.end()) continue;
      if (--it->second.count == 0) {
        pinned_bytes_ -= it->second.bytes;
        pin_refs_.erase(it);
      }
    }
  }

  // Returns false when a lower-tier record fails verification (erased; keep searching).
  bool AfterHit(size_t t, const ChunkKey& key, std::span<const std::byte> record,
                GetInfo* info) {
    bool promoted = false;
    if (t > 0) {
      absl::StatusOr<ChunkHeader> header = DecodeChunkHeader(record);
      absl::Status verified = header.status();
      if (header.ok()) verified = VerifyChunk(record, {header->ns, key}).status();
      if (!verified.ok()) {
        spdlog::warn("TieredStore: chunk {} in tier {} ({}) failed verification: {}; erasing it",
                     key.ToHex(), t, tiers_[t]->name(), verified.ToString());
        (void)tiers_[t]->Erase(key);
        absl::MutexLock lock(&stats_mu_);
        ++integrity_errors_;
        return false;
      }
      promoted = tiers_[0]->Put(record).ok();
    }
    if (info != nullptr) {
      info->tier_index = static_cast<int>(t);
      info->promoted = promoted;
    }
    absl::MutexLock lock(&stats_mu_);
    ++hits_;
    if (promoted) ++promotions_;
    return true;
  }

  absl::Status Miss(const ChunkKey& key) {
    {
      absl::MutexLock lock(&stats_mu_);
      ++misses_;
    }
    return absl::NotFoundError(absl::StrFormat("TieredStore: no chunk %s in %d tier(s)",
                                               key.ToHex(), tiers_.size()));
  }

  void LogTierError(size_t t, const char* op, const absl::Status& s) {
    spdlog::warn("TieredStore: tier {} ({}) {} failed: {}", t, tiers_[t]->name(), op,
                 s.ToString());
  }

  std::vector<std::unique_ptr<Tier>> tiers_;
  const TieredStoreOptions options_;

  mutable absl::Mutex queue_mu_;
  absl::CondVar queue_cv_;
  std::deque<WriteItem> queue_ ABSL_GUARDED_BY(queue_mu_);
  uint64_t pending_bytes_ ABSL_GUARDED_BY(queue_mu_) = 0;  // queued + in flight
  bool in_progress_ ABSL_GUARDED_BY(queue_mu_) = false;
  ChunkKey inflight_key_ ABSL_GUARDED_BY(queue_mu_);
  bool inflight_cancelled_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool stop_ ABSL_GUARDED_BY(queue_mu_) = false;
  bool healthy_ ABSL_GUARDED_BY(queue_mu_) = true;
  TieredStoreStats counters_ ABSL_GUARDED_BY(queue_mu_);

  mutable absl::Mutex lease_mu_;
  absl::flat_hash_map<LeaseId, Lease> leases_ ABSL_GUARDED_BY(lease_mu_);
  LeaseId next_lease_ ABSL_GUARDED_BY(lease_mu_) = 1;
  absl::flat_hash_map<std::pair<int, ChunkKey>, PinRef> pin_refs_ ABSL_GUARDED_BY(lease_mu_);
  uint64_t pinned_bytes_ ABSL_GUARDED_BY(lease_mu_) = 0;  // distinct (tier, key) bytes
  uint64_t expired_leases_ ABSL_GUARDED_BY(lease_mu_) = 0;

  mutable absl::Mutex stats_mu_;
  uint64_t hits_ ABSL_GUARDED_BY(stats_mu_) = 0;
  uint64_t misses_ ABSL_GUARDED_BY(stats_mu_) = 0;
  uint64_t promotions_ ABSL_GUARDED_BY(stats_mu_) = 0;
  uint64_t integrity_errors_ ABSL_GUARDED_BY(stats_mu_) = 0;

  // Worker-thread only.
  struct FreeDeleter {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, FreeDeleter> scratch_;
  uint64_t scratch_bytes_ = 0;

  std::thread worker_;  // last: started after every member above is constructed
};

absl::StatusOr<std::unique_ptr<TieredStore>> TieredStore::Create(
    std::vector<std::unique_ptr<Tier>> tiers, const TieredStoreOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (tiers.empty()) {
    return absl::InvalidArgumentError("TieredStore::Create: no tiers; expected at least one");
  }
  for (size_t i = 0; i < tiers.size(); ++i) {
    if (tiers[i] == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("TieredStore::Create: tier %d is null", i));
    }
  }
  return std::unique_ptr<TieredStore>(
      new TieredStore(std::make_unique<Impl>(std::move(tiers), options)));
}

TieredStore::TieredStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TieredStore::~TieredStore() = default;

absl::Status TieredStore::Put(std::span<const std::byte> record) { return impl_->Put(record); }
absl::StatusOr<uint64_t> TieredStore::Get(const ChunkKey& key, std::span<std::byte> out,
                                          GetInfo* info) {
  return impl_->Get(key, out, info);
}
absl::StatusOr<std::vector<std::byte>> TieredStore::Get(const ChunkKey& key, GetInfo* info) {
  return impl_->Get(key, info);
}
LookupResult TieredStore::Lookup(std::span<const ChunkKey> keys, bool pin) {
  return impl_->Lookup(keys, pin);
}
void TieredStore::ReleaseLease(LeaseId lease) { impl_->ReleaseLease(lease); }
uint64_t TieredStore::pinned_bytes() { return impl_->pinned_bytes(); }
uint64_t TieredStore::expired_leases() const { return impl_->expired_leases(); }
absl::Status TieredStore::Erase(const ChunkKey& key) { return impl_->Erase(key); }
void TieredStore::Flush() { impl_->Flush(); }
size_t TieredStore::num_tiers() const { return impl_->num_tiers(); }
Tier& TieredStore::tier(size_t index) { return impl_->tier(index); }
bool TieredStore::healthy() const { return impl_->healthy(); }
TieredStoreStats TieredStore::stats() const { return impl_->stats(); }

}  // namespace kvt
