// Shared fixtures for the llama.cpp engine tests: a tiny synthetic model generated once
// per process, engines, and kvtier stores (host, or host + disk) with a connector.
#ifndef TESTS_LLAMACPP_LLAMA_TEST_UTIL_H_
#define TESTS_LLAMACPP_LLAMA_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#ifdef KVT_LLAMACPP_HAVE_CONNECTOR
#include "connectors/kv_connector.h"
#include "kvstore/tiered_store.h"
#endif
#include "llamacpp/llama_engine.h"

namespace kvt::llamacpp::testing {

inline constexpr uint32_t kTestChunkTokens = 32;
inline constexpr int32_t kTestThreads = 2;

// Path of the tiny model (tokenizer from the pinned vocab), written on first use into
// a per-process temporary directory. `seed` picks different weights (a "different model").
std::string TinyModelPath(uint64_t seed = 42);

// Engine options for the tiny model: n_ctx 2048, n_batch = kTestChunkTokens, 2 threads.
EngineOptions TinyEngineOptions(bool flash_attn, const std::string& model_path = TinyModelPath());

#ifdef KVT_LLAMACPP_HAVE_CONNECTOR
// A host tier (64 MiB, unless with_host is false), plus a disk tier in `disk_dir` when
// non-empty.
absl::StatusOr<std::shared_ptr<TieredStore>> MakeStore(const std::string& disk_dir,
                                                       bool with_host = true);

// Connector for `engine` on `store`: chunk size kTestChunkTokens, cost model off (every
// cached chunk is loaded), async stores on (callers Flush).
absl::StatusOr<std::shared_ptr<KVConnector>> MakeConnector(
    const LlamaEngine& engine, std::shared_ptr<TieredStore> store,
    uint32_t chunk_tokens = kTestChunkTokens);
#endif

// Deterministic token ids in [3, n_vocab) (ids 0..2 are the SPM control tokens).
std::vector<TokenId> RandomTokens(uint64_t seed, size_t n, int32_t n_vocab);

// A fresh empty directory under $TEST_TMPDIR (else the system temp dir), removed with its
// contents when the process exits normally (kept when KVT_KEEP_TEST_DIRS is set).
std::string MakeTempDir(const std::string& tag);

}  // namespace kvt::llamacpp::testing

#endif  // TESTS_LLAMACPP_LLAMA_TEST_UTIL_H_
