// ThrottledTier: a tier in front of another whose every Get takes at least record bytes /
// bandwidth (it sleeps after the inner Get), to model a slow link for benchmarks (the
// load-while-compute sweeps of `kvtier-bench overlap` and kvtier-llama-server's
// --kvtier-throttle-gbps). Every other call is forwarded unchanged. It lends no records
// (View stays Unimplemented), so every read pays the throttle.
#ifndef KVSTORE_THROTTLED_TIER_H_
#define KVSTORE_THROTTLED_TIER_H_

#include <atomic>
#include <memory>

#include "kvstore/tier.h"

namespace kvt {

class ThrottledTier final : public Tier {
 public:
  // `bytes_per_s` > 0 (bytes per second).
  ThrottledTier(std::unique_ptr<Tier> inner, double bytes_per_s);
  // Thread-safe; applies to Gets that start afterwards.
  void set_bandwidth(double bytes_per_s) { bytes_per_s_.store(bytes_per_s); }

  TierCaps caps() const override;
  using Tier::Put;
  absl::StatusOr<PutResult> Put(std::span<const std::byte> record,
                                const PutContext& context) override {
    return inner_->Put(record, context);
  }
  absl::StatusOr<uint64_t> Get(const ChunkKey& key, std::span<std::byte> out) override;
  // The store's own reads (write-back) are not throttled: the throttle models the reads
  // an engine waits for.
  absl::StatusOr<uint64_t> CopyForWriteBack(const ChunkKey& key,
                                            std::span<std::byte> out) override {
    return inner_->CopyForWriteBack(key, out);
  }
  std::vector<ChunkStat> Stat(std::span<const ChunkKey> keys) override {
    return inner_->Stat(keys);
  }
  absl::Status Erase(const ChunkKey& key) override { return inner_->Erase(key); }
  absl::StatusOr<ListPage> List(const ListOptions& options) override {
    return inner_->List(options);
  }
  TierStats stats() const override { return inner_->stats(); }
  PinHandle Pin(const ChunkKey& key) override { return inner_->Pin(key); }

 private:
  std::unique_ptr<Tier> inner_;
  std::atomic<double> bytes_per_s_;
};

}  // namespace kvt

#endif  // KVSTORE_THROTTLED_TIER_H_
