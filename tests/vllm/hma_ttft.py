"""Warm TTFT of a sliding-window family (Gemma 3) through kvtier vs vLLM's own prefix
cache, on vLLM's CPU backend with its hybrid KV cache manager on. A measurement, not a
test (no pass/fail): prints one table.

    KVTIER_LIB=build/release/connectors/vllm/libkvtier.so \\
    PYTHONPATH=connectors/vllm:tests/vllm python tests/vllm/hma_ttft.py [--lengths 1024,2048]

Model: kvtier.make_model --family gemma3 with 8 layers of hidden 1024 (16 heads, 4 KV
heads, head size 64), every 4th layer full attention, window 512. For each prompt
length and each of --reps fresh prompts, in two engine processes run one after the
other (in-process engines, OMP_NUM_THREADS=1 as in the tests):
  prefix$   no connector, vLLM's prefix cache on: the prompt once (cold), then again
            (vLLM's prefix cache hit); TTFT = the second request's time to 1 token
  kvtier    kvtier's connector, embedded host store, prefix caching off: the prompt once
            (cold; stored), its stores flushed, then again (loaded from kvtier)
Columns: median seconds; `kvtier/prefix$` the ratio of the medians; the cached tokens
vLLM reported for the warm request of each configuration.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402

SETTINGS = dict(num_hidden_layers=8, hidden_size=1024, intermediate_size=4096,
                num_attention_heads=16, num_key_value_heads=4, head_dim=64,
                query_pre_attn_scalar=64, vocab_size=8192, sliding_window=512,
                layer_types=(["sliding_attention"] * 3 + ["full_attention"]) * 2)


def model_dir() -> str:
    from kvtier.make_model import make_family_model
    return make_family_model(os.path.join(harness.CACHE, "hma-gemma3-ttft"), "gemma3",
                             **SETTINGS)


def one(llm, ids):
    from vllm import SamplingParams, TokensPrompt
    sp = SamplingParams(max_tokens=1, temperature=0, ignore_eos=True)
    t0 = time.perf_counter()
    out = llm.generate([TokensPrompt(prompt_token_ids=ids)], sp, use_tqdm=False)[0]
    return time.perf_counter() - t0, out.num_cached_tokens or 0


def child(mode: str, lengths: list[int], reps: int, out: str) -> None:
    from vllm import LLM
    kv = None
    if mode == "kvtier":
        kv = {"kv_connector": "KVTierConnector", "kv_connector_module_path": "kvtier.vllm",
              "kv_role": "kv_both",
              "kv_connector_extra_config": {"host_capacity": "2GiB", "use_cost_model": False}}
    llm = LLM(model=model_dir(), enable_prefix_caching=(mode == "prefix"),
              max_model_len=max(lengths) + 64, dtype="bfloat16", enforce_eager=True, seed=0,
              kv_transfer_config=kv)
    conn = None
    if kv:
        from vllm.distributed.kv_transfer import get_kv_transfer_group
        conn = get_kv_transfer_group()
    one(llm, harness.prompt(999, 300, 8000))  # warm-up
    res = {}
    for n in lengths:
        rows = []
        for r in range(reps):
            ids = harness.prompt(1000 * n + r, n, 8000)
            cold, _ = one(llm, ids)
            if conn is not None:
                conn.flush()
            warm, cached = one(llm, ids)
            rows.append((cold, warm, cached))
        res[n] = rows
    with open(out, "w") as f:
        json.dump(res, f)
    os._exit(0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", default="1100,2100")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args()
    lengths = [int(x) for x in a.lengths.split(",")]
    if a.child:
        child(a.child, lengths, a.reps, a.out)
        return 0
    model_dir()
    results = {}
    for mode in ("prefix", "kvtier"):
        out = f"/tmp/kvt-hma-ttft-{os.getpid()}-{mode}.json"
        subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode,
                        "--lengths", a.lengths, "--reps", str(a.reps), "--out", out],
                       check=True)
        with open(out) as f:
            results[mode] = json.load(f)
        os.unlink(out)
    print(f"{'prompt':>6} {'cold s':>8} {'prefix$ s':>10} {'kvtier s':>9} "
          f"{'kvtier/prefix$':>15} {'cached prefix$/kvtier':>22}")
    for n in lengths:
        pr, kv = results["prefix"][str(n)], results["kvtier"][str(n)]
        cold = statistics.median([r[0] for r in pr + kv])
        pw = statistics.median([r[1] for r in pr])
        kw = statistics.median([r[1] for r in kv])
        print(f"{n:>6} {cold:>8.3f} {pw:>10.3f} {kw:>9.3f} {kw / pw:>15.2f} "
              f"{'/'.join(str(r[2]) for r in pr):>11}|{'/'.join(str(r[2]) for r in kv)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
