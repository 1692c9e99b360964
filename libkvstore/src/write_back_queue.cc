// WriteBackQueue: the store's write-back thread and what it writes into the tiers
// (write-throughs, demotions, async writes); the writes wait in its PendingWrites.
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
    : tiers_(tiers),
      caps_(caps),
      options_(std::move(options)),
      pending_(options_.max_pending_write_bytes, options_.pool) {}

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
  pending_.Stop();
  worker_.Join();  // the worker drains the queue before it exits
}

void WriteBackQueue::LogTierError(size_t t, const char* op, const absl::Status& s) const {
  spdlog::warn("TieredStore: tier {} ({}) {} failed: {}", t, caps_[t].name, op, s.ToString());
}

// Called by tier `t` while it evicts (the host tier without its lock, keeping the victim
// alive; another tier may hold its own lock): copy and queue, never block. When the next
// tier is local (not remote) and already holds the key (the usual case with
// write-through), nothing is copied: asking it is an in-memory lookup, and the lock
// order tier t -> tier t+1 -> the PendingWrites' lock has no cycle (no tier calls a
// higher one).
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
      pending_.CountDemotionSkipped();
      continue;
    }
    pending_.AddDemotion(t, std::move(v));
  }
}

void WriteBackQueue::Enqueue(std::span<const std::byte> record, uint64_t record_bytes,
                             const ChunkKey& key, size_t first, size_t last) {
  RecordBuffer copy;
  if (!record.empty()) copy = RecordBuffer::CopyOf(record);
  pending_.Enqueue(std::move(copy), record_bytes, key, first, last);
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
  switch (pending_.Admit(key, bytes, request.limit_bytes)) {
    case PendingWrites::Admission::kAdmitted:
      break;
    case PendingWrites::Admission::kAlreadyQueued:
      return absl::AlreadyExistsError(
          absl::StrFormat("TieredStore::Write: chunk %s is being written already", key.ToHex()));
    case PendingWrites::Admission::kQueueFull:
      return absl::UnavailableError(absl::StrFormat(
          "TieredStore::Write: write-back queue full; chunk %s dropped", key.ToHex()));
  }
  auto write = std::make_shared<PendingWrite>();
  write->record = options_.pool->Take(bytes);
  if (!request.record.empty()) {
    std::memcpy(write->record.data.get(), request.record.data(), bytes);
  } else if (absl::Status s = request.fill(write->record.span().subspan(kChunkHeaderBytes));
             !s.ok()) {
    pending_.CancelAdmission(key, bytes);
    options_.pool->Recycle(std::move(write->record));
    return s;
  } else {
    // The header is encoded (the payload hashed) on the thread, off the engine's.
    write->finish = [header = *request.header](std::span<std::byte> rec) {
      return EncodeChunk(header, rec.subspan(kChunkHeaderBytes), rec);
    };
  }
  write->record_bytes = bytes;
  write->key = key;
  write->first_tier = 0;
  write->last_tier = options_.submit_last_tier;
  write->submitted = true;
  write->done = std::move(request.done);
  write->finished = !write->finish;
  // The admission reserved its bytes and key already. When the thread is gone, it is
  // written here, so nothing submitted is lost.
  if (WritePtr here = pending_.Submit(std::move(write)); here != nullptr) {
    uint64_t ok = 0, failed = 0;
    absl::Status s = WriteSubmitted(*here, &ok, &failed);
    if (here->done) here->done(s);
    pending_.WrittenHere(*here, s, ok, failed);
  }
  return key;
}

void WriteBackQueue::MarkDead() {
  // Submitted records exist nowhere else: written here, one by one, as WriteAsync does
  // after the thread's death. Other queued writes stay (they are in tier 0).
  for (const WritePtr& item : pending_.MarkDead()) {
    uint64_t ok = 0, failed = 0;
    absl::Status s;
    try {
      s = WriteSubmitted(*item, &ok, &failed);
    } catch (...) {
      s = absl::InternalError("write-back thread died while writing it");
    }
    if (item->done) item->done(s);
    pending_.Forget(*item);
  }
}

void WriteBackQueue::WorkerLoop(Clock::TimePoint first_reap) {
  Clock& clock = ClockOrSystem(options_.clock);
  Clock::TimePoint next_reap = first_reap;
  for (;;) {
    worker_.Beat();
    bool stopped = false;
    WritePtr write = pending_.Next(clock, next_reap, &stopped);
    if (stopped) return;
    if (write != nullptr) WriteOne(write);
    if (clock.Now() >= next_reap) {
      if (options_.on_period) options_.on_period();
      next_reap = clock.Now() + options_.period;
    }
  }
}

absl::Status WriteBackQueue::WriteSubmitted(PendingWrite& item, uint64_t* ok, uint64_t* failed) {
  if (item.finish && !item.finished) {
    absl::Status s = item.finish(item.record.span());
    if (!s.ok()) return s;
    pending_.MarkFinished(item);
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

void WriteBackQueue::WriteOne(const WritePtr& item_ptr) {
  PendingWrite& item = *item_ptr;
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
  const bool cancelled = pending_.Written(item, outcome, ok, failed, gone);
  // Erased while we wrote it: the Erase waiting in Cancel erases every tier next.
  if (item.submitted && item.done) {
    item.done(cancelled && outcome.ok() ? absl::CancelledError("erased while it was written")
                                        : outcome);
  }
  pending_.Landed(item_ptr);
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
