#include "kvstore/chunk_key.h"

#include <xxhash.h>

#include <bit>
#include <cstring>

#include "absl/strings/str_format.h"

namespace kvt {
namespace {

static_assert(std::endian::native == std::endian::little,
              "kvtier hashes little-endian integers; big-endian hosts need byte swaps here");

// Append-only little-endian byte writer for hash inputs. Every variable-length field is
// length-prefixed, so distinct inputs never produce the same bytes.
class HashInput {
 public:
  void U8(uint8_t v) { bytes_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) { Raw(&v, sizeof v); }
  void U64(uint64_t v) { Raw(&v, sizeof v); }
  void Str(std::string_view s) {
    U64(s.size());
    Raw(s.data(), s.size());
  }
  void Raw(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    bytes_.append(c, n);
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

constexpr std::string_view kNamespaceDomain = "kvtier.namespace.v1";
constexpr std::string_view kChunkDomain = "kvtier.chunk.v1";

}  // namespace

absl::Status NamespaceParams::Validate() const {
  if (model_id.empty()) return absl::InvalidArgumentError("namespace: model_id is empty");
  if (absl::Status s = layout.Validate(); !s.ok()) return s;
  if (tp_world_size == 0) return absl::InvalidArgumentError("namespace: tp_world_size must be > 0");
  if (tp_rank >= tp_world_size) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "namespace: tp_rank %d must be < tp_world_size %d", tp_rank, tp_world_size));
  }
  if (chunk_tokens == 0) return absl::InvalidArgumentError("namespace: chunk_tokens must be > 0");
  return absl::OkStatus();
}

NamespaceId ComputeNamespace(const NamespaceParams& p) {
  HashInput in;
  in.Str(kNamespaceDomain);
  in.Str(p.model_id);
  in.U32(p.layout.num_layers);
  in.U32(p.layout.num_kv_heads);
  in.U32(p.layout.head_dim);
  in.U8(static_cast<uint8_t>(p.layout.dtype));
  in.U8(static_cast<uint8_t>(p.layout.kind));
  in.U32(p.tp_rank);
  in.U32(p.tp_world_size);
  in.U32(p.chunk_tokens);
  in.U32(p.format_version);
  in.Str(p.tenant);
  in.Str(p.engine_extra);
  const XXH128_hash_t h = XXH3_128bits(in.bytes().data(), in.bytes().size());
  return NamespaceId{h.low64, h.high64};
}

ChunkKey ChainChunkKey(const Hash128<ChunkKeyTag>& parent, std::span<const TokenId> tokens) {
  // Hashed bytes: u64 len | "kvtier.chunk.v1" | parent.lo | parent.hi | u64 count | tokens.
  // One contiguous buffer and one-shot XXH3 are ~2x faster than the streaming API for
  // 1 KiB chunks (the streaming state is reset and buffered per chunk); same bytes, same
  // hash, so keys are unchanged.
  constexpr size_t kPrefix = 8 + kChunkDomain.size() + 16 + 8;
  thread_local std::vector<unsigned char> buf;
  buf.resize(kPrefix + tokens.size_bytes());
  unsigned char* p = buf.data();
  const uint64_t domain_len = kChunkDomain.size();
  std::memcpy(p, &domain_len, 8);
  std::memcpy(p + 8, kChunkDomain.data(), kChunkDomain.size());
  p += 8 + kChunkDomain.size();
  std::memcpy(p, &parent.lo, 8);
  std::memcpy(p + 8, &parent.hi, 8);
  const uint64_t count = tokens.size();
  std::memcpy(p + 16, &count, 8);
  if (!tokens.empty()) std::memcpy(p + 24, tokens.data(), tokens.size_bytes());
  const XXH128_hash_t h = XXH3_128bits(buf.data(), buf.size());
  return ChunkKey{h.low64, h.high64};
}

std::vector<ChunkKey> ComputeChunkKeys(NamespaceId ns, std::span<const TokenId> tokens,
                                       const ChunkKeyOptions& options) {
  std::vector<ChunkKey> keys;
  const size_t chunk = options.chunk_tokens == 0 ? kDefaultChunkTokens : options.chunk_tokens;
  const size_t full = tokens.size() / chunk;
  const bool partial = options.include_partial && tokens.size() % chunk != 0;
  keys.reserve(full + (partial ? 1 : 0));
  ChunkKey parent = RootKey(ns);
  for (size_t i = 0; i < full; ++i) {
    parent = ChainChunkKey(parent, tokens.subspan(i * chunk, chunk));
    keys.push_back(parent);
  }
  if (partial) keys.push_back(ChainChunkKey(parent, tokens.subspan(full * chunk)));
  return keys;
}

}  // namespace kvt
