// Disk tier repair paths (issue 11): a torn tail at start-up (failure 6), short reads
// reported by code (13), and eviction reading its victims with no lock held (13).
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "disk_test_util.h"
#include "fault_injection_fs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/disk_tier.h"
#include "store_test_util.h"
#include "uring_file.h"

namespace kvt {
namespace {

namespace fs = std::filesystem;
using ::kvt::testing::MakeRecord;
using ::kvt::testing::TestKey;

constexpr uint64_t kPadded = kvt::testing::kPaddedRecordBytes;

class DiskRepairTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = kvt::testing::MakeScratchDir("kvt-repair");
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
    o.io_bytes = 64 << 10;
    o.queue_depth = 4;
    return o;
  }
  static absl::StatusOr<std::vector<std::byte>> Read(Tier& t, const ChunkKey& key) {
    return kvt::testing::ReadRecord(t, key);
  }
  std::string RecordFile(int id) const {
    char name[32];
    std::snprintf(name, sizeof name, "rec-%06d.dat", id);
    return (fs::path(dir_) / "records" / name).string();
  }
  std::string dir_;
};

// Failure 6: a record file whose size is not a multiple of 4096 at start-up used to be
// removed whole. Now the records before the cut survive and only the torn one goes.
TEST_F(DiskRepairTest, TornTailKeepsEveryIntactRecord) {
  {
    auto t = DiskTier::Open(Options());
    ASSERT_TRUE(t.ok()) << t.status();
    for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE((*t)->Put(MakeRecord(i)).ok());
  }
  // Records 0..3 sit at 0, 1, 2, 3 x kPadded of file 0: cut mid-block inside record 3.
  const uint64_t cut = 3 * kPadded + 5000;
  ASSERT_NE(cut % 4096, 0u);
  ASSERT_EQ(::truncate(RecordFile(0).c_str(), static_cast<off_t>(cut)), 0);

  auto t = DiskTier::Open(Options());
  ASSERT_TRUE(t.ok()) << t.status();
  for (uint64_t i = 0; i < 3; ++i) {
    auto got = Read(**t, TestKey(i));
    ASSERT_TRUE(got.ok()) << "intact record " << i << ": " << got.status();
    EXPECT_EQ(*got, MakeRecord(i));
  }
  EXPECT_EQ(Read(**t, TestKey(3)).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*t)->stats().chunks, 3u);
  EXPECT_EQ((*t)->extra_stats().dropped_on_open, 1u);
  EXPECT_EQ((*t)->extra_stats().files, 1u);
  // The file is whole blocks again and its free space is usable.
  EXPECT_EQ(fs::file_size(RecordFile(0)) % 4096, 0u);
  for (uint64_t i = 10; i < 20; ++i) ASSERT_TRUE((*t)->Put(MakeRecord(i)).ok()) << i;
  t->reset();
  t = DiskTier::Open(Options());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->stats().chunks, 13u);
  EXPECT_EQ((*t)->extra_stats().dropped_on_open, 0u);
  for (uint64_t i : {0u, 1u, 2u, 10u, 19u}) {
    auto got = Read(**t, TestKey(i));
    ASSERT_TRUE(got.ok()) << i << ": " << got.status();
    EXPECT_EQ(*got, MakeRecord(i));
  }
}

// Failure 13: a short read is told apart by its code (OutOfRange), not by the text
// "short read" in a DataLoss message; an I/O error stays DataLoss.
TEST_F(DiskRepairTest, ShortReadIsOutOfRangeByCode) {
  const std::string path = dir_ + "/short.dat";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  std::vector<std::byte> block(8192, std::byte{7});
  ASSERT_EQ(::pwrite(fd, block.data(), block.size(), 0), 8192);
  for (bool pread : {false, true}) {
    internal::IoRingOptions ro;
    ro.io_bytes = 4096;
    ro.force_pread = pread;
    auto ring = internal::IoRing::Create(ro);
    ASSERT_TRUE(ring.ok());
    auto buf = internal::AllocateAligned(16384);
    std::span<std::byte> out(buf.get(), 16384);
    EXPECT_TRUE((*ring)->ReadAt(fd, 0, 8192, out).ok());
    absl::Status s = (*ring)->ReadAt(fd, 4096, 12288, out);
    EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << (pread ? "pread: " : "uring: ") << s;
  }
  ::close(fd);
}

// A Get that meets a truncated file still reads as a clean miss (the code path that now
// keys on OutOfRange), counts one integrity error, and re-extends the file.
TEST_F(DiskRepairTest, TruncatedFileGetIsMissAndFileIsReextended) {
  auto t = DiskTier::Open(Options());
  ASSERT_TRUE(t.ok()) << t.status();
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE((*t)->Put(MakeRecord(i)).ok());
  const uint64_t before = fs::file_size(RecordFile(0));
  ASSERT_EQ(::truncate(RecordFile(0).c_str(), static_cast<off_t>(2 * kPadded)), 0);
  EXPECT_EQ(Read(**t, TestKey(2)).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ((*t)->stats().integrity_errors, 1u);
  EXPECT_EQ(fs::file_size(RecordFile(0)), before);
  auto got = Read(**t, TestKey(1));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, MakeRecord(1));
}

// Failure 13: eviction used to read each victim from disk while holding the index lock,
// so every other put/erase waited for those reads. The victim's read (a Put asked for
// its victims) is slowed to 5 s here; an Erase on another thread finishes while the Put
// is still inside it (with the lock held it could not).
TEST_F(DiskRepairTest, VictimReadRunsWithoutTheIndexLock) {
  auto fs = std::make_shared<kvt::testing::FaultInjectionFs>();
  DiskTierOptions o = Options(4 * kPadded, 4 * kPadded);
  o.file_system = fs;
  auto t = DiskTier::Open(o);
  ASSERT_TRUE(t.ok()) << t.status();
  for (uint64_t i = 0; i < 4; ++i) ASSERT_TRUE((*t)->Put(MakeRecord(i)).ok());
  // The next read is the victim's (the Put below reads nothing else).
  fs->AddRule(kvt::testing::FaultRule{
      .op = kvt::testing::FsOp::kRead, .times = 1, .delay = std::chrono::seconds(5)});
  std::atomic<bool> put_done{false};
  std::thread putter([&] {
    absl::StatusOr<PutResult> put =
        (*t)->Put(MakeRecord(10), PutContext{.keep_victims = true});  // evicts chunk 0
    EXPECT_TRUE(put.ok()) << put.status();
    if (put.ok()) {
      EXPECT_EQ(put->victims.size(), 1u);
    }
    put_done = true;
  });
  while (fs->calls(kvt::testing::FsOp::kRead) == 0) std::this_thread::yield();
  absl::Status s = (*t)->Erase(TestKey(3));
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_FALSE(put_done.load()) << "Erase waited for the victim's read";
  putter.join();
  std::vector<ChunkKey> keys = {TestKey(0), TestKey(3), TestKey(10)};
  EXPECT_THAT(kvt::testing::Contains(**t, keys), ::testing::ElementsAre(false, false, true));
}

}  // namespace
}  // namespace kvt
