#!/usr/bin/env bash
# The README's test command: installs dependencies, builds, runs every test.
# Tests labelled `gpu` skip themselves (with a message) on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
. scripts/ccache-env.sh
bash scripts/check-format.sh
bash scripts/build.sh
bash scripts/check-thread-safety.sh
bash scripts/install-vllm.sh >/dev/null  # pinned vLLM CPU venv for the `vllm` tests (reused)
ctest --preset release -j "${KVT_TEST_JOBS:-2}" --timeout 900 "$@"
[ "${KVT_SKIP_SANITIZERS:-0}" = 1 ] || bash scripts/test-sanitizers.sh  # ASan+UBSan, TSan, fuzzers
