// kvtier-llama-server through its real HTTP API (issue 10). Every test starts real server
// processes on loopback ports with the generated tiny model and talks to them with curl.
// Chunks of 32 tokens; prompts of 150 tokens = 4 complete chunks + 22 tokens. A warm
// request loads the 4 chunks (128 tokens) and the prompt's tail record (tokens 128..148),
// so it restores 149 tokens and computes the last one, as llama-server's own RAM cache
// does; its answer is then bit for bit a plain server's cache hit (Ref::slot_reuse).
// Restores of complete chunks only (--kvtier-no-tail, or a tail that is missing) give the
// cold answer bit for bit.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "gtest/gtest.h"
#include "kvtierd_process.h"
#include "llama_test_util.h"
#include "server_test_util.h"

namespace kvt::llamacpp::testing {
namespace {

using nlohmann::json;
constexpr int kChunk = 32;
constexpr size_t kPromptTokens = 150;
constexpr int kChunkTokens = 128;  // the complete chunks of a prompt
constexpr int kWarmTokens = 149;   // chunks + tail: all but the last token

std::vector<std::string> BaseArgs() {
  return {"-m",       TinyModelPath(), "-c", "1024", "-np", "1",   "-t",
          "2",        "-tb",           "2",  "-b",   "256", "-ub", std::to_string(kChunk),
          "--metrics"};
}
std::vector<std::string> With(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}
std::vector<std::string> Kvtier(const std::vector<std::string>& more) {
  return With(
      With(BaseArgs(), {"--kvtier-chunk-tokens", std::to_string(kChunk), "--kvtier-no-cost-model"}),
      more);
}

std::vector<int> Prompt(uint64_t seed, size_t n = kPromptTokens) {
  std::vector<TokenId> t = RandomTokens(seed, n, 32000);
  return std::vector<int>(t.begin(), t.end());
}

json Completion(const std::vector<int>& prompt, int slot = -1) {
  json b = {{"prompt", prompt}, {"n_predict", 8},       {"temperature", 0.0},
            {"n_probs", 5},     {"cache_prompt", true}, {"return_tokens", true}};
  if (slot >= 0) b["id_slot"] = slot;
  return b;
}

std::string Log(const std::string& tag) {
  static const std::string dir = MakeTempDir("server-logs");
  return dir + "/" + tag + ".log";
}

std::unique_ptr<ServerProcess> MustStart(const std::vector<std::string>& args,
                                         const std::string& tag) {
  auto s = ServerProcess::Start(KVT_LLAMA_SERVER_BIN, args, Log(tag));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

// Reference answers from the same binary without any kvtier flag (plain llama-server):
// the prompt computed cold, and then sent again to the same slot (llama-server reuses the
// slot's KV and evaluates only the last token).
struct Ref {
  json cold;
  json slot_reuse;
};
const Ref& References(const std::vector<int>& prompt) {
  static std::map<std::vector<int>, Ref> refs;
  if (!refs.count(prompt)) {
    auto s = MustStart(BaseArgs(), "reference-" + std::to_string(refs.size()));
    if (s) {
      refs[prompt].cold = Post(*s, "/completion", Completion(prompt));
      refs[prompt].slot_reuse = Post(*s, "/completion", Completion(prompt));
      EXPECT_EQ(refs[prompt].slot_reuse["timings"]["cache_n"], static_cast<int>(prompt.size()) - 1);
    }
  }
  return refs[prompt];
}
const Ref& References(uint64_t seed) { return References(Prompt(seed)); }
const json& Reference(uint64_t seed) { return References(seed).cold; }
// The plain server's answer for what was restored: all but the last token (a RAM-cache or
// slot hit) or a chunk boundary (the cold prefill of the rest).
const json& ReferenceFor(const json& got, const std::vector<int>& prompt) {
  const Ref& r = References(prompt);
  const int cache_n = got["timings"]["cache_n"];
  return cache_n == static_cast<int>(prompt.size()) - 1 ? r.slot_reuse : r.cold;
}

void ExpectSameAnswer(const json& got, const json& want) {
  ASSERT_TRUE(want.contains("tokens")) << want.dump();
  EXPECT_EQ(got["tokens"], want["tokens"]);
  EXPECT_EQ(got["content"], want["content"]);
  ASSERT_TRUE(got.contains("completion_probabilities")) << got.dump();
  EXPECT_EQ(got["completion_probabilities"][0], want["completion_probabilities"][0]);
}

TEST(LlamaServerKvtierTest, BadFlagValuesExit2NamingTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string flag;
  };
  const std::vector<Case> cases = {
      {{"--kvtier-host-mib", "lots"}, "--kvtier-host-mib"},
      {{"--kvtier-host-mib=-5"}, "--kvtier-host-mib"},
      {{"--kvtier-daemon", "/tmp/no-scheme.sock"}, "--kvtier-daemon"},
      {{"--kvtier-chunk-tokens", "3"}, "--kvtier-chunk-tokens"},
      {{"--kvtier-dir"}, "--kvtier-dir"},
      {{"--kvtier-dir", "/proc/kvtier-cannot-create"}, "--kvtier-dir"},
      {{"--kvtier-token", "abcdefgh"}, "--kvtier-token"},
      {{"--kvtier-bogus", "1"}, "--kvtier-bogus"},
      {{"--kvtier-overlap", "sometimes"}, "--kvtier-overlap"},
      {{"--kvtier-overlap", "always", "--kvtier-overlap-front", "48"}, "--kvtier-overlap-front"},
      {{"--kvtier-overlap-front", "64"}, "--kvtier-overlap-front"},  // needs "always"
      {{"--kvtier-throttle-gbps", "fast"}, "--kvtier-throttle-gbps"},
      {{"--kvtier-dir", "/tmp", "--kvtier-throttle-gbps", "1"}, "--kvtier-throttle-gbps"},
      {{"--kvtier-dir", "/tmp", "--kvtier-cost-probe-after", "-1"}, "--kvtier-cost-probe-after"},
      {{"--kvtier-dir", "/tmp", "--kvtier-cost-probe-after", "often"}, "--kvtier-cost-probe-after"},
  };
  for (const Case& c : cases) {
    auto [rc, out] = RunToExit(KVT_LLAMA_SERVER_BIN, With(BaseArgs(), c.args));
    EXPECT_EQ(rc, 2) << c.flag << ": " << out;
    EXPECT_NE(out.find(c.flag), std::string::npos) << out;
    // Only this binary's flags are named (not the kvtier CLI's --daemon).
    for (size_t p = out.find("--daemon"); p != std::string::npos; p = out.find("--daemon", p + 1))
      EXPECT_TRUE(p >= 7 && out.compare(p - 7, 7, "-kvtier") == 0) << out;
  }
  // A valid front without --kvtier-overlap always is told what is missing (a fresh user
  // read "expected a positive multiple" for 64 with 64-token chunks).
  auto [rc, out] = RunToExit(
      KVT_LLAMA_SERVER_BIN, With(BaseArgs(), {"--kvtier-chunk-tokens", "32", "--kvtier-dir", "/tmp",
                                              "--kvtier-overlap-front", "64"}));
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("'64': needs --kvtier-overlap always"), std::string::npos) << out;
  // Without kvtier flags the server has no /kvtier endpoint: it is plain llama-server.
  auto plain = MustStart(BaseArgs(), "plain");
  ASSERT_TRUE(plain);
  auto r = CurlText(plain->url() + "/kvtier");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->find("\"enabled\""), std::string::npos) << *r;
}

TEST(LlamaServerKvtierTest, RestartedServerIsWarmFromDiskWithIdenticalAnswer) {
  const json& ref = Reference(1);
  const json& ref_hit = References(1).slot_reuse;
  // Computing the last token alone changes the last bits of its probabilities here, so
  // the two references tell a restore up to the last token from one up to a chunk.
  ASSERT_NE(ref["completion_probabilities"][0], ref_hit["completion_probabilities"][0]);
  const std::string dir = MakeTempDir("server-disk");
  const auto args =
      Kvtier({"--kvtier-dir", dir, "--kvtier-disk-mib", "16", "--kvtier-host-mib", "0"});
  {
    auto s = MustStart(args, "disk-1");
    ASSERT_TRUE(s);
    json r = Post(*s, "/completion", Completion(Prompt(1)));
    EXPECT_EQ(r["timings"]["cache_n"], 0);
    ExpectSameAnswer(r, ref);
    EXPECT_EQ(s->Stop(), 0);  // SIGTERM: queued stores are flushed before exit
  }
  {
    auto s = MustStart(args, "disk-2");
    ASSERT_TRUE(s);
    json r = Post(*s, "/completion", Completion(Prompt(1)));
    // Chunks and tail: only the last token is computed, as after a RAM-cache restore.
    EXPECT_EQ(r["timings"]["cache_n"], kWarmTokens) << r["timings"].dump();
    EXPECT_EQ(r["timings"]["prompt_n"], 1);
    ExpectSameAnswer(r, ref_hit);
    json st = Status(*s);
    EXPECT_EQ(st["hits"], 1);
    EXPECT_EQ(st["tail_hits"], 1);
    EXPECT_EQ(st["loaded_tokens"], kWarmTokens);
    EXPECT_EQ(st["load_bytes"], kWarmTokens * st["bytes_per_token"].get<uint64_t>());
    auto m = CurlText(s->url() + "/metrics");
    ASSERT_TRUE(m.ok());
    EXPECT_NE(m->find("kvtier_hits_total 1\n"), std::string::npos) << *m;
    EXPECT_NE(m->find("kvtier_tail_hits_total 1\n"), std::string::npos) << *m;
    EXPECT_NE(m->find("kvtier_loaded_tokens_total 149\n"), std::string::npos) << *m;
  }
  // --kvtier-no-tail: complete chunks only, the rest is prefilled: the cold answer.
  auto s = MustStart(With(args, {"--kvtier-no-tail"}), "disk-3");
  ASSERT_TRUE(s);
  json r = Post(*s, "/completion", Completion(Prompt(1)));
  EXPECT_EQ(r["timings"]["cache_n"], kChunkTokens) << r["timings"].dump();
  EXPECT_EQ(r["timings"]["prompt_n"], static_cast<int>(kPromptTokens) - kChunkTokens);
  ExpectSameAnswer(r, ref);
  EXPECT_EQ(Status(*s)["tail_hits"], 0);
}

// The tail record is keyed by its exact tokens chained from the chunks before it: a prompt
// that differs only inside the tail loads the chunks and nothing more (the cold answer of
// its own tokens), and a prompt shorter than one chunk is restored from its tail alone.
TEST(LlamaServerKvtierTest, TailRecordIsReturnedOnlyForItsOwnTokens) {
  const std::string dir = MakeTempDir("server-tail");
  const auto args = Kvtier({"--kvtier-dir", dir, "--kvtier-disk-mib", "16"});
  std::vector<int> other = Prompt(1);
  other[140] = other[140] == 7 ? 8 : 7;  // inside the tail [128, 149)
  std::vector<int> short_prompt = Prompt(5, 20);
  short_prompt[0] = other[0];  // the slot shares one token with it (like a BOS token)
  {
    auto s = MustStart(args, "tail-1");
    ASSERT_TRUE(s);
    ExpectSameAnswer(Post(*s, "/completion", Completion(Prompt(1))), Reference(1));
    // A prompt sharing no token with the next one, so the short prompt's prefill begins at
    // 0 and its tail is computed as in a cold prefill and stored (after a one-token reuse
    // the server drops that token to the same effect: MissAfterAOneTokenReuse... below).
    std::vector<int> gap = Prompt(9, 10);
    if (gap[0] == short_prompt[0]) gap[0] = short_prompt[0] == 7 ? 8 : 7;
    Post(*s, "/completion", Completion(gap));
    ExpectSameAnswer(Post(*s, "/completion", Completion(short_prompt)),
                     References(short_prompt).cold);
    EXPECT_EQ(s->Stop(), 0);
  }
  auto s = MustStart(args, "tail-2");
  ASSERT_TRUE(s);
  json r = Post(*s, "/completion", Completion(other));
  EXPECT_EQ(r["timings"]["cache_n"], kChunkTokens) << r["timings"].dump();
  ExpectSameAnswer(r, References(other).cold);
  r = Post(*s, "/completion", Completion(short_prompt));
  EXPECT_EQ(r["timings"]["cache_n"], 19) << r["timings"].dump();
  ExpectSameAnswer(r, References(short_prompt).slot_reuse);
  json st = Status(*s);
  EXPECT_EQ(st["tail_hits"], 1) << st.dump();
  EXPECT_EQ(st["hits"], 2) << st.dump();
  // `other` restored its chunks, so its prefill began at 128 and its own tail was stored.
  EXPECT_EQ(st["tails_queued"], 1) << st.dump();
}

// A miss after a slot that shares only its first token with the prompt (a BOS token):
// kvtier drops that one token so the prompt is computed from 0 as cold, and stores its
// chunks and its tail. A restarted server then restores it up to its last token.
TEST(LlamaServerKvtierTest, MissAfterAOneTokenReuseStoresTheTailToo) {
  const std::string dir = MakeTempDir("server-drop");
  const auto args =
      Kvtier({"--kvtier-dir", dir, "--kvtier-disk-mib", "16", "--kvtier-host-mib", "0"});
  std::vector<int> second = Prompt(2);
  second[0] = Prompt(1)[0];  // shares exactly its first token with Prompt(1)
  ASSERT_NE(second[1], Prompt(1)[1]);
  {
    auto s = MustStart(args, "drop-1");
    ASSERT_TRUE(s);
    Post(*s, "/completion", Completion(Prompt(1)));
    json r = Post(*s, "/completion", Completion(second));
    EXPECT_EQ(r["timings"]["cache_n"], 0) << r["timings"].dump();  // computed from token 0
    ExpectSameAnswer(r, References(second).cold);
    WaitPut(*s, 8, 2);  // both prompts' 4 chunks and both tails
    json st = Status(*s);
    EXPECT_EQ(st["dropped_prefixes"], 1) << st.dump();
    EXPECT_EQ(st["tails_put"], 2) << st.dump();
    EXPECT_EQ(s->Stop(), 0);
  }
  auto s = MustStart(args, "drop-2");
  ASSERT_TRUE(s);
  json r = Post(*s, "/completion", Completion(second));
  EXPECT_EQ(r["timings"]["cache_n"], kWarmTokens) << r["timings"].dump();
  ExpectSameAnswer(r, References(second).slot_reuse);
  EXPECT_EQ(Status(*s)["tail_hits"], 1);
}

// Flips bytes inside the payload of every record of the disk tier in `dir` (records start
// 4 KiB aligned); returns how many.
int CorruptRecords(const std::string& dir) {
  int flipped = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().string().find("records") == std::string::npos) continue;
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    for (uint64_t off = 1024; off + 1 < e.file_size() && off < (1u << 20); off += 4096) {
      f.seekg(off);
      char c = 0;
      f.read(&c, 1);
      f.seekp(off);
      c = static_cast<char>(c ^ 0x5a);
      f.write(&c, 1);
      ++flipped;
    }
  }
  return flipped;
}

// A disk tier in `dir` holding Prompt(seed)'s chunks and tail (a server stored them).
std::vector<std::string> StoredDisk(const std::string& dir, uint64_t seed, const std::string& tag) {
  const auto args =
      Kvtier({"--kvtier-dir", dir, "--kvtier-disk-mib", "16", "--kvtier-host-mib", "0"});
  auto s = MustStart(args, tag);
  EXPECT_TRUE(s);
  if (s) {
    Post(*s, "/completion", Completion(Prompt(seed)));
    EXPECT_EQ(s->Stop(), 0);
  }
  return args;
}

TEST(LlamaServerKvtierTest, CorruptedChunkIsRecomputedWithIdenticalAnswer) {
  const json& ref = Reference(1);
  const std::string dir = MakeTempDir("server-corrupt");
  const auto args = StoredDisk(dir, 1, "corrupt-1");
  ASSERT_GT(CorruptRecords(dir), 0);
  auto s = MustStart(args, "corrupt-2");
  ASSERT_TRUE(s);
  json r = Post(*s, "/completion", Completion(Prompt(1)));
  EXPECT_LT(r["timings"]["cache_n"].get<int>(), kChunkTokens);
  ExpectSameAnswer(r, ref);
  json st = Status(*s);
  EXPECT_GE(st["integrity_errors"].get<int>() + st["load_failures"].get<int>(), 1) << st.dump();
}

// Load while computing (--kvtier-overlap always, a fixed front of 2 chunks): llama-server
// computes tokens [0, 64) in its own batches while chunks 2..3 load from disk; the two are
// joined into the slot's sequence and the rest [128, 150) is prefilled: the cold answer
// bit for bit (the front was computed in the cold prefill's ubatches).
std::vector<std::string> Overlap(std::vector<std::string> args) {
  return With(std::move(args), {"--kvtier-overlap", "always", "--kvtier-overlap-front", "64"});
}

TEST(LlamaServerKvtierTest, OverlapJoinsComputedFrontAndLoadedBackWithColdAnswer) {
  const json& ref = Reference(1);
  const std::string dir = MakeTempDir("server-overlap");
  auto s = MustStart(Overlap(StoredDisk(dir, 1, "overlap-1")), "overlap-2");
  ASSERT_TRUE(s);
  json r = Post(*s, "/completion", Completion(Prompt(1)));
  EXPECT_EQ(r["timings"]["cache_n"], 64) << r["timings"].dump();
  EXPECT_EQ(r["timings"]["prompt_n"], static_cast<int>(kPromptTokens) - 64);
  ExpectSameAnswer(r, ref);
  json st = Status(*s);
  EXPECT_EQ(st["overlap_mode"], "always");
  EXPECT_EQ(st["overlapped"], 1) << st.dump();
  EXPECT_EQ(st["overlap_joined"], 1) << st.dump();
  EXPECT_EQ(st["overlap_front_tokens"], 64);
  EXPECT_EQ(st["overlap_loaded_tokens"], 64);
  EXPECT_EQ(st["hits"], 1);
  EXPECT_EQ(st["misses"], 0);
  EXPECT_EQ(st["loaded_tokens"], 64);
  EXPECT_EQ(st["load_failures"], 0);
  auto m = CurlText(s->url() + "/metrics");
  ASSERT_TRUE(m.ok());
  EXPECT_NE(m->find("kvtier_overlapped_total 1\n"), std::string::npos) << *m;
  EXPECT_NE(m->find("kvtier_overlap_front_tokens_total 64\n"), std::string::npos) << *m;
  EXPECT_NE(m->find("kvtier_overlap_loaded_tokens_total 64\n"), std::string::npos) << *m;
}

// The back's records fail verification: nothing is joined, llama-server computes the rest
// after the front, and the answer is the cold one.
TEST(LlamaServerKvtierTest, OverlapWithCorruptedBackRecomputesWithIdenticalAnswer) {
  const json& ref = Reference(1);
  const std::string dir = MakeTempDir("server-overlap-corrupt");
  const auto args = StoredDisk(dir, 1, "overlap-corrupt-1");
  ASSERT_GT(CorruptRecords(dir), 0);
  auto s = MustStart(Overlap(args), "overlap-corrupt-2");
  ASSERT_TRUE(s);
  json r = Post(*s, "/completion", Completion(Prompt(1)));
  EXPECT_EQ(r["timings"]["cache_n"], 0) << r["timings"].dump();
  EXPECT_EQ(r["timings"]["prompt_n"], static_cast<int>(kPromptTokens));
  ExpectSameAnswer(r, ref);
  json st = Status(*s);
  EXPECT_EQ(st["overlapped"], 1) << st.dump();
  EXPECT_EQ(st["overlap_joined"], 0) << st.dump();
  EXPECT_EQ(st["load_failures"], 1) << st.dump();
  EXPECT_GE(st["integrity_errors"].get<int>(), 1) << st.dump();
  EXPECT_EQ(st["hits"], 0);
  EXPECT_EQ(st["misses"], 1);
  EXPECT_EQ(st["requests"], 1);
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

TEST(LlamaServerKvtierTest, TwoServersShareOneKvtierd) {
  const json& ref = Reference(2);
  const std::string dir = MakeTempDir("server-share");
  auto d = demo::KvtierdProcess::Start(DaemonOptions(dir));
  ASSERT_TRUE(d.ok()) << d.status();
  const auto args = Kvtier({"--kvtier-daemon", (*d)->target()});
  auto a = MustStart(args, "share-a");
  auto b = MustStart(args, "share-b");
  ASSERT_TRUE(a && b);
  json ra = Post(*a, "/completion", Completion(Prompt(2)));
  EXPECT_EQ(ra["timings"]["cache_n"], 0);
  WaitPut(*a, kChunkTokens / kChunk, 1);
  json rb = Post(*b, "/completion", Completion(Prompt(2)));
  EXPECT_EQ(rb["timings"]["cache_n"], kWarmTokens);
  ExpectSameAnswer(ra, ref);
  ExpectSameAnswer(rb, References(2).slot_reuse);
  EXPECT_EQ(Status(*b)["hits"], 1);
  if (HasFailure()) ADD_FAILURE() << "kvtierd's log:\n" << Tail((*d)->log_path());
}

TEST(LlamaServerKvtierTest, KvtierdKilledOrPausedMeansColdAnswersThenHitsResume) {
  const json& ref1 = Reference(1);
  const json& ref2 = Reference(2);
  const std::string dir = MakeTempDir("server-kill");
  auto d = demo::KvtierdProcess::Start(DaemonOptions(dir));
  ASSERT_TRUE(d.ok()) << d.status();
  // --cache-ram 0 and one slot: alternating prompts must come from kvtier.
  auto s = MustStart(Kvtier({"--kvtier-daemon", (*d)->target(), "--kvtier-timeout-ms", "1000",
                             "--cache-ram", "0"}),
                     "kill");
  ASSERT_TRUE(s);
  ExpectSameAnswer(Post(*s, "/completion", Completion(Prompt(1))), ref1);
  WaitPut(*s, 4, 1);
  ExpectSameAnswer(Post(*s, "/completion", Completion(Prompt(2))), ref2);
  WaitPut(*s, 8, 2);
  json warm = Post(*s, "/completion", Completion(Prompt(1)));
  EXPECT_EQ(warm["timings"]["cache_n"], kWarmTokens);
  ExpectSameAnswer(warm, References(1).slot_reuse);

  // SIGKILL: the next requests answer cold, with the same tokens.
  kill((*d)->pid(), SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (uint64_t seed : {2, 1}) {
    json r = Post(*s, "/completion", Completion(Prompt(seed)));
    EXPECT_EQ(r["timings"]["cache_n"], 0);
    ExpectSameAnswer(r, seed == 1 ? ref1 : ref2);
  }
  (void)(*d)->Stop();
  d->reset();

  // Restarted on the same socket: hits resume (chunks lost with the killed daemon's
  // queue are stored again by the next requests).
  auto d2 = demo::KvtierdProcess::Start(DaemonOptions(dir));
  ASSERT_TRUE(d2.ok()) << d2.status();
  int hits = 0;
  uint64_t last_seed = 1;
  for (int i = 0; i < 6 && hits == 0; ++i) {
    const uint64_t seed = i % 2 == 0 ? 2 : 1;
    last_seed = seed;
    json r = Post(*s, "/completion", Completion(Prompt(seed)));
    ExpectSameAnswer(r, ReferenceFor(r, Prompt(seed)));
    if (r["timings"]["cache_n"] >= kChunkTokens) ++hits;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  EXPECT_EQ(hits, 1);

  // SIGSTOP: a paused daemon costs at most the call deadline; answers stay correct.
  kill((*d2)->pid(), SIGSTOP);
  // (starting with the prompt the slot does not hold, so nothing is reused in the slot)
  for (uint64_t seed : {3 - last_seed, last_seed}) {
    json r = Post(*s, "/completion", Completion(Prompt(seed)));
    EXPECT_EQ(r["timings"]["cache_n"], 0);
    ExpectSameAnswer(r, seed == 1 ? ref1 : ref2);
  }
  kill((*d2)->pid(), SIGCONT);
}
#endif  // KVT_KVTIERD_BIN

TEST(LlamaServerKvtierTest, LoadIntoOneSlotNeverChangesAnother) {
  const json& ref1 = Reference(1);
  const json& ref2 = Reference(2);
  auto s = MustStart(
      Kvtier({"--kvtier-host-mib", "64", "--cache-ram", "0", "-np", "2", "-c", "2048"}), "slots");
  ASSERT_TRUE(s);
  ExpectSameAnswer(Post(*s, "/completion", Completion(Prompt(1), 0)), ref1);
  ExpectSameAnswer(Post(*s, "/completion", Completion(Prompt(2), 1)), ref2);
  WaitPut(*s, 8, 2);
  // Slot 0 loads prompt 2 from kvtier while slot 1 holds prompt 2 itself.
  json r0 = Post(*s, "/completion", Completion(Prompt(2), 0));
  EXPECT_EQ(r0["timings"]["cache_n"], kWarmTokens);
  ExpectSameAnswer(r0, References(2).slot_reuse);
  // Slot 1 reuses its own KV (llama-server's slot reuse): bit for bit what a plain
  // server's slot reuse gives, so slot 0's load did not touch it.
  json r1 = Post(*s, "/completion", Completion(Prompt(2), 1));
  EXPECT_EQ(r1["timings"]["cache_n"], static_cast<int>(kPromptTokens) - 1);
  ExpectSameAnswer(r1, References(2).slot_reuse);
  json r2 = Post(*s, "/completion", Completion(Prompt(1), 0));
  EXPECT_EQ(r2["timings"]["cache_n"], kWarmTokens);
  ExpectSameAnswer(r2, References(1).slot_reuse);
}

// A planned split (no fixed front) on a host tier throttled to 2 MB/s: the first hit
// loads everything (the cost model still assumes host-memory speed) and learns the
// bandwidth; the second is planned as a split (its prefill estimate is the default
// 1 ms/token: 128 tokens against ~4 x 33 ms of loading) and meets in the middle, one chunk
// per batch. Where the two sides meet depends on this machine's speed; the answer is
// the cold one wherever it is.
TEST(LlamaServerKvtierTest, PlannedOverlapOnAThrottledTierMeetsInTheMiddle) {
  const json& ref1 = Reference(1);
  const json& ref2 = Reference(2);
  auto s = MustStart(Kvtier({"--kvtier-host-mib", "64", "--kvtier-throttle-gbps", "0.002",
                             "--kvtier-overlap", "always", "--kvtier-no-tail", "--cache-ram", "0"}),
                     "overlap-planned");
  ASSERT_TRUE(s);
  ExpectSameAnswer(Post(*s, "/completion", Completion(Prompt(1))), ref1);
  WaitPut(*s, 4);
  ExpectSameAnswer(Post(*s, "/completion", Completion(Prompt(2))), ref2);
  WaitPut(*s, 8);
  json r = Post(*s, "/completion", Completion(Prompt(1)));
  EXPECT_EQ(r["timings"]["cache_n"], kChunkTokens) << r["timings"].dump();
  ExpectSameAnswer(r, ref1);
  EXPECT_EQ(Status(*s)["overlapped"], 0);
  r = Post(*s, "/completion", Completion(Prompt(2)));
  ExpectSameAnswer(r, ref2);
  const json st = Status(*s);
  EXPECT_EQ(st["overlapped"], 1) << st.dump();
  const int cache_n = r["timings"]["cache_n"];
  EXPECT_EQ(cache_n + r["timings"]["prompt_n"].get<int>(), static_cast<int>(kPromptTokens));
  EXPECT_EQ(cache_n % kChunk, 0);
  EXPECT_EQ(cache_n, st["overlap_joined"] == 1 ? st["overlap_loaded_tokens"].get<int>() : 0)
      << st.dump();
}

// Two slots: slot 0's overlapped load and join (its own seq id) leave slot 1's KV as it was.
TEST(LlamaServerKvtierTest, OverlapInOneSlotNeverChangesAnother) {
  const json& ref1 = Reference(1);
  const json& ref2 = Reference(2);
  auto s = MustStart(
      Overlap(Kvtier({"--kvtier-host-mib", "64", "--cache-ram", "0", "-np", "2", "-c", "2048"})),
      "overlap-slots");
  ASSERT_TRUE(s);
  ExpectSameAnswer(Post(*s, "/completion", Completion(Prompt(1), 0)), ref1);
  ExpectSameAnswer(Post(*s, "/completion", Completion(Prompt(2), 1)), ref2);
  WaitPut(*s, 8, 2);
  json r0 = Post(*s, "/completion", Completion(Prompt(2), 0));
  EXPECT_EQ(r0["timings"]["cache_n"], 64) << r0["timings"].dump();
  ExpectSameAnswer(r0, ref2);
  json r1 = Post(*s, "/completion", Completion(Prompt(2), 1));
  EXPECT_EQ(r1["timings"]["cache_n"], static_cast<int>(kPromptTokens) - 1);
  ExpectSameAnswer(r1, References(2).slot_reuse);
  EXPECT_EQ(Status(*s)["overlap_joined"], 1);
}

TEST(LlamaServerKvtierTest, MultiTurnChatLoadsThePreviousTurnsChunks) {
  const std::string dir = MakeTempDir("server-chat");
  const auto args =
      Kvtier({"--kvtier-dir", dir, "--kvtier-disk-mib", "16", "--chat-template", "chatml"});
  std::string system = "You are a careful assistant.";
  for (int i = 0; i < 12; ++i)
    system += " Answer with facts about rivers, mountains and the sea, in order.";
  json messages = json::array({{{"role", "system"}, {"content", system}},
                               {{"role", "user"}, {"content", "Tell me about the Danube."}}});
  int prev_prompt = 0;
  for (int turn = 0; turn < 3; ++turn) {
    auto s = MustStart(args, "chat-" + std::to_string(turn));  // a fresh server per turn
    ASSERT_TRUE(s);
    json r = Post(*s, "/v1/chat/completions",
                  {{"messages", messages}, {"max_tokens", 6}, {"temperature", 0.0}});
    ASSERT_TRUE(r.contains("timings")) << r.dump();
    const int cache_n = r["timings"]["cache_n"];
    const int prompt_n = r["timings"]["prompt_n"];
    if (turn == 0) {
      EXPECT_EQ(cache_n, 0);
    } else {
      // The previous turn's prompt is a prefix of this one: its complete chunks load.
      EXPECT_EQ(cache_n, prev_prompt / kChunk * kChunk) << r["timings"].dump();
      EXPECT_GT(cache_n, 0);
    }
    prev_prompt = cache_n + prompt_n;
    EXPECT_EQ(s->Stop(), 0);
    messages.push_back({{"role", "assistant"}, {"content", r["choices"][0]["message"]["content"]}});
    messages.push_back(
        {{"role", "user"}, {"content", "And turn " + std::to_string(turn + 2) + "?"}});
  }
}

// Storing a prompt costs the task loop one lookup of which chunks the tiers hold (a
// kvtierd round trip when kvtierd is a tier), and every slot waits for it. When the next
// prompt takes the slot, llama-server saves the slot to its RAM cache; kvtier stored that
// prompt whole already, so the save adds no second lookup.
TEST(LlamaServerKvtierTest, EachPromptIsTakenForStoringOnce) {
  const std::string dir = MakeTempDir("server-store-once");
  auto s = MustStart(Kvtier({"--kvtier-dir", dir}), "store-once");
  ASSERT_TRUE(s);
  json first = Post(*s, "/completion", Completion(Prompt(21)));
  EXPECT_EQ(first["timings"]["cache_n"], 0);
  WaitPut(*s, 4, 1);
  json second = Post(*s, "/completion", Completion(Prompt(22)));
  EXPECT_EQ(second["timings"]["cache_n"], 0) << second["timings"].dump();
  WaitPut(*s, 8, 2);
  json st = Status(*s);
  EXPECT_EQ(st["store_calls"], 2) << st.dump();
  // Both prompts were looked up at prompt start (misses); their stores reused that answer
  // instead of asking kvtier's tiers again.
  EXPECT_EQ(st["store_lookups"], 0) << st.dump();
  EXPECT_EQ(st["stored_chunks"], 8) << st.dump();
  EXPECT_EQ(st["store_errors"], 0);
  EXPECT_GT(st["store_seconds"].get<double>(), 0.0) << st.dump();
  // The first prompt again: llama-server's RAM cache restores it; kvtier has nothing to add.
  json again = Post(*s, "/completion", Completion(Prompt(21)));
  EXPECT_EQ(again["timings"]["cache_n"], static_cast<int>(kPromptTokens) - 1);
  // No prompt-start lookup for it (the slot held it): its store asked the tiers, once.
  st = Status(*s);
  EXPECT_EQ(st["store_calls"], 3) << st.dump();
  EXPECT_EQ(st["store_lookups"], 1) << st.dump();
  EXPECT_EQ(st["stored_chunks"], 8) << st.dump();
  auto m = CurlText(s->url() + "/metrics");
  ASSERT_TRUE(m.ok());
  EXPECT_NE(m->find("kvtier_store_seconds_total "), std::string::npos) << *m;
  EXPECT_NE(m->find("kvtier_store_calls_total "), std::string::npos) << *m;
  EXPECT_NE(m->find("kvtier_store_lookups_total 1"), std::string::npos) << *m;
}

// The cost model on a tier slower than the prefill: after the first load measures it, the
// server recomputes (the chunks stay cached), and after --kvtier-cost-probe-after such
// decisions in a row it loads one chunk to measure the tier again. Every answer is the
// plain server's, whatever was decided. The decisions are in /metrics and /kvtier.
TEST(LlamaServerKvtierTest, CostModelRecomputesFromASlowTierAndProbesItAgain) {
  // A host tier alone, throttled to 0.5 MB/s: a 64 KiB chunk takes ~130 ms to load, and
  // the tiny model computes 32 tokens in a few ms. No RAM cache: every repeat of a
  // prompt that is not in the slot asks kvtier. No overlap: a recompute decision is then
  // a cost skip (with overlap the cached back would load while the front computes).
  auto s = MustStart(
      With(BaseArgs(), {"--kvtier-chunk-tokens", std::to_string(kChunk), "--kvtier-host-mib", "64",
                        "--kvtier-throttle-gbps", "0.0005", "--kvtier-cost-probe-after", "2",
                        "--kvtier-overlap", "off", "--cache-ram", "0"}),
      "cost-probe");
  ASSERT_TRUE(s);
  const std::vector<int> a = Prompt(41), b = Prompt(42);
  for (int i = 0; i < 6; ++i) {  // a, b, a, b, ...: the slot always holds the other one
    const std::vector<int>& p = i % 2 == 0 ? a : b;
    json r = Post(*s, "/completion", Completion(p));
    ExpectSameAnswer(r, ReferenceFor(r, p));
    if (i < 2) WaitPut(*s, 4 * (i + 1), i + 1);
  }
  const json st = Status(*s);
  const json& d = st["cost_decisions"];
  // Repeats 1..4: the first load (default estimates) measures the slow tier; then two
  // recomputes, and a probe on the fourth.
  EXPECT_GE(d["load_all"].get<uint64_t>() + d["load_partial"].get<uint64_t>(), 1u) << st.dump();
  EXPECT_GE(d["recompute"].get<uint64_t>(), 2u) << st.dump();
  EXPECT_GE(d["probe"].get<uint64_t>(), 1u) << st.dump();
  EXPECT_GE(st["cost_skips"].get<uint64_t>(), 2u) << st.dump();
  auto m = CurlText(s->url() + "/metrics");
  ASSERT_TRUE(m.ok());
  EXPECT_NE(m->find("kvtier_cost_decisions_total{decision=\"probe\"} " + d["probe"].dump() + "\n"),
            std::string::npos)
      << *m;
  EXPECT_NE(m->find("kvtier_cost_decisions_total{decision=\"recompute\"} "), std::string::npos);
}

}  // namespace
}  // namespace kvt::llamacpp::testing
