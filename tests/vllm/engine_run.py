"""One vLLM process for the vllm tests: runs prompts through LLM(...) and writes what a
user would compare (token ids, logprobs, num_cached_tokens, kvtier counters) as JSON.

    python engine_run.py SPEC.json OUT.json

SPEC: {"model": dir, "connector": extra_config | null, "prompts": [[ids...], ...],
       "max_tokens": 8, "block_size": null, "dtype": "bfloat16", "max_model_len": 2048,
       "num_gpu_blocks_override": null, "env": {name: value} (set before the engine starts),
       "flush_before": [prompt indices] (wait for the connector's stores first),
       "connector_module": "kvtier.vllm", "connector_class": "KVTierConnector",
       "batch_first": [[ids...], ...] (run together first, "batch_max_tokens" each),
       "hooks": [names of hooked_connector counters to report],
       "prefix_caching": true (vLLM's own prefix cache on, e.g. for a Mamba / linear-
       attention hybrid, whose states vLLM keeps at block boundaries only then),
       "prefix_hit_tokens": k (a reference process, no connector: vLLM's prefix cache on,
       and for every prompt longer than k also "hit_rows"[i], the output when vLLM's own
       prefix cache holds exactly its first k tokens: the reference for a kvtier load of
       k tokens, docs/vllm.md "Exactness"; null for shorter prompts)}
Greedy sampling with logprobs=1; enable_prefix_caching=False (unless prefix_hit_tokens
or prefix_caching) so every hit is kvtier's.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import generate, prefix_hit_row  # noqa: E402


def build_llm(spec):
    from vllm import LLM
    kv = None
    if spec.get("connector") is not None:
        kv = {"kv_connector": spec.get("connector_class", "KVTierConnector"),
              "kv_connector_module_path": spec.get("connector_module", "kvtier.vllm"),
              "kv_role": spec.get("kv_role", "kv_both"),
              "kv_connector_extra_config": spec["connector"]}
    pc = bool(spec.get("prefix_hit_tokens") or spec.get("prefix_caching"))
    args = dict(model=spec["model"], enable_prefix_caching=pc,
                max_model_len=spec.get("max_model_len", 2048), dtype=spec.get("dtype", "bfloat16"),
                enforce_eager=True, kv_transfer_config=kv, seed=0)
    if spec.get("block_size"):
        args["block_size"] = spec["block_size"]
    if spec.get("num_gpu_blocks_override"):
        args["num_gpu_blocks_override"] = spec["num_gpu_blocks_override"]
    return LLM(**args)


def connector_of(llm):
    """The worker-side KVTierConnector of an in-process engine (None otherwise)."""
    try:
        from vllm.distributed.kv_transfer import get_kv_transfer_group
        return get_kv_transfer_group()
    except Exception:
        return None


def main():
    spec = json.load(open(sys.argv[1]))
    os.environ.update(spec.get("env", {}))
    llm = build_llm(spec)
    conn = connector_of(llm)
    rows, hit_rows = [], []
    k = spec.get("prefix_hit_tokens")
    if k:
        llm.reset_prefix_cache()
    if spec.get("batch_first"):  # these prompts together in one generate call first
        rows += generate(llm, spec["batch_first"], spec.get("batch_max_tokens", 8), batch=True)
    for i, p in enumerate(spec["prompts"]):
        if i in spec.get("flush_before", ()) and conn is not None:
            conn.flush()
        rows += generate(llm, [p], spec.get("max_tokens", 8))
        if k:  # resets vLLM's prefix cache before and after, so every cold row is cold
            hit_rows.append(prefix_hit_row(llm, p, k, spec.get("max_tokens", 8))
                            if len(p) > k else None)
    stats = {}
    if conn is not None and hasattr(conn, "kvtier_stats"):
        conn.flush()
        stats = conn.kvtier_stats()
        conn.shutdown()  # drain stores down to the disk tier before the hard exit below
    hooks = {k: getattr(conn, k) for k in spec.get(
             "hooks", ("loads_seen", "async_loads_seen")) if hasattr(conn, k)}
    with open(sys.argv[2], "w") as f:
        json.dump({"rows": rows, "hit_rows": hit_rows, "kvtier": stats, "hooks": hooks}, f)
    os._exit(0)  # skip vLLM's slow interpreter teardown


if __name__ == "__main__":
    main()
