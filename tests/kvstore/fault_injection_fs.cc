#include "fault_injection_fs.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"

namespace kvt::testing {

using internal::ErrnoToStatus;
using internal::kIoAlign;

void FaultInjectionFs::AddRule(const FaultRule& rule) {
  absl::MutexLock l(&mu_);
  rules_.push_back(Rule{rule});
}

void FaultInjectionFs::ClearRules() {
  absl::MutexLock l(&mu_);
  rules_.clear();
}

uint64_t FaultInjectionFs::calls(FsOp op) const {
  absl::MutexLock l(&mu_);
  return calls_[static_cast<int>(op)];
}

uint64_t FaultInjectionFs::injected(FsOp op) const {
  absl::MutexLock l(&mu_);
  return injected_[static_cast<int>(op)];
}

std::optional<FaultRule> FaultInjectionFs::Match(FsOp op, uint32_t file_id) {
  absl::MutexLock l(&mu_);
  ++calls_[static_cast<int>(op)];
  for (Rule& r : rules_) {
    if (r.spec.op != op || (r.spec.file_id && *r.spec.file_id != file_id)) continue;
    if (r.spec.times >= 0 && r.fired >= static_cast<uint32_t>(r.spec.times)) continue;
    if (r.seen++ < r.spec.skip) continue;
    ++r.fired;
    ++injected_[static_cast<int>(op)];
    return r.spec;
  }
  return std::nullopt;
}

absl::Status FaultInjectionFs::Allocate(const DiskFileRef& f, uint64_t size) {
  auto rule = Match(FsOp::kAllocate, f.id);
  if (rule && rule->delay.count() > 0) std::this_thread::sleep_for(rule->delay);
  if (rule && rule->error != 0) return ErrnoToStatus(rule->error, "fallocate (injected)");
  return base_->Allocate(f, size);
}

absl::Status FaultInjectionFs::Sync(const DiskFileRef& f) {
  auto rule = Match(FsOp::kSync, f.id);
  if (rule && rule->delay.count() > 0) std::this_thread::sleep_for(rule->delay);
  if (rule && rule->error != 0) return ErrnoToStatus(rule->error, "fdatasync (injected)");
  return base_->Sync(f);
}

absl::Status FaultInjectionFs::TornWrite(internal::IoRing& ring, const DiskFileRef& f,
                                         uint64_t offset, std::span<const std::byte> src,
                                         uint64_t keep) {
  keep = std::min<uint64_t>(keep, src.size());
  // Whole blocks first, then the partial block read-modify-written so that the bytes
  // after `keep` keep what the extent held before (as a torn write leaves them).
  const uint64_t whole = keep / kIoAlign * kIoAlign;
  if (whole > 0) {
    if (absl::Status s = base_->Write(ring, f, offset, src.first(whole)); !s.ok()) return s;
  }
  const uint64_t tail = keep - whole;
  if (tail == 0) return absl::OkStatus();
  auto block = internal::AllocateAligned(kIoAlign);
  std::span<std::byte> b(block.get(), kIoAlign);
  absl::Status rs = base_->Read(ring, f, offset + whole, kIoAlign, b, nullptr);
  if (absl::IsOutOfRange(rs)) {
    std::memset(b.data(), 0, b.size());
  } else if (!rs.ok()) {
    return rs;
  }
  std::memcpy(b.data(), src.data() + whole, tail);
  return base_->Write(ring, f, offset + whole, b);
}

absl::Status FaultInjectionFs::Write(internal::IoRing& ring, const DiskFileRef& f, uint64_t offset,
                                     std::span<const std::byte> src) {
  auto rule = Match(FsOp::kWrite, f.id);
  if (!rule) return base_->Write(ring, f, offset, src);
  if (rule->delay.count() > 0) std::this_thread::sleep_for(rule->delay);
  if (rule->torn_write_bytes) {
    if (absl::Status s = TornWrite(ring, f, offset, src, *rule->torn_write_bytes); !s.ok()) {
      return s;
    }
    if (rule->error != 0) return ErrnoToStatus(rule->error, "write (injected, torn)");
    return absl::OkStatus();  // the device claimed success
  }
  if (rule->error != 0) return ErrnoToStatus(rule->error, "write (injected)");
  return base_->Write(ring, f, offset, src);
}

absl::Status FaultInjectionFs::Read(internal::IoRing& ring, const DiskFileRef& f, uint64_t offset,
                                    uint64_t len, std::span<std::byte> dst,
                                    const internal::InOrderCallback& in_order) {
  auto rule = Match(FsOp::kRead, f.id);
  if (!rule) return base_->Read(ring, f, offset, len, dst, in_order);
  if (rule->delay.count() > 0) std::this_thread::sleep_for(rule->delay);
  if (rule->error != 0) return ErrnoToStatus(rule->error, "read (injected)");
  if (rule->short_read_bytes && *rule->short_read_bytes < len) {
    // Read what "is there", hand it over in order, then report the early end of file.
    const uint64_t got = *rule->short_read_bytes;
    if (got > 0) {
      if (absl::Status s = base_->Read(ring, f, offset, got, dst, nullptr); !s.ok()) return s;
      if (in_order) in_order(std::span<const std::byte>(dst.data(), got));
    }
    return absl::OutOfRangeError(absl::StrCat("short read (injected): file ends at offset ",
                                              offset + got, " of ", std::string(f.path)));
  }
  return base_->Read(ring, f, offset, len, dst, in_order);
}

}  // namespace kvt::testing
