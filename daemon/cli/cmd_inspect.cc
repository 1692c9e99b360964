// kvtier inspect: hash a prompt exactly as engines do (ComputeNamespace +
// ComputeChunkKeys) and show which leading chunks are cached, in which tier, and why
// each missing chunk is not held (kvtierd's record, kvstore/absence_record.h).
#include <optional>
#include <ostream>
#include <span>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "commands.h"
#include "nlohmann/json.hpp"
#include "server_namespace.h"

namespace kvt::cli {

namespace {

std::string DescribeParams(const NamespaceParams& p) {
  return absl::StrFormat(
      "model %s, %dx%dx%d %s %s, tp %d/%d, chunk %d, tenant \"%s\"%s", p.model_id,
      p.layout.num_layers, p.layout.num_kv_heads, p.layout.head_dim, DTypeName(p.layout.dtype),
      LayoutKindName(p.layout.kind), p.tp_rank, p.tp_world_size, p.chunk_tokens, p.tenant,
      p.engine_extra.empty() ? "" : absl::StrCat(", extra \"", p.engine_extra, "\""));
}

// The tiers in a rejected_by mask, fastest first ("host", "disk").
std::vector<std::string> RejectedBy(const Absence& a) {
  std::vector<std::string> out;
  for (TierKind k : {TierKind::kHost, TierKind::kDisk, TierKind::kRemote}) {
    if (a.rejected_by & (1u << static_cast<unsigned>(k))) out.emplace_back(TierName(k));
  }
  return out;
}

// The STATUS of a chunk no tier holds.
std::string MissStatus(const std::optional<Absence>& why) {
  if (!why) return "miss";  // the backend cannot say (offline, an older kvtierd)
  switch (why->reason) {
    case AbsenceReason::kNoRecord:
      return "miss (no record)";
    case AbsenceReason::kNotStored:
      return "miss: not stored";
    case AbsenceReason::kRejected: {
      const std::vector<std::string> by = RejectedBy(*why);
      return absl::StrCat(
          "miss: rejected by ",
          by.empty() ? std::string(TierName(why->tier)) : absl::StrJoin(by, " and "), " admission");
    }
    case AbsenceReason::kEvicted:
      return absl::StrCat("miss: evicted (", std::string(TierName(why->tier)), ")");
    case AbsenceReason::kExpired:
      return absl::StrCat("miss: expired (", std::string(TierName(why->tier)), " TTL)");
    case AbsenceReason::kErased:
      return absl::StrCat("miss: erased (", std::string(TierName(why->tier)), ", kvtier evict)");
  }
  return "miss";
}

}  // namespace

int RunInspect(const InspectFlags& given, const GlobalFlags& global, std::ostream& out,
               std::ostream& err) {
  InspectFlags flags = given;
  if (absl::Status s = ApplyFromServer(&flags.ns, global.timeout_s); !s.ok())
    return Fail(err, "inspect", s);
  constexpr std::string_view kCmd = "inspect";
  auto ns = flags.ns.Resolve();
  if (!ns.ok()) return Fail(err, kCmd, ns.status());
  std::optional<NamespaceParams> params;
  if (flags.ns.has_model()) params = *flags.ns.Params();
  const uint32_t chunk_tokens = flags.ns.chunk_tokens;
  if (chunk_tokens == 0)
    return Fail(err, kCmd, absl::InvalidArgumentError("--chunk-tokens must be > 0"));
  auto tokens = LoadPrompt(flags.prompt);
  if (!tokens.ok()) return Fail(err, kCmd, tokens.status());
  auto backend = OpenBackend(global);
  if (!backend.ok()) return Fail(err, kCmd, backend.status());

  // With --include-partial, the engines' rule (kvtier-llama-server's tail records,
  // docs/llama-server.md): an engine computes at least the prompt's last token, so it keys
  // tokens [0, n - 1): the full chunks of those, then the rest as one tail record.
  const size_t keyed =
      flags.include_partial ? (tokens->empty() ? 0 : tokens->size() - 1) : tokens->size();
  ChunkKeyOptions ko;
  ko.chunk_tokens = chunk_tokens;
  ko.include_partial = flags.include_partial;
  const std::vector<ChunkKey> keys =
      ComputeChunkKeys(*ns, std::span<const TokenId>(tokens->data(), keyed), ko);
  std::vector<std::optional<TierKind>> where;
  std::vector<std::optional<Absence>> why;
  bool any_why = false;  // the backend said why for some miss (kvtierd)
  if (!keys.empty()) {
    auto located = (*backend)->Locate(keys);
    if (!located.ok()) return Fail(err, kCmd, located.status());
    for (const Located& l : *located) {
      where.push_back(l.tier);
      why.push_back(l.why);
      any_why = any_why || l.why.has_value();
    }
  }
  size_t cached = 0, leading = 0;
  bool run = true;
  uint64_t tokens_to_load = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint32_t n = static_cast<uint32_t>(
        std::min<size_t>(chunk_tokens, keyed - i * static_cast<size_t>(chunk_tokens)));
    if (where[i]) ++cached;
    if (run && where[i]) {
      ++leading;
      tokens_to_load += n;
    } else {
      run = false;
    }
  }
  if (cached == 0) {
    // Distinguish "this prompt is not cached" from "no such namespace": the latter
    // almost always means a namespace flag differs from what the engine hashes.
    ChunkListRequest req;
    req.ns = *ns;
    req.page_size = 1;
    auto page = (*backend)->List(req);
    if (!page.ok()) return Fail(err, kCmd, page.status());
    if (page->chunks.empty()) {
      return Fail(err, kCmd,
                  absl::NotFoundError(absl::StrCat(
                      "unknown namespace ", ns->ToHex(),
                      params ? absl::StrCat(" (", DescribeParams(*params), ")") : "", ": ",
                      (*backend)->Describe(),
                      " holds no chunk of it. Every namespace field must match what the "
                      "engine hashes (model id, layout, dtype, tp, chunk tokens, tenant, "
                      "engine extra); `kvtier ls` shows the namespaces present")));
    }
  }
  const size_t full = keyed / chunk_tokens;
  const size_t partial =
      flags.include_partial ? keyed % chunk_tokens : tokens->size() % chunk_tokens;
  std::optional<uint64_t> bytes_to_load;
  if (params) {
    bytes_to_load = params->layout.payload_bytes(1) * tokens_to_load;
  } else if (flags.ns.bytes_per_token > 0) {  // --from-server
    bytes_to_load = flags.ns.bytes_per_token * tokens_to_load;
  }
  const uint64_t recompute = tokens->size() - tokens_to_load;

  if (global.json) {
    nlohmann::json j;
    j["source"] = (*backend)->Describe();
    j["namespace"] = ns->ToHex();
    if (params) {
      j["model_id"] = params->model_id;
      j["tenant"] = params->tenant;
    }
    j["prompt_tokens"] = tokens->size();
    j["chunk_tokens"] = chunk_tokens;
    j["full_chunks"] = full;
    j["partial_chunk_tokens"] = partial;
    j["chunks"] = nlohmann::json::array();
    for (size_t i = 0; i < keys.size(); ++i) {
      const size_t first = i * chunk_tokens;
      const size_t n = std::min<size_t>(chunk_tokens, keyed - first);
      j["chunks"].push_back({{"index", i},
                             {"first_token", first},
                             {"tokens", n},
                             {"tail", n < chunk_tokens},
                             {"key", keys[i].ToHex()},
                             {"cached", where[i].has_value()},
                             {"tier", where[i] ? nlohmann::json(std::string(TierName(*where[i])))
                                               : nlohmann::json(nullptr)},
                             {"leading", i < leading}});
      nlohmann::json& c = j["chunks"].back();
      // A miss: why (null when the backend cannot say, and for a hit).
      c["miss_reason"] = nullptr;
      c["miss_tier"] = nullptr;
      if (!where[i] && why[i]) {
        c["miss_reason"] = std::string(AbsenceReasonName(why[i]->reason));
        if (why[i]->reason != AbsenceReason::kNoRecord &&
            why[i]->reason != AbsenceReason::kNotStored) {
          c["miss_tier"] = std::string(TierName(why[i]->tier));
        }
        if (why[i]->reason == AbsenceReason::kRejected) c["rejected_by"] = RejectedBy(*why[i]);
      }
    }
    j["cached_chunks"] = cached;
    j["leading_chunks"] = leading;
    j["tokens_to_load"] = tokens_to_load;
    j["tokens_to_recompute"] = recompute;
    j["bytes_to_load"] = bytes_to_load ? nlohmann::json(*bytes_to_load) : nlohmann::json(nullptr);
    out << j.dump(2) << "\n";
    return kExitOk;
  }

  out << "source     " << (*backend)->Describe() << "\n";
  out << "namespace  " << ns->ToHex();
  if (params) out << " (" << DescribeParams(*params) << ")";
  out << "\n";
  out << absl::StrFormat("prompt     %s tokens = %d full chunks of %d", WithCommas(tokens->size()),
                         full, chunk_tokens);
  if (flags.include_partial) {
    if (partial) out << absl::StrFormat(" + a tail record of %d tokens", partial);
    out << " + the last token (always computed)";
  } else if (partial) {
    out << absl::StrFormat(" + %d tokens (partial, not keyed)", partial);
  }
  out << "\n\n";
  Table t({"CHUNK", "TOKENS", "KEY", "TIER", "STATUS"}, {true, false, false, false, false});
  for (size_t i = 0; i < keys.size(); ++i) {
    const size_t first = i * chunk_tokens;
    const size_t n = std::min<size_t>(chunk_tokens, keyed - first);
    std::string status = where[i] ? (i < leading ? "cached" : "cached (after a miss: not loadable)")
                                  : MissStatus(why[i]);
    const bool tail = n < chunk_tokens;
    t.AddRow({tail ? "tail" : absl::StrCat(i), absl::StrCat(first, "-", first + n - 1),
              keys[i].ToHex(), where[i] ? std::string(TierName(*where[i])) : "-", status});
  }
  if (keys.empty()) {
    out << "(the prompt is shorter than one chunk: nothing is keyed)\n";
  } else {
    t.Print(out);
  }
  out << absl::StrFormat("\nleading cached chunks: %d of %d -> an engine would load %s tokens",
                         leading, keys.size(), WithCommas(tokens_to_load));
  if (bytes_to_load) out << " (" << HumanBytes(*bytes_to_load) << ")";
  out << " and recompute " << WithCommas(recompute) << "\n";
  if (cached < keys.size() && !any_why) {
    out << "why: only a running kvtierd records why a chunk is not held (" << (*backend)->Describe()
        << " cannot say)\n";
  }
  if (cached < keys.size()) {
    // The tiers' counters of what their cache policies declined, evicted and dropped
    // (docs/cache-policy.md), beside the per-chunk reasons.
    if (auto st = (*backend)->Stats(); st.ok()) {
      std::string why;
      for (const auto& tier : st->tiers) {
        const TierStats& x = tier.stats;
        if (x.admission_rejects + x.evictions + x.ttl_expired == 0) continue;
        why += absl::StrFormat("%s%s: %s rejected by admission, %s evicted, %s expired",
                               why.empty() ? "" : "; ", TierName(tier.kind),
                               WithCommas(x.admission_rejects), WithCommas(x.evictions),
                               WithCommas(x.ttl_expired));
      }
      out << "not held: " << keys.size() - cached << " chunk(s) never stored, or since removed ("
          << (why.empty() ? "no tier has rejected, evicted or expired a record" : why)
          << "; kvtier stats)\n";
    }
  }
  return kExitOk;
}

}  // namespace kvt::cli
