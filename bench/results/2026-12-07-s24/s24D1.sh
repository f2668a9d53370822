#!/usr/bin/env bash
# Session 24, call D1 (main pack of ec58e1e: decode kernels and tests as 9450d1d): issue 17's decode
# table beside the peers in one call (decodebench, decodepeers, the device
# read/copy ceiling), the split sweep, then sanitizers: memcheck on a
# decode subset, racecheck on the pipelined D = 128 backward.
# carry: .device/gpu-check .device/s24D1.sh
cd "$(dirname "$0")/.."
T0=$SECONDS
BUDGET=${D1_BUDGET:-420}
left() { echo $((BUDGET - (SECONDS - T0))); }
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem,memory.total --format=csv,noheader
mkdir -p "$OUT/dec" "$OUT/split" "$OUT/mem" "$OUT/race"
python3 - <<'PY'
import torch
x = torch.empty(2 << 30, dtype=torch.uint8, device="cuda")
y = torch.empty_like(x)
x.random_(0, 100)
def t(f, reps=20):
    f(); torch.cuda.synchronize()
    s, e = torch.cuda.Event(True), torch.cuda.Event(True)
    best = []
    for _ in range(reps):
        s.record(); f(); e.record(); torch.cuda.synchronize()
        best.append(s.elapsed_time(e) / 1e3)
    best.sort(); return best[len(best) // 2]
xv = x.view(torch.bfloat16)
tr = t(lambda: xv.sum(dtype=torch.float32))
tc = t(lambda: y.copy_(x))
n = x.numel()
print(f"CEILING read (bf16 sum of 2 GiB): {n / tr / 1e12:.2f} TB/s; copy 2 GiB: {n / tc / 1e12:.2f} TB/s read, {2 * n / tc / 1e12:.2f} TB/s read+write")
PY
OUT=$OUT/dec GPU_CHECK_STEPS='decodebench decodepeers' \
  timeout -k 5 200 bash scripts/gpu-check.sh run >"$OUT/dec/run.log" 2>&1
echo "#### dec rc=$? after $((SECONDS - T0))s"
grep -h "^DECODE \|^PEER \|decode_peers:" "$OUT/dec/decodebench.log" "$OUT/dec/decodepeers.log" | cut -c1-170
tail -3 "$OUT/dec/decodebench.log"
OUT=$OUT/race GPU_CHECK_STEPS='racecheck_bwd' GPU_CHECK_BWD_RACE_KERNEL=bwd_none_d128 \
  timeout -k 5 110 bash scripts/gpu-check.sh run >"$OUT/race/run.log" 2>&1
echo "#### racecheck_bwd rc=$? after $((SECONDS - T0))s"
grep -h "RACECHECK SUMMARY\|All tests passed\|test cases\|FAILED\|Filters" "$OUT/race"/racecheck_bwd.log | head -6
l=$(left)
if ((l > 40)); then
  OUT=$OUT/mem GPU_CHECK_STEPS='memcheck_decode' \
    FLASHJIT_MATRIX_ONLY=dec_dense_g4 \
    timeout -k 5 $((l - 5)) bash scripts/gpu-check.sh run >"$OUT/mem/run.log" 2>&1
  echo "#### memcheck_decode rc=$? after $((SECONDS - T0))s"
  grep -h "ERROR SUMMARY\|All tests passed\|test cases\|FAILED" "$OUT/mem"/memcheck_decode.log | head -6
fi
echo "#### total $((SECONDS - T0))s"
(cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf ./* && mv /tmp/all.tgz "$OUT/all.tgz")
