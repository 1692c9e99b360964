"""kvtier's PEP 517 build backend: the standard library only, so that

    pip install ./connectors/vllm

works on a machine without access to a package index (issue 21 item 10): pip's build
isolation then has nothing to download (pyproject.toml's build-system requires = []).
It writes a wheel of the kvtier/ package plus libkvtier.so, which CMake builds (pip does
not build C++):

    cmake --preset release && cmake --build build/release --target kvtier_c

Which library is bundled (as kvtier/lib/libkvtier.so): $KVTIER_LIB if set, else
<source tree>/build/release/connectors/vllm/libkvtier.so. Without either the wheel holds
the Python package only and needs $KVTIER_LIB at run time (kvtier/_native.py says where
it looked). Editable installs are not supported (run from the checkout instead: the
package finds build/release's library by itself).

$KVTIER_BIN_DIR (set by scripts/build-wheel.sh): a directory holding the built `kvtierd`
and `kvtier` executables; they go into the wheel as kvtier/bin/ and become the console
scripts `kvtierd` and `kvtier` (kvtier/_bin.py). scripts/build-wheel.sh then bundles the
shared libraries they all need with auditwheel (one self-contained wheel). Every wheel
has the console script `kvtier-pd-proxy` (kvtier/pd_proxy.py) and the extra `pd` (its
HTTP libraries, for installs outside a vLLM environment).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import sysconfig
import zipfile

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # connectors/vllm


def _project() -> dict[str, str]:
    """name, version, description, requires-python from pyproject.toml's [project]."""
    text = open(os.path.join(_HERE, "pyproject.toml"), encoding="utf-8").read()
    section = text.split("[project]", 1)[1].split("\n[", 1)[0]
    out = {}
    for key in ("name", "version", "description", "requires-python"):
        m = re.search(rf'^{key}\s*=\s*"([^"]*)"', section, re.M)
        if m:
            out[key] = m.group(1)
    return out


def _optional_dependencies() -> dict[str, list[str]]:
    """[project.optional-dependencies] of pyproject.toml: `name = ["req", ...]` lines."""
    text = open(os.path.join(_HERE, "pyproject.toml"), encoding="utf-8").read()
    if "[project.optional-dependencies]" not in text:
        return {}
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return {m.group(1): re.findall(r'"([^"]+)"', m.group(2))
            for m in re.finditer(r'^([A-Za-z0-9_-]+)\s*=\s*\[([^\]]*)\]', section, re.M)}


_BINARIES = ("kvtierd", "kvtier")


def _binaries() -> list[str]:
    """Paths of the executables to bundle: $KVTIER_BIN_DIR/{kvtierd,kvtier}, or none.
    ValueError when the directory lacks one of them."""
    d = os.environ.get("KVTIER_BIN_DIR")
    if not d:
        return []
    paths = [os.path.join(d, b) for b in _BINARIES]
    for path in paths:
        if not os.access(path, os.X_OK):
            raise ValueError(f"KVTIER_BIN_DIR = {d!r}: {path} is not an executable file")
    return paths


def _library() -> str | None:
    src = os.environ.get("KVTIER_LIB") or os.path.join(
        _HERE, "..", "..", "build", "release", "connectors", "vllm", "libkvtier.so")
    return os.path.normpath(src) if os.path.isfile(src) else None


def _tag(with_library: bool) -> str:
    if not with_library:
        return "py3-none-any"
    return "py3-none-" + re.sub(r"[-.]", "_", sysconfig.get_platform())


def _metadata(p: dict[str, str]) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}",
             f"Summary: {p.get('description', '')}", "License: Apache-2.0"]
    if "requires-python" in p:
        lines.append(f"Requires-Python: {p['requires-python']}")
    for extra, reqs in _optional_dependencies().items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {r}; extra == "{extra}"' for r in reqs]
    return "\n".join(lines) + "\n"


def _entry_points(with_binaries: bool) -> str:
    scripts = ["kvtier-pd-proxy = kvtier.pd_proxy:main"]
    if with_binaries:
        scripts += [f"{b} = kvtier._bin:{b}" for b in _BINARIES]
    return "[console_scripts]\n" + "\n".join(scripts) + "\n"


def _dist_info(p: dict[str, str]) -> str:
    return f"{p['name']}-{p['version']}.dist-info"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    p = _project()
    d = os.path.join(metadata_directory, _dist_info(p))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w", encoding="utf-8") as f:
        f.write(_metadata(p))
    return _dist_info(p)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    p = _project()
    lib = _library()
    bins = _binaries()
    tag = _tag(lib is not None or bool(bins))
    files: list[tuple[str, bytes]] = []
    pkg = os.path.join(_HERE, "kvtier")
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py"):
            with open(os.path.join(pkg, name), "rb") as f:
                files.append((f"kvtier/{name}", f.read()))
    if lib is not None:
        with open(lib, "rb") as f:
            files.append(("kvtier/lib/libkvtier.so", f.read()))
        print(f"kvtier: bundling {lib}")
    else:
        print("kvtier: libkvtier.so not found (build it with CMake, or set KVTIER_LIB); "
              "installing without it (set KVTIER_LIB at run time)")
    for path in bins:
        with open(path, "rb") as f:
            files.append((f"kvtier/bin/{os.path.basename(path)}", f.read()))
        print(f"kvtier: bundling {path}")
    di = _dist_info(p)
    files.append((f"{di}/METADATA", _metadata(p).encode()))
    files.append((f"{di}/entry_points.txt", _entry_points(bool(bins)).encode()))
    files.append((f"{di}/WHEEL", (
        "Wheel-Version: 1.0\nGenerator: kvtier_build\n"
        f"Root-Is-Purelib: {'false' if lib or bins else 'true'}\nTag: {tag}\n").encode()))
    files.append((f"{di}/top_level.txt", b"kvtier\n"))
    record = []
    for path, data in files:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{di}/RECORD,,")
    files.append((f"{di}/RECORD", ("\n".join(record) + "\n").encode()))
    wheel = f"{p['name']}-{p['version']}-{tag}.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w",
                         zipfile.ZIP_DEFLATED) as z:
        for path, data in files:
            info = zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0))
            exe = path.endswith(".so") or path.startswith("kvtier/bin/")
            info.external_attr = (0o755 if exe else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    return wheel
