// The kvtier binary against a real kvtierd started on a unix socket in a temp dir, with
// two tenants. Chunks are stored through kvt::RemoteClient as records built with
// kvt::ChunkChainEncoder; the CLI runs as a subprocess.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "absl/strings/str_format.h"
#include "cli_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/remote_client.h"
#include "nlohmann/json.hpp"

namespace kvt::clitest {
namespace {

using ::testing::HasSubstr;

constexpr char kTokenA[] = "token-tenant-a-0001";
constexpr char kTokenB[] = "token-tenant-b-0002";

std::vector<std::string> Cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

nlohmann::json Json(const RunResult& r) {
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON: " << r.out << r.err;
  return j;
}

class DaemonCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    target_ = "unix://" + tmp_.path() + "/kvtierd.sock";
    const std::string cfg = tmp_.path() + "/kvtierd.yaml";
    std::ofstream(cfg) << absl::StrFormat(
        "listen: %s\ndata_dir: %s/data\nhost_capacity: 16MiB\ndisk_capacity: 64MiB\n"
        "disk_file_bytes: 16MiB\nmax_record_bytes: 8MiB\nmax_inflight_bytes: 64MiB\nworkers: "
        "2\nlog_level: warn\nmetrics:\n  listen: ''\n"
        "ready_file: %s/ready.json\ntenants:\n  - name: a\n    tokens: [%s]\n"
        "  - name: b\n    tokens: [%s]\n",
        target_, tmp_.path(), tmp_.path(), kTokenA, kTokenB);
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string log = tmp_.path() + "/kvtierd.log";
      FILE* f = std::freopen(log.c_str(), "w", stdout);
      (void)f;
      ::dup2(1, 2);
      ::execl(KVTIERD_BIN, KVTIERD_BIN, "--config", cfg.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!std::filesystem::exists(tmp_.path() + "/ready.json")) {
      int st = 0;
      ASSERT_NE(::waitpid(pid_, &st, WNOHANG), pid_) << "kvtierd exited: " << Log();
      ASSERT_LT(std::chrono::steady_clock::now(), until) << "kvtierd not ready: " << Log();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }

    // Tenant a: prompt P (5 chunks + 5 tokens) and branch Q (P's first 2 chunks + 2 of
    // its own) under model "m"; P's first 3 chunks under model "m2".
    // Tenant b: P (5 chunks) under model "m" with tenant "b" (a different namespace).
    p_ = Tokens(85, 1);
    q_ = std::vector<TokenId>(p_.begin(), p_.begin() + 32);
    auto tail = Tokens(32, 2);
    q_.insert(q_.end(), tail.begin(), tail.end());
    pa_ = PromptChunks(TestParams("m", "a"), p_);
    qa_ = PromptChunks(TestParams("m", "a"), q_);
    m2a_ = PromptChunks(TestParams("m2", "a"), std::vector<TokenId>(p_.begin(), p_.begin() + 48));
    pb_ = PromptChunks(TestParams("m", "b"), p_);
    Put(kTokenA, pa_);
    Put(kTokenA, {qa_[2], qa_[3]});
    Put(kTokenA, m2a_);
    Put(kTokenB, pb_);
    p_file_ = tmp_.path() + "/p.tokens";
    WriteTokens(p_file_, p_);
  }

  void TearDown() override {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int st = 0;
      ::waitpid(pid_, &st, 0);
    }
  }

  std::string Log() const {
    std::ifstream in(tmp_.path() + "/kvtierd.log");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  std::unique_ptr<RemoteClient> Client(const char* token) {
    RemoteClientOptions o;
    o.target = target_;
    o.token = token;
    o.deadline = std::chrono::milliseconds(10000);
    auto c = RemoteClient::Create(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? std::move(*c) : nullptr;
  }

  void Put(const char* token, const std::vector<PromptChunk>& chunks) {
    auto c = Client(token);
    ASSERT_NE(c, nullptr);
    for (const auto& ch : chunks) ASSERT_TRUE(c->Put(ch.record).ok()) << Log();
  }

  // Per-key presence as tenant `token` sees it.
  std::vector<bool> Present(const char* token, const std::vector<PromptChunk>& chunks) {
    auto c = Client(token);
    std::vector<ChunkKey> keys;
    for (const auto& ch : chunks) keys.push_back(ch.key);
    auto r = c->Lookup(keys, /*per_key=*/true);
    EXPECT_TRUE(r.ok()) << r.status();
    std::vector<bool> out;
    for (const auto& t : r->tier) out.push_back(t.has_value());
    return out;
  }

  RunResult Kvtier(const char* token, const std::vector<std::string>& args) {
    std::vector<std::string> all = {"--daemon", target_};
    if (token != nullptr) {
      all.push_back("--token");
      all.push_back(token);
    }
    return clitest::Run(KVTIER_BIN, Cat(all, args));
  }

  TempDir tmp_;
  pid_t pid_ = -1;
  std::string target_, p_file_;
  std::vector<TokenId> p_, q_;
  std::vector<PromptChunk> pa_, qa_, m2a_, pb_;
};

TEST_F(DaemonCliTest, InspectShowsExactlyTheStoredChunksAndTheirTiers) {
  // What the daemon itself says about each key.
  auto c = Client(kTokenA);
  std::vector<ChunkKey> keys;
  for (const auto& ch : pa_) keys.push_back(ch.key);
  auto truth = c->Lookup(keys, true);
  ASSERT_TRUE(truth.ok()) << truth.status();

  auto args = Cat({"inspect", "--tokens", p_file_}, NsFlags("m", "a"));
  RunResult table = Kvtier(kTokenA, args);
  ASSERT_EQ(table.exit_code, 0) << table.err;
  RunResult json = Kvtier(kTokenA, Cat(args, {"--json"}));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  nlohmann::json j = Json(json);
  EXPECT_EQ(j["leading_chunks"], 5);
  EXPECT_EQ(j["tokens_to_load"], 80);
  EXPECT_EQ(j["tokens_to_recompute"], 5);
  auto rows = TableRows(table.out, "CHUNK");
  ASSERT_EQ(rows.size(), 5u) << table.out;
  for (size_t i = 0; i < 5; ++i) {
    ASSERT_TRUE(truth->tier[i].has_value());
    const std::string tier =
        std::string(i == 0 ? "" : "") + (*truth->tier[i] == TierKind::kHost   ? "host"
                                         : *truth->tier[i] == TierKind::kDisk ? "disk"
                                                                              : "remote");
    EXPECT_EQ(j["chunks"][i]["key"], pa_[i].key.ToHex());
    EXPECT_EQ(j["chunks"][i]["tier"], tier);
    EXPECT_EQ(rows[i][2], pa_[i].key.ToHex());
    EXPECT_EQ(rows[i][3], tier);
    EXPECT_EQ(rows[i][4], "cached");
  }
  EXPECT_THAT(table.out,
              HasSubstr("leading cached chunks: 5 of 5 -> an engine would load 80 tokens"));

  // The same prompt under tenant b's namespace, asked as tenant a: a's token cannot see
  // b's chunks, so the namespace is unknown to a.
  RunResult other = Kvtier(kTokenA, Cat({"inspect", "--tokens", p_file_}, NsFlags("m", "b")));
  EXPECT_EQ(other.exit_code, 3);
  EXPECT_THAT(other.err, HasSubstr("unknown namespace"));
}

TEST_F(DaemonCliTest, EvictPrefixRemovesExactlyThatPrefixAndWhatFollows) {
  const std::string prefix = tmp_.path() + "/prefix.tokens";
  WriteTokens(prefix, std::vector<TokenId>(p_.begin(), p_.begin() + 48));
  auto args = Cat({"evict", "--json", "--prefix", prefix}, NsFlags("m", "a"));
  RunResult dry = Kvtier(kTokenA, Cat(args, {"--dry-run"}));
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  EXPECT_EQ(Json(dry)["evicted_chunks"], 5);
  EXPECT_EQ(Present(kTokenA, pa_), std::vector<bool>(5, true));

  RunResult ev = Kvtier(kTokenA, args);
  ASSERT_EQ(ev.exit_code, 0) << ev.err;
  nlohmann::json j = Json(ev);
  std::set<std::string> got, want;
  for (const auto& c : j["chunks"]) got.insert(c["key"]);
  for (const auto& c : pa_) want.insert(c.key.ToHex());
  EXPECT_EQ(got, want);
  EXPECT_EQ(j["evicted_chunks"], 5);
  EXPECT_EQ(j["orphaned_chunks"], 2);
  // Gone: P under tenant a. Untouched: Q's own chunks, model m2, and tenant b's P.
  EXPECT_EQ(Present(kTokenA, pa_), std::vector<bool>(5, false));
  EXPECT_EQ(Present(kTokenA, {qa_[2], qa_[3]}), std::vector<bool>(2, true));
  EXPECT_EQ(Present(kTokenA, m2a_), std::vector<bool>(3, true));
  EXPECT_EQ(Present(kTokenB, pb_), std::vector<bool>(5, true));
}

TEST_F(DaemonCliTest, LsAndStatsJsonHoldTheTableNumbers) {
  RunResult table = Kvtier(kTokenA, {"ls"});
  ASSERT_EQ(table.exit_code, 0) << table.err;
  RunResult json = Kvtier(kTokenA, {"ls", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  nlohmann::json j = Json(json);
  // Tenant a sees its two namespaces only (7 + 3 chunks), never tenant b's.
  EXPECT_EQ(j["total_namespaces"], 2);
  EXPECT_EQ(j["total_chunks"], 10);
  std::map<std::string, uint64_t> table_chunks;
  for (const auto& row : TableRows(table.out, "NAMESPACE"))
    table_chunks[row[0]] += std::stoull(row[2]);
  std::map<std::string, uint64_t> json_chunks;
  for (const auto& n : j["namespaces"]) json_chunks[n["namespace"]] = n["chunks"];
  EXPECT_EQ(table_chunks, json_chunks);
  EXPECT_EQ(json_chunks[ComputeNamespace(TestParams("m", "a")).ToHex()], 7u);
  EXPECT_EQ(json_chunks[ComputeNamespace(TestParams("m2", "a")).ToHex()], 3u);

  RunResult st = Kvtier(kTokenA, {"stats", "--json"});
  ASSERT_EQ(st.exit_code, 0) << st.err;
  nlohmann::json s = Json(st);
  ASSERT_GE(s["tiers"].size(), 1u);
  // Looking (ls above, stats) never pins: no lease yet.
  ASSERT_TRUE(s["leases"].is_object()) << s.dump();
  EXPECT_EQ(s["leases"]["granted"], 0);
  // An engine's pinned lookup: one lease granted and active, in both outputs.
  auto c = Client(kTokenA);
  std::vector<ChunkKey> keys;
  for (const auto& ch : pa_) keys.push_back(ch.key);
  auto pinned = c->Lookup(keys, false, /*pin=*/true);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  ASSERT_NE(pinned->lease_id, 0u);
  RunResult st2 = Kvtier(kTokenA, {"stats", "--json"});
  ASSERT_EQ(st2.exit_code, 0) << st2.err;
  s = Json(st2);
  EXPECT_EQ(s["leases"]["granted"], 1) << s.dump();
  EXPECT_EQ(s["leases"]["active"], 1) << s.dump();
  EXPECT_EQ(s["leases"]["released"], 0) << s.dump();
  RunResult stt = Kvtier(kTokenA, {"stats"});
  ASSERT_EQ(stt.exit_code, 0) << stt.err;
  EXPECT_NE(stt.out.find("leases            1 active; 1 granted, 0 released, 0 expired"),
            std::string::npos)
      << stt.out;
  auto rows = TableRows(stt.out, "TIER");
  ASSERT_EQ(rows.size(), s["tiers"].size()) << stt.out;
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i][0], s["tiers"][i]["name"]);
    EXPECT_EQ(rows[i][4], std::to_string(s["tiers"][i]["chunks"].get<uint64_t>()));
  }
  RunResult w = Kvtier(kTokenA, {"watch", "--json", "--count", "2", "--interval", "0.05"});
  ASSERT_EQ(w.exit_code, 0) << w.err;
  EXPECT_EQ(std::count(w.out.begin(), w.out.end(), '\n'), 2);
}

TEST_F(DaemonCliTest, EvictNamespaceTouchesNoOtherTenant) {
  // Tenant a cannot evict tenant b's namespace: to a it does not exist.
  const std::string nsb = ComputeNamespace(TestParams("m", "b")).ToHex();
  RunResult r = Kvtier(kTokenA, {"evict", "--ns", nsb});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(Present(kTokenB, pb_), std::vector<bool>(5, true));
  RunResult own = Kvtier(kTokenB, {"evict", "--json", "--ns", nsb});
  ASSERT_EQ(own.exit_code, 0) << own.err;
  EXPECT_EQ(Json(own)["evicted_chunks"], 5);
  EXPECT_EQ(Present(kTokenB, pb_), std::vector<bool>(5, false));
  EXPECT_EQ(Present(kTokenA, pa_), std::vector<bool>(5, true));
}

TEST(DaemonAddressCliTest, MalformedAddressesExit2WithTheAcceptedForms) {
  const std::string forms =
      "expected unix:/path/to/kvtierd.sock, unix:///path/to/kvtierd.sock or host:port";
  struct Case {
    std::string address, hint;
  };
  for (const Case& c :
       std::vector<Case>{{"/tmp/kvtierd.sock", "needs the unix: prefix: unix:/tmp/kvtierd.sock"},
                         {"garbage", "no port"},
                         {"host:99999", "port '99999' is not a number in 1..65535"},
                         {"unix:", "the socket path is missing"},
                         {"::1:7470", "IPv6 address in brackets"}}) {
    RunResult r = clitest::Run(KVTIER_BIN, {"--daemon", c.address, "--timeout", "5", "stats"}, 20);
    EXPECT_EQ(r.exit_code, 2) << c.address;
    EXPECT_THAT(r.err, HasSubstr("--daemon '" + c.address + "': " + forms)) << c.address;
    EXPECT_THAT(r.err, HasSubstr(c.hint)) << c.address;
  }
}

TEST_F(DaemonCliTest, BadInputsFailWithAClearMessage) {
  // --timeout is honoured when nothing listens: the CLI waits for it (not a fixed ~1 s).
  const auto start = std::chrono::steady_clock::now();
  RunResult nodaemon = clitest::Run(
      KVTIER_BIN,
      {"--daemon", "unix://" + tmp_.path() + "/nothing.sock", "--timeout", "1.5", "stats"});
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(nodaemon.exit_code, 1);
  EXPECT_THAT(nodaemon.err,
              HasSubstr("no kvtierd reachable at unix://" + tmp_.path() + "/nothing.sock"));
  EXPECT_THAT(nodaemon.err, HasSubstr("nothing answered within 1.5 s"));
  EXPECT_GE(waited, std::chrono::milliseconds(1400));
  RunResult badtimeout = clitest::Run(KVTIER_BIN, {"--daemon", target_, "--timeout", "0", "stats"});
  EXPECT_EQ(badtimeout.exit_code, 2);
  EXPECT_THAT(badtimeout.err, HasSubstr("--timeout 0: expected seconds in (0, 600]"));
  RunResult notoken = Kvtier(nullptr, {"stats"});
  EXPECT_EQ(notoken.exit_code, 1);
  EXPECT_THAT(notoken.err, HasSubstr("--token"));
  RunResult badtoken = Kvtier("not-a-valid-token", {"stats"});
  EXPECT_EQ(badtoken.exit_code, 1);
  const std::string bad = tmp_.path() + "/bad.tokens";
  std::ofstream(bad) << "1 2 three";
  RunResult badfile = Kvtier(kTokenA, Cat({"inspect", "--tokens", bad}, NsFlags("m", "a")));
  EXPECT_EQ(badfile.exit_code, 2);
  EXPECT_THAT(badfile.err, HasSubstr("bad token file"));
  RunResult unknown =
      Kvtier(kTokenA, Cat({"inspect", "--tokens", p_file_}, NsFlags("no-such-model", "a")));
  EXPECT_EQ(unknown.exit_code, 3);
  EXPECT_THAT(unknown.err, HasSubstr("unknown namespace"));
}

TEST_F(DaemonCliTest, OfflineDiskDirAfterTheDaemonStops) {
  // The daemon's data dir is a disk tier: with kvtierd stopped, --disk-dir reads it.
  ::kill(pid_, SIGTERM);
  int st = 0;
  ::waitpid(pid_, &st, 0);
  pid_ = -1;
  RunResult r = clitest::Run(KVTIER_BIN, Cat({"--disk-dir", tmp_.path() + "/data", "inspect",
                                              "--json", "--tokens", p_file_},
                                             NsFlags("m", "a")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = Json(r);
  EXPECT_EQ(j["leading_chunks"], 5);
  for (const auto& c : j["chunks"]) EXPECT_EQ(c["tier"], "disk");
}

}  // namespace
}  // namespace kvt::clitest
