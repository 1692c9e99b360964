// WorkerPool: threads that run store operations (memory copies, disk I/O) for the gRPC
// reactors, so gRPC threads never block on disk I/O.
#ifndef KVT_DAEMON_WORKER_POOL_H_
#define KVT_DAEMON_WORKER_POOL_H_

#include <atomic>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kvstore/supervised_thread.h"
#include "spdlog/spdlog.h"

namespace kvt::daemon {

// Thread-safe. Tasks run in FIFO order on `threads` threads. A task that throws is
// logged and counted (task_failures), its `on_throw` is called with INTERNAL naming the
// exception (so an RPC's reactor finishes at once instead of leaving the client to wait
// out its deadline), and the thread survives. Each thread is a SupervisedThread named
// "<name>-<i>" reporting into `health` (null = HealthRegistry::Default()), with one
// heartbeat per task. Destruction runs every queued task, then joins.
class WorkerPool {
 public:
  explicit WorkerPool(uint32_t threads, const std::string& name = "worker",
                      std::shared_ptr<HealthRegistry> health = nullptr) {
    for (uint32_t i = 0; i < threads; ++i) {
      threads_.push_back(std::make_unique<SupervisedThread>());
      SupervisedThread* t = threads_.back().get();
      t->Start({.name = absl::StrCat(name, "-", i), .health = health}, [this, t] { Loop(*t); });
    }
  }
  ~WorkerPool() { Stop(); }

  // `on_throw` (may be empty) runs on the worker thread if `task` throws; an exception
  // from `on_throw` itself is logged and swallowed.
  void Submit(std::function<void()> task, std::function<void(const absl::Status&)> on_throw = {}) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(Task{std::move(task), std::move(on_throw)});
  }

  // Runs the queued tasks, then joins the threads. Idempotent.
  void Stop() {
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      stop_ = true;
    }
    for (auto& t : threads_) t->Join();
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
  void Loop(SupervisedThread& self) {
    alive_.fetch_add(1);
    for (;;) {
      self.Beat();
      Task task;
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
      std::string what;
      try {
        task.run();
        continue;
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
        what = "a non-std exception";
      }
      failures_.fetch_add(1);
      spdlog::error("kvtierd: worker task threw: {}", what);
      if (!task.on_throw) continue;
      try {
        task.on_throw(absl::InternalError("kvtierd: the request's task threw: " + what));
      } catch (...) {
        spdlog::error("kvtierd: a worker task's failure handler threw too");
      }
    }
    alive_.fetch_sub(1);
  }

  struct Task {
    std::function<void()> run;
    std::function<void(const absl::Status&)> on_throw;
  };

  absl::Mutex mu_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::unique_ptr<SupervisedThread>> threads_;
  std::atomic<uint64_t> failures_{0};
  std::atomic<uint32_t> alive_{0};
};

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_WORKER_POOL_H_
