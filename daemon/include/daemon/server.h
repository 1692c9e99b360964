// KvtierServer: a running kvtierd — tiered store (host memory over disk), gRPC service,
// metrics/health HTTP endpoint — and its graceful shutdown.
#ifndef KVT_DAEMON_SERVER_H_
#define KVT_DAEMON_SERVER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/config.h"
#include "kvstore/clock.h"

namespace kvt::daemon {

// Thread-safe: Shutdown may be called from any thread, once or more.
class KvtierServer {
 public:
  // Opens the store in config.data_dir, starts listening and serving. InvalidArgument
  // for a bad config; FailedPrecondition when a socket is in use by a live daemon;
  // Unavailable/Internal when the store or a listener cannot be opened.
  // `clock`: the store's time (lease deadlines, the write-back period, TTLs, the disk
  // commit delay); null = SystemClock(). In-process tests pass a ManualClock.
  static absl::StatusOr<std::unique_ptr<KvtierServer>> Start(
      const DaemonConfig& config, std::shared_ptr<Clock> clock = nullptr);
  ~KvtierServer();  // Shutdown()

  // Graceful: stops accepting calls, lets in-flight calls finish (up to
  // config.shutdown_grace, then cancels them), drains the write-back queue, flushes the
  // disk tier, closes the store. Every acknowledged Put is then on disk.
  void Shutdown();

  // Addresses actually bound (TCP port 0 resolved).
  const std::vector<std::string>& listen_addresses() const;
  // Metrics HTTP port, or 0 when disabled.
  int metrics_port() const;
  bool healthy() const;

  class Impl;

 private:
  explicit KvtierServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_SERVER_H_
