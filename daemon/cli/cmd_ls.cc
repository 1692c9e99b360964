// kvtier ls: cached chunks grouped by namespace and tier (or one row per chunk with
// --chunks), with filters (namespace, tier, age) and pagination.
#include <algorithm>
#include <map>
#include <ostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "commands.h"
#include "nlohmann/json.hpp"
#include "server_namespace.h"

namespace kvt::cli {

namespace {

struct Filters {
  std::optional<NamespaceId> ns;
  std::optional<TierKind> tier;
  std::optional<int64_t> older_than_ms, newer_than_ms;
  int64_t now_ms = 0;

  bool Keep(const ListedChunk& c) const {
    if (tier && c.tier != *tier) return false;
    const int64_t age = now_ms - c.info.last_access_unix_ms;
    if (older_than_ms && age < *older_than_ms) return false;
    if (newer_than_ms && age > *newer_than_ms) return false;
    return true;
  }
};

absl::StatusOr<Filters> MakeFilters(const LsFlags& flags) {
  Filters f;
  f.now_ms = NowUnixMs();
  if (!flags.ns.ns_hex.empty() || flags.ns.has_model()) {
    auto ns = flags.ns.Resolve();
    if (!ns.ok()) return ns.status();
    f.ns = *ns;
  }
  if (!flags.tier.empty()) {
    auto t = ParseTierKind(flags.tier);
    if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat("--tier: ", t.status().message()));
    f.tier = *t;
  }
  if (!flags.older_than.empty()) {
    auto d = ParseDurationMs(flags.older_than);
    if (!d.ok())
      return absl::InvalidArgumentError(absl::StrCat("--older-than: ", d.status().message()));
    f.older_than_ms = *d;
  }
  if (!flags.newer_than.empty()) {
    auto d = ParseDurationMs(flags.newer_than);
    if (!d.ok())
      return absl::InvalidArgumentError(absl::StrCat("--newer-than: ", d.status().message()));
    f.newer_than_ms = *d;
  }
  return f;
}

nlohmann::json LayoutJson(const KvLayout& l) {
  return {{"num_layers", l.num_layers},
          {"num_kv_heads", l.num_kv_heads},
          {"head_dim", l.head_dim},
          {"dtype", std::string(DTypeName(l.dtype))},
          {"kind", std::string(LayoutKindName(l.kind))}};
}

int RunLsChunks(const LsFlags& flags, const Filters& f, CacheBackend& backend,
                const GlobalFlags& global, std::ostream& out, std::ostream& err) {
  ChunkListRequest req;
  req.ns = f.ns;
  req.page_token = flags.page_token;
  req.page_size = flags.limit;
  auto page = backend.List(req);
  if (!page.ok()) return Fail(err, "ls", page.status());
  std::vector<ListedChunk> rows;
  for (const auto& c : page->chunks) {
    if (f.Keep(c)) rows.push_back(c);
  }
  if (global.json) {
    nlohmann::json j;
    j["source"] = backend.Describe();
    j["chunks"] = nlohmann::json::array();
    for (const auto& c : rows) {
      j["chunks"].push_back({{"key", c.info.key.ToHex()},
                             {"namespace", c.info.ns.ToHex()},
                             {"parent", c.info.parent.ToHex()},
                             {"tier", std::string(TierName(c.tier))},
                             {"token_count", c.info.token_count},
                             {"bytes", c.info.record_bytes},
                             {"last_access_unix_ms", c.info.last_access_unix_ms}});
    }
    j["next_page_token"] = page->next_page_token;
    out << j.dump(2) << "\n";
    return kExitOk;
  }
  Table t({"KEY", "NAMESPACE", "PARENT", "TIER", "TOKENS", "BYTES", "LAST ACCESS"},
          {false, false, false, false, true, true, false});
  for (const auto& c : rows) {
    t.AddRow({c.info.key.ToHex(), ShortHex(c.info.ns.ToHex()), ShortHex(c.info.parent.ToHex()),
              std::string(TierName(c.tier)), WithCommas(c.info.token_count),
              WithCommas(c.info.record_bytes), Age(c.info.last_access_unix_ms, f.now_ms)});
  }
  t.Print(out);
  if (!page->next_page_token.empty()) {
    out << "\nmore: --chunks --page-token " << page->next_page_token << "\n";
  }
  return kExitOk;
}

}  // namespace

int RunLs(const LsFlags& given, const GlobalFlags& global, std::ostream& out, std::ostream& err) {
  LsFlags flags = given;
  if (absl::Status s = ApplyFromServer(&flags.ns, global.timeout_s); !s.ok())
    return Fail(err, "ls", s);
  constexpr std::string_view kCmd = "ls";
  if (flags.limit == 0 || flags.limit > 10000) {
    return Fail(
        err, kCmd,
        absl::InvalidArgumentError(absl::StrCat("--limit ", flags.limit, ": expected 1..10000")));
  }
  auto f = MakeFilters(flags);
  if (!f.ok()) return Fail(err, kCmd, f.status());
  auto backend = OpenBackend(global);
  if (!backend.ok()) return Fail(err, kCmd, backend.status());
  if (flags.chunks) return RunLsChunks(flags, *f, **backend, global, out, err);

  auto all = ListAll(**backend, f->ns);
  if (!all.ok()) return Fail(err, kCmd, all.status());
  if (f->ns && all->empty()) {
    return Fail(err, kCmd,
                absl::NotFoundError(absl::StrCat("unknown namespace ", f->ns->ToHex(), ": ",
                                                 (*backend)->Describe(), " holds no chunk of it")));
  }
  struct Group {
    uint64_t chunks = 0, tokens = 0, bytes = 0;
    int64_t newest = 0, oldest = 0;
    ChunkKey sample;
  };
  // namespace -> tier -> group
  std::map<NamespaceId, std::map<TierKind, Group>> groups;
  for (const auto& c : *all) {
    if (!f->Keep(c)) continue;
    Group& g = groups[c.info.ns][c.tier];
    if (g.chunks == 0) {
      g.oldest = c.info.last_access_unix_ms;
      g.sample = c.info.key;
    }
    ++g.chunks;
    g.tokens += c.info.token_count;
    g.bytes += c.info.record_bytes;
    g.newest = std::max(g.newest, c.info.last_access_unix_ms);
    g.oldest = std::min(g.oldest, c.info.last_access_unix_ms);
  }
  const size_t total = groups.size();
  uint64_t total_chunks = 0, total_bytes = 0;
  for (const auto& [ns, tiers] : groups) {
    for (const auto& [k, g] : tiers) {
      total_chunks += g.chunks;
      total_bytes += g.bytes;
    }
  }
  auto begin = groups.begin();
  std::advance(begin, std::min(flags.offset, total));
  auto end = begin;
  size_t shown = 0;
  while (end != groups.end() && shown < flags.limit) {
    ++end;
    ++shown;
  }
  const bool more = end != groups.end();

  std::map<NamespaceId, std::optional<KvLayout>> layouts;
  if (flags.layout) {
    for (auto it = begin; it != end; ++it) {
      auto h = (*backend)->ReadHeader(it->second.begin()->second.sample);
      layouts[it->first] = h.ok() ? std::optional<KvLayout>(h->layout) : std::nullopt;
    }
  }

  if (global.json) {
    nlohmann::json j;
    j["source"] = (*backend)->Describe();
    j["namespaces"] = nlohmann::json::array();
    for (auto it = begin; it != end; ++it) {
      nlohmann::json n;
      n["namespace"] = it->first.ToHex();
      uint64_t chunks = 0, bytes = 0, tokens = 0;
      n["tiers"] = nlohmann::json::array();
      for (const auto& [k, g] : it->second) {
        n["tiers"].push_back({{"tier", std::string(TierName(k))},
                              {"chunks", g.chunks},
                              {"tokens", g.tokens},
                              {"bytes", g.bytes},
                              {"last_access_unix_ms", g.newest},
                              {"oldest_access_unix_ms", g.oldest}});
        chunks += g.chunks;
        bytes += g.bytes;
        tokens += g.tokens;
      }
      n["chunks"] = chunks;
      n["tokens"] = tokens;
      n["bytes"] = bytes;
      if (auto l = layouts.find(it->first); l != layouts.end() && l->second)
        n["layout"] = LayoutJson(*l->second);
      j["namespaces"].push_back(std::move(n));
    }
    j["total_namespaces"] = total;
    j["total_chunks"] = total_chunks;
    j["total_bytes"] = total_bytes;
    j["offset"] = flags.offset;
    j["next_offset"] = more ? nlohmann::json(flags.offset + shown) : nlohmann::json(nullptr);
    out << j.dump(2) << "\n";
    return kExitOk;
  }

  std::vector<std::string> headers = {"NAMESPACE", "TIER", "CHUNKS",      "TOKENS",
                                      "BYTES",     "SIZE", "LAST ACCESS", "OLDEST"};
  std::vector<bool> right = {false, false, true, true, true, true, false, false};
  if (flags.layout) {
    headers.push_back("LAYOUT");
    right.push_back(false);
  }
  Table t(headers, right);
  for (auto it = begin; it != end; ++it) {
    for (const auto& [k, g] : it->second) {
      std::vector<std::string> row = {it->first.ToHex(),        std::string(TierName(k)),
                                      WithCommas(g.chunks),     WithCommas(g.tokens),
                                      WithCommas(g.bytes),      HumanBytes(g.bytes),
                                      Age(g.newest, f->now_ms), Age(g.oldest, f->now_ms)};
      if (flags.layout) {
        auto l = layouts[it->first];
        row.push_back(l ? absl::StrFormat("%dx%dx%d %s %s", l->num_layers, l->num_kv_heads,
                                          l->head_dim, DTypeName(l->dtype), LayoutKindName(l->kind))
                        : "?");
      }
      t.AddRow(std::move(row));
    }
  }
  t.Print(out);
  out << absl::StrFormat("\n%d namespace%s, %s chunks, %s bytes (%s) in %s\n", total,
                         total == 1 ? "" : "s", WithCommas(total_chunks), WithCommas(total_bytes),
                         HumanBytes(total_bytes), (*backend)->Describe());
  if (more) {
    out << absl::StrFormat("showing namespaces %d-%d; next page: --offset %d\n", flags.offset + 1,
                           flags.offset + shown, flags.offset + shown);
  }
  return kExitOk;
}

}  // namespace kvt::cli
