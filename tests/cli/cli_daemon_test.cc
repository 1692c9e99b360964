// The kvtier binary against a real kvtierd started on a unix socket in a temp dir, with
// two tenants. Chunks are stored through kvt::RemoteClient as records built with
// kvt::ChunkChainEncoder; the CLI runs as a subprocess.
#include <httplib.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
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
#ifdef KVT_CLI_TEST_HAVE_SERVER
#include "kvstore/store_factory.h"
#include "kvtier_server/tail_records.h"
#include "store_test_util.h"
#endif

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
       std::vector<Case>{{"/tmp/kvtierd.sock", "needs the unix: prefix: unix:///tmp/kvtierd.sock"},
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

// A unix socket bound to `path`; listening (connections queue in the kernel and are never
// accepted: a client connects but nothing answers) or closed without unlinking its file
// (a socket file nothing listens on: connect is refused).
class UnixSocket {
 public:
  UnixSocket(const std::string& path, bool listening) {
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
    ok_ = fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
          (!listening || ::listen(fd_, 16) == 0);
    if (!listening && fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~UnixSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool ok() const { return ok_; }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

// A socket path where no kvtierd can answer is reported at once, with what is wrong
// there, and exits 1 like every unreachable daemon; it does not wait for --timeout.
TEST(DaemonAddressCliTest, MissingOrDeadSocketIsReportedAtOnceNamingTheProblem) {
  TempDir tmp;
  const std::string file = tmp.path() + "/plain.file";
  std::ofstream(file) << "not a socket";
  const std::string dead = tmp.path() + "/dead.sock";
  UnixSocket stale(dead, /*listening=*/false);
  ASSERT_TRUE(stale.ok()) << std::strerror(errno);
  struct Case {
    std::string address, why;
  };
  const Case cases[] = {
      {"unix://" + tmp.path() + "/no/such.sock", "the socket file does not exist"},
      {"unix:" + tmp.path() + "/nothing.sock", "the socket file does not exist"},
      {"unix://" + file, "the file is not a socket"},
      {"unix://" + tmp.path(), "it is a directory, not a socket"},
      {"unix://" + dead, "nothing listens on the socket (connection refused"},
  };
  for (const Case& c : cases) {
    const auto start = std::chrono::steady_clock::now();
    RunResult r = clitest::Run(KVTIER_BIN, {"--daemon", c.address, "--timeout", "30", "stats"}, 45);
    const auto waited = std::chrono::steady_clock::now() - start;
    EXPECT_EQ(r.exit_code, 1) << c.address << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr("kvtier stats: no kvtierd at " + c.address + ": " + c.why))
        << c.address;
    EXPECT_LT(waited, std::chrono::seconds(30)) << c.address << ": waited for --timeout";
  }
  // The same from KVTIER_DAEMON names the variable.
  RunResult env = clitest::Run(KVTIER_BIN, {"--timeout", "30", "stats"}, 45,
                               {{"KVTIER_DAEMON", "unix:///no/such.sock"}});
  EXPECT_EQ(env.exit_code, 1) << env.err;
  EXPECT_THAT(env.err, HasSubstr("no kvtierd at unix:///no/such.sock (KVTIER_DAEMON): the socket "
                                 "file does not exist"));
}

// Where the address comes from KVTIER_DAEMON, the errors name the variable, not a
// --daemon flag the user never typed.
TEST(DaemonAddressCliTest, AddressFromTheEnvironmentIsNamedAsSuch) {
  TempDir tmp;
  RunResult both = clitest::Run(KVTIER_BIN, {"--disk-dir", tmp.path(), "stats"}, 30,
                                {{"KVTIER_DAEMON", "unix:///run/kvtierd.sock"}});
  EXPECT_EQ(both.exit_code, 2) << both.err;
  EXPECT_THAT(both.err, HasSubstr("KVTIER_DAEMON is set (unix:///run/kvtierd.sock) and "
                                  "--disk-dir is given: give one, not both"));
  EXPECT_THAT(both.err, ::testing::Not(HasSubstr("--daemon")));
  RunResult flag = clitest::Run(
      KVTIER_BIN, {"--daemon", "unix:///run/kvtierd.sock", "--disk-dir", tmp.path(), "stats"}, 30);
  EXPECT_EQ(flag.exit_code, 2) << flag.err;
  EXPECT_THAT(flag.err, HasSubstr("give either --daemon or --disk-dir, not both"));
  RunResult malformed =
      clitest::Run(KVTIER_BIN, {"stats"}, 30, {{"KVTIER_DAEMON", "/tmp/kvtierd.sock"}});
  EXPECT_EQ(malformed.exit_code, 2) << malformed.err;
  EXPECT_THAT(malformed.err, HasSubstr("KVTIER_DAEMON '/tmp/kvtierd.sock': expected"));
  // An empty KVTIER_DAEMON counts as unset: --disk-dir alone opens the directory (which
  // holds no disk tier here: NotFound, exit 3, not a usage error).
  RunResult cleared = clitest::Run(KVTIER_BIN, {"--disk-dir", tmp.path() + "/none", "stats"}, 30,
                                   {{"KVTIER_DAEMON", ""}});
  EXPECT_EQ(cleared.exit_code, 3) << cleared.err;
}

TEST_F(DaemonCliTest, BadInputsFailWithAClearMessage) {
  // --timeout is honoured when a socket accepts connections but nothing answers (a
  // paused or hung daemon): the CLI says it waited for it (not a fixed ~1 s). The wait
  // itself is not timed here (no wall time in pass/fail tests).
  const std::string hung = tmp_.path() + "/hung.sock";
  UnixSocket silent(hung, /*listening=*/true);
  ASSERT_TRUE(silent.ok()) << std::strerror(errno);
  RunResult nodaemon =
      clitest::Run(KVTIER_BIN, {"--daemon", "unix://" + hung, "--timeout", "1.5", "stats"});
  EXPECT_EQ(nodaemon.exit_code, 1);
  EXPECT_THAT(nodaemon.err, HasSubstr("no kvtierd reachable at unix://" + hung));
  EXPECT_THAT(nodaemon.err, HasSubstr("nothing answered within 1.5 s"));
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

TEST_F(DaemonCliTest, ShowLayoutIsReadOnly) {
  // docs/cli.md: looking never changes the cache. --show-layout reads one header per
  // namespace: no hit may be counted for it, in the store or in any tier.
  auto stats = [&] {
    RunResult r = Kvtier(kTokenA, {"stats", "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return Json(r);
  };
  const nlohmann::json before = stats();
  RunResult ls = Kvtier(kTokenA, {"ls", "--json", "--show-layout"});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  nlohmann::json j = Json(ls);
  ASSERT_EQ(j["namespaces"].size(), 2u) << ls.out;  // tenant a: models m and m2
  for (const auto& n : j["namespaces"]) {
    ASSERT_TRUE(n.contains("layout")) << n;
    EXPECT_EQ(n["layout"]["num_layers"], 2);
    EXPECT_EQ(n["layout"]["head_dim"], 8);
  }
  const nlohmann::json after = stats();
  EXPECT_EQ(after["hits"], before["hits"]);
  EXPECT_EQ(after["misses"], before["misses"]);
  ASSERT_EQ(after["tiers"].size(), before["tiers"].size());
  for (size_t i = 0; i < after["tiers"].size(); ++i) {
    EXPECT_EQ(after["tiers"][i]["hits"], before["tiers"][i]["hits"]) << after["tiers"][i]["name"];
    EXPECT_EQ(after["tiers"][i]["misses"], before["tiers"][i]["misses"]);
  }
}

TEST_F(DaemonCliTest, DefaultDaemonIsKvtierdsDefaultSocket) {
  // kvtierd listens on unix://$XDG_RUNTIME_DIR/kvtierd.sock by default; this one listens
  // there for XDG_RUNTIME_DIR = the test's directory. No --daemon, no KVTIER_DAEMON.
  RunResult r = clitest::Run(KVTIER_BIN, {"--token", kTokenA, "stats", "--json"}, 60,
                             {{"XDG_RUNTIME_DIR", tmp_.path()}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(Json(r)["source"].get<std::string>(), HasSubstr("kvtierd " + target_));
  // KVTIER_DAEMON wins over the default.
  RunResult env =
      clitest::Run(KVTIER_BIN, {"--token", kTokenA, "stats", "--json"}, 60,
                   {{"XDG_RUNTIME_DIR", "/nonexistent-kvt"}, {"KVTIER_DAEMON", target_}});
  ASSERT_EQ(env.exit_code, 0) << env.err;
  // Nothing at the default address: a usage error naming it.
  RunResult none =
      clitest::Run(KVTIER_BIN, {"stats"}, 60, {{"XDG_RUNTIME_DIR", "/nonexistent-kvt"}});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_THAT(
      none.err,
      HasSubstr("no kvtierd socket at the default address unix:///nonexistent-kvt/kvtierd.sock"));
}

// A stand-in for kvtier-llama-server's GET /kvtier, answering the body the server's
// ServerKvtier::StatusJson writes (the keys --from-server reads, as captured from a
// running server, plus a few of the others).
class FakeLlamaServer {
 public:
  explicit FakeLlamaServer(std::string body) : body_(std::move(body)) {
    server_.Get("/kvtier", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(body_, "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
  }
  ~FakeLlamaServer() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return absl::StrFormat("http://127.0.0.1:%d", port_); }

 private:
  std::string body_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

TEST_F(DaemonCliTest, FromServerUsesTheNamespaceTheServerReports) {
  const std::string ns = ComputeNamespace(TestParams("m", "a")).ToHex();
  FakeLlamaServer server(absl::StrFormat(
      R"({"enabled":true,"state":"ready","tiers":["host","remote"],"namespace":"%s",)"
      R"("chunk_tokens":16,"bytes_per_token":128,"requests":0,"hits":0,"misses":0})",
      ns));
  RunResult r =
      Kvtier(kTokenA, {"inspect", "--json", "--from-server", server.url(), "--tokens", p_file_});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = Json(r);
  EXPECT_EQ(j["namespace"], ns);
  EXPECT_EQ(j["chunk_tokens"], 16);
  EXPECT_EQ(j["leading_chunks"], 5);
  EXPECT_EQ(j["bytes_to_load"], 80 * 128);
  RunResult ev = Kvtier(kTokenA, {"evict", "--json", "--dry-run", "--from-server", server.url()});
  ASSERT_EQ(ev.exit_code, 0) << ev.err;
  EXPECT_EQ(Json(ev)["evicted_chunks"], 7);  // P's 5 and Q's own 2, under model m
  RunResult both =
      Kvtier(kTokenA, {"inspect", "--from-server", server.url(), "--ns", ns, "--tokens", p_file_});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_THAT(both.err, HasSubstr("give either --from-server or the namespace flags"));
  RunResult nothing =
      Kvtier(kTokenA, {"inspect", "--from-server", "http://127.0.0.1:1", "--tokens", p_file_});
  EXPECT_EQ(nothing.exit_code, 1);
  EXPECT_THAT(nothing.err, HasSubstr("--from-server http://127.0.0.1:1: no answer to GET /kvtier"));
}

#ifdef KVT_CLI_TEST_HAVE_SERVER
TEST_F(DaemonCliTest, IncludePartialFindsTheTailRecordKvtierLlamaServerWrites) {
  // kvtier-llama-server's own writer (TailRecords) stores P's tail: its 85 tokens are
  // 5 chunks of 16 and 5 more, of which the engine stores 4 (all but the last, which it
  // always computes). inspect --include-partial must find that record and say the engine
  // loads 84 tokens and computes 1.
  const NamespaceParams params = TestParams("m", "a");
  StoreOptions so;
  so.host.capacity_bytes = 1 << 20;
  auto store = OpenTieredStore(so);
  ASSERT_TRUE(store.ok()) << store.status();
  std::shared_ptr<TieredStore> local(std::move(*store));
  llamacpp::TailRecords tails(local, ComputeNamespace(params), params.layout, params.chunk_tokens);
  ASSERT_EQ(tails.TailTokens(p_.size()), 4u);
  ASSERT_TRUE(tails
                  .Queue(p_,
                         [](std::span<std::byte> payload) {
                           for (size_t i = 0; i < payload.size(); ++i)
                             payload[i] = static_cast<std::byte>(i * 7);
                           return absl::OkStatus();
                         })
                  .ok());
  tails.Flush();
  const ChunkKey tail_key = tails.TailKey(p_);
  auto record = kvt::testing::GetRecord(*local, tail_key);
  ASSERT_TRUE(record.ok()) << record.status();
  auto c = Client(kTokenA);
  ASSERT_TRUE(c->Put(*record).ok()) << Log();

  RunResult r = Kvtier(kTokenA, Cat({"inspect", "--json", "--include-partial", "--tokens", p_file_},
                                    NsFlags("m", "a")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = Json(r);
  ASSERT_EQ(j["chunks"].size(), 6u) << r.out;
  EXPECT_EQ(j["chunks"][5]["key"], tail_key.ToHex());
  EXPECT_EQ(j["chunks"][5]["first_token"], 80);
  EXPECT_EQ(j["chunks"][5]["tokens"], 4);
  EXPECT_EQ(j["chunks"][5]["tail"], true);
  EXPECT_EQ(j["chunks"][5]["cached"], true);
  EXPECT_EQ(j["leading_chunks"], 6);
  EXPECT_EQ(j["tokens_to_load"], 84);
  EXPECT_EQ(j["tokens_to_recompute"], 1);
  RunResult table = Kvtier(
      kTokenA, Cat({"inspect", "--include-partial", "--tokens", p_file_}, NsFlags("m", "a")));
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("would load 84 tokens (10.5 KiB) and recompute 1\n"));
}
#endif

}  // namespace
}  // namespace kvt::clitest
