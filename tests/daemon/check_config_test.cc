// `kvtierd --check-config` as a user runs it: the config file and the flags are validated
// and the effective settings printed, with nothing bound and the data dir left alone;
// errors exit 2 naming the key, the file or the flag the bad value came from.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_format.h"

namespace {

namespace fs = std::filesystem;

struct Result {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class CheckConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvt-check-config-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  // Runs kvtierd --check-config `args` (killed after 20 s).
  Result Check(const std::string& args) {
    const std::string cmd = absl::StrFormat("timeout 20 %s --check-config %s >%s/out 2>%s/err",
                                            KVTIERD_BIN, args, dir_, dir_);
    const int rc = std::system(cmd.c_str());
    return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, ReadFile(dir_ + "/out"), ReadFile(dir_ + "/err")};
  }
  std::string dir_;
};

TEST_F(CheckConfigTest, ValidConfigPrintsTheEffectiveSettingsAndTouchesNothing) {
  const std::string sock = dir_ + "/kvtierd.sock";
  const std::string data = dir_ + "/data";
  const std::string cfg =
      Write("kvtierd.yaml",
            absl::StrFormat("listen: unix://%s\ndata_dir: %s\nhost_capacity: 64MiB\n"
                            "disk_capacity: 1GiB\nworkers: 3\nmetrics:\n  listen: 127.0.0.1:0\n"
                            "tenants:\n  - name: a\n    tokens: [secret-token-a]\n",
                            sock, data));
  Result r = Check("--config " + cfg + " --workers 5 --no-direct-io");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("# kvtierd --check-config: valid (" + cfg + ")"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("host_capacity: 64MiB  # " + cfg), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("workers: 5  # --workers"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("disk_direct_io: false  # --no-direct-io"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("durability: sync  # default"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("secret-token-a"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(sock)) << "--check-config bound the socket";
  EXPECT_FALSE(fs::exists(data)) << "--check-config created the data dir";
}

TEST_F(CheckConfigTest, UnknownKeyExitsTwoNamingTheKeyAndTheFile) {
  const std::string cfg = Write("typo.yaml", "wrokers: 4\n");
  Result r = Check("--config " + cfg);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.err.find(cfg + ": config (top level): unknown key 'wrokers'"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(CheckConfigTest, BadValueIsNamedByWhereItCameFrom) {
  // From the file: the file and the key (not "with the command-line flags").
  const std::string cfg = Write(
      "small.yaml", "disk_capacity: 64MiB\ndisk_file_bytes: 256MiB\nmax_record_bytes: 8MiB\n");
  Result file = Check("--config " + cfg + " -d " + dir_ + "/data");
  EXPECT_EQ(file.exit_code, 2) << file.out;
  EXPECT_NE(file.err.find(cfg + ": config disk_capacity: 67108864 bytes is smaller than "
                                "disk_file_bytes (268435456 bytes)"),
            std::string::npos)
      << file.err;
  EXPECT_EQ(file.err.find("command-line"), std::string::npos) << file.err;
  // From a flag over the same file: the flag.
  Result flag = Check("--config " + cfg + " --disk-capacity 10000");
  EXPECT_EQ(flag.exit_code, 2) << flag.out;
  EXPECT_NE(flag.err.find("--disk-capacity: must be a positive multiple of 4096"),
            std::string::npos)
      << flag.err;
  Result workers = Check("--workers 0");
  EXPECT_EQ(workers.exit_code, 2);
  EXPECT_NE(workers.err.find("kvtierd: INVALID_ARGUMENT: --workers: 0, expected 1..256"),
            std::string::npos)
      << workers.err;
}

}  // namespace
