#!/usr/bin/env bash
# The quickstart and the `flashjit` CLI on the lent GPU machine, which has CUDA
# but no LLVM, MLIR or fmt: both are built HERE with LLVM and MLIR linked
# statically (preset `static`, FLASHJIT_STATIC_LLVM=ON), stripped and carried
# there xz-compressed (about 19 MB for both).
#
#   here:   scripts/gpu-static.sh pack     # build + check + fill .device/static/
#   device: run(command="bash scripts/gpu-static.sh run",
#               carry=[".device/static"], timeout_s=600)
#
# `pack` refuses binaries that still load libLLVM/libMLIR/libfmt/libstdc++,
# and runs the stripped binaries here with a minimal environment first (the
# quickstart's CPU path, `flashjit compile --target sm_90a`).
# `run` unpacks into /tmp, runs the quickstart at N = 4096 (CPU and GPU),
# `flashjit compile` for sm_90a, sm_80 and the CPU, and `flashjit inspect
# --stage ptx|resources|sass`; logs, PTX and SASS go to $OUT, a summary table
# is printed last. Exit status: 0 iff every step passed.
set -uo pipefail
cd "$(dirname "$0")/.."
PACK=${FLASHJIT_STATIC_PACK:-.device/static}
ARCHIVE=flashjit-static.tar.xz

# The example spec of the README's `flashjit compile` line.
SWA=(--mask 'q_idx >= kv_idx && q_idx - kv_idx < 1024'
     --score '30.0 * tanh(score / 30.0)' --head-dim 128 --dtype bf16)

pack() {
  set -e
  [[ -f scripts/env.sh ]] && source scripts/env.sh
  local build=build/static cuda=${CUDA_HOME:-/usr/local/cuda}
  cmake --preset static >/dev/null
  local t0=$SECONDS
  cmake --build --preset static
  echo "pack: build $((SECONDS - t0)) s"
  local bins=("$build/examples/quickstart" "$build/tools/flashjit/flashjit")
  if ldd "${bins[@]}" | grep -E 'libLLVM|libMLIR|libfmt|libstdc\+\+|libgcc_s'; then
    echo "pack: the binaries still load the libraries above" >&2
    exit 1
  fi

  local stage
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' RETURN
  mkdir -p "$stage/bin" "$stage/lib" "$stage/nvvm/libdevice" "$stage/check"
  for b in "${bins[@]}"; do
    strip -o "$stage/bin/$(basename "$b")" "$b"
  done
  # Shared libraries besides glibc and CUDA's own (libz, libzstd): small, and
  # used only where the machine lacks them (lib/ comes last on the path).
  local skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libnvrtc|libnvJitLink|libcuda\.so)'
  ldd "${bins[@]}" | awk '/=> \//{print $1, $3}' | sort -u |
    while read -r name path; do
      [[ $name =~ $skip ]] || cp -L "$path" "$stage/lib/$name"
    done
  # MLIR's NVVM target links libdevice from $CUDA_HOME (Debian's MLIR has no
  # built-in toolkit path): carried in case the machine's toolkit lacks it.
  cp "$cuda/nvvm/libdevice/libdevice.10.bc" "$stage/nvvm/libdevice/"

  # The stripped binaries, here, with nothing but the carried libraries and
  # the toolkit: the CPU path and PTX for sm_90a.
  local env=(env -i PATH=/usr/bin:/bin HOME="$stage/check"
             LD_LIBRARY_PATH="$stage/lib:$cuda/lib64" CUDA_HOME="$cuda"
             FLASHJIT_CACHE_DIR="$stage/check/cache")
  (cd "$stage/check" && "${env[@]}" "$stage/bin/quickstart" --small) |
    grep -E '^(cpu|gpu|OK|FAILED)'
  "${env[@]}" "$stage/bin/flashjit" compile "${SWA[@]}" --target sm_90a |
    grep -E '^(target|kernel|  total)'

  mkdir -p "$PACK"
  rm -rf "$stage/check"
  echo "pack: compressing (xz, one 128 MiB window over both binaries)"
  tar -C "$stage" -cf - bin lib nvvm |
    xz -T1 --lzma2=preset=6,dict=128MiB >"$PACK/$ARCHIVE.tmp"
  mv "$PACK/$ARCHIVE.tmp" "$PACK/$ARCHIVE"
  printf '%-12s %12s %12s\n' binary raw stripped
  for b in "${bins[@]}"; do
    printf '%-12s %12s %12s\n' "$(basename "$b")" "$(stat -c %s "$b")" \
      "$(stat -c %s "$stage/bin/$(basename "$b")")"
  done
  ls -l "$PACK/$ARCHIVE"
  cat <<MSG
pack: done. On the GPU machine (device tool):
  run(command="bash scripts/gpu-static.sh run", carry=["$PACK"], timeout_s=600)
MSG
}

run() {
  local out=${OUT:-/tmp/gpu-static-out} dir=/tmp/flashjit-static
  [[ -f $PACK/$ARCHIVE ]] || {
    echo "no $PACK/$ARCHIVE: run 'scripts/gpu-static.sh pack' first"
    exit 2
  }
  rm -rf "$dir"
  mkdir -p "$dir" "$out"
  tar -C "$dir" -xJf "$PACK/$ARCHIVE"
  local cuda=${CUDA_HOME:-/usr/local/cuda}
  [[ -d $cuda ]] || cuda=$(dirname "$(dirname "$(command -v ptxas)")")
  # nvJitLink and NVRTC from the machine's toolkit; the carried libz/libzstd
  # only where the system has none.
  export LD_LIBRARY_PATH="$cuda/lib64:$cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}:$dir/lib"
  export PATH="$cuda/bin:$PATH" # ptxas, cuobjdump
  if [[ -f $cuda/nvvm/libdevice/libdevice.10.bc ]]; then
    export CUDA_HOME=$cuda
  else
    echo "gpu-static: no libdevice under $cuda: using the carried one"
    export CUDA_HOME=$dir
  fi
  [[ -x /usr/local/cuda/bin/ptxas ]] || export FLASHJIT_PTXAS=$(command -v ptxas)
  [[ -f /usr/local/cuda/include/cuda_fp16.h ]] ||
    export FLASHJIT_CUDA_INCLUDE=$cuda/include
  export FLASHJIT_CACHE_DIR=$out/cache
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  if ldd "$dir/bin/quickstart" "$dir/bin/flashjit" | grep "not found"; then
    echo "gpu-static: missing libraries (above)"
  fi

  declare -A status
  local order=()
  # step NAME [--stdout FILE] COMMAND...: runs in $out, logs to $out/NAME.log
  # (stdout to FILE instead when given), records the exit status and time.
  step() {
    local name=$1 file=
    shift
    if [[ $1 == --stdout ]]; then
      file=$2
      shift 2
    fi
    echo "=== $name: $*"
    order+=("$name")
    local t0=$SECONDS rc
    if [[ -n $file ]]; then
      (cd "$out" && "$@") >"$out/$file" 2>"$out/$name.log"
      rc=$?
      head -n 5 "$out/$file"
      tail -n 20 "$out/$name.log"
    else
      (cd "$out" && "$@") >"$out/$name.log" 2>&1
      rc=$?
      tail -n 30 "$out/$name.log"
    fi
    status[$name]="rc=$rc $((SECONDS - t0))s"
  }
  local fj=$dir/bin/flashjit
  step quickstart "$dir/bin/quickstart"
  step compile_sm90a "$fj" compile "${SWA[@]}" --target sm_90a --out "$out/swa_sm90a"
  step ptx --stdout swa.sm_90a.ptx "$fj" inspect --stage ptx "${SWA[@]}" --target sm_90a
  step resources "$fj" inspect --stage resources "${SWA[@]}" --target sm_90a
  step sass --stdout swa.sm_90a.sass "$fj" inspect --stage sass "${SWA[@]}" --target sm_90a
  step compile_sm80 "$fj" compile --spec 'attention(causal=top_left, head_dim=64)' --target sm_80
  step compile_cpu "$fj" compile --spec 'attention(causal=top_left, head_dim=64)' --target cpu

  echo
  echo "=== gpu-static summary (logs in $out)"
  grep -hE '^(gpu|cpu):' "$out/quickstart.log" || true
  local failed=0
  printf '%-14s %s\n' step status
  for s in "${order[@]}"; do
    printf '%-14s %s\n' "$s" "${status[$s]}"
    [[ ${status[$s]} == rc=0\ * ]] || failed=1
  done
  return $failed
}

case ${1:-pack} in
pack) pack ;;
run) run ;;
*) echo "usage: $0 [pack|run]" >&2; exit 2 ;;
esac
