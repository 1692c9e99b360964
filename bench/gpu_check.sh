#!/usr/bin/env bash
# GPU check for the copy kernels, for a machine with an NVIDIA GPU (H100/H200: sm_90).
# Configures + builds a release build with CUDA on, runs every ctest labelled `gpu`
# (CUDA vs CPU copy kernels bit for bit), then `kvtier-bench kernels`.
# Usage: bench/gpu_check.sh [build-dir]   (default build/gpu-check). Needs < 5 minutes
# on a 16-core machine; each step has its own timeout. Exit status: 0 = all passed.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build/gpu-check}"
JOBS="$(nproc 2>/dev/null || echo 4)"
ARCH="${CMAKE_CUDA_ARCHITECTURES:-90}"
export PATH="/usr/local/cuda/bin:$PATH"
status=0
step() { echo; echo "=== $* ($(date +%T))"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 || \
  echo "nvidia-smi not available: the gpu tests will report SKIPPED"

step "configure (Release, CUDA on, sm_${ARCH}) in ${BUILD}"
timeout 120 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVT_ENABLE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DKVT_BUILD_LLAMACPP=OFF >"$BUILD.configure.log" 2>&1 \
  || { tail -30 "$BUILD.configure.log"; echo "configure FAILED"; exit 1; }
grep -E "kvtier: (CUDA|no CUDA)" "$BUILD.configure.log"

# Build only what the checks need: every test labelled gpu (ctest names = target names,
# see cmake/KvtHelpers.cmake) and kvtier-bench.
mapfile -t GPU_TESTS < <(ctest --test-dir "$BUILD" -L gpu -N 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: *//p')
echo "gpu tests: ${GPU_TESTS[*]:-(none registered: is CUDA found?)}"

step "build ${GPU_TESTS[*]}"
if [ "${#GPU_TESTS[@]}" -gt 0 ]; then
  timeout 240 cmake --build "$BUILD" -j"$JOBS" --target "${GPU_TESTS[@]}" 2>&1 | tail -5
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "build of gpu tests FAILED"; status=1; }
fi

step "ctest -L gpu"
timeout 180 ctest --test-dir "$BUILD" -L gpu --output-on-failure 2>&1 | tail -25
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "gpu tests FAILED"; status=1; }
# Say plainly when the cases were skipped (no usable device) rather than passed.
for t in "${GPU_TESTS[@]}"; do
  exe="$(find "$BUILD" -type f -name "$t" -perm -u+x | head -1)"
  [ -n "$exe" ] && "$exe" --gtest_brief=1 2>&1 | grep -E "^\[  (PASSED|SKIPPED|FAILED) " | sed "s/^/$t: /"
done

step "build kvtier-bench"
timeout 240 cmake --build "$BUILD" -j"$JOBS" --target kvtier-bench 2>&1 | tail -5
if [ "${PIPESTATUS[0]}" -eq 0 ]; then
  step "kvtier-bench kernels"
  timeout 120 "$BUILD/bench/kvtier-bench" kernels --iters 10 || { echo "bench FAILED"; status=1; }
  timeout 120 "$BUILD/bench/kvtier-bench" kernels --iters 10 --json >"$BUILD/kernels_bench.json" \
    && echo "JSON: $BUILD/kernels_bench.json"
  if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then cp "$BUILD/kernels_bench.json" "$OUT/" 2>/dev/null; fi
else
  echo "build of kvtier-bench FAILED"; status=1
fi

echo; [ "$status" -eq 0 ] && echo "gpu_check: OK" || echo "gpu_check: FAILED"
exit "$status"
