"""Console scripts `kvtierd` and `kvtier` of the wheel (scripts/build-wheel.sh): each runs
the executable bundled as kvtier/bin/<name> with the same arguments, in place of this
Python process (exec: signals, exit code and stdin/stdout are the executable's own).
The executables find their shared libraries inside the wheel (auditwheel set their
RPATH to kvtier.libs/), never in the system's library paths."""

from __future__ import annotations

import os
import sys

_BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin")


def path(name: str) -> str:
    """The bundled executable `name` ("kvtierd" or "kvtier"). FileNotFoundError in an
    install without them (pip install ./connectors/vllm bundles none: use the CMake
    build's binaries)."""
    p = os.path.join(_BIN, name)
    if not os.access(p, os.X_OK):
        raise FileNotFoundError(f"{p}: this kvtier install has no bundled {name} (only the "
                                "wheel from scripts/build-wheel.sh has); use the CMake "
                                f"build's {name}")
    return p


def _exec(name: str) -> int:
    try:
        p = path(name)
    except FileNotFoundError as e:
        print(f"{name}: {e}", file=sys.stderr)
        return 127
    os.execv(p, [p] + sys.argv[1:])
    return 127  # not reached


def kvtierd() -> int:
    return _exec("kvtierd")


def kvtier() -> int:
    return _exec("kvtier")
