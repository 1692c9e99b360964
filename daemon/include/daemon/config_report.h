// Where each kvtierd setting came from (a command-line flag, the YAML file or the
// default), used to word config errors by their source and to print the effective
// settings (`kvtierd --check-config`, docs/daemon.md).
#ifndef KVT_DAEMON_CONFIG_REPORT_H_
#define KVT_DAEMON_CONFIG_REPORT_H_

#include <map>
#include <set>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "daemon/config.h"

namespace kvt::daemon {

// Not thread-safe (a plain value filled while the command line is read).
struct ConfigOrigin {
  std::string file;                              // the YAML file ("" = none)
  std::set<std::string> file_keys;               // keys it sets (ParseDaemonConfig's keys_set)
  std::map<std::string, std::string> flag_keys;  // key → the flag that set it ("--workers")

  // The flag that set `key` (flags override the file), else "" .
  std::string FlagOf(std::string_view key) const;
  // True when the file sets `key` or a map above it ("cluster" for "cluster.nodes").
  bool InFile(std::string_view key) const;
};

// Rewords an error of DaemonConfig::Validate or CheckDaemonPaths ("config KEY: why") by
// where KEY's value came from:
//   a flag:      "--workers: 0, expected 1..256"
//   the file:    "/etc/kvtierd.yaml: config workers: 0, expected 1..256"
//   a default:   "config max_record_bytes (default value): why"
// Keeps the code; a status without a key (ConfigErrorKey) is returned unchanged.
absl::Status AttributeConfigError(const absl::Status& status, const ConfigOrigin& origin);

// The effective settings as YAML in the config file's keys (docs/daemon.md), each line
// commented with its source ("# --listen", "# /etc/kvtierd.yaml", "# default"). Sizes are
// written in the largest binary unit that divides them ("8GiB"). Secrets are left out:
// tenants show their names and token counts, the cluster its nodes but no password.
std::string EffectiveConfigYaml(const DaemonConfig& config, const ConfigOrigin& origin);

}  // namespace kvt::daemon

#endif  // KVT_DAEMON_CONFIG_REPORT_H_
