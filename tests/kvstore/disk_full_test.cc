// The disk tier on a real, small filesystem that fills up (issue 11, failures 1 and 11):
// a 40 MiB tmpfs, record files preallocated, then the rest of the filesystem filled
// with a ballast file so the RocksDB index (WAL, info LOG, flushes) gets ENOSPC.
// Must: puts fail with ResourceExhausted (counted), stored chunks keep reading back,
// the index recovers and puts succeed again once space is freed, with no reopen, and
// closing the tier never aborts the process.
//
// Needs mount(2) (root or CAP_SYS_ADMIN); skipped with a message otherwise. The same
// sequence runs without privileges through the fault-injecting file system in
// disk_fault_test.cc.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "disk_test_util.h"
#include "gtest/gtest.h"
#include "kvstore/disk_tier.h"
#include "store_test_util.h"

namespace kvt {
namespace {

namespace fs = std::filesystem;
using ::kvt::testing::MakeRecord;
using ::kvt::testing::TestKey;

class DiskFullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mnt_ = kvt::testing::MakeScratchDir("kvt-full");
    ASSERT_FALSE(mnt_.empty()) << std::strerror(errno);
    if (::mount("tmpfs", mnt_.c_str(), "tmpfs", 0, "size=40m") != 0) {
      const int err = errno;
      fs::remove(mnt_);
      mnt_.clear();
      GTEST_SKIP() << "cannot mount a tmpfs (" << std::strerror(err)
                   << "); needs root or CAP_SYS_ADMIN";
    }
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) ::umount2(mnt_.c_str(), MNT_DETACH);
    if (!mnt_.empty()) fs::remove(mnt_);
  }

  // Writes zeros to `path` until the filesystem refuses (ENOSPC). Returns bytes written.
  static uint64_t FillFilesystem(const std::string& path) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return 0;
    std::vector<char> buf(64 << 10, 0);
    uint64_t total = 0;
    size_t chunk = buf.size();
    while (chunk > 0) {
      const ssize_t n = ::write(fd, buf.data(), chunk);
      if (n > 0) {
        total += static_cast<uint64_t>(n);
      } else {
        chunk /= 2;  // fill the last partial pages too
      }
    }
    ::fsync(fd);
    ::close(fd);
    return total;
  }

  DiskTierOptions Options() const {
    DiskTierOptions o;
    o.dir = mnt_ + "/disk";
    o.capacity_bytes = 64ull << 20;  // more than the filesystem holds
    o.file_bytes = 8ull << 20;
    o.direct_io = false;  // tmpfs refuses O_DIRECT
    o.index_reserve_bytes = reserve_;
    return o;
  }

  static absl::StatusOr<std::vector<std::byte>> Read(Tier& t, const ChunkKey& key) {
    return kvt::testing::ReadRecord(t, key);
  }

  // Runs the fill / full / freed / close / reopen sequence in a child process.
  void FullThenFreed();

  std::string mnt_;
  bool mounted_ = false;
  uint64_t reserve_ = 16ull << 20;
};

// The first 40 chunks are 256 KiB; later ones are 1 KiB + header (one 4 KiB extent).
uint32_t Tokens(uint64_t seed) { return seed < 40 ? 256 : 1; }

// The whole sequence runs in a child process, so an abort inside RocksDB (the failure
// this test is about) is reported as a test failure instead of killing the test binary.
void DiskFullTest::FullThenFreed() {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto fail = [](const std::string& why) {
      std::fprintf(stderr, "child: %s\n", why.c_str());
      std::fflush(stderr);
      ::_exit(3);
    };
    DiskTierOptions o = Options();
    std::vector<uint64_t> stored;
    {
      auto t = DiskTier::Open(o);
      if (!t.ok()) fail(t.status().ToString());
      // Fill the record files that fit (fallocate ENOSPC stops new files).
      uint64_t seed = 0;
      for (; seed < 40; ++seed) {
        if ((*t)->Put(MakeRecord(seed, Tokens(seed))).ok()) stored.push_back(seed);
      }
      if (stored.empty()) fail("nothing stored before the filesystem filled");
      // Fill the filesystem itself: the record files are preallocated, so the index is
      // the only writer left to meet ENOSPC.
      FillFilesystem(mnt_ + "/ballast");
      // Small records (4 KiB on disk) so the index, not the record files, runs out first:
      // RocksDB preallocates its WAL, so it takes many index writes to reach ENOSPC.
      int exhausted = 0, other = 0;
      for (int i = 0; i < 200000 && exhausted < 200; ++i, ++seed) {
        absl::Status s = (*t)->Put(MakeRecord(seed, Tokens(seed)));
        if (s.ok()) {
          stored.push_back(seed);
        } else if (absl::IsResourceExhausted(s) || (reserve_ == 0 && absl::IsUnavailable(s))) {
          ++exhausted;  // without the reserve: also "stopped after a write error"
        } else {
          ++other;
          std::fprintf(stderr, "child: put %lu: %s\n", static_cast<unsigned long>(seed),
                       s.ToString().c_str());
        }
      }
      if (exhausted == 0) fail("no put saw ResourceExhausted while the filesystem was full");
      if (other != 0)
        fail(std::to_string(other) + " puts failed with a code other than ResourceExhausted");
      if ((*t)->extra_stats().enospc == 0) fail("enospc counter stayed 0");
      // Stored chunks that are still indexed read back identical while the disk is full.
      std::vector<ChunkKey> keys;
      for (uint64_t s : stored) keys.push_back(TestKey(s));
      const std::vector<bool> present = kvt::testing::Contains(**t, keys);
      int readable = 0;
      for (size_t i = 0; i < stored.size(); ++i) {
        if (!present[i]) continue;
        auto got = Read(**t, keys[i]);
        if (!got.ok()) fail("read while full: " + got.status().ToString());
        if (*got != MakeRecord(stored[i], Tokens(stored[i]))) fail("wrong bytes while full");
        ++readable;
      }
      if (readable == 0) fail("nothing readable while full");
      // Space comes back: puts succeed again with the same tier object. RocksDB's own
      // recovery polls free space every 5 s, so the first success may take that long
      // (bounded here at 60 s; this is a liveness bound, not a timing assertion).
      fs::remove(mnt_ + "/ballast");
      bool resumed = false;
      for (int i = 0; i < 6000 && !resumed; ++i, ++seed) {
        absl::Status s = (*t)->Put(MakeRecord(seed, Tokens(seed)));
        if (s.ok()) {
          resumed = true;
          stored.push_back(seed);
        } else if (!absl::IsResourceExhausted(s) && !(reserve_ == 0 && absl::IsUnavailable(s))) {
          fail("put after space was freed: " + s.ToString());
        } else {
          ::usleep(10000);
        }
      }
      if (!resumed) fail("puts did not resume within 60 s of space being freed");
      if ((*t)->extra_stats().index_write_stopped) fail("index still marked stopped");
      if (reserve_ == 0 && (*t)->extra_stats().index_reopens == 0) {
        fail("without the reserve the index should have stopped and been reopened");
      }
      if (reserve_ > 0 && (*t)->extra_stats().index_low_space_refusals == 0) {
        fail("the reserve refused nothing");
      }
      int ok_after = 0;
      for (int i = 0; i < 20; ++i, ++seed) {
        absl::Status s = (*t)->Put(MakeRecord(seed, Tokens(seed)));
        if (s.ok()) {
          ++ok_after;
          stored.push_back(seed);
        }
      }
      if (ok_after < 19)
        fail("only " + std::to_string(ok_after) + " of 20 puts succeeded after space was freed");
      // A last brief full moment right before close (failure 11: shutdown after ENOSPC).
      FillFilesystem(mnt_ + "/ballast");
      for (int i = 0; i < 20; ++i, ++seed) (void)(*t)->Put(MakeRecord(seed, Tokens(seed)));
      (void)(*t)->FlushAccessTimes();
      fs::remove(mnt_ + "/ballast");
    }  // close: must not abort
    // Reopen: the chunks acknowledged after recovery are there and verify.
    auto t = DiskTier::Open(o);
    if (!t.ok()) fail("reopen: " + t.status().ToString());
    const uint64_t last = stored.back();
    auto got = Read(**t, TestKey(last));
    if (!got.ok()) fail("reopen read: " + got.status().ToString());
    if (*got != MakeRecord(last, Tokens(last))) fail("wrong bytes after reopen");
    ::_exit(0);
  }
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  ASSERT_FALSE(WIFSIGNALED(wstatus))
      << "the tier killed the process with signal " << WTERMSIG(wstatus);
  ASSERT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0) << "see the child's message above";
}

TEST_F(DiskFullTest, FullFilesystemIsResourceExhaustedThenRecoversWithoutRestart) {
  FullThenFreed();
}

// The same with the reserve off: RocksDB itself meets ENOSPC (WAL, flush). The index
// stops, is reopened once space is back (not DB::Resume(), which aborts in 7.8 when the
// WAL failed), and the process never dies.
TEST_F(DiskFullTest, WithoutReserveTheIndexStopsAndIsReopenedAfterSpaceReturns) {
  reserve_ = 0;
  FullThenFreed();
}

// Failure 11: a burst of puts while the filesystem is full (RocksDB's info LOG and WAL
// meet ENOSPC), space back, then a clean close must not abort, and every put that was
// acknowledged reads back after a reopen.
TEST_F(DiskFullTest, CloseAfterBriefFullMomentDoesNotAbort) {
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto fail = [](const std::string& why) {
      std::fprintf(stderr, "child: %s\n", why.c_str());
      std::fflush(stderr);
      ::_exit(3);
    };
    DiskTierOptions o = Options();
    std::vector<uint64_t> acked;
    {
      auto t = DiskTier::Open(o);
      if (!t.ok()) fail(t.status().ToString());
      for (uint64_t seed = 40; seed < 50; ++seed) {
        if ((*t)->Put(MakeRecord(seed, 1)).ok()) acked.push_back(seed);
      }
      FillFilesystem(mnt_ + "/ballast");
      // At most 1,010 one-extent chunks: they fit in the first 8 MiB record file, so
      // nothing is evicted and every acknowledged chunk must survive.
      for (uint64_t seed = 50; seed < 1050; ++seed) {
        absl::Status s = (*t)->Put(MakeRecord(seed, 1));
        if (s.ok()) acked.push_back(seed);
      }
      if ((*t)->stats().evictions != 0) fail("unexpected evictions");
      fs::remove(mnt_ + "/ballast");
    }  // close with space back: must not abort
    auto t = DiskTier::Open(o);
    if (!t.ok()) fail("reopen: " + t.status().ToString());
    for (uint64_t seed : acked) {
      auto got = Read(**t, TestKey(seed));
      if (!got.ok())
        fail("acknowledged chunk " + std::to_string(seed) + ": " + got.status().ToString());
      if (*got != MakeRecord(seed, 1)) fail("wrong bytes after reopen");
    }
    ::_exit(0);
  }
  int wstatus = 0;
  ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
  ASSERT_FALSE(WIFSIGNALED(wstatus))
      << "closing the tier killed the process with signal " << WTERMSIG(wstatus);
  ASSERT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0) << "see the child's message above";
}

}  // namespace
}  // namespace kvt
