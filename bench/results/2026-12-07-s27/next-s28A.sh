#!/usr/bin/env bash
# Next session, first device call (pack of main after session 27,
# .device/gpu-main27, made by `FLASHJIT_GPU_CHECK_BUILD=build/ci
# GPU_CHECK_PACK_DIR=.device/gpu-main27 bash scripts/gpu-check.sh pack`):
# the whole [gpu] step in 6 shards (session 27: 4 overran their 420 s;
# tests/gpu/gpu-durations.tsv predicts 244-285 s a shard at 6), then
# sanitizers on the warp-specialised forwards. The pack's
# torch_bundle.tar.xz and bin/flashjit_runtime_tests were moved out (to
# /work/stash27): the gpu step needs neither, and with them the carry
# passes 64 MiB; without them it is 61.6 MiB with the tree.
# carry: .device/gpu-main27 .device/s28A.sh
cd "$(dirname "$0")/.."
T0=$SECONDS
BUDGET=${A_BUDGET:-570}
left() { echo $((BUDGET - (SECONDS - T0))); }
nvidia-smi --query-gpu=name,clocks.max.sm,driver_version --format=csv,noheader
export GPU_CHECK_PACK_DIR=.device/gpu-main27
mkdir -p "$OUT/gpu" "$OUT/san"
l=$(left)
OUT=$OUT/gpu GPU_CHECK_STEPS=gpu GPU_CHECK_GPU_SHARDS=6 \
  GPU_CHECK_SHARD_TIMEOUT=$((l - 150)) timeout -k 5 $((l - 140)) \
  bash scripts/gpu-check.sh run >"$OUT/gpu/run.log" 2>&1
echo "#### gpu rc=$? after $((SECONDS - T0))s"
grep -A12 "=== gpu shards" "$OUT/gpu/run.log"
grep -h -B3 -A25 "FAILED" "$OUT"/gpu/gpu-shards/shard*.log | head -80
for f in "$OUT"/gpu/gpu-shards/shard*.log; do echo "== $f"; grep -E '^[0-9.]+ s: ' "$f" | sort -rn | head -5 | cut -c1-110; done
l=$(left)
if ((l > 40)); then
  OUT=$OUT/san GPU_CHECK_STEPS='memcheck_ws synccheck_generated synccheck_masked' \
    timeout -k 5 $((l - 5)) bash scripts/gpu-check.sh run >"$OUT/san/run.log" 2>&1
  echo "#### san rc=$? after $((SECONDS - T0))s"
  grep -h "ERROR SUMMARY\|RACECHECK SUMMARY\|rc=" "$OUT"/san/*.log | head -20
fi
echo "#### total $((SECONDS - T0))s"
(cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf ./* && mv /tmp/all.tgz "$OUT/all.tgz")
