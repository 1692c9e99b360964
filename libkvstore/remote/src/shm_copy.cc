#include "kvstore/shm_copy.h"

// The state on the stack (its size is known with this define): no allocation to fail.
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "kvstore/chunk_codec.h"
#include "kvstore/shm_progress.h"

// Debian's libxxhash exports the x86 dispatchers, which pick the AVX2/AVX-512 kernels at
// run time; the plain XXH3 entry points are built for baseline x86-64 (SSE2), at about
// half the speed, which would make the hash, not the copy, the bound of a shm Put.
#if defined(__x86_64__) && __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#define KVT_XXH3_UPDATE XXH3_64bits_update_dispatch
#else
#define KVT_XXH3_UPDATE XXH3_64bits_update
#endif

namespace kvt {

absl::StatusOr<uint64_t> CopyRecordHashingPayload(
    std::span<const std::byte> src, std::span<std::byte> dst,
    const std::function<absl::StatusOr<size_t>(size_t have)>& available) {
  // 16 KiB: the bounce block stays in L1 between its copy, its hash and its stream-out.
  constexpr size_t kBlock = 16 << 10;
  alignas(64) std::byte bounce[kBlock];
  const size_t n = std::min(src.size(), dst.size());
  XXH3_state_t state;
  XXH3_state_t* st = &state;
  XXH3_64bits_reset(st);
  size_t ready = 0;
  for (size_t off = 0; off < n;) {
    if (off == ready) {
      absl::StatusOr<size_t> a = available(ready);
      if (!a.ok()) return a.status();
      ready = std::min(*a, n);
      if (ready <= off) continue;  // the callback's contract says it cannot happen
    }
    // Through a bounce block in L1: it is hashed there and streamed to dst (no
    // read-for-ownership of dst, kvstore/shm_progress.h CopyStreaming); the hash and
    // dst both come from the bounce copy, never from src a second time.
    const size_t len = std::min(kBlock, ready - off);
    std::memcpy(bounce, src.data() + off, len);
    const size_t skip = off < kChunkHeaderBytes ? kChunkHeaderBytes - off : 0;
    if (skip < len) KVT_XXH3_UPDATE(st, bounce + skip, len - skip);
    CopyStreaming(dst.data() + off, bounce, len);
    off += len;
  }
  return XXH3_64bits_digest(st);
}

uint64_t CopyRecordHashingPayload(std::span<const std::byte> src, std::span<std::byte> dst) {
  return *CopyRecordHashingPayload(src, dst,
                                   [&](size_t) -> absl::StatusOr<size_t> { return src.size(); });
}

}  // namespace kvt
