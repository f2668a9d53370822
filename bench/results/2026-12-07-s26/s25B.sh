#!/usr/bin/env bash
# Session 25, call B: the pack of branch f25pp (main + fp8m24 with the V
# transpose's guarded last round + the ping-pong as the default overlap +
# the faster [pingpong] case + `<id>_rcheck` result-check twins; packed with
# GPU_CHECK_MASKBENCH=1 GPU_CHECK_MASKBENCH_OLD=mask-bench-rcheck, plus
# bench.tar.xz: run_bench's D = 128 kernels). carry: .device/gpu-f25
# .device/s25B.sh
cd "$(dirname "$0")/.."
T0=$SECONDS
BUDGET=${B_BUDGET:-560}
left() { echo $((BUDGET - (SECONDS - T0))); }
cap() { local l; l=$(left); echo $(( $1 < l - 10 ? $1 : l - 10 )); }
P=.device/gpu-f25
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
mkdir -p "$OUT/u" "$OUT/c"
OUT=$OUT/u GPU_CHECK_PACK_DIR=$P GPU_CHECK_STEPS=none bash scripts/gpu-check.sh run >"$OUT/u/unpack.log" 2>&1
export LD_LIBRARY_PATH=/tmp/flashjit-lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export FLASHJIT_MATRIX_KERNELS=/tmp/flashjit-matrix-kernels
export FLASHJIT_TEST_PROGRESS=1 # a launch with no "returned" line after it did not return
B=$PWD/$P/bin/flashjit_gpu_tests
$B --list-tests >/dev/null 2>&1 || export LD_LIBRARY_PATH=/tmp/flashjit-lib/compat:$LD_LIBRARY_PATH
echo "#### unpacked after $((SECONDS - T0))s"
probe() {
  local name=$1 wait=$2; shift 2
  "$@" >"$OUT/c/$name.log" 2>&1 &
  local pid=$! i
  for ((i = 0; i < wait; ++i)); do sleep 1; kill -0 $pid 2>/dev/null || break; done
  if kill -0 $pid 2>/dev/null; then
    echo "#### $name still running after ${wait}s: attaching"
    local ex=(-ex "info cuda kernels" -ex "cuda sm 0 warp 0 lane 0" -ex "info cuda warps")
    for w in 0 1 2 3 4 5 6 7 8 9 10 11; do ex+=(-ex "cuda sm 0 warp $w lane 0" -ex "x/4i \$pc"); done
    timeout 60 cuda-gdb -q -batch -p $pid "${ex[@]}" >"$OUT/c/$name.gdb" 2>&1
    echo "gdb rc=$?"; kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
  else
    wait $pid; echo "#### $name finished rc=$? after $((SECONDS - T0))s"
  fi
  grep -E "^(All tests|test cases|assertions)|FAILED|^[0-9.]+ s:" "$OUT/c/$name.log" | head -6
}
# 1. the ping-pong on one kernel: hung or not?
FLASHJIT_MATRIX_ONLY=pingpong_none_d128_bf16_g2 probe pp1 40 $B "[pingpong]" --durations yes
# 1b. the result check's poisoned rerun on one kernel: hung or not?
FLASHJIT_MATRIX_ONLY=ovlv_causal_tl_d128_bf16_g2_rcheck probe rc1 30 $B "forward: NaN and Inf at keys a row does not attend never reach it" --durations yes
# 2. correctness of what changed, in parallel processes
C=$(cap 150)
(timeout $C $B "[pingpong]" --durations yes; timeout 60 $B "[fp8]" --durations yes) >"$OUT/c/ppfp8.log" 2>&1 &
p1=$!
FLASHJIT_MATRIX_ONLY=_d128 timeout $C $B "generated kernels match the float64 reference on the matrix" --durations yes >"$OUT/c/gen128.log" 2>&1 &
p2=$!
(timeout $C $B "[overlap]" --durations yes; FLASHJIT_MATRIX_ONLY=d128 timeout 90 $B "[masked]" --durations yes) >"$OUT/c/ovlmasked.log" 2>&1 &
p3=$!
wait $p1; r1=$?; wait $p2; r2=$?; wait $p3; r3=$?
echo "#### correctness rc ppfp8=$r1 gen128=$r2 ovlmasked=$r3 after $((SECONDS - T0))s"
for f in ppfp8 gen128 ovlmasked; do
  echo "== $f"; grep -E "^(All tests passed|test cases:|assertions:)|FAILED|Filters" "$OUT/c/$f.log" | head -8
  grep -E '^[0-9.]+ s: ' "$OUT/c/$f.log" | cut -c1-120
done
grep -h -A14 "FAILED" "$OUT"/c/*.log | head -50
# 3. speed: the ping-pong default against the overlap by name, beside FA2 / cuDNN / Flex
mkdir -p "$OUT/b"
if (( $(left) > 60 )); then
  mkdir -p $P/bench && tar -C $P/bench -xJf $P/bench.tar.xz
  OUT=$OUT/b GPU_CHECK_PACK_DIR=$P GPU_CHECK_STEPS=peers GPU_CHECK_BENCH_N=4096,16384 GPU_CHECK_BENCH_D=128 \
    GPU_CHECK_BENCH_ARGS="--labels default,overlap,pingpong --variants dense,causal,softcap30 --fa4 0 --flex 0" \
    timeout -k 5 $(cap 170) bash scripts/gpu-check.sh run >"$OUT/b/run.log" 2>&1
  echo "#### bench rc=$? after $((SECONDS - T0))s"
  grep -h -E "TF/s|^\|" "$OUT/b/peers.log" | head -40
fi
# 4. maskbench at D = 128: new = default (ping-pong, published vote),
# old = the result check, base = no isolation
mkdir -p "$OUT/mb"
if (( $(left) > 100 )); then
  OUT=$OUT/mb GPU_CHECK_PACK_DIR=$P GPU_CHECK_STEPS=maskbench FLASHJIT_MATRIX_ONLY=_d128 FLASHJIT_MASKBENCH_ROUNDS=2 \
    timeout -k 5 $(cap 130) bash scripts/gpu-check.sh run >"$OUT/mb/run.log" 2>&1
  echo "#### maskbench rc=$? after $((SECONDS - T0))s"
  grep -h "^MASKBENCH" "$OUT/mb/maskbench.log" | cut -c1-220
fi
if (( $(left) > 40 )); then
  timeout $(cap 40) $B "[.fp8bench]" 2>&1 | grep -E "^FP8|TF/s" | head -20
fi
echo "#### total $((SECONDS - T0))s"
(cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf ./* && mv /tmp/all.tgz "$OUT/all.tgz")
