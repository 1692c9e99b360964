// The chunk record: what every tier stores. Byte layout in docs/chunk-format.md.
//
//   [ 128-byte header | payload ]
//
// Payload order is [layer][k|v][token][kv_head][head_dim] (for kMLA: [layer][token][latent]),
// little-endian elements of layout.dtype. The header carries magic, format version,
// namespace, key, parent key, token count, layout, payload length, XXH3-64 of the
// payload and XXH3-64 of the header itself.
#ifndef KVSTORE_CHUNK_CODEC_H_
#define KVSTORE_CHUNK_CODEC_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstore/types.h"

namespace kvt {

inline constexpr uint32_t kChunkMagic = 0x4354564Bu;  // "KVTC" little-endian
inline constexpr uint16_t kChunkHeaderVersion = 1;
inline constexpr size_t kChunkHeaderBytes = 128;

// Decoded header fields. Thread-compatible value type.
struct ChunkHeader {
  uint16_t version = kChunkHeaderVersion;
  NamespaceId ns;
  ChunkKey key;
  ChunkKey parent;  // key of the chunk before it; RootKey(ns) for chunk 0
  uint32_t token_count = 0;
  KvLayout layout;
  uint64_t payload_bytes = 0;
  uint64_t payload_checksum = 0;  // XXH3-64 of the payload, seed 0

  uint64_t record_bytes() const { return kChunkHeaderBytes + payload_bytes; }
};

// XXH3-64, seed 0: the record format's checksum (payload and header). Computed with the
// fastest XXH3 kernel the CPU has (x86-64: AVX-512 or AVX2, chosen at run time by
// libxxhash's dispatcher; Debian's plain XXH3_64bits is the SSE2 build). XXH3's values are
// the same for every kernel, so records written by any build verify in any other.
uint64_t ChunkChecksum(std::span<const std::byte> bytes);

// The same checksum over bytes handed over in pieces, in order (e.g. as reads complete):
// Digest() == ChunkChecksum(concatenation of every Update). Thread-compatible.
class ChunkChecksummer {
 public:
  ChunkChecksummer();
  ~ChunkChecksummer();
  ChunkChecksummer(const ChunkChecksummer&) = delete;
  ChunkChecksummer& operator=(const ChunkChecksummer&) = delete;
  void Update(std::span<const std::byte> bytes);
  uint64_t Digest() const;  // of everything so far; Update may continue after it

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Writes header + payload into `out`, computing the checksums.
// REQUIRES: out.size() == kChunkHeaderBytes + payload.size().
// InvalidArgument when sizes disagree or payload.size() != layout.payload_bytes(token_count).
absl::Status EncodeChunk(const ChunkHeader& header_in, std::span<const std::byte> payload,
                         std::span<std::byte> out);
// Convenience: allocates and returns the record.
absl::StatusOr<std::vector<std::byte>> EncodeChunk(const ChunkHeader& header,
                                                   std::span<const std::byte> payload);

// Parses and verifies the 128-byte header only (magic, version, header checksum,
// layout sanity, payload_bytes == layout.payload_bytes(token_count)).
// DataLoss on any mismatch; FailedPrecondition for a version this build cannot read.
absl::StatusOr<ChunkHeader> DecodeChunkHeader(std::span<const std::byte> record);

struct DecodeExpectations {
  NamespaceId ns;
  ChunkKey key;
  // When set, the layout must match exactly.
  const KvLayout* layout = nullptr;
  // When non-zero, the record must hold exactly this many tokens.
  uint32_t token_count = 0;
};

// Verifies a whole record before any byte is handed out: header as above, record
// length == header + payload (short or long → DataLoss), payload checksum (DataLoss),
// namespace and key equal to `expect` (FailedPrecondition), layout when given
// (FailedPrecondition), token count when given (FailedPrecondition). On success returns the header;
// the payload is record.subspan(kChunkHeaderBytes). Every failure increments IntegrityErrorCount().
absl::StatusOr<ChunkHeader> VerifyChunk(std::span<const std::byte> record,
                                        const DecodeExpectations& expect);

// Everything VerifyChunk checks except the payload checksum: for records handed over by
// a TieredStore, whose verifying tiers (disk, remote) checked the payload already and
// whose host tier holds only what this process stored (verify once per trust boundary).
// Same error codes; failures count in IntegrityErrorCount().
absl::StatusOr<ChunkHeader> CheckChunkHeader(std::span<const std::byte> record,
                                             const DecodeExpectations& expect);

// Number of records that failed verification in this process (all threads).
uint64_t IntegrityErrorCount();

}  // namespace kvt

#endif  // KVSTORE_CHUNK_CODEC_H_
