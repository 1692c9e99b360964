// C ABI over KVConnector (connectors/kvtier_c.h). The one place where absl::Status
// becomes an int code + thread-local message, and where no C++ exception may escape.
#include "connectors/kvtier_c.h"

#include <exception>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "connectors/kv_connector.h"
#include "kvstore/disk_tier.h"
#include "kvstore/host_tier.h"
#include "kvstore/store_factory.h"
#include "kvstore/tiered_store.h"

struct kvt_connector {
  std::shared_ptr<kvt::TieredStore> store;
  std::unique_ptr<kvt::KVConnector> connector;
};

namespace {

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
    if (o->prefill_s_per_token > 0) copts.cost.prefill_s_per_token = o->prefill_s_per_token;
    if (o->prefill_s_per_token_ctx > 0) {
      copts.cost.prefill_s_per_token_ctx = o->prefill_s_per_token_ctx;
    }
    if (absl::Status s = copts.Validate(); !s.ok()) return Fail(s);

    kvt::StoreOptions sopts;
    sopts.host.capacity_bytes = o->host_capacity_bytes;
    if (o->disk_dir != nullptr && o->disk_dir[0] != '\0') {
      kvt::DiskTierOptions& dopts = sopts.disk.emplace();
      dopts.dir = o->disk_dir;
      dopts.capacity_bytes = o->disk_capacity_bytes;
    }
    absl::StatusOr<std::unique_ptr<kvt::TieredStore>> store = kvt::OpenTieredStore(sopts);
    if (!store.ok()) return Fail(store.status());
    auto handle = std::make_unique<kvt_connector>();
    handle->store = std::shared_ptr<kvt::TieredStore>(std::move(*store));
    absl::StatusOr<std::unique_ptr<kvt::KVConnector>> conn =
        kvt::KVConnector::Create(copts, handle->store);
    if (!conn.ok()) return Fail(conn.status());
    handle->connector = std::move(*conn);
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

void kvt_observe_prefill(kvt_connector* c, uint64_t new_tokens, uint64_t context_tokens,
                         double seconds) {
  if (c == nullptr) return;
  c->connector->ObservePrefill(new_tokens, context_tokens, std::chrono::duration<double>(seconds));
}

void kvt_flush(kvt_connector* c) {
  if (c == nullptr) return;
  c->connector->Flush();
}

}  // extern "C"
