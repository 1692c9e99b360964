// kvtierd configuration: one YAML file (parsed with yaml-cpp) plus command-line flags
// that override it. Every field, its default and its unit are documented in
// docs/daemon.md; LoadDaemonConfig rejects unknown keys so a typo is an error, not a
// silently ignored setting.
#ifndef KVT_DAEMON_CONFIG_H_
#define KVT_DAEMON_CONFIG_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kvstore/absence_record.h"
#include "kvstore/cluster_tier.h"
#include "kvstore/disk_tier.h"
#include "kvstore/host_tier.h"

namespace YAML {
class Node;
}

namespace kvt::daemon {

struct TenantConfig {
  std::string name;                 // "" is the default tenant
  std::vector<std::string> tokens;  // bearer tokens that authenticate as this tenant
};

// When the daemon acknowledges a Put.
enum class Durability : uint8_t {
  kSync = 0,   // after the record is durable on the disk tier (fdatasync + synced index)
  kAsync = 1,  // after it is in host memory; written to disk in the background (Flush on SIGTERM)
};

struct DaemonConfig {
  // gRPC listen addresses: "unix:///path.sock" or "host:port". Default: one unix socket.
  std::vector<std::string> listen;
  // Allow TCP addresses other than loopback (127.0.0.0/8, ::1, localhost).
  bool allow_remote = false;
  // Directory for the disk tier (records/, index/) and namespaces.log. Created if missing.
  std::string data_dir;
  // The tiers' own options, embedded rather than copied field by field. The YAML keys
  // stay flat (docs/daemon.md): host_capacity → host.capacity_bytes; disk_capacity →
  // disk.capacity_bytes; disk_file_bytes → disk.file_bytes (largest record the disk
  // tier accepts); disk_direct_io → disk.direct_io; disk_commit (each_put|grouped) →
  // disk.commit; disk_commit_delay_ms → disk.commit_delay_ms. The server sets disk.dir to
  // data_dir + "/disk" and caps disk.file_bytes at disk.capacity_bytes; every other
  // field keeps the tier's default.
  HostTierOptions host;                         // capacity_bytes default 1 GiB
  DiskTierOptions disk = DefaultDiskOptions();  // capacity_bytes default 8 GiB
  // True when disk_file_bytes was configured: it must then fit in disk_capacity. Unset,
  // the record files are min(1 GiB, disk_capacity) (the server's cap above).
  bool disk_file_bytes_explicit = false;
  Durability durability = Durability::kSync;
  // Verify every record's payload checksum before storing it.
  bool verify_on_put = true;
  // Worker threads that run store operations (gRPC threads never touch disk).
  uint32_t workers = 4;
  // Largest record accepted, bytes (<= disk_file_bytes).
  uint64_t max_record_bytes = 256ull << 20;
  // Bytes of Put records being received at once across all streams (beyond it:
  // RESOURCE_EXHAUSTED).
  uint64_t max_inflight_bytes = 1ull << 30;
  // Bytes of records the store's write-back queue may hold in memory (demotions and
  // copies waiting for the disk; TieredStoreOptions::max_pending_write_bytes). With
  // host.capacity_bytes and max_inflight_bytes it bounds the daemon's memory (docs/daemon.md).
  uint64_t writeback_queue_bytes = 256ull << 20;
  // Data bytes per Get message unless the client asks for less.
  uint32_t get_part_bytes = 4u << 20;
  // Shared-memory fast path.
  bool shm_enabled = true;
  uint64_t shm_max_region_bytes = 1ull << 30;
  uint32_t shm_max_regions = 64;
  // A progressive shm transfer (kvstore/shm_progress.h) whose writer publishes nothing
  // new for this long fails: DeadlineExceeded, nothing stored, the worker freed.
  uint32_t shm_stall_timeout_ms = 2000;
  // The first ShmAttach region id; 0 = random (the default; not in the YAML): tests and
  // the RPC fuzzer set 1 to name regions they attach.
  uint64_t shm_first_region_id = 0;
  // Metrics/health HTTP address "host:port" (port 0 = any free port); "" disables it.
  std::string metrics_listen = "127.0.0.1:9464";
  // True when metrics_listen was configured (metrics.listen, --metrics-listen): a port
  // that is taken is then an error. The default port, when taken (a second kvtierd on the
  // host), leaves the daemon without metrics and /healthz, with a warning.
  bool metrics_listen_explicit = false;
  // Tenants; when non-empty every call must carry a valid token.
  std::vector<TenantConfig> tenants;
  std::string log_level = "info";
  // Written once serving: JSON {"pid", "listen", "metrics_port"} (tests, scripts).
  std::string ready_file;
  // Graceful shutdown: how long in-flight calls may take before they are cancelled.
  std::chrono::milliseconds shutdown_grace{5000};
  // How long the pins of a Lookup with `pin` live when no Get releases them (1 ms .. 10 min).
  std::chrono::milliseconds lease_timeout{10000};
  // Keys whose last reason for not being held (rejected, evicted, expired, erased) is
  // kept for `kvtier inspect` (kvstore/absence_record.h): at most ~100 bytes each; the
  // oldest is forgotten first. 0 = keep none (inspect shows a plain miss).
  uint64_t miss_record_entries = AbsenceRecord::kDefaultEntries;  // 16384
  // A Redis Cluster tier below the disk, shared with every kvtierd that names the same
  // cluster (docs/scale-out.md). Unset = no cluster tier.
  std::optional<ClusterTierOptions> cluster;

  bool auth_enabled() const { return !tenants.empty(); }
  static DiskTierOptions DefaultDiskOptions() {
    DiskTierOptions d;
    d.capacity_bytes = 8ull << 30;
    return d;
  }
  // InvalidArgument naming the field: empty listen/data_dir, non-loopback address
  // without allow_remote, capacities (a configured disk_file_bytes above disk_capacity
  // names both keys), bad limits, duplicate tokens, empty token, negative
  // shutdown_grace, lease_timeout, metrics_listen not "host:port" with port 0..65535.
  // The message reads "config KEY: why"; ConfigErrorKey(status) gives KEY. Pure: touches
  // no file system (see CheckDaemonPaths).
  absl::Status Validate() const;
};

// The YAML key ("disk_capacity", "shm.max_regions", "metrics.listen") an error of
// DaemonConfig::Validate or CheckDaemonPaths is about (a status payload); "" for any other
// status.
std::string ConfigErrorKey(const absl::Status& status);

// Checks the file system before anything starts: the directory of every unix socket in
// `listen` and of `ready_file` exists and is a directory, and `ready_file` is not a
// directory. InvalidArgument naming the key and the path.
absl::Status CheckDaemonPaths(const DaemonConfig& config);

// Defaults: listen = unix://$XDG_RUNTIME_DIR/kvtierd.sock (or /tmp/kvtierd-<uid>.sock),
// data_dir = /var/tmp/kvtierd-<uid>.
DaemonConfig DefaultDaemonConfig();

// Parses YAML text over `base`. InvalidArgument naming the key for a bad value or an
// unknown key. When `keys_set` is given, the keys the text sets are added to it: the
// top-level ones, and those of the shm, metrics, cluster and *_cache_policy maps dotted
// ("shm.enabled").
absl::StatusOr<DaemonConfig> ParseDaemonConfig(const std::string& yaml_text, DaemonConfig base,
                                               std::set<std::string>* keys_set = nullptr);
// Reads and parses a file (keys_set as ParseDaemonConfig's). NotFound when it cannot be
// read; InvalidArgument when it is a directory; parse errors are prefixed with `path`.
absl::StatusOr<DaemonConfig> LoadDaemonConfig(const std::string& path, DaemonConfig base,
                                              std::set<std::string>* keys_set = nullptr);

// Parses the `cluster:` section (keys nodes, piece_bytes, ttl_s, password,
// password_file, username, keyspace, deadline_ms) over defaults. InvalidArgument
// naming the key. Validation of the values is ClusterTierOptions::Validate's.
absl::StatusOr<ClusterTierOptions> ParseClusterConfig(const YAML::Node& node);

// True for a unix: address or a TCP address on loopback.
bool IsLocalAddress(const std::string& address);

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_CONFIG_H_
