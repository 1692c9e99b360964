// Two kvtierd processes (separate data dirs, standing for two hosts) sharing one real
// 3-master Redis Cluster as the tier below their disks; and the Grafana dashboard's
// metric names checked against what a real kvtierd exports.
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <regex>
#include <set>

#include "daemon_harness.h"
#include "kvstore/cluster_tier.h"
#include "nlohmann/json.hpp"
#include "redis_cluster.h"
#include "store_test_util.h"

namespace kvt {
namespace {

using testing::Daemon;
using testing::MakeChain;
using testing::RedisProcs;
using testing::TempDir;

class ClusterDaemonTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    redis_ = new RedisProcs(dir_->path());
    std::string error;
    ok_ = redis_->StartCluster(3, &error);
  }
  static void TearDownTestSuite() {
    delete redis_;
    delete dir_;
  }
  void SetUp() override { ASSERT_TRUE(ok_); }

  static std::string ClusterYaml(const std::string& keyspace, int seed_index = 0) {
    return absl::StrFormat(
        "cluster:\n  nodes: [\"%s\"]\n  piece_bytes: 1MiB\n  ttl_s: 600\n  keyspace: %s\n"
        "  deadline_ms: 1000\n",
        redis_->Seeds()[seed_index], keyspace);
  }
  // The record of `key` read through `target`, polling until `timeout` (write-through to
  // the cluster is asynchronous).
  static absl::StatusOr<std::vector<std::byte>> GetEventually(const std::string& target,
                                                              const ChunkKey& key,
                                                              std::chrono::milliseconds timeout) {
    auto c = testing::Connect(target);
    const auto until = std::chrono::steady_clock::now() + timeout;
    absl::StatusOr<std::vector<std::byte>> r = absl::NotFoundError("not tried");
    while (std::chrono::steady_clock::now() < until) {
      r = c->Get(key);
      if (r.ok()) return r;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return r;
  }
  static std::string Metrics(const Daemon& d) {
    httplib::Client http("127.0.0.1", d.metrics_port());
    auto res = http.Get("/metrics");
    return res ? res->body : "";
  }
  // Waits until the cluster holds every key (the writer's write-through has landed).
  static bool InCluster(const std::string& keyspace, const std::vector<ChunkKey>& keys) {
    ClusterTierOptions o;
    o.client.nodes = redis_->Seeds();
    o.keyspace = keyspace;
    auto t = ClusterTier::Create(o);
    if (!t.ok()) return false;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < until) {
      auto c = kvt::testing::Contains(**t, keys);
      if (std::count(c.begin(), c.end(), true) == static_cast<long>(keys.size())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  static inline TempDir* dir_ = nullptr;
  static inline RedisProcs* redis_ = nullptr;
  static inline bool ok_ = false;
};

TEST_F(ClusterDaemonTest, ChunkStoredThroughOneHostLoadsThroughAnother) {
  TempDir a_dir, b_dir;
  Daemon a(a_dir.path(), ClusterYaml("share")), b(b_dir.path(), ClusterYaml("share", 1));
  std::string error;
  ASSERT_TRUE(a.Start(&error)) << error;
  ASSERT_TRUE(b.Start(&error)) << error;
  auto chain =
      MakeChain(testing::TestNamespace("shared-model"), 3, 2048, 11);  // 2 MiB records: 3 pieces
  auto ca = testing::Connect(a.target());
  for (auto& r : chain.records) ASSERT_TRUE(ca->Put(r).ok());
  ASSERT_TRUE(InCluster("share", chain.keys));
  auto cb = testing::Connect(b.target());
  auto lookup = cb->Lookup(chain.keys, /*per_key=*/true);
  ASSERT_TRUE(lookup.ok()) << lookup.status();
  EXPECT_EQ(lookup->num_leading_hits, 3u);
  for (size_t i = 0; i < chain.keys.size(); ++i) {
    auto got = cb->Get(chain.keys[i]);
    ASSERT_TRUE(got.ok()) << got.status() << "\n" << b.Log();
    EXPECT_TRUE(*got == chain.records[i]);
    auto v = VerifyChunk(*got, DecodeExpectations{.ns = testing::TestNamespace("shared-model"),
                                                  .key = chain.keys[i]});
    EXPECT_TRUE(v.ok()) << v.status();
  }
  const std::string m = Metrics(b);
  EXPECT_NE(m.find("kvtier_tier_hits_total{tier=\"remote\"} 3"), std::string::npos) << m;
  // Promoted into B's host tier: a second read does not touch the cluster.
  ASSERT_TRUE(cb->Get(chain.keys[0]).ok());
  EXPECT_NE(Metrics(b).find("kvtier_tier_hits_total{tier=\"remote\"} 3"), std::string::npos);
  EXPECT_NE(Metrics(b).find("kvtier_tier_hits_total{tier=\"host\"} 1"), std::string::npos);
}

TEST_F(ClusterDaemonTest, MasterKilledMidRunMissesThenRecoversWithoutRestart) {
  TempDir a_dir, b_dir;
  Daemon a(a_dir.path(), ClusterYaml("kill")), b(b_dir.path(), ClusterYaml("kill"));
  std::string error;
  ASSERT_TRUE(a.Start(&error)) << error;
  ASSERT_TRUE(b.Start(&error)) << error;
  auto chain = MakeChain(testing::TestNamespace("kill-model"), 12, 64, 12);
  auto ca = testing::Connect(a.target());
  for (auto& r : chain.records) ASSERT_TRUE(ca->Put(r).ok());
  ASSERT_TRUE(InCluster("kill", chain.keys));
  ClusterTierOptions o;
  o.client.nodes = redis_->Seeds();
  o.keyspace = "kill";
  auto probe = ClusterTier::Create(o);
  ASSERT_TRUE(probe.ok());
  auto port_of = [&](const ChunkKey& k) {
    return (*probe)
        ->client()
        .slot_map()
        .MasterOf(cluster::KeyHashSlot((*probe)->PieceKey(k, 0)))
        ->port;
  };
  const int victim = redis_->IndexOfPort(port_of(chain.keys[0]));
  redis_->Kill(victim);
  auto cb = testing::Connect(b.target(), "", std::chrono::milliseconds(10000));
  int missed = 0, served = 0;
  for (size_t i = 0; i < chain.keys.size(); ++i) {
    auto got = cb->Get(chain.keys[i]);
    if (port_of(chain.keys[i]) == redis_->node(victim).port) {
      EXPECT_EQ(got.status().code(), absl::StatusCode::kNotFound) << got.status();
      ++missed;
    } else {
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_TRUE(*got == chain.records[i]);
      ++served;
    }
  }
  EXPECT_GT(missed, 0);
  EXPECT_GT(served, 0);
  // No hang: each miss ends at the cluster deadline (a hang fails the test at its ctest
  // timeout; no wall time is asserted).
  EXPECT_TRUE(b.ProcState() != 'Z');
  // The master comes back empty; A writes the chunks again; B reads them, no restarts.
  ASSERT_TRUE(redis_->Restart(victim));
  ASSERT_TRUE(redis_->WaitClusterOk(&error)) << error;
  for (auto& r : chain.records) ASSERT_TRUE(ca->Put(r).ok());
  ASSERT_TRUE(InCluster("kill", chain.keys)) << a.Log();
  for (size_t i = 0; i < chain.keys.size(); ++i) {
    if (port_of(chain.keys[i]) != redis_->node(victim).port) continue;
    auto got = GetEventually(b.target(), chain.keys[i], std::chrono::seconds(10));
    ASSERT_TRUE(got.ok()) << got.status() << "\n" << b.Log();
    EXPECT_TRUE(*got == chain.records[i]);
  }
}

TEST_F(ClusterDaemonTest, BadClusterConfigIsACleanStartupError) {
  TempDir d1, d2, d3;
  const int dead = testing::PickPort();
  Daemon unreachable(d1.path(), absl::StrFormat("cluster:\n  nodes: [\"127.0.0.1:%d\"]\n", dead));
  std::string error;
  EXPECT_FALSE(unreachable.Start(&error));
  EXPECT_NE(error.find(absl::StrFormat("127.0.0.1:%d", dead)), std::string::npos) << error;
  Daemon bad_piece(d2.path(), absl::StrFormat("cluster:\n  nodes: [\"%s\"]\n  piece_bytes: 1KiB\n",
                                              redis_->Seeds()[0]));
  EXPECT_FALSE(bad_piece.Start(&error));
  EXPECT_NE(error.find("piece_bytes"), std::string::npos) << error;
  Daemon typo(d3.path(), absl::StrFormat("cluster:\n  node: [\"%s\"]\n", redis_->Seeds()[0]));
  EXPECT_FALSE(typo.Start(&error));
  EXPECT_NE(error.find("unknown key 'node'"), std::string::npos) << error;
}

// Every metric the dashboard queries is one kvtierd exports (names from a real scrape).
TEST_F(ClusterDaemonTest, DashboardQueriesOnlyExportedMetrics) {
  TempDir d;
  Daemon daemon(d.path(), ClusterYaml("dash"));
  std::string error;
  ASSERT_TRUE(daemon.Start(&error)) << error;
  auto c = testing::Connect(daemon.target());
  auto chain = MakeChain(testing::TestNamespace("dash"), 1, 16, 13);
  ASSERT_TRUE(c->Put(chain.records[0]).ok());
  ASSERT_TRUE(c->Get(chain.keys[0]).ok());  // so the RPC families have samples
  const std::string scrape = Metrics(daemon);
  std::set<std::string> exported, tiers;
  std::istringstream in(scrape);
  std::string line;
  const std::regex sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? )");
  const std::regex tier_label(R"(tier="([a-z]+)\")");
  while (std::getline(in, line)) {
    std::smatch m;
    if (line.empty() || line[0] == '#' || !std::regex_search(line, m, sample)) continue;
    exported.insert(m[1]);
    std::smatch t;
    const std::string labels = m[2];
    if (std::regex_search(labels, t, tier_label)) tiers.insert(t[1]);
  }
  ASSERT_GT(exported.size(), 20u) << scrape;
  EXPECT_EQ(tiers, (std::set<std::string>{"host", "disk", "remote"}));

  std::ifstream f(KVT_DASHBOARD_JSON);
  ASSERT_TRUE(f) << KVT_DASHBOARD_JSON;
  auto dash = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(dash.is_discarded()) << "dashboard is not valid JSON";
  ASSERT_TRUE(dash.contains("panels") && dash["panels"].is_array());
  EXPECT_TRUE(dash.value("title", "").size() > 0);
  EXPECT_TRUE(dash.value("uid", "").size() > 0);
  EXPECT_GE(dash.value("schemaVersion", 0), 30);
  const std::regex metric(R"(\bkvtier_[a-z0-9_]+)");
  std::set<std::string> used, titles;
  int queries = 0;
  for (const auto& p : dash["panels"]) {
    ASSERT_TRUE(p.contains("title") && p.contains("type") && p.contains("gridPos")) << p.dump();
    EXPECT_TRUE(titles.insert(p["title"].get<std::string>()).second)
        << "duplicate title " << p["title"];
    if (p["type"] == "row") continue;
    ASSERT_TRUE(p.contains("targets") && !p["targets"].empty()) << p["title"];
    for (const auto& t : p["targets"]) {
      const std::string expr = t.value("expr", "");
      ++queries;
      int in_expr = 0;
      for (std::sregex_iterator it(expr.begin(), expr.end(), metric), end; it != end;
           ++it, ++in_expr) {
        std::string name = it->str();
        used.insert(name);
        EXPECT_TRUE(exported.count(name))
            << "panel '" << p["title"] << "' queries " << name << ", which kvtierd does not export";
      }
      EXPECT_GT(in_expr, 0) << "panel '" << p["title"]
                            << "' has a query without a kvtier metric: " << expr;
      for (std::sregex_iterator it(expr.begin(), expr.end(), tier_label), end; it != end; ++it)
        EXPECT_TRUE(tiers.count((*it)[1]))
            << "panel '" << p["title"] << "' selects an unknown tier " << it->str();
    }
  }
  EXPECT_GE(queries, 10);
  // The families the issue asks for are on the dashboard.
  for (const char* need :
       {"kvtier_tier_hits_total", "kvtier_tier_misses_total", "kvtier_tier_bytes_out_total",
        "kvtier_integrity_errors_total", "kvtier_tier_evictions_total",
        "kvtier_store_pending_write_bytes", "kvtier_rpc_latency_seconds_bucket"})
    EXPECT_TRUE(used.count(need)) << need;
}

}  // namespace
}  // namespace kvt
