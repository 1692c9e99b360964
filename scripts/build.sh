#!/usr/bin/env bash
# Configures and builds kvtier (release preset, build/release). Idempotent.
# Extra arguments are passed to the CMake configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/ccache-env.sh
jobs=${KVT_JOBS:-$(nproc)}
cmake --preset release "$@"
cmake --build --preset release -j "$jobs"
