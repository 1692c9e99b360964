// TieredStore's write-back: the queue of write-throughs and demotions, its supervised
// thread, and the lookups that let a queued record be found before it lands.
#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "kvstore/chunk_codec.h"
#include "spdlog/spdlog.h"
#include "tiered_store_impl.h"

namespace kvt {

// Called by tier `t` with its lock held: copy and queue, never block. When the next
// tier is local (not remote) and already holds the key (the usual case with
// write-through), nothing is copied: asking it is an in-memory lookup, and the lock
// order tier t -> tier t+1 -> queue_mu_ has no cycle (no tier calls a higher one).
void TieredStore::Impl::OnEvicted(size_t t, const ChunkKey& key,
                                  std::span<const std::byte> record) {
  Tier& next = *tiers_[t + 1];
  if (!caps_[t + 1].remote && next.Stat(std::span(&key, 1))[0].present) {
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

void TieredStore::Impl::Enqueue(std::span<const std::byte> record, uint64_t record_bytes,
                                const ChunkKey& key, size_t first, size_t last) {
  absl::MutexLock lock(&queue_mu_);
  const uint64_t limit = options_.max_pending_write_bytes;
  if (limit > 0) {
    struct Args {
      Impl* self;
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
  PushLocked(record, record_bytes, key, first, last, /*demotion=*/false);
}

void TieredStore::Impl::PushLocked(std::span<const std::byte> record, uint64_t record_bytes,
                                   const ChunkKey& key, size_t first, size_t last, bool demotion) {
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

absl::StatusOr<uint64_t> TieredStore::Impl::GetFromQueue(const ChunkKey& key,
                                                         std::span<std::byte> out,
                                                         std::vector<std::byte>* alloc,
                                                         size_t* target) {
  absl::MutexLock lock(&queue_mu_);
  // Newest first: a later Put of the same key replaces an earlier one; the item being
  // written is older than every queued one.
  const WriteItem* found = nullptr;
  for (auto it = queue_.rbegin(); it != queue_.rend() && found == nullptr; ++it) {
    if (it->key == key && !it->record.empty()) found = &*it;
  }
  if (found == nullptr && inflight_item_ != nullptr && !inflight_cancelled_ &&
      inflight_item_->key == key && !inflight_item_->record.empty()) {
    found = inflight_item_.get();
  }
  if (found == nullptr) return absl::NotFoundError("not queued");
  const uint64_t n = found->record.size();
  *target = found->first_tier;
  if (alloc != nullptr && out.empty()) {
    alloc->assign(found->record.begin(), found->record.end());
    return n;
  }
  if (out.size() < n) {
    return absl::OutOfRangeError(absl::StrFormat(
        "TieredStore: chunk %s needs a buffer of %d bytes; got %d", key.ToHex(), n, out.size()));
  }
  std::memcpy(out.data(), found->record.data(), n);
  return n;
}

void TieredStore::Impl::StatQueue(std::span<const ChunkKey> keys, std::vector<int>& where,
                                  std::vector<uint64_t>& bytes) {
  absl::MutexLock lock(&queue_mu_);
  absl::flat_hash_map<ChunkKey, const WriteItem*> carrying;
  if (inflight_item_ != nullptr && !inflight_cancelled_ && !inflight_item_->record.empty()) {
    carrying[inflight_item_->key] = inflight_item_.get();
  }
  for (const WriteItem& item : queue_) {
    if (!item.record.empty()) carrying[item.key] = &item;
  }
  if (carrying.empty()) return;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (where[i] >= 0) continue;
    auto it = carrying.find(keys[i]);
    if (it == carrying.end()) continue;
    where[i] = static_cast<int>(it->second->first_tier);
    bytes[i] = it->second->record.size();
  }
}

void TieredStore::Impl::CancelQueued(const ChunkKey& key) {
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

void TieredStore::Impl::Flush() {
  absl::MutexLock lock(&queue_mu_);
  queue_mu_.Await(absl::Condition(
      +[](Impl* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->queue_mu_) {
        return (self->queue_.empty() && !self->in_progress_) || !self->healthy_;
      },
      this));
}

bool TieredStore::Impl::healthy() const {
  absl::MutexLock lock(&queue_mu_);
  return healthy_;
}

void TieredStore::Impl::WorkerMain() {
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

void TieredStore::Impl::MarkDead() {
  absl::MutexLock lock(&queue_mu_);
  healthy_ = false;
  in_progress_ = false;
  inflight_item_.reset();
}

void TieredStore::Impl::WorkerLoop() {
  const absl::Duration reap_period = std::clamp(absl::FromChrono(options_.lease_timeout) / 4,
                                                absl::Milliseconds(1), absl::Milliseconds(100));
  absl::Time next_reap = absl::Now() + reap_period;
  for (;;) {
    std::shared_ptr<WriteItem> item;
    {
      absl::MutexLock lock(&queue_mu_);
      while (queue_.empty() && !stop_) {
        const absl::Duration wait = next_reap - absl::Now();
        if (wait <= absl::ZeroDuration()) break;
        queue_cv_.WaitWithTimeout(&queue_mu_, wait);
      }
      if (queue_.empty() && stop_) return;
      if (!queue_.empty()) {
        // The item stays findable (GetFromQueue/StatQueue) as inflight_item_ until written.
        item = std::make_shared<WriteItem>(std::move(queue_.front()));
        queue_.pop_front();
        in_progress_ = true;
        inflight_key_ = item->key;
        inflight_cancelled_ = false;
        inflight_item_ = item;
      }
    }
    if (item != nullptr) WriteOne(*item);
    if (absl::Now() >= next_reap) {
      ReapExpired();
      next_reap = absl::Now() + reap_period;
    }
  }
}

void TieredStore::Impl::WriteOne(WriteItem& item) {
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
    if (item.demotion && tiers_[t]->Stat(std::span(&item.key, 1))[0].present) continue;
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
  inflight_item_.reset();
}

// Copies the record of `key` from tier 0 into the worker's 4096-aligned scratch buffer
// (aligned so a disk tier can use it for O_DIRECT without a bounce copy).
absl::StatusOr<std::span<const std::byte>> TieredStore::Impl::ReadBackFromTierZero(
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
    absl::StatusOr<uint64_t> n = tiers_[0]->Get(key, std::span(scratch_.get(), scratch_bytes_));
    if (n.ok()) return std::span<const std::byte>(scratch_.get(), *n);
    if (!absl::IsOutOfRange(n.status())) return n.status();
  }
  return absl::UnavailableError("record size kept changing");
}

}  // namespace kvt
