// kvtierd config parsing and validation (no daemon process; the metrics-port tests start
// a KvtierServer in this process).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "absl/strings/str_format.h"
#include "daemon/config.h"
#include "daemon/config_report.h"
#include "daemon/server.h"

namespace kvt::daemon {
namespace {

TEST(DaemonConfigTest, ParsesEveryFieldOverDefaults) {
  auto c = ParseDaemonConfig(
      "listen: [unix:///tmp/a.sock, 127.0.0.1:7470]\ndata_dir: /tmp/d\nhost_capacity: 2GiB\n"
      "disk_capacity: 8GiB\ndurability: async\nworkers: 8\nshm:\n  enabled: false\n"
      "metrics:\n  listen: 127.0.0.1:0\ntenants:\n  - name: alice\n    tokens: [abcdefgh1]\n",
      DefaultDaemonConfig());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->listen.size(), 2u);
  EXPECT_EQ(c->host.capacity_bytes, 2ull << 30);
  EXPECT_EQ(c->disk.capacity_bytes, 8ull << 30);
  EXPECT_EQ(c->durability, Durability::kAsync);
  EXPECT_EQ(c->workers, 8u);
  EXPECT_FALSE(c->shm_enabled);
  EXPECT_EQ(c->metrics_listen, "127.0.0.1:0");
  ASSERT_EQ(c->tenants.size(), 1u);
  EXPECT_TRUE(c->auth_enabled());
  EXPECT_TRUE(c->Validate().ok()) << c->Validate();
}

// The tier keys land in the embedded HostTierOptions/DiskTierOptions; the rest of those
// structs keeps the tiers' own defaults.
TEST(DaemonConfigTest, TierKeysFillTheTiersOwnOptions) {
  const DaemonConfig d = DefaultDaemonConfig();
  EXPECT_EQ(d.host.capacity_bytes, 1ull << 30);
  EXPECT_EQ(d.disk.capacity_bytes, 8ull << 30);
  EXPECT_EQ(d.disk.file_bytes, 1ull << 30);
  EXPECT_TRUE(d.disk.direct_io);
  auto c = ParseDaemonConfig(
      "disk_file_bytes: 64MiB\ndisk_direct_io: false\nmax_record_bytes: 64MiB\n", d);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->disk.file_bytes, 64ull << 20);
  EXPECT_FALSE(c->disk.direct_io);
  EXPECT_EQ(c->disk.queue_depth, DiskTierOptions().queue_depth);
  EXPECT_EQ(c->host.alignment, HostTierOptions().alignment);
  EXPECT_TRUE(c->Validate().ok()) << c->Validate();
}

// disk_commit / disk_commit_delay_ms → DiskTierOptions::commit / commit_delay_ms; grouped
// commit acknowledges before the commit, so durability: sync refuses it.
TEST(DaemonConfigTest, DiskCommitKeys) {
  const DaemonConfig d = DefaultDaemonConfig();
  EXPECT_EQ(d.disk.commit, DiskCommit::kEachPut);
  auto c =
      ParseDaemonConfig("durability: async\ndisk_commit: grouped\ndisk_commit_delay_ms: 25\n", d);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->disk.commit, DiskCommit::kGrouped);
  EXPECT_EQ(c->disk.commit_delay_ms, 25u);
  EXPECT_TRUE(c->Validate().ok()) << c->Validate();
  auto each = ParseDaemonConfig("disk_commit: each_put\n", d);
  ASSERT_TRUE(each.ok()) << each.status();
  EXPECT_EQ(each->disk.commit, DiskCommit::kEachPut);
  EXPECT_EQ(each->disk.commit_delay_ms, DiskTierOptions().commit_delay_ms);

  auto bad = ParseDaemonConfig("disk_commit: lazy\n", d);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("disk_commit"), std::string::npos);
  EXPECT_NE(bad.status().message().find("'lazy'"), std::string::npos);
  for (const char* v : {"0", "60001", "-3"}) {
    auto r = ParseDaemonConfig(std::string("disk_commit_delay_ms: ") + v + "\n", d);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << v;
    EXPECT_NE(r.status().message().find("disk_commit_delay_ms"), std::string::npos) << v;
  }
  // A delay without grouped commit would be silently ignored: refused, naming both keys.
  auto alone = ParseDaemonConfig("disk_commit_delay_ms: 25\n", d);
  EXPECT_EQ(alone.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(alone.status().message().find("disk_commit_delay_ms"), std::string::npos);
  EXPECT_NE(alone.status().message().find("disk_commit: grouped"), std::string::npos);
  auto word = ParseDaemonConfig("disk_commit_delay_ms: soon\n", d);
  EXPECT_NE(word.status().message().find("bad value 'soon'"), std::string::npos) << word.status();

  // Parses (the flags may still change durability), but Validate refuses sync + grouped.
  auto sync = ParseDaemonConfig("durability: sync\ndisk_commit: grouped\n", d);
  ASSERT_TRUE(sync.ok()) << sync.status();
  const absl::Status v = sync->Validate();
  EXPECT_EQ(v.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(v.message().find("disk_commit"), std::string::npos) << v;
  EXPECT_NE(v.message().find("durability: sync"), std::string::npos) << v;
  DaemonConfig direct = DefaultDaemonConfig();
  direct.disk.commit_delay_ms = 0;
  EXPECT_NE(direct.Validate().message().find("disk_commit_delay_ms"), std::string::npos);
}

TEST(DaemonConfigTest, UnknownKeysAndBadValuesNameTheKey) {
  auto unknown = ParseDaemonConfig("host_capacty: 1GiB\n", DefaultDaemonConfig());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("host_capacty"), std::string::npos);
  auto bad_size = ParseDaemonConfig("disk_capacity: lots\n", DefaultDaemonConfig());
  EXPECT_EQ(bad_size.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_size.status().message().find("disk_capacity"), std::string::npos);
  auto bad_dur = ParseDaemonConfig("durability: maybe\n", DefaultDaemonConfig());
  EXPECT_NE(bad_dur.status().message().find("durability"), std::string::npos);
}

// host_cache_policy / disk_cache_policy land in the tiers' CachePolicyOptions; unset,
// the names are "default" and the store factory gives each tier its measured default.
TEST(DaemonConfigTest, CachePolicyKeysFillTheTiersPolicies) {
  const DaemonConfig d = DefaultDaemonConfig();
  EXPECT_EQ(d.host.cache_policy.name, "default");
  EXPECT_EQ(d.disk.cache_policy.name, "default");
  auto c = ParseDaemonConfig(
      "host_cache_policy:\n  name: arc\n  ttl_s: 600\n"
      "disk_cache_policy:\n  name: adaptive\n  declines_first_seen: false\n",
      d);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host.cache_policy.name, "arc");
  EXPECT_EQ(c->host.cache_policy.ttl, std::chrono::seconds(600));
  EXPECT_EQ(c->disk.cache_policy.name, "adaptive");
  EXPECT_FALSE(c->disk.cache_policy.adaptive_declines_first_seen);
  EXPECT_EQ(c->disk.cache_policy.ttl, std::chrono::seconds(0));
  EXPECT_TRUE(c->Validate().ok()) << c->Validate();
}

TEST(DaemonConfigTest, BadCachePolicyValuesNameTheKey) {
  struct Case {
    const char* yaml;
    const char* key;    // named in the message
    const char* value;  // named in the message
  };
  for (const Case& k : {
           Case{"host_cache_policy:\n  name: mru\n", "host_cache_policy.name", "mru"},
           Case{"disk_cache_policy:\n  name: ''\n", "disk_cache_policy.name", "''"},
           Case{"disk_cache_policy:\n  ttl_s: -5\n", "disk_cache_policy.ttl_s", "-5"},
           Case{"host_cache_policy:\n  ttl_s: soon\n", "host_cache_policy.ttl_s", "soon"},
           Case{"host_cache_policy:\n  name: lru\n  declines_first_seen: true\n",
                "host_cache_policy.declines_first_seen", "adaptive"},
           Case{"disk_cache_policy:\n  declines_first_seen: true\n",
                "disk_cache_policy.declines_first_seen", "adaptive"},
           Case{"host_cache_policy:\n  name: adaptive\n  declines_first_seen: maybe\n",
                "host_cache_policy.declines_first_seen", "maybe"},
           Case{"host_cache_policy:\n  nam: lru\n", "host_cache_policy", "nam"},
           Case{"host_cache_policy: lru\n", "host_cache_policy", "mapping"},
       }) {
    auto c = ParseDaemonConfig(k.yaml, DefaultDaemonConfig());
    ASSERT_FALSE(c.ok()) << k.yaml;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << k.yaml;
    EXPECT_NE(c.status().message().find(k.key), std::string::npos) << c.status();
    EXPECT_NE(c.status().message().find(k.value), std::string::npos) << c.status();
  }
  // A config built in code is checked too (kvtierd validates before it starts).
  DaemonConfig bad = DefaultDaemonConfig();
  bad.disk.cache_policy.name = "fifo";
  EXPECT_NE(bad.Validate().message().find("disk_cache_policy"), std::string::npos)
      << bad.Validate();
  EXPECT_NE(bad.Validate().message().find("fifo"), std::string::npos);
}

TEST(DaemonConfigTest, MissRecordEntriesIsReadAndBadValuesNameTheKey) {
  EXPECT_EQ(DefaultDaemonConfig().miss_record_entries, AbsenceRecord::kDefaultEntries);
  auto ok = ParseDaemonConfig("miss_record_entries: 0\n", DefaultDaemonConfig());
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->miss_record_entries, 0u);  // 0 = no record
  auto bad = ParseDaemonConfig("miss_record_entries: lots\n", DefaultDaemonConfig());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("miss_record_entries"), std::string::npos) << bad.status();
  // Out of range: refused before kvtierd starts (Validate), naming the key and the range.
  auto big = ParseDaemonConfig("miss_record_entries: 16777217\n", DefaultDaemonConfig());
  ASSERT_TRUE(big.ok()) << big.status();
  const absl::Status v = big->Validate();
  EXPECT_EQ(v.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(v.message().find("miss_record_entries"), std::string::npos) << v;
  EXPECT_NE(v.message().find("16777216"), std::string::npos) << v;
}

TEST(DaemonConfigTest, NonLoopbackListenNeedsAllowRemote) {
  DaemonConfig c = DefaultDaemonConfig();
  c.listen = {"0.0.0.0:7470"};
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.Validate().message().find("allow_remote"), std::string::npos);
  c.allow_remote = true;
  EXPECT_TRUE(c.Validate().ok());
  EXPECT_TRUE(IsLocalAddress("unix:///tmp/x.sock"));
  EXPECT_TRUE(IsLocalAddress("127.0.0.1:1"));
  EXPECT_TRUE(IsLocalAddress("[::1]:1"));
  EXPECT_FALSE(IsLocalAddress("10.0.0.1:1"));
}

TEST(DaemonConfigTest, TokensMustBeLongAndUnique) {
  DaemonConfig c = DefaultDaemonConfig();
  c.tenants = {{"a", {"short"}}};
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
  c.tenants = {{"a", {"same-token-1"}}, {"b", {"same-token-1"}}};
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
}

// Sizes use kvt::ParseByteSize (tests/kvstore/byte_size_test.cc has every form); here:
// the config reads bare letters as binary and SI units as decimal, and names the key.
TEST(DaemonConfigTest, ByteSizesUseTheSharedParser) {
  auto c = ParseDaemonConfig("host_capacity: 8G\ndisk_capacity: 8GB\nmax_record_bytes: 1.5MiB\n",
                             DefaultDaemonConfig());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->host.capacity_bytes, 8ull << 30);
  EXPECT_EQ(c->disk.capacity_bytes, 8000000000ull);
  EXPECT_EQ(c->max_record_bytes, 1572864u);
  auto bad = ParseDaemonConfig("disk_capacity: -1\n", DefaultDaemonConfig());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("config disk_capacity: byte size '-1'"), std::string::npos)
      << bad.status();
}

TEST(DaemonConfigTest, BadScalarNamesTheKeyAndTheValue) {
  auto w = ParseDaemonConfig("workers: abc\n", DefaultDaemonConfig());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(w.status().message().find("workers: bad value 'abc'"), std::string::npos) << w.status();
  auto b = ParseDaemonConfig("shm:\n  enabled: perhaps\n", DefaultDaemonConfig());
  EXPECT_NE(b.status().message().find("shm.enabled: bad value 'perhaps'"), std::string::npos)
      << b.status();
  auto g = ParseDaemonConfig("shutdown_grace_ms: soon\n", DefaultDaemonConfig());
  EXPECT_NE(g.status().message().find("shutdown_grace_ms: bad value 'soon'"), std::string::npos)
      << g.status();
}

TEST(DaemonConfigTest, NegativeShutdownGraceIsRefused) {
  auto c = ParseDaemonConfig("shutdown_grace_ms: -1\n", DefaultDaemonConfig());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c->Validate().message().find("shutdown_grace_ms"), std::string::npos);
  c->shutdown_grace = std::chrono::milliseconds(0);
  EXPECT_TRUE(c->Validate().ok()) << c->Validate();
}

TEST(DaemonConfigTest, LeaseTimeoutIsParsedAndRangeChecked) {
  auto c = ParseDaemonConfig("lease_timeout_ms: 250\n", DefaultDaemonConfig());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->lease_timeout.count(), 250);
  EXPECT_EQ(DefaultDaemonConfig().lease_timeout.count(), 10000);
  for (const char* yaml : {"lease_timeout_ms: 0\n", "lease_timeout_ms: 600001\n"}) {
    auto bad = ParseDaemonConfig(yaml, DefaultDaemonConfig());
    ASSERT_TRUE(bad.ok()) << yaml;
    EXPECT_NE(bad->Validate().message().find("lease_timeout_ms"), std::string::npos) << yaml;
  }
  // A key given twice is refused (yaml-cpp would silently use the first), also nested.
  auto twice = ParseDaemonConfig("host_capacity: 16MiB\nworkers: 2\nhost_capacity: 8MiB\n",
                                 DefaultDaemonConfig());
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("'host_capacity' is given twice"), std::string::npos)
      << twice.status();
  auto nested = ParseDaemonConfig("metrics:\n  listen: 127.0.0.1:9464\n  listen: 127.0.0.1:9465\n",
                                  DefaultDaemonConfig());
  ASSERT_FALSE(nested.ok());
  EXPECT_NE(nested.status().message().find("'listen' is given twice"), std::string::npos)
      << nested.status();
  // A host tier larger than the host tier's limit is a config error naming the key.
  auto huge = ParseDaemonConfig("host_capacity: 100000TiB\n", DefaultDaemonConfig());
  ASSERT_TRUE(huge.ok()) << huge.status();
  EXPECT_NE(huge->Validate().message().find("host_capacity"), std::string::npos);
  // The key catalog and its bound are gone (tenancy asks the store): an old config that
  // sets the key is refused saying it was removed and what to do.
  auto gone = ParseDaemonConfig("catalog_max_keys: 64\n", DefaultDaemonConfig());
  ASSERT_FALSE(gone.ok());
  EXPECT_NE(gone.status().message().find("'catalog_max_keys' was removed"), std::string::npos)
      << gone.status();
  EXPECT_NE(gone.status().message().find("delete it"), std::string::npos) << gone.status();
}

// The write-back queue's memory bound (issue 11 #4): parsed as a byte size, at least
// one record, and the store is built with it.
TEST(DaemonConfigTest, WritebackQueueBytesIsParsedAndAtLeastOneRecord) {
  EXPECT_EQ(DefaultDaemonConfig().writeback_queue_bytes, 256ull << 20);
  auto c = ParseDaemonConfig("writeback_queue_bytes: 64MiB\nmax_record_bytes: 32MiB\n",
                             DefaultDaemonConfig());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->writeback_queue_bytes, 64ull << 20);
  EXPECT_TRUE(c->Validate().ok()) << c->Validate();
  auto small = ParseDaemonConfig("writeback_queue_bytes: 128MiB\n", DefaultDaemonConfig());
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(small->Validate().message().find(
                "writeback_queue_bytes: 134217728, must be at least max_record_bytes (268435456)"),
            std::string::npos)
      << small->Validate();
  auto word = ParseDaemonConfig("writeback_queue_bytes: lots\n", DefaultDaemonConfig());
  EXPECT_EQ(word.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(word.status().message().find("writeback_queue_bytes"), std::string::npos)
      << word.status();
}

TEST(DaemonConfigTest, MetricsListenMustBeHostAndPort) {
  DaemonConfig c = DefaultDaemonConfig();
  for (const char* bad : {"notanaddr", "127.0.0.1:99999", "127.0.0.1:-1", "127.0.0.1:x", ":9464"}) {
    c.metrics_listen = bad;
    EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(c.Validate().message().find("metrics.listen"), std::string::npos) << bad;
  }
  for (const char* good : {"127.0.0.1:0", "127.0.0.1:65535", "localhost:9464", ""}) {
    c.metrics_listen = good;
    EXPECT_TRUE(c.Validate().ok()) << good << ": " << c.Validate();
  }
}

TEST(DaemonConfigTest, DirectoryAsConfigFileIsRefused) {
  auto c = LoadDaemonConfig(::testing::TempDir(), DefaultDaemonConfig());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("is a directory"), std::string::npos) << c.status();
}

TEST(DaemonConfigTest, PathsMustHaveAnExistingDirectory) {
  const std::string tmp = ::testing::TempDir();
  DaemonConfig c = DefaultDaemonConfig();
  c.listen = {"unix://" + tmp + "/kvt.sock"};
  c.ready_file = tmp + "/ready.json";
  EXPECT_TRUE(CheckDaemonPaths(c).ok()) << CheckDaemonPaths(c);

  c.listen = {"unix:///nonexistent-kvt/dir/d.sock"};
  absl::Status s = CheckDaemonPaths(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("listen"), std::string::npos) << s;
  EXPECT_NE(s.message().find("'/nonexistent-kvt/dir' does not exist"), std::string::npos) << s;

  c.listen = {"unix://" + tmp + "/kvt.sock"};
  c.ready_file = "/nonexistent-kvt/dir/ready.json";
  s = CheckDaemonPaths(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("ready_file"), std::string::npos) << s;
  EXPECT_NE(s.message().find("/nonexistent-kvt/dir/ready.json"), std::string::npos) << s;

  c.ready_file = tmp;  // a directory
  EXPECT_EQ(CheckDaemonPaths(c).code(), absl::StatusCode::kInvalidArgument);
  c.ready_file = "/etc/passwd/ready.json";  // parent is a file
  s = CheckDaemonPaths(c);
  EXPECT_NE(s.message().find("is not a directory"), std::string::npos) << s;
}

TEST(DaemonConfigTest, BareSocketPathSuggestsTheUnixAddress) {
  // `kvtierd --listen /path.sock`: the fix is the unix:// form, not allow_remote.
  DaemonConfig c = DefaultDaemonConfig();
  c.listen = {"/tmp/kvtierd-test.sock"};
  absl::Status s = c.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("config listen: '/tmp/kvtierd-test.sock'"), std::string::npos) << s;
  EXPECT_NE(s.message().find("unix:///tmp/kvtierd-test.sock"), std::string::npos) << s;
  EXPECT_EQ(s.message().find("allow_remote"), std::string::npos) << s;
  c.listen = {"unix:///tmp/kvtierd-test.sock", "127.0.0.1:0"};  // port 0: any free port
  EXPECT_TRUE(c.Validate().ok()) << c.Validate();
}

// A disk_file_bytes larger than disk_capacity could never hold one record file: refused,
// naming both keys. Left unset, the record files shrink to disk_capacity (no error).
TEST(DaemonConfigTest, DiskCapacityBelowOneRecordFileIsRefusedNamingBothKeys) {
  auto c = ParseDaemonConfig(
      "disk_capacity: 64MiB\ndisk_file_bytes: 256MiB\n"
      "max_record_bytes: 8MiB\n",
      DefaultDaemonConfig());
  ASSERT_TRUE(c.ok()) << c.status();
  absl::Status s = c->Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("config disk_capacity: 67108864 bytes is smaller than "
                             "disk_file_bytes (268435456 bytes)"),
            std::string::npos)
      << s;
  EXPECT_EQ(ConfigErrorKey(s), "disk_capacity");
  auto equal = ParseDaemonConfig(
      "disk_capacity: 64MiB\ndisk_file_bytes: 64MiB\n"
      "max_record_bytes: 8MiB\n",
      DefaultDaemonConfig());
  ASSERT_TRUE(equal.ok()) << equal.status();
  EXPECT_TRUE(equal->Validate().ok()) << equal->Validate();
  auto unset = ParseDaemonConfig("disk_capacity: 64MiB\n", DefaultDaemonConfig());
  ASSERT_TRUE(unset.ok()) << unset.status();
  EXPECT_FALSE(unset->disk_file_bytes_explicit);
  EXPECT_TRUE(unset->Validate().ok()) << unset->Validate();
}

TEST(DaemonConfigTest, ParseReportsTheKeysTheFileSets) {
  std::set<std::string> keys;
  auto c = ParseDaemonConfig("workers: 3\nshm:\n  enabled: false\nmetrics:\n  listen: ''\n",
                             DefaultDaemonConfig(), &keys);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(keys,
            (std::set<std::string>{"workers", "shm", "shm.enabled", "metrics", "metrics.listen"}));
}

// An error is worded by where the bad value came from: the flag, the file and its key, or
// the default.
TEST(DaemonConfigTest, ErrorsNameTheFlagTheFileOrTheDefault) {
  ConfigOrigin origin;
  origin.file = "/etc/kvtierd.yaml";
  origin.file_keys = {"workers", "shm", "shm.max_regions"};
  origin.flag_keys = {{"disk_capacity", "--disk-capacity"}};
  DaemonConfig c = DefaultDaemonConfig();
  c.workers = 0;
  absl::Status s = AttributeConfigError(c.Validate(), origin);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "/etc/kvtierd.yaml: config workers: 0, expected 1..256");
  c = DefaultDaemonConfig();
  c.shm_max_regions = 0;
  EXPECT_EQ(AttributeConfigError(c.Validate(), origin).message(),
            "/etc/kvtierd.yaml: config shm.max_regions: expected 1..4096");
  c = DefaultDaemonConfig();
  c.disk.capacity_bytes = 1000;
  EXPECT_EQ(AttributeConfigError(c.Validate(), origin).message(),
            "--disk-capacity: must be a positive multiple of 4096");
  c = DefaultDaemonConfig();
  c.disk.file_bytes = 16ull << 20;  // as if from a file that does not say so
  s = AttributeConfigError(c.Validate(), origin);
  EXPECT_NE(s.message().find("config max_record_bytes (default value): "), std::string::npos) << s;
  // A flag overrides the file, so the flag is named even when the file sets the key too.
  origin.flag_keys["workers"] = "--workers";
  c = DefaultDaemonConfig();
  c.workers = 0;
  EXPECT_EQ(AttributeConfigError(c.Validate(), origin).message(), "--workers: 0, expected 1..256");
  // Statuses that name no key pass unchanged.
  const absl::Status other = absl::NotFoundError("config file 'x' cannot be read");
  EXPECT_EQ(AttributeConfigError(other, origin), other);
}

// --check-config prints the effective settings as a config file: read back, it gives
// the same configuration.
TEST(DaemonConfigTest, EffectiveConfigYamlReadsBackAsTheSameConfig) {
  ConfigOrigin origin;
  origin.file = "/etc/kvtierd.yaml";
  auto c = ParseDaemonConfig(
      "listen: [unix:///tmp/a.sock, 127.0.0.1:7470]\ndata_dir: /tmp/d\nhost_capacity: 3GiB\n"
      "disk_capacity: 1000MiB\ndisk_file_bytes: 100MiB\ndisk_commit: grouped\n"
      "disk_commit_delay_ms: 25\ndurability: async\nworkers: 8\nmax_record_bytes: 12KiB\n"
      "shm:\n  enabled: false\n  max_regions: 7\nmetrics:\n  listen: ''\n"
      "host_cache_policy:\n  name: lru\n  ttl_s: 60\nlease_timeout_ms: 1234\n"
      "tenants:\n  - name: alice\n    tokens: [secret-token-1]\n",
      DefaultDaemonConfig(), &origin.file_keys);
  ASSERT_TRUE(c.ok()) << c.status();
  origin.flag_keys["workers"] = "--workers";
  const std::string yaml = EffectiveConfigYaml(*c, origin);
  EXPECT_EQ(yaml.find("secret-token-1"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("workers: 8  # --workers"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("disk_capacity: 1000MiB  # /etc/kvtierd.yaml"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("log_level: info  # default"), std::string::npos) << yaml;
  // Read back without the tenants (their tokens are not printed).
  const std::string no_tenants = yaml.substr(0, yaml.find("tenants:"));
  auto back = ParseDaemonConfig(no_tenants, DefaultDaemonConfig());
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_EQ(back->listen, c->listen);
  EXPECT_EQ(back->data_dir, c->data_dir);
  EXPECT_EQ(back->host.capacity_bytes, c->host.capacity_bytes);
  EXPECT_EQ(back->disk.capacity_bytes, c->disk.capacity_bytes);
  EXPECT_EQ(back->disk.file_bytes, c->disk.file_bytes);
  EXPECT_EQ(back->disk.commit, DiskCommit::kGrouped);
  EXPECT_EQ(back->disk.commit_delay_ms, 25u);
  EXPECT_EQ(back->durability, Durability::kAsync);
  EXPECT_EQ(back->workers, 8u);
  EXPECT_EQ(back->max_record_bytes, 12u << 10);
  EXPECT_EQ(back->max_inflight_bytes, c->max_inflight_bytes);
  EXPECT_EQ(back->writeback_queue_bytes, c->writeback_queue_bytes);
  EXPECT_EQ(back->get_part_bytes, c->get_part_bytes);
  EXPECT_FALSE(back->shm_enabled);
  EXPECT_EQ(back->shm_max_regions, 7u);
  EXPECT_EQ(back->shm_max_region_bytes, c->shm_max_region_bytes);
  EXPECT_EQ(back->metrics_listen, "");
  EXPECT_EQ(back->host.cache_policy.name, "lru");
  EXPECT_EQ(back->host.cache_policy.ttl, std::chrono::seconds(60));
  EXPECT_EQ(back->disk.cache_policy.name, c->disk.cache_policy.name);
  EXPECT_EQ(back->lease_timeout, std::chrono::milliseconds(1234));
  EXPECT_EQ(back->shutdown_grace, c->shutdown_grace);
  EXPECT_EQ(back->log_level, "info");
  EXPECT_TRUE(back->Validate().ok()) << back->Validate();
}

TEST(DaemonConfigTest, MetricsListenIsExplicitOnlyWhenConfigured) {
  auto d = ParseDaemonConfig("log_level: warn\n", DefaultDaemonConfig());
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->metrics_listen, "127.0.0.1:9464");
  EXPECT_FALSE(d->metrics_listen_explicit);
  auto e = ParseDaemonConfig("metrics:\n  listen: 127.0.0.1:9464\n", DefaultDaemonConfig());
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_TRUE(e->metrics_listen_explicit);
}

// A loopback TCP port held open by the test: "someone else's kvtierd" on that port.
class HeldPort {
 public:
  HeldPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), len) == 0 && ::listen(fd_, 1) == 0 &&
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port_ = ntohs(a.sin_port);
    }
  }
  ~HeldPort() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

class DaemonMetricsPortTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvt-metrics-port-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    auto c = ParseDaemonConfig(
        absl::StrFormat("listen: unix://%s/kvtierd.sock\ndata_dir: %s/data\n"
                        "host_capacity: 16MiB\ndisk_capacity: 64MiB\ndisk_file_bytes: 16MiB\n"
                        "max_record_bytes: 8MiB\nmax_inflight_bytes: 64MiB\nworkers: 2\n"
                        "log_level: warn\n",
                        dir_, dir_),
        DefaultDaemonConfig());
    ASSERT_TRUE(c.ok()) << c.status();
    config_ = *c;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::string dir_;
  DaemonConfig config_;
};

TEST_F(DaemonMetricsPortTest, TakenDefaultPortRunsWithoutMetrics) {
  // Every docs example starts kvtierd on the default metrics port: a second one on the
  // host must still serve (without /metrics), not exit.
  HeldPort held;
  ASSERT_GT(held.port(), 0);
  config_.metrics_listen = absl::StrFormat("127.0.0.1:%d", held.port());
  config_.metrics_listen_explicit = false;  // as the default is
  auto server = KvtierServer::Start(config_);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->metrics_port(), 0);
  EXPECT_EQ((*server)->listen_addresses().size(), 1u);
  (*server)->Shutdown();
}

TEST_F(DaemonMetricsPortTest, TakenConfiguredPortIsAnError) {
  HeldPort held;
  ASSERT_GT(held.port(), 0);
  config_.metrics_listen = absl::StrFormat("127.0.0.1:%d", held.port());
  config_.metrics_listen_explicit = true;  // metrics.listen or --metrics-listen
  auto server = KvtierServer::Start(config_);
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(server.status().message().find("metrics.listen: cannot bind"), std::string::npos)
      << server.status();
}

}  // namespace
}  // namespace kvt::daemon
