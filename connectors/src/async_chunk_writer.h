// Private to kvt_connector: the one writer of the connector's stores. A FIFO of chunk
// records, a pool of reusable record buffers and back-pressure by bytes, drained by one
// supervised background thread (or, when not async, put on the caller's thread).
#ifndef CONNECTORS_SRC_ASYNC_CHUNK_WRITER_H_
#define CONNECTORS_SRC_ASYNC_CHUNK_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <thread>
#include <unordered_set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "connector_counters.h"
#include "kvstore/chunk_codec.h"

namespace kvt::connector_internal {

// Uninitialised byte buffer (a chunk is tens of MiB; zero-filling it would double the
// time Store holds the caller). Large buffers are 2 MiB-aligned and advised as huge
// pages, so first touch costs a few faults per chunk instead of one per 4 KiB page.
struct RecordBuffer {
  struct FreeDeleter {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte[], FreeDeleter> data;
  size_t size = 0;
  // Throws std::bad_alloc when memory is exhausted (as operator new does).
  static RecordBuffer Make(size_t n);
  std::span<std::byte> span() { return {data.get(), size}; }
};

// Thread-safe.
class AsyncChunkWriter {
 public:
  struct Options {
    // Put on a background thread (true) or on the caller's thread in Submit (false).
    bool async = true;
    // Back-pressure: Admit refuses a record that would take the queued bytes past
    // this (async only). 0 = unbounded.
    uint64_t max_pending_bytes = 0;
    // Record buffers kept for reuse after their Put, bytes.
    uint64_t buffer_pool_bytes = 0;
  };
  // Stores one encoded record (TieredStore::Put).
  using PutFn = std::function<absl::Status(std::span<const std::byte> record)>;

  // `counters` must outlive the writer (store_chunks_put / store_put_errors).
  AsyncChunkWriter(const Options& options, PutFn put, ConnectorCounters* counters);
  // Drains the queue, then stops the thread.
  ~AsyncChunkWriter();
  AsyncChunkWriter(const AsyncChunkWriter&) = delete;
  AsyncChunkWriter& operator=(const AsyncChunkWriter&) = delete;

  enum class Admission {
    kAdmitted,        // go ahead: fill a buffer and Submit (or Cancel)
    kAlreadyPending,  // the key is queued already; skip it
    kQueueFull,       // over max_pending_bytes; drop it (and the chunks after it)
  };
  // Reserves `record_bytes` and the key for a record about to be filled (async); in
  // sync mode only checks for a queued duplicate.
  Admission Admit(const ChunkKey& key, uint64_t record_bytes);
  // Undoes an admitted reservation whose record will not be submitted.
  void Cancel(const ChunkKey& key, uint64_t record_bytes);
  // A pooled buffer of exactly `bytes` (already faulted in) or a new one.
  RecordBuffer TakeBuffer(uint64_t bytes);
  // Encodes the header into record[0, kChunkHeaderBytes) over the payload the caller
  // wrote after it, then puts it (sync) or queues it (async). Failures are counted in
  // store_put_errors and logged; nothing is returned to the engine.
  // REQUIRES: Admit(header.key, record.size) == kAdmitted.
  void Submit(const ChunkHeader& header, RecordBuffer record);
  // Blocks until every submitted record has been put (or has failed).
  void Flush();

  uint64_t pending_bytes() const;
  // False once the background thread has ended outside the destructor (Submit then
  // puts on the caller's thread, so nothing queued is lost). Always true when sync.
  bool worker_alive() const;

 private:
  struct Job {
    ChunkHeader header;
    RecordBuffer record;
  };
  void Put(Job& job);
  void Loop();

  const Options options_;
  const PutFn put_;
  ConnectorCounters* const counters_;

  mutable absl::Mutex mu_;
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  std::unordered_set<ChunkKey> pending_keys_ ABSL_GUARDED_BY(mu_);
  uint64_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<RecordBuffer> pool_ ABSL_GUARDED_BY(mu_);
  uint64_t pool_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool worker_running_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;
};

}  // namespace kvt::connector_internal

#endif  // CONNECTORS_SRC_ASYNC_CHUNK_WRITER_H_
