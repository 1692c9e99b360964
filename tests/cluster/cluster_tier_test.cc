// ClusterTier and ClusterClient against a real 3-master Redis Cluster on loopback.
#include "kvstore/cluster_tier.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <atomic>
#include <thread>

#include "daemon_harness.h"
#include "redis_cluster.h"
#include "store_test_util.h"

namespace kvt {
namespace {

using testing::MakeChain;
using testing::RedisProcs;
using testing::TempDir;

// Llama-3-8B: 32 layers, 8 KV heads, head_dim 128, bf16 → 128 KiB per token.
KvLayout Llama3Layout() {
  KvLayout l;
  l.num_layers = 32;
  l.num_kv_heads = 8;
  l.head_dim = 128;
  l.dtype = DType::kBF16;
  return l;
}

class ClusterTierTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    redis_ = new RedisProcs(dir_->path());
    std::string error;
    ok_ = redis_->StartCluster(3, &error);
    if (!ok_) error_ = new std::string(error);
  }
  static void TearDownTestSuite() {
    delete redis_;
    delete dir_;
    delete error_;
    redis_ = nullptr;
    dir_ = nullptr;
    error_ = nullptr;
  }
  void SetUp() override { ASSERT_TRUE(ok_) << (error_ ? *error_ : ""); }

  static ClusterTierOptions Options(uint64_t piece_bytes = 4ull << 20) {
    ClusterTierOptions o;
    o.client.nodes = {redis_->Seeds()[0]};  // one seed is enough
    o.client.deadline = std::chrono::milliseconds(1500);
    o.piece_bytes = piece_bytes;
    o.ttl_s = 600;
    o.keyspace = "test";
    return o;
  }
  static std::unique_ptr<ClusterTier> Open(uint64_t piece_bytes = 4ull << 20) {
    auto t = ClusterTier::Create(Options(piece_bytes));
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? std::move(*t) : nullptr;
  }
  // Port of the master serving `key`'s slot.
  static int PortOf(ClusterTier& t, const std::string& key) {
    return t.client().slot_map().MasterOf(cluster::KeyHashSlot(key))->port;
  }

  static inline TempDir* dir_ = nullptr;
  static inline RedisProcs* redis_ = nullptr;
  static inline bool ok_ = false;
  static inline std::string* error_ = nullptr;
};

TEST_F(ClusterTierTest, RealSizeChunksRoundTripWithIdenticalBytes) {
  auto tier = Open();
  ASSERT_NE(tier, nullptr);
  auto chain = MakeChain(testing::TestNamespace("llama3"), 2, 256, 1, Llama3Layout());
  ASSERT_EQ(chain.records[0].size(), kChunkHeaderBytes + (32u << 20));
  for (auto& r : chain.records) ASSERT_TRUE(tier->Put(r).ok());
  for (size_t i = 0; i < chain.keys.size(); ++i) {
    std::vector<std::byte> out(chain.records[i].size());
    auto n = tier->Get(chain.keys[i], out);
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, chain.records[i].size());
    EXPECT_TRUE(out == chain.records[i]);
    EXPECT_EQ(*kvt::testing::RecordSize(*tier, chain.keys[i]), chain.records[i].size());
  }
  // 32 MiB + 128 B in 4 MiB pieces: 9 data pieces + the header, all on one shard.
  const std::string k0 = tier->PieceKey(chain.keys[0], 0);
  const int port = PortOf(*tier, k0);
  EXPECT_EQ(redis_->Command(port, {"EXISTS", tier->PieceKey(chain.keys[0], 9)}), "1");
  EXPECT_EQ(redis_->Command(port, {"EXISTS", tier->PieceKey(chain.keys[0], 10)}), "0");
  EXPECT_EQ(redis_->Command(port, {"STRLEN", tier->PieceKey(chain.keys[0], 9)}), "128");
  const int ttl = std::stoi(redis_->Command(port, {"TTL", tier->PieceKey(chain.keys[0], 3)}));
  EXPECT_GT(ttl, 500);
  EXPECT_LE(ttl, 600);
  // Buffer too small: OutOfRange, nothing claimed.
  std::vector<std::byte> small(1000);
  EXPECT_EQ(tier->Get(chain.keys[0], small).status().code(), absl::StatusCode::kOutOfRange);
  TierStats s = tier->stats();
  EXPECT_EQ(s.puts, 2u);
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.bytes_out, chain.records[0].size() * 2);
  EXPECT_GT(s.capacity_bytes, 0u);  // 3 x maxmemory 400mb
  // A tier with another piece size reads what this one wrote (the header says).
  auto other = Open(1ull << 20);
  std::vector<std::byte> out(chain.records[1].size());
  ASSERT_TRUE(other->Get(chain.keys[1], out).ok());
  EXPECT_TRUE(out == chain.records[1]);
}

TEST_F(ClusterTierTest, ContainsEraseAndListAcrossShards) {
  auto tier = Open(64u << 10);
  auto chain = MakeChain(testing::TestNamespace("spread"), 30, 16, 2);
  std::set<int> ports;
  for (auto& r : chain.records) ASSERT_TRUE(tier->Put(r).ok());
  for (auto& k : chain.keys) ports.insert(PortOf(*tier, tier->PieceKey(k, 0)));
  EXPECT_EQ(ports.size(), 3u);  // 30 keys reach all 3 shards
  std::vector<ChunkKey> keys = chain.keys;
  keys.push_back(MakeChain(testing::TestNamespace("absent"), 1, 16, 3).keys[0]);
  std::vector<bool> c = kvt::testing::Contains(*tier, keys);
  EXPECT_EQ(std::count(c.begin(), c.end(), true), 30);
  EXPECT_FALSE(c.back());
  // Stat answers each key's size and namespace (from its record header) in one pipeline.
  const std::vector<ChunkStat> st = tier->Stat(keys);
  ASSERT_EQ(st.size(), keys.size());
  for (size_t i = 0; i < chain.keys.size(); ++i) {
    EXPECT_EQ(st[i].record_bytes, chain.records[i].size()) << i;
    EXPECT_EQ(st[i].ns, testing::TestNamespace("spread")) << i;
  }
  EXPECT_TRUE(st.back().ns.is_zero());
  ASSERT_TRUE(tier->Erase(chain.keys[5]).ok());
  EXPECT_FALSE(kvt::testing::Contains(*tier, std::span(&chain.keys[5], 1))[0]);
  std::vector<std::byte> out(chain.records[5].size());
  EXPECT_EQ(tier->Get(chain.keys[5], out).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(tier->Erase(chain.keys[5]).ok());  // absent: OK
  // List, paginated, in key order, namespace filter.
  ListOptions lo;
  lo.ns = testing::TestNamespace("spread");
  lo.page_size = 7;
  std::vector<ChunkKey> listed;
  for (;;) {
    auto page = tier->List(lo);
    ASSERT_TRUE(page.ok()) << page.status();
    for (auto& ci : page->chunks) {
      listed.push_back(ci.key);
      EXPECT_EQ(ci.token_count, 16u);
      EXPECT_EQ(ci.record_bytes, chain.records[0].size());
    }
    if (page->next_page_token.empty()) break;
    lo.page_token = page->next_page_token;
  }
  EXPECT_EQ(listed.size(), 29u);
  EXPECT_TRUE(std::is_sorted(listed.begin(), listed.end()));
  lo.page_token = "zz";
  EXPECT_EQ(tier->List(lo).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ClusterTierTest, CorruptedMissingOrShortPieceIsAVerifiedMiss) {
  auto tier = Open(64u << 10);
  auto chain = MakeChain(testing::TestNamespace("corrupt"), 3, 256, 4);  // 256 KiB: 5 pieces
  for (auto& r : chain.records) ASSERT_TRUE(tier->Put(r).ok());
  std::vector<std::byte> out(chain.records[0].size());
  // A flipped byte in piece 2 (same length): the payload checksum catches it.
  {
    const std::string k = tier->PieceKey(chain.keys[0], 2);
    const int port = PortOf(*tier, k);
    std::string v = redis_->Command(port, {"GET", k});
    ASSERT_EQ(v.size(), 64u << 10);
    v[100] ^= 0x40;
    ASSERT_EQ(redis_->Command(port, {"SET", k, v}), "OK");
    const uint64_t before = tier->stats().integrity_errors;
    EXPECT_EQ(tier->Get(chain.keys[0], out).status().code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(tier->stats().integrity_errors, before + 1);
  }
  // A missing piece and a short piece: misses, and `out` never holds a whole record.
  {
    const std::string k = tier->PieceKey(chain.keys[1], 3);
    ASSERT_EQ(redis_->Command(PortOf(*tier, k), {"DEL", k}), "1");
    EXPECT_EQ(tier->Get(chain.keys[1], out).status().code(), absl::StatusCode::kNotFound);
    const std::string k2 = tier->PieceKey(chain.keys[2], 4);
    const int port = PortOf(*tier, k2);
    std::string v = redis_->Command(port, {"GET", k2});
    ASSERT_EQ(redis_->Command(port, {"SET", k2, v.substr(0, v.size() - 1)}), "OK");
    EXPECT_EQ(tier->Get(chain.keys[2], out).status().code(), absl::StatusCode::kNotFound);
  }
  // A header from another record of the same size: header and pieces disagree.
  {
    auto other = MakeChain(testing::TestNamespace("corrupt2"), 1, 256, 5);
    ASSERT_TRUE(tier->Put(other.records[0]).ok());
    auto fresh = MakeChain(testing::TestNamespace("corrupt"), 1, 256, 4);  // same as keys[0]
    ASSERT_TRUE(tier->Put(fresh.records[0]).ok());
    const std::string hk = tier->PieceKey(other.keys[0], 0), k0 = tier->PieceKey(chain.keys[0], 0);
    std::string h = redis_->Command(PortOf(*tier, hk), {"GET", hk});
    ASSERT_EQ(redis_->Command(PortOf(*tier, k0), {"SET", k0, h}), "OK");
    EXPECT_EQ(tier->Get(chain.keys[0], out).status().code(), absl::StatusCode::kNotFound);
    ASSERT_EQ(redis_->Command(PortOf(*tier, k0), {"SET", k0, "garbage"}), "OK");
    EXPECT_EQ(tier->Get(chain.keys[0], out).status().code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(kvt::testing::RecordSize(*tier, chain.keys[0]).status().code(),
              absl::StatusCode::kNotFound);
  }
}

// Moves `slot` from node `from` to node `to` the way redis-cli --cluster reshard does,
// calling `between(i)` after each key migrated.
void MigrateSlot(RedisProcs& redis, int slot, int from, int to,
                 const std::function<void(int)>& between) {
  const std::string s = std::to_string(slot), from_id = redis.NodeId(from),
                    to_id = redis.NodeId(to);
  const int fp = redis.node(from).port, tp = redis.node(to).port;
  ASSERT_EQ(redis.Command(tp, {"CLUSTER", "SETSLOT", s, "IMPORTING", from_id}), "OK");
  ASSERT_EQ(redis.Command(fp, {"CLUSTER", "SETSLOT", s, "MIGRATING", to_id}), "OK");
  std::string keys = redis.Command(fp, {"CLUSTER", "GETKEYSINSLOT", s, "1000"});
  std::vector<std::string> list;
  for (size_t at = 0; at < keys.size();) {
    size_t nl = keys.find('\n', at);
    if (nl == std::string::npos) nl = keys.size();
    list.push_back(keys.substr(at, nl - at));
    at = nl + 1;
  }
  // Data pieces first, the header last: readers see ASK for the pieces already moved.
  std::sort(list.begin(), list.end(), [](const std::string& a, const std::string& b) {
    return (a.back() == '0' && a[a.size() - 2] == ':') <
           (b.back() == '0' && b[b.size() - 2] == ':');
  });
  int i = 0;
  for (const auto& k : list) {
    if (k.empty()) continue;
    ASSERT_EQ(redis.Command(fp, {"MIGRATE", "127.0.0.1", std::to_string(tp), k, "0", "5000"}), "OK")
        << k;
    between(i++);
  }
  for (size_t n = 0; n < redis.size(); ++n)
    redis.Command(redis.node(n).port, {"CLUSTER", "SETSLOT", s, "NODE", to_id});
}

TEST_F(ClusterTierTest, FollowsAskDuringMigrationAndMovedAfter) {
  auto tier = Open(64u << 10);
  auto chain = MakeChain(testing::TestNamespace("ask"), 1, 256, 6);  // 5 pieces + header
  ASSERT_TRUE(tier->Put(chain.records[0]).ok());
  const std::string k0 = tier->PieceKey(chain.keys[0], 0);
  const int slot = cluster::KeyHashSlot(k0);
  const int from = redis_->IndexOfPort(PortOf(*tier, k0));
  const int to = (from + 1) % 3;
  std::vector<std::byte> out(chain.records[0].size());
  int whole_during = 0;
  MigrateSlot(*redis_, slot, from, to, [&](int i) {
    if (i != 2) return;  // header still on `from`, pieces split between both nodes
    auto n = tier->Get(chain.keys[0], out);
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_TRUE(out == chain.records[0]);
    ++whole_during;
  });
  EXPECT_EQ(whole_during, 1);
  EXPECT_GT(tier->client().stats().ask, 0u);
  std::fill(out.begin(), out.end(), std::byte{0});
  auto n = tier->Get(chain.keys[0], out);  // slot map stale: MOVED to the new owner
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_TRUE(out == chain.records[0]);
  EXPECT_GT(tier->client().stats().moved, 0u);
  // A new put lands on the new owner.
  ASSERT_TRUE(tier->Put(chain.records[0]).ok());
  EXPECT_EQ(redis_->Command(redis_->node(to).port, {"EXISTS", k0}), "1");
}

TEST_F(ClusterTierTest, ReadsDuringReshardingAreWholeOrMiss) {
  auto tier = Open(64u << 10);
  auto chain = MakeChain(testing::TestNamespace("reshard"), 4, 256, 7);
  for (auto& r : chain.records) ASSERT_TRUE(tier->Put(r).ok());
  const std::string k0 = tier->PieceKey(chain.keys[0], 0);
  const int slot = cluster::KeyHashSlot(k0);
  const int from = redis_->IndexOfPort(PortOf(*tier, k0));
  std::atomic<bool> stop{false};
  std::atomic<int> whole{0}, misses{0}, torn{0};
  std::thread reader([&] {
    auto t = Open(64u << 10);
    std::vector<std::byte> out(chain.records[0].size());
    while (!stop.load()) {
      std::fill(out.begin(), out.end(), std::byte{0});
      auto n = t->Get(chain.keys[0], out);
      if (n.ok()) {
        (out == chain.records[0] ? whole : torn).fetch_add(1);
      } else {
        misses.fetch_add(1);
      }
    }
  });
  auto reads = [&] { return whole.load() + misses.load() + torn.load(); };
  // Waits (bounded) until the reader has finished another read: reads interleave with
  // every migration step even on a loaded machine.
  auto another_read = [&] {
    const int before = reads();
    for (int i = 0; i < 2000 && reads() == before; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  for (int i = 0; i < 10000 && whole.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const int reads_before = reads();
  for (int round = 0; round < 2; ++round)  // there and back again
    MigrateSlot(*redis_, slot, round == 0 ? from : (from + 2) % 3,
                round == 0 ? (from + 2) % 3 : from, [&](int) { another_read(); });
  EXPECT_GT(reads() - reads_before, 4);  // reads ran during the migrations
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  stop = true;
  reader.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_GT(whole.load(), 0);
  // After the moves every chunk reads whole.
  for (size_t i = 0; i < chain.keys.size(); ++i) {
    std::vector<std::byte> out(chain.records[i].size());
    ASSERT_TRUE(tier->Get(chain.keys[i], out).ok());
    EXPECT_TRUE(out == chain.records[i]);
  }
  std::printf("reads during resharding: %d whole, %d misses, %d torn\n", whole.load(),
              misses.load(), torn.load());
}

TEST_F(ClusterTierTest, MasterKilledIsAMissWithoutHangAndRecovers) {
  auto tier = Open(64u << 10);
  auto chain = MakeChain(testing::TestNamespace("kill"), 24, 64, 8);
  for (auto& r : chain.records) ASSERT_TRUE(tier->Put(r).ok());
  // Kill the master of chunk 0 (not node 0, our seed... any node works as a seed).
  const int victim = redis_->IndexOfPort(PortOf(*tier, tier->PieceKey(chain.keys[0], 0)));
  std::vector<bool> on_victim;
  for (auto& k : chain.keys)
    on_victim.push_back(PortOf(*tier, tier->PieceKey(k, 0)) == redis_->node(victim).port);
  redis_->Kill(victim);
  int served = 0, missed = 0;
  for (size_t i = 0; i < chain.keys.size(); ++i) {
    std::vector<std::byte> out(chain.records[i].size());
    auto n = tier->Get(chain.keys[i], out);
    if (on_victim[i]) {
      EXPECT_FALSE(n.ok());
      EXPECT_TRUE(absl::IsUnavailable(n.status()) || absl::IsNotFound(n.status())) << n.status();
      ++missed;
    } else {
      ASSERT_TRUE(n.ok()) << n.status();  // other shards keep serving
      EXPECT_TRUE(out == chain.records[i]);
      ++served;
    }
  }
  // No hang: each miss ends at the client's deadline (a hang fails the test at its ctest
  // timeout; no wall time is asserted).
  EXPECT_GT(served, 0);
  EXPECT_GT(missed, 0);
  std::vector<bool> c = kvt::testing::Contains(*tier, chain.keys);
  for (size_t i = 0; i < c.size(); ++i) EXPECT_EQ(c[i], !on_victim[i]) << i;
  // Restarted (empty: no persistence), it rejoins with its slots; the tier recovers.
  ASSERT_TRUE(redis_->Restart(victim));
  std::string error;
  ASSERT_TRUE(redis_->WaitClusterOk(&error)) << error;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  absl::Status put = absl::UnknownError("");
  while (std::chrono::steady_clock::now() < until && !(put = tier->Put(chain.records[0])).ok())
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_TRUE(put.ok()) << put;
  std::vector<std::byte> out(chain.records[0].size());
  ASSERT_TRUE(tier->Get(chain.keys[0], out).ok());
  EXPECT_TRUE(out == chain.records[0]);
}

// With one replica per master, a killed master's replica takes over and the tier serves
// its chunks again without being recreated.
TEST(ClusterFailoverTest, ReplicaPromotedServesTheChunksWithoutRestart) {
  TempDir dir;
  RedisProcs redis(dir.path());
  std::string error;
  ASSERT_TRUE(redis.StartCluster(6, &error, "", /*replicas=*/1)) << error;
  ClusterTierOptions o;
  o.client.nodes = redis.Seeds();
  o.client.deadline = std::chrono::milliseconds(1000);
  o.piece_bytes = 64u << 10;
  auto tier = ClusterTier::Create(o);
  ASSERT_TRUE(tier.ok()) << tier.status();
  ASSERT_EQ((*tier)->client().slot_map().masters().size(), 3u);
  auto chain = MakeChain(testing::TestNamespace("failover"), 1, 256, 9);
  ASSERT_TRUE((*tier)->Put(chain.records[0]).ok());
  const std::string k0 = (*tier)->PieceKey(chain.keys[0], 0);
  const int port = (*tier)->client().slot_map().MasterOf(cluster::KeyHashSlot(k0))->port;
  std::string acked;  // replicated (the replica may still be doing its first full sync)
  for (int i = 0; i < 20 && acked != "1"; ++i) acked = redis.Command(port, {"WAIT", "1", "1000"});
  ASSERT_EQ(acked, "1");
  int replica = -1;
  for (size_t i = 0; i < redis.size(); ++i)
    if (redis.Command(redis.node(i).port, {"INFO", "replication"})
            .find(absl::StrFormat("master_port:%d\r\n", port)) != std::string::npos)
      replica = static_cast<int>(i);
  ASSERT_GE(replica, 0);
  redis.Kill(redis.IndexOfPort(port));
  std::vector<std::byte> out(chain.records[0].size());
  EXPECT_FALSE((*tier)->Get(chain.keys[0], out).ok());  // a miss while no master serves the slot
  // Promote it now rather than after cluster-node-timeout (a loaded machine makes the
  // automatic election slow and flaky); the client learns of it on its own.
  ASSERT_EQ(redis.Command(redis.node(replica).port, {"CLUSTER", "FAILOVER", "TAKEOVER"}), "OK");
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  absl::StatusOr<uint64_t> n = absl::UnknownError("");
  int misses = 0;
  while (std::chrono::steady_clock::now() < until) {
    n = (*tier)->Get(chain.keys[0], out);
    if (n.ok()) break;
    ++misses;  // until the promotion reaches the client's slot map
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_TRUE(out == chain.records[0]);
  EXPECT_EQ((*tier)->client().slot_map().MasterOf(cluster::KeyHashSlot(k0))->port,
            redis.node(replica).port);
  std::printf("misses before the promoted replica answered: %d\n", misses);
}

TEST(ClusterErrorsTest, WrongPasswordUnreachableAndNonClusterAreCleanErrors) {
  TempDir dir;
  RedisProcs redis(dir.path());
  const int plain = redis.Start(false);
  const int authed = redis.Start(true, {"--requirepass", "s3cret-pass"});
  ASSERT_GE(plain, 0);
  ASSERT_GE(authed, 0);
  auto open = [](std::vector<std::string> nodes, std::string password) {
    ClusterTierOptions o;
    o.client.nodes = std::move(nodes);
    o.client.password = std::move(password);
    return ClusterTier::Create(o).status();
  };
  const std::string plain_addr = absl::StrFormat("127.0.0.1:%d", redis.node(plain).port);
  const std::string auth_addr = absl::StrFormat("127.0.0.1:%d", redis.node(authed).port);
  absl::Status s = open({plain_addr}, "");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("not a Redis Cluster"), std::string::npos) << s;
  EXPECT_NE(s.message().find(plain_addr), std::string::npos) << s;
  s = open({auth_addr}, "wrong-password");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("AUTH"), std::string::npos) << s;
  s = open({auth_addr}, "");  // no password at all
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  s = open({auth_addr}, "s3cret-pass");  // AUTH passes; this node has no slots yet
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("no slots"), std::string::npos) << s;
  // An ACL user: right and wrong password.
  ASSERT_EQ(redis.Command(redis.node(authed).port, {"AUTH", "s3cret-pass"}), "OK");
  {
    redisContext* c = redisConnect("127.0.0.1", redis.node(authed).port);
    freeReplyObject(redisCommand(c, "AUTH s3cret-pass"));
    auto* r =
        static_cast<redisReply*>(redisCommand(c, "ACL SETUSER kvtier on >user-pass ~kvt:* +@all"));
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(std::string(r->str, r->len), "OK");
    freeReplyObject(r);
    redisFree(c);
  }
  auto open_user = [&](std::string user, std::string password) {
    ClusterTierOptions o;
    o.client.nodes = {auth_addr};
    o.client.username = std::move(user);
    o.client.password = std::move(password);
    return ClusterTier::Create(o).status();
  };
  s = open_user("kvtier", "user-pass");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;  // AUTH passed; no slots
  EXPECT_NE(s.message().find("no slots"), std::string::npos) << s;
  s = open_user("kvtier", "s3cret-pass");
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  const int dead = testing::PickPort();
  const std::string dead_addr = absl::StrFormat("127.0.0.1:%d", dead);
  s = open({dead_addr, "127.0.0.1:1"}, "");  // ends: a hang fails at the ctest timeout
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find(dead_addr), std::string::npos) << s;
  EXPECT_NE(s.message().find("127.0.0.1:1"), std::string::npos) << s;
  ClusterTierOptions bad;
  bad.client.nodes = {"localhost:7000"};
  bad.piece_bytes = 1000;
  EXPECT_NE(ClusterTier::Create(bad).status().message().find("piece_bytes"), std::string::npos);
  bad.piece_bytes = 4u << 20;
  bad.keyspace = "a b";
  EXPECT_NE(ClusterTier::Create(bad).status().message().find("keyspace"), std::string::npos);
}

}  // namespace
}  // namespace kvt
