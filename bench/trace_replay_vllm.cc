#include "trace_replay_vllm.h"

#include <chrono>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace kvt::bench {

absl::StatusOr<ConfigKind> ParseConfigName(const std::string& name) {
  static const std::map<std::string, ConfigKind> kinds = {
      {"plain-affinity", {Engine::kLlama, false, false}},
      {"plain-random", {Engine::kLlama, false, true}},
      {"kvtier-affinity", {Engine::kLlama, true, false}},
      {"kvtier-random", {Engine::kLlama, true, true}},
      {"vllm-prefix", {Engine::kVllm, false, false}},
      {"vllm-prefix-random", {Engine::kVllm, false, true}},
      {"vllm-kvtier", {Engine::kVllm, true, false}},
      {"vllm-kvtier-random", {Engine::kVllm, true, true}},
  };
  auto it = kinds.find(name);
  if (it == kinds.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown configuration '", name,
        "' (plain-affinity, plain-random, kvtier-affinity, kvtier-random, vllm-prefix, "
        "vllm-prefix-random, vllm-kvtier, vllm-kvtier-random)"));
  }
  return it->second;
}

std::string ReferenceConfigName(const std::string& name) {
  if (name.rfind("kvtier-", 0) == 0) return "plain-" + name.substr(7);
  if (name.rfind("vllm-kvtier", 0) == 0) return "vllm-prefix" + name.substr(11);
  return "";
}

std::vector<std::string> VllmServerArgs(const VllmServerOptions& o) {
  std::vector<std::string> a = {"-m",
                                "vllm.entrypoints.openai.api_server",
                                "--model",
                                o.model,
                                "--max-model-len",
                                std::to_string(o.max_model_len),
                                "--max-num-seqs",
                                std::to_string(o.max_num_seqs),
                                "--max-num-batched-tokens",
                                std::to_string(o.max_model_len),
                                "--dtype",
                                "bfloat16",
                                "--enforce-eager",
                                "--enable-prefix-caching",
                                "--enable-prompt-tokens-details",
                                "--disable-uvicorn-access-log",
                                "--seed",
                                std::to_string(o.seed)};
  if (o.kv_blocks > 0) {
    a.insert(a.end(), {"--num-gpu-blocks-override", std::to_string(o.kv_blocks)});
  }
  if (!o.kvtierd.empty()) {
    const nlohmann::json kv = {
        {"kv_connector", "KVTierConnector"},
        {"kv_connector_module_path", "kvtier.vllm"},
        {"kv_role", "kv_both"},
        {"kv_connector_extra_config", {{"kvtierd", o.kvtierd}, {"chunk_tokens", o.chunk_tokens}}}};
    a.insert(a.end(), {"--kv-transfer-config", kv.dump()});
  }
  return a;
}

absl::StatusOr<bool> FoldVllmStreamEvent(const std::string& data, VllmCompletion* c) {
  if (absl::StripAsciiWhitespace(data) == "[DONE]") return false;
  const auto j = nlohmann::json::parse(data, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("not a JSON object: ", data.substr(0, 200)));
  }
  if (j.contains("error")) return absl::InternalError(j["error"].dump());
  bool token = false;
  if (j.contains("choices") && j["choices"].is_array()) {
    for (const auto& ch : j["choices"]) {
      if (!ch.contains("token_ids") || !ch["token_ids"].is_array()) continue;
      for (const auto& t : ch["token_ids"]) {
        if (!t.is_number_integer()) continue;
        c->tokens.push_back(t.get<int>());
        token = true;
      }
    }
  }
  if (j.contains("usage") && j["usage"].is_object()) {
    const auto& u = j["usage"];
    c->prompt_tokens = u.value("prompt_tokens", c->prompt_tokens);
    if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object()) {
      const auto& d = u["prompt_tokens_details"];
      if (d.contains("cached_tokens") && d["cached_tokens"].is_number_integer())
        c->cached_tokens = d["cached_tokens"].get<int>();
    }
  }
  return token;
}

absl::StatusOr<VllmCompletion> VllmComplete(int port, const std::string& model,
                                            const std::vector<int>& prompt, int max_tokens) {
  using Clock = std::chrono::steady_clock;
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(900, 0);
  cli.set_write_timeout(60, 0);
  const nlohmann::json body = {{"model", model},
                               {"prompt", prompt},
                               {"max_tokens", max_tokens},
                               {"temperature", 0.0},
                               {"ignore_eos", true},
                               {"stream", true},
                               {"stream_options", {{"include_usage", true}}},
                               {"return_token_ids", true}};
  VllmCompletion c;
  bool got_token = false;
  absl::Status stream_error;
  std::string buf, raw;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}};
  req.body = body.dump();
  const auto t0 = Clock::now();
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    buf.append(data, len);
    if (raw.size() < 600) raw.append(data, std::min<size_t>(len, 600));
    for (size_t pos; (pos = buf.find("\n\n")) != std::string::npos;) {
      const std::string event = buf.substr(0, pos);
      buf.erase(0, pos + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      auto t = FoldVllmStreamEvent(event.substr(6), &c);
      if (!t.ok()) {
        if (stream_error.ok()) stream_error = t.status();
        continue;
      }
      if (*t && !got_token) {
        got_token = true;
        c.ttft_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      }
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  if (!cli.send(req, res, err)) {
    return absl::UnavailableError(absl::StrCat("POST /v1/completions: ", httplib::to_string(err)));
  }
  if (res.status != 200) {
    return absl::InternalError(absl::StrCat("POST /v1/completions: HTTP ", res.status, ": ",
                                            raw.empty() ? res.body.substr(0, 300) : raw));
  }
  if (!stream_error.ok()) {
    return absl::InternalError(absl::StrCat("POST /v1/completions: ", stream_error.message()));
  }
  if (!got_token) return absl::InternalError("POST /v1/completions: no token id in the stream");
  if (c.prompt_tokens <= 0)
    return absl::InternalError("POST /v1/completions: no usage in the stream");
  return c;
}

absl::StatusOr<std::string> GetText(int port, const std::string& path) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(30, 0);
  auto r = cli.Get(path);
  if (!r)
    return absl::UnavailableError(absl::StrCat("GET ", path, ": ", httplib::to_string(r.error())));
  if (r->status != 200)
    return absl::InternalError(absl::StrCat("GET ", path, ": HTTP ", r->status));
  return r->body;
}

std::map<std::string, double> SumPrometheusSamples(const std::string& text) {
  std::map<std::string, double> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    const size_t name_end = line.find_first_of("{ ");
    const size_t value_start = line.rfind(' ');
    if (name_end == absl::string_view::npos || value_start == absl::string_view::npos ||
        value_start < name_end)
      continue;
    double v = 0;
    if (!absl::SimpleAtod(line.substr(value_start + 1), &v)) continue;
    out[std::string(line.substr(0, name_end))] += v;
  }
  return out;
}

}  // namespace kvt::bench
