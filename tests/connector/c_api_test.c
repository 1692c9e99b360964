/* Test of the kvtier C ABI (connectors/kvtier_c.h), written in C. Exit code 0 when every
 * check passed; prints "N passed, N failed". */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
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

/* Every line of byte_sizes.txt (shared with tests/vllm/test_byte_size.py): the C ABI reads
 * each text as the table says (the C++ parser that kvtierd and the CLI use). */
static void TestParseByteSize(void) {
  FILE* f = fopen(KVT_BYTE_SIZES_FILE, "r");
  char line[256];
  int rows = 0;
  uint64_t v = 0;
  CHECK(f != NULL);
  if (f == NULL) return;
  while (fgets(line, sizeof line, f) != NULL) {
    char* tab = strchr(line, '\t');
    char* want = tab ? tab + 1 : NULL;
    int rc;
    if (line[0] == '#' || tab == NULL) continue;
    *tab = '\0';
    want[strcspn(want, "\r\n")] = '\0';
    rc = kvt_parse_byte_size(line, &v);
    ++rows;
    if (strcmp(want, "error") == 0) {
      CHECK(rc == KVT_INVALID_ARGUMENT);
      CHECK(strstr(kvt_last_error(), "byte size") != NULL);
    } else {
      CHECK(rc == KVT_OK);
      if (rc == KVT_OK && v != strtoull(want, NULL, 10)) {
        fprintf(stderr, "kvt_parse_byte_size('%s') = %llu, expected %s\n", line,
                (unsigned long long)v, want);
        CHECK(0);
      }
    }
  }
  fclose(f);
  CHECK(rows >= 20);
  CHECK(kvt_parse_byte_size(NULL, &v) == KVT_INVALID_ARGUMENT);
  CHECK(kvt_parse_byte_size("4G", NULL) == KVT_INVALID_ARGUMENT);
}

/* The namespace id in hex (what the vLLM connector logs for `kvtier ... --ns`) and the
 * daemon check: OK without a daemon, UNAVAILABLE-like and naming the address when the
 * configured kvtierd is not running. */
static void TestNamespaceAndDaemonCheck(void) {
  kvt_options o = Options();
  kvt_connector* c = NULL;
  char hex[33];
  char small[8];
  size_t i;
  int rc;
  CHECK(kvt_create(&o, &c) == KVT_OK);
  if (c == NULL) return;
  CHECK(kvt_namespace_hex(c, hex, sizeof hex) == KVT_OK);
  CHECK(strlen(hex) == 32);
  for (i = 0; i < 32; ++i) CHECK(strchr("0123456789abcdef", hex[i]) != NULL);
  CHECK(kvt_namespace_hex(c, small, sizeof small) == KVT_INVALID_ARGUMENT);
  CHECK(kvt_daemon_check(c, 500) == KVT_OK);
  kvt_destroy(c);
  c = NULL;
  o = Options();
  o.daemon_address = "unix:///nonexistent-kvtier-dir/kvtierd.sock";
  o.daemon_deadline_ms = 500;
  rc = kvt_create(&o, &c);
  if (rc == KVT_UNIMPLEMENTED) return; /* a build without the daemon client */
  CHECK(rc == KVT_OK);
  if (c == NULL) return;
  rc = kvt_daemon_check(c, 500);
  CHECK(rc == KVT_UNAVAILABLE || rc == KVT_DEADLINE_EXCEEDED);
  CHECK(strstr(kvt_last_error(), "nonexistent-kvtier-dir") != NULL);
  kvt_destroy(c);
}

/* An embedded disk tier with disk_capacity_bytes = 0 takes the default size (the vLLM
 * connector's `disk_capacity` unset): chunks stored by one connector are found on disk by
 * the next one over the same directory. A capacity that is not a multiple of 4096 is
 * refused naming the field. */
static void TestDiskDefaultCapacity(void) {
  char dir[512];
  const char* tmp = getenv("TMPDIR");
  kvt_options o = Options();
  kvt_connector* c = NULL;
  int32_t tokens[3 * kChunk + 1];
  FillState fs = {0};
  size_t i, taken = 0;
  uint64_t load = 0;
  snprintf(dir, sizeof dir, "%s/kvt-c-api-disk-XXXXXX", tmp != NULL && tmp[0] ? tmp : "/tmp");
  CHECK(mkdtemp(dir) != NULL);
  for (i = 0; i < 3 * kChunk + 1; ++i) tokens[i] = (int32_t)(7000 + i);
  o.disk_dir = dir;
  o.disk_capacity_bytes = 4097;
  CHECK(kvt_create(&o, &c) == KVT_INVALID_ARGUMENT);
  CHECK(strstr(kvt_last_error(), "capacity_bytes") != NULL);
  CHECK(c == NULL);
  o.disk_capacity_bytes = 0;
  o.async_store = 0;
  CHECK(kvt_create(&o, &c) == KVT_OK);
  if (c == NULL) return;
  CHECK(kvt_store_payloads(c, tokens, 3 * kChunk + 1, Fill, &fs, &taken) == KVT_OK);
  CHECK(taken == 3);
  kvt_flush(c);
  kvt_destroy(c);
  c = NULL;
  CHECK(kvt_create(&o, &c) == KVT_OK); /* a new process's store: an empty host tier */
  if (c == NULL) return;
  CHECK(kvt_lookup(c, tokens, 3 * kChunk + 1, 0, &load, NULL) == KVT_OK);
  CHECK(load == 3 * kChunk);
  kvt_destroy(c);
  { /* the tier's first record file is 1 GiB (fallocated): don't leave it behind */
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
  }
}

int main(void) {
  TestParseByteSize();
  TestDiskDefaultCapacity();
  TestNamespaceAndDaemonCheck();
  TestBadOptions();
  TestPayloadRoundTrip();
  TestPagedRoundTrip();
  printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed == 0 ? 0 : 1;
}
