// ServerClient: the demo's HTTP client for llama-server's API (cpp-httplib, Debian).
// TTFT is measured here, on the client: from sending a streamed /completion request to
// the first streamed event that carries a generated token.
#ifndef LLAMACPP_DEMO_SERVER_SERVER_CLIENT_H_
#define LLAMACPP_DEMO_SERVER_SERVER_CLIENT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace kvt::llamacpp::demo {

struct Completion {
  double ttft_ms = 0;       // client-side: request sent -> first streamed token
  double total_ms = 0;      // request sent -> end of the stream
  int prompt_n = 0;         // timings.prompt_n: prompt tokens computed
  int cache_n = 0;          // timings.cache_n: prompt tokens reused (RAM cache or kvtier)
  double prompt_ms = -1;    // timings.prompt_ms: the server's compute of the prompt_n tokens
  int first_token = -1;     // id of the first generated token
  std::vector<int> tokens;  // every generated token id, in order
  std::string first_probs;  // completion_probabilities[0] as JSON text (top-n probabilities)
};

// Thread-compatible.
class ServerClient {
 public:
  ServerClient(std::string host, int port);

  // POST /tokenize. Internal with the server's answer on failure.
  absl::StatusOr<std::vector<int>> Tokenize(const std::string& text, bool add_special);
  // Streamed POST /completion with `prompt` token ids, greedy, `n_predict` tokens,
  // `n_probs` probabilities per token (0: none). Unavailable when the server does not answer;
  // Internal for an HTTP error or a stream without a token.
  absl::StatusOr<Completion> Complete(const std::vector<int>& prompt, bool cache_prompt,
                                      int n_predict = 1, int n_probs = 8);
  // GET path, parsed as JSON.
  absl::StatusOr<nlohmann::json> GetJson(const std::string& path);

 private:
  std::string host_;
  int port_;
};

}  // namespace kvt::llamacpp::demo

#endif  // LLAMACPP_DEMO_SERVER_SERVER_CLIENT_H_
