#include "trace_store.h"

#include <algorithm>
#include <chrono>
#include <span>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kvstore/chunk_codec.h"
#include "kvstore/chunk_key.h"
#include "kvstore/store_factory.h"

namespace kvt::bench {

absl::Status ReplayRequests(TieredStore& store, const Trace& trace, uint64_t record_bytes,
                            const ReplaySlice& slice, StoreReplayResult* res) {
  // One record per block: a header and an opaque payload of record_bytes - header bytes
  // (a layout of 1 layer, 1 head, raw bytes, 1 token).
  const NamespaceId ns{0x6b767469657221ull, 24};
  KvLayout layout;
  layout.num_layers = 1;
  layout.num_kv_heads = 1;
  layout.head_dim = static_cast<uint32_t>((record_bytes - kChunkHeaderBytes) / 2);
  layout.dtype = DType::kBytes;
  std::vector<std::byte> payload(layout.payload_bytes(1), std::byte{0x5a});
  std::vector<std::byte> record(kChunkHeaderBytes + payload.size());
  std::vector<std::byte> out(record.size());
  std::vector<ChunkKey> keys;
  for (size_t ri = slice.offset; ri < trace.requests.size(); ri += slice.stride) {
    const TraceRequest& r = trace.requests[ri];
    if (slice.wait_turn) slice.wait_turn(ri);
    keys.clear();
    for (uint32_t b : r.blocks) keys.push_back(TraceBlockKey(b));
    // Pinned, as an engine's lookup before its load: the write-back's demotions into
    // disk must not evict a chunk between the lookup and its Get.
    LookupOptions lookup;
    lookup.pin = true;
    LookupResult found = store.Lookup(keys, lookup);
    const size_t hits = found.num_leading_hits;
    res->total_tokens += r.input_tokens;
    res->chunks += keys.size();
    for (size_t i = 0; i < hits; ++i) {
      const uint64_t tokens = HitTokens(trace, r, i + 1) - HitTokens(trace, r, i);
      (found.tier_index[i] == MakeTierIndex(0) ? res->host_hit_tokens : res->disk_hit_tokens) +=
          tokens;
      auto got = store.Get(keys[i], out);
      if (!got.ok()) {
        return absl::InternalError(absl::StrCat("request at ", r.timestamp_ms, " ms: block ", i,
                                                " was a hit but Get says ",
                                                got.status().ToString()));
      }
    }
    found.lease.Release();
    for (size_t i = hits; i < keys.size(); ++i) {
      ChunkHeader h;
      h.ns = ns;
      h.key = keys[i];
      h.parent = i > 0 ? keys[i - 1] : RootKey(ns);
      h.token_count = 1;
      h.layout = layout;
      if (absl::Status s = EncodeChunk(h, payload, record); !s.ok()) return s;
      if (auto s = store.Write({.record = record}); !s.ok()) return s.status();
    }
    if (slice.flush) store.Flush();
    if (slice.done) slice.done(ri);
  }
  return absl::OkStatus();
}

absl::StatusOr<StoreReplayResult> ReplayThroughStore(const Trace& trace,
                                                     const StoreReplayOptions& options) {
  if (options.record_bytes < 4096 || options.record_bytes % 4096 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("record_bytes ", options.record_bytes,
                                                   " is not a multiple of 4096 (>= 4096)"));
  }
  StoreOptions so;
  so.host.capacity_bytes = options.host_records * options.record_bytes;
  so.host.use_pinned_memory = false;
  so.host.cache_policy = options.host_policy;
  if (options.disk_records > 0) {
    DiskTierOptions d;
    d.dir = options.disk_dir;
    d.capacity_bytes = options.disk_records * options.record_bytes;
    d.file_bytes = std::min<uint64_t>(d.capacity_bytes, 256ull << 20);
    d.commit = DiskCommit::kGrouped;  // the replay measures policies, not fsync
    d.direct_io = false;
    d.cache_policy = options.disk_policy;
    so.disk = d;
  }
  if (options.miss_record_entries > 0) {
    auto absence = AbsenceRecord::Create(options.miss_record_entries);
    if (!absence.ok()) return absence.status();
    so.store.absence = *absence;
  }
  auto store = OpenTieredStore(so);
  if (!store.ok()) return store.status();

  StoreReplayResult res;
  const auto start = std::chrono::steady_clock::now();
  ReplaySlice slice;
  slice.flush = options.flush;
  if (absl::Status s = ReplayRequests(**store, trace, options.record_bytes, slice, &res); !s.ok()) {
    return s;
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const TieredStoreStats stats = (*store)->stats();
  const TierStats& host = stats.tiers[0];
  res.host_bytes_written = host.bytes_in;
  res.host_admission_rejects = host.admission_rejects;
  if (options.disk_records > 0) {
    const TierStats& disk = stats.tiers[1];
    res.disk_bytes_written = disk.bytes_in;
    res.disk_admission_rejects = disk.admission_rejects;
  }
  return res;
}

}  // namespace kvt::bench
