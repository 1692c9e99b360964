#include "record_buffers.h"

#include <atomic>
#include <cstdlib>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

namespace kvt::daemon {
namespace {

class Pool {
 public:
  std::byte* Take(uint64_t bytes) {
    const uint64_t n = bytes == 0 ? 4096 : (bytes + 4095) & ~uint64_t{4095};
    {
      absl::MutexLock lock(&mu_);
      auto it = idle_.find(n);
      if (it != idle_.end() && !it->second.empty()) {
        std::byte* p = it->second.back();
        it->second.pop_back();
        idle_bytes_ -= n;
        out_.emplace(p, n);
        return p;
      }
    }
    auto* p = static_cast<std::byte*>(std::aligned_alloc(4096, n));
    if (p == nullptr) return nullptr;
    absl::MutexLock lock(&mu_);
    out_.emplace(p, n);
    return p;
  }

  void Give(std::byte* p) {
    if (p == nullptr) return;
    std::vector<std::byte*> drop;
    {
      absl::MutexLock lock(&mu_);
      auto it = out_.find(p);
      const uint64_t n = it == out_.end() ? 0 : it->second;
      if (it != out_.end()) out_.erase(it);
      if (n == 0 || n > kIdleRecordBufferBytes) {
        drop.push_back(p);
      } else {
        for (auto b = idle_.begin(); b != idle_.end() && idle_bytes_ + n > kIdleRecordBufferBytes;
             ++b) {
          while (!b->second.empty() && idle_bytes_ + n > kIdleRecordBufferBytes) {
            drop.push_back(b->second.back());
            b->second.pop_back();
            idle_bytes_ -= b->first;
          }
        }
        idle_[n].push_back(p);
        idle_bytes_ += n;
      }
    }
    for (std::byte* d : drop) std::free(d);  // outside the lock: munmap is slow
  }

  uint64_t idle_bytes() {
    absl::MutexLock lock(&mu_);
    return idle_bytes_;
  }

 private:
  absl::Mutex mu_;
  absl::flat_hash_map<std::byte*, uint64_t> out_ ABSL_GUARDED_BY(mu_);  // in use: its size
  absl::flat_hash_map<uint64_t, std::vector<std::byte*>> idle_ ABSL_GUARDED_BY(mu_);
  uint64_t idle_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

Pool& ThePool() {
  static Pool* pool = new Pool;  // never destroyed: slices may return buffers at exit
  return *pool;
}

}  // namespace

std::byte* TakeRecordBuffer(uint64_t bytes) { return ThePool().Take(bytes); }
void GiveRecordBuffer(std::byte* buffer) { ThePool().Give(buffer); }
uint64_t IdleRecordBufferBytes() { return ThePool().idle_bytes(); }

namespace {
std::atomic<uint64_t> live_views{0};  // static storage: outlives every slice
}  // namespace

void NoteRecordViewTaken() { live_views.fetch_add(1, std::memory_order_relaxed); }
void NoteRecordViewReleased() { live_views.fetch_sub(1, std::memory_order_release); }
uint64_t LiveRecordViews() { return live_views.load(std::memory_order_acquire); }

}  // namespace kvt::daemon
