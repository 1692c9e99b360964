#!/usr/bin/env python3
"""Plot the server demo's ttft.csv: TTFT against prompt tokens, one line per configuration."""
import csv
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(csv_path: str, png_path: str) -> None:
    series = defaultdict(list)
    with open(csv_path, newline="") as f:
        for row in csv.DictReader(f):
            series[row["config"]].append((int(row["prompt_tokens"]), float(row["ttft_ms_median"]),
                                          row["workload"]))
    fig, ax = plt.subplots(figsize=(9.5, 5), dpi=120)
    styles = {"cold": ("o", "-"), "llama-server": ("x", "--"), "server-cache": ("s", "-"),
              "host": ("^", "-"), "disk": ("v", "-"), "kvtierd": ("D", "-")}
    labels = {"cold": "cold (demo's server)", "llama-server": "cold (llama.cpp's llama-server)",
              "server-cache": "llama-server RAM cache", "host": "kvtier host",
              "disk": "kvtier disk (fresh server)", "kvtierd": "kvtierd (fresh server)"}
    for config in ["cold", "llama-server", "server-cache", "host", "disk", "kvtierd"]:
        marker, line = styles[config]
        color = None
        # One line per workload (the chat turns; the document questions), so a line never
        # joins two workloads; one legend entry per configuration.
        for workload in ["chat", "doc-qa"]:
            pts = sorted(p for p in series.get(config, []) if p[2] == workload)
            if not pts:
                continue
            drawn = ax.plot([p[0] for p in pts], [p[1] / 1000.0 for p in pts], marker=marker,
                            linestyle=line if len(pts) > 1 else "none", color=color,
                            label=labels[config] if color is None else None)
            color = drawn[0].get_color()
    ax.set_xlabel("prompt tokens (chat turns joined by lines; the document question alone)")
    ax.set_ylabel("TTFT (s, client-side, median)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_title("llama-server TTFT: cold vs its RAM cache vs kvtier tiers")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    fig.savefig(png_path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
