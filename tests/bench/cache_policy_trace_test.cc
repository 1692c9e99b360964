// `kvtier-bench trace --json` on a slice of the conversation trace (issue 24): every row
// carries the documented keys, each (capacity) has every policy and the optimum, and the
// default policy's token hit ratio is at least LRU's.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace {

std::vector<nlohmann::json> RunBench(const std::string& args) {
  const std::string cmd = std::string(KVT_BENCH_BIN) + " trace --json " + args;
  std::vector<nlohmann::json> lines;
  FILE* p = popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr) << cmd;
  if (p == nullptr) return lines;
  std::string line;
  char buf[4096];
  while (fgets(buf, sizeof(buf), p) != nullptr) {
    line += buf;
    if (line.back() != '\n') continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(j.is_discarded()) << "not JSON: " << line;
    if (!j.is_discarded()) lines.push_back(j);
    line.clear();
  }
  EXPECT_EQ(pclose(p), 0) << cmd;
  return lines;
}

TEST(CachePolicyTraceTest, ConversationSliceJsonHasTheKeysAndDefaultBeatsLru) {
  const auto lines = RunBench(
      "--traces conversation --max-requests 3000 --capacities 0.01,0.02,0.1 --host-disk ''");
  std::map<double, std::map<std::string, double>> ratio;  // capacity -> policy -> ratio
  for (const auto& j : lines) {
    if (!j.contains("policy")) continue;               // a target's verdict line
    if (j.value("tiers", "host") != "host") continue;  // the two-tier rows
    for (const char* key :
         {"trace", "capacity_fraction", "policy", "token_hit_ratio", "seconds_per_chunk"}) {
      ASSERT_TRUE(j.contains(key)) << key << " missing in " << j.dump();
    }
    EXPECT_EQ(j["trace"], "conversation");
    const double r = j["token_hit_ratio"].get<double>();
    EXPECT_GE(r, 0.0);
    EXPECT_LE(r, 1.0);
    EXPECT_GE(j["seconds_per_chunk"].get<double>(), 0.0);
    ratio[j["capacity_fraction"].get<double>()][j["policy"].get<std::string>()] = r;
  }
  ASSERT_EQ(ratio.size(), 3u);
  for (const auto& [cap, by_policy] : ratio) {
    std::set<std::string> names;
    for (const auto& [name, r] : by_policy) names.insert(name);
    EXPECT_EQ(names, (std::set<std::string>{"arc", "default", "lfu", "lru", "optimum", "s3fifo"}))
        << "capacity " << cap;
    EXPECT_GE(by_policy.at("default"), by_policy.at("lru")) << "capacity " << cap;
    EXPECT_GT(by_policy.at("optimum"), 0.0) << "capacity " << cap;
  }
}

}  // namespace
