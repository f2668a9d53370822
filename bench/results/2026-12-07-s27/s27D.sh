#!/usr/bin/env bash
# Session 27, call D, on the pack of branch alibi27 (.device/gpu-a27): the
# [alibi_factor] kernels call C's 200 s limit cut (alibi_d128_fp16_g8 on
# its large shape, alibi_d256_bf16_g3 not reached), each in its own
# process, and the fp8 ALiBi kernel. carry: .device/gpu-a27 .device/s27c
# .device/s27D.sh
cd "$(dirname "$0")/.."
T0=$SECONDS
P=.device/gpu-a27
mkdir -p "$OUT/u"
OUT=$OUT/u GPU_CHECK_PACK_DIR=$P GPU_CHECK_STEPS=none bash scripts/gpu-check.sh run >"$OUT/u/unpack.log" 2>&1
export LD_LIBRARY_PATH=/tmp/flashjit-lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export FLASHJIT_MATRIX_KERNELS=/tmp/flashjit-matrix-kernels
B=$PWD/$P/bin/flashjit_gpu_tests
$B --list-tests >/dev/null 2>&1 || export LD_LIBRARY_PATH=/tmp/flashjit-lib/compat:$LD_LIBRARY_PATH
echo "#### unpacked after $((SECONDS - T0))s"
run() { # name only filter...
  local name=$1 only=$2; shift 2
  (FLASHJIT_MATRIX_ONLY=$only timeout -k 5 ${D_TESTS:-330} $B "$@" --durations yes -s >"$OUT/$name.log" 2>&1
   echo "$name rc=$? after $((SECONDS - T0))s" >>"$OUT/$name.log") &
  pids+=($!)
}
pids=()
run fp16g8 alibi_d128_fp16_g8 "[alibi_factor]"
run d256 alibi_d256 "[alibi_factor]"
run fp8 fp8_alibi "GPU fp8 forward matches the float64 reference on the dequantised inputs"
# Progress of the long one: which shape it is on, every 30 s.
( for t in $(seq 1 11); do sleep 30; echo "t=$((SECONDS - T0)) $(grep -c 'seqlen_q\|passed' "$OUT/fp16g8.log")"; done ) &
prog=$!
wait "${pids[@]}"
kill $prog 2>/dev/null
for n in fp16g8 d256 fp8; do echo "== $n"; grep -E "^(All tests|test cases|assertions)|rc=|^[0-9.]+ s:" "$OUT/$n.log" | cut -c1-120; grep -B2 -A12 FAILED "$OUT/$n.log" | head -30; done
(cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf ./* && mv /tmp/all.tgz "$OUT/all.tgz")
echo "#### total $((SECONDS - T0))s"
