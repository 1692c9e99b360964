#!/usr/bin/env bash
# The README's demo command: installs dependencies, builds, then runs kvtier-server-demo:
# llama.cpp's llama-server with and without kvtier (kvtier-llama-server), TTFT measured by
# an HTTP client. Extra args go to the demo (e.g. --small, --full, --check, --json,
# --kvtierd-address ADDR). The plot needs python3-matplotlib (installed here when root).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
if ! python3 -c 'import matplotlib' 2>/dev/null && ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-matplotlib >/dev/null
  else
    echo "demo.sh: python3-matplotlib is not installed (not root): the plot is skipped" >&2
  fi
fi
bash scripts/build.sh
exec ./build/release/connectors/llamacpp/server/kvtier-server-demo "$@"
