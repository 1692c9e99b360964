// kvtier-trace-replay's vLLM side without a server (bench/trace_replay_vllm.h): which
// configuration names exist and what each compares with, the vLLM command line an operator
// would type (connector JSON, prompt-token details on), how the streamed /v1/completions
// events of vLLM 0.32 (captured from a real server) fold into tokens and cached tokens, and
// kvtier's counters read from Prometheus text.
#include "trace_replay_vllm.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace kvt::bench {
namespace {

using ::testing::ElementsAre;

TEST(TraceReplayVllmTest, ConfigNames) {
  auto k = ParseConfigName("vllm-kvtier-random");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->engine, Engine::kVllm);
  EXPECT_TRUE(k->kvtier);
  EXPECT_TRUE(k->random);
  k = ParseConfigName("vllm-prefix");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->engine, Engine::kVllm);
  EXPECT_FALSE(k->kvtier);
  EXPECT_FALSE(k->random);
  k = ParseConfigName("kvtier-affinity");
  ASSERT_TRUE(k.ok());
  EXPECT_EQ(k->engine, Engine::kLlama);
  EXPECT_TRUE(k->kvtier);
  for (const char* bad : {"vllm", "vllm-kvtier-affinity", "plain", "", "Plain-random"}) {
    auto b = ParseConfigName(bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(b.status().message().find("vllm-kvtier-random"), std::string::npos)
        << "the error lists the names";
  }
  EXPECT_EQ(ReferenceConfigName("kvtier-random"), "plain-random");
  EXPECT_EQ(ReferenceConfigName("kvtier-affinity"), "plain-affinity");
  EXPECT_EQ(ReferenceConfigName("vllm-kvtier"), "vllm-prefix");
  EXPECT_EQ(ReferenceConfigName("vllm-kvtier-random"), "vllm-prefix-random");
  EXPECT_EQ(ReferenceConfigName("vllm-prefix"), "");
  EXPECT_EQ(ReferenceConfigName("plain-affinity"), "");
}

// The value following `flag` in `args` ("" when absent).
std::string After(const std::vector<std::string>& args, const std::string& flag) {
  auto it = std::find(args.begin(), args.end(), flag);
  return it == args.end() || it + 1 == args.end() ? "" : *(it + 1);
}

TEST(TraceReplayVllmTest, ServerArgs) {
  VllmServerOptions o;
  o.model = "/models/tiny";
  o.max_model_len = 5000;
  o.max_num_seqs = 3;
  o.chunk_tokens = 256;
  std::vector<std::string> a = VllmServerArgs(o);
  ASSERT_GE(a.size(), 2u);
  EXPECT_EQ(a[0], "-m");
  EXPECT_EQ(a[1], "vllm.entrypoints.openai.api_server");
  EXPECT_EQ(After(a, "--model"), "/models/tiny");
  EXPECT_EQ(After(a, "--max-model-len"), "5000");
  EXPECT_EQ(After(a, "--max-num-seqs"), "3");
  EXPECT_NE(std::find(a.begin(), a.end(), "--enable-prompt-tokens-details"), a.end());
  EXPECT_NE(std::find(a.begin(), a.end(), "--enable-prefix-caching"), a.end());
  EXPECT_EQ(std::find(a.begin(), a.end(), "--kv-transfer-config"), a.end()) << "vllm-prefix";
  EXPECT_EQ(std::find(a.begin(), a.end(), "--num-gpu-blocks-override"), a.end());

  o.kvtierd = "unix:///run/kvtierd.sock";
  o.kv_blocks = 40;
  a = VllmServerArgs(o);
  EXPECT_EQ(After(a, "--num-gpu-blocks-override"), "40");
  const auto kv = nlohmann::json::parse(After(a, "--kv-transfer-config"), nullptr, false);
  ASSERT_TRUE(kv.is_object());
  EXPECT_EQ(kv["kv_connector"], "KVTierConnector");
  EXPECT_EQ(kv["kv_connector_module_path"], "kvtier.vllm");
  EXPECT_EQ(kv["kv_role"], "kv_both");
  EXPECT_EQ(kv["kv_connector_extra_config"]["kvtierd"], "unix:///run/kvtierd.sock");
  EXPECT_EQ(kv["kv_connector_extra_config"]["chunk_tokens"], 256);
}

TEST(TraceReplayVllmTest, FoldsStreamedEvents) {
  // A stream captured from vLLM 0.32's /v1/completions (return_token_ids,
  // stream_options.include_usage): tokens may come several to an event; the usage chunk
  // carries prompt_tokens_details; the prompt's ids ride on the first event.
  const std::vector<std::string> events = {
      R"({"id":"cmpl-afb8","object":"text_completion","created":1796252871,"model":"/m","choices":[{"index":0,"text":" w208","logprobs":null,"finish_reason":null,"stop_reason":null,"prompt_token_ids":[5,6,7,8,9,10],"token_ids":[211]}]})",
      R"({"id":"cmpl-afb8","object":"text_completion","created":1796252871,"model":"/m","choices":[{"index":0,"text":" w817 w9","logprobs":null,"finish_reason":"length","stop_reason":null,"token_ids":[820,12]}]})",
      R"({"id":"cmpl-afb8","object":"text_completion","created":1796252871,"model":"/m","choices":[],"usage":{"prompt_tokens":300,"total_tokens":303,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":256}},"system_fingerprint":"vllm-0.32.0-b4c4a906"})",
      "[DONE]"};
  VllmCompletion c;
  std::vector<bool> token;
  for (const auto& e : events) {
    auto t = FoldVllmStreamEvent(e, &c);
    ASSERT_TRUE(t.ok()) << t.status();
    token.push_back(*t);
  }
  EXPECT_THAT(token, ElementsAre(true, true, false, false));
  EXPECT_THAT(c.tokens, ElementsAre(211, 820, 12)) << "prompt_token_ids are not generated tokens";
  EXPECT_EQ(c.prompt_tokens, 300);
  EXPECT_EQ(c.cached_tokens, 256);

  // Usage without details (a server without --enable-prompt-tokens-details): nothing cached.
  VllmCompletion d;
  ASSERT_TRUE(FoldVllmStreamEvent(
                  R"({"choices":[],"usage":{"prompt_tokens":9,"prompt_tokens_details":null}})", &d)
                  .ok());
  EXPECT_EQ(d.prompt_tokens, 9);
  EXPECT_EQ(d.cached_tokens, 0);

  auto bad = FoldVllmStreamEvent("{not json", &d);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  auto err = FoldVllmStreamEvent(R"({"error":{"message":"too long","code":400}})", &d);
  EXPECT_EQ(err.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(err.status().message().find("too long"), std::string::npos);
}

TEST(TraceReplayVllmTest, SumsPrometheusSamples) {
  const std::string text =
      "# HELP vllm:kvtier_load_chunks_ok_total kvtier chunks loaded\n"
      "# TYPE vllm:kvtier_load_chunks_ok_total counter\n"
      "vllm:kvtier_load_chunks_ok_total{engine=\"0\",model_name=\"/m y\"} 3.0\n"
      "vllm:kvtier_load_chunks_ok_total{engine=\"1\",model_name=\"/m y\"} 4.0\n"
      "vllm:num_requests_running 2\n"
      "garbage line\n"
      "vllm:bad_value{a=\"b\"} x\n";
  auto m = SumPrometheusSamples(text);
  EXPECT_DOUBLE_EQ(m["vllm:kvtier_load_chunks_ok_total"], 7.0);
  EXPECT_DOUBLE_EQ(m["vllm:num_requests_running"], 2.0);
  EXPECT_EQ(m.count("vllm:bad_value"), 0u);
  EXPECT_EQ(m.count("garbage"), 0u);
}

}  // namespace
}  // namespace kvt::bench
