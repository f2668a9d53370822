#!/usr/bin/env bash
# Session 27, call C, on the pack of branch alibi27 (.device/gpu-a27): the
# ALiBi kernels whose PTX changed (default: slopes per row, the distance in
# f32, the overlap at D = 128, 128-key tiles at D = 64) against the float64
# reference, memcheck and synccheck on the D = 128 one; then the forward
# benchmark dense vs ALiBi default vs ALiBi "perelem" (the old default) at
# D 64/128/256 (.device/bk-a27.tar.xz); then [.fp8bench] whole (issue 18:
# D = 256 and causal). carry: .device/gpu-a27 .device/s27c
# .device/bk-a27.tar.xz .device/s27C.sh
cd "$(dirname "$0")/.."
T0=$SECONDS
P=.device/gpu-a27
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
mkdir -p "$OUT/u" /tmp/bk
OUT=$OUT/u GPU_CHECK_PACK_DIR=$P GPU_CHECK_STEPS=none bash scripts/gpu-check.sh run >"$OUT/u/unpack.log" 2>&1
tar -C /tmp/bk -xJf .device/bk-a27.tar.xz
export LD_LIBRARY_PATH=/tmp/flashjit-lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export FLASHJIT_MATRIX_KERNELS=/tmp/flashjit-matrix-kernels
B=$PWD/$P/bin/flashjit_gpu_tests
$B --list-tests >/dev/null 2>&1 || export LD_LIBRARY_PATH=/tmp/flashjit-lib/compat:$LD_LIBRARY_PATH
echo "#### unpacked after $((SECONDS - T0))s"
(FLASHJIT_MATRIX_ONLY=alibi timeout -k 5 ${C_TESTS:-200} $B -f .device/s27c/t1.txt --durations yes >"$OUT/t1.log" 2>&1; echo "t1 rc=$?" >>"$OUT/t1.log") &
(timeout -k 5 ${C_TESTS:-200} $B -f .device/s27c/t2.txt --durations yes >"$OUT/t2.log" 2>&1; echo "t2 rc=$?" >>"$OUT/t2.log") &
wait
echo "#### tests done after $((SECONDS - T0))s"
for k in 1 2; do grep -E "^(All tests|test cases|assertions)|rc=|^[0-9.]+ s:" "$OUT/t$k.log" | cut -c1-120; done
grep -h -B3 -A20 FAILED "$OUT"/t*.log | head -40
for tool in memcheck synccheck; do
  FLASHJIT_MATRIX_ONLY=alibi_d128_bf16_g3 timeout -k 5 90 compute-sanitizer --tool $tool --error-exitcode 3 \
    $B "[alibi_factor]" >"$OUT/$tool.log" 2>&1
  echo "$tool rc=$? $(grep -h 'ERROR SUMMARY' "$OUT/$tool.log" | tail -1) after $((SECONDS - T0))s"
done
left=$(( ${C_BUDGET:-560} - (SECONDS - T0) ))
env -u LD_LIBRARY_PATH timeout -k 5 $((left - 100)) python3 bench/run_bench.py --kernels /tmp/bk --out "$OUT/alibi" \
  --variants dense,alibi --d 128,64,256 --n 1024,4096,16384 --peers 0 --flex 0 --fa4 0 \
  --labels default,perelem >"$OUT/alibi.log" 2>&1
echo "#### bench rc=$? after $((SECONDS - T0))s"
grep -E "^\|" "$OUT/alibi.log" | head -60
left=$(( ${C_BUDGET:-560} - (SECONDS - T0) ))
timeout -k 5 $((left - 5)) $B "[.fp8bench]" >"$OUT/fp8bench.log" 2>&1
echo "#### fp8bench rc=$? after $((SECONDS - T0))s"
grep -E "D=|rc=|FAILED" "$OUT/fp8bench.log" | head -20
(cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf ./* && mv /tmp/all.tgz "$OUT/all.tgz")
echo "#### total $((SECONDS - T0))s"
