"""kvtier as a vLLM v1 KV connector (tested against vLLM 0.32.0).

Enable it with

    --kv-transfer-config '{"kv_connector":"KVTierConnector",
                           "kv_connector_module_path":"kvtier.vllm",
                           "kv_role":"kv_both",
                           "kv_connector_extra_config":{"kvtierd":"unix:///run/kvtierd.sock"}}'

(keys of kv_connector_extra_config: kvtier/vllm_config.py). Every decision and byte copy
runs in libkvtier (kvtier._native, ctypes, GIL released); this module only maps vLLM's
requests and blocks onto kvtier's token chunks.

Flow per engine step:
  scheduler  get_num_new_matched_tokens -> kvtier Lookup (cost model): tokens to load
             update_state_after_alloc   -> remembers the request's load
             build_connector_meta       -> per request: tokens, block ids, what to load,
                                           whether its prefill completes this step (store)
  worker     start_load_kv              -> copies verified chunks into the request's blocks
                                           before the forward; blocks that could not be
                                           loaded go to get_block_ids_with_load_errors and
                                           vLLM recomputes them (never wrong KV)
             wait_for_save              -> after the forward: copies the prompt's complete
                                           chunks out of the blocks (synchronously, so the
                                           blocks may be freed right after the step) and
                                           stores them in the background
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
)
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats
from vllm.logger import init_logger

from kvtier._native import DEVICE_CPU, DEVICE_CUDA, Connector, ConnectorOptions, KvtError
from kvtier.vllm_config import KVTierConfig, Namespace, derive_namespace, parse_extra_config

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.attention.backend import AttentionMetadata
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

logger = init_logger("kvtier.vllm")

__all__ = ["KVTierConnector", "KVTierConnectorMetadata", "KVTierStats", "detect_layout"]


@dataclass
class ReqMeta:
    req_id: str
    token_ids: list[int]
    block_ids: list[int]
    load_tokens: int = 0   # leading tokens to load from kvtier (0 = none)
    skip_tokens: int = 0   # leading tokens vLLM already holds (its prefix cache)
    store: bool = False    # the prompt's prefill completes in this step: store its chunks


@dataclass
class KVTierConnectorMetadata(KVConnectorMetadata):
    requests: list[ReqMeta] = field(default_factory=list)


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


# Embedded stores shared by the scheduler and worker halves of one process.
_SHARED: dict[tuple, Connector] = {}
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
            _SHARED[key] = Connector(o)
        return _SHARED[key]


def _layer_index(name: str) -> int:
    m = re.search(r"layers\.(\d+)\.", name)
    return int(m.group(1)) if m else -1


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


class KVTierConnector(KVConnectorBase_V1):
    """kvtier's vLLM connector (both halves; see the module docstring)."""

    def __init__(self, vllm_config: "VllmConfig", role: KVConnectorRole,
                 kv_cache_config: "KVCacheConfig | None" = None):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        ktc = self._kv_transfer_config
        self._cfg = parse_extra_config(ktc.kv_connector_extra_config)
        tp_rank = 0
        if role == KVConnectorRole.WORKER:
            try:
                from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
                tp_rank = get_tensor_model_parallel_rank()
            except Exception:  # no TP group initialised (single process)
                tp_rank = 0
        self._ns = derive_namespace(vllm_config, self._cfg, tp_rank=tp_rank)
        self._block_size = self._ns.block_size
        if role == KVConnectorRole.SCHEDULER:
            if self._cfg.embedded:
                backend = vllm_config.parallel_config.distributed_executor_backend
                if backend not in (None, "uni"):
                    raise ValueError(
                        f"kv_connector_extra_config has no kvtierd, so the cache is embedded "
                        f"in one process, but distributed_executor_backend = {backend!r} runs "
                        "the workers in other processes that could not see it: set "
                        "\"kvtierd\" (start kvtierd) or use distributed_executor_backend='uni'")
            if self._cfg.load_failure_policy == "recompute":
                # vLLM reads the policy after creating the scheduler's connector.
                ktc.kv_load_failure_policy = "recompute"
        self._native = _open_native(self._cfg, self._ns)
        # Scheduler state.
        # req -> (tokens to load, tokens vLLM holds, prompt tokens), from the lookup
        self._pending_loads: dict[str, tuple[int, int, list[int]]] = {}
        self._tracked: dict[str, ReqMeta] = {}                 # req -> tokens/blocks so far
        # Worker state.
        self._view: str | None = None
        self._failed_blocks: set[int] = set()
        self._load_failed_reqs: set[str] = set()
        self._last_stats: dict[str, int] = {}
        logger.info("kvtier: %s connector, %s, namespace model=%s layers=%d kv_heads=%d "
                    "head_dim=%d dtype=%s packing=%s block=%d chunk=%d tp=%d/%d tenant=%r",
                    role.name.lower(),
                    f"kvtierd {self._cfg.daemon_address}" if not self._cfg.embedded else
                    f"embedded host {self._cfg.host_capacity_bytes} B"
                    + (f" + disk {self._cfg.disk_dir}" if self._cfg.disk_dir else ""),
                    self._ns.model_id, self._ns.num_layers, self._ns.num_kv_heads,
                    self._ns.head_dim, self._ns.dtype, self._ns.packing, self._block_size,
                    self._cfg.chunk_tokens, self._ns.tp_rank, self._ns.tp_world_size,
                    self._cfg.tenant)

    # ---------------------------------------------------------------- scheduler half
    def get_num_new_matched_tokens(self, request: "Request",
                                   num_computed_tokens: int) -> tuple[int | None, bool]:
        tokens = list(request.prompt_token_ids or [])
        try:
            load, _ = self._native.lookup(tokens, num_computed_tokens)
        except KvtError as e:  # a broken cache never fails a request: it is a miss
            logger.warning("kvtier: lookup failed (%s); computing request %s", e,
                           request.request_id)
            load = 0
        if load <= num_computed_tokens:
            self._pending_loads.pop(request.request_id, None)
            return 0, False
        self._pending_loads[request.request_id] = (load, num_computed_tokens, tokens)
        return load - num_computed_tokens, False

    def update_state_after_alloc(self, request: "Request", blocks: "KVCacheBlocks",
                                 num_external_tokens: int):
        if num_external_tokens == 0:
            self._pending_loads.pop(request.request_id, None)

    def build_connector_meta(self, scheduler_output: "SchedulerOutput") -> KVConnectorMetadata:
        meta = KVTierConnectorMetadata()
        n_sched = scheduler_output.num_scheduled_tokens
        for nr in scheduler_output.scheduled_new_reqs:
            tokens = list(nr.prompt_token_ids or [])
            load, local, _ = self._pending_loads.pop(nr.req_id, (0, 0, None))
            rm = ReqMeta(nr.req_id, tokens, list(nr.block_ids[0]), load_tokens=load,
                         skip_tokens=local)
            done = nr.num_computed_tokens + n_sched.get(nr.req_id, 0)
            rm.store = done >= len(tokens) and len(tokens) >= self._cfg.chunk_tokens
            meta.requests.append(rm)
            if not rm.store and done < len(tokens):
                self._tracked[nr.req_id] = ReqMeta(nr.req_id, tokens, list(rm.block_ids))
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            new_blocks = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids and req_id in self._pending_loads:
                # A preempted request resumes with new blocks and its own lookup: load
                # into those (its blocks are the whole list again after a preemption).
                load, local, tokens = self._pending_loads.pop(req_id)
                meta.requests.append(ReqMeta(req_id, tokens,
                                             list(new_blocks[0]) if new_blocks else [],
                                             load_tokens=load, skip_tokens=local))
            t = self._tracked.get(req_id)
            if t is None:
                continue
            if req_id in cached.resumed_req_ids:
                t.block_ids = list(new_blocks[0]) if new_blocks else []
            elif new_blocks:
                t.block_ids.extend(new_blocks[0])
            done = cached.num_computed_tokens[i] + n_sched.get(req_id, 0)
            if done >= len(t.token_ids):
                del self._tracked[req_id]
                if len(t.token_ids) >= self._cfg.chunk_tokens:
                    meta.requests.append(ReqMeta(req_id, t.token_ids, list(t.block_ids),
                                                 store=True))
        return meta

    def request_finished(self, request: "Request",
                         block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        # Stores copy their blocks inside the step that completes the prefill (before the
        # step returns), so the blocks are free to reuse as soon as vLLM frees them.
        self._tracked.pop(request.request_id, None)
        self._pending_loads.pop(request.request_id, None)
        return False, None

    # ---------------------------------------------------------------- worker half
    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]):
        names = sorted(kv_caches, key=_layer_index)
        if len(names) != self._ns.num_layers:
            raise ValueError(f"kvtier: vLLM registered {len(names)} KV cache tensors; the model "
                             f"has {self._ns.num_layers} layers")
        first = kv_caches[names[0]]
        layout, num_blocks = detect_layout(first, self._ns.num_kv_heads, self._ns.head_dim,
                                           self._block_size)
        ptrs = [kv_caches[n].data_ptr() for n in names]
        if layout == "cpu-blocks":
            if self._ns.layout != "flashinfer" or not self._ns.packing.startswith("cpu-"):
                raise ValueError(f"kvtier: CPU-packed KV caches but the namespace says "
                                 f"{self._ns.packing}")
            for n in names:
                if not kv_caches[n].is_contiguous():
                    raise ValueError(f"kvtier: KV cache {n} is not contiguous")
            block_bytes = first[0].numel() * first.element_size()
            self._native.register_block_view(ptrs, self._block_size, num_blocks, block_bytes)
        else:
            if layout != self._ns.layout:
                raise ValueError(f"kvtier: the KV cache layout is {layout} but the scheduler "
                                 f"derived {self._ns.layout} from the config")
            dev = DEVICE_CUDA if first.is_cuda else DEVICE_CPU
            self._native.register_kv_view(dev, layout, self._ns.dtype, self._ns.num_layers,
                                          self._ns.num_kv_heads, self._ns.head_dim,
                                          self._block_size, num_blocks, ptrs)
        self._view = layout
        logger.info("kvtier: registered %d layers, layout %s, %d blocks of %d tokens",
                    len(names), layout, num_blocks, self._block_size)

    def _slots(self, block_ids: list[int], n: int) -> list[int]:
        B = self._block_size
        return [block_ids[i // B] * B + i % B for i in range(n)]

    def start_load_kv(self, forward_context: "ForwardContext", **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, KVTierConnectorMetadata)
        B = self._block_size
        for rm in meta.requests:
            if rm.load_tokens <= 0:
                continue
            try:
                if self._view == "cpu-blocks":
                    loaded = self._native.load_blocks(rm.token_ids, rm.load_tokens,
                                                      rm.block_ids, rm.skip_tokens)
                else:
                    loaded = self._native.load_slots(rm.token_ids, rm.load_tokens,
                                                     self._slots(rm.block_ids, rm.load_tokens),
                                                     rm.skip_tokens)
            except KvtError as e:
                logger.warning("kvtier: load for request %s failed (%s)", rm.req_id, e)
                loaded = 0
            if loaded < rm.load_tokens:
                # vLLM recomputes these blocks; until then they hold no valid KV, so the
                # request's store of this step (if any) is dropped (wait_for_save).
                self._load_failed_reqs.add(rm.req_id)
                first = max(loaded, rm.skip_tokens) // B
                bad = rm.block_ids[first:rm.load_tokens // B]
                self._failed_blocks.update(bad)
                logger.warning("kvtier: request %s: %d of %d tokens loaded; %d blocks to "
                               "recompute", rm.req_id, loaded, rm.load_tokens, len(bad))

    def wait_for_layer_load(self, layer_name: str) -> None:
        # start_load_kv completes every load (verified) before the forward starts.
        return

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor,
                      attn_metadata: "AttentionMetadata", **kwargs: Any) -> None:
        # Chunks hold every layer: they are stored once all layers ran (wait_for_save).
        return

    def wait_for_save(self):
        meta = self._get_connector_metadata()
        assert isinstance(meta, KVTierConnectorMetadata)
        C = self._cfg.chunk_tokens
        failed, self._load_failed_reqs = self._load_failed_reqs, set()
        for rm in meta.requests:
            if not rm.store or rm.req_id in failed:
                continue
            n = len(rm.token_ids) // C * C
            try:
                if self._view == "cpu-blocks":
                    self._native.store_blocks(rm.token_ids[:n], rm.block_ids)
                else:
                    self._native.store_slots(rm.token_ids[:n], self._slots(rm.block_ids, n))
            except KvtError as e:
                logger.warning("kvtier: store for request %s failed (%s)", rm.req_id, e)

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        return None, None

    def get_block_ids_with_load_errors(self) -> set[int]:
        bad, self._failed_blocks = self._failed_blocks, set()
        return bad

    # ---------------------------------------------------------------- metrics
    def kvtier_stats(self) -> dict[str, int]:
        """kvtier's counters for this half's native connector (cumulative)."""
        return self._native.stats()

    def get_kv_connector_stats(self) -> KVConnectorStats | None:
        now = self._native.stats()
        delta = {f"kvtier_{k}": v - self._last_stats.get(k, 0) for k, v in now.items()}
        self._last_stats = now
        if not any(delta.values()):
            return None
        return KVTierStats(data=delta)

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None) -> KVConnectorStats | None:
        return KVTierStats(data=dict(data)) if data is not None else KVTierStats()

    def flush(self) -> None:
        """Waits until every background store reached the cache (tests, shutdown)."""
        self._native.flush()

    def shutdown(self):
        """Drains pending stores (down to the disk tier) and closes the native store."""
        native, self._native = self._native, _CLOSED
        if native is _CLOSED:
            return None
        with _SHARED_LOCK:
            for k, v in list(_SHARED.items()):
                if v is native:
                    del _SHARED[k]
        native.close()
        return None
