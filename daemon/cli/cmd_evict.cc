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
#include "server_namespace.h"

namespace kvt::cli {

namespace {

std::string TierList(const std::vector<TierKind>& tiers) {
  if (tiers.empty()) return "-";
  std::string s;
  for (TierKind t : tiers) absl::StrAppend(&s, s.empty() ? "" : ",", std::string(TierName(t)));
  return s;
}

}  // namespace

int RunEvict(const EvictFlags& given, const GlobalFlags& global, std::ostream& out,
             std::ostream& err) {
  EvictFlags flags = given;
  if (absl::Status s = ApplyFromServer(&flags.ns, global.timeout_s); !s.ok())
    return Fail(err, "evict", s);
  constexpr std::string_view kCmd = "evict";
  const bool by_key = !flags.keys.empty();
  const bool by_prefix = flags.prefix.given();
  const bool by_age = !flags.older_than.empty();
  const bool has_ns = !flags.ns.ns_hex.empty() || flags.ns.has_model();
  if (static_cast<int>(by_key) + static_cast<int>(by_prefix) + static_cast<int>(by_age) > 1) {
    return Fail(err, kCmd,
                absl::InvalidArgumentError(
                    "give one selector: --key, --prefix/--prefix-text or --older-than"));
  }
  if (!by_key && !by_prefix && !by_age && !has_ns) {
    return Fail(err, kCmd,
                absl::InvalidArgumentError(
                    "nothing selected: give --key HEX, --prefix TOKENS_FILE (with the "
                    "namespace flags), --older-than DURATION, or a namespace alone "
                    "(--ns HEX or --model ...) to evict all of it"));
  }
  if (by_key && has_ns) {
    return Fail(
        err, kCmd,
        absl::InvalidArgumentError("--key selects chunks by key alone; drop the namespace flags"));
  }
  std::vector<ChunkKey> keys;
  for (const auto& k : flags.keys) {
    auto key = ChunkKey::FromHex(k);
    if (!key.ok())
      return Fail(err, kCmd,
                  absl::InvalidArgumentError(absl::StrCat("--key: ", key.status().message())));
    keys.push_back(*key);
  }
  std::optional<NamespaceId> ns;
  if (has_ns) {
    auto r = flags.ns.Resolve();
    if (!r.ok()) return Fail(err, kCmd, r.status());
    ns = *r;
  } else if (by_prefix) {
    return Fail(err, kCmd,
                absl::InvalidArgumentError(
                    "--prefix needs the namespace the prompt was cached under: --ns HEX "
                    "or --model/--layers/--kv-heads/--head-dim/... as the engine uses"));
  }
  std::vector<TokenId> prefix_tokens;
  if (by_prefix) {
    auto t = LoadPrompt(flags.prefix);
    if (!t.ok()) return Fail(err, kCmd, t.status());
    prefix_tokens = std::move(*t);
    if (prefix_tokens.size() < flags.ns.chunk_tokens) {
      return Fail(err, kCmd,
                  absl::InvalidArgumentError(absl::StrFormat(
                      "--prefix has %d tokens, fewer than one chunk (%d tokens): no chunk "
                      "key covers it",
                      prefix_tokens.size(), flags.ns.chunk_tokens)));
    }
  }
  int64_t older_ms = 0;
  if (by_age) {
    auto d = ParseDurationMs(flags.older_than);
    if (!d.ok())
      return Fail(err, kCmd,
                  absl::InvalidArgumentError(absl::StrCat("--older-than: ", d.status().message())));
    older_ms = *d;
  }

  auto backend = OpenBackend(global);
  if (!backend.ok()) return Fail(err, kCmd, backend.status());
  CacheBackend& b = **backend;

  // The backend's store applies each selector (kvstore/evict_selector.h); this command
  // only says which.
  std::vector<StoredChunk> targets;
  std::vector<std::pair<ChunkKey, std::string>> failed;
  uint64_t orphaned = 0, done = 0, bytes = 0;
  std::string selector;
  auto run = [&](const EvictSelector& sel, bool dry_run) -> absl::Status {
    auto r = b.Evict(sel, dry_run);
    if (!r.ok()) return r.status();
    done += r->chunks;
    bytes += r->bytes;
    for (auto& c : r->selected) targets.push_back(std::move(c));
    for (auto& [k, st] : r->failed) failed.emplace_back(k, std::string(st.message()));
    return absl::OkStatus();
  };
  if (by_key) {
    selector = "key";
    // Every key must be cached, or nothing is evicted.
    EvictSelector sel;
    sel.keys = keys;
    auto probe = b.Evict(sel, /*dry_run=*/true);
    if (!probe.ok()) return Fail(err, kCmd, probe.status());
    std::unordered_set<ChunkKey> found;
    for (const auto& c : probe->selected) found.insert(c.info.key);
    for (const ChunkKey& k : keys) {
      if (!found.count(k)) {
        return Fail(err, kCmd,
                    absl::NotFoundError(
                        absl::StrCat("key ", k.ToHex(), " is not cached in ", b.Describe())));
      }
    }
    if (absl::Status s = run(sel, flags.dry_run); !s.ok()) return Fail(err, kCmd, s);
  } else if (by_prefix) {
    selector = "prefix";
    ChunkKeyOptions ko;
    ko.chunk_tokens = flags.ns.chunk_tokens;
    const std::vector<ChunkKey> pkeys = ComputeChunkKeys(*ns, prefix_tokens, ko);
    // Everything continuing the prompt's first chunk: the prompt's chunks, what follows
    // them, and the branches that share an earlier chunk (orphans once it is gone).
    EvictSelector whole;
    whole.prefix = pkeys.front();
    whole.within_ns = ns;
    if (flags.include_orphans) {
      if (absl::Status s = run(whole, flags.dry_run); !s.ok()) return Fail(err, kCmd, s);
    } else {
      auto all = b.Evict(whole, /*dry_run=*/true);
      if (!all.ok()) return Fail(err, kCmd, all.status());
      EvictSelector tail;  // the last chunk of the prompt and everything after it
      tail.prefix = pkeys.back();
      tail.within_ns = ns;
      if (absl::Status s = run(tail, flags.dry_run); !s.ok()) return Fail(err, kCmd, s);
      if (pkeys.size() > 1) {
        EvictSelector inner;  // the prompt's own earlier chunks
        inner.keys.assign(pkeys.begin(), pkeys.end() - 1);
        if (absl::Status s = run(inner, flags.dry_run); !s.ok()) return Fail(err, kCmd, s);
      }
      const uint64_t taken = targets.size() + failed.size();
      orphaned = all->chunks > taken ? all->chunks - taken : 0;
    }
    if (targets.empty() && failed.empty()) {
      return Fail(
          err, kCmd,
          absl::NotFoundError(absl::StrCat("none of the prefix's ", pkeys.size(),
                                           " chunks, and nothing after them, is cached in ",
                                           b.Describe(), " under namespace ", ns->ToHex())));
    }
  } else if (by_age) {
    selector = "older_than";
    EvictSelector sel;
    sel.older_than = std::chrono::milliseconds(older_ms);
    sel.within_ns = ns;
    if (older_ms <= 0) {
      sel.older_than.reset();  // "--older-than 0": everything
      sel.all = true;
    }
    if (absl::Status s = run(sel, flags.dry_run); !s.ok()) return Fail(err, kCmd, s);
  } else {
    selector = "namespace";
    EvictSelector sel;
    sel.ns = ns;
    if (absl::Status s = run(sel, flags.dry_run); !s.ok()) return Fail(err, kCmd, s);
    if (targets.empty() && failed.empty()) {
      return Fail(err, kCmd,
                  absl::NotFoundError(absl::StrCat("unknown namespace ", ns->ToHex(), ": ",
                                                   b.Describe(), " holds no chunk of it")));
    }
  }

  if (global.json) {
    nlohmann::json j;
    j["source"] = b.Describe();
    j["selector"] = selector;
    j["dry_run"] = flags.dry_run;
    j["chunks"] = nlohmann::json::array();
    for (const StoredChunk& t : targets) {
      nlohmann::json tiers = nlohmann::json::array();
      for (TierKind k : t.kinds) tiers.push_back(std::string(TierName(k)));
      j["chunks"].push_back({{"key", t.info.key.ToHex()},
                             {"namespace", t.info.ns.ToHex()},
                             {"tiers", tiers},
                             {"token_count", t.info.token_count},
                             {"bytes", t.info.record_bytes}});
    }
    j["evicted_chunks"] = done;
    j["evicted_bytes"] = bytes;
    j["orphaned_chunks"] = orphaned;
    j["failed"] = nlohmann::json::array();
    for (const auto& [k, m] : failed) j["failed"].push_back({{"key", k.ToHex()}, {"error", m}});
    out << j.dump(2) << "\n";
  } else {
    Table t({"KEY", "NAMESPACE", "TIER", "TOKENS", "BYTES"}, {false, false, false, true, true});
    for (const StoredChunk& x : targets) {
      t.AddRow({x.info.key.ToHex(), ShortHex(x.info.ns.ToHex()), TierList(x.kinds),
                WithCommas(x.info.token_count), WithCommas(x.info.record_bytes)});
    }
    if (!targets.empty()) {
      t.Print(out);
      out << "\n";
    }
    out << absl::StrFormat("%s %s chunks (%s B, %s) from %s\n",
                           flags.dry_run ? "would evict" : "evicted", WithCommas(done),
                           WithCommas(bytes), HumanBytes(bytes), b.Describe());
    if (orphaned) {
      out << absl::StrFormat(
          "%d other cached chunk%s branch%s off inside this prefix and become%s "
          "unreachable; add --include-orphans to evict %s too\n",
          orphaned, orphaned == 1 ? "" : "s", orphaned == 1 ? "es" : "", orphaned == 1 ? "s" : "",
          orphaned == 1 ? "it" : "them");
    }
    for (const auto& [k, m] : failed) out << "failed " << k.ToHex() << ": " << m << "\n";
  }
  if (!failed.empty()) {
    err << "kvtier evict: " << failed.size()
        << " chunks could not be evicted (e.g. pinned by a reader)\n";
    return kExitRuntime;
  }
  return kExitOk;
}

}  // namespace kvt::cli
