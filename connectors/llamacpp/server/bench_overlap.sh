#!/usr/bin/env bash
# kvtier-llama-server, load while computing (issue 14 item 5; docs/llama-server.md
# "Load while computing"): client-side TTFT of one cached prompt over a sweep of host-tier
# bandwidths (--kvtier-throttle-gbps), three servers per bandwidth, rounds interleaved:
#   load:    --kvtier-overlap off, every cached chunk loaded (--kvtier-no-cost-model);
#   compute: the same binary without kvtier (cold prefill: the slot holds another prompt);
#   overlap: --kvtier-overlap MODE (default always: CostModel::PlanOverlap on every hit,
#            after warm-up prefills so the prefill fit is in use).
# Prints one JSON row per bandwidth with bandwidth_gbps, ttft_load_ms, ttft_compute_ms,
# ttft_overlap_ms, split_tokens (median over rounds of the tokens computed before the
# loaded part: 0 = load only, the prefix = compute only; `splits` lists them, "N*" = a
# back load ran but the engine computed the whole prefix before it met the loader), gain (min(load, compute) / overlap) and whether the three
# answers (greedy token, first-token n_probs) were identical.
#
# Usage: bench_overlap.sh BUILD_DIR [--gbps a,b,c] [--rounds N] [--prefix N] [--mode M]
set -euo pipefail
build=${1:?usage: bench_overlap.sh BUILD_DIR [--gbps a,b,c] [--rounds N] [--prefix N] [--mode M]}
shift
gbps="0.003,0.006,0.012,0.024,0.048"
rounds=5
prefix=1024
mode=always
chunk=64
threads=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --gbps) gbps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --mode) mode=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) echo "bench_overlap.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
server=$build/connectors/llamacpp/server/kvtier-llama-server
gguf=$build/connectors/llamacpp/kvtier-make-gguf
for b in "$server" "$gguf"; do
  [[ -x $b ]] || { echo "bench_overlap.sh: $b not built" >&2; exit 2; }
done
work=$(mktemp -d /tmp/kvtier-bench-overlap.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
"$gguf" --size tiny --out "$work/tiny.gguf" >/dev/null
tail=16
n=$((prefix + tail))

# A prompt of $2 deterministic token ids from seed $1 (ids 100..29999).
tokens() { jq -nc --argjson s "$1" --argjson n "$2" \
  '[range(0; $n) | ((. * 7919 + $s * 104729 + 17) % 29900) + 100]'; }
prompt_a=$(tokens 1 $n)
prompt_b=$(tokens 2 8)  # displaces A from the slot (no shared first token)

base=(-m "$work/tiny.gguf" -c 2048 -np 1 -t "$threads" -tb "$threads" -b 1024 -ub $chunk
      --cache-ram 0 --host 127.0.0.1)
port=$((20000 + ($$ % 20000)))
start() {  # start NAME ARGS... ; sets url_NAME
  local name=$1; shift
  port=$((port + 1))
  "$server" "${base[@]}" --port $port "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 300); do
    if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
      printf -v "url_$name" '%s' "http://127.0.0.1:$port"
      return
    fi
    sleep 0.1
  done
  echo "bench_overlap.sh: $name did not start:" >&2; tail -20 "$work/$name.log" >&2; exit 1
}
# post URL PROMPT -> prints "seconds<TAB>answer-json"
post() {
  local body
  body=$(jq -nc --argjson p "$2" \
    '{prompt: $p, n_predict: 1, temperature: 0, n_probs: 5, cache_prompt: true}')
  curl -s -w '\t%{time_total}' -H 'Content-Type: application/json' -d "$body" "$1/completion"
}
ttft_ms() { awk -F'\t' '{printf "%.1f", $2 * 1000}'; }
answer() { cut -f1 | jq -c '{c: .content, p: .completion_probabilities[0]}'; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
wait_put() {  # wait_put URL N
  for _ in $(seq 1 200); do
    [[ $(curl -s "$1/kvtier" | jq '.chunks_put') -ge $2 ]] && return
    sleep 0.05
  done
}

echo "# kvtier-llama-server overlap sweep: tiny model, prefix $prefix + $tail tokens, chunk $chunk," \
     "$threads thread(s), $rounds rounds, overlap mode $mode, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
kv=(--kvtier-host-mib 256 --kvtier-chunk-tokens $chunk --kvtier-no-tail)
start compute
for g in ${gbps//,/ }; do
  start load "${kv[@]}" --kvtier-throttle-gbps "$g" --kvtier-overlap off --kvtier-no-cost-model
  start overlap "${kv[@]}" --kvtier-throttle-gbps "$g" --kvtier-overlap "$mode"
  # Warm-up: prefills of several lengths for the overlap server's prefill fit, then A is
  # computed and stored on both, then one untimed hit each (the bandwidth is learned).
  for len in 64 128 192 256 384 512 640 768 896 1024; do
    post "$url_overlap" "$(tokens $((100 + len)) $len)" >/dev/null
  done
  post "$url_load" "$prompt_a" >/dev/null
  post "$url_overlap" "$prompt_a" >/dev/null
  wait_put "$url_load" $((prefix / chunk))
  wait_put "$url_overlap" $((prefix / chunk))
  for s in load overlap; do
    u=url_$s
    post "${!u}" "$prompt_b" >/dev/null
    post "${!u}" "$prompt_a" >/dev/null
  done
  joined0=$(curl -s "$url_overlap/kvtier" | jq '.overlap_joined')
  splits=""
  declare -A t=([load]="" [compute]="" [overlap]="")
  same=yes ref=""
  for _ in $(seq 1 "$rounds"); do
    for s in load compute overlap; do
      u=url_$s
      post "${!u}" "$prompt_b" >/dev/null
      [[ $s == overlap ]] && st0=$(curl -s "$url_overlap/kvtier")
      out=$(post "${!u}" "$prompt_a")
      t[$s]+=" $(ttft_ms <<<"$out")"
      if [[ $s == overlap ]]; then  # this round's split (see split_tokens above)
        splits+=" $(jq -n --argjson a "$st0" --argjson b "$(curl -s "$url_overlap/kvtier")" \
          --argjson p "$prefix" -r 'if $b.overlap_joined > $a.overlap_joined
            then "\($b.overlap_front_tokens - $a.overlap_front_tokens)"
            elif $b.overlapped > $a.overlapped then "\($p)*"
            elif $b.loaded_tokens > $a.loaded_tokens then "0" else "\($p)" end')"
      fi
      a=$(answer <<<"$out")
      if [[ -z $ref ]]; then ref=$a; elif [[ $a != "$ref" ]]; then same=no; fi
    done
  done
  joined=$(($(curl -s "$url_overlap/kvtier" | jq '.overlap_joined') - joined0))
  split=$(tr -d '*' <<<"$splits" | median)
  ml=$(median <<<"${t[load]}") mc=$(median <<<"${t[compute]}") mo=$(median <<<"${t[overlap]}")
  jq -nc --argjson g "$g" --argjson l "$ml" --argjson c "$mc" --argjson o "$mo" \
    --argjson s "$split" --argjson j "$joined" --argjson r "$rounds" --arg same "$same" \
    --arg splits "${splits# }" \
    '{bandwidth_gbps: $g, ttft_load_ms: $l, ttft_compute_ms: $c, ttft_overlap_ms: $o,
      split_tokens: $s, splits: $splits, joined_rounds: $j, rounds: $r,
      gain: ((if $l < $c then $l else $c end) / $o * 1000 | round / 1000),
      identical: ($same == "yes")}'
  for _ in load overlap; do  # the two servers of this bandwidth (the last two started)
    p=${pids[-1]}
    unset 'pids[-1]'
    kill "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
done
