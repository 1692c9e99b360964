// RecordBuffer: an owned, uninitialised byte buffer for one chunk record (header +
// payload). A chunk is tens of MiB; zero-filling it would double the time a store
// holds the engine. Buffers of 2 MiB or more are 2 MiB-aligned (so a disk tier can
// write them with O_DIRECT without a bounce copy) and advised as transparent huge
// pages, so the first touch costs a few faults per chunk instead of one per 4 KiB page.
#ifndef KVSTORE_RECORD_BUFFER_H_
#define KVSTORE_RECORD_BUFFER_H_

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <span>

namespace kvt {

struct RecordBuffer {
  struct FreeDeleter {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte[], FreeDeleter> data;
  size_t size = 0;  // bytes

  // A buffer of exactly n bytes (uninitialised). Throws std::bad_alloc when memory is
  // exhausted (as operator new does).
  static RecordBuffer Make(size_t n);
  // A buffer holding a copy of `bytes`.
  static RecordBuffer CopyOf(std::span<const std::byte> bytes);

  bool empty() const { return size == 0; }
  std::span<std::byte> span() { return {data.get(), size}; }
  std::span<const std::byte> span() const { return {data.get(), size}; }
};

}  // namespace kvt

#endif  // KVSTORE_RECORD_BUFFER_H_
