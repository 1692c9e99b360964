// kvtier-demo workloads built from the real text in data/: a multi-turn chat whose
// every turn resends the growing history, long-document QA (the GPL-3 text followed by
// different questions) and a no-reuse set (distinct slices of the Apache-2.0 text).
#ifndef LLAMACPP_DEMO_WORKLOAD_H_
#define LLAMACPP_DEMO_WORKLOAD_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "llamacpp/llama_engine.h"

namespace kvt::llamacpp::demo {

struct Request {
  std::string workload;  // "chat", "doc-qa", "no-reuse"
  int index = 0;         // 1-based within the workload
  std::vector<TokenId> tokens;
};

struct WorkloadOptions {
  std::string data_dir;
  // Tokens of the GPL-3 text used as the QA document.
  size_t doc_tokens = 4400;
  // Tokens of each no-reuse prompt.
  size_t no_reuse_tokens = 300;
  size_t no_reuse_prompts = 3;
};

// Text -> ids. With a tokenizer: llama_tokenize (SentencePiece for the generated
// models). Without one (tokenizer "none"): each UTF-8 byte b becomes id 3 + b
// (mod n_vocab), BOS = 1; deterministic and documented in docs/llamacpp.md.
absl::StatusOr<std::vector<TokenId>> TextToIds(const LlamaEngine& engine, const std::string& text,
                                               bool add_bos);

// All requests in the order the demo runs them. NotFound for a missing data file.
absl::StatusOr<std::vector<Request>> BuildWorkloads(const LlamaEngine& engine,
                                                    const WorkloadOptions& options);

}  // namespace kvt::llamacpp::demo

#endif  // LLAMACPP_DEMO_WORKLOAD_H_
