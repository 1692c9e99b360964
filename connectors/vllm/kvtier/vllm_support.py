"""Support pieces of kvtier's vLLM connector (kvtier/vllm.py), kept apart so that the
connector's file holds the connector: its time accounting, its stats for vLLM's
metrics, the KV layout detection, the state of a per-layer sync load and the
per-group stores of a hybrid (HMA) KV cache layout."""

from __future__ import annotations

import functools
import hashlib
import os
import struct
import sys
from array import array
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
from kvtier.vllm_config import KVGroup, KVTierConfig, Namespace

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
# is not counted twice): the scheduler looks up (and the cost model decides in its
# lookups), the worker loads and stores.
_SCHEDULER_STATS = ("lookups", "lookup_hit_tokens", "lookup_load_tokens", "cost_load_all",
                    "cost_load_partial", "cost_recompute", "cost_probe")


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
    o = _options(cfg, ns)
    if not cfg.embedded:
        return Connector(o)  # every process talks to the daemon itself
    key = tuple(sorted(vars(o).items()))
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = [Connector(o), 0]
        _SHARED[key][1] += 1
        return _SHARED[key][0]


# vLLM's null block (BlockPool.null_block, the pool's first block): a sliding-window
# group's block list holds it in place of the blocks outside the window vLLM keeps.
NULL_BLOCK = 0


class GroupLease:
    """The pins of one lookup across a model's KV cache groups (one native Lease per
    group that had chunks to load); close() releases them all, once."""

    def __init__(self, leases: list):
        self._leases = leases

    def close(self) -> None:
        leases, self._leases = self._leases, []
        for lease in leases:
            lease.close()


def prefix_digests(tokens: list[int], ends: list[int]) -> dict[int, bytes]:
    """BLAKE2b-512 of tokens[:n] (int32 little-endian) for every n in `ends`, in one pass."""
    h = hashlib.blake2b(digest_size=64)
    out, pos = {}, 0
    for e in sorted(set(ends)):
        a = array("i", tokens[pos:e])
        if sys.byteorder == "big":
            a.byteswap()
        h.update(a.tobytes())
        pos = e
        out[e] = h.copy().digest()
    return out


def boundary_tokens(digest: bytes, n: int, block_size: int) -> list[int]:
    """The token ids a state group's record of the state after n prompt tokens is keyed
    by (one block of `block_size` ids): the prefix's BLAKE2b-512 digest (prefix_digests)
    as 16 ids of 31 bits, then n, then zeros. A state depends on every token before it,
    as a chunk's chained key does; unlike chunks, vLLM keeps a state only at some block
    boundaries, so each boundary is a record of its own, found without the others."""
    ids = [w >> 1 for w in struct.unpack("<16I", digest)] + [n & 0x7FFFFFFF]
    return ids + [0] * (block_size - len(ids))


class GroupStores:
    """The native connectors of a KV layout with several groups (vLLM's hybrid KV cache
    manager, HMA): one per group, each with its group's layers and namespace
    (vllm_config.group_namespaces), driven together so that a prompt's chunks are held
    for every group or used for none.

    Stands in for the single native connector where the connector calls lookup, stats,
    flush, close, namespace_hex and daemon_check; loads and stores take one block-id list
    per group (vLLM's order). A sliding-window group stores a prompt only when vLLM
    still holds every block of its complete chunks, and loads only the blocks vLLM
    allocated for it (those inside the window; the others are the null block, never
    written).

    A state group (Mamba / gated-DeltaNet, vLLM's "align" mode) holds one record per
    state boundary vLLM kept: the state after n tokens (n a multiple of chunk_tokens),
    one page per layer, keyed by the prefix (boundary_tokens); its native connector's
    chunk is one block. A load of n tokens takes the other groups' chunks of tokens
    [0, n) and the state at n, written into the block vLLM reads a request's state from
    when it starts with n computed tokens (block n / block_size - 1 of its list)."""

    def __init__(self, groups: list[KVGroup], natives: list[Connector], chunk_tokens: int):
        if len(groups) != len(natives) or not groups:
            raise ValueError(f"{len(groups)} KV groups but {len(natives)} native connectors")
        self.groups = groups
        self.natives = natives
        self.chunk_tokens = chunk_tokens
        self.state_groups = [i for i, g in enumerate(groups) if g.kind == "state"]
        self.stores_skipped = 0   # stores not made: a group's blocks were already freed
        self.loads_refused = 0    # loads not made: vLLM's blocks do not match the records

    # -- the single-connector interface
    def lookup(self, tokens: list[int], num_computed_tokens: int = 0) -> tuple[int, int]:
        """(tokens to load, tokens cached): the least over the groups, so a prompt loads
        only the chunks every group holds (a sliding-window group whose chunks are
        missing makes the request recompute rather than load a partial window); with a
        state group, the longest of those prefixes whose end state is held too."""
        load, cached, lease = self._lookup(tokens, num_computed_tokens, pinned=False)
        return load, cached

    def lookup_pinned(self, tokens: list[int],
                      num_computed_tokens: int = 0) -> tuple[int, int, "GroupLease | None"]:
        """lookup() with every group's chunks pinned (kvt_lookup_pinned per group): the
        leases are held together and dropped together (GroupLease.close)."""
        return self._lookup(tokens, num_computed_tokens, pinned=True)

    def _lookup(self, tokens, num_computed_tokens, pinned):
        load, cached, leases = None, None, []
        for g, n in enumerate(self.natives):
            if g in self.state_groups:
                continue
            if pinned:
                lg, cg, lease = n.lookup_pinned(tokens, num_computed_tokens)
                if lease is not None:
                    leases.append(lease)
            else:
                lg, cg = n.lookup(tokens, num_computed_tokens)
            load = lg if load is None else min(load, lg)
            cached = cg if cached is None else min(cached, cg)
            if load == 0:
                break  # the rest cannot raise it
        load, cached = load or 0, cached or 0
        if self.state_groups and load > num_computed_tokens:
            load, state_leases = self._state_lookup(tokens, load, num_computed_tokens, pinned)
            leases += state_leases
            cached = min(cached, load)
        elif self.state_groups:
            load = 0
        group_lease = GroupLease(leases) if leases else None
        if not load and group_lease is not None:
            group_lease.close()
            group_lease = None
        return load, cached, group_lease

    def _state_lookup(self, tokens, limit, num_computed_tokens, pinned):
        """(n, leases): the largest n <= limit, a multiple of chunk_tokens above
        num_computed_tokens, whose state every state group holds; (0, []) if none."""
        C = self.chunk_tokens
        ends = list(range((num_computed_tokens // C + 1) * C, limit + 1, C))
        digests = prefix_digests(tokens, ends)
        for n in reversed(ends):
            leases, held = [], True
            for g in self.state_groups:
                probe = boundary_tokens(digests[n], n, self.groups[g].block_size) + [0]
                if pinned:
                    _, cg, lease = self.natives[g].lookup_pinned(probe, 0)
                    if lease is not None:
                        leases.append(lease)
                else:
                    _, cg = self.natives[g].lookup(probe, 0)
                if cg < self.groups[g].block_size:
                    held = False
                    break
            if held:
                return n, leases
            for lease in leases:
                lease.close()
        return 0, []

    def stats(self) -> dict[str, int]:
        """The groups' counters summed (a chunk of a 4-group model counts 4 records)."""
        out: dict[str, int] = {}
        for n in self.natives:
            for k, v in n.stats().items():
                out[k] = out.get(k, 0) + v
        return out

    def flush(self) -> None:
        for n in self.natives:
            n.flush()

    def close(self) -> None:
        for n in self.natives:
            n.close()

    def namespace_hex(self) -> str:
        return ",".join(n.namespace_hex() for n in self.natives)

    def daemon_check(self, timeout_ms: int = 1000) -> str | None:
        return self.natives[0].daemon_check(timeout_ms)

    # -- per-group blocks
    def load_window(self, g: int, block_ids: list[int], load_tokens: int,
                    skip_tokens: int) -> int | None:
        """Tokens below which group g's blocks are not written: skip_tokens for a full
        group; for a sliding-window group also the blocks vLLM did not allocate (the
        leading null blocks). None when vLLM's list does not fit the load (too short, or
        a null block inside what must be loaded)."""
        grp = self.groups[g]
        B = grp.block_size
        end = load_tokens // B
        if len(block_ids) < end:
            return None
        first = skip_tokens // B
        if grp.kind == "sliding_window":
            while first < end and block_ids[first] == NULL_BLOCK:
                first += 1  # freed by vLLM (outside the window): never written
        # Every block vLLM allocated from there on must be written: a null block after
        # the first real one is a list kvtier does not understand.
        if any(b == NULL_BLOCK for b in block_ids[first:end]):
            return None
        return max(skip_tokens, first * B)

    def state_block(self, g: int, block_ids: list[int], n: int) -> int | None:
        """The block of state group g that holds (or is to hold) the state after n tokens:
        block n / block_size - 1 of vLLM's list; None when the list has no real block
        there."""
        i = n // self.groups[g].block_size - 1
        if n <= 0 or n % self.groups[g].block_size or i >= len(block_ids):
            return None
        return None if block_ids[i] == NULL_BLOCK else block_ids[i]

    def load(self, tokens: list[int], load_tokens: int, block_lists: list[list[int]],
             skip_tokens: int) -> int:
        """Loads [skip, load_tokens) of every group into its blocks (a sliding-window group
        only the blocks vLLM kept; a state group the state at load_tokens); returns the
        leading tokens every group now holds (load_tokens, or less: the request's load
        failed and vLLM recomputes it)."""
        if len(block_lists) != len(self.groups):
            self.loads_refused += 1
            return 0
        skips = [None if g in self.state_groups else
                 self.load_window(g, ids, load_tokens, skip_tokens)
                 for g, ids in enumerate(block_lists)]
        states = {g: self.state_block(g, block_lists[g], load_tokens) for g in self.state_groups}
        if (any(s is None for g, s in enumerate(skips) if g not in self.state_groups)
                or any(b is None for b in states.values())):
            self.loads_refused += 1
            return 0
        if states:
            digest = prefix_digests(tokens, [load_tokens])[load_tokens]
            for g, b in states.items():
                B = self.groups[g].block_size
                got = self.natives[g].load_blocks(boundary_tokens(digest, load_tokens, B), B,
                                                  [b], 0)
                if got < B:
                    return 0  # no state: the request recomputes
        loaded = load_tokens
        for g, (native, ids, skip) in enumerate(zip(self.natives, block_lists, skips)):
            if g in self.state_groups or skip >= load_tokens:
                continue  # nothing of this group to write
            got = native.load_blocks(tokens, load_tokens, ids, skip)
            loaded = min(loaded, got)
            if loaded < load_tokens:
                break  # the request recomputes; later groups need not be written
        return loaded

    def store(self, tokens: list[int], block_lists: list[list[int]]) -> bool:
        """Stores the complete chunks of `tokens` for every group but the state groups
        (store_state), or for none when a group's blocks of those chunks are not all
        held (a sliding-window group whose early blocks vLLM already freed): a prompt
        stored for some groups only would never be loaded. Returns whether it stored."""
        n = len(tokens) // self.chunk_tokens * self.chunk_tokens
        if n == 0 or len(block_lists) != len(self.groups):
            return False
        for g, (grp, ids) in enumerate(zip(self.groups, block_lists)):
            if g in self.state_groups:
                continue
            need = n // grp.block_size
            if len(ids) < need or any(b == NULL_BLOCK for b in ids[:need]):
                self.stores_skipped += 1
                return False
        for g, (native, grp, ids) in enumerate(zip(self.natives, self.groups, block_lists)):
            if g not in self.state_groups:
                native.store_blocks(tokens[:n], ids[:n // grp.block_size])
        return True

    def store_state(self, g: int, tokens: list[int], n: int, block_id: int) -> int:
        """Stores state group g's block `block_id`, which holds the state after tokens[:n]
        (n a multiple of chunk_tokens and of the group's block size); 1 when taken, 0
        when already held. ValueError for an n that is not a state boundary."""
        B = self.groups[g].block_size
        if g not in self.state_groups or n <= 0 or n % B or n % self.chunk_tokens \
                or n > len(tokens) or block_id == NULL_BLOCK:
            raise ValueError(f"store_state: group {g}, {n} of {len(tokens)} tokens, "
                             f"block {block_id}: not a state boundary of this layout")
        digest = prefix_digests(tokens, [n])[n]
        return self.natives[g].store_blocks(boundary_tokens(digest, n, B), [block_id])


def _options(cfg: KVTierConfig, ns: Namespace, host_capacity_bytes: int | None = None,
             disk_dir: str | None = None) -> ConnectorOptions:
    return ConnectorOptions(
        model_id=ns.model_id, num_layers=ns.num_layers, num_kv_heads=ns.num_kv_heads,
        head_dim=ns.head_dim, dtype=ns.dtype, layout=ns.layout, tp_rank=ns.tp_rank,
        tp_world_size=ns.tp_world_size, chunk_tokens=cfg.chunk_tokens, tenant=cfg.tenant,
        engine_extra=ns.engine_extra,
        host_capacity_bytes=host_capacity_bytes or cfg.host_capacity_bytes,
        disk_dir=disk_dir if disk_dir is not None else cfg.disk_dir,
        disk_capacity_bytes=cfg.disk_capacity_bytes,
        use_cost_model=cfg.use_cost_model, cost_probe_after=cfg.cost_probe_after,
        daemon_address=cfg.daemon_address, daemon_token=cfg.token or None,
        daemon_deadline_ms=cfg.daemon_deadline_ms)


def _share(total: int, share: float) -> int:
    """A group's part of a capacity: whole MiB (the disk tier wants multiples of 4096),
    at least 1 MiB."""
    return max(1, int(total * share) >> 20) << 20


def _open_groups(cfg: KVTierConfig, groups: list[KVGroup],
                 namespaces: list[Namespace]) -> GroupStores:
    """GroupStores for a multi-group layout. Through kvtierd every group's connector
    talks to the daemon. Embedded: each group has its own host tier (host_capacity split
    by the groups' shares of the layers) and, with disk_dir, its own subdirectory
    disk_dir/kv-group-<i> (disk_capacity split the same way); the scheduler and worker
    halves of one process share them, like the single store."""
    def make():
        total = sum(max(1, len(g.layer_names)) for g in groups)
        natives = []
        try:
            for g, ns in zip(groups, namespaces):
                share = max(1, len(g.layer_names)) / total
                if cfg.embedded:
                    sub = (None if not cfg.disk_dir else
                           os.path.join(cfg.disk_dir, f"kv-group-{g.index}"))
                    o = _options(cfg, ns, _share(cfg.host_capacity_bytes, share), sub)
                    if cfg.disk_capacity_bytes:
                        o.disk_capacity_bytes = _share(cfg.disk_capacity_bytes, share)
                else:
                    o = _options(cfg, ns)
                if g.kind == "state":
                    # One record per state: a chunk is one block; whether loading pays is
                    # decided by the other groups' lookups (their chunks are the prefix).
                    o.chunk_tokens = g.block_size
                    o.use_cost_model = False
                natives.append(Connector(o))
        except BaseException:
            for n in natives:
                n.close()
            raise
        return GroupStores(groups, natives, cfg.chunk_tokens)
    if not cfg.embedded:
        return make()
    key = ("groups",) + tuple(tuple(sorted(vars(_options(cfg, ns)).items()))
                              for ns in namespaces)
    with _SHARED_LOCK:
        if key not in _SHARED:
            _SHARED[key] = [make(), 0]
        _SHARED[key][1] += 1
        return _SHARED[key][0]
