#!/usr/bin/env bash
# Session 27, call E: the [alibi_factor] case with its lighter large shapes
# (3 kernels, one process), on .device/gpu-a27 with the rebuilt test
# binary; beside it the whole fp8 reference case (call A's timeout cut it).
# carry: .device/gpu-a27 .device/s27E.sh
cd "$(dirname "$0")/.."
T0=$SECONDS
P=.device/gpu-a27
mkdir -p "$OUT/u"
OUT=$OUT/u GPU_CHECK_PACK_DIR=$P GPU_CHECK_STEPS=none bash scripts/gpu-check.sh run >"$OUT/u/unpack.log" 2>&1
export LD_LIBRARY_PATH=/tmp/flashjit-lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export FLASHJIT_MATRIX_KERNELS=/tmp/flashjit-matrix-kernels
B=$PWD/$P/bin/flashjit_gpu_tests
$B --list-tests >/dev/null 2>&1 || export LD_LIBRARY_PATH=/tmp/flashjit-lib/compat:$LD_LIBRARY_PATH
(timeout -k 5 ${E_TESTS:-150} $B "GPU fp8 forward matches the float64 reference on the dequantised inputs" \
  --durations yes >"$OUT/fp8.log" 2>&1; echo "fp8 rc=$? after $((SECONDS - T0))s" >>"$OUT/fp8.log") &
timeout -k 5 ${E_TESTS:-150} $B "[alibi_factor]" --durations yes >"$OUT/alibi.log" 2>&1
echo "alibi rc=$? after $((SECONDS - T0))s"
wait
for n in alibi fp8; do grep -E "^(All tests|test cases|assertions)|rc=|^[0-9.]+ s:" "$OUT/$n.log" | cut -c1-120
grep -B2 -A14 FAILED "$OUT/$n.log" | head -30; done
(cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf ./* && mv /tmp/all.tgz "$OUT/all.tgz")
