#!/usr/bin/env bash
# The vLLM mode of the benchmark (bench/vllm_bench.py): installs/reuses the pinned venv
# (scripts/install-vllm.sh), uses the release build's kvtierd and libkvtier.so.
# Usage: bash bench/vllm_bench.sh [--json] [--lengths 512,1024,2048,3968] [--reps N]
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
build="${KVT_BUILD_DIR:-$src/build/release}"
py="$(bash "$src/scripts/install-vllm.sh" | tail -1)"
export KVTIERD="${KVTIERD:-$build/daemon/kvtierd}"
export KVTIER_LIB="${KVTIER_LIB:-$build/connectors/vllm/libkvtier.so}"
export PYTHONPATH="$src/connectors/vllm${PYTHONPATH:+:$PYTHONPATH}"
exec "$py" "$src/bench/vllm_bench.py" "$@"
