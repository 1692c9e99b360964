/* Test of the kvtier C ABI (connectors/kvtier_c.h), written in C. Exit code 0 when every
 * check passed; prints "N passed, N failed". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "connectors/kvtier_c.h"

static int g_passed = 0;
static int g_failed = 0;

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (cond) {                                                                                \
      ++g_passed;                                                                              \
    } else {                                                                                   \
      ++g_failed;                                                                              \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              kvt_last_error());                                                               \
    }                                                                                          \
  } while (0)

enum { kChunk = 16, kLayers = 2, kHeads = 2, kHeadDim = 4, kElem = 2, kBlock = 4, kBlocks = 32 };

static unsigned char PayloadByte(size_t chunk, size_t j) {
  return (unsigned char)((chunk * 131 + j * 7 + 3) & 0xff);
}

typedef struct {
  int calls;
} FillState;

static int Fill(void* user, size_t chunk, void* payload, size_t bytes) {
  FillState* st = (FillState*)user;
  unsigned char* p = (unsigned char*)payload;
  size_t j;
  st->calls++;
  for (j = 0; j < bytes; ++j) p[j] = PayloadByte(chunk, j);
  return KVT_OK;
}

typedef struct {
  int calls;
  int mismatches;
  size_t last_chunk;
  int fail_at; /* chunk index at which to return an error, -1 for never */
} ConsumeState;

static int Consume(void* user, size_t chunk, const void* payload, size_t bytes) {
  ConsumeState* st = (ConsumeState*)user;
  const unsigned char* p = (const unsigned char*)payload;
  size_t j;
  if (st->fail_at >= 0 && (size_t)st->fail_at == chunk) return KVT_UNAVAILABLE;
  st->calls++;
  st->last_chunk = chunk;
  for (j = 0; j < bytes; ++j) {
    if (p[j] != PayloadByte(chunk, j)) st->mismatches++;
  }
  return KVT_OK;
}

static kvt_options Options(void) {
  kvt_options o;
  kvt_options_init(&o);
  o.model_id = "c-api-test-model";
  o.num_layers = kLayers;
  o.num_kv_heads = kHeads;
  o.head_dim = kHeadDim;
  o.dtype = KVT_DTYPE_F16;
  o.layout_kind = KVT_LAYOUT_FLASH_ATTN_NHD;
  o.chunk_tokens = kChunk;
  o.host_capacity_bytes = 4u << 20;
  return o;
}

static void TestBadOptions(void) {
  kvt_options o = Options();
  kvt_connector* c = NULL;
  o.model_id = NULL;
  CHECK(kvt_create(&o, &c) == KVT_INVALID_ARGUMENT);
  CHECK(strstr(kvt_last_error(), "model_id") != NULL);
  CHECK(c == NULL);
  o = Options();
  o.chunk_tokens = 0;
  CHECK(kvt_create(&o, &c) == KVT_INVALID_ARGUMENT);
  CHECK(strstr(kvt_last_error(), "chunk_tokens") != NULL);
  o = Options();
  o.dtype = 99;
  CHECK(kvt_create(&o, &c) == KVT_INVALID_ARGUMENT);
  CHECK(kvt_create(NULL, &c) == KVT_INVALID_ARGUMENT);
  kvt_destroy(NULL); /* ignored */
}

static void TestPayloadRoundTrip(void) {
  kvt_options o = Options();
  kvt_connector* c = NULL;
  int32_t tokens[4 * kChunk + 1];
  size_t i, taken = 0;
  uint64_t load = 0, cached = 0, loaded = 0;
  FillState fs = {0};
  ConsumeState cs = {0, 0, 0, -1};
  for (i = 0; i < sizeof tokens / sizeof tokens[0]; ++i) tokens[i] = (int32_t)(100 + 3 * i);

  CHECK(kvt_create(&o, &c) == KVT_OK);
  if (c == NULL) return;
  CHECK(kvt_chunk_tokens(c) == kChunk);
  CHECK(kvt_chunk_payload_bytes(c) == (uint64_t)kChunk * kLayers * 2 * kHeads * kHeadDim * kElem);

  CHECK(kvt_lookup(c, tokens, 4 * kChunk + 1, 0, &load, &cached) == KVT_OK);
  CHECK(load == 0 && cached == 0);

  CHECK(kvt_store_payloads(c, tokens, 4 * kChunk + 1, Fill, &fs, &taken) == KVT_OK);
  CHECK(taken == 4 && fs.calls == 4);
  kvt_flush(c);

  CHECK(kvt_lookup(c, tokens, 4 * kChunk + 1, 0, &load, &cached) == KVT_OK);
  CHECK(load == 4 * kChunk && cached == 4 * kChunk);
  /* The last token is always left to compute. */
  CHECK(kvt_lookup(c, tokens, 4 * kChunk, 0, &load, NULL) == KVT_OK);
  CHECK(load == 3 * kChunk);
  /* num_computed_tokens beyond the prompt is the caller's error. */
  CHECK(kvt_lookup(c, tokens, 4 * kChunk, 4 * kChunk + 1, &load, NULL) == KVT_INVALID_ARGUMENT);
  CHECK(strstr(kvt_last_error(), "num_computed_tokens") != NULL);

  /* A pinned lookup hands back its lease (none when nothing is to load). */
  kvt_lease* lease = (kvt_lease*)1;
  CHECK(kvt_lookup_pinned(c, tokens, 4 * kChunk + 1, 4 * kChunk, &load, NULL, &lease) == KVT_OK);
  CHECK(load == 0 && lease == NULL);
  CHECK(kvt_lookup_pinned(c, tokens, 4 * kChunk + 1, 0, &load, &cached, &lease) == KVT_OK);
  CHECK(load == 4 * kChunk && lease != NULL);
  CHECK(kvt_lookup_pinned(c, tokens, 4 * kChunk + 1, 0, &load, NULL, NULL) == KVT_INVALID_ARGUMENT);

  CHECK(kvt_load_payloads(c, tokens, 4 * kChunk + 1, 4 * kChunk, 0, Consume, &cs, &loaded) ==
        KVT_OK);
  CHECK(loaded == 4 * kChunk);
  CHECK(cs.calls == 4 && cs.mismatches == 0 && cs.last_chunk == 3);
  kvt_lease_release(lease);
  kvt_lease_release(NULL);

  /* A consume error stops the load: chunks 0 and 1 delivered. */
  cs.calls = 0;
  cs.fail_at = 2;
  CHECK(kvt_load_payloads(c, tokens, 4 * kChunk + 1, 4 * kChunk, 0, Consume, &cs, &loaded) ==
        KVT_OK);
  CHECK(loaded == 2 * kChunk && cs.calls == 2);

  /* Bad arguments. */
  CHECK(kvt_load_payloads(c, tokens, 4 * kChunk + 1, kChunk + 1, 0, Consume, &cs, &loaded) ==
        KVT_INVALID_ARGUMENT);
  CHECK(kvt_store_payloads(c, tokens, 4, NULL, NULL, &taken) == KVT_INVALID_ARGUMENT);

  kvt_observe_prefill(c, 1000, 0, 0.05);
  kvt_destroy(c);
}

static size_t Offset(size_t plane, int64_t slot, size_t h, size_t d) {
  size_t b = (size_t)(slot / kBlock), off = (size_t)(slot % kBlock);
  return ((((plane * kBlocks + b) * kBlock + off) * kHeads + h) * kHeadDim + d) * kElem;
}

static void TestPagedRoundTrip(void) {
  enum { kTensor = 2 * kBlocks * kBlock * kHeads * kHeadDim * kElem };
  kvt_options o = Options();
  kvt_connector* c = NULL;
  unsigned char* src[kLayers];
  unsigned char* dst[kLayers];
  int32_t tokens[2 * kChunk + 1];
  int64_t src_slots[2 * kChunk + 1], dst_slots[2 * kChunk + 1];
  size_t i, l, p, h, d, taken = 0;
  uint64_t load = 0, loaded = 0;
  int bad = 0, overwritten = 0;
  kvt_kv_view view;

  for (l = 0; l < kLayers; ++l) {
    src[l] = (unsigned char*)malloc(kTensor);
    dst[l] = (unsigned char*)calloc(kTensor, 1);
    for (i = 0; i < kTensor; ++i) src[l][i] = (unsigned char)((i * 37 + l * 11) % 251);
    for (i = 0; i < kTensor; ++i) dst[l][i] = 0xAB;
  }
  for (i = 0; i < 2 * kChunk + 1; ++i) {
    tokens[i] = (int32_t)(7 + i);
    src_slots[i] = (int64_t)((31 - i / kBlock) * kBlock + i % kBlock);  /* blocks 31, 30, ... */
    dst_slots[i] = (int64_t)((2 * (i / kBlock)) * kBlock + i % kBlock); /* blocks 0, 2, 4, ... */
  }

  CHECK(kvt_create(&o, &c) == KVT_OK);
  if (c == NULL) return;
  memset(&view, 0, sizeof view);
  view.device = KVT_DEVICE_CPU;
  view.num_layers = kLayers;
  view.num_kv_heads = kHeads;
  view.head_dim = kHeadDim;
  view.dtype = KVT_DTYPE_F16;
  view.layout_kind = KVT_LAYOUT_FLASH_ATTN_NHD;
  view.block_size = kBlock;
  view.num_blocks = kBlocks;
  view.layer_base = (void* const*)src;
  view.n_layer_base = kLayers;

  /* A view whose layout differs from the declared one is refused, naming both. */
  view.num_kv_heads = 8;
  CHECK(kvt_register_kv_view(c, &view) == KVT_INVALID_ARGUMENT);
  CHECK(strstr(kvt_last_error(), "declared layout") != NULL);
  view.num_kv_heads = kHeads;
  /* Store before registering a valid view: precondition. */
  CHECK(kvt_store(c, tokens, 2 * kChunk + 1, src_slots, 2 * kChunk + 1, &taken) ==
        KVT_FAILED_PRECONDITION);

  CHECK(kvt_register_kv_view(c, &view) == KVT_OK);
  CHECK(kvt_store(c, tokens, 2 * kChunk + 1, src_slots, 2 * kChunk + 1, &taken) == KVT_OK);
  CHECK(taken == 2);
  kvt_flush(c);

  view.layer_base = (void* const*)dst;
  CHECK(kvt_register_kv_view(c, &view) == KVT_OK);
  CHECK(kvt_lookup(c, tokens, 2 * kChunk + 1, 0, &load, NULL) == KVT_OK);
  CHECK(load == 2 * kChunk);
  /* The engine already holds the first 5 tokens: those positions stay 0xAB. */
  CHECK(kvt_load(c, tokens, 2 * kChunk + 1, load, dst_slots, 2 * kChunk + 1, 5, &loaded) == KVT_OK);
  CHECK(loaded == 2 * kChunk);
  for (i = 0; i < 2 * kChunk; ++i) {
    for (l = 0; l < kLayers; ++l) {
      for (p = 0; p < 2; ++p) {
        for (h = 0; h < kHeads; ++h) {
          for (d = 0; d < kHeadDim; ++d) {
            size_t so = Offset(p, src_slots[i], h, d), dof = Offset(p, dst_slots[i], h, d);
            if (i < 5) {
              if (dst[l][dof] != 0xAB || dst[l][dof + 1] != 0xAB) overwritten++;
            } else if (memcmp(src[l] + so, dst[l] + dof, kElem) != 0) {
              bad++;
            }
          }
        }
      }
    }
  }
  CHECK(bad == 0);
  CHECK(overwritten == 0);
  /* A padding slot inside a stored chunk cannot be stored. */
  src_slots[3] = -1;
  CHECK(kvt_store(c, tokens, 2 * kChunk + 1, src_slots, 2 * kChunk + 1, &taken) ==
        KVT_INVALID_ARGUMENT);
  CHECK(strstr(kvt_last_error(), "slot_mapping[3]") != NULL);

  kvt_destroy(c);
  for (l = 0; l < kLayers; ++l) {
    free(src[l]);
    free(dst[l]);
  }
}

int main(void) {
  TestBadOptions();
  TestPayloadRoundTrip();
  TestPagedRoundTrip();
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
