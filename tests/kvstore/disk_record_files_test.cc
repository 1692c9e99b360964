// DiskRecordFiles: the disk tier's record files and their I/O, without index or table:
// a write read back verified, a record that does not match its index entry, the files
// found at Open (torn tail, beyond capacity), and a file removed behind its back.
#include "disk_record_files.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "disk_test_util.h"
#include "gtest/gtest.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/record_buffer.h"
#include "store_test_util.h"

namespace kvt::internal {
namespace {

namespace fs = std::filesystem;
using ::kvt::testing::MakeRecord;
using ::kvt::testing::TestKey;

constexpr uint64_t kPadded = kvt::testing::kPaddedRecordBytes;

class DiskRecordFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = kvt::testing::MakeScratchDir("kvt-recfiles");
    ASSERT_FALSE(dir_.empty()) << std::strerror(errno);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  DiskTierOptions Options() const {
    DiskTierOptions o;
    o.dir = dir_;
    o.capacity_bytes = 8 * kPadded;
    o.file_bytes = 4 * kPadded;
    o.io_bytes = 64 << 10;
    o.queue_depth = 4;
    o.index_reserve_bytes = 0;
    return o;
  }
  // The index entry of `record` at `offset` of file `id`.
  static IndexEntry EntryOf(const std::vector<std::byte>& record, uint32_t id, uint64_t offset) {
    auto h = DecodeChunkHeader(record);
    EXPECT_TRUE(h.ok());
    IndexEntry e;
    e.file_id = id;
    e.offset = offset;
    e.record_bytes = record.size();
    e.payload_checksum = h->payload_checksum;
    e.ns = h->ns;
    return e;
  }
  std::string dir_;
};

TEST_F(DiskRecordFilesTest, AWrittenRecordReadsBackVerifiedAndAMismatchIsDataLoss) {
  DiskRecordFiles files(Options());
  ASSERT_TRUE(files.Open().ok());
  auto f = files.Create(0, 4 * kPadded);
  ASSERT_TRUE(f.ok()) << f.status();
  files.Add(*f);
  EXPECT_EQ(files.count(), 1u);
  const std::vector<std::byte> rec = MakeRecord(1);
  // 2 MiB-aligned: only the record's partial last block goes through a bounce buffer.
  RecordBuffer aligned = RecordBuffer::CopyOf(rec);
  const uint64_t tail = rec.size() % 4096;
  ASSERT_GT(tail, 0u);
  uint64_t bounced = 1;
  ASSERT_TRUE(files.Write(**f, kPadded, aligned.span(), &bounced).ok());
  EXPECT_EQ(bounced, tail);
  ASSERT_TRUE(files.Sync(**f).ok());

  const IndexEntry e = EntryOf(rec, 0, kPadded);
  RecordBuffer out = RecordBuffer::Make(kPadded);
  ASSERT_TRUE(files.ReadVerified(TestKey(1), e, **f, out.span(), &bounced).ok());
  EXPECT_EQ(std::memcmp(out.data.get(), rec.data(), rec.size()), 0);
  EXPECT_EQ(bounced, tail);
  // An unaligned destination is bounced whole.
  std::vector<std::byte> unaligned(rec.size() + 1);
  ASSERT_TRUE(
      files.ReadVerified(TestKey(1), e, **f, std::span(unaligned).subspan(1), &bounced).ok());
  EXPECT_EQ(bounced, rec.size());

  IndexEntry wrong_sum = e;
  ++wrong_sum.payload_checksum;
  EXPECT_TRUE(
      absl::IsDataLoss(files.ReadVerified(TestKey(1), wrong_sum, **f, out.span(), &bounced)));
  EXPECT_TRUE(absl::IsDataLoss(files.ReadVerified(TestKey(2), e, **f, out.span(), &bounced)));
  IndexEntry empty_place = e;
  empty_place.offset = 0;  // zeros there: no header
  EXPECT_TRUE(
      absl::IsDataLoss(files.ReadVerified(TestKey(1), empty_place, **f, out.span(), &bounced)));
}

TEST_F(DiskRecordFilesTest, OpenKeepsFilesUpToCapacityAndTheRecordsBeforeATornTail) {
  const std::vector<std::byte> a = MakeRecord(1), b = MakeRecord(2);
  {
    DiskRecordFiles files(Options());
    ASSERT_TRUE(files.Open().ok());
    for (uint32_t id = 0; id < 3; ++id) {  // 3 files of 4 records: one more than capacity
      auto f = files.Create(id, 4 * kPadded);
      ASSERT_TRUE(f.ok()) << f.status();
      files.Add(*f);
    }
    uint64_t bounced = 0;
    auto f0 = files.Find(0);
    ASSERT_NE(f0, nullptr);
    ASSERT_TRUE(files.Write(*f0, 0, a, &bounced).ok());
    ASSERT_TRUE(files.Write(*f0, kPadded, b, &bounced).ok());
    ASSERT_TRUE(files.Sync(*f0).ok());
    EXPECT_TRUE(DiskRecordFiles::StillOnDisk(*f0));
  }
  // A torn tail inside the last block of record b.
  const std::string f0_path = (fs::path(dir_) / "records" / "rec-000000.dat").string();
  const uint64_t cut = kPadded + b.size() - 100;
  ASSERT_NE(cut % 4096, 0u);
  ASSERT_EQ(::truncate(f0_path.c_str(), static_cast<off_t>(cut)), 0);

  DiskRecordFiles files(Options());
  ASSERT_TRUE(files.Open().ok());
  auto found = files.OpenExisting(8 * kPadded);
  ASSERT_TRUE(found.ok()) << found.status();
  ASSERT_EQ(found->files.size(), 2u);  // rec-2 would pass capacity: removed
  EXPECT_EQ(found->next_id, 3u);
  EXPECT_FALSE(fs::exists(fs::path(dir_) / "records" / "rec-000002.dat"));
  EXPECT_EQ(found->files[0]->intact_end, cut);
  EXPECT_EQ(found->files[0]->size, 2 * kPadded);  // re-extended to a whole block
  EXPECT_EQ(fs::file_size(f0_path) % 4096, 0u);

  EXPECT_TRUE(files.CheckIndexed(TestKey(1), EntryOf(a, 0, 0), /*verify_header=*/true).ok());
  EXPECT_TRUE(absl::IsDataLoss(
      files.CheckIndexed(TestKey(2), EntryOf(b, 0, kPadded), /*verify_header=*/false)));
  EXPECT_TRUE(absl::IsNotFound(
      files.CheckIndexed(TestKey(1), EntryOf(a, 2, 0), /*verify_header=*/false)));  // no file
  EXPECT_TRUE(absl::IsOutOfRange(
      files.CheckIndexed(TestKey(1), EntryOf(a, 1, 4 * kPadded), /*verify_header=*/false)));
  // The header at the offset names another key: dropped when headers are verified.
  EXPECT_TRUE(
      absl::IsDataLoss(files.CheckIndexed(TestKey(3), EntryOf(a, 0, 0), /*verify_header=*/true)));
}

TEST_F(DiskRecordFilesTest, AFileRemovedBehindItsBackIsNoLongerOnDisk) {
  DiskRecordFiles files(Options());
  ASSERT_TRUE(files.Open().ok());
  auto f = files.Create(5, kPadded);
  ASSERT_TRUE(f.ok()) << f.status();
  files.Add(*f);
  ASSERT_EQ(::unlink((*f)->path.c_str()), 0);
  EXPECT_FALSE(DiskRecordFiles::StillOnDisk(**f));
  EXPECT_TRUE(files.Remove(5));
  EXPECT_FALSE(files.Remove(5));
  EXPECT_EQ(files.Find(5), nullptr);
}

}  // namespace
}  // namespace kvt::internal
