#!/usr/bin/env python3
"""Plots `kvtier-bench trace --sweep --json` (token hit ratio against tier capacity, one
line per policy, the offline optimum dashed), one panel per trace.

Usage (matplotlib is not a project dependency; a throwaway venv outside the repo does):
  python3 -m venv /tmp/plotvenv && /tmp/plotvenv/bin/pip install matplotlib
  build/release/bench/kvtier-bench trace --sweep --json > /tmp/sweep.jsonl
  /tmp/plotvenv/bin/python bench/plot_cache_policy.py /tmp/sweep.jsonl bench/cache_policy_sweep.png
"""
import json
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

STYLE = {
    "default": dict(color="tab:red", marker="o", linewidth=2.2, label="default (adaptive)"),
    "lru": dict(color="tab:blue", marker="s", label="lru"),
    "lfu": dict(color="tab:green", marker="^", label="lfu"),
    "arc": dict(color="tab:purple", marker="D", label="arc"),
    "s3fifo": dict(color="tab:orange", marker="v", label="s3fifo"),
    "optimum": dict(color="black", linestyle="--", marker=".", label="offline optimum"),
}


def main(src, dst):
    # trace -> policy -> [(capacity, ratio)]; host-only rows (the two-tier rows are not plotted)
    data = defaultdict(lambda: defaultdict(list))
    with open(src) as f:
        for line in f:
            j = json.loads(line)
            if "policy" not in j or j.get("tiers", "host") != "host":
                continue
            data[j["trace"]][j["policy"]].append((j["capacity_fraction"], j["token_hit_ratio"]))
    traces = [t for t in ("conversation", "synthetic") if t in data]
    fig, axes = plt.subplots(1, len(traces), figsize=(6 * len(traces), 4.5), squeeze=False)
    for ax, trace in zip(axes[0], traces):
        for policy, style in STYLE.items():
            points = sorted(data[trace].get(policy, []))
            if points:
                ax.plot([100 * c for c, _ in points], [r for _, r in points], **style)
        ax.set_xscale("log")
        ax.set_xticks([1, 2, 5, 10, 20, 50])
        ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("tier capacity (% of the trace's distinct blocks)")
        ax.set_ylabel("token hit ratio")
        ax.set_title(f"Mooncake {trace} trace")
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
    axes[0][0].legend(loc="lower right", fontsize=9)
    fig.tight_layout()
    fig.savefig(dst, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
