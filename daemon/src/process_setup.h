// Process-wide settings kvtierd applies once in main, before any thread starts. Header
// only: kvtierd_main.cc and tests/daemon/process_setup_test.cc include it.
#ifndef KVT_DAEMON_PROCESS_SETUP_H_
#define KVT_DAEMON_PROCESS_SETUP_H_

#include "absl/synchronization/mutex.h"

namespace kvt::daemon {

// Turns off Abseil's Mutex deadlock detection for this process. Not thread-safe: call
// before other threads start.
//
// Why: where libabsl is built without NDEBUG (Debian and Ubuntu's libabsl packages are),
// every absl::Mutex::Lock in the process (kvtier's and gRPC's) runs DeadlockCheck, which
// takes one process-wide spin lock (deadlock_graph_mu in absl's mutex.cc) and looks the
// mutex up in a global lock graph; destroying a Mutex takes it again. Under many clients
// that is a lock every gRPC and store thread crosses on every lock operation (perf of
// kvtierd under `kvtier-bench load`: GraphCycles::GetId and the lock graph took about 3 %
// of its user time; docs/performance.md "kvtierd under many clients"). A lock-order
// cycle is a bug for the tests (tsan preset) to find, not a reason for a serving daemon to
// abort. Where libabsl is built with NDEBUG this changes nothing.
inline void DisableMutexDeadlockDetection() {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
}

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_PROCESS_SETUP_H_
