#!/usr/bin/env bash
# Runs one vllm test module with the pinned vLLM venv (scripts/install-vllm.sh, reused
# when complete). Usage: run.sh BUILD_DIR MODULE. ctest calls this (label vllm).
set -euo pipefail
build="$1"; module="$2"
src="$(cd "$(dirname "$0")/../.." && pwd)"
py="$(bash "$src/scripts/install-vllm.sh" | tail -1)"
export KVTIERD="$build/daemon/kvtierd"
export KVTIER_LIB="$build/connectors/vllm/libkvtier.so"
export PYTHONPATH="$src/connectors/vllm:$src/tests/vllm${PYTHONPATH:+:$PYTHONPATH}"
cd "$src/tests/vllm"
exec "$py" -m unittest -v "$module"
