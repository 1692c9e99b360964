#include "shm_copy.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "kvstore/chunk_codec.h"

// Debian's libxxhash exports the x86 dispatchers, which pick the AVX2/AVX-512 kernels at
// run time; the plain XXH3 entry points are built for baseline x86-64 (SSE2), at about
// half the speed, which would make the hash, not the copy, the bound of a shm Put.
#if defined(__x86_64__) && __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#define KVT_XXH3_UPDATE XXH3_64bits_update_dispatch
#else
#define KVT_XXH3_UPDATE XXH3_64bits_update
#endif

namespace kvt::daemon {

uint64_t CopyRecordHashingPayload(std::span<const std::byte> src, std::span<std::byte> dst) {
  // 64 KiB: the copied block is hashed while it is still in L1/L2.
  constexpr size_t kBlock = 64 << 10;
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> state(XXH3_createState(),
                                                                        &XXH3_freeState);
  const size_t n = std::min(src.size(), dst.size());
  if (state == nullptr) {  // out of memory for 576 bytes of state: copy, then hash the copy
    std::memcpy(dst.data(), src.data(), n);
    return n < kChunkHeaderBytes
               ? XXH3_64bits(nullptr, 0)
               : XXH3_64bits(dst.data() + kChunkHeaderBytes, n - kChunkHeaderBytes);
  }
  XXH3_64bits_reset(state.get());
  for (size_t off = 0; off < n; off += kBlock) {
    const size_t len = std::min(kBlock, n - off);
    std::memcpy(dst.data() + off, src.data() + off, len);
    const size_t skip = off < kChunkHeaderBytes ? kChunkHeaderBytes - off : 0;
    if (skip < len) KVT_XXH3_UPDATE(state.get(), dst.data() + off + skip, len - skip);
  }
  return XXH3_64bits_digest(state.get());
}

}  // namespace kvt::daemon
