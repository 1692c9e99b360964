"""ctypes binding over kvtier's C ABI (connectors/include/connectors/kvtier_c.h).

One native API: every decision (lookup, cost model, chunk keys, checksums, tiers,
copies) runs in libkvtier.so; this module only marshals arguments. ctypes releases the
GIL for the duration of each call, so copies and I/O run without it.

Where libkvtier.so comes from, first match wins:
  1. $KVTIER_LIB (a path to the file);
  2. kvtier/lib/libkvtier.so inside this package (copied there by ``pip install``
     when the library was built first, see connectors/vllm/build_backend/kvtier_build.py);
  3. <source tree>/build/release/connectors/vllm/libkvtier.so (running from a checkout).
Build it with ``cmake --preset release && cmake --build build/release --target kvtier_c``.
"""

from __future__ import annotations

import ctypes as C
import os
import threading
from dataclasses import dataclass

# kvt_status codes (absl::StatusCode values).
STATUS_NAMES = {
    0: "OK", 1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND", 6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED",
    9: "FAILED_PRECONDITION", 10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED",
    13: "INTERNAL", 14: "UNAVAILABLE", 15: "DATA_LOSS",
}
DTYPE = {"float32": 0, "float16": 1, "bfloat16": 2, "fp8_e4m3": 3, "fp8_e5m2": 4, "int8": 5,
         "bytes": 6}
LAYOUT = {"flash_attn_nhd": 0, "flash_attn_hnd": 1, "flashinfer": 2, "mla": 3,
          "cross_layer": 4, "llamacpp_rows": 5}
DEVICE_CPU, DEVICE_CUDA = 0, 1


class KvtError(RuntimeError):
    """A kvt_* call returned a non-OK status; ``code`` is the kvt_status value."""

    def __init__(self, code: int, message: str):
        super().__init__(f"{STATUS_NAMES.get(code, code)}: {message}")
        self.code = code


class _Options(C.Structure):
    _fields_ = [
        ("model_id", C.c_char_p), ("num_layers", C.c_uint32), ("num_kv_heads", C.c_uint32),
        ("head_dim", C.c_uint32), ("dtype", C.c_int32), ("layout_kind", C.c_int32),
        ("tp_rank", C.c_uint32), ("tp_world_size", C.c_uint32), ("chunk_tokens", C.c_uint32),
        ("tenant", C.c_char_p), ("engine_extra", C.c_char_p),
        ("host_capacity_bytes", C.c_uint64), ("disk_dir", C.c_char_p),
        ("disk_capacity_bytes", C.c_uint64), ("use_cost_model", C.c_int32),
        ("async_store", C.c_int32), ("prefill_s_per_token", C.c_double),
        ("prefill_s_per_token_ctx", C.c_double),
        ("daemon_address", C.c_char_p), ("daemon_token", C.c_char_p),
        ("daemon_deadline_ms", C.c_uint32), ("cost_probe_after", C.c_uint32),
    ]


class _KvView(C.Structure):
    _fields_ = [
        ("device", C.c_int32), ("num_layers", C.c_uint32), ("num_kv_heads", C.c_uint32),
        ("head_dim", C.c_uint32), ("dtype", C.c_int32), ("layout_kind", C.c_int32),
        ("block_size", C.c_uint32), ("num_blocks", C.c_uint32),
        ("layer_base", C.POINTER(C.c_void_p)), ("n_layer_base", C.c_size_t),
        ("k_base", C.POINTER(C.c_void_p)), ("v_base", C.POINTER(C.c_void_p)),
        ("n_kv_base", C.c_size_t),
    ]


class _BlockView(C.Structure):
    _fields_ = [
        ("num_layers", C.c_uint32), ("block_size", C.c_uint32), ("num_blocks", C.c_uint32),
        ("block_bytes", C.c_uint64), ("layer_base", C.POINTER(C.c_void_p)),
        ("n_layer_base", C.c_size_t),
    ]


STAT_FIELDS = ["lookups", "lookup_hit_tokens", "lookup_load_tokens", "store_chunks_taken",
               "store_chunks_skipped", "store_chunks_dropped", "store_chunks_put",
               "store_put_errors", "load_chunks_ok", "load_chunks_failed", "load_misses",
               "load_data_loss", "load_mismatch", "load_other_errors", "load_bytes",
               "cost_load_all", "cost_load_partial", "cost_recompute", "cost_probe"]


class _Stats(C.Structure):
    _fields_ = [(f, C.c_uint64) for f in STAT_FIELDS]


_lib = None
_lib_lock = threading.Lock()


def library_path() -> str:
    """The libkvtier.so this process uses (see the module docstring for the order)."""
    env = os.environ.get("KVTIER_LIB")
    if env:
        if not os.path.isfile(env):
            raise FileNotFoundError(f"KVTIER_LIB = {env!r} is not a file")
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = [os.path.join(here, "lib", "libkvtier.so"),
                  os.path.join(here, "..", "..", "..", "build", "release", "connectors", "vllm",
                               "libkvtier.so")]
    for c in candidates:
        if os.path.isfile(c):
            return os.path.normpath(c)
    raise FileNotFoundError(
        "libkvtier.so not found: set KVTIER_LIB to its path, or build it with "
        "'cmake --preset release && cmake --build build/release --target kvtier_c' "
        f"(looked in {', '.join(os.path.normpath(c) for c in candidates)})")


def lib() -> C.CDLL:
    global _lib
    with _lib_lock:
        if _lib is None:
            L = C.CDLL(library_path())
            P, u64p, szp = C.c_void_p, C.POINTER(C.c_uint64), C.POINTER(C.c_size_t)
            i32p = C.POINTER(C.c_int32)
            L.kvt_options_init.argtypes = [C.POINTER(_Options)]
            L.kvt_options_init.restype = None
            L.kvt_create.argtypes = [C.POINTER(_Options), C.POINTER(P)]
            L.kvt_destroy.argtypes = [P]
            L.kvt_destroy.restype = None
            L.kvt_last_error.restype = C.c_char_p
            L.kvt_chunk_payload_bytes.argtypes = [P]
            L.kvt_chunk_payload_bytes.restype = C.c_uint64
            L.kvt_chunk_tokens.argtypes = [P]
            L.kvt_chunk_tokens.restype = C.c_uint32
            L.kvt_lookup.argtypes = [P, i32p, C.c_size_t, C.c_uint64, u64p, u64p]
            L.kvt_lookup_pinned.argtypes = [P, i32p, C.c_size_t, C.c_uint64, u64p, u64p,
                                            C.POINTER(P)]
            L.kvt_lease_release.argtypes = [P]
            L.kvt_lease_release.restype = None
            L.kvt_register_kv_view.argtypes = [P, C.POINTER(_KvView)]
            L.kvt_store.argtypes = [P, i32p, C.c_size_t, C.POINTER(C.c_int64), C.c_size_t, szp]
            L.kvt_load.argtypes = [P, i32p, C.c_size_t, C.c_uint64, C.POINTER(C.c_int64),
                                   C.c_size_t, C.c_uint64, u64p]
            L.kvt_register_block_view.argtypes = [P, C.POINTER(_BlockView)]
            L.kvt_store_blocks.argtypes = [P, i32p, C.c_size_t, i32p, C.c_size_t, szp]
            L.kvt_load_blocks.argtypes = [P, i32p, C.c_size_t, C.c_uint64, i32p, C.c_size_t,
                                          C.c_uint64, u64p]
            L.kvt_fetch_blocks.argtypes = [P, i32p, C.c_size_t, C.c_uint64, i32p, C.c_size_t,
                                           C.c_uint64, C.POINTER(P), u64p]
            L.kvt_fetched_scatter_layer.argtypes = [P, C.c_uint32]
            L.kvt_fetched_free.argtypes = [P]
            L.kvt_fetched_free.restype = None
            L.kvt_get_stats.argtypes = [P, C.POINTER(_Stats), C.c_size_t]
            L.kvt_flush.argtypes = [P]
            L.kvt_flush.restype = None
            L.kvt_observe_prefill.argtypes = [P, C.c_uint64, C.c_uint64, C.c_double]
            L.kvt_observe_prefill.restype = None
            L.kvt_parse_byte_size.argtypes = [C.c_char_p, u64p]
            L.kvt_namespace_hex.argtypes = [P, C.c_char_p, C.c_size_t]
            L.kvt_daemon_check.argtypes = [P, C.c_uint32]
            _lib = L
        return _lib


def _check(rc: int) -> None:
    if rc != 0:
        raise KvtError(rc, lib().kvt_last_error().decode("utf-8", "replace"))


def parse_byte_size(text: str) -> int:
    """Bytes of a size such as "4G" (= 4 GiB), "512MiB", "2TB" (= 2e12) or "1.5 MiB", read
    by kvtier's one C++ parser (kvt_parse_byte_size; kvstore/byte_size.h), so a size means
    what it means to kvtierd and the kvtier CLI. ValueError with the parser's message
    (naming the text and the accepted forms) for anything else, e.g. a fraction of a byte."""
    if not isinstance(text, str):
        raise ValueError(f"byte size {text!r}: expected a string such as \"4GiB\"")
    out = C.c_uint64()
    if lib().kvt_parse_byte_size(text.encode(), C.byref(out)) != 0:
        raise ValueError(lib().kvt_last_error().decode("utf-8", "replace"))
    return out.value


def _i32(values) -> C.Array:
    return (C.c_int32 * len(values))(*values)


def _b(s: str | None) -> bytes | None:
    return None if s is None else s.encode()


@dataclass
class ConnectorOptions:
    """Fields of kvt_options (see kvtier_c.h for units and defaults)."""
    model_id: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: str = "bfloat16"          # key of DTYPE
    layout: str = "flash_attn_nhd"   # key of LAYOUT
    tp_rank: int = 0
    tp_world_size: int = 1
    chunk_tokens: int = 256
    tenant: str = ""
    engine_extra: str = ""
    host_capacity_bytes: int = 1 << 30
    disk_dir: str | None = None
    disk_capacity_bytes: int = 0
    use_cost_model: bool = True
    async_store: bool = True
    daemon_address: str | None = None
    daemon_token: str | None = None
    daemon_deadline_ms: int = 2000
    cost_probe_after: int = 32  # kvt_options.cost_probe_after (0 = never probe)


class _OwnedHandle:
    """A C ABI handle this object owns: close() hands it to the class's ``_free_name``
    function of the library (once; later calls do nothing), and so does garbage collection."""

    _free_name = ""
    _h = None

    def close(self) -> None:
        if self._h:
            getattr(lib(), self._free_name)(self._h)
            self._h = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Fetched(_OwnedHandle):
    """A per-layer block load fetched and verified by Connector.fetch_blocks
    (kvt_fetch_blocks): ``loaded_tokens`` are held once every layer is scattered;
    scatter_layer(l) writes layer l of every delivered chunk into the blocks (GIL
    released). close() frees the verified buffers."""

    _free_name = "kvt_fetched_free"

    def __init__(self, h: C.c_void_p, loaded_tokens: int):
        self._h = h
        self.loaded_tokens = loaded_tokens

    def scatter_layer(self, layer: int) -> None:
        if not self._h:
            raise KvtError(9, "kvtier fetched load is closed")
        _check(lib().kvt_fetched_scatter_layer(self._h, layer))


class Lease(_OwnedHandle):
    """The store's pins on the chunks a Connector.lookup_pinned promised (kvt_lookup_pinned):
    they cannot be evicted until close() (kvt_lease_release; call it once the load has
    run, or when the request will not load) or the store's lease timeout."""

    _free_name = "kvt_lease_release"

    def __init__(self, h: C.c_void_p):
        self._h = h


class Connector(_OwnedHandle):
    """One kvt_connector handle. Thread-safe (as the C ABI). close() destroys the handle;
    REQUIRES: no other call on it in flight (kvt_destroy)."""

    _free_name = "kvt_destroy"

    def __init__(self, o: ConnectorOptions):
        L = lib()
        opts = _Options()
        L.kvt_options_init(C.byref(opts))
        self._keep = [_b(o.model_id), _b(o.tenant), _b(o.engine_extra), _b(o.disk_dir),
                      _b(o.daemon_address), _b(o.daemon_token)]
        opts.model_id, opts.tenant, opts.engine_extra = self._keep[0], self._keep[1], self._keep[2]
        opts.disk_dir, opts.daemon_address, opts.daemon_token = self._keep[3:6]
        opts.num_layers, opts.num_kv_heads, opts.head_dim = o.num_layers, o.num_kv_heads, o.head_dim
        opts.dtype, opts.layout_kind = DTYPE[o.dtype], LAYOUT[o.layout]
        opts.tp_rank, opts.tp_world_size, opts.chunk_tokens = o.tp_rank, o.tp_world_size, o.chunk_tokens
        opts.host_capacity_bytes, opts.disk_capacity_bytes = o.host_capacity_bytes, o.disk_capacity_bytes
        opts.use_cost_model, opts.async_store = int(o.use_cost_model), int(o.async_store)
        opts.daemon_deadline_ms, opts.cost_probe_after = o.daemon_deadline_ms, o.cost_probe_after
        h = C.c_void_p()
        _check(L.kvt_create(C.byref(opts), C.byref(h)))
        self._h = h
        self.options = o
        self.chunk_tokens = L.kvt_chunk_tokens(h)
        self.chunk_payload_bytes = L.kvt_chunk_payload_bytes(h)
        self._views = []  # pointer arrays kept alive while registered

    def _live(self) -> C.c_void_p:
        """The handle; KvtError FAILED_PRECONDITION once closed (never a NULL call)."""
        if not self._h:
            raise KvtError(9, "kvtier connector is closed")
        return self._h

    def lookup(self, tokens: list[int], num_computed_tokens: int = 0) -> tuple[int, int]:
        """(load_tokens, cached_tokens) for a prompt; see kvt_lookup."""
        load, cached = C.c_uint64(), C.c_uint64()
        _check(lib().kvt_lookup(self._live(), _i32(tokens), len(tokens), num_computed_tokens,
                                C.byref(load), C.byref(cached)))
        return load.value, cached.value

    def lookup_pinned(self, tokens: list[int],
                      num_computed_tokens: int = 0) -> tuple[int, int, "Lease | None"]:
        """(load_tokens, cached_tokens, lease) for a prompt; see kvt_lookup_pinned. The
        lease (None when load_tokens == 0) pins the chunks to load until it is closed."""
        load, cached, h = C.c_uint64(), C.c_uint64(), C.c_void_p()
        _check(lib().kvt_lookup_pinned(self._live(), _i32(tokens), len(tokens),
                                       num_computed_tokens, C.byref(load), C.byref(cached),
                                       C.byref(h)))
        return load.value, cached.value, (Lease(h) if h.value else None)

    def register_block_view(self, layer_ptrs: list[int], block_size: int, num_blocks: int,
                            block_bytes: int) -> None:
        arr = (C.c_void_p * len(layer_ptrs))(*layer_ptrs)
        v = _BlockView(len(layer_ptrs), block_size, num_blocks, block_bytes, arr, len(layer_ptrs))
        _check(lib().kvt_register_block_view(self._live(), C.byref(v)))
        self._views = [arr]

    def store_blocks(self, tokens: list[int], block_ids: list[int]) -> int:
        taken = C.c_size_t()
        _check(lib().kvt_store_blocks(self._live(), _i32(tokens), len(tokens), _i32(block_ids),
                                      len(block_ids), C.byref(taken)))
        return taken.value

    def load_blocks(self, tokens: list[int], num_tokens: int, block_ids: list[int],
                    skip_tokens: int = 0) -> int:
        loaded = C.c_uint64()
        _check(lib().kvt_load_blocks(self._live(), _i32(tokens), len(tokens), num_tokens,
                                     _i32(block_ids), len(block_ids), skip_tokens, C.byref(loaded)))
        return loaded.value

    def fetch_blocks(self, tokens: list[int], num_tokens: int, block_ids: list[int],
                     skip_tokens: int = 0) -> Fetched:
        """Phase 1 of a per-layer load_blocks: fetches and verifies, writes nothing."""
        h, loaded = C.c_void_p(), C.c_uint64()
        _check(lib().kvt_fetch_blocks(self._live(), _i32(tokens), len(tokens), num_tokens,
                                      _i32(block_ids), len(block_ids), skip_tokens, C.byref(h),
                                      C.byref(loaded)))
        return Fetched(h, loaded.value)

    def register_kv_view(self, device: int, layout: str, dtype: str, num_layers: int,
                         num_kv_heads: int, head_dim: int, block_size: int, num_blocks: int,
                         layer_ptrs: list[int]) -> None:
        arr = (C.c_void_p * len(layer_ptrs))(*layer_ptrs)
        v = _KvView(device, num_layers, num_kv_heads, head_dim, DTYPE[dtype], LAYOUT[layout],
                    block_size, num_blocks, arr, len(layer_ptrs), None, None, 0)
        _check(lib().kvt_register_kv_view(self._live(), C.byref(v)))
        self._views = [arr]

    def store_slots(self, tokens: list[int], slots: list[int]) -> int:
        taken = C.c_size_t()
        s = (C.c_int64 * len(slots))(*slots)
        _check(lib().kvt_store(self._live(), _i32(tokens), len(tokens), s, len(slots), C.byref(taken)))
        return taken.value

    def load_slots(self, tokens: list[int], num_tokens: int, slots: list[int],
                   num_computed_tokens: int = 0) -> int:
        loaded = C.c_uint64()
        s = (C.c_int64 * len(slots))(*slots)
        _check(lib().kvt_load(self._live(), _i32(tokens), len(tokens), num_tokens, s, len(slots),
                              num_computed_tokens, C.byref(loaded)))
        return loaded.value

    def observe_prefill(self, new_tokens: int, context_tokens: int, seconds: float) -> None:
        if self._h:
            lib().kvt_observe_prefill(self._h, new_tokens, context_tokens, seconds)

    def flush(self) -> None:
        if self._h:
            lib().kvt_flush(self._h)

    def namespace_hex(self) -> str:
        """The namespace id as 32 hex digits: what `kvtier ls/inspect/evict --ns` take."""
        buf = C.create_string_buffer(33)
        _check(lib().kvt_namespace_hex(self._live(), buf, len(buf)))
        return buf.value.decode()

    def daemon_check(self, timeout_ms: int = 1000) -> str | None:
        """None when the connector's kvtierd answers (or there is none); else why not.
        Waits at most min(timeout_ms, daemon_deadline_ms) (kvt_daemon_check)."""
        L = lib()
        if L.kvt_daemon_check(self._live(), max(1, int(timeout_ms))) == 0:
            return None
        return L.kvt_last_error().decode("utf-8", "replace")

    def stats(self) -> dict[str, int]:
        s = _Stats()
        _check(lib().kvt_get_stats(self._live(), C.byref(s), C.sizeof(s)))
        return {f: getattr(s, f) for f in STAT_FIELDS}
