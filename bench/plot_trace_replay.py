#!/usr/bin/env python3
"""Plots the per-request CSV of `kvtier-trace-replay` (bench/trace_replay.cc): the CDF of
TTFT, one line per configuration (plain/kvtier llama-servers, vLLM with its prefix cache or
KVTierConnector; affinity/random routing).

Usage (matplotlib is not a project dependency; a throwaway venv outside the repo does):
  python3 -m venv /tmp/plotvenv && /tmp/plotvenv/bin/pip install matplotlib
  /tmp/plotvenv/bin/python bench/plot_trace_replay.py /tmp/replay/replay.csv bench/trace_replay_ttft.png
"""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, dst):
    ttft = defaultdict(list)  # config -> TTFT ms of the requests that succeeded
    with open(src, newline="") as f:
        for row in csv.DictReader(f):
            if row["ok"] == "1":
                ttft[row["config"]].append(float(row["ttft_ms"]))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for config, values in ttft.items():
        values.sort()
        n = len(values)
        ax.plot(values, [(i + 1) / n for i in range(n)], label=f"{config} (n={n})")
    ax.set_xscale("log")
    ax.set_xlabel("TTFT (ms, client side)")
    ax.set_ylabel("fraction of requests")
    ax.set_title("Mooncake trace through the engines: TTFT CDF")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(dst, dpi=120)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: plot_trace_replay.py REPLAY.csv OUT.png")
    main(sys.argv[1], sys.argv[2])
