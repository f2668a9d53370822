#!/bin/sh
# `flashjit bundle --kernel bwd` checks a spec with the tile flags it then
# compiles with: the backward at head dim 80 needs block_n 64 (its default
# block_n 32 cannot split dQ's 80 columns over 2 warps), so the bundle
# without the flags is refused naming block_n and leaves no bundle, and
# with them it holds the kernel. Usage: bundle_tile_flags.sh FLASHJIT DIR
set -u
fj=$1
dir=$2
rm -rf "$dir"
mkdir -p "$dir"
export FLASHJIT_CACHE_DIR="$dir/cache"
spec='attention(head_dim=80)'
if "$fj" bundle --out "$dir/plain" --spec "$spec" --kernel bwd \
  --target sm_80 >"$dir/plain.log" 2>&1; then
  echo "FAIL: head dim 80 bundled with the default block_n 32"
  exit 1
fi
grep -q "block_n = 32" "$dir/plain.log" ||
  { echo "FAIL: the error does not name block_n:"; cat "$dir/plain.log"; exit 1; }
[ ! -e "$dir/plain" ] || { echo "FAIL: a refused bundle was written"; exit 1; }
"$fj" bundle --out "$dir/tiles" --spec "$spec" --kernel bwd --block-n 64 \
  --warps 4 --target sm_80 >"$dir/tiles.log" 2>&1 ||
  { echo "FAIL: bundle with --block-n 64 --warps 4:"; cat "$dir/tiles.log"; exit 1; }
grep -q "holds 1 kernel" "$dir/tiles.log" ||
  { echo "FAIL: unexpected output:"; cat "$dir/tiles.log"; exit 1; }
echo bundle-tiles-ok
