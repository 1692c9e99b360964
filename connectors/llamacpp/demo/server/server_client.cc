#include "server_client.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "httplib.h"

namespace kvt::llamacpp::demo {
namespace {
using Clock = std::chrono::steady_clock;
double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
}  // namespace

ServerClient::ServerClient(std::string host, int port) : host_(std::move(host)), port_(port) {}

absl::StatusOr<std::vector<int>> ServerClient::Tokenize(const std::string& text, bool add_special) {
  httplib::Client cli(host_, port_);
  cli.set_read_timeout(120, 0);
  nlohmann::json body = {{"content", text}, {"add_special", add_special}};
  auto r = cli.Post("/tokenize", body.dump(), "application/json");
  if (!r)
    return absl::UnavailableError(absl::StrCat("POST /tokenize: ", httplib::to_string(r.error())));
  auto j = nlohmann::json::parse(r->body, nullptr, false);
  if (r->status != 200 || j.is_discarded() || !j.contains("tokens")) {
    return absl::InternalError(
        absl::StrCat("POST /tokenize: HTTP ", r->status, ": ", r->body.substr(0, 300)));
  }
  return j["tokens"].get<std::vector<int>>();
}

absl::StatusOr<Completion> ServerClient::Complete(const std::vector<int>& prompt, bool cache_prompt,
                                                  int n_predict, int n_probs) {
  httplib::Client cli(host_, port_);
  cli.set_read_timeout(900, 0);
  cli.set_write_timeout(60, 0);
  nlohmann::json body = {
      {"prompt", prompt},     {"n_predict", n_predict},       {"temperature", 0.0},
      {"n_probs", n_probs},   {"cache_prompt", cache_prompt}, {"stream", true},
      {"return_tokens", true}};
  Completion c;
  bool got_token = false;
  std::string buf;
  std::string error;
  auto on_event = [&](const std::string& data) {
    auto j = nlohmann::json::parse(data, nullptr, false);
    if (j.is_discarded()) return;
    if (j.contains("error")) error = j["error"].dump();
    const bool has_token = j.contains("tokens") && j["tokens"].is_array() && !j["tokens"].empty();
    if (has_token) {
      for (const auto& t : j["tokens"]) c.tokens.push_back(t.get<int>());
    }
    if (!got_token && has_token) {
      got_token = true;
      c.ttft_ms = -1;  // set by the caller's clock below
      c.first_token = j["tokens"][0].get<int>();
      if (j.contains("completion_probabilities") && !j["completion_probabilities"].empty()) {
        c.first_probs = j["completion_probabilities"][0].dump();
      }
    }
    if (j.contains("timings")) {
      c.prompt_n = j["timings"].value("prompt_n", 0);
      c.cache_n = j["timings"].value("cache_n", 0);
      c.prompt_ms = j["timings"].value("prompt_ms", -1.0);
    }
  };
  httplib::Request req;
  req.method = "POST";
  req.path = "/completion";
  req.headers = {{"Content-Type", "application/json"}};
  req.body = body.dump();
  const auto t0 = Clock::now();
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    buf.append(data, len);
    for (size_t pos; (pos = buf.find("\n\n")) != std::string::npos;) {
      std::string event = buf.substr(0, pos);
      buf.erase(0, pos + 2);
      if (event.rfind("data: ", 0) == 0) {
        const bool before = got_token;
        on_event(event.substr(6));
        if (!before && got_token) c.ttft_ms = MsSince(t0);
      }
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  if (!cli.send(req, res, err)) {
    return absl::UnavailableError(absl::StrCat("POST /completion: ", httplib::to_string(err)));
  }
  c.total_ms = MsSince(t0);
  if (res.status != 200)
    return absl::InternalError(absl::StrCat("POST /completion: HTTP ", res.status, " ", error));
  if (!got_token)
    return absl::InternalError(absl::StrCat("POST /completion: no token in the stream ", error));
  return c;
}

absl::StatusOr<nlohmann::json> ServerClient::GetJson(const std::string& path) {
  httplib::Client cli(host_, port_);
  cli.set_read_timeout(30, 0);
  auto r = cli.Get(path);
  if (!r)
    return absl::UnavailableError(absl::StrCat("GET ", path, ": ", httplib::to_string(r.error())));
  auto j = nlohmann::json::parse(r->body, nullptr, false);
  if (r->status != 200 || j.is_discarded()) {
    return absl::InternalError(absl::StrCat("GET ", path, ": HTTP ", r->status));
  }
  return j;
}

}  // namespace kvt::llamacpp::demo
