#!/usr/bin/env bash
# The GPU check of kvtier (issue 27): builds and runs every GPU step from a clean copy
# of the working tree on one machine with an NVIDIA GPU (H100/H200: sm_90), in under 5
# minutes of wall time, each step under its own timeout, with PASS / FAIL / SKIP per step.
#
# Needs (nothing from the network): the CUDA toolkit (nvcc + cudart; /usr/local/cuda/bin
# is put on PATH) and the NVIDIA driver; cmake >= 3.25, ninja, g++ and the Debian 12
# packages of scripts/install-deps.sh (absl, rocksdb, liburing, xxhash, spdlog, CLI11,
# nlohmann-json, gtest, grpc/protobuf). llama.cpp is not built (KVT_BUILD_LLAMACPP=OFF),
# so no fetch happens. Python is not needed.
#
# Steps:
#   device     nvidia-smi (information only)
#   configure  Release, CUDA on, sm_${CMAKE_CUDA_ARCHITECTURES:-90}, in build-dir
#   build      the tests labelled gpu, kernels_kv_copy_emul_test and kvtier-bench
#   emul       kernels_kv_copy_emul_test: the CUDA kernel body over an emulated grid vs
#              the CPU path (runs on any machine; here as a sanity check of the build)
#   <test>     each ctest labelled gpu, one step each (gtest JSON under $OUT):
#              kernels_kv_copy_gpu_test (CUDA vs CPU copy kernels bit for bit) and
#              gpu_connector_test (connector / C ABI on CUDA tensors, pinned host tier,
#              device->host->disk->device, streams, failed loads)
#   bench-kernels  kvtier-bench kernels (CPU and CUDA copy GB/s vs memcpy)
#   bench-gpu      kvtier-bench gpu: store/load GB/s vs cudaMemcpyAsync pinned<->device
#                  of the same bytes, per layout; PASS needs >= 0.9x for contiguous
#                  chunks, >= 0.7x for HND / scattered blocks
# A step is SKIP when it could not run on a GPU (no usable device: every gpu test case
# GTEST_SKIPs, kvtier-bench gpu exits 77); a SKIP is never reported as a pass.
#
# Usage: bench/gpu_check.sh [build-dir]   (default build/gpu-check)
# Env: OUT (folder for JSON and logs; default build-dir/gpu-check-out), JOBS (default
#      nproc), CMAKE_CUDA_ARCHITECTURES (default 90), GPU_CHECK_BUDGET_S (default 295:
#      no step starts with less than 10 s of it left, each step's timeout is cut to it).
# Exit: 0 every step PASS; 1 a step FAILED; 3 nothing failed but a step was SKIPPED.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
BUILD="${1:-build/gpu-check}"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 4)}"
ARCH="${CMAKE_CUDA_ARCHITECTURES:-90}"
OUTDIR="${OUT:-$BUILD/gpu-check-out}"
BUDGET="${GPU_CHECK_BUDGET_S:-295}"
export PATH="/usr/local/cuda/bin:$PATH"
mkdir -p "$OUTDIR" "$BUILD"
START=$(date +%s)
declare -a STEP_NAMES=() STEP_RESULTS=() STEP_SECONDS=() STEP_NOTES=()

step() { echo; echo "=== $* ($(date +%T), $(( $(date +%s) - START )) s in)"; }
# Seconds a step may take: its own cap, cut to what is left of the budget (0: none left).
allow() {
  local left=$(( BUDGET - ($(date +%s) - START) ))
  if [ "$left" -lt 10 ]; then echo 0; elif [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}
record() {  # name result seconds note
  STEP_NAMES+=("$1"); STEP_RESULTS+=("$2"); STEP_SECONDS+=("$3"); STEP_NOTES+=("$4")
  echo "--- $1: $2${4:+ ($4)} [$3 s]"
}
# Runs a command under a timeout; sets RC and SECS, output to $OUTDIR/<name>.log and the
# terminal (last lines).
# With STDOUT_FILE set, stdout goes there instead (stderr still to the log).
run_step() {  # name cap-seconds cmd...
  local name="$1" cap="$2"; shift 2
  local t; t=$(allow "$cap")
  if [ "$t" -eq 0 ]; then RC=124; SECS=0; echo "(no time left in the ${BUDGET} s budget)"; return; fi
  local t0; t0=$(date +%s)
  if [ -n "${STDOUT_FILE:-}" ]; then
    timeout "$t" "$@" >"$STDOUT_FILE" 2>"$OUTDIR/$name.log"
  else
    timeout "$t" "$@" >"$OUTDIR/$name.log" 2>&1
  fi
  RC=$?
  SECS=$(( $(date +%s) - t0 ))
  tail -n 25 "$OUTDIR/$name.log"
  [ "$RC" -eq 124 ] && echo "(timed out after $t s)"
}

step "device"
if nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1; then
  HAVE_SMI=1
else
  HAVE_SMI=0
  echo "nvidia-smi not available: no GPU driver here; the GPU steps will be SKIPPED, not passed"
fi
command -v nvcc >/dev/null && nvcc --version | tail -2

step "configure (Release, CUDA on, sm_${ARCH}) in ${BUILD}"
run_step configure 120 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DKVT_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DKVT_BUILD_LLAMACPP=OFF
if [ "$RC" -ne 0 ] || ! grep -q "kvtier: CUDA found" "$OUTDIR/configure.log"; then
  grep -E "kvtier: (CUDA|no CUDA)" "$OUTDIR/configure.log"
  record configure FAIL "$SECS" "configure failed or CUDA not found (rc $RC)"
  echo; echo "gpu_check: FAIL (configure)"; exit 1
fi
record configure PASS "$SECS" "$(grep -oE 'kvtier: CUDA found.*' "$OUTDIR/configure.log" | head -1)"

# ctest names are the target names (cmake/KvtHelpers.cmake kvt_add_test).
mapfile -t GPU_TESTS < <(ctest --test-dir "$BUILD" -L gpu -N 2>/dev/null |
                         sed -n 's/^ *Test *#[0-9]*: *//p')
echo "tests labelled gpu: ${GPU_TESTS[*]:-(none registered)}"

step "build ${GPU_TESTS[*]} kernels_kv_copy_emul_test kvtier-bench (-j${JOBS})"
run_step build 240 cmake --build "$BUILD" -j"$JOBS" --target "${GPU_TESTS[@]}" \
  kernels_kv_copy_emul_test kvtier-bench
if [ "$RC" -ne 0 ]; then
  record build FAIL "$SECS" "rc $RC, see $OUTDIR/build.log"
else
  record build PASS "$SECS" ""
fi

exe_of() { find "$BUILD" -type f -name "$1" -perm -u+x 2>/dev/null | head -1; }

# A gtest step: PASS when cases passed and none failed, SKIP when every case skipped.
gtest_step() {  # name cap
  local name="$1" exe; exe="$(exe_of "$1")"
  if [ -z "$exe" ]; then record "$name" FAIL 0 "not built"; return; fi
  run_step "$name" "$2" "$exe" --gtest_brief=1 --gtest_color=no \
    --gtest_output="json:$OUTDIR/$name.json"
  local passed skipped failed
  passed=$(grep -oE '^\[  PASSED  \] [0-9]+' "$OUTDIR/$name.log" | grep -oE '[0-9]+$' || true)
  skipped=$(grep -oE '^\[  SKIPPED \] [0-9]+ test' "$OUTDIR/$name.log" | grep -oE '[0-9]+' || true)
  failed=$(grep -oE '^\[  FAILED  \] [0-9]+ test' "$OUTDIR/$name.log" | grep -oE '[0-9]+' || true)
  local note="passed ${passed:-0}, skipped ${skipped:-0}, failed ${failed:-0}"
  if [ "$RC" -ne 0 ]; then
    record "$name" FAIL "$SECS" "rc $RC; $note"
  elif [ "${passed:-0}" -eq 0 ] && [ "${skipped:-0}" -gt 0 ]; then
    local why; why=$(grep -m1 -oE 'no usable CUDA device[^;]*' "$OUTDIR/$name.log" || true)
    record "$name" SKIP "$SECS" "$note${why:+: $why}"
  elif [ "${skipped:-0}" -gt 0 ]; then
    record "$name" FAIL "$SECS" "$note: some cases skipped on a GPU run"
  else
    record "$name" PASS "$SECS" "$note"
  fi
}

step "emul: kernels_kv_copy_emul_test (CUDA kernel body over an emulated grid vs CPU)"
gtest_step kernels_kv_copy_emul_test 90

for t in "${GPU_TESTS[@]}"; do
  step "gpu test: $t"
  gtest_step "$t" 120
done

BENCH="$(exe_of kvtier-bench)"
step "bench-kernels: kvtier-bench kernels"
if [ -z "$BENCH" ]; then
  record bench-kernels FAIL 0 "kvtier-bench not built"
else
  # The table for the terminal, then the same figures as JSON for $OUT.
  run_step bench-kernels 60 "$BENCH" kernels --iters 5
  if [ "$RC" -eq 0 ]; then
    STDOUT_FILE="$OUTDIR/kernels_bench.json" run_step bench-kernels-json 60 "$BENCH" kernels \
      --iters 5 --json
  fi
  if [ "$RC" -ne 0 ]; then
    record bench-kernels FAIL "$SECS" "rc $RC"
  elif grep -q '"available": true' "$OUTDIR/kernels_bench.json"; then
    record bench-kernels PASS "$SECS" "CPU and CUDA figures in kernels_bench.json"
  else
    record bench-kernels SKIP "$SECS" "CPU figures only: no usable CUDA device"
  fi
fi

step "bench-gpu: kvtier-bench gpu (store/load vs cudaMemcpyAsync, targets 0.9x / 0.7x)"
if [ -z "$BENCH" ]; then
  record bench-gpu FAIL 0 "kvtier-bench not built"
else
  run_step bench-gpu 120 "$BENCH" gpu --iters 10
  case "$RC" in
    0) record bench-gpu PASS "$SECS" "every figure met its target" ;;
    77) record bench-gpu SKIP "$SECS" "no usable CUDA device: nothing measured" ;;
    *) record bench-gpu FAIL "$SECS" "rc $RC: a figure missed its target or an error" ;;
  esac
  # The same copy figures as JSON for $OUT (a skip writes {"available": false, ...}).
  if [ "$(allow 60)" -gt 0 ]; then
    timeout "$(allow 60)" "$BENCH" gpu --iters 5 --no-connector --json \
      >"$OUTDIR/gpu_bench.json" 2>"$OUTDIR/bench-gpu-json.log"
  fi
fi

# Summary (terminal and $OUTDIR/gpu_check.json).
TOTAL=$(( $(date +%s) - START ))
echo; echo "=== summary (${TOTAL} s)"
verdict=PASS
for i in "${!STEP_NAMES[@]}"; do
  printf '%-28s %-5s %4s s  %s\n' "${STEP_NAMES[$i]}" "${STEP_RESULTS[$i]}" \
    "${STEP_SECONDS[$i]}" "${STEP_NOTES[$i]}"
  case "${STEP_RESULTS[$i]}" in
    FAIL) verdict=FAIL ;;
    SKIP) [ "$verdict" = PASS ] && verdict=SKIP ;;
  esac
done
{
  printf '{\n  "seconds": %d,\n  "nvidia_smi": %d,\n  "verdict": "%s",\n  "steps": [\n' \
    "$TOTAL" "$HAVE_SMI" "$verdict"
  for i in "${!STEP_NAMES[@]}"; do
    note="${STEP_NOTES[$i]//\\/\\\\}"; note="${note//\"/\\\"}"
    sep=","; [ "$i" -eq $(( ${#STEP_NAMES[@]} - 1 )) ] && sep=""
    printf '    {"step": "%s", "result": "%s", "seconds": %d, "note": "%s"}%s\n' \
      "${STEP_NAMES[$i]}" "${STEP_RESULTS[$i]}" "${STEP_SECONDS[$i]}" "$note" "$sep"
  done
  printf '  ]\n}\n'
} >"$OUTDIR/gpu_check.json"
echo "JSON and logs: $OUTDIR (gpu_check.json, <step>.log, <test>.json, kernels_bench.json, gpu_bench.json)"
case "$verdict" in
  PASS) echo "gpu_check: PASS (every step passed on a GPU)"; exit 0 ;;
  FAIL) echo "gpu_check: FAIL"; exit 1 ;;
  *) echo "gpu_check: SKIPPED: nothing failed, but the GPU steps did not run on a GPU (no usable CUDA device); this is not a pass"; exit 3 ;;
esac
