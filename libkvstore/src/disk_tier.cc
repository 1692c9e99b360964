// DiskTier data path: Put, Get, eviction, and the index writes that go with each change
// of the record table. See docs/disk-tier.md.
#include "kvstore/disk_tier.h"

#include <algorithm>
#include <map>
#include <new>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "disk_tier_impl.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/record_buffer.h"
#include "spdlog/spdlog.h"

namespace kvt {

using internal::DiskEntryTable;
using internal::Extent;
using internal::IndexEntry;
using internal::RecordFile;
using internal::RoundUpToIoAlign;

// ---------------------------------------------------------------- space

absl::StatusOr<Extent> DiskTier::Impl::Reserve(uint64_t padded, std::vector<Victim>* out) {
  while (true) {
    // Free space needs no index write: do not wait behind one (a group commit).
    if (auto ext = table_->Allocate(padded)) return *ext;
    std::vector<DiskEntryTable::Detached> victims;
    {
      absl::MutexLock il(&index_mu_);
      absl::StatusOr<DiskEntryTable::Room> room = table_->MakeRoom(padded);
      if (!room.ok()) return room.status();
      if (room->extent) return *room->extent;
      if (room->new_file_bytes > 0) {
        auto f = files_.Create(room->new_file_id, room->new_file_bytes);
        if (f.ok()) {
          files_.Add(*f);
          table_->AddFile(room->new_file_id, room->new_file_bytes);
          continue;
        }
        if (absl::IsResourceExhausted(f.status())) {
          // The filesystem is full: live within the files we have, evicting as needed.
          spdlog::warn("disk tier: {}; no more record files, evicting instead",
                       f.status().ToString());
          if (table_->StopNewFiles()) return f.status();
          continue;
        }
        table_->CountIoError(f.status());
        return f.status();
      }
      victims = std::move(room->victims);
      std::vector<ChunkKey> keys;
      keys.reserve(victims.size());
      for (const auto& v : victims) keys.push_back(v.first);
      // Synced: the deletion is durable before the extents are reused.
      absl::Status s = index_->Delete(keys, /*sync=*/true);
      if (!s.ok()) {
        // Nothing was evicted: the victims stay (their index entries do), the put fails.
        table_->Reattach(victims);
        table_->CountIoError(s);
        return absl::Status(s.code(), absl::StrCat("cannot evict ", keys.size(),
                                                   " chunks to make room: ", s.message()));
      }
      table_->Evicted(keys);
      if (options_.absence != nullptr) {
        for (const auto& [key, e] : victims) {
          options_.absence->NoteRemoved(key, e.idx.ns, TierKind::kDisk, RemoveReason::kEvicted);
        }
      }
    }
    FinishEviction(std::move(victims), out);
  }
}

void DiskTier::Impl::FinishEviction(std::vector<DiskEntryTable::Detached> victims,
                                    std::vector<Victim>* out) {
  if (out != nullptr) {
    // Read each record once for the caller (demotion) before its extent can be reused.
    // No tier lock is held: the extents stay reserved until the release below. No hash:
    // the tier it is demoted to checks it as it checks every Put (verified once).
    uint64_t reads = 0;
    for (const auto& [key, e] : victims) {
      std::shared_ptr<RecordFile> f = files_.Find(e.idx.file_id);
      if (f == nullptr) continue;
      RecordBuffer buf;
      try {
        buf = RecordBuffer::Make(e.idx.record_bytes);
      } catch (const std::bad_alloc&) {
        continue;  // evicted without its bytes: not demoted
      }
      ++reads;
      if (!ReadRecord(key, e.idx, *f, buf.span(), /*raw=*/true).ok()) continue;
      // A record whose header no longer decodes to its key is not handed on.
      auto h = DecodeChunkHeader(buf.span());
      if (!h.ok() || h->key != key || h->record_bytes() != e.idx.record_bytes) continue;
      out->push_back(Victim{key, std::move(buf)});
    }
    table_->CountVictimReads(reads);
  }
  table_->ReleaseVictims(victims);
}

void DiskTier::Impl::DropExpired() {
  if (!table_->AnyExpired()) return;  // the common case: no TTL, or nothing expired
  absl::MutexLock il(&index_mu_);
  std::vector<DiskEntryTable::Detached> dropped = table_->DetachExpired();
  if (dropped.empty()) return;
  std::vector<ChunkKey> keys;
  std::vector<DiskEntryTable::Entry> entries;
  for (auto& [key, e] : dropped) {
    keys.push_back(key);
    entries.push_back(e);
  }
  // Synced: the deletion is durable before the extents are reused.
  absl::Status s = index_->Delete(keys, /*sync=*/true);
  // On failure the index may still point at the extents: leaked until the next Open.
  table_->Release(entries, s, /*expired=*/true);
  if (s.ok() && options_.absence != nullptr) {
    for (size_t i = 0; i < keys.size(); ++i) {
      options_.absence->NoteRemoved(keys[i], entries[i].idx.ns, TierKind::kDisk,
                                    RemoveReason::kExpired);
    }
  }
  if (!s.ok()) {
    spdlog::error("disk tier: cannot drop {} expired index entries: {}", keys.size(), s.ToString());
  }
}

void DiskTier::Impl::DropEntry(const ChunkKey& key, uint64_t gen) {
  absl::MutexLock il(&index_mu_);
  std::optional<DiskEntryTable::Entry> e = table_->DetachIf(key, gen);
  if (!e) return;  // replaced or gone already
  absl::Status s = index_->Delete(std::span<const ChunkKey>(&key, 1), /*sync=*/true);
  // On failure the index may still point at the extent: leaked until the next Open.
  table_->Release(std::span(&*e, 1), s, /*expired=*/false);
  if (!s.ok()) {
    spdlog::error("disk tier: cannot drop index entry {}: {}", key.ToHex(), s.ToString());
  }
}

void DiskTier::Impl::HandleLostFile(uint32_t file_id) {
  std::vector<ChunkKey> dropped;
  {
    absl::MutexLock il(&index_mu_);
    if (!files_.Remove(file_id)) return;  // already handled
    dropped = table_->DropFile(file_id);
    if (absl::Status s = index_->Delete(dropped, /*sync=*/true); !s.ok()) {
      spdlog::error("disk tier: cannot drop index entries of lost file {}: {}", file_id,
                    s.ToString());
    }
  }
  spdlog::warn("disk tier: record file {} was removed behind the tier's back; dropped {} chunks",
               file_id, dropped.size());
}

// ---------------------------------------------------------------- Put / Get

absl::StatusOr<PutResult> DiskTier::Impl::Put(std::span<const std::byte> record,
                                              const PutContext& context) {
  auto hdr = DecodeChunkHeader(record);
  if (!hdr.ok()) return hdr.status();
  if (record.size() != hdr->record_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "record is ", record.size(), " bytes but its header says ", hdr->record_bytes()));
  }
  const uint64_t padded = RoundUpToIoAlign(record.size());
  if (padded > options_.file_bytes || padded > options_.capacity_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "record of ", record.size(), " bytes can never fit: file_bytes = ", options_.file_bytes,
        ", capacity_bytes = ", options_.capacity_bytes));
  }
  PutResult result;
  result.key = hdr->key;
  const CacheEntryInfo info{
      .key = hdr->key, .parent = hdr->parent, .ns = hdr->ns, .record_bytes = record.size()};
  if (!table_->Admit(info, context.reason)) {
    if (options_.absence != nullptr)
      options_.absence->NoteRejected(info.key, info.ns, TierKind::kDisk);
    return result;
  }
  DropExpired();
  auto ext = Reserve(padded, context.keep_victims ? &result.victims : nullptr);
  if (!ext.ok()) return ext.status();

  std::shared_ptr<RecordFile> file = files_.Find(ext->file_id);
  const bool grouped = options_.commit == DiskCommit::kGrouped;
  absl::Status s;
  uint64_t bounced = 0;
  if (!file) {
    s = absl::UnavailableError("record file removed during the write");
  } else {
    s = files_.Write(*file, ext->offset, record, &bounced);
    // kGrouped: the group commit fdatasyncs the file before it writes the index entry.
    if (s.ok() && !grouped) s = files_.Sync(*file);
  }
  if (s.ok()) {
    IndexEntry e;
    e.file_id = ext->file_id;
    e.offset = ext->offset;
    e.record_bytes = record.size();
    e.payload_checksum = hdr->payload_checksum;
    e.last_access_ms = ClockOrSystem(options_.clock).UnixMillis();
    e.ns = hdr->ns;
    e.parent = hdr->parent;
    e.token_count = hdr->token_count;
    if (grouped) {
      // Readable from now on; durable once the group commit covering it is.
      auto published = table_->Publish(hdr->key, e, padded, /*committed=*/false, bounced);
      if (published.ok()) commit_->Add(hdr->key, published->gen, published->deferred_gen);
      s = published.status();
    } else {
      absl::MutexLock il(&index_mu_);
      if (!table_->HasFile(ext->file_id)) {
        s = absl::UnavailableError("record file removed during the write");
      }
      // The record is durable; only now may the index point at it.
      if (s.ok()) s = index_->Put(hdr->key, e, /*sync=*/true);
      if (s.ok()) s = table_->Publish(hdr->key, e, padded, /*committed=*/true, bounced).status();
    }
    if (s.ok()) {
      result.stored = true;
      return result;
    }
  }
  table_->PutFailed(*ext, s);
  spdlog::warn("disk tier: put {} failed: {}", hdr->key.ToHex(), s.ToString());
  return s;
}

absl::Status DiskTier::Impl::ReadRecord(const ChunkKey& key, const IndexEntry& e,
                                        const RecordFile& f, std::span<std::byte> out, bool raw) {
  uint64_t bounced = 0;
  absl::Status s = raw ? files_.Read(e, f, out, nullptr, &bounced)
                       : files_.ReadVerified(key, e, f, out, &bounced);
  // The read itself (into memory) and its bounce copies (out not 4096-aligned).
  table_->CountRecordRead(e.record_bytes + bounced);
  return s;
}

absl::StatusOr<uint64_t> DiskTier::Impl::Get(const ChunkKey& key, std::span<std::byte> out,
                                             bool client_read) {
  absl::StatusOr<DiskEntryTable::Read> r = table_->BeginRead(key, out.size(), client_read);
  if (!r.ok()) return r.status();
  const IndexEntry& e = r->idx;
  std::shared_ptr<RecordFile> file = files_.Find(e.file_id);
  absl::Status s;
  const bool lost = !file || !internal::DiskRecordFiles::StillOnDisk(*file);
  if (lost) {
    s = absl::DataLossError("record file is gone");
  } else {
    s = ReadRecord(key, e, *file, out, /*raw=*/false);
    if (absl::IsOutOfRange(s)) {
      // The file ends inside the record: truncated behind the tier's back.
      files_.RepairTruncated(*file);
      s = absl::DataLossError(s.message());
    }
  }
  table_->EndRead(key, r->gen, s, client_read, e.record_bytes);
  if (!s.ok()) {
    if (!absl::IsDataLoss(s)) return s;  // e.g. Unavailable: keep the entry, retry later
    spdlog::warn("disk tier: chunk {} failed verification ({}); dropped", key.ToHex(),
                 s.ToString());
    if (lost && file) {
      HandleLostFile(e.file_id);
    } else {
      DropEntry(key, r->gen);
    }
    return absl::DataLossError(absl::StrCat(
        "chunk ", key.ToHex(), " failed verification on disk and was dropped: ", s.message()));
  }
  if (r->flush_access) {
    if (absl::Status fs = FlushAccessTimes(); !fs.ok()) {
      spdlog::warn("disk tier: last-access flush failed: {}", fs.ToString());
    }
  }
  return e.record_bytes;
}

absl::Status DiskTier::Impl::FlushAccessTimes() {
  absl::MutexLock il(&index_mu_);
  // Not synced: a lost access time only makes LRU slightly less exact after a crash.
  return index_->PutMany(table_->TakeDirtyAccess(), /*sync=*/false);
}

// ---------------------------------------------------------------- the rest of Tier

std::vector<ChunkStat> DiskTier::Impl::Stat(std::span<const ChunkKey> keys) {
  std::vector<ChunkStat> r(keys.size());
  table_->Find(keys, [&](size_t i, const IndexEntry& e) {
    r[i] = ChunkStat{true, e.record_bytes, e.ns};
  });
  return r;
}

absl::Status DiskTier::Impl::Erase(const ChunkKey& key) {
  absl::MutexLock il(&index_mu_);
  absl::StatusOr<std::optional<DiskEntryTable::Entry>> e = table_->DetachForErase(key);
  if (!e.ok()) return e.status();
  if (!e->has_value()) return absl::OkStatus();
  absl::Status s = index_->Delete(std::span<const ChunkKey>(&key, 1), /*sync=*/true);
  table_->Release(std::span(&**e, 1), s, /*expired=*/false);
  if (s.ok() && options_.absence != nullptr) {
    options_.absence->NoteRemoved(key, (*e)->idx.ns, TierKind::kDisk, RemoveReason::kErased);
  }
  return s;  // on failure the extent leaks until the next Open
}

absl::StatusOr<ListPage> DiskTier::Impl::List(const ListOptions& options) {
  if (options.page_size < 1 || options.page_size > 100000) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size = ", options.page_size, ", expected 1..100000"));
  }
  std::string start;
  std::optional<ChunkKey> after;
  if (!options.page_token.empty()) {
    auto k = ChunkKey::FromHex(options.page_token);
    if (!k.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("page_token '", options.page_token, "' is not a 32-hex-digit chunk key"));
    }
    after = *k;
    start = internal::EncodeIndexKey(*k);
  }
  // The listing comes from the index: commit what is written first (kGrouped).
  if (absl::Status c = commit_->CommitPending(); !c.ok()) return c;
  ListPage page;
  bool more = false;
  absl::Status s = index_->Scan(
      start, [&](std::string_view, absl::StatusOr<ChunkKey> key, absl::StatusOr<IndexEntry> e) {
        if (!key.ok() || !e.ok()) return true;
        if (after && *key == *after) return true;
        if (options.ns && e->ns != *options.ns) return true;
        if (page.chunks.size() == options.page_size) {
          more = true;
          return false;
        }
        ChunkInfo ci;
        ci.key = *key;
        ci.ns = e->ns;
        ci.parent = e->parent;
        ci.token_count = e->token_count;
        ci.record_bytes = e->record_bytes;
        ci.last_access_unix_ms = e->last_access_ms;
        page.chunks.push_back(ci);
        return true;
      });
  if (!s.ok()) return s;
  // Batched access times live in memory until flushed.
  std::vector<ChunkKey> keys;
  for (const auto& ci : page.chunks) keys.push_back(ci.key);
  table_->Find(keys, [&](size_t i, const IndexEntry& e) {
    page.chunks[i].last_access_unix_ms = e.last_access_ms;
  });
  if (more) page.next_page_token = page.chunks.back().key.ToHex();
  return page;
}

DiskTierExtraStats DiskTier::Impl::extra_stats() const {
  DiskTierExtraStats x = table_->extra_stats();
  x.files = files_.count();
  const internal::DiskIndexStats is = index_->stats();
  x.index_write_stopped = is.write_stopped;
  x.index_reopens = is.reopens;
  x.index_low_space_refusals = is.low_space_refusals;
  return x;
}

// ---------------------------------------------------------------- DiskTier

TierFactory DiskTier::Factory(DiskTierOptions options) {
  return [options]() -> absl::StatusOr<std::unique_ptr<Tier>> {
    absl::StatusOr<std::unique_ptr<DiskTier>> t = Open(options);
    if (!t.ok()) return t.status();
    return std::unique_ptr<Tier>(std::move(*t));
  };
}

DiskTier::DiskTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DiskTier::~DiskTier() = default;
absl::StatusOr<PutResult> DiskTier::Put(std::span<const std::byte> record,
                                        const PutContext& context) {
  return impl_->Put(record, context);
}
absl::StatusOr<uint64_t> DiskTier::Get(const ChunkKey& key, std::span<std::byte> out) {
  return impl_->Get(key, out);
}
absl::StatusOr<uint64_t> DiskTier::CopyForWriteBack(const ChunkKey& key, std::span<std::byte> out) {
  return impl_->Get(key, out, /*client_read=*/false);
}
std::vector<ChunkStat> DiskTier::Stat(std::span<const ChunkKey> keys) { return impl_->Stat(keys); }
absl::Status DiskTier::Erase(const ChunkKey& key) { return impl_->Erase(key); }
absl::StatusOr<ListPage> DiskTier::List(const ListOptions& options) { return impl_->List(options); }
TierStats DiskTier::stats() const { return impl_->table_->stats(); }
TierCaps DiskTier::caps() const {
  return TierCaps{.name = "disk",
                  .kind = TierKind::kDisk,
                  .capacity_bytes = impl_->options_.capacity_bytes,
                  .durable = true,
                  .remote = false,
                  .verifies_reads = true,
                  .pinnable = true,
                  .evicts = true};
}
PinHandle DiskTier::Pin(const ChunkKey& key) { return impl_->table_->Pin(key); }
DiskIoBackend DiskTier::backend() const {
  return impl_->files_.backend() == internal::IoBackend::kIoUring ? DiskIoBackend::kIoUring
                                                                  : DiskIoBackend::kPread;
}
bool DiskTier::direct_io() const { return impl_->files_.direct_io(); }
DiskTierExtraStats DiskTier::extra_stats() const { return impl_->extra_stats(); }
absl::Status DiskTier::FlushAccessTimes() { return impl_->FlushAccessTimes(); }
absl::Status DiskTier::Sync() { return impl_->Sync(); }

}  // namespace kvt
