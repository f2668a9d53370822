#!/usr/bin/env bash
# Session 24, call D2 (main pack of int24 = main 6d5b451 + the overlap
# test's bound): correctness of the new kernels in parallel processes
# (masked incl. the warp-specialised result check, ping-pong, fp8, the
# head-dim-128 generated matrix), then timings one at a time: maskbench
# (result check vs published vote vs no isolation), the decode table
# beside the peers, ping-pong vs the overlap (maskbench _ovl rows), fp8.
# carry: .device/gpu-check .device/s24D2.sh
cd "$(dirname "$0")/.."
T0=$SECONDS
BUDGET=${D2_BUDGET:-555}
left() { echo $((BUDGET - (SECONDS - T0))); }
cap() { local l; l=$(left); echo $(( $1 < l - 10 ? $1 : l - 10 )); }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
mkdir -p "$OUT/c" "$OUT/mb" "$OUT/dec" "$OUT/pp"
OUT=$OUT/c GPU_CHECK_STEPS=none bash scripts/gpu-check.sh run >"$OUT/c/unpack.log" 2>&1
export LD_LIBRARY_PATH=/tmp/flashjit-lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export FLASHJIT_MATRIX_KERNELS=/tmp/flashjit-matrix-kernels
B=.device/gpu-check/bin/flashjit_gpu_tests
$B --list-tests >/dev/null 2>&1 || export LD_LIBRARY_PATH=/tmp/flashjit-lib/compat:$LD_LIBRARY_PATH
echo "#### unpacked after $((SECONDS - T0))s"
C=${D2_C:-175}
timeout $C $B "[masked]" --durations yes >"$OUT/c/masked.log" 2>&1 &
p1=$!
(FLASHJIT_MATRIX_ONLY=pingpong_ timeout 100 $B "[pingpong]" --durations yes
 timeout 70 $B "[fp8]" --durations yes) >"$OUT/c/ppfp8.log" 2>&1 &
p2=$!
FLASHJIT_MATRIX_ONLY=_d128 timeout $C $B "generated kernels match the float64 reference on the matrix" --durations yes >"$OUT/c/gen128.log" 2>&1 &
p3=$!
wait $p1; r1=$?; wait $p2; r2=$?; wait $p3; r3=$?
echo "#### correctness rc masked=$r1 ppfp8=$r2 gen128=$r3 after $((SECONDS - T0))s"
for f in masked ppfp8 gen128; do
  echo "== $f"; grep -E "^(All tests passed|test cases:|assertions:)|FAILED|Filters" "$OUT/c/$f.log" | head -8
  grep -E '^[0-9.]+ s: ' "$OUT/c/$f.log" | cut -c1-120
done
grep -h -A18 "FAILED" "$OUT"/c/*.log | head -60
OUT=$OUT/mb GPU_CHECK_STEPS=maskbench FLASHJIT_MATRIX_ONLY=_d128 FLASHJIT_MASKBENCH_ROUNDS=2 \
  timeout -k 5 $(cap 130) bash scripts/gpu-check.sh run >"$OUT/mb/run.log" 2>&1
echo "#### maskbench rc=$? after $((SECONDS - T0))s"
grep -h "^MASKBENCH" "$OUT/mb/maskbench.log" | cut -c1-200
OUT=$OUT/dec GPU_CHECK_STEPS='decodebench decodepeers' \
  timeout -k 5 $(cap 130) bash scripts/gpu-check.sh run >"$OUT/dec/run.log" 2>&1
echo "#### dec rc=$? after $((SECONDS - T0))s"
grep -h "^DECODE \|^PEER \|decode_peers:" "$OUT/dec/decodebench.log" "$OUT/dec/decodepeers.log" | cut -c1-170
# Ping-pong (by name) against the overlap: maskbench's forward-only _ovl
# rows with the "old" column = the ping-pong kernels (gen_matrix_kernels
# mask-bench-pingpong; they keep the published vote), "new" = the default
# overlap (result check), "base" = the overlap without isolation.
mkdir -p /tmp/flashjit-matrix-kernels/maskbench-pp
tar -C /tmp/flashjit-matrix-kernels/maskbench-pp -xJf .device/gpu-check/mbpp.tar.xz
if (( $(left) > 40 )); then
  FLASHJIT_MASKBENCH_BASE=/tmp/flashjit-matrix-kernels/maskbench-base \
  FLASHJIT_MASKBENCH_OLD=/tmp/flashjit-matrix-kernels/maskbench-pp \
  FLASHJIT_MATRIX_ONLY=_ovl FLASHJIT_MASKBENCH_ROUNDS=3 \
    timeout $(cap 90) $B "[maskbench]" >"$OUT/pp/pp.log" 2>&1
  echo "#### pingpong maskbench rc=$? after $((SECONDS - T0))s"
  grep -h "^MASKBENCH" "$OUT/pp/pp.log" | cut -c1-200
fi
if (( $(left) > 30 )); then
  timeout $(cap 40) $B "[.fp8bench]" 2>&1 | grep -E "^FP8|cost|TF/s" | head -20
fi
echo "#### total $((SECONDS - T0))s"
(cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf ./* && mv /tmp/all.tgz "$OUT/all.tgz")
