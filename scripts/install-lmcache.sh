#!/usr/bin/env bash
# Installs LMCache's load generator, `lmcache bench engine`, pinned, into a venv outside
# the source tree: $KVT_LMCACHE_VENV, default /opt/kvtier-lmcache-venv. Only the client
# runs (against an OpenAI-compatible server), so no GPU and no torch: the lmcache wheel
# goes in with --no-deps (its Requires-Dist pulls CUDA packages such as cupy-cuda13x,
# cuda-python, nvtx and cufile-python), plus exactly what `lmcache bench engine` imports:
# prometheus_client (imported by the CLI's command table) and openai (its request sender),
# with openai's own dependencies, all pinned below. Without torch the CLI logs "No compute
# backend loaded; CLI-only mode" and runs. Without transformers the workloads size their
# prompts in words, not in the model's tokens.
#
# Idempotent: a venv whose stamp matches the pins is reused (seconds); anything else is
# rebuilt (~20 MB download). Needs Python 3.11 (the wheel is cp311): $KVT_PYTHON, default
# python3.11. Prints the venv's `lmcache` on the last line. Exit 0 ok, 1 install failed.
set -euo pipefail
venv="${KVT_LMCACHE_VENV:-/opt/kvtier-lmcache-venv}"
python="${KVT_PYTHON:-python3.11}"
pins=(
  lmcache==0.5.6
  prometheus_client==0.24.1
  openai==3.57.0
  annotated-types==0.8.0 anyio==4.16.0 h11==0.16.0 httpcore2==2.16.2 httpx2==2.16.2
  idna==3.20 jiter==0.19.0 pydantic==2.14.4 pydantic_core==2.50.5 sniffio==1.3.1
  truststore==0.10.5 typing-inspection==0.4.5 typing_extensions==4.16.0
)
want="$(printf '%s\n' "${pins[@]}" | sha256sum | cut -d' ' -f1)"
stamp="$venv/.kvtier-pins"

mkdir -p "$(dirname "$venv")"
exec 9>"$venv.install-lock"
flock 9
if [[ "$(cat "$stamp" 2>/dev/null)" == "$want" && -x "$venv/bin/lmcache" ]]; then
  echo "install-lmcache: $venv matches the pins; reusing it" >&2
  echo "$venv/bin/lmcache"
  exit 0
fi
echo "install-lmcache: building $venv (lmcache 0.5.6 client only, no deps)" >&2
rm -rf "$venv"
"$python" -m venv "$venv" >&2
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps "${pins[@]}" >&2
LMCACHE_DISABLE_BANNER=1 "$venv/bin/lmcache" bench engine --help >/dev/null 2>&1 || {
  echo "install-lmcache: '$venv/bin/lmcache bench engine --help' fails after the install" >&2
  exit 1
}
echo "$want" >"$stamp"
echo "$venv/bin/lmcache"
