#!/usr/bin/env bash
# The proof a refactor of the GPU generator owes: the PTX of every kernel of
# the generated matrix (tests/support/KernelMatrix.h: every variant, head
# dim, dtype and mode, plus the block-sparse/varlen and option kernels) for
# sm_80, sm_90a (default instruction kind: wgmma where it applies) and
# sm_90a with mma.sync, written by gen_matrix_kernels and compared byte for
# byte with an earlier run. Every kernel also goes through ptxas -v and must
# show no spills and no stack frame (the full sweep of CI's sampled test).
#
#   scripts/ptx-matrix.sh OUTDIR            # write OUTDIR/<arch-kind>/*.ptx
#   scripts/ptx-matrix.sh OUTDIR BASEDIR    # ... and compare with BASEDIR
#
# Typical use: run it on the commit before the change (into BASEDIR), then
# after it; it exits 1 and lists the kernels whose PTX differs. Uses the
# build in $FLASHJIT_BUILD_DIR (default build/ci); builds gen_matrix_kernels
# there first.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/ptx-matrix.sh OUTDIR [BASEDIR]}
base=${2:-}
build=${FLASHJIT_BUILD_DIR:-build/ci}
cmake --build "$build" --target gen_matrix_kernels >/dev/null
gen="$build/tests/gpu/gen_matrix_kernels"
for run in "sm_80 default" "sm_90a default" "sm_90a mma.sync"; do
  set -- $run
  dir="$out/$1-$2"
  rm -rf "$dir"
  mkdir -p "$dir"
  "$gen" "$dir" "$1" "$2"
done
# The full no-spill sweep (CI's GpuCodegenTest assembles a random third of
# the matrix per run): every kernel written above through ptxas -v, on all
# cores; a spill or a stack frame anywhere fails the script.
ptxas=${PTXAS:-$(command -v ptxas || echo /usr/local/cuda/bin/ptxas)}
spills=$(find "$out" -name '*.ptx' -print0 |
  xargs -0 -P "$(nproc)" -I{} sh -c '
    arch=$(basename "$(dirname "$1")"); arch=${arch%%-*}
    "$2" -v -arch="$arch" -o /dev/null "$1" 2>&1 |
      awk -v k="$(basename "$(dirname "$1")")/$(basename "$1")" "
        /Function properties for/ { fn = \$NF }
        /[1-9][0-9]* bytes (stack frame|spill)/ { print k \": \" fn \": \" \$0 }"
  ' _ {} "$ptxas")
nptx=$(find "$out" -name '*.ptx' | wc -l)
# Known and accepted (TilePolicy's backwardDefaultTilesSpill): the mma.sync
# backward main kernel (`*_bwd`) above head dim 128 or at 112 spills on
# every tiling.
spills=$(grep -vE '^(sm_80-default|sm_90a-mma\.sync)/[a-z0-9_]*_d(112|1[3-9][0-9]|2[0-9][0-9])[_.][^:]*: [A-Za-z0-9_]*_bwd: ' \
  <<<"$spills" || true)
if [[ -n "$spills" ]]; then
  echo "$spills"
  echo "ptx-matrix: spills or stack frames in the kernels above (of $nptx)"
  exit 1
fi
echo "ptx-matrix: $nptx kernels assembled by ptxas, no spills, no stack frames"
[[ -n "$base" ]] || exit 0
changed=0 same=0
for f in "$base"/*/*.ptx; do
  rel=${f#"$base"/}
  if [[ ! -f "$out/$rel" ]]; then
    echo "missing: $rel"
    changed=$((changed + 1))
  elif cmp -s "$f" "$out/$rel"; then
    same=$((same + 1))
  else
    echo "differs: $rel"
    changed=$((changed + 1))
  fi
done
for f in "$out"/*/*.ptx; do
  rel=${f#"$out"/}
  [[ -f "$base/$rel" ]] || { echo "new: $rel"; changed=$((changed + 1)); }
done
echo "ptx-matrix: $same identical, $changed changed"
[[ $changed -eq 0 ]]
