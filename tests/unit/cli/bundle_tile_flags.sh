#!/bin/sh
# `flashjit bundle --kernel bwd` checks a spec with the tile flags it then
# compiles with: the backward at head dim 144 is refused at its default
# tiles (every tiling spills there; the error names the head dims it
# takes) and leaves no bundle; with --block-n 64 --warps 4 (tiles asked for
# by name, built as asked) it holds the kernel. Head dim 80, refused at its
# default block_n 32 before newuser12's report, bundles with the default
# tiles (block_n 64). Usage: bundle_tile_flags.sh FLASHJIT DIR
set -u
fj=$1
dir=$2
rm -rf "$dir"
mkdir -p "$dir"
export FLASHJIT_CACHE_DIR="$dir/cache"
spec='attention(head_dim=144)'
if "$fj" bundle --out "$dir/plain" --spec "$spec" --kernel bwd \
  --target sm_80 >"$dir/plain.log" 2>&1; then
  echo "FAIL: head dim 144 bundled with the default tiles"
  exit 1
fi
grep -q "head_dim_qk = 144 is not supported by the GPU backward" \
  "$dir/plain.log" && grep -q "16, 32, 48, 64, 80, 96 and 128" "$dir/plain.log" ||
  { echo "FAIL: the error does not name the head dims:"; cat "$dir/plain.log"; exit 1; }
[ ! -e "$dir/plain" ] || { echo "FAIL: a refused bundle was written"; exit 1; }
"$fj" bundle --out "$dir/tiles" --spec "$spec" --kernel bwd --block-n 64 \
  --warps 4 --target sm_80 >"$dir/tiles.log" 2>&1 ||
  { echo "FAIL: bundle with --block-n 64 --warps 4:"; cat "$dir/tiles.log"; exit 1; }
grep -q "holds 1 kernel" "$dir/tiles.log" ||
  { echo "FAIL: unexpected output:"; cat "$dir/tiles.log"; exit 1; }
"$fj" bundle --out "$dir/d80" --spec 'attention(head_dim=80)' --kernel bwd \
  --target sm_80 >"$dir/d80.log" 2>&1 ||
  { echo "FAIL: head dim 80 at the default tiles:"; cat "$dir/d80.log"; exit 1; }
grep -q "holds 1 kernel" "$dir/d80.log" ||
  { echo "FAIL: unexpected output:"; cat "$dir/d80.log"; exit 1; }
echo bundle-tiles-ok
