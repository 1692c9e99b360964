"""Shared pieces of the vllm tests: environment, tiny models, a real kvtierd, engine runs.

Environment (set by tests/vllm/run.sh, which ctest calls): KVTIERD = path of the kvtierd
binary, KVTIER_LIB = libkvtier.so, PYTHONPATH includes connectors/vllm and tests/vllm.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ENGINE_ENV = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
              "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "OMP_NUM_THREADS": "1",
              "VLLM_LOGGING_LEVEL": "WARNING", "TOKENIZERS_PARALLELISM": "false"}
os.environ.update({k: v for k, v in ENGINE_ENV.items() if k not in os.environ})

CACHE = os.environ.get("KVT_VLLM_TEST_CACHE", os.path.join(tempfile.gettempdir(),
                                                          "kvtier-vllm-test-models"))


def tiny_model(name="tiny", seed=0, **kw) -> str:
    from kvtier.make_model import PRESETS, make_model
    cfg = dict(PRESETS["tiny"])
    cfg.update(kw)
    return make_model(os.path.join(CACHE, name), seed=seed, **cfg)


def prompt(seed: int, n: int, vocab: int = 1000) -> list[int]:
    """Deterministic token ids in [3, vocab): prompt `seed` of length n."""
    x = seed * 2654435761 % 2**32 or 1
    out = []
    for _ in range(n):
        x = (1103515245 * x + 12345) % 2**31
        out.append(3 + x % (vocab - 3))
    return out


class Kvtierd:
    """A real kvtierd on a unix socket in `dir` with a disk tier (durability sync)."""

    def __init__(self, dir: str):
        self.dir = dir
        self.sock = os.path.join(dir, "kvtierd.sock")
        self.address = "unix://" + self.sock
        self.data = os.path.join(dir, "data")
        self.proc = None
        self.metrics_port = None

    def start(self):
        ready = os.path.join(self.dir, "ready.json")
        if os.path.exists(ready):
            os.unlink(ready)
        log = open(os.path.join(self.dir, "kvtierd.log"), "ab")
        self.proc = subprocess.Popen(
            [os.environ["KVTIERD"], "--listen", self.address, "--data-dir", self.data,
             "--ready-file", ready, "--metrics-listen", "127.0.0.1:0", "--durability", "sync",
             "--host-capacity", "64MiB", "--disk-capacity", "1GiB", "--log-level", "warn"],
            stdout=log, stderr=subprocess.STDOUT)
        log.close()  # the child has its own descriptor
        deadline = time.time() + 30
        while not os.path.exists(ready):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"kvtierd did not start (rc {self.proc.poll()}); see "
                                   f"{self.dir}/kvtierd.log")
            time.sleep(0.05)
        time.sleep(0.05)
        with open(ready) as f:
            self.metrics_port = json.load(f).get("metrics_port")
        return self

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            if sig == signal.SIGCONT:
                return
            self.proc.wait(timeout=30)
        self.proc = None

    def metrics(self) -> str:
        import urllib.request
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()


def run_engine(spec: dict, workdir: str, name: str) -> subprocess.Popen:
    """Starts engine_run.py in a fresh process; wait with engine_result()."""
    sp = os.path.join(workdir, f"{name}.spec.json")
    out = os.path.join(workdir, f"{name}.out.json")
    with open(sp, "w") as f:
        json.dump(spec, f)
    log = open(os.path.join(workdir, f"{name}.log"), "wb")
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "engine_run.py"), sp, out],
                         stdout=log, stderr=subprocess.STDOUT)
    p.kvt_out, p.kvt_log, p.kvt_logfile = out, log.name, log
    return p


def engine_result(p: subprocess.Popen, timeout=600) -> dict:
    rc = p.wait(timeout=timeout)
    if rc != 0:
        tail = open(p.kvt_log, errors="replace").read()[-4000:]
        raise AssertionError(f"engine process exited {rc}; log tail:\n{tail}")
    p.kvt_logfile.close()
    with open(p.kvt_out) as f:
        return json.load(f)


def generate(llm, prompts, max_tokens=8, batch=False):
    """Greedy rows, one prompt at a time (each request's hits are its own), or all in
    one generate call (batch=True: they run together and compete for blocks)."""
    from vllm import SamplingParams, TokensPrompt
    sp = SamplingParams(max_tokens=max_tokens, temperature=0, logprobs=1, ignore_eos=True)
    rows = []
    if batch:
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], sp,
                            use_tqdm=False)
    else:
        outs = [llm.generate([TokensPrompt(prompt_token_ids=p)], sp, use_tqdm=False)[0]
                for p in prompts]
    for o in outs:
        out = o.outputs[0]
        rows.append({"prompt_tokens": len(o.prompt_token_ids),
                     "num_cached_tokens": o.num_cached_tokens or 0,
                     "token_ids": list(out.token_ids),
                     "logprobs": [lp[t].logprob for lp, t in zip(out.logprobs, out.token_ids)],
                     "text": out.text})
    return rows


def prefix_hit_row(llm, ids: list[int], cached: int, max_tokens: int = 8) -> dict:
    """The reference for a request that loads `cached` tokens from kvtier: the same request
    when vLLM's own prefix cache holds exactly its first `cached` tokens (docs/vllm.md,
    "Exactness"). `llm` must run with enable_prefix_caching=True; its prefix cache is
    reset, filled by a prompt that shares exactly those tokens (`cached` a multiple of the
    block size), and reset again after."""
    llm.reset_prefix_cache()
    other = ids[cached] + 1 if ids[cached] + 1 < 1000 else 3
    generate(llm, [ids[:cached] + [other]], max_tokens)
    row = generate(llm, [ids], max_tokens)[0]
    llm.reset_prefix_cache()
    if row["num_cached_tokens"] != cached:
        raise AssertionError(f"vLLM's prefix cache held {row['num_cached_tokens']} tokens, "
                             f"not {cached}")
    return row

