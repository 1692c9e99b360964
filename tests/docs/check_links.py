#!/usr/bin/env python3
"""The repository's docs stand alone (issue 21, item 15).

For README.md and every docs/**/*.md:
  * every relative link target (inline [text](target), reference [id]: target, and HTML
    href/src) names a file or directory inside the repository (anchors are ignored;
    http(s)/mailto links are not checked);
  * no text points at documents a clone does not have: a path through shared/docs or
    /work/, or an UPPER_CASE.md name no file in the repository has.

Occurrences in files other branches are still fixing are listed in
outside_refs_pending.txt as "FILE<TAB>TEXT"; each listed one must still occur (so the
list only shrinks) and is not reported. Exit 0 when clean, 1 with one line per problem.
  check_links.py [REPO_ROOT]
"""
import os
import re
import sys

repo = os.path.realpath(sys.argv[1] if len(sys.argv) > 1 else
                        os.path.join(os.path.dirname(__file__), "..", ".."))

INLINE = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", re.M)
HTML = re.compile(r"(?:href|src)=\"([^\"]+)\"")
OUTSIDE = re.compile(r"(?:\.\./)*(?:/work/)?shared/docs/[\w./-]*|/work/[\w./-]+")
UPPER_MD = re.compile(r"\b([A-Z][A-Z0-9_]+\.md)\b")
FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.M | re.S)


def docs():
    yield "README.md"
    for root, _, files in os.walk(os.path.join(repo, "docs")):
        for f in sorted(files):
            if f.endswith(".md"):
                yield os.path.relpath(os.path.join(root, f), repo)


def repo_names():
    names = set()
    for root, dirs, files in os.walk(repo):
        dirs[:] = [d for d in dirs if d not in (".git", "build") and not d.startswith("build")]
        names.update(files)
    return names


def main():
    pending = set()
    pending_file = os.path.join(repo, "tests", "docs", "outside_refs_pending.txt")
    if os.path.exists(pending_file):
        for line in open(pending_file, encoding="utf-8"):
            line = line.rstrip("\n")
            if line and not line.startswith("#"):
                f, _, text = line.partition("\t")
                pending.add((f, text))
    names = repo_names()
    problems, seen_pending = [], set()

    def report(f, lineno, text, why):
        if (f, text) in pending:
            seen_pending.add((f, text))
            return
        problems.append(f"{f}:{lineno}: {why}: {text}")

    for f in docs():
        path = os.path.join(repo, f)
        if not os.path.exists(path):
            continue
        src = open(path, encoding="utf-8").read()
        prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), src)

        def lineno(pos):
            return src.count("\n", 0, pos) + 1

        for rx in (INLINE, REFDEF, HTML):
            for m in rx.finditer(prose):
                target = m.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                    continue  # http:, https:, mailto:, or an anchor in this page
                file_part = target.split("#", 1)[0]
                if file_part.startswith("/"):
                    report(f, lineno(m.start()), target, "absolute path in a link")
                    continue
                resolved = os.path.realpath(os.path.join(os.path.dirname(path), file_part))
                if not (resolved == repo or resolved.startswith(repo + os.sep)):
                    report(f, lineno(m.start()), target, "link leaves the repository")
                elif not os.path.exists(resolved):
                    report(f, lineno(m.start()), target, "link to a missing file")
        for m in OUTSIDE.finditer(src):
            report(f, lineno(m.start()), m.group(0), "names a path outside the repository")
        for m in UPPER_MD.finditer(src):
            if m.group(1) not in names:
                report(f, lineno(m.start()), m.group(1), "names a document the repository lacks")

    for f, text in sorted(pending - seen_pending):
        problems.append(f"{f}: listed in outside_refs_pending.txt but no longer there "
                        f"(remove the line): {text}")
    for p in problems:
        print(p)
    if not problems:
        print(f"docs links: ok ({len(seen_pending)} pending in files of other branches)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
