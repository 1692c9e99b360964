// Per-stream framing of llama.cpp sequence states (non-unified KV caches).
//
// With llama-server's default non-unified KV cache and -np N > 1, the cache has N
// streams and llama_state_seq_get_data writes `u32 n_stream = N`, then per stream a
// `u32 cell_count` followed (only when it is > 0) by that stream's cells and data
// (src/llama-kv-cache.cpp state_write). A sequence lives in one stream, so all other
// streams are empty. On read (state_read_sinfo) each non-empty stream of the blob is
// restored into the destination sequence's own stream, whatever its index in the blob.
// kvtier's parser (llamacpp/seq_state.h) handles n_stream == 1; these two functions
// convert between the two framings.
#ifndef KVTIER_SERVER_SEQ_STREAMS_H_
#define KVTIER_SERVER_SEQ_STREAMS_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace kvt::llamacpp {

// The stream count a blob declares (offset 8). DataLoss when shorter than 12 bytes.
absl::StatusOr<uint32_t> SeqStateStreamCount(std::span<const std::byte> blob);

// A blob with one stream from one whose streams are all empty but one (unchanged when
// n_stream == 1). DataLoss when the framing does not match that shape (no or several
// non-empty streams, a non-zero byte where an empty stream's count must be).
absl::StatusOr<std::vector<std::byte>> ToSingleStream(std::span<const std::byte> blob);

// The inverse for a context with `n_stream` streams: the single stream first, then
// n_stream - 1 empty streams. REQUIRES: `blob` has one stream. InvalidArgument otherwise
// or for n_stream == 0.
absl::StatusOr<std::vector<std::byte>> ToStreams(std::span<const std::byte> blob,
                                                 uint32_t n_stream);

}  // namespace kvt::llamacpp

#endif  // KVTIER_SERVER_SEQ_STREAMS_H_
