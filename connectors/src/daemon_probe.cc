#include "connectors/daemon_probe.h"

#include <memory>

#include "absl/strings/str_cat.h"
#if KVT_C_HAVE_REMOTE
#include "kvstore/remote_client.h"
#endif

namespace kvt {

absl::Status ProbeDaemon(const std::string& target, const std::string& token,
                         std::chrono::milliseconds deadline) {
#if KVT_C_HAVE_REMOTE
  RemoteClientOptions o;
  o.target = target;
  o.token = token;
  o.deadline = deadline;
  o.max_attempts = 1;
  o.wait_for_connection = false;  // a daemon that is down is a quick answer
  if (absl::Status s = o.Validate(); !s.ok()) return s;
  absl::StatusOr<std::unique_ptr<RemoteClient>> client = RemoteClient::Create(o);
  if (!client.ok()) return client.status();
  absl::StatusOr<RemoteHealth> h = (*client)->Health();
  if (!h.ok()) {
    return absl::Status(h.status().code(),
                        absl::StrCat("kvtierd at ", target, ": ", h.status().message()));
  }
  if (!h->serving) {
    return absl::FailedPreconditionError(
        absl::StrCat("kvtierd at ", target, " answers but is not serving: ", h->detail));
  }
  return absl::OkStatus();
#else
  (void)token;
  (void)deadline;
  return absl::UnimplementedError(
      absl::StrCat("kvtierd at ", target, ": this build has no daemon client"));
#endif
}

}  // namespace kvt
