#!/usr/bin/env bash
# Runs the first ```sh block after a heading of a Markdown file as written, from the
# repository root, the way a new user would paste it (issue 10: every command in the README
# and the docs runs as written on a fresh clone). Background jobs (&) are killed at exit.
#   run_doc_block.sh FILE HEADING BUILD_DIR [CHECK]
# BUILD_DIR replaces the documented "build/release/" prefix only when they differ.
# CHECK (optional): a command run after the block (the block's processes still running).
set -euo pipefail
file=$1 heading=$2 build_dir=$3 check=${4:-}
repo=$(cd "$(dirname "$0")/../.." && pwd)
block=$(awk -v h="$heading" '
  $0 == h { found = 1; next }
  found && /^```sh$/ { inb = 1; next }
  inb && /^```$/ { exit }
  inb { print }' "$repo/$file")
if [ -z "$block" ]; then
  echo "no sh block after '$heading' in $file" >&2
  exit 1
fi
if [ "$(cd "$build_dir" && pwd)" != "$repo/build/release" ]; then
  block=${block//build\/release\//$build_dir/}
fi
echo "---- $file: $heading"
echo "$block"
echo "----"
cd "$repo"
cleanup() { for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
eval "$block"
if [ -n "$check" ]; then
  eval "$check"
fi
echo "ok: every command ran"
