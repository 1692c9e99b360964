#include "disk_tier_index.h"

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

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

// RocksDB's info log, sent to kvtier's log instead of a LOG file in the index
// directory. A LOG file is one more writer that meets ENOSPC when the filesystem fills,
// and Debian's RocksDB (built with assertions) aborts the process on the next append
// to a log file that has seen a write error (WritableFileWriter::
// AssertFalseAndGetStatusForPrevError; issue 11, failures 1 and 11).
class SpdlogRocksLogger final : public rocksdb::Logger {
 public:
  SpdlogRocksLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::INFO_LEVEL) {}
  using rocksdb::Logger::Logv;
  void Logv(const char* format, va_list ap) override {
    Logv(rocksdb::InfoLogLevel::INFO_LEVEL, format, ap);
  }
  void Logv(const rocksdb::InfoLogLevel level, const char* format, va_list ap) override {
    if (level < GetInfoLogLevel()) return;
    char buf[1024];
    const int n = std::vsnprintf(buf, sizeof buf, format, ap);
    if (n < 0) return;
    // kvtier logs every failure that matters itself (put failed, index stopped, ...);
    // RocksDB's own lines are detail, and some are noise at ERROR level (e.g. a missing
    // directory while creating a new index). Only FATAL is shown by default.
    if (level == rocksdb::InfoLogLevel::FATAL_LEVEL) {
      spdlog::error("disk index (rocksdb): {}", buf);
    } else {
      spdlog::debug("disk index (rocksdb): {}", buf);
    }
  }
};

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

absl::StatusOr<uint64_t> FreeBytes(const std::string& path) {
  struct statvfs v;
  if (::statvfs(path.c_str(), &v) != 0) {
    const int err = errno;
    return absl::UnavailableError(absl::StrCat("statvfs ", path, ": ", std::strerror(err)));
  }
  return static_cast<uint64_t>(v.f_bavail) * static_cast<uint64_t>(v.f_frsize);
}

namespace {

rocksdb::Options IndexOptions() {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.max_open_files = 64;
  options.keep_log_file_num = 2;
  // Small memtables: a flush (and the new WAL that comes with it) then needs little
  // space, which the free-space reserve must cover.
  options.write_buffer_size = 4 << 20;
  options.info_log = std::make_shared<SpdlogRocksLogger>();
  return options;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DiskIndex>> DiskIndex::Open(const std::string& path,
                                                           uint64_t reserve_bytes) {
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(IndexOptions(), path, &db);
  if (!s.ok()) return RocksToStatus(s, absl::StrCat("open ", path));
  return std::unique_ptr<DiskIndex>(new DiskIndex(db, path, reserve_bytes));
}

DiskIndex::DiskIndex(rocksdb::DB* db, std::string path, uint64_t reserve_bytes)
    : db_(db), path_(std::move(path)), reserve_bytes_(reserve_bytes) {}

DiskIndex::~DiskIndex() {
  absl::WriterMutexLock l(&db_mu_);
  if (db_) (void)db_->Close();
}

absl::Status DiskIndex::CheckReserve(std::string_view what) {
  if (reserve_bytes_ == 0) return absl::OkStatus();
  auto free_bytes = FreeBytes(path_);
  if (!free_bytes.ok()) return free_bytes.status();
  if (*free_bytes >= reserve_bytes_) return absl::OkStatus();
  low_space_refusals_.fetch_add(1);
  return absl::ResourceExhaustedError(
      absl::StrCat("disk index ", std::string(what), " refused: the filesystem of ", path_, " has ",
                   *free_bytes, " bytes free, below the index's reserve of ", reserve_bytes_,
                   " bytes (free space, or lower DiskTierOptions.capacity_bytes)"));
}

absl::Status DiskIndex::Reopen(std::string_view what) {
  absl::WriterMutexLock l(&db_mu_);
  if (!stopped_.load()) return absl::OkStatus();  // another writer reopened it
  // Closing a stopped database is safe; writing to it again is not (see Write), and
  // neither is RocksDB's DB::Resume() in 7.8: when the WAL failed right after a memtable
  // switch, Resume keeps the failed WAL writer and the next write aborts the process.
  // A fresh DB::Open starts a new WAL; everything acknowledged (synced) is replayed.
  if (db_) {
    if (rocksdb::Status c = db_->Close(); !c.ok()) {
      spdlog::warn("disk index: closing the stopped index: {}", c.ToString());
    }
    db_.reset();
  }
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(IndexOptions(), path_, &db);
  if (!s.ok()) {
    failed_reopens_.fetch_add(1);
    return RocksToStatus(
        s, absl::StrCat(std::string(what), ": reopening the index after a write error"));
  }
  db_.reset(db);
  stopped_.store(false);
  reopens_.fetch_add(1);
  spdlog::info("disk index: reopened {} after a write error; writes go through again", path_);
  return absl::OkStatus();
}

absl::Status DiskIndex::Write(rocksdb::WriteBatch* batch, bool sync, std::string_view what) {
  // RocksDB must never meet ENOSPC: Debian's RocksDB 7.8 aborts the process on the next
  // write to a WAL or log file that has seen a write error (an assertion in
  // WritableFileWriter). So writes are refused while free space is below the reserve.
  if (absl::Status r = CheckReserve(what); !r.ok()) return r;
  if (stopped_.load()) {
    // A write error got through anyway (a filler raced past the reserve): the database
    // is not written again; space is back (the reserve check passed), so reopen it.
    if (absl::Status r = Reopen(what); !r.ok()) return r;
  }
  absl::ReaderMutexLock l(&db_mu_);
  if (stopped_.load() || !db_) {
    return absl::UnavailableError(
        absl::StrCat(std::string(what), ": the index is stopped after a write error"));
  }
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  rocksdb::Status s = db_->Write(wo, batch);
  absl::Status st = RocksToStatus(s, what);
  if (!s.ok() && (s.IsIOError() || s.IsNoSpace())) {
    stopped_.store(true);
    spdlog::warn("disk index: stopped after a write error; reopening once space is back: {}",
                 st.ToString());
  }
  return st;
}

DiskIndexStats DiskIndex::stats() const {
  DiskIndexStats st;
  st.write_stopped = stopped_.load();
  st.low_space_refusals = low_space_refusals_.load();
  st.reopens = reopens_.load();
  st.failed_reopens = failed_reopens_.load();
  return st;
}

absl::Status DiskIndex::Put(const ChunkKey& key, const IndexEntry& e, bool sync) {
  rocksdb::WriteBatch batch;
  batch.Put(EncodeIndexKey(key), EncodeIndexValue(e));
  return Write(&batch, sync, "put");
}

absl::Status DiskIndex::PutMany(std::span<const std::pair<ChunkKey, IndexEntry>> entries,
                                bool sync) {
  if (entries.empty()) return absl::OkStatus();
  rocksdb::WriteBatch batch;
  for (const auto& [k, e] : entries) batch.Put(EncodeIndexKey(k), EncodeIndexValue(e));
  return Write(&batch, sync, "write batch");
}

absl::Status DiskIndex::Delete(std::span<const ChunkKey> keys, bool sync) {
  if (keys.empty()) return absl::OkStatus();
  rocksdb::WriteBatch batch;
  for (const auto& k : keys) batch.Delete(EncodeIndexKey(k));
  return Write(&batch, sync, "delete");
}

absl::Status DiskIndex::DeleteRaw(std::span<const std::string> raw_keys, bool sync) {
  if (raw_keys.empty()) return absl::OkStatus();
  rocksdb::WriteBatch batch;
  for (const auto& k : raw_keys) batch.Delete(k);
  return Write(&batch, sync, "delete");
}

absl::Status DiskIndex::Scan(const std::string& start_raw_key, const Visitor& fn) {
  absl::ReaderMutexLock l(&db_mu_);
  if (!db_) return absl::UnavailableError("scan: the index is stopped after a write error");
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
