#!/usr/bin/env bash
# Runs a Python benchmark of bench/ in the pinned vLLM venv (scripts/install-vllm.sh,
# installed or reused) with the release build's kvtierd and libkvtier.so:
#   bash bench/vllm_python.sh SCRIPT.py [ARGS...]
# KVT_BUILD_DIR (default build/release), KVTIERD and KVTIER_LIB override the paths.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
build="${KVT_BUILD_DIR:-$src/build/release}"
script="$1"
shift
py="$(bash "$src/scripts/install-vllm.sh" | tail -1)"
export KVTIERD="${KVTIERD:-$build/daemon/kvtierd}"
export KVTIER_LIB="${KVTIER_LIB:-$build/connectors/vllm/libkvtier.so}"
export PYTHONPATH="$src/connectors/vllm${PYTHONPATH:+:$PYTHONPATH}"
exec "$py" "$src/bench/$script" "$@"
