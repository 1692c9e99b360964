#!/usr/bin/env bash
# The vLLM mode of the benchmark (bench/vllm_bench.py) in the pinned venv.
# Usage: bash bench/vllm_bench.sh [--json] [--lengths 512,1024,2048,3968] [--reps N]
exec bash "$(dirname "$0")/vllm_python.sh" vllm_bench.py "$@"
