// Helpers for the kvtier CLI tests: run the real binary as a subprocess, temp dirs,
// token files, chunk records of a prompt built with kvt::ChunkChainEncoder, and reading a
// table printed by the CLI.
#ifndef KVT_TESTS_CLI_CLI_TEST_UTIL_H_
#define KVT_TESTS_CLI_CLI_TEST_UTIL_H_

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "kvstore/chunk_codec.h"
#include "kvstore/chunk_key.h"

namespace kvt::clitest {

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs `bin args...` with stdout and stderr captured (through files in /tmp), waits at
// most `timeout_s` (then kills it: exit_code = -9). KVTIER_DAEMON and KVTIER_TOKEN are
// unset and XDG_RUNTIME_DIR points at an empty directory (so no kvtierd of this machine
// is found at the CLI's default address), then `env` (name, value) is applied.
RunResult Run(const std::string& bin, const std::vector<std::string>& args, int timeout_s = 60,
              const std::vector<std::pair<std::string, std::string>>& env = {});

class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Writes `tokens` space-separated to `path`.
void WriteTokens(const std::string& path, const std::vector<TokenId>& tokens);

// Namespace parameters of the tests: model `model`, 2 layers x 2 KV heads x head_dim 8,
// f16 (128 B per token), 16 tokens per chunk.
NamespaceParams TestParams(const std::string& model, const std::string& tenant = "");
// The same as CLI flags.
std::vector<std::string> NsFlags(const std::string& model, const std::string& tenant = "");

// `n` deterministic token ids from `seed`.
std::vector<TokenId> Tokens(size_t n, uint32_t seed);

// One record of chunk `index` of `tokens` under `params`, with a payload pattern from
// the key (so every record differs).
struct PromptChunk {
  ChunkKey key;
  ChunkKey parent;
  std::vector<std::byte> record;
};
// All full chunks of `tokens`.
std::vector<PromptChunk> PromptChunks(const NamespaceParams& params,
                                      const std::vector<TokenId>& tokens);

// Rows of the first table in `text` whose first header cell is `first_header`: each row
// split on runs of 2+ spaces. Empty when not found.
std::vector<std::vector<std::string>> TableRows(const std::string& text,
                                                const std::string& first_header);

}  // namespace kvt::clitest

#endif  // KVT_TESTS_CLI_CLI_TEST_UTIL_H_
