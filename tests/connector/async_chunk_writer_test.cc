// The connector's store writer (connectors/src/async_chunk_writer.h): admission,
// back-pressure, cancel, ordering, buffer reuse, and the sync mode.
#include "async_chunk_writer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "kvstore/chunk_chain.h"

namespace kvt::connector_internal {
namespace {

const KvLayout kLayout{1, 1, 8, DType::kBytes, LayoutKind::kFlashAttnNHD};  // 16 B/token
constexpr uint32_t kTokens = 4;
constexpr uint64_t kRecord = kChunkHeaderBytes + 64;
const NamespaceId kNs{5, 6};

ChunkKey Key(uint64_t i) { return ChunkKey{i + 1, 77}; }

// Records every Put (after verifying it) and can hold Puts at a gate.
struct Sink {
  absl::Mutex mu;
  std::vector<ChunkKey> put ABSL_GUARDED_BY(mu);
  absl::Notification gate;
  bool gated = false;
  AsyncChunkWriter::PutFn fn() {
    return [this](std::span<const std::byte> rec) -> absl::Status {
      if (gated) gate.WaitForNotification();
      auto h = DecodeChunkHeader(rec);
      if (!h.ok()) return h.status();
      absl::MutexLock lock(&mu);
      put.push_back(h->key);
      return absl::OkStatus();
    };
  }
  std::vector<ChunkKey> keys() {
    absl::MutexLock lock(&mu);
    return put;
  }
};

void SubmitChunk(AsyncChunkWriter& w, uint64_t i) {
  RecordBuffer b = w.TakeBuffer(kRecord);
  std::memset(b.data.get() + kChunkHeaderBytes, static_cast<int>(i), 64);
  std::vector<ChunkKey> keys;
  for (uint64_t j = 0; j <= i; ++j) keys.push_back(Key(j));
  w.Submit(ChainHeader(kNs, kLayout, keys, i, kTokens), std::move(b));
}

TEST(AsyncChunkWriterTest, BackPressureDuplicatesCancelAndFifoOrder) {
  ConnectorCounters counters;
  Sink sink;
  sink.gated = true;
  AsyncChunkWriter w({.async = true, .max_pending_bytes = 2 * kRecord, .buffer_pool_bytes = 0},
                     sink.fn(), &counters);
  ASSERT_EQ(w.Admit(Key(0), kRecord), AsyncChunkWriter::Admission::kAdmitted);
  EXPECT_EQ(w.Admit(Key(0), kRecord), AsyncChunkWriter::Admission::kAlreadyPending);
  ASSERT_EQ(w.Admit(Key(1), kRecord), AsyncChunkWriter::Admission::kAdmitted);
  EXPECT_EQ(w.Admit(Key(2), kRecord), AsyncChunkWriter::Admission::kQueueFull);
  EXPECT_EQ(w.pending_bytes(), 2 * kRecord);
  w.Cancel(Key(1), kRecord);
  EXPECT_EQ(w.pending_bytes(), kRecord);
  ASSERT_EQ(w.Admit(Key(1), kRecord), AsyncChunkWriter::Admission::kAdmitted);
  SubmitChunk(w, 0);
  SubmitChunk(w, 1);
  sink.gate.Notify();
  w.Flush();
  EXPECT_EQ(sink.keys(), (std::vector<ChunkKey>{Key(0), Key(1)}));
  EXPECT_EQ(w.pending_bytes(), 0u);
  EXPECT_EQ(counters.store_chunks_put.load(), 2u);
  EXPECT_EQ(counters.store_put_errors.load(), 0u);
  EXPECT_TRUE(w.worker_alive());
}

TEST(AsyncChunkWriterTest, BuffersAreReusedWithinThePoolBound) {
  ConnectorCounters counters;
  Sink sink;
  AsyncChunkWriter w({.async = true, .max_pending_bytes = 0, .buffer_pool_bytes = kRecord},
                     sink.fn(), &counters);
  ASSERT_EQ(w.Admit(Key(0), kRecord), AsyncChunkWriter::Admission::kAdmitted);
  RecordBuffer b = w.TakeBuffer(kRecord);
  const std::byte* first = b.data.get();
  std::vector<ChunkKey> keys{Key(0)};
  w.Submit(ChainHeader(kNs, kLayout, keys, 0, kTokens), std::move(b));
  w.Flush();
  RecordBuffer again = w.TakeBuffer(kRecord);
  EXPECT_EQ(again.data.get(), first);  // came back from the pool
}

TEST(AsyncChunkWriterTest, SyncModePutsOnTheCallersThreadAndCountsErrors) {
  ConnectorCounters counters;
  int calls = 0;
  AsyncChunkWriter w(
      {.async = false, .max_pending_bytes = 1, .buffer_pool_bytes = 0},
      [&](std::span<const std::byte>) {
        ++calls;
        return absl::UnavailableError("tier down");
      },
      &counters);
  // No reservation and no back-pressure when sync.
  ASSERT_EQ(w.Admit(Key(0), kRecord), AsyncChunkWriter::Admission::kAdmitted);
  EXPECT_EQ(w.pending_bytes(), 0u);
  SubmitChunk(w, 0);
  EXPECT_EQ(calls, 1);  // already done when Submit returns
  EXPECT_EQ(counters.store_put_errors.load(), 1u);
  EXPECT_EQ(counters.store_chunks_put.load(), 0u);
}

}  // namespace
}  // namespace kvt::connector_internal
