#!/usr/bin/env bash
# The decode kernels on the GPU machine, in one device call:
#   here:   scripts/decode-device.sh pack DEST   # DEST: e.g. /work/main/.device/decode
#   there:  bash DEST/decode-device.sh run DEST  # writes logs under $OUT
# run: the [gpu][decode] tests, compute-sanitizer memcheck on one paged
# masked kernel, the [.decodebench] timings, and torch sdpa peers
# (bench/decode_peers.py) at the same shapes. DECODE_STEPS (run; default
# "tests memcheck bench peers") picks steps. DECODE_BASE_KERNELS (pack) names
# a directory of decode kernels made by an earlier build's
# gen_decode_kernels: they travel too and `bench` times them first, with
# the same test binary (before/after numbers of a kernel change).
# DECODE_BASE_BUILD (pack) names an earlier build directory (e.g. main's
# build/ci) whose kernel ABI differs: its gen_decode_kernels makes the base
# kernels, and its test binary and libflashjit*.so travel too, so `bench`
# times the base kernels with their own runtime. Step `split` (not in the
# default): ncu on [.decodesplit] (each decode launch timed, DRAM bytes,
# instructions, registers) with the new kernels, and with the base kernels
# when DECODE_SPLIT_BASE=1. Steps `memcheck_all` (every [decode] case under
# memcheck) and `racecheck` (dec_alibi_g4's float64 test, the merge and
# append cases and the back-to-back calls under racecheck) are not in the
# default either.
set -uo pipefail
cmd=${1:?usage: decode-device.sh pack|run DIR}
dir=${2:?usage: decode-device.sh pack|run DIR}
build=${FLASHJIT_BUILD_DIR:-build/ci}
case $cmd in
pack)
  set -e
  mkdir -p "$dir/bin" "$dir/lib" "$dir/kernels"
  "$build/tests/gpu/gen_decode_kernels" "$dir/kernels"
  rm -rf "$dir/kernels-base" "$dir/base"
  if [[ -n ${DECODE_BASE_KERNELS:-} ]]; then
    cp -r "$DECODE_BASE_KERNELS" "$dir/kernels-base"
  fi
  if [[ -n ${DECODE_BASE_BUILD:-} ]]; then
    base=$DECODE_BASE_BUILD
    mkdir -p "$dir/kernels-base" "$dir/base/bin" "$dir/base/lib"
    "$base/tests/gpu/gen_decode_kernels" "$dir/kernels-base"
    objcopy --strip-debug "$base/tests/gpu/flashjit_gpu_tests" \
      "$dir/base/bin/flashjit_gpu_tests"
    ldd "$base/tests/gpu/flashjit_gpu_tests" |
      awk '$1 ~ /^libflashjit/ && $3 ~ /^\//{print $1, $3}' |
      while read -r name path; do
        objcopy --strip-debug "$path" "$dir/base/lib/$name"
      done
  fi
  objcopy --strip-debug "$build/tests/gpu/flashjit_gpu_tests" \
    "$dir/bin/flashjit_gpu_tests"
  cp scripts/decode-device.sh bench/decode_peers.py "$dir/"
  skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libnvrtc|libnvJitLink|libcuda\.so)'
  ldd "$build/tests/gpu/flashjit_gpu_tests" | awk '/=> \//{print $1, $3}' |
    sort -u | while read -r name path; do
      [[ $name =~ $skip ]] && continue
      if (($(stat -L -c %s "$path") > 4000000)); then
        [[ -f $dir/lib/$name.xz ]] || xz -T2 -6 -c "$path" >"$dir/lib/$name.xz"
      else
        objcopy --strip-debug "$path" "$dir/lib/$name" 2>/dev/null ||
          cp -L "$path" "$dir/lib/$name"
      fi
    done
  du -sh "$dir"
  ;;
run)
  out=${OUT:-/tmp/decode-out}
  lib=/tmp/decode-lib
  mkdir -p "$out" "$lib/compat"
  for f in "$dir"/lib/*; do
    case $f in
    *.xz) xz -dc "$f" >"$lib/$(basename "${f%.xz}")" ;;
    *) cp "$f" "$lib/" ;;
    esac
  done
  mv -f "$lib"/libstdc++.so.6 "$lib"/libgcc_s.so.1 "$lib/compat/" 2>/dev/null
  export LD_LIBRARY_PATH="$lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  bin=$dir/bin/flashjit_gpu_tests
  if ! "$bin" --list-tests >/dev/null 2>&1; then
    export LD_LIBRARY_PATH="$lib/compat:$LD_LIBRARY_PATH"
  fi
  export FLASHJIT_DECODE_KERNELS=$dir/kernels
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  steps=" ${DECODE_STEPS:-tests memcheck bench peers} "
  if [[ $steps == *" tests "* ]]; then
    echo "=== tests"
    timeout 100 "$bin" "[decode]" -d yes 2>&1 | tee "$out/tests.log" | tail -60
  fi
  if [[ $steps == *" memcheck_all "* ]]; then
    echo "=== memcheck_all ([decode])"
    timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 \
      "$bin" "[decode]" 2>&1 | tee "$out/memcheck_all.log" | tail -8
  fi
  if [[ $steps == *" racecheck "* ]]; then
    echo "=== racecheck (dec_alibi_g4, [merge], [append])"
    FLASHJIT_MATRIX_ONLY=${DECODE_RACE_KERNEL:-dec_alibi_g4} timeout 120 \
      compute-sanitizer --tool racecheck --error-exitcode 3 "$bin" \
      "decode kernels match the float64 paged reference,[merge],[append]" \
      2>&1 | tee "$out/racecheck.log" | tail -8
  fi
  if [[ $steps == *" memcheck "* ]]; then
    # DECODE_MEMCHECK_TEST: another [decode] test case to run under it.
    t=${DECODE_MEMCHECK_TEST:-decode kernels match the float64 paged reference}
    echo "=== memcheck (dec_window_g4: $t)"
    FLASHJIT_MATRIX_ONLY=dec_window_g4 timeout 60 compute-sanitizer \
      --tool memcheck "$bin" "$t" 2>&1 | tee "$out/memcheck.log" | tail -8
  fi
  if [[ $steps == *" bench "* ]]; then
    if [[ -d $dir/kernels-base ]]; then
      echo "=== bench (base kernels)"
      bbin=$bin blib=
      if [[ -x $dir/base/bin/flashjit_gpu_tests ]]; then
        bbin=$dir/base/bin/flashjit_gpu_tests blib=$dir/base/lib:
      fi
      LD_LIBRARY_PATH=$blib$LD_LIBRARY_PATH \
        FLASHJIT_DECODE_KERNELS=$dir/kernels-base timeout 80 "$bbin" \
        "[.decodebench]" 2>&1 | tee "$out/bench-base.log" |
        grep -E "DECODE|FAIL|error" | head -60
    fi
    echo "=== bench"
    timeout 80 "$bin" "[.decodebench]" 2>&1 | tee "$out/bench.log" |
      grep -E "DECODE|FAIL|error" | head -60
  fi
  if [[ $steps == *" split "* ]]; then
    ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    kinds=new
    [[ ${DECODE_SPLIT_BASE:-0} == 1 && -d $dir/kernels-base ]] && kinds="base new"
    for kind in $kinds; do
      kd=$dir/kernels
      [[ $kind == base ]] && kd=$dir/kernels-base
      echo "=== split ($kind kernels, ncu)"
      FLASHJIT_DECODE_KERNELS=$kd timeout 120 "$ncu" --clock-control none \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,sm__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread \
        --kernel-name regex:'^dec_' "$bin" "[.decodesplit]" >"$out/split-$kind.log" 2>&1
      grep -E "^  dec_|gpu__time|inst_executed|DECODESPLIT" "$out/split-$kind.log" | head -90
    done
  fi
  if [[ $steps == *" peers "* ]]; then
    echo "=== peers"
    timeout 40 python3 "$dir/decode_peers.py" 2>&1 | tee "$out/peers.log" | tail -12
  fi
  ;;
esac
