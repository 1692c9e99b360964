"""kvtier as a vLLM v1 KV connector (tested against vLLM 0.32.0).

Enable it with

    --kv-transfer-config '{"kv_connector":"KVTierConnector",
                           "kv_connector_module_path":"kvtier.vllm",
                           "kv_role":"kv_both",
                           "kv_connector_extra_config":{"kvtierd":"unix:///run/kvtierd.sock"}}'

(keys of kv_connector_extra_config: kvtier/vllm_config.py). Every decision and byte copy
runs in libkvtier (kvtier._native, ctypes, GIL released); this module only maps vLLM's
requests and blocks onto kvtier's token chunks.

Flow per engine step (scheduler half: KVTierScheduler in kvtier/vllm_scheduler.py;
worker half: KVTierConnector below):
  scheduler  get_num_new_matched_tokens -> kvtier Lookup (cost model): tokens to load, and
                                           whether the load is asynchronous (load_async)
             update_state_after_alloc   -> remembers the request's load and, for an async
                                           load, its blocks
             build_connector_meta       -> per request: tokens, block ids, what to load
                                           (sync or async), whether its prefill completes
                                           this step (store), the Mamba / linear-attention
                                           states vLLM kept this step (state saves); the
                                           step's preempted requests
             request_finished           -> True (blocks stay allocated) while the request's
                                           store may still be copying its blocks
  worker     handle_preemptions         -> waits until stores of preempted requests copied
                                           their blocks (before vLLM reuses them)
             start_load_kv              -> sync loads: a thread fetches and verifies every
                                           chunk, then writes them layer by layer
                                           (load_per_layer; else all before the forward);
                                           async loads: starts them on a background thread
             wait_for_layer_load        -> waits until this layer of the step's sync loads
                                           is written (per-layer loads only)
             wait_for_save              -> after the forward: hands the prompt's complete
                                           chunks to a background store thread, which copies
                                           them out of the blocks and stores them
             get_finished               -> finished_recving: async loads that ended (failed
                                           blocks go to get_block_ids_with_load_errors in
                                           the same step, and vLLM recomputes them: never
                                           wrong KV); finished_sending: finished requests
                                           whose store copied their blocks (vLLM frees them)
"""

from __future__ import annotations

import re
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import torch

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorTransferResults,
    SupportsHMA,
)
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats
from vllm.logger import init_logger

from kvtier._native import (
    DEVICE_CPU,
    DEVICE_CUDA,
    STAT_FIELDS,
    KvtError,
)
from kvtier.vllm_support import (
    _CLOSED,
    _SCHEDULER_STATS,
    _SHARED,
    _SHARED_LOCK,
    KVTierPromMetrics,
    KVTierStats,
    GroupStores,
    _LayeredLoad,
    _open_groups,
    _open_native,
    _timed,
    detect_layout,
    timing,
)
from kvtier.vllm_scheduler import (  # noqa: F401 - the metadata classes are public here
    KVTierConnectorMetadata,
    KVTierScheduler,
    ReqMeta,
)
from kvtier.vllm_config import (
    derive_namespace,
    group_namespaces,
    is_plain_layout,
    kv_groups,
    parse_extra_config,
)

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.attention.backend import AttentionMetadata
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

# Under vLLM's "vllm" logger, so vLLM's handler and VLLM_LOGGING_LEVEL apply: a logger
# outside that tree ("kvtier.vllm" before) printed nothing below WARNING, and so not the
# start-up line with the namespace (issue 21 item 14).
logger = init_logger("vllm.kvtier")

__all__ = ["KVTierConnector", "KVTierConnectorMetadata", "KVTierStats", "detect_layout",
           "timing"]


def _layer_index(name: str) -> int:
    m = re.search(r"layers\.(\d+)\.", name)
    return int(m.group(1)) if m else -1


class KVTierConnector(KVConnectorBase_V1, SupportsHMA):
    """kvtier's vLLM connector, the class vLLM instantiates for both roles (see the module
    docstring): on a worker it is the worker half (loads, stores, per-layer waits); on
    the scheduler it hands vLLM's scheduler-side calls to its KVTierScheduler
    (kvtier/vllm_scheduler.py). Both roles share the configuration, the namespace(s)
    and the native store set up here.

    Hybrid KV cache manager (SupportsHMA): vLLM's KV cache groups (full attention,
    sliding window, Mamba / linear-attention state in vLLM's "align" mode) each get their
    own kvtier namespace and native connector (GroupStores); a prompt's chunks load only
    when every group holds them, a sliding-window group stores and loads only the blocks
    vLLM keeps, and a state group the states vLLM keeps at chunk boundaries. A layout
    with a group kvtier does not handle (a state group without vLLM's prefix caching...)
    runs cold: no lookups, no stores (docs/vllm.md, "Hybrid models")."""

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
        # KV cache groups (vLLM's hybrid KV cache manager). A plain layout (one
        # full-attention group) keeps the one namespace kvtier always derived.
        self._groups = kv_groups(kv_cache_config) if kv_cache_config is not None else []
        hma = not getattr(vllm_config.scheduler_config, "disable_hybrid_kv_cache_manager",
                          True)
        self._multi = bool(self._groups) and not is_plain_layout(self._groups)
        self._inert = any(g.kind == "unsupported" or not g.transfer for g in self._groups)
        self._state = not self._inert and any(g.kind == "state" for g in self._groups)
        if self._state:
            self._fit_chunk_tokens(ktc.kv_connector_extra_config or {})
        # A layout kvtier does not store may have blocks of any size (Mamba hybrids align
        # attention blocks to the state's page: 384 tokens, 2048...).
        self._ns = derive_namespace(vllm_config, self._cfg, tp_rank=tp_rank,
                                    check_block_size=not self._inert)
        self._block_size = self._ns.block_size
        self._group_ns = (group_namespaces(self._ns, self._groups, hma) if self._multi
                          else [self._ns])
        if self._multi and not self._cfg.load_async:
            # vLLM 0.32 takes block-level load failures (a sync load's only report) from
            # one-group layouts only; an async load's failure is per request.
            logger.info("kvtier: %d KV cache groups: loads run asynchronously "
                        "(load_async false applies to one-group layouts)", len(self._groups))
            self._cfg.load_async = True
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
        if self._multi and not self._inert:
            self._native = _open_groups(self._cfg, self._groups, self._group_ns)
        else:
            self._native = _open_native(self._cfg, self._ns)
        if self._inert:
            logger.warning(
                "kvtier: KV cache group(s) %s are not handled by kvtier (%s): this model "
                "runs cold (no loads, no stores)%s",
                [g.index for g in self._groups if g.kind == "unsupported" or not g.transfer],
                ", ".join(sorted({g.spec for g in self._groups if g.kind == "unsupported"}))
                or "no KV transfer",
                "; kvtier stores a Mamba / linear-attention state only where vLLM keeps it "
                "at block boundaries, with prefix caching on (--enable-prefix-caching)"
                if any(g.spec == "MambaSpec" and g.kind == "unsupported" for g in self._groups)
                else "")
        # vLLM's kv_role: kv_consumer only loads, kv_producer only stores, kv_both does both.
        self._loads_on, self._stores_on = ktc.is_kv_consumer, ktc.is_kv_producer
        if self._inert:
            self._loads_on = self._stores_on = False
        # The scheduler half (vllm_scheduler.KVTierScheduler); None on a worker.
        self._scheduler: KVTierScheduler | None = None
        if role == KVConnectorRole.SCHEDULER:
            self._scheduler = KVTierScheduler(self._cfg, self._ns, self._groups, self._native,
                                              self._multi, self._state, self._loads_on,
                                              self._stores_on)
        # Worker state (the engine thread only; futures run on the two pools).
        self._failed_recving: set[str] = set()  # multi-group: async loads that failed
        self._view: str | None = None
        self._failed_blocks: set[int] = set()
        self._load_failed_reqs: set[str] = set()
        self._loads: dict[str, tuple[Future, ReqMeta]] = {}  # async loads in flight
        self._stores: dict[str, Future] = {}    # req -> its latest store (copy of blocks)
        self._finished: set[str] = set()        # finished reqs whose store is not reported
        self._load_pool: ThreadPoolExecutor | None = None
        self._store_pool: ThreadPoolExecutor | None = None
        self._layer_pool: ThreadPoolExecutor | None = None
        # Per-layer sync loads (load_per_layer): layer names in kvtier's layer order.
        self._layer_names: list[str] = []
        self._layer_of: dict[str, int] = {}
        self._layer_names_set: set[str] = set()
        self._waited_layers: set[str] = set()   # wait_for_layer_load calls of this step
        self._layers_confirmed = False          # vLLM was seen waiting for every layer
        self._layered: _LayeredLoad | None = None  # this step's per-layer load
        self._layer_timeout_s = 2 * self._cfg.daemon_deadline_ms / 1000 + 10
        self.layered_loads = 0                  # per-layer loads that completed
        if role == KVConnectorRole.WORKER:
            self._load_pool = ThreadPoolExecutor(1, thread_name_prefix="kvtier-load")
            self._store_pool = ThreadPoolExecutor(1, thread_name_prefix="kvtier-store")
            if self._cfg.load_per_layer and not self._cfg.loads_async and not self._multi:
                self._layer_pool = ThreadPoolExecutor(1, thread_name_prefix="kvtier-layers")
        self._last_stats: dict[str, int] = {}
        self._stat_fields = (_SCHEDULER_STATS if role == KVConnectorRole.SCHEDULER else
                             tuple(f for f in STAT_FIELDS if f not in _SCHEDULER_STATS))
        self.namespace_hex = self._native.namespace_hex()
        logger.info("kvtier: %s connector, %s, namespace %s (kvtier ls/inspect/evict --ns %s) "
                    "model=%s layers=%d kv_heads=%d "
                    "head_dim=%d dtype=%s packing=%s block=%d chunk=%d tp=%d/%d tenant=%r "
                    "loads=%s",
                    role.name.lower(),
                    f"kvtierd {self._cfg.daemon_address}" if not self._cfg.embedded else
                    f"embedded host {self._cfg.host_capacity_bytes} B"
                    + (f" + disk {self._cfg.disk_dir}" if self._cfg.disk_dir else ""),
                    self.namespace_hex, self.namespace_hex,
                    self._ns.model_id, self._ns.num_layers, self._ns.num_kv_heads,
                    self._ns.head_dim, self._ns.dtype, self._ns.packing, self._block_size,
                    self._cfg.chunk_tokens, self._ns.tp_rank, self._ns.tp_world_size,
                    self._cfg.tenant, "async" if self._cfg.loads_async else "sync")
        self._daemon_watch: threading.Thread | None = None
        self._daemon_watch_stop = threading.Event()
        if role == KVConnectorRole.SCHEDULER and not self._cfg.embedded:
            self._watch_daemon()

    def _fit_chunk_tokens(self, extra: dict) -> None:
        """State layouts: every group's block size must divide chunk_tokens (a state is
        kept at block boundaries only). Unset chunk_tokens becomes the smallest multiple
        of the block sizes >= the default (Qwen3.5's 384-token blocks: 384); a set one
        that does not fit is a ValueError naming the sizes."""
        import math
        lcm = math.lcm(*(g.block_size for g in self._groups))
        if self._cfg.chunk_tokens % lcm == 0:
            return
        if "chunk_tokens" in extra:
            raise ValueError(
                f"kv_connector_extra_config.chunk_tokens = {self._cfg.chunk_tokens}: this "
                f"model's KV cache groups have block sizes "
                f"{sorted({g.block_size for g in self._groups})} (a Mamba / linear-attention "
                f"state is kept at block boundaries only); use a multiple of {lcm}")
        self._cfg.chunk_tokens = -(-self._cfg.chunk_tokens // lcm) * lcm
        logger.info("kvtier: chunk_tokens %d (a multiple of the state group's block size)",
                    self._cfg.chunk_tokens)

    def _watch_daemon(self) -> None:
        """Says at start-up whether kvtierd answers (issue 21 item 11). When it does not:
        one warning now, then a thread asks every second and logs once when it answers.
        Meanwhile every lookup misses and stores are dropped (the engine runs cold)."""
        addr = self._cfg.daemon_address
        why = self._native.daemon_check(1000)
        if why is None:
            logger.info("kvtier: kvtierd at %s answers", addr)
            return
        logger.warning("kvtier: the cache daemon kvtierd at %s does not answer (%s): vLLM runs "
                       "cold (computes every prompt, stores nothing) until it answers; kvtier "
                       "keeps trying and logs when it does", addr, why)

        def poll():
            while not self._daemon_watch_stop.wait(1.0):
                native = self._native
                if native is _CLOSED:
                    return
                try:
                    if native.daemon_check(1000) is None:
                        logger.info("kvtier: kvtierd at %s answers now: loads and stores "
                                    "resume (after the remote tier's reconnect cool-down, "
                                    "about a second)", addr)
                        return
                except KvtError:
                    return
        self._daemon_watch = threading.Thread(target=poll, name="kvtier-daemon-watch",
                                              daemon=True)
        self._daemon_watch.start()

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: dict[str, Any]) -> bool:
        """vLLM calls this while it builds its config (config/vllm.py, when CUDA graphs
        are on), before any engine process starts: the earliest moment kvtier sees its
        extra config, so a bad key stops vLLM here (ValueError naming the key) instead of
        after the model loads (issue 21 item 13). On the CPU backend and with
        --enforce-eager vLLM does not call it; the connector's constructors check the
        same keys (see docs/vllm.md for when)."""
        parse_extra_config(extra_config)
        return super().requires_piecewise_for_cudagraph(extra_config)

    # ---------------------------------------------------------------- scheduler half
    def get_num_new_matched_tokens(self, request: "Request",
                                   num_computed_tokens: int) -> tuple[int | None, bool]:
        return self._scheduler.get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(self, request: "Request", blocks: "KVCacheBlocks",
                                 num_external_tokens: int):
        return self._scheduler.update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output: "SchedulerOutput") -> KVConnectorMetadata:
        return self._scheduler.build_connector_meta(scheduler_output)

    def update_connector_output(self, connector_output) -> None:
        return self._scheduler.update_connector_output(connector_output)

    def request_finished(self, request: "Request",
                         block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        return self._scheduler.request_finished(request, block_ids)

    def request_finished_all_groups(
            self, request: "Request",
            block_ids: tuple[list[int], ...]) -> tuple[bool, dict[str, Any] | None]:
        """vLLM's hybrid KV cache manager calls this (not request_finished) once the
        request finished in every group: the same decision, for all its groups' blocks
        (a store copies every group's blocks, so vLLM keeps them all until the worker
        reports the request in finished_sending)."""
        return self.request_finished(request, list(block_ids[0]) if block_ids else [])

    # ---------------------------------------------------------------- worker half
    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]):
        if self._inert:
            return  # a layout kvtier does not handle: nothing is loaded or stored
        if self._multi:
            self._register_groups(kv_caches)
            return
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
        self._layer_names = names
        self._layer_of = {n: i for i, n in enumerate(names)}
        self._layer_names_set = set(names)
        logger.info("kvtier: registered %d layers, layout %s, %d blocks of %d tokens",
                    len(names), layout, num_blocks, self._block_size)

    def _register_groups(self, kv_caches: dict[str, torch.Tensor]) -> None:
        """Multi-group layouts: each group's native connector gets its group's layers
        (vLLM's order inside the group), as a CPU block view. The GPU layouts' paged
        copy is not wired for groups (no GPU here to test it): ValueError."""
        stores: GroupStores = self._native
        for grp, ns, native in zip(self._groups, self._group_ns, stores.natives):
            missing = [n for n in grp.layer_names if n not in kv_caches]
            if missing:
                raise ValueError(f"kvtier: KV group {grp.index} names layers vLLM did not "
                                 f"register: {missing}")
            if grp.kind == "state":
                self._register_state_group(grp, native, kv_caches)
                continue
            tensors = [kv_caches[n] for n in grp.layer_names]
            layout, num_blocks = detect_layout(tensors[0], ns.num_kv_heads, ns.head_dim,
                                               grp.block_size)
            if layout != "cpu-blocks" or not ns.packing.startswith("cpu-"):
                raise ValueError(f"kvtier: KV group {grp.index} has layout {layout} "
                                 f"(packing {ns.packing}); kvtier handles several KV groups "
                                 "on vLLM's CPU block layout only")
            block_bytes = tensors[0][0].numel() * tensors[0].element_size()
            for n, t in zip(grp.layer_names, tensors):
                if not t.is_contiguous():
                    raise ValueError(f"kvtier: KV cache {n} is not contiguous")
            native.register_block_view([t.data_ptr() for t in tensors], grp.block_size,
                                       num_blocks, block_bytes)
        self._view = "cpu-blocks"
        self._layer_names = [n for g in self._groups for n in g.layer_names]
        self._layer_of = {n: i for i, n in enumerate(self._layer_names)}
        self._layer_names_set = set(self._layer_names)
        logger.info("kvtier: registered %d KV groups (%s), %d layers",
                    len(self._groups), ", ".join(f"{g.kind} x{len(g.layer_names)}"
                                                 + (f" window {g.window}" if g.window else "")
                                                 for g in self._groups),
                    len(self._layer_names))

    def _register_state_group(self, grp, native, kv_caches: dict) -> None:
        """A state group's layers as a block view: vLLM's CPU runner hands each Mamba /
        gated-DeltaNet layer one tensor [num_blocks, ...] whose block b is the page at
        base + b * page_bytes (its conv and recurrent states inside); a list of state
        tensors (other runners) must share that page stride and base."""
        ptrs, num_blocks = [], None
        for n in grp.layer_names:
            t = kv_caches[n]
            parts = list(t) if isinstance(t, (list, tuple)) else [t]
            if t is None or not parts or any(p.is_cuda for p in parts):
                raise ValueError(f"kvtier: state layer {n}: kvtier handles state groups on "
                                 "vLLM's CPU backend only")
            strides = {p.stride(0) * p.element_size() for p in parts}
            if strides != {grp.page_bytes}:
                raise ValueError(f"kvtier: state layer {n}: block stride {sorted(strides)} B, "
                                 f"not vLLM's page of {grp.page_bytes} B")
            ptrs.append(min(p.data_ptr() for p in parts))
            nb = min(p.shape[0] for p in parts)
            num_blocks = nb if num_blocks is None else min(num_blocks, nb)
        native.register_block_view(ptrs, grp.block_size, num_blocks, grp.page_bytes)

    def _slots(self, block_ids: list[int], n: int) -> list[int]:
        B = self._block_size
        return [block_ids[i // B] * B + i % B for i in range(n)]

    def _load(self, rm: ReqMeta) -> int:
        """Loads rm's promised tokens into its blocks; the leading tokens now held (a
        failure of the cache is 0 loaded, never an exception: vLLM recomputes)."""
        try:
            if rm.group_block_ids is not None:
                return self._native.load(rm.token_ids, rm.load_tokens, rm.group_block_ids,
                                         rm.skip_tokens)
            if self._view == "cpu-blocks":
                return self._native.load_blocks(rm.token_ids, rm.load_tokens, rm.block_ids,
                                                rm.skip_tokens)
            return self._native.load_slots(rm.token_ids, rm.load_tokens,
                                           self._slots(rm.block_ids, rm.load_tokens),
                                           rm.skip_tokens)
        except KvtError as e:
            logger.warning("kvtier: load for request %s failed (%s)", rm.req_id, e)
            return 0

    def _loaded(self, rm: ReqMeta, loaded: int) -> None:
        """Records a load's outcome: blocks not loaded go to get_block_ids_with_load_errors."""
        if loaded >= rm.load_tokens:
            return
        if rm.group_block_ids is not None:
            # Block ids are per group: vLLM 0.32 takes a multi-group load's failure per
            # request (failed_recving, async loads only): it recomputes the whole prompt.
            self._failed_recving.add(rm.req_id)
            logger.warning("kvtier: request %s: %d of %d tokens loaded in every KV group; "
                           "vLLM recomputes the prompt", rm.req_id, loaded, rm.load_tokens)
            return
        B = self._block_size
        bad = rm.block_ids[max(loaded, rm.skip_tokens) // B:rm.load_tokens // B]
        self._failed_blocks.update(bad)
        logger.warning("kvtier: request %s: %d of %d tokens loaded; %d blocks to recompute",
                       rm.req_id, loaded, rm.load_tokens, len(bad))

    def _store(self, rm: ReqMeta) -> None:
        C = self._cfg.chunk_tokens
        n = len(rm.token_ids) // C * C
        for g, bn, block in rm.state_saves:
            try:
                self._native.store_state(g, rm.token_ids, bn, block)
            except (KvtError, ValueError) as e:
                logger.warning("kvtier: state store for request %s failed (%s)", rm.req_id, e)
        if not rm.store:
            return
        try:
            if rm.group_block_ids is not None:
                if not self._native.store(rm.token_ids[:n], rm.group_block_ids):
                    logger.debug("kvtier: request %s not stored: a KV group's blocks of its "
                                 "chunks were already freed (sliding window)", rm.req_id)
                return
            if self._view == "cpu-blocks":
                self._native.store_blocks(rm.token_ids[:n], rm.block_ids)
            else:
                self._native.store_slots(rm.token_ids[:n], self._slots(rm.block_ids, n))
        except KvtError as e:
            logger.warning("kvtier: store for request %s failed (%s)", rm.req_id, e)

    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata) -> None:
        # vLLM freed the blocks of requests it preempted in this step's schedule and may
        # hand them to other requests in this step: their stores must be done reading.
        for rid in getattr(kv_connector_metadata, "preempted", ()):
            f = self._stores.get(rid)
            if f is not None:
                f.result()
        if self._multi:
            # A sliding-window group's blocks outside the window are freed while the
            # request runs (vLLM's remove_skipped_blocks, no connector call) and may be
            # handed out in this step: every store must be done copying before this
            # step's forward or loads write anything.
            for f in list(self._stores.values()):
                f.result()

    def start_load_kv(self, forward_context: "ForwardContext", **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        assert isinstance(meta, KVTierConnectorMetadata)
        layered: list[ReqMeta] = []
        for rm in meta.requests:
            if rm.load_tokens <= 0:
                continue
            if rm.async_load:
                # The request is not scheduled until get_finished reports it; vLLM keeps
                # its blocks allocated until then, even if it is aborted meanwhile.
                self._loads[rm.req_id] = (self._load_pool.submit(self._load, rm), rm)
                continue
            if self._per_layer_ready():
                layered.append(rm)
                continue
            loaded = self._load(rm)
            if loaded < rm.load_tokens:
                # vLLM recomputes these blocks in a later step; until then they hold no
                # valid KV, so the request's store of this step (if any) is dropped.
                self._load_failed_reqs.add(rm.req_id)
            self._loaded(rm, loaded)
        if layered:
            job = _LayeredLoad(layered, len(self._layer_names))
            self._layered = job
            job.future = self._layer_pool.submit(self._run_layered, job)

    # ------------------------------------------------------------ per-layer sync loads
    def _per_layer_ready(self) -> bool:
        """Whether this step's sync loads go layer by layer: configured, the CPU block
        view, and vLLM was seen calling wait_for_layer_load for every layer in one
        forward (were a layer's wait skipped, its KV could be read before it is written)."""
        return (self._layer_pool is not None and self._view == "cpu-blocks"
                and self._layers_confirmed)

    def _run_layered(self, job: "_LayeredLoad") -> None:
        """The load thread: fetches and verifies every chunk of every request (nothing
        written), then writes layer 0 of all of them and releases layer 0, then layer 1,
        ... Every event is set when this returns, whatever happened: no waiter hangs."""
        fetched: list = []
        try:
            for rm in job.reqs:
                try:
                    f = self._native.fetch_blocks(rm.token_ids, rm.load_tokens, rm.block_ids,
                                                  rm.skip_tokens)
                except KvtError as e:
                    logger.warning("kvtier: load for request %s failed (%s)", rm.req_id, e)
                    f = None
                fetched.append(f)
                job.loaded[rm.req_id] = f.loaded_tokens if f is not None else 0
            for layer in range(job.num_layers):
                with job.lock:
                    if job.cancelled:
                        break
                    self._scatter_layer(job, fetched, layer)
                    job.scattered = layer + 1
                job.events[layer].set()
        except BaseException as e:  # noqa: BLE001 - a failed write is a failed load
            logger.warning("kvtier: per-layer load failed (%s); its blocks are recomputed", e)
            with job.lock:
                job.cancelled = True
        finally:
            for f in fetched:
                if f is not None:
                    f.close()
            for ev in job.events:
                ev.set()

    def _scatter_layer(self, job: "_LayeredLoad", fetched: list, layer: int) -> None:
        """Writes `layer` of every fetched chunk into its request's blocks (GIL released)."""
        for f in fetched:
            if f is not None and f.loaded_tokens > 0:
                f.scatter_layer(layer)

    def _finish_layered(self) -> None:
        """After the forward: records the outcome of this step's per-layer load. A load
        that was cancelled (a layer wait timed out), failed while writing, or whose layers
        vLLM did not all wait for counts as not loaded: its blocks are recomputed."""
        job, self._layered = self._layered, None
        if job is None:
            return
        if not self._layer_names_set <= self._waited_layers:
            with job.lock:
                job.cancelled = True  # a layer may have been read unwritten; none after this
        try:
            job.future.result(timeout=self._layer_timeout_s)
        except Exception:  # noqa: BLE001 - still fetching: it writes nothing once cancelled
            with job.lock:
                job.cancelled = True
        with job.lock:
            ok = not job.cancelled and job.scattered == job.num_layers
        for rm in job.reqs:
            loaded = job.loaded.get(rm.req_id, 0) if ok else 0
            if loaded < rm.load_tokens:
                self._load_failed_reqs.add(rm.req_id)
            self._loaded(rm, loaded)
        if ok:
            self.layered_loads += 1

    def wait_for_layer_load(self, layer_name: str) -> None:
        # vLLM calls this per layer on the CPU backend too (attention's
        # maybe_transfer_kv_layer), before the layer's attention reads its KV. A sync load
        # going layer by layer (_run_layered) releases each layer once every chunk's part
        # of it is written; otherwise there is nothing to wait for (a whole sync load is
        # complete before the forward, an async load's request joins the batch only when
        # its load is complete).
        self._waited_layers.add(layer_name)
        job = self._layered
        if job is None:
            return
        i = self._layer_of.get(layer_name)
        ev = job.events[i] if i is not None else job.events[-1]
        if not ev.wait(self._layer_timeout_s):
            logger.warning("kvtier: layer %s not loaded within %.1f s; the load's blocks are "
                           "recomputed", layer_name, self._layer_timeout_s)
            with job.lock:
                job.cancelled = True  # waits for a layer being written; none after it

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor,
                      attn_metadata: "AttentionMetadata", **kwargs: Any) -> None:
        # Chunks hold every layer: they are stored once all layers ran (wait_for_save).
        return

    def wait_for_save(self):
        meta = self._get_connector_metadata()
        assert isinstance(meta, KVTierConnectorMetadata)
        self._finish_layered()
        if self._layer_names_set and self._layer_names_set <= self._waited_layers:
            self._layers_confirmed = True  # vLLM waits for every layer: per-layer is safe
        self._waited_layers = set()
        failed, self._load_failed_reqs = self._load_failed_reqs, set()
        for rm in meta.requests:
            if not rm.store and not rm.state_saves:
                continue
            if rm.req_id in failed:  # never store blocks that were not loaded
                f = Future()
                f.set_result(None)
            else:
                f = self._store_pool.submit(self._store, rm)
            self._stores[rm.req_id] = f  # reported in finished_sending (request_finished)

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        recving = set()
        for rid, (f, rm) in list(self._loads.items()):
            if f.done():
                del self._loads[rid]
                self._loaded(rm, f.result())
                recving.add(rid)
        self._finished.update(r for r in finished_req_ids if r in self._stores)
        sending = {r for r in self._finished if self._stores[r].done()}
        for r in sending:
            self._finished.discard(r)
            del self._stores[r]
        return sending or None, recving or None

    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        """get_finished's sets, plus (multi-group layouts) the async loads that failed in
        failed_recving: their block ids are per group, so vLLM recomputes the request."""
        sending, recving = self.get_finished(finished_req_ids)
        failed, self._failed_recving = self._failed_recving, set()
        return KVConnectorTransferResults(finished_sending=set(sending or ()),
                                          finished_recving=set(recving or ()) | failed,
                                          failed_recving=failed)

    def get_block_ids_with_load_errors(self) -> set[int]:
        bad, self._failed_blocks = self._failed_blocks, set()
        return bad

    # ---------------------------------------------------------------- metrics
    def kvtier_stats(self) -> dict[str, int]:
        """kvtier's counters for this half's native connector (cumulative)."""
        return self._native.stats()

    def get_kv_connector_stats(self) -> KVConnectorStats | None:
        """kvtier's counters since the last call (this half's fields only: the scheduler
        reports lookups, the worker loads and stores), or None when none moved."""
        try:
            now = self._native.stats()
        except KvtError:  # shut down
            return None
        delta = {f"kvtier_{k}": now[k] - self._last_stats.get(k, 0) for k in self._stat_fields
                 if k in now}
        self._last_stats = now
        if not any(delta.values()):
            return None
        return KVTierStats(data=delta)

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None) -> KVConnectorStats | None:
        return KVTierStats(data=dict(data)) if data is not None else KVTierStats()

    @classmethod
    def build_prom_metrics(cls, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        return KVTierPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    def flush(self) -> None:
        """Waits until every background store reached the cache (tests, shutdown)."""
        for f in list(self._stores.values()):
            f.result()
        self._native.flush()

    def shutdown(self):
        """Drains pending stores (down to the disk tier) and closes the native store."""
        self._daemon_watch_stop.set()
        for pool in (self._load_pool, self._store_pool, self._layer_pool):
            if pool is not None:
                pool.shutdown(wait=True)  # in-flight copies finish before the store closes
        if self._scheduler is not None:
            self._scheduler.release_leases()  # before its store closes (kvt_lookup_pinned)
            self._scheduler.native = _CLOSED
        native, self._native = self._native, _CLOSED
        if native is _CLOSED:
            return None
        with _SHARED_LOCK:
            for k, v in list(_SHARED.items()):
                if v[0] is native:
                    v[1] -= 1
                    # The scheduler half only looks up: it leaves the store open for the
                    # worker's copies. The worker half (pools drained above) closes it;
                    # a later lookup by the scheduler is then a miss (KvtError).
                    if v[1] > 0 and self._load_pool is None:
                        return None
                    del _SHARED[k]
        native.close()
        return None


for _name in ("get_num_new_matched_tokens", "update_state_after_alloc", "build_connector_meta",
              "update_connector_output", "request_finished", "handle_preemptions",
              "start_load_kv", "wait_for_layer_load", "save_kv_layer", "wait_for_save",
              "get_finished", "get_block_ids_with_load_errors", "get_kv_connector_stats",
              "_store"):
    setattr(KVTierConnector, _name, _timed(_name, getattr(KVTierConnector, _name)))
del _name
