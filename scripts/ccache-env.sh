# Sourced by scripts/build.sh and scripts/test.sh: when ccache is installed, every CMake
# build directory compiles through it, with paths relative to the checkout, so a fresh
# clone on the same machine (CI) reuses objects compiled before. Harmless without ccache.
if command -v ccache >/dev/null 2>&1; then
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}" CCACHE_NOHASHDIR=1
  export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-20G}"
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
fi
