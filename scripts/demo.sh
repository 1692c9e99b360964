#!/usr/bin/env bash
# The README's demo command: installs dependencies, builds, runs kvtier-demo
# (llama.cpp through kvtier on real text, embedded defaults). Extra args go to the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
exec ./build/release/connectors/llamacpp/kvtier-demo "$@"
