#include "daemon/config.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kvstore/absence_record.h"
#include "kvstore/byte_size.h"
#include "kvstore/cache_policy.h"
#include "kvstore/daemon_address.h"
#include "yaml-cpp/yaml.h"

namespace kvt::daemon {

bool IsLocalAddress(const std::string& a) {
  absl::StatusOr<DaemonAddress> parsed = ParseDaemonAddress(a, AddressUse::kListen);
  return parsed.ok() && parsed->is_local();
}

DaemonConfig DefaultDaemonConfig() {
  DaemonConfig c;
  c.listen.push_back(DefaultDaemonAddress());  // the CLI's default daemon too
  c.data_dir = absl::StrFormat("/var/tmp/kvtierd-%d", getuid());
  // The measured per-tier defaults (OpenTieredStore resolves "default" for each tier's
  // place: docs/cache-policy.md).
  c.host.cache_policy.name = "default";
  c.disk.cache_policy.name = "default";
  return c;
}

namespace {

constexpr char kConfigKeyPayload[] = "type.kvtier.dev/config-key";

// InvalidArgument "config KEY: why", carrying KEY for ConfigErrorKey.
absl::Status BadKey(const std::string& key, const std::string& why) {
  absl::Status s = absl::InvalidArgumentError(absl::StrFormat("config %s: %s", key, why));
  s.SetPayload(kConfigKeyPayload, absl::Cord(key));
  return s;
}

}  // namespace

std::string ConfigErrorKey(const absl::Status& status) {
  const auto key = status.GetPayload(kConfigKeyPayload);
  return key ? std::string(*key) : std::string();
}

absl::Status DaemonConfig::Validate() const {
  const auto bad = BadKey;
  if (listen.empty()) return bad("listen", "at least one address is required");
  for (const auto& a : listen) {
    if (a.empty()) return bad("listen", "empty address");
    absl::StatusOr<DaemonAddress> parsed = ParseDaemonAddress(a, AddressUse::kListen);
    if (!parsed.ok()) return bad("listen", std::string(parsed.status().message()));
    if (!allow_remote && !parsed->is_local())
      return bad("listen", absl::StrFormat("'%s' is not a unix socket or loopback address; set "
                                           "allow_remote: true to listen on it",
                                           a));
  }
  if (data_dir.empty()) return bad("data_dir", "must not be empty");
  if (host.capacity_bytes < (1ull << 20)) return bad("host_capacity", "must be at least 1 MiB");
  if (host.capacity_bytes > (4ull << 40))  // the host tier's limit (HostTierOptions)
    return bad("host_capacity", "must be at most 4 TiB");
  if (disk.capacity_bytes == 0 || disk.capacity_bytes % 4096 != 0)
    return bad("disk_capacity", "must be a positive multiple of 4096");
  if (disk.file_bytes == 0 || disk.file_bytes % 4096 != 0)
    return bad("disk_file_bytes", "must be a positive multiple of 4096");
  if (disk_file_bytes_explicit && disk.file_bytes > disk.capacity_bytes)
    return bad("disk_capacity",
               absl::StrFormat("%d bytes is smaller than disk_file_bytes (%d bytes), the size of "
                               "one record file; raise disk_capacity to at least disk_file_bytes "
                               "or lower disk_file_bytes",
                               disk.capacity_bytes, disk.file_bytes));
  if (disk.commit != DiskCommit::kEachPut && disk.commit != DiskCommit::kGrouped)
    return bad("disk_commit", "expected each_put|grouped");
  if (disk.commit_delay_ms < 1 || disk.commit_delay_ms > 60000)
    return bad("disk_commit_delay_ms",
               absl::StrFormat("%d, expected 1..60000", disk.commit_delay_ms));
  if (disk.commit == DiskCommit::kGrouped && durability == Durability::kSync)
    return bad("disk_commit",
               "'grouped' acknowledges a disk put before its commit, but durability: sync (the "
               "default) "
               "acknowledges a put only once it is durable; use disk_commit: each_put, or "
               "durability: async");
  if (workers < 1 || workers > 256)
    return bad("workers", absl::StrFormat("%d, expected 1..256", workers));
  if (max_record_bytes < 4096 || max_record_bytes > disk.file_bytes ||
      max_record_bytes > (1ull << 30))
    return bad("max_record_bytes", "expected 4 KiB .. min(disk_file_bytes, 1 GiB)");
  if (max_inflight_bytes < max_record_bytes)
    return bad("max_inflight_bytes", "must be at least max_record_bytes");
  if (writeback_queue_bytes < max_record_bytes)
    return bad("writeback_queue_bytes",
               absl::StrFormat("%d, must be at least max_record_bytes (%d)", writeback_queue_bytes,
                               max_record_bytes));
  if (get_part_bytes < 4096 || get_part_bytes > (8u << 20))
    return bad("get_part_bytes", absl::StrFormat("%d, expected 4 KiB .. 8 MiB", get_part_bytes));
  if (shm_max_region_bytes < (1ull << 20) || shm_max_region_bytes > (4ull << 30))
    return bad("shm.max_region_bytes", "expected 1 MiB .. 4 GiB");
  if (shm_max_regions < 1 || shm_max_regions > 4096)
    return bad("shm.max_regions", "expected 1..4096");
  if (shm_stall_timeout_ms < 1 || shm_stall_timeout_ms > 600000)
    return bad("shm.stall_timeout_ms", "expected 1..600000");
  std::set<std::string> tokens, names;
  for (const auto& t : tenants) {
    if (!names.insert(t.name).second)
      return bad("tenants", absl::StrFormat("duplicate tenant '%s'", t.name));
    if (t.tokens.empty())
      return bad("tenants", absl::StrFormat("tenant '%s' has no token", t.name));
    for (const auto& tok : t.tokens) {
      if (tok.size() < 8)
        return bad("tenants",
                   absl::StrFormat("a token of tenant '%s' is shorter than 8 characters", t.name));
      if (!tokens.insert(tok).second) return bad("tenants", "the same token is listed twice");
    }
  }
  static const std::set<std::string> kLevels = {"trace", "debug", "info", "warn", "error", "off"};
  if (!kLevels.count(log_level))
    return bad("log_level", "expected trace|debug|info|warn|error|off");
  if (shutdown_grace.count() < 0)
    return bad("shutdown_grace_ms", absl::StrFormat("%d, expected >= 0", shutdown_grace.count()));
  if (lease_timeout.count() < 1 || lease_timeout > std::chrono::minutes(10))
    return bad("lease_timeout_ms",
               absl::StrFormat("%d, expected 1..600000", lease_timeout.count()));
  if (miss_record_entries > AbsenceRecord::kMaxEntries)
    return bad("miss_record_entries", absl::StrFormat("%d, expected 0..%d", miss_record_entries,
                                                      AbsenceRecord::kMaxEntries));
  if (cluster) {
    if (absl::Status s = cluster->Validate(); !s.ok()) {
      absl::Status out = absl::InvalidArgumentError("config " + std::string(s.message()));
      out.SetPayload(kConfigKeyPayload, absl::Cord("cluster"));
      return out;
    }
    if (cluster->max_record_bytes < max_record_bytes)
      return bad("cluster", "max_record_bytes is below the daemon's max_record_bytes");
  }
  for (auto [key, policy] : {std::pair{"host_cache_policy", &host.cache_policy},
                             std::pair{"disk_cache_policy", &disk.cache_policy}}) {
    if (absl::Status s = policy->Validate(); !s.ok()) return bad(key, std::string(s.message()));
  }
  if (!metrics_listen.empty()) {
    absl::StatusOr<DaemonAddress> parsed = ParseHostPort(metrics_listen, AddressUse::kListen);
    if (!parsed.ok())
      return bad("metrics.listen", absl::StrCat(parsed.status().message(),
                                                "; port 0 = any free port, '' disables it"));
  }
  return absl::OkStatus();
}

namespace {

// ENOENT / ENOTDIR for the directory that must hold `path`, naming `what`.
absl::Status CheckParentDir(const std::string& what, const std::string& path) {
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  const auto st = std::filesystem::status(dir, ec);
  if (!std::filesystem::exists(st))
    return BadKey(what, absl::StrFormat("'%s': directory '%s' does not exist", path, dir.string()));
  if (!std::filesystem::is_directory(st))
    return BadKey(what, absl::StrFormat("'%s': '%s' is not a directory", path, dir.string()));
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckDaemonPaths(const DaemonConfig& c) {
  for (const auto& a : c.listen) {
    absl::StatusOr<DaemonAddress> parsed = ParseDaemonAddress(a, AddressUse::kListen);
    if (!parsed.ok() || parsed->kind != DaemonAddress::Kind::kUnix) continue;  // Validate's
    if (auto s = CheckParentDir("listen", parsed->unix_path); !s.ok()) return s;
  }
  if (!c.ready_file.empty()) {
    if (auto s = CheckParentDir("ready_file", c.ready_file); !s.ok()) return s;
    std::error_code ec;
    if (std::filesystem::is_directory(c.ready_file, ec))
      return BadKey("ready_file", absl::StrFormat("'%s' is a directory", c.ready_file));
  }
  return absl::OkStatus();
}

namespace {

absl::Status CheckKeys(const YAML::Node& node, const std::string& where,
                       const std::set<std::string>& allowed) {
  if (!node.IsMap())
    return absl::InvalidArgumentError(absl::StrFormat("config %s: expected a mapping", where));
  std::set<std::string> seen;
  for (const auto& kv : node) {
    std::string k = kv.first.as<std::string>();
    // yaml-cpp keeps every duplicate and a lookup returns the first: a value appended
    // at the end of a file to override an earlier one would be ignored without a word.
    if (!seen.insert(k).second) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "config %s: key '%s' is given twice (keep one; a later value does not override)", where,
          k));
    }
    if (k == "catalog_max_keys" && !allowed.count(k)) {  // an upgrade from an older kvtierd
      return absl::InvalidArgumentError(absl::StrFormat(
          "config %s: key 'catalog_max_keys' was removed (kvtierd no longer keeps a bounded "
          "key catalog: a chunk's tenant is read from the tiers, docs/daemon.md); delete it",
          where));
    }
    if (!allowed.count(k))
      return absl::InvalidArgumentError(absl::StrFormat("config %s: unknown key '%s'", where, k));
  }
  return absl::OkStatus();
}

// Reads node as T; InvalidArgument "config <key>: bad value '<text>', expected <what>".
template <typename T>
absl::Status Get(const YAML::Node& node, const std::string& key, const char* what, T* out) {
  try {
    *out = node.as<T>();
    return absl::OkStatus();
  } catch (const YAML::Exception&) {
    std::string text = node.IsScalar() ? node.Scalar() : std::string("(not a scalar)");
    return absl::InvalidArgumentError(
        absl::StrFormat("config %s: bad value '%s', expected %s", key, text, what));
  }
}

// host_cache_policy / disk_cache_policy: {name, ttl_s, declines_first_seen} into *out.
absl::Status ParseCachePolicy(const YAML::Node& node, const std::string& where,
                              CachePolicyOptions* out) {
  if (auto s = CheckKeys(node, where, {"name", "ttl_s", "declines_first_seen"}); !s.ok()) return s;
  if (node["name"]) {
    std::string name;
    if (auto s = Get(node["name"], where + ".name", "a policy name", &name); !s.ok()) return s;
    CachePolicyOptions probe;
    probe.name = name;
    if (name.empty() || !probe.Validate().ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("config %s.name: '%s' is not a cache policy (expected one of: %s)", where,
                          name, absl::StrJoin(CachePolicyNames(), ", ")));
    }
    out->name = name;
  }
  if (node["ttl_s"]) {
    int64_t ttl = 0;
    if (auto s = Get(node["ttl_s"], where + ".ttl_s", "seconds >= 0 (0 = no TTL)", &ttl); !s.ok())
      return s;
    if (ttl < 0 || ttl > 365ll * 86400)
      return absl::InvalidArgumentError(absl::StrFormat(
          "config %s.ttl_s: %d, expected 0..31536000 seconds (0 = no TTL)", where, ttl));
    out->ttl = std::chrono::seconds(ttl);
  }
  if (node["declines_first_seen"]) {
    if (auto s = Get(node["declines_first_seen"], where + ".declines_first_seen", "true|false",
                     &out->adaptive_declines_first_seen);
        !s.ok())
      return s;
    if (out->name != kDefaultCachePolicy)
      return absl::InvalidArgumentError(absl::StrFormat(
          "config %s.declines_first_seen: applies only to name: adaptive (name: default "
          "decides it by the tier's place); set name: adaptive or remove it",
          where));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DaemonConfig> ParseDaemonConfig(const std::string& yaml_text, DaemonConfig c,
                                               std::set<std::string>* keys_set) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("config: YAML parse error: %s", e.what()));
  }
  if (root.IsNull()) return c;
  try {
    if (auto s = CheckKeys(root, "(top level)",
                           {"listen",
                            "allow_remote",
                            "data_dir",
                            "host_capacity",
                            "disk_capacity",
                            "disk_file_bytes",
                            "disk_direct_io",
                            "disk_commit",
                            "disk_commit_delay_ms",
                            "durability",
                            "verify_on_put",
                            "workers",
                            "max_record_bytes",
                            "max_inflight_bytes",
                            "writeback_queue_bytes",
                            "get_part_bytes",
                            "shm",
                            "metrics",
                            "tenants",
                            "log_level",
                            "ready_file",
                            "shutdown_grace_ms",
                            "lease_timeout_ms",
                            "miss_record_entries",
                            "host_cache_policy",
                            "disk_cache_policy",
                            "cluster"});
        !s.ok())
      return s;
    if (keys_set != nullptr) {
      for (const auto& kv : root) {
        const std::string k = kv.first.as<std::string>();
        keys_set->insert(k);
        if (kv.second.IsMap())
          for (const auto& sub : kv.second) keys_set->insert(k + "." + sub.first.as<std::string>());
      }
    }
    auto bytes = [&](const char* key, uint64_t* out) -> absl::Status {
      if (!root[key]) return absl::OkStatus();
      auto v = ::kvt::ParseByteSize(root[key].as<std::string>());
      if (!v.ok())
        return absl::InvalidArgumentError(
            absl::StrFormat("config %s: %s", key, v.status().message()));
      *out = *v;
      return absl::OkStatus();
    };
    if (root["listen"]) {
      c.listen.clear();
      if (root["listen"].IsSequence()) {
        for (const auto& a : root["listen"]) c.listen.push_back(a.as<std::string>());
      } else {
        c.listen.push_back(root["listen"].as<std::string>());
      }
    }
    if (root["allow_remote"])
      if (auto s = Get(root["allow_remote"], "allow_remote", "true|false", &c.allow_remote);
          !s.ok())
        return s;
    if (root["data_dir"]) c.data_dir = root["data_dir"].as<std::string>();
    for (auto [key, out] : {std::pair{"host_capacity", &c.host.capacity_bytes},
                            std::pair{"disk_capacity", &c.disk.capacity_bytes},
                            std::pair{"disk_file_bytes", &c.disk.file_bytes},
                            std::pair{"max_record_bytes", &c.max_record_bytes},
                            std::pair{"max_inflight_bytes", &c.max_inflight_bytes},
                            std::pair{"writeback_queue_bytes", &c.writeback_queue_bytes}}) {
      if (auto s = bytes(key, out); !s.ok()) return s;
    }
    if (root["disk_file_bytes"]) c.disk_file_bytes_explicit = true;
    if (root["get_part_bytes"]) {
      uint64_t v = c.get_part_bytes;
      if (auto s = bytes("get_part_bytes", &v); !s.ok()) return s;
      if (v > (8u << 20)) return absl::InvalidArgumentError("config get_part_bytes: at most 8 MiB");
      c.get_part_bytes = static_cast<uint32_t>(v);
    }
    if (root["disk_direct_io"])
      if (auto s = Get(root["disk_direct_io"], "disk_direct_io", "true|false", &c.disk.direct_io);
          !s.ok())
        return s;
    if (root["disk_commit"]) {
      const std::string d = root["disk_commit"].as<std::string>();
      if (d == "each_put")
        c.disk.commit = DiskCommit::kEachPut;
      else if (d == "grouped")
        c.disk.commit = DiskCommit::kGrouped;
      else
        return absl::InvalidArgumentError(
            absl::StrFormat("config disk_commit: '%s', expected each_put|grouped", d));
    }
    if (root["disk_commit_delay_ms"]) {
      int64_t ms = 0;
      if (auto s = Get(root["disk_commit_delay_ms"], "disk_commit_delay_ms",
                       "milliseconds 1..60000", &ms);
          !s.ok())
        return s;
      if (ms < 1 || ms > 60000)
        return absl::InvalidArgumentError(
            absl::StrFormat("config disk_commit_delay_ms: %d, expected 1..60000", ms));
      c.disk.commit_delay_ms = static_cast<uint32_t>(ms);
      if (c.disk.commit != DiskCommit::kGrouped)
        return absl::InvalidArgumentError(
            "config disk_commit_delay_ms: applies only with disk_commit: grouped (each_put "
            "commits every put at once); remove it or set disk_commit: grouped");
    }
    if (root["durability"]) {
      std::string d = root["durability"].as<std::string>();
      if (d == "sync")
        c.durability = Durability::kSync;
      else if (d == "async")
        c.durability = Durability::kAsync;
      else
        return absl::InvalidArgumentError(
            absl::StrFormat("config durability: '%s', expected sync|async", d));
    }
    if (root["verify_on_put"])
      if (auto s = Get(root["verify_on_put"], "verify_on_put", "true|false", &c.verify_on_put);
          !s.ok())
        return s;
    if (root["workers"])
      if (auto s = Get(root["workers"], "workers", "an integer 1..256", &c.workers); !s.ok())
        return s;
    if (root["log_level"]) c.log_level = root["log_level"].as<std::string>();
    if (root["ready_file"]) c.ready_file = root["ready_file"].as<std::string>();
    if (root["shutdown_grace_ms"]) {
      int64_t ms = 0;
      if (auto s = Get(root["shutdown_grace_ms"], "shutdown_grace_ms", "milliseconds >= 0", &ms);
          !s.ok())
        return s;
      c.shutdown_grace = std::chrono::milliseconds(ms);
    }
    if (root["lease_timeout_ms"]) {
      int64_t ms = 0;
      if (auto s = Get(root["lease_timeout_ms"], "lease_timeout_ms", "milliseconds 1..600000", &ms);
          !s.ok())
        return s;
      c.lease_timeout = std::chrono::milliseconds(ms);
    }
    if (root["miss_record_entries"]) {
      if (auto s = Get(root["miss_record_entries"], "miss_record_entries",
                       "a count of keys 0..16777216", &c.miss_record_entries);
          !s.ok())
        return s;
    }
    if (const auto shm = root["shm"]) {
      if (auto s = CheckKeys(shm, "shm",
                             {"enabled", "max_region_bytes", "max_regions", "stall_timeout_ms"});
          !s.ok())
        return s;
      if (shm["enabled"])
        if (auto s = Get(shm["enabled"], "shm.enabled", "true|false", &c.shm_enabled); !s.ok())
          return s;
      if (shm["max_region_bytes"]) {
        auto v = ::kvt::ParseByteSize(shm["max_region_bytes"].as<std::string>());
        if (!v.ok())
          return absl::InvalidArgumentError("config shm.max_region_bytes: " +
                                            std::string(v.status().message()));
        c.shm_max_region_bytes = *v;
      }
      if (shm["max_regions"])
        if (auto s = Get(shm["max_regions"], "shm.max_regions", "an integer 1..4096",
                         &c.shm_max_regions);
            !s.ok())
          return s;
      if (shm["stall_timeout_ms"])
        if (auto s = Get(shm["stall_timeout_ms"], "shm.stall_timeout_ms", "an integer 1..600000",
                         &c.shm_stall_timeout_ms);
            !s.ok())
          return s;
    }
    if (const auto p = root["host_cache_policy"])
      if (auto s = ParseCachePolicy(p, "host_cache_policy", &c.host.cache_policy); !s.ok())
        return s;
    if (const auto p = root["disk_cache_policy"])
      if (auto s = ParseCachePolicy(p, "disk_cache_policy", &c.disk.cache_policy); !s.ok())
        return s;
    if (const auto m = root["metrics"]) {
      if (auto s = CheckKeys(m, "metrics", {"listen"}); !s.ok()) return s;
      if (m["listen"]) {
        c.metrics_listen = m["listen"].as<std::string>();
        c.metrics_listen_explicit = true;
      }
    }
    if (const auto cl = root["cluster"]) {
      auto co = ParseClusterConfig(cl);
      if (!co.ok()) return co.status();
      co->max_record_bytes = std::max(co->max_record_bytes, c.max_record_bytes);
      c.cluster = std::move(*co);
    }
    if (const auto t = root["tenants"]) {
      if (!t.IsSequence()) return absl::InvalidArgumentError("config tenants: expected a list");
      c.tenants.clear();
      for (const auto& e : t) {
        if (auto s = CheckKeys(e, "tenants[]", {"name", "tokens", "token_files"}); !s.ok())
          return s;
        TenantConfig tc;
        if (!e["name"]) return absl::InvalidArgumentError("config tenants[]: 'name' is required");
        tc.name = e["name"].as<std::string>();
        if (e["tokens"])
          for (const auto& tok : e["tokens"]) tc.tokens.push_back(tok.as<std::string>());
        if (e["token_files"]) {
          for (const auto& f : e["token_files"]) {
            std::ifstream in(f.as<std::string>());
            if (!in)
              return absl::NotFoundError(
                  absl::StrFormat("config tenants[%s].token_files: cannot read '%s'", tc.name,
                                  f.as<std::string>()));
            std::string line;
            while (std::getline(in, line)) {
              line = std::string(absl::StripAsciiWhitespace(line));
              if (!line.empty() && line[0] != '#') tc.tokens.push_back(line);
            }
          }
        }
        c.tenants.push_back(std::move(tc));
      }
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("config: bad value: %s", e.what()));
  }
  return c;
}

absl::StatusOr<ClusterTierOptions> ParseClusterConfig(const YAML::Node& cl) {
  ClusterTierOptions o;
  try {
    if (auto s = CheckKeys(cl, "cluster",
                           {"nodes", "piece_bytes", "ttl_s", "password", "password_file",
                            "username", "keyspace", "deadline_ms"});
        !s.ok())
      return s;
    if (!cl["nodes"])
      return absl::InvalidArgumentError("config cluster.nodes: required (a list of host:port)");
    if (cl["nodes"].IsSequence()) {
      for (const auto& n : cl["nodes"]) o.client.nodes.push_back(n.as<std::string>());
    } else {
      o.client.nodes.push_back(cl["nodes"].as<std::string>());
    }
    if (cl["piece_bytes"]) {
      auto v = ParseByteSize(cl["piece_bytes"].as<std::string>());
      if (!v.ok())
        return absl::InvalidArgumentError("config cluster.piece_bytes: " +
                                          std::string(v.status().message()));
      o.piece_bytes = *v;
    }
    if (cl["ttl_s"])
      if (auto s = Get(cl["ttl_s"], "cluster.ttl_s", "seconds >= 0 (0 = no expiry)", &o.ttl_s);
          !s.ok())
        return s;
    if (cl["password"]) o.client.password = cl["password"].as<std::string>();
    if (cl["password_file"]) {
      const std::string f = cl["password_file"].as<std::string>();
      std::ifstream in(f);
      if (!in)
        return absl::InvalidArgumentError(
            absl::StrFormat("config cluster.password_file: cannot read '%s'", f));
      std::getline(in, o.client.password);
      o.client.password = std::string(absl::StripAsciiWhitespace(o.client.password));
    }
    if (cl["username"]) o.client.username = cl["username"].as<std::string>();
    if (cl["keyspace"]) o.keyspace = cl["keyspace"].as<std::string>();
    if (cl["deadline_ms"]) {
      int64_t ms = 0;
      if (auto s = Get(cl["deadline_ms"], "cluster.deadline_ms", "milliseconds > 0", &ms); !s.ok())
        return s;
      o.client.deadline = std::chrono::milliseconds(ms);
    }
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrFormat("config cluster: bad value: %s", e.what()));
  }
  return o;
}

absl::StatusOr<DaemonConfig> LoadDaemonConfig(const std::string& path, DaemonConfig base,
                                              std::set<std::string>* keys_set) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return absl::InvalidArgumentError(
        absl::StrFormat("config '%s' is a directory, expected a YAML file", path));
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrFormat("config file '%s' cannot be read", path));
  std::stringstream ss;
  ss << in.rdbuf();
  auto c = ParseDaemonConfig(ss.str(), std::move(base), keys_set);
  if (!c.ok())
    return absl::Status(c.status().code(), absl::StrFormat("%s: %s", path, c.status().message()));
  return c;
}

}  // namespace kvt::daemon
