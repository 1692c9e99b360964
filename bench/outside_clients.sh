#!/usr/bin/env bash
# Outside clients (issue 25). --tool vllm (default): vLLM's own load generator, `vllm
# bench serve` (the vllm.benchmarks.serve module of the pinned vLLM venv,
# scripts/install-vllm.sh; its `vllm` console script cannot start in the CPU wheel, see
# docs/performance.md), against kvtier-llama-server in three setups on the same request
# stream:
#   plain           no kvtier flag: llama-server with its own RAM prompt cache (--cache-ram)
#   kvtier          --kvtier-dir (embedded host + disk tier), fresh
#   kvtier-restart  the same server restarted on the same --kvtier-dir (a fresh process)
# and, for reference, `plain-restart` (plain restarted: its RAM cache is gone).
# The workload is the tool's shared-prefix dataset (prefix_repetition: N prefixes, each
# request one prefix + a random suffix), sent as text to /v1/completions, --max-concurrency
# requests in flight. Each run prints the tool's own summary (TTFT, TPOT, throughput); a
# table of the four at the end. The model is a generated demo-size GGUF
# (kvtier-make-gguf); the prompts' words come from a word-level tokenizer
# (python -m kvtier.make_model), which the server tokenizes with its own vocabulary
# (about 4 server tokens per word: the lengths below are the tool's, in words).
#
# --tool lmcache: LMCache's load generator, `lmcache bench engine` (lmcache 0.5.6 from
# PyPI, client only, scripts/install-lmcache.sh) with --workload multi-round-chat (default:
# --num-prefixes sessions, each a system prompt of --prefix-len words and a chat history
# of 2 x --prefix-len, new questions of --suffix-len words at --qps for --duration s) or
# long-doc-qa (--num-prefixes documents of --prefix-len words, each asked 2 questions,
# --concurrency in flight). Chat completions (/v1/chat/completions), greedy, --no-warmup
# (the first request of a prefix is cold: a restarted server has only what kvtier kept),
# the same seed in every setup. The same four setups; the tool's JSON summary per setup
# and a table at the end.
#
# Usage: bash bench/outside_clients.sh [--tool vllm|lmcache] [--num-prompts N]
#            [--prefix-len T] [--suffix-len T] [--num-prefixes N] [--output-len T]
#            [--concurrency N] [--size demo|tiny] [--out DIR]
#            [--workload multi-round-chat|long-doc-qa] [--qps Q] [--duration S]
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
build="${KVT_BUILD_DIR:-$src/build/release}"
num_prompts=24 prefix_len=256 suffix_len=16 num_prefixes=4 output_len=4 concurrency=2 size=demo out=""
tool=vllm workload=multi-round-chat qps=0.25 duration=40
while [ $# -gt 0 ]; do
  case $1 in
    --tool) tool=$2; shift 2 ;;
    --workload) workload=$2; shift 2 ;;
    --qps) qps=$2; shift 2 ;;
    --duration) duration=$2; shift 2 ;;
    --num-prompts) num_prompts=$2; shift 2 ;;
    --prefix-len) prefix_len=$2; shift 2 ;;
    --suffix-len) suffix_len=$2; shift 2 ;;
    --num-prefixes) num_prefixes=$2; shift 2 ;;
    --output-len) output_len=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --size) size=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "outside_clients.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
server="$build/connectors/llamacpp/server/kvtier-llama-server"
make_gguf="$build/connectors/llamacpp/kvtier-make-gguf"
for b in "$server" "$make_gguf"; do
  [ -x "$b" ] || { echo "outside_clients.sh: $b missing: run scripts/build.sh" >&2; exit 1; }
done
case $tool/$workload in
  vllm/*|lmcache/multi-round-chat|lmcache/long-doc-qa) ;;
  *) echo "outside_clients.sh: --tool vllm|lmcache, --workload multi-round-chat|long-doc-qa" >&2
     exit 2 ;;
esac
if [ "$tool" = vllm ]; then
  py="$(bash "$src/scripts/install-vllm.sh" | tail -1)"
else
  lmcache="$(bash "$src/scripts/install-lmcache.sh" | tail -1)"
  py="$(dirname "$lmcache")/python"
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/kvt-outside.XXXXXX")
out=${out:-$work/results}
mkdir -p "$out"
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$work/kvtier" "$work/model.gguf"
}
trap cleanup EXIT

"$make_gguf" --size "$size" --out "$work/model.gguf" >/dev/null
if [ "$tool" = vllm ]; then
  PYTHONPATH="$src/connectors/vllm" "$py" -m kvtier.make_model --out "$work/tokenizer" >/dev/null
fi
port=$((20000 + RANDOM % 20000))
# The tool's lengths count its tokenizer's words; the server's vocabulary splits a word
# into about 4 tokens (a 512-word prefix is ~2,000 server tokens): 6 per word, 2 slots.
# multi-round-chat's prompt is the system prompt, a 2 x --prefix-len history and the
# questions and answers of the session so far.
words=$((prefix_len + suffix_len + output_len))
[ "$tool" = lmcache ] && words=$((prefix_len * 4 + 64 * (suffix_len + output_len)))
ctx=$(( words * 6 * 2 + 256 ))

start_server() {  # name, extra flags...
  local name=$1
  shift
  "$server" -m "$work/model.gguf" --host 127.0.0.1 --port "$port" -c "$ctx" -np 2 \
    --cache-ram 8192 "$@" >"$out/$name.server.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.5
  done
  echo "outside_clients.sh: server '$name' did not start; log:" >&2
  tail -20 "$out/$name.server.log" >&2
  exit 1
}
stop_server() {
  kill "$pid" && wait "$pid" 2>/dev/null || true
  pid=""
}
bench_lmcache() {  # name
  echo "=== lmcache bench engine ($workload): $1 ==="
  local w=()
  # Sessions (documents) = --kv-cache-volume x --tokens-per-gb-kvcache / their length.
  if [ "$workload" = multi-round-chat ]; then
    w=(--mrc-shared-prompt-length "$prefix_len" --mrc-chat-history-length $((2 * prefix_len))
       --mrc-user-input-length "$suffix_len" --mrc-output-length "$output_len"
       --mrc-qps "$qps" --mrc-duration "$duration"
       --kv-cache-volume 1 --tokens-per-gb-kvcache $((3 * prefix_len * num_prefixes)))
  else
    w=(--ldqa-document-length "$prefix_len" --ldqa-query-per-document 2
       --ldqa-num-inflight-requests "$concurrency" --ldqa-max-output-length "$output_len"
       --kv-cache-volume 1 --tokens-per-gb-kvcache $((prefix_len * num_prefixes)))
  fi
  LMCACHE_DISABLE_BANNER=1 "$lmcache" bench engine --engine-url "http://127.0.0.1:$port" \
    --workload "$workload" "${w[@]}" --seed 0 --no-warmup --no-interactive --ignore-eos \
    --json --output-dir "$out/$1" 2>&1 | sed -n '/====== Engine Benchmark Result/,$p'
  [ -f "$out/$1/bench_summary.json" ] ||
    { echo "outside_clients.sh: lmcache wrote no summary for $1" >&2; exit 1; }
  cp "$out/$1/bench_summary.json" "$out/$1.json"
}
bench() {  # name
  if [ "$tool" = lmcache ]; then bench_lmcache "$1"; return; fi
  echo "=== vllm bench serve: $1 ==="
  "$py" - "$1" <<EOF
import sys
from vllm.benchmarks import serve
from vllm.utils.argparse_utils import FlexibleArgumentParser
p = FlexibleArgumentParser()
serve.add_cli_args(p)
args = p.parse_args([
    "--backend", "openai", "--base-url", "http://127.0.0.1:$port", "--endpoint",
    "/v1/completions", "--model", "demo", "--tokenizer", "$work/tokenizer",
    "--dataset-name", "prefix_repetition", "--prefix-repetition-prefix-len", "$prefix_len",
    "--prefix-repetition-suffix-len", "$suffix_len",
    "--prefix-repetition-num-prefixes", "$num_prefixes",
    "--prefix-repetition-output-len", "$output_len", "--num-prompts", "$num_prompts",
    "--max-concurrency", "$concurrency", "--ignore-eos", "--temperature", "0", "--seed", "0",
    "--percentile-metrics", "ttft,tpot,e2el", "--metric-percentiles", "50,90,99",
    # llama-server closes an idle keep-alive connection after 5 s while the tool's pool
    # keeps it 60 s: a request sent on such a connection fails (ServerDisconnectedError,
    # plain llama-server alike), so every request gets its own connection.
    "--header", "Connection=close",
    "--disable-tqdm", "--save-result", "--result-dir", "$out",
    "--result-filename", sys.argv[1] + ".json"])
serve.main(args)
EOF
}

start_server plain
bench plain
stop_server
start_server plain-restart
bench plain-restart
stop_server
start_server kvtier --kvtier-dir "$work/kvtier" --kvtier-chunk-tokens 256
bench kvtier
stop_server
start_server kvtier-restart --kvtier-dir "$work/kvtier" --kvtier-chunk-tokens 256
bench kvtier-restart
curl -sf "http://127.0.0.1:$port/kvtier" >"$out/kvtier-restart.kvtier.json" || true
stop_server

"$py" - "$out" <<'EOF'
import json, os, sys
out = sys.argv[1]
rows = []
for name in ("plain", "plain-restart", "kvtier", "kvtier-restart"):
    with open(os.path.join(out, name + ".json")) as f:
        r = json.load(f)
    if "results" in r:  # lmcache bench engine's summary
        x = r["results"]
        rows.append((name, x["successful_requests"], x["failed_requests"], x["p50_ttft_ms"],
                     x["p90_ttft_ms"], x["p99_ttft_ms"], x["mean_ttft_ms"],
                     x["successful_requests"] / max(x["elapsed_time"], 1e-9)))
        continue
    rows.append((name, r["completed"], r.get("failed", 0), r["median_ttft_ms"],
                 r["p90_ttft_ms"], r["p99_ttft_ms"], r["mean_ttft_ms"],
                 r["request_throughput"]))
print("\nsetup           done failed  TTFT p50 ms  p90 ms  p99 ms  mean ms  req/s")
for n, c, f, p50, p90, p99, mean, rps in rows:
    print(f"{n:15s} {c:5d} {f:6d} {p50:12.1f} {p90:7.1f} {p99:7.1f} {mean:8.1f} {rps:6.2f}")
base = rows[0][6]
for n, *_, mean, _rps in rows[1:]:
    if base > 0:
        print(f"mean TTFT {n} / plain: {mean / base:.2f}")
if any(r[2] for r in rows) or any(r[1] == 0 for r in rows):
    print("FAIL: requests failed (server logs beside the results)")
    sys.exit(1)
print(f"results (the tool's JSON per setup, server logs): {out}")
EOF
