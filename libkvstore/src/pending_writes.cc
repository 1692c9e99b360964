// PendingWrites: the store's writes not yet landed, their byte bound, and the lookups
// that let a pending record be found before it lands.
#include "pending_writes.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kvstore/chunk_codec.h"

namespace kvt::internal {

PendingWrites::PendingWrites(uint64_t max_pending_write_bytes, std::shared_ptr<BufferPool> pool)
    : max_pending_write_bytes_(max_pending_write_bytes), pool_(std::move(pool)) {}

// ---------------------------------------------------------------- producers

void PendingWrites::Enqueue(RecordBuffer record, uint64_t record_bytes, const ChunkKey& key,
                            size_t first, size_t last) {
  absl::MutexLock lock(&mu_);
  const uint64_t limit = max_pending_write_bytes_;
  if (limit > 0) {
    struct Args {
      PendingWrites* self;
      uint64_t size;
      uint64_t limit;
    } args{this, record_bytes, limit};
    mu_.Await(absl::Condition(
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
  PushLocked(std::move(record), record_bytes, key, first, last, /*demotion=*/false);
}

void PendingWrites::PushLocked(RecordBuffer record, uint64_t record_bytes, const ChunkKey& key,
                               size_t first, size_t last, bool demotion) {
  auto write = std::make_shared<PendingWrite>();
  write->record = std::move(record);
  write->record_bytes = record_bytes;
  write->key = key;
  write->first_tier = first;
  write->last_tier = last;
  write->demotion = demotion;
  pending_bytes_ += record_bytes;
  held_bytes_ += write->record.size;
  queue_.push_back(std::move(write));
  cv_.Signal();
}

void PendingWrites::CountDemotionSkipped() {
  absl::MutexLock lock(&mu_);
  ++counters_.demotions_skipped;
}

void PendingWrites::AddDemotion(size_t t, Victim v) {
  absl::MutexLock lock(&mu_);
  if (!healthy_ || stop_) {
    ++counters_.writes_dropped;
    return;
  }
  // The bytes stay within the bound: a demotion past it is dropped, not queued (the
  // record is then in no tier, a clean miss).
  const uint64_t size = v.record.size;
  const uint64_t limit = max_pending_write_bytes_;
  if (limit > 0 && held_bytes_ + size > limit) {
    ++counters_.demotions_dropped;
    return;
  }
  ++counters_.demotions_queued;
  if (t == 0) {
    // A write-through of the key still waiting to read it back from tier 0 carries
    // the bytes instead (to every tier it names), so none of them misses it.
    auto it = std::find_if(queue_.begin(), queue_.end(), [&](const WritePtr& w) {
      return w->key == v.key && w->record.empty() && !w->submitted && !w->demotion &&
             w->record_bytes == size;
    });
    if (it != queue_.end()) {
      held_bytes_ += size;
      (*it)->record = std::move(v.record);
      return;
    }
    // That write-through is in flight: it may already have missed tier 0, so the
    // demotion goes to every tier it names (a demotion skips a tier holding the key).
    if (inflight_ != nullptr && inflight_->key == v.key && inflight_->record.empty() &&
        !inflight_->submitted && !inflight_->demotion) {
      PushLocked(std::move(v.record), size, v.key, t + 1, std::max(t + 1, inflight_->last_tier),
                 /*demotion=*/true);
      return;
    }
  }
  // The victim's own buffer is queued: no copy.
  PushLocked(std::move(v.record), size, v.key, t + 1, t + 1, /*demotion=*/true);
}

PendingWrites::Admission PendingWrites::Admit(const ChunkKey& key, uint64_t record_bytes,
                                              uint64_t limit_bytes) {
  absl::MutexLock lock(&mu_);
  if (write_keys_.contains(key)) return Admission::kAlreadyQueued;
  uint64_t limit = max_pending_write_bytes_;
  if (limit_bytes != 0 && (limit == 0 || limit_bytes < limit)) limit = limit_bytes;
  if (limit != 0 && pending_bytes_ + record_bytes > limit) return Admission::kQueueFull;
  pending_bytes_ += record_bytes;
  held_bytes_ += record_bytes;
  ++write_keys_[key];
  return Admission::kAdmitted;
}

void PendingWrites::CancelAdmission(const ChunkKey& key, uint64_t record_bytes) {
  PendingWrite admitted;
  admitted.key = key;
  admitted.record_bytes = record_bytes;
  admitted.submitted = true;
  absl::MutexLock lock(&mu_);
  held_bytes_ -= record_bytes;  // ForgetLocked subtracts record.size (empty here)
  ForgetLocked(admitted);
}

void PendingWrites::ForgetLocked(const PendingWrite& write) {
  pending_bytes_ -= write.record_bytes;
  held_bytes_ -= write.record.size;
  if (write.submitted) {
    auto k = write_keys_.find(write.key);
    if (k != write_keys_.end() && --k->second == 0) write_keys_.erase(k);
  }
}

void PendingWrites::Forget(const PendingWrite& write) {
  absl::MutexLock lock(&mu_);
  ForgetLocked(write);
}

PendingWrites::WritePtr PendingWrites::Submit(WritePtr write) {
  absl::MutexLock lock(&mu_);
  ++counters_.writes_submitted;
  if (healthy_ && !stop_) {  // the admission reserved its bytes and key already
    queue_.push_back(std::move(write));
    cv_.Signal();
    return nullptr;
  }
  return write;  // the writer is gone: the caller writes it, so nothing submitted is lost
}

void PendingWrites::WrittenHere(const PendingWrite& write, const absl::Status& s, uint64_t ok,
                                uint64_t failed) {
  absl::MutexLock lock(&mu_);
  if (!s.ok()) ++counters_.writes_failed;
  counters_.writebacks += ok;
  counters_.writeback_errors += failed;
  ForgetLocked(write);
}

// ---------------------------------------------------------------- readers

absl::Status PendingWrites::CopyRecord(const PendingWrite& write, bool finished,
                                       std::span<std::byte> out) {
  const uint64_t n = write.record.size;
  if (!write.submitted || finished) {
    std::memcpy(out.data(), write.record.data.get(), n);
    return absl::OkStatus();
  }
  // Not finished yet: copy the payload (immutable since it was queued) and finish the copy.
  if (n < kChunkHeaderBytes) return absl::NotFoundError("not queued");
  std::memcpy(out.data() + kChunkHeaderBytes, write.record.data.get() + kChunkHeaderBytes,
              n - kChunkHeaderBytes);
  absl::Status s = write.finish(out.first(n));
  if (!s.ok()) return absl::NotFoundError(absl::StrCat("queued record unusable: ", s.message()));
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> PendingWrites::Find(const ChunkKey& key, std::span<std::byte> out,
                                             std::vector<std::byte>* alloc, size_t* target) {
  WritePtr found;
  bool finished = false;
  {
    absl::MutexLock lock(&mu_);
    // Newest first: a later Put of the same key replaces an earlier one; the write in
    // flight is older than every queued one.
    for (auto it = queue_.rbegin(); it != queue_.rend() && found == nullptr; ++it) {
      if ((*it)->key == key && !(*it)->record.empty()) found = *it;
    }
    if (found == nullptr && inflight_ != nullptr && !inflight_cancelled_ && inflight_->key == key &&
        !inflight_->record.empty()) {
      found = inflight_;
    }
    if (found == nullptr) return absl::NotFoundError("not queued");
    finished = found->finished;
  }
  // Copied outside the lock: `found` keeps the write (and its buffer) alive.
  const uint64_t n = found->record.size;
  *target = found->first_tier;
  if (alloc != nullptr && out.empty()) {
    alloc->resize(n);
    out = std::span<std::byte>(*alloc);
  } else if (out.size() < n) {
    return absl::OutOfRangeError(absl::StrFormat(
        "TieredStore: chunk %s needs a buffer of %d bytes; got %d", key.ToHex(), n, out.size()));
  }
  if (absl::Status s = CopyRecord(*found, finished, out); !s.ok()) {
    if (alloc != nullptr) alloc->clear();
    return s;
  }
  return n;
}

void PendingWrites::Stat(std::span<const ChunkKey> keys, std::vector<int>& where,
                         std::vector<uint64_t>& bytes, std::vector<NamespaceId>& ns) {
  absl::MutexLock lock(&mu_);
  absl::flat_hash_map<ChunkKey, const PendingWrite*> carrying;
  if (inflight_ != nullptr && !inflight_cancelled_ && !inflight_->record.empty()) {
    carrying[inflight_->key] = inflight_.get();
  }
  for (const WritePtr& w : queue_) {
    if (!w->record.empty()) carrying[w->key] = w.get();
  }
  if (carrying.empty()) return;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (where[i] >= 0) continue;
    auto it = carrying.find(keys[i]);
    if (it == carrying.end()) continue;
    const PendingWrite& w = *it->second;
    where[i] = static_cast<int>(w.first_tier);
    bytes[i] = w.record.size;
    if (!w.submitted || w.finished) {
      absl::StatusOr<ChunkHeader> h = DecodeChunkHeader(w.record.span());
      if (h.ok()) ns[i] = h->ns;
    }
  }
}

void PendingWrites::Cancel(const ChunkKey& key) {
  std::vector<WritePtr> cancelled;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = queue_.begin(); it != queue_.end();) {
      if ((*it)->key == key) {
        ForgetLocked(**it);
        cancelled.push_back(std::move(*it));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    if (in_progress_ && inflight_key_ == key) {
      inflight_cancelled_ = true;
      // Wait for it to land, so the caller's erase that follows removes every copy.
      struct Args {
        PendingWrites* self;
        ChunkKey key;
      } args{this, key};
      mu_.Await(absl::Condition(
          +[](Args* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return !a->self->in_progress_ || !(a->self->inflight_key_ == a->key);
          },
          &args));
    }
  }
  for (const WritePtr& w : cancelled) {
    if (w->done) w->done(absl::CancelledError("erased before it was written"));
  }
}

void PendingWrites::Flush() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](PendingWrites* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
        return (self->queue_.empty() && !self->in_progress_) || !self->healthy_;
      },
      this));
}

bool PendingWrites::healthy() const {
  absl::MutexLock lock(&mu_);
  return healthy_;
}

void PendingWrites::FillStats(TieredStoreStats& s) const {
  absl::MutexLock lock(&mu_);
  s.demotions_queued = counters_.demotions_queued;
  s.demotions_dropped = counters_.demotions_dropped;
  s.demotions_skipped = counters_.demotions_skipped;
  s.writebacks = counters_.writebacks;
  s.writeback_errors = counters_.writeback_errors;
  s.writebacks_skipped = counters_.writebacks_skipped;
  s.writes_dropped = counters_.writes_dropped;
  s.writes_submitted = counters_.writes_submitted;
  s.writes_failed = counters_.writes_failed;
  s.pending_write_bytes = pending_bytes_;
  s.held_write_bytes = held_bytes_;
}

// ---------------------------------------------------------------- the writer

PendingWrites::WritePtr PendingWrites::Next(Clock& clock, Clock::TimePoint deadline,
                                            bool* stopped) {
  absl::MutexLock lock(&mu_);
  while (queue_.empty() && !stop_) {
    if (clock.WaitUntil(cv_, mu_, deadline)) break;
  }
  if (queue_.empty()) {
    *stopped = stop_;
    return nullptr;
  }
  // The write stays findable (Find/Stat) as inflight_ until it lands.
  WritePtr write = std::move(queue_.front());
  queue_.pop_front();
  in_progress_ = true;
  inflight_key_ = write->key;
  inflight_cancelled_ = false;
  inflight_ = write;
  return write;
}

void PendingWrites::MarkFinished(PendingWrite& write) {
  absl::MutexLock lock(&mu_);
  write.finished = true;
}

bool PendingWrites::Written(const PendingWrite& write, const absl::Status& outcome, uint64_t ok,
                            uint64_t failed, uint64_t gone) {
  absl::MutexLock lock(&mu_);
  counters_.writebacks += ok;
  counters_.writeback_errors += failed;
  counters_.writebacks_skipped += gone;
  if (write.submitted && !outcome.ok()) ++counters_.writes_failed;
  return inflight_cancelled_;
}

void PendingWrites::Landed(const WritePtr& write) {
  absl::MutexLock lock(&mu_);
  ForgetLocked(*write);
  inflight_.reset();
  // No reader holds it (readers take their reference under this lock): reuse its buffer
  // (the pool's lock is a leaf), before Flush can see the write finished.
  if (write->submitted && write.use_count() == 1) pool_->Recycle(std::move(write->record));
  in_progress_ = false;
}

void PendingWrites::Stop() {
  absl::MutexLock lock(&mu_);
  stop_ = true;
  cv_.SignalAll();
}

std::vector<PendingWrites::WritePtr> PendingWrites::MarkDead() {
  std::vector<WritePtr> submitted;
  absl::MutexLock lock(&mu_);
  healthy_ = false;
  in_progress_ = false;
  if (inflight_ != nullptr) ForgetLocked(*inflight_);
  inflight_.reset();
  // Async records exist nowhere else: the caller writes them, one by one, as after
  // Submit's refusal. Other queued writes stay (they are in tier 0).
  for (auto it = queue_.begin(); it != queue_.end();) {
    if ((*it)->submitted) {
      submitted.push_back(std::move(*it));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  return submitted;
}

}  // namespace kvt::internal
