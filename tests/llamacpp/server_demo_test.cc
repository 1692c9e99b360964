// kvtier-server-demo end to end, quick: the tiny model and workload (--small --quick
// --repeats 1 --json). Runs the real binary (KVT_SERVER_DEMO_BIN) with its real servers
// and asserts what a user reads: the table and the targets with PASS/FAIL, the --json
// rows with their keys, ttft.csv, ttft.png, evidence.jsonl, exit code 0 (every answer
// through kvtier identical to plain llama-server's). And on a sliding-window model
// (gemma3, --swa-full): the exact-reuse reference is llama-server's slot-cache hit, said
// in the output, and the document restored to its last token equals it bit for bit.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "llama_test_util.h"
#include "nlohmann/json.hpp"

namespace kvt::llamacpp {
namespace {

using json = nlohmann::json;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

TEST(ServerDemoTest, QuickRunPrintsTableWritesCsvPngJsonAndExitsZero) {
  const std::string dir = testing::MakeTempDir("server-demo");
  const std::string cmd = std::string(KVT_SERVER_DEMO_BIN) +
                          " --small --quick --repeats 1 --threads 2 --json --dir '" + dir + "' >'" +
                          dir + "/stdout.txt' 2>'" + dir + "/stderr.txt'";
  const int status = std::system(cmd.c_str());
  const std::string out = ReadAll(dir + "/stdout.txt");
  const std::string err = ReadAll(dir + "/stderr.txt");
  ASSERT_TRUE(WIFEXITED(status)) << err;
  EXPECT_EQ(WEXITSTATUS(status), 0) << err;

  // The table and the targets (stderr with --json).
  EXPECT_NE(err.find(" prompt loaded    cold ms  llama-srv"), std::string::npos) << err;
  EXPECT_NE(err.find("target host-tier hit / llama-server RAM-cache hit"), std::string::npos);
  EXPECT_NE(err.find("target cold prefill: demo's cold / llama.cpp's llama-server"),
            std::string::npos);
  int skipped = 0;
  for (const std::string& line : Lines(err)) {
    if (line.rfind("target ", 0) != 0) continue;
    // --quick has no >= 4k prefix: those two targets are SKIP (not a miss for --check);
    // every other target is measured, PASS or FAIL.
    if (line.find(">= 4k prefix") != std::string::npos) {
      EXPECT_NE(line.find("not in this run's workload -> SKIP"), std::string::npos) << line;
      ++skipped;
    } else {
      EXPECT_TRUE(line.find("-> PASS") != std::string::npos ||
                  line.find("-> FAIL") != std::string::npos)
          << line;
    }
  }
  EXPECT_EQ(skipped, 2) << err;

  // --json: one object per request, the keys; the document row is restored up to
  // its last token from the host tier and identical; the no-reuse row loaded nothing.
  const std::vector<std::string> rows = Lines(out);
  ASSERT_EQ(rows.size(), 3u) << out;  // chat, doc-qa, no-reuse
  bool saw_doc = false, saw_no_reuse = false;
  for (const std::string& line : rows) {
    const json j = json::parse(line);
    for (const char* key :
         {"workload", "prompt_tokens", "loaded_tokens", "ttft_cold_ms", "ttft_server_cache_ms",
          "ttft_host_ms", "ttft_disk_ms", "ttft_kvtierd_ms", "identical"}) {
      EXPECT_TRUE(j.contains(key)) << key << " missing in " << line;
    }
    if (j["workload"] == "doc-qa") {
      saw_doc = true;
      EXPECT_GT(j["prompt_tokens"].get<int>(), 400) << line;
      EXPECT_EQ(j["loaded_tokens"], j["prompt_tokens"].get<int>() - 1) << line;
      EXPECT_EQ(j["identical"], true) << line;
      EXPECT_EQ(j["reference"], "server-cache") << line;  // a plain KV cache: the RAM cache
      EXPECT_TRUE(j["ttft_slot_cache_ms"].is_number()) << line;
      EXPECT_TRUE(j["ttft_host_ms"].is_number()) << line;
      EXPECT_TRUE(j["ttft_disk_ms"].is_number()) << line;
    }
    if (j["workload"] == "no-reuse") {
      saw_no_reuse = true;
      EXPECT_EQ(j["loaded_tokens"], 0) << line;
    }
  }
  EXPECT_TRUE(saw_doc && saw_no_reuse) << out;

  // ttft.csv: a header and one line per (row, configuration) that ran, incl. llama-server.
  const std::vector<std::string> csv = Lines(ReadAll(dir + "/run/ttft.csv"));
  ASSERT_FALSE(csv.empty());
  EXPECT_EQ(csv[0], "workload,index,prompt_tokens,config,loaded_tokens,ttft_ms_median,runs");
  EXPECT_GE(csv.size(), 1u + 2 * 5 + 2);
  EXPECT_NE(ReadAll(dir + "/run/ttft.csv").find(",llama-server,"), std::string::npos);

  // The plot, when a python3 with matplotlib exists (the demo says "plot skipped" else).
  const bool have_mpl =
      std::system(
          "python3 -c 'import matplotlib' 2>/dev/null || /usr/bin/python3 -c 'import "
          "matplotlib' 2>/dev/null") == 0;
  if (have_mpl) {
    const std::string png = ReadAll(dir + "/run/ttft.png");
    ASSERT_GT(png.size(), 8u) << err;
    EXPECT_EQ(png.substr(1, 3), "PNG");
  } else {
    EXPECT_NE(err.find("plot skipped"), std::string::npos) << err;
  }
  // Evidence: one line per measured request, each with its probabilities' hash.
  const std::vector<std::string> evidence = Lines(ReadAll(dir + "/run/evidence.jsonl"));
  EXPECT_GE(evidence.size(), 2u * 6 + 2);
  for (const std::string& line : evidence) {
    const json e = json::parse(line);
    if (e["ok"] == true) {
      EXPECT_TRUE(e.contains("first_probs_xxh64")) << line;
    }
  }
}

TEST(ServerDemoTest, SlidingWindowModelIsComparedWithLlamaServersSlotCacheHit) {
  const std::string dir = testing::MakeTempDir("server-demo-iswa");
  const std::string model = dir + "/gemma3.gguf";
  ASSERT_EQ(std::system((std::string(KVT_MAKE_GGUF_BIN) + " --arch gemma3 --size tiny --out '" +
                         model + "' >/dev/null 2>&1")
                            .c_str()),
            0);
  const std::string cmd = std::string(KVT_SERVER_DEMO_BIN) + " --model '" + model +
                          "' --server-arg=--swa-full --quick --repeats 1 --threads 2 --json "
                          "--no-kvtierd --dir '" +
                          dir + "' >'" + dir + "/stdout.txt' 2>'" + dir + "/stderr.txt'";
  const int status = std::system(cmd.c_str());
  const std::string out = ReadAll(dir + "/stdout.txt");
  const std::string err = ReadAll(dir + "/stderr.txt");
  ASSERT_TRUE(WIFEXITED(status)) << err;
  EXPECT_EQ(WEXITSTATUS(status), 0) << err;  // 3 = an answer through kvtier differed
  // The output names the reference and why.
  EXPECT_NE(err.find("exact-reuse reference (model memory: iswa): llama-server's slot-cache hit"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("keeping only the window's cells"), std::string::npos) << err;
  EXPECT_NE(err.find("identical first-token probabilities through kvtier (every repeat, vs that "
                     "reference): yes"),
            std::string::npos)
      << err;
  bool saw_doc = false;
  for (const std::string& line : Lines(out)) {
    const json j = json::parse(line);
    EXPECT_EQ(j["reference"], "slot-cache") << line;
    if (j["workload"] != "doc-qa") continue;
    saw_doc = true;
    // The ~600-token document (longer than the 48-token window) restored from the host
    // tier up to its last token, and the same answer as the slot-cache hit.
    EXPECT_EQ(j["loaded_tokens"], j["prompt_tokens"].get<int>() - 1) << line;
    EXPECT_EQ(j["identical"], true) << line;
  }
  EXPECT_TRUE(saw_doc) << out;
  // The evidence holds the slot-cache hits: all but the last token reused.
  int slot_hits = 0;
  for (const std::string& line : Lines(ReadAll(dir + "/run/evidence.jsonl"))) {
    const json e = json::parse(line);
    if (e["config"] == "slot-cache" && e["ok"] == true &&
        e["cached_tokens"] == e["prompt_tokens"].get<int>() - 1) {
      ++slot_hits;
    }
  }
  EXPECT_GE(slot_hits, 2) << "chat and doc-qa";
}

}  // namespace
}  // namespace kvt::llamacpp
