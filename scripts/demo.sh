#!/usr/bin/env bash
# The README's demo command: installs dependencies, builds, then runs kvtier-server-demo:
# llama.cpp's llama-server with and without kvtier (kvtier-llama-server), TTFT measured by
# an HTTP client. Extra args go to the demo (e.g. --small, --full, --check, --json,
# --kvtierd-address ADDR). The plot needs python3-matplotlib (installed here when root).
#
# --arch NAME (first argument): run the demo on a generated model of that family
# (kvtier-make-gguf --arch NAME; demo size, or tiny with --small): docs/models.md lists
# the families and which of them kvtier restores exactly. The model's memory kind is
# printed first (kvtier-make-gguf --check); with a family kvtier refuses, the server runs
# without kvtier (its log and GET /kvtier say why) and the demo shows no hits.
set -euo pipefail
cd "$(dirname "$0")/.."
arch=""
if [ "${1:-}" = "--arch" ]; then
  [ $# -ge 2 ] || { echo "demo.sh: --arch needs a family name (docs/models.md)" >&2; exit 2; }
  arch="$2"
  shift 2
fi
bash scripts/install-deps.sh
if ! python3 -c 'import matplotlib' 2>/dev/null && ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-matplotlib >/dev/null
  else
    echo "demo.sh: python3-matplotlib is not installed (not root): the plot is skipped" >&2
  fi
fi
bash scripts/build.sh
demo=./build/release/connectors/llamacpp/server/kvtier-server-demo
if [ -z "$arch" ] || [ "$arch" = "llama" ]; then
  exec "$demo" "$@"
fi
size=demo
for a in "$@"; do [ "$a" = "--small" ] && size=tiny; done
model=".kvtier-demo/models/kvtier-$arch-$size.gguf"
mkdir -p .kvtier-demo/models
if [ ! -f "$model" ]; then
  ./build/release/connectors/llamacpp/kvtier-make-gguf --arch "$arch" --size "$size" --out "$model"
fi
./build/release/connectors/llamacpp/kvtier-make-gguf --check "$model"
extra=()
case $arch in
  # Sliding-window models: kvtier restores them from a full-size SWA cache only
  # (docs/models.md); every server of the run, plain ones too, gets the flag.
  gemma3 | gpt-oss) extra=(--server-arg=--swa-full) ;;
esac
exec "$demo" --model "$model" "${extra[@]}" "$@"
