// SupervisedThread: the one way the store and kvtierd run a background thread (the
// store's write-back thread, the disk tier's group committer, kvtierd's workers and its
// metrics HTTP thread). It reports into a HealthRegistry (kvstore/health_registry.h): its
// name, whether it runs, stopped or failed, the last exception's message, restarts and
// heartbeats. A body that throws is caught here, logged, restarted while restarts are
// left, then marked failed (and its owner told through on_failure), never lost silently.
#ifndef KVSTORE_SUPERVISED_THREAD_H_
#define KVSTORE_SUPERVISED_THREAD_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "kvstore/health_registry.h"

namespace kvt {

struct SupervisedThreadOptions {
  // The thread's name in health and metrics (e.g. "write-back"). REQUIRES: not empty.
  std::string name;
  // Where it reports; null = HealthRegistry::Default().
  std::shared_ptr<HealthRegistry> health;
  // How many times the body is run again after it throws (0 = never: a throw fails it).
  uint32_t max_restarts = 0;
  // Runs on the thread once it has failed for good, with the exception's message (e.g.
  // the write-back queue then writes submitted records on the callers' threads).
  std::function<void(const std::string& error)> on_failure;
};

// Thread-compatible (Start and Join from the owner; Beat from the body's thread;
// state() from anywhere). Not movable: the thread refers to this object.
class SupervisedThread {
 public:
  SupervisedThread() = default;
  SupervisedThread(const SupervisedThread&) = delete;
  SupervisedThread& operator=(const SupervisedThread&) = delete;
  ~SupervisedThread();  // Join()

  // Registers `options.name` (state running) and runs `body` on a new thread. The body
  // returns when its owner tells it to stop (then: stopped). REQUIRES: not started yet.
  void Start(SupervisedThreadOptions options, std::function<void()> body);
  // Waits for the body to return (the owner must have told it to) and removes the entry
  // from the registry. No-op when not started or already joined.
  void Join();
  bool joinable() const { return thread_.joinable(); }

  // One heartbeat: the body calls it once per round of its loop.
  void Beat();
  // The state reported now (kStopped when never started).
  ThreadState state() const { return state_.load(std::memory_order_acquire); }

 private:
  void Run(const std::function<void()>& body);
  void Report(ThreadState state, std::string error);

  SupervisedThreadOptions options_;
  std::shared_ptr<HealthRegistry> health_;
  uint64_t id_ = 0;
  std::atomic<ThreadState> state_{ThreadState::kStopped};
  std::thread thread_;
};

}  // namespace kvt

#endif  // KVSTORE_SUPERVISED_THREAD_H_
