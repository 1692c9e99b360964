// kvtier-bench families on the tiny models of two families (llama: a plain KV cache; lfm2:
// convolution + attention, records with a boundary snapshot), one repeat: the table a user
// reads has a row per family with numeric ratios and PASS/FAIL, and the record bytes per
// chunk are the families' known sizes (docs/models.md: tiny llama 2,048 B/token, tiny
// lfm2 1,024 B/token + a 4,164 B snapshot, 256-token chunks). No timing target is
// asserted (a loaded machine decides those). And the errors a user meets: a family
// that does not exist and a missing demo binary are rows with the reason, exit code 0.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "nlohmann/json.hpp"

namespace {

using json = nlohmann::json;

std::string TempDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir =
      std::string(tmp ? tmp : "/tmp") + "/kvt-families-" + name + "-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  return dir;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// Runs kvtier-bench families with `flags`; its exit code, stdout JSON rows by family and
// stderr (the table).
int RunFamiliesBench(const std::string& dir, const std::string& flags,
                     std::map<std::string, json>* rows, std::string* err) {
  const std::string cmd = std::string(KVT_BENCH_BIN) + " families --json --dir '" + dir +
                          "/runs' --model-dir '" + dir + "/models' " + flags + " >'" + dir +
                          "/out.txt' 2>'" + dir + "/err.txt'";
  const int status = std::system(cmd.c_str());
  *err = ReadAll(dir + "/err.txt");
  std::istringstream in(ReadAll(dir + "/out.txt"));
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "not JSON: " << line;
    if (!j.is_discarded()) (*rows)[j.value("family", "")] = j;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string TableRow(const std::string& table, const std::string& family) {
  std::istringstream in(table);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("| " + family + " |", 0) == 0) return line;
  return "";
}

TEST(FamiliesBenchTest, TinyLlamaAndLfm2RowsHaveRecordBytesAndRatios) {
  const std::string dir = TempDir("tiny");
  std::map<std::string, json> rows;
  std::string err;
  ASSERT_EQ(RunFamiliesBench(dir, "--archs llama,lfm2 --size tiny --repeats 1", &rows, &err), 0)
      << err;
  ASSERT_EQ(rows.size(), 2u) << err;

  const json& llama = rows["llama"];
  ASSERT_FALSE(llama.contains("error")) << llama.dump();
  EXPECT_EQ(llama["memory"], "kv");
  EXPECT_EQ(llama["chunk_tokens"], 256);
  EXPECT_EQ(llama["kv_bytes_per_token"], 2048);  // 4 layers x K + V x 2 KV heads x 64 x f16
  EXPECT_EQ(llama["kv_bytes_per_chunk"], 2048 * 256);
  EXPECT_EQ(llama["snapshot_bytes_per_chunk"], 0);

  const json& lfm2 = rows["lfm2"];
  ASSERT_FALSE(lfm2.contains("error")) << lfm2.dump();
  EXPECT_EQ(lfm2["memory"], "hybrid");
  EXPECT_EQ(lfm2["kv_bytes_per_token"], 1024);  // 2 attention layers
  EXPECT_EQ(lfm2["kv_bytes_per_chunk"], 1024 * 256);
  EXPECT_EQ(lfm2["snapshot_bytes_per_chunk"], 4164);  // the convolution states

  for (const auto& [name, j] : rows) {
    // The >= 4k-token document restored: all but the last token for a plain KV cache,
    // all but the last 4 for a hybrid (its tail record, as llama-server's own hit).
    EXPECT_GE(j["prompt_tokens"].get<int>(), 4096) << name;
    EXPECT_EQ(j["loaded_tokens"].get<int>(),
              j["prompt_tokens"].get<int>() - (name == "lfm2" ? 4 : 1))
        << name;
    for (const char* k :
         {"host_over_ram_cache", "cold_over_fresh_disk", "cold_over_llama_server"}) {
      ASSERT_TRUE(j[k].is_number()) << name << " " << k << ": " << j.dump();
      EXPECT_GT(j[k].get<double>(), 0) << name << " " << k;
      EXPECT_EQ(j[std::string("pass_") + k].get<bool>(),
                std::string(k) == "cold_over_fresh_disk"  ? j[k].get<double>() >= 10
                : std::string(k) == "host_over_ram_cache" ? j[k].get<double>() <= 1.3
                                                          : j[k].get<double>() <= 1.1)
          << name << " " << k;
    }
    EXPECT_EQ(j["identical"], true) << name << ": " << j.dump();
  }

  // The Markdown table: a row per family with the record bytes and a verdict per target.
  EXPECT_NE(err.find("| family | memory | record bytes per chunk: KV rows + snapshot |"),
            std::string::npos)
      << err;
  const std::string llama_row = TableRow(err, "llama");
  EXPECT_NE(llama_row.find("| kv | 524,288 + 0 (2,048 B/token) |"), std::string::npos) << err;
  const std::string lfm2_row = TableRow(err, "lfm2");
  EXPECT_NE(lfm2_row.find("| hybrid | 262,144 + 4,164 (1,024 B/token) |"), std::string::npos)
      << err;
  for (const std::string& row : {llama_row, lfm2_row}) {
    EXPECT_EQ(row.find("not measured"), std::string::npos) << row;
    EXPECT_NE(row.find("| yes |"), std::string::npos) << row;
    size_t verdicts = 0;
    for (size_t p = 0; (p = row.find("PASS", p)) != std::string::npos; ++p) ++verdicts;
    for (size_t p = 0; (p = row.find("FAIL", p)) != std::string::npos; ++p) ++verdicts;
    EXPECT_EQ(verdicts, 4u) << row;  // 3 targets + the row's verdict
  }
  // The models are kept for the next run.
  EXPECT_TRUE(std::filesystem::exists(dir + "/models/kvtier-llama-tiny.gguf"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/models/kvtier-lfm2-tiny.gguf"));
  if (!HasFailure()) std::filesystem::remove_all(dir);  // ~1 GB of models and tiers
}

TEST(FamiliesBenchTest, UnknownFamilyAndMissingDemoAreRowsNotCrashes) {
  const std::string dir = TempDir("errors");
  std::map<std::string, json> rows;
  std::string err;
  ASSERT_EQ(RunFamiliesBench(
                dir, "--archs nosuch,llama --size tiny --demo /nonexistent/kvtier-server-demo",
                &rows, &err),
            0)
      << err;
  ASSERT_EQ(rows.size(), 2u) << err;
  EXPECT_NE(rows["nosuch"]["error"].get<std::string>().find("unknown family (known: llama,"),
            std::string::npos)
      << rows["nosuch"].dump();
  EXPECT_NE(rows["llama"]["error"].get<std::string>().find("kvtier-server-demo not found"),
            std::string::npos)
      << rows["llama"].dump();
  EXPECT_NE(TableRow(err, "llama").find("error: kvtier-server-demo not found"), std::string::npos)
      << err;
  if (!HasFailure()) std::filesystem::remove_all(dir);
}

}  // namespace
