#include "kvstore/chunk_codec.h"

#include <xxhash.h>
#if defined(__x86_64__) && __has_include(<xxh_x86dispatch.h>)
// libxxhash's run-time dispatchers (AVX-512/AVX2/SSE2, whichever the CPU has); the names
// are spelled out below rather than replaced by the header's macros.
#define XXH_DISPATCH_DISABLE_REPLACE 1
#include <xxh_x86dispatch.h>
#define KVT_XXH3_64 XXH3_64bits_dispatch
#define KVT_XXH3_64_UPDATE XXH3_64bits_update_dispatch
#else
#define KVT_XXH3_64 XXH3_64bits
#define KVT_XXH3_64_UPDATE XXH3_64bits_update
#endif

#include <atomic>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_format.h"
#include "spdlog/spdlog.h"

namespace kvt {
namespace {

// Byte offsets of the 128-byte header; see docs/chunk-format.md.
constexpr size_t kOffMagic = 0;          // u32
constexpr size_t kOffVersion = 4;        // u16
constexpr size_t kOffHeaderBytes = 6;    // u16
constexpr size_t kOffNamespace = 8;      // u64 lo, u64 hi
constexpr size_t kOffKey = 24;           // u64 lo, u64 hi
constexpr size_t kOffParent = 40;        // u64 lo, u64 hi
constexpr size_t kOffTokenCount = 56;    // u32
constexpr size_t kOffNumLayers = 60;     // u32
constexpr size_t kOffNumKvHeads = 64;    // u32
constexpr size_t kOffHeadDim = 68;       // u32
constexpr size_t kOffDType = 72;         // u8
constexpr size_t kOffLayoutKind = 73;    // u8
constexpr size_t kOffReservedA = 74;     // 6 bytes, zero
constexpr size_t kOffPayloadBytes = 80;  // u64
constexpr size_t kOffPayloadCsum = 88;   // u64
constexpr size_t kOffReservedB = 96;     // 24 bytes, zero
constexpr size_t kOffHeaderCsum = 120;   // u64 = XXH3-64 of bytes [0, 120)
static_assert(kOffHeaderCsum + 8 == kChunkHeaderBytes);

std::atomic<uint64_t> g_integrity_errors{0};

template <typename T>
void Store(std::byte* base, size_t off, T v) {
  std::memcpy(base + off, &v, sizeof v);
}
template <typename T>
T Load(const std::byte* base, size_t off) {
  T v;
  std::memcpy(&v, base + off, sizeof v);
  return v;
}
template <typename Tag>
void StoreHash(std::byte* base, size_t off, Hash128<Tag> h) {
  Store(base, off, h.lo);
  Store(base, off + 8, h.hi);
}
template <typename H>
H LoadHash(const std::byte* base, size_t off) {
  return H{Load<uint64_t>(base, off), Load<uint64_t>(base, off + 8)};
}

bool AllZero(const std::byte* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != std::byte{0}) return false;
  }
  return true;
}

absl::Status Fail(absl::Status s) {
  g_integrity_errors.fetch_add(1, std::memory_order_relaxed);
  spdlog::debug("chunk record rejected: {}", s.ToString());
  return s;
}

}  // namespace

absl::Status EncodeChunk(const ChunkHeader& h, std::span<const std::byte> payload,
                         std::span<std::byte> out) {
  if (absl::Status s = h.layout.Validate(); !s.ok()) return s;
  if (h.token_count == 0) return absl::InvalidArgumentError("encode: token_count must be > 0");
  const uint64_t expected = h.layout.payload_bytes(h.token_count);
  if (payload.size() != expected) {
    return absl::InvalidArgumentError(
        absl::StrFormat("encode: payload is %d bytes, layout %s x %d tokens needs %d",
                        payload.size(), h.layout.DebugString(), h.token_count, expected));
  }
  if (out.size() != kChunkHeaderBytes + payload.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("encode: output buffer is %d bytes, record needs %d", out.size(),
                        kChunkHeaderBytes + payload.size()));
  }
  std::byte* b = out.data();
  std::memset(b, 0, kChunkHeaderBytes);
  Store<uint32_t>(b, kOffMagic, kChunkMagic);
  Store<uint16_t>(b, kOffVersion, kChunkHeaderVersion);
  Store<uint16_t>(b, kOffHeaderBytes, static_cast<uint16_t>(kChunkHeaderBytes));
  StoreHash(b, kOffNamespace, h.ns);
  StoreHash(b, kOffKey, h.key);
  StoreHash(b, kOffParent, h.parent);
  Store<uint32_t>(b, kOffTokenCount, h.token_count);
  Store<uint32_t>(b, kOffNumLayers, h.layout.num_layers);
  Store<uint32_t>(b, kOffNumKvHeads, h.layout.num_kv_heads);
  Store<uint32_t>(b, kOffHeadDim, h.layout.head_dim);
  Store<uint8_t>(b, kOffDType, static_cast<uint8_t>(h.layout.dtype));
  Store<uint8_t>(b, kOffLayoutKind, static_cast<uint8_t>(h.layout.kind));
  Store<uint64_t>(b, kOffPayloadBytes, payload.size());
  // memmove: the caller may have written the payload in place already.
  if (!payload.empty() && payload.data() != b + kChunkHeaderBytes) {
    std::memmove(b + kChunkHeaderBytes, payload.data(), payload.size());
  }
  Store<uint64_t>(b, kOffPayloadCsum, KVT_XXH3_64(b + kChunkHeaderBytes, payload.size()));
  Store<uint64_t>(b, kOffHeaderCsum, KVT_XXH3_64(b, kOffHeaderCsum));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::byte>> EncodeChunk(const ChunkHeader& header,
                                                   std::span<const std::byte> payload) {
  std::vector<std::byte> out(kChunkHeaderBytes + payload.size());
  if (absl::Status s = EncodeChunk(header, payload, out); !s.ok()) return s;
  return out;
}

absl::StatusOr<ChunkHeader> DecodeChunkHeader(std::span<const std::byte> record) {
  if (record.size() < kChunkHeaderBytes) {
    return Fail(absl::DataLossError(
        absl::StrFormat("chunk record: %d bytes is shorter than the %d-byte header", record.size(),
                        kChunkHeaderBytes)));
  }
  const std::byte* b = record.data();
  const uint32_t magic = Load<uint32_t>(b, kOffMagic);
  if (magic != kChunkMagic) {
    return Fail(absl::DataLossError(
        absl::StrFormat("chunk record: bad magic 0x%08x, expected 0x%08x", magic, kChunkMagic)));
  }
  const uint64_t stored_csum = Load<uint64_t>(b, kOffHeaderCsum);
  const uint64_t csum = KVT_XXH3_64(b, kOffHeaderCsum);
  if (stored_csum != csum) {
    return Fail(absl::DataLossError(
        absl::StrFormat("chunk record: header checksum 0x%016x does not match computed 0x%016x",
                        stored_csum, csum)));
  }
  ChunkHeader h;
  h.version = Load<uint16_t>(b, kOffVersion);
  if (h.version != kChunkHeaderVersion) {
    return Fail(absl::FailedPreconditionError(
        absl::StrFormat("chunk record: format version %d, this build reads version %d", h.version,
                        kChunkHeaderVersion)));
  }
  const uint16_t header_bytes = Load<uint16_t>(b, kOffHeaderBytes);
  if (header_bytes != kChunkHeaderBytes) {
    return Fail(absl::DataLossError(absl::StrFormat("chunk record: header length %d, expected %d",
                                                    header_bytes, kChunkHeaderBytes)));
  }
  if (!AllZero(b + kOffReservedA, kOffPayloadBytes - kOffReservedA) ||
      !AllZero(b + kOffReservedB, kOffHeaderCsum - kOffReservedB)) {
    return Fail(absl::DataLossError("chunk record: reserved header bytes are not zero"));
  }
  h.ns = LoadHash<NamespaceId>(b, kOffNamespace);
  h.key = LoadHash<ChunkKey>(b, kOffKey);
  h.parent = LoadHash<ChunkKey>(b, kOffParent);
  h.token_count = Load<uint32_t>(b, kOffTokenCount);
  h.layout.num_layers = Load<uint32_t>(b, kOffNumLayers);
  h.layout.num_kv_heads = Load<uint32_t>(b, kOffNumKvHeads);
  h.layout.head_dim = Load<uint32_t>(b, kOffHeadDim);
  h.layout.dtype = static_cast<DType>(Load<uint8_t>(b, kOffDType));
  h.layout.kind = static_cast<LayoutKind>(Load<uint8_t>(b, kOffLayoutKind));
  h.payload_bytes = Load<uint64_t>(b, kOffPayloadBytes);
  h.payload_checksum = Load<uint64_t>(b, kOffPayloadCsum);
  if (absl::Status s = h.layout.Validate(); !s.ok()) {
    return Fail(absl::DataLossError(absl::StrCat("chunk record: ", s.message())));
  }
  if (h.token_count == 0) return Fail(absl::DataLossError("chunk record: token_count is 0"));
  const uint64_t expected = h.layout.payload_bytes(h.token_count);
  if (h.payload_bytes != expected) {
    return Fail(absl::DataLossError(
        absl::StrFormat("chunk record: payload length %d, layout %s x %d tokens needs %d",
                        h.payload_bytes, h.layout.DebugString(), h.token_count, expected)));
  }
  return h;
}

absl::StatusOr<ChunkHeader> CheckChunkHeader(std::span<const std::byte> record,
                                             const DecodeExpectations& expect) {
  absl::StatusOr<ChunkHeader> h = DecodeChunkHeader(record);
  if (!h.ok()) return h.status();  // already counted
  if (record.size() != h->record_bytes()) {
    return Fail(
        absl::DataLossError(absl::StrFormat("chunk %s: record is %d bytes, header says %d",
                                            h->key.ToHex(), record.size(), h->record_bytes())));
  }
  if (h->ns != expect.ns) {
    return Fail(absl::FailedPreconditionError(absl::StrFormat(
        "chunk %s: namespace %s, expected %s", h->key.ToHex(), h->ns.ToHex(), expect.ns.ToHex())));
  }
  if (h->key != expect.key) {
    return Fail(absl::FailedPreconditionError(
        absl::StrFormat("chunk record: key %s, expected %s", h->key.ToHex(), expect.key.ToHex())));
  }
  if (expect.layout != nullptr && h->layout != *expect.layout) {
    return Fail(absl::FailedPreconditionError(
        absl::StrFormat("chunk %s: layout %s, expected %s", h->key.ToHex(), h->layout.DebugString(),
                        expect.layout->DebugString())));
  }
  if (expect.token_count != 0 && h->token_count != expect.token_count) {
    return Fail(absl::FailedPreconditionError(absl::StrFormat(
        "chunk %s: %d tokens, expected %d", h->key.ToHex(), h->token_count, expect.token_count)));
  }
  return h;
}

absl::StatusOr<ChunkHeader> VerifyChunk(std::span<const std::byte> record,
                                        const DecodeExpectations& expect) {
  absl::StatusOr<ChunkHeader> h = CheckChunkHeader(record, expect);
  if (!h.ok()) return h.status();  // already counted
  const uint64_t csum = KVT_XXH3_64(record.data() + kChunkHeaderBytes, h->payload_bytes);
  if (csum != h->payload_checksum) {
    return Fail(absl::DataLossError(
        absl::StrFormat("chunk %s: payload checksum 0x%016x does not match header 0x%016x",
                        h->key.ToHex(), csum, h->payload_checksum)));
  }
  return h;
}

uint64_t ChunkChecksum(std::span<const std::byte> bytes) {
  return KVT_XXH3_64(bytes.data(), bytes.size());
}

struct ChunkChecksummer::State {
  State() : xxh(XXH3_createState()) {
    // XXH3_createState only fails when malloc does, which kvtier treats as fatal anyway.
    if (xxh == nullptr) std::abort();
    XXH3_64bits_reset(xxh);
  }
  ~State() { XXH3_freeState(xxh); }
  XXH3_state_t* xxh;
};

ChunkChecksummer::ChunkChecksummer() : state_(std::make_unique<State>()) {}

ChunkChecksummer::~ChunkChecksummer() = default;

void ChunkChecksummer::Update(std::span<const std::byte> bytes) {
  if (!bytes.empty()) KVT_XXH3_64_UPDATE(state_->xxh, bytes.data(), bytes.size());
}

uint64_t ChunkChecksummer::Digest() const { return XXH3_64bits_digest(state_->xxh); }

uint64_t IntegrityErrorCount() { return g_integrity_errors.load(std::memory_order_relaxed); }

}  // namespace kvt
