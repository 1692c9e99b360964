// kvtier-trace-replay's vLLM side: the configuration names, vLLM's OpenAI server command
// line, and a streamed /v1/completions request with token ids (cpp-httplib), TTFT on the
// client.
//
// Configurations (one per name; "-random" routes each request to a random server, without
// it a request goes to the server its affinity block hashes to):
//   plain-affinity, plain-random      llama-servers, each its own RAM prompt cache;
//   kvtier-affinity, kvtier-random    kvtier-llama-servers sharing one kvtierd;
//   vllm-prefix, vllm-prefix-random   vLLM OpenAI servers with their own prefix cache;
//   vllm-kvtier, vllm-kvtier-random   the same with KVTierConnector (kv_both) on one
//                                     kvtierd, vLLM's prefix cache on above it.
#ifndef KVT_BENCH_TRACE_REPLAY_VLLM_H_
#define KVT_BENCH_TRACE_REPLAY_VLLM_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvt::bench {

enum class Engine { kLlama, kVllm };

struct ConfigKind {
  Engine engine = Engine::kLlama;
  bool kvtier = false;  // kvtier-* or vllm-kvtier*: the servers share a kvtierd
  bool random = false;  // random routing
};

// The kind of a configuration name (the list above); InvalidArgument naming it otherwise.
absl::StatusOr<ConfigKind> ParseConfigName(const std::string& name);

// The configuration a kvtier one's answers are compared with: the same engine and routing
// without kvtier ("kvtier-random" -> "plain-random", "vllm-kvtier" -> "vllm-prefix"); ""
// for a configuration without kvtier.
std::string ReferenceConfigName(const std::string& name);

struct VllmServerOptions {
  std::string model;         // model directory (config.json, safetensors, tokenizer)
  int max_model_len = 4096;  // --max-model-len, tokens
  int max_num_seqs = 2;      // --max-num-seqs: requests a server runs at once
  int chunk_tokens = 128;    // kvtier's chunk_tokens (vLLM's block size must divide it)
  int kv_blocks = 0;         // --num-gpu-blocks-override (0: vLLM sizes its KV cache)
  std::string kvtierd;       // kvtierd's gRPC target; "" = no connector (vllm-prefix)
  uint32_t seed = 0;
};

// The arguments after the python interpreter: `-m vllm.entrypoints.openai.api_server
// --model ...` with --enable-prompt-tokens-details (usage reports cached tokens) and, when
// `kvtierd` is set, --kv-transfer-config for KVTierConnector (kv_role kv_both). The caller
// adds --host/--port (ServerProcess does).
std::vector<std::string> VllmServerArgs(const VllmServerOptions& o);

// One answer from a vLLM server.
struct VllmCompletion {
  double ttft_ms = 0;       // client-side: request sent -> first streamed token id
  int prompt_tokens = 0;    // usage.prompt_tokens
  int cached_tokens = 0;    // usage.prompt_tokens_details.cached_tokens (vLLM's prefix
                            // cache and kvtier's loads together)
  std::vector<int> tokens;  // generated token ids, in order
};

// Folds one server-sent event's data (the text after "data: ") into `c`: the choices'
// token_ids are appended, usage is read where present. Returns true when the event carried
// at least one token id. "[DONE]" is ignored. InvalidArgument for text that is not JSON;
// Internal with the server's message for an {"error": ...} event.
absl::StatusOr<bool> FoldVllmStreamEvent(const std::string& data, VllmCompletion* c);

// Streamed POST /v1/completions of `prompt` (token ids) to 127.0.0.1:`port`: greedy
// (temperature 0, ignore_eos), `max_tokens` tokens, return_token_ids and usage in the
// stream. Unavailable when the server does not answer; Internal for an HTTP error, an
// error event or a stream without a token or without usage.
absl::StatusOr<VllmCompletion> VllmComplete(int port, const std::string& model,
                                            const std::vector<int>& prompt, int max_tokens);

// GET `path` from 127.0.0.1:`port` as text. Unavailable when the server does not answer;
// Internal for a status other than 200.
absl::StatusOr<std::string> GetText(int port, const std::string& path);

// Prometheus text exposition -> {sample name: value summed over its label sets}; comment
// and malformed lines are skipped.
std::map<std::string, double> SumPrometheusSamples(const std::string& text);

}  // namespace kvt::bench

#endif  // KVT_BENCH_TRACE_REPLAY_VLLM_H_
