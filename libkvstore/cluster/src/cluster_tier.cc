#include "kvstore/cluster_tier.h"

#include <hiredis/hiredis.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "kvstore/chunk_codec.h"
#include "spdlog/spdlog.h"

namespace kvt {
namespace {

constexpr uint32_t kPieceMagic = 0x5043564Bu;  // "KVCP" little-endian
constexpr uint16_t kPieceVersion = 1;
constexpr size_t kPieceHeaderBytes = 32;

struct PieceHeader {
  uint64_t record_bytes = 0;
  uint32_t piece_count = 0;
  uint32_t piece_bytes = 0;
};

template <typename T>
void Store(std::byte* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}  // little-endian hosts only (x86-64, arm64)
template <typename T>
T Load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

uint64_t HeaderChecksum(const std::byte* first24, std::span<const std::byte> chunk_header) {
  std::byte buf[24 + kChunkHeaderBytes];
  std::memcpy(buf, first24, 24);
  std::memcpy(buf + 24, chunk_header.data(), kChunkHeaderBytes);
  return XXH3_64bits(buf, sizeof(buf));
}

std::array<std::byte, kPieceHeaderBytes> EncodePieceHeader(const PieceHeader& h,
                                                           std::span<const std::byte> record) {
  std::array<std::byte, kPieceHeaderBytes> b{};
  Store(b.data(), kPieceMagic);
  Store(b.data() + 4, kPieceVersion);
  Store(b.data() + 8, h.record_bytes);
  Store(b.data() + 16, h.piece_count);
  Store(b.data() + 20, h.piece_bytes);
  Store(b.data() + 24, HeaderChecksum(b.data(), record.first(kChunkHeaderBytes)));
  return b;
}

// Shape only (the checksum needs piece 1). nullopt for anything that is not a header.
std::optional<PieceHeader> DecodePieceHeader(const redisReply* r) {
  if (r == nullptr || r->type != REDIS_REPLY_STRING || r->len != kPieceHeaderBytes)
    return std::nullopt;
  const auto* p = reinterpret_cast<const std::byte*>(r->str);
  if (Load<uint32_t>(p) != kPieceMagic || Load<uint16_t>(p + 4) != kPieceVersion)
    return std::nullopt;
  PieceHeader h{Load<uint64_t>(p + 8), Load<uint32_t>(p + 16), Load<uint32_t>(p + 20)};
  if (h.piece_bytes == 0 || h.record_bytes < kChunkHeaderBytes ||
      h.piece_count != (h.record_bytes + h.piece_bytes - 1) / h.piece_bytes)
    return std::nullopt;
  return h;
}

// The chunk header of `key` from the replies to GET piece 0 and GETRANGE of the first
// kChunkHeaderBytes of piece 1; nullopt unless both are there and agree with each other
// and with `key`.
std::optional<ChunkHeader> HeaderFromReplies(const ChunkKey& key, const redisReply* piece0,
                                             const redisReply* head) {
  std::optional<PieceHeader> ph = DecodePieceHeader(piece0);
  if (!ph || head == nullptr || head->type != REDIS_REPLY_STRING || head->len != kChunkHeaderBytes)
    return std::nullopt;
  auto ch = DecodeChunkHeader(std::span(reinterpret_cast<const std::byte*>(head->str), head->len));
  if (!ch.ok() || ch->key != key || ch->record_bytes() != ph->record_bytes) return std::nullopt;
  return *ch;
}

std::string_view AsView(std::span<const std::byte> s) {
  return std::string_view(reinterpret_cast<const char*>(s.data()), s.size());
}

bool IsError(const redisReply* r) { return r == nullptr || r->type == REDIS_REPLY_ERROR; }

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

absl::Status ClusterTierOptions::Validate() const {
  if (absl::Status s = client.Validate(); !s.ok()) return s;
  if (keyspace.empty() || keyspace.size() > 64 ||
      !std::all_of(keyspace.begin(), keyspace.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
      }))
    return absl::InvalidArgumentError(absl::StrFormat(
        "cluster keyspace '%s': expected 1..64 characters of [A-Za-z0-9_.-]", keyspace));
  if (piece_bytes < (64u << 10) || piece_bytes > (512u << 20))
    return absl::InvalidArgumentError(
        absl::StrFormat("cluster piece_bytes %d: expected 64 KiB .. 512 MiB", piece_bytes));
  if (max_record_bytes < kChunkHeaderBytes)
    return absl::InvalidArgumentError(
        absl::StrFormat("cluster max_record_bytes %d: too small", max_record_bytes));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ClusterTier>> ClusterTier::Create(
    const ClusterTierOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  auto client = cluster::ClusterClient::Create(options.client);
  if (!client.ok()) return client.status();
  return std::unique_ptr<ClusterTier>(new ClusterTier(options, std::move(*client)));
}

ClusterTier::ClusterTier(const ClusterTierOptions& options,
                         std::unique_ptr<cluster::ClusterClient> client)
    : options_(options), client_(std::move(client)) {}
ClusterTier::~ClusterTier() = default;

std::string ClusterTier::PieceKey(const ChunkKey& key, uint32_t piece) const {
  return absl::StrFormat("kvt:{%s:%s}:%d", options_.keyspace, key.ToHex(), piece);
}

absl::StatusOr<PutResult> ClusterTier::Put(std::span<const std::byte> record,
                                           const PutContext& /*context*/) {
  auto header = DecodeChunkHeader(record);
  if (!header.ok()) return header.status();
  if (record.size() != header->record_bytes())
    return absl::InvalidArgumentError(
        absl::StrFormat("ClusterTier::Put: record is %d bytes, header says %d", record.size(),
                        header->record_bytes()));
  if (record.size() > options_.max_record_bytes)
    return absl::ResourceExhaustedError(
        absl::StrFormat("ClusterTier::Put: record of %d bytes exceeds max_record_bytes %d",
                        record.size(), options_.max_record_bytes));
  const uint64_t pb = options_.piece_bytes;
  PieceHeader ph{record.size(), static_cast<uint32_t>((record.size() + pb - 1) / pb),
                 static_cast<uint32_t>(pb)};
  const auto hdr = EncodePieceHeader(ph, record);
  std::vector<std::string> keys;
  for (uint32_t i = 0; i <= ph.piece_count; ++i) keys.push_back(PieceKey(header->key, i));
  const std::string ttl = std::to_string(options_.ttl_s);
  std::vector<cluster::Command> cmds;
  auto set = [&](const std::string& k, std::string_view v) {
    cmds.push_back(options_.ttl_s > 0 ? cluster::Command{"SET", k, v, "EX", ttl}
                                      : cluster::Command{"SET", k, v});
  };
  // Data pieces first, the header last: one shard runs one connection's pipeline in
  // order, so a header that can be read has its pieces written before it.
  for (uint32_t i = 1; i <= ph.piece_count; ++i) {
    const uint64_t off = (i - 1) * pb;
    set(keys[i], AsView(record.subspan(off, std::min<uint64_t>(pb, record.size() - off))));
  }
  set(keys[0], AsView(hdr));
  auto replies = client_->Exec(cluster::KeyHashSlot(keys[0]), cmds, window());
  if (!replies.ok()) {
    AtomicTierCounters::Add(counters_.io_errors, 1);
    return absl::UnavailableError("ClusterTier::Put: " + std::string(replies.status().message()));
  }
  for (const auto& r : *replies) {
    if (!IsError(r.get())) continue;
    AtomicTierCounters::Add(counters_.io_errors, 1);
    std::string_view e(r->str, r->len);
    (void)Erase(header->key);  // no half-written record left behind
    if (e.starts_with("OOM"))
      return absl::ResourceExhaustedError(
          absl::StrFormat("ClusterTier::Put: redis is full: %s", e));
    return absl::UnavailableError(absl::StrFormat("ClusterTier::Put: %s", e));
  }
  AtomicTierCounters::Add(counters_.puts, 1);
  AtomicTierCounters::Add(counters_.bytes_in, record.size());
  return PutResult{.key = header->key, .stored = true};
}

absl::StatusOr<uint64_t> ClusterTier::Get(const ChunkKey& key, std::span<std::byte> out) {
  const std::string k0 = PieceKey(key, 0);
  const int slot = cluster::KeyHashSlot(k0);
  auto miss = [&](absl::Status s) -> absl::Status {
    AtomicTierCounters::Add(counters_.misses, 1);
    return s;
  };
  // The header, then the pieces `window()` at a time, read from the socket straight
  // into `out` (ReadPieces); Redis replies are only parsed by hiredis when that path
  // cannot answer (redirects, resharding).
  cluster::Command hcmd{"GET", k0};
  auto replies = client_->Exec(slot, std::span(&hcmd, 1));
  if (!replies.ok()) {
    AtomicTierCounters::Add(counters_.io_errors, 1);
    return miss(
        absl::UnavailableError("ClusterTier::Get: " + std::string(replies.status().message())));
  }
  const redisReply* r0 = (*replies)[0].get();
  if (r0 == nullptr || r0->type == REDIS_REPLY_NIL)
    return miss(absl::NotFoundError("ClusterTier::Get: miss"));
  if (IsError(r0)) {
    AtomicTierCounters::Add(counters_.io_errors, 1);
    return miss(absl::UnavailableError(
        absl::StrFormat("ClusterTier::Get: %s", std::string_view(r0->str, r0->len))));
  }
  std::optional<PieceHeader> ph = DecodePieceHeader(r0);
  if (!ph) {
    AtomicTierCounters::Add(counters_.integrity_errors, 1);
    return miss(absl::DataLossError(absl::StrFormat("ClusterTier::Get: %s: bad piece header", k0)));
  }
  if (ph->record_bytes > out.size())
    return absl::OutOfRangeError(absl::StrFormat("ClusterTier::Get: record is %d bytes, buffer %d",
                                                 ph->record_bytes, out.size()));
  std::array<std::byte, kPieceHeaderBytes> hdr_bytes;
  std::memcpy(hdr_bytes.data(), r0->str, kPieceHeaderBytes);
  // Copies piece i's reply into `out`; false for a missing or short piece.
  auto take = [&](uint32_t i, const redisReply* r) {
    const uint64_t off = uint64_t{i - 1} * ph->piece_bytes;
    const uint64_t want = std::min<uint64_t>(ph->piece_bytes, ph->record_bytes - off);
    if (r == nullptr || r->type != REDIS_REPLY_STRING || r->len != want) return false;
    std::memcpy(out.data() + off, r->str, want);
    return true;
  };
  auto short_piece = [&](uint32_t i) {
    return miss(absl::NotFoundError(
        absl::StrFormat("ClusterTier::Get: %s: piece %d missing or short (a miss)", k0, i)));
  };
  replies->clear();
  const size_t w = window();
  for (uint32_t first = 1; first <= ph->piece_count; first += static_cast<uint32_t>(w)) {
    const uint32_t last = std::min<uint32_t>(ph->piece_count, first + static_cast<uint32_t>(w) - 1);
    std::vector<std::string> names;
    std::vector<std::span<std::byte>> dests;
    for (uint32_t i = first; i <= last; ++i) {
      names.push_back(PieceKey(key, i));
      const uint64_t off = uint64_t{i - 1} * ph->piece_bytes;
      dests.push_back(
          out.subspan(off, std::min<uint64_t>(ph->piece_bytes, ph->record_bytes - off)));
    }
    auto direct = client_->GetInto(slot, names, dests, w);
    if (direct.ok()) {
      for (uint32_t i = first; i <= last; ++i)
        if (!(*direct)[i - first]) return short_piece(i);
      continue;
    }
    if (absl::IsUnavailable(direct.status())) {
      AtomicTierCounters::Add(counters_.io_errors, 1);
      return miss(
          absl::UnavailableError("ClusterTier::Get: " + std::string(direct.status().message())));
    }
    std::vector<cluster::Command> mc;  // redirects or odd replies: the general path
    for (const auto& n : names) mc.push_back({"GET", n});
    auto mr = client_->Exec(slot, mc);
    if (!mr.ok()) {
      AtomicTierCounters::Add(counters_.io_errors, 1);
      return miss(
          absl::UnavailableError("ClusterTier::Get: " + std::string(mr.status().message())));
    }
    for (uint32_t i = first; i <= last; ++i)
      if (!take(i, (*mr)[i - first].get())) return short_piece(i);
  }
  const auto record = out.first(ph->record_bytes);
  if (Load<uint64_t>(hdr_bytes.data() + 24) !=
      HeaderChecksum(hdr_bytes.data(), record.first(kChunkHeaderBytes)))
    // Pieces of another write of the same key (a concurrent re-put): a miss.
    return miss(absl::NotFoundError(
        absl::StrFormat("ClusterTier::Get: %s: header and pieces disagree", k0)));
  auto header = DecodeChunkHeader(record);
  absl::StatusOr<ChunkHeader> v =
      header.ok() ? VerifyChunk(record, DecodeExpectations{.ns = header->ns, .key = key})
                  : absl::StatusOr<ChunkHeader>(header.status());
  if (!v.ok()) {
    AtomicTierCounters::Add(counters_.integrity_errors, 1);
    spdlog::warn("cluster tier: record {} failed verification: {}", key.ToHex(),
                 v.status().ToString());
    return miss(absl::DataLossError("ClusterTier::Get: " + v.status().ToString()));
  }
  AtomicTierCounters::Add(counters_.hits, 1);
  AtomicTierCounters::Add(counters_.bytes_out, record.size());
  return record.size();
}

std::vector<ChunkStat> ClusterTier::Stat(std::span<const ChunkKey> keys) {
  // Per key: piece 0 (the piece header) and the chunk header at the start of piece 1,
  // for its namespace; both in the key's slot, every shard's commands in one pipeline.
  const std::string last = std::to_string(kChunkHeaderBytes - 1);
  std::vector<std::string> names;  // the commands' strings (cluster::Command views them)
  names.reserve(2 * keys.size());
  std::vector<int> slots;
  std::vector<cluster::Command> cmds;
  for (const auto& k : keys) {
    names.push_back(PieceKey(k, 0));
    names.push_back(PieceKey(k, 1));
    const int slot = cluster::KeyHashSlot(names[names.size() - 2]);
    cmds.push_back({"GET", names[names.size() - 2]});
    cmds.push_back({"GETRANGE", names.back(), "0", last});
    slots.push_back(slot);
    slots.push_back(slot);
  }
  std::vector<cluster::Reply> r = client_->ExecMany(slots, cmds);
  std::vector<ChunkStat> out(keys.size());
  for (size_t i = 0; i < keys.size() && 2 * i + 1 < r.size(); ++i) {
    if (r[2 * i] == nullptr || r[2 * i + 1] == nullptr) {
      AtomicTierCounters::Add(counters_.io_errors, 1);
      continue;
    }
    if (r[2 * i]->type == REDIS_REPLY_NIL) continue;
    std::optional<ChunkHeader> h = HeaderFromReplies(keys[i], r[2 * i].get(), r[2 * i + 1].get());
    if (h) out[i] = ChunkStat{true, h->record_bytes(), h->ns};
  }
  return out;
}

absl::Status ClusterTier::Erase(const ChunkKey& key) {
  const std::string k0 = PieceKey(key, 0);
  const int slot = cluster::KeyHashSlot(k0);
  cluster::Command get{"GET", k0};
  auto r = client_->Exec(slot, std::span(&get, 1));
  if (!r.ok())
    return absl::UnavailableError("ClusterTier::Erase: " + std::string(r.status().message()));
  std::optional<PieceHeader> ph = DecodePieceHeader((*r)[0].get());
  // Without a readable header, remove the pieces a record of max_record_bytes could have.
  const uint64_t n =
      ph ? ph->piece_count
         : (options_.max_record_bytes + options_.piece_bytes - 1) / options_.piece_bytes;
  std::vector<std::string> keys{k0};  // header first: the record stops being readable at once
  for (uint64_t i = 1; i <= n; ++i) keys.push_back(PieceKey(key, static_cast<uint32_t>(i)));
  std::vector<cluster::Command> cmds;
  for (const auto& k : keys) cmds.push_back({"UNLINK", k});
  auto d = client_->Exec(slot, cmds);
  if (!d.ok())
    return absl::UnavailableError("ClusterTier::Erase: " + std::string(d.status().message()));
  if ((*d)[0] != nullptr && (*d)[0]->type == REDIS_REPLY_INTEGER && (*d)[0]->integer == 1)
    AtomicTierCounters::Add(counters_.evictions, 1);
  return absl::OkStatus();
}

absl::StatusOr<ListPage> ClusterTier::List(const ListOptions& options) {
  if (options.page_size < 1 || options.page_size > 100000)
    return absl::InvalidArgumentError(
        absl::StrFormat("ClusterTier::List: page_size %d, expected 1..100000", options.page_size));
  std::optional<ChunkKey> after;
  if (!options.page_token.empty()) {
    auto k = ChunkKey::FromHex(options.page_token);
    if (!k.ok())
      return absl::InvalidArgumentError(absl::StrFormat("ClusterTier::List: page_token '%s': %s",
                                                        options.page_token, k.status().message()));
    after = *k;
  }
  const std::string prefix = absl::StrFormat("kvt:{%s:", options_.keyspace);
  const std::string match = prefix + "*}:0";
  std::vector<ChunkKey> all;
  const cluster::SlotMap map = client_->slot_map();
  for (const cluster::NodeAddr& m : map.masters()) {
    std::string cursor = "0";
    do {
      // Routed by node, not by slot: SCAN is per node.
      cluster::Command cmd{"SCAN", cursor, "MATCH", match, "COUNT", "1000"};
      auto r = client_->ExecOn(m, cmd);  // SCAN is per node
      if (!r.ok())
        return absl::UnavailableError("ClusterTier::List: " + std::string(r.status().message()));
      const redisReply* rep = r->get();
      if (rep == nullptr || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2)
        return absl::UnavailableError(
            absl::StrFormat("ClusterTier::List: bad SCAN reply from %s", m.ToString()));
      cursor = std::string(rep->element[0]->str, rep->element[0]->len);
      for (size_t i = 0; i < rep->element[1]->elements; ++i) {
        std::string_view name(rep->element[1]->element[i]->str, rep->element[1]->element[i]->len);
        if (name.size() != prefix.size() + 32 + 3) continue;
        auto k = ChunkKey::FromHex(name.substr(prefix.size(), 32));
        if (k.ok() && (!after || *after < *k)) all.push_back(*k);
      }
    } while (cursor != "0");
  }
  std::sort(all.begin(), all.end());
  all.erase(std::unique(all.begin(), all.end()), all.end());
  ListPage page;
  for (const ChunkKey& k : all) {
    if (page.chunks.size() == options.page_size) {
      page.next_page_token = page.chunks.back().key.ToHex();
      break;
    }
    auto ch = ReadChunkHeader(k);
    if (!ch.ok() || (options.ns && ch->ns != *options.ns)) continue;
    page.chunks.push_back(ChunkInfo{k, ch->ns, ch->parent, ch->token_count, ch->record_bytes(), 0});
  }
  return page;
}

absl::StatusOr<ChunkHeader> ClusterTier::ReadChunkHeader(const ChunkKey& key) {
  const std::string k0 = PieceKey(key, 0), k1 = PieceKey(key, 1);
  const std::string last = std::to_string(kChunkHeaderBytes - 1);  // outlives the views
  std::vector<cluster::Command> cmds{{"GET", k0}, {"GETRANGE", k1, "0", last}};
  auto r = client_->Exec(cluster::KeyHashSlot(k0), cmds);
  if (!r.ok())
    return absl::UnavailableError("ClusterTier::ReadChunkHeader: " +
                                  std::string(r.status().message()));
  std::optional<ChunkHeader> ch = HeaderFromReplies(key, (*r)[0].get(), (*r)[1].get());
  if (!ch) return absl::NotFoundError("ClusterTier::ReadChunkHeader: miss or bad header");
  return *ch;
}

void ClusterTier::RefreshStats() const {
  const int64_t now = NowMs();
  if (now - stats_at_ms_.load(std::memory_order_relaxed) < options_.stats_refresh.count()) return;
  stats_at_ms_.store(now, std::memory_order_relaxed);
  uint64_t cap = 0, used = 0;
  for (auto& [addr, r] : client_->ExecOnMasters({"INFO", "memory"})) {
    if (!r.ok() || *r == nullptr || (*r)->type != REDIS_REPLY_STRING) continue;
    std::string_view info((*r)->str, (*r)->len);
    auto field = [&](std::string_view name) -> uint64_t {
      const size_t at = info.find(name);
      if (at == std::string_view::npos) return 0;
      return std::strtoull(info.data() + at + name.size(), nullptr, 10);
    };
    used += field("\r\nused_memory:");
    cap += field("\r\nmaxmemory:");
  }
  capacity_.store(cap, std::memory_order_relaxed);
  used_.store(used, std::memory_order_relaxed);
}

TierStats ClusterTier::stats() const {
  RefreshStats();
  TierStats s;
  s.capacity_bytes = capacity_.load(std::memory_order_relaxed);
  s.used_bytes = used_.load(std::memory_order_relaxed);
  counters_.CopyTo(s);
  return s;
}

TierCaps ClusterTier::caps() const {
  // No call to the service here: caps() is asked at store construction and must not
  // fail, block or trip the client's circuit breaker. Capacity is the last stats() answer.
  return TierCaps{.name = options_.name,
                  .kind = TierKind::kRemote,
                  .capacity_bytes = capacity_.load(std::memory_order_relaxed),
                  .durable = true,
                  .remote = true,
                  .verifies_reads = true,
                  .pinnable = false,
                  .evicts = false};
}

TierFactory ClusterTier::Factory(ClusterTierOptions options) {
  return [options]() -> absl::StatusOr<std::unique_ptr<Tier>> {
    absl::StatusOr<std::unique_ptr<ClusterTier>> t = Create(options);
    if (!t.ok()) return t.status();
    return std::unique_ptr<Tier>(std::move(*t));
  };
}

}  // namespace kvt
