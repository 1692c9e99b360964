"""Copies a built libkvtier.so into the package (kvtier/lib/) so that an installed
``kvtier`` finds it without $KVTIER_LIB. The library is built by CMake, not by pip:

    cmake --preset release && cmake --build build/release --target kvtier_c
    pip install ./connectors/vllm              # from the source tree's root

Which library is copied: $KVTIER_LIB if set, else <source tree>/build/release/connectors/
vllm/libkvtier.so. Without either, the package installs without it and then needs
$KVTIER_LIB at run time (kvtier/_native.py says where it looked).
"""

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildPyWithLib(build_py):
    def run(self):
        src = os.environ.get("KVTIER_LIB") or os.path.join(
            HERE, "..", "..", "build", "release", "connectors", "vllm", "libkvtier.so")
        dst_dir = os.path.join(HERE, "kvtier", "lib")
        if os.path.isfile(src):
            os.makedirs(dst_dir, exist_ok=True)
            shutil.copy2(src, os.path.join(dst_dir, "libkvtier.so"))
            print(f"kvtier: bundling {os.path.normpath(src)}")
        else:
            print(f"kvtier: {os.path.normpath(src)} not found; installing without "
                  "libkvtier.so (set KVTIER_LIB at run time)")
        super().run()


setup(cmdclass={"build_py": BuildPyWithLib})
