// Model families through kvtier-llama-server (issue 22), with curl, as a user runs them
// (recurrent and hybrid models: SnapshotFamilyServerTest below):
//  * Families kvtier restores exactly (K and V caches of different types, -ctk q8_0
//    -ctv f16; MLA, deepseek2; iSWA with --swa-full --kv-unified, gemma3 and gpt-oss
//    with attention sinks): a prompt of 4 chunks and a tail is loaded from the host tier
//    of the server that computed it, and, stored by one server, is
//    loaded from disk by a restarted one (-np 2: the load into slot 0 leaves slot 1's
//    answer unchanged) and through a kvtierd shared by two servers; a prompt sharing 2
//    chunks loads only those; greedy tokens and the first token's n_probs are bit for bit
//    plain llama-server's; the same model with other cache types is another namespace
//    and never hits.
//  * Families whose memory kvtier cannot restore exactly yet (docs/models.md): the server
//    starts, logs and reports (GET /kvtier) the refusal naming the architecture and the
//    missing piece, and answers exactly as plain llama-server (kvtier never loads or
//    stores for it). A family the pinned llama.cpp cannot run here is skipped with the
//    engine's error.
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kvtierd_process.h"
#include "llama_test_util.h"
#include "llamacpp/gguf_generator.h"
#include "server_test_util.h"

namespace kvt::llamacpp::testing {
namespace {

using nlohmann::json;
constexpr int kChunk = 32;
constexpr size_t kPromptTokens = 150;  // 4 chunks + 22 tokens
constexpr int kWarmTokens = 149;       // chunks + tail: all but the last token

std::string Log(const std::string& tag) {
  static const std::string dir = MakeTempDir("server-family-logs");
  return dir + "/" + tag + ".log";
}

std::vector<std::string> BaseArgs(const std::string& model, std::vector<std::string> more = {}) {
  std::vector<std::string> a = {"-m",  model, "-c", "1024", "-np", "1",  "-t",          "2",
                                "-tb", "2",   "-b", "256",  "-ub", "32", "--cache-ram", "0"};
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

std::vector<std::string> With(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

std::vector<std::string> Kvtier(std::vector<std::string> a, const std::string& dir) {
  for (const char* s : {"--kvtier-chunk-tokens", "32", "--kvtier-no-cost-model", "--kvtier-dir"})
    a.push_back(s);
  a.push_back(dir);
  for (const char* s : {"--kvtier-disk-mib", "16", "--kvtier-host-mib", "0"}) a.push_back(s);
  return a;
}

std::vector<int> Prompt(uint64_t seed) {
  std::vector<TokenId> t = RandomTokens(seed, kPromptTokens, 32000);
  return std::vector<int>(t.begin(), t.end());
}

json Completion(const std::vector<int>& prompt, int slot = -1) {
  json b = {{"prompt", prompt}, {"n_predict", 6},       {"temperature", 0.0},
            {"n_probs", 5},     {"cache_prompt", true}, {"return_tokens", true}};
  if (slot >= 0) b["id_slot"] = slot;
  return b;
}

std::unique_ptr<ServerProcess> MustStart(const std::vector<std::string>& args,
                                         const std::string& tag) {
  auto s = ServerProcess::Start(KVT_LLAMA_SERVER_BIN, args, Log(tag));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

void ExpectSameAnswer(const json& got, const json& want) {
  ASSERT_TRUE(want.contains("tokens")) << want.dump();
  EXPECT_EQ(got["tokens"], want["tokens"]);
  ASSERT_TRUE(got.contains("completion_probabilities")) << got.dump();
  EXPECT_EQ(got["completion_probabilities"][0], want["completion_probabilities"][0]);
}

std::string FamilyModel(const std::string& arch) {
  static const std::string dir = MakeTempDir("server-families");
  const std::string path = dir + "/" + arch + ".gguf";
  if (!std::filesystem::exists(path)) {
    auto spec = SyntheticArchPreset(arch, "tiny", DefaultVocabPath());
    EXPECT_TRUE(spec.ok()) << spec.status();
    if (spec.ok()) {
      absl::Status s = WriteSyntheticModel(*spec, path);
      EXPECT_TRUE(s.ok()) << arch << ": " << s;
    }
  }
  return path;
}

#ifdef KVT_KVTIERD_BIN
demo::KvtierdProcessOptions DaemonOptions(const std::string& dir) {
  demo::KvtierdProcessOptions o;
  o.binary = KVT_KVTIERD_BIN;
  o.run_dir = dir + "/run";
  o.data_dir = dir + "/data";
  o.host_capacity_bytes = 64ull << 20;
  o.disk_file_bytes = 16ull << 20;
  o.disk_capacity_bytes = 64ull << 20;
  return o;
}

#endif

struct ExactCase {
  std::string name;
  std::string arch;                // "llama" = the tests' tiny model
  std::vector<std::string> types;  // cache type flags
  std::vector<std::string> other;  // another shape of the same model: never a hit
};

class ExactFamilyServerTest : public ::testing::TestWithParam<ExactCase> {};

// A prompt of 4 chunks + a tail: loaded from disk by a restarted server (-np 2: the load
// into slot 0 leaves slot 1 unchanged), then through a kvtierd shared by two servers;
// two prompts sharing 2 chunks load only those; another cache shape never hits.
TEST_P(ExactFamilyServerTest, RestoresExactlyFromDiskAndKvtierdAndNeverAcrossShapes) {
  const ExactCase& c = GetParam();
  const std::string model = c.arch == "llama" ? TinyModelPath() : FamilyModel(c.arch);
  // Plain llama-server (no kvtier flag), same cache types: each prompt cold, then again
  // in the same slot (all but the last token reused). Prompt 4 shares prompt 1's first
  // 2 chunks.
  std::vector<int> p4 = Prompt(1);
  const std::vector<int> other = Prompt(4);
  std::copy(other.begin() + 2 * kChunk, other.end(), p4.begin() + 2 * kChunk);
  std::map<int, std::pair<json, json>> ref;
  {
    auto p = MustStart(BaseArgs(model, c.types), c.name + "-ref");
    ASSERT_TRUE(p);
    for (int seed : {1, 2, 4}) {
      const std::vector<int> prompt = seed == 4 ? p4 : Prompt(seed);
      ref[seed].first = Post(*p, "/completion", Completion(prompt));
      ref[seed].second = Post(*p, "/completion", Completion(prompt));
      ASSERT_EQ(ref[seed].second["timings"]["cache_n"], static_cast<int>(kPromptTokens) - 1);
    }
  }
  {
    // The host tier of the server that computed it: prompt 2 takes the slot, then
    // prompt 1 loads from host memory.
    std::vector<std::string> host = BaseArgs(model, c.types);
    for (const char* f :
         {"--kvtier-chunk-tokens", "32", "--kvtier-no-cost-model", "--kvtier-host-mib", "64"})
      host.push_back(f);
    SCOPED_TRACE("host tier");
    auto h = MustStart(host, c.name + "-host");
    ASSERT_TRUE(h);
    ExpectSameAnswer(Post(*h, "/completion", Completion(Prompt(1))), ref[1].first);
    ExpectSameAnswer(Post(*h, "/completion", Completion(Prompt(2))), ref[2].first);
    const json r = Post(*h, "/completion", Completion(Prompt(1)));
    EXPECT_EQ(r["timings"]["cache_n"], kWarmTokens) << r["timings"].dump();
    ExpectSameAnswer(r, ref[1].second);
    EXPECT_EQ(Status(*h)["hits"], 1) << Status(*h).dump();
  }
  const std::string dir = MakeTempDir("server-exact-" + c.name);
  {
    SCOPED_TRACE("store to disk");
    auto a = MustStart(Kvtier(BaseArgs(model, c.types), dir), c.name + "-a");
    ASSERT_TRUE(a);
    const json r = Post(*a, "/completion", Completion(Prompt(1)));
    EXPECT_EQ(r["timings"]["cache_n"], 0);
    ExpectSameAnswer(r, ref[1].first);
    const json st = Status(*a);
    EXPECT_EQ(st["state"], "ready") << st.dump();
    // How kvtier restores it (the demo picks its reference by this).
    EXPECT_EQ(st["memory"], c.arch == "gemma3" || c.arch == "gpt-oss" ? "iswa" : "kv") << st.dump();
    EXPECT_EQ(a->Stop(), 0);  // queued stores are flushed before exit
  }
  // The restarted server's requests answered by plain llama-server with its flags. With
  // one KV stream shared by both slots (--kv-unified), where a slot's cells lie in the
  // cache changes the last bits of its attention sums, in plain llama-server too, so
  // this reference runs the same slots in the same order (slot 0 computes prompt 1, then
  // reuses all but its last token, as the restore does).
  const std::vector<std::string> args_b =
      BaseArgs(model, With({"-np", "2", "-c", "2048"}, c.types));
  std::map<std::string, json> ref_b;
  {
    auto p = MustStart(args_b, c.name + "-ref-b");
    ASSERT_TRUE(p);
    ref_b["p2"] = Post(*p, "/completion", Completion(Prompt(2), 1));
    Post(*p, "/completion", Completion(Prompt(1), 0));
    ref_b["p1_reused"] = Post(*p, "/completion", Completion(Prompt(1), 0));
    ref_b["p2_reused"] = Post(*p, "/completion", Completion(Prompt(2), 1));
    ref_b["p4"] = Post(*p, "/completion", Completion(p4, 1));
  }
  {
    // Restarted, two slots: slot 1 computes prompt 2, slot 0 loads prompt 1 from disk.
    SCOPED_TRACE("disk after restart");
    auto b = MustStart(Kvtier(args_b, dir), c.name + "-b");
    ASSERT_TRUE(b);
    ExpectSameAnswer(Post(*b, "/completion", Completion(Prompt(2), 1)), ref_b["p2"]);
    const json r0 = Post(*b, "/completion", Completion(Prompt(1), 0));
    EXPECT_EQ(r0["timings"]["cache_n"], kWarmTokens) << r0["timings"].dump();
    ExpectSameAnswer(r0, ref_b["p1_reused"]);
    const json r1 = Post(*b, "/completion", Completion(Prompt(2), 1));
    EXPECT_EQ(r1["timings"]["cache_n"], static_cast<int>(kPromptTokens) - 1);
    ExpectSameAnswer(r1, ref_b["p2_reused"]);
    // Prompt 4 shares 2 chunks with prompt 1, then differs: only those 2 load (into slot
    // 1, which holds prompt 2: nothing of its own to reuse).
    const json r4 = Post(*b, "/completion", Completion(p4, 1));
    EXPECT_EQ(r4["timings"]["cache_n"], 2 * kChunk) << r4["timings"].dump();
    ExpectSameAnswer(r4, ref_b["p4"]);
    EXPECT_EQ(Status(*b)["hits"], 2);
    EXPECT_EQ(b->Stop(), 0);
  }
  // The same model and directory with other cache types: another namespace, no hit.
  {
    auto o = MustStart(Kvtier(BaseArgs(model, c.other), dir), c.name + "-other");
    ASSERT_TRUE(o);
    const json r = Post(*o, "/completion", Completion(Prompt(1)));
    EXPECT_EQ(r["timings"]["cache_n"], 0) << r["timings"].dump();
    EXPECT_EQ(Status(*o)["hits"], 0);
  }
#ifdef KVT_KVTIERD_BIN
  // Two servers sharing one kvtierd: what the first computes, the second loads.
  SCOPED_TRACE("kvtierd");
  auto d = demo::KvtierdProcess::Start(DaemonOptions(dir + "-kvtierd"));
  ASSERT_TRUE(d.ok()) << d.status();
  std::vector<std::string> shared = BaseArgs(model, c.types);
  for (const char* f : {"--kvtier-chunk-tokens", "32", "--kvtier-no-cost-model", "--kvtier-daemon"})
    shared.push_back(f);
  shared.push_back((*d)->target());
  auto x = MustStart(shared, c.name + "-share-x");
  auto y = MustStart(shared, c.name + "-share-y");
  ASSERT_TRUE(x && y);
  ExpectSameAnswer(Post(*x, "/completion", Completion(Prompt(2))), ref[2].first);
  WaitPut(*x, 4, 1);
  const json ry = Post(*y, "/completion", Completion(Prompt(2)));
  EXPECT_EQ(ry["timings"]["cache_n"], kWarmTokens) << ry["timings"].dump();
  ExpectSameAnswer(ry, ref[2].second);
  if (HasFailure()) ADD_FAILURE() << "kvtierd's log:\n" << Tail((*d)->log_path());
#endif
}

INSTANTIATE_TEST_SUITE_P(
    Families, ExactFamilyServerTest,
    ::testing::Values(ExactCase{"llama_q8_0_f16", "llama", {"-ctk", "q8_0", "-ctv", "f16"}, {}},
                      ExactCase{"deepseek2_mla", "deepseek2", {"-fa", "on"}, {"-fa", "off"}},
                      // iSWA (window 48 < the 150-token prompt): every token's
                      // sliding-window rows need the full-size cache; one KV stream.
                      ExactCase{"gemma3_iswa",
                                "gemma3",
                                {"--swa-full", "--kv-unified"},
                                {"--swa-full", "--kv-unified", "-ctk", "f32", "-ctv", "f32"}},
                      ExactCase{"gpt_oss_iswa_sinks",
                                "gpt-oss",
                                {"--swa-full", "--kv-unified", "-fa", "on"},
                                {"--swa-full", "--kv-unified", "-fa", "off"}}),
    [](const ::testing::TestParamInfo<ExactCase>& i) { return i.param.name; });

// Flips one byte in the payload of every record on the disk tier in `dir` whose token
// count is not `chunk` (the tail records), so its checksum fails; returns how many.
// Records start 4 KiB aligned (docs/chunk-format.md has the header).
int CorruptTails(const std::string& dir, uint32_t chunk) {
  int flipped = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().string().find("records") == std::string::npos) continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    for (uint64_t off = 0; off + 128 <= e.file_size(); off += 4096) {
      std::array<char, 128> h{};
      f.seekg(static_cast<std::streamoff>(off));
      f.read(h.data(), h.size());
      uint32_t magic = 0, tokens = 0;
      uint64_t payload = 0;
      std::memcpy(&magic, h.data(), 4);
      std::memcpy(&tokens, h.data() + 56, 4);
      std::memcpy(&payload, h.data() + 80, 8);
      if (magic != 0x4354564B || tokens == chunk || payload == 0) continue;
      const auto at = static_cast<std::streamoff>(off + 128 + payload / 2);
      char c = 0;
      f.seekg(at);
      f.read(&c, 1);
      c = static_cast<char>(c ^ 0x5a);
      f.seekp(at);
      f.write(&c, 1);
      ++flipped;
    }
  }
  return flipped;
}

// Recurrent and hybrid models (boundary snapshots): each chunk record holds the chunk's
// attention rows and the recurrent state at its last token, taken where kvtier stops the
// slot's prefill batches, only where a cold prefill's batches stop too: up to
// 150 - (4 + 32) = 114, where llama-server's own last two batches begin. The tail record
// holds the rows of [96, 146) and the recurrent state at 146, where llama-server's last
// prompt batch begins (a purely recurrent model's: that state alone). A 150-token prompt
// (4 chunks + 22) loads 3 chunks and its tail (146 tokens: 4 computed, as a plain
// llama-server's own cache hit) from the host tier, from disk after a restart and through
// a kvtierd shared by two servers; a prompt sharing 2 chunks loads only those; a
// corrupted tail loads the chunks only. Every answer is plain llama-server's cold one,
// which its own cache hit (from its context checkpoint at 146) gives too.
class SnapshotFamilyServerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SnapshotFamilyServerTest, RestoresRowsAndSnapshotExactly) {
  const std::string arch = GetParam();
  const std::string model = FamilyModel(arch);
  const std::vector<std::string> args = BaseArgs(model, {"--kv-unified"});
  std::vector<int> p4 = Prompt(1);
  const std::vector<int> other = Prompt(4);
  std::copy(other.begin() + 2 * kChunk, other.end(), p4.begin() + 2 * kChunk);
  constexpr int kChunks = 3 * kChunk;                            // 96 <= 114 < 128
  constexpr int kTailEnd = static_cast<int>(kPromptTokens) - 4;  // 146
  std::map<int, json> cold;
  {
    auto p = MustStart(args, arch + "-snap-ref");
    ASSERT_TRUE(p);
    for (int seed : {1, 2, 4}) {
      cold[seed] = Post(*p, "/completion", Completion(seed == 4 ? p4 : Prompt(seed)));
    }
    // Plain llama-server's own cache hit: its checkpoint at 146, the last 4 computed.
    const json again = Post(*p, "/completion", Completion(p4));
    EXPECT_EQ(again["timings"]["cache_n"], kTailEnd) << again["timings"].dump();
    ExpectSameAnswer(again, cold[4]);
  }
  auto expect_tail_hit = [&](const json& r, int seed) {
    EXPECT_EQ(r["timings"]["cache_n"], kTailEnd) << r["timings"].dump();
    EXPECT_EQ(r["timings"]["prompt_n"], 4) << r["timings"].dump();
    ExpectSameAnswer(r, cold[seed]);
  };
  const std::string dir = MakeTempDir("server-snap-" + arch);
  {
    SCOPED_TRACE("host tier, then disk");
    std::vector<std::string> a = Kvtier(args, dir);
    a.back() = "64";  // --kvtier-host-mib
    auto s = MustStart(a, arch + "-snap-a");
    ASSERT_TRUE(s);
    const json st = Status(*s);
    EXPECT_EQ(st["state"], "ready") << st.dump();
    EXPECT_EQ(st["memory"], arch == "mamba2" ? "recurrent" : "hybrid") << st.dump();
    ExpectSameAnswer(Post(*s, "/completion", Completion(Prompt(1))), cold[1]);
    ExpectSameAnswer(Post(*s, "/completion", Completion(Prompt(2))), cold[2]);
    WaitPut(*s, 6, 2);
    expect_tail_hit(Post(*s, "/completion", Completion(Prompt(1))), 1);
    const json st2 = Status(*s);
    EXPECT_EQ(st2["hits"], 1) << st2.dump();
    EXPECT_EQ(st2["tail_hits"], 1) << st2.dump();
    EXPECT_EQ(st2["loaded_tokens"], kTailEnd) << st2.dump();
    EXPECT_EQ(s->Stop(), 0);
  }
  {
    SCOPED_TRACE("disk after restart");
    auto s = MustStart(Kvtier(args, dir), arch + "-snap-b");
    ASSERT_TRUE(s);
    expect_tail_hit(Post(*s, "/completion", Completion(Prompt(1))), 1);
    // Shares 2 chunks with prompt 1, then differs: only those load, no tail.
    const json r4 = Post(*s, "/completion", Completion(p4));
    EXPECT_EQ(r4["timings"]["cache_n"], 2 * kChunk) << r4["timings"].dump();
    ExpectSameAnswer(r4, cold[4]);
    const json st = Status(*s);
    EXPECT_EQ(st["hits"], 2) << st.dump();
    EXPECT_EQ(st["tail_hits"], 1) << st.dump();
    EXPECT_EQ(s->Stop(), 0);
  }
  {
    SCOPED_TRACE("corrupted tail");
    ASSERT_GT(CorruptTails(dir, kChunk), 0);
    auto s = MustStart(Kvtier(args, dir), arch + "-snap-c");
    ASSERT_TRUE(s);
    const json r = Post(*s, "/completion", Completion(Prompt(1)));
    EXPECT_EQ(r["timings"]["cache_n"], kChunks) << r["timings"].dump();
    ExpectSameAnswer(r, cold[1]);
    const json st = Status(*s);
    EXPECT_EQ(st["hits"], 1) << st.dump();
    EXPECT_EQ(st["tail_hits"], 0) << st.dump();
  }
#ifdef KVT_KVTIERD_BIN
  SCOPED_TRACE("kvtierd");
  auto d = demo::KvtierdProcess::Start(DaemonOptions(dir + "-kvtierd"));
  ASSERT_TRUE(d.ok()) << d.status();
  std::vector<std::string> shared = args;
  for (const char* f : {"--kvtier-chunk-tokens", "32", "--kvtier-no-cost-model", "--kvtier-daemon"})
    shared.push_back(f);
  shared.push_back((*d)->target());
  auto x = MustStart(shared, arch + "-snap-x");
  auto y = MustStart(shared, arch + "-snap-y");
  ASSERT_TRUE(x && y);
  ExpectSameAnswer(Post(*x, "/completion", Completion(Prompt(2))), cold[2]);
  WaitPut(*x, 3, 1);
  expect_tail_hit(Post(*y, "/completion", Completion(Prompt(2))), 2);
#endif
}

INSTANTIATE_TEST_SUITE_P(Families, SnapshotFamilyServerTest,
                         ::testing::Values("mamba2", "granitehybrid", "lfm2", "qwen35"));

// llama-server's context checkpoints off (-ctxcp 0): its prompt batches no longer stop 4
// tokens before the end, so kvtier stores no tails for a hybrid model; a repeat loads
// the 3 chunks and computes the rest, the cold answer of a plain server with that flag.
TEST(SnapshotServerTest, WithoutContextCheckpointsStoresNoTails) {
  const std::string model = FamilyModel("lfm2");
  const std::vector<std::string> args = BaseArgs(model, {"--kv-unified", "-ctxcp", "0"});
  json cold;
  {
    auto p = MustStart(args, "lfm2-nockpt-ref");
    ASSERT_TRUE(p);
    cold = Post(*p, "/completion", Completion(Prompt(1)));
  }
  std::vector<std::string> a = Kvtier(args, MakeTempDir("server-snap-nockpt"));
  a.back() = "64";  // --kvtier-host-mib
  auto s = MustStart(a, "lfm2-nockpt");
  ASSERT_TRUE(s);
  EXPECT_EQ(Status(*s)["tail_records"], false) << Status(*s).dump();
  ExpectSameAnswer(Post(*s, "/completion", Completion(Prompt(1))), cold);
  Post(*s, "/completion", Completion(Prompt(2)));
  WaitPut(*s, 6, 0);
  const json r = Post(*s, "/completion", Completion(Prompt(1)));
  EXPECT_EQ(r["timings"]["cache_n"], 3 * kChunk) << r["timings"].dump();
  ExpectSameAnswer(r, cold);
  EXPECT_EQ(Status(*s)["tails_queued"], 0) << Status(*s).dump();
}

class RefusedFamilyServerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RefusedFamilyServerTest, ServesWithoutKvtierNamingWhatIsMissing) {
  const std::string arch = GetParam();
  const std::string model = FamilyModel(arch);
  ASSERT_TRUE(std::filesystem::exists(model));
  auto [rc, out] = RunToExit(KVT_MAKE_GGUF_BIN, {"--check", model});
  if (rc != 0) GTEST_SKIP() << "the pinned llama.cpp cannot run '" << arch << "' here: " << out;
  json cold;
  {
    auto p = MustStart(BaseArgs(model), arch + "-plain");
    ASSERT_TRUE(p);
    cold = Post(*p, "/completion", Completion(Prompt(3)));
  }
  const std::string dir = MakeTempDir("server-refused-" + arch);
  for (int run = 0; run < 2; ++run) {  // a restart finds nothing stored either
    auto s = MustStart(Kvtier(BaseArgs(model), dir), arch + "-kvtier-" + std::to_string(run));
    ASSERT_TRUE(s);
    const json st = Status(*s);
    EXPECT_EQ(st["enabled"], false) << st.dump();
    EXPECT_EQ(st["state"], "refused") << st.dump();
    const std::string why = st.value("refused", "");
    EXPECT_NE(why.find("'" + arch + "'"), std::string::npos) << why;
    EXPECT_NE(why.find("missing: "), std::string::npos) << why;
    if (arch == "gemma3" || arch == "gpt-oss") {  // exact with a full-size SWA cache
      EXPECT_NE(why.find("run with --swa-full"), std::string::npos) << why;
    }
    const json r = Post(*s, "/completion", Completion(Prompt(3)));
    EXPECT_EQ(r["timings"]["cache_n"], 0) << r["timings"].dump();
    ExpectSameAnswer(r, cold);
    EXPECT_EQ(s->Stop(), 0);
    EXPECT_NE(Tail(s->log()).find("runs without kvtier"), std::string::npos) << Tail(s->log());
  }
}

// An iSWA model with --swa-full but one KV stream per slot (-np 2 without --kv-unified):
// kvtier reads an iSWA state as one stream, so it is refused naming --kv-unified, and the
// answers are plain llama-server's.
TEST(IswaServerTest, OneStreamPerSlotIsRefusedNamingKvUnified) {
  const std::string model = FamilyModel("gemma3");
  const std::vector<std::string> args = BaseArgs(model, {"--swa-full", "-np", "2", "-c", "2048"});
  json cold;
  {
    auto p = MustStart(args, "gemma3-streams-plain");
    ASSERT_TRUE(p);
    cold = Post(*p, "/completion", Completion(Prompt(3)));
  }
  auto s = MustStart(Kvtier(args, MakeTempDir("server-iswa-streams")), "gemma3-streams");
  ASSERT_TRUE(s);
  const json st = Status(*s);
  EXPECT_EQ(st["state"], "refused") << st.dump();
  EXPECT_NE(st.value("refused", "").find("--kv-unified"), std::string::npos) << st.dump();
  ExpectSameAnswer(Post(*s, "/completion", Completion(Prompt(3))), cold);
}

INSTANTIATE_TEST_SUITE_P(Families, RefusedFamilyServerTest, ::testing::Values("gemma3", "gpt-oss"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param;
                           for (char& c : n) {
                             if (c == '-') c = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace kvt::llamacpp::testing
