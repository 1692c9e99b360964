#include "kvstore/disk_tier.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "disk_test_util.h"
#include "fault_injection_fs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/chunk_codec.h"
#include "store_test_util.h"

namespace kvt {
namespace {

namespace fs = std::filesystem;
using ::kvt::testing::MakeRecord;
using ::kvt::testing::TestKey;
using ::kvt::testing::TestNamespace;

constexpr uint64_t kRecordTokens = 256;
// 256 tokens x 1 KiB + 128 B header, padded to 4 KiB on disk.
constexpr uint64_t kPadded = ((kRecordTokens * 1024 + kChunkHeaderBytes) + 4095) / 4096 * 4096;

class DiskTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = kvt::testing::MakeScratchDir("kvt-disk");
    ASSERT_FALSE(dir_.empty()) << std::strerror(errno);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  DiskTierOptions Options(uint64_t capacity = 64 * kPadded, uint64_t file_bytes = 16 * kPadded) {
    DiskTierOptions o;
    o.dir = dir_;
    o.capacity_bytes = capacity;
    o.file_bytes = file_bytes;
    o.io_bytes = 64 << 10;  // several pieces per record, so the pipeline is exercised
    o.queue_depth = 4;
    return o;
  }

  std::unique_ptr<DiskTier> OpenTier(const DiskTierOptions& o) {
    auto t = DiskTier::Open(o);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::move(*t) : nullptr;
  }

  // Reads `key` and returns its bytes, or the status.
  static absl::StatusOr<std::vector<std::byte>> Read(Tier& t, const ChunkKey& key) {
    return kvt::testing::ReadRecord(t, key);
  }

  static std::string RecordFile(const std::string& dir, int id) {
    char name[32];
    std::snprintf(name, sizeof name, "rec-%06d.dat", id);
    return (fs::path(dir) / "records" / name).string();
  }

  std::string dir_;
};

TEST_F(DiskTierTest, PutGetReturnsIdenticalBytes) {
  auto t = OpenTier(Options());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->caps().kind, TierKind::kDisk);
  EXPECT_TRUE(t->caps().durable);
  EXPECT_TRUE(t->caps().verifies_reads);
  EXPECT_EQ(t->backend(), DiskIoBackend::kIoUring);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(t->Put(MakeRecord(i)).ok());
  for (uint64_t i = 0; i < 3; ++i) {
    const auto want = MakeRecord(i);
    auto got = Read(*t, TestKey(i));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, want);
    auto h = VerifyChunk(*got, {TestNamespace(), TestKey(i)});
    EXPECT_TRUE(h.ok()) << h.status();
  }
  // Unaligned and oversized caller buffers: same bytes, length returned, bytes past it untouched.
  const auto want = MakeRecord(1);
  std::vector<std::byte> big(want.size() + 4097, std::byte{0x5a});
  auto n = t->Get(TestKey(1), std::span<std::byte>(big).subspan(1));
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, want.size());
  EXPECT_TRUE(std::equal(want.begin(), want.end(), big.begin() + 1));
  EXPECT_EQ(big[0], std::byte{0x5a});
  EXPECT_EQ(big[want.size() + 1], std::byte{0x5a});
  EXPECT_EQ(big.back(), std::byte{0x5a});

  std::vector<std::byte> small(want.size() - 1);
  EXPECT_EQ(t->Get(TestKey(1), small).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(t->Get(TestKey(99), big).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(kvt::testing::RecordSize(*t, TestKey(99)).status().code(), absl::StatusCode::kNotFound);
  std::vector<ChunkKey> keys = {TestKey(0), TestKey(99), TestKey(2)};
  EXPECT_THAT(kvt::testing::Contains(*t, keys), ::testing::ElementsAre(true, false, true));

  const TierStats st = t->stats();
  EXPECT_EQ(st.chunks, 3u);
  EXPECT_EQ(st.puts, 3u);
  EXPECT_EQ(st.hits, 4u);
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(st.used_bytes, 3 * kPadded);
  EXPECT_EQ(st.integrity_errors, 0u);
}

TEST_F(DiskTierTest, PeekReadsTheSameBytesWithoutCountingAUse) {
  auto t = OpenTier(Options());
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->Put(MakeRecord(1)).ok());
  auto before = t->List(ListOptions{});
  ASSERT_TRUE(before.ok()) << before.status();
  std::vector<std::byte> buf(MakeRecord(1).size());
  auto n = t->CopyForWriteBack(TestKey(1), buf);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(buf, MakeRecord(1));
  EXPECT_EQ(t->CopyForWriteBack(TestKey(9), buf).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(t->stats().hits, 0u);
  EXPECT_EQ(t->stats().misses, 0u);
  auto after = t->List(ListOptions{});
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_EQ(after->chunks.size(), 1u);
  EXPECT_EQ(after->chunks[0].last_access_unix_ms, before->chunks[0].last_access_unix_ms);
  ASSERT_TRUE(Read(*t, TestKey(1)).ok());  // a client's read counts
  EXPECT_EQ(t->stats().hits, 1u);
}

TEST_F(DiskTierTest, ReadAfterRestartReturnsSameBytes) {
  {
    auto t = OpenTier(Options());
    ASSERT_NE(t, nullptr);
    for (uint64_t i = 0; i < 20; ++i) {
      ASSERT_TRUE(t->Put(MakeRecord(i, 128 + (i % 3) * 64)).ok());
    }
    ASSERT_TRUE(t->Erase(TestKey(7)).ok());
  }
  auto t = OpenTier(Options());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->stats().chunks, 19u);
  EXPECT_EQ(t->extra_stats().dropped_on_open, 0u);
  for (uint64_t i = 0; i < 20; ++i) {
    auto got = Read(*t, TestKey(i));
    if (i == 7) {
      EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound);
      continue;
    }
    ASSERT_TRUE(got.ok()) << i << ": " << got.status();
    EXPECT_EQ(*got, MakeRecord(i, 128 + (i % 3) * 64)) << i;
  }
  // New puts after a restart do not overwrite surviving records.
  for (uint64_t i = 20; i < 30; ++i) ASSERT_TRUE(t->Put(MakeRecord(i)).ok());
  for (uint64_t i = 0; i < 30; ++i) {
    if (i == 7) continue;
    auto got = Read(*t, TestKey(i));
    ASSERT_TRUE(got.ok()) << i << ": " << got.status();
    EXPECT_TRUE(VerifyChunk(*got, {TestNamespace(), TestKey(i)}).ok()) << i;
  }
}

TEST_F(DiskTierTest, KillDuringWritesKeepsAcknowledgedChunks) {
  const uint64_t capacity = 2000 * kPadded, file_bytes = 64 * kPadded;
  FILE* in = nullptr;
  const pid_t pid =
      kvt::testing::StartDiskWriter(KVT_DISK_WRITER, dir_, capacity, file_bytes, 1500, {}, &in);
  ASSERT_GT(pid, 0);
  ASSERT_NE(in, nullptr);
  std::vector<long> acked;
  long i;
  char hex[64];
  // Let the child get well into its stream, then kill it mid-write.
  while (acked.size() < 40 && std::fscanf(in, "%ld %63s", &i, hex) == 2) acked.push_back(i);
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  // Lines written before the kill are acknowledged too.
  while (std::fscanf(in, "%ld %63s", &i, hex) == 2) acked.push_back(i);
  std::fclose(in);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(wstatus)) << "writer finished before it was killed; status " << wstatus;
  ASSERT_GE(acked.size(), 40u);

  auto t = OpenTier(Options(capacity, file_bytes));
  ASSERT_NE(t, nullptr);
  for (long k : acked) {
    auto got = Read(*t, TestKey(static_cast<uint64_t>(k)));
    ASSERT_TRUE(got.ok()) << "acknowledged chunk " << k << ": " << got.status();
    EXPECT_TRUE(VerifyChunk(*got, {TestNamespace(), TestKey(static_cast<uint64_t>(k))}).ok());
    EXPECT_EQ(*got, MakeRecord(static_cast<uint64_t>(k), 128 + static_cast<uint32_t>(k % 5) * 64));
  }
  // Nothing in the index reads back invalid (at most one unacknowledged chunk is extra).
  ListOptions lo;
  lo.page_size = 100000;
  auto page = t->List(lo);
  ASSERT_TRUE(page.ok());
  EXPECT_LE(page->chunks.size(), acked.size() + 1);
  for (const ChunkInfo& ci : page->chunks) {
    auto got = Read(*t, ci.key);
    ASSERT_TRUE(got.ok()) << ci.key.ToHex() << ": " << got.status();
    EXPECT_TRUE(VerifyChunk(*got, {TestNamespace(), ci.key}).ok());
  }
  EXPECT_EQ(t->stats().integrity_errors, 0u);
  EXPECT_EQ(t->extra_stats().dropped_on_open, 0u);
}

TEST_F(DiskTierTest, TruncatedRecordFileIsMissAndEntryDropped) {
  auto t = OpenTier(Options());
  ASSERT_NE(t, nullptr);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(t->Put(MakeRecord(i)).ok());
  // Records 0..3 sit at offsets 0, 1, 2, 3 x kPadded of file 0: cut inside record 2.
  ASSERT_EQ(::truncate(RecordFile(dir_, 0).c_str(), 2 * kPadded + 8192), 0);
  for (uint64_t i : {2u, 3u}) {
    // Lost data, said as such (DataLoss), then gone (a miss).
    EXPECT_EQ(Read(*t, TestKey(i)).status().code(), absl::StatusCode::kDataLoss) << i;
    EXPECT_EQ(Read(*t, TestKey(i)).status().code(), absl::StatusCode::kNotFound) << i;
    std::vector<ChunkKey> k = {TestKey(i)};
    EXPECT_THAT(kvt::testing::Contains(*t, k), ::testing::ElementsAre(false));
  }
  for (uint64_t i : {0u, 1u}) {
    auto got = Read(*t, TestKey(i));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, MakeRecord(i));
  }
  EXPECT_EQ(t->stats().integrity_errors, 2u);
  EXPECT_EQ(t->stats().chunks, 2u);
  // The space is usable again and the index stays consistent across a restart.
  for (uint64_t i = 10; i < 14; ++i) ASSERT_TRUE(t->Put(MakeRecord(i)).ok());
  t.reset();
  t = OpenTier(Options());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->stats().chunks, 6u);
  for (uint64_t i : {0u, 1u, 10u, 11u, 12u, 13u}) {
    auto got = Read(*t, TestKey(i));
    ASSERT_TRUE(got.ok()) << i << ": " << got.status();
    EXPECT_EQ(*got, MakeRecord(i));
  }
}

TEST_F(DiskTierTest, DeletedRecordFileIsMissAndEntriesDropped) {
  // 4 records per file: records 0..3 in file 0, 4..5 in file 1.
  auto t = OpenTier(Options(64 * kPadded, 4 * kPadded));
  ASSERT_NE(t, nullptr);
  for (uint64_t i = 0; i < 6; ++i) ASSERT_TRUE(t->Put(MakeRecord(i)).ok());
  ASSERT_EQ(::unlink(RecordFile(dir_, 0).c_str()), 0);
  EXPECT_EQ(Read(*t, TestKey(1)).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(Read(*t, TestKey(1)).status().code(), absl::StatusCode::kNotFound);
  std::vector<ChunkKey> keys;
  for (uint64_t i = 0; i < 6; ++i) keys.push_back(TestKey(i));
  EXPECT_THAT(kvt::testing::Contains(*t, keys),
              ::testing::ElementsAre(false, false, false, false, true, true));
  EXPECT_EQ(t->extra_stats().files_lost, 1u);
  for (uint64_t i = 4; i < 6; ++i) {
    auto got = Read(*t, TestKey(i));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, MakeRecord(i));
  }
  for (uint64_t i = 10; i < 16; ++i) ASSERT_TRUE(t->Put(MakeRecord(i)).ok());
  t.reset();
  t = OpenTier(Options(64 * kPadded, 4 * kPadded));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->stats().chunks, 8u);
  EXPECT_EQ(t->extra_stats().dropped_on_open, 0u);
  for (uint64_t i : {4u, 5u, 10u, 15u}) {
    auto got = Read(*t, TestKey(i));
    ASSERT_TRUE(got.ok()) << i << ": " << got.status();
    EXPECT_EQ(*got, MakeRecord(i));
  }
}

TEST_F(DiskTierTest, DeletedRecordFileWhileClosedIsDroppedOnOpen) {
  {
    auto t = OpenTier(Options(64 * kPadded, 4 * kPadded));
    ASSERT_NE(t, nullptr);
    for (uint64_t i = 0; i < 6; ++i) ASSERT_TRUE(t->Put(MakeRecord(i)).ok());
  }
  ASSERT_EQ(::unlink(RecordFile(dir_, 1).c_str()), 0);
  auto t = OpenTier(Options(64 * kPadded, 4 * kPadded));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->stats().chunks, 4u);
  EXPECT_EQ(t->extra_stats().dropped_on_open, 2u);
  EXPECT_EQ(Read(*t, TestKey(5)).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Read(*t, TestKey(3)).ok());
}

TEST_F(DiskTierTest, FlippedByteIsNotFoundAndCountedNeverWrongBytes) {
  auto t = OpenTier(Options());
  ASSERT_NE(t, nullptr);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(t->Put(MakeRecord(i)).ok());
  const int fd = ::open(RecordFile(dir_, 0).c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  auto flip = [&](uint64_t off) {
    unsigned char b;
    ASSERT_EQ(::pread(fd, &b, 1, static_cast<off_t>(off)), 1);
    b ^= 0x01;
    ASSERT_EQ(::pwrite(fd, &b, 1, static_cast<off_t>(off)), 1);
    ASSERT_EQ(::fsync(fd), 0);
  };
  flip(1 * kPadded + 200000);  // payload of record 1
  flip(2 * kPadded + 30);      // header (key field) of record 2
  ::close(fd);
  for (uint64_t i : {1u, 2u}) {
    std::vector<std::byte> out(MakeRecord(i).size());
    auto got = t->Get(TestKey(i), out);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << i;
    std::vector<ChunkKey> k = {TestKey(i)};
    EXPECT_THAT(kvt::testing::Contains(*t, k), ::testing::ElementsAre(false));
  }
  EXPECT_EQ(t->stats().integrity_errors, 2u);
  auto ok = Read(*t, TestKey(0));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, MakeRecord(0));
}

TEST_F(DiskTierTest, CapacityEvictsOldestAccessedFirst) {
  const uint64_t capacity = 8 * kPadded;
  auto t = OpenTier(Options(capacity, 4 * kPadded));
  ASSERT_NE(t, nullptr);
  for (uint64_t i = 0; i < 8; ++i) ASSERT_TRUE(t->Put(MakeRecord(i)).ok());
  std::vector<std::byte> out(MakeRecord(0).size());
  ASSERT_TRUE(t->Get(TestKey(0), out).ok());  // 0 is now the most recently accessed
  ASSERT_TRUE(t->Put(MakeRecord(8)).ok());
  std::vector<ChunkKey> k = {TestKey(0), TestKey(1), TestKey(2)};
  EXPECT_THAT(kvt::testing::Contains(*t, k), ::testing::ElementsAre(true, false, true));
  // 5x capacity in total.
  for (uint64_t i = 9; i < 40; ++i) {
    ASSERT_TRUE(t->Put(MakeRecord(i)).ok()) << i;
    ASSERT_LE(t->stats().used_bytes, capacity);
  }
  const TierStats st = t->stats();
  EXPECT_EQ(st.chunks, 8u);
  EXPECT_EQ(st.evictions, 32u);
  EXPECT_EQ(st.used_bytes, capacity);
  EXPECT_EQ(t->extra_stats().file_bytes_total, capacity);
  std::vector<ChunkKey> last;
  for (uint64_t i = 32; i < 40; ++i) last.push_back(TestKey(i));
  EXPECT_THAT(kvt::testing::Contains(*t, last), ::testing::Each(true));
  uint64_t on_disk = 0;
  for (const auto& de : fs::directory_iterator(fs::path(dir_) / "records"))
    on_disk += de.file_size();
  EXPECT_EQ(on_disk, capacity);
}

TEST_F(DiskTierTest, PinnedChunksAreNeverEvicted) {
  auto t = OpenTier(Options(4 * kPadded, 4 * kPadded));
  ASSERT_NE(t, nullptr);
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(t->Put(MakeRecord(i)).ok());
  PinHandle pin0 = t->Pin(TestKey(0));
  EXPECT_TRUE(pin0);
  EXPECT_FALSE(t->Pin(TestKey(99)));
  for (uint64_t i = 4; i < 12; ++i) ASSERT_TRUE(t->Put(MakeRecord(i)).ok());
  std::vector<ChunkKey> k = {TestKey(0)};
  EXPECT_THAT(kvt::testing::Contains(*t, k), ::testing::ElementsAre(true));
  EXPECT_EQ(t->stats().pinned_bytes, kPadded);
  EXPECT_EQ(t->Erase(TestKey(0)).code(), absl::StatusCode::kFailedPrecondition);
  std::vector<PinHandle> pins;
  for (uint64_t i = 9; i < 12; ++i) {
    pins.push_back(t->Pin(TestKey(i)));
    EXPECT_TRUE(pins.back());
  }
  EXPECT_EQ(t->Put(MakeRecord(50)).code(), absl::StatusCode::kResourceExhausted);
  pin0.Release();
  ASSERT_TRUE(t->Put(MakeRecord(50)).ok());
  EXPECT_THAT(kvt::testing::Contains(*t, k), ::testing::ElementsAre(false));
}

TEST_F(DiskTierTest, EnospcOnWriteIsResourceExhaustedAndStoresNothing) {
  auto faults = std::make_shared<testing::FaultInjectionFs>();
  DiskTierOptions o = Options();
  o.file_system = faults;
  auto t = OpenTier(o);
  ASSERT_NE(t, nullptr);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(t->Put(MakeRecord(i)).ok());
  faults->AddRule({.op = testing::FsOp::kWrite, .error = ENOSPC});
  EXPECT_EQ(t->Put(MakeRecord(3)).code(), absl::StatusCode::kResourceExhausted);
  std::vector<ChunkKey> k = {TestKey(3)};
  EXPECT_THAT(kvt::testing::Contains(*t, k), ::testing::ElementsAre(false));
  EXPECT_EQ(t->stats().used_bytes, 3 * kPadded);
  EXPECT_EQ(t->extra_stats().enospc, 1u);
  for (uint64_t i = 0; i < 3; ++i) {
    auto got = Read(*t, TestKey(i));
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, MakeRecord(i));
  }
  faults->ClearRules();
  ASSERT_TRUE(t->Put(MakeRecord(3)).ok());
  t.reset();
  o.file_system = nullptr;
  t = OpenTier(o);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->stats().chunks, 4u);
  EXPECT_EQ(t->extra_stats().dropped_on_open, 0u);
}

TEST_F(DiskTierTest, EnospcOnFallocateEvictsWithinExistingFiles) {
  DiskTierOptions o = Options(64 * kPadded, 4 * kPadded);
  auto faults = std::make_shared<testing::FaultInjectionFs>();
  // The first record file is created; every later one meets ENOSPC.
  faults->AddRule({.op = testing::FsOp::kAllocate, .skip = 1, .error = ENOSPC});
  o.file_system = faults;
  auto t = OpenTier(o);
  ASSERT_NE(t, nullptr);
  for (uint64_t i = 0; i < 10; ++i) ASSERT_TRUE(t->Put(MakeRecord(i)).ok()) << i;
  EXPECT_EQ(t->extra_stats().files, 1u);
  EXPECT_EQ(t->extra_stats().enospc, 1u);
  EXPECT_EQ(t->stats().chunks, 4u);
  EXPECT_EQ(t->stats().evictions, 6u);
  for (uint64_t i = 6; i < 10; ++i) {
    auto got = Read(*t, TestKey(i));
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, MakeRecord(i));
  }
}

TEST_F(DiskTierTest, PreadFallbackRoundTrips) {
  DiskTierOptions o = Options();
  o.force_pread = true;
  {
    auto t = OpenTier(o);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->backend(), DiskIoBackend::kPread);
    for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(t->Put(MakeRecord(i, 128 + i * 32)).ok());
    for (uint64_t i = 0; i < 5; ++i) {
      auto got = Read(*t, TestKey(i));
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(*got, MakeRecord(i, 128 + i * 32));
    }
  }
  auto t = OpenTier(Options());  // the io_uring path reads what pwrite wrote
  ASSERT_NE(t, nullptr);
  for (uint64_t i = 0; i < 5; ++i) {
    auto got = Read(*t, TestKey(i));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, MakeRecord(i, 128 + i * 32));
  }
}

TEST_F(DiskTierTest, ConcurrentPutGetFromFourThreads) {
  auto t = OpenTier(Options(200 * kPadded, 32 * kPadded));
  ASSERT_NE(t, nullptr);
  constexpr int kThreads = 4, kPer = 24;
  std::atomic<int> wrong{0}, errors{0}, hits{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w) {
    threads.emplace_back([&, w] {
      std::vector<std::byte> out(MakeRecord(0).size());
      for (int i = 0; i < kPer; ++i) {
        const uint64_t mine = static_cast<uint64_t>(w * kPer + i);
        if (!t->Put(MakeRecord(mine)).ok()) ++errors;
        // Read a neighbour's chunk: present (exact bytes) or not yet written.
        const uint64_t other = static_cast<uint64_t>(((w + 1) % kThreads) * kPer + i);
        auto got = t->Get(TestKey(other), out);
        if (got.ok()) {
          ++hits;
          if (out != MakeRecord(other)) ++wrong;
        } else if (got.status().code() != absl::StatusCode::kNotFound) {
          ++errors;
        }
        auto self = t->Get(TestKey(mine), out);
        if (!self.ok() || out != MakeRecord(mine)) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(t->stats().chunks, static_cast<uint64_t>(kThreads * kPer));
  EXPECT_EQ(t->stats().integrity_errors, 0u);
  for (uint64_t i = 0; i < kThreads * kPer; ++i) {
    auto got = Read(*t, TestKey(i));
    ASSERT_TRUE(got.ok());
    EXPECT_EQ(*got, MakeRecord(i));
  }
}

TEST_F(DiskTierTest, ConcurrentPutsUnderEvictionStayConsistent) {
  auto t = OpenTier(Options(12 * kPadded, 4 * kPadded));
  ASSERT_NE(t, nullptr);
  std::atomic<int> wrong{0}, errors{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] {
      std::vector<std::byte> out(MakeRecord(0).size());
      for (int i = 0; i < 15; ++i) {
        const uint64_t k = static_cast<uint64_t>(w * 100 + i);
        if (!t->Put(MakeRecord(k)).ok()) ++errors;
        for (uint64_t j = k > 3 ? k - 3 : 0; j <= k; ++j) {
          auto got = t->Get(TestKey(j), out);
          if (got.ok() && out != MakeRecord(j)) ++wrong;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  const TierStats st = t->stats();
  EXPECT_EQ(st.chunks, 12u);
  EXPECT_EQ(st.evictions, 48u);
  EXPECT_EQ(st.integrity_errors, 0u);
}

TEST_F(DiskTierTest, BadOptionsAndBadRecordsAreRejected) {
  DiskTierOptions o = Options();
  o.capacity_bytes = 1000;
  EXPECT_EQ(DiskTier::Open(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options();
  o.queue_depth = 0;
  EXPECT_EQ(DiskTier::Open(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options();
  o.file_bytes = 4097;
  EXPECT_EQ(DiskTier::Open(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options();
  o.dir = "";
  EXPECT_EQ(DiskTier::Open(o).status().code(), absl::StatusCode::kInvalidArgument);

  auto t = OpenTier(Options(64 * kPadded, 2 * kPadded));
  ASSERT_NE(t, nullptr);
  std::vector<std::byte> junk(5000, std::byte{7});
  EXPECT_EQ(t->Put(junk).code(), absl::StatusCode::kDataLoss);
  auto rec = MakeRecord(1);
  rec.push_back(std::byte{0});
  EXPECT_EQ(t->Put(rec).code(), absl::StatusCode::kInvalidArgument);
  // 3 x kPadded does not fit a 2 x kPadded file.
  EXPECT_EQ(t->Put(MakeRecord(2, 700)).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(t->stats().chunks, 0u);
  ListOptions lo;
  lo.page_token = "zz";
  EXPECT_EQ(t->List(lo).status().code(), absl::StatusCode::kInvalidArgument);
  lo.page_token = "";
  lo.page_size = 0;
  EXPECT_EQ(t->List(lo).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(DiskTierTest, ListIsOrderedByKeyFilteredAndPaginated) {
  auto t = OpenTier(Options());
  ASSERT_NE(t, nullptr);
  std::vector<ChunkKey> ns1;
  for (uint64_t i = 0; i < 7; ++i) {
    ASSERT_TRUE(t->Put(MakeRecord(i, 64, 1)).ok());
    ns1.push_back(TestKey(i, 1));
  }
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(t->Put(MakeRecord(i, 64, 2)).ok());
  std::sort(ns1.begin(), ns1.end(),
            [](const ChunkKey& a, const ChunkKey& b) { return a.ToHex() < b.ToHex(); });
  ListOptions lo;
  lo.ns = TestNamespace(1);
  lo.page_size = 3;
  std::vector<ChunkKey> seen;
  int pages = 0;
  do {
    auto page = t->List(lo);
    ASSERT_TRUE(page.ok()) << page.status();
    ++pages;
    for (const auto& ci : page->chunks) {
      seen.push_back(ci.key);
      EXPECT_EQ(ci.ns, TestNamespace(1));
      EXPECT_EQ(ci.token_count, 64u);
      EXPECT_EQ(ci.record_bytes, MakeRecord(0, 64).size());
      EXPECT_GT(ci.last_access_unix_ms, 0);
    }
    lo.page_token = page->next_page_token;
  } while (!lo.page_token.empty());
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(seen, ns1);
  lo.ns.reset();
  lo.page_size = 1000;
  auto all = t->List(lo);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->chunks.size(), 11u);
  EXPECT_TRUE(all->next_page_token.empty());
}

// A Put asked for its victims returns them with their exact bytes, each read from its
// file exactly once (no second read, no hash); a Put not asked reads no victim at all.
// Counted by the tier's own instrumentation (extra_stats().record_reads, victim_reads).
TEST_F(DiskTierTest, PutReturnsVictimsReadOnceAndOnlyWhenAsked) {
  auto t = OpenTier(Options(2 * kPadded, 2 * kPadded));
  ASSERT_NE(t, nullptr);
  for (uint64_t i = 0; i < 2; ++i) ASSERT_TRUE(t->Put(MakeRecord(i)).ok());
  const uint64_t reads0 = t->extra_stats().record_reads;
  // Not asked: key 0 is evicted and nothing is read.
  absl::StatusOr<PutResult> put = t->Put(MakeRecord(2), PutContext{});
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_TRUE(put->victims.empty());
  EXPECT_EQ(t->stats().evictions, 1u);
  EXPECT_EQ(t->extra_stats().record_reads, reads0);
  EXPECT_EQ(t->extra_stats().victim_reads, 0u);
  // Asked: key 1 is evicted, read once, and returned.
  put = t->Put(MakeRecord(3), PutContext{.keep_victims = true});
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->key, TestKey(3));
  EXPECT_TRUE(put->stored);
  ASSERT_EQ(put->victims.size(), 1u);
  EXPECT_EQ(put->victims[0].key, TestKey(1));
  const std::span<const std::byte> got = put->victims[0].record.span();
  EXPECT_EQ(std::vector<std::byte>(got.begin(), got.end()), MakeRecord(1));
  EXPECT_EQ(t->stats().evictions, 2u);
  EXPECT_EQ(t->extra_stats().record_reads, reads0 + 1);
  EXPECT_EQ(t->extra_stats().victim_reads, 1u);
  EXPECT_FALSE(kvt::testing::Contains(*t, std::vector<ChunkKey>{TestKey(1)})[0]);
}

TEST_F(DiskTierTest, ReplacingAKeyKeepsOneCopy) {
  auto t = OpenTier(Options());
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->Put(MakeRecord(5)).ok());
  PinHandle pin = t->Pin(TestKey(5));
  ASSERT_TRUE(pin);
  ASSERT_TRUE(t->Put(MakeRecord(5)).ok());
  EXPECT_EQ(t->stats().chunks, 1u);
  EXPECT_EQ(t->stats().used_bytes, kPadded);
  EXPECT_EQ(t->stats().pinned_bytes, kPadded);
  auto got = Read(*t, TestKey(5));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, MakeRecord(5));
}

TEST_F(DiskTierTest, LastAccessSurvivesRestart) {
  DiskTierOptions o = Options(4 * kPadded, 4 * kPadded);
  auto clock = std::make_shared<ManualClock>();  // the access stamps' time
  o.clock = clock;
  {
    auto t = OpenTier(o);
    ASSERT_NE(t, nullptr);
    for (uint64_t i = 0; i < 4; ++i) {
      ASSERT_TRUE(t->Put(MakeRecord(i)).ok());
      clock->Advance(std::chrono::milliseconds(3));  // distinct ms timestamps
    }
    std::vector<std::byte> out(MakeRecord(0).size());
    ASSERT_TRUE(t->Get(TestKey(0), out).ok());
  }
  auto t = OpenTier(o);
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->Put(MakeRecord(9)).ok());  // evicts the oldest-accessed: 1, not 0
  std::vector<ChunkKey> k = {TestKey(0), TestKey(1)};
  EXPECT_THAT(kvt::testing::Contains(*t, k), ::testing::ElementsAre(true, false));
}

}  // namespace
}  // namespace kvt
