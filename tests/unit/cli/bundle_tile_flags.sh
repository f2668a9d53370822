#!/bin/sh
# `flashjit bundle --kernel bwd` checks a spec with the tile flags it then
# compiles with: the backward at head dim 144 with --block-n 32 (dQ's 144
# columns do not split over 2 warps in multiples of 16) is refused naming
# dQ's columns and leaves no bundle; at its default tiles (block_n 64, one
# column group; they spill registers, as every tiling above 128 does) it
# holds the kernel. Head dim 80, refused at its default block_n 32 before
# newuser12's report, bundles with the default tiles (block_n 64).
# Usage: bundle_tile_flags.sh FLASHJIT DIR
set -u
fj=$1
dir=$2
rm -rf "$dir"
mkdir -p "$dir"
export FLASHJIT_CACHE_DIR="$dir/cache"
spec='attention(head_dim=144)'
if "$fj" bundle --out "$dir/n32" --spec "$spec" --kernel bwd --block-n 32 \
  --target sm_80 >"$dir/n32.log" 2>&1; then
  echo "FAIL: head dim 144 bundled with --block-n 32"
  exit 1
fi
grep -q "dQ's columns" "$dir/n32.log" ||
  { echo "FAIL: the error does not name dQ's columns:"; cat "$dir/n32.log"; exit 1; }
[ ! -e "$dir/n32" ] || { echo "FAIL: a refused bundle was written"; exit 1; }
"$fj" bundle --out "$dir/plain" --spec "$spec" --kernel bwd \
  --target sm_80 >"$dir/plain.log" 2>&1 ||
  { echo "FAIL: head dim 144 at the default tiles:"; cat "$dir/plain.log"; exit 1; }
grep -q "holds 1 kernel" "$dir/plain.log" ||
  { echo "FAIL: unexpected output:"; cat "$dir/plain.log"; exit 1; }
"$fj" bundle --out "$dir/d80" --spec 'attention(head_dim=80)' --kernel bwd \
  --target sm_80 >"$dir/d80.log" 2>&1 ||
  { echo "FAIL: head dim 80 at the default tiles:"; cat "$dir/d80.log"; exit 1; }
grep -q "holds 1 kernel" "$dir/d80.log" ||
  { echo "FAIL: unexpected output:"; cat "$dir/d80.log"; exit 1; }
echo bundle-tiles-ok
