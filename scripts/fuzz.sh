#!/usr/bin/env bash
# Runs every libFuzzer target (tests/fuzz/, docs/testing.md) for a fixed time each.
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]      (default 25 s, every target)
# Needs the `fuzz` build (cmake --preset fuzz && cmake --build --preset fuzz); builds it
# when missing. Starts from the checked-in seeds (tests/fuzz/corpus/<target>/), works in a
# copy under build/fuzz/corpus-work/ (the repo's seeds are never modified), and writes a
# crashing input to build/fuzz/artifacts/<target>/. Exit 1 when any target found a crash,
# a leak, a timeout (one input running > 30 s) or ran out of memory.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-25}
shift || true
build=build/fuzz
if [ ! -f "$build/build.ninja" ]; then
  cmake --preset fuzz
fi
all=(fuzz_chunk_codec fuzz_seq_state fuzz_daemon_config fuzz_token_file fuzz_daemon_rpc)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
cmake --build "$build" -j "${KVT_JOBS:-$(nproc)}" --target "${targets[@]}"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
failed=()
for t in "${targets[@]}"; do
  work=$build/corpus-work/$t
  art=$build/artifacts/$t
  mkdir -p "$work" "$art"
  echo "fuzz.sh: $t for ${secs}s"
  log=$build/artifacts/$t.log
  if "$build/tests/fuzz/$t" -max_total_time="$secs" -timeout=30 -rss_limit_mb=2048 \
       -max_len=65536 -print_final_stats=1 -artifact_prefix="$art/" \
       "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1; then
    grep -E '^(Done|stat::number_of_executed_units)' "$log" | tr '\n' ' '; echo
  else
    echo "fuzz.sh: $t FAILED; input in $art/, log $log:" >&2
    grep -E -A25 'ERROR|SUMMARY|deadly|Timeout|out-of-memory' "$log" | head -60 >&2 || tail -40 "$log" >&2
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: failures in ${failed[*]} (reproduce: $build/tests/fuzz/<target> <input>)" >&2
  exit 1
fi
echo "fuzz.sh: ${#targets[@]} targets, ${secs}s each: no failures"
