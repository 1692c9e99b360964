// kvtierd's ShmRegistry: regions belong to the tenant that attached them, and a slice a
// Put or Get names is checked before any byte of it is touched.
#include "shm_registry.h"

#include <gtest/gtest.h>

#include "kvstore/shm_progress.h"

namespace kvt::daemon {
namespace {

namespace pb = ::kvtier::v1;

pb::ShmSlice Slice(uint64_t region, uint64_t offset, uint64_t length) {
  pb::ShmSlice s;
  s.set_region_id(region);
  s.set_offset(offset);
  s.set_length(length);
  return s;
}

TEST(ShmRegistryTest, RegionsBelongToTheirTenantAndAreBounded) {
  DaemonConfig c;
  c.shm_max_regions = 2;
  c.shm_max_region_bytes = 4ull << 20;
  c.shm_first_region_id = 100;
  ShmRegistry reg(c);
  EXPECT_EQ(reg.Attach(1000, "alice").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reg.Attach(8ull << 20, "alice").status().code(), absl::StatusCode::kInvalidArgument);
  auto a = reg.Attach(1ull << 20, "alice");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->id, 100u);
  EXPECT_EQ(a->bytes, 1ull << 20);
  auto b = reg.Attach(1ull << 20, "bob");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->id, 101u);
  EXPECT_EQ(reg.Attach(1ull << 20, "alice").status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(reg.size(), 2u);
  // Another tenant's region is "not attached", for a slice and for a detach.
  auto foreign = reg.Resolve(Slice(a->id, 0, 4096), "bob");
  EXPECT_EQ(foreign.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(foreign.status().message().find("is not attached"), std::string::npos);
  EXPECT_EQ(reg.Detach(a->id, "bob").code(), absl::StatusCode::kNotFound);
  auto mine = reg.Resolve(Slice(a->id, 4096, 8192), "alice");
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->data(), mine->region->data() + 4096);
  EXPECT_FALSE(mine->progressive);
  // Detached while a transfer holds it: the mapping lives until that transfer drops it.
  EXPECT_TRUE(reg.Detach(a->id, "alice").ok());
  EXPECT_EQ(reg.size(), 1u);
  mine->data()[0] = std::byte{1};
  EXPECT_EQ(reg.Resolve(Slice(a->id, 0, 4096), "alice").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ShmRegistryTest, SlicesAndProgressBlocksMustLieInsideTheRegion) {
  DaemonConfig c;
  c.shm_first_region_id = 7;
  ShmRegistry reg(c);
  auto a = reg.Attach(1ull << 20, "");
  ASSERT_TRUE(a.ok()) << a.status();
  auto outside = reg.Resolve(Slice(7, (1ull << 20) - 100, 4096), "");
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(outside.status().message().find("shm.offset/length"), std::string::npos);
  pb::ShmSlice p = Slice(7, 0, 65536);
  p.set_progressive(true);
  p.set_progress_offset(65536 + 8);  // not 64-byte aligned
  EXPECT_NE(reg.Resolve(p, "").status().message().find("shm.progress_offset"), std::string::npos);
  p.set_progress_offset(4096);  // inside the data
  EXPECT_NE(reg.Resolve(p, "").status().message().find("overlaps"), std::string::npos);
  p.set_progress_offset(1ull << 20);  // past the end: no room for the block
  EXPECT_EQ(reg.Resolve(p, "").status().code(), absl::StatusCode::kInvalidArgument);
  p.set_progress_offset(65536);
  auto ok = reg.Resolve(p, "");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_TRUE(ok->progressive);
  EXPECT_EQ(ok->progress_block(), ok->region->data() + 65536);
  DaemonConfig off;
  off.shm_enabled = false;
  EXPECT_EQ(ShmRegistry(off).Attach(1ull << 20, "").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace kvt::daemon
