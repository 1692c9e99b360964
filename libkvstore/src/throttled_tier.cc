#include "kvstore/throttled_tier.h"

#include <chrono>
#include <thread>

namespace kvt {

ThrottledTier::ThrottledTier(std::unique_ptr<Tier> inner, double bytes_per_s)
    : inner_(std::move(inner)), bytes_per_s_(bytes_per_s) {}

TierCaps ThrottledTier::caps() const {
  TierCaps c = inner_->caps();
  c.name = "throttled-" + c.name;
  return c;
}

absl::StatusOr<uint64_t> ThrottledTier::Get(const ChunkKey& key, std::span<std::byte> out) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  absl::StatusOr<uint64_t> got = inner_->Get(key, out);
  if (got.ok()) {
    const double s = static_cast<double>(*got) / bytes_per_s_.load();
    std::this_thread::sleep_until(
        t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)));
  }
  return got;
}

}  // namespace kvt
