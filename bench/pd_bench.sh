#!/usr/bin/env bash
# Disaggregated prefill against a colocated vLLM (bench/pd_bench.py): the pinned vLLM venv
# (scripts/install-vllm.sh), the release build's kvtierd and libkvtier.so.
# Usage: bash bench/pd_bench.sh [--json] [--lengths 512,1024,2048,3968] [--reps 3] [--partial]
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
build="${KVT_BUILD_DIR:-$src/build/release}"
py="$(bash "$src/scripts/install-vllm.sh" | tail -1)"
export KVTIERD="${KVTIERD:-$build/daemon/kvtierd}"
export KVTIER_LIB="${KVTIER_LIB:-$build/connectors/vllm/libkvtier.so}"
export PYTHONPATH="$src/connectors/vllm${PYTHONPATH:+:$PYTHONPATH}"
exec "$py" "$src/bench/pd_bench.py" "$@"
