"""Bundles shared libraries that auditwheel leaves to the system into a repaired wheel.

    python wheel-bundle-extra.py WHEEL PATCHELF LIB [LIB ...]

auditwheel's manylinux policy counts a few libraries beyond glibc, libstdc++ and libgcc_s
as part of every system (libz.so.1 is the one kvtier needs) and does not bundle them;
kvtier's wheel promises nothing outside glibc, libstdc++ and libgcc_s (issue 26). For each
LIB (a path, e.g. /lib/x86_64-linux-gnu/libz.so.1) this copies it into the wheel's
kvtier.libs/ under a name with a hash of its bytes (as auditwheel names what it
bundles, so it never clashes with the system's copy another library of the process
loaded), sets that name as its soname, rewrites the DT_NEEDED entry of every ELF file in
the wheel that needs it (patchelf --replace-needed), gives bundled libraries that need it
an RPATH of $ORIGIN, and rewrites the wheel in place with a new RECORD. Called by
scripts/build-wheel.sh after auditwheel. Exit 0, or 1 with the failing step.
"""

import base64
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile


def _elf(data: bytes) -> bool:
    return data[:4] == b"\x7fELF"


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    wheel, patchelf, libs = argv[0], argv[1], argv[2:]
    with zipfile.ZipFile(wheel) as z:
        infos = z.infolist()
        files = {i.filename: z.read(i) for i in infos}
    modes = {i.filename: i.external_attr for i in infos}
    record = next(n for n in files if n.endswith(".dist-info/RECORD"))
    with tempfile.TemporaryDirectory() as tmp:
        def patch(name: str, *args: str) -> str:
            """Runs patchelf on file `name` of the wheel; keeps its changes; its stdout."""
            path = os.path.join(tmp, "f")
            with open(path, "wb") as f:
                f.write(files[name])
            out = subprocess.run([patchelf, *args, path], check=True, capture_output=True,
                                 text=True).stdout
            with open(path, "rb") as f:
                files[name] = f.read()
            return out

        for lib in libs:
            soname = os.path.basename(lib)
            with open(os.path.realpath(lib), "rb") as f:
                data = f.read()
            stem, _, ext = soname.partition(".so")
            new = f"{stem}-{hashlib.sha256(data).hexdigest()[:8]}.so{ext}"
            dst = f"kvtier.libs/{new}"
            users = [n for n, d in list(files.items())
                     if _elf(d) and soname in patch(n, "--print-needed").split()]
            if not users:
                print(f"wheel-bundle-extra: no file of the wheel needs {soname}; skipped")
                continue
            files[dst] = data
            modes[dst] = 0o755 << 16
            patch(dst, "--set-soname", new)
            for n in users:
                patch(n, "--replace-needed", soname, new)
                if n.startswith("kvtier.libs/") and not patch(n, "--print-rpath").strip():
                    patch(n, "--set-rpath", "$ORIGIN")
            print(f"wheel-bundle-extra: {soname} -> {dst}, needed by {len(users)} files")
    lines = []
    for name, data in files.items():
        if name == record:
            continue
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{name},sha256={digest},{len(data)}")
    lines.append(f"{record},,")
    files[record] = ("\n".join(lines) + "\n").encode()
    tmp_wheel = wheel + ".tmp"
    with zipfile.ZipFile(tmp_wheel, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            if name == record:
                continue
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = modes.get(name, 0o644 << 16)
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
        info = zipfile.ZipInfo(record, date_time=(2020, 1, 1, 0, 0, 0))
        info.external_attr = 0o644 << 16
        z.writestr(info, files[record], zipfile.ZIP_DEFLATED)
    os.replace(tmp_wheel, wheel)
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main(sys.argv[1:]))
    except subprocess.CalledProcessError as e:
        print(f"wheel-bundle-extra: {' '.join(e.cmd)} failed: {e.stderr}", file=sys.stderr)
        raise SystemExit(1)
