// TieredStore: Write, Get and Lookup (the data path) over the tiers, the write-back queue
// (write_back_queue.cc), the buffer pool (buffer_pool.cc), the lookup's location and pins
// (tier_lookup.cc) and the lease book (lease_book.cc); listing and eviction are in
// tiered_store_admin.cc.
#include "kvstore/tiered_store.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "kvstore/chunk_codec.h"
#include "spdlog/spdlog.h"
#include "tier_lookup.h"
#include "tiered_store_impl.h"

namespace kvt {

absl::Status TieredStoreOptions::Validate() const {
  if (lease_timeout.count() <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "TieredStoreOptions.lease_timeout = %d ms; expected > 0", lease_timeout.count()));
  }
  return absl::OkStatus();
}

TierFactory UseTier(std::unique_ptr<Tier> tier) {
  // std::function must be copyable: share the one tier; the store takes it once.
  auto shared = std::make_shared<std::unique_ptr<Tier>>(std::move(tier));
  return [shared]() -> absl::StatusOr<std::unique_ptr<Tier>> {
    if (*shared == nullptr) return absl::InvalidArgumentError("UseTier: tier is null or taken");
    return std::move(*shared);
  };
}

absl::Status TieredStore::Impl::Init(std::vector<TierFactory> factories) {
  for (size_t i = 0; i < factories.size(); ++i) {
    if (!factories[i]) {
      return absl::InvalidArgumentError(absl::StrFormat("TieredStore::Create: tier %d is null", i));
    }
    absl::StatusOr<std::unique_ptr<Tier>> tier = factories[i]();
    if (!tier.ok()) return tier.status();
    if (*tier == nullptr) {
      return absl::InvalidArgumentError(absl::StrFormat("TieredStore::Create: tier %d is null", i));
    }
    caps_.push_back((*tier)->caps());
    tiers_.push_back(std::move(*tier));
  }
  placement_ = internal::PlaceWrites(caps_, options_.placement);
  internal::WriteBackOptions wb;
  wb.max_pending_write_bytes = options_.max_pending_write_bytes;
  wb.pool = pool_;
  wb.submit_last_tier = placement_.through_last;
  wb.period = std::clamp<Clock::Duration>(options_.lease_timeout / 4, std::chrono::milliseconds(1),
                                          std::chrono::milliseconds(100));
  wb.clock = options_.clock;
  wb.health = options_.health;
  wb.on_period = [leases = leases_] { leases->ReapExpired(); };
  queue_ = std::make_unique<internal::WriteBackQueue>(tiers_, caps_, std::move(wb));
  queue_->Start();
  return absl::OkStatus();
}

TieredStore::Impl::~Impl() {
  if (queue_ != nullptr) queue_->Stop();  // drains the queue
  // Leases hold pin handles into the tiers: release them while the tiers live (a Lease
  // handle that outlives the store then holds nothing).
  leases_->Clear();
  // Tiers are destroyed bottom-up (the queue, stopped, no longer reaches them).
  while (!tiers_.empty()) tiers_.pop_back();
}

absl::StatusOr<ChunkKey> TieredStore::Impl::Write(WriteRequest r) {
  if (r.record.empty() == !r.fill) {
    return absl::InvalidArgumentError(
        "TieredStore::Write: expected either a record or a fill (with record_bytes), not both "
        "and not neither");
  }
  if (r.async) return queue_->WriteAsync(std::move(r));
  if (!r.record.empty()) {
    if (absl::Status s = Put(r.record, r.ack); !s.ok()) return s;
    return DecodeChunkHeader(r.record)->key;  // Put checked it
  }
  if (!r.header) return PutInPlace(r.record_bytes, r.fill, r.ack);
  // The caller writes the payload; the header is encoded over it in the same buffer.
  const RecordFill& fill = r.fill;
  const ChunkHeader& header = *r.header;
  return PutInPlace(
      r.record_bytes,
      [&](std::span<std::byte> record) -> absl::Status {
        if (absl::Status s = fill(record.subspan(kChunkHeaderBytes)); !s.ok()) return s;
        return EncodeChunk(header, record.subspan(kChunkHeaderBytes), record);
      },
      r.ack);
}

absl::Status TieredStore::Impl::Put(std::span<const std::byte> record, PutAck ack) {
  absl::StatusOr<ChunkHeader> header = DecodeChunkHeader(record);
  if (!header.ok()) return header.status();
  if (record.size() != header->record_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("TieredStore::Put: record of key %s is %d bytes; its header says %d",
                        header->key.ToHex(), record.size(), header->record_bytes()));
  }
  absl::Status top = PutInto(0, record, AdmitReason::kPut);
  if (!top.ok() && (!absl::IsResourceExhausted(top) || tiers_.size() == 1)) return top;

  size_t first = placement_.through_first, last = placement_.through_last;
  bool durable_written = false;
  if (ack == PutAck::kDurable) {
    const size_t durable = placement_.first_durable;
    if (durable > 0 && durable < tiers_.size()) {
      if (absl::Status s = PutDurable(durable, header->key, record, top.ok()); !s.ok()) return s;
      // Written down to `durable` already: the background covers the tiers below it.
      durable_written = true;
      if (first <= durable) first = durable + 1;
    }
  }
  if (top.ok()) {
    // Key only: the worker reads the record back from tier 0 when it gets to it (no
    // second copy on the Put path). If tier 0 evicts it first, its demotion (the
    // victim's bytes) is attached to this write-through.
    if (first <= last) {
      // Tier 0's cache policy may have declined it (its Put is OK then): the bytes go
      // down with the write-through, so the lower tiers' own policies decide.
      const bool held = tiers_[0]->Stat(std::span(&header->key, 1))[0].present;
      queue_->Enqueue(held ? std::span<const std::byte>() : record, record.size(), header->key,
                      first, last);
    }
    return absl::OkStatus();
  }
  // Tier 0 cannot take it: the lower tiers still can (the queue serves it meanwhile).
  if (first > last) {
    if (durable_written) return absl::OkStatus();
    first = last = 1;
  }
  queue_->Enqueue(record, record.size(), header->key, first, last);
  return absl::OkStatus();
}

absl::Status TieredStore::Impl::PutInto(size_t t, std::span<const std::byte> record,
                                        AdmitReason reason) {
  absl::StatusOr<PutResult> put = tiers_[t]->Put(record, queue_->ContextFor(t, reason));
  if (!put.ok()) return put.status();
  // The tier returned its victims: demoted now, with no tier lock held.
  queue_->Demote(t, std::move(put->victims));
  return absl::OkStatus();
}

absl::Status TieredStore::Impl::PutDurable(size_t durable, const ChunkKey& key,
                                           std::span<const std::byte> record, bool in_top) {
  if (absl::Status s = PutInto(durable, record, AdmitReason::kPut); !s.ok()) {
    LogTierError(durable, "durable Put", s);
    // Not durable: nothing of it may stay visible (issue 21), so tier 0's copy goes.
    if (in_top) {
      if (absl::Status e = tiers_[0]->Erase(key); !e.ok()) LogTierError(0, "Erase", e);
    }
    return absl::Status(s.code(), absl::StrCat(caps_[durable].name, " tier: ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<ChunkKey> TieredStore::Impl::PutInPlace(uint64_t record_bytes,
                                                       const RecordFill& fill, PutAck ack) {
  const size_t durable = placement_.first_durable;
  const bool to_durable = ack == PutAck::kDurable && durable > 0 && durable < tiers_.size();
  bool filled = false;
  PutContext context = queue_->ContextFor(0, AdmitReason::kPut);
  // kDurable: tier 0 lends its copy back (a reader count), and the durable tier is
  // written from it: one copy in all (fill's), not a second one through a buffer.
  context.view = to_durable;
  absl::StatusOr<PutResult> put = tiers_[0]->PutInPlace(
      record_bytes,
      [&](std::span<std::byte> record) {
        filled = true;
        return fill(record);
      },
      context);
  if (!put.ok()) {
    if (!filled && absl::IsResourceExhausted(put.status()) && tiers_.size() > 1) {
      // Tier 0 has no room: through a pooled buffer and Put (the lower tiers take it).
      if (record_bytes < kChunkHeaderBytes) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "TieredStore::Write: record_bytes = %d; a record has at least a %d-byte header",
            record_bytes, kChunkHeaderBytes));
      }
      RecordBuffer buf = pool_->Take(record_bytes);
      absl::Status s = fill(buf.span());
      absl::StatusOr<ChunkHeader> header = DecodeChunkHeader(buf.span());
      if (s.ok() && !header.ok()) s = header.status();
      if (s.ok()) s = Put(buf.span(), ack);
      pool_->Recycle(std::move(buf));
      if (!s.ok()) return s;
      return header->key;
    }
    return put.status();
  }
  queue_->Demote(0, std::move(put->victims));
  size_t first = placement_.through_first, last = placement_.through_last;
  if (to_durable) {
    if (!put->view) {
      return absl::InternalError(absl::StrFormat(
          "TieredStore::PutInPlace: tier '%s' lent no view of record %s for the durable tier",
          caps_[0].name, put->key.ToHex()));
    }
    absl::Status s = PutDurable(durable, put->key, put->view.bytes(), put->stored);
    put->view.Release();
    if (!s.ok()) return s;
    if (first <= durable) first = durable + 1;
  }
  // As Put: key only, the write-back reads the record back from tier 0.
  if (first <= last) queue_->Enqueue({}, record_bytes, put->key, first, last);
  return put->key;
}

absl::StatusOr<uint64_t> TieredStore::Impl::Get(const ChunkKey& key, std::span<std::byte> out,
                                                GetInfo* info, const GetOptions& options) {
  absl::Status data_loss;
  for (size_t t = 0; t < tiers_.size(); ++t) {
    // A peek is not a client's read: no hit, no recency touch in the tier either.
    absl::StatusOr<uint64_t> n =
        options.peek ? tiers_[t]->CopyForWriteBack(key, out) : tiers_[t]->Get(key, out);
    if (n.ok()) {
      AfterHit(t, out.first(*n), info, options);
      return n;
    }
    if (absl::IsOutOfRange(n.status())) return n.status();
    if (absl::IsDataLoss(n.status())) {
      data_loss = n.status();  // dropped and counted by the tier; a lower copy may be good
    } else if (!absl::IsNotFound(n.status())) {
      LogTierError(t, "Get", n.status());
    }
    if (t == 0) {
      size_t target = 0;
      absl::StatusOr<uint64_t> q = queue_->Find(key, out, nullptr, &target);
      if (q.ok() || absl::IsOutOfRange(q.status())) {
        if (q.ok()) QueueHit(target, info, options);
        return q;
      }
    }
  }
  absl::Status miss = Miss(key, options);
  return data_loss.ok() ? miss : data_loss;
}

absl::StatusOr<RecordView> TieredStore::Impl::View(const ChunkKey& key, GetInfo* info) {
  absl::StatusOr<RecordView> view = tiers_[0]->View(key);
  if (view.ok()) {
    CountHit(0, /*promoted=*/false, info, GetOptions{});
    return view;
  }
  // A tier 0 that cannot lend its records cannot lend a promoted one either.
  if (absl::IsUnimplemented(view.status())) return view.status();
  // Below tier 0: the record is read once, straight into tier 0's memory (the promotion,
  // in place) or, when tier 0 has no room, into a pooled buffer, and viewed there. A
  // miss everywhere is NotFound, not counted (the caller's Get counts it, and finds a
  // record still in the write-back queue).
  absl::Status data_loss;
  for (size_t t = 1; t < tiers_.size(); ++t) {
    for (int attempt = 0; attempt < 3; ++attempt) {  // the record's size may change under us
      const std::vector<ChunkStat> st = tiers_[t]->Stat(std::span(&key, 1));
      if (st.empty() || !st[0].present) break;
      absl::StatusOr<RecordView> got = ReadBelow(t, key, st[0].record_bytes, info);
      if (got.ok()) return got;
      if (absl::IsOutOfRange(got.status()) || absl::IsAborted(got.status())) continue;
      if (absl::IsDataLoss(got.status())) {
        data_loss = got.status();  // dropped and counted by the tier; a lower copy may be good
      } else if (!absl::IsNotFound(got.status())) {
        LogTierError(t, "Get", got.status());
      }
      break;
    }
  }
  if (!data_loss.ok()) return data_loss;
  return absl::NotFoundError(
      absl::StrFormat("TieredStore: chunk %s is in no tier to view", key.ToHex()));
}

absl::StatusOr<RecordView> TieredStore::Impl::ReadBelow(size_t t, const ChunkKey& key,
                                                        uint64_t record_bytes, GetInfo* info) {
  // Tier t's Get into memory tier 0 lends for the call (a host tier's arena: 4096-aligned
  // for a chunk, so a disk tier reads it with O_DIRECT and no bounce); tier 0 keeps it
  // (the promotion) and lends it back (PutContext::view).
  absl::Status read = absl::OkStatus();
  bool filled = false;
  PutContext context = queue_->ContextFor(0, AdmitReason::kPromotion);
  context.view = true;
  absl::StatusOr<PutResult> put = tiers_[0]->PutInPlace(
      record_bytes,
      [&](std::span<std::byte> record) -> absl::Status {
        filled = true;
        absl::StatusOr<uint64_t> n = tiers_[t]->Get(key, record);
        if (n.ok() && *n != record.size()) {
          n = absl::AbortedError("record size changed");  // the caller retries
        }
        read = n.status();
        return read;
      },
      context);
  if (put.ok()) {
    queue_->Demote(0, std::move(put->victims));
    if (put->view) {
      CountHit(t, put->stored, info, GetOptions{});
      return std::move(put->view);
    }
    return absl::InternalError(absl::StrFormat("tier '%s' lent no view", caps_[0].name));
  }
  if (filled) return read.ok() ? put.status() : read;
  // Tier 0 cannot take it: into a pooled (aligned) buffer, lent until the view drops.
  RecordBuffer buffer = pool_->Take(record_bytes);
  absl::StatusOr<uint64_t> n = tiers_[t]->Get(key, buffer.span());
  if (n.ok() && *n != record_bytes) n = absl::AbortedError("record size changed");
  if (!n.ok()) {
    pool_->Recycle(std::move(buffer));
    return n.status();
  }
  CountHit(t, /*promoted=*/false, info, GetOptions{});
  return pool_->Lend(std::move(buffer), record_bytes);
}

void TieredStore::Impl::AfterHit(size_t t, std::span<const std::byte> record, GetInfo* info,
                                 const GetOptions& options) {
  // A tier below 0 with verifies_reads has verified the record; a local tier that does
  // not verify got it from this process. Either way it is trusted here (verify once).
  bool promoted = false;
  if (t > 0 && !options.peek) promoted = PutInto(0, record, AdmitReason::kPromotion).ok();
  CountHit(t, promoted, info, options);
}

void TieredStore::Impl::CountHit(size_t t, bool promoted, GetInfo* info,
                                 const GetOptions& options) {
  if (info != nullptr) *info = GetInfo{MakeTierIndex(t), caps_[t].kind, promoted, false};
  if (options.peek) return;
  absl::MutexLock lock(&stats_mu_);
  ++hits_;
  if (promoted) ++promotions_;
}

void TieredStore::Impl::QueueHit(size_t target, GetInfo* info, const GetOptions& options) {
  if (info != nullptr) *info = GetInfo{MakeTierIndex(target), caps_[target].kind, false, true};
  if (options.peek) return;
  absl::MutexLock lock(&stats_mu_);
  ++hits_;
  ++queue_hits_;
}

absl::Status TieredStore::Impl::Miss(const ChunkKey& key, const GetOptions& options) {
  if (!options.peek) {
    absl::MutexLock lock(&stats_mu_);
    ++misses_;
  }
  return absl::NotFoundError(
      absl::StrFormat("TieredStore: no chunk %s in %d tier(s)", key.ToHex(), tiers_.size()));
}

LookupResult TieredStore::Impl::Lookup(std::span<const ChunkKey> keys,
                                       const LookupOptions& options) {
  leases_->ReapExpired();
  LookupResult result;
  internal::KeyLocations loc = internal::LocateKeys(tiers_, *queue_, keys, options.visible);
  if (options.pin && loc.leading > 0) {
    result.lease = leases_->Grant(internal::PinLeading(tiers_, caps_, keys, loc));
  }
  result.num_leading_hits = loc.leading;
  const size_t answered = options.per_key ? keys.size() : loc.leading;
  for (size_t i = 0; i < answered; ++i) {
    const int t = loc.where[i];
    const bool hit = i < loc.leading || t >= 0;
    result.tier_index.push_back(hit ? MakeTierIndex(t) : kNoTier);
    result.tier_kind.push_back(hit ? caps_[t].kind : TierKind::kHost);
    result.record_bytes.push_back(hit ? loc.bytes[i] : 0);
    result.ns.push_back(hit ? loc.ns[i] : NamespaceId{});
  }
  if (options.per_key && options.explain_misses) {
    result.absence.resize(answered);
    if (options_.absence != nullptr) {
      for (size_t i = 0; i < answered; ++i) {
        if (result.tier_index[i] == kNoTier) {
          result.absence[i] = options_.absence->Find(keys[i], options.visible);
        }
      }
    }
  }
  return result;
}

absl::Status TieredStore::Impl::Erase(const ChunkKey& key) {
  // Queued write-backs of the key would bring it back below; one in flight is waited
  // for, so the erase below also removes what it wrote.
  queue_->Cancel(key);
  absl::Status first_error;
  for (auto& tier : tiers_) {
    absl::Status s = tier->Erase(key);
    if (!s.ok() && first_error.ok()) first_error = s;
  }
  return first_error;
}

void TieredStore::Impl::LogTierError(size_t t, const char* op, const absl::Status& s) const {
  spdlog::warn("TieredStore: tier {} ({}) {} failed: {}", t, caps_[t].name, op, s.ToString());
}

// ------------------------------------------------------------------ TieredStore

absl::StatusOr<std::unique_ptr<TieredStore>> TieredStore::Create(
    std::vector<TierFactory> tiers, const TieredStoreOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  if (tiers.empty()) {
    return absl::InvalidArgumentError("TieredStore::Create: no tiers; expected at least one");
  }
  auto impl = std::make_unique<Impl>(options);
  if (absl::Status s = impl->Init(std::move(tiers)); !s.ok()) return s;
  return std::unique_ptr<TieredStore>(new TieredStore(std::move(impl)));
}

TieredStore::TieredStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TieredStore::~TieredStore() = default;

absl::StatusOr<ChunkKey> TieredStore::Write(WriteRequest request) {
  return impl_->Write(std::move(request));
}
absl::StatusOr<uint64_t> TieredStore::Get(const ChunkKey& key, std::span<std::byte> out,
                                          GetInfo* info, const GetOptions& options) {
  return impl_->Get(key, out, info, options);
}
absl::StatusOr<RecordView> TieredStore::View(const ChunkKey& key, GetInfo* info) {
  return impl_->View(key, info);
}
LookupResult TieredStore::Lookup(std::span<const ChunkKey> keys, const LookupOptions& options) {
  return impl_->Lookup(keys, options);
}
absl::StatusOr<StoreListPage> TieredStore::List(const StoreListOptions& options) {
  return impl_->List(options);
}
absl::StatusOr<EvictResult> TieredStore::Evict(const EvictSelector& selector,
                                               const EvictOptions& options) {
  return impl_->Evict(selector, options);
}
absl::Status TieredStore::Erase(const ChunkKey& key) { return impl_->Erase(key); }
void TieredStore::Flush() { impl_->queue().Flush(); }
std::vector<TierCaps> TieredStore::tiers() const { return impl_->tiers(); }
TieredStoreStats TieredStore::stats() const { return impl_->stats(); }

}  // namespace kvt
