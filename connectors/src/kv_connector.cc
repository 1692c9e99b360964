// KVConnector implementation over a shared TieredStore. See connectors/kv_connector.h
// and docs/connector.md.
#include "connectors/kv_connector.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <map>
#include <new>
#include <thread>
#include <unordered_set>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "kvstore/chunk_chain.h"
#include "kvstore/chunk_codec.h"
#include "spdlog/spdlog.h"

namespace kvt {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void Bump(std::atomic<uint64_t>& c, uint64_t n = 1) { c.fetch_add(n, std::memory_order_relaxed); }
uint64_t Read(const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); }

// Uninitialised byte buffer (a chunk is tens of MiB; zero-filling it would double the
// time Store holds the caller). Large buffers are 2 MiB-aligned and advised as huge
// pages, so first touch costs a few faults per chunk instead of one per 4 KiB page.
struct FreeDeleter {
  void operator()(std::byte* p) const { std::free(p); }
};
struct RecordBuffer {
  std::unique_ptr<std::byte[], FreeDeleter> data;
  size_t size = 0;
  static RecordBuffer Make(size_t n) {
    constexpr size_t kHuge = 2u << 20;
    void* p = nullptr;
    if (n >= kHuge) {
      p = std::aligned_alloc(kHuge, (n + kHuge - 1) / kHuge * kHuge);
      if (p != nullptr) madvise(p, (n + kHuge - 1) / kHuge * kHuge, MADV_HUGEPAGE);
    } else {
      p = std::malloc(std::max<size_t>(n, 1));
    }
    if (p == nullptr) throw std::bad_alloc();
    return RecordBuffer{std::unique_ptr<std::byte[], FreeDeleter>(static_cast<std::byte*>(p)), n};
  }
  std::span<std::byte> span() { return {data.get(), size}; }
};

}  // namespace

absl::Status ConnectorOptions::Validate() const {
  if (absl::Status s = ns.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("ConnectorOptions.ns: ", s.message()));
  }
  if (absl::Status s = cost.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("ConnectorOptions.cost: ", s.message()));
  }
  if (lease_release_after.count() <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "ConnectorOptions.lease_release_after = %d ms; expected > 0", lease_release_after.count()));
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
        cost_(options.cost) {
    if (options_.async_store) worker_ = std::thread([this] { WorkerLoop(); });
  }

  ~KVConnectorImpl() override {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (worker_.joinable()) worker_.join();  // drains the queue first
    absl::MutexLock lock(&mu_);
    for (auto& [key, leases] : leases_) {
      for (const auto& l : leases) store_->ReleaseLease(l.id);
    }
  }

  absl::StatusOr<ConnectorLookup> Lookup(std::span<const TokenId> tokens,
                                         uint64_t num_computed_tokens) override {
    if (num_computed_tokens > tokens.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("Lookup: num_computed_tokens = %d exceeds the prompt length %d",
                          num_computed_tokens, tokens.size()));
    }
    Bump(lookups_);
    ReleaseStaleLeases();
    ConnectorLookup out;
    if (tokens.size() < 2) return out;
    // Leave at least the last prompt token to compute so the engine gets logits.
    const size_t max_chunks = (tokens.size() - 1) / chunk_tokens_;
    if (max_chunks == 0 || uint64_t{max_chunks} * chunk_tokens_ <= num_computed_tokens) {
      return out;
    }
    std::vector<ChunkKey> keys =
        ComputeChunkKeys(ns_, tokens.first(max_chunks * chunk_tokens_), KeyOptions());
    LookupResult hit = store_->Lookup(keys, /*pin=*/true);
    out.cached_tokens = uint64_t{hit.num_leading_hits} * chunk_tokens_;
    Bump(lookup_hit_tokens_, out.cached_tokens);
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
    Bump(lookup_load_tokens_, out.load_tokens);
    if (hit.lease != kNoLease) {
      if (out.load_tokens == 0) {
        store_->ReleaseLease(hit.lease);
      } else {
        out.lease = hit.lease;
        absl::MutexLock lock(&mu_);
        leases_[keys[k - 1]].push_back(Lease{hit.lease, Clock::now()});
      }
    }
    spdlog::debug(
        "kvt connector: lookup tokens={} computed={} cached={} load={} "
        "(predicted load {:.6g} s vs recompute {:.6g} s)",
        tokens.size(), num_computed_tokens, out.cached_tokens, out.load_tokens,
        out.predicted_load_s, out.predicted_recompute_s);
    return out;
  }

  absl::StatusOr<size_t> StorePayloads(std::span<const TokenId> tokens,
                                       const ChunkFill& fill) override {
    if (!fill) return absl::InvalidArgumentError("StorePayloads: fill callback is empty");
    Bump(store_calls_);
    const size_t n = tokens.size() / chunk_tokens_;
    if (n == 0) return size_t{0};
    std::vector<ChunkKey> keys =
        ComputeChunkKeys(ns_, tokens.first(n * chunk_tokens_), KeyOptions());
    // Chunks already cached (the leading run the store holds) are skipped.
    const size_t cached = store_->Lookup(keys, /*pin=*/false).num_leading_hits;
    Bump(store_chunks_skipped_, cached);
    const uint64_t record_bytes = kChunkHeaderBytes + payload_bytes_;
    size_t taken = 0;
    for (size_t i = cached; i < n; ++i) {
      {
        absl::MutexLock lock(&mu_);
        if (pending_keys_.contains(keys[i])) {
          Bump(store_chunks_skipped_);
          continue;
        }
        if (options_.async_store && options_.max_pending_store_bytes != 0 &&
            pending_bytes_ + record_bytes > options_.max_pending_store_bytes) {
          // Back-pressure: never block decode. Drop this chunk and the rest (a later
          // chunk is useless to a lookup without the ones before it).
          Bump(store_chunks_dropped_, n - i);
          spdlog::debug(
              "kvt connector: store queue full ({} B pending, limit {} B); "
              "dropping {} chunks",
              pending_bytes_, options_.max_pending_store_bytes, n - i);
          break;
        }
        if (options_.async_store) {
          // Reserve the bytes and the key now so concurrent stores see them.
          pending_bytes_ += record_bytes;
          pending_keys_.insert(keys[i]);
        }
      }
      Job job;
      job.header = ChainHeader(ns_, options_.ns.layout, keys, i, chunk_tokens_);
      job.record = TakeBuffer(record_bytes);
      absl::Status filled = fill(i, job.record.span().subspan(kChunkHeaderBytes));
      if (!filled.ok()) {
        if (options_.async_store) Unreserve(keys[i], record_bytes);
        return absl::Status(filled.code(), absl::StrFormat("StorePayloads: fill of chunk %d: %s", i,
                                                           filled.message()));
      }
      ++taken;
      Bump(store_chunks_taken_);
      if (options_.async_store) {
        absl::MutexLock lock(&mu_);
        queue_.push_back(std::move(job));
      } else {
        PutJob(job);
      }
    }
    return taken;
  }

  absl::StatusOr<ConnectorLoadResult> LoadPayloads(std::span<const TokenId> tokens,
                                                   uint64_t num_tokens, const ChunkConsume& consume,
                                                   uint64_t skip_tokens) override {
    if (!consume) return absl::InvalidArgumentError("LoadPayloads: consume callback is empty");
    if (absl::Status s = CheckLoadArgs("LoadPayloads", tokens, num_tokens, skip_tokens); !s.ok()) {
      return s;
    }
    ConnectorLoadResult result;
    const size_t n = num_tokens / chunk_tokens_;
    const size_t first = std::min<uint64_t>(skip_tokens / chunk_tokens_, n);
    result.loaded_tokens = uint64_t{first} * chunk_tokens_;
    if (first == n) return result;
    std::vector<ChunkKey> keys = ComputeChunkKeys(ns_, tokens.first(num_tokens), KeyOptions());
    const KvLayout layout = options_.ns.layout;
    std::vector<std::byte> buf(kChunkHeaderBytes + payload_bytes_);
    for (size_t i = first; i < n; ++i) {
      absl::Status err = LoadOne(keys[i], layout, std::span<std::byte>(buf), i, consume);
      if (!err.ok()) {
        for (size_t j = i; j < n; ++j) result.failed_chunks.push_back(j);
        Bump(load_chunks_failed_, n - i);
        result.first_error = err;
        spdlog::debug("kvt connector: load stopped at chunk {} of {}: {}", i, n, err.ToString());
        break;
      }
      Bump(load_chunks_ok_);
      result.loaded_tokens = uint64_t{i + 1} * chunk_tokens_;
    }
    ReleaseLeaseFor(keys);
    return result;
  }

  void ObservePrefill(uint64_t new_tokens, uint64_t context_tokens,
                      std::chrono::duration<double> elapsed) override {
    cost_.ObservePrefill(new_tokens, context_tokens, elapsed.count());
  }

  void Flush() override {
    absl::MutexLock lock(&mu_);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return queue_.empty() && in_flight_ == 0;
    };
    mu_.Await(absl::Condition(&idle));
  }

  const NamespaceParams& ns_params() const override { return options_.ns; }
  NamespaceId ns() const override { return ns_; }
  uint32_t chunk_tokens() const override { return chunk_tokens_; }
  uint64_t chunk_payload_bytes() const override { return payload_bytes_; }
  CostModel& cost_model() override { return cost_; }

  absl::Status RegisterKvView(const PagedKvView& view) override {
    if (absl::Status s = view.Validate(); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("RegisterKvView: ", s.message()));
    }
    if (!(view.layout == options_.ns.layout)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "RegisterKvView: the view's layout %s does not match the declared layout %s "
          "(ConnectorOptions.ns.layout)",
          view.layout.DebugString(), options_.ns.layout.DebugString()));
    }
    if (view.device == KvDevice::kCuda && !CudaCopyAvailable()) {
      return absl::InvalidArgumentError(
          "RegisterKvView: view.device = cuda but this process has no usable CUDA device "
          "(CPU-only build or no GPU)");
    }
    absl::MutexLock lock(&mu_);
    view_ = view;
    return absl::OkStatus();
  }

  absl::StatusOr<size_t> Store(std::span<const TokenId> tokens,
                               std::span<const int64_t> slot_mapping) override {
    PagedKvView view;
    if (absl::Status s = GetView("Store", &view); !s.ok()) return s;
    const size_t covered = tokens.size() / chunk_tokens_ * chunk_tokens_;
    if (slot_mapping.size() < covered) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "Store: slot_mapping has %d entries; expected >= %d (complete chunks x chunk_tokens)",
          slot_mapping.size(), covered));
    }
    const int64_t num_slots = view.num_slots();
    for (size_t i = 0; i < covered; ++i) {
      if (slot_mapping[i] < 0 || slot_mapping[i] >= num_slots) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "Store: slot_mapping[%d] = %d; expected a slot in [0, %d) for every token of a "
            "complete chunk (padding -1 cannot be stored)",
            i, slot_mapping[i], num_slots));
      }
    }
    const uint32_t ct = chunk_tokens_;
    const KvCopyOptions copy = options_.copy;
    return StorePayloads(tokens, [&](size_t chunk, std::span<std::byte> payload) {
      return GatherChunk(view, slot_mapping.subspan(chunk * ct, ct), payload, copy);
    });
  }

  absl::StatusOr<ConnectorLoadResult> Load(std::span<const TokenId> tokens, uint64_t num_tokens,
                                           std::span<const int64_t> slot_mapping,
                                           uint64_t num_computed_tokens) override {
    PagedKvView view;
    if (absl::Status s = GetView("Load", &view); !s.ok()) return s;
    if (absl::Status s = CheckLoadArgs("Load", tokens, num_tokens, num_computed_tokens); !s.ok()) {
      return s;
    }
    if (slot_mapping.size() < num_tokens) {
      return absl::InvalidArgumentError(
          absl::StrFormat("Load: slot_mapping has %d entries; expected >= num_tokens = %d",
                          slot_mapping.size(), num_tokens));
    }
    const int64_t num_slots = view.num_slots();
    for (uint64_t i = num_computed_tokens; i < num_tokens; ++i) {
      if (slot_mapping[i] < -1 || slot_mapping[i] >= num_slots) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "Load: slot_mapping[%d] = %d; expected -1 (padding) or a slot in [0, %d)", i,
            slot_mapping[i], num_slots));
      }
    }
    const uint32_t ct = chunk_tokens_;
    const KvCopyOptions copy = options_.copy;
    std::vector<int64_t> slots(ct);
    return LoadPayloads(
        tokens, num_tokens,
        [&](size_t chunk, std::span<const std::byte> payload) {
          const uint64_t base = uint64_t{chunk} * ct;
          for (uint32_t j = 0; j < ct; ++j) {
            // Positions the engine already holds are never written.
            slots[j] = base + j < num_computed_tokens ? -1 : slot_mapping[base + j];
          }
          return ScatterChunk(view, slots, payload, copy);
        },
        num_computed_tokens);
  }

  ConnectorStats stats() const override {
    ConnectorStats s;
    s.lookups = Read(lookups_);
    s.lookup_hit_tokens = Read(lookup_hit_tokens_);
    s.lookup_load_tokens = Read(lookup_load_tokens_);
    s.leases_released_by_load = Read(leases_by_load_);
    s.leases_released_by_timeout = Read(leases_by_timeout_);
    s.store_calls = Read(store_calls_);
    s.store_chunks_taken = Read(store_chunks_taken_);
    s.store_chunks_skipped = Read(store_chunks_skipped_);
    s.store_chunks_dropped = Read(store_chunks_dropped_);
    s.store_chunks_put = Read(store_chunks_put_);
    s.store_put_errors = Read(store_put_errors_);
    s.load_chunks_ok = Read(load_chunks_ok_);
    s.load_chunks_failed = Read(load_chunks_failed_);
    s.load_misses = Read(load_misses_);
    s.load_data_loss = Read(load_data_loss_);
    s.load_mismatch = Read(load_mismatch_);
    s.load_other_errors = Read(load_other_errors_);
    s.load_bytes = Read(load_bytes_);
    s.cost = cost_.stats();
    absl::MutexLock lock(&mu_);
    s.store_pending_bytes = pending_bytes_;
    return s;
  }

 private:
  struct Job {
    ChunkHeader header;
    RecordBuffer record;
  };
  struct Lease {
    LeaseId id;
    Clock::time_point created;
  };

  ChunkKeyOptions KeyOptions() const {
    ChunkKeyOptions o;
    o.chunk_tokens = chunk_tokens_;
    o.include_partial = false;
    return o;
  }

  absl::Status CheckLoadArgs(const char* what, std::span<const TokenId> tokens, uint64_t num_tokens,
                             uint64_t skip_tokens) const {
    if (num_tokens % chunk_tokens_ != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: num_tokens = %d is not a multiple of chunk_tokens = %d", what,
                          num_tokens, chunk_tokens_));
    }
    if (num_tokens > tokens.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: num_tokens = %d exceeds the %d tokens given", what, num_tokens, tokens.size()));
    }
    if (skip_tokens > num_tokens) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: tokens already held (%d) exceed num_tokens = %d", what, skip_tokens, num_tokens));
    }
    return absl::OkStatus();
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

  // Fetches, verifies and consumes chunk `index`. Counts the outcome.
  absl::Status LoadOne(const ChunkKey& key, const KvLayout& layout, std::span<std::byte> buf,
                       size_t index, const ChunkConsume& consume) {
    const Clock::time_point t0 = Clock::now();
    GetInfo info;
    absl::StatusOr<uint64_t> got = store_->Get(key, buf, &info);
    if (!got.ok()) {
      if (absl::IsNotFound(got.status())) {
        Bump(load_misses_);
      } else if (absl::IsOutOfRange(got.status())) {
        // A record larger than this namespace's chunks cannot be ours.
        Bump(load_data_loss_);
        return absl::DataLossError(
            absl::StrFormat("chunk %d (key %s): record larger than expected %d bytes: %s", index,
                            key.ToHex(), buf.size(), got.status().message()));
      } else {
        Bump(load_other_errors_);
      }
      return got.status();
    }
    std::span<const std::byte> record(buf.data(), *got);
    DecodeExpectations expect{ns_, key, &layout};
    absl::StatusOr<ChunkHeader> header = VerifyChunk(record, expect);
    if (header.ok() && header->token_count != chunk_tokens_) {
      header = absl::FailedPreconditionError(absl::StrFormat(
          "chunk %d has %d tokens; expected %d", index, header->token_count, chunk_tokens_));
    }
    if (!header.ok()) {
      if (absl::IsDataLoss(header.status())) {
        Bump(load_data_loss_);
      } else {
        Bump(load_mismatch_);
      }
      spdlog::warn("kvt connector: chunk {} (key {}) failed verification: {}", index, key.ToHex(),
                   header.status().ToString());
      return header.status();
    }
    if (info.tier_index >= 0 && static_cast<size_t>(info.tier_index) < store_->num_tiers()) {
      cost_.ObserveTransfer(store_->tier(info.tier_index).kind(), *got, SecondsSince(t0));
    }
    Bump(load_bytes_, *got);
    absl::Status consumed = consume(index, record.subspan(kChunkHeaderBytes));
    if (!consumed.ok()) {
      Bump(load_other_errors_);
      return absl::Status(consumed.code(),
                          absl::StrFormat("consume of chunk %d: %s", index, consumed.message()));
    }
    return absl::OkStatus();
  }

  // Releases one lease registered by Lookup for this prefix (the longest match).
  void ReleaseLeaseFor(const std::vector<ChunkKey>& keys) {
    LeaseId id = kNoLease;
    {
      absl::MutexLock lock(&mu_);
      for (size_t i = keys.size(); i-- > 0 && id == kNoLease;) {
        auto it = leases_.find(keys[i]);
        if (it == leases_.end()) continue;
        id = it->second.back().id;
        it->second.pop_back();
        if (it->second.empty()) leases_.erase(it);
      }
    }
    if (id != kNoLease) {
      store_->ReleaseLease(id);
      Bump(leases_by_load_);
    }
  }

  void ReleaseStaleLeases() {
    std::vector<LeaseId> stale;
    {
      absl::MutexLock lock(&mu_);
      if (leases_.empty()) return;
      const Clock::time_point cutoff = Clock::now() - options_.lease_release_after;
      for (auto it = leases_.begin(); it != leases_.end();) {
        auto& v = it->second;
        auto keep =
            std::partition(v.begin(), v.end(), [&](const Lease& l) { return l.created > cutoff; });
        for (auto j = keep; j != v.end(); ++j) stale.push_back(j->id);
        v.erase(keep, v.end());
        it = v.empty() ? leases_.erase(it) : std::next(it);
      }
    }
    for (LeaseId id : stale) store_->ReleaseLease(id);
    Bump(leases_by_timeout_, stale.size());
  }

  // A pooled buffer of exactly `bytes` (already faulted in) or a new one.
  RecordBuffer TakeBuffer(uint64_t bytes) {
    {
      absl::MutexLock lock(&mu_);
      for (size_t i = pool_.size(); i-- > 0;) {
        if (pool_[i].size == bytes) {
          RecordBuffer b = std::move(pool_[i]);
          pool_.erase(pool_.begin() + i);
          pool_bytes_ -= bytes;
          return b;
        }
      }
    }
    return RecordBuffer::Make(bytes);
  }

  void Unreserve(const ChunkKey& key, uint64_t bytes) {
    absl::MutexLock lock(&mu_);
    pending_bytes_ -= bytes;
    pending_keys_.erase(key);
  }

  void PutJob(Job& job) {
    std::span<std::byte> rec = job.record.span();
    absl::Status s = EncodeChunk(job.header, rec.subspan(kChunkHeaderBytes), rec);
    if (s.ok()) s = store_->Put(rec);
    if (s.ok()) {
      Bump(store_chunks_put_);
    } else {
      Bump(store_put_errors_);
      spdlog::warn("kvt connector: storing chunk {} failed: {}", job.header.key.ToHex(),
                   s.ToString());
    }
  }

  void WorkerLoop() {
    for (;;) {
      Job job;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return !queue_.empty() || stopping_;
        };
        mu_.Await(absl::Condition(&ready));
        if (queue_.empty()) return;  // stopping and drained
        job = std::move(queue_.front());
        queue_.pop_front();
        ++in_flight_;
      }
      PutJob(job);
      const ChunkKey key = job.header.key;
      const uint64_t bytes = job.record.size;
      absl::MutexLock lock(&mu_);
      if (pool_bytes_ + bytes <= options_.store_buffer_pool_bytes) {
        pool_bytes_ += bytes;
        pool_.push_back(std::move(job.record));
      }
      --in_flight_;
      pending_bytes_ -= bytes;
      pending_keys_.erase(key);
    }
  }

  const ConnectorOptions options_;
  const std::shared_ptr<TieredStore> store_;
  const NamespaceId ns_;
  const uint32_t chunk_tokens_;
  const uint64_t payload_bytes_;
  CostModel cost_;

  mutable absl::Mutex mu_;
  std::optional<PagedKvView> view_ ABSL_GUARDED_BY(mu_);
  std::map<ChunkKey, std::vector<Lease>> leases_ ABSL_GUARDED_BY(mu_);
  std::deque<Job> queue_ ABSL_GUARDED_BY(mu_);
  std::unordered_set<ChunkKey> pending_keys_ ABSL_GUARDED_BY(mu_);
  uint64_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Record buffers returned by the worker for reuse (bounded by store_buffer_pool_bytes).
  std::vector<RecordBuffer> pool_ ABSL_GUARDED_BY(mu_);
  uint64_t pool_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;

  std::atomic<uint64_t> lookups_{0}, lookup_hit_tokens_{0}, lookup_load_tokens_{0},
      leases_by_load_{0}, leases_by_timeout_{0}, store_calls_{0}, store_chunks_taken_{0},
      store_chunks_skipped_{0}, store_chunks_dropped_{0}, store_chunks_put_{0},
      store_put_errors_{0}, load_chunks_ok_{0}, load_chunks_failed_{0}, load_misses_{0},
      load_data_loss_{0}, load_mismatch_{0}, load_other_errors_{0}, load_bytes_{0};
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
