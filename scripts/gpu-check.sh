#!/usr/bin/env bash
# GPU check of the runtime and the NVRTC reference on the lent GPU machine.
#
# The GPU machine has CUDA 13 (nvcc, NVRTC, nvJitLink, ptxas,
# compute-sanitizer) but no LLVM, fmt or Catch2, so the tests are built HERE
# and carried there with every shared library they need that is not glibc or
# the CUDA toolkit (libLLVM.so.22.1 and the other big ones xz-compressed).
#
#   here:   scripts/gpu-check.sh pack          # build + fill .device/gpu-check/
#   device: run(command="bash scripts/gpu-check.sh run",
#               carry=[".device/gpu-check"], timeout_s=600)
#
# `run` unpacks the libraries into /tmp, runs the runtime unit tests (sanity
# of the carried build), every [gpu] test (in GPU_CHECK_GPU_SHARDS processes
# at once, balanced by tests/gpu/gpu-durations.tsv: see gpuShards), the NVRTC reference at N = 4k and
# 32k (timing), tests/gpu/torch_compare.py (bundled kernels through the C
# API runtime library from Python vs torch sdpa/flex and a float64 oracle),
# and compute-sanitizer memcheck/racecheck on small tests; logs go to $OUT, a
# summary table is printed last. GPU_CHECK_STEPS (default: all) picks steps
# by name: unit gpu large torch memcheck racecheck memcheck_generated
# racecheck_generated memcheck_ws synccheck_generated (the warp-specialised
# d128 kernels) memcheck_sparse racecheck_sparse, and sparse (only the
# [sparse] tests, which gpu includes), bwd (only the [backward] tests, which
# gpu includes), ring (only the [ring] tests: the GPU ring forward and
# backward over one NCCL rank and 2 / 4 ranks as threads, the NCCL
# transport, the overlapped shifts, and on machines with several GPUs the
# [multigpu] NCCL rings; in gpu; memcheck_ring runs them under memcheck,
# not in the default), ringbench (ms per ring forward, serial / overlapped
# shifts, one GPU; not in the default), ringmultibench (N = 128k-1M on
# every GPU against one, fraction of ideal; not in the default), bwdbench (forward and backward TF/s, and the backward's
# deterministic mode against its default at D = 128, N = 4k and 16k,
# BWDMODE lines; not in the default; GPU_CHECK_BWDBENCH_FILTER, a Catch2
# test spec, picks its cases: '[bwdmodes]' the BWDMODE timing alone), masked (the [masked] tests: NaN and
# Inf at masked keys; in gpu) and maskbench (what isolating masked keys
# costs: the [.maskbench] MASKBENCH lines, kernels with and without it,
# forward and backward; pack with GPU_CHECK_MASKBENCH=1; not in the
# default),
# memcheck_bwd and racecheck_bwd (a few backward kernels under the
# sanitizers, not in the default; GPU_CHECK_BWD_RACE_KERNEL: the matrix ids
# racecheck_bwd takes, a substring, default bwd_doc_id_d64), memcheck_bwd_sparse and
# racecheck_bwd_sparse (the block-sparse backward under them, likewise),
# memcheck_decode (every [decode] test: all decode kernels against the
# float64 paged reference, contiguous/empty splits, the concurrency case,
# sinks, GPU merge_states and append, the C API decode) and
# racecheck_decode (one decode kernel's float64 test, dec_alibi_g4 unless
# GPU_CHECK_DECODE_RACE_KERNEL names another, plus merge and append), not
# in the default, memcheck_padded (the [padded] tests: head dims that are
# not multiples of 16, issue 16; in the default) and racecheck_padded (its
# varlen case at head dim 59, plain 2-byte loads into shared memory; not in
# the default), racecheck_masked and synccheck_masked (the head-dim-64
# document forwards that check their result, second pass included, and
# their in-tile twins: the [masked] bit-for-bit case; not in the default).
# Exit status: 0 iff every selected test step passed.
#
# Decode timing (issue 17), not in the default: decodebench (the
# [.decodebench] DECODE rows: flashjit's decode kernels, GQA 32/8 and MQA
# 32/1), decodepeers (bench/decode_peers.py: FA2 and cuDNN through sdpa,
# compiled FlexAttention, flash_attn_with_kvcache and FlashAttention-4
# where they import; needs only the tree and torch, so it runs in the same
# call as decodebench; GPU_CHECK_DECODE_PEERS_ARGS passes options, e.g.
# "--impls fa2,cudnn,flex") and decodesplit (ncu: the decode launch (its
# splits merged in the same kernel) timed, with the DRAM bytes it reads,
# DRAM throughput, instructions, active warps, grid and registers: dense
# page 64 / contiguous, softcap and ALiBi at B = 1, Nk = 128k, the
# sliding window at B = 8, Nk = 32k; the [.decodesplit] case) and
# decodesplitbench (the [.decodesplitbench] DECODESWEEP rows: the split
# count decodeNumSplits picks beside session 16's rule and forced counts,
# GQA 32/8 and MQA 32/1 at B = 1, 8, 64, with the serial merge kernel's
# time and the plain-launch time (`plain`: the merge kernel not launched
# as the split kernel's programmatic dependent; FLASHJIT_DECODE_PDL=0 turns
# that off everywhere) at the end of the rows where the merge kernel runs;
# ~20 s) and decodemergebench (the [.decodemergebench] DECODEMERGE rows:
# the merge kernel alone, parallel beside serial, 32-2048 rows x 4-244
# splits, and the parallel one launched programmatically; ~2 s).
#
# GPU_CHECK_MATRIX_MMA (pack; default: default) builds the kernel matrix
# with another MMA, e.g. wgmma.tma.ws. GPU_CHECK_BENCH_N, _D and _ARGS (run)
# pass N, D and more options (e.g. "--labels default,ws --flex 0") to
# bench/run_bench.py in the `peers` step.
#
# `bwdpeers` (not in the default; needs the python pack's libflashjit_c.so):
# the training path, forward + backward, of flashjit's Python package
# (autograd, JIT-compiled kernels) beside FA2, cuDNN, FlexAttention and
# FlashAttention-4 (when $HOME/fa4 holds ../shared/tools/fa4-pack.sh's
# site), each (variant, shape) checked against an fp32 reference first
# (bench/run_bwd_bench.py; exit 1 on a mismatch). GPU_CHECK_BWD_N (default
# 16384), _D (128), _VARIANTS (all: dense,causal,swa1024,softcap30,alibi,
# doc), _TIME_LIMIT (seconds after which no new row starts; 420) and _ARGS
# (more options, e.g. "--impls flashjit,flex --reps 5"). Outputs under
# $OUT/bwd (JSON, markdown, PNG). A short run (~1-2 min):
# GPU_CHECK_BWD_VARIANTS=dense,causal.
#
# GPU_CHECK_PACK_PYTHON=1 at `pack` also carries libflashjit_c.so (the C API
# with the compiler, so libMLIR too, xz-compressed); the `python` step then
# runs tests/python (flashjit package: torch CUDA tensors, autograd,
# torch.compile; GPU_CHECK_PYTEST_PATHS: other pytest paths or node ids)
# with it; without it that step says it was not packed.
# With the test binaries and kernels that exceeds one call's 64 MiB, so the
# Python check is its own call, right after a main `run` (the machine still
# warm: it reuses the libraries that run unpacked into /tmp/flashjit-lib;
# the python pack leaves out what the main pack, GPU_CHECK_BASE_PACK,
# carries):
#   here:   GPU_CHECK_PACK=python GPU_CHECK_PACK_DIR=.device/gpu-python \
#             scripts/gpu-check.sh pack
#   device: run(command="GPU_CHECK_PACK_DIR=.device/gpu-python
#               GPU_CHECK_STEPS='cli python peers' bash scripts/gpu-check.sh run",
#               carry=[".device/gpu-python"])
# (add bwdpeers to GPU_CHECK_STEPS for the forward + backward benchmark).
set -uo pipefail
cd "$(dirname "$0")/.."
PACK=${GPU_CHECK_PACK_DIR:-.device/gpu-check}
BUILD=${FLASHJIT_GPU_CHECK_BUILD:-build/runtime}

pack() {
  set -e
  [[ -f scripts/env.sh ]] && source scripts/env.sh
  # An existing build (FLASHJIT_GPU_CHECK_BUILD=build/ci, say) is used as
  # it is configured: reconfiguring it with another build type would
  # rebuild everything.
  [[ -f $BUILD/build.ninja ]] ||
    cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
  local only=${GPU_CHECK_PACK:-all}
  if [[ $only == python ]]; then
    # Only the C API with the compiler and what it loads (for
    # GPU_CHECK_STEPS=python): it does not fit beside the test binaries and
    # kernels in one call's 64 MiB.
    ninja -C "$BUILD" -j2 flashjit_c flashjit bench_kernels
    rm -rf "$PACK"
    mkdir -p "$PACK/lib" "$PACK/bin"
    # The forward benchmark's kernels (the `peers` step: bench/run_bench.py
    # beside FA2, cuDNN and FlexAttention).
    mkdir -p "$PACK/bench"
    "$BUILD/bench/bench_kernels" "$PACK/bench" >/dev/null
    objcopy --strip-debug "$BUILD/api/libflashjit_c.so" \
      "$PACK/lib/libflashjit_c.so"
    objcopy --strip-debug "$BUILD/tools/flashjit/flashjit" "$PACK/bin/flashjit"
    packLibs "$BUILD/api/libflashjit_c.so" "$BUILD/tools/flashjit/flashjit"
    # What the main pack carries is left out: the run right after a main
    # `run` on the still-warm machine (idle release 30 s) finds it in
    # /tmp/flashjit-lib.
    local base=${GPU_CHECK_BASE_PACK:-.device/gpu-check}
    if [[ -d $base/lib ]]; then
      for f in "$PACK"/lib/*; do
        [[ $(basename "$f") == libflashjit* ]] && continue
        [[ -e $base/lib/$(basename "$f") ]] && rm -f "$f"
      done
    fi
    du -sh "$PACK"
    return
  fi
  ninja -C "$BUILD" -j2 flashjit_gpu_tests flashjit_runtime_tests \
    gen_matrix_kernels gen_decode_kernels flashjit flashjit_c_runtime \
    $([[ ${GPU_CHECK_PACK_PYTHON:-0} == 1 ]] && echo flashjit_c)
  mkdir -p "$PACK/bin" "$PACK/lib"
  # The generated kernels travel as PTX (xz: 12 MB -> ~1 MB): the GPU machine
  # has no MLIR.
  local kdir
  kdir=$(mktemp -d)
  # GPU_CHECK_PACK=backward: only the backward and timing kernels, no torch
  # bundle (quick; for GPU_CHECK_STEPS=bwd bwdbench memcheck_bwd ...);
  # GPU_CHECK_PACK=python: see above.
  if [[ $only == backward ]]; then
    "$BUILD/tests/gpu/gen_matrix_kernels" "$kdir" sm_90a backward-only
  else
    # GPU_CHECK_MATRIX_MMA=wgmma.tma.ws (say): the matrix built with that
    # MMA (gen_matrix_kernels' third argument) instead of the default.
    "$BUILD/tests/gpu/gen_matrix_kernels" "$kdir" sm_90a \
      ${GPU_CHECK_MATRIX_MMA:-default}
    # The decode kernels' [gpu][decode] tests read <matrix dir>/decode.
    mkdir -p "$kdir/decode"
    "$BUILD/tests/gpu/gen_decode_kernels" "$kdir/decode" >/dev/null
  fi
  # GPU_CHECK_MASKBENCH=1: the [.maskbench] kernels too (step maskbench):
  # with masked-key isolation into the matrix, without it (the baseline)
  # into <matrix dir>/maskbench-base, with the vote in every partial tile
  # (session 15's forward placement, session 16's backward: dS' zeroed and
  # K voted on in every partial tile) into <matrix dir>/maskbench-old.
  # GPU_CHECK_MASKBENCH_BASE=mask-bench-sync makes the "base" the same
  # kernels with the wgmma backward's synchronous tile step at head dim 128
  # instead (the pipelined default's gain: "new" is the pipelined one).
  # GPU_CHECK_MASKBENCH_OLD=mask-bench-pub makes the "old" column the
  # warp-specialised forwards' published vote (sessions 18-23's default at
  # head dim 128; "new" is the result check).
  if [[ ${GPU_CHECK_MASKBENCH:-0} == 1 ]]; then
    "$BUILD/tests/gpu/gen_matrix_kernels" "$kdir" sm_90a mask-bench
    "$BUILD/tests/gpu/gen_matrix_kernels" "$kdir/maskbench-base" sm_90a \
      "${GPU_CHECK_MASKBENCH_BASE:-mask-bench-base}"
    "$BUILD/tests/gpu/gen_matrix_kernels" "$kdir/maskbench-old" sm_90a \
      "${GPU_CHECK_MASKBENCH_OLD:-mask-bench-old}"
  fi
  tar -C "$kdir" -cJf "$PACK/matrix_kernels.tar.xz" .
  rm -rf "$kdir" "$PACK/matrix_kernels"
  # The kernels tests/gpu/torch_compare.py loads through the C API.
  if [[ $only != backward ]]; then
    local bdir specs=()
    bdir=$(mktemp -d)
    while read -r s; do specs+=(--spec "$s"); done \
      < <(python3 tests/gpu/torch_compare.py --list-specs)
    "$BUILD/tools/flashjit/flashjit" bundle --out "$bdir/bundle" \
      --target sm_90a "${specs[@]}" >/dev/null
    tar -C "$bdir" -cJf "$PACK/torch_bundle.tar.xz" bundle
    rm -rf "$bdir"
  fi
  rm -f "$PACK"/bin/* "$PACK"/lib/*.so*[0-9] "$PACK"/lib/*.so
  local bins=("$BUILD/tests/gpu/flashjit_gpu_tests"
              "$BUILD/tests/unit/runtime/flashjit_runtime_tests")
  for b in "${bins[@]}"; do
    objcopy --strip-debug "$b" "$PACK/bin/$(basename "$b")"
  done
  bins+=("$BUILD/api/libflashjit_c_runtime.so")
  objcopy --strip-debug "$BUILD/api/libflashjit_c_runtime.so" \
    "$PACK/lib/libflashjit_c_runtime.so"
  if [[ ${GPU_CHECK_PACK_PYTHON:-0} == 1 ]]; then
    bins+=("$BUILD/api/libflashjit_c.so")
    objcopy --strip-debug "$BUILD/api/libflashjit_c.so" \
      "$PACK/lib/libflashjit_c.so"
  else
    rm -f "$PACK"/lib/libMLIR.so*.xz # only libflashjit_c needs it
  fi
  packLibs "${bins[@]}"
  du -sh "$PACK"
  cat <<MSG
pack: done. On the GPU machine (device tool):
  run(command="bash scripts/gpu-check.sh run", carry=["$PACK"], timeout_s=600)
MSG
}

# packLibs BINARY...: every shared library the binaries load into
# $PACK/lib, except glibc's and CUDA's own (the GPU machine's toolkit and
# driver provide those); big ones xz-compressed.
packLibs() {
  local skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libnvrtc|libnvJitLink|libcuda\.so)'
  ldd "$@" | awk '/=> \//{print $1, $3}' | sort -u |
    while read -r name path; do
      [[ $name =~ $skip ]] && continue
      local tmp="$PACK/lib/.$name.tmp"
      objcopy --strip-debug "$path" "$tmp" 2>/dev/null || cp -L "$path" "$tmp"
      if (($(stat -c %s "$tmp") > 1500000)); then
        # Big libraries travel xz-compressed (the carry limit is 64 MiB with
        # the tree); recompress only when changed.
        rm -f "$PACK/lib/$name"
        if [[ ! -f $PACK/lib/$name.xz || $path -nt $PACK/lib/$name.xz ]]; then
          echo "pack: compressing $name"
          xz -T2 -6 -c "$tmp" >"$PACK/lib/$name.xz.tmp"
          mv "$PACK/lib/$name.xz.tmp" "$PACK/lib/$name.xz"
        fi
        rm -f "$tmp"
      else
        rm -f "$PACK/lib/$name.xz"
        mv "$tmp" "$PACK/lib/$name"
      fi
    done
}

# gpuShards BINARY SHARDS DIR: every [gpu] test case of BINARY, split by
# scripts/gpu-shards.py over SHARDS processes run at once (balanced by the
# seconds in tests/gpu/gpu-durations.tsv; the float64 matrix case in three
# parts through FLASHJIT_MATRIX_PART), each cut at GPU_CHECK_SHARD_TIMEOUT
# seconds (default 540). Prints every shard's log, then one line per shard;
# fails if any shard failed or no case ran.
gpuShards() {
  local bin=$1 n=$2 dir=$3 k
  mkdir -p "$dir"
  "$bin" --list-test-names-only | grep . >"$dir/names.txt"
  python3 scripts/gpu-shards.py "$dir/names.txt" tests/gpu/gpu-durations.tsv \
    "$n" "$dir/shard" \
    --split "generated kernels match the float64 reference on the matrix=3" ||
    return 2
  local pids=() t0=$SECONDS
  for ((k = 0; k < n; k++)); do
    (
      e=$(sed -n 's/^#env //p' "$dir/shard$k.txt")
      [[ -n $e ]] && export "${e?}"
      exec timeout "${GPU_CHECK_SHARD_TIMEOUT:-540}" "$bin" \
        -f "$dir/shard$k.txt" --durations yes
    ) >"$dir/shard$k.log" 2>&1 &
    pids+=($!)
  done
  local rc=0 rcs=()
  for k in "${!pids[@]}"; do
    wait "${pids[$k]}"
    rcs[k]=$?
    ((rcs[k] == 0)) || rc=1
  done
  for ((k = 0; k < n; k++)); do
    echo "--- gpu shard $k"
    cat "$dir/shard$k.log"
  done
  echo "=== gpu shards ($((SECONDS - t0)) s wall):"
  for ((k = 0; k < n; k++)); do
    # Cases finished (--durations lines) of the cases listed, so a shard
    # cut short by GPU_CHECK_SHARD_TIMEOUT says how far it got.
    echo "shard $k rc=${rcs[k]}: $(grep -cE '^[0-9.]+ s: ' "$dir/shard$k.log")/$(grep -vc '^#' "$dir/shard$k.txt") cases $(grep -E '^(All tests passed|test cases:)' "$dir/shard$k.log" | tail -1)"
  done
  grep -q "FAILED" "$dir"/shard*.log && rc=1
  return $rc
}

run() {
  local out=${OUT:-/tmp/gpu-check-out} lib=/tmp/flashjit-lib
  mkdir -p "$out" "$lib"
  [[ -d $PACK/lib ]] || { echo "no $PACK: run 'scripts/gpu-check.sh pack' first"; exit 2; }
  for f in "$PACK"/lib/*; do
    case $f in
    *.xz) xz -dc "$f" >"$lib/$(basename "${f%.xz}")" ;;
    *) cp "$f" "$lib/" ;;
    esac
  done
  # libstdc++/libgcc_s from here are used only if the machine's own are too
  # old for the carried binaries (compute-sanitizer etc. keep the system's).
  mkdir -p "$lib/compat"
  mv -f "$lib"/libstdc++.so.6 "$lib"/libgcc_s.so.1 "$lib/compat/" 2>/dev/null
  export LD_LIBRARY_PATH="$lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
  if [[ -x $PACK/bin/flashjit_gpu_tests ]] &&
    ! "$PACK/bin/flashjit_gpu_tests" --list-tests >/dev/null 2>&1; then
    echo "gpu-check: using the carried libstdc++/libgcc_s"
    export LD_LIBRARY_PATH="$lib/compat:$LD_LIBRARY_PATH"
  elif [[ ! -x $PACK/bin/flashjit_gpu_tests ]] &&
    ! python3 -c "import ctypes; ctypes.CDLL('$lib/libflashjit_c.so')" 2>/dev/null; then
    echo "gpu-check: using the carried libstdc++/libgcc_s"
    export LD_LIBRARY_PATH="$lib/compat:$LD_LIBRARY_PATH"
  fi
  # NVRTC needs cuda_fp16.h; the tests run ptxas. Defaults are the build
  # machine's /usr/local/cuda paths; find them elsewhere if absent.
  if [[ ! -f /usr/local/cuda/include/cuda_fp16.h ]]; then
    local h
    h=$(find / -name cuda_fp16.h -path '*include*' 2>/dev/null | head -1)
    [[ -n $h ]] && export FLASHJIT_CUDA_INCLUDE=$(dirname "$h")
  fi
  [[ -x /usr/local/cuda/bin/ptxas ]] || export FLASHJIT_PTXAS=$(command -v ptxas)
  # The [nccl] tests load libnccl.so.2: the GPU machine has PyTorch's copy
  # (the nvidia-nccl wheel), not one on the loader's path.
  if [[ -z ${FLASHJIT_NCCL_LIBRARY:-} ]] && ! ldconfig -p | grep -q libnccl.so.2; then
    local nccl
    nccl=$(python3 -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
    [[ -f $nccl ]] && export FLASHJIT_NCCL_LIBRARY=$nccl && echo "gpu-check: FLASHJIT_NCCL_LIBRARY=$nccl"
  fi
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  if ldd "$PACK"/bin/* "$lib"/libflashjit_c*.so 2>/dev/null | grep "not found"; then
    echo "gpu-check: missing libraries (above); looking for the toolkit's:"
    find / -name 'libnvrtc.so*' -o -name 'libnvJitLink.so*' 2>/dev/null | head
  fi
  declare -A status
  step() { # step NAME COMMAND...: runs, logs to $out/NAME.log, records status
    local name=$1
    shift
    echo "=== $name: $*"
    local t0=$SECONDS
    # Line-buffered (stdbuf) so a step cut short by a timeout keeps the
    # lines it printed (Catch2 buffers a pipe's output to the end).
    local lb=()
    # (not for a shell function such as gpuShards: stdbuf runs programs)
    command -v stdbuf >/dev/null && ! declare -F "$1" >/dev/null &&
      lb=(stdbuf -oL -eL)
    "${lb[@]}" "$@" 2>&1 | tee "$out/$name.log" | tail -n 40
    local rc=${PIPESTATUS[0]}
    status[$name]="rc=$rc $((SECONDS - t0))s"
  }
  local bin=$PACK/bin
  local steps=" ${GPU_CHECK_STEPS:-unit gpu large torch python memcheck racecheck memcheck_generated racecheck_generated memcheck_ws synccheck_generated memcheck_sparse racecheck_sparse memcheck_padded} "
  want() { [[ $steps == *" $1 "* ]]; }
  export FLASHJIT_MATRIX_KERNELS=/tmp/flashjit-matrix-kernels
  mkdir -p "$FLASHJIT_MATRIX_KERNELS"
  [[ -f $PACK/matrix_kernels.tar.xz ]] &&
    tar -C "$FLASHJIT_MATRIX_KERNELS" -xJf "$PACK/matrix_kernels.tar.xz"
  want unit && step unit "$bin/flashjit_runtime_tests"
  # GPU_CHECK_GPU_FILTER (run): a Catch2 test spec for the gpu step, e.g.
  # "[ring],[padded],[sink]" (default: every [gpu] test, in
  # GPU_CHECK_GPU_SHARDS processes at once, default half the cores up to 8;
  # 1 = one process as before; a filter runs in one process).
  local shards=${GPU_CHECK_GPU_SHARDS:-$(($(nproc) / 2 > 8 ? 8 : $(nproc) / 2))}
  if want gpu && [[ -z ${GPU_CHECK_GPU_FILTER:-} ]] && ((shards > 1)); then
    step gpu gpuShards "$bin/flashjit_gpu_tests" "$shards" "$out/gpu-shards"
  else
    want gpu && step gpu "$bin/flashjit_gpu_tests" ${GPU_CHECK_GPU_FILTER:+"$GPU_CHECK_GPU_FILTER"} --durations yes
  fi
  want sparse && step sparse "$bin/flashjit_gpu_tests" "[sparse]" --durations yes
  want bwd && step bwd "$bin/flashjit_gpu_tests" "[backward]" --durations yes
  want ring && step ring "$bin/flashjit_gpu_tests" "[ring]" --durations yes
  want bwdbench && step bwdbench "$bin/flashjit_gpu_tests" "${GPU_CHECK_BWDBENCH_FILTER:-[bwdbench]}"
  # Masked keys (issue 21 section 3): the [masked] tests, and the cost of
  # the isolation (pack with GPU_CHECK_MASKBENCH=1): MASKBENCH lines, the
  # kernels without it (maskbench-base) against those with it, the old vote
  # placement (maskbench-old) and the new, fwd and bwd.
  want masked && step masked "$bin/flashjit_gpu_tests" "[masked]"
  want maskbench &&
    FLASHJIT_MASKBENCH_BASE=$FLASHJIT_MATRIX_KERNELS/maskbench-base \
      FLASHJIT_MASKBENCH_OLD=$FLASHJIT_MATRIX_KERNELS/maskbench-old \
      step maskbench "$bin/flashjit_gpu_tests" "[maskbench]"
  # Timings (hidden cases): forward with / without an attention sink (issue
  # 22) and split-KV decode over paged caches (issue 17).
  want sinkbench && step sinkbench "$bin/flashjit_gpu_tests" "[sinkbench]"
  want decodebench && step decodebench "$bin/flashjit_gpu_tests" "[decodebench]"
  want decodesplitbench &&
    step decodesplitbench "$bin/flashjit_gpu_tests" "[decodesplitbench]"
  want decodemergebench &&
    step decodemergebench "$bin/flashjit_gpu_tests" "[decodemergebench]"
  # Ring attention (issue 20): serial vs overlapped shifts on one GPU
  # ([.ringbench]), and on several GPUs the throughput against one GPU
  # ([.ringmultibench]; skipped below 2 GPUs).
  want ringbench && step ringbench "$bin/flashjit_gpu_tests" "[ringbench]"
  want ringmultibench &&
    step ringmultibench "$bin/flashjit_gpu_tests" "[ringmultibench]"
  if want decodesplit; then
    local ncu
    ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    if [[ -x $ncu ]]; then
      step decodesplit "$ncu" --clock-control none \
        --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__registers_per_thread \
        --kernel-name regex:'^dec_' "$bin/flashjit_gpu_tests" "[decodesplit]"
    else
      echo "=== decodesplit: skipped (no ncu)"
    fi
  fi
  # Decode peers beside decodebench (torch only; FA4 where
  # ../shared/tools/fa4-pack.sh's site was unpacked into $HOME/fa4).
  if want decodepeers; then
    local dp=
    [[ -d $HOME/fa4/fa4site ]] &&
      dp="$HOME/fa4/fa4site:$HOME/fa4/fa4site/nvidia_cutlass_dsl/dsl_packages"
    # shellcheck disable=SC2086
    PYTHONPATH=$dp step decodepeers python3 bench/decode_peers.py \
      ${GPU_CHECK_DECODE_PEERS_ARGS:-}
  fi
  if command -v compute-sanitizer >/dev/null && want memcheck_ring; then
    step memcheck_ring compute-sanitizer --tool memcheck --error-exitcode 3 \
      "$bin/flashjit_gpu_tests" "[ring]"
  fi
  if command -v compute-sanitizer >/dev/null && want memcheck_bwd; then
    FLASHJIT_MATRIX_ONLY=bwd_causal_br step memcheck_bwd compute-sanitizer \
      --tool memcheck --error-exitcode 3 "$bin/flashjit_gpu_tests" \
      "generated backward kernels match the float64 reference backward"
  fi
  if command -v compute-sanitizer >/dev/null && want racecheck_bwd; then
    FLASHJIT_MATRIX_ONLY=${GPU_CHECK_BWD_RACE_KERNEL:-bwd_doc_id_d64} \
      step racecheck_bwd compute-sanitizer \
      --tool racecheck --error-exitcode 3 "$bin/flashjit_gpu_tests" \
      "generated backward kernels match the float64 reference backward"
  fi
  if command -v compute-sanitizer >/dev/null && want memcheck_bwd_sparse; then
    step memcheck_bwd_sparse compute-sanitizer --tool memcheck \
      --error-exitcode 3 "$bin/flashjit_gpu_tests" "[block-sparse]"
  fi
  if command -v compute-sanitizer >/dev/null && want racecheck_bwd_sparse; then
    step racecheck_bwd_sparse compute-sanitizer --tool racecheck \
      --error-exitcode 3 "$bin/flashjit_gpu_tests" \
      "varlen block-sparse backward kernels match the float64 varlen*"
  fi
  # The head-dim-128 block-sparse kernels' synchronous step with the
  # listed-tile prefetch (the varlen case above is head dim 64, pipelined).
  if command -v compute-sanitizer >/dev/null && want racecheck_bwd_sparse; then
    FLASHJIT_MATRIX_ONLY=bwdbs_causal_br_d128 step racecheck_bwd_sparse128 \
      compute-sanitizer --tool racecheck --error-exitcode 3 \
      "$bin/flashjit_gpu_tests" \
      "block-sparse backward kernels match the float64 reference backward*"
  fi
  # Decode under the sanitizers: every [decode] case under memcheck; one
  # kernel's float64 test plus the merge and append kernels under racecheck
  # (tags, not names: "GPU merge_states matches ... (2-way, n-way, sink)"
  # holds commas, which Catch2 reads as "or").
  if command -v compute-sanitizer >/dev/null && want memcheck_decode; then
    step memcheck_decode compute-sanitizer --tool memcheck \
      --error-exitcode 3 "$bin/flashjit_gpu_tests" "[decode]"
  fi
  if command -v compute-sanitizer >/dev/null && want racecheck_decode; then
    FLASHJIT_MATRIX_ONLY=${GPU_CHECK_DECODE_RACE_KERNEL:-dec_alibi_g4} \
      step racecheck_decode compute-sanitizer --tool racecheck \
      --error-exitcode 3 "$bin/flashjit_gpu_tests" \
      "decode kernels match the float64 paged reference,[merge],[append]"
  fi
  want large && step large "$bin/flashjit_gpu_tests" "[large]"
  if want torch; then
    tar -C /tmp -xJf "$PACK/torch_bundle.tar.xz"
    step torch python3 tests/gpu/torch_compare.py \
      --lib "$lib/libflashjit_c_runtime.so" --bundle /tmp/bundle \
      --json "$out/torch_compare.json"
  fi
  # `flashjit run --device gpu` (the CLI compiles there: the python pack
  # carries it): dense, buffers, varlen, block-sparse, a sink, paged decode
  # (--kernel decode), and the GPU backward and decode through the cache.
  if want cli && [[ -x $PACK/bin/flashjit ]]; then
    cliRuns() {
      local - f="$PACK/bin/flashjit" c=--cache-dir=/tmp/flashjit-cli-cache rc=0
      set -f # the specs hold [ ] and *
      local docs=$(python3 -c "print(','.join(str(i // 700) for i in range(3000)))")
      for args in \
        "--causal bottom_right --head-dim 128 --heads-q 16 --heads-kv 4 --batch 2 --seqlen-q 4096 --dtype bf16" \
        "--seqlens-q 1000,0,37,4096,513 --seqlens-k 900,12,0,4096,600 --causal bottom_right --head-dim 64 --heads-q 8 --heads-kv 2 --dtype fp16" \
        "--block-sparse --causal top_left --head-dim 128 --heads-q 4 --seqlen-q 3000 --dtype bf16" \
        "--seqlens-q 1000,0,37,2000 --block-sparse --spec attention(head_dim=64,heads_q=4,dtype=bf16,mask=kv_idx<=q_idx&&buffer<i32>(w)[batch]>q_idx-kv_idx) --buffer w=100,3,20,5000" \
        "--spec attention(head_dim=64,heads_q=2,dtype=bf16,mask=buffer<i32>(doc)[q_idx]==buffer<i32>(doc)[kv_idx],score=score-buffer<f32>(slopes)[head]*cast<f32>(abs(q_idx-kv_idx))) --seqlen-q 3000 --buffer slopes=0.5,0.25 --buffer doc=$docs" \
        "--sink --causal bottom_right --head-dim 64 --heads-q 8 --heads-kv 2 --seqlen-q 333 --seqlen-k 1000 --dtype bf16"; do
        echo "--- flashjit run --device gpu $args"
        # shellcheck disable=SC2086
        "$f" run $c --device gpu --reps 5 --check-rows 512 $args || rc=1
      done
      # Split-KV decode over paged caches (issue 17): both table layouts,
      # page sizes 16 and 64, GQA, q_len 1 and 4, a sink, forced splits;
      # checked against the float64 paged reference on sampled sequences.
      for args in \
        "--paged csr --page-size 16 --batch 8 --seqlen-k 4096 --seqlen-q 1 --causal bottom_right --head-dim 128 --heads-q 32 --heads-kv 8 --dtype bf16" \
        "--paged block-table --page-size 64 --batch 3 --seqlen-k 1000 --seqlen-q 4 --sink --causal bottom_right --head-dim 64 --heads-q 6 --heads-kv 2 --dtype fp16 --num-splits 5" \
        "--paged csr --page-size 16 --batch 2 --seqlen-k 3000 --seqlen-q 1 --spec attention(name=dsc,causal=bottom_right,head_dim=128,heads_q=16,heads_kv=2,dtype=bf16,score=softcap(param<f32>(cap))) --param cap=30"; do
        echo "--- flashjit run --kernel decode --device gpu $args"
        # shellcheck disable=SC2086
        "$f" run $c --kernel decode --device gpu --reps 5 --check-rows 512 $args || rc=1
      done
      echo "--- flashjit compile --kernel decode (GPU decode through the cache)"
      "$f" compile $c --kernel decode --target sm_90a --causal bottom_right --head-dim 128 --heads-q 32 --heads-kv 8 || rc=1
      "$f" compile $c --kernel decode --target sm_90a --causal bottom_right --head-dim 128 --heads-q 32 --heads-kv 8 | grep "cache   hit" || rc=1
      echo "--- flashjit compile --kernel bwd (GPU backward through the cache)"
      "$f" compile $c --kernel bwd --target sm_90a --causal top_left --head-dim 128 || rc=1
      "$f" compile $c --kernel bwd --target sm_90a --causal top_left --head-dim 128 | grep "cache   hit" || rc=1
      return $rc
    }
    step cli cliRuns
  fi
  # The forward beside FA2 (sdpa FLASH), cuDNN (sdpa CUDNN) and
  # FlexAttention in one process (bench/run_bench.py; N and D reduced).
  if want peers && [[ -f $PACK/bench/manifest.json ]]; then
    step peers python3 bench/run_bench.py --kernels "$PACK/bench" \
      --out "$out/bench" --n "${GPU_CHECK_BENCH_N:-4096,16384}" \
      --d "${GPU_CHECK_BENCH_D:-64,128}" ${GPU_CHECK_BENCH_ARGS:-}
  fi
  # The training path (forward + backward) beside the peers: flashjit's
  # Python package through autograd (bench/run_bwd_bench.py).
  if want bwdpeers; then
    if [[ -f $lib/libflashjit_c.so ]]; then
      local pp=python
      [[ -d $HOME/fa4/fa4site ]] &&
        pp="$pp:$HOME/fa4/fa4site:$HOME/fa4/fa4site/nvidia_cutlass_dsl/dsl_packages"
      # shellcheck disable=SC2086
      FLASHJIT_LIBRARY=$lib/libflashjit_c.so PYTHONPATH=$pp \
        FLASHJIT_CACHE_DIR=/tmp/flashjit-python-cache \
        step bwdpeers python3 bench/run_bwd_bench.py --out "$out/bwd" \
        --n "${GPU_CHECK_BWD_N:-16384}" --d "${GPU_CHECK_BWD_D:-128}" \
        --variants "${GPU_CHECK_BWD_VARIANTS:-all}" \
        --time-limit "${GPU_CHECK_BWD_TIME_LIMIT:-420}" \
        ${GPU_CHECK_BWD_ARGS:-}
    else
      echo "=== bwdpeers: skipped (pack with GPU_CHECK_PACK=python)"
    fi
  fi
  if want python; then
    if [[ -f $lib/libflashjit_c.so ]]; then
      # FA4 (when unpacked in $HOME/fa4) is one of test_decode_torch.py's
      # peers.
      local pyp=python
      [[ -d $HOME/fa4/fa4site ]] &&
        pyp="$pyp:$HOME/fa4/fa4site:$HOME/fa4/fa4site/nvidia_cutlass_dsl/dsl_packages"
      FLASHJIT_LIBRARY=$lib/libflashjit_c.so PYTHONPATH=$pyp \
        FLASHJIT_CACHE_DIR=/tmp/flashjit-python-cache \
        step python python3 -m pytest -q -p no:cacheprovider -rs \
        ${GPU_CHECK_PYTEST_PATHS:-tests/python}
    else
      echo "=== python: skipped (pack with GPU_CHECK_PACK_PYTHON=1)"
    fi
  fi
  # Catch2 ORs test specs joined by commas (separate arguments are joined
  # into one name, which matched nothing before 2026-12-01). The [runtime]
  # tests provoke driver errors on purpose (a missing symbol, bad PTX, a
  # cubin for another GPU): API errors are not reported here, memory errors
  # are.
  if command -v compute-sanitizer >/dev/null && want memcheck; then
    step memcheck compute-sanitizer --tool memcheck --error-exitcode 3 \
      --report-api-errors no \
      "$bin/flashjit_gpu_tests" \
      "NVRTC reference without LSE and with mixed dtypes,NVRTC reference reports an out-of-range buffer read,[runtime]"
  fi
  if command -v compute-sanitizer >/dev/null && want memcheck_sparse; then
    step memcheck_sparse compute-sanitizer --tool memcheck --error-exitcode 3 \
      "$bin/flashjit_gpu_tests" "[sparse]"
  fi
  if command -v compute-sanitizer >/dev/null && want racecheck_sparse; then
    step racecheck_sparse compute-sanitizer --tool racecheck --error-exitcode 3 \
      "$bin/flashjit_gpu_tests" "GPU block-mask builder equals the reference and runs match"
  fi
  if command -v compute-sanitizer >/dev/null && want memcheck_padded; then
    step memcheck_padded compute-sanitizer --tool memcheck --error-exitcode 3 \
      "$bin/flashjit_gpu_tests" "[padded]"
  fi
  if command -v compute-sanitizer >/dev/null && want racecheck_padded; then
    step racecheck_padded compute-sanitizer --tool racecheck --error-exitcode 3 \
      "$bin/flashjit_gpu_tests" "GPU varlen forward at a head dim that is not a multiple of 16"
  fi
  if command -v compute-sanitizer >/dev/null && want racecheck; then
    step racecheck compute-sanitizer --tool racecheck --error-exitcode 3 \
      "$bin/flashjit_gpu_tests" "NVRTC reference without LSE and with mixed dtypes"
  fi
  # Generated kernels: a few of the matrix under both tools.
  if command -v compute-sanitizer >/dev/null && want memcheck_generated; then
    FLASHJIT_MATRIX_ONLY=d64_bf16 step memcheck_generated compute-sanitizer \
      --tool memcheck --error-exitcode 3 "$bin/flashjit_gpu_tests" \
      "generated kernels match the float64 reference on the matrix"
  fi
  # The warp-specialised TMA default (sm_90a, head_dim 128: producer
  # warpgroup, mbarrier ring, setmaxnreg) under memcheck and synccheck
  # (issue 16, section 4); memcheck_generated's d64 kernels are not WS
  # unless packed with GPU_CHECK_MATRIX_MMA=wgmma.tma.ws, where
  # GPU_CHECK_WS_ONLY=d64_bf16_g3 (run) puts these two on head dim 64's.
  if command -v compute-sanitizer >/dev/null && want memcheck_ws; then
    FLASHJIT_MATRIX_ONLY=${GPU_CHECK_WS_ONLY:-d128_bf16_g3} step memcheck_ws compute-sanitizer \
      --tool memcheck --error-exitcode 3 "$bin/flashjit_gpu_tests" \
      "generated kernels match the float64 reference on the matrix"
  fi
  if command -v compute-sanitizer >/dev/null && want synccheck_generated; then
    FLASHJIT_MATRIX_ONLY=${GPU_CHECK_WS_ONLY:-d128_bf16_g3} step synccheck_generated \
      compute-sanitizer --tool synccheck --error-exitcode 3 \
      "$bin/flashjit_gpu_tests" \
      "generated kernels match the float64 reference on the matrix"
  fi
  if command -v compute-sanitizer >/dev/null && want racecheck_generated; then
    FLASHJIT_MATRIX_ONLY=_d128_bf16 step racecheck_generated compute-sanitizer \
      --tool racecheck --error-exitcode 3 "$bin/flashjit_gpu_tests" \
      "generated kernels match the float64 reference on the matrix"
  fi
  # The head-dim-64 TMA forward that checks its result and reruns a row
  # block (its second pass continues the mbarrier ring) under racecheck and
  # synccheck: the document kernels of the bit-for-bit comparison with the
  # in-tile vote (not in the default). GPU_CHECK_MASKED_ONLY picks other
  # ids (FLASHJIT_MATRIX_ONLY's list form), e.g. doc_id_d128,ovl_doc_causal
  # for the warp-specialised forwards that check their result (their
  # producer loads the tiles again after the consumers' decision).
  local mvcase="forward: kernels that check their results for NaN and Inf equal the in-tile vote bit for bit"
  for tool in racecheck synccheck; do
    if command -v compute-sanitizer >/dev/null && want ${tool}_masked; then
      FLASHJIT_MATRIX_ONLY=${GPU_CHECK_MASKED_ONLY:-doc_id_d64} \
        step ${tool}_masked compute-sanitizer \
        --tool $tool --error-exitcode 3 "$bin/flashjit_gpu_tests" "$mvcase"
    fi
  done
  echo
  echo "=== gpu-check summary (logs in $out)"
  grep -h "^GPU:" "$out/gpu.log" 2>/dev/null || true
  grep -h "ms$" "$out/large.log" 2>/dev/null | sed 's/^ *//' || true
  grep -h "^BENCH\|^BWDMODE" "$out/bwdbench.log" 2>/dev/null || true
  grep -h "^DECODE \|^PEER " "$out/decodebench.log" "$out/decodepeers.log" \
    2>/dev/null || true
  grep -h "^DECODESWEEP " "$out/decodesplitbench.log" 2>/dev/null || true
  grep -h "^DECODEMERGE " "$out/decodemergebench.log" 2>/dev/null || true
  printf '%-10s %s\n' step status
  local failed=0
  for s in unit gpu large torch memcheck racecheck memcheck_generated \
    racecheck_generated memcheck_ws synccheck_generated sparse memcheck_sparse \
    racecheck_sparse memcheck_padded racecheck_padded bwd bwdbench memcheck_bwd racecheck_bwd \
    memcheck_bwd_sparse racecheck_bwd_sparse racecheck_bwd_sparse128 bwdpeers python cli peers \
    decodebench decodesplitbench decodemergebench decodesplit decodepeers \
    memcheck_decode racecheck_decode masked maskbench racecheck_masked \
    synccheck_masked; do
    [[ -n ${status[$s]:-} ]] || continue
    printf '%-10s %s  %s\n' "$s" "${status[$s]}" \
      "$(grep -hE '^(All tests passed|test cases:|SKIPPED|=+ ERROR SUMMARY|=+ RACECHECK SUMMARY|[0-9]+/[0-9]+ cases passed|run_bwd_bench:|decode_peers:|[0-9]+ (passed|failed))' "$out/$s.log" | tail -1)"
    [[ ${status[$s]} == rc=0* ]] || failed=1
  done
  ((failed == 0))
}

case ${1:-pack} in
pack) pack ;;
run) run ;;
*) echo "usage: $0 [pack|run]" >&2; exit 2 ;;
esac
