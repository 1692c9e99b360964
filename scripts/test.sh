#!/usr/bin/env bash
# The README's test command: installs dependencies, builds, runs every test.
# Tests labelled `gpu` skip themselves (with a message) on machines without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
# Every test's scratch files (models, disk tiers, sockets, logs) go under one directory of
# this run, removed when it ends, also after a failure or a test killed by its timeout,
# which cannot clean up itself. KVT_KEEP_TMP=1 keeps it for a post-mortem.
run_tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvt-test.XXXXXX")
trap '[ "${KVT_KEEP_TMP:-0}" = 1 ] && echo "test.sh: kept $run_tmp" >&2 || rm -rf "$run_tmp"' EXIT
export TMPDIR=$run_tmp TEST_TMPDIR=$run_tmp
. scripts/ccache-env.sh
bash scripts/check-format.sh
bash scripts/build.sh
bash scripts/check-thread-safety.sh
bash scripts/install-vllm.sh >/dev/null  # pinned vLLM CPU venv for the `vllm` tests (reused)
ctest --preset release -j "${KVT_TEST_JOBS:-2}" --timeout 900 "$@"
[ "${KVT_SKIP_SANITIZERS:-0}" = 1 ] || bash scripts/test-sanitizers.sh  # ASan+UBSan, TSan, fuzzers
