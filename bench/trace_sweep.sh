#!/usr/bin/env bash
# Chunk-size sweep of the Mooncake trace replay: kvtier-trace-replay at the trace's real
# 512-token blocks (--block-tokens 512; --block-tokens N scales them, e.g. 128 with
# --chunks "16 32 64" keeps the ratios of 64/128/256 to 512 at a quarter of the prompt
# lengths), once per kvtier chunk size (--kvtier-chunk-tokens and every server's -ub;
# default 64, 128, 256 tokens), the same request stream each time.
# One table of every (chunk size, configuration): requests, errors, TTFT p50/p90, prompt
# tokens, reused tokens (prompt tokens the server did not compute), kvtier's loaded tokens,
# hits, stored chunks and stored bytes (chunks x chunk tokens x bytes per token, summed
# over the servers), kvtier's time on the servers' task loops per request (lookups and
# restores before prefills; storing after first tokens), and answers that differ from
# the reference configuration's. Written
# as Markdown (stdout and <out>/sweep.md) and CSV (<out>/sweep.csv); each run's JSON lines
# and run folder (server logs, per-request CSV) stay under <out>.
#
# Usage: bash bench/trace_sweep.sh [--chunks "64 128 256"] [--block-tokens 512]
#            [--configs LIST] [--out DIR]
#            [any other kvtier-trace-replay flag, e.g. --max-requests 40]
# Defaults: --configs plain-random,kvtier-random, the tiny generated model (or --model), 2 servers of
# 1 slot, concurrency 2, kvtierd host 256 MiB + disk 1 GiB (each overridden by the
# replayer's own flag: --servers, --slots, --concurrency, --kvtierd-host-mib,
# --kvtierd-disk-mib). Exit 1 when a run fails; the runs' PASS/FAIL targets are in the JSON.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
build="${KVT_BUILD_DIR:-$src/build/release}"
chunks="64 128 256" block=512 configs="plain-random,kvtier-random" out="" pass=()
declare -A defaults=([--servers]=2 [--slots]=1 [--concurrency]=2 [--kvtierd-host-mib]=256
                     [--kvtierd-disk-mib]=1024)
while [ $# -gt 0 ]; do
  case $1 in
    --servers|--slots|--concurrency|--kvtierd-host-mib|--kvtierd-disk-mib)
      defaults[$1]=$2; shift 2 ;;
    --chunks) chunks=$2; shift 2 ;;
    --block-tokens) block=$2; shift 2 ;;
    --configs) configs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --chunk-tokens|--json|--dir|--csv)
      echo "trace_sweep.sh: $1 is set by the sweep" >&2; exit 2 ;;
    *) pass+=("$1"); shift ;;
  esac
done
replay="$build/bench/kvtier-trace-replay"
server="$build/connectors/llamacpp/server/kvtier-llama-server"
kvtierd="$build/daemon/kvtierd"
make_gguf="$build/connectors/llamacpp/kvtier-make-gguf"
for b in "$replay" "$server" "$kvtierd" "$make_gguf"; do
  [ -x "$b" ] || { echo "trace_sweep.sh: $b missing: run scripts/build.sh" >&2; exit 1; }
done
[[ "$block" =~ ^[0-9]+$ && $block -ge 1 && $block -le 512 ]] ||
  { echo "trace_sweep.sh: --block-tokens '$block' is not 1..512 tokens" >&2; exit 2; }
for c in $chunks; do
  [[ "$c" =~ ^[0-9]+$ && $c -ge 16 && $c -le 512 ]] ||
    { echo "trace_sweep.sh: chunk size '$c' is not 16..512 tokens" >&2; exit 2; }
done
fixed=()
for k in "${!defaults[@]}"; do fixed+=("$k" "${defaults[$k]}"); done
out=${out:-$(mktemp -d "${TMPDIR:-/tmp}/kvt-trace-sweep.XXXXXX")}
mkdir -p "$out"

for c in $chunks; do
  echo "=== chunk $c tokens ===" >&2
  # Each run makes the same seeded tiny model (kvtier-make-gguf), whose training context
  # the replayer raises to the prompts' length (512-token blocks make long prompts).
  if ! "$replay" --json --server "$server" --kvtierd "$kvtierd" --make-gguf "$make_gguf" \
      --configs "$configs" "${fixed[@]}" "${pass[@]}" \
      --block-tokens "$block" --chunk-tokens "$c" --dir "$out/chunk-$c" >"$out/chunk-$c.jsonl"; then
    echo "trace_sweep.sh: the run at chunk $c failed; see $out/chunk-$c" >&2
    exit 1
  fi
done

python3 - "$out" $chunks <<'EOF'
import csv, json, os, sys
out, chunks = sys.argv[1], sys.argv[2:]
cols = ["chunk_tokens", "config", "requests", "errors", "ttft_p50_ms", "ttft_p90_ms",
        "prompt_tokens", "reused_tokens", "kvtier_loaded_tokens", "kvtier_hits",
        "kvtier_stored_chunks", "kvtier_stored_bytes", "kvtier_prompt_start_ms_per_request",
        "kvtier_store_ms_per_request", "answers_differing"]
rows, targets = [], []
for c in chunks:
    with open(os.path.join(out, f"chunk-{c}.jsonl")) as f:
        for line in f:
            j = json.loads(line)
            if "config" in j:
                n = max(1, j.get("requests", 0))
                if j["config"].startswith("kvtier"):
                    j["kvtier_prompt_start_ms_per_request"] = \
                        1e3 * j.get("kvtier_prompt_start_seconds", 0) / n
                    j["kvtier_store_ms_per_request"] = 1e3 * j.get("kvtier_store_seconds", 0) / n
                rows.append([j.get(k, "") for k in cols])
            elif "target" in j:
                targets.append(f"chunk {c}: [{'PASS' if j['pass'] else 'FAIL'}] "
                               f"{j['target']}: {j['detail']}")
with open(os.path.join(out, "sweep.csv"), "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(cols)
    w.writerows(rows)

def cell(v):
    if isinstance(v, float):
        return f"{v:,.1f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)

md = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
md += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
text = "\n".join(md) + "\n\n" + "\n".join(targets) + "\n"
with open(os.path.join(out, "sweep.md"), "w") as f:
    f.write(text)
print(text)
print(f"CSV {os.path.join(out, 'sweep.csv')}; runs under {out}")
EOF
