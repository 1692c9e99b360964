// Why a chunk is not held, end to end: a real kvtierd with tiny tiers (host memory of
// 1 MiB over a disk of four records) and two tenants; the daemon's answer over gRPC
// (RemoteClient::Inspect, the Lookup RPC's explain_misses), `kvtier inspect` (table and
// --json), another tenant's view (no reason), and the offline mode (no record).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
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
constexpr size_t kChunks = 24;
// 128 layers x 2 KV heads x head_dim 8, f16: 8 KiB per token, 128 KiB per chunk of 16.
constexpr int kLayers = 128;
// Four records of 131200 bytes, each padded to 135168 on disk.
constexpr uint64_t kDiskBytes = 4 * 135168;

std::vector<std::string> Cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

NamespaceParams Params(const std::string& tenant) {
  NamespaceParams p = TestParams("m", tenant);
  p.layout.num_layers = kLayers;
  return p;
}

std::vector<std::string> Flags(const std::string& tenant) {
  std::vector<std::string> f = NsFlags("m", tenant);
  for (size_t i = 0; i + 1 < f.size(); ++i) {
    if (f[i] == "--layers") f[i + 1] = std::to_string(kLayers);
  }
  return f;
}

class InspectReasonsTest : public ::testing::Test {
 public:
  // The disk tier's cache policy (YAML lines under disk_cache_policy). This one declines
  // chunks it sees for the first time once its budget for them is spent, and demotions
  // of chunks it let go ("adaptive", declines_first_seen): every chunk not held was
  // rejected by the disk.
  virtual std::string DiskPolicy() const {
    return "  name: adaptive\n  declines_first_seen: true\n";
  }

  void SetUp() override {
    target_ = "unix://" + tmp_.path() + "/kvtierd.sock";
    const std::string cfg = tmp_.path() + "/kvtierd.yaml";
    // Host memory keeps recent chunks (lru); the disk declines chunks it sees for the
    // first time once its budget for them is spent ("adaptive", declines_first_seen).
    std::ofstream(cfg) << absl::StrFormat(
        "listen: %s\ndata_dir: %s/data\nhost_capacity: 1MiB\ndisk_capacity: %d\n"
        "disk_file_bytes: %d\nmax_record_bytes: 256KiB\nmax_inflight_bytes: 16MiB\n"
        "workers: 2\nlog_level: warn\nmetrics:\n  listen: ''\nready_file: %s/ready.json\n"
        "host_cache_policy:\n  name: lru\n"
        "disk_cache_policy:\n%s"
        "tenants:\n  - name: a\n    tokens: [%s]\n  - name: b\n    tokens: [%s]\n",
        target_, tmp_.path(), kDiskBytes, kDiskBytes, tmp_.path(), DiskPolicy(), kTokenA, kTokenB);
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
    tokens_ = Tokens(kChunks * 16, 7);
    chunks_ = PromptChunks(Params("a"), tokens_);
    ASSERT_EQ(chunks_.size(), kChunks);
    for (const auto& c : chunks_) keys_.push_back(c.key);
    auto a = Client(kTokenA);
    ASSERT_NE(a, nullptr);
    for (const auto& c : chunks_) ASSERT_TRUE(a->Put(c.record).ok()) << Log();
    file_ = tmp_.path() + "/p.tokens";
    WriteTokens(file_, tokens_);
  }

  void TearDown() override { StopDaemon(); }

  void StopDaemon() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int st = 0;
      ::waitpid(pid_, &st, 0);
      pid_ = -1;
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

  // The daemon's answer for every key, as `token` sees it; the write-back settled
  // first (a Lookup until two answers agree).
  RemoteLookup Inspect(const char* token) {
    auto c = Client(token);
    RemoteLookup last;
    for (int i = 0; i < 50; ++i) {
      auto r = c->Inspect(keys_);
      EXPECT_TRUE(r.ok()) << r.status();
      if (!r.ok()) return {};
      if (i > 0 && r->tier == last.tier) return *r;
      last = *r;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return last;
  }

  RunResult Kvtier(const char* token, const std::vector<std::string>& args) {
    return clitest::Run(KVTIER_BIN, Cat({"--daemon", target_, "--token", token}, args));
  }

  TempDir tmp_;
  pid_t pid_ = -1;
  std::string target_, file_;
  std::vector<TokenId> tokens_;
  std::vector<PromptChunk> chunks_;
  std::vector<ChunkKey> keys_;
};

// Every miss of the daemon's answer `r` has the reason `want`, and `kvtier inspect`
// (table and --json) shows exactly what the daemon said, chunk by chunk.
void CheckReasons(InspectReasonsTest& t, const RemoteLookup& r, AbsenceReason want) {
  ASSERT_TRUE(r.explained) << "the daemon sent no reasons";
  ASSERT_EQ(r.absence.size(), kChunks);
  size_t misses = 0;
  for (size_t i = 0; i < kChunks; ++i) {
    if (r.tier[i]) continue;
    ++misses;
    EXPECT_EQ(r.absence[i].reason, want)
        << "chunk " << i << ": " << AbsenceReasonName(r.absence[i].reason);
  }
  // Host memory holds 7 of 24 chunks and the disk 4: at least 13 misses.
  EXPECT_GE(misses, 13u);

  RunResult json = t.Kvtier(kTokenA, Cat({"inspect", "--json", "--tokens", t.file_}, Flags("a")));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  nlohmann::json j = nlohmann::json::parse(json.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << json.out;
  RunResult table = t.Kvtier(kTokenA, Cat({"inspect", "--tokens", t.file_}, Flags("a")));
  ASSERT_EQ(table.exit_code, 0) << table.err;
  auto rows = TableRows(table.out, "CHUNK");
  ASSERT_EQ(rows.size(), kChunks) << table.out;
  for (size_t i = 0; i < kChunks; ++i) {
    const nlohmann::json& c = j["chunks"][i];
    if (r.tier[i]) {
      EXPECT_TRUE(c["miss_reason"].is_null());
      EXPECT_EQ(rows[i][4].rfind("cached", 0), 0u) << rows[i][4];
      continue;
    }
    const Absence& a = r.absence[i];
    EXPECT_EQ(c["miss_reason"], std::string(AbsenceReasonName(a.reason))) << i;
    const std::string tier = a.tier == TierKind::kHost ? "host" : "disk";
    EXPECT_EQ(c["miss_tier"], tier) << i;
    if (a.reason == AbsenceReason::kEvicted) {
      EXPECT_EQ(rows[i][4], "miss: evicted (" + tier + ")");
    } else if (a.reason == AbsenceReason::kRejected) {
      std::string by;
      for (const auto& b : c["rejected_by"])
        by += (by.empty() ? "" : " and ") + b.get<std::string>();
      EXPECT_FALSE(by.empty()) << i;
      EXPECT_EQ(rows[i][4], "miss: rejected by " + by + " admission");
    }
  }
}

TEST_F(InspectReasonsTest, ChunksTheDiskDeclinedReadRejectedByDiskAdmission) {
  RemoteLookup r = Inspect(kTokenA);
  CheckReasons(*this, r, AbsenceReason::kRejected);
  for (size_t i = 0; i < kChunks && i < r.absence.size(); ++i) {
    if (!r.tier[i]) {
      EXPECT_TRUE(r.absence[i].rejected_by & (1u << static_cast<unsigned>(TierKind::kDisk))) << i;
    }
  }
}

TEST_F(InspectReasonsTest, ErasedAndNeverStoredChunksSaySo) {
  RemoteLookup r = Inspect(kTokenA);
  size_t held = kChunks;
  for (size_t i = 0; i < kChunks && i < r.tier.size(); ++i) {
    if (r.tier[i]) held = i;
  }
  ASSERT_LT(held, kChunks);
  auto c = Client(kTokenA);
  EvictSelector sel;
  sel.keys = {keys_[held]};
  ASSERT_TRUE(c->Evict(sel, /*dry_run=*/false).ok());
  auto after = c->Inspect(std::span(&keys_[held], 1));
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_EQ(after->absence.size(), 1u);
  EXPECT_FALSE(after->tier[0].has_value());
  EXPECT_EQ(after->absence[0].reason, AbsenceReason::kErased);
  RunResult erased = Kvtier(kTokenA, Cat({"inspect", "--tokens", file_}, Flags("a")));
  auto rows = TableRows(erased.out, "CHUNK");
  ASSERT_EQ(rows.size(), kChunks) << erased.out;
  EXPECT_THAT(rows[held][4], HasSubstr("miss: erased ("));

  // A key nobody stored, with nothing forgotten by the daemon's record: "not stored".
  std::vector<PromptChunk> never = PromptChunks(Params("a"), Tokens(16, 99));
  auto n = c->Inspect(std::span(&never[0].key, 1));
  ASSERT_TRUE(n.ok()) << n.status();
  ASSERT_EQ(n->absence.size(), 1u);
  EXPECT_EQ(n->absence[0].reason, AbsenceReason::kNotStored);
  const std::string never_file = tmp_.path() + "/never.tokens";
  WriteTokens(never_file, Tokens(16, 99));
  RunResult ns = Kvtier(kTokenA, Cat({"inspect", "--tokens", never_file}, Flags("a")));
  rows = TableRows(ns.out, "CHUNK");
  ASSERT_EQ(rows.size(), 1u) << ns.out << ns.err;
  EXPECT_EQ(rows[0][4], "miss: not stored");
}

// The disk keeps what it is given, in LRU order, and holds fewer chunks than host
// memory: each chunk not held was evicted.
class InspectEvictedTest : public InspectReasonsTest {
 protected:
  std::string DiskPolicy() const override { return "  name: lru\n"; }
};

TEST_F(InspectEvictedTest, ChunksWhoseLastCopyWasEvictedReadEvicted) {
  CheckReasons(*this, Inspect(kTokenA), AbsenceReason::kEvicted);
}

TEST_F(InspectReasonsTest, AnotherTenantGetsNoReason) {
  RemoteLookup r = Inspect(kTokenB);
  ASSERT_TRUE(r.explained);
  ASSERT_EQ(r.absence.size(), kChunks);
  for (size_t i = 0; i < kChunks; ++i) {
    EXPECT_FALSE(r.tier[i].has_value()) << "tenant b sees a's chunk " << i;
    // The answer for a key nobody stored: nothing about a's chunks leaks.
    EXPECT_EQ(r.absence[i].reason, AbsenceReason::kNotStored) << i;
    EXPECT_EQ(r.absence[i].rejected_by, 0);
  }
}

TEST_F(InspectReasonsTest, OfflineDiskDirSaysItHasNoRecord) {
  StopDaemon();
  RunResult r = clitest::Run(
      KVTIER_BIN, Cat({"--disk-dir", tmp_.path() + "/data", "inspect", "--json", "--tokens", file_},
                      Flags("a")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  size_t misses = 0;
  for (const auto& c : j["chunks"]) {
    EXPECT_TRUE(c["miss_reason"].is_null());
    if (!c["cached"].get<bool>()) ++misses;
  }
  EXPECT_GT(misses, 0u);
  RunResult t = clitest::Run(
      KVTIER_BIN,
      Cat({"--disk-dir", tmp_.path() + "/data", "inspect", "--tokens", file_}, Flags("a")));
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_THAT(t.out, HasSubstr("why: only a running kvtierd records why a chunk is not held"));
}

}  // namespace
}  // namespace kvt::clitest
