#!/usr/bin/env bash
# Session 25, call A: diagnose session 24's three GPU failures on session
# 24's pack (int24 = main 6d5b451 + fp8m24: its matrix holds the ping-pong
# kernels, the WS result-check ovlv_* kernels and the fp8 qk160/v80 one).
# carry: .device/gpu-check .device/s25A.sh
cd "$(dirname "$0")/.."
T0=$SECONDS
BUDGET=${A_BUDGET:-470}
left() { echo $((BUDGET - (SECONDS - T0))); }
cap() { local l; l=$(left); echo $(( $1 < l - 10 ? $1 : l - 10 )); }
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
mkdir -p "$OUT/u" "$OUT/sass"
OUT=$OUT/u GPU_CHECK_STEPS=none bash scripts/gpu-check.sh run >"$OUT/u/unpack.log" 2>&1
export LD_LIBRARY_PATH=/tmp/flashjit-lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export FLASHJIT_MATRIX_KERNELS=/tmp/flashjit-matrix-kernels
B=$PWD/.device/gpu-check/bin/flashjit_gpu_tests
$B --list-tests >/dev/null 2>&1 || export LD_LIBRARY_PATH=/tmp/flashjit-lib/compat:$LD_LIBRARY_PATH
echo "#### unpacked after $((SECONDS - T0))s"; which cuda-gdb compute-sanitizer cuobjdump ptxas
K=/tmp/flashjit-matrix-kernels
for id in pingpong_none_d128_bf16_g2 ovlv_causal_tl_d128_bf16_g2 fp8_none_dqk160_dv80_e5m2_fp16_g1; do
  (ptxas -arch=sm_90a $K/$id.ptx -o /tmp/$id.cubin && cuobjdump -sass /tmp/$id.cubin >"$OUT/sass/$id.sass") >"$OUT/sass/$id.log" 2>&1
done
echo "#### sass after $((SECONDS - T0))s"
# A hung test: attach cuda-gdb after $2 s and print every warp's PC.
probe() {
  local name=$1 wait=$2; shift 2
  "$@" >"$OUT/$name.log" 2>&1 &
  local pid=$! i
  for ((i = 0; i < wait; ++i)); do sleep 1; kill -0 $pid 2>/dev/null || break; done
  if kill -0 $pid 2>/dev/null; then
    echo "#### $name still running after ${wait}s: attaching"
    local ex=(-ex "info cuda kernels" -ex "info cuda sms" -ex "cuda sm 0 warp 0 lane 0" -ex "info cuda blocks" -ex "info cuda warps")
    for w in 0 1 2 3 4 5 6 7 8 9 10 11; do ex+=(-ex "cuda sm 0 warp $w lane 0" -ex "x/4i \$pc"); done
    ex+=(-ex "cuda sm 1 warp 0 lane 0" -ex "info cuda warps")
    for w in 0 4 8 9; do ex+=(-ex "cuda sm 1 warp $w lane 0" -ex "x/4i \$pc"); done
    timeout 90 cuda-gdb -q -batch -p $pid "${ex[@]}" >"$OUT/$name.gdb" 2>&1
    echo "gdb rc=$?"; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
  else
    wait $pid; echo "#### $name finished rc=$? after $((SECONDS - T0))s"
  fi
  grep -E "^(All tests|test cases|assertions)|FAILED" "$OUT/$name.log" | head -5
}
# 1. fp8 illegal address: memcheck names the access.
FLASHJIT_MATRIX_ONLY=fp8_none_dqk160_dv80 timeout 120 compute-sanitizer --tool memcheck --show-backtrace device \
  $B "GPU fp8 forward matches the float64 reference on the dequantised inputs" >"$OUT/fp8mem.log" 2>&1
echo "#### fp8 memcheck rc=$? after $((SECONDS - T0))s"; grep -m12 -E "Invalid|at 0x|Address|ERROR SUMMARY|by thread" "$OUT/fp8mem.log"
# 2. ping-pong: where do its warps wait?
FLASHJIT_MATRIX_ONLY=pingpong_none_d128_bf16_g2 probe pp 45 $B "[pingpong]" --durations yes
# 3. the result check's poisoned rerun
FLASHJIT_MATRIX_ONLY=ovlv_causal_tl_d128_bf16_g2 probe wsck 30 $B "forward: NaN and Inf at keys a row does not attend never reach it" --durations yes
echo "#### probes done after $((SECONDS - T0))s"
# 4. if the ping-pong hung: synccheck on it (bounded)
if grep -q "still running" "$OUT/pp.gdb" 2>/dev/null || [ -s "$OUT/pp.gdb" ]; then
  FLASHJIT_MATRIX_ONLY=pingpong_none_d128_bf16_g2 timeout $(cap 80) compute-sanitizer --tool synccheck $B "[pingpong]" >"$OUT/ppsync.log" 2>&1
  echo "#### pp synccheck rc=$? after $((SECONDS - T0))s"; grep -m12 -E "Barrier|barrier|ERROR SUMMARY|Invalid|at 0x" "$OUT/ppsync.log"
fi
# 5. the result check against the in-tile vote, bit for bit, on the ovlv kernels
FLASHJIT_MATRIX_ONLY=ovlv_ timeout $(cap 60) $B "forward: kernels that check their results for NaN and Inf equal the in-tile vote bit for bit" --durations yes >"$OUT/wsbit.log" 2>&1
echo "#### wsbit rc=$? after $((SECONDS - T0))s"; grep -E "^(All tests|test cases|assertions)|FAILED|^[0-9.]+ s:" "$OUT/wsbit.log" | head -6
# 6. maskbench at head dim 128: new = result check, old = published vote, base = none
mkdir -p "$OUT/mb"
if (( $(left) > 100 )); then
OUT=$OUT/mb GPU_CHECK_STEPS=maskbench FLASHJIT_MATRIX_ONLY=_d128 FLASHJIT_MASKBENCH_ROUNDS=2 \
  timeout -k 5 $(cap 130) bash scripts/gpu-check.sh run >"$OUT/mb/run.log" 2>&1
echo "#### maskbench rc=$? after $((SECONDS - T0))s"
grep -h "^MASKBENCH" "$OUT/mb/maskbench.log" | cut -c1-220
fi
# 7. ping-pong (old column, published vote) vs the overlap (new: result check; base: none)
if grep -q "^All tests passed" "$OUT/pp.log" && (( $(left) > 50 )); then
  mkdir -p /tmp/flashjit-matrix-kernels/maskbench-pp
  tar -C /tmp/flashjit-matrix-kernels/maskbench-pp -xJf .device/gpu-check/mbpp.tar.xz
  FLASHJIT_MASKBENCH_BASE=/tmp/flashjit-matrix-kernels/maskbench-base \
  FLASHJIT_MASKBENCH_OLD=/tmp/flashjit-matrix-kernels/maskbench-pp \
  FLASHJIT_MATRIX_ONLY=_ovl FLASHJIT_MASKBENCH_ROUNDS=3 \
    timeout $(cap 90) $B "[maskbench]" >"$OUT/ppbench.log" 2>&1
  echo "#### pingpong maskbench rc=$? after $((SECONDS - T0))s"
  grep -h "^MASKBENCH" "$OUT/ppbench.log" | cut -c1-220
fi
echo "#### total $((SECONDS - T0))s"
(cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf ./* && mv /tmp/all.tgz "$OUT/all.tgz")
