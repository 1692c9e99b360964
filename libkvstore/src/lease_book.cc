// LeaseBook and the Lease handle (kvstore/lease.h).
#include "lease_book.h"

#include <iterator>
#include <span>
#include <utility>

namespace kvt {

// ------------------------------------------------------------------ Lease

Lease::Lease(Lease&& other) noexcept
    : book_(std::move(other.book_)), id_(std::exchange(other.id_, 0)) {}

Lease& Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    Release();
    book_ = std::move(other.book_);
    id_ = std::exchange(other.id_, 0);
  }
  return *this;
}

Lease::~Lease() { Release(); }

bool Lease::live() const {
  if (id_ == 0) return false;
  std::shared_ptr<internal::LeaseBook> book = book_.lock();
  return book != nullptr && book->Live(id_);
}

size_t Lease::size() const {
  if (id_ == 0) return 0;
  std::shared_ptr<internal::LeaseBook> book = book_.lock();
  return book == nullptr ? 0 : book->PinCount(id_);
}

void Lease::Shrink(size_t keep) {
  if (id_ == 0) return;
  if (keep == 0) {
    Release();
    return;
  }
  if (std::shared_ptr<internal::LeaseBook> book = book_.lock()) book->Shrink(id_, keep);
}

void Lease::Release() {
  const uint64_t id = std::exchange(id_, 0);
  if (id == 0) return;
  if (std::shared_ptr<internal::LeaseBook> book = book_.lock()) book->Release(id);
  book_.reset();
}

namespace internal {

// ------------------------------------------------------------------ LeaseBook

LeaseBook::~LeaseBook() { Clear(); }

Lease LeaseBook::Grant(std::vector<LeasePin> pins) {
  if (pins.empty()) return Lease();
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  for (const LeasePin& p : pins) {
    if (!p.handle) continue;
    PinRef& ref = pin_refs_[{p.tier, p.key}];
    if (ref.count++ == 0) {
      ref.bytes = p.bytes;
      pinned_bytes_ += p.bytes;
    }
  }
  leases_.emplace(id, Entry{clock_->Now() + timeout_, std::move(pins)});
  return Lease(weak_from_this(), id);
}

void LeaseBook::DropPinRefsLocked(std::span<const LeasePin> pins) {
  for (const LeasePin& p : pins) {
    if (!p.handle) continue;
    auto it = pin_refs_.find(std::make_pair(p.tier, p.key));
    if (it == pin_refs_.end()) continue;
    if (--it->second.count == 0) {
      pinned_bytes_ -= it->second.bytes;
      pin_refs_.erase(it);
    }
  }
}

void LeaseBook::Release(uint64_t id) {
  Entry released;
  {
    absl::MutexLock lock(&mu_);
    auto it = leases_.find(id);
    if (it == leases_.end()) return;  // expired and reaped already
    // Past its deadline but not reaped yet: it expired (counted as the reap would have).
    if (it->second.deadline <= clock_->Now()) ++expired_;
    released = std::move(it->second);
    leases_.erase(it);
    DropPinRefsLocked(released.pins);
  }
  // The pin handles release here, outside mu_.
}

void LeaseBook::Shrink(uint64_t id, size_t keep) {
  std::vector<LeasePin> dropped;  // released on return, outside mu_
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(id);
  if (it == leases_.end()) return;
  std::vector<LeasePin>& pins = it->second.pins;
  if (keep >= pins.size()) return;
  dropped.assign(std::make_move_iterator(pins.begin() + static_cast<std::ptrdiff_t>(keep)),
                 std::make_move_iterator(pins.end()));
  pins.resize(keep);
  DropPinRefsLocked(dropped);
}

bool LeaseBook::Live(uint64_t id) const {
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(id);
  return it != leases_.end() && it->second.deadline > clock_->Now();
}

size_t LeaseBook::PinCount(uint64_t id) const {
  absl::MutexLock lock(&mu_);
  auto it = leases_.find(id);
  if (it == leases_.end() || it->second.deadline <= clock_->Now()) return 0;
  return it->second.pins.size();
}

void LeaseBook::ReapExpired() {
  absl::MutexLock reap(&reap_mu_);
  std::vector<Entry> expired;  // released outside mu_, before reap_mu_ is
  {
    absl::MutexLock lock(&mu_);
    const Clock::TimePoint now = clock_->Now();
    for (auto it = leases_.begin(); it != leases_.end();) {
      if (it->second.deadline <= now) {
        DropPinRefsLocked(it->second.pins);
        ++expired_;
        expired.push_back(std::move(it->second));
        leases_.erase(it++);
      } else {
        ++it;
      }
    }
  }
}

void LeaseBook::Clear() {
  absl::flat_hash_map<uint64_t, Entry> all;
  {
    absl::MutexLock lock(&mu_);
    all.swap(leases_);
    pin_refs_.clear();
    pinned_bytes_ = 0;
  }
}

uint64_t LeaseBook::pinned_bytes() {
  ReapExpired();
  absl::MutexLock lock(&mu_);
  return pinned_bytes_;
}

uint64_t LeaseBook::expired() const {
  absl::MutexLock lock(&mu_);
  return expired_;
}

size_t LeaseBook::size() const {
  absl::MutexLock lock(&mu_);
  return leases_.size();
}

}  // namespace internal
}  // namespace kvt
