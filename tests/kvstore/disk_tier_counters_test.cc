// DiskTierCounters: what each outcome counts in the disk tier's stats.
#include "disk_tier_counters.h"

#include "gtest/gtest.h"

namespace kvt::internal {
namespace {

TEST(DiskTierCountersTest, OnlyAClientsReadCountsAsAHitOrAMiss) {
  DiskTierCounters c;
  c.ReadEnded(absl::OkStatus(), /*client_read=*/true, 4000);
  c.ReadEnded(absl::OkStatus(), /*client_read=*/false, 4000);  // a victim, a copy
  c.ReadEnded(absl::DataLossError("checksum"), /*client_read=*/true, 4000);
  c.ReadEnded(absl::InternalError("EIO"), /*client_read=*/false, 4000);
  c.Miss();
  EXPECT_EQ(c.tier().hits, 1u);
  EXPECT_EQ(c.tier().bytes_out, 4000u);
  EXPECT_EQ(c.tier().misses, 2u);
  EXPECT_EQ(c.tier().integrity_errors, 1u);
  EXPECT_EQ(c.tier().io_errors, 1u);
}

TEST(DiskTierCountersTest, AnEnospcIsAnIoErrorAndCountsAsEnospc) {
  DiskTierCounters c;
  c.IoError(absl::ResourceExhaustedError("ENOSPC"));
  c.IoError(absl::InternalError("EIO"));
  c.IoError();
  c.NoMoreFiles();
  EXPECT_EQ(c.tier().io_errors, 3u);
  EXPECT_EQ(c.extra().enospc, 2u);
}

TEST(DiskTierCountersTest, WritesLostRecordsAndCommitsAreCounted) {
  DiskTierCounters c;
  c.Put(4000, /*copied=*/96);
  c.RecordRead(4096);
  c.VictimReads(2);
  c.Evicted(3);
  c.Expired(4);
  c.AdmissionRejected();
  c.DroppedOnOpen(5);
  c.FileLost(6);
  c.GroupCommitted(0);  // an empty commit is no commit
  c.GroupCommitted(7);
  EXPECT_EQ(c.tier().puts, 1u);
  EXPECT_EQ(c.tier().bytes_in, 4000u);
  EXPECT_EQ(c.tier().copy_bytes, 96u + 4096u);
  EXPECT_EQ(c.extra().record_reads, 1u);
  EXPECT_EQ(c.extra().victim_reads, 2u);
  EXPECT_EQ(c.tier().evictions, 3u);
  EXPECT_EQ(c.tier().ttl_expired, 4u);
  EXPECT_EQ(c.tier().admission_rejects, 1u);
  EXPECT_EQ(c.extra().dropped_on_open, 5u);
  EXPECT_EQ(c.extra().files_lost, 1u);
  EXPECT_EQ(c.tier().integrity_errors, 11u);
  EXPECT_EQ(c.extra().group_commits, 1u);
  EXPECT_EQ(c.extra().group_committed_records, 7u);
}

}  // namespace
}  // namespace kvt::internal
