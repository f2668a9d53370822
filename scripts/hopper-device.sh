#!/usr/bin/env bash
# Issue 16 on the lent H200: the TMA (and warp-specialised) forward kernels
# beside the cp.async wgmma default, in one call.
#
#   here:   scripts/hopper-device.sh pack     # fills /work/main/.device/hopper
#   device: run(command="bash .device/hopper/hopper-device.sh run",
#               carry=[".device/hopper"])
#
# pack: the [gpu] matrix kernels with mma = wgmma.tma (HOPPER_MMA; head dims
# 64, 128, 192, 256: every dense variant takes the TMA path; .info lines
# end in "tma"), the bench kernels (dense/causal, D = 64/128, labels
# default (TMA) and cpasync (mma wgmma: the loads before TMA)),
# flashjit_gpu_tests and its shared libraries. run: the matrix test per head dim, compute-sanitizer
# memcheck and racecheck on one TMA kernel, bench/run_bench.py timing; logs
# under $OUT, a short table last.
set -uo pipefail
cmd=${1:?usage: hopper-device.sh pack|run}

pack() {
  set -e
  cd "$(dirname "$0")/.."
  source scripts/env.sh
  local B=${FLASHJIT_BUILD_DIR:-build/ci} P=/work/main/.device/hopper
  rm -rf "$P"
  mkdir -p "$P/bin" "$P/lib" "$P/bench"
  # HOPPER_MATRIX_DIR: kernels generated before (same build), else here.
  local k=${HOPPER_MATRIX_DIR:-}
  if [[ -z $k ]]; then
    k=$(mktemp -d)
    for d in d64_ d128_ d192_ d256_; do
      FLASHJIT_MATRIX_ONLY=$d "$B/tests/gpu/gen_matrix_kernels" "$k" sm_90a \
        ${HOPPER_MMA:-wgmma.tma} >/dev/null
    done
  fi
  tar -C "$k" -cJf "$P/matrix_tma.tar.xz" .
  "$B/bench/bench_kernels" "$P/bench" >/dev/null
  python3 - "$P/bench" <<'PY'
import json, os, sys
d = sys.argv[1]
m = json.load(open(os.path.join(d, "manifest.json")))
keep = [e for e in m if e["variant"] in ("dense", "causal") and e["D"] in (64, 128)]
for e in m:
    if e not in keep:
        os.remove(os.path.join(d, e["ptx"]))
json.dump(keep, open(os.path.join(d, "manifest.json"), "w"), indent=1)
print(len(keep), "bench kernels:", sorted({e["label"] for e in keep}))
PY
  cp bench/run_bench.py "$P/run_bench.py"
  cp scripts/hopper-device.sh "$P/hopper-device.sh"
  objcopy --strip-debug "$B/tests/gpu/flashjit_gpu_tests" \
    "$P/bin/flashjit_gpu_tests"
  local skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libnvrtc|libnvJitLink|libcuda\.so)'
  ldd "$B/tests/gpu/flashjit_gpu_tests" | awk '/=> \//{print $1, $3}' |
    sort -u | while read -r name path; do
      [[ $name =~ $skip ]] && continue
      objcopy --strip-debug "$path" "$P/lib/$name" 2>/dev/null ||
        cp -L "$path" "$P/lib/$name"
      if (($(stat -c %s "$P/lib/$name") > 4000000)); then
        xz -T2 -6 "$P/lib/$name"
      fi
    done
  du -sh "$P"
}

run() {
  local P=.device/hopper out=${OUT:-/tmp/hopper-out} lib=/tmp/hopper-lib
  mkdir -p "$out" "$lib/compat"
  for f in "$P"/lib/*; do
    case $f in
    *.xz) xz -dc "$f" >"$lib/$(basename "${f%.xz}")" ;;
    *) cp "$f" "$lib/" ;;
    esac
  done
  mv -f "$lib"/libstdc++.so.6 "$lib"/libgcc_s.so.1 "$lib/compat/" 2>/dev/null
  export LD_LIBRARY_PATH="$lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  "$P/bin/flashjit_gpu_tests" --list-tests >/dev/null 2>&1 ||
    export LD_LIBRARY_PATH="$lib/compat:$LD_LIBRARY_PATH"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
  export FLASHJIT_MATRIX_KERNELS=/tmp/matrix-tma
  mkdir -p $FLASHJIT_MATRIX_KERNELS
  tar -C $FLASHJIT_MATRIX_KERNELS -xJf $P/matrix_tma.tar.xz
  echo "tma kernels: $(grep -l ' tma$' $FLASHJIT_MATRIX_KERNELS/*.info | wc -l)" \
    "of $(ls $FLASHJIT_MATRIX_KERNELS/*.info | wc -l)"
  local t="generated kernels match the float64 reference on the matrix"
  local summary=() one=${HOPPER_SANITIZE:-causal_br_d128_bf16}
  local steps=${HOPPER_STEPS:-gpu:d128_ gpu:d64_ bench memcheck racecheck gpu:d256_ gpu:d192_}
  for step in $steps; do
    local T0=$SECONDS rc
    case $step in
    gpu:*)
      FLASHJIT_MATRIX_ONLY=${step#gpu:} timeout ${HOPPER_GPU_S:-60} \
        "$P/bin/flashjit_gpu_tests" "$t" >"$out/${step/:/-}.log" 2>&1
      rc=$?
      tail -3 "$out/${step/:/-}.log"
      ;;
    memcheck | racecheck)
      FLASHJIT_MATRIX_ONLY=$one timeout ${HOPPER_SAN_S:-75} compute-sanitizer \
        --tool $step --error-exitcode 3 "$P/bin/flashjit_gpu_tests" "$t" \
        >"$out/${step/:/-}.log" 2>&1
      rc=$?
      tail -4 "$out/${step/:/-}.log"
      ;;
    bench)
      timeout ${HOPPER_BENCH_S:-110} python3 $P/run_bench.py --kernels $P/bench \
        --out "$out" --d 64,128 --n 4096,16384 --variants dense,causal \
        --labels ${HOPPER_LABELS:-default,cpasync} --peers 0 --flex 0 --rep 50 \
        >"$out/bench.log" 2>&1
      rc=$?
      tail -14 "$out/bench.log"
      ;;
    esac
    summary+=("$step rc=$rc $((SECONDS - T0))s")
    echo "== $step rc=$rc $((SECONDS - T0))s"
  done
  printf '%s\n' "${summary[@]}"
}

"$cmd"
