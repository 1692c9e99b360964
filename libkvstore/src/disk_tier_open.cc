// DiskTier: options, and Open (recovery: the record files found, the index entries
// whose records are where the index says).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <map>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "disk_tier_impl.h"
#include "kvstore/chunk_codec.h"
#include "spdlog/spdlog.h"

namespace kvt {

namespace fs = std::filesystem;
using internal::IndexEntry;

std::string_view DiskIoBackendName(DiskIoBackend backend) {
  return backend == DiskIoBackend::kIoUring ? "io_uring" : "pread";
}

absl::Status DiskTierOptions::Validate() const {
  if (dir.empty()) return absl::InvalidArgumentError("DiskTierOptions.dir is empty");
  if (capacity_bytes == 0 || capacity_bytes % 4096 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DiskTierOptions.capacity_bytes = ", capacity_bytes,
                     ", expected a positive multiple of 4096"));
  }
  if (file_bytes == 0 || file_bytes % 4096 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("DiskTierOptions.file_bytes = ", file_bytes,
                                                   ", expected a positive multiple of 4096"));
  }
  if (queue_depth == 0 || queue_depth > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("DiskTierOptions.queue_depth = ", queue_depth, ", expected 1..256"));
  }
  if (io_bytes == 0 || io_bytes % 4096 != 0 || io_bytes > (1ull << 30)) {
    return absl::InvalidArgumentError(absl::StrCat("DiskTierOptions.io_bytes = ", io_bytes,
                                                   ", expected a multiple of 4096 in (0, 1 GiB]"));
  }
  if (commit_delay_ms == 0 || commit_delay_ms > 60000) {
    return absl::InvalidArgumentError(
        absl::StrCat("DiskTierOptions.commit_delay_ms = ", commit_delay_ms, ", expected 1..60000"));
  }
  if (commit != DiskCommit::kEachPut && commit != DiskCommit::kGrouped) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DiskTierOptions.commit = ", static_cast<int>(commit), ", expected kEachPut or kGrouped"));
  }
  if (access_flush_batch == 0) {
    return absl::InvalidArgumentError("DiskTierOptions.access_flush_batch = 0, expected >= 1");
  }
  if (absl::Status s = cache_policy.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("DiskTierOptions.cache_policy: ", s.message()));
  }
  return absl::OkStatus();
}

DiskTier::Impl::~Impl() {
  if (commit_) commit_->Stop();
  if (index_) {
    if (absl::Status s = FlushAccessTimes(); !s.ok()) {
      spdlog::warn("disk tier: last-access flush on close failed: {}", s.ToString());
    }
  }
}

absl::Status DiskTier::Impl::Init() {
  CachePolicyOptions policy_options = options_.cache_policy;
  if (policy_options.clock == nullptr) policy_options.clock = options_.clock;
  auto policy = options_.cache_policy_factory
                    ? options_.cache_policy_factory(options_.capacity_bytes)
                    : MakeCachePolicy(policy_options, options_.capacity_bytes);
  if (!policy.ok()) return policy.status();
  if (*policy == nullptr) {
    return absl::InvalidArgumentError("DiskTier: cache_policy_factory returned no policy");
  }
  table_ = std::make_unique<internal::DiskEntryTable>(options_, std::move(*policy));
  if (absl::Status s = files_.Open(); !s.ok()) return s;
  auto index = internal::DiskIndex::Open((fs::path(options_.dir) / "index").string(),
                                         options_.index_reserve_bytes);
  if (!index.ok()) return index.status();
  index_ = std::move(*index);

  // Record files, in id order, up to capacity_bytes (the entries of a file removed
  // here are dropped below as "record file missing").
  auto found = files_.OpenExisting(options_.capacity_bytes);
  if (!found.ok()) return found.status();
  table_->SetNextFileId(found->next_id);
  for (const auto& f : found->files) table_->AddFile(f->id, f->intact_end);

  // Index entries: keep those whose record is where the index says.
  absl::MutexLock il(&index_mu_);
  std::vector<std::string> drop_raw;
  std::vector<internal::DiskEntryTable::Recovered> candidates;
  absl::Status scan = index_->Scan("", [&](std::string_view raw, absl::StatusOr<ChunkKey> key,
                                           absl::StatusOr<IndexEntry> e) {
    absl::Status why = !key.ok() ? absl::DataLossError("undecodable")
                       : !e.ok() ? absl::DataLossError("undecodable")
                                 : files_.CheckIndexed(*key, *e, options_.verify_headers_on_open);
    if (!why.ok()) {
      spdlog::warn("disk tier: dropping index entry {}: {}",
                   key.ok() ? key->ToHex() : std::string("<undecodable>"),
                   std::string(why.message()));
      drop_raw.emplace_back(raw);
      return true;
    }
    candidates.push_back({std::string(raw), *key, *e});
    return true;
  });
  if (!scan.ok()) return scan;
  // Entries whose extent overlaps another record's are dropped too.
  for (std::string& raw : table_->Recover(std::move(candidates))) {
    spdlog::warn("disk tier: dropping an index entry: extent overlaps another record");
    drop_raw.push_back(std::move(raw));
  }
  // Synced: the drops are durable before the freed extents can be reused.
  if (absl::Status s = index_->DeleteRaw(drop_raw, /*sync=*/true); !s.ok()) return s;
  table_->CountDroppedOnOpen(drop_raw.size());
  const TierStats st = table_->stats();
  spdlog::info("disk tier: opened {} ({} chunks, {} / {} bytes, {} files, backend {}{})",
               options_.dir, st.chunks, st.used_bytes, options_.capacity_bytes, files_.count(),
               internal::IoBackendName(files_.backend()),
               files_.direct_io() ? ", O_DIRECT" : ", buffered");
  commit_ = std::make_unique<internal::DiskGroupCommit>(options_, table_.get(), &files_,
                                                        index_.get(), &index_mu_);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DiskTier>> DiskTier::Open(const DiskTierOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  auto impl = std::make_unique<Impl>(options);
  if (absl::Status s = impl->Init(); !s.ok()) return s;
  impl->commit_->Start();
  return std::unique_ptr<DiskTier>(new DiskTier(std::move(impl)));
}

}  // namespace kvt
