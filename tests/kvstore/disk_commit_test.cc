// DiskCommit::kGrouped (docs/disk-tier.md, "Group commit"): a Put is readable once it
// returns and durable after the group commit that follows within commit_delay_ms (or
// Sync()). A process killed between the data write and the index commit loses only the
// uncommitted puts; no record is ever indexed before its fdatasync, and a committed
// record that an uncommitted put replaced keeps its extent until the replacement commits.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "disk_test_util.h"
#include "fault_injection_fs.h"
#include "gtest/gtest.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/disk_tier.h"
#include "store_test_util.h"

namespace kvt {
namespace {

namespace fs = std::filesystem;
using ::kvt::testing::MakeRecord;
using ::kvt::testing::TestKey;
using ::kvt::testing::TestNamespace;

constexpr uint64_t kPadded = kvt::testing::kPaddedRecordBytes;

class DiskCommitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = kvt::testing::MakeScratchDir("kvt-commit");
    ASSERT_FALSE(dir_.empty()) << std::strerror(errno);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  DiskTierOptions Options(DiskCommit commit, uint32_t delay_ms = 60000,
                          uint64_t capacity = 64 * kPadded) {
    DiskTierOptions o;
    o.dir = dir_;
    o.capacity_bytes = capacity;
    o.file_bytes = 16 * kPadded;
    o.io_bytes = 64 << 10;
    o.queue_depth = 4;
    o.commit = commit;
    o.commit_delay_ms = delay_ms;
    return o;
  }
  std::unique_ptr<DiskTier> OpenTier(const DiskTierOptions& o) {
    auto t = DiskTier::Open(o);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::move(*t) : nullptr;
  }
  static absl::StatusOr<std::vector<std::byte>> Read(Tier& t, const ChunkKey& key) {
    return kvt::testing::ReadRecord(t, key);
  }
  std::string dir_;
};

TEST_F(DiskCommitTest, BadCommitOptionsAreRejected) {
  DiskTierOptions o = Options(DiskCommit::kGrouped, 0);
  EXPECT_EQ(DiskTier::Open(o).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(o.Validate().message().find("commit_delay_ms = 0"), std::string::npos) << o.Validate();
  o.commit_delay_ms = 60001;
  EXPECT_EQ(o.Validate().code(), absl::StatusCode::kInvalidArgument);
  o = Options(static_cast<DiskCommit>(7));
  EXPECT_NE(o.Validate().message().find("commit = 7"), std::string::npos) << o.Validate();
}

TEST_F(DiskCommitTest, GroupedPutIsReadableAtOnceAndDurableAfterSync) {
  {
    auto t = OpenTier(Options(DiskCommit::kGrouped));
    ASSERT_NE(t, nullptr);
    for (uint64_t i = 0; i < 5; ++i) ASSERT_TRUE(t->Put(MakeRecord(i)).ok());
    EXPECT_EQ(t->extra_stats().uncommitted, 5u);
    EXPECT_EQ(t->extra_stats().group_commits, 0u);
    for (uint64_t i = 0; i < 5; ++i) {
      auto got = Read(*t, TestKey(i));
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(*got, MakeRecord(i));
    }
    ASSERT_TRUE(t->Sync().ok());
    EXPECT_EQ(t->extra_stats().uncommitted, 0u);
    EXPECT_EQ(t->extra_stats().group_commits, 1u);
    EXPECT_EQ(t->extra_stats().group_committed_records, 5u);
    // Replace a committed record (other bytes, other size) without committing: the new
    // bytes are served; the old extent stays reserved, so a new record cannot take it.
    ASSERT_TRUE(t->Put(MakeRecord(1, 64)).ok());
    for (uint64_t i = 5; i < 8; ++i) ASSERT_TRUE(t->Put(MakeRecord(i)).ok());
    auto got = Read(*t, TestKey(1));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, MakeRecord(1, 64));
    EXPECT_EQ(t->extra_stats().uncommitted, 4u);
    // List reads the index: it commits first, so it lists every record.
    ListOptions lo;
    lo.page_size = 100;
    auto page = t->List(lo);
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_EQ(page->chunks.size(), 8u);
    EXPECT_EQ(t->extra_stats().uncommitted, 0u);
    ASSERT_TRUE(t->Put(MakeRecord(8)).ok());  // committed by the destructor
  }
  auto t = OpenTier(Options(DiskCommit::kEachPut));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->stats().chunks, 9u);
  EXPECT_EQ(t->extra_stats().dropped_on_open, 0u);
  for (uint64_t i = 0; i < 9; ++i) {
    auto got = Read(*t, TestKey(i));
    ASSERT_TRUE(got.ok()) << i << ": " << got.status();
    EXPECT_EQ(*got, MakeRecord(i, i == 1 ? 64 : 256)) << i;
  }
  EXPECT_EQ(t->stats().integrity_errors, 0u);
}

// The committer starts on its own once the oldest written record has waited
// commit_delay_ms. Polled (a condition with a generous bound), not timed.
TEST_F(DiskCommitTest, CommitterCommitsWithinTheBoundedWait) {
  auto t = OpenTier(Options(DiskCommit::kGrouped, /*delay_ms=*/5));
  ASSERT_NE(t, nullptr);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(t->Put(MakeRecord(i)).ok());
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (t->extra_stats().uncommitted > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(t->extra_stats().uncommitted, 0u);
  EXPECT_GE(t->extra_stats().group_commits, 1u);
  EXPECT_EQ(t->extra_stats().group_committed_records, 3u);
}

// Eviction, erase and replacement of records still waiting for their commit.
TEST_F(DiskCommitTest, EvictingAndErasingUncommittedRecordsStaysConsistent) {
  {
    auto t = OpenTier(Options(DiskCommit::kGrouped, 60000, /*capacity=*/8 * kPadded));
    ASSERT_NE(t, nullptr);
    for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE(t->Put(MakeRecord(i)).ok());
    ASSERT_TRUE(t->Sync().ok());
    for (uint64_t i = 4; i < 20; ++i) ASSERT_TRUE(t->Put(MakeRecord(i)).ok());
    ASSERT_TRUE(t->Erase(TestKey(19)).ok());
    EXPECT_EQ(t->stats().chunks, 7u);
    EXPECT_LE(t->stats().used_bytes, 8 * kPadded);
    for (uint64_t i = 12; i < 19; ++i) {
      auto got = Read(*t, TestKey(i));
      ASSERT_TRUE(got.ok()) << i << ": " << got.status();
      EXPECT_EQ(*got, MakeRecord(i));
    }
  }
  auto t = OpenTier(Options(DiskCommit::kEachPut, 60000, 8 * kPadded));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->stats().chunks, 7u);
  EXPECT_EQ(t->extra_stats().dropped_on_open, 0u);
  for (uint64_t i = 12; i < 19; ++i) {
    auto got = Read(*t, TestKey(i));
    ASSERT_TRUE(got.ok()) << i << ": " << got.status();
    EXPECT_EQ(*got, MakeRecord(i));
  }
  EXPECT_EQ(Read(*t, TestKey(19)).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(t->stats().integrity_errors, 0u);
}

// kill -9 between the data write and the index commit: the child (kvt_disk_writer,
// grouped) commits its first 20 puts with Sync(), then keeps putting: new keys, and
// replacements (other bytes) of committed keys, all written but never committed. After
// the kill exactly the 20 committed records read back, with their committed bytes; the
// uncommitted ones are absent, nothing fails verification, nothing is dropped on Open.
TEST_F(DiskCommitTest, KillBetweenWriteAndGroupCommitLosesOnlyUncommitted) {
  const uint64_t capacity = 2000 * kPadded, file_bytes = 64 * kPadded;
  constexpr long kSynced = 20;
  FILE* in = nullptr;
  const pid_t pid = kvt::testing::StartDiskWriter(KVT_DISK_WRITER, dir_, capacity, file_bytes, 1500,
                                                  {"grouped", std::to_string(kSynced)}, &in);
  ASSERT_GT(pid, 0);
  ASSERT_NE(in, nullptr);
  long i, after_sync = -1, lines = 0;
  char hex[64];
  while (std::fscanf(in, "%ld %63s", &i, hex) == 2) {
    if (i == -1)
      after_sync = 0;
    else if (after_sync >= 0)
      ++after_sync;
    if (++lines > 0 && after_sync >= 40) break;
  }
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  while (std::fscanf(in, "%ld %63s", &i, hex) == 2) {
  }
  std::fclose(in);
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(wstatus)) << "writer finished before it was killed; status " << wstatus;
  ASSERT_GE(after_sync, 40) << "the writer acknowledged too few uncommitted puts";

  auto t = OpenTier(Options(DiskCommit::kEachPut, 60000, capacity));
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->extra_stats().dropped_on_open, 0u);
  EXPECT_EQ(t->stats().chunks, static_cast<uint64_t>(kSynced));
  for (long k = 0; k < kSynced; ++k) {
    auto got = Read(*t, TestKey(static_cast<uint64_t>(k)));
    ASSERT_TRUE(got.ok()) << "committed chunk " << k << ": " << got.status();
    EXPECT_EQ(*got, MakeRecord(static_cast<uint64_t>(k), 128 + static_cast<uint32_t>(k % 5) * 64));
  }
  for (long k = kSynced; k < kSynced + 40; k += 2) {
    EXPECT_EQ(Read(*t, TestKey(static_cast<uint64_t>(k))).status().code(),
              absl::StatusCode::kNotFound)
        << "uncommitted chunk " << k;
  }
  EXPECT_EQ(t->stats().integrity_errors, 0u);
  // The uncommitted records' extents are free again: new puts fit and verify.
  for (uint64_t k = 5000; k < 5040; ++k) ASSERT_TRUE(t->Put(MakeRecord(k)).ok());
  for (uint64_t k = 0; k < kSynced; ++k) {
    auto got = Read(*t, TestKey(k));
    ASSERT_TRUE(got.ok()) << k << ": " << got.status();
  }
}

// Faults through the fault-injecting layer: a failed fdatasync never lets its records be
// indexed (they are dropped: clean misses, counted, Sync() says so); a torn write the
// device reported as successful is committed but never read back as valid.
TEST_F(DiskCommitTest, FailedSyncAndTornWriteAreNeverServed) {
  using ::kvt::testing::FaultInjectionFs;
  using ::kvt::testing::FsOp;
  auto faults = std::make_shared<FaultInjectionFs>();
  DiskTierOptions o = Options(DiskCommit::kGrouped);
  o.file_system = faults;
  {
    auto t = OpenTier(o);
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(t->Put(MakeRecord(0)).ok());
    ASSERT_TRUE(t->Put(MakeRecord(1)).ok());
    faults->AddRule({.op = FsOp::kSync, .times = 1, .error = EIO});
    const absl::Status s = t->Sync();
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_EQ(faults->injected(FsOp::kSync), 1u);
    EXPECT_EQ(Read(*t, TestKey(0)).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(Read(*t, TestKey(1)).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(t->stats().io_errors, 2u);
    EXPECT_EQ(t->extra_stats().uncommitted, 0u);
    EXPECT_EQ(t->stats().used_bytes, 0u);
    // A torn write reported as successful, then an intact record.
    faults->AddRule({.op = FsOp::kWrite, .times = 1, .torn_write_bytes = 4097});
    ASSERT_TRUE(t->Put(MakeRecord(2)).ok());
    ASSERT_TRUE(t->Put(MakeRecord(3)).ok());
    ASSERT_TRUE(t->Sync().ok());
    EXPECT_EQ(Read(*t, TestKey(2)).status().code(), absl::StatusCode::kDataLoss);
    auto got = Read(*t, TestKey(3));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, MakeRecord(3));
    ASSERT_TRUE(t->Put(MakeRecord(4)).ok());  // left for the destructor's commit
  }
  o.file_system = nullptr;
  auto t = OpenTier(o);
  ASSERT_NE(t, nullptr);
  for (uint64_t i : {0u, 1u, 2u}) {
    EXPECT_EQ(Read(*t, TestKey(i)).status().code(), absl::StatusCode::kNotFound) << i;
  }
  for (uint64_t i : {3u, 4u}) {
    auto got = Read(*t, TestKey(i));
    ASSERT_TRUE(got.ok()) << i << ": " << got.status();
    EXPECT_EQ(*got, MakeRecord(i));
  }
}

// A committed record replaced twice: once before a commit starts (v2, in the commit)
// and again while that commit's fdatasync runs (v3, not in it). The commit skips v2 and
// the index keeps pointing at v1, so v1's extent must stay reserved: with a capacity of
// four records, two more puts fit and a third has to evict (it would not, were v1's
// extent freed early and reusable while the index still points at it).
TEST_F(DiskCommitTest, ReplacedTwiceDuringACommitKeepsTheIndexedExtent) {
  using ::kvt::testing::FaultInjectionFs;
  using ::kvt::testing::FsOp;
  auto faults = std::make_shared<FaultInjectionFs>();
  // 253, 254 and 255 tokens all pad to q bytes: no fragmentation in the count below.
  constexpr uint64_t q = 64 * 4096;
  DiskTierOptions o = Options(DiskCommit::kGrouped, 60000, /*capacity=*/4 * q);
  o.file_bytes = 4 * q;
  o.file_system = faults;
  auto t = OpenTier(o);
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->Put(MakeRecord(0, 253)).ok());  // v1
  ASSERT_TRUE(t->Sync().ok());
  ASSERT_TRUE(t->Put(MakeRecord(0, 254)).ok());  // v2
  faults->AddRule({.op = FsOp::kSync, .times = 1, .delay = std::chrono::milliseconds(2000)});
  std::thread commit([&] { EXPECT_TRUE(t->Sync().ok()); });
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (faults->injected(FsOp::kSync) == 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(faults->injected(FsOp::kSync), 1u);
  ASSERT_TRUE(t->Put(MakeRecord(0, 255)).ok());  // v3, while the commit's fdatasync runs
  commit.join();
  EXPECT_EQ(t->extra_stats().uncommitted, 1u);  // v3
  ASSERT_TRUE(t->Put(MakeRecord(1, 255)).ok());
  ASSERT_TRUE(t->Put(MakeRecord(2, 255)).ok());
  EXPECT_EQ(t->stats().evictions, 0u);
  ASSERT_TRUE(t->Put(MakeRecord(3, 255)).ok());
  EXPECT_EQ(t->stats().evictions, 1u) << "v1's extent was reusable while indexed";
  for (uint64_t i = 1; i < 4; ++i) {
    auto got = Read(*t, TestKey(i));
    ASSERT_TRUE(got.ok()) << i << ": " << got.status();
    EXPECT_EQ(*got, MakeRecord(i, 255));
  }
}

}  // namespace
}  // namespace kvt
