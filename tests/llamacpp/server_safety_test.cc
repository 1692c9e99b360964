// kvtier-llama-server against what a user found from outside (issue 21), through its real
// HTTP API with curl, with the generated tiny models (seed 42 and 43: same size, other
// weights):
//  * item 1: the model file overwritten in place under a running server: kvtier turns off
//    for that server (no load of the old chunks, no store under the old namespace), says
//    so once in its log, /kvtier and /metrics; a healthy server on the old model then
//    finds nothing the changed server computed;
//  * item 2: chunks stored from four concurrent prefills in four slots, loaded by a later
//    server: the greedy answer of a plain server, log-probabilities within the bound
//    docs/llama-server.md states (not bit for bit: llama.cpp's kernels depend on the
//    batch a token was computed in);
//  * item 11: a server started while kvtierd is down warns once that it runs cold, and
//    logs once when kvtierd answers.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "gtest/gtest.h"
#include "kvtierd_process.h"
#include "llama_test_util.h"
#include "server_test_util.h"

namespace kvt::llamacpp::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
constexpr int kChunk = 32;
constexpr size_t kPromptTokens = 150;  // 4 chunks + a tail of 21 + the last token
constexpr int kWarmTokens = 149;       // chunks and tail: all but the last token

std::vector<std::string> Args(const std::string& model, int slots = 1) {
  return {"-m",        model,
          "-c",        std::to_string(1024 * slots),
          "-np",       std::to_string(slots),
          "-t",        "2",
          "-tb",       "2",
          "-b",        "256",
          "-ub",       std::to_string(kChunk),
          "--metrics", "--cache-ram",
          "0"};
}
std::vector<std::string> With(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}
std::vector<std::string> Kvtier(const std::string& model, const std::vector<std::string>& more,
                                int slots = 1) {
  return With(With(Args(model, slots),
                   {"--kvtier-chunk-tokens", std::to_string(kChunk), "--kvtier-no-cost-model"}),
              more);
}

std::vector<int> Prompt(uint64_t seed) {
  std::vector<TokenId> t = RandomTokens(seed, kPromptTokens, 32000);
  return std::vector<int>(t.begin(), t.end());
}
json Completion(const std::vector<int>& prompt) {
  return {{"prompt", prompt}, {"n_predict", 8},       {"temperature", 0.0},
          {"n_probs", 5},     {"cache_prompt", true}, {"return_tokens", true}};
}

std::string Log(const std::string& tag) {
  static const std::string dir = MakeTempDir("server-safety-logs");
  return dir + "/" + tag + ".log";
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
  EXPECT_EQ(got["content"], want["content"]);
  ASSERT_TRUE(got.contains("completion_probabilities")) << got.dump();
  EXPECT_EQ(got["completion_probabilities"][0], want["completion_probabilities"][0]);
}

// Plain llama-server's answers (no kvtier flag) on `model`: cold, then the same prompt
// again in the same slot (a slot hit: only the last token computed).
struct Ref {
  json cold, slot_reuse;
};
Ref Reference(const std::string& model, const std::vector<int>& prompt, const std::string& tag) {
  Ref r;
  auto s = MustStart(Args(model), tag);
  if (!s) return r;
  r.cold = Post(*s, "/completion", Completion(prompt));
  r.slot_reuse = Post(*s, "/completion", Completion(prompt));
  return r;
}

#ifdef KVT_KVTIERD_BIN
std::vector<char> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(in), {});
}
// Overwrites `path` in place (same inode, no truncation), as `dd conv=notrunc` does.
void OverwriteInPlace(const std::string& path, const std::vector<char>& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::pwrite(fd, bytes.data() + off, bytes.size() - off, static_cast<off_t>(off));
    ASSERT_GT(n, 0) << std::strerror(errno);
    off += static_cast<size_t>(n);
  }
  ::close(fd);
}
size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}
std::string ReadText(const std::string& path) {
  std::vector<char> b = ReadAll(path);
  return std::string(b.begin(), b.end());
}

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

// Issue 21 item 1, the reported sequence: S1 stores prompt A; model.gguf is overwritten in
// place with other weights (same inode, same size); S1 then serves B and A. A healthy
// server on an untouched copy of the old model must not find B (computed with the new
// weights) under the old namespace, and still finds A (stored before the change).
TEST(LlamaServerSafetyTest, ModelFileOverwrittenInPlaceTurnsKvtierOffAndNeverStoresUnderIt) {
  const std::string dir = MakeTempDir("server-model-change");
  const std::string model = dir + "/model.gguf", old_copy = dir + "/old.gguf",
                    new_copy = dir + "/new.gguf";
  fs::copy_file(TinyModelPath(42), model);
  fs::copy_file(TinyModelPath(42), old_copy);
  fs::copy_file(TinyModelPath(43), new_copy);
  const std::vector<char> other = ReadAll(new_copy);
  ASSERT_EQ(other.size(), fs::file_size(model)) << "the two tiny models must have the same size";
  const std::vector<int> a = Prompt(1), b = Prompt(2);
  const Ref old_a = Reference(old_copy, a, "change-ref-old-a");
  const Ref old_b = Reference(old_copy, b, "change-ref-old-b");
  const Ref new_a = Reference(new_copy, a, "change-ref-new-a");
  ASSERT_NE(old_a.cold["tokens"], new_a.cold["tokens"]) << "the two models must answer apart";

  auto d = demo::KvtierdProcess::Start(DaemonOptions(dir));
  ASSERT_TRUE(d.ok()) << d.status();
  const std::vector<std::string> daemon = {"--kvtier-daemon", (*d)->target()};
  {
    auto s1 = MustStart(Kvtier(model, daemon), "change-s1");
    ASSERT_TRUE(s1);
    ExpectSameAnswer(Post(*s1, "/completion", Completion(a)), old_a.cold);
    WaitPut(*s1, 4, 1);
    const json before = Status(*s1);
    EXPECT_EQ(before["state"], "ready");
    EXPECT_EQ(before["model_changed"], false);

    OverwriteInPlace(model, other);
    json rb = Post(*s1, "/completion", Completion(b));
    EXPECT_EQ(rb["timings"]["cache_n"], 0);
    json ra = Post(*s1, "/completion", Completion(a));
    EXPECT_EQ(ra["timings"]["cache_n"], 0) << "loaded the old model's chunks";
    // llama.cpp's shared mapping serves the new weights: the new model's cold answer.
    ExpectSameAnswer(ra, new_a.cold);
    s1->Stop();  // flushes whatever was queued
    const std::string log = ReadText(s1->log());
    EXPECT_EQ(Count(log, "changed under the running server"), 1u) << Tail(s1->log());
    EXPECT_NE(log.find("kvtier is off for this server"), std::string::npos);
  }
  {
    // /kvtier and /metrics of a server whose file changed (a fresh S1 on model.gguf,
    // which now holds the new weights, changed back to the old ones).
    auto s2 = MustStart(Kvtier(model, daemon), "change-s2");
    ASSERT_TRUE(s2);
    OverwriteInPlace(model, ReadAll(old_copy));
    Post(*s2, "/completion", Completion(b));
    const json st = Status(*s2);
    EXPECT_EQ(st["state"], "model_changed") << st.dump();
    EXPECT_EQ(st["model_changed"], true);
    EXPECT_EQ(st["enabled"], false);
    EXPECT_EQ(st["stored_chunks"], 0) << st.dump();
    EXPECT_EQ(st["requests"], 0) << st.dump();
    auto m = CurlText(s2->url() + "/metrics");
    ASSERT_TRUE(m.ok());
    EXPECT_NE(m->find("kvtier_model_changed 1\n"), std::string::npos) << *m;
  }
  // A healthy server on the old model: B is not there (the changed servers stored nothing
  // under the old namespace), A is (stored before the change): both answers are the
  // plain server's.
  auto s3 = MustStart(Kvtier(old_copy, daemon), "change-s3");
  ASSERT_TRUE(s3);
  json rb = Post(*s3, "/completion", Completion(b));
  EXPECT_EQ(rb["timings"]["cache_n"], 0) << "found chunks computed with other weights";
  ExpectSameAnswer(rb, old_b.cold);
  json ra = Post(*s3, "/completion", Completion(a));
  EXPECT_EQ(ra["timings"]["cache_n"], kWarmTokens);
  ExpectSameAnswer(ra, old_a.slot_reuse);
  auto m = CurlText(s3->url() + "/metrics");
  ASSERT_TRUE(m.ok());
  EXPECT_NE(m->find("kvtier_model_changed 0\n"), std::string::npos) << *m;
  if (HasFailure()) ADD_FAILURE() << "kvtierd's log:\n" << Tail((*d)->log_path());
}

// Issue 21 item 11: kvtierd is not running when the server starts.
TEST(LlamaServerSafetyTest, KvtierdDownAtStartIsWarnedOnceAndItsAnswerLoggedOnce) {
  const std::string dir = MakeTempDir("server-daemon-late");
  const demo::KvtierdProcessOptions dopts = DaemonOptions(dir);
  const std::string target =
      "unix://" + fs::absolute(dopts.run_dir + "/kvtierd.sock").lexically_normal().string();
  auto s = MustStart(Kvtier(TinyModelPath(), {"--kvtier-daemon", target}), "daemon-late");
  ASSERT_TRUE(s);
  const std::string cold = "does not answer";
  for (int i = 0; i < 100 && Count(ReadText(s->log()), cold) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::string log = ReadText(s->log());
  EXPECT_EQ(Count(log, cold), 1u) << Tail(s->log());
  EXPECT_NE(log.find("runs cold"), std::string::npos) << Tail(s->log());
  EXPECT_NE(log.find(target), std::string::npos) << Tail(s->log());
  // Requests meanwhile are computed (a miss), and the warning is not repeated.
  Post(*s, "/completion", Completion(Prompt(3)));

  auto d = demo::KvtierdProcess::Start(dopts);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ((*d)->target(), target);
  const std::string answers = "answers now";
  for (int i = 0; i < 200 && Count(ReadText(s->log()), answers) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  log = ReadText(s->log());
  EXPECT_EQ(Count(log, answers), 1u) << Tail(s->log());
  EXPECT_EQ(Count(log, cold), 1u) << Tail(s->log());
  // kvtier works from then on: a prompt's chunks reach kvtierd once the remote tier's own
  // client is past the reconnect cool-down its failed calls started (about a second).
  uint64_t put = 0;
  for (int i = 0; i < 6 && put == 0; ++i) {
    Post(*s, "/completion", Completion(Prompt(4 + i)));
    for (int w = 0; w < 40 && put == 0; ++w) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      put = Status(*s).value("chunks_put", uint64_t{0});
    }
  }
  EXPECT_GE(put, 4u) << Status(*s).dump() << "\n" << Tail(s->log());
  EXPECT_EQ(Count(ReadText(s->log()), answers), 1u) << Tail(s->log());
}
#endif  // KVT_KVTIERD_BIN

// Issue 21 item 2 (docs/llama-server.md, "Exactness"): four prompts prefilled at once in
// four slots are stored; a later single-slot server restores each up to its last token.
// Its greedy tokens are a plain server's; its log-probabilities may differ from a plain
// server's in the last bits (the stored KV was computed in a batch shared with other
// slots), within the documented 1e-3.
TEST(LlamaServerSafetyTest, ConcurrentSlotPrefillsAreStoredAndGiveThePlainGreedyAnswer) {
  const std::string dir = MakeTempDir("server-concurrent");
  const std::vector<std::string> disk = {"--kvtier-dir",      dir, "--kvtier-disk-mib", "16",
                                         "--kvtier-host-mib", "0"};
  constexpr int kSlots = 4;
  std::vector<std::vector<int>> prompts;
  for (int i = 0; i < kSlots; ++i) prompts.push_back(Prompt(11 + i));
  {
    auto s = MustStart(Kvtier(TinyModelPath(), disk, kSlots), "concurrent-store");
    ASSERT_TRUE(s);
    std::vector<json> got(kSlots);
    std::vector<std::thread> clients;
    for (int i = 0; i < kSlots; ++i) {
      clients.emplace_back([&, i] {
        auto r = CurlJson(s->url() + "/completion", Completion(prompts[i]));
        if (r.ok()) got[i] = *r;
      });
    }
    for (auto& t : clients) t.join();
    for (int i = 0; i < kSlots; ++i) ASSERT_TRUE(got[i].contains("tokens")) << i;
    WaitPut(*s, 4 * kSlots, 0);
    EXPECT_EQ(s->Stop(), 0);
  }
  auto s = MustStart(Kvtier(TinyModelPath(), disk), "concurrent-load");
  ASSERT_TRUE(s);
  double max_diff = 0;
  for (int i = 0; i < kSlots; ++i) {
    const Ref ref = Reference(TinyModelPath(), prompts[i], "concurrent-ref-" + std::to_string(i));
    json r = Post(*s, "/completion", Completion(prompts[i]));
    const int cache_n = r["timings"]["cache_n"];
    EXPECT_GE(cache_n, 4 * kChunk) << r["timings"].dump();
    const json& want = cache_n == kWarmTokens ? ref.slot_reuse : ref.cold;
    EXPECT_EQ(r["tokens"], want["tokens"]) << i;
    const json& gp = r["completion_probabilities"][0]["top_logprobs"];
    const json& wp = want["completion_probabilities"][0]["top_logprobs"];
    ASSERT_EQ(gp.size(), wp.size());
    for (size_t k = 0; k < gp.size(); ++k) {
      EXPECT_EQ(gp[k]["id"], wp[k]["id"]);
      const double diff =
          std::fabs(gp[k]["logprob"].get<double>() - wp[k]["logprob"].get<double>());
      max_diff = std::max(max_diff, diff);
      EXPECT_LE(diff, 1e-3) << i << " " << k;
    }
  }
  // For the record (not asserted): how far the concurrent prefills' bits were here.
  RecordProperty("max_logprob_diff", std::to_string(max_diff));
  std::printf("concurrent slots: max |logprob difference| vs plain llama-server: %g\n", max_diff);
}

}  // namespace
}  // namespace kvt::llamacpp::testing
