// libFuzzer target: the chunk record decoder (kvstore/chunk_codec.h).
//
// Input: one mode byte, then a candidate record. Mode bit 0 rewrites the payload checksum
// and bit 1 the header checksum to their correct values before decoding, so the fuzzer
// gets past the XXH3 checks and explores the layout, length and expectation checks
// behind them. Properties: DecodeChunkHeader and VerifyChunk return a status for any
// bytes (never crash); a record VerifyChunk accepts has exactly header + payload bytes,
// is refused under any other key, and re-encodes to the same bytes.
#include <xxhash.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "kvstore/chunk_codec.h"

namespace {
constexpr size_t kOffPayloadBytes = 80;  // docs/chunk-format.md
constexpr size_t kOffPayloadCsum = 88;
constexpr size_t kOffHeaderCsum = 120;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  std::vector<std::byte> buf(reinterpret_cast<const std::byte*>(data) + 1,
                             reinterpret_cast<const std::byte*>(data) + size);
  if (buf.size() >= kvt::kChunkHeaderBytes) {
    std::byte* b = buf.data();
    if (mode & 1) {
      const uint64_t n = buf.size() - kvt::kChunkHeaderBytes;
      uint64_t claimed;
      std::memcpy(&claimed, b + kOffPayloadBytes, 8);
      const uint64_t csum = XXH3_64bits(b + kvt::kChunkHeaderBytes, claimed < n ? claimed : n);
      std::memcpy(b + kOffPayloadCsum, &csum, 8);
    }
    if (mode & 2) {
      const uint64_t csum = XXH3_64bits(b, kOffHeaderCsum);
      std::memcpy(b + kOffHeaderCsum, &csum, 8);
    }
  }
  std::span<const std::byte> record(buf);
  auto header = kvt::DecodeChunkHeader(record);
  if (!header.ok()) return 0;
  kvt::ChunkKey other = header->key;
  other.lo ^= 1;
  if (kvt::VerifyChunk(record, kvt::DecodeExpectations{header->ns, other}).ok()) {
    std::abort();  // a key mismatch must be refused
  }
  kvt::DecodeExpectations expect{header->ns, header->key, &header->layout, header->token_count};
  auto verified = kvt::VerifyChunk(record, expect);
  if (!verified.ok()) return 0;
  if (record.size() != kvt::kChunkHeaderBytes + verified->payload_bytes) std::abort();
  auto again = kvt::EncodeChunk(*verified, record.subspan(kvt::kChunkHeaderBytes));
  if (!again.ok()) std::abort();  // an accepted record must be encodable
  if (again->size() != record.size() ||
      std::memcmp(again->data(), record.data(), record.size()) != 0) {
    std::abort();
  }
  return 0;
}
