#include "async_chunk_writer.h"

#include <sys/mman.h>

#include <algorithm>
#include <new>
#include <utility>

#include "spdlog/spdlog.h"

namespace kvt::connector_internal {

RecordBuffer RecordBuffer::Make(size_t n) {
  constexpr size_t kHuge = 2u << 20;
  void* p = nullptr;
  if (n >= kHuge) {
    p = std::aligned_alloc(kHuge, (n + kHuge - 1) / kHuge * kHuge);
    if (p != nullptr) madvise(p, (n + kHuge - 1) / kHuge * kHuge, MADV_HUGEPAGE);
  } else {
    p = std::malloc(std::max<size_t>(n, 1));
  }
  if (p == nullptr) throw std::bad_alloc();
  return RecordBuffer{std::unique_ptr<std::byte[], FreeDeleter>(static_cast<std::byte*>(p)), n};
}

AsyncChunkWriter::AsyncChunkWriter(const Options& options, PutFn put, ConnectorCounters* counters)
    : options_(options), put_(std::move(put)), counters_(counters) {
  if (options_.async) {
    {
      absl::MutexLock lock(&mu_);
      worker_running_ = true;
    }
    worker_ = std::thread([this] { Loop(); });
  }
}

AsyncChunkWriter::~AsyncChunkWriter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (worker_.joinable()) worker_.join();  // drains the queue first
}

AsyncChunkWriter::Admission AsyncChunkWriter::Admit(const ChunkKey& key, uint64_t record_bytes) {
  absl::MutexLock lock(&mu_);
  if (pending_keys_.contains(key)) return Admission::kAlreadyPending;
  if (options_.async && options_.max_pending_bytes != 0 &&
      pending_bytes_ + record_bytes > options_.max_pending_bytes) {
    return Admission::kQueueFull;
  }
  if (options_.async) {
    // Reserve the bytes and the key now so concurrent stores see them.
    pending_bytes_ += record_bytes;
    pending_keys_.insert(key);
  }
  return Admission::kAdmitted;
}

void AsyncChunkWriter::Cancel(const ChunkKey& key, uint64_t record_bytes) {
  if (!options_.async) return;
  absl::MutexLock lock(&mu_);
  pending_bytes_ -= record_bytes;
  pending_keys_.erase(key);
}

RecordBuffer AsyncChunkWriter::TakeBuffer(uint64_t bytes) {
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = pool_.size(); i-- > 0;) {
      if (pool_[i].size == bytes) {
        RecordBuffer b = std::move(pool_[i]);
        pool_.erase(pool_.begin() + static_cast<std::ptrdiff_t>(i));
        pool_bytes_ -= bytes;
        return b;
      }
    }
  }
  return RecordBuffer::Make(bytes);
}

void AsyncChunkWriter::Submit(const ChunkHeader& header, RecordBuffer record) {
  Job job{header, std::move(record)};
  if (options_.async) {
    absl::MutexLock lock(&mu_);
    if (worker_running_) {
      queue_.push_back(std::move(job));
      return;
    }
  }
  Put(job);
  if (options_.async) {  // the worker is gone: the reservation is released here
    Cancel(job.header.key, job.record.size);
  }
}

void AsyncChunkWriter::Flush() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queue_.empty() && in_flight_ == 0; };
  mu_.Await(absl::Condition(&idle));
}

uint64_t AsyncChunkWriter::pending_bytes() const {
  absl::MutexLock lock(&mu_);
  return pending_bytes_;
}

bool AsyncChunkWriter::worker_alive() const {
  if (!options_.async) return true;
  absl::MutexLock lock(&mu_);
  return worker_running_ || stopping_;
}

void AsyncChunkWriter::Put(Job& job) {
  std::span<std::byte> rec = job.record.span();
  absl::Status s = EncodeChunk(job.header, rec.subspan(kChunkHeaderBytes), rec);
  if (s.ok()) s = put_(rec);
  if (s.ok()) {
    ConnectorCounters::Bump(counters_->store_chunks_put);
  } else {
    ConnectorCounters::Bump(counters_->store_put_errors);
    spdlog::warn("kvt connector: storing chunk {} failed: {}", job.header.key.ToHex(),
                 s.ToString());
  }
}

void AsyncChunkWriter::Loop() {
  for (;;) {
    Job job;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]()
                       ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !queue_.empty() || stopping_; };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) {  // stopping and drained
        worker_running_ = false;
        return;
      }
      job = std::move(queue_.front());
      queue_.pop_front();
      ++in_flight_;
    }
    Put(job);
    const ChunkKey key = job.header.key;
    const uint64_t bytes = job.record.size;
    absl::MutexLock lock(&mu_);
    if (pool_bytes_ + bytes <= options_.buffer_pool_bytes) {
      pool_bytes_ += bytes;
      pool_.push_back(std::move(job.record));
    }
    --in_flight_;
    pending_bytes_ -= bytes;
    pending_keys_.erase(key);
  }
}

}  // namespace kvt::connector_internal
