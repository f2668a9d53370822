#!/usr/bin/env bash
# Session 26, call G: the [fp8] cases again with the varlen case's test fix
# (quantizeFp8 keeps one code for an empty tensor), on .device/gpu-f26 (the
# f25pp pack with land26's test binary), beside issue 7's document-causal
# benchmark against Flex (main's bench_kernels --sparse). carry:
# .device/gpu-f26 .device/bk-sparse.tar.xz .device/s26G.sh
cd "$(dirname "$0")/.."
T0=$SECONDS
P=.device/gpu-f26
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
mkdir -p "$OUT/u" /tmp/bks
OUT=$OUT/u GPU_CHECK_PACK_DIR=$P GPU_CHECK_STEPS=none bash scripts/gpu-check.sh run >"$OUT/u/unpack.log" 2>&1
tar -C /tmp/bks -xJf .device/bk-sparse.tar.xz
export LD_LIBRARY_PATH=/tmp/flashjit-lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export FLASHJIT_MATRIX_KERNELS=/tmp/flashjit-matrix-kernels
B=$PWD/$P/bin/flashjit_gpu_tests
$B --list-tests >/dev/null 2>&1 || export LD_LIBRARY_PATH=/tmp/flashjit-lib/compat:$LD_LIBRARY_PATH
echo "#### unpacked after $((SECONDS - T0))s"
(timeout ${G_FP8:-200} $B "[fp8]" --durations yes >"$OUT/fp8.log" 2>&1; echo "fp8 rc=$?" >>"$OUT/fp8.log") &
p1=$!
(env -u LD_LIBRARY_PATH timeout -k 5 ${G_SPARSE:-210} python3 -u bench/run_block_sparse.py --kernels /tmp/bks --out "$OUT/sparse" \
  --n 16384,4096 --groups ours_doc,flex_doc --budget $(( ${G_SPARSE:-210} - 15 )) >"$OUT/sparse.log" 2>&1; echo "sparse rc=$?" >>"$OUT/sparse.log") &
p2=$!
wait $p1 $p2
grep -E "^(All tests|test cases|assertions)|FAILED|rc=|^[0-9.]+ s:" "$OUT/fp8.log" | head -20
grep -A10 FAILED "$OUT/fp8.log" | head -30
tail -25 "$OUT/sparse.log"
[[ -f $OUT/sparse/block_sparse.md ]] && cat "$OUT/sparse/block_sparse.md"
echo "#### total $((SECONDS - T0))s"
(cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf ./* && mv /tmp/all.tgz "$OUT/all.tgz")
