"""The connector's configuration: parsing ``kv_connector_extra_config`` and deriving
kvtier's namespace from vLLM's config. No vLLM engine state here, so it is testable
without starting an engine.

Extra-config keys (all optional; an unknown key or a bad value is a ValueError that
names the key, raised from the connector's constructor, so the engine does not start):

  kvtierd              kvtierd address: "unix:///path/kvtierd.sock" or "127.0.0.1:7470".
                       Set: the cache is that daemon, shared by every process and every
                       vLLM instance using it. Unset: an embedded host (+ disk) store.
  token / token_file   bearer token for kvtierd (a file: its first line).
  tenant               tenant name, part of the namespace ("" = default tenant).
  chunk_tokens         kvtier chunk size in tokens (default 256); vLLM's block size
                       must divide it. A layout with a Mamba / linear-attention state
                       group: unset, the smallest multiple of its block sizes >= 256.
  host_capacity        embedded host tier size: bytes or "512MiB", "4G" (default 1GiB);
                       sizes are read as kvtierd reads them (kvtier.parse_byte_size:
                       K/M/G/T and KiB..TiB are powers of 2, KB/MB/GB/TB powers of 10).
  disk_dir             embedded disk tier directory (default: none).
  disk_capacity        embedded disk tier size (bytes or "8GiB", a multiple of 4096;
                       default 8GiB, kvtierd's default; 0 also means the default).
  model_id             model identity override (e.g. "org/model@rev"); default: the
                       model path plus a fingerprint of its weights files.
  use_cost_model       true (default): load only when loading beats recomputing.
  cost_probe_after     0..1000000 (default 32): after this many lookups in a row whose
                       cached chunks the cost model chose to recompute, the next one
                       loads the first cached chunk anyway, so the tier's load time is
                       measured again (docs/cost-model.md "Probes"); 0 = never probe.
  daemon_deadline_ms   deadline of one kvtierd call incl. retries (default 2000).
  load_failure_policy  "recompute" (default; vLLM's own default is "fail") or "fail":
                       what vLLM does with blocks whose load failed.
  load_async           true (default) or false. true: a request whose prefix kvtier
                       holds waits (vLLM's WAITING_FOR_REMOTE_KVS) while a worker thread
                       loads it: other requests keep running, so a slow or stalled cache
                       delays only the requests that load, and the load may cover the
                       whole prompt (vLLM recomputes its last token only). false: loads
                       complete inside the step, before the forward pass, and leave the
                       chunk holding the last prompt token to compute.
  load_per_layer       true (default) or false; sync loads (load_async false) on the CPU
                       block layout only. true: start_load_kv fetches and verifies every
                       chunk on a worker thread, then writes the KV layer by layer while
                       the forward runs, and wait_for_layer_load waits for its own layer
                       only. false: the whole load completes before the forward starts.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass

# The embedded disk tier's size when disk_capacity is unset or 0: kvtierd's default
# disk_capacity, so an embedded store and the daemon size a disk tier alike.
DEFAULT_DISK_CAPACITY_BYTES = 8 << 30

KEYS = {"kvtierd", "token", "token_file", "tenant", "chunk_tokens", "host_capacity",
        "disk_dir", "disk_capacity", "model_id", "use_cost_model", "cost_probe_after",
        "daemon_deadline_ms", "load_failure_policy", "load_async", "load_per_layer"}

def _err(key: str, value, expected: str) -> ValueError:
    return ValueError(f"kv_connector_extra_config.{key} = {value!r}: expected {expected}")


def _bytes(key: str, value) -> int:
    """Bytes from an int or a size string, read by kvtier's one parser (the C++ one that
    kvtierd and the CLI use, through the C ABI): "4G" is 4 GiB there and here."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _err(key, value, "a byte size such as 1073741824 or \"1GiB\"")
    if isinstance(value, int):
        if value < 0:
            raise _err(key, value, "a byte size >= 0")
        return value
    from kvtier._native import parse_byte_size
    try:
        return parse_byte_size(value)
    except ValueError as e:
        raise ValueError(f"kv_connector_extra_config.{key}: {e}") from None


def _bool(key: str, value) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
        return value.lower() in ("true", "1")
    raise _err(key, value, "true or false")


def _int(key: str, value, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise _err(key, value, f"an integer in {lo}..{hi}")
    try:
        v = int(value)
    except ValueError:
        raise _err(key, value, f"an integer in {lo}..{hi}") from None
    if not lo <= v <= hi:
        raise _err(key, value, f"an integer in {lo}..{hi}")
    return v


def _str(key: str, value) -> str:
    if not isinstance(value, str):
        raise _err(key, value, "a string")
    return value


@dataclass
class KVTierConfig:
    daemon_address: str | None = None
    token: str = ""
    tenant: str = ""
    chunk_tokens: int = 256
    host_capacity_bytes: int = 1 << 30
    disk_dir: str | None = None
    disk_capacity_bytes: int = DEFAULT_DISK_CAPACITY_BYTES
    model_id: str | None = None
    use_cost_model: bool = True
    cost_probe_after: int = 32
    daemon_deadline_ms: int = 2000
    load_failure_policy: str = "recompute"
    load_async: bool = True
    load_per_layer: bool = True

    @property
    def embedded(self) -> bool:
        return self.daemon_address is None

    @property
    def loads_async(self) -> bool:
        """Whether loads run in the background (see load_async above)."""
        return self.load_async


def parse_extra_config(extra: dict | None) -> KVTierConfig:
    """Validates every key; ValueError naming the first bad or unknown key."""
    extra = dict(extra or {})
    for k in extra:
        if k not in KEYS:
            raise ValueError(f"kv_connector_extra_config.{k}: unknown key; known keys: "
                             f"{', '.join(sorted(KEYS))}")
    c = KVTierConfig()
    if "kvtierd" in extra:
        addr = _str("kvtierd", extra["kvtierd"]).strip()
        if not (addr.startswith("unix://") or re.fullmatch(r"[A-Za-z0-9.\-\[\]:]+:[0-9]+", addr)):
            raise _err("kvtierd", extra["kvtierd"],
                       "\"unix:///path/kvtierd.sock\" or \"host:port\"")
        c.daemon_address = addr
    if "token" in extra and "token_file" in extra:
        raise ValueError("kv_connector_extra_config.token and .token_file are both set; set one")
    if "token" in extra:
        c.token = _str("token", extra["token"])
    if "token_file" in extra:
        path = _str("token_file", extra["token_file"])
        try:
            with open(path) as f:
                c.token = f.readline().strip()
        except OSError as e:
            raise _err("token_file", path, f"a readable file ({e.strerror})") from None
        if not c.token:
            raise _err("token_file", path, "a file whose first line is the token")
    if (c.token or "tenant" in extra) and c.embedded and c.token:
        raise ValueError("kv_connector_extra_config.token is set but kvtierd is not: a token "
                         "is only sent to kvtierd")
    if "tenant" in extra:
        c.tenant = _str("tenant", extra["tenant"])
    if "chunk_tokens" in extra:
        c.chunk_tokens = _int("chunk_tokens", extra["chunk_tokens"], 1, 1 << 20)
    if "host_capacity" in extra:
        c.host_capacity_bytes = _bytes("host_capacity", extra["host_capacity"])
        if c.host_capacity_bytes == 0:
            raise _err("host_capacity", extra["host_capacity"], "a byte size > 0")
    if "disk_dir" in extra:
        c.disk_dir = _str("disk_dir", extra["disk_dir"])
        if not c.disk_dir:
            raise _err("disk_dir", extra["disk_dir"], "a directory path")
    if "disk_capacity" in extra:
        c.disk_capacity_bytes = (_bytes("disk_capacity", extra["disk_capacity"])
                                 or DEFAULT_DISK_CAPACITY_BYTES)
    if not c.embedded:
        for k in ("host_capacity", "disk_dir", "disk_capacity"):
            if k in extra:
                raise ValueError(f"kv_connector_extra_config.{k} is set together with kvtierd; "
                                 f"{k} configures the embedded store only (set it in kvtierd's "
                                 "config instead)")
    if "model_id" in extra:
        c.model_id = _str("model_id", extra["model_id"])
        if not c.model_id:
            raise _err("model_id", extra["model_id"], "a non-empty model identity")
    if "use_cost_model" in extra:
        c.use_cost_model = _bool("use_cost_model", extra["use_cost_model"])
    if "cost_probe_after" in extra:
        c.cost_probe_after = _int("cost_probe_after", extra["cost_probe_after"], 0, 1000000)
    if "daemon_deadline_ms" in extra:
        c.daemon_deadline_ms = _int("daemon_deadline_ms", extra["daemon_deadline_ms"], 1, 600000)
    if "load_failure_policy" in extra:
        v = extra["load_failure_policy"]
        if v not in ("recompute", "fail"):
            raise _err("load_failure_policy", v, "\"recompute\" or \"fail\"")
        c.load_failure_policy = v
    if "load_async" in extra:
        c.load_async = _bool("load_async", extra["load_async"])
    if "load_per_layer" in extra:
        c.load_per_layer = _bool("load_per_layer", extra["load_per_layer"])
    return c


_FP_CACHE: dict[tuple, str] = {}


def weights_fingerprint(model_dir: str) -> str:
    """A cheap fingerprint of a local model's weights: for every *.safetensors / *.bin /
    *.pt file, its name, size, safetensors header and 3 x 64 KiB sampled from its start,
    middle and end (different random or trained weights differ there), plus config.json.
    "" when model_dir is not a local directory (a hub name: use model_id with a revision)."""
    if not os.path.isdir(model_dir):
        return ""
    files = sorted(f for f in os.listdir(model_dir)
                   if f.endswith((".safetensors", ".bin", ".pt")) or f == "config.json")
    key = tuple((f, os.stat(os.path.join(model_dir, f)).st_size,
                 os.stat(os.path.join(model_dir, f)).st_mtime_ns) for f in files)
    if key in _FP_CACHE:
        return _FP_CACHE[key]
    h = hashlib.blake2b(digest_size=16)
    for f, size, _ in key:
        h.update(f.encode() + b"\0" + str(size).encode() + b"\0")
        with open(os.path.join(model_dir, f), "rb") as fh:
            for off in (0, max(0, size // 2 - 32768), max(0, size - 65536)):
                fh.seek(off)
                h.update(fh.read(65536))
    fp = h.hexdigest()
    _FP_CACHE[key] = fp
    return fp


_DTYPE_NAMES = {"torch.bfloat16": "bfloat16", "torch.float16": "float16",
                "torch.float32": "float32"}


@dataclass
class Namespace:
    """What kvtier's namespace is made of for one vLLM deployment (both halves compute
    the same one from the config alone)."""
    model_id: str
    num_layers: int
    num_kv_heads: int
    head_dim: int
    dtype: str
    layout: str          # kvtier layout kind (kvtier._native.LAYOUT key)
    block_size: int
    packing: str         # "cpu-<isa>" for vLLM's CPU backend, else the GPU layout name
    tp_rank: int
    tp_world_size: int
    engine_extra: str


def kv_dtype_name(vllm_config) -> str:
    cache_dtype = str(vllm_config.cache_config.cache_dtype)
    if cache_dtype in ("auto", ""):
        return _DTYPE_NAMES.get(str(vllm_config.model_config.dtype), "")
    if cache_dtype.startswith("fp8"):
        return "fp8_e5m2" if "e5m2" in cache_dtype else "fp8_e4m3"
    return _DTYPE_NAMES.get(cache_dtype, cache_dtype)


def cpu_packing(vllm_config, dtype) -> str:
    """The ISA vLLM's CPU attention packs (block, head) tiles for: the same function
    the backend calls (vllm/v1/attention/backends/cpu_attn.py, _get_attn_isa)."""
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa
    mc = vllm_config.model_config
    return _get_attn_isa(mc.dtype, vllm_config.cache_config.block_size, mc.get_head_size(),
                         vllm_config.cache_config.cache_dtype)


def derive_namespace(vllm_config, cfg: KVTierConfig, tp_rank: int = 0,
                     platform: str | None = None, check_block_size: bool = True) -> Namespace:
    """Namespace fields from vLLM's config. ``platform``: "cpu" or "cuda" (default:
    vLLM's current platform). ValueError when the block size does not divide the chunk
    size (both named; not checked with check_block_size False: a layout kvtier does not
    store) or the KV dtype is not one kvtier stores."""
    mc, pc = vllm_config.model_config, vllm_config.parallel_config
    block_size = int(vllm_config.cache_config.block_size)
    if check_block_size and cfg.chunk_tokens % block_size:
        raise ValueError(f"kv_connector_extra_config.chunk_tokens = {cfg.chunk_tokens}: vLLM's "
                         f"block size {block_size} does not divide kvtier's chunk size "
                         f"{cfg.chunk_tokens}; use a chunk_tokens that is a multiple of "
                         f"{block_size}")
    dtype = kv_dtype_name(vllm_config)
    if dtype not in ("bfloat16", "float16", "float32", "fp8_e4m3", "fp8_e5m2"):
        raise ValueError(f"KV cache dtype {vllm_config.cache_config.cache_dtype!r} "
                         f"(model dtype {mc.dtype}) is not one kvtier stores")
    if platform is None:
        from vllm.platforms import current_platform
        platform = "cpu" if current_platform.is_cpu() else "cuda"
    use_mla = bool(getattr(mc, "use_mla", False))
    if platform == "cpu":
        packing = "cpu-" + cpu_packing(vllm_config, dtype)
        # Block-major, K and V inside the block: the nearest existing kind; the packing
        # in engine_extra keeps it apart from a real FlashInfer cache.
        layout = "flashinfer"
    else:
        layout = "mla" if use_mla else "flash_attn_nhd"
        packing = layout
    model = str(mc.model)
    model_id = cfg.model_id or f"{model}@{getattr(mc, 'revision', None) or weights_fingerprint(model)}"
    num_kv_heads = 1 if use_mla else mc.get_num_kv_heads(pc)
    head_dim = mc.get_head_size()
    extra = json.dumps({"engine": "vllm", "packing": packing, "block_size": block_size,
                        "kv_cache_dtype": str(vllm_config.cache_config.cache_dtype)},
                       sort_keys=True)
    return Namespace(model_id=model_id, num_layers=mc.get_num_layers(pc),
                     num_kv_heads=num_kv_heads, head_dim=head_dim, dtype=dtype, layout=layout,
                     block_size=block_size, packing=packing, tp_rank=tp_rank,
                     tp_world_size=pc.tensor_parallel_size, engine_extra=extra)


@dataclass(frozen=True)
class KVGroup:
    """One KV cache group of vLLM's hybrid KV cache manager (HMA), as kvtier handles it.

    kind: "full" (full attention: every block of the prompt), "sliding_window" (vLLM
    keeps only the blocks inside the last `window` tokens; the others are its null
    block, id 0), "state" (Mamba / linear-attention state, vLLM's MambaSpec in its
    "align" cache mode, i.e. with vLLM's prefix caching on: block j of a request holds,
    if anything, the state after exactly (j + 1) * block_size tokens, one page of
    `page_bytes` per layer and block), or "unsupported" (a state group in another
    mode, chunked-local, MLA-sliding... : kvtier neither stores nor loads such a
    model, it runs cold). `spec`: the vLLM KVCacheSpec class name; `window`: tokens
    (sliding_window only, also the window vLLM merged into a full-attention group when
    HMA is off); `state`: a state group's shapes and dtypes per layer, as vLLM declares
    them (part of the namespace: another state layout never hits)."""
    index: int
    kind: str
    spec: str
    layer_names: tuple[str, ...]
    block_size: int
    num_kv_heads: int = 0
    head_dim: int = 0
    window: int | None = None
    transfer: bool = True   # vLLM's KVCacheGroupSpec.enable_kv_transfer
    page_bytes: int = 0     # "state": bytes of one (layer, block) page (vLLM's page size)
    state: str | None = None  # "state": "shapes=...;dtypes=...;mode=align"

    def describe(self) -> dict:
        """The group as it enters the namespace (layer names in vLLM's order)."""
        d = {"kind": self.kind, "spec": self.spec, "layers": list(self.layer_names),
             "block_size": self.block_size, "kv_heads": self.num_kv_heads,
             "head_dim": self.head_dim, "window": self.window, "transfer": self.transfer}
        if self.state is not None:
            d.update(state=self.state, page_bytes=self.page_bytes)
        return d


def kv_groups(kv_cache_config) -> list[KVGroup]:
    """kvtier's view of vLLM's KVCacheConfig.kv_cache_groups (vllm/v1/kv_cache_interface.py),
    in vLLM's group order (the order of the block-id lists vLLM hands the connector).
    A UniformTypeKVCacheSpecs group (one type, several shapes) is "unsupported" unless
    its specs agree on heads and head size."""
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        MambaSpec,
        SlidingWindowSpec,
        UniformTypeKVCacheSpecs,
    )
    out = []
    for i, g in enumerate(kv_cache_config.kv_cache_groups):
        spec = g.kv_cache_spec
        name = type(spec).__name__
        if isinstance(spec, UniformTypeKVCacheSpecs):
            specs = list(spec.kv_cache_specs.values())
            shapes = {(type(s), getattr(s, "num_kv_heads", None), getattr(s, "head_size", None),
                       getattr(s, "sliding_window", None)) for s in specs}
            spec = specs[0] if len(shapes) == 1 else spec
        # Exact types: MLA, R-SWA, sliding-window MLA... subclass these but lay their
        # blocks out differently; they are not handled.
        kind = ("full" if type(spec) is FullAttentionSpec else
                "sliding_window" if type(spec) is SlidingWindowSpec else "unsupported")
        window = getattr(spec, "sliding_window", None) if kind != "unsupported" else None
        if kind == "sliding_window" and getattr(spec, "extra_retained_tokens", 0):
            kind = "unsupported"  # spec-decode retention changes which blocks vLLM keeps
        state, page = None, 0
        if type(spec) is MambaSpec:
            # Only "align" mode keeps states at block boundaries (prefix caching on);
            # speculative blocks move states between columns.
            # A page must be whole rows of the record layout (group_namespaces).
            if (spec.mamba_cache_mode == "align" and not spec.num_speculative_blocks
                    and spec.page_size_bytes % (2 * spec.block_size) == 0):
                kind = "state"
                page = int(spec.page_size_bytes)
                state = (f"shapes={[list(x) for x in spec.shapes]};"
                         f"dtypes={[str(d) for d in spec.dtypes]};mode={spec.mamba_cache_mode}")
        out.append(KVGroup(
            index=i, kind=kind, spec=name, layer_names=tuple(g.layer_names),
            block_size=int(spec.block_size),
            num_kv_heads=int(getattr(spec, "num_kv_heads", 0) or 0),
            head_dim=int(getattr(spec, "head_size", 0) or 0),
            window=int(window) if window else None,
            transfer=bool(getattr(g, "enable_kv_transfer", True)),
            page_bytes=page, state=state))
    return out


def is_plain_layout(groups: list[KVGroup]) -> bool:
    """One full-attention group, no window: the layout of a model with one kind of
    attention, whose namespace is the one kvtier always derived (records stored before
    kvtier knew of groups keep hitting)."""
    return (len(groups) == 1 and groups[0].kind == "full" and groups[0].window is None
            and groups[0].transfer)


def group_namespaces(base: Namespace, groups: list[KVGroup], hma: bool) -> list[Namespace]:
    """One namespace per KV group: the group's layers, heads, head size and block size,
    with the whole group layout (every group's kind, window, layers and block size),
    the group's index and whether vLLM's hybrid KV cache manager is on in engine_extra.
    So a record stored under one layout never hits under another (a different window,
    a different group split, HMA on vs off). A plain layout (is_plain_layout) keeps
    `base` unchanged."""
    if is_plain_layout(groups):
        return [base]
    layout = [g.describe() for g in groups]
    out = []
    for g in groups:
        extra = json.loads(base.engine_extra)
        extra.update({"kv_groups": layout, "kv_group": g.index, "hma": bool(hma),
                      "block_size": g.block_size})
        if g.kind == "state":
            # One record = one page per layer: an opaque "mla" row of page_bytes per
            # block (bfloat16 elements), one block per record (state_chunk_tokens).
            out.append(Namespace(
                model_id=base.model_id, num_layers=max(1, len(g.layer_names)),
                num_kv_heads=1, head_dim=g.page_bytes // (2 * g.block_size),
                dtype="bfloat16", layout="mla", block_size=g.block_size,
                packing=base.packing, tp_rank=base.tp_rank,
                tp_world_size=base.tp_world_size,
                engine_extra=json.dumps(extra, sort_keys=True)))
            continue
        out.append(Namespace(
            model_id=base.model_id, num_layers=max(1, len(g.layer_names)),
            num_kv_heads=g.num_kv_heads or base.num_kv_heads,
            head_dim=g.head_dim or base.head_dim, dtype=base.dtype,
            layout=base.layout, block_size=g.block_size, packing=base.packing,
            tp_rank=base.tp_rank, tp_world_size=base.tp_world_size,
            engine_extra=json.dumps(extra, sort_keys=True)))
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m kvtier.vllm_config '<--kv-transfer-config JSON>'``: checks the connector's
    extra config in a second, before a vLLM start-up that would report a bad key only when
    the connector is first built (after the model loads; docs/vllm.md). Accepts the whole
    --kv-transfer-config object or its kv_connector_extra_config alone. Exit 0 and the
    parsed settings, or exit 2 and the error naming the key."""
    import sys
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print(main.__doc__, file=sys.stderr)
        return 2
    try:
        obj = json.loads(args[0])
    except ValueError as e:
        print(f"kvtier: not JSON: {e}", file=sys.stderr)
        return 2
    if not isinstance(obj, dict):
        print("kvtier: expected a JSON object", file=sys.stderr)
        return 2
    extra = obj.get("kv_connector_extra_config", {}) if "kv_connector" in obj else obj
    try:
        cfg = parse_extra_config(extra)
    except ValueError as e:
        print(f"kvtier: {e}", file=sys.stderr)
        return 2
    print(json.dumps(vars(cfg) | {"token": "***" if cfg.token else ""}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
