#!/usr/bin/env bash
# Fails when a C/C++/CUDA source tracked by git differs from .clang-format (Google style,
# 100 columns). Fix with: git ls-files '*.cc' '*.h' '*.cu' '*.c' | xargs clang-format -i
set -euo pipefail
cd "$(dirname "$0")/.."
cf=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$cf" ]; then
  echo "check-format: clang-format not found (scripts/install-deps.sh installs it)" >&2
  exit 1
fi
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' '*.c')
if ! "$cf" --dry-run --Werror "${files[@]}" 2> /tmp/kvt-format.$$; then
  grep -o '^[^:]*:[0-9]*' /tmp/kvt-format.$$ | sort -u | head -40 >&2
  echo "check-format: the files above differ from .clang-format ($("$cf" --version));" \
       "run: git ls-files '*.cc' '*.h' '*.cu' '*.c' | xargs $cf -i" >&2
  rm -f /tmp/kvt-format.$$
  exit 1
fi
rm -f /tmp/kvt-format.$$
echo "check-format: ${#files[@]} files match .clang-format"
