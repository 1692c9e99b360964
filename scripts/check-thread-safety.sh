#!/usr/bin/env bash
# Compiles kvtier's own targets (libraries, kvtierd, kvtier, kvtier-bench; not the tests,
# not llama.cpp, not third-party code) with clang's -Wthread-safety under -Werror, so every
# ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED annotation is checked. Compile only:
# nothing runs. Preset `thread-safety` (CMakePresets.json), build dir build/thread-safety.
# Run by scripts/test.sh; fails (exit 1) on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v clang++ >/dev/null 2>&1; then
  echo "check-thread-safety: clang++ not found (scripts/install-deps.sh installs clang)" >&2
  exit 1
fi
start=$(date +%s)
cmake --preset thread-safety >/dev/null
cmake --build --preset thread-safety -j "${KVT_JOBS:-$(nproc)}"
echo "check-thread-safety: OK ($(($(date +%s) - start)) s)"
