// WorkerPool: threads that run store operations (memory copies, disk I/O) for the gRPC
// reactors, so gRPC threads never block on disk I/O.
#ifndef KVT_DAEMON_WORKER_POOL_H_
#define KVT_DAEMON_WORKER_POOL_H_

#include <atomic>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "spdlog/spdlog.h"

namespace kvt::daemon {

// Thread-safe. Tasks run in FIFO order on `threads` threads. A task that throws is
// logged and counted (task_failures); the thread survives. Destruction runs every
// queued task, then joins.
class WorkerPool {
 public:
  explicit WorkerPool(uint32_t threads) {
    for (uint32_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
  }
  ~WorkerPool() { Stop(); }

  void Submit(std::function<void()> task) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(task));
  }

  // Runs the queued tasks, then joins the threads. Idempotent.
  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      stop_ = true;
    }
    for (auto& t : threads_) t.join();
  }

  uint64_t task_failures() const { return failures_.load(std::memory_order_relaxed); }
  size_t queued() {
    absl::MutexLock lock(&mu_);
    return queue_.size();
  }
  // Threads that are still running their loop (a healthy pool has all of them).
  uint32_t alive() const { return alive_.load(std::memory_order_relaxed); }
  uint32_t size() const { return static_cast<uint32_t>(threads_.size()); }

 private:
  void Loop() {
    alive_.fetch_add(1);
    for (;;) {
      std::function<void()> task;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](WorkerPool* p)
                 ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) { return p->stop_ || !p->queue_.empty(); },
            this));
        if (queue_.empty()) break;  // stop_ and drained
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      try {
        task();
      } catch (const std::exception& e) {
        failures_.fetch_add(1);
        spdlog::error("kvtierd: worker task threw: {}", e.what());
      } catch (...) {
        failures_.fetch_add(1);
        spdlog::error("kvtierd: worker task threw a non-std exception");
      }
    }
    alive_.fetch_sub(1);
  }

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
  std::atomic<uint64_t> failures_{0};
  std::atomic<uint32_t> alive_{0};
};

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_WORKER_POOL_H_
