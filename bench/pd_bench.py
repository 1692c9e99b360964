"""Disaggregated prefill (PD) against one colocated vLLM: TTFT, time per output token, and
what the kvtier handoff costs (issue 26).

Servers (vLLM's OpenAI server, the ~245 MB random 8-layer model of kvtier.make_model
--preset bench, CPU, --no-enable-prefix-caching everywhere): a colocated instance without
a connector; a prefill instance (kv_producer) and a decode instance (kv_consumer) sharing
one kvtierd; kvtier-pd-proxy in front of those two (1 + 1). chunk_tokens 128 (the CPU
block size). Each request streams `--max-tokens` tokens (ignore_eos, greedy), and for
every prompt length and repetition, on a fresh prompt, in this order:

  colocated   TTFT and TPOT of the colocated instance (a cold prefill);
  pd          TTFT and TPOT through the proxy; the proxy's x-kvtier-pd-* headers give
              the prefill request's time (prefill + 1 token on the producer) and the wait
              until kvtierd held every complete chunk;
  decode      the same prompt again, sent to the decode instance directly: its TTFT is
              the load of the prompt's chunks from kvtierd plus the computed rest and
              first token (what the decode instance does inside a PD request);
  proxy       pd TTFT - prefill - wait - decode TTFT: the proxy's own latency (HTTP hops,
              JSON, the lookups' first answer), with the machine's noise in it.

The handoff overhead is wait + (decode TTFT - the decode instance's compute of the tail)
+ proxy; the table gives the parts. Lengths ending on a chunk boundary are loaded whole
(an async load leaves vLLM only the last token to compute); `--partial` adds each length
+ half a chunk, whose last 64 tokens the decode instance computes (kvtier hands over whole
chunks only): decode TTFT(L + 64) - decode TTFT(L) is what handing over the partial chunk
would save. Medians over `--reps`.

    bash bench/pd_bench.sh [--json] [--lengths 512,1024,2048,3968] [--reps 3] [--partial]
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "vllm"))
import harness  # noqa: E402 - engine environment, kvtierd
import pd_servers  # noqa: E402

CHUNK = 128


def prompt(seed: int, n: int, vocab: int = 8000) -> list[int]:
    return harness.prompt(seed, n, vocab)


def stream(base: str, model: str, ids: list[int], max_tokens: int) -> dict:
    """One streamed completion: TTFT, TPOT (ms), the proxy headers, cached tokens."""
    import httpx
    # Token ids, not text: vLLM bounds a text prompt at 5 characters per token of
    # max_model_len, and the bench vocabulary's words take up to 6 with their space.
    body = {"model": model, "prompt": ids, "max_tokens": max_tokens,
            "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    times, usage = [], None
    t0 = time.perf_counter()
    with httpx.stream("POST", base + "/v1/completions", json=body, timeout=600) as r:
        if r.status_code != 200:
            raise RuntimeError(f"{base}: HTTP {r.status_code} for a {len(ids)}-token prompt: "
                               f"{r.read().decode(errors='replace')[:500]}")
        headers = {k: v for k, v in r.headers.items() if k.startswith("x-kvtier-pd-")}
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("usage"):
                usage = ev["usage"]
            if ev.get("choices") and ev["choices"][0].get("text") is not None:
                times.append(time.perf_counter() - t0)
    if len(times) < 2:
        raise RuntimeError(f"{base}: {len(times)} tokens streamed")
    details = (usage or {}).get("prompt_tokens_details") or {}
    return {"ttft_ms": times[0] * 1000,
            "tpot_ms": (times[-1] - times[0]) / (len(times) - 1) * 1000,
            "tokens": len(times), "cached": details.get("cached_tokens") or 0,
            "prefill_ms": float(headers.get("x-kvtier-pd-prefill-ms", "nan")),
            "wait_ms": float(headers.get("x-kvtier-pd-wait-ms", "nan")),
            "ready": headers.get("x-kvtier-pd-ready")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--lengths", default="512,1024,2048,3968")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--partial", action="store_true",
                    help="also each length + half a chunk (the partial last chunk)")
    ap.add_argument("--model-dir", default=os.path.join(tempfile.gettempdir(),
                                                        "kvtier-bench-245m"))
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    a = ap.parse_args()
    lengths = [int(x) for x in a.lengths.split(",")]
    if a.partial:
        lengths = sorted(set(lengths + [n + CHUNK // 2 for n in lengths]))
    max_len = max(lengths) + a.max_tokens + 16
    from kvtier.make_model import PRESETS, make_model
    model = make_model(a.model_dir, max_len=max(4096 + 256, max_len), **PRESETS["bench"])
    log = (lambda *x: None) if a.json else (lambda *x: print(*x, file=sys.stderr, flush=True))
    work = tempfile.mkdtemp(prefix="kvt-pd-bench-")
    procs = []
    daemon = harness.Kvtierd(work)
    try:
        daemon.start()
        extra = {"kvtierd": daemon.address, "use_cost_model": False, "chunk_tokens": CHUNK,
                 "daemon_deadline_ms": 30000}
        kw = dict(prefix_caching=False, max_model_len=max_len)
        colo = pd_servers.vllm_server(model, work, "colocated", None, None, **kw)
        prod = pd_servers.vllm_server(model, work, "producer", "kv_producer", extra, **kw)
        cons = pd_servers.vllm_server(model, work, "consumer", "kv_consumer", extra, **kw)
        procs = [colo, prod, cons]
        log("starting 3 vLLM servers ...")
        for p in procs:
            p.wait_healthy()
        proxy = pd_servers.pd_proxy(work, "proxy", [prod.url], [cons.url])
        procs.append(proxy)
        proxy.wait_healthy()
        warm = prompt(99999, 256)
        for base in (colo.url, proxy.url, cons.url):  # first requests pay one-time costs
            stream(base, model, warm, 4)
        rows = {n: {"colocated": [], "pd": [], "decode": []} for n in lengths}
        for r in range(a.reps):
            for i, n in enumerate(lengths):
                ids = prompt(1000 * r + i + 1, n)
                log(f"rep {r} prompt {n} ...")
                rows[n]["colocated"].append(stream(colo.url, model, ids, a.max_tokens))
                rows[n]["pd"].append(stream(proxy.url, model, ids, a.max_tokens))
                rows[n]["decode"].append(stream(cons.url, model, ids, a.max_tokens))
        out = []
        for n in lengths:
            def med(kind, key):
                return statistics.median(x[key] for x in rows[n][kind])
            proxy_ms = statistics.median(
                p["ttft_ms"] - p["prefill_ms"] - p["wait_ms"] - d["ttft_ms"]
                for p, d in zip(rows[n]["pd"], rows[n]["decode"]))
            out.append({
                "prompt_tokens": n, "loaded_tokens": n // CHUNK * CHUNK,
                "colocated_ttft_ms": med("colocated", "ttft_ms"),
                "pd_ttft_ms": med("pd", "ttft_ms"),
                "pd_prefill_ms": med("pd", "prefill_ms"), "pd_wait_ms": med("pd", "wait_ms"),
                "decode_ttft_ms": med("decode", "ttft_ms"), "proxy_ms": proxy_ms,
                "colocated_tpot_ms": med("colocated", "tpot_ms"),
                "pd_tpot_ms": med("pd", "tpot_ms"),
                "decode_cached_tokens": [x["cached"] for x in rows[n]["decode"]],
                "pd_cached_tokens": [x["cached"] for x in rows[n]["pd"]],
                "ready": [x["ready"] for x in rows[n]["pd"]], "reps": a.reps})
        if a.json:
            print(json.dumps({"chunk_tokens": CHUNK, "max_tokens": a.max_tokens, "rows": out},
                             indent=1))
        else:
            print(f"chunk_tokens {CHUNK}, {a.max_tokens} output tokens, medians of {a.reps}; "
                  "ms")
            print(f"{'prompt':>6} {'colo TTFT':>9} {'PD TTFT':>8} {'PD/colo':>7} "
                  f"{'prefill':>8} {'wait':>6} {'dec TTFT':>8} {'dec/colo':>8} {'proxy':>6} "
                  f"{'colo TPOT':>9} {'PD TPOT':>8} {'loaded':>6}")
            for o in out:
                print(f"{o['prompt_tokens']:>6} {o['colocated_ttft_ms']:>9.1f} "
                      f"{o['pd_ttft_ms']:>8.1f} {o['pd_ttft_ms'] / o['colocated_ttft_ms']:>7.2f} "
                      f"{o['pd_prefill_ms']:>8.1f} {o['pd_wait_ms']:>6.1f} "
                      f"{o['decode_ttft_ms']:>8.1f} "
                      f"{o['decode_ttft_ms'] / o['colocated_ttft_ms']:>8.2f} "
                      f"{o['proxy_ms']:>6.1f} {o['colocated_tpot_ms']:>9.2f} "
                      f"{o['pd_tpot_ms']:>8.2f} {max(o['decode_cached_tokens']):>6}")
            if a.partial:
                by = {o["prompt_tokens"]: o for o in out}
                for n in sorted(by):
                    if n + CHUNK // 2 in by and n % CHUNK == 0:
                        d = by[n + CHUNK // 2]["decode_ttft_ms"] - by[n]["decode_ttft_ms"]
                        print(f"partial last chunk at {n} + {CHUNK // 2}: the decode instance "
                              f"computes {CHUNK // 2} more tokens, {d:+.1f} ms TTFT (what "
                              "handing the partial chunk over would save)")
        return 0
    finally:
        for p in reversed(procs):
            p.stop()
        daemon.stop()
        if a.keep:
            print(f"work directory kept: {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
