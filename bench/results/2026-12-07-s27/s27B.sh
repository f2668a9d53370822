#!/usr/bin/env bash
# Session 27, call B: the [gpu] cases that call A's shards 1 and 2 did not
# reach before their timeout (two processes), then the ALiBi score hooks'
# benchmark (bench_kernels --tiles of main f8cbbd6, .device/bk27.tar.xz).
# carry: .device/gpu-main26 .device/s27 .device/bk27.tar.xz .device/s27B.sh
cd "$(dirname "$0")/.."
T0=$SECONDS
P=.device/gpu-main26
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
mkdir -p "$OUT/u" /tmp/bk
OUT=$OUT/u GPU_CHECK_PACK_DIR=$P GPU_CHECK_STEPS=none bash scripts/gpu-check.sh run >"$OUT/u/unpack.log" 2>&1
tar -C /tmp/bk -xJf .device/bk27.tar.xz
export LD_LIBRARY_PATH=/tmp/flashjit-lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export FLASHJIT_MATRIX_KERNELS=/tmp/flashjit-matrix-kernels
B=$PWD/$P/bin/flashjit_gpu_tests
$B --list-tests >/dev/null 2>&1 || export LD_LIBRARY_PATH=/tmp/flashjit-lib/compat:$LD_LIBRARY_PATH
echo "#### unpacked after $((SECONDS - T0))s"
for k in 1 2; do
  (timeout -k 5 ${B_TESTS:-230} $B -f .device/s27/m$k.txt --durations yes >"$OUT/m$k.log" 2>&1; echo "m$k rc=$?" >>"$OUT/m$k.log") &
done
wait
echo "#### tests done after $((SECONDS - T0))s"
for k in 1 2; do grep -E "^(All tests|test cases|assertions)|rc=|^[0-9.]+ s:" "$OUT/m$k.log" | cut -c1-120; done
grep -h -B3 -A20 FAILED "$OUT"/m*.log | head -40
left=$(( ${B_BUDGET:-560} - (SECONDS - T0) ))
env -u LD_LIBRARY_PATH timeout -k 5 $((left - 10)) python3 bench/run_bench.py --kernels /tmp/bk --out "$OUT/alibi" \
  --variants dense,alibi --d 128,64 --n 4096,16384 --peers 0 --flex 0 --fa4 0 \
  --labels default,ws,overlap,rowfactor,floatdist,rowfactor_ov,floatdist_ov,floatdist_n128 >"$OUT/alibi.log" 2>&1
echo "#### bench rc=$? after $((SECONDS - T0))s"
grep -E "^\|" "$OUT/alibi.log" | head -60
(cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf ./* && mv /tmp/all.tgz "$OUT/all.tgz")
echo "#### total $((SECONDS - T0))s"
