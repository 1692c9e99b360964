// `kvtier inspect --text FILE --tokenizer MODEL.gguf` tokenizes with llama.cpp's
// vocabulary loader, whose log (~50 lines per model) is shown only with -v (issue 12,
// item 7). Runs the real CLI against the generated tiny model.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "llama_test_util.h"

namespace kvt {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Ran {
  int exit_code = -1;
  std::string err;
};

Ran RunCli(const std::string& args, const std::string& dir) {
  const std::string err_path = dir + "/stderr.txt";
  const std::string cmd =
      std::string(KVTIER_BIN) + " " + args + " >" + dir + "/stdout.txt 2>" + err_path;
  const int rc = std::system(cmd.c_str());
  std::ifstream in(err_path);
  std::stringstream ss;
  ss << in.rdbuf();
  return Ran{WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, ss.str()};
}

TEST(CliTextQuietTest, TokenizerLogOnlyWithVerbose) {
  const std::string dir = llamacpp::testing::MakeTempDir("cli-quiet");
  const std::string model = llamacpp::testing::TinyModelPath();
  { std::ofstream(dir + "/prompt.txt") << "The quick brown fox jumps over the lazy dog."; }
  {  // an empty disk tier for the CLI's offline backend
    auto store = llamacpp::testing::MakeStore(dir + "/disk", /*with_host=*/false);
    ASSERT_TRUE(store.ok()) << store.status();
  }
  const std::string args = "--disk-dir " + dir + "/disk inspect --text " + dir +
                           "/prompt.txt --tokenizer " + model +
                           " --model m --layers 2 --kv-heads 2 --head-dim 8 --chunk-tokens 16";
  Ran quiet = RunCli(args, dir);
  // A fresh store knows no namespace: exit 3 after tokenizing, naming it.
  EXPECT_EQ(quiet.exit_code, 3) << quiet.err;
  EXPECT_THAT(quiet.err, HasSubstr("unknown namespace"));
  EXPECT_THAT(quiet.err, Not(HasSubstr("llama_model_loader")));
  EXPECT_LE(std::count(quiet.err.begin(), quiet.err.end(), '\n'), 3) << quiet.err;
  // The same with -v shows the loader's log: the check above can fail.
  Ran verbose = RunCli("-v " + args, dir);
  EXPECT_EQ(verbose.exit_code, 3) << verbose.err;
  EXPECT_THAT(verbose.err, HasSubstr("llama_model_loader"));
}

}  // namespace
}  // namespace kvt
