"""Imports kvtier.vllm against whatever `vllm` is first on sys.path and prints, as JSON,
where vllm came from, its version, and what a user's engine would trip over: abstract
methods left unimplemented, overridden KVConnectorBase_V1 / SupportsHMA methods whose
parameter lists differ from the base classes', and whether vLLM sees the connector as
supporting its hybrid KV cache manager (SupportsHMA). Run by test_official_wheel with the official
wheel's Python tree first on PYTHONPATH. Constructs nothing and runs no engine."""

import inspect
import json

import vllm
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    SupportsHMA,
    supports_hma,
)
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (
    KVConnectorPromMetrics,
    KVConnectorStats,
)

import kvtier.vllm as kv

cls = kv.KVTierConnector
mismatched = []
overridden = []


def plain(f):
    return f.__func__ if isinstance(f, (classmethod, staticmethod)) else f


for name, base_fn in list(vars(KVConnectorBase_V1).items()) + list(vars(SupportsHMA).items()):
    own = cls.__dict__.get(name)
    base_fn, own = plain(base_fn), plain(own)
    if own is None or name.startswith("_") or not inspect.isfunction(base_fn):
        continue
    overridden.append(name)
    b = list(inspect.signature(base_fn).parameters)
    o = list(inspect.signature(own).parameters)
    if b != o:
        mismatched.append({"method": name, "base": b, "kvtier": o})
print("RESULT " + json.dumps({
    "vllm_file": vllm.__file__, "vllm_version": vllm.__version__,
    "subclass": issubclass(cls, KVConnectorBase_V1),
    "hma": issubclass(cls, SupportsHMA) and supports_hma(cls),
    "abstract_left": sorted(getattr(cls, "__abstractmethods__", ())),
    "overridden": sorted(overridden), "mismatched": mismatched,
    "stats_cls": issubclass(kv.KVTierStats, KVConnectorStats),
    "prom_cls": issubclass(kv.KVTierPromMetrics, KVConnectorPromMetrics)}))
