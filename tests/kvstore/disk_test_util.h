// Test records shared by disk_tier_test.cc and kvt_disk_writer (disk_writer_main.cc).
#ifndef KVT_TESTS_KVSTORE_DISK_TEST_UTIL_H_
#define KVT_TESTS_KVSTORE_DISK_TEST_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "kvstore/chunk_codec.h"
#include "kvstore/chunk_key.h"
#include "kvstore/types.h"
#include "test_records.h"

namespace kvt::testing {

// 2 layers x 2 KV heads x head_dim 64, bf16: 1,024 B per token.
inline KvLayout SmallLayout() {
  KvLayout l;
  l.num_layers = 2;
  l.num_kv_heads = 2;
  l.head_dim = 64;
  l.dtype = DType::kBF16;
  l.kind = LayoutKind::kFlashAttnNHD;
  return l;
}

// On-disk size of a MakeRecord() record of the default 256 tokens: 256 x 1 KiB payload +
// the 128-byte header, padded to the disk tier's 4 KiB blocks.
inline constexpr uint64_t kPaddedRecordBytes =
    ((256 * 1024 + kChunkHeaderBytes) + 4095) / 4096 * 4096;

inline NamespaceId TestNamespace(uint64_t n = 1) { return NamespaceId{0x1234 + n, 0xabcd00 + n}; }

inline ChunkKey TestKey(uint64_t seed, uint64_t ns = 1) {
  return ChunkKey{seed * 0x9E3779B97F4A7C15ull + ns, (seed + 1) * 0xC2B2AE3D27D4EB4Full ^ ns};
}

// A valid record whose bytes depend only on (seed, tokens, ns): the payload is a
// xorshift stream seeded by `seed`. Aborts if the codec refuses (a test bug).
inline std::vector<std::byte> MakeRecord(uint64_t seed, uint32_t tokens = 256, uint64_t ns = 1) {
  std::vector<std::byte> payload(SmallLayout().payload_bytes(tokens));
  uint64_t x = seed * 0x2545F4914F6CDD1Dull + 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < payload.size(); i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    for (size_t j = 0; j < 8 && i + j < payload.size(); ++j) {
      payload[i + j] = static_cast<std::byte>(x >> (8 * j));
    }
  }
  return TestRecord(TestNamespace(ns), SmallLayout(), TestKey(seed, ns),
                    seed == 0 ? RootKey(TestNamespace(ns)) : TestKey(seed - 1, ns), tokens,
                    payload);
}

}  // namespace kvt::testing

#endif  // KVT_TESTS_KVSTORE_DISK_TEST_UTIL_H_
