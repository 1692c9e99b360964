#!/usr/bin/env bash
# check_links.py finds what it is for: a link out of a copy of the repository's layout,
# a link to a missing file, and a named document the repository lacks, each fail it; the
# same tree without them passes.
set -euo pipefail
script=$(cd "$(dirname "$0")" && pwd)/check_links.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/repo/docs"
echo '# r' > "$tmp/repo/README.md"
echo 'see [b](b.md) and [web](https://example.com) and [here](#x)' > "$tmp/repo/docs/a.md"
echo '# b' > "$tmp/repo/docs/b.md"
python3 "$script" "$tmp/repo"
for bad in '[x](../../shared/docs/ENGINES.md)' '[x](missing.md)' 'as DESIGN.md says' \
           'see /work/shared/docs/X.md' '[x]: ../../outside.md'; do
  printf '%s\n' "$bad" > "$tmp/repo/docs/c.md"
  if python3 "$script" "$tmp/repo"; then
    echo "check_links.py passed a doc containing: $bad" >&2
    exit 1
  fi
done
echo "check_links.py self-test: ok"
