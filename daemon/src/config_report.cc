#include "daemon/config_report.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kvstore/cache_policy.h"
#include "yaml-cpp/yaml.h"

namespace kvt::daemon {

std::string ConfigOrigin::FlagOf(std::string_view key) const {
  auto it = flag_keys.find(std::string(key));
  return it == flag_keys.end() ? std::string() : it->second;
}

bool ConfigOrigin::InFile(std::string_view key) const {
  if (file.empty()) return false;
  for (std::string k(key);;) {
    if (file_keys.count(k)) return true;
    const size_t dot = k.rfind('.');
    if (dot == std::string::npos) return false;
    k.resize(dot);
  }
}

absl::Status AttributeConfigError(const absl::Status& status, const ConfigOrigin& origin) {
  const std::string key = ConfigErrorKey(status);
  if (key.empty()) return status;
  std::string why(status.message());
  const std::string prefix = absl::StrCat("config ", key, ": ");
  if (absl::StartsWith(why, prefix)) why = why.substr(prefix.size());
  std::string text;
  if (const std::string flag = origin.FlagOf(key); !flag.empty())
    text = absl::StrCat(flag, ": ", why);
  else if (origin.InFile(key))
    text = absl::StrCat(origin.file, ": config ", key, ": ", why);
  else
    text = absl::StrCat("config ", key, " (default value): ", why);
  return absl::Status(status.code(), text);
}

namespace {

// "8GiB", "512MiB", "4KiB" or "1000" (bytes), as ParseByteSize reads them back.
std::string Bytes(uint64_t v) {
  static const struct {
    int shift;
    const char* unit;
  } kUnits[] = {{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}};
  for (const auto& u : kUnits) {
    const uint64_t one = 1ull << u.shift;
    if (v != 0 && v % one == 0) return absl::StrCat(v / one, u.unit);
  }
  return absl::StrCat(v);
}

// Emits `key: value  # source` lines; `path` is the dotted key the source is looked up by.
class Writer {
 public:
  explicit Writer(const ConfigOrigin& origin) : origin_(origin) {}

  template <typename T>
  void Put(const std::string& key, const T& value, const std::string& path = "") {
    out_ << YAML::Key << key << YAML::Value << value
         << YAML::Comment(Source(path.empty() ? key : path));
  }
  void PutList(const std::string& key, const std::vector<std::string>& values,
               const std::string& path = "") {
    out_ << YAML::Key << key << YAML::Value << YAML::Flow << values
         << YAML::Comment(Source(path.empty() ? key : path));
  }
  void Begin(const std::string& key) { out_ << YAML::Key << key << YAML::Value << YAML::BeginMap; }
  void End() { out_ << YAML::EndMap; }
  YAML::Emitter& out() { return out_; }

  std::string Source(const std::string& key) const {
    if (const std::string flag = origin_.FlagOf(key); !flag.empty()) return flag;
    if (origin_.InFile(key)) return origin_.file;
    return "default";
  }

 private:
  const ConfigOrigin& origin_;
  YAML::Emitter out_;
};

void PutPolicy(Writer& w, const std::string& key, const CachePolicyOptions& p) {
  w.Begin(key);
  w.Put("name", p.name, key + ".name");
  w.Put("ttl_s", static_cast<int64_t>(p.ttl.count()), key + ".ttl_s");
  if (p.name == kDefaultCachePolicy)
    w.Put("declines_first_seen", p.adaptive_declines_first_seen, key + ".declines_first_seen");
  w.End();
}

}  // namespace

std::string EffectiveConfigYaml(const DaemonConfig& c, const ConfigOrigin& origin) {
  Writer w(origin);
  w.out() << YAML::BeginMap;
  w.PutList("listen", c.listen);
  w.Put("allow_remote", c.allow_remote);
  w.Put("data_dir", c.data_dir);
  w.Put("host_capacity", Bytes(c.host.capacity_bytes));
  w.Put("disk_capacity", Bytes(c.disk.capacity_bytes));
  // Unset, the server caps the record files at disk_capacity (config.h): show what it uses.
  w.Put("disk_file_bytes", Bytes(std::min(c.disk.file_bytes, c.disk.capacity_bytes)));
  w.Put("disk_direct_io", c.disk.direct_io);
  w.Put("disk_commit", std::string(c.disk.commit == DiskCommit::kGrouped ? "grouped" : "each_put"));
  if (c.disk.commit == DiskCommit::kGrouped)  // the file may give it only with grouped
    w.Put("disk_commit_delay_ms", c.disk.commit_delay_ms);
  w.Put("durability", std::string(c.durability == Durability::kAsync ? "async" : "sync"));
  w.Put("verify_on_put", c.verify_on_put);
  w.Put("workers", c.workers);
  w.Put("max_record_bytes", Bytes(c.max_record_bytes));
  w.Put("max_inflight_bytes", Bytes(c.max_inflight_bytes));
  w.Put("writeback_queue_bytes", Bytes(c.writeback_queue_bytes));
  w.Put("get_part_bytes", Bytes(c.get_part_bytes));
  w.Begin("shm");
  w.Put("enabled", c.shm_enabled, "shm.enabled");
  w.Put("max_region_bytes", Bytes(c.shm_max_region_bytes), "shm.max_region_bytes");
  w.Put("max_regions", c.shm_max_regions, "shm.max_regions");
  w.Put("stall_timeout_ms", c.shm_stall_timeout_ms, "shm.stall_timeout_ms");
  w.End();
  w.Begin("metrics");
  w.Put("listen", c.metrics_listen, "metrics.listen");
  w.End();
  w.Put("log_level", c.log_level);
  w.Put("ready_file", c.ready_file);
  w.Put("shutdown_grace_ms", static_cast<int64_t>(c.shutdown_grace.count()));
  w.Put("lease_timeout_ms", static_cast<int64_t>(c.lease_timeout.count()));
  PutPolicy(w, "host_cache_policy", c.host.cache_policy);
  PutPolicy(w, "disk_cache_policy", c.disk.cache_policy);
  if (!c.tenants.empty()) {
    w.out() << YAML::Key << "tenants" << YAML::Value << YAML::Comment(w.Source("tenants"))
            << YAML::BeginSeq;
    for (const TenantConfig& t : c.tenants) {
      w.out() << YAML::BeginMap << YAML::Key << "name" << YAML::Value << t.name
              << YAML::Comment(absl::StrFormat("%d token(s), not shown", t.tokens.size()))
              << YAML::EndMap;
    }
    w.out() << YAML::EndSeq;
  }
  if (c.cluster) {
    const ClusterTierOptions& cl = *c.cluster;
    w.Begin("cluster");
    w.PutList("nodes", cl.client.nodes, "cluster.nodes");
    w.Put("keyspace", cl.keyspace, "cluster.keyspace");
    w.Put("piece_bytes", Bytes(cl.piece_bytes), "cluster.piece_bytes");
    w.Put("ttl_s", cl.ttl_s, "cluster.ttl_s");
    w.Put("deadline_ms", static_cast<int64_t>(cl.client.deadline.count()), "cluster.deadline_ms");
    if (!cl.client.username.empty()) w.Put("username", cl.client.username, "cluster.username");
    if (!cl.client.password.empty()) w.out() << YAML::Comment("password: set, not shown");
    w.End();
  }
  w.out() << YAML::EndMap;
  return std::string(w.out().c_str()) + "\n";
}

}  // namespace kvt::daemon
