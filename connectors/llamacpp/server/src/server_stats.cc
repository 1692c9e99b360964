#include "kvtier_server/server_stats.h"

#include "kvstore/prometheus_text.h"
#include "nlohmann/json.hpp"

namespace kvt::llamacpp {

void ServerStats::Add(std::atomic<double>& sum, double seconds) {
  double cur = sum.load(std::memory_order_relaxed);
  while (!sum.compare_exchange_weak(cur, cur + seconds, std::memory_order_relaxed)) {
  }
}

std::string ServerStats::MetricsText(const ServerReportState& state) const {
  const ConnectorStats& cs = state.connector;
  PrometheusText out;  // the project's one writer of the text format
  auto line = [&](const char* name, const char* help, const char* type, double v) {
    out.Family(name,
               std::string_view(type) == "gauge" ? PrometheusText::Type::kGauge
                                                 : PrometheusText::Type::kCounter,
               help);
    out.Sample(name, v);
  };
  line("kvtier_requests_total", "prompts that had complete chunks to gain from kvtier", "counter",
       requests);
  line("kvtier_hits_total", "prompts that restored at least one chunk from kvtier", "counter",
       hits);
  line("kvtier_misses_total", "prompts that restored nothing from kvtier", "counter", misses);
  line("kvtier_cost_skips_total", "prompts whose cached chunks the cost model chose to recompute",
       "counter", cost_skips);
  // The cost model's decisions (CostModelStats; docs/cost-model.md): per prompt with
  // cached chunks, load all, load some, recompute, or a probe (one chunk loaded after
  // --kvtier-cost-probe-after recomputes in a row, to measure the tier again).
  out.Family("kvtier_cost_decisions_total", PrometheusText::Type::kCounter,
             "the cost model's decisions on prompts with cached chunks, by decision");
  for (const auto& [decision, n] : {std::pair{"load_all", cs.cost.decisions_load_all},
                                    std::pair{"load_partial", cs.cost.decisions_load_partial},
                                    std::pair{"recompute", cs.cost.decisions_recompute},
                                    std::pair{"probe", cs.cost.decisions_probe}}) {
    out.Sample("kvtier_cost_decisions_total", {{"decision", decision}}, n);
  }
  line("kvtier_cost_prefill_fit_active",
       "1 once the cost model predicts prefill time from this server's measured prefills", "gauge",
       cs.cost.prefill_fit_active ? 1 : 0);
  line("kvtier_loaded_tokens_total", "tokens restored from kvtier", "counter", loaded_tokens);
  line("kvtier_load_bytes_total", "KV payload bytes restored from kvtier", "counter", load_bytes);
  line("kvtier_load_failures_total", "restores cut short (chunk missing, corrupt, or refused)",
       "counter", load_failures);
  line("kvtier_load_seconds_total", "time spent restoring from kvtier", "counter",
       load_seconds.load());
  line("kvtier_prompt_start_seconds_total",
       "time kvtier spent on requests' paths before their prefill (lookup, and restores)",
       "counter", prompt_start_seconds.load());
  line("kvtier_store_seconds_total",
       "task-loop time taking chunks and tails for storing (delays every slot's next batch)",
       "counter", store_seconds.load());
  line("kvtier_stored_chunks_total", "chunks taken for storing", "counter", stored_chunks);
  line("kvtier_store_errors_total", "stores that failed", "counter", store_errors);
  line("kvtier_chunks_put_total", "chunks that reached the tiers", "counter",
       static_cast<double>(cs.store_chunks_put));
  line("kvtier_store_calls_total", "prompts taken for storing", "counter",
       static_cast<double>(cs.store_calls));
  line("kvtier_store_lookups_total",
       "prompts taken for storing that asked the tiers which chunks they hold (the others "
       "reused their prompt-start lookup)",
       "counter", static_cast<double>(cs.store_lookups));
  const TailStats& ts = state.tails;
  line("kvtier_tail_hits_total", "prompts restored up to the end of their tail record", "counter",
       tail_hits);
  line("kvtier_tails_put_total", "tail records that reached the tiers", "counter",
       static_cast<double>(ts.put));
  line("kvtier_overlapped_total",
       "prompts whose cached back loaded while llama-server computed the front", "counter",
       overlapped);
  line("kvtier_overlap_joined_total", "overlapped prompts whose loaded back was joined in",
       "counter", overlap_joined);
  line("kvtier_overlap_front_tokens_total", "tokens computed as the front of a joined overlap",
       "counter", overlap_front_tokens);
  line("kvtier_overlap_loaded_tokens_total", "tokens loaded as the back of a joined overlap",
       "counter", overlap_loaded_tokens);
  line("kvtier_overlap_wait_seconds_total",
       "time the task loop waited for back loads after computing the front", "counter",
       overlap_wait_seconds.load());
  line("kvtier_chunk_integrity_errors_total", "chunks that failed verification on load", "counter",
       static_cast<double>(cs.load_data_loss));
  line("kvtier_model_changed",
       "1 once the model file changed under the server: kvtier is off until a restart", "gauge",
       state.model_changed ? 1 : 0);
  return out.Take();
}

std::string ServerStats::StatusJson(const ServerReportState& state) const {
  if (state.refused) {
    return nlohmann::json({{"enabled", false},
                           {"state", "refused"},
                           {"refused", state.refused_why},
                           {"tiers", state.tiers}})
        .dump();
  }
  if (!state.ready) {
    return nlohmann::json({{"enabled", false}, {"state", "loading"}, {"tiers", state.tiers}})
        .dump();
  }
  const ConnectorStats& cs = state.connector;
  const TailStats& ts = state.tails;
  const bool model_changed = state.model_changed;
  nlohmann::json j = {
      {"enabled", !model_changed},
      {"state", model_changed ? "model_changed" : "ready"},
      {"model_changed", model_changed},
      {"model_file", state.model_file},
      {"tiers", state.tiers},
      {"namespace", state.ns_hex},
      {"memory", state.memory},
      {"chunk_tokens", state.chunk_tokens},
      {"bytes_per_token", state.bytes_per_token},
      {"snapshot_bytes", state.snapshot_bytes},
      {"requests", requests.load()},
      {"hits", hits.load()},
      {"misses", misses.load()},
      {"cost_skips", cost_skips.load()},
      {"cost_decisions",
       {{"load_all", cs.cost.decisions_load_all},
        {"load_partial", cs.cost.decisions_load_partial},
        {"recompute", cs.cost.decisions_recompute},
        {"probe", cs.cost.decisions_probe}}},
      {"cost_prefill_fit_active", cs.cost.prefill_fit_active},
      {"loaded_tokens", loaded_tokens.load()},
      {"load_bytes", load_bytes.load()},
      {"load_failures", load_failures.load()},
      {"load_seconds", load_seconds.load()},
      {"prompt_start_seconds", prompt_start_seconds.load()},
      {"store_seconds", store_seconds.load()},
      {"dropped_prefixes", dropped_prefixes.load()},
      {"stored_chunks", stored_chunks.load()},
      {"store_errors", store_errors.load()},
      {"chunks_put", cs.store_chunks_put},
      {"store_calls", cs.store_calls},
      {"store_lookups", cs.store_lookups},
      {"tail_records", state.tail_records},
      {"tail_hits", tail_hits.load()},
      {"tails_queued", ts.queued},
      {"tails_put", ts.put},
      {"tails_skipped", ts.skipped},
      {"tails_dropped", ts.dropped},
      {"tail_put_errors", ts.put_errors},
      {"put_errors", cs.store_put_errors},
      {"integrity_errors", cs.load_data_loss},
      {"store_pending_bytes", cs.store_pending_bytes},
      {"overlap_mode", state.overlap_mode},
      {"overlapped", overlapped.load()},
      {"overlap_joined", overlap_joined.load()},
      {"overlap_front_tokens", overlap_front_tokens.load()},
      {"overlap_loaded_tokens", overlap_loaded_tokens.load()},
      {"overlap_wait_seconds", overlap_wait_seconds.load()},
      {"writeback_pending_bytes", state.writeback_pending_bytes},
  };
  return j.dump();
}

}  // namespace kvt::llamacpp
