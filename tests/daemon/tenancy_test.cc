// kvtierd's tenancy, in process: the Catalog (namespace owners, persisted) and Tenancy,
// which answers what a tenant sees from the store (the tiers' indexes hold each chunk's
// namespace: ChunkStat::ns). A real host + disk store in a temporary directory.
#include "tenancy.h"

#include <gtest/gtest.h>

#include <fstream>

#include "catalog.h"
#include "daemon_harness.h"
#include "kvstore/store_factory.h"

namespace kvt::testing {
namespace {

using daemon::Admission;
using daemon::Catalog;
using daemon::Tenancy;

class TenancyTest : public ::testing::Test {
 protected:
  void SetUp() override { Open(); }

  // (Re)opens the store and the catalog over the same directory, as a daemon restart does.
  void Open() {
    tenancy_.reset();
    store_.reset();
    catalog_.reset();
    StoreOptions so;
    so.host.capacity_bytes = 1ull << 20;  // 3 records of 256 KiB
    so.host.cache_policy.name = "lru";
    DiskTierOptions& d = so.disk.emplace();
    d.dir = dir_.path() + "/disk";
    d.capacity_bytes = 64ull << 20;
    d.file_bytes = 16ull << 20;
    d.direct_io = false;
    d.cache_policy.name = "lru";
    so.store.placement.write_through = WriteThrough::kLocal;
    auto store = OpenTieredStore(so);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    auto catalog = Catalog::Open(dir_.path() + "/namespaces.log");
    ASSERT_TRUE(catalog.ok()) << catalog.status();
    catalog_ = std::move(*catalog);
    tenancy_ = std::make_unique<Tenancy>(catalog_.get(), store_.get());
  }

  void PutAll(const Chain& c, const std::string& tenant) {
    for (const auto& r : c.records) {
      auto h = DecodeChunkHeader(r);
      ASSERT_TRUE(h.ok()) << h.status();
      auto a = tenancy_->Admit(*h, tenant);
      ASSERT_TRUE(a.ok()) << a.status();
      ASSERT_EQ(*a, Admission::kStore);
      ASSERT_TRUE(store_->Write({.record = r, .ack = PutAck::kDurable}).ok());
    }
  }

  TempDir dir_;
  std::unique_ptr<TieredStore> store_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<Tenancy> tenancy_;
  const NamespaceId alice_ns_ = TestNamespace("m", "alice");
  const NamespaceId bob_ns_ = TestNamespace("m", "bob");
};

TEST_F(TenancyTest, ChunksEvictedToDiskAndOnDiskAfterARestartAreVisibleToTheirTenantOnly) {
  Chain a = MakeChain(alice_ns_, 8, 256, 1);
  PutAll(a, "alice");
  store_->Flush();
  LookupResult mine = tenancy_->Lookup(a.keys, "alice", {.per_key = true});
  EXPECT_EQ(mine.num_leading_hits, 8u);
  ASSERT_EQ(mine.tier_kind.size(), 8u);
  EXPECT_EQ(mine.tier_kind[0], TierKind::kDisk) << "evicted from the host tier";
  EXPECT_EQ(mine.tier_kind[7], TierKind::kHost);
  for (const NamespaceId& ns : mine.ns) EXPECT_EQ(ns, alice_ns_);
  EXPECT_EQ(tenancy_->Lookup(a.keys, "bob", {.per_key = true}).num_leading_hits, 0u);

  Open();  // a restart: nothing but the disk tier and the namespace log survive
  LookupResult again = tenancy_->Lookup(a.keys, "alice", {.pin = true});
  EXPECT_EQ(again.num_leading_hits, 8u);
  EXPECT_TRUE(again.lease);
  for (const ChunkKey& k : a.keys)
    EXPECT_EQ(tenancy_->VisibleSize(k, "alice"), a.records[0].size());
  LookupResult other = tenancy_->Lookup(a.keys, "bob", {.per_key = true, .pin = true});
  EXPECT_EQ(other.num_leading_hits, 0u);
  EXPECT_FALSE(other.lease) << "another tenant's chunk is never pinned";
  for (size_t i = 0; i < a.keys.size(); ++i) {
    EXPECT_EQ(other.tier_index[i], kNoTier);
    EXPECT_EQ(other.record_bytes[i], 0u);
    EXPECT_TRUE(other.ns[i].is_zero());
    EXPECT_EQ(tenancy_->VisibleSize(a.keys[i], "bob"), 0u);
  }
}

TEST_F(TenancyTest, NoLookupAnswersWithAnotherTenantsChunk) {
  Chain a = MakeChain(alice_ns_, 3, 16, 2);
  Chain b = MakeChain(bob_ns_, 2, 16, 3);
  PutAll(a, "alice");
  PutAll(b, "bob");
  const std::vector<ChunkKey> mixed = {a.keys[0], a.keys[1], b.keys[0], a.keys[2], b.keys[1]};
  LookupResult r = tenancy_->Lookup(mixed, "alice", {.per_key = true, .pin = true});
  EXPECT_EQ(r.num_leading_hits, 2u) << "the leading run stops at bob's chunk";
  const std::vector<bool> want = {true, true, false, true, false};
  for (size_t i = 0; i < mixed.size(); ++i) {
    EXPECT_EQ(r.tier_index[i] != kNoTier, want[i]) << i;
    EXPECT_EQ(r.ns[i], want[i] ? alice_ns_ : NamespaceId{}) << i;
  }
  // Listing and evicting through the filter select only the caller's namespaces.
  StoreListOptions lo;
  std::string bob = "bob";
  lo.visible = tenancy_->Filter(bob);
  auto page = store_->List(lo);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->chunks.size(), 2u);
  for (const auto& c : page->chunks) EXPECT_EQ(c.info.ns, bob_ns_);
  // Bytes read from a tier are checked again against the caller.
  EXPECT_TRUE(tenancy_->RecordVisible(a.records[0], a.keys[0], "alice"));
  EXPECT_FALSE(tenancy_->RecordVisible(a.records[0], a.keys[0], "bob"));
  EXPECT_FALSE(tenancy_->RecordVisible(a.records[0], a.keys[1], "alice")) << "another key";
  EXPECT_FALSE(tenancy_->RecordVisible(std::vector<std::byte>(200), a.keys[0], "alice"));
}

TEST_F(TenancyTest, AdmitClaimsTheNamespaceAndRefusesAnotherTenantsKeyOrNamespace) {
  Chain a = MakeChain(alice_ns_, 1, 16, 4);
  PutAll(a, "alice");
  auto h = DecodeChunkHeader(a.records[0]);
  ASSERT_TRUE(h.ok());
  // Alice's namespace is hers: bob cannot put into it.
  EXPECT_EQ(tenancy_->Admit(*h, "bob").status().code(), absl::StatusCode::kPermissionDenied);
  // Bob's header naming alice's key (a forged header): acknowledged, not stored.
  ChunkHeader forged = *h;
  forged.ns = bob_ns_;
  auto f = tenancy_->Admit(forged, "bob");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*f, Admission::kConflict);
  // Alice putting her own chunk again is a plain store.
  auto again = tenancy_->Admit(*h, "alice");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, Admission::kStore);
}

TEST(CatalogTest, ClaimsPersistAndUnownedNamespacesBelongToTheUnownedTenantOnly) {
  TempDir dir;
  const std::string log = dir.path() + "/namespaces.log";
  const NamespaceId ns = TestNamespace("m", "alice"), other = TestNamespace("m", "bob");
  {
    auto c = Catalog::Open(log);
    ASSERT_TRUE(c.ok()) << c.status();
    ASSERT_TRUE((*c)->Claim(ns, "alice").ok());
    EXPECT_TRUE((*c)->Claim(ns, "alice").ok()) << "claiming again is a no-op";
    EXPECT_EQ((*c)->Claim(ns, "bob").code(), absl::StatusCode::kPermissionDenied);
    EXPECT_FALSE((*c)->Visible(other, "")) << "no unowned tenant: nobody sees it";
  }
  std::ofstream(log, std::ios::app) << "0123";  // a torn last line (crash while appending)
  auto c = Catalog::Open(log, std::string(""));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)->Visible(ns, "alice"));
  EXPECT_FALSE((*c)->Visible(ns, "")) << "owned: not the unowned tenant's";
  EXPECT_EQ((*c)->Owner(ns), "alice");
  EXPECT_TRUE((*c)->Visible(other, "")) << "nobody owns it here: the unowned tenant's";
  EXPECT_FALSE((*c)->Visible(other, "alice"));
}

}  // namespace
}  // namespace kvt::testing
