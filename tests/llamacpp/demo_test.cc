// kvtier-demo end to end with the tiny model: the kvtierd column (the demo starts its
// own kvtierd, stores through the remote tier, a fresh process loads from it) and the
// n/a path when kvtierd cannot be started. Runs the real binary (KVT_DEMO_BIN).
#include <signal.h>
#include <sys/wait.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "llama_test_util.h"
#include "nlohmann/json.hpp"

namespace kvt::llamacpp {
namespace {

using ::kvt::llamacpp::testing::MakeTempDir;
using json = nlohmann::json;

struct DemoRun {
  int exit_code = -1;
  std::string out;  // stdout only
};

DemoRun RunDemo(const std::string& dir, const std::string& extra) {
  const std::string cmd = std::string(KVT_DEMO_BIN) + " --small --threads 1 --dir '" + dir + "' " +
                          extra + " 2>'" + dir + "/stderr.txt'";
  DemoRun run;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return run;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) run.out.append(buf, n);
  const int status = pclose(p);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

std::vector<json> JsonRows(const std::string& out) {
  std::vector<json> rows;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) rows.push_back(json::parse(line));
  }
  return rows;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

#ifdef KVT_DEMO_KVTIERD
TEST(KvtierDemoTest, KvtierdColumnLoadsSamePrefixesBitIdenticalAndStopsDaemon) {
  const std::string dir = MakeTempDir("demo-kvtierd");
  const DemoRun run = RunDemo(dir, "--json --kvtierd " KVT_DEMO_KVTIERD);
  ASSERT_EQ(run.exit_code, 0) << ReadAll(dir + "/stderr.txt");
  const std::vector<json> rows = JsonRows(run.out);
  ASSERT_GE(rows.size(), 3u);
  uint64_t loaded_total = 0;
  for (const json& r : rows) {
    SCOPED_TRACE(r.dump());
    ASSERT_TRUE(r["ttft_kvtierd_ms"].is_number());
    EXPECT_GT(r["ttft_kvtierd_ms"].get<double>(), 0.0);
    EXPECT_EQ(r["loaded_tokens_kvtierd"].get<uint64_t>(), r["loaded_tokens"].get<uint64_t>());
    EXPECT_TRUE(r["logits_identical"].get<bool>());
    loaded_total += r["loaded_tokens"].get<uint64_t>();
  }
  EXPECT_GT(loaded_total, 0u);  // some request really loaded from kvtierd
  // The daemon the demo started is gone and removed its socket and its ready file on
  // SIGTERM (the pid is the one the demo printed when it started it).
  const std::string err = ReadAll(dir + "/stderr.txt");
  const size_t at = err.find("started (pid ");
  ASSERT_NE(at, std::string::npos) << err;
  const pid_t pid = std::atoi(err.c_str() + at + std::strlen("started (pid "));
  ASSERT_GT(pid, 0);
  EXPECT_EQ(kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
  EXPECT_FALSE(std::filesystem::exists(dir + "/run/kvtierd.sock"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/run/kvtierd-ready.json"));
  EXPECT_NE(err.find("kvtierd stopped (SIGTERM, exit code 0)"), std::string::npos);
  if (!HasFailure()) std::filesystem::remove_all(dir);  // ~0.5 GB of tier files; kept on failure
}
#endif

TEST(KvtierDemoTest, MissingKvtierdShowsNaWithReasonAndSucceeds) {
  const std::string dir = MakeTempDir("demo-no-kvtierd");
  const DemoRun run = RunDemo(dir, "--kvtierd '" + dir + "/no-such-kvtierd'");
  ASSERT_EQ(run.exit_code, 0) << ReadAll(dir + "/stderr.txt");
  EXPECT_NE(run.out.find("kvtierd ms"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find(" n/a "), std::string::npos) << run.out;
#ifdef KVT_DEMO_HAVE_REMOTE
  EXPECT_NE(run.out.find("kvtierd: n/a (FAILED_PRECONDITION: kvtierd binary '" + dir +
                         "/no-such-kvtierd' not found or not executable)"),
            std::string::npos)
      << run.out;
#else
  EXPECT_NE(run.out.find("kvtierd: n/a (built with KVT_BUILD_DAEMON=OFF"), std::string::npos)
      << run.out;
#endif
  EXPECT_NE(run.out.find("logits bit-identical to recompute for every request: yes"),
            std::string::npos);
  if (!HasFailure()) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kvt::llamacpp
