"""vLLM mode of the benchmark: TTFT of a real vLLM CPU engine with and without kvtier.

    bash bench/vllm_bench.sh [--json] [--lengths 512,1024,2048,3968] [--reps 1]

(the wrapper installs/reuses the pinned venv and sets KVTIERD/KVTIER_LIB/PYTHONPATH).
Model: the ~245 MB random Llama of ENGINES.md (8 layers, hidden 1024, 16/4 heads, bf16;
``python -m kvtier.make_model --preset bench``). Prompts of every length are interleaved
in one run (each length gets its own distinct prompt per repetition). Every
configuration runs in its own engine process (in-process engine, OMP_NUM_THREADS=1,
enforce_eager, the same for all) and measures TTFT = wall time of a 1-token request:

  cold           no connector, enable_prefix_caching=False: full prefill
  kvtier_host    KVTierConnector, embedded host tier: 2nd request of the same prompt
                 (async load, the default: the request waits in WAITING_FOR_REMOTE_KVS
                 and the load may cover the whole prompt; vLLM recomputes its last token)
  kvtier_host_sync  the same with load_async false (the load runs inside the step and
                 leaves the last chunk to compute, as vLLM's prefix cache leaves the
                 last block); per-layer (load_per_layer, the default: chunks fetched
                 and verified, then written layer by layer while the forward runs)
  kvtier_host_sync_whole  the same with load_per_layer false (the whole load before
                 the forward)
  sync A/B       per-layer vs whole sync loads in two live engines, requests alternating
                 (as no_reuse below; each prompt computed once, then loaded):
                 ttft_sync_layer_ab_ms, ttft_sync_whole_ab_ms (medians),
                 sync_layer_whole_paired (median of the per-pair ratios); "layer/whole"
  kvtier_disk    embedded host+disk: a fresh process whose host tier is empty loads
                 what an earlier process stored on disk
  kvtier_daemon  kvtierd (unix socket): the 2nd of two processes, loading over gRPC/shm;
                 kvtier_daemon_sync: the same with load_async false
  example        vLLM's ExampleConnector (safetensors files): 2nd request
  prefix_cache   vLLM's own in-memory prefix cache (no connector): 2nd request, the
                 upper bound of an in-memory cache that recomputes the last block
  no_reuse_ratio TTFT of fresh prompts with KVTierConnector (lookups miss, stores run) /
                 TTFT of the same prompts without a connector. Two engine processes
                 (none, kvtier) stay up side by side and the requests alternate between
                 them, one at a time, --noreuse-rounds rounds (each round: every length,
                 fresh prompts, the order of the two sides swapped every round), so a
                 change in machine load hits both alike. no_reuse_ratio = median kvtier
                 / median none; no_reuse_paired = median of the per-pair ratios and
                 no_reuse_spread its [25th, 75th] percentiles; no_reuse_cpu_ratio: the
                 same for the engine process's CPU time (all threads: the engine, its
                 OpenMP pool and kvtier's store thread) per request, from the request's
                 start until kvtier's store of it has reached the cache (each side is
                 idle before the next request starts). no_reuse_connector_frac: wall
                 time inside the connector's hooks on the engine's path per request
                 (timed inside the connector, kvtier.vllm.timing()) / the no-connector
                 TTFT; no_reuse_lookup_ms: of that, libkvtier's Lookup (chunk hashing +
                 the store's lookup); no_reuse_store_ms: the store thread's copy-out
                 (off the engine's path)

--json prints one JSON object per prompt length (longest last) with the keys
ttft_cold_ms, ttft_kvtier_host_ms, ttft_kvtier_disk_ms, ttft_kvtier_daemon_ms,
ttft_example_ms, ttft_prefix_cache_ms, prompt_tokens, no_reuse_ratio (medians over reps),
and ttft_kvtier_host_sync_ms, ttft_kvtier_host_sync_whole_ms, ttft_kvtier_daemon_sync_ms,
no_reuse_paired, no_reuse_spread, no_reuse_cpu_ratio, no_reuse_connector_frac,
no_reuse_lookup_ms, no_reuse_store_ms. --only-noreuse runs the no-reuse rounds alone (their keys only).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ENV = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "2", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
       "OMP_NUM_THREADS": "1", "VLLM_LOGGING_LEVEL": "WARNING", "TOKENIZERS_PARALLELISM": "false"}


def prompt(seed: int, n: int, vocab: int = 8000) -> list[int]:
    x = seed * 2654435761 % 2**32 or 1
    out = []
    for _ in range(n):
        x = (1103515245 * x + 12345) % 2**31
        out.append(3 + x % (vocab - 3))
    return out


# ------------------------------------------------------------------ worker process
def worker(spec_path: str, out_path: str) -> None:
    from vllm import LLM, SamplingParams, TokensPrompt
    spec = json.load(open(spec_path))
    kv = None
    if spec.get("kv"):
        kv = spec["kv"]
    llm = LLM(model=spec["model"], enable_prefix_caching=spec.get("prefix_cache", False),
              max_model_len=spec["max_model_len"], dtype="bfloat16", enforce_eager=True,
              seed=0, kv_transfer_config=kv, max_num_batched_tokens=spec["max_model_len"])
    sp = SamplingParams(max_tokens=1, temperature=0)

    def ttft(p):
        t, c = time.perf_counter(), time.process_time()
        o = llm.generate([TokensPrompt(prompt_token_ids=p)], sp, use_tqdm=False)[0]
        return ((time.perf_counter() - t) * 1000, o.num_cached_tokens or 0,
                (time.process_time() - c) * 1000)

    ttft(prompt(999, 64))  # warm-up: first-call costs are no part of any figure
    rows = []
    for phase in spec["phases"]:  # "store" (run, not reported) or "measure"
        for p in spec["prompts"]:
            ms, cached, cpu_ms = ttft(p)
            if phase == "measure":
                rows.append({"tokens": len(p), "ms": ms, "cached": cached, "cpu_ms": cpu_ms})
        if kv is not None and phase == "store":
            try:
                from vllm.distributed.kv_transfer import get_kv_transfer_group
                c = get_kv_transfer_group()
                if hasattr(c, "flush"):
                    c.flush()
            except Exception:
                pass
    try:
        from vllm.distributed.kv_transfer import get_kv_transfer_group
        c = get_kv_transfer_group()
        if hasattr(c, "shutdown"):
            c.shutdown()
    except Exception:
        pass
    json.dump(rows, open(out_path, "w"))
    os._exit(0)


def serve(spec_path: str) -> None:
    """A long-lived engine for the no-reuse rounds: one JSON request per stdin line
    ({"prompt": [...]}), one JSON answer per stdout line (ms, cpu_ms, cached, the
    connector's hook times of the request in ms)."""
    out = os.fdopen(os.dup(1), "w")  # answers only; everything else goes to the log
    os.dup2(2, 1)
    from vllm import LLM, SamplingParams, TokensPrompt
    spec = json.load(open(spec_path))
    llm = LLM(model=spec["model"], enable_prefix_caching=False,
              max_model_len=spec["max_model_len"], dtype="bfloat16", enforce_eager=True,
              seed=0, kv_transfer_config=spec.get("kv"),
              max_num_batched_tokens=spec["max_model_len"])
    sp = SamplingParams(max_tokens=1, temperature=0)
    conn, timing = None, (lambda: {})
    if spec.get("kv"):
        from vllm.distributed.kv_transfer import get_kv_transfer_group
        import kvtier.vllm
        conn, timing = get_kv_transfer_group(), kvtier.vllm.timing
    llm.generate([TokensPrompt(prompt_token_ids=prompt(999, 64))], sp, use_tqdm=False)
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        p = json.loads(line)["prompt"]
        t0_time = timing()
        t, c = time.perf_counter(), time.process_time()
        o = llm.generate([TokensPrompt(prompt_token_ids=p)], sp, use_tqdm=False)[0]
        ms = (time.perf_counter() - t) * 1000
        if conn is not None:
            conn.flush()  # its store reached the cache: counted in cpu_ms, not in ms
        cpu_ms = (time.process_time() - c) * 1000
        t1 = timing()
        hooks = {k: (v[0] - t0_time.get(k, (0, 0))[0]) * 1000 for k, v in t1.items()}
        out.write(json.dumps({"tokens": len(p), "ms": ms, "cpu_ms": cpu_ms,
                              "cached": o.num_cached_tokens or 0, "hooks_ms": hooks,
                              "layered_loads": getattr(conn, "layered_loads", 0)}) + "\n")
        out.flush()
    os._exit(0)


class Server:
    """A serve() process driven over pipes."""

    def __init__(self, spec: dict, work: str, name: str):
        sp = os.path.join(work, name + ".json")
        json.dump(spec, open(sp, "w"))
        env = dict(os.environ, **{k: v for k, v in ENV.items() if k not in os.environ})
        self.log = open(os.path.join(work, name + ".log"), "wb")
        self.p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve", sp],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.log, env=env, text=True)
        self.name, self.work = name, work

    def wait_ready(self):
        if self.p.stdout.readline().strip() != "ready":
            raise SystemExit(f"vllm_bench: {self.name} did not start; see "
                             f"{self.work}/{self.name}.log")

    def ask(self, p: list[int]) -> dict:
        self.p.stdin.write(json.dumps({"prompt": p}) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise SystemExit(f"vllm_bench: {self.name} died; see {self.work}/{self.name}.log")
        return json.loads(line)

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=120)
        self.log.close()


# ------------------------------------------------------------------ orchestrator
def run(spec: dict, work: str, name: str) -> list[dict]:
    sp, out = os.path.join(work, name + ".json"), os.path.join(work, name + ".out.json")
    json.dump(spec, open(sp, "w"))
    env = dict(os.environ, **{k: v for k, v in ENV.items() if k not in os.environ})
    with open(os.path.join(work, name + ".log"), "wb") as log:
        rc = subprocess.call([sys.executable, os.path.abspath(__file__), "--worker", sp, out],
                             stdout=log, stderr=subprocess.STDOUT, env=env)
    if rc != 0:
        raise SystemExit(f"vllm_bench: {name} exited {rc}; see {work}/{name}.log")
    return json.load(open(out))


def kvtier_kv(extra: dict) -> dict:
    return {"kv_connector": "KVTierConnector", "kv_connector_module_path": "kvtier.vllm",
            "kv_role": "kv_both", "kv_connector_extra_config": extra}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--lengths", default="512,1024,2048,3968")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--noreuse-rounds", type=int, default=10)
    ap.add_argument("--only-noreuse", action="store_true")
    ap.add_argument("--noreuse-role", default="kv_both", choices=["kv_both", "kv_consumer"],
                    help="kv_role of the no-reuse kvtier engine (kv_consumer: lookups only, "
                         "no stores, so the ratio shows what a miss's lookup costs)")
    ap.add_argument("--only-sync-ab", action="store_true",
                    help="run the per-layer vs whole sync-load rounds alone")
    ap.add_argument("--model-dir", default=os.path.join(tempfile.gettempdir(), "kvtier-bench-245m"))
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()
    if a.worker:
        worker(*a.worker)
        return 0
    if a.serve:
        serve(a.serve)
        return 0
    lengths = [int(x) for x in a.lengths.split(",")]
    max_len = max(lengths) + 128
    from kvtier.make_model import make_model, PRESETS
    model = make_model(a.model_dir, max_len=max(4096, max_len), **PRESETS["bench"])
    work = tempfile.mkdtemp(prefix="kvt-vllm-bench-")
    # Interleaved: rep 0 = [512, 1024, ...], rep 1 = [512, 1024, ...], distinct prompts.
    prompts = [prompt(1000 * r + i + 1, n) for r in range(a.reps) for i, n in enumerate(lengths)]
    base = {"model": model, "max_model_len": max_len, "prompts": prompts}
    # chunk_tokens = the CPU block size (128): a sync load then leaves the same last block
    # to compute as vLLM's prefix cache and ExampleConnector do; an async load (the
    # default) covers a prompt that ends on a chunk boundary whole (these lengths do).
    chunk = {"use_cost_model": True, "chunk_tokens": 128}
    log = (lambda *x: None) if a.json else (lambda *x: print(*x, file=sys.stderr, flush=True))
    results = {}
    daemon = None
    try:
        if not (a.only_noreuse or a.only_sync_ab):
            log("cold ..."); results["cold"] = run(dict(base, phases=["measure"]), work, "cold")
            log("prefix cache ...")
            results["prefix_cache"] = run(dict(base, prefix_cache=True, phases=["store", "measure"]),
                                          work, "prefix")
            log("kvtier host ...")
            results["kvtier_host"] = run(dict(base, kv=kvtier_kv(dict(chunk, host_capacity="2GiB")),
                                              phases=["store", "measure"]), work, "host")
            log("kvtier host, sync loads ...")
            results["kvtier_host_sync"] = run(dict(base, kv=kvtier_kv(dict(
                chunk, host_capacity="2GiB", load_async=False)), phases=["store", "measure"]),
                work, "host-sync")
            log("kvtier host, sync whole loads ...")
            results["kvtier_host_sync_whole"] = run(dict(base, kv=kvtier_kv(dict(
                chunk, host_capacity="2GiB", load_async=False, load_per_layer=False)),
                phases=["store", "measure"]), work, "host-sync-whole")
            disk = os.path.join(work, "disk")
            log("kvtier disk ...")
            run(dict(base, kv=kvtier_kv(dict(chunk, host_capacity="2GiB", disk_dir=disk,
                                             disk_capacity="4GiB")), phases=["store"]), work, "disk-store")
            results["kvtier_disk"] = run(dict(base, kv=kvtier_kv(dict(chunk, host_capacity="2GiB",
                                                                      disk_dir=disk, disk_capacity="4GiB")),
                                              phases=["measure"]), work, "disk")
            log("kvtier daemon ...")
            sock = os.path.join(work, "kvtierd.sock")
            ready = os.path.join(work, "ready.json")
            daemon = subprocess.Popen([os.environ["KVTIERD"], "--listen", "unix://" + sock, "--data-dir",
                                       os.path.join(work, "kvtierd"), "--ready-file", ready,
                                       "--metrics-listen", "", "--host-capacity", "2GiB",
                                       "--disk-capacity", "4GiB", "--log-level", "warn"])
            for _ in range(600):
                if os.path.exists(ready):
                    break
                time.sleep(0.05)
            dkv = kvtier_kv(dict(chunk, kvtierd="unix://" + sock, daemon_deadline_ms=30000))
            run(dict(base, kv=dkv, phases=["store"]), work, "daemon-store")
            results["kvtier_daemon"] = run(dict(base, kv=dkv, phases=["measure"]), work, "daemon")
            results["kvtier_daemon_sync"] = run(dict(base, kv=kvtier_kv(dict(
                chunk, kvtierd="unix://" + sock, daemon_deadline_ms=30000, load_async=False)),
                phases=["measure"]), work, "daemon-sync")
            log("example connector ...")
            ekv = {"kv_connector": "ExampleConnector", "kv_role": "kv_both",
                   "kv_connector_extra_config": {"shared_storage_path": os.path.join(work, "example")}}
            results["example"] = run(dict(base, kv=ekv, phases=["store", "measure"]), work, "example")
        if not a.only_noreuse:
            log("sync loads, per-layer vs whole, alternating ...")
            results["ab_layer"], results["ab_whole"] = [], []
            sync = dict(chunk, host_capacity="2GiB", load_async=False)
            sides = {"layer": Server(dict(base, kv=kvtier_kv(sync)), work, "ab-layer"),
                     "whole": Server(dict(base, kv=kvtier_kv(dict(sync, load_per_layer=False))),
                                     work, "ab-whole")}
            try:
                for s_ in sides.values():
                    s_.wait_ready()
                for r in range(a.noreuse_rounds):
                    order = ("layer", "whole") if r % 2 == 0 else ("whole", "layer")
                    for i, n in enumerate(lengths):
                        p = prompt(555000 + 1000 * r + i, n)
                        for side in order:
                            sides[side].ask(p)  # computes and stores it
                        for side in order:
                            results["ab_" + side].append(dict(sides[side].ask(p), round=r))
            finally:
                for s_ in sides.values():
                    s_.close()
        if a.only_sync_ab:
            for n in lengths:
                lay = {r["round"]: r for r in results["ab_layer"] if r["tokens"] == n}
                who = {r["round"]: r for r in results["ab_whole"] if r["tokens"] == n}
                paired = sorted(lay[k]["ms"] / who[k]["ms"] for k in lay)
                print(json.dumps({"prompt_tokens": n, "ttft_sync_layer_ms": round(
                    statistics.median(r["ms"] for r in lay.values()), 1), "ttft_sync_whole_ms":
                    round(statistics.median(r["ms"] for r in who.values()), 1),
                    "sync_layer_whole_paired": round(statistics.median(paired), 3),
                    "cached": [statistics.median(r["cached"] for r in lay.values()),
                               statistics.median(r["cached"] for r in who.values())],
                    "layered_loads": [max(r["layered_loads"] for r in results["ab_layer"]),
                                      max(r["layered_loads"] for r in results["ab_whole"])]}))
            return 0
        log("no reuse ...")
        results["noreuse_kvtier"], results["noreuse_none"] = [], []
        sides = {"none": Server(dict(base), work, "noreuse-none"),
                 "kvtier": Server(dict(base, kv=dict(kvtier_kv(dict(chunk, host_capacity="2GiB")),
                                                     kv_role=a.noreuse_role)),
                                  work, "noreuse-kvtier")}
        try:
            for s_ in sides.values():
                s_.wait_ready()
            for r in range(a.noreuse_rounds):
                order = ("none", "kvtier") if r % 2 == 0 else ("kvtier", "none")
                for i, n in enumerate(lengths):
                    p = prompt(777000 + 1000 * r + i, n)  # fresh: every lookup misses
                    for side in order:
                        results["noreuse_" + side].append(dict(sides[side].ask(p), round=r))
        finally:
            for s_ in sides.values():
                s_.close()
    finally:
        if daemon is not None:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=60)
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)

    out = []
    for n in lengths:
        def med(key, field="ms", rnd=None):
            return statistics.median(r[field] for r in results[key] if r["tokens"] == n
                                     and (rnd is None or r["round"] == rnd))
        none = {r["round"]: r for r in results["noreuse_none"] if r["tokens"] == n}
        kvt = {r["round"]: r for r in results["noreuse_kvtier"] if r["tokens"] == n}
        paired = sorted(kvt[k]["ms"] / none[k]["ms"] for k in kvt)
        q = statistics.quantiles(paired, n=4) if len(paired) > 1 else paired * 3
        path_ms = [sum(v for k, v in r["hooks_ms"].items() if k not in ("_store", "native_lookup"))
                   for r in kvt.values()]
        prefill = med("noreuse_none")
        noreuse = {
            "prompt_tokens": n,
            "no_reuse_ratio": round(med("noreuse_kvtier") / prefill, 3),
            "no_reuse_paired": round(statistics.median(paired), 3),
            "no_reuse_spread": [round(q[0], 3), round(q[2], 3)],
            "no_reuse_cpu_ratio": round(med("noreuse_kvtier", "cpu_ms") /
                                        med("noreuse_none", "cpu_ms"), 3),
            "no_reuse_connector_frac": round(statistics.median(path_ms) / prefill, 4),
            "no_reuse_lookup_ms": round(statistics.median(
                r["hooks_ms"].get("native_lookup", 0) for r in kvt.values()), 3),
            "no_reuse_store_ms": round(statistics.median(
                r["hooks_ms"].get("_store", 0) for r in kvt.values()), 2),
            "no_reuse_ms": [round(prefill, 1), round(med("noreuse_kvtier"), 1)],
            "no_reuse_rounds": len(paired)}
        if a.only_noreuse:
            out.append(noreuse)
            continue
        row = {"prompt_tokens": n, "ttft_cold_ms": round(med("cold"), 1),
               "ttft_kvtier_host_ms": round(med("kvtier_host"), 1),
               "ttft_kvtier_disk_ms": round(med("kvtier_disk"), 1),
               "ttft_kvtier_daemon_ms": round(med("kvtier_daemon"), 1),
               "ttft_kvtier_host_sync_ms": round(med("kvtier_host_sync"), 1),
               "ttft_kvtier_host_sync_whole_ms": round(med("kvtier_host_sync_whole"), 1),
               "ttft_sync_layer_ab_ms": round(med("ab_layer"), 1),
               "ttft_sync_whole_ab_ms": round(med("ab_whole"), 1),
               "sync_layer_whole_paired": round(statistics.median(
                   x["ms"] / y["ms"] for x in results["ab_layer"] for y in results["ab_whole"]
                   if x["tokens"] == y["tokens"] == n and x["round"] == y["round"]), 3),
               "ttft_kvtier_daemon_sync_ms": round(med("kvtier_daemon_sync"), 1),
               "ttft_example_ms": round(med("example"), 1),
               "ttft_prefix_cache_ms": round(med("prefix_cache"), 1),
               **noreuse,
               "kvtier_cached_tokens": {k: med(k, "cached") for k in
                                        ("kvtier_host", "kvtier_host_sync",
                                         "kvtier_host_sync_whole", "kvtier_disk",
                                         "kvtier_daemon", "kvtier_daemon_sync")}}
        out.append(row)
    if a.json:
        for row in out:
            print(json.dumps(row))
        return 0
    if not a.only_noreuse:
        print(f"{'prompt':>6} {'cold':>8} {'host':>8} {'host-syn':>8} {'syn-whol':>8} "
              f"{'disk':>8} {'kvtierd':>8} {'kvtd-syn':>8} {'example':>8} {'prefix$':>8}  "
              f"{'host/prefix':>11} {'host/example':>12} {'sync/example':>12} "
              f"{'layer/whole':>11}")
        for r in out:
            print(f"{r['prompt_tokens']:>6} {r['ttft_cold_ms']:>8.1f} "
                  f"{r['ttft_kvtier_host_ms']:>8.1f} {r['ttft_kvtier_host_sync_ms']:>8.1f} "
                  f"{r['ttft_kvtier_host_sync_whole_ms']:>8.1f} {r['ttft_kvtier_disk_ms']:>8.1f} "
                  f"{r['ttft_kvtier_daemon_ms']:>8.1f} {r['ttft_kvtier_daemon_sync_ms']:>8.1f} "
                  f"{r['ttft_example_ms']:>8.1f} {r['ttft_prefix_cache_ms']:>8.1f}  "
                  f"{r['ttft_kvtier_host_ms'] / r['ttft_prefix_cache_ms']:>11.2f} "
                  f"{r['ttft_kvtier_host_ms'] / r['ttft_example_ms']:>12.2f} "
                  f"{r['ttft_kvtier_host_sync_ms'] / r['ttft_example_ms']:>12.2f} "
                  f"{r['sync_layer_whole_paired']:>11.2f}")
    print(f"{'prompt':>6} {'none ms':>9} {'kvtier ms':>9} {'no-reuse':>8} {'paired':>7} "
          f"{'IQR':>15} {'cpu':>6} {'hooks/prefill':>13} {'lookup ms':>9} {'store ms':>8} "
          f"{'rounds':>6}")
    for r in out:
        print(f"{r['prompt_tokens']:>6} {r['no_reuse_ms'][0]:>9.1f} {r['no_reuse_ms'][1]:>9.1f} "
              f"{r['no_reuse_ratio']:>8.3f} {r['no_reuse_paired']:>7.3f} "
              f"{str(r['no_reuse_spread']):>15} {r['no_reuse_cpu_ratio']:>6.3f} "
              f"{r['no_reuse_connector_frac']:>13.4f} {r['no_reuse_lookup_ms']:>9.3f} "
              f"{r['no_reuse_store_ms']:>8.2f} {r['no_reuse_rounds']:>6}")
    if a.only_noreuse:
        return 0
    print("targets: kvtier warm <= 1.3 x prefix cache and <= 0.5 x ExampleConnector at >= 2k "
          "tokens; no-reuse ratio <= 1.02 (times in ms; TTFT of a 1-token request)")
    print("cached tokens (kvtier): " + ", ".join(
        f"{r['prompt_tokens']}: {r['kvtier_cached_tokens']}" for r in out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
