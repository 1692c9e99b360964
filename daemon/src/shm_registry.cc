#include "shm_registry.h"

#include "absl/random/random.h"
#include "absl/strings/str_format.h"
#include "kvstore/shm_progress.h"

namespace kvt::daemon {

ShmRegistry::ShmRegistry(const DaemonConfig& config) : config_(config) {
  absl::MutexLock lock(&mu_);
  next_id_ = config.shm_first_region_id != 0 ? config.shm_first_region_id
                                             : (absl::Uniform<uint64_t>(absl::BitGen()) >> 1) + 1;
}

absl::StatusOr<ShmRegistry::Attached> ShmRegistry::Attach(uint64_t bytes,
                                                          const std::string& tenant) {
  if (!config_.shm_enabled)
    return absl::FailedPreconditionError(
        "shared memory is disabled in this daemon (shm.enabled: false or --no-shm)");
  if (bytes < (1ull << 20) || bytes > config_.shm_max_region_bytes)
    return absl::InvalidArgumentError(
        absl::StrFormat("bytes: %d, expected 1 MiB .. %d", bytes, config_.shm_max_region_bytes));
  {
    absl::MutexLock lock(&mu_);
    if (regions_.size() >= config_.shm_max_regions)
      return absl::ResourceExhaustedError(
          absl::StrFormat("shm: all %d regions in use", config_.shm_max_regions));
  }
  auto region = ShmRegion::Create(bytes, "kvtierd-shm");  // outside the lock: a syscall
  if (!region.ok()) return region.status();
  absl::MutexLock lock(&mu_);
  Attached a{.id = next_id_++, .path = (*region)->path(), .bytes = (*region)->size()};
  regions_[a.id] = Entry{std::shared_ptr<ShmRegion>(std::move(*region)), tenant};
  return a;
}

absl::Status ShmRegistry::Detach(uint64_t id, const std::string& tenant) {
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(id);
  if (it == regions_.end() || it->second.tenant != tenant)
    return absl::NotFoundError(absl::StrFormat("region_id: %d is not attached", id));
  regions_.erase(it);  // unmapped when the last in-flight operation drops its reference
  return absl::OkStatus();
}

absl::StatusOr<ShmSliceRef> ShmRegistry::Resolve(const ::kvtier::v1::ShmSlice& slice,
                                                 const std::string& tenant) {
  ShmSliceRef ref;
  {
    absl::MutexLock lock(&mu_);
    auto it = regions_.find(slice.region_id());
    if (it != regions_.end() && it->second.tenant == tenant) ref.region = it->second.region;
  }
  if (ref.region == nullptr)
    return absl::InvalidArgumentError(
        absl::StrFormat("shm.region_id: %d is not attached", slice.region_id()));
  const ShmRegion& region = *ref.region;
  if (!region.Contains(slice.offset(), slice.length()))
    return absl::InvalidArgumentError(
        absl::StrFormat("shm.offset/length: [%d, +%d) outside the %d-byte region", slice.offset(),
                        slice.length(), region.size()));
  ref.offset = slice.offset();
  ref.length = slice.length();
  if (!slice.progressive()) return ref;
  const uint64_t at = slice.progress_offset();
  if (at % 64 != 0 || !region.Contains(at, kShmProgressBlockBytes))
    return absl::InvalidArgumentError(absl::StrFormat(
        "shm.progress_offset: %d, expected a 64-byte aligned offset of the %d-byte region "
        "with %d bytes after it",
        at, region.size(), kShmProgressBlockBytes));
  if (at + kShmProgressBlockBytes > slice.offset() && at < slice.offset() + slice.length())
    return absl::InvalidArgumentError(
        absl::StrFormat("shm.progress_offset: the control block [%d, +%d) overlaps the slice's "
                        "data [%d, +%d)",
                        at, kShmProgressBlockBytes, slice.offset(), slice.length()));
  ref.progressive = true;
  ref.progress_offset = at;
  return ref;
}

size_t ShmRegistry::size() const {
  absl::MutexLock lock(&mu_);
  return regions_.size();
}

}  // namespace kvt::daemon
