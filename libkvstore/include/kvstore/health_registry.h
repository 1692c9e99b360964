// HealthRegistry: where every supervised background thread (kvstore/supervised_thread.h)
// reports its name, state, last error, restarts and heartbeats, so a dead thread shows in
// kvtierd's /healthz, its Health RPC and /metrics (kvtier_thread_up{name}) instead of
// failing silently.
#ifndef KVSTORE_HEALTH_REGISTRY_H_
#define KVSTORE_HEALTH_REGISTRY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kvt {

enum class ThreadState : uint8_t {
  kRunning = 0,  // started, its loop has not returned
  kStopped = 1,  // returned normally (its owner told it to stop)
  kFailed = 2,   // an exception escaped it and no restart is left
};
// "running", "stopped", "failed": the one spelling in health text and metrics.
std::string_view ThreadStateName(ThreadState state);

// One thread's entry, as read by Snapshot.
struct ThreadHealth {
  std::string name;  // e.g. "write-back", "disk-commit", "worker-0", "metrics-http"
  ThreadState state = ThreadState::kRunning;
  std::string last_error;   // what the last exception said; "" when none
  uint64_t restarts = 0;    // times the body was started again after it threw
  uint64_t heartbeats = 0;  // rounds of its loop (SupervisedThread::Beat)
};

// Thread-safe. Entries are added when a supervised thread starts and removed when its
// owner destroys it; names need not be unique (two stores in one process both have a
// "write-back"), kvtierd's are.
class HealthRegistry {
 public:
  // The registry of components given none in their options (tests, tools, the C ABI).
  static const std::shared_ptr<HealthRegistry>& Default();

  // Every entry, sorted by name (then by age).
  std::vector<ThreadHealth> Snapshot() const ABSL_LOCKS_EXCLUDED(mu_);
  // True when no thread has failed; else false and *detail (when given) names each
  // failed thread and its error ("write-back failed: <error>; ").
  bool Healthy(std::string* detail = nullptr) const ABSL_LOCKS_EXCLUDED(mu_);

  // --- for SupervisedThread ---
  uint64_t Add(std::string name) ABSL_LOCKS_EXCLUDED(mu_);
  void Remove(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);
  void SetState(uint64_t id, ThreadState state, std::string error = "") ABSL_LOCKS_EXCLUDED(mu_);
  void CountRestart(uint64_t id, std::string error) ABSL_LOCKS_EXCLUDED(mu_);
  void Beat(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, ThreadHealth> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvt

#endif  // KVSTORE_HEALTH_REGISTRY_H_
