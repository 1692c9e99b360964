#!/usr/bin/env python3
"""Cold prefill of the same prompt through several llama-server binaries, interleaved.

Issue 14, item 0: the demo's cold prefill against plain llama-server on the same model,
threads and batch, measured in the same run. Each binary runs as its own server with the
same flags; rounds are interleaved (A B C, A B C, ...); the figure is the server's own
timings.prompt_ms (prefill only) and the client-side time to the answer, medians.

  compare_prefill.py --model M --tokens 2048 --rounds 3 \
      NAME=BINARY[,extra flags] NAME=BINARY ...
"""
import argparse
import json
import socket
import statistics
import subprocess
import sys
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port: int, path: str, body: dict) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=900) as r:
        return json.load(r)


def wait_healthy(port: int, proc: subprocess.Popen) -> None:
    for _ in range(3000):
        if proc.poll() is not None:
            sys.exit(f"server on port {port} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    sys.exit(f"server on port {port} not healthy")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ubatch", type=int, default=256)
    ap.add_argument("servers", nargs="+", help="NAME=BINARY[,flag,flag...]")
    a = ap.parse_args()
    common = ["-m", a.model, "-t", str(a.threads), "-tb", str(a.threads), "-c", str(a.tokens + 64),
              "-np", "1", "-ub", str(a.ubatch), "--no-warmup"]
    servers = []
    for spec in a.servers:
        name, rest = spec.split("=", 1)
        binary, *extra = rest.split(",")
        port = free_port()
        log = open(f"/tmp/compare-prefill-{name}.log", "w")
        proc = subprocess.Popen([binary, *common, *extra, "--host", "127.0.0.1", "--port", str(port)],
                                stdout=log, stderr=subprocess.STDOUT)
        servers.append((name, port, proc))
    for _, port, proc in servers:
        wait_healthy(port, proc)
    prompt = [3 + (i * 7919) % 31000 for i in range(a.tokens)]
    results = {name: [] for name, _, _ in servers}
    try:
        for r in range(a.rounds):
            order = servers[r % len(servers):] + servers[:r % len(servers)]
            for name, port, _ in order:
                t0 = time.monotonic()
                ans = post(port, "/completion", {"prompt": prompt, "n_predict": 1, "cache_prompt": False})
                wall = (time.monotonic() - t0) * 1000
                results[name].append((ans["timings"]["prompt_ms"], wall))
                print(f"round {r + 1} {name:>10}: prefill {ans['timings']['prompt_ms']:9.1f} ms, "
                      f"client {wall:9.1f} ms", flush=True)
    finally:
        for _, _, proc in servers:
            proc.terminate()
            proc.wait()
    base = statistics.median(x[0] for x in results[servers[0][0]])
    print(f"\n{'server':>10} {'prefill ms':>11} {'client ms':>10} {'ratio':>6}   ({a.tokens} tokens, "
          f"{a.threads} threads, -ub {a.ubatch}, medians of {a.rounds})")
    for name, _, _ in servers:
        p = statistics.median(x[0] for x in results[name])
        w = statistics.median(x[1] for x in results[name])
        print(f"{name:>10} {p:11.1f} {w:10.1f} {p / base:6.3f}")


if __name__ == "__main__":
    main()
