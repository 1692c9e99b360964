// Private to kvt_connector: the connector's monotonic counters in one place (relaxed
// atomics; ConnectorStats is their snapshot).
#ifndef CONNECTORS_SRC_CONNECTOR_COUNTERS_H_
#define CONNECTORS_SRC_CONNECTOR_COUNTERS_H_

#include <atomic>
#include <cstdint>

#include "connectors/kv_connector.h"

namespace kvt::connector_internal {

// Thread-safe.
struct ConnectorCounters {
  using Counter = std::atomic<uint64_t>;
  Counter lookups{0}, lookup_hit_tokens{0}, lookup_load_tokens{0};
  Counter leases_by_timeout{0};
  Counter store_calls{0}, store_lookups{0}, store_chunks_taken{0}, store_chunks_skipped{0},
      store_chunks_dropped{0}, store_chunks_put{0}, store_put_errors{0};
  Counter load_chunks_ok{0}, load_chunks_failed{0}, load_misses{0}, load_data_loss{0},
      load_mismatch{0}, load_other_errors{0}, load_bytes{0};

  static void Bump(Counter& c, uint64_t n = 1) { c.fetch_add(n, std::memory_order_relaxed); }

  // Copies every counter into `s` (the cost model and the pending-bytes gauge are the
  // caller's).
  void Fill(ConnectorStats* s) const {
    auto r = [](const Counter& c) { return c.load(std::memory_order_relaxed); };
    s->lookups = r(lookups);
    s->lookup_hit_tokens = r(lookup_hit_tokens);
    s->lookup_load_tokens = r(lookup_load_tokens);
    s->leases_released_by_timeout = r(leases_by_timeout);
    s->store_calls = r(store_calls);
    s->store_lookups = r(store_lookups);
    s->store_chunks_taken = r(store_chunks_taken);
    s->store_chunks_skipped = r(store_chunks_skipped);
    s->store_chunks_dropped = r(store_chunks_dropped);
    s->store_chunks_put = r(store_chunks_put);
    s->store_put_errors = r(store_put_errors);
    s->load_chunks_ok = r(load_chunks_ok);
    s->load_chunks_failed = r(load_chunks_failed);
    s->load_misses = r(load_misses);
    s->load_data_loss = r(load_data_loss);
    s->load_mismatch = r(load_mismatch);
    s->load_other_errors = r(load_other_errors);
    s->load_bytes = r(load_bytes);
  }
};

}  // namespace kvt::connector_internal

#endif  // CONNECTORS_SRC_CONNECTOR_COUNTERS_H_
