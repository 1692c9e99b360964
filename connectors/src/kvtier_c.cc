// C ABI over KVConnector (connectors/kvtier_c.h). The one place where absl::Status
// becomes an int code + thread-local message, and where no C++ exception may escape.
#include "connectors/kvtier_c.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "connectors/daemon_probe.h"
#include "connectors/kv_connector.h"
#include "kvstore/byte_size.h"
#include "kvstore/disk_tier.h"
#include "kvstore/host_tier.h"
#include "kvstore/store_factory.h"
#include "kvstore/tiered_store.h"

#if KVT_C_HAVE_REMOTE
#include "kvstore/remote_tier.h"
#endif

// Block-region view (kvt_block_view), copied at registration.
struct kvt_connector {
  std::shared_ptr<kvt::TieredStore> store;
  std::unique_ptr<kvt::KVConnector> connector;
  // kvtierd of daemon mode ("" = none), for kvt_daemon_check; set once by kvt_create.
  std::string daemon_address, daemon_token;
  uint32_t daemon_deadline_ms = 0;
};

// kvt_lookup_pinned's lease (the store's, moved out of the ConnectorLookup).
struct kvt_lease {
  kvt::Lease lease;
};

// A fetched per-layer block load (kvt_fetch_blocks; KVConnector::FetchBlocks).
struct kvt_fetched {
  kvt::FetchedBlocks blocks;
};

namespace {

// kvt_options.disk_capacity_bytes = 0: the size kvtierd gives its disk tier by default.
constexpr uint64_t kDefaultDiskCapacityBytes = 8ull << 30;

thread_local std::string g_last_error;

int Fail(const absl::Status& s) {
  g_last_error = std::string(s.message());
  return static_cast<int>(s.code());
}
int Fail(int code, std::string message) {
  g_last_error = std::move(message);
  return code;
}
int Ok() {
  g_last_error.clear();
  return KVT_OK;
}
int Result(const absl::Status& s) { return s.ok() ? Ok() : Fail(s); }

// Runs `body` turning any escaping exception into KVT_INTERNAL.
template <typename F>
int Guard(const char* what, F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    return Fail(KVT_INTERNAL, absl::StrFormat("%s: unexpected exception: %s", what, e.what()));
  } catch (...) {
    return Fail(KVT_INTERNAL, absl::StrFormat("%s: unexpected exception", what));
  }
}

absl::Status FromCode(int code, const char* what, size_t chunk) {
  if (code == KVT_OK) return absl::OkStatus();
  absl::StatusCode c = (code > 0 && code <= KVT_DATA_LOSS) ? static_cast<absl::StatusCode>(code)
                                                           : absl::StatusCode::kUnknown;
  return absl::Status(c,
                      absl::StrFormat("%s callback returned %d for chunk %d", what, code, chunk));
}

kvt::KvLayout MakeLayout(uint32_t layers, uint32_t heads, uint32_t head_dim, int32_t dtype,
                         int32_t kind) {
  kvt::KvLayout l;
  l.num_layers = layers;
  l.num_kv_heads = heads;
  l.head_dim = head_dim;
  // Out-of-range values are kept as-is so KvLayout::Validate names them.
  l.dtype = static_cast<kvt::DType>(static_cast<uint8_t>(dtype < 0 || dtype > 255 ? 255 : dtype));
  l.kind = static_cast<kvt::LayoutKind>(static_cast<uint8_t>(kind < 0 || kind > 255 ? 255 : kind));
  return l;
}

#define KVT_C_REQUIRE(cond, msg)                           \
  do {                                                     \
    if (!(cond)) return Fail(KVT_INVALID_ARGUMENT, (msg)); \
  } while (0)

}  // namespace

extern "C" {

void kvt_options_init(kvt_options* o) {
  if (o == nullptr) return;
  *o = kvt_options{};
  o->num_layers = 0;
  o->dtype = KVT_DTYPE_F16;
  o->layout_kind = KVT_LAYOUT_FLASH_ATTN_NHD;
  o->tp_rank = 0;
  o->tp_world_size = 1;
  o->chunk_tokens = kvt::kDefaultChunkTokens;
  o->host_capacity_bytes = 1ull << 30;
  o->disk_capacity_bytes = 0;
  o->use_cost_model = 1;
  o->async_store = 1;
  o->daemon_deadline_ms = 2000;
  o->cost_probe_after = kvt::CostModelOptions{}.probe_after_recomputes;
}

const char* kvt_last_error(void) { return g_last_error.c_str(); }

int kvt_create(const kvt_options* o, kvt_connector** out) {
  return Guard("kvt_create", [&]() -> int {
    KVT_C_REQUIRE(o != nullptr && out != nullptr, "kvt_create: options and out must be non-NULL");
    KVT_C_REQUIRE(o->model_id != nullptr,
                  "kvt_create: options.model_id is NULL; expected a model identity");
    kvt::ConnectorOptions copts;
    copts.ns.model_id = o->model_id;
    copts.ns.layout =
        MakeLayout(o->num_layers, o->num_kv_heads, o->head_dim, o->dtype, o->layout_kind);
    copts.ns.tp_rank = o->tp_rank;
    copts.ns.tp_world_size = o->tp_world_size;
    copts.ns.chunk_tokens = o->chunk_tokens;
    copts.ns.tenant = o->tenant ? o->tenant : "";
    copts.ns.engine_extra = o->engine_extra ? o->engine_extra : "";
    copts.use_cost_model = o->use_cost_model != 0;
    copts.async_store = o->async_store != 0;
    copts.cost.probe_after_recomputes = o->cost_probe_after;
    if (o->prefill_s_per_token > 0) copts.cost.prefill_s_per_token = o->prefill_s_per_token;
    if (o->prefill_s_per_token_ctx > 0) {
      copts.cost.prefill_s_per_token_ctx = o->prefill_s_per_token_ctx;
    }
    if (absl::Status s = copts.Validate(); !s.ok()) return Fail(s);

    kvt::StoreOptions sopts;
    const bool daemon = o->daemon_address != nullptr && o->daemon_address[0] != '\0';
    if (daemon) {
      KVT_C_REQUIRE(o->disk_dir == nullptr || o->disk_dir[0] == '\0',
                    absl::StrFormat("kvt_create: options.disk_dir = \"%s\" and "
                                    "options.daemon_address = \"%s\" are both set; set one",
                                    o->disk_dir, o->daemon_address));
      KVT_C_REQUIRE(o->daemon_deadline_ms >= 1 && o->daemon_deadline_ms <= 600000,
                    absl::StrFormat("kvt_create: options.daemon_deadline_ms = %d; expected "
                                    "1..600000",
                                    o->daemon_deadline_ms));
#if KVT_C_HAVE_REMOTE
      kvt::RemoteTierOptions ropts;
      ropts.client.target = o->daemon_address;
      ropts.client.token = o->daemon_token ? o->daemon_token : "";
      ropts.client.deadline = std::chrono::milliseconds(o->daemon_deadline_ms);
      // Same host (a unix socket): chunks through 4 shared-memory slots (progressive
      // transfers, docs/daemon.md), gRPC where the daemon cannot share memory.
      if (absl::StartsWith(o->daemon_address, "unix:")) ropts.shm_slots = 4;
      if (absl::Status s = ropts.Validate(); !s.ok()) {
        return Fail(KVT_INVALID_ARGUMENT,
                    absl::StrFormat("kvt_create: options.daemon_address = \"%s\": %s",
                                    o->daemon_address, s.message()));
      }
      // kvtierd's remote tier alone: every process of the engine sees the same cache.
      sopts.host.capacity_bytes = 0;
      sopts.lower.push_back(kvt::RemoteTier::Factory(ropts));
#else
      return Fail(KVT_UNIMPLEMENTED,
                  "kvt_create: options.daemon_address is set but this libkvtier was built "
                  "without the daemon client (KVT_BUILD_DAEMON=OFF)");
#endif
    } else {
      sopts.host.capacity_bytes = o->host_capacity_bytes;
    }
    if (!daemon && o->disk_dir != nullptr && o->disk_dir[0] != '\0') {
      kvt::DiskTierOptions& dopts = sopts.disk.emplace();
      dopts.cache_policy.name = "default";  // the measured default (docs/cache-policy.md)
      dopts.dir = o->disk_dir;
      // 0 = kvtierd's default disk_capacity (daemon/include/daemon/config.h), so the
      // embedded store and the daemon size a disk tier alike when the user says nothing.
      dopts.capacity_bytes =
          o->disk_capacity_bytes != 0 ? o->disk_capacity_bytes : kDefaultDiskCapacityBytes;
    }
    absl::StatusOr<std::unique_ptr<kvt::TieredStore>> store = kvt::OpenTieredStore(sopts);
    if (!store.ok()) return Fail(store.status());
    auto handle = std::make_unique<kvt_connector>();
    handle->store = std::shared_ptr<kvt::TieredStore>(std::move(*store));
    absl::StatusOr<std::unique_ptr<kvt::KVConnector>> conn =
        kvt::KVConnector::Create(copts, handle->store);
    if (!conn.ok()) return Fail(conn.status());
    handle->connector = std::move(*conn);
    if (daemon) {
      handle->daemon_address = o->daemon_address;
      handle->daemon_token = o->daemon_token ? o->daemon_token : "";
      handle->daemon_deadline_ms = o->daemon_deadline_ms;
    }
    *out = handle.release();
    return Ok();
  });
}

void kvt_destroy(kvt_connector* c) {
  try {
    delete c;
  } catch (...) {
  }
}

uint64_t kvt_chunk_payload_bytes(const kvt_connector* c) {
  return c == nullptr ? 0 : c->connector->chunk_payload_bytes();
}
uint32_t kvt_chunk_tokens(const kvt_connector* c) {
  return c == nullptr ? 0 : c->connector->chunk_tokens();
}

int kvt_lookup(kvt_connector* c, const int32_t* tokens, size_t n_tokens,
               uint64_t num_computed_tokens, uint64_t* load_tokens, uint64_t* cached_tokens) {
  return Guard("kvt_lookup", [&]() -> int {
    KVT_C_REQUIRE(c != nullptr && load_tokens != nullptr,
                  "kvt_lookup: connector and load_tokens must be non-NULL");
    KVT_C_REQUIRE(tokens != nullptr || n_tokens == 0, "kvt_lookup: tokens is NULL");
    auto r = c->connector->Lookup(std::span<const int32_t>(tokens, n_tokens), num_computed_tokens);
    if (!r.ok()) return Fail(r.status());
    *load_tokens = r->load_tokens;
    if (cached_tokens != nullptr) *cached_tokens = r->cached_tokens;
    return Ok();
  });
}

int kvt_lookup_pinned(kvt_connector* c, const int32_t* tokens, size_t n_tokens,
                      uint64_t num_computed_tokens, uint64_t* load_tokens, uint64_t* cached_tokens,
                      kvt_lease** lease) {
  if (lease != nullptr) *lease = nullptr;
  return Guard("kvt_lookup_pinned", [&]() -> int {
    KVT_C_REQUIRE(c != nullptr && load_tokens != nullptr && lease != nullptr,
                  "kvt_lookup_pinned: connector, load_tokens and lease must be non-NULL");
    KVT_C_REQUIRE(tokens != nullptr || n_tokens == 0, "kvt_lookup_pinned: tokens is NULL");
    auto r = c->connector->Lookup(std::span<const int32_t>(tokens, n_tokens), num_computed_tokens);
    if (!r.ok()) return Fail(r.status());
    *load_tokens = r->load_tokens;
    if (cached_tokens != nullptr) *cached_tokens = r->cached_tokens;
    if (r->lease) *lease = new kvt_lease{std::move(r->lease)};
    return Ok();
  });
}

void kvt_lease_release(kvt_lease* lease) { delete lease; }

int kvt_store_payloads(kvt_connector* c, const int32_t* tokens, size_t n_tokens, kvt_fill_fn fill,
                       void* user, size_t* chunks_taken) {
  return Guard("kvt_store_payloads", [&]() -> int {
    KVT_C_REQUIRE(c != nullptr && fill != nullptr,
                  "kvt_store_payloads: connector and fill must be non-NULL");
    KVT_C_REQUIRE(tokens != nullptr || n_tokens == 0, "kvt_store_payloads: tokens is NULL");
    auto r = c->connector->StorePayloads(
        std::span<const int32_t>(tokens, n_tokens),
        [&](size_t chunk, std::span<std::byte> payload) {
          return FromCode(fill(user, chunk, payload.data(), payload.size()), "fill", chunk);
        });
    if (!r.ok()) return Fail(r.status());
    if (chunks_taken != nullptr) *chunks_taken = *r;
    return Ok();
  });
}

int kvt_load_payloads(kvt_connector* c, const int32_t* tokens, size_t n_tokens, uint64_t num_tokens,
                      uint64_t skip_tokens, kvt_consume_fn consume, void* user,
                      uint64_t* loaded_tokens) {
  return Guard("kvt_load_payloads", [&]() -> int {
    KVT_C_REQUIRE(c != nullptr && consume != nullptr && loaded_tokens != nullptr,
                  "kvt_load_payloads: connector, consume and loaded_tokens must be non-NULL");
    KVT_C_REQUIRE(tokens != nullptr || n_tokens == 0, "kvt_load_payloads: tokens is NULL");
    auto r = c->connector->LoadPayloads(
        std::span<const int32_t>(tokens, n_tokens), num_tokens,
        [&](size_t chunk, std::span<const std::byte> payload) {
          return FromCode(consume(user, chunk, payload.data(), payload.size()), "consume", chunk);
        },
        skip_tokens);
    if (!r.ok()) return Fail(r.status());
    *loaded_tokens = r->loaded_tokens;
    return Ok();
  });
}

int kvt_register_kv_view(kvt_connector* c, const kvt_kv_view* v) {
  return Guard("kvt_register_kv_view", [&]() -> int {
    KVT_C_REQUIRE(c != nullptr && v != nullptr,
                  "kvt_register_kv_view: connector and view must be non-NULL");
    KVT_C_REQUIRE(v->device == KVT_DEVICE_CPU || v->device == KVT_DEVICE_CUDA,
                  absl::StrFormat("kvt_register_kv_view: view.device = %d; expected %d (cpu) or "
                                  "%d (cuda)",
                                  v->device, KVT_DEVICE_CPU, KVT_DEVICE_CUDA));
    KVT_C_REQUIRE(v->layer_base != nullptr || v->n_layer_base == 0,
                  "kvt_register_kv_view: layer_base is NULL but n_layer_base > 0");
    KVT_C_REQUIRE((v->k_base != nullptr && v->v_base != nullptr) || v->n_kv_base == 0,
                  "kvt_register_kv_view: k_base/v_base is NULL but n_kv_base > 0");
    kvt::PagedKvView view;
    view.device = v->device == KVT_DEVICE_CUDA ? kvt::KvDevice::kCuda : kvt::KvDevice::kCpu;
    view.layout = MakeLayout(v->num_layers, v->num_kv_heads, v->head_dim, v->dtype, v->layout_kind);
    view.block_size = v->block_size;
    view.num_blocks = v->num_blocks;
    view.layer_base.assign(v->layer_base, v->layer_base + v->n_layer_base);
    if (v->n_kv_base > 0) {
      view.k_base.assign(v->k_base, v->k_base + v->n_kv_base);
      view.v_base.assign(v->v_base, v->v_base + v->n_kv_base);
    }
    if (absl::Status s = c->connector->RegisterKvView(view); !s.ok()) return Fail(s);
    return Ok();
  });
}

int kvt_store(kvt_connector* c, const int32_t* tokens, size_t n_tokens, const int64_t* slots,
              size_t n_slots, size_t* chunks_taken) {
  return Guard("kvt_store", [&]() -> int {
    KVT_C_REQUIRE(c != nullptr, "kvt_store: connector is NULL");
    KVT_C_REQUIRE(tokens != nullptr || n_tokens == 0, "kvt_store: tokens is NULL");
    KVT_C_REQUIRE(slots != nullptr || n_slots == 0, "kvt_store: slots is NULL");
    auto r = c->connector->Store(std::span<const int32_t>(tokens, n_tokens),
                                 std::span<const int64_t>(slots, n_slots));
    if (!r.ok()) return Fail(r.status());
    if (chunks_taken != nullptr) *chunks_taken = *r;
    return Ok();
  });
}

int kvt_load(kvt_connector* c, const int32_t* tokens, size_t n_tokens, uint64_t num_tokens,
             const int64_t* slots, size_t n_slots, uint64_t num_computed_tokens,
             uint64_t* loaded_tokens) {
  return Guard("kvt_load", [&]() -> int {
    KVT_C_REQUIRE(c != nullptr && loaded_tokens != nullptr,
                  "kvt_load: connector and loaded_tokens must be non-NULL");
    KVT_C_REQUIRE(tokens != nullptr || n_tokens == 0, "kvt_load: tokens is NULL");
    KVT_C_REQUIRE(slots != nullptr || n_slots == 0, "kvt_load: slots is NULL");
    auto r = c->connector->Load(std::span<const int32_t>(tokens, n_tokens), num_tokens,
                                std::span<const int64_t>(slots, n_slots), num_computed_tokens);
    if (!r.ok()) return Fail(r.status());
    *loaded_tokens = r->loaded_tokens;
    return Ok();
  });
}

int kvt_register_block_view(kvt_connector* c, const kvt_block_view* v) {
  return Guard("kvt_register_block_view", [&]() -> int {
    KVT_C_REQUIRE(c != nullptr && v != nullptr,
                  "kvt_register_block_view: connector and view must be non-NULL");
    KVT_C_REQUIRE(v->layer_base != nullptr && v->n_layer_base == v->num_layers,
                  absl::StrFormat("kvt_register_block_view: view.num_layers = %d with "
                                  "n_layer_base = %d; expected num_layers non-NULL pointers",
                                  v->num_layers, v->n_layer_base));
    kvt::BlockRegionView view;
    view.block_size = v->block_size;
    view.num_blocks = v->num_blocks;
    view.block_bytes = v->block_bytes;
    for (size_t l = 0; l < v->n_layer_base; ++l) {
      view.layer_base.push_back(static_cast<std::byte*>(v->layer_base[l]));
    }
    return Result(c->connector->RegisterBlockView(view));
  });
}

int kvt_store_blocks(kvt_connector* c, const int32_t* tokens, size_t n_tokens,
                     const int32_t* block_ids, size_t n_block_ids, size_t* chunks_taken) {
  return Guard("kvt_store_blocks", [&]() -> int {
    KVT_C_REQUIRE(c != nullptr, "kvt_store_blocks: connector is NULL");
    KVT_C_REQUIRE(tokens != nullptr || n_tokens == 0, "kvt_store_blocks: tokens is NULL");
    KVT_C_REQUIRE(block_ids != nullptr || n_block_ids == 0, "kvt_store_blocks: block_ids is NULL");
    auto r = c->connector->StoreBlocks(std::span<const int32_t>(tokens, n_tokens),
                                       std::span<const int32_t>(block_ids, n_block_ids));
    if (!r.ok()) return Fail(r.status());
    if (chunks_taken != nullptr) *chunks_taken = *r;
    return Ok();
  });
}

int kvt_load_blocks(kvt_connector* c, const int32_t* tokens, size_t n_tokens, uint64_t num_tokens,
                    const int32_t* block_ids, size_t n_block_ids, uint64_t skip_tokens,
                    uint64_t* loaded_tokens) {
  return Guard("kvt_load_blocks", [&]() -> int {
    KVT_C_REQUIRE(c != nullptr && loaded_tokens != nullptr,
                  "kvt_load_blocks: connector and loaded_tokens must be non-NULL");
    KVT_C_REQUIRE(tokens != nullptr || n_tokens == 0, "kvt_load_blocks: tokens is NULL");
    KVT_C_REQUIRE(block_ids != nullptr || n_block_ids == 0, "kvt_load_blocks: block_ids is NULL");
    auto r =
        c->connector->LoadBlocks(std::span<const int32_t>(tokens, n_tokens), num_tokens,
                                 std::span<const int32_t>(block_ids, n_block_ids), skip_tokens);
    if (!r.ok()) return Fail(r.status());
    *loaded_tokens = r->loaded_tokens;
    return Ok();
  });
}

int kvt_fetch_blocks(kvt_connector* c, const int32_t* tokens, size_t n_tokens, uint64_t num_tokens,
                     const int32_t* block_ids, size_t n_block_ids, uint64_t skip_tokens,
                     kvt_fetched** fetched, uint64_t* loaded_tokens) {
  return Guard("kvt_fetch_blocks", [&]() -> int {
    KVT_C_REQUIRE(c != nullptr && fetched != nullptr && loaded_tokens != nullptr,
                  "kvt_fetch_blocks: connector, fetched and loaded_tokens must be non-NULL");
    *fetched = nullptr;
    KVT_C_REQUIRE(tokens != nullptr || n_tokens == 0, "kvt_fetch_blocks: tokens is NULL");
    KVT_C_REQUIRE(block_ids != nullptr || n_block_ids == 0, "kvt_fetch_blocks: block_ids is NULL");
    auto r =
        c->connector->FetchBlocks(std::span<const int32_t>(tokens, n_tokens), num_tokens,
                                  std::span<const int32_t>(block_ids, n_block_ids), skip_tokens);
    if (!r.ok()) return Fail(r.status());
    auto f = std::make_unique<kvt_fetched>();
    f->blocks = std::move(*r);
    *loaded_tokens = f->blocks.payloads.result.loaded_tokens;
    *fetched = f.release();
    return Ok();
  });
}

int kvt_fetched_scatter_layer(kvt_fetched* f, uint32_t layer) {
  return Guard("kvt_fetched_scatter_layer", [&]() -> int {
    KVT_C_REQUIRE(f != nullptr, "kvt_fetched_scatter_layer: fetched is NULL");
    return Result(f->blocks.ScatterLayer(layer));
  });
}

void kvt_fetched_free(kvt_fetched* f) { delete f; }

int kvt_get_stats(const kvt_connector* c, kvt_stats* out, size_t out_size) {
  return Guard("kvt_get_stats", [&]() -> int {
    KVT_C_REQUIRE(c != nullptr && out != nullptr,
                  "kvt_get_stats: connector and out must be non-NULL");
    const kvt::ConnectorStats s = c->connector->stats();
    kvt_stats k{};
    k.lookups = s.lookups;
    k.lookup_hit_tokens = s.lookup_hit_tokens;
    k.lookup_load_tokens = s.lookup_load_tokens;
    k.store_chunks_taken = s.store_chunks_taken;
    k.store_chunks_skipped = s.store_chunks_skipped;
    k.store_chunks_dropped = s.store_chunks_dropped;
    k.store_chunks_put = s.store_chunks_put;
    k.store_put_errors = s.store_put_errors;
    k.load_chunks_ok = s.load_chunks_ok;
    k.load_chunks_failed = s.load_chunks_failed;
    k.load_misses = s.load_misses;
    k.load_data_loss = s.load_data_loss;
    k.load_mismatch = s.load_mismatch;
    k.load_other_errors = s.load_other_errors;
    k.load_bytes = s.load_bytes;
    k.cost_load_all = s.cost.decisions_load_all;
    k.cost_load_partial = s.cost.decisions_load_partial;
    k.cost_recompute = s.cost.decisions_recompute;
    k.cost_probe = s.cost.decisions_probe;
    std::memcpy(out, &k, out_size < sizeof(k) ? out_size : sizeof(k));
    return Ok();
  });
}

void kvt_observe_prefill(kvt_connector* c, uint64_t new_tokens, uint64_t context_tokens,
                         double seconds) {
  if (c == nullptr) return;
  c->connector->ObservePrefill(new_tokens, context_tokens, std::chrono::duration<double>(seconds));
}

void kvt_flush(kvt_connector* c) {
  if (c == nullptr) return;
  c->connector->Flush();
}

int kvt_parse_byte_size(const char* text, uint64_t* bytes) {
  return Guard("kvt_parse_byte_size", [&]() -> int {
    KVT_C_REQUIRE(text != nullptr && bytes != nullptr,
                  "kvt_parse_byte_size: text and bytes must be non-NULL");
    absl::StatusOr<uint64_t> v = kvt::ParseByteSize(text);
    if (!v.ok()) return Fail(v.status());
    *bytes = *v;
    return Ok();
  });
}

int kvt_namespace_hex(const kvt_connector* c, char* out, size_t out_size) {
  return Guard("kvt_namespace_hex", [&]() -> int {
    KVT_C_REQUIRE(c != nullptr && out != nullptr,
                  "kvt_namespace_hex: connector and out must be non-NULL");
    const std::string hex = c->connector->ns().ToHex();
    KVT_C_REQUIRE(out_size > hex.size(),
                  absl::StrFormat("kvt_namespace_hex: out_size %d; expected >= %d", out_size,
                                  hex.size() + 1));
    std::memcpy(out, hex.c_str(), hex.size() + 1);
    return Ok();
  });
}

int kvt_daemon_check(const kvt_connector* c, uint32_t timeout_ms) {
  return Guard("kvt_daemon_check", [&]() -> int {
    KVT_C_REQUIRE(c != nullptr, "kvt_daemon_check: connector must be non-NULL");
    KVT_C_REQUIRE(timeout_ms >= 1, "kvt_daemon_check: timeout_ms = 0; expected >= 1");
    if (c->daemon_address.empty()) return Ok();
    const uint32_t ms = std::min(timeout_ms, c->daemon_deadline_ms);
    absl::Status s =
        kvt::ProbeDaemon(c->daemon_address, c->daemon_token, std::chrono::milliseconds(ms));
    return s.ok() ? Ok() : Fail(s);
  });
}

}  // extern "C"
