// WriteBackQueue: the store's one write queue, its admission by bytes and its
// supervised thread, and the lookups that let a queued record be found before it
// lands.
#include "write_back_queue.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <new>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "kvstore/chunk_codec.h"
#include "spdlog/spdlog.h"

namespace kvt::internal {

WriteBackQueue::WriteBackQueue(std::span<const std::unique_ptr<Tier>> tiers,
                               std::span<const TierCaps> caps, WriteBackOptions options)
    : tiers_(tiers), caps_(caps), options_(std::move(options)) {}

WriteBackQueue::~WriteBackQueue() { Stop(); }

void WriteBackQueue::Start() {
  worker_.Start({.name = "write-back",
                 .health = options_.health,
                 .on_failure = [this](const std::string&) { MarkDead(); }},
                // The first reap is due a period after Start, not after the thread gets
                // to run (on a ManualClock that may be after the clock moved).
                [this, first_reap = ClockOrSystem(options_.clock).Now() + options_.period] {
                  WorkerLoop(first_reap);
                });
}

void WriteBackQueue::Stop() {
  {
    absl::MutexLock lock(&queue_mu_);
    stop_ = true;
    queue_cv_.SignalAll();
  }
  worker_.Join();  // the worker drains the queue before it exits
}

void WriteBackQueue::FillStats(TieredStoreStats& s) const {
  absl::MutexLock lock(&queue_mu_);
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

void WriteBackQueue::LogTierError(size_t t, const char* op, const absl::Status& s) const {
  spdlog::warn("TieredStore: tier {} ({}) {} failed: {}", t, caps_[t].name, op, s.ToString());
}

// Called by tier `t` while it evicts (the host tier without its lock, keeping the victim
// alive; another tier may hold its own lock): copy and queue, never block. When the next
// tier is local (not remote) and already holds the key (the usual case with
// write-through), nothing is copied: asking it is an in-memory lookup, and the lock
// order tier t -> tier t+1 -> queue_mu_ has no cycle (no tier calls a higher one).
PutContext WriteBackQueue::ContextFor(size_t t, AdmitReason reason) const {
  // Victims are wanted where a tier below may lack them: tier 0's (its write-throughs
  // are read back from it later, so a victim may not be below yet), and any tier's whose
  // next tier the write-through does not cover. A tier whose next tier every Put is
  // written through to returns none (the disk tier then reads none back).
  const bool keep = t + 1 < tiers_.size() && (t == 0 || t + 1 > options_.submit_last_tier);
  return PutContext{.reason = reason, .keep_victims = keep};
}

void WriteBackQueue::Demote(size_t t, std::vector<Victim> victims) {
  for (Victim& v : victims) {
    Tier& next = *tiers_[t + 1];
    if (!caps_[t + 1].remote && next.Stat(std::span(&v.key, 1))[0].present) {
      absl::MutexLock lock(&queue_mu_);
      ++counters_.demotions_skipped;
      continue;
    }
    absl::MutexLock lock(&queue_mu_);
    if (!healthy_ || stop_) {
      ++counters_.writes_dropped;
      continue;
    }
    // The queue's bytes stay within the bound: a demotion past it is dropped, not queued
    // (the record is then in no tier, a clean miss).
    const uint64_t size = v.record.size;
    const uint64_t limit = options_.max_pending_write_bytes;
    if (limit > 0 && held_bytes_ + size > limit) {
      ++counters_.demotions_dropped;
      continue;
    }
    ++counters_.demotions_queued;
    if (t == 0) {
      // A write-through of the key still waiting to read it back from tier 0 carries
      // the bytes instead (to every tier it names), so none of them misses it.
      auto it = std::find_if(queue_.begin(), queue_.end(), [&](const ItemPtr& item) {
        return item->key == v.key && item->record.empty() && !item->submitted && !item->demotion &&
               item->record_bytes == size;
      });
      if (it != queue_.end()) {
        held_bytes_ += size;
        (*it)->record = std::move(v.record);
        continue;
      }
      // That write-through is in flight: it may already have missed tier 0, so the
      // demotion goes to every tier it names (a demotion skips a tier holding the key).
      if (inflight_item_ != nullptr && inflight_item_->key == v.key &&
          inflight_item_->record.empty() && !inflight_item_->submitted &&
          !inflight_item_->demotion) {
        PushLocked(std::move(v.record), size, v.key, t + 1,
                   std::max(t + 1, inflight_item_->last_tier), /*demotion=*/true);
        continue;
      }
    }
    // The victim's own buffer is queued: no copy.
    PushLocked(std::move(v.record), size, v.key, t + 1, t + 1, /*demotion=*/true);
  }
}

void WriteBackQueue::Enqueue(std::span<const std::byte> record, uint64_t record_bytes,
                             const ChunkKey& key, size_t first, size_t last) {
  RecordBuffer copy;
  if (!record.empty()) copy = RecordBuffer::CopyOf(record);
  absl::MutexLock lock(&queue_mu_);
  const uint64_t limit = options_.max_pending_write_bytes;
  if (limit > 0) {
    struct Args {
      WriteBackQueue* self;
      uint64_t size;
      uint64_t limit;
    } args{this, record_bytes, limit};
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
  PushLocked(std::move(copy), record_bytes, key, first, last, /*demotion=*/false);
}

void WriteBackQueue::PushLocked(RecordBuffer record, uint64_t record_bytes, const ChunkKey& key,
                                size_t first, size_t last, bool demotion) {
  auto item = std::make_shared<WriteItem>();
  item->record = std::move(record);
  item->record_bytes = record_bytes;
  item->key = key;
  item->first_tier = first;
  item->last_tier = last;
  item->demotion = demotion;
  pending_bytes_ += record_bytes;
  held_bytes_ += item->record.size;
  queue_.push_back(std::move(item));
  queue_cv_.Signal();
}

WriteBackQueue::Admission WriteBackQueue::Admit(const ChunkKey& key, uint64_t record_bytes,
                                                uint64_t limit_bytes) {
  absl::MutexLock lock(&queue_mu_);
  if (write_keys_.contains(key)) return Admission::kAlreadyQueued;
  uint64_t limit = options_.max_pending_write_bytes;
  if (limit_bytes != 0 && (limit == 0 || limit_bytes < limit)) limit = limit_bytes;
  if (limit != 0 && pending_bytes_ + record_bytes > limit) return Admission::kQueueFull;
  pending_bytes_ += record_bytes;
  held_bytes_ += record_bytes;
  ++write_keys_[key];
  return Admission::kAdmitted;
}

void WriteBackQueue::CancelAdmission(const ChunkKey& key, uint64_t record_bytes) {
  WriteItem admitted;
  admitted.key = key;
  admitted.record_bytes = record_bytes;
  admitted.submitted = true;
  absl::MutexLock lock(&queue_mu_);
  held_bytes_ -= record_bytes;  // ForgetLocked subtracts record.size (empty here)
  ForgetLocked(admitted);
}

void WriteBackQueue::ForgetLocked(const WriteItem& item) {
  pending_bytes_ -= item.record_bytes;
  held_bytes_ -= item.record.size;
  if (item.submitted) {
    auto k = write_keys_.find(item.key);
    if (k != write_keys_.end() && --k->second == 0) write_keys_.erase(k);
  }
}

absl::StatusOr<ChunkKey> WriteBackQueue::WriteAsync(WriteRequest request) {
  ChunkKey key;
  uint64_t bytes = 0;
  if (!request.record.empty()) {
    absl::StatusOr<ChunkHeader> h = DecodeChunkHeader(request.record);
    if (!h.ok()) return h.status();
    if (request.record.size() != h->record_bytes()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("TieredStore::Write: record of key %s is %d bytes; its header says %d",
                          h->key.ToHex(), request.record.size(), h->record_bytes()));
    }
    key = h->key;
    bytes = request.record.size();
  } else {
    if (!request.header) {
      return absl::InvalidArgumentError(
          "TieredStore::Write: an async fill needs its header (the key is admitted first)");
    }
    if (request.record_bytes != request.header->record_bytes()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "TieredStore::Write: record_bytes = %d; header of key %s says %d", request.record_bytes,
          request.header->key.ToHex(), request.header->record_bytes()));
    }
    key = request.header->key;
    bytes = request.record_bytes;
  }
  switch (Admit(key, bytes, request.limit_bytes)) {
    case Admission::kAdmitted:
      break;
    case Admission::kAlreadyQueued:
      return absl::AlreadyExistsError(
          absl::StrFormat("TieredStore::Write: chunk %s is being written already", key.ToHex()));
    case Admission::kQueueFull:
      return absl::UnavailableError(absl::StrFormat(
          "TieredStore::Write: write-back queue full; chunk %s dropped", key.ToHex()));
  }
  auto item = std::make_shared<WriteItem>();
  item->record = options_.pool->Take(bytes);
  if (!request.record.empty()) {
    std::memcpy(item->record.data.get(), request.record.data(), bytes);
  } else if (absl::Status s = request.fill(item->record.span().subspan(kChunkHeaderBytes));
             !s.ok()) {
    CancelAdmission(key, bytes);
    options_.pool->Recycle(std::move(item->record));
    return s;
  } else {
    // The header is encoded (the payload hashed) on the thread, off the engine's.
    item->finish = [header = *request.header](std::span<std::byte> rec) {
      return EncodeChunk(header, rec.subspan(kChunkHeaderBytes), rec);
    };
  }
  item->record_bytes = bytes;
  item->key = key;
  item->first_tier = 0;
  item->last_tier = options_.submit_last_tier;
  item->submitted = true;
  item->done = std::move(request.done);
  item->finished = !item->finish;
  Submit(std::move(item));
  return key;
}

void WriteBackQueue::Submit(ItemPtr item) {
  {
    absl::MutexLock lock(&queue_mu_);
    ++counters_.writes_submitted;
    if (healthy_ && !stop_) {  // the admission reserved its bytes and key already
      queue_.push_back(std::move(item));
      queue_cv_.Signal();
      return;
    }
    // The thread is gone: write it here (below), so nothing submitted is lost.
  }
  uint64_t ok = 0, failed = 0;
  absl::Status s = WriteSubmitted(*item, &ok, &failed);
  if (item->done) item->done(s);
  absl::MutexLock lock(&queue_mu_);
  if (!s.ok()) ++counters_.writes_failed;
  counters_.writebacks += ok;
  counters_.writeback_errors += failed;
  ForgetLocked(*item);
}

absl::Status WriteBackQueue::CopyQueued(const WriteItem& item, bool finished,
                                        std::span<std::byte> out) {
  const uint64_t n = item.record.size;
  if (!item.submitted || finished) {
    std::memcpy(out.data(), item.record.data.get(), n);
    return absl::OkStatus();
  }
  // Not finished yet: copy the payload (immutable since it was queued) and finish the copy.
  if (n < kChunkHeaderBytes) return absl::NotFoundError("not queued");
  std::memcpy(out.data() + kChunkHeaderBytes, item.record.data.get() + kChunkHeaderBytes,
              n - kChunkHeaderBytes);
  absl::Status s = item.finish(out.first(n));
  if (!s.ok()) return absl::NotFoundError(absl::StrCat("queued record unusable: ", s.message()));
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> WriteBackQueue::Find(const ChunkKey& key, std::span<std::byte> out,
                                              std::vector<std::byte>* alloc, size_t* target) {
  ItemPtr found;
  bool finished = false;
  {
    absl::MutexLock lock(&queue_mu_);
    // Newest first: a later Put of the same key replaces an earlier one; the item being
    // written is older than every queued one.
    for (auto it = queue_.rbegin(); it != queue_.rend() && found == nullptr; ++it) {
      if ((*it)->key == key && !(*it)->record.empty()) found = *it;
    }
    if (found == nullptr && inflight_item_ != nullptr && !inflight_cancelled_ &&
        inflight_item_->key == key && !inflight_item_->record.empty()) {
      found = inflight_item_;
    }
    if (found == nullptr) return absl::NotFoundError("not queued");
    finished = found->finished;
  }
  // Copied outside the lock: `found` keeps the item (and its buffer) alive.
  const uint64_t n = found->record.size;
  *target = found->first_tier;
  if (alloc != nullptr && out.empty()) {
    alloc->resize(n);
    out = std::span<std::byte>(*alloc);
  } else if (out.size() < n) {
    return absl::OutOfRangeError(absl::StrFormat(
        "TieredStore: chunk %s needs a buffer of %d bytes; got %d", key.ToHex(), n, out.size()));
  }
  if (absl::Status s = CopyQueued(*found, finished, out); !s.ok()) {
    if (alloc != nullptr) alloc->clear();
    return s;
  }
  return n;
}

void WriteBackQueue::Stat(std::span<const ChunkKey> keys, std::vector<int>& where,
                          std::vector<uint64_t>& bytes, std::vector<NamespaceId>& ns) {
  absl::MutexLock lock(&queue_mu_);
  absl::flat_hash_map<ChunkKey, const WriteItem*> carrying;
  if (inflight_item_ != nullptr && !inflight_cancelled_ && !inflight_item_->record.empty()) {
    carrying[inflight_item_->key] = inflight_item_.get();
  }
  for (const ItemPtr& item : queue_) {
    if (!item->record.empty()) carrying[item->key] = item.get();
  }
  if (carrying.empty()) return;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (where[i] >= 0) continue;
    auto it = carrying.find(keys[i]);
    if (it == carrying.end()) continue;
    const WriteItem& item = *it->second;
    where[i] = static_cast<int>(item.first_tier);
    bytes[i] = item.record.size;
    if (!item.submitted || item.finished) {
      absl::StatusOr<ChunkHeader> h = DecodeChunkHeader(item.record.span());
      if (h.ok()) ns[i] = h->ns;
    }
  }
}

void WriteBackQueue::Cancel(const ChunkKey& key) {
  std::vector<ItemPtr> cancelled;
  {
    absl::MutexLock lock(&queue_mu_);
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
        WriteBackQueue* self;
        ChunkKey key;
      } args{this, key};
      queue_mu_.Await(absl::Condition(
          +[](Args* a) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return !a->self->in_progress_ || !(a->self->inflight_key_ == a->key);
          },
          &args));
    }
  }
  for (const ItemPtr& item : cancelled) {
    if (item->done) item->done(absl::CancelledError("erased before it was written"));
  }
}

void WriteBackQueue::Flush() {
  absl::MutexLock lock(&queue_mu_);
  queue_mu_.Await(absl::Condition(
      +[](WriteBackQueue* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->queue_mu_) {
        return (self->queue_.empty() && !self->in_progress_) || !self->healthy_;
      },
      this));
}

bool WriteBackQueue::healthy() const {
  absl::MutexLock lock(&queue_mu_);
  return healthy_;
}

void WriteBackQueue::MarkDead() {
  std::vector<ItemPtr> submitted;
  {
    absl::MutexLock lock(&queue_mu_);
    healthy_ = false;
    in_progress_ = false;
    if (inflight_item_ != nullptr) ForgetLocked(*inflight_item_);
    inflight_item_.reset();
    // Submitted records exist nowhere else: write them here, one by one, as Submit
    // does after the thread's death. Other queued items stay (they are in tier 0).
    for (auto it = queue_.begin(); it != queue_.end();) {
      if ((*it)->submitted) {
        submitted.push_back(std::move(*it));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const ItemPtr& item : submitted) {
    uint64_t ok = 0, failed = 0;
    absl::Status s;
    try {
      s = WriteSubmitted(*item, &ok, &failed);
    } catch (...) {
      s = absl::InternalError("write-back thread died while writing it");
    }
    if (item->done) item->done(s);
    absl::MutexLock lock(&queue_mu_);
    ForgetLocked(*item);
  }
}

void WriteBackQueue::WorkerLoop(Clock::TimePoint first_reap) {
  Clock& clock = ClockOrSystem(options_.clock);
  Clock::TimePoint next_reap = first_reap;
  for (;;) {
    worker_.Beat();
    ItemPtr item;
    {
      absl::MutexLock lock(&queue_mu_);
      while (queue_.empty() && !stop_) {
        if (clock.WaitUntil(queue_cv_, queue_mu_, next_reap)) break;
      }
      if (queue_.empty() && stop_) return;
      if (!queue_.empty()) {
        // The item stays findable (GetFromQueue/StatQueue) as inflight_item_ until written.
        item = std::move(queue_.front());
        queue_.pop_front();
        in_progress_ = true;
        inflight_key_ = item->key;
        inflight_cancelled_ = false;
        inflight_item_ = item;
      }
    }
    if (item != nullptr) WriteOne(item);
    if (clock.Now() >= next_reap) {
      if (options_.on_period) options_.on_period();
      next_reap = clock.Now() + options_.period;
    }
  }
}

absl::Status WriteBackQueue::WriteSubmitted(WriteItem& item, uint64_t* ok, uint64_t* failed) {
  if (item.finish && !item.finished) {
    absl::Status s = item.finish(item.record.span());
    if (!s.ok()) return s;
    absl::MutexLock lock(&queue_mu_);
    item.finished = true;
  }
  std::span<const std::byte> record = item.record.span();
  absl::StatusOr<PutResult> put0 = tiers_[0]->Put(record, ContextFor(0, AdmitReason::kPut));
  absl::Status top = put0.status();
  if (put0.ok()) Demote(0, std::move(put0->victims));
  if (!top.ok() && (!absl::IsResourceExhausted(top) || tiers_.size() == 1)) {
    LogTierError(0, "Put", top);
    return top;
  }
  // Tier 0 took it, or (too large / all pinned) the next tier takes it instead.
  size_t last = item.last_tier;
  if (!top.ok() && last == 0) last = 1;
  absl::Status first_below = top;
  for (size_t t = 1; t <= last; ++t) {
    absl::StatusOr<PutResult> put = tiers_[t]->Put(record, ContextFor(t, AdmitReason::kPut));
    absl::Status s = put.status();
    if (put.ok()) Demote(t, std::move(put->victims));
    if (s.ok()) {
      ++*ok;
      if (!first_below.ok()) first_below = absl::OkStatus();
    } else {
      ++*failed;
      LogTierError(t, "write-back Put", s);
      if (!top.ok() && t == 1) first_below = s;
    }
  }
  return top.ok() ? absl::OkStatus() : first_below;
}

void WriteBackQueue::WriteOne(const ItemPtr& item_ptr) {
  WriteItem& item = *item_ptr;
  uint64_t ok = 0, failed = 0, gone = 0;
  absl::Status outcome;
  if (item.submitted) {
    outcome = WriteSubmitted(item, &ok, &failed);
  } else {
    std::span<const std::byte> record = item.record.span();
    if (record.empty()) {
      absl::StatusOr<std::span<const std::byte>> r = ReadBackFromTierZero(item.key);
      if (r.ok()) {
        record = *r;
      } else {
        ++gone;  // evicted (a demotion carries it) or erased since the Put
      }
    }
    for (size_t t = item.first_tier; !record.empty() && t <= item.last_tier; ++t) {
      if (item.demotion && tiers_[t]->Stat(std::span(&item.key, 1))[0].present) continue;
      absl::StatusOr<PutResult> put = tiers_[t]->Put(
          record, ContextFor(t, item.demotion ? AdmitReason::kDemotion : AdmitReason::kPut));
      absl::Status s = put.status();
      if (put.ok()) Demote(t, std::move(put->victims));
      if (s.ok()) {
        ++ok;
      } else {
        ++failed;
        LogTierError(t, "write-back Put", s);
      }
    }
  }
  bool cancelled;
  {
    absl::MutexLock lock(&queue_mu_);
    cancelled = inflight_cancelled_;
    counters_.writebacks += ok;
    counters_.writeback_errors += failed;
    counters_.writebacks_skipped += gone;
    if (item.submitted && !outcome.ok()) ++counters_.writes_failed;
  }
  // Erased while we wrote it: the Erase waiting in CancelQueued erases every tier next.
  if (item.submitted && item.done) {
    item.done(cancelled && outcome.ok() ? absl::CancelledError("erased while it was written")
                                        : outcome);
  }
  absl::MutexLock lock(&queue_mu_);
  ForgetLocked(item);
  inflight_item_.reset();
  // No reader holds it (readers take their reference under this lock): reuse its buffer
  // (the pool's lock is a leaf), before Flush can see the write finished.
  if (item.submitted && item_ptr.use_count() == 1) options_.pool->Recycle(std::move(item.record));
  in_progress_ = false;
}

// Copies the record of `key` from tier 0 into the worker's 4096-aligned scratch buffer
// (aligned so a disk tier can use it for O_DIRECT without a bounce copy).
absl::StatusOr<std::span<const std::byte>> WriteBackQueue::ReadBackFromTierZero(
    const ChunkKey& key) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    std::vector<ChunkStat> st = tiers_[0]->Stat(std::span(&key, 1));
    if (st.empty() || !st[0].present) return absl::NotFoundError("left tier 0");
    const uint64_t size = st[0].record_bytes;
    if (size > scratch_bytes_) {
      const uint64_t bytes = (size + 4095) / 4096 * 4096;
      scratch_.reset(static_cast<std::byte*>(std::aligned_alloc(4096, bytes)));
      if (scratch_ == nullptr) {
        scratch_bytes_ = 0;
        return absl::ResourceExhaustedError("write-back scratch buffer");
      }
      scratch_bytes_ = bytes;
    }
    absl::StatusOr<uint64_t> n =
        tiers_[0]->CopyForWriteBack(key, std::span(scratch_.get(), scratch_bytes_));
    if (n.ok()) return std::span<const std::byte>(scratch_.get(), *n);
    if (!absl::IsOutOfRange(n.status())) return n.status();
  }
  return absl::UnavailableError("record size kept changing");
}

}  // namespace kvt::internal
