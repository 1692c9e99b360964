#include "kvstore/host_tier.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "extent_allocator.h"
#include "kvstore/chunk_codec.h"
#include "spdlog/spdlog.h"

#ifdef KVT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace kvt {
namespace {

constexpr uint64_t kArenaAlignment = 4096;
constexpr uint64_t kMaxCapacityBytes = 4ull << 40;  // 4 TiB

uint64_t RoundUp(uint64_t n, uint64_t align) { return (n + align - 1) / align * align; }

}  // namespace

absl::Status HostTierOptions::Validate() const {
  if (alignment < 8 || alignment > 4096 || (alignment & (alignment - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "HostTierOptions.alignment = %d; expected a power of two in [8, 4096]", alignment));
  }
  if (capacity_bytes < alignment || capacity_bytes > kMaxCapacityBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("HostTierOptions.capacity_bytes = %d; expected %d..%d bytes",
                        capacity_bytes, alignment, kMaxCapacityBytes));
  }
  if (name.empty()) {
    return absl::InvalidArgumentError("HostTierOptions.name is empty; expected a tier name");
  }
  if (absl::Status s = cache_policy.Validate(); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("HostTierOptions.cache_policy: %s", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HostTier>> HostTier::Create(const HostTierOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  CachePolicyOptions policy_options = options.cache_policy;
  if (policy_options.clock == nullptr) policy_options.clock = options.clock;
  absl::StatusOr<std::unique_ptr<CachePolicy>> policy =
      options.cache_policy_factory ? options.cache_policy_factory(options.capacity_bytes)
                                   : MakeCachePolicy(policy_options, options.capacity_bytes);
  if (!policy.ok()) return policy.status();
  if (*policy == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrFormat("HostTier '%s': cache_policy_factory returned no policy", options.name));
  }
  const uint64_t alloc_bytes = RoundUp(options.capacity_bytes, kArenaAlignment);
  std::byte* arena = nullptr;
  bool pinned = false;
#ifdef KVT_HAVE_CUDA
  if (options.use_pinned_memory) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) {
      void* p = nullptr;
      cudaError_t err = cudaHostAlloc(&p, alloc_bytes, cudaHostAllocPortable);
      if (err == cudaSuccess) {
        arena = static_cast<std::byte*>(p);
        pinned = true;
      } else {
        spdlog::warn("HostTier '{}': cudaHostAlloc({} bytes) failed: {}; using plain memory",
                     options.name, alloc_bytes, cudaGetErrorString(err));
      }
    } else {
      (void)cudaGetLastError();  // clear the sticky "no device" error
    }
  }
#endif
  if (arena == nullptr) {
    arena = static_cast<std::byte*>(std::aligned_alloc(kArenaAlignment, alloc_bytes));
    if (arena == nullptr) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "HostTier '%s': cannot allocate an arena of %d bytes", options.name, alloc_bytes));
    }
  }
  spdlog::info("HostTier '{}': arena of {} bytes in {} memory", options.name,
               options.capacity_bytes, pinned ? "pinned (cudaHostAlloc)" : "plain 4096-aligned");
  return std::unique_ptr<HostTier>(new HostTier(options, arena, pinned, std::move(*policy)));
}

TierFactory HostTier::Factory(HostTierOptions options) {
  return [options]() -> absl::StatusOr<std::unique_ptr<Tier>> {
    absl::StatusOr<std::unique_ptr<HostTier>> t = Create(options);
    if (!t.ok()) return t.status();
    return std::unique_ptr<Tier>(std::move(*t));
  };
}

HostTier::HostTier(const HostTierOptions& options, std::byte* arena, bool pinned,
                   std::unique_ptr<CachePolicy> policy)
    : name_(options.name),
      capacity_(options.capacity_bytes),
      alignment_(options.alignment),
      usable_(options.capacity_bytes / options.alignment * options.alignment),
      arena_(arena),
      pinned_host_memory_(pinned),
      alloc_(std::make_unique<internal::ExtentAllocator>(internal::ExtentAllocator::Fit::kBest)),
      policy_(std::move(policy)),
      clock_(options.clock != nullptr ? options.clock : SystemClock()),
      absence_(options.absence) {
  absl::MutexLock lock(&mu_);
  alloc_->AddFile(0, usable_);  // the arena is the allocator's one "file"
}

HostTier::~HostTier() {
#ifdef KVT_HAVE_CUDA
  if (pinned_host_memory_) {
    cudaFreeHost(arena_);
    return;
  }
#endif
  std::free(arena_);
}

int64_t HostTier::AllocExtent(uint64_t bytes, uint64_t align) {
  const std::optional<internal::Extent> e = alloc_->Allocate(bytes, align);
  return e ? static_cast<int64_t>(e->offset) : -1;
}

void HostTier::FreeExtent(uint64_t offset, uint64_t bytes) {
  alloc_->Free(internal::Extent{0, offset, bytes});
}

bool HostTier::CanFitAfterEviction(uint64_t bytes, uint64_t align) const {
  // Fast path, O(1) in the usual case: one evictable record whose extent alone holds
  // `bytes` at `align` proves it (evicting it frees that extent). Only the first few victims in the
  // policy's order are looked at; a tier of mixed sizes or with many pinned records falls
  // back to the walk below, O(held records).
  constexpr int kFastPathVictims = 8;
  int looked = 0;
  bool fits = false;
  policy_->VisitVictims([&](const ChunkKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = index_.find(key);
    if (it != index_.end() && Evictable(*it->second) &&
        RoundUp(it->second->offset, align) + bytes <=
            it->second->offset + it->second->extent_bytes) {
      fits = true;
    }
    return !fits && ++looked < kFastPathVictims;
  });
  if (fits) return true;
  // Unevictable extents are barriers; everything between them is free or evictable.
  uint64_t run_start = 0;
  for (const auto& [offset, entry] : extents_) {
    if (Evictable(*entry)) continue;
    if (entry->evicting && entry->pins == 0 && entry->readers == 1) continue;
    const uint64_t at = RoundUp(run_start, align);
    if (at <= offset && offset - at >= bytes) return true;
    run_start = offset + entry->extent_bytes;
  }
  const uint64_t at = RoundUp(run_start, align);
  return at <= usable_ && usable_ - at >= bytes;
}

void HostTier::Destroy(Entry* e) {
  FreeExtent(e->offset, e->extent_bytes);
  used_bytes_ -= e->extent_bytes;
  extents_.erase(e->offset);  // destroys *e
}

void HostTier::Unlink(Entry* e, RemoveReason reason) {
  auto it = index_.find(e->key);
  if (it != index_.end() && it->second == e) index_.erase(it);
  policy_->OnRemove(e->key, reason);
  if (absence_ != nullptr) absence_->NoteRemoved(e->key, e->ns, TierKind::kHost, reason);
  e->state = State::kZombie;
  if (e->readers == 0) Destroy(e);
}

void HostTier::EvictOne(Entry* e, std::vector<Victim>* victims) {
  RecordBuffer copy;
  if (victims != nullptr) {
    // The copy (for demotion) is made without the tier's lock: a reader count keeps the
    // extent alive and unevictable, and the entry stays visible to Get.
    ++e->readers;
    e->evicting = true;
    ++evictions_in_flight_;
    const std::span<const std::byte> bytes(arena_ + e->offset, e->record_bytes);
    mu_.Unlock();
    try {
      copy = RecordBuffer::CopyOf(bytes);
    } catch (const std::bad_alloc&) {
      copy = RecordBuffer{};  // evicted without its bytes: not demoted
    }
    mu_.Lock();
    --evictions_in_flight_;
    e->evicting = false;
    --e->readers;
    evict_cv_.SignalAll();
    if (e->state == State::kZombie) {  // replaced or erased meanwhile: not a victim
      if (e->readers == 0) Destroy(e);
      return;
    }
    if (e->pins > 0) return;  // pinned meanwhile: it stays
    copy_bytes_ += copy.size;
  }
  ++evictions_;
  const ChunkKey key = e->key;
  Unlink(e, RemoveReason::kEvicted);
  if (victims != nullptr && !copy.empty()) victims->push_back(Victim{key, std::move(copy)});
}

void HostTier::Touch(Entry* e) {
  e->last_access_unix_ms = clock_->UnixMillis();
  policy_->OnAccess(e->key);
}

void HostTier::DropExpiredLocked() {
  std::vector<Entry*> expired;
  // The policy calls back on this thread, under mu_.
  policy_->VisitExpired(clock_->Now(), [&](const ChunkKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = index_.find(key);
    if (it != index_.end() && Evictable(*it->second)) expired.push_back(it->second);
  });
  for (Entry* e : expired) {
    ++ttl_expired_;
    Unlink(e, RemoveReason::kExpired);
  }
}

bool HostTier::AdmitLocked(const ChunkHeader& header, uint64_t record_bytes, AdmitReason reason) {
  const CacheEntryInfo info{
      .key = header.key, .parent = header.parent, .ns = header.ns, .record_bytes = record_bytes};
  if (policy_->Admit(info, reason)) return true;
  ++admission_rejects_;
  if (absence_ != nullptr) absence_->NoteRejected(header.key, header.ns, TierKind::kHost);
  return false;
}

absl::StatusOr<HostTier::Entry*> HostTier::Reserve(uint64_t record_bytes,
                                                   std::vector<Victim>* victims) {
  // A chunk-sized record starts on a 4096-byte boundary (file comment).
  const uint64_t align =
      record_bytes >= kHostIoAlignedRecordBytes ? std::max<uint64_t>(alignment_, 4096) : alignment_;
  const uint64_t need = RoundUp(record_bytes, align);
  absl::MutexLock lock(&mu_);
  DropExpiredLocked();
  if (need > usable_) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("HostTier '%s': record of %d bytes can never fit a tier of %d bytes", name_,
                        record_bytes, capacity_));
  }
  int64_t offset = AllocExtent(need, align);
  if (offset < 0) {
    if (!CanFitAfterEviction(need, align)) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("HostTier '%s': no room for %d bytes: %d of %d bytes pinned or in use by "
                          "readers/writers",
                          name_, need, used_bytes_, capacity_));
    }
    while (offset < 0) {
      Entry* victim = nullptr;
      policy_->VisitVictims([&](const ChunkKey& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        auto it = index_.find(key);
        if (it == index_.end() || !Evictable(*it->second)) return true;
        victim = it->second;
        return false;
      });
      if (victim != nullptr) {
        EvictOne(victim, victims);
      } else if (evictions_in_flight_ > 0) {
        // Other Puts' victim copies hold the rest: wait for one of them to finish.
        evict_cv_.Wait(&mu_);
      } else {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "HostTier '%s': no room for %d bytes: %d of %d bytes pinned or in use by "
            "readers/writers",
            name_, need, used_bytes_, capacity_));
      }
      offset = AllocExtent(need, align);
    }
  }
  auto owned = std::make_unique<Entry>();
  Entry* entry = owned.get();
  entry->offset = static_cast<uint64_t>(offset);
  entry->extent_bytes = need;
  entry->record_bytes = record_bytes;
  entry->state = State::kWriting;
  extents_.emplace(entry->offset, std::move(owned));
  used_bytes_ += need;
  return entry;
}

void HostTier::Abandon(Entry* entry) {
  absl::MutexLock lock(&mu_);
  Destroy(entry);  // a writing entry has no readers and is in neither index nor LRU
}

RecordView HostTier::ViewUnpublished(Entry* entry) {
  absl::MutexLock lock(&mu_);
  // Not in the index: a zombie whose last reader (the view) frees it.
  entry->state = State::kZombie;
  ++entry->readers;
  return RecordView(std::span<const std::byte>(arena_ + entry->offset, entry->record_bytes),
                    &HostTier::EndView, this, entry);
}

RecordView HostTier::Publish(Entry* entry, const ChunkHeader& header, bool view) {
  absl::MutexLock lock(&mu_);
  entry->key = header.key;
  entry->ns = header.ns;
  entry->parent = header.parent;
  entry->token_count = header.token_count;
  entry->state = State::kLive;
  entry->last_access_unix_ms = clock_->UnixMillis();
  if (auto it = index_.find(entry->key); it != index_.end()) {
    Entry* old = it->second;
    if (old->pins > 0) {  // the pins were taken on the key: carry them over
      entry->pins = old->pins;
      old->pins = 0;
      pinned_bytes_ = pinned_bytes_ - old->record_bytes + entry->record_bytes;
    }
    Unlink(old, RemoveReason::kReplaced);
  }
  index_.emplace(entry->key, entry);
  policy_->OnInsert(CacheEntryInfo{.key = entry->key,
                                   .parent = entry->parent,
                                   .ns = entry->ns,
                                   .record_bytes = entry->record_bytes});
  ++puts_;
  bytes_in_ += entry->record_bytes;
  if (!view) return RecordView();
  ++entry->readers;  // as View's, without a hit: the caller's own use of what it stored
  return RecordView(std::span<const std::byte>(arena_ + entry->offset, entry->record_bytes),
                    &HostTier::EndView, this, entry);
}

absl::StatusOr<PutResult> HostTier::Put(std::span<const std::byte> record,
                                        const PutContext& context) {
  absl::StatusOr<ChunkHeader> header = DecodeChunkHeader(record);
  if (!header.ok()) return header.status();
  if (record.size() != header->record_bytes()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("HostTier '%s': record of key %s is %d bytes; its header says %d", name_,
                        header->key.ToHex(), record.size(), header->record_bytes()));
  }
  PutResult result;
  result.key = header->key;
  {
    absl::MutexLock lock(&mu_);
    if (!AdmitLocked(*header, record.size(), context.reason)) return result;
  }
  absl::StatusOr<Entry*> entry =
      Reserve(record.size(), context.keep_victims ? &result.victims : nullptr);
  if (!entry.ok()) return entry.status();
  // The extent is invisible to readers and unevictable until published.
  std::memcpy(arena_ + (*entry)->offset, record.data(), record.size());
  {
    absl::MutexLock lock(&mu_);
    copy_bytes_ += record.size();
  }
  result.view = Publish(*entry, *header, context.view);
  result.stored = true;
  return result;
}

absl::StatusOr<PutResult> HostTier::PutInPlace(uint64_t record_bytes, const RecordFill& fill,
                                               const PutContext& context) {
  if (record_bytes < kChunkHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "HostTier '%s': PutInPlace of %d bytes; a record has at least a %d-byte header", name_,
        record_bytes, kChunkHeaderBytes));
  }
  PutResult result;
  absl::StatusOr<Entry*> entry =
      Reserve(record_bytes, context.keep_victims ? &result.victims : nullptr);
  if (!entry.ok()) return entry.status();
  // Only this call writes or reads the extent until Publish (kWriting: invisible to
  // Get/Stat/List, never evicted or reused); the header is decoded from these bytes.
  const std::span<std::byte> record(arena_ + (*entry)->offset, record_bytes);
  absl::Status s = fill(record);
  absl::StatusOr<ChunkHeader> header;
  if (s.ok()) {
    header = DecodeChunkHeader(record);
    if (!header.ok()) {
      s = header.status();
    } else if (header->record_bytes() != record_bytes) {
      s = absl::InvalidArgumentError(
          absl::StrFormat("HostTier '%s': record of key %s is %d bytes; its header says %d", name_,
                          header->key.ToHex(), record_bytes, header->record_bytes()));
    }
  }
  if (!s.ok()) {
    Abandon(*entry);
    return s;
  }
  result.key = header->key;
  bool admitted;
  {
    absl::MutexLock lock(&mu_);
    admitted = AdmitLocked(*header, record_bytes, context.reason);
  }
  if (!admitted) {
    if (context.view) {
      result.view = ViewUnpublished(*entry);
    } else {
      Abandon(*entry);
    }
    return result;
  }
  result.view = Publish(*entry, *header, context.view);
  result.stored = true;
  return result;
}

absl::StatusOr<uint64_t> HostTier::Get(const ChunkKey& key, std::span<std::byte> out) {
  return CopyOut(key, out, /*client_read=*/true);
}

absl::StatusOr<uint64_t> HostTier::CopyForWriteBack(const ChunkKey& key, std::span<std::byte> out) {
  return CopyOut(key, out, /*client_read=*/false);
}

absl::StatusOr<uint64_t> HostTier::CopyOut(const ChunkKey& key, std::span<std::byte> out,
                                           bool client_read) {
  Entry* e = nullptr;
  {
    absl::MutexLock lock(&mu_);
    auto it = index_.find(key);
    if (it == index_.end()) {
      if (client_read) {
        ++misses_;
        policy_->OnMiss(key);
      }
      return absl::NotFoundError(absl::StrFormat("HostTier '%s': no chunk %s", name_, key.ToHex()));
    }
    e = it->second;
    if (out.size() < e->record_bytes) {
      return absl::OutOfRangeError(
          absl::StrFormat("HostTier '%s': chunk %s needs a buffer of %d bytes; got %d", name_,
                          key.ToHex(), e->record_bytes, out.size()));
    }
    ++e->readers;
    if (client_read) {
      Touch(e);
      ++hits_;
      bytes_out_ += e->record_bytes;
    }
  }
  // A reader count keeps the extent from being evicted, reused or freed.
  std::memcpy(out.data(), arena_ + e->offset, e->record_bytes);
  const uint64_t n = e->record_bytes;
  absl::MutexLock lock(&mu_);
  copy_bytes_ += n;
  if (--e->readers == 0 && e->state == State::kZombie) Destroy(e);
  return n;
}

absl::StatusOr<RecordView> HostTier::View(const ChunkKey& key) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it == index_.end()) {
    return absl::NotFoundError(absl::StrFormat("HostTier '%s': no chunk %s", name_, key.ToHex()));
  }
  Entry* e = it->second;
  ++e->readers;  // as during Get's copy: not evicted, reused or freed until EndView
  Touch(e);
  ++hits_;
  bytes_out_ += e->record_bytes;
  return RecordView(std::span<const std::byte>(arena_ + e->offset, e->record_bytes),
                    &HostTier::EndView, this, e);
}

void HostTier::EndView(void* self_ptr, void* entry) {
  auto* self = static_cast<HostTier*>(self_ptr);
  auto* e = static_cast<Entry*>(entry);
  absl::MutexLock lock(&self->mu_);
  if (--e->readers == 0 && e->state == State::kZombie) self->Destroy(e);
}

std::vector<ChunkStat> HostTier::Stat(std::span<const ChunkKey> keys) {
  std::vector<ChunkStat> result(keys.size());
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = index_.find(keys[i]);
    if (it != index_.end()) result[i] = ChunkStat{true, it->second->record_bytes, it->second->ns};
  }
  return result;
}

absl::Status HostTier::Erase(const ChunkKey& key) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return absl::OkStatus();
  if (it->second->pins > 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "HostTier '%s': chunk %s is pinned %d time(s)", name_, key.ToHex(), it->second->pins));
  }
  Unlink(it->second, RemoveReason::kErased);
  return absl::OkStatus();
}

absl::StatusOr<ListPage> HostTier::List(const ListOptions& options) {
  if (options.page_size < 1 || options.page_size > 100000) {
    return absl::InvalidArgumentError(
        absl::StrFormat("ListOptions.page_size = %d; expected 1..100000", options.page_size));
  }
  std::optional<ChunkKey> after;
  if (!options.page_token.empty()) {
    absl::StatusOr<ChunkKey> k = ChunkKey::FromHex(options.page_token);
    if (!k.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("ListOptions.page_token '%s' is not a token from a previous page (%s)",
                          options.page_token, k.status().message()));
    }
    after = *k;
  }
  ListPage page;
  absl::MutexLock lock(&mu_);
  auto it = after ? index_.upper_bound(*after) : index_.begin();
  for (; it != index_.end(); ++it) {
    const Entry& e = *it->second;
    if (options.ns && e.ns != *options.ns) continue;
    if (page.chunks.size() == options.page_size) {  // one more exists: not the last page
      page.next_page_token = page.chunks.back().key.ToHex();
      break;
    }
    page.chunks.push_back(
        ChunkInfo{e.key, e.ns, e.parent, e.token_count, e.record_bytes, e.last_access_unix_ms});
  }
  return page;
}

TierStats HostTier::stats() const {
  absl::MutexLock lock(&mu_);
  TierStats s;
  s.capacity_bytes = capacity_;
  s.used_bytes = used_bytes_;
  s.chunks = index_.size();
  s.pinned_bytes = pinned_bytes_;
  s.hits = hits_;
  s.misses = misses_;
  s.puts = puts_;
  s.bytes_in = bytes_in_;
  s.bytes_out = bytes_out_;
  s.evictions = evictions_;
  s.admission_rejects = admission_rejects_;
  s.ttl_expired = ttl_expired_;
  s.copy_bytes = copy_bytes_;
  return s;
}

TierCaps HostTier::caps() const {
  return TierCaps{.name = name_,
                  .kind = TierKind::kHost,
                  .capacity_bytes = capacity_,
                  .durable = false,
                  .remote = false,
                  .verifies_reads = false,
                  .pinnable = true,
                  .evicts = true};
}

PinHandle HostTier::Pin(const ChunkKey& key) {
  absl::MutexLock lock(&mu_);
  auto it = index_.find(key);
  if (it == index_.end()) {
    policy_->OnMiss(key);
    return PinHandle();
  }
  Entry* e = it->second;
  if (e->pins++ == 0) pinned_bytes_ += e->record_bytes;
  Touch(e);
  return PinHandle(&HostTier::Unpin, this, key, e->record_bytes);
}

void HostTier::Unpin(void* self_ptr, const ChunkKey& key) {
  auto* self = static_cast<HostTier*>(self_ptr);
  absl::MutexLock lock(&self->mu_);
  auto it = self->index_.find(key);
  if (it == self->index_.end() || it->second->pins == 0) return;
  Entry* e = it->second;
  if (--e->pins == 0) self->pinned_bytes_ -= e->record_bytes;
}

}  // namespace kvt
