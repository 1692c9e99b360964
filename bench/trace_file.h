// Request traces for `kvtier-bench trace`: the Mooncake FAST'25 traces (bench/traces/,
// one JSON object per line, gzip'd: timestamp ms, input_length tokens, hash_ids = the
// prompt's 512-token prefix blocks, each id one prefix path).
#ifndef KVT_BENCH_TRACE_FILE_H_
#define KVT_BENCH_TRACE_FILE_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kvstore/types.h"

namespace kvt::bench {

struct TraceRequest {
  int64_t timestamp_ms = 0;
  uint64_t input_tokens = 0;
  std::vector<uint32_t> blocks;  // dense block ids (0 .. distinct_blocks - 1), prompt order
};

struct Trace {
  std::string name;  // "conversation", "synthetic", or the file's stem
  uint32_t block_tokens = 512;
  std::vector<TraceRequest> requests;
  uint32_t distinct_blocks = 0;
  uint64_t total_tokens = 0;
  uint64_t total_blocks = 0;  // block references (sum of the requests' lengths)
};

// Reads a .jsonl or .jsonl.gz trace; at most `max_requests` requests (0 = all). Block ids
// are renumbered densely in order of first appearance. NotFound / InvalidArgument (naming
// the line) / DataLoss for a bad gzip stream.
absl::StatusOr<Trace> LoadTrace(const std::string& path, const std::string& name,
                                size_t max_requests);

// The chunk key standing for block `id` (a fixed mix, so keys spread like real hashes).
ChunkKey TraceBlockKey(uint32_t id);

// Tokens of a request's first `hit_blocks` blocks (the last block may be partial).
inline uint64_t HitTokens(const Trace& trace, const TraceRequest& r, size_t hit_blocks) {
  return std::min<uint64_t>(hit_blocks * trace.block_tokens, r.input_tokens);
}

}  // namespace kvt::bench

#endif  // KVT_BENCH_TRACE_FILE_H_
