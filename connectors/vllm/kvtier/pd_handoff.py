"""The prefill-to-decode handoff record (disaggregated prefill, docs/vllm.md "PD").

A `kv_producer` instance answers each prefill request whose prompt it stores with vLLM's
`kv_transfer_params` = {"kvtier_handoff": {...}}: the namespace fields of its chunks and
the kvtierd address. kvtier.pd_proxy reads it to look the prompt's chunks up in kvtierd
(kvt_lookup under the same namespace, one lookup per TP rank) and waits until they are
all there before it sends the request to a decode (`kv_consumer`) instance. The record
names no token and no secret (the proxy takes the prompt's token ids from the prefill
response's `prompt_token_ids`, and its kvtierd token from its own command line).

Standard library only: the connector (vllm.py) builds the record; the proxy parses it.
"""

from __future__ import annotations

from typing import Any

HANDOFF_KEY = "kvtier_handoff"
HANDOFF_VERSION = 1
# kvtier.ConnectorOptions fields that make up the namespace (kvt::ComputeNamespace).
_NS_FIELDS = ("model_id", "num_layers", "num_kv_heads", "head_dim", "dtype", "layout",
              "tp_world_size", "engine_extra")


def producer_handoff(ns, cfg) -> dict[str, Any]:
    """kv_transfer_params for a prefill the producer stores. `ns`: the connector's
    vllm_config.Namespace; `cfg`: its KVTierConfig. A fresh dict each call (vLLM may add
    keys to it)."""
    rec = {k: getattr(ns, k) for k in _NS_FIELDS}
    rec.update(version=HANDOFF_VERSION, chunk_tokens=cfg.chunk_tokens, tenant=cfg.tenant,
               kvtierd=cfg.daemon_address)
    return {HANDOFF_KEY: rec}


def parse_handoff(params: Any) -> dict[str, Any] | None:
    """The handoff record inside a prefill response's kv_transfer_params, or None when
    there is none (a prompt shorter than one chunk: the producer stored nothing; or a
    producer without kvtier). ValueError naming the field when the record is malformed
    or of another version."""
    if not isinstance(params, dict) or HANDOFF_KEY not in params:
        return None
    rec = params[HANDOFF_KEY]
    if not isinstance(rec, dict):
        raise ValueError(f"kv_transfer_params.{HANDOFF_KEY}: expected an object, got "
                         f"{type(rec).__name__}")
    if rec.get("version") != HANDOFF_VERSION:
        raise ValueError(f"kv_transfer_params.{HANDOFF_KEY}.version = {rec.get('version')!r}: "
                         f"this kvtier reads version {HANDOFF_VERSION} (producer and proxy "
                         "must run the same kvtier)")
    ints = ("num_layers", "num_kv_heads", "head_dim", "tp_world_size", "chunk_tokens")
    for k in _NS_FIELDS + ("chunk_tokens", "tenant"):
        if k not in rec:
            raise ValueError(f"kv_transfer_params.{HANDOFF_KEY}.{k}: missing")
        want = int if k in ints else str
        if not isinstance(rec[k], want) or (want is int and rec[k] <= 0):
            raise ValueError(f"kv_transfer_params.{HANDOFF_KEY}.{k} = {rec[k]!r}: expected "
                             f"{'a positive integer' if want is int else 'a string'}")
    return rec


def lookup_options(rec: dict[str, Any], tp_rank: int, daemon_address: str,
                   daemon_token: str | None, deadline_ms: int):
    """kvtier.ConnectorOptions for a lookup-only connector on kvtierd under the handoff's
    namespace for TP rank `tp_rank` (no host tier of its own worth the name: every lookup
    goes to the daemon; the cost model off, so the lookup counts every cached chunk)."""
    from kvtier._native import ConnectorOptions
    return ConnectorOptions(
        **{k: rec[k] for k in _NS_FIELDS}, tp_rank=tp_rank, chunk_tokens=rec["chunk_tokens"],
        tenant=rec["tenant"], host_capacity_bytes=1 << 20, use_cost_model=False,
        daemon_address=daemon_address, daemon_token=daemon_token or None,
        daemon_deadline_ms=deadline_ms)
