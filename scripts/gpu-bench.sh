#!/usr/bin/env bash
# The H200 benchmark in one device call: the issue-7 block-sparse benchmark
# (bench/run_block_sparse.py: document-causal mask and a random 50% block
# layout, flashjit beside FlexAttention) and the main forward benchmark
# (bench/run_bench.py: flashjit beside FA2, cuDNN and FlexAttention). The GPU
# machine has no MLIR, so the kernels are generated HERE as PTX
# (bench/bench_kernels DIR --sparse) and carried.
#
#   here:   scripts/gpu-bench.sh pack     # build bench_kernels, fill .device/bench_kernels/
#   device: run(command="bash scripts/gpu-bench.sh run",
#               carry=[".device/bench_kernels"], timeout_s=600)
#
# `run` writes everything under $OUT (block_sparse.{json,md}, bench_*.{json,md,
# png}, one log per step) and prints the block-sparse table last.
# Environment of `run`:
#   GPU_BENCH_STEPS  steps in order (default "sparse,main"): sparse = issue 7,
#                    main = run_bench.py
#   SPARSE_ARGS      more arguments for run_block_sparse.py (e.g. "--n 16384")
#   BENCH_ARGS       arguments for run_bench.py (default "--d 128 --n
#                    4096,16384": the full matrix takes more than one call)
#   GPU_BENCH_LIMIT  seconds for the whole run (default 560, under the 600 s
#                    of one device call); sparse gets up to 420 of them and
#                    main what is left.
# Environment of `pack`: FLASHJIT_BENCH_BUILD (default build/ci, preset ci);
# BENCH_PACK_ARGS, more bench_kernels options (--tiles: the tile experiment,
# timed with BENCH_ARGS="... --labels all").
# Exit status of `run`: 0 iff every step exited 0.
set -uo pipefail
cd "$(dirname "$0")/.."
PACK=.device/bench_kernels

pack() {
  set -e
  [[ -f scripts/env.sh ]] && source scripts/env.sh
  local build=${FLASHJIT_BENCH_BUILD:-build/ci}
  if [[ ! -f $build/build.ninja ]]; then
    if [[ $build == build/ci ]]; then
      cmake --preset ci >/dev/null
    else
      echo "pack: $build is not configured" >&2
      exit 1
    fi
  fi
  cmake --build "$build" -j2 --target bench_kernels
  rm -rf "$PACK"
  mkdir -p "$PACK"
  # Exit 3: some block-sparse kernel could not be generated (printed above);
  # the others and every main kernel are still written.
  local rc=0
  # shellcheck disable=SC2086
  "$build/bench/bench_kernels" "$PACK" --sparse ${BENCH_PACK_ARGS:-} || rc=$?
  if ((rc != 0 && rc != 3)); then
    echo "pack: bench_kernels failed ($rc)" >&2
    exit "$rc"
  fi
  ((rc == 3)) && echo "pack: WARNING: some block-sparse kernels are missing" \
    "from $PACK/block_sparse.json (see above)"
  du -sh "$PACK"
}

run() {
  local out=${OUT:-/tmp/gpu-bench-out} limit=${GPU_BENCH_LIMIT:-560}
  local start=$SECONDS status=0 summary=()
  mkdir -p "$out"
  [[ -f $PACK/manifest.json ]] ||
    { echo "no $PACK: run 'scripts/gpu-bench.sh pack' first"; exit 2; }
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  IFS=, read -ra steps <<<"${GPU_BENCH_STEPS:-sparse,main}"
  for step in "${steps[@]}"; do
    local left=$((limit - (SECONDS - start))) t0=$SECONDS rc
    if ((left < 30)); then
      summary+=("$step: skipped (time)")
      status=1
      continue
    fi
    echo "== $step ($left s left)"
    case $step in
    sparse)
      local budget=$((left < 450 ? left - 30 : 420))
      # shellcheck disable=SC2086
      timeout "$left" python3 -u bench/run_block_sparse.py --kernels "$PACK" \
        --out "$out" --budget "$budget" ${SPARSE_ARGS:-} 2>&1 |
        tee "$out/block_sparse.log"
      rc=${PIPESTATUS[0]}
      ;;
    main)
      # shellcheck disable=SC2086
      timeout "$((left - 5))" python3 -u bench/run_bench.py --kernels "$PACK" \
        --out "$out" ${BENCH_ARGS:---d 128 --n 4096,16384} 2>&1 |
        tee "$out/bench.log"
      rc=${PIPESTATUS[0]}
      ;;
    *)
      echo "unknown step $step (sparse, main)"
      rc=2
      ;;
    esac
    summary+=("$step: exit $rc, $((SECONDS - t0)) s")
    ((rc == 0)) || status=1
  done
  echo
  printf '%s\n' "${summary[@]}"
  [[ -f $out/block_sparse.md ]] && cat "$out/block_sparse.md"
  return "$status"
}

case ${1:-} in
pack) pack ;;
run) run ;;
*)
  echo "usage: $0 pack|run" >&2
  exit 2
  ;;
esac
