#include "kvtier_server/tail_records.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "kvstore/chunk_chain.h"
#include "kvstore/chunk_codec.h"
#include "spdlog/spdlog.h"

namespace kvt::llamacpp {

TailRecords::TailRecords(std::shared_ptr<TieredStore> store, NamespaceId ns, KvLayout layout,
                         uint32_t chunk_tokens, uint64_t max_pending_bytes)
    : store_(std::move(store)),
      ns_(ns),
      layout_(layout),
      chunk_tokens_(chunk_tokens),
      max_pending_bytes_(max_pending_bytes) {
  writer_ = std::thread([this] { Loop(); });
}

TailRecords::~TailRecords() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  writer_.join();
}

ChunkKey TailRecords::Parent(std::span<const TokenId> prompt) const {
  const uint64_t t = TailStart(prompt.size());
  if (t == 0) return RootKey(ns_);
  ChunkKeyOptions ko;
  ko.chunk_tokens = chunk_tokens_;
  return ComputeChunkKeys(ns_, prompt.first(t), ko).back();
}

ChunkKey TailRecords::TailKey(std::span<const TokenId> prompt) const {
  return ChainChunkKey(Parent(prompt),
                       prompt.subspan(TailStart(prompt.size()), TailTokens(prompt.size())));
}

absl::Status TailRecords::Queue(std::span<const TokenId> prompt,
                                const std::function<absl::Status(std::span<std::byte>)>& fill) {
  if (prompt.empty() || TailTokens(prompt.size()) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a prompt of ", prompt.size(), " tokens has no tail"));
  }
  const uint64_t t = TailStart(prompt.size());
  const uint32_t n = static_cast<uint32_t>(TailTokens(prompt.size()));
  std::vector<std::byte> payload(layout_.payload_bytes(n));
  {
    absl::MutexLock l(&mu_);
    if (pending_bytes_ + payload.size() > max_pending_bytes_) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return absl::OkStatus();
    }
  }
  if (absl::Status s = fill(payload); !s.ok()) return s;
  ChunkChainEncoder enc(ns_, layout_, Parent(prompt));
  absl::StatusOr<std::vector<std::byte>> record = enc.EncodeNext(prompt.subspan(t, n), payload);
  if (!record.ok()) {
    put_errors_.fetch_add(1, std::memory_order_relaxed);
    return record.status();
  }
  queued_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock l(&mu_);
  pending_bytes_ += record->size();
  queue_.push_back(std::move(*record));
  return absl::OkStatus();
}

void TailRecords::Loop() {
  for (;;) {
    std::vector<std::byte> record;
    {
      absl::MutexLock l(&mu_);
      mu_.Await(absl::Condition(
          +[](TailRecords* t)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) { return t->stopping_ || !t->queue_.empty(); },
          this));
      if (queue_.empty()) return;  // stopping, everything put
      record = std::move(queue_.front());
      queue_.pop_front();
      ++in_flight_;
    }
    absl::StatusOr<ChunkHeader> h = DecodeChunkHeader(record);
    const ChunkKey key = h.ok() ? h->key : ChunkKey{};
    if (h.ok() && store_->Lookup(std::span<const ChunkKey>(&key, 1)).num_leading_hits == 1) {
      skipped_.fetch_add(1, std::memory_order_relaxed);
    } else if (absl::Status s = h.ok() ? store_->Put(record) : h.status(); s.ok()) {
      put_.fetch_add(1, std::memory_order_relaxed);
    } else {
      put_errors_.fetch_add(1, std::memory_order_relaxed);
      spdlog::warn("kvtier: storing a tail record failed: {}", s.ToString());
    }
    absl::MutexLock l(&mu_);
    pending_bytes_ -= record.size();
    --in_flight_;
  }
}

absl::StatusOr<std::vector<std::byte>> TailRecords::Fetch(std::span<const TokenId> prompt) {
  if (prompt.empty() || TailTokens(prompt.size()) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a prompt of ", prompt.size(), " tokens has no tail"));
  }
  DecodeExpectations want;
  want.ns = ns_;
  want.key = TailKey(prompt);
  want.layout = &layout_;
  want.token_count = static_cast<uint32_t>(TailTokens(prompt.size()));
  absl::StatusOr<std::vector<std::byte>> record = store_->Get(want.key);
  if (!record.ok()) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return record.status();
  }
  // Disk and kvtierd verified the payload's checksum; the host tier holds what this
  // process stored. The header (namespace, key, layout, token count) is checked here.
  absl::StatusOr<ChunkHeader> h = CheckChunkHeader(*record, want);
  if (!h.ok()) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return h.status();
  }
  hits_.fetch_add(1, std::memory_order_relaxed);
  record->erase(record->begin(), record->begin() + kChunkHeaderBytes);
  return std::move(*record);
}

void TailRecords::Flush() {
  absl::MutexLock l(&mu_);
  mu_.Await(absl::Condition(
      +[](TailRecords* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) {
        return t->queue_.empty() && t->in_flight_ == 0;
      },
      this));
}

TailStats TailRecords::stats() const {
  TailStats s;
  s.queued = queued_.load(std::memory_order_relaxed);
  s.put = put_.load(std::memory_order_relaxed);
  s.skipped = skipped_.load(std::memory_order_relaxed);
  s.dropped = dropped_.load(std::memory_order_relaxed);
  s.put_errors = put_errors_.load(std::memory_order_relaxed);
  s.hits = hits_.load(std::memory_order_relaxed);
  s.misses = misses_.load(std::memory_order_relaxed);
  return s;
}

}  // namespace kvt::llamacpp
