#include "disk_backend.h"

#include <cstdlib>
#include <filesystem>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kvstore/store_factory.h"

namespace kvt::cli {

absl::StatusOr<std::vector<ListedChunk>> ListAll(CacheBackend& backend,
                                                 std::optional<NamespaceId> ns) {
  std::vector<ListedChunk> all;
  ChunkListRequest req;
  req.ns = ns;
  req.page_size = 10000;
  for (;;) {
    auto page = backend.List(req);
    if (!page.ok()) return page.status();
    for (auto& c : page->chunks) all.push_back(std::move(c));
    if (page->next_page_token.empty()) break;
    req.page_token = page->next_page_token;
  }
  return all;
}

namespace {

namespace fs = std::filesystem;

// A TieredStore over the one disk tier, used only through the store's public API.
class DiskBackend final : public CacheBackend {
 public:
  DiskBackend(std::string dir, std::unique_ptr<TieredStore> store)
      : dir_(std::move(dir)), store_(std::move(store)) {}

  std::string Describe() const override { return absl::StrCat("disk-dir ", dir_); }

  absl::StatusOr<StatsSnapshot> Stats() override {
    StatsSnapshot s;
    s.source = Describe();
    const std::vector<TierCaps> caps = store_->tiers();
    const TieredStoreStats ss = store_->stats();
    for (size_t t = 0; t < caps.size() && t < ss.tiers.size(); ++t) {
      TierSummary sum;
      sum.name = caps[t].name;
      sum.kind = caps[t].kind;
      sum.stats = ss.tiers[t];
      s.pinned_bytes += sum.stats.pinned_bytes;
      s.tiers.push_back(sum);
    }
    s.integrity_errors = ss.integrity_errors;
    s.explicit_evictions = ss.explicit_evictions;
    return s;
  }

  absl::StatusOr<ChunkListPage> List(const ChunkListRequest& request) override {
    StoreListOptions o;
    o.ns = request.ns;
    o.page_token = request.page_token;
    o.page_size = request.page_size;
    auto page = store_->List(o);
    if (!page.ok()) return page.status();
    ChunkListPage out;
    out.next_page_token = page->next_page_token;
    out.chunks.reserve(page->chunks.size());
    for (const auto& c : page->chunks) {
      for (TierKind k : c.kinds) out.chunks.push_back(ListedChunk{c.info, k});
    }
    return out;
  }

  absl::StatusOr<std::vector<Located>> Locate(std::span<const ChunkKey> keys) override {
    // Offline: no record of why a key is not held (kvtierd keeps it in memory only).
    LookupResult r = store_->Lookup(keys, LookupOptions{.per_key = true});
    std::vector<Located> out(keys.size());
    for (size_t i = 0; i < keys.size() && i < r.tier_index.size(); ++i) {
      if (r.tier_index[i] != kNoTier) out[i].tier = r.tier_kind[i];
    }
    return out;
  }

  absl::StatusOr<ChunkHeader> ReadHeader(const ChunkKey& key) override {
    // The record's size from the listing's lookup, then a peek (no promotion, no count).
    LookupResult where = store_->Lookup(std::span(&key, 1), LookupOptions{.per_key = true});
    if (where.tier_index.empty() || where.tier_index[0] == kNoTier) {
      return absl::NotFoundError(absl::StrCat("no chunk ", key.ToHex()));
    }
    std::vector<std::byte> record(where.record_bytes[0]);
    auto n = store_->Get(key, record, nullptr, GetOptions{.peek = true});
    if (!n.ok()) return n.status();
    return DecodeChunkHeader(std::span(record).first(*n));
  }

  absl::StatusOr<EvictResult> Evict(const EvictSelector& selector, bool dry_run) override {
    return store_->Evict(selector, EvictOptions{.dry_run = dry_run});
  }

 private:
  std::string dir_;
  std::unique_ptr<TieredStore> store_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CacheBackend>> OpenDiskBackend(const DiskBackendOptions& options) {
  std::error_code ec;
  fs::path dir(options.dir);
  // A kvtierd data_dir keeps its disk tier in <data_dir>/disk: accept either.
  if (!fs::is_directory(dir / "index", ec) && fs::is_directory(dir / "disk" / "index", ec))
    dir /= "disk";
  if (!fs::is_directory(dir / "index", ec) || !fs::is_directory(dir / "records", ec)) {
    return absl::NotFoundError(absl::StrCat(
        "no disk tier at --disk-dir '", options.dir,
        "' (expected a disk tier's index/ and records/ subdirectories, or a kvtierd data_dir "
        "holding them in disk/)"));
  }
  uint64_t files_total = 0;
  for (const auto& de : fs::directory_iterator(dir / "records", ec)) {
    const std::string name = de.path().filename().string();
    if (de.is_regular_file(ec) && absl::StartsWith(name, "rec-") && absl::EndsWith(name, ".dat")) {
      files_total += de.file_size(ec);
    }
  }
  files_total = (files_total + 4095) / 4096 * 4096;
  if (options.capacity_bytes != 0 && options.capacity_bytes < files_total) {
    return absl::InvalidArgumentError(
        absl::StrCat("--disk-capacity ", options.capacity_bytes, " is below the ", files_total,
                     " bytes of record files already in '", dir.string(),
                     "'; opening with it would delete cached chunks"));
  }
  StoreOptions so;
  so.host.capacity_bytes = 0;  // the disk tier alone: looking never fills memory
  DiskTierOptions& o = so.disk.emplace();
  o.dir = dir.string();
  o.capacity_bytes = options.capacity_bytes != 0 ? (options.capacity_bytes + 4095) / 4096 * 4096
                                                 : std::max<uint64_t>(files_total, 4096);
  auto tier = OpenTieredStore(so);
  if (!tier.ok()) {
    return absl::Status(
        tier.status().code() == absl::StatusCode::kInvalidArgument
            ? absl::StatusCode::kInvalidArgument
            : absl::StatusCode::kUnavailable,
        absl::StrCat("cannot open the disk tier in '", dir.string(), "': ", tier.status().message(),
                     " (if kvtierd is running on it, use --daemon instead)"));
  }
  return std::unique_ptr<CacheBackend>(new DiskBackend(dir.string(), std::move(*tier)));
}

}  // namespace kvt::cli
