#!/usr/bin/env bash
# Installs every Debian package kvtier needs to build, test and benchmark.
# Idempotent: packages already present are skipped by apt-get. Run as root.
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build pkg-config git python3 python3-venv python3-pip
  # Core dependencies (see shared/docs/TOOLCHAIN.md).
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  librocksdb-dev libabsl-dev liburing-dev libxxhash-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  # Well-kept helpers: logging, flags, config, JSON, HTTP (metrics), Redis peer.
  libspdlog-dev libcli11-dev nlohmann-json3-dev libyaml-cpp-dev libcpp-httplib-dev
  libhiredis-dev redis-server
  # zlib: kvtier-bench trace reads the gzip'd request traces (bench/traces/).
  zlib1g-dev
  # Compiler cache: rebuilds of a fresh clone reuse objects (scripts/ccache-env.sh).
  ccache
  # clang: the thread-safety check (scripts/check-thread-safety.sh); clang-format: the
  # format check (scripts/check-format.sh).
  clang clang-format
  # The llama-server tests talk HTTP with curl (tests/llamacpp/server_test.cc); patch applies llama-server.patch.
  curl patch
  # Fuzzing and sanitizers (scripts/test-sanitizers.sh): clang with libFuzzer/ASan runtimes.
  clang-14 libclang-rt-14-dev
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages already installed"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages (${missing[*]}); run as root" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
