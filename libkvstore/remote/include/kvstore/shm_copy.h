// Copying a chunk record out of memory that another process may still be writing (a
// client's shared-memory region) into memory of one's own: kvtierd's shm Put, and
// kvtier-bench's timing of it (in the core so no bench or engine includes daemon sources).
#ifndef KVSTORE_SHM_COPY_H_
#define KVSTORE_SHM_COPY_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "absl/status/statusor.h"

namespace kvt {

// Copies `src` into `dst` and returns the XXH3-64 (seed 0, the record format's payload
// checksum, docs/chunk-format.md) of dst's payload, dst[kChunkHeaderBytes, size). One
// pass: each 16 KiB block is copied into an L1 bounce buffer, hashed there, and streamed
// to `dst` (non-temporal stores). The hash is of the copy, never of `src`, so it describes exactly
// the bytes the caller goes on to check and store, whatever the writer of `src` does meanwhile.
// REQUIRES: src.size() == dst.size() >= kChunkHeaderBytes; the spans do not overlap.
uint64_t CopyRecordHashingPayload(std::span<const std::byte> src, std::span<std::byte> dst);

// The same pass over a record whose bytes are still arriving (a progressive shm Put,
// kvstore/shm_progress.h): `available(have)` blocks until more than `have` bytes of src
// may be read and returns how many (at most src.size()), or an error, which ends the
// copy and is returned.
absl::StatusOr<uint64_t> CopyRecordHashingPayload(
    std::span<const std::byte> src, std::span<std::byte> dst,
    const std::function<absl::StatusOr<size_t>(size_t have)>& available);

}  // namespace kvt

#endif  // KVSTORE_SHM_COPY_H_
