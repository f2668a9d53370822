#!/usr/bin/env bash
# Session 26, FA4 call 2 of 2 (right after s26F1.sh, same warm machine):
# the forward beside FlashAttention-4, FA2 and cuDNN (bench/run_bench.py,
# bf16, batch x seqlen 32768, hidden 2048) on main's bench kernels
# (.device/bk-main.tar.xz: bench_kernels of main). carry:
# .device/fa4/partB.tar.xz .device/bk-main.tar.xz .device/s26F2.sh
cd "$(dirname "$0")/.."
T0=$SECONDS
[[ -d $HOME/fa4/fa4site ]] || { echo "no \$HOME/fa4: the machine was given back between the calls"; exit 3; }
tar -C $HOME/fa4 -xJf .device/fa4/partB.tar.xz || exit 4
export PYTHONPATH=$HOME/fa4/fa4site:$HOME/fa4/fa4site/nvidia_cutlass_dsl/dsl_packages
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv,noheader
mkdir -p /tmp/bk && tar -C /tmp/bk -xJf .device/bk-main.tar.xz
python3 -c "import flash_attn.cute, cutlass; print('fa4 import ok')" 2>&1 | tail -2
LABELS=${F2_LABELS:-default}
for D in ${F2_D:-128 64 256}; do
  left=$(( ${F2_BUDGET:-540} - (SECONDS - T0) ))
  (( left > 40 )) || { echo "#### no time left for D=$D"; break; }
  timeout -k 5 $(( left - 20 )) python3 bench/run_bench.py --kernels /tmp/bk --out "$OUT/d$D" \
    --d $D --n ${F2_N:-1024,2048,4096,16384} --labels $LABELS --flex 0 \
    --variants ${F2_VARIANTS:-dense,causal,swa1024,softcap30,alibi} >"$OUT/d$D.log" 2>&1
  echo "#### D=$D rc=$? after $((SECONDS - T0))s"
  grep -E "^\|" "$OUT/d$D.log" | head -60
done
(cd "$OUT" && tar czf /tmp/all.tgz . && rm -rf ./* && mv /tmp/all.tgz "$OUT/all.tgz")
echo "#### total $((SECONDS - T0))s"
