// The disk tier and the tiered store tested through the fault-injecting file-system
// layer (fault_injection_fs.h): EIO, ENOSPC, short reads, torn writes at any offset and
// slow I/O. Whatever is injected, a Get returns the exact bytes that were stored or a
// clean miss, never other bytes, and the failure is counted.
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "disk_test_util.h"
#include "fault_injection_fs.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/disk_tier.h"
#include "kvstore/host_tier.h"
#include "kvstore/tiered_store.h"
#include "store_test_util.h"

namespace kvt {
namespace {

namespace fs = std::filesystem;
using ::kvt::testing::FaultInjectionFs;
using ::kvt::testing::FaultRule;
using ::kvt::testing::FsOp;
using ::kvt::testing::GetRecord;
using ::kvt::testing::MakeRecord;
using ::kvt::testing::PutRecord;
using ::kvt::testing::TestKey;

constexpr uint64_t kPadded = kvt::testing::kPaddedRecordBytes;

class DiskFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = kvt::testing::MakeScratchDir("kvt-fault");
    ASSERT_FALSE(dir_.empty()) << std::strerror(errno);
    faults_ = std::make_shared<FaultInjectionFs>();
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  DiskTierOptions Options(uint64_t capacity = 64 * kPadded) {
    DiskTierOptions o;
    o.dir = dir_;
    o.capacity_bytes = capacity;
    o.file_bytes = 16 * kPadded;
    o.io_bytes = 64 << 10;
    o.queue_depth = 4;
    o.file_system = faults_;
    return o;
  }
  std::unique_ptr<DiskTier> Open() {
    auto t = DiskTier::Open(Options());
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::move(*t) : nullptr;
  }
  static absl::StatusOr<std::vector<std::byte>> Read(Tier& t, const ChunkKey& key) {
    return kvt::testing::ReadRecord(t, key);
  }
  std::string dir_;
  std::shared_ptr<FaultInjectionFs> faults_;
};

TEST_F(DiskFaultTest, EioOnReadIsACleanCountedMiss) {
  auto t = Open();
  ASSERT_NE(t, nullptr);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(t->Put(MakeRecord(i)).ok());
  faults_->AddRule({.op = FsOp::kRead, .times = 1, .error = EIO});
  EXPECT_EQ(Read(*t, TestKey(1)).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(faults_->injected(FsOp::kRead), 1u);
  EXPECT_EQ(t->stats().integrity_errors, 1u);
  for (uint64_t i : {0u, 2u}) {
    auto got = Read(*t, TestKey(i));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, MakeRecord(i));
  }
}

TEST_F(DiskFaultTest, EioOnWriteOrSyncStoresNothing) {
  auto t = Open();
  ASSERT_NE(t, nullptr);
  ASSERT_TRUE(t->Put(MakeRecord(0)).ok());
  faults_->AddRule({.op = FsOp::kWrite, .times = 1, .error = EIO});
  faults_->AddRule({.op = FsOp::kSync, .times = 1, .error = EIO});
  EXPECT_EQ(t->Put(MakeRecord(1)).code(), absl::StatusCode::kDataLoss);  // write EIO
  EXPECT_EQ(t->Put(MakeRecord(2)).code(), absl::StatusCode::kDataLoss);  // sync EIO
  std::vector<ChunkKey> keys = {TestKey(0), TestKey(1), TestKey(2)};
  EXPECT_THAT(kvt::testing::Contains(*t, keys), ::testing::ElementsAre(true, false, false));
  EXPECT_EQ(t->stats().io_errors, 2u);
  EXPECT_EQ(t->stats().used_bytes, kPadded);
  ASSERT_TRUE(t->Put(MakeRecord(1)).ok());  // rules spent: the extent was freed and reused
  t.reset();
  faults_->ClearRules();
  t = Open();
  ASSERT_NE(t, nullptr);
  EXPECT_THAT(kvt::testing::Contains(*t, keys), ::testing::ElementsAre(true, true, false));
  EXPECT_EQ(t->extra_stats().dropped_on_open, 0u);
}

TEST_F(DiskFaultTest, EnospcOnWriteAndSyncIsResourceExhaustedAndCounted) {
  auto t = Open();
  ASSERT_NE(t, nullptr);
  faults_->AddRule({.op = FsOp::kWrite, .times = 1, .error = ENOSPC});
  faults_->AddRule({.op = FsOp::kSync, .times = 1, .error = ENOSPC});
  EXPECT_EQ(t->Put(MakeRecord(0)).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(t->Put(MakeRecord(1)).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(t->extra_stats().enospc, 2u);
  EXPECT_EQ(t->stats().chunks, 0u);
  ASSERT_TRUE(t->Put(MakeRecord(0)).ok());
}

// A short read anywhere inside a record: a miss, never a partial record, and counted.
TEST_F(DiskFaultTest, ShortReadAtAnyLengthIsACleanMiss) {
  auto t = Open();
  ASSERT_NE(t, nullptr);
  const std::vector<uint64_t> cuts = {0, 1, 128, 4096, 65536, 65537, kPadded - 4096};
  for (uint64_t i = 0; i < cuts.size(); ++i) ASSERT_TRUE(t->Put(MakeRecord(i)).ok());
  for (uint64_t i = 0; i < cuts.size(); ++i) {
    faults_->AddRule({.op = FsOp::kRead, .times = 1, .short_read_bytes = cuts[i]});
    std::vector<std::byte> out(MakeRecord(i).size(), std::byte{0});
    auto got = t->Get(TestKey(i), out);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << "cut at " << cuts[i];
  }
  EXPECT_EQ(faults_->injected(FsOp::kRead), cuts.size());
  EXPECT_EQ(t->stats().integrity_errors, cuts.size());
  EXPECT_EQ(t->stats().chunks, 0u);
}

// A torn write the device reports as successful, at offsets inside the header, at block
// boundaries and mid-block: the Put is acknowledged, but no Get ever returns the record
// (the checksums catch it), before or after a restart.
TEST_F(DiskFaultTest, TornWriteAtAnyOffsetIsNeverReadBack) {
  const std::vector<uint64_t> tears = {0,    1,    100,  127,   128,
                                       4095, 4096, 4097, 70000, kPadded - 4096 - 1};
  {
    auto t = Open();
    ASSERT_NE(t, nullptr);
    for (uint64_t i = 0; i < tears.size(); ++i) {
      faults_->AddRule({.op = FsOp::kWrite, .times = 1, .torn_write_bytes = tears[i]});
      ASSERT_TRUE(t->Put(MakeRecord(i)).ok()) << "tear at " << tears[i];
      ASSERT_TRUE(t->Put(MakeRecord(100 + i)).ok());  // an intact neighbour
    }
    EXPECT_EQ(faults_->injected(FsOp::kWrite), tears.size());
    for (uint64_t i = 0; i < tears.size(); ++i) {
      EXPECT_EQ(Read(*t, TestKey(i)).status().code(), absl::StatusCode::kDataLoss)
          << "tear at " << tears[i];
      auto got = Read(*t, TestKey(100 + i));
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(*got, MakeRecord(100 + i));
    }
    EXPECT_EQ(t->stats().integrity_errors, tears.size());
  }
  // Same tears, but reopened before any Get: Open's header check or the first Get's
  // payload check drops each one.
  fs::remove_all(dir_);
  fs::create_directories(dir_);
  {
    auto t = Open();
    ASSERT_NE(t, nullptr);
    for (uint64_t i = 0; i < tears.size(); ++i) {
      faults_->AddRule({.op = FsOp::kWrite, .times = 1, .torn_write_bytes = tears[i]});
      ASSERT_TRUE(t->Put(MakeRecord(i)).ok());
    }
  }
  auto t = Open();
  ASSERT_NE(t, nullptr);
  for (uint64_t i = 0; i < tears.size(); ++i) {
    // Dropped by Open's header check (a miss) or by the first Get's payload check
    // (DataLoss): never bytes.
    const absl::StatusCode code = Read(*t, TestKey(i)).status().code();
    EXPECT_TRUE(code == absl::StatusCode::kNotFound || code == absl::StatusCode::kDataLoss)
        << "tear at " << tears[i] << ": " << code;
  }
  EXPECT_EQ(t->stats().chunks, 0u);
}

// A torn write that fails (EIO after part of the record reached the file) stores nothing.
TEST_F(DiskFaultTest, TornWriteWithErrorStoresNothing) {
  auto t = Open();
  ASSERT_NE(t, nullptr);
  faults_->AddRule({.op = FsOp::kWrite, .times = 1, .error = EIO, .torn_write_bytes = 5000});
  EXPECT_EQ(t->Put(MakeRecord(0)).code(), absl::StatusCode::kDataLoss);
  std::vector<ChunkKey> k = {TestKey(0)};
  EXPECT_THAT(kvt::testing::Contains(*t, k), ::testing::ElementsAre(false));
  ASSERT_TRUE(t->Put(MakeRecord(1)).ok());
  auto got = Read(*t, TestKey(1));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, MakeRecord(1));
}

// Slow I/O: a Get whose read takes 2 s does not hold up a Put and an Erase of other
// chunks (the tier's locks are not held across I/O). Ordering is asserted, not timing.
TEST_F(DiskFaultTest, SlowReadDoesNotBlockOtherWriters) {
  auto t = Open();
  ASSERT_NE(t, nullptr);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_TRUE(t->Put(MakeRecord(i)).ok());
  faults_->AddRule({.op = FsOp::kRead, .times = 1, .delay = std::chrono::milliseconds(2000)});
  std::atomic<bool> read_done{false}, writers_done_first{false};
  std::thread reader([&] {
    auto got = Read(*t, TestKey(0));
    EXPECT_TRUE(got.ok()) << got.status();
    if (got.ok()) {
      EXPECT_EQ(*got, MakeRecord(0));
    }
    read_done = true;
  });
  while (faults_->injected(FsOp::kRead) == 0)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(t->Put(MakeRecord(10)).ok());
  ASSERT_TRUE(t->Erase(TestKey(1)).ok());
  writers_done_first = !read_done.load();
  reader.join();
  EXPECT_TRUE(writers_done_first.load()) << "Put/Erase waited for a slow read";
}

// The tiered store (host over disk) through the same layer: a disk that fails reads
// and writes never makes the store return wrong bytes, failures are counted, and the
// host tier keeps serving what it holds.
TEST_F(DiskFaultTest, TieredStoreServesHostAndMissesCleanlyWhenDiskFails) {
  HostTierOptions ho;
  ho.capacity_bytes = 4 * kPadded;
  ho.use_pinned_memory = false;
  Tier* host = nullptr;
  Tier* disk = nullptr;
  std::vector<TierFactory> tiers;
  tiers.push_back(kvt::testing::Capturing(HostTier::Factory(ho), &host));
  tiers.push_back(kvt::testing::Capturing(DiskTier::Factory(Options()), &disk));
  auto store = TieredStore::Create(std::move(tiers), TieredStoreOptions{});
  ASSERT_TRUE(store.ok()) << store.status();
  TieredStore& s = **store;

  // 12 chunks: all reach disk; only the last few stay in host memory.
  for (uint64_t i = 0; i < 12; ++i) ASSERT_TRUE(PutRecord(s, MakeRecord(i)).ok());
  s.Flush();
  std::vector<uint64_t> on_host, disk_only;
  for (uint64_t i = 0; i < 12; ++i) {
    std::vector<ChunkKey> k = {TestKey(i)};
    (kvt::testing::Contains(*host, k)[0] ? on_host : disk_only).push_back(i);
  }
  ASSERT_FALSE(on_host.empty());
  ASSERT_GE(disk_only.size(), 4u);

  // Every disk read fails with EIO: disk-only chunks are lost (DataLoss, never bytes),
  // host chunks hit.
  faults_->AddRule({.op = FsOp::kRead, .error = EIO});
  for (uint64_t i : disk_only) {
    EXPECT_EQ(GetRecord(s, TestKey(i)).status().code(), absl::StatusCode::kDataLoss) << i;
  }
  for (uint64_t i : on_host) {
    auto got = GetRecord(s, TestKey(i));
    ASSERT_TRUE(got.ok()) << i << ": " << got.status();
    EXPECT_EQ(*got, MakeRecord(i));
  }
  EXPECT_EQ(disk->stats().integrity_errors, disk_only.size());

  // Writes fail with ENOSPC: puts still land in host memory and read back; the failed
  // write-backs are counted.
  faults_->ClearRules();
  faults_->AddRule({.op = FsOp::kWrite, .error = ENOSPC});
  const uint64_t errors_before = s.stats().writeback_errors;
  for (uint64_t i = 100; i < 103; ++i) ASSERT_TRUE(PutRecord(s, MakeRecord(i)).ok());
  s.Flush();
  EXPECT_EQ(s.stats().writeback_errors, errors_before + 3);
  for (uint64_t i = 100; i < 103; ++i) {
    auto got = GetRecord(s, TestKey(i));
    ASSERT_TRUE(got.ok()) << i << ": " << got.status();
    EXPECT_EQ(*got, MakeRecord(i));
  }
  // Torn writes reported as successful: whatever reached the disk is never served.
  faults_->ClearRules();
  faults_->AddRule({.op = FsOp::kWrite, .torn_write_bytes = 3000});
  for (uint64_t i = 200; i < 212; ++i) ASSERT_TRUE(PutRecord(s, MakeRecord(i)).ok());
  s.Flush();
  faults_->ClearRules();
  for (uint64_t i = 200; i < 212; ++i) {
    auto got = GetRecord(s, TestKey(i));
    if (got.ok()) {
      EXPECT_EQ(*got, MakeRecord(i)) << i;  // served from host memory
    } else {
      EXPECT_TRUE(absl::IsNotFound(got.status()) || absl::IsDataLoss(got.status())) << i;
    }
  }
  EXPECT_GT(disk->stats().integrity_errors, disk_only.size());
}

}  // namespace
}  // namespace kvt
