// kvtierd's UnaryRpcs and RecordWriter in process, over a real host + disk store: what a
// request gets back as a tenant, and the put path's checks, without gRPC in between.
#include "unary_rpcs.h"

#include <gtest/gtest.h>

#include "catalog.h"
#include "daemon_harness.h"
#include "kvstore/store_factory.h"
#include "record_writer.h"
#include "shm_registry.h"
#include "tenancy.h"

namespace kvt::testing {
namespace {

namespace pb = ::kvtier::v1;
using daemon::Catalog;
using daemon::DaemonConfig;
using daemon::LeaseTable;
using daemon::Metrics;
using daemon::RecordWriter;
using daemon::ShmRegistry;
using daemon::Tenancy;
using daemon::UnaryRpcs;

class UnaryRpcsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions so;
    so.host.capacity_bytes = 8ull << 20;
    so.host.cache_policy.name = "lru";
    DiskTierOptions& d = so.disk.emplace();
    d.dir = dir_.path() + "/disk";
    d.capacity_bytes = 64ull << 20;
    d.file_bytes = 16ull << 20;
    d.direct_io = false;
    d.cache_policy.name = "lru";
    so.store.placement.write_through = WriteThrough::kLocal;
    store_ = std::move(*OpenTieredStore(so));
    catalog_ = std::move(*Catalog::Open(dir_.path() + "/namespaces.log"));
    tenancy_ = std::make_unique<Tenancy>(catalog_.get(), store_.get());
    config_.shm_first_region_id = 5;
    shm_ = std::make_unique<ShmRegistry>(config_);
    leases_ = std::make_unique<LeaseTable>(store_.get(), std::chrono::milliseconds(10000));
    writer_ =
        std::make_unique<RecordWriter>(&config_, store_.get(), tenancy_.get(), &metrics_, nullptr);
    rpcs_ = std::make_unique<UnaryRpcs>(daemon::UnaryRpcsDeps{.store = store_.get(),
                                                              .tenancy = tenancy_.get(),
                                                              .leases = leases_.get(),
                                                              .shm = shm_.get(),
                                                              .writer = writer_.get(),
                                                              .metrics = &metrics_});
  }

  static pb::LookupRequest LookupOf(std::span<const ChunkKey> keys, bool per_key, bool pin) {
    pb::LookupRequest req;
    req.set_protocol_version(1);
    req.set_per_key(per_key);
    req.set_pin(pin);
    for (const ChunkKey& k : keys) {
      req.add_keys()->set_lo(k.lo);
      req.mutable_keys(req.keys_size() - 1)->set_hi(k.hi);
    }
    return req;
  }

  TempDir dir_;
  DaemonConfig config_;
  Metrics metrics_;
  std::unique_ptr<TieredStore> store_;
  std::unique_ptr<Catalog> catalog_;
  std::unique_ptr<Tenancy> tenancy_;
  std::unique_ptr<ShmRegistry> shm_;
  std::unique_ptr<LeaseTable> leases_;
  std::unique_ptr<RecordWriter> writer_;
  std::unique_ptr<UnaryRpcs> rpcs_;
  const NamespaceId alice_ns_ = TestNamespace("m", "alice");
  const NamespaceId bob_ns_ = TestNamespace("m", "bob");
};

TEST_F(UnaryRpcsTest, LookupAnswersTheCallersChunksWithTheirNamespacesAndPinsThem) {
  Chain a = MakeChain(alice_ns_, 3, 16, 1);
  Chain b = MakeChain(bob_ns_, 1, 16, 2);
  for (const auto& r : a.records) ASSERT_TRUE(writer_->Store(r, "alice").ok());
  ASSERT_TRUE(writer_->Store(b.records[0], "bob").ok());
  const std::vector<ChunkKey> keys = {a.keys[0], a.keys[1], b.keys[0], a.keys[2]};
  pb::LookupResponse resp;
  ASSERT_TRUE(rpcs_->Lookup(LookupOf(keys, true, true), &resp, "alice").ok());
  EXPECT_EQ(resp.num_leading_hits(), 2u);
  EXPECT_NE(resp.lease_id(), 0u);
  EXPECT_EQ(resp.lease_timeout_ms(), 10000u);
  ASSERT_EQ(resp.tier_size(), 4);
  ASSERT_EQ(resp.ns_size(), 4);
  ASSERT_EQ(resp.record_bytes_size(), 4);
  EXPECT_EQ(resp.tier(0), pb::TIER_HOST);
  EXPECT_EQ(resp.tier(2), pb::TIER_NONE) << "bob's chunk is a miss for alice";
  EXPECT_EQ(resp.record_bytes(2), 0u);
  EXPECT_EQ(resp.ns(2).lo() | resp.ns(2).hi(), 0u);
  EXPECT_EQ(resp.ns(3).lo(), alice_ns_.lo);
  EXPECT_EQ(resp.ns(3).hi(), alice_ns_.hi);
  EXPECT_EQ(resp.record_bytes(3), a.records[2].size());
  EXPECT_EQ(leases_->counts().active, 1u);
  // The lease is released by a later Lookup naming it; only its owner can.
  pb::LookupRequest release = LookupOf(std::span(&a.keys[0], 1), false, false);
  release.add_release_leases(resp.lease_id());
  pb::LookupResponse r2;
  ASSERT_TRUE(rpcs_->Lookup(release, &r2, "bob").ok());
  EXPECT_EQ(r2.num_leading_hits(), 0u);
  EXPECT_EQ(leases_->counts().active, 1u) << "bob cannot release alice's lease";
  pb::LookupResponse r3;
  ASSERT_TRUE(rpcs_->Lookup(release, &r3, "alice").ok());
  EXPECT_EQ(r3.num_leading_hits(), 1u);
  EXPECT_EQ(r3.tier_size(), 1);
  EXPECT_EQ(r3.record_bytes_size(), 0) << "record_bytes only with per_key";
  EXPECT_EQ(leases_->counts().active, 0u);
  EXPECT_EQ(leases_->counts().released, 1u);
}

TEST_F(UnaryRpcsTest, BadRequestsNameTheField) {
  pb::LookupResponse lr;
  pb::LookupRequest none = LookupOf({}, false, false);
  EXPECT_NE(rpcs_->Lookup(none, &lr, "").message().find("keys: 0 keys"), std::string::npos);
  ChunkKey zero;
  EXPECT_NE(rpcs_->Lookup(LookupOf(std::span(&zero, 1), false, false), &lr, "")
                .message()
                .find("keys[0]: zero key"),
            std::string::npos);
  pb::LookupRequest many = LookupOf(MakeChain(alice_ns_, 1, 16, 3).keys, false, false);
  for (int i = 0; i < 4097; ++i) many.add_release_leases(i + 1);
  EXPECT_NE(rpcs_->Lookup(many, &lr, "").message().find("release_leases: 4097"), std::string::npos);
  pb::ListRequest list;
  list.set_page_size(10001);
  pb::ListResponse lresp;
  EXPECT_NE(rpcs_->List(list, &lresp, "").message().find("page_size: 10001"), std::string::npos);
  list.set_page_size(0);
  list.set_page_token("nothex");
  EXPECT_NE(rpcs_->List(list, &lresp, "").message().find("page_token"), std::string::npos);
  pb::EvictRequest ev;
  pb::EvictResponse eresp;
  EXPECT_NE(rpcs_->Evict(ev, &eresp, "").message().find("selector"), std::string::npos);
  ev.set_older_than_ms(0);
  EXPECT_NE(rpcs_->Evict(ev, &eresp, "").message().find("older_than_ms: must be > 0"),
            std::string::npos);
  ev.mutable_keys()->add_keys()->set_lo(1);
  ev.mutable_within_ns()->set_lo(1);
  EXPECT_NE(rpcs_->Evict(ev, &eresp, "").message().find("within_ns"), std::string::npos);
  pb::ShmAttachRequest small;
  small.set_bytes(4096);
  pb::ShmAttachResponse sresp;
  EXPECT_NE(rpcs_->ShmAttach(small, &sresp, "").message().find("bytes: 4096"), std::string::npos);
}

TEST_F(UnaryRpcsTest, ListEvictAndStatsSeeOnlyTheCallersNamespaces) {
  Chain a = MakeChain(alice_ns_, 2, 16, 4);
  Chain b = MakeChain(bob_ns_, 3, 16, 5);
  for (const auto& r : a.records) ASSERT_TRUE(writer_->Store(r, "alice").ok());
  for (const auto& r : b.records) ASSERT_TRUE(writer_->Store(r, "bob").ok());
  pb::ListRequest all;
  pb::ListResponse listed;
  ASSERT_TRUE(rpcs_->List(all, &listed, "bob").ok());
  EXPECT_EQ(listed.chunks_size(), 3);
  pb::ListRequest theirs;
  theirs.mutable_ns()->set_lo(alice_ns_.lo);
  theirs.mutable_ns()->set_hi(alice_ns_.hi);
  pb::ListResponse none;
  ASSERT_TRUE(rpcs_->List(theirs, &none, "bob").ok());
  EXPECT_EQ(none.chunks_size(), 0);
  pb::EvictRequest ev;
  ev.set_all(true);
  pb::EvictResponse er;
  ASSERT_TRUE(rpcs_->Evict(ev, &er, "bob").ok());
  EXPECT_EQ(er.chunks(), 3u);
  EXPECT_EQ(tenancy_->Lookup(a.keys, "alice", {}).num_leading_hits, 2u) << "alice's stay";
  pb::StatsResponse st;
  ASSERT_TRUE(rpcs_->Stats(&st, "alice").ok());
  EXPECT_EQ(st.tenant(), "alice");
  EXPECT_EQ(st.tiers_size(), 2);
  EXPECT_EQ(st.explicit_evictions(), 3u);
}

TEST_F(UnaryRpcsTest, RecordWriterRefusesBadRecordsAndDropsAForgedKeyUnstored) {
  Chain a = MakeChain(alice_ns_, 1, 16, 6);
  std::vector<std::byte> rec = a.records[0];
  EXPECT_EQ(writer_->Store(std::span(rec).first(100), "alice").status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<std::byte> longer = rec;
  longer.push_back(std::byte{0});
  EXPECT_NE(writer_->Store(longer, "alice").status().message().find("record_bytes"),
            std::string::npos);
  std::vector<std::byte> flipped = rec;
  flipped.back() ^= std::byte{1};
  EXPECT_NE(writer_->Store(flipped, "alice").status().message().find("failed verification"),
            std::string::npos);
  ASSERT_TRUE(writer_->Store(rec, "alice").ok());
  EXPECT_EQ(writer_->Store(rec, "bob").status().code(), absl::StatusCode::kPermissionDenied);
  // Bob's record under alice's key (a forged header): acknowledged, not stored.
  auto h = DecodeChunkHeader(rec);
  ASSERT_TRUE(h.ok());
  ChunkHeader forged = *h;
  forged.ns = bob_ns_;
  auto fake = EncodeChunk(forged, std::span(rec).subspan(kChunkHeaderBytes));
  ASSERT_TRUE(fake.ok()) << fake.status();
  auto key = writer_->Store(*fake, "bob");
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(*key, a.keys[0]);
  std::vector<std::byte> out(rec.size());
  auto n = store_->Get(a.keys[0], out);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_TRUE(out == rec) << "alice's chunk is untouched";
  // A shm put is copied once and counted.
  auto shm_key = writer_->StoreFromShm(MakeChain(alice_ns_, 2, 16, 7).records[1], "alice");
  ASSERT_TRUE(shm_key.ok()) << shm_key.status();
  EXPECT_EQ(writer_->shm_put_copy_bytes(), rec.size());
}

}  // namespace
}  // namespace kvt::testing
