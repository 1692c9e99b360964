"""Support pieces of kvtier's vLLM connector (kvtier/vllm.py), kept apart so that the
connector's file holds the connector: its time accounting, its stats for vLLM's
metrics, the KV layout detection and the state of a per-layer sync load."""

from __future__ import annotations

import functools
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import torch

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (
    KVConnectorPromMetrics,
    KVConnectorStats,
)

from kvtier._native import STAT_FIELDS, Connector, ConnectorOptions, KvtError
from kvtier.vllm_config import KVTierConfig, Namespace

# Wall time spent inside the connector, per hook, in this process (both halves):
# name -> [seconds, calls]. "native_lookup" is libkvtier's Lookup alone (chunk hashing +
# the store's lookup, incl. the ctypes call), "_store" the store thread's copies (not on
# the engine's path). For the benchmark's cost of a miss; perf_counter costs ~0.1 us.
_TIMING: dict[str, list] = {}


def _add_time(name: str, seconds: float) -> None:
    e = _TIMING.setdefault(name, [0.0, 0])
    e[0] += seconds
    e[1] += 1


def timing() -> dict[str, tuple[float, int]]:
    """(seconds, calls) per connector hook in this process so far (see _TIMING)."""
    return {k: (v[0], v[1]) for k, v in list(_TIMING.items())}


def _timed(name: str, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _add_time(name, time.perf_counter() - t0)
    return wrapper



# Counters each half reports to vLLM (so that an embedded store, shared by both halves,
# is not counted twice): the scheduler looks up, the worker loads and stores.
_SCHEDULER_STATS = ("lookups", "lookup_hit_tokens", "lookup_load_tokens")


@dataclass
class KVTierStats(KVConnectorStats):
    """kvtier counters (deltas) that reach vLLM's connector stats logging."""

    def reset(self):
        self.data = {}

    def aggregate(self, other: KVConnectorStats) -> KVConnectorStats:
        for k, v in (other.data or {}).items():
            self.data[k] = self.data.get(k, 0) + v
        return self

    def reduce(self) -> dict[str, int | float]:
        return dict(self.data)

    def is_empty(self) -> bool:
        return not any(self.data.values())


class KVTierPromMetrics(KVConnectorPromMetrics):
    """kvtier's counters on vLLM's Prometheus endpoint: vllm:kvtier_<counter>_total for
    every kvt_stats field (kvtier_c.h), summed over the engine's workers and scheduler,
    labelled like vLLM's own metrics (model_name, engine)."""

    def __init__(self, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        from vllm.v1.metrics.utils import create_metric_per_engine
        self._counters = {}
        for f in STAT_FIELDS:
            c = self._counter_cls(name=f"vllm:kvtier_{f}",
                                  documentation=f"kvtier connector counter {f} (kvt_stats)",
                                  labelnames=labelnames)
            self._counters[f"kvtier_{f}"] = create_metric_per_engine(c, per_engine_labelvalues)

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0):
        for k, v in (transfer_stats_data or {}).items():
            per_engine = self._counters.get(k)
            if per_engine is not None and v > 0:
                per_engine[engine_idx].inc(v)



def detect_layout(t: torch.Tensor, num_kv_heads: int, head_dim: int,
                  block_size: int) -> tuple[str, int]:
    """(layout, num_blocks) of one layer's KV tensor as vLLM's backends allocate it:
    "cpu-blocks" [num_blocks, H, block_size, 2*D] (CPU backend, packed per ISA);
    "flash_attn_nhd" [2, N, block_size, H, D] and "flash_attn_hnd" (same shape, H before
    block_size in memory); "flashinfer" [N, 2, block_size, H, D]; "mla" [N, block_size, L].
    ValueError naming the shape when it is none of these."""
    s = tuple(t.shape)
    H, D, B = num_kv_heads, head_dim, block_size
    if len(s) == 4 and s[1:] == (H, B, 2 * D):
        return "cpu-blocks", s[0]
    if len(s) == 5 and s[0] == 2 and s[2:] == (B, H, D):
        st = t.stride()
        if H > 1 and st[3] > st[2]:  # heads outer in memory: HND stride order
            return "flash_attn_hnd", s[1]
        return "flash_attn_nhd", s[1]
    if len(s) == 5 and s[1] == 2 and s[2:] == (B, H, D):
        return "flashinfer", s[0]
    if len(s) == 3 and s[1] == B:
        return "mla", s[0]
    raise ValueError(f"KV cache tensor of shape {list(s)} (kv heads {H}, head size {D}, block "
                     f"size {B}) matches no layout kvtier knows: CPU [N,H,B,2D], FlashAttention "
                     "[2,N,B,H,D], FlashInfer [N,2,B,H,D], MLA [N,B,L]")



class _LayeredLoad:
    """One step's per-layer sync load: events[l] is set once layer l of every request's
    chunks is written (or the load gave up); `lock` guards cancelled/scattered, and is
    held while a layer is written, so after `cancelled` is set no byte is written."""

    def __init__(self, reqs: list, num_layers: int):
        self.reqs = reqs
        self.num_layers = num_layers
        self.events = [threading.Event() for _ in range(num_layers)]
        self.lock = threading.Lock()
        self.cancelled = False
        self.scattered = 0                # layers written
        self.loaded: dict[str, int] = {}  # req -> leading tokens verified (fetch)
        self.future: Future | None = None


# Embedded stores shared by the scheduler and worker halves of one process:
# options -> [store, halves using it]; the last half to shut down closes it.
_SHARED: dict[tuple, list] = {}
_SHARED_LOCK = threading.Lock()


class _Closed:
    """Stands in for a closed native store: every lookup misses, nothing loads/stores."""

    def __getattr__(self, name):
        def fail(*args, **kwargs):
            raise KvtError(9, "kvtier connector is shut down")
        return fail

    def stats(self):
        return {}


_CLOSED = _Closed()


def _open_native(cfg: KVTierConfig, ns: Namespace) -> Connector:
    o = ConnectorOptions(
        model_id=ns.model_id, num_layers=ns.num_layers, num_kv_heads=ns.num_kv_heads,
        head_dim=ns.head_dim, dtype=ns.dtype, layout=ns.layout, tp_rank=ns.tp_rank,
        tp_world_size=ns.tp_world_size, chunk_tokens=cfg.chunk_tokens, tenant=cfg.tenant,
        engine_extra=ns.engine_extra, host_capacity_bytes=cfg.host_capacity_bytes,
        disk_dir=cfg.disk_dir, disk_capacity_bytes=cfg.disk_capacity_bytes,
        use_cost_model=cfg.use_cost_model, daemon_address=cfg.daemon_address,
        daemon_token=cfg.token or None, daemon_deadline_ms=cfg.daemon_deadline_ms)
    if not cfg.embedded:
        return Connector(o)  # every process talks to the daemon itself
    key = tuple(sorted(vars(o).items()))
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = [Connector(o), 0]
        _SHARED[key][1] += 1
        return _SHARED[key][0]
