// kvtierd's gRPC path against a real daemon process: leases (Lookup with pin, released
// by the Get or by timeout, counted), the outcome of a Put stream that fails part-way,
// tenancy of chunks on disk (after a host eviction, after a restart), and the ready
// file's removal on a clean shutdown.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>

#include "daemon_harness.h"
#include "kvstore/remote_tier.h"
#include "kvstore/tiered_store.h"
#include "proto/kvtier.grpc.pb.h"
#include "store_test_util.h"

namespace kvt::testing {
namespace {

class DaemonGrpcTest : public ::testing::Test {
 protected:
  void StartDaemon(const std::string& extra = "") {
    daemon_ = std::make_unique<Daemon>(dir_.path(), extra);
    std::string err;
    ASSERT_TRUE(daemon_->Start(&err)) << err;
  }
  std::string Metrics() {
    httplib::Client http("127.0.0.1", daemon_->metrics_port());
    auto res = http.Get("/metrics");
    return res ? res->body : std::string();
  }
  // The value of an unlabelled metric line "name value" (-1 when absent).
  int64_t Metric(const std::string& name) {
    const std::string body = Metrics();
    const size_t at = body.find("\n" + name + " ");
    if (at == std::string::npos) return -1;
    return std::strtoll(body.c_str() + at + name.size() + 2, nullptr, 10);
  }
  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
};

// A record read back is the stored one, byte for byte, and verifies as that key.
void ExpectVerifiedCopy(const std::vector<std::byte>& got, const std::vector<std::byte>& want,
                        const ChunkKey& key) {
  ASSERT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want);
  auto h = DecodeChunkHeader(got);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_TRUE(VerifyChunk(got, DecodeExpectations{.ns = h->ns, .key = key}).ok());
}

TEST_F(DaemonGrpcTest, LeaseHoldsChunksAgainstEvictUntilTheGetThatReadsThem) {
  StartDaemon(
      "tenants:\n  - name: alice\n    tokens: [alice-token-1]\n  - name: bob\n    tokens: "
      "[bob-token-12]\n");
  auto alice = Connect(daemon_->target(), "alice-token-1");
  auto bob = Connect(daemon_->target(), "bob-token-12");
  Chain chain = MakeChain(TestNamespace("m", "alice"), 4, 16, 1);
  for (auto& r : chain.records) ASSERT_TRUE(alice->Put(r).ok());

  auto lk = alice->Lookup(chain.keys, /*per_key=*/false, /*pin=*/true);
  ASSERT_TRUE(lk.ok()) << lk.status();
  EXPECT_EQ(lk->num_leading_hits, 4u);
  ASSERT_NE(lk->lease_id, 0u);
  EXPECT_EQ(lk->lease_timeout.count(), 10000);

  // An explicit Evict between the lookup and the load: the pinned chunks stay.
  EvictSelector sel;
  sel.keys = chain.keys;
  auto ev = alice->Evict(sel);
  ASSERT_TRUE(ev.ok()) << ev.status();
  EXPECT_EQ(ev->chunks, 0u);
  EXPECT_EQ(ev->failed.size(), 4u);

  // Another tenant naming the lease neither reads nor releases anything.
  std::vector<std::byte> buf(1 << 20);
  EXPECT_EQ(bob->Get(chain.keys[0], buf, lk->lease_id).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(alice->Stats()->leases_active, 1u);

  // The load: every chunk whole and verified. The lease ends once all 4 keys were read.
  for (size_t i = 0; i < chain.keys.size(); ++i) {
    auto n = alice->Get(chain.keys[i], buf, lk->lease_id);
    ASSERT_TRUE(n.ok()) << i << ": " << n.status();
    ExpectVerifiedCopy(std::vector<std::byte>(buf.begin(), buf.begin() + *n), chain.records[i],
                       chain.keys[i]);
    EXPECT_EQ(alice->Stats()->leases_active, i + 1 < chain.keys.size() ? 1u : 0u) << i;
  }
  auto st = alice->Stats();
  EXPECT_EQ(st->leases_granted, 1u);
  EXPECT_EQ(st->leases_released, 1u);
  EXPECT_EQ(st->leases_expired, 0u);
  EXPECT_EQ(st->pinned_bytes, 0u);

  // Released: now Evict removes them, and a Get is a clean miss.
  ev = alice->Evict(sel);
  EXPECT_EQ(ev->chunks, 4u);
  EXPECT_EQ(alice->Get(chain.keys[0], buf).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Metric("kvtier_leases_granted_total"), 1);
  EXPECT_EQ(Metric("kvtier_leases_released_total"), 1);
}

TEST_F(DaemonGrpcTest, LeaseHoldsChunksAgainstCapacityPressure) {
  // Host 8 MiB over a 16 MiB disk; 80 records of 512 KiB push everything older out.
  // LRU in both tiers: the default (adaptive) policies are scan-resistant and would
  // rightly keep the looked-up unpinned chunks over 80 first-seen fillers.
  StartDaemon(
      "host_capacity: 8MiB\ndisk_capacity: 16MiB\ndisk_file_bytes: 4MiB\n"
      "max_record_bytes: 2MiB\nmax_inflight_bytes: 64MiB\n"
      "host_cache_policy:\n  name: lru\ndisk_cache_policy:\n  name: lru\n");
  auto client = Connect(daemon_->target(), "", std::chrono::milliseconds(20000));
  Chain pinned = MakeChain(TestNamespace("pinned"), 4, 512, 2);
  Chain unpinned = MakeChain(TestNamespace("unpinned"), 4, 512, 3);
  Chain filler = MakeChain(TestNamespace("filler"), 80, 512, 4);
  for (auto& r : pinned.records) ASSERT_TRUE(client->Put(r).ok());
  for (auto& r : unpinned.records) ASSERT_TRUE(client->Put(r).ok());
  auto lk = client->Lookup(pinned.keys, false, /*pin=*/true);
  ASSERT_TRUE(lk.ok());
  ASSERT_EQ(lk->num_leading_hits, 4u);
  EXPECT_EQ(client->Lookup(unpinned.keys)->num_leading_hits, 4u);
  for (auto& r : filler.records) ASSERT_TRUE(client->Put(r).ok()) << "filler";
  EXPECT_GT(client->Stats()->pinned_bytes, 4u * (512u << 10));

  std::vector<std::byte> buf(1 << 20);
  for (size_t i = 0; i < pinned.keys.size(); ++i) {
    auto n = client->Get(pinned.keys[i], buf, lk->lease_id);
    ASSERT_TRUE(n.ok()) << i << ": " << n.status();
    ExpectVerifiedCopy(std::vector<std::byte>(buf.begin(), buf.begin() + *n), pinned.records[i],
                       pinned.keys[i]);
  }
  // The same pressure without a lease: gone (clean misses), so the pressure was real.
  size_t misses = 0;
  for (size_t i = 0; i < unpinned.keys.size(); ++i) {
    auto n = client->Get(unpinned.keys[i], buf);
    if (!n.ok()) {
      EXPECT_EQ(n.status().code(), absl::StatusCode::kNotFound);
      ++misses;
    } else {
      ExpectVerifiedCopy(std::vector<std::byte>(buf.begin(), buf.begin() + *n), unpinned.records[i],
                         unpinned.keys[i]);
    }
  }
  EXPECT_EQ(misses, 4u);
  auto st = client->Stats();
  EXPECT_EQ(st->leases_released, 1u);
  EXPECT_EQ(st->leases_active, 0u);
}

TEST_F(DaemonGrpcTest, LeasesNeverFollowedByAGetExpireAndAreCounted) {
  StartDaemon("lease_timeout_ms: 300\n");
  auto client = Connect(daemon_->target());
  Chain chain = MakeChain(TestNamespace("m"), 3, 16, 5);
  for (auto& r : chain.records) ASSERT_TRUE(client->Put(r).ok());
  auto a = client->Lookup(chain.keys, false, true);
  auto b = client->Lookup(chain.keys, true, true);  // per_key with pin
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->lease_timeout.count(), 300);
  EXPECT_EQ(b->num_leading_hits, 3u);
  ASSERT_NE(a->lease_id, 0u);
  ASSERT_NE(b->lease_id, 0u);
  EXPECT_NE(a->lease_id, b->lease_id);
  EvictSelector sel;
  sel.keys = chain.keys;
  EXPECT_EQ(client->Evict(sel)->chunks, 0u);
  EXPECT_EQ(client->Stats()->leases_active, 2u);

  // kvtierd's clock is its own (another process): wait for the event, the store's reaper
  // counting both leases expired (bounded; no time is asserted).
  for (const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
       client->Stats()->leases_expired < 2 && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto st = client->Stats();
  EXPECT_EQ(st->leases_granted, 2u);
  EXPECT_EQ(st->leases_expired, 2u);
  EXPECT_EQ(st->leases_released, 0u);
  EXPECT_EQ(st->leases_active, 0u);
  EXPECT_EQ(st->pinned_bytes, 0u);
  EXPECT_EQ(Metric("kvtier_leases_expired_total"), 2);
  EXPECT_EQ(Metric("kvtier_leases_active"), 0);
  EXPECT_EQ(client->Evict(sel)->chunks, 3u);
  // A Get naming an expired lease: a clean miss, and no release is counted.
  std::vector<std::byte> buf(1 << 20);
  EXPECT_EQ(client->Get(chain.keys[0], buf, a->lease_id).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(client->Stats()->leases_released, 0u);
}

TEST_F(DaemonGrpcTest, LeaseFieldsAreValidatedAndUnknownLeasesIgnored) {
  StartDaemon();
  auto client = Connect(daemon_->target());
  Chain chain = MakeChain(TestNamespace("m"), 1, 16, 10);
  ASSERT_TRUE(client->Put(chain.records[0]).ok());
  auto stub = ::kvtier::v1::KvTier::NewStub(
      grpc::CreateChannel(daemon_->target(), grpc::InsecureChannelCredentials()));
  ::kvtier::v1::LookupRequest req;
  req.set_protocol_version(1);
  req.set_pin(true);
  req.add_keys()->set_lo(chain.keys[0].lo);
  req.mutable_keys(0)->set_hi(chain.keys[0].hi);
  for (int i = 0; i < 4097; ++i) req.add_release_leases(i + 1);
  ::kvtier::v1::LookupResponse resp;
  grpc::ClientContext ctx;
  grpc::Status st = stub->Lookup(&ctx, req, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("release_leases: 4097"), std::string::npos)
      << st.error_message();
  // Made-up lease ids: ignored, by Lookup and by Get; nothing is counted.
  std::vector<uint64_t> junk = {1, 2, 0xdeadbeef};
  auto lk = client->Lookup(chain.keys, false, false, junk);
  ASSERT_TRUE(lk.ok()) << lk.status();
  EXPECT_EQ(lk->lease_id, 0u);
  std::vector<std::byte> buf(1 << 20);
  EXPECT_TRUE(client->Get(chain.keys[0], buf, 0x1234567).ok());
  auto s = client->Stats();
  EXPECT_EQ(s->leases_granted, 0u);
  EXPECT_EQ(s->leases_released, 0u);
}

TEST_F(DaemonGrpcTest, RemoteTierPinsThroughTheDaemonWhenTheStoreLookupPins) {
  StartDaemon();
  auto client = Connect(daemon_->target());
  Chain chain = MakeChain(TestNamespace("tiered"), 3, 16, 6);
  for (auto& r : chain.records) ASSERT_TRUE(client->Put(r).ok());
  RemoteTierOptions rto;
  rto.client.target = daemon_->target();
  RemoteTier* remote = nullptr;
  std::vector<TierFactory> tiers;
  tiers.push_back(Capturing(RemoteTier::Factory(rto), &remote));
  auto store = *TieredStore::Create(std::move(tiers), TieredStoreOptions{});
  EXPECT_TRUE(remote->caps().pinnable);
  const uint64_t rpcs_before = remote->client().rpcs();
  LookupResult lr = store->Lookup(chain.keys, LookupOptions{.pin = true});
  EXPECT_EQ(lr.num_leading_hits, 3u);
  EXPECT_TRUE(lr.lease);
  // One Stat RPC and one pin RPC for the whole chain, not one per key.
  EXPECT_EQ(remote->client().rpcs() - rpcs_before, 2u);
  EXPECT_EQ(remote->held_leases(), 3u);
  EXPECT_EQ(client->Stats()->leases_active, 1u);  // one daemon lease for the run

  EvictSelector sel;
  sel.keys = chain.keys;
  EXPECT_EQ(client->Evict(sel)->failed.size(), 3u);
  for (size_t i = 0; i < chain.keys.size(); ++i) {
    std::vector<std::byte> got(chain.records[i].size());
    auto n = store->Get(chain.keys[i], got);
    ASSERT_TRUE(n.ok()) << i << ": " << n.status();
    EXPECT_TRUE(got == chain.records[i]);
  }
  lr.lease.Release();
  EXPECT_EQ(remote->held_leases(), 0u);
  auto st = client->Stats();
  EXPECT_EQ(st->leases_released, 1u);
  EXPECT_EQ(st->leases_active, 0u);

  // A lookup whose load never comes: releasing the store's lease queues the daemon
  // lease, and the tier's next Lookup RPC releases it (not the 10 s timeout).
  lr = store->Lookup(chain.keys, LookupOptions{.pin = true});
  EXPECT_EQ(client->Stats()->leases_active, 1u);
  lr.lease.Release();
  EXPECT_EQ(remote->held_leases(), 0u);
  EXPECT_EQ(remote->leases_to_release(), 1u);
  EXPECT_EQ(client->Evict(sel)->chunks, 0u);  // still pinned at the daemon
  EXPECT_EQ(store->Lookup(chain.keys).num_leading_hits, 3u);
  EXPECT_EQ(remote->leases_to_release(), 0u);
  st = client->Stats();
  EXPECT_EQ(st->leases_active, 0u);
  EXPECT_EQ(st->leases_released, 2u);
  EXPECT_EQ(st->leases_expired, 0u);

  // A load that reads only the first chunk (the cost model kept one): the daemon lease
  // of the run is released once the other two pins are dropped, by the next Lookup RPC.
  lr = store->Lookup(chain.keys, LookupOptions{.pin = true});
  std::vector<std::byte> first(chain.records[0].size());
  ASSERT_TRUE(store->Get(chain.keys[0], first).ok());
  EXPECT_EQ(remote->held_leases(), 2u);
  EXPECT_EQ(remote->leases_to_release(), 0u);  // two pins of the lease still held
  lr.lease.Release();
  EXPECT_EQ(remote->leases_to_release(), 1u);
  EXPECT_EQ(store->Lookup(chain.keys).num_leading_hits, 3u);
  st = client->Stats();
  EXPECT_EQ(st->leases_active, 0u);
  EXPECT_EQ(st->leases_released, 3u);
  EXPECT_EQ(client->Evict(sel)->chunks, 3u);
}

TEST_F(DaemonGrpcTest, PutStreamFailingHalfwayReportsHowManyRecordsWereStored) {
  StartDaemon();
  auto client = Connect(daemon_->target());
  Chain chain = MakeChain(TestNamespace("m"), 5, 16, 7);
  std::vector<std::byte> bad = chain.records[2];
  bad[bad.size() - 1] ^= std::byte{0x5a};  // payload checksum no longer matches
  std::vector<std::span<const std::byte>> recs = {chain.records[0], chain.records[1], bad,
                                                  chain.records[3], chain.records[4]};
  size_t stored = 99;
  absl::Status s = client->Put(recs, &stored);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(stored, 2u);
  EXPECT_NE(s.message().find("2 records of this stream stored before it"), std::string::npos) << s;
  std::vector<std::byte> buf(1 << 20);
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(client->Get(chain.keys[i], buf).ok()) << i;
  for (int i = 2; i < 5; ++i)
    EXPECT_EQ(client->Get(chain.keys[i], buf).status().code(), absl::StatusCode::kNotFound) << i;

  // A clean stream reports every record.
  std::vector<std::span<const std::byte>> rest = {chain.records[2], chain.records[3]};
  EXPECT_TRUE(client->Put(rest, &stored).ok());
  EXPECT_EQ(stored, 2u);
  // A failure on the first record: nothing stored, and it says so.
  std::vector<std::span<const std::byte>> first_bad = {bad, chain.records[4]};
  EXPECT_EQ(client->Put(first_bad, &stored).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(stored, 0u);
}

// Tenancy is answered from the tiers' own indexes (the record headers' namespaces), not
// from a key list the daemon keeps: chunks the host tier evicted to disk, and chunks on
// disk after a restart, are all visible to their tenant and to no other.
TEST_F(DaemonGrpcTest, ChunksOnDiskAreVisibleToTheirTenantOnlyAfterHostEvictionAndRestart) {
  const std::string tenants =
      "host_capacity: 1MiB\ntenants:\n  - name: alice\n    tokens: [alice-token-1]\n"
      "  - name: bob\n    tokens: [bob-token-12]\n";
  StartDaemon(tenants);
  const NamespaceId alice_ns = TestNamespace("m", "alice");
  Chain a = MakeChain(alice_ns, 12, 256, 8);
  Chain b = MakeChain(TestNamespace("m", "bob"), 4, 256, 9);
  {
    auto alice = Connect(daemon_->target(), "alice-token-1");
    auto bob = Connect(daemon_->target(), "bob-token-12");
    for (auto& r : a.records) ASSERT_TRUE(alice->Put(r).ok());
    for (auto& r : b.records) ASSERT_TRUE(bob->Put(r).ok());
    auto seen = alice->Lookup(a.keys, /*per_key=*/true);
    ASSERT_TRUE(seen.ok()) << seen.status();
    EXPECT_EQ(seen->num_leading_hits, 12u);
    ASSERT_EQ(seen->tier.size(), 12u);
    // 1 MiB of host memory holds at most 3 of them: the others are on disk only (evicted
    // from the host tier, or never admitted there by its cache policy).
    EXPECT_GE(std::count(seen->tier.begin(), seen->tier.end(), TierKind::kDisk), 9);
    ASSERT_EQ(seen->ns.size(), 12u);
    for (const NamespaceId& ns : seen->ns) EXPECT_EQ(ns, alice_ns);
    EXPECT_EQ(bob->Lookup(a.keys, /*per_key=*/true)->num_leading_hits, 0u);
    auto got = alice->Get(a.keys[0]);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectVerifiedCopy(*got, a.records[0], a.keys[0]);
    EXPECT_EQ(bob->Get(a.keys[1]).status().code(), absl::StatusCode::kNotFound);
  }
  ASSERT_EQ(daemon_->Kill(SIGTERM), 0);
  StartDaemon(tenants);
  auto alice = Connect(daemon_->target(), "alice-token-1");
  auto bob = Connect(daemon_->target(), "bob-token-12");
  // The owner finds every chunk, pinned, in one Lookup, and reads the exact bytes.
  auto pinned = alice->Lookup(a.keys, /*per_key=*/false, /*pin=*/true);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_EQ(pinned->num_leading_hits, 12u);
  EXPECT_NE(pinned->lease_id, 0u);
  for (size_t i = 0; i < a.keys.size(); ++i) {
    auto got = alice->Get(a.keys[i]);
    ASSERT_TRUE(got.ok()) << i << ": " << got.status();
    ExpectVerifiedCopy(*got, a.records[i], a.keys[i]);
  }
  // The other tenant sees none of them: not by Lookup, Get, List or Evict.
  auto other = bob->Lookup(a.keys, /*per_key=*/true, /*pin=*/true);
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ(other->num_leading_hits, 0u);
  EXPECT_EQ(other->lease_id, 0u);
  for (auto t : other->tier) EXPECT_FALSE(t.has_value());
  for (const ChunkKey& k : a.keys)
    EXPECT_EQ(bob->Get(k).status().code(), absl::StatusCode::kNotFound);
  auto listed = bob->List(alice_ns, "");
  ASSERT_TRUE(listed.ok()) << listed.status();
  EXPECT_TRUE(listed->chunks.empty());
  EvictSelector sel;
  sel.keys = a.keys;
  auto evicted = bob->Evict(sel);
  ASSERT_TRUE(evicted.ok()) << evicted.status();
  EXPECT_EQ(evicted->chunks, 0u);
  // A batch mixing both tenants' keys: the leading run stops at the first foreign key,
  // and only the caller's chunks are answered or pinned.
  std::vector<ChunkKey> mixed = {a.keys[0], a.keys[1], b.keys[0], a.keys[2]};
  auto m = alice->Lookup(mixed, /*per_key=*/true, /*pin=*/true);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->num_leading_hits, 2u);
  ASSERT_EQ(m->tier.size(), 4u);
  EXPECT_TRUE(m->tier[0].has_value());
  EXPECT_FALSE(m->tier[2].has_value()) << "bob's chunk reads as a miss";
  EXPECT_EQ(m->record_bytes[2], 0u);
  EXPECT_TRUE(m->ns[2].is_zero());
  EXPECT_TRUE(m->tier[3].has_value());
  auto bobs = bob->Get(b.keys[0]);
  ASSERT_TRUE(bobs.ok()) << bobs.status();
  ExpectVerifiedCopy(*bobs, b.records[0], b.keys[0]);
}

TEST_F(DaemonGrpcTest, CleanShutdownRemovesTheReadyFile) {
  StartDaemon();
  const std::string ready = dir_.path() + "/ready.json";
  ASSERT_TRUE(std::filesystem::exists(ready));
  const int status = daemon_->Kill(SIGTERM);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << daemon_->Log();
  EXPECT_FALSE(std::filesystem::exists(ready));
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/kvtierd.sock"));
}

}  // namespace
}  // namespace kvt::testing
