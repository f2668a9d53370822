#!/usr/bin/env bash
# pip_install.sh VENV SOURCE BUILD_DIR TARGET CC CXX: `pip install` of the
# repository at SOURCE into the folder TARGET (scikit-build-core driving the
# CMake build in BUILD_DIR with the compilers CC/CXX of the CTest build, so
# that ccache serves its objects), then tests/python/test_package.py against
# the installed package alone (no FLASHJIT_LIBRARY, no source tree on the
# path).
set -euo pipefail
venv=$1 src=$2 build=$3 target=$4 cc=$5 cxx=$6
rm -rf "$target"
start=$(date +%s)
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2}
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$src} CCACHE_NOHASHDIR=true
"$venv/bin/python" -m pip install --disable-pip-version-check \
  --no-build-isolation --no-deps --target "$target" \
  -C build-dir="$build" -C cmake.define.CMAKE_C_COMPILER="$cc" \
  -C cmake.define.CMAKE_CXX_COMPILER="$cxx" "$src"
echo "pip install took $(( $(date +%s) - start )) s"
ls "$target/flashjit/lib"
unset FLASHJIT_LIBRARY
cd "$target"
PYTHONPATH=$target FLASHJIT_EXPECT_INSTALLED=$target \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider \
  --rootdir "$src/tests/python" "$src/tests/python/test_package.py"
