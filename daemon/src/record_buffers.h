// Record buffers of the daemon's gRPC Put and Get paths (and the count of records lent
// in place, below): 4096-aligned (the disk tier
// reads and writes them O_DIRECT), reused instead of freed. A 32 MiB record buffer from
// malloc is a fresh mmap each time: the kernel zeroes and maps every page on first touch
// and unmaps it on free, which costs about as much as the record copy itself. Up to
// kIdleRecordBufferBytes of idle buffers are kept (same-size requests reuse them first;
// an idle buffer of another size is freed to make room).
#ifndef KVT_DAEMON_RECORD_BUFFERS_H_
#define KVT_DAEMON_RECORD_BUFFERS_H_

#include <cstddef>
#include <cstdint>
#include <memory>

namespace kvt::daemon {

inline constexpr uint64_t kIdleRecordBufferBytes = 128ull << 20;

// A buffer of at least `bytes` (rounded up to 4096; 0 counts as 4096), contents
// unspecified; nullptr when memory is exhausted. Thread-safe.
std::byte* TakeRecordBuffer(uint64_t bytes);
// Returns a buffer from TakeRecordBuffer (nullptr: no-op). Thread-safe.
void GiveRecordBuffer(std::byte* buffer);
// A buffer from TakeRecordBuffer, given back on destruction.
struct RecordBufferGiver {
  void operator()(std::byte* buffer) const { GiveRecordBuffer(buffer); }
};
using OwnedRecordBuffer = std::unique_ptr<std::byte, RecordBufferGiver>;
// Bytes of idle buffers kept now.
uint64_t IdleRecordBufferBytes();

// Host-tier records lent to gRPC Gets in place (TieredStore::View) and still held by a
// gRPC slice: a slice may be dropped by the transport after its call ended, so shutdown
// waits for this count to reach 0 before destroying the store. Thread-safe.
void NoteRecordViewTaken();
void NoteRecordViewReleased();
uint64_t LiveRecordViews();

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_RECORD_BUFFERS_H_
