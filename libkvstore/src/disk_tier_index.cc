#include "disk_tier_index.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvt::internal {
namespace {

constexpr char kChunkPrefix = 'c';

void PutU64BE(std::string& s, uint64_t v) {
  for (int i = 7; i >= 0; --i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t GetU64BE(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}
template <typename T>
void PutLE(std::string& s, T v) {
  using U = std::make_unsigned_t<T>;
  U u = static_cast<U>(v);
  for (size_t i = 0; i < sizeof(T); ++i) s.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
}
template <typename T>
T GetLE(const char*& p) {
  using U = std::make_unsigned_t<T>;
  U u = 0;
  for (size_t i = 0; i < sizeof(T); ++i) u |= static_cast<U>(static_cast<uint8_t>(p[i])) << (8 * i);
  p += sizeof(T);
  return static_cast<T>(u);
}

}  // namespace

absl::Status RocksToStatus(const rocksdb::Status& s, std::string_view context) {
  if (s.ok()) return absl::OkStatus();
  const std::string msg = absl::StrCat("rocksdb ", std::string(context), ": ", s.ToString());
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  if (s.IsCorruption()) return absl::DataLossError(msg);
  if (s.IsBusy() || s.IsTimedOut() || s.IsTryAgain()) return absl::UnavailableError(msg);
  if (s.IsNoSpace()) return absl::ResourceExhaustedError(msg);
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(msg);
  if (s.IsIOError()) {
    // RocksDB reports a held LOCK file (another process owns the index) as IOError.
    return absl::UnavailableError(msg);
  }
  return absl::InternalError(msg);
}

std::string EncodeIndexKey(const ChunkKey& key) {
  std::string s;
  s.reserve(17);
  s.push_back(kChunkPrefix);
  PutU64BE(s, key.hi);
  PutU64BE(s, key.lo);
  return s;
}

absl::StatusOr<ChunkKey> DecodeIndexKey(std::string_view k) {
  if (k.size() != 17 || k[0] != kChunkPrefix) {
    return absl::DataLossError(absl::StrCat("index key of ", k.size(), " bytes, expected 17"));
  }
  ChunkKey key;
  key.hi = GetU64BE(k.data() + 1);
  key.lo = GetU64BE(k.data() + 9);
  return key;
}

std::string EncodeIndexValue(const IndexEntry& e) {
  std::string s;
  s.reserve(kIndexValueBytes);
  PutLE<uint8_t>(s, kIndexValueVersion);
  PutLE<uint32_t>(s, e.file_id);
  PutLE<uint64_t>(s, e.offset);
  PutLE<uint64_t>(s, e.record_bytes);
  PutLE<uint64_t>(s, e.payload_checksum);
  PutLE<int64_t>(s, e.last_access_ms);
  PutLE<uint64_t>(s, e.ns.lo);
  PutLE<uint64_t>(s, e.ns.hi);
  PutLE<uint64_t>(s, e.parent.lo);
  PutLE<uint64_t>(s, e.parent.hi);
  PutLE<uint32_t>(s, e.token_count);
  return s;
}

absl::StatusOr<IndexEntry> DecodeIndexValue(std::string_view v) {
  if (v.size() != kIndexValueBytes || static_cast<uint8_t>(v[0]) != kIndexValueVersion) {
    return absl::DataLossError(absl::StrCat("index value of ", v.size(), " bytes (expected ",
                                            kIndexValueBytes, ") or unknown version"));
  }
  const char* p = v.data() + 1;
  IndexEntry e;
  e.file_id = GetLE<uint32_t>(p);
  e.offset = GetLE<uint64_t>(p);
  e.record_bytes = GetLE<uint64_t>(p);
  e.payload_checksum = GetLE<uint64_t>(p);
  e.last_access_ms = GetLE<int64_t>(p);
  e.ns.lo = GetLE<uint64_t>(p);
  e.ns.hi = GetLE<uint64_t>(p);
  e.parent.lo = GetLE<uint64_t>(p);
  e.parent.hi = GetLE<uint64_t>(p);
  e.token_count = GetLE<uint32_t>(p);
  return e;
}

absl::StatusOr<std::unique_ptr<DiskIndex>> DiskIndex::Open(const std::string& path) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.max_open_files = 64;
  options.keep_log_file_num = 2;
  options.write_buffer_size = 8 << 20;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, path, &db);
  if (!s.ok()) return RocksToStatus(s, absl::StrCat("open ", path));
  return std::unique_ptr<DiskIndex>(new DiskIndex(db));
}

DiskIndex::DiskIndex(rocksdb::DB* db) : db_(db) {}

DiskIndex::~DiskIndex() {
  if (db_) (void)db_->Close();
}

absl::Status DiskIndex::Put(const ChunkKey& key, const IndexEntry& e, bool sync) {
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  return RocksToStatus(db_->Put(wo, EncodeIndexKey(key), EncodeIndexValue(e)), "put");
}

absl::Status DiskIndex::PutMany(std::span<const std::pair<ChunkKey, IndexEntry>> entries,
                                bool sync) {
  if (entries.empty()) return absl::OkStatus();
  rocksdb::WriteBatch batch;
  for (const auto& [k, e] : entries) batch.Put(EncodeIndexKey(k), EncodeIndexValue(e));
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  return RocksToStatus(db_->Write(wo, &batch), "write batch");
}

absl::Status DiskIndex::Delete(std::span<const ChunkKey> keys, bool sync) {
  if (keys.empty()) return absl::OkStatus();
  rocksdb::WriteBatch batch;
  for (const auto& k : keys) batch.Delete(EncodeIndexKey(k));
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  return RocksToStatus(db_->Write(wo, &batch), "delete");
}

absl::Status DiskIndex::DeleteRaw(std::span<const std::string> raw_keys, bool sync) {
  if (raw_keys.empty()) return absl::OkStatus();
  rocksdb::WriteBatch batch;
  for (const auto& k : raw_keys) batch.Delete(k);
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  return RocksToStatus(db_->Write(wo, &batch), "delete");
}

absl::Status DiskIndex::Scan(const std::string& start_raw_key, const Visitor& fn) {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(start_raw_key.empty() ? std::string(1, kChunkPrefix) : start_raw_key); it->Valid();
       it->Next()) {
    const rocksdb::Slice k = it->key();
    if (k.size() == 0 || k[0] != kChunkPrefix) break;
    const std::string_view kv(k.data(), k.size());
    const rocksdb::Slice v = it->value();
    if (!fn(kv, DecodeIndexKey(kv), DecodeIndexValue(std::string_view(v.data(), v.size())))) break;
  }
  return RocksToStatus(it->status(), "scan");
}

}  // namespace kvt::internal
