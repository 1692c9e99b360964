// Lease: the pins a TieredStore::Lookup took (LookupOptions::pin), held as one move-only
// handle, as PinHandle holds one tier pin (LevelDB's Cache::Handle, but RAII).
//
// While a lease is live its chunks are not evicted from the tiers they were found in.
// It ends when the handle is dropped or Release()d, or when the store's lease_timeout
// passes first (the store reaps it: its pins are released and it counts in
// TieredStore::stats().expired_leases; the handle then holds nothing and live() is false).
// No lease is released by anyone but its holder or its deadline.
#ifndef KVSTORE_LEASE_H_
#define KVSTORE_LEASE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

namespace kvt {
namespace internal {
class LeaseBook;  // libkvstore/src/lease_book.h
}  // namespace internal

// Move-only. Thread-compatible (one lease, one owner); the store side is thread-safe.
// A lease may outlive its store: it then holds nothing, and Release/Shrink do nothing.
// REQUIRES: a lease is not released while its store is being destroyed.
class Lease {
 public:
  Lease() = default;
  Lease(Lease&& other) noexcept;
  Lease& operator=(Lease&& other) noexcept;
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease();

  // True when a Lookup granted this lease (it pinned at least one chunk), also after it
  // expired; false for an empty handle and after Release.
  explicit operator bool() const { return id_ != 0; }
  // True while the lease holds its pins: granted, not released, not expired.
  bool live() const;
  // Pins held now (0 when not live).
  size_t size() const;

  // Keeps the first `keep` pins (in key order of the Lookup) and releases the rest;
  // keep == 0 releases the lease. No-op when not live or keep >= size().
  void Shrink(size_t keep);
  // Releases every pin now (idempotent).
  void Release();

 private:
  friend class internal::LeaseBook;
  Lease(std::weak_ptr<internal::LeaseBook> book, uint64_t id) : book_(std::move(book)), id_(id) {}

  std::weak_ptr<internal::LeaseBook> book_;
  uint64_t id_ = 0;
};

}  // namespace kvt

#endif  // KVSTORE_LEASE_H_
