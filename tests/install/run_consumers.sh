#!/usr/bin/env bash
# run_consumers.sh CMAKE BUILD_DIR SOURCE_DIR WORK_DIR GENERATOR CXX [LAUNCHER]
#
# Installs the flashjit build in BUILD_DIR into WORK_DIR/prefix with
# `cmake --install`, then builds and runs out-of-tree applications against
# that prefix only:
#   full/     find_package(flashjit) + flashjit::flashjit: compiles a causal
#             variant for the CPU and checks it (consumer_full);
#   runtime/  find_package(flashjit COMPONENTS runtime) + flashjit::runtime:
#             runs a CPU kernel that the installed `flashjit bundle` made,
#             and links no MLIR and no compiler (checked with readelf, ldd);
#   the same runtime application built with pkg-config (flashjit-runtime.pc)
#   instead of CMake, when pkg-config is installed.
# Exits non-zero at the first failure.
set -euo pipefail
cmake=$1 build=$2 src=$3 work=$4 generator=$5 cxx=$6 launcher=${7:-}
start=$(date +%s)
step() { echo "== [$(($(date +%s) - start)) s] $*"; }

rm -rf "$work"
mkdir -p "$work"
prefix=$work/prefix

step "cmake --install $build --prefix $prefix"
"$cmake" --install "$build" --prefix "$prefix" > "$work/install.log"
libdir=$(dirname "$(find "$prefix" -name flashjitConfig.cmake)")/../..
libdir=$(cd "$libdir" && pwd)
for f in "$libdir/cmake/flashjit/flashjitConfig.cmake" \
         "$libdir/cmake/flashjit/flashjitConfigVersion.cmake" \
         "$libdir/cmake/flashjit/flashjitTargets.cmake" \
         "$libdir/pkgconfig/flashjit.pc" \
         "$libdir/pkgconfig/flashjit-runtime.pc" \
         "$libdir/libflashjit_runtime.so" "$libdir/libflashjit_c_runtime.so" \
         "$prefix/include/flashjit/flashjit.h" \
         "$prefix/include/flashjit-c/flashjit.h" \
         "$prefix/include/flashjit/compiler/Compiler.h" \
         "$prefix/include/flashjit/runtime/Bundle.h" \
         "$prefix/include/flashjit/frontend/Variant.h" \
         "$prefix/bin/flashjit" "$prefix/bin/flashjit-opt"; do
  test -e "$f" || { echo "not installed: $f"; exit 1; }
done
# The compiler's MLIR-facing headers stay internal.
if [ -e "$prefix/include/flashjit/Dialect" ]; then
  echo "MLIR dialect headers were installed"; exit 1
fi

configure() { # configure DIR NAME
  "$cmake" -S "$src/$2" -B "$1" -G "$generator" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER="$cxx" ${launcher:+-DCMAKE_CXX_COMPILER_LAUNCHER="$launcher"} \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF \
    > "$1.configure.log" || { cat "$1.configure.log"; exit 1; }
  "$cmake" --build "$1" > "$1.build.log" || { cat "$1.build.log"; exit 1; }
}
# Every flashjit library an executable loads comes from the prefix.
from_prefix() {
  if ldd "$1" | grep libflashjit | grep -v "$prefix/"; then
    echo "$1 loads flashjit libraries from outside $prefix"; exit 1
  fi
}

step "full consumer: find_package(flashjit) + flashjit::flashjit"
configure "$work/full" full
from_prefix "$work/full/consumer_full"
FLASHJIT_CACHE_DIR=$work/cache "$work/full/consumer_full"

spec='attention(name=consumer_gqa, causal=top_left, head_dim=32, dtype=fp32, heads_q=4, heads_kv=2)'
step "installed flashjit bundle --target cpu"
"$prefix/bin/flashjit" bundle --out "$work/bundle" \
  --cache-dir "$work/bundle-cache" --target cpu --spec "$spec"

# The runtime-only application: no MLIR and no compiler, directly or through
# a library (libLLVM is loaded: the frontend and runtime use LLVM Support).
runtime_only() {
  local exe=$1
  from_prefix "$exe"
  readelf -d "$exe" | grep -q NEEDED
  if readelf -d "$exe" | grep NEEDED | grep -Ei 'lib(mlir|llvm)|flashjit_(compiler|gpu_cache)'; then
    echo "$exe links MLIR, LLVM or the compiler itself"; exit 1
  fi
  if ldd "$exe" | grep -Ei 'libmlir|flashjit_(compiler|gpu_cache)'; then
    echo "$exe loads MLIR or the compiler"; exit 1
  fi
  # The heads in another order: canonicalised like the bundle's spec.
  "$exe" "$work/bundle" \
    'attention(heads_kv=2, heads_q=4, dtype=fp32, head_dim=32, causal=top_left, name=consumer_gqa)'
}
step "runtime consumer: find_package(flashjit COMPONENTS runtime) + flashjit::runtime"
configure "$work/runtime" runtime
runtime_only "$work/runtime/consumer_runtime"

if command -v pkg-config > /dev/null; then
  step "runtime consumer through pkg-config flashjit-runtime"
  export PKG_CONFIG_PATH=$libdir/pkgconfig
  version=$(pkg-config --modversion flashjit)
  test "$version" = "$(pkg-config --modversion flashjit-runtime)"
  grep -q "PACKAGE_VERSION \"$version\"" \
    "$libdir/cmake/flashjit/flashjitConfigVersion.cmake"
  # shellcheck disable=SC2046
  $launcher "$cxx" -std=c++20 -O1 -Wall -Wextra -Werror \
    $(pkg-config --cflags flashjit-runtime) "$src/runtime/main.cpp" \
    -o "$work/consumer_runtime_pc" $(pkg-config --libs flashjit-runtime) \
    -Wl,-rpath,"$(pkg-config --variable=libdir flashjit-runtime)"
  runtime_only "$work/consumer_runtime_pc"
else
  step "pkg-config not installed: the .pc files are not checked"
fi
step "all consumers passed"
