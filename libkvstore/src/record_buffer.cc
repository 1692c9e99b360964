#include "kvstore/record_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <new>

namespace kvt {

RecordBuffer RecordBuffer::Make(size_t n) {
  constexpr size_t kHuge = 2u << 20;
  void* p = nullptr;
  if (n >= kHuge) {
    const size_t rounded = (n + kHuge - 1) / kHuge * kHuge;
    p = std::aligned_alloc(kHuge, rounded);
    if (p != nullptr) madvise(p, rounded, MADV_HUGEPAGE);
  } else {
    // 4096-aligned, so small records can be written with O_DIRECT too.
    p = std::aligned_alloc(4096, std::max<size_t>((n + 4095) / 4096 * 4096, 4096));
  }
  if (p == nullptr) throw std::bad_alloc();
  return RecordBuffer{std::unique_ptr<std::byte[], FreeDeleter>(static_cast<std::byte*>(p)), n};
}

RecordBuffer RecordBuffer::CopyOf(std::span<const std::byte> bytes) {
  RecordBuffer b = Make(bytes.size());
  if (!bytes.empty()) std::memcpy(b.data.get(), bytes.data(), bytes.size());
  return b;
}

}  // namespace kvt
