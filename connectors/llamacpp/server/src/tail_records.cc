#include "kvtier_server/tail_records.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kvstore/chunk_chain.h"
#include "kvstore/chunk_codec.h"
#include "spdlog/spdlog.h"

namespace kvt::llamacpp {

TailSpan TailSpan::ForSnapshots(uint32_t n_batch, uint32_t n_ubatch, uint64_t rows_per_token,
                                uint64_t snapshot_bytes, uint64_t bytes_per_token) {
  TailSpan s;
  s.computed = std::min<uint64_t>(n_batch, 4);
  s.split = std::min<uint64_t>(n_batch, uint64_t{4} + n_ubatch);
  // L tokens hold L * bytes_per_token bytes: the rows (L * rows_per_token) and the snapshot.
  const uint64_t spare = bytes_per_token > rows_per_token ? bytes_per_token - rows_per_token : 0;
  s.min_tokens =
      spare == 0 ? UINT64_MAX : std::max<uint64_t>(1, (snapshot_bytes + spare - 1) / spare);
  return s;
}

TailRecords::TailRecords(std::shared_ptr<TieredStore> store, NamespaceId ns, KvLayout layout,
                         uint32_t chunk_tokens, uint64_t max_pending_bytes, TailSpan span)
    : store_(std::move(store)),
      ns_(ns),
      layout_(layout),
      chunk_tokens_(chunk_tokens),
      max_pending_bytes_(max_pending_bytes),
      span_(span) {}

uint64_t TailRecords::TailStart(uint64_t n) const {
  if (span_.split == 0) {
    return TailEnd(n) / chunk_tokens_ * chunk_tokens_;
  }
  return n > span_.split ? (n - span_.split) / chunk_tokens_ * chunk_tokens_ : 0;
}

uint64_t TailRecords::TailTokens(uint64_t n) const {
  const uint64_t end = TailEnd(n), start = TailStart(n);
  return end > start && end - start >= span_.min_tokens ? end - start : 0;
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
  Counters& c = *counters_;
  const uint32_t n = static_cast<uint32_t>(TailTokens(prompt.size()));
  const ChunkKey parent = Parent(prompt);
  const ChunkKey key = ChainChunkKey(parent, prompt.subspan(TailStart(prompt.size()), n));
  if (store_->Lookup(std::span<const ChunkKey>(&key, 1)).num_leading_hits == 1) {
    c.skipped.fetch_add(1, std::memory_order_relaxed);
    return absl::OkStatus();
  }
  WriteRequest w;
  w.header = ChunkChainEncoder(ns_, layout_, parent).NextHeader(key, n);
  w.record_bytes = w.header->record_bytes();
  w.fill = fill;
  w.async = true;
  w.limit_bytes = max_pending_bytes_;
  w.done = [counters = counters_](const absl::Status& s) {
    if (s.ok()) {
      counters->put.fetch_add(1, std::memory_order_relaxed);
    } else if (!absl::IsCancelled(s)) {
      counters->put_errors.fetch_add(1, std::memory_order_relaxed);
      spdlog::warn("kvtier: storing a tail record failed: {}", s.ToString());
    }
  };
  absl::StatusOr<ChunkKey> queued = store_->Write(std::move(w));
  if (queued.ok()) {
    c.queued.fetch_add(1, std::memory_order_relaxed);
  } else if (absl::IsAlreadyExists(queued.status())) {
    c.skipped.fetch_add(1, std::memory_order_relaxed);
  } else if (absl::IsUnavailable(queued.status())) {
    c.dropped.fetch_add(1, std::memory_order_relaxed);
  } else {
    c.put_errors.fetch_add(1, std::memory_order_relaxed);
    return queued.status();
  }
  return absl::OkStatus();
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
  // A record of this tail has exactly this size; a larger one cannot be it (OutOfRange).
  std::vector<std::byte> record(kChunkHeaderBytes + layout_.payload_bytes(want.token_count));
  absl::StatusOr<uint64_t> got = store_->Get(want.key, record);
  Counters& c = *counters_;
  if (!got.ok()) {
    c.misses.fetch_add(1, std::memory_order_relaxed);
    return absl::IsOutOfRange(got.status())
               ? absl::DataLossError(absl::StrCat("tail record: ", got.status().message()))
               : got.status();
  }
  record.resize(*got);
  // Disk and kvtierd verified the payload's checksum; the host tier holds what this
  // process stored. The header (namespace, key, layout, token count) is checked here.
  absl::StatusOr<ChunkHeader> h = CheckChunkHeader(record, want);
  if (!h.ok()) {
    c.misses.fetch_add(1, std::memory_order_relaxed);
    return h.status();
  }
  c.hits.fetch_add(1, std::memory_order_relaxed);
  record.erase(record.begin(), record.begin() + kChunkHeaderBytes);
  return record;
}

void TailRecords::Flush() { store_->Flush(); }

TailStats TailRecords::stats() const {
  const Counters& c = *counters_;
  TailStats s;
  s.queued = c.queued.load(std::memory_order_relaxed);
  s.put = c.put.load(std::memory_order_relaxed);
  s.skipped = c.skipped.load(std::memory_order_relaxed);
  s.dropped = c.dropped.load(std::memory_order_relaxed);
  s.put_errors = c.put_errors.load(std::memory_order_relaxed);
  s.hits = c.hits.load(std::memory_order_relaxed);
  s.misses = c.misses.load(std::memory_order_relaxed);
  return s;
}

}  // namespace kvt::llamacpp
