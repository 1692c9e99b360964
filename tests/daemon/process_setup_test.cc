// kvtierd's process setup: Abseil's Mutex deadlock detection (a process-wide lock taken
// on every Mutex::Lock where libabsl is built without NDEBUG) is off after
// DisableMutexDeadlockDetection, so a lock-order inversion no longer aborts the process.
#include "process_setup.h"

#include <sys/wait.h>
#include <unistd.h>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace kvt::daemon {
namespace {

// Locks a then b, then b then a: a potential deadlock that detection reports.
void InvertLockOrder() {
  absl::Mutex a, b;
  a.Lock();
  b.Lock();
  b.Unlock();
  a.Unlock();
  b.Lock();
  a.Lock();
  a.Unlock();
  b.Unlock();
}

// Runs InvertLockOrder in a child with `mode`; true when the child was killed by a signal.
bool ChildAbortsOnInversion(absl::OnDeadlockCycle mode, bool disable_first) {
  const pid_t pid = fork();
  if (pid == 0) {
    absl::SetMutexDeadlockDetectionMode(mode);
    if (disable_first) DisableMutexDeadlockDetection();
    InvertLockOrder();
    _exit(0);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFSIGNALED(st);
}

TEST(ProcessSetupTest, LockOrderInversionDoesNotAbortOnceDetectionIsDisabled) {
  if (!ChildAbortsOnInversion(absl::OnDeadlockCycle::kAbort, /*disable_first=*/false))
    GTEST_SKIP() << "this libabsl is built with NDEBUG: it has no deadlock detection to disable";
  EXPECT_FALSE(ChildAbortsOnInversion(absl::OnDeadlockCycle::kAbort, /*disable_first=*/true));
}

}  // namespace
}  // namespace kvt::daemon
