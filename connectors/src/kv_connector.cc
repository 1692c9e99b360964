// KVConnector implementation over a shared TieredStore. See connectors/kv_connector.h
// and docs/connector.md. This file: lookup (cost model) and the payload level. The
// stores go through the store's one write-back queue (TieredStore::Write, async: buffer
// pool, back-pressure, supervised thread) and the leases are the
// store's (one lease book: a Lookup hands the engine the store's Lease); the paged level over the
// payload level: paged_level.h; the block-region level: block_level.h; the counters:
// connector_counters.h.
#include "connectors/kv_connector.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "block_level.h"
#include "connector_counters.h"
#include "kvstore/chunk_chain.h"
#include "kvstore/chunk_codec.h"
#include "paged_level.h"
#include "spdlog/spdlog.h"

namespace kvt {
namespace {

using SteadyClock = std::chrono::steady_clock;
using connector_internal::ConnectorCounters;

void Bump(ConnectorCounters::Counter& c, uint64_t n = 1) { ConnectorCounters::Bump(c, n); }

double SecondsSince(SteadyClock::time_point t0) {
  return std::chrono::duration<double>(SteadyClock::now() - t0).count();
}

}  // namespace

std::span<const std::byte> FetchedPayloads::LayerPayload(size_t chunk_index, uint32_t layer) const {
  const uint64_t lb = layer_bytes();
  return std::span<const std::byte>(
      records[chunk_index - first_chunk].get() + kChunkHeaderBytes + uint64_t{layer} * lb, lb);
}

absl::Status ConnectorOptions::Validate() const {
  if (absl::Status s = ns.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("ConnectorOptions.ns: ", s.message()));
  }
  if (absl::Status s = cost.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("ConnectorOptions.cost: ", s.message()));
  }
  if (absl::Status s = copy.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("ConnectorOptions.copy: ", s.message()));
  }
  return absl::OkStatus();
}

namespace {

// Thread-safe.
class KVConnectorImpl final : public KVConnector {
 public:
  KVConnectorImpl(const ConnectorOptions& options, std::shared_ptr<TieredStore> store)
      : options_(options),
        store_(std::move(store)),
        ns_(ComputeNamespace(options.ns)),
        chunk_tokens_(options.ns.chunk_tokens),
        payload_bytes_(options.ns.layout.payload_bytes(options.ns.chunk_tokens)),
        cost_(options.cost),
        counters_(std::make_shared<ConnectorCounters>()) {}

  // Submitted stores stay in the store's queue and are written after the connector is
  // gone (their callbacks share counters_); leases are the engines' (ConnectorLookup).
  ~KVConnectorImpl() override = default;

  absl::StatusOr<ConnectorLookup> Lookup(std::span<const TokenId> tokens,
                                         uint64_t num_computed_tokens) override {
    if (num_computed_tokens > tokens.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("Lookup: num_computed_tokens = %d exceeds the prompt length %d",
                          num_computed_tokens, tokens.size()));
    }
    Bump(counters_->lookups);
    ConnectorLookup out;
    if (tokens.size() < 2) return out;
    // Leave at least the last prompt token to compute so the engine gets logits.
    const size_t max_chunks = (tokens.size() - 1) / chunk_tokens_;
    if (max_chunks == 0 || uint64_t{max_chunks} * chunk_tokens_ <= num_computed_tokens) {
      return out;
    }
    std::vector<ChunkKey> keys =
        ComputeChunkKeys(ns_, tokens.first(max_chunks * chunk_tokens_), KeyOptions());
    LookupResult hit = store_->Lookup(keys, LookupOptions{.pin = true});
    out.looked_up_tokens = uint64_t{max_chunks} * chunk_tokens_;
    out.cached_tokens = uint64_t{hit.num_leading_hits} * chunk_tokens_;
    out.chunk_tiers.assign(hit.tier_kind.begin(), hit.tier_kind.begin() + hit.num_leading_hits);
    Bump(counters_->lookup_hit_tokens, out.cached_tokens);
    size_t k = 0;
    if (out.cached_tokens > num_computed_tokens) {
      if (options_.use_cost_model) {
        CostModel::Decision d = cost_.Decide(
            hit.tier_kind, chunk_tokens_, payload_bytes_ + kChunkHeaderBytes, num_computed_tokens);
        k = d.chunks_to_load;
        out.predicted_load_s = d.load_s;
        out.predicted_recompute_s = d.recompute_s;
      } else {
        k = hit.num_leading_hits;
        for (size_t i = num_computed_tokens / chunk_tokens_; i < k; ++i) {
          out.predicted_load_s +=
              cost_.PredictLoadSeconds(hit.tier_kind[i], payload_bytes_ + kChunkHeaderBytes);
        }
        out.predicted_recompute_s = cost_.PredictPrefillSavingSeconds(k * chunk_tokens_) -
                                    cost_.PredictPrefillSavingSeconds(num_computed_tokens);
      }
    }
    out.load_tokens = uint64_t{k} * chunk_tokens_;
    if (out.load_tokens <= num_computed_tokens) out.load_tokens = 0;
    Bump(counters_->lookup_load_tokens, out.load_tokens);
    // Keep pins only on the chunks to load; the engine holds them until its load is done.
    hit.lease.Shrink(out.load_tokens == 0 ? 0 : k);
    if (out.load_tokens != 0) out.lease = std::move(hit.lease);
    spdlog::debug(
        "kvt connector: lookup tokens={} computed={} cached={} load={} "
        "(predicted load {:.6g} s vs recompute {:.6g} s)",
        tokens.size(), num_computed_tokens, out.cached_tokens, out.load_tokens,
        out.predicted_load_s, out.predicted_recompute_s);
    return out;
  }

  absl::StatusOr<size_t> StorePayloads(std::span<const TokenId> tokens, const ChunkFill& fill,
                                       std::optional<uint64_t> held_tokens) override {
    if (!fill) return absl::InvalidArgumentError("StorePayloads: fill callback is empty");
    if (held_tokens && *held_tokens % chunk_tokens_ != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("StorePayloads: held_tokens = %d is not a multiple of chunk_tokens %d",
                          *held_tokens, chunk_tokens_));
    }
    Bump(counters_->store_calls);
    const size_t n = tokens.size() / chunk_tokens_;
    if (n == 0) return size_t{0};
    std::vector<ChunkKey> keys =
        ComputeChunkKeys(ns_, tokens.first(n * chunk_tokens_), KeyOptions());
    // Chunks already cached (the leading run the store holds) are skipped.
    size_t cached = 0;
    if (held_tokens) {
      cached = std::min<size_t>(*held_tokens / chunk_tokens_, n);
    } else {
      Bump(counters_->store_lookups);
      cached = store_->Lookup(keys).num_leading_hits;
    }
    Bump(counters_->store_chunks_skipped, cached);
    const uint64_t record_bytes = kChunkHeaderBytes + payload_bytes_;
    size_t taken = 0;
    for (size_t i = cached; i < n; ++i) {
      const ChunkHeader header = ChainHeader(ns_, options_.ns.layout, keys, i, chunk_tokens_);
      // The payload is copied out of the engine now (the engine's memory is not read
      // after this returns); the header is encoded over it by the store: on its
      // write-back thread when async, straight from this buffer.
      absl::Status filled;  // fill's outcome (OK when it was not called)
      WriteRequest w;
      w.record_bytes = record_bytes;
      w.header = header;
      w.fill = [&fill, &filled, i](std::span<std::byte> payload) {
        filled = fill(i, payload);
        return filled;
      };
      w.async = options_.async_store;
      w.limit_bytes = options_.max_pending_store_bytes;
      auto done = [counters = counters_, key = header.key](const absl::Status& s) {
        if (s.ok()) {
          Bump(counters->store_chunks_put);
        } else if (!absl::IsCancelled(s)) {
          Bump(counters->store_put_errors);
          spdlog::warn("kvt connector: storing chunk {} failed: {}", key.ToHex(), s.ToString());
        }
      };
      if (w.async) w.done = done;
      absl::StatusOr<ChunkKey> written = store_->Write(std::move(w));
      if (!filled.ok()) {
        return absl::Status(filled.code(), absl::StrFormat("StorePayloads: fill of chunk %d: %s", i,
                                                           filled.message()));
      }
      if (options_.async_store && absl::IsAlreadyExists(written.status())) {
        Bump(counters_->store_chunks_skipped);
        continue;
      }
      if (options_.async_store && absl::IsUnavailable(written.status())) {
        // Back-pressure: never block decode. Drop this chunk and the rest (a later
        // chunk is useless to a lookup without the ones before it).
        Bump(counters_->store_chunks_dropped, n - i);
        spdlog::debug(
            "kvt connector: store's write-back queue full ({} B pending, limit {} B); "
            "dropping {} chunks",
            store_->stats().pending_write_bytes, options_.max_pending_store_bytes, n - i);
        break;
      }
      ++taken;
      Bump(counters_->store_chunks_taken);
      // Sync: the outcome is known now; async: done reports it (an error here, a bad
      // request, is reported the same way).
      if (!options_.async_store || !written.ok()) done(written.status());
    }
    return taken;
  }

  absl::StatusOr<ConnectorLoadResult> LoadPayloads(std::span<const TokenId> tokens,
                                                   uint64_t num_tokens, const ChunkConsume& consume,
                                                   uint64_t skip_tokens) override {
    if (!consume) return absl::InvalidArgumentError("LoadPayloads: consume callback is empty");
    if (absl::Status s = connector_internal::CheckLoadArgs("LoadPayloads", tokens, num_tokens,
                                                           skip_tokens, chunk_tokens_);
        !s.ok()) {
      return s;
    }
    ConnectorLoadResult result;
    const size_t n = num_tokens / chunk_tokens_;
    const size_t first = std::min<uint64_t>(skip_tokens / chunk_tokens_, n);
    result.loaded_tokens = uint64_t{first} * chunk_tokens_;
    std::vector<ChunkKey> keys = ComputeChunkKeys(ns_, tokens.first(num_tokens), KeyOptions());
    if (first == n) return result;
    const KvLayout layout = options_.ns.layout;
    std::vector<std::byte> buf(kChunkHeaderBytes + payload_bytes_);
    for (size_t i = first; i < n; ++i) {
      absl::Status err = LoadOne(keys[i], layout, std::span<std::byte>(buf), i, consume);
      if (!err.ok()) {
        for (size_t j = i; j < n; ++j) result.failed_chunks.push_back(j);
        Bump(counters_->load_chunks_failed, n - i);
        result.first_error = err;
        spdlog::debug("kvt connector: load stopped at chunk {} of {}: {}", i, n, err.ToString());
        break;
      }
      Bump(counters_->load_chunks_ok);
      result.loaded_tokens = uint64_t{i + 1} * chunk_tokens_;
    }
    return result;
  }

  absl::StatusOr<FetchedPayloads> FetchPayloads(std::span<const TokenId> tokens,
                                                uint64_t num_tokens,
                                                uint64_t skip_tokens) override {
    if (absl::Status s = connector_internal::CheckLoadArgs("FetchPayloads", tokens, num_tokens,
                                                           skip_tokens, chunk_tokens_);
        !s.ok()) {
      return s;
    }
    FetchedPayloads out;
    out.num_layers = options_.ns.layout.num_layers;
    out.payload_bytes = payload_bytes_;
    const size_t n = num_tokens / chunk_tokens_;
    const size_t first = std::min<uint64_t>(skip_tokens / chunk_tokens_, n);
    out.first_chunk = first;
    out.result.loaded_tokens = uint64_t{first} * chunk_tokens_;
    std::vector<ChunkKey> keys = ComputeChunkKeys(ns_, tokens.first(num_tokens), KeyOptions());
    if (first == n) return out;
    const KvLayout layout = options_.ns.layout;
    const size_t record_bytes = kChunkHeaderBytes + payload_bytes_;
    const ChunkConsume keep = [](size_t, std::span<const std::byte>) { return absl::OkStatus(); };
    for (size_t i = first; i < n; ++i) {
      auto rec = std::make_unique_for_overwrite<std::byte[]>(record_bytes);
      absl::Status err =
          LoadOne(keys[i], layout, std::span<std::byte>(rec.get(), record_bytes), i, keep,
                  /*may_view=*/false);
      if (!err.ok()) {
        for (size_t j = i; j < n; ++j) out.result.failed_chunks.push_back(j);
        Bump(counters_->load_chunks_failed, n - i);
        out.result.first_error = err;
        spdlog::debug("kvt connector: fetch stopped at chunk {} of {}: {}", i, n, err.ToString());
        break;
      }
      Bump(counters_->load_chunks_ok);
      out.records.push_back(std::move(rec));
      out.result.loaded_tokens = uint64_t{i + 1} * chunk_tokens_;
    }
    return out;
  }

  void ObservePrefill(uint64_t new_tokens, uint64_t context_tokens,
                      std::chrono::duration<double> elapsed) override {
    cost_.ObservePrefill(new_tokens, context_tokens, elapsed.count());
  }

  // Every submitted chunk is in every tier the placement names (one queue: the store's).
  void Flush() override { store_->Flush(); }

  const NamespaceParams& ns_params() const override { return options_.ns; }
  NamespaceId ns() const override { return ns_; }
  uint32_t chunk_tokens() const override { return chunk_tokens_; }
  uint64_t chunk_payload_bytes() const override { return payload_bytes_; }
  CostModel& cost_model() override { return cost_; }

  absl::Status RegisterKvView(const PagedKvView& view) override {
    if (absl::Status s = connector_internal::CheckViewFor(view, options_.ns.layout); !s.ok()) {
      return s;
    }
    absl::MutexLock lock(&mu_);
    view_ = view;
    return absl::OkStatus();
  }

  // The paged level: a thin layer over StorePayloads/LoadPayloads (paged_level.h).
  absl::StatusOr<size_t> Store(std::span<const TokenId> tokens,
                               std::span<const int64_t> slot_mapping) override {
    PagedKvView view;
    if (absl::Status s = GetView("Store", &view); !s.ok()) return s;
    return connector_internal::StorePaged(*this, view, tokens, slot_mapping, options_.copy);
  }

  absl::StatusOr<ConnectorLoadResult> Load(std::span<const TokenId> tokens, uint64_t num_tokens,
                                           std::span<const int64_t> slot_mapping,
                                           uint64_t num_computed_tokens) override {
    PagedKvView view;
    if (absl::Status s = GetView("Load", &view); !s.ok()) return s;
    return connector_internal::LoadPaged(*this, view, tokens, num_tokens, slot_mapping,
                                         num_computed_tokens, options_.copy);
  }

  // The block-region level: a thin layer over the payload level (block_level.h).
  absl::Status RegisterBlockView(const BlockRegionView& view) override {
    if (absl::Status s =
            connector_internal::CheckBlockViewFor(view, options_.ns.layout, chunk_tokens_);
        !s.ok()) {
      return s;
    }
    absl::MutexLock lock(&mu_);
    blocks_ = view;
    return absl::OkStatus();
  }

  absl::StatusOr<size_t> StoreBlocks(std::span<const TokenId> tokens,
                                     std::span<const int32_t> block_ids) override {
    BlockRegionView view;
    if (absl::Status s = GetBlockView("StoreBlocks", &view); !s.ok()) return s;
    return connector_internal::StoreBlocks(*this, view, tokens, block_ids);
  }

  absl::StatusOr<ConnectorLoadResult> LoadBlocks(std::span<const TokenId> tokens,
                                                 uint64_t num_tokens,
                                                 std::span<const int32_t> block_ids,
                                                 uint64_t skip_tokens) override {
    BlockRegionView view;
    if (absl::Status s = GetBlockView("LoadBlocks", &view); !s.ok()) return s;
    return connector_internal::LoadBlocks(*this, view, tokens, num_tokens, block_ids, skip_tokens);
  }

  absl::StatusOr<FetchedBlocks> FetchBlocks(std::span<const TokenId> tokens, uint64_t num_tokens,
                                            std::span<const int32_t> block_ids,
                                            uint64_t skip_tokens) override {
    BlockRegionView view;
    if (absl::Status s = GetBlockView("FetchBlocks", &view); !s.ok()) return s;
    return connector_internal::FetchBlocks(*this, view, tokens, num_tokens, block_ids, skip_tokens);
  }

  ConnectorStats stats() const override {
    ConnectorStats s;
    counters_->Fill(&s);
    s.cost = cost_.stats();
    // The store's (shared by every connector over it): one lease book, one queue.
    const TieredStoreStats store = store_->stats();
    s.leases_released_by_timeout = store.expired_leases;
    s.store_pending_bytes = store.pending_write_bytes;
    return s;
  }

 private:
  ChunkKeyOptions KeyOptions() const {
    ChunkKeyOptions o;
    o.chunk_tokens = chunk_tokens_;
    o.include_partial = false;
    return o;
  }

  absl::Status GetView(const char* what, PagedKvView* view) {
    absl::MutexLock lock(&mu_);
    if (!view_.has_value()) {
      return absl::FailedPreconditionError(
          absl::StrFormat("%s: no KV view registered (call RegisterKvView first)", what));
    }
    *view = *view_;
    return absl::OkStatus();
  }

  // A copy of the registered block view (a concurrent RegisterBlockView replaces it for
  // later calls only).
  absl::Status GetBlockView(const char* what, BlockRegionView* view) {
    absl::MutexLock lock(&mu_);
    if (!blocks_.has_value()) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: no block view registered (call RegisterBlockView / kvt_register_block_view)", what));
    }
    *view = *blocks_;
    return absl::OkStatus();
  }

  // Fetches, verifies and consumes chunk `index`. Counts the outcome.
  // `may_view`: the record may be consumed in tier 0 without being copied into `buf`
  // (false: `buf` always holds the record afterwards, e.g. FetchPayloads keeps it).
  absl::Status LoadOne(const ChunkKey& key, const KvLayout& layout, std::span<std::byte> buf,
                       size_t index, const ChunkConsume& consume, bool may_view = true) {
    const SteadyClock::time_point t0 = SteadyClock::now();
    GetInfo info;
    // A record in tier 0 (the host tier) is consumed where it lies, without copying it
    // out first (TieredStore::View); anything else is copied into `buf`.
    absl::StatusOr<RecordView> view =
        may_view ? store_->View(key, &info) : absl::StatusOr<RecordView>(absl::NotFoundError(""));
    absl::StatusOr<uint64_t> got = absl::NotFoundError("not viewed");
    if (view.ok()) {
      got = view->bytes().size();
      if (*got > buf.size()) got = absl::OutOfRangeError(absl::StrFormat("%d bytes", *got));
    } else if (absl::IsDataLoss(view.status())) {
      // A lower tier's copy failed verification (counted and dropped there): data lost.
      got = view.status();
    } else {
      info = GetInfo{};
      got = store_->Get(key, buf, &info);
    }
    if (!got.ok()) {
      if (absl::IsNotFound(got.status())) {
        Bump(counters_->load_misses);
      } else if (absl::IsDataLoss(got.status())) {
        // A verifying tier (disk, remote) found the record damaged: data loss, not a miss.
        Bump(counters_->load_data_loss);
      } else if (absl::IsOutOfRange(got.status())) {
        // A record larger than this namespace's chunks cannot be ours.
        Bump(counters_->load_data_loss);
        return absl::DataLossError(
            absl::StrFormat("chunk %d (key %s): record larger than expected %d bytes: %s", index,
                            key.ToHex(), buf.size(), got.status().message()));
      } else {
        Bump(counters_->load_other_errors);
      }
      return got.status();
    }
    std::span<const std::byte> record =
        view.ok() ? view->bytes() : std::span<const std::byte>(buf.data(), *got);
    DecodeExpectations expect{ns_, key, &layout};
    // The store's verifying tiers checked the payload (verify once): the header must be
    // what this request asked for.
    absl::StatusOr<ChunkHeader> header = CheckChunkHeader(record, expect);
    if (header.ok() && header->token_count != chunk_tokens_) {
      header = absl::FailedPreconditionError(absl::StrFormat(
          "chunk %d has %d tokens; expected %d", index, header->token_count, chunk_tokens_));
    }
    if (!header.ok()) {
      if (absl::IsDataLoss(header.status())) {
        Bump(counters_->load_data_loss);
      } else {
        Bump(counters_->load_mismatch);
      }
      spdlog::warn("kvt connector: chunk {} (key {}) failed verification: {}", index, key.ToHex(),
                   header.status().ToString());
      return header.status();
    }
    const double fetch_s = SecondsSince(t0);
    Bump(counters_->load_bytes, *got);
    absl::Status consumed = consume(index, record.subspan(kChunkHeaderBytes));
    // A viewed record's transfer is its consume (the one copy out of tier 0).
    if (info.tier_index != kNoTier && !info.from_queue) {
      cost_.ObserveTransfer(info.tier_kind, *got, view.ok() ? SecondsSince(t0) : fetch_s);
    }
    if (!consumed.ok()) {
      Bump(counters_->load_other_errors);
      return absl::Status(consumed.code(),
                          absl::StrFormat("consume of chunk %d: %s", index, consumed.message()));
    }
    return absl::OkStatus();
  }

  const ConnectorOptions options_;
  const std::shared_ptr<TieredStore> store_;
  const NamespaceId ns_;
  const uint32_t chunk_tokens_;
  const uint64_t payload_bytes_;
  CostModel cost_;
  // Shared with the done callbacks of submitted stores, which may outlive this.
  const std::shared_ptr<ConnectorCounters> counters_;

  mutable absl::Mutex mu_;
  std::optional<PagedKvView> view_ ABSL_GUARDED_BY(mu_);
  std::optional<BlockRegionView> blocks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<KVConnector>> KVConnector::Create(
    const ConnectorOptions& options, std::shared_ptr<TieredStore> store) {
  if (store == nullptr) {
    return absl::InvalidArgumentError("KVConnector::Create: store is null");
  }
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  return std::unique_ptr<KVConnector>(new KVConnectorImpl(options, std::move(store)));
}

}  // namespace kvt
