// Private to libkvstore: the disk tier's counters (its TierStats and DiskTierExtraStats
// without the gauges) and what each outcome counts in them: an I/O error that is ENOSPC
// (ResourceExhausted) also counts in enospc, a read whose record fails its checks
// (DataLoss) is an integrity error, any other failed read an I/O error, and only a
// client's read counts as a hit or a miss.
#ifndef KVSTORE_SRC_DISK_TIER_COUNTERS_H_
#define KVSTORE_SRC_DISK_TIER_COUNTERS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kvstore/disk_tier.h"
#include "kvstore/tier.h"

namespace kvt::internal {

// Not thread-safe: the DiskEntryTable guards it with its lock.
class DiskTierCounters {
 public:
  // --- writes and space
  // A record stored: `record_bytes` in, `copied` bytes of bounce copies.
  void Put(uint64_t record_bytes, uint64_t copied) {
    ++tier_.puts;
    tier_.bytes_in += record_bytes;
    tier_.copy_bytes += copied;
  }
  void AdmissionRejected() { ++tier_.admission_rejects; }
  // The filesystem has no room for another record file.
  void NoMoreFiles() { ++extra_.enospc; }
  void Evicted(uint64_t records) { tier_.evictions += records; }
  void Expired(uint64_t records) { tier_.ttl_expired += records; }
  // One I/O error (`s` its status).
  void IoError(const absl::Status& s = absl::OkStatus()) {
    ++tier_.io_errors;
    if (absl::IsResourceExhausted(s)) ++extra_.enospc;
  }
  // A group commit made `records` records durable (none: not counted).
  void GroupCommitted(uint64_t records) {
    if (records == 0) return;
    ++extra_.group_commits;
    extra_.group_committed_records += records;
  }

  // --- reads
  // A client's read found no record.
  void Miss() { ++tier_.misses; }
  // A read of a record ended with `s`; a client's (not a victim's or a copy for the
  // store) counts a hit of `record_bytes` or a miss.
  void ReadEnded(const absl::Status& s, bool client_read, uint64_t record_bytes) {
    if (s.ok()) {
      if (client_read) {
        ++tier_.hits;
        tier_.bytes_out += record_bytes;
      }
      return;
    }
    if (client_read) ++tier_.misses;
    if (absl::IsDataLoss(s)) {
      ++tier_.integrity_errors;
    } else {
      ++tier_.io_errors;
    }
  }
  // A whole record read from a file: `copied` bytes (the read and its bounce copies).
  void RecordRead(uint64_t copied) {
    ++extra_.record_reads;
    tier_.copy_bytes += copied;
  }
  void VictimReads(uint64_t n) { extra_.victim_reads += n; }

  // --- integrity
  // Open dropped `n` index entries (its checks failed).
  void DroppedOnOpen(uint64_t n) {
    extra_.dropped_on_open = n;
    tier_.integrity_errors += n;
  }
  // A record file removed behind the tier's back, with `records` records in it.
  void FileLost(uint64_t records) {
    ++extra_.files_lost;
    tier_.integrity_errors += records;
  }

  // The counters; the gauges (capacity, used, chunks, pinned, files, uncommitted) are
  // the table's to fill.
  const TierStats& tier() const { return tier_; }
  const DiskTierExtraStats& extra() const { return extra_; }

 private:
  TierStats tier_;
  DiskTierExtraStats extra_;
};

}  // namespace kvt::internal

#endif  // KVSTORE_SRC_DISK_TIER_COUNTERS_H_
