// ProbeDaemon: does kvtierd answer? The one check behind the engines' start-up message
// (issue 21 item 11): kvtier-llama-server and the vLLM connector (through kvt_daemon_check
// in kvtier_c.h) warn once when the daemon they are configured with does not answer, and
// log once when it does, instead of saying nothing until a store fails minutes later.
#ifndef CONNECTORS_DAEMON_PROBE_H_
#define CONNECTORS_DAEMON_PROBE_H_

#include <chrono>
#include <string>

#include "absl/status/status.h"

namespace kvt {

// Calls kvtierd's Health at `target` ("unix:///path.sock" or "host:port") once, with
// bearer `token` ("" = none), waiting at most `deadline` (REQUIRES: 1 ms .. 10 min).
// OK when the daemon answers and is serving. Unavailable (or DeadlineExceeded) naming the
// target when nothing answers; FailedPrecondition naming what died when it answers but is
// not serving; Unauthenticated / PermissionDenied for a refused token; InvalidArgument
// for a malformed target; Unimplemented in a build without the daemon client.
// Thread-safe; blocks the caller for at most `deadline`.
absl::Status ProbeDaemon(const std::string& target, const std::string& token,
                         std::chrono::milliseconds deadline);

}  // namespace kvt

#endif  // CONNECTORS_DAEMON_PROBE_H_
