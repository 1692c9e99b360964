#include "kvstore/chunk_key.h"

#include <cstdio>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvt {
namespace {

NamespaceParams BaseParams() {
  NamespaceParams p;
  p.model_id = "meta-llama/Meta-Llama-3-8B@rev1";
  p.layout = {32, 8, 128, DType::kBF16, LayoutKind::kFlashAttnNHD};
  p.tp_rank = 0;
  p.tp_world_size = 2;
  p.chunk_tokens = 256;
  p.tenant = "acme";
  p.engine_extra = "vllm-0.11";
  return p;
}

std::vector<TokenId> Tokens(size_t n, uint32_t salt = 0) {
  std::vector<TokenId> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<TokenId>((i * 7919u + 13u + salt) % 128256u);
  return t;
}

std::vector<std::string> RunKeysTool(size_t n, uint32_t chunk, const std::string& model) {
  const std::string cmd = std::string(KVT_KEYS_TOOL) + " " + std::to_string(n) + " " +
                          std::to_string(chunk) + " " + model;
  FILE* f = popen(cmd.c_str(), "r");
  std::vector<std::string> lines;
  if (f == nullptr) return lines;
  char buf[128];
  while (std::fgets(buf, sizeof buf, f) != nullptr) {
    std::string s(buf);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    lines.push_back(s);
  }
  EXPECT_EQ(pclose(f), 0);
  return lines;
}

TEST(NamespaceTest, EachFieldChangesTheNamespace) {
  const NamespaceId base = ComputeNamespace(BaseParams());
  std::vector<std::pair<std::string, std::function<void(NamespaceParams&)>>> mutations = {
      {"model_id", [](NamespaceParams& p) { p.model_id += "x"; }},
      {"num_layers", [](NamespaceParams& p) { p.layout.num_layers = 33; }},
      {"num_kv_heads", [](NamespaceParams& p) { p.layout.num_kv_heads = 32; }},
      {"head_dim", [](NamespaceParams& p) { p.layout.head_dim = 64; }},
      {"dtype", [](NamespaceParams& p) { p.layout.dtype = DType::kF16; }},
      {"layout_kind", [](NamespaceParams& p) { p.layout.kind = LayoutKind::kFlashInfer; }},
      {"tp_rank", [](NamespaceParams& p) { p.tp_rank = 1; }},
      {"tp_world_size", [](NamespaceParams& p) { p.tp_world_size = 4; }},
      {"chunk_tokens", [](NamespaceParams& p) { p.chunk_tokens = 128; }},
      {"format_version", [](NamespaceParams& p) { p.format_version = 2; }},
      {"tenant", [](NamespaceParams& p) { p.tenant = "other"; }},
      {"engine_extra", [](NamespaceParams& p) { p.engine_extra = "vllm-0.12"; }},
  };
  std::set<NamespaceId> seen = {base};
  for (auto& [name, mutate] : mutations) {
    NamespaceParams p = BaseParams();
    mutate(p);
    const NamespaceId ns = ComputeNamespace(p);
    EXPECT_NE(ns, base) << "changing " << name << " did not change the namespace";
    EXPECT_TRUE(seen.insert(ns).second) << name << " collided with another mutation";
  }
}

TEST(NamespaceTest, StringFieldsAreLengthPrefixed) {
  // "ab" + "c" must differ from "a" + "bc": fields never run into each other.
  NamespaceParams a = BaseParams(), b = BaseParams();
  a.tenant = "ab";
  a.engine_extra = "c";
  b.tenant = "a";
  b.engine_extra = "bc";
  EXPECT_NE(ComputeNamespace(a), ComputeNamespace(b));
}

TEST(NamespaceTest, ValidateNamesTheBadField) {
  NamespaceParams p = BaseParams();
  p.tp_rank = 2;
  absl::Status s = p.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("tp_rank"), std::string::npos) << s;
  p = BaseParams();
  p.model_id = "";
  EXPECT_EQ(p.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(BaseParams().Validate().ok());
}

TEST(ChunkKeyTest, OnlyFullChunksGetKeysByDefault) {
  const NamespaceId ns = ComputeNamespace(BaseParams());
  EXPECT_EQ(ComputeChunkKeys(ns, Tokens(255)).size(), 0u);
  EXPECT_EQ(ComputeChunkKeys(ns, Tokens(256)).size(), 1u);
  EXPECT_EQ(ComputeChunkKeys(ns, Tokens(1000)).size(), 3u);
  EXPECT_EQ(
      ComputeChunkKeys(ns, Tokens(1000), {.chunk_tokens = 256, .include_partial = true}).size(),
      4u);
}

TEST(ChunkKeyTest, KeysAreChainedPrefixHashes) {
  const NamespaceId ns = ComputeNamespace(BaseParams());
  const std::vector<TokenId> t = Tokens(1024);
  const std::vector<ChunkKey> keys = ComputeChunkKeys(ns, t);
  ASSERT_EQ(keys.size(), 4u);
  EXPECT_EQ(keys[0], ChainChunkKey(RootKey(ns), std::span(t).subspan(0, 256)));
  EXPECT_EQ(keys[2], ChainChunkKey(keys[1], std::span(t).subspan(512, 256)));
  // Changing one token in chunk 1 changes keys 1..3 but not key 0.
  std::vector<TokenId> u = t;
  u[300] += 1;
  const std::vector<ChunkKey> ukeys = ComputeChunkKeys(ns, u);
  EXPECT_EQ(ukeys[0], keys[0]);
  EXPECT_NE(ukeys[1], keys[1]);
  EXPECT_NE(ukeys[2], keys[2]);
  EXPECT_NE(ukeys[3], keys[3]);
  // Same chunk tokens after a different prefix give a different key.
  std::vector<TokenId> w = t;
  w[0] += 1;
  EXPECT_NE(ComputeChunkKeys(ns, w)[3], keys[3]);
  // A different namespace changes every key.
  NamespaceParams other = BaseParams();
  other.tenant = "globex";
  EXPECT_NE(ComputeChunkKeys(ComputeNamespace(other), t)[0], keys[0]);
}

TEST(ChunkKeyTest, PartialChunkKeyDependsOnItsLength) {
  const NamespaceId ns = ComputeNamespace(BaseParams());
  const ChunkKeyOptions opts{.chunk_tokens = 256, .include_partial = true};
  const std::vector<ChunkKey> a = ComputeChunkKeys(ns, Tokens(300), opts);
  const std::vector<ChunkKey> b = ComputeChunkKeys(ns, Tokens(301), opts);
  EXPECT_EQ(a[0], b[0]);
  EXPECT_NE(a[1], b[1]);
}

TEST(ChunkKeyTest, SameKeysInAnotherProcess) {
  const std::vector<std::string> child = RunKeysTool(5000, 256, "model-A");
  NamespaceParams p;
  p.model_id = "model-A";
  p.layout = {32, 8, 128, DType::kBF16, LayoutKind::kFlashAttnNHD};
  p.chunk_tokens = 256;
  const NamespaceId ns = ComputeNamespace(p);
  const std::vector<ChunkKey> keys = ComputeChunkKeys(ns, Tokens(5000), {.chunk_tokens = 256});
  ASSERT_EQ(child.size(), keys.size() + 1);
  EXPECT_EQ(child[0], ns.ToHex());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(child[i + 1], keys[i].ToHex()) << i;
  // And a second, separate process run agrees with the first (restart).
  EXPECT_EQ(RunKeysTool(5000, 256, "model-A"), child);
}

TEST(ChunkKeyTest, KeysAreStableAcrossBuilds) {
  // Golden values: a change here breaks every cache on disk; bump kChunkFormatVersion.
  const std::vector<std::string> lines = RunKeysTool(512, 256, "golden");
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], KVT_GOLDEN_NS);
  EXPECT_EQ(lines[2], KVT_GOLDEN_KEY1);
}

TEST(HashHexTest, RoundTripsAndRejectsBadInput) {
  const ChunkKey k{0x0123456789abcdefull, 0xfedcba9876543210ull};
  EXPECT_EQ(k.ToHex(), "fedcba98765432100123456789abcdef");
  EXPECT_EQ(*ChunkKey::FromHex(k.ToHex()), k);
  EXPECT_EQ(ChunkKey::FromHex("xyz").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ChunkKey::FromHex(std::string(31, '0') + "g").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvt
