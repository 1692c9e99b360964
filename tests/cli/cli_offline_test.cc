// The kvtier binary against a disk tier directory opened offline (--disk-dir), and the
// commands that need no cache (plan). Runs the real binary as a subprocess.
#include <cstring>
#include <fstream>
#include <set>

#include "cli_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvstore/disk_tier.h"
#include "nlohmann/json.hpp"

namespace kvt::clitest {
namespace {

using ::testing::HasSubstr;

RunResult Kvtier(const std::vector<std::string>& args, int timeout_s = 60) {
  return Run(KVTIER_BIN, args, timeout_s);
}

std::vector<std::string> Cat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

nlohmann::json Json(const RunResult& r) {
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON: " << r.out;
  return j;
}

// A disk tier directory holding:
//   model "m":  prompt P (5 full chunks + 5 tokens) and a branch Q that shares P's first
//               2 chunks and continues with 2 chunks of its own;
//   model "m2": P's first 3 chunks (another namespace, same tokens).
class OfflineCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path() + "/disk";
    p_ = Tokens(85, 1);
    q_ = std::vector<TokenId>(p_.begin(), p_.begin() + 32);
    auto tail = Tokens(32, 2);
    q_.insert(q_.end(), tail.begin(), tail.end());
    pchunks_ = PromptChunks(TestParams("m"), p_);
    qchunks_ = PromptChunks(TestParams("m"), q_);
    m2chunks_ = PromptChunks(TestParams("m2"), std::vector<TokenId>(p_.begin(), p_.begin() + 48));
    ASSERT_EQ(pchunks_.size(), 5u);
    ASSERT_EQ(qchunks_.size(), 4u);
    ASSERT_EQ(qchunks_[1].key, pchunks_[1].key);
    p_file_ = tmp_.path() + "/p.tokens";
    WriteTokens(p_file_, p_);
  }

  void Store(const std::vector<const PromptChunk*>& chunks) {
    DiskTierOptions o;
    o.dir = dir_;
    o.capacity_bytes = 16 << 20;
    o.file_bytes = 4 << 20;
    auto tier = DiskTier::Open(o);
    ASSERT_TRUE(tier.ok()) << tier.status();
    for (const PromptChunk* c : chunks) ASSERT_TRUE((*tier)->Put(c->record).ok());
  }  // closed here: the CLI opens the directory itself

  void StoreAll() {
    std::vector<const PromptChunk*> all;
    for (const auto& c : pchunks_) all.push_back(&c);
    all.push_back(&qchunks_[2]);
    all.push_back(&qchunks_[3]);
    for (const auto& c : m2chunks_) all.push_back(&c);
    Store(all);
  }

  std::vector<std::string> Disk() const { return {"--disk-dir", dir_}; }

  TempDir tmp_;
  std::string dir_, p_file_;
  std::vector<TokenId> p_, q_;
  std::vector<PromptChunk> pchunks_, qchunks_, m2chunks_;
};

TEST_F(OfflineCliTest, InspectShowsCachedChunksAndStopsLoadingAtTheFirstMiss) {
  Store({&pchunks_[0], &pchunks_[1], &pchunks_[2], &pchunks_[4]});  // chunk 3 missing
  auto args = Cat(Cat(Disk(), {"inspect", "--tokens", p_file_}), NsFlags("m"));
  RunResult table = Kvtier(args);
  ASSERT_EQ(table.exit_code, 0) << table.err;
  RunResult json = Kvtier(Cat(args, {"--json"}));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  nlohmann::json j = Json(json);
  EXPECT_EQ(j["namespace"], ComputeNamespace(TestParams("m")).ToHex());
  EXPECT_EQ(j["prompt_tokens"], 85);
  EXPECT_EQ(j["full_chunks"], 5);
  EXPECT_EQ(j["partial_chunk_tokens"], 5);
  EXPECT_EQ(j["leading_chunks"], 3);
  EXPECT_EQ(j["cached_chunks"], 4);
  EXPECT_EQ(j["tokens_to_load"], 48);
  EXPECT_EQ(j["tokens_to_recompute"], 37);
  EXPECT_EQ(j["bytes_to_load"], 48 * 128);
  ASSERT_EQ(j["chunks"].size(), 5u);
  const std::vector<std::string> tiers = {"disk", "disk", "disk", "", "disk"};
  auto rows = TableRows(table.out, "CHUNK");
  ASSERT_EQ(rows.size(), 5u) << table.out;
  for (size_t i = 0; i < 5; ++i) {
    const auto& c = j["chunks"][i];
    EXPECT_EQ(c["key"], pchunks_[i].key.ToHex());
    EXPECT_EQ(c["tier"].is_null() ? "" : c["tier"].get<std::string>(), tiers[i]) << i;
    EXPECT_EQ(c["leading"], i < 3);
    // The table holds the same chunk, key and tier.
    EXPECT_EQ(rows[i][0], std::to_string(i));
    EXPECT_EQ(rows[i][1], std::to_string(i * 16) + "-" + std::to_string(i * 16 + 15));
    EXPECT_EQ(rows[i][2], pchunks_[i].key.ToHex());
    EXPECT_EQ(rows[i][3], tiers[i].empty() ? "-" : tiers[i]);
  }
  EXPECT_THAT(rows[3][4], "miss");
  EXPECT_THAT(rows[4][4], HasSubstr("after a miss"));
  EXPECT_THAT(table.out,
              HasSubstr("leading cached chunks: 3 of 5 -> an engine would load 48 tokens"));
  EXPECT_THAT(table.out, HasSubstr("recompute 37"));
}

TEST_F(OfflineCliTest, InspectUnknownNamespaceIsNotFoundWithAClearMessage) {
  StoreAll();
  RunResult r = Kvtier(Cat(Cat(Disk(), {"inspect", "--tokens", p_file_}), NsFlags("other-model")));
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THAT(
      r.err, HasSubstr("unknown namespace " + ComputeNamespace(TestParams("other-model")).ToHex()));
  EXPECT_THAT(r.err, HasSubstr("model other-model"));
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST_F(OfflineCliTest, BadTokenFileIsUsageErrorNamingTheItem) {
  StoreAll();
  const std::string bad = tmp_.path() + "/bad.tokens";
  std::ofstream(bad) << "1 2 3\n4, five, 6\n";
  RunResult r = Kvtier(Cat(Cat(Disk(), {"inspect", "--tokens", bad}), NsFlags("m")));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("bad token file " + bad + ": item 5 ('five' on line 2)"));
  RunResult missing =
      Kvtier(Cat(Cat(Disk(), {"inspect", "--tokens", tmp_.path() + "/nope"}), NsFlags("m")));
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("cannot open"));
}

TEST_F(OfflineCliTest, MissingDiskDirIsNotFound) {
  RunResult r = Kvtier({"--disk-dir", tmp_.path() + "/nothing-here", "stats"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_THAT(r.err, HasSubstr("no disk tier at --disk-dir"));
  RunResult none = Kvtier({"stats"});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_THAT(none.err, HasSubstr("--daemon"));
}

TEST_F(OfflineCliTest, LsGroupsByNamespaceAndJsonMatchesTable) {
  StoreAll();
  RunResult table = Kvtier(Cat(Disk(), {"ls"}));
  ASSERT_EQ(table.exit_code, 0) << table.err;
  RunResult json = Kvtier(Cat(Disk(), {"ls", "--json"}));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  nlohmann::json j = Json(json);
  const std::string m = ComputeNamespace(TestParams("m")).ToHex();
  const std::string m2 = ComputeNamespace(TestParams("m2")).ToHex();
  const uint64_t rec = kChunkHeaderBytes + 16 * 128;
  std::map<std::string, uint64_t> want = {{m, 7}, {m2, 3}};
  ASSERT_EQ(j["namespaces"].size(), 2u);
  EXPECT_EQ(j["total_chunks"], 10);
  EXPECT_EQ(j["total_bytes"], 10 * rec);
  auto rows = TableRows(table.out, "NAMESPACE");
  ASSERT_EQ(rows.size(), 2u) << table.out;
  for (size_t i = 0; i < 2; ++i) {
    const auto& n = j["namespaces"][i];
    const std::string ns = n["namespace"];
    EXPECT_EQ(n["chunks"], want[ns]);
    EXPECT_EQ(n["tokens"], want[ns] * 16);
    EXPECT_EQ(n["bytes"], want[ns] * rec);
    EXPECT_EQ(n["tiers"][0]["tier"], "disk");
    EXPECT_EQ(rows[i][0], ns);
    EXPECT_EQ(rows[i][1], "disk");
    EXPECT_EQ(rows[i][2], std::to_string(want[ns]));
    EXPECT_EQ(rows[i][3], std::to_string(want[ns] * 16));
    EXPECT_EQ(rows[i][4],
              std::to_string(want[ns] * rec / 1000) + "," + std::to_string(want[ns] * rec % 1000));
  }
  // Filter and pagination.
  RunResult one = Kvtier(Cat(Cat(Disk(), {"ls", "--json"}), NsFlags("m2")));
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(Json(one)["namespaces"].size(), 1u);
  EXPECT_EQ(Json(one)["namespaces"][0]["namespace"], m2);
  RunResult page = Kvtier(Cat(Disk(), {"ls", "--json", "--limit", "1"}));
  ASSERT_EQ(page.exit_code, 0);
  EXPECT_EQ(Json(page)["namespaces"].size(), 1u);
  EXPECT_EQ(Json(page)["next_offset"], 1);
  RunResult page2 = Kvtier(Cat(Disk(), {"ls", "--json", "--limit", "1", "--offset", "1"}));
  EXPECT_EQ(Json(page2)["namespaces"][0]["namespace"], j["namespaces"][1]["namespace"]);
  EXPECT_TRUE(Json(page2)["next_offset"].is_null());
  RunResult chunks = Kvtier(Cat(Cat(Disk(), {"ls", "--chunks", "--json"}), NsFlags("m2")));
  ASSERT_EQ(chunks.exit_code, 0) << chunks.err;
  std::set<std::string> keys;
  const nlohmann::json cj = Json(chunks);
  for (const auto& c : cj["chunks"]) keys.insert(c["key"]);
  EXPECT_EQ(keys, (std::set<std::string>{m2chunks_[0].key.ToHex(), m2chunks_[1].key.ToHex(),
                                         m2chunks_[2].key.ToHex()}))
      << chunks.out;
  RunResult unknown = Kvtier(Cat(Cat(Disk(), {"ls"}), NsFlags("nope")));
  EXPECT_EQ(unknown.exit_code, 3);
  EXPECT_THAT(unknown.err, HasSubstr("unknown namespace"));
  RunResult old = Kvtier(Cat(Disk(), {"ls", "--json", "--older-than", "1d"}));
  EXPECT_EQ(Json(old)["namespaces"].size(), 0u);
}

TEST_F(OfflineCliTest, StatsJsonMatchesTable) {
  StoreAll();
  RunResult table = Kvtier(Cat(Disk(), {"stats"}));
  ASSERT_EQ(table.exit_code, 0) << table.err;
  RunResult json = Kvtier(Cat(Disk(), {"stats", "--json"}));
  ASSERT_EQ(json.exit_code, 0) << json.err;
  nlohmann::json j = Json(json);
  ASSERT_EQ(j["tiers"].size(), 1u);
  EXPECT_EQ(j["tiers"][0]["name"], "disk");
  EXPECT_EQ(j["tiers"][0]["chunks"], 10);
  EXPECT_EQ(j["tiers"][0]["used_bytes"], 10 * 4096);  // each record padded to 4 KiB
  EXPECT_EQ(j["integrity_errors"], 0);
  auto rows = TableRows(table.out, "TIER");
  ASSERT_EQ(rows.size(), 1u) << table.out;
  EXPECT_EQ(rows[0][0], "disk");
  EXPECT_EQ(rows[0][2], "40.0 KiB");
  EXPECT_EQ(rows[0][4], "10");
}

TEST_F(OfflineCliTest, WatchPrintsCountSamples) {
  StoreAll();
  RunResult r = Kvtier(Cat(Disk(), {"watch", "--json", "--count", "3", "--interval", "0.05"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream in(r.out);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["sample"], n);
    EXPECT_EQ(j["tiers"][0]["chunks"], 10);
    ++n;
  }
  EXPECT_EQ(n, 3);
}

TEST_F(OfflineCliTest, EvictPrefixRemovesItsChunksAndWhatFollowsOnly) {
  StoreAll();
  const std::string prefix = tmp_.path() + "/prefix.tokens";
  WriteTokens(prefix, std::vector<TokenId>(p_.begin(), p_.begin() + 48));  // P's first 3 chunks
  auto args = Cat(Cat(Disk(), {"evict", "--json", "--prefix", prefix}), NsFlags("m"));
  // Dry run: names exactly P0..P4, changes nothing.
  RunResult dry = Kvtier(Cat(args, {"--dry-run"}));
  ASSERT_EQ(dry.exit_code, 0) << dry.err;
  nlohmann::json d = Json(dry);
  std::set<std::string> want;
  for (const auto& c : pchunks_) want.insert(c.key.ToHex());
  std::set<std::string> got;
  for (const auto& c : d["chunks"]) got.insert(c["key"]);
  EXPECT_EQ(got, want);
  EXPECT_EQ(d["evicted_chunks"], 5);
  EXPECT_EQ(d["orphaned_chunks"], 2);  // Q's own chunks branch off after P1
  EXPECT_EQ(Json(Kvtier(Cat(Disk(), {"stats", "--json"})))["tiers"][0]["chunks"], 10);

  RunResult ev = Kvtier(args);
  ASSERT_EQ(ev.exit_code, 0) << ev.err;
  EXPECT_EQ(Json(ev)["evicted_chunks"], 5);
  EXPECT_EQ(Json(ev)["evicted_bytes"], 5 * (kChunkHeaderBytes + 16 * 128));
  // What is left: Q's 2 own chunks in "m", all 3 chunks of "m2".
  RunResult left = Kvtier(Cat(Disk(), {"ls", "--chunks", "--json"}));
  ASSERT_EQ(left.exit_code, 0) << left.err;
  std::set<std::string> rest;
  const nlohmann::json lj = Json(left);
  for (const auto& c : lj["chunks"]) rest.insert(c["key"]);
  EXPECT_EQ(rest, (std::set<std::string>{qchunks_[2].key.ToHex(), qchunks_[3].key.ToHex(),
                                         m2chunks_[0].key.ToHex(), m2chunks_[1].key.ToHex(),
                                         m2chunks_[2].key.ToHex()}));
  // Evicting the same prefix again: nothing of it is cached any more.
  RunResult again = Kvtier(args);
  EXPECT_EQ(again.exit_code, 3);
  EXPECT_THAT(again.err, HasSubstr("none of the prefix's 3 chunks"));
}

TEST_F(OfflineCliTest, EvictPrefixWithOrphansTakesTheBranchesToo) {
  StoreAll();
  const std::string prefix = tmp_.path() + "/prefix.tokens";
  WriteTokens(prefix, std::vector<TokenId>(p_.begin(), p_.begin() + 48));
  RunResult ev = Kvtier(
      Cat(Cat(Disk(), {"evict", "--json", "--include-orphans", "--prefix", prefix}), NsFlags("m")));
  ASSERT_EQ(ev.exit_code, 0) << ev.err;
  EXPECT_EQ(Json(ev)["evicted_chunks"], 7);
  EXPECT_EQ(Json(Kvtier(Cat(Disk(), {"stats", "--json"})))["tiers"][0]["chunks"], 3);
}

TEST_F(OfflineCliTest, EvictByKeyNamespaceAndAge) {
  StoreAll();
  // By key.
  RunResult k = Kvtier(Cat(Disk(), {"evict", "--json", "--key", qchunks_[3].key.ToHex()}));
  ASSERT_EQ(k.exit_code, 0) << k.err;
  EXPECT_EQ(Json(k)["evicted_chunks"], 1);
  RunResult k2 = Kvtier(Cat(Disk(), {"evict", "--key", qchunks_[3].key.ToHex()}));
  EXPECT_EQ(k2.exit_code, 3);
  EXPECT_THAT(k2.err, HasSubstr("is not cached"));
  RunResult badkey = Kvtier(Cat(Disk(), {"evict", "--key", "xyz"}));
  EXPECT_EQ(badkey.exit_code, 2);
  // By namespace (given as hex).
  const std::string m2 = ComputeNamespace(TestParams("m2")).ToHex();
  RunResult ns = Kvtier(Cat(Disk(), {"evict", "--json", "--ns", m2}));
  ASSERT_EQ(ns.exit_code, 0) << ns.err;
  EXPECT_EQ(Json(ns)["evicted_chunks"], 3);
  RunResult ns2 = Kvtier(Cat(Disk(), {"evict", "--ns", m2}));
  EXPECT_EQ(ns2.exit_code, 3);
  // By age: nothing is a day old; everything is older than 0 s.
  RunResult young = Kvtier(Cat(Disk(), {"evict", "--json", "--older-than", "1d"}));
  ASSERT_EQ(young.exit_code, 0) << young.err;
  EXPECT_EQ(Json(young)["evicted_chunks"], 0);
  RunResult all = Kvtier(Cat(Disk(), {"evict", "--json", "--older-than", "0s"}));
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(Json(all)["evicted_chunks"], 6);
  EXPECT_EQ(Json(Kvtier(Cat(Disk(), {"stats", "--json"})))["tiers"][0]["chunks"], 0);
  // No selector at all is a usage error.
  RunResult none = Kvtier(Cat(Disk(), {"evict"}));
  EXPECT_EQ(none.exit_code, 2);
}

TEST(PlanCliTest, Llama3_8B_Bf16FiguresAreExact) {
  RunResult r = Kvtier({"plan", "--json", "--layers", "32", "--kv-heads", "8", "--head-dim", "128",
                        "--dtype", "bf16", "--tier", "host=64GiB"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["bytes_per_token"], 131072);
  EXPECT_EQ(j["bytes_per_chunk"], 256 * 131072);
  EXPECT_EQ(j["bytes_per_context"], 1073741824);  // 1 GiB per 8,192 tokens
  EXPECT_EQ(j["tiers"][0]["capacity_bytes"], 64ull << 30);
  EXPECT_EQ(j["tiers"][0]["chunks"], 2047);  // 64 GiB / (32 MiB + 128 B header)
  EXPECT_EQ(j["tiers"][0]["tokens"], 2047 * 256);
  RunResult t = Kvtier({"plan", "--layers", "32", "--kv-heads", "8", "--head-dim", "128"});
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_THAT(t.out, HasSubstr("KV per token    131,072 B (128 KiB)"));
  EXPECT_THAT(t.out,
              HasSubstr("KV per context  1,073,741,824 B (1.00 GiB, 1.07 GB) for 8,192 tokens"));
}

// SIZE uses kvt::ParseByteSize, as kvtierd's config does: bare G is binary, GB decimal.
TEST(PlanCliTest, TierSizesReadLikeKvtierdConfig) {
  RunResult r = Kvtier({"plan", "--json", "--layers", "32", "--kv-heads", "8", "--head-dim", "128",
                        "--tier", "host=8G", "--tier", "disk=2TB"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tiers"][0]["capacity_bytes"], 8ull << 30);
  EXPECT_EQ(j["tiers"][1]["capacity_bytes"], 2000000000000ull);
  RunResult bad = Kvtier(
      {"plan", "--layers", "32", "--kv-heads", "8", "--head-dim", "128", "--tier", "host=-1G"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("--tier 'host=-1G': byte size '-1G': must not be negative"));
}

TEST(PlanCliTest, ThirtyTwoKvHeadsIs512KiBPerToken) {
  RunResult r = Kvtier({"plan", "--layers", "32", "--kv-heads", "32", "--head-dim", "128"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("KV per token    524,288 B (512 KiB)"));
  EXPECT_THAT(r.out, HasSubstr("4,294,967,296 B (4.00 GiB, 4.29 GB) for 8,192 tokens"));
}

TEST(UsageCliTest, UnknownCommandIsNamedAndExitsWith2) {
  RunResult r = Kvtier({"--timeout", "3", "frobnicate"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown command 'frobnicate'"));
  EXPECT_THAT(r.err, HasSubstr("stats, ls, inspect, evict, watch, plan"));
  // Other CLI11 parse errors exit 2 too, never CLI11's own codes (105, 109, ...).
  EXPECT_EQ(Kvtier({"stats", "--bogus"}).exit_code, 2);
  EXPECT_EQ(Kvtier({}).exit_code, 2);
  EXPECT_EQ(Kvtier({"--help"}).exit_code, 0);
}

TEST(UsageCliTest, NegativeCountsAreRefusedNotWrapped) {
  // `watch --count -1` used to wrap to 2^64-1 samples and run forever.
  RunResult w =
      Kvtier({"--daemon", "unix:/nonexistent/kvtierd.sock", "watch", "--count", "-1"}, 20);
  EXPECT_EQ(w.exit_code, 2);
  EXPECT_THAT(w.err, HasSubstr("--count: expected a number >= 0, got -1"));
  RunResult l = Kvtier({"--daemon", "unix:/nonexistent/kvtierd.sock", "ls", "--limit", "-1"}, 20);
  EXPECT_EQ(l.exit_code, 2);
  EXPECT_THAT(l.err, HasSubstr("--limit: expected a number >= 0, got -1"));
}

TEST(PlanCliTest, FiguresThatOverflow64BitsAreRefusedWithExit2) {
  // 2 planes x 65536 x 65536 x 131072 x 2 B = 2^51 B per token; x 8192 tokens = 2^64.
  RunResult r =
      Kvtier({"plan", "--layers", "65536", "--kv-heads", "65536", "--head-dim", "131072"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("shape too large"));
  EXPECT_THAT(r.err, HasSubstr("8192-token context"));
  // The same shape with a 4096-token context is 2^63 B: it fits and is printed exactly.
  RunResult ok = Kvtier({"plan", "--json", "--layers", "65536", "--kv-heads", "65536", "--head-dim",
                         "131072", "--context", "4096"});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(nlohmann::json::parse(ok.out)["bytes_per_context"], 1ull << 63);
}

void PutStr(std::ofstream& o, const std::string& s) {
  const uint64_t n = s.size();
  o.write(reinterpret_cast<const char*>(&n), 8);
  o.write(s.data(), static_cast<std::streamsize>(n));
}
void PutU32Kv(std::ofstream& o, const std::string& k, uint32_t v) {
  PutStr(o, k);
  const uint32_t type = 4;
  o.write(reinterpret_cast<const char*>(&type), 4);
  o.write(reinterpret_cast<const char*>(&v), 4);
}

TEST(PlanCliTest, ReadsTheShapeFromAGgufHeader) {
  TempDir tmp;
  const std::string path = tmp.path() + "/llama3.gguf";
  {
    std::ofstream o(path, std::ios::binary);
    o.write("GGUF", 4);
    const uint32_t version = 3;
    const uint64_t tensors = 0, kvs = 6;
    o.write(reinterpret_cast<const char*>(&version), 4);
    o.write(reinterpret_cast<const char*>(&tensors), 8);
    o.write(reinterpret_cast<const char*>(&kvs), 8);
    PutStr(o, "general.architecture");
    const uint32_t str = 8;
    o.write(reinterpret_cast<const char*>(&str), 4);
    PutStr(o, "llama");
    PutStr(o, "general.name");
    o.write(reinterpret_cast<const char*>(&str), 4);
    PutStr(o, "Tiny Llama-3-8B shape");
    PutU32Kv(o, "llama.block_count", 32);
    PutU32Kv(o, "llama.attention.head_count", 32);
    PutU32Kv(o, "llama.attention.head_count_kv", 8);
    PutU32Kv(o, "llama.embedding_length", 4096);
  }
  RunResult r = Kvtier({"plan", "--json", "--gguf", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["layout"]["num_layers"], 32);
  EXPECT_EQ(j["layout"]["num_kv_heads"], 8);
  EXPECT_EQ(j["layout"]["head_dim"], 128);
  EXPECT_EQ(j["bytes_per_token"], 131072);
  EXPECT_THAT(j["model"].get<std::string>(), HasSubstr("Tiny Llama-3-8B shape"));

  const std::string notgguf = tmp.path() + "/x.gguf";
  std::ofstream(notgguf) << "hello";
  RunResult bad = Kvtier({"plan", "--gguf", notgguf});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("is not a GGUF file"));
  RunResult none = Kvtier({"plan"});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_THAT(none.err, HasSubstr("--layers"));
}

TEST(UsageCliTest, TheClusterTierIsNamedRemote) {
  RunResult r = Kvtier({"--disk-dir", "/nonexistent-kvt", "ls", "--tier", "cluster"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err,
              HasSubstr("--tier: tier 'cluster': kvtierd's cluster tier is called 'remote'"));
}

TEST(TokenizerCliTest, GgufWithoutTokenizerExits2NamingTheFile) {
  // `inspect --text F --tokenizer M.gguf` with a model that has no tokenizer
  // (tokenizer.ggml.model = none, as `kvtier-make-gguf --no-vocab` writes) used to abort in
  // llama.cpp's tokenizer (GGML_ASSERT, exit 134).
  TempDir tmp;
  const std::string gguf = tmp.path() + "/ids-only.gguf";
#ifdef KVTIER_MAKE_GGUF_BIN
  RunResult made =
      clitest::Run(KVTIER_MAKE_GGUF_BIN, {"--size", "tiny", "--no-vocab", "--out", gguf}, 120);
  ASSERT_EQ(made.exit_code, 0) << made.err;
#else
  GTEST_SKIP() << "kvtier built without llama.cpp: no --tokenizer to test";
#endif
  const std::string text = tmp.path() + "/prompt.txt";
  std::ofstream(text) << "The quick brown fox";
  RunResult r = Kvtier({"--disk-dir", tmp.path(), "inspect", "--ns", std::string(32, 'a'), "--text",
                        text, "--tokenizer", gguf});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--tokenizer: GGUF file '" + gguf +
                               "' has no tokenizer (tokenizer.ggml.model = none)"));
  EXPECT_THAT(r.err, HasSubstr("--tokens FILE"));
}

// --help shows the default vocabulary by what it is, not as a path of the machine the
// binary was built on (the same binary runs elsewhere).
TEST(MakeGgufCliTest, HelpNamesTheDefaultVocabWithoutABuildPath) {
#ifdef KVTIER_MAKE_GGUF_BIN
  RunResult r = clitest::Run(KVTIER_MAKE_GGUF_BIN, {"--help"}, 60);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("--vocab"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("/models/ggml-vocab"))) << r.out;
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr(KVT_SOURCE_DIR))) << r.out;
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr(KVT_BINARY_DIR))) << r.out;
#else
  GTEST_SKIP() << "kvtier built without llama.cpp: no kvtier-make-gguf";
#endif
}

}  // namespace
}  // namespace kvt::clitest
