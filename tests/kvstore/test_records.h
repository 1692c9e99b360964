// Test-only half of building chunk records; the chain logic (parent key + encode) is
// kvt::ChunkChainEncoder / kvt::ChainHeader in kvstore/chunk_chain.h. Used by the
// kvstore, daemon, CLI and connector tests and by their helper binaries, so it does not
// depend on GoogleTest: a record the codec refuses is a bug in the test and aborts.
#ifndef KVT_TESTS_KVSTORE_TEST_RECORDS_H_
#define KVT_TESTS_KVSTORE_TEST_RECORDS_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#include "kvstore/chunk_chain.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/types.h"

namespace kvt::testing {

// 1 layer, 1 KV head, head_dim 16, opaque bytes: 32 payload bytes per token, so a
// record of t tokens is 128 + 32 t bytes (12 tokens = 512 bytes, 28 tokens = 1024).
inline KvLayout Bytes32PerTokenLayout() {
  KvLayout l;
  l.num_layers = 1;
  l.num_kv_heads = 1;
  l.head_dim = 16;
  l.dtype = DType::kBytes;
  l.kind = LayoutKind::kFlashAttnNHD;
  return l;
}

// chain.EncodeNext(key, tokens, payload), aborting with the codec's message on failure.
inline std::vector<std::byte> EncodeNextOrDie(ChunkChainEncoder& chain, ChunkKey key,
                                              uint32_t tokens, std::span<const std::byte> payload) {
  auto rec = chain.EncodeNext(key, tokens, payload);
  if (!rec.ok()) {
    std::fprintf(stderr, "test record %s: %s\n", key.ToHex().c_str(),
                 rec.status().ToString().c_str());
    std::abort();
  }
  return *std::move(rec);
}

// One record of `tokens` tokens under `ns` with key `key` whose parent is `parent`.
inline std::vector<std::byte> TestRecord(NamespaceId ns, const KvLayout& layout, ChunkKey key,
                                         ChunkKey parent, uint32_t tokens,
                                         std::span<const std::byte> payload) {
  ChunkChainEncoder chain(ns, layout, parent);
  return EncodeNextOrDie(chain, key, tokens, payload);
}

}  // namespace kvt::testing

#endif  // KVT_TESTS_KVSTORE_TEST_RECORDS_H_
