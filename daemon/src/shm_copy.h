// Copying a chunk record out of memory that another process may still be writing (a
// client's shared-memory region) into daemon-owned memory.
#ifndef KVT_DAEMON_SHM_COPY_H_
#define KVT_DAEMON_SHM_COPY_H_

#include <cstddef>
#include <cstdint>
#include <span>

namespace kvt::daemon {

// Copies `src` into `dst` and returns the XXH3-64 (seed 0, the record format's payload
// checksum, docs/chunk-format.md) of dst's payload, dst[kChunkHeaderBytes, size). One
// pass: each block is hashed from `dst` right after it is copied, while it is still in
// cache. The hash is of the copy, never of `src`, so it describes exactly the bytes the
// caller goes on to check and store, whatever the writer of `src` does meanwhile.
// REQUIRES: src.size() == dst.size() >= kChunkHeaderBytes; the spans do not overlap.
uint64_t CopyRecordHashingPayload(std::span<const std::byte> src, std::span<std::byte> dst);

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_SHM_COPY_H_
