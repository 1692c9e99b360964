#!/usr/bin/env bash
# Disaggregated prefill against a colocated vLLM (bench/pd_bench.py) in the pinned venv.
# Usage: bash bench/pd_bench.sh [--json] [--lengths 512,1024,2048,3968] [--reps 3] [--partial]
exec bash "$(dirname "$0")/vllm_python.sh" pd_bench.py "$@"
