// ServerTiers: the tiers kvtier-llama-server's flags name (--kvtier-host-mib: host memory,
// --kvtier-dir: a disk directory, --kvtier-daemon: kvtierd; --kvtier-throttle-gbps: the
// host tier behind a slow link, for benchmarks) opened as one TieredStore, and the
// kvtierd start-up check: a thread asks kvtierd's Health; when it does not answer, one
// warning says the server runs cold until it does, and the thread asks every second
// until it answers, then logs that once (docs/llama-server.md).
#ifndef KVTIER_SERVER_SERVER_TIERS_H_
#define KVTIER_SERVER_SERVER_TIERS_H_

#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kvstore/tiered_store.h"
#include "kvtier_server/server_options.h"

namespace kvt::llamacpp {

class ServerTiers {
 public:
  // Opens the tiers named by `options` (REQUIRES: options.Validate() ok and
  // options.enabled()). The disk tier's directory is created; kvtierd is not contacted
  // (it may start later; the check thread starts here). InvalidArgument naming the flag
  // when a tier cannot be opened (e.g. --kvtier-dir not writable).
  static absl::StatusOr<std::unique_ptr<ServerTiers>> Open(const ServerKvtierOptions& options);
  // Stops and joins the kvtierd check.
  ~ServerTiers();

  const std::shared_ptr<TieredStore>& store() const { return store_; }
  // The tiers in order, e.g. "host+disk+kvtierd" (GET /kvtier's "tiers").
  const std::string& names() const { return names_; }

 private:
  explicit ServerTiers(const ServerKvtierOptions& options) : options_(options) {}
  void WatchDaemon();  // the check thread's body

  const ServerKvtierOptions options_;
  std::shared_ptr<TieredStore> store_;
  std::string names_;
  absl::Mutex watch_mu_;
  bool watch_stop_ ABSL_GUARDED_BY(watch_mu_) = false;
  std::thread daemon_watch_;
};

}  // namespace kvt::llamacpp

#endif  // KVTIER_SERVER_SERVER_TIERS_H_
