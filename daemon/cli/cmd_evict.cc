// kvtier evict: by key, by prompt prefix (its chunks and every cached chunk that
// continues it, found by walking the records' parent links), by namespace, by age.
#include <algorithm>
#include <deque>
#include <map>
#include <ostream>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "commands.h"
#include "nlohmann/json.hpp"

namespace kvt::cli {

namespace {

struct Target {
  ChunkKey key;
  NamespaceId ns;
  std::vector<TierKind> tiers;
  uint32_t token_count = 0;
  uint64_t bytes = 0;  // record bytes (one copy)
  int64_t last_access_unix_ms = 0;
};

// Distinct chunks of a listing, in listing order.
std::vector<Target> Distinct(const std::vector<ListedChunk>& listed) {
  std::vector<Target> out;
  std::unordered_map<ChunkKey, size_t> index;
  for (const auto& c : listed) {
    auto [it, fresh] = index.emplace(c.info.key, out.size());
    if (fresh) {
      out.push_back(Target{c.info.key, c.info.ns, {c.tier}, c.info.token_count, c.info.record_bytes,
                           c.info.last_access_unix_ms});
    } else {
      Target& t = out[it->second];
      t.tiers.push_back(c.tier);
      t.last_access_unix_ms = std::max(t.last_access_unix_ms, c.info.last_access_unix_ms);
    }
  }
  return out;
}

// Every key reachable from `roots` through parent links (roots excluded unless cached
// descendants of another root).
std::vector<ChunkKey> Descendants(const std::vector<ListedChunk>& listed,
                                  const std::vector<ChunkKey>& roots) {
  std::unordered_map<ChunkKey, std::vector<ChunkKey>> children;
  for (const auto& c : listed) children[c.info.parent].push_back(c.info.key);
  for (auto& [p, v] : children) {
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
  }
  std::vector<ChunkKey> out;
  std::unordered_set<ChunkKey> seen(roots.begin(), roots.end());
  std::deque<ChunkKey> todo(roots.begin(), roots.end());
  while (!todo.empty()) {
    const ChunkKey k = todo.front();
    todo.pop_front();
    auto it = children.find(k);
    if (it == children.end()) continue;
    for (const ChunkKey& c : it->second) {
      if (seen.insert(c).second) {
        out.push_back(c);
        todo.push_back(c);
      }
    }
  }
  return out;
}

std::string TierList(const std::vector<TierKind>& tiers) {
  std::string s;
  for (TierKind t : tiers) absl::StrAppend(&s, s.empty() ? "" : ",", std::string(TierName(t)));
  return s;
}

}  // namespace

int RunEvict(const EvictFlags& flags, const GlobalFlags& global, std::ostream& out, std::ostream& err) {
  constexpr std::string_view kCmd = "evict";
  const bool by_key = !flags.keys.empty();
  const bool by_prefix = flags.prefix.given();
  const bool by_age = !flags.older_than.empty();
  const bool has_ns = !flags.ns.ns_hex.empty() || flags.ns.has_model();
  if (static_cast<int>(by_key) + static_cast<int>(by_prefix) + static_cast<int>(by_age) > 1) {
    return Fail(err, kCmd, absl::InvalidArgumentError(
                               "give one selector: --key, --prefix/--prefix-text or --older-than"));
  }
  if (!by_key && !by_prefix && !by_age && !has_ns) {
    return Fail(err, kCmd, absl::InvalidArgumentError(
                               "nothing selected: give --key HEX, --prefix TOKENS_FILE (with the "
                               "namespace flags), --older-than DURATION, or a namespace alone "
                               "(--ns HEX or --model ...) to evict all of it"));
  }
  if (by_key && has_ns) {
    return Fail(err, kCmd, absl::InvalidArgumentError("--key selects chunks by key alone; drop the namespace flags"));
  }
  std::vector<ChunkKey> keys;
  for (const auto& k : flags.keys) {
    auto key = ChunkKey::FromHex(k);
    if (!key.ok()) return Fail(err, kCmd, absl::InvalidArgumentError(absl::StrCat("--key: ", key.status().message())));
    keys.push_back(*key);
  }
  std::optional<NamespaceId> ns;
  if (has_ns) {
    auto r = flags.ns.Resolve();
    if (!r.ok()) return Fail(err, kCmd, r.status());
    ns = *r;
  } else if (by_prefix) {
    return Fail(err, kCmd, absl::InvalidArgumentError(
                               "--prefix needs the namespace the prompt was cached under: --ns HEX "
                               "or --model/--layers/--kv-heads/--head-dim/... as the engine uses"));
  }
  std::vector<TokenId> prefix_tokens;
  if (by_prefix) {
    auto t = LoadPrompt(flags.prefix);
    if (!t.ok()) return Fail(err, kCmd, t.status());
    prefix_tokens = std::move(*t);
    if (prefix_tokens.size() < flags.ns.chunk_tokens) {
      return Fail(err, kCmd, absl::InvalidArgumentError(absl::StrFormat(
                                 "--prefix has %d tokens, fewer than one chunk (%d tokens): no chunk "
                                 "key covers it",
                                 prefix_tokens.size(), flags.ns.chunk_tokens)));
    }
  }
  int64_t older_ms = 0;
  if (by_age) {
    auto d = ParseDurationMs(flags.older_than);
    if (!d.ok()) return Fail(err, kCmd, absl::InvalidArgumentError(absl::StrCat("--older-than: ", d.status().message())));
    older_ms = *d;
  }

  auto backend = OpenBackend(global);
  if (!backend.ok()) return Fail(err, kCmd, backend.status());
  CacheBackend& b = **backend;

  std::vector<Target> targets;
  uint64_t orphaned = 0;
  std::string selector;
  if (by_key) {
    selector = "key";
    // Keys may belong to any namespace: list everything once and pick them out.
    auto all = ListAll(b, std::nullopt);
    if (!all.ok()) return Fail(err, kCmd, all.status());
    std::vector<Target> d = Distinct(*all);
    std::unordered_map<ChunkKey, size_t> pos;
    for (size_t i = 0; i < d.size(); ++i) pos[d[i].key] = i;
    for (const ChunkKey& k : keys) {
      auto it = pos.find(k);
      if (it == pos.end()) {
        return Fail(err, kCmd, absl::NotFoundError(absl::StrCat("key ", k.ToHex(), " is not cached in ", b.Describe())));
      }
      targets.push_back(d[it->second]);
    }
  } else {
    auto all = ListAll(b, ns);
    if (!all.ok()) return Fail(err, kCmd, all.status());
    if (ns && all->empty()) {
      return Fail(err, kCmd, absl::NotFoundError(absl::StrCat("unknown namespace ", ns->ToHex(), ": ", b.Describe(),
                                                              " holds no chunk of it")));
    }
    std::vector<Target> d = Distinct(*all);
    if (by_prefix) {
      selector = "prefix";
      ChunkKeyOptions ko;
      ko.chunk_tokens = flags.ns.chunk_tokens;
      const std::vector<ChunkKey> pkeys = ComputeChunkKeys(*ns, prefix_tokens, ko);
      std::unordered_set<ChunkKey> chosen(pkeys.begin(), pkeys.end());
      for (const ChunkKey& k : Descendants(*all, {pkeys.back()})) chosen.insert(k);
      // Other branches that share an earlier chunk of the prefix lose an ancestor:
      // an engine can never load them again.
      std::vector<ChunkKey> inner(pkeys.begin(), pkeys.end() - 1);
      for (const ChunkKey& k : Descendants(*all, inner)) {
        if (!chosen.count(k)) {
          ++orphaned;
          if (flags.include_orphans) chosen.insert(k);
        }
      }
      if (flags.include_orphans) orphaned = 0;
      for (const Target& t : d) {
        if (chosen.count(t.key)) targets.push_back(t);
      }
      if (targets.empty()) {
        return Fail(err, kCmd, absl::NotFoundError(absl::StrCat(
                                   "none of the prefix's ", pkeys.size(), " chunks, and nothing after them, is cached in ",
                                   b.Describe(), " under namespace ", ns->ToHex())));
      }
    } else if (by_age) {
      selector = "older_than";
      const int64_t now = NowUnixMs();
      for (const Target& t : d) {
        if (now - t.last_access_unix_ms >= older_ms) targets.push_back(t);
      }
    } else {
      selector = "namespace";
      targets = std::move(d);
    }
  }

  // Evict, children before parents is not needed (keys are independent records), but
  // deterministic order helps reading: listing order.
  uint64_t bytes = 0, done = 0;
  std::vector<std::pair<ChunkKey, std::string>> failed;
  for (const Target& t : targets) {
    if (!flags.dry_run) {
      if (absl::Status s = b.Erase(t.key); !s.ok()) {
        failed.emplace_back(t.key, std::string(s.message()));
        continue;
      }
    }
    ++done;
    bytes += t.bytes;
  }

  if (global.json) {
    nlohmann::json j;
    j["source"] = b.Describe();
    j["selector"] = selector;
    j["dry_run"] = flags.dry_run;
    j["chunks"] = nlohmann::json::array();
    for (const Target& t : targets) {
      nlohmann::json tiers = nlohmann::json::array();
      for (TierKind k : t.tiers) tiers.push_back(std::string(TierName(k)));
      j["chunks"].push_back({{"key", t.key.ToHex()},
                             {"namespace", t.ns.ToHex()},
                             {"tiers", tiers},
                             {"token_count", t.token_count},
                             {"bytes", t.bytes}});
    }
    j["evicted_chunks"] = done;
    j["evicted_bytes"] = bytes;
    j["orphaned_chunks"] = orphaned;
    j["failed"] = nlohmann::json::array();
    for (const auto& [k, m] : failed) j["failed"].push_back({{"key", k.ToHex()}, {"error", m}});
    out << j.dump(2) << "\n";
  } else {
    Table t({"KEY", "NAMESPACE", "TIER", "TOKENS", "BYTES"}, {false, false, false, true, true});
    for (const Target& x : targets) {
      t.AddRow({x.key.ToHex(), ShortHex(x.ns.ToHex()), TierList(x.tiers), WithCommas(x.token_count),
                WithCommas(x.bytes)});
    }
    if (!targets.empty()) {
      t.Print(out);
      out << "\n";
    }
    out << absl::StrFormat("%s %s chunks (%s B, %s) from %s\n", flags.dry_run ? "would evict" : "evicted",
                           WithCommas(done), WithCommas(bytes), HumanBytes(bytes), b.Describe());
    if (orphaned) {
      out << absl::StrFormat("%d other cached chunk%s branch%s off inside this prefix and become%s "
                             "unreachable; add --include-orphans to evict %s too\n",
                             orphaned, orphaned == 1 ? "" : "s", orphaned == 1 ? "es" : "",
                             orphaned == 1 ? "s" : "", orphaned == 1 ? "it" : "them");
    }
    for (const auto& [k, m] : failed) out << "failed " << k.ToHex() << ": " << m << "\n";
  }
  if (!failed.empty()) {
    err << "kvtier evict: " << failed.size() << " chunks could not be evicted (e.g. pinned by a reader)\n";
    return kExitRuntime;
  }
  return kExitOk;
}

}  // namespace kvt::cli
