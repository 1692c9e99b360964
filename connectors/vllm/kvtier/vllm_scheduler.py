"""The scheduler half of kvtier's vLLM connector (kvtier/vllm.py): what vLLM's scheduler
process decides with kvtier, per request. It looks prompts up (with the store's pins on
what a lookup promised), remembers each request's loads, tokens and blocks, and builds
the metadata the worker half acts on: what to load into which blocks, which prompts'
chunks to store once their prefill completes, which states of a Mamba /
linear-attention group to store (docs/vllm.md, "Hybrid models"), which requests vLLM
preempted. It moves no bytes: the worker half (KVTierConnector on the worker) does."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata
from vllm.logger import init_logger

from kvtier._native import KvtError
from kvtier.pd_handoff import producer_handoff
from kvtier.vllm_config import KVGroup, KVTierConfig, Namespace
from kvtier.vllm_support import NULL_BLOCK, _add_time

if TYPE_CHECKING:
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.request import Request

logger = init_logger("vllm.kvtier")


@dataclass
class ReqMeta:
    req_id: str
    token_ids: list[int]
    block_ids: list[int]   # group 0's (the only group of a plain layout)
    load_tokens: int = 0   # leading tokens to load from kvtier (0 = none)
    skip_tokens: int = 0   # leading tokens vLLM already holds (its prefix cache)
    store: bool = False    # the prompt's prefill completes in this step: store its chunks
    async_load: bool = False  # load in the background; report through get_finished
    # Every group's block ids, vLLM's group order (multi-group layouts only, else None).
    group_block_ids: list[list[int]] | None = None
    # State groups: (group, n, block) = block holds the state after token_ids[:n] once
    # this step's forward ran (vLLM's boundary-state hand-offs); stored after it.
    state_saves: list[tuple[int, int, int]] = field(default_factory=list)


@dataclass
class KVTierConnectorMetadata(KVConnectorMetadata):
    requests: list[ReqMeta] = field(default_factory=list)
    preempted: set[str] = field(default_factory=set)  # requests vLLM preempted this step


def _release(lease) -> None:
    """Drops a lookup's pins (kvt_lease_release); None is ignored."""
    if lease is not None:
        lease.close()


def _group_lists(block_ids) -> list[list[int]]:
    """vLLM's per-group block ids (a tuple of lists, or None) as lists."""
    return [list(ids) for ids in (block_ids or ())]


class KVTierScheduler:
    """The scheduler half: one per scheduler-role KVTierConnector, which hands it vLLM's
    scheduler-side calls (get_num_new_matched_tokens, update_state_after_alloc,
    build_connector_meta, update_connector_output, request_finished).

    `native`: the connector's native store (a GroupStores for several KV groups); the
    connector replaces it with a closed stand-in at shutdown (every lookup then misses).
    `loads_on` / `stores_on`: vLLM's kv_role (a kv_producer never loads, a kv_consumer
    never stores)."""

    def __init__(self, cfg: KVTierConfig, ns: Namespace, groups: list[KVGroup], native,
                 multi: bool, state: bool, loads_on: bool, stores_on: bool):
        self._cfg, self._ns, self._groups, self.native = cfg, ns, groups, native
        self._block_size = ns.block_size
        self._multi, self._state = multi, state
        self._loads_on, self._stores_on = loads_on, stores_on
        # req -> (tokens to load, tokens vLLM holds, prompt tokens), from the lookup
        self._pending_loads: dict[str, tuple[int, int, list[int]]] = {}
        self._tracked: dict[str, ReqMeta] = {}                 # req -> tokens/blocks so far
        self._async_out: list[ReqMeta] = []     # async loads for the next metadata
        self._async_blocks: dict[str, set[int]] = {}  # req -> blocks of its async load
        self._no_reload: set[str] = set()       # reqs whose async load failed: no retry
        self._storing: set[str] = set()         # reqs with a store (worker reports them)
        self._prompts: dict[str, list[int]] = {}  # state layouts: prompts, for state saves
        # The store's pins on each looked-up prefix (kvt_lookup_pinned), so the chunks a
        # lookup promised cannot be evicted before the worker loads them: held from the
        # lookup until the request is scheduled again after the step that loaded it
        # (sync), its load is reported (async), or it is not scheduled / finishes.
        self._leases: dict[str, Any] = {}       # req -> lease, until its load is sent
        self._loading: dict[str, Any] = {}      # req -> lease of a sync load sent out

    @property
    def _native(self):
        return self.native

    def release_leases(self) -> None:
        """Drops every pin (before the native store closes: kvt_lookup_pinned)."""
        for lease in list(self._leases.values()) + list(self._loading.values()):
            _release(lease)
        self._leases.clear()
        self._loading.clear()

    def get_num_new_matched_tokens(self, request: "Request",
                                   num_computed_tokens: int) -> tuple[int | None, bool]:
        rid = request.request_id
        if rid in self._no_reload or not self._loads_on:  # a failed async load; a producer
            return 0, False
        tokens = list(request.prompt_token_ids or [])
        # kvtier's Lookup leaves the last prompt token to compute, so a prompt that ends
        # on a chunk boundary loads one chunk less. An async load may cover the whole
        # prompt: vLLM then recomputes only its last token (the scheduler's
        # _update_waiting_for_remote_kv), so the lookup sees one token more (chunk keys
        # depend on the complete chunks' tokens only).
        # A state layout never loads the whole prompt: the state after the last token
        # cannot be rewound to recompute it.
        probe = tokens + tokens[-1:] if self._cfg.loads_async and not self._state else tokens
        t0 = time.perf_counter()
        try:
            load, _, lease = self._native.lookup_pinned(probe, num_computed_tokens)
        except KvtError as e:  # a broken cache never fails a request: it is a miss
            logger.warning("kvtier: lookup failed (%s); computing request %s", e, rid)
            load, lease = 0, None
        _add_time("native_lookup", time.perf_counter() - t0)
        _release(self._leases.pop(rid, None))  # an earlier lookup of a request not scheduled
        if lease is not None:
            if load > num_computed_tokens:
                self._leases[rid] = lease
            else:
                _release(lease)
        if load <= num_computed_tokens:
            self._pending_loads.pop(rid, None)
            return 0, False
        self._pending_loads[rid] = (load, num_computed_tokens, tokens)
        return load - num_computed_tokens, self._cfg.loads_async

    def update_state_after_alloc(self, request: "Request", blocks: "KVCacheBlocks",
                                 num_external_tokens: int):
        rid = request.request_id
        if num_external_tokens == 0:
            self._pending_loads.pop(rid, None)
            _release(self._leases.pop(rid, None))
            return
        if self._cfg.loads_async and rid in self._pending_loads:
            # The request waits (WAITING_FOR_REMOTE_KVS) with these blocks allocated and
            # is not scheduled: its load goes out with the next metadata on its own.
            load, local, tokens = self._pending_loads.pop(rid)
            lists = _group_lists(blocks.get_block_ids())
            ids = lists[0]
            self._async_out.append(ReqMeta(rid, tokens, ids, load_tokens=load,
                                           skip_tokens=local, async_load=True,
                                           group_block_ids=lists if self._multi else None))
            self._async_blocks[rid] = set(ids[local // self._block_size:
                                              load // self._block_size])

    def build_connector_meta(self, scheduler_output: "SchedulerOutput") -> KVConnectorMetadata:
        meta = KVTierConnectorMetadata(requests=self._async_out,
                                       preempted=set(scheduler_output.preempted_req_ids or ()))
        self._async_out = []
        n_sched = scheduler_output.num_scheduled_tokens
        # A request scheduled again has run the step that loaded it: its pins can go.
        for req_id in scheduler_output.scheduled_cached_reqs.req_ids:
            _release(self._loading.pop(req_id, None))
        for nr in scheduler_output.scheduled_new_reqs:
            tokens = list(nr.prompt_token_ids or [])
            load, local, _ = self._pending_loads.pop(nr.req_id, (0, 0, None))
            lists = _group_lists(nr.block_ids)
            rm = ReqMeta(nr.req_id, tokens, lists[0], load_tokens=load, skip_tokens=local,
                         group_block_ids=lists if self._multi else None)
            done = nr.num_computed_tokens + n_sched.get(nr.req_id, 0)
            rm.store = (self._stores_on and done >= len(tokens) and
                        len(tokens) >= self._cfg.chunk_tokens)
            meta.requests.append(rm)
            if self._state and self._stores_on:
                self._prompts[nr.req_id] = tokens
            if self._stores_on and not rm.store and done < len(tokens):
                self._tracked[nr.req_id] = ReqMeta(
                    nr.req_id, tokens, list(rm.block_ids),
                    group_block_ids=[list(x) for x in lists] if self._multi else None)
        if self._state and self._stores_on:
            self._state_saves(scheduler_output, meta)
        cached = scheduler_output.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            new_blocks = cached.new_block_ids[i]
            if req_id in cached.resumed_req_ids and req_id in self._pending_loads:
                # A preempted request resumes with new blocks and its own lookup: load
                # into those (its blocks are the whole list again after a preemption).
                load, local, tokens = self._pending_loads.pop(req_id)
                lists = _group_lists(new_blocks) or [[]]
                meta.requests.append(ReqMeta(req_id, tokens, lists[0], load_tokens=load,
                                             skip_tokens=local,
                                             group_block_ids=lists if self._multi else None))
            t = self._tracked.get(req_id)
            if t is None:
                continue
            if req_id in cached.resumed_req_ids:
                t.block_ids = list(new_blocks[0]) if new_blocks else []
                if self._multi:
                    t.group_block_ids = _group_lists(new_blocks) or [[] for _ in self._groups]
            elif new_blocks:
                t.block_ids.extend(new_blocks[0])
                if self._multi:
                    for g, ids in enumerate(new_blocks):
                        t.group_block_ids[g].extend(ids)
            if self._multi:
                self._null_freed(t.group_block_ids, cached.num_computed_tokens[i])
            done = cached.num_computed_tokens[i] + n_sched.get(req_id, 0)
            if done >= len(t.token_ids):
                del self._tracked[req_id]
                if len(t.token_ids) >= self._cfg.chunk_tokens:
                    meta.requests.append(ReqMeta(
                        req_id, t.token_ids, list(t.block_ids), store=True,
                        group_block_ids=t.group_block_ids))
        # The pins of this metadata's sync loads last until the request's next step (or its
        # end); async loads keep theirs until reported (update_connector_output).
        for rm in meta.requests:
            if rm.load_tokens > 0 and not rm.async_load and rm.req_id in self._leases:
                _release(self._loading.pop(rm.req_id, None))
                self._loading[rm.req_id] = self._leases.pop(rm.req_id)
        # Every store handed to the worker is reported back by it (finished_sending)
        # once the request finished and the store copied its blocks.
        self._storing.update(rm.req_id for rm in meta.requests if rm.store)
        return meta

    def _state_saves(self, scheduler_output: "SchedulerOutput",
                     meta: KVTierConnectorMetadata) -> None:
        """State layouts: the states vLLM keeps this step (its boundary-state hand-offs,
        SchedulerOutput.kv_connector_block_state: (group, block, tokens) = the block holds
        the state after that many tokens once this step's forward ran) that end on one
        of the prompt's chunk boundaries become saves for the worker, after the forward.
        vLLM frees such a block at a later step without telling the connector: the
        worker copies it before the next forward (handle_preemptions)."""
        state = getattr(scheduler_output, "kv_connector_block_state", None)
        offers = getattr(state, "boundary_state_offloads", None) or {}
        C = self._cfg.chunk_tokens
        for rid, entries in offers.items():
            tokens = self._prompts.get(rid)
            if tokens is None:
                continue
            saves = [(g, n, b) for g, b, n in entries
                     if g < len(self._groups) and self._groups[g].kind == "state"
                     and b != NULL_BLOCK and n > 0 and n % C == 0 and n <= len(tokens)]
            if saves:
                meta.requests.append(ReqMeta(rid, tokens, [], state_saves=saves))
                self._storing.add(rid)

    def _null_freed(self, lists: list[list[int]], num_computed_tokens: int) -> None:
        """Marks, in a running request's per-group block lists, the blocks a sliding-window
        group may have freed by now (vLLM only sends new block ids): at this step's
        allocation vLLM freed the blocks wholly below num_computed_tokens - window + 1
        (SlidingWindowManager.get_num_skipped_tokens; it counts only processed tokens,
        so this marks at least as many). A store never copies a block marked so."""
        for grp, ids in zip(self._groups, lists):
            if grp.kind != "sliding_window" or not grp.window:
                continue
            skipped = max(0, num_computed_tokens - grp.window + 1) // grp.block_size
            for j in range(min(skipped, len(ids))):
                ids[j] = NULL_BLOCK

    def update_connector_output(self, connector_output) -> None:
        for rid in getattr(connector_output, "failed_recving", None) or ():
            self._async_blocks.pop(rid, None)
            self._no_reload.add(rid)  # a fresh lookup could promise the same load
        bad = connector_output.invalid_block_ids or set()
        for rid in connector_output.finished_recving or ():
            _release(self._leases.pop(rid, None))
            blocks = self._async_blocks.pop(rid, None)
            if blocks and bad & blocks:
                self._no_reload.add(rid)  # a fresh lookup could promise the same load

    def request_finished(self, request: "Request",
                         block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        rid = request.request_id
        self._tracked.pop(rid, None)
        self._prompts.pop(rid, None)
        self._pending_loads.pop(rid, None)
        _release(self._leases.pop(rid, None))
        _release(self._loading.pop(rid, None))
        self._no_reload.discard(rid)
        # A store copies the request's blocks on the worker's store thread: vLLM keeps
        # them allocated until the worker reports the request in finished_sending.
        if rid in self._storing:
            self._storing.discard(rid)
            # A kv_producer tells a PD proxy where its chunks go (kvtier.pd_handoff).
            return True, (producer_handoff(self._ns, self._cfg) if not self._loads_on else None)
        return False, None
