// kvt_disk_writer: child process for DiskTierTest.KillDuringWritesKeepsAcknowledgedChunks
// and DiskTierTest.KillBetweenWriteAndGroupCommitLosesOnlyUncommitted.
// Usage: kvt_disk_writer <dir> <capacity_bytes> <file_bytes> <max_puts> [grouped <n>]
// Puts MakeRecord(i) for i = 0.. and writes "<i> <key hex>\n" to file descriptor 3 after
// each Put returned OK, until killed or max_puts reached. (fd 3, not stdout: the
// tier's logger writes to stdout.) With "grouped <n>": commit = kGrouped with a 60 s
// commit delay (no commit starts by itself), Sync() after the first n puts, then the
// line "-1 synced"; the puts after it are written but never committed: new keys for even
// i, and for odd i a replacement (other bytes: 64 tokens) of synced key ((i - n) / 2) % n.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "disk_test_util.h"
#include "kvstore/disk_tier.h"

int main(int argc, char** argv) {
  const bool grouped = argc == 7 && std::string(argv[5]) == "grouped";
  if (argc != 5 && !grouped) {
    std::fprintf(stderr, "usage: %s <dir> <capacity_bytes> <file_bytes> <max_puts> [grouped <n>]\n",
                 argv[0]);
    return 2;
  }
  const long sync_after = grouped ? std::strtol(argv[6], nullptr, 10) : -1;
  kvt::DiskTierOptions o;
  o.dir = argv[1];
  o.capacity_bytes = std::strtoull(argv[2], nullptr, 10);
  o.file_bytes = std::strtoull(argv[3], nullptr, 10);
  o.io_bytes = 64 << 10;
  o.queue_depth = 4;
  if (grouped) {
    o.commit = kvt::DiskCommit::kGrouped;
    o.commit_delay_ms = 60000;
  }
  const long max_puts = std::strtol(argv[4], nullptr, 10);
  auto tier = kvt::DiskTier::Open(o);
  if (!tier.ok()) {
    std::fprintf(stderr, "open: %s\n", tier.status().ToString().c_str());
    return 1;
  }
  for (long i = 0; i < max_puts; ++i) {
    const bool replace = sync_after >= 0 && i >= sync_after && i % 2 == 1;
    auto rec = replace ? kvt::testing::MakeRecord(
                             static_cast<uint64_t>((i - sync_after) / 2 % sync_after), 64)
                       : kvt::testing::MakeRecord(static_cast<uint64_t>(i),
                                                  128 + static_cast<uint32_t>(i % 5) * 64);
    if (absl::Status s = (*tier)->Put(rec); !s.ok()) {
      std::fprintf(stderr, "put %ld: %s\n", i, s.ToString().c_str());
      return 1;
    }
    // One write(2) per line: the parent sees whole lines only.
    const std::string line =
        std::to_string(i) + " " + kvt::testing::TestKey(static_cast<uint64_t>(i)).ToHex() + "\n";
    if (::write(3, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return 1;
    if (i + 1 == sync_after) {
      if (absl::Status s = (*tier)->Sync(); !s.ok()) {
        std::fprintf(stderr, "sync: %s\n", s.ToString().c_str());
        return 1;
      }
      const std::string synced = "-1 synced\n";
      if (::write(3, synced.data(), synced.size()) != static_cast<ssize_t>(synced.size())) return 1;
    }
  }
  return 0;
}
