#!/bin/sh
# `flashjit run` on the CPU: runs a kernel on random inputs, checks it
# against the float64 reference (every row, or sampled rows), times it and
# counts FLOPs as FlashAttention's benchmarks do; a mismatch exits 3.
# Usage: run.sh FLASHJIT CACHE_DIR
f="$1"; c="--cache-dir=$2"
rm -rf "$2"
fail=0
check() { # check NAME WANTED_RC SUBSTRING... -- ARGS...
  name="$1"; want="$2"; shift 2
  subs=""
  while [ "$1" != "--" ]; do subs="$subs
$1"; shift; done
  shift
  out=$("$f" run $c "$@" 2>&1); rc=$?
  if [ "$rc" != "$want" ]; then
    echo "FAIL $name: rc=$rc, wanted $want"; echo "$out"; fail=1; return
  fi
  echo "$subs" | while IFS= read -r s; do
    [ -z "$s" ] && continue
    printf '%s' "$out" | grep -qF -- "$s" || { echo "FAIL $name: no '$s' in:"; echo "$out"; exit 1; }
  done || fail=1
}
spec='attention(name=swsc, mask=sliding_window(20, 3, bottom_right), score=softcap(param<f32>(cap)), head_dim_qk=40, head_dim_v=24, heads_q=6, heads_kv=2, dtype=fp16)'
# Odd shapes, GQA, fp16, different head dims, a parameter: every row checked.
check all_rows 0 "666 of 666 rows" ": ok" "compiled" "median of 3 runs after 1 warm-up" -- \
  --spec "$spec" --param cap=5.5 --batch 3 --seqlen-q 37 --seqlen-k 91 --reps 3 --warmup 1 --check-rows 1000
# The same kernel again: a cache hit.
check cache_hit 0 "hit in" ": ok" -- \
  --spec "$spec" --param cap=7 --batch 1 --seqlen-q 5 --seqlen-k 130 --reps 1
# Sampled rows of a bigger problem; FLOPs 2*b*hq*sq*sk*(dqk+dv), halved for
# causal: 2*2*2*300*200*(32+32)/2 = 15.36 MFLOP.
check sampled 0 "40 of 1200 rows" ": ok" "(0.01536 GFLOP, halved for causal)" -- \
  --causal top_left --head-dim 32 --heads-q 2 --batch 2 --seqlen-q 300 --seqlen-k 200 --check-rows 40 --reps 2 --dtype bf16
# Not causal: the whole count (2*1*1*64*48*(16+16) = 196608).
check dense_flops 0 "(0.0001966 GFLOP)" ": ok" -- \
  --head-dim 16 --seqlen-q 64 --seqlen-k 48 --dtype fp32 --reps 1
# A tolerance no bf16 output meets: the check fails and the exit code says so.
check mismatch 3 "MISMATCH" "does not match the reference" -- \
  --causal bottom_right --head-dim 32 --seqlen-q 50 --reps 1 --tolerance 1e-7
# Bad input: exit 1, the value quoted.
check no_param 1 "the variant reads param<f32>(cap): give --param cap=VALUE" -- --spec "$spec"
check bad_param 1 "--param 'cap=abc': 'abc' is not a finite f32" -- --spec "$spec" --param cap=abc
check unknown_param 1 "--param 'cop=1': no such parameter; the variant's parameters: cap (f32)" -- --spec "$spec" --param cop=1
check twice_param 1 "--param 'cap=2': cap given twice" -- --spec "$spec" --param cap=1 --param cap=2
check buffer 1 "reads buffer<i32>(doc); run does not generate buffers" -- --mask 'buffer<i32>(doc)[q_idx] == buffer<i32>(doc)[kv_idx]'
check device 1 "--device 'tpu' is not cpu or gpu" -- --causal top_left --device tpu
check seqlen 1 "--seqlen-q 0 is out of range" -- --causal top_left --seqlen-q 0
check reps 1 "--reps 0 is out of range" -- --causal top_left --reps 0
check tolerance 1 "--tolerance -1 must be positive" -- --causal top_left --tolerance -1
check cpu_warps 1 "--warps is a GPU option" -- --causal top_left --warps 4
# An attention sink (--sink): causal top-left with seqlen_q > seqlen_k, so
# rows with no allowed key (O = 0, LSE = the sink) are among those checked.
check sink 0 "sink=true)" "280 of 280 rows" ": ok" -- \
  --sink --causal top_left --head-dim 16 --heads-q 4 --heads-kv 2 --seqlen-q 70 --seqlen-k 23 --dtype fp32 --reps 1 --check-rows 1000
check sink_spec 1 "cannot be combined" -- --spec 'attention(sink=true)' --sink
[ $fail = 0 ] && echo run-ok
exit $fail
