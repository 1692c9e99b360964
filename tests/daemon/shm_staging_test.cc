// The shm Put's copy-then-check piece: the one-pass copy and payload hash (the copy goes
// into the daemon's reused record buffers, record_buffers.h, like a gRPC Put's record).
#include <gtest/gtest.h>
#include <xxhash.h>

#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "kvstore/chunk_codec.h"
#include "kvstore/clock.h"
#include "kvstore/shm_copy.h"
#include "kvstore/shm_progress.h"

namespace kvt::daemon {
namespace {

TEST(ShmCopyTest, CopiesEveryByteAndHashesThePayloadOfTheCopy) {
  std::mt19937_64 rng(1);
  // Header only, inside one block, exactly one block, blocks plus a remainder.
  for (size_t n : {kChunkHeaderBytes, kChunkHeaderBytes + 1, size_t{4096}, size_t{64} << 10,
                   (size_t{64} << 10) + 1, (size_t{3} << 20) + 777}) {
    std::vector<std::byte> src(n), dst(n);
    for (auto& b : src) b = static_cast<std::byte>(rng());
    const uint64_t h = CopyRecordHashingPayload(src, dst);
    EXPECT_EQ(dst, src) << n;
    EXPECT_EQ(h, XXH3_64bits(src.data() + kChunkHeaderBytes, n - kChunkHeaderBytes)) << n;
  }
}

// The progressive form of the same pass (a shm Put whose client is still writing): a
// writer thread publishes pieces, the reader copies and hashes behind it; the same bytes
// and hash as the one-shot copy, for sizes that are and are not multiples of a piece.
TEST(ShmCopyTest, ProgressiveCopyBehindAWriterIsTheSameCopyAndHash) {
  std::mt19937_64 rng(2);
  for (size_t n :
       {kChunkHeaderBytes + 1, kShmPieceBytes, kShmPieceBytes + 1, (size_t{3} << 20) + 777}) {
    std::vector<std::byte> src(n), region(kShmProgressBlockBytes + n), dst(n), out(n);
    for (auto& b : src) b = static_cast<std::byte>(rng());
    std::byte* data = region.data() + kShmProgressBlockBytes;
    alignas(64) std::byte block[kShmProgressBlockBytes] = {};
    ShmProgress progress(block);
    progress.Reset(100);  // region offsets: this record's data starts at 100
    std::thread writer([&] { CopyPublishing(src, data, 100, progress); });
    uint64_t seen = 0;
    auto h = CopyRecordHashingPayload(
        std::span<const std::byte>(data, n), dst, [&](size_t have) -> absl::StatusOr<size_t> {
          while (seen <= 100 + have) {
            auto r = progress.WaitBeyond(seen, 100 + n, absl::Seconds(10));
            if (!r.ok()) return r.status();
            seen = *r;
          }
          return seen - 100;
        });
    writer.join();
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(dst, src) << n;
    EXPECT_EQ(*h, XXH3_64bits(src.data() + kChunkHeaderBytes, n - kChunkHeaderBytes)) << n;
    // The client side of a progressive Get: CopyAsPublished behind a second writer.
    progress.Reset(0);
    std::thread writer2([&] { CopyPublishing(src, data, 100, progress); });
    absl::Status c = CopyAsPublished(data, 100, out, progress, 100 + n, absl::Seconds(10));
    writer2.join();
    ASSERT_TRUE(c.ok()) << c;
    EXPECT_EQ(out, src) << n;
  }
}

// The reader's guards: no progress for the stall time, a value past the limit, a value
// that went back, and an abandoned transfer each end the wait with their own error.
TEST(ShmProgressTest, WaitBeyondReportsStallOverrunRegressionAndAbandon) {
  alignas(64) std::byte block[kShmProgressBlockBytes] = {};
  ShmProgress p(block);
  p.Reset(64);
  // The stall is measured on the clock given: a ManualClock moved by this thread until the
  // reader gives up. No real time passes for it, and the waited time is exact.
  auto clock = std::make_shared<ManualClock>();
  std::atomic<bool> returned{false};
  absl::StatusOr<uint64_t> r = 0;
  Clock::Duration waited{};
  std::thread reader([&] {
    const Clock::TimePoint t0 = clock->Now();
    r = p.WaitBeyond(64, 1000, absl::Milliseconds(100), *clock);
    waited = clock->Now() - t0;
    returned = true;
  });
  while (!returned) {
    clock->Advance(std::chrono::milliseconds(1));
    std::this_thread::yield();
  }
  reader.join();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_NE(r.status().message().find("no progress for 100ms"), std::string_view::npos);
  EXPECT_GE(waited, std::chrono::milliseconds(100));
  // A writer that publishes while the reader sleeps on the futex wakes it (the writer
  // waits for the reader to announce its sleep: an event, not a time).
  std::thread w([&] {
    while (!p.reader_waiting()) std::this_thread::yield();
    p.Publish(500);
  });
  r = p.WaitBeyond(64, 1000, absl::Seconds(10));
  w.join();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, 500u);
  p.Publish(1001);
  EXPECT_EQ(p.WaitBeyond(500, 1000, absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  p.Publish(200);
  EXPECT_EQ(p.WaitBeyond(500, 1000, absl::Seconds(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  p.Abandon();
  EXPECT_EQ(p.WaitBeyond(500, 1000, absl::Seconds(1)).status().code(), absl::StatusCode::kAborted);
}

}  // namespace
}  // namespace kvt::daemon
