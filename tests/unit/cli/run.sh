#!/bin/sh
# `flashjit run` on the CPU: runs a kernel on random inputs, checks it
# against the float64 reference (every row, or sampled rows), times it and
# counts FLOPs as FlashAttention's benchmarks do; a mismatch exits 3.
# Usage: run.sh FLASHJIT CACHE_DIR
f="$1"; c="--cache-dir=$2"
rm -rf "$2" "$2.doc.i32" "$2.odd"
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
# Tensors past any machine's memory (q alone 2^50 bytes): a user error
# naming the sizes, not "internal error: std::bad_alloc" with exit 2 (nu26).
check too_large 1 "do not fit in this machine's memory" "17592186044416 query and 17592186044416 key tokens" -- \
  --head-dim 16 --dtype fp32 --batch 1048576 --seqlen-q 16777216 --reps 1
# Buffers (--buffer NAME=V1,V2,... or NAME=@FILE): a document mask and
# ALiBi slopes, every row checked against the reference with those values.
docspec='attention(name=docs, mask=buffer<i32>(doc)[q_idx] == buffer<i32>(doc)[kv_idx], score=score - buffer<f32>(slopes)[head] * cast<f32>(abs(q_idx - kv_idx)), head_dim=16, heads_q=2, dtype=fp32)'
check buffers 0 "22 of 22 rows" ": ok" -- --spec "$docspec" \
  --buffer doc=0,0,0,1,1,2,2,2,2,2,3 --buffer slopes=0.5,-0.25 --seqlen-q 11 --reps 1 --check-rows 100
# The same doc ids from a raw little-endian i32 file (as numpy's tofile).
printf '\000\000\000\000\000\000\000\000\001\000\000\000' > "$2.doc.i32"
check buffer_file 0 "6 of 6 rows" ": ok" -- --spec "$docspec" \
  --buffer "doc=@$2.doc.i32" --buffer slopes=1,1 --seqlen-q 3 --reps 1
# Block-sparse: the block mask of the spec's own mask, then its tiles only.
check block_sparse 0 "mask     block mask of 64x64 tiles" "22 of 22 rows" ": ok" -- --block-sparse --spec "$docspec" \
  --buffer doc=0,0,0,1,1,2,2,2,2,2,3 --buffer slopes=0.5,-0.25 --seqlen-q 11 --reps 1 --check-rows 100
# Varlen (packed sequences, cu_seqlens): empty query and key sequences,
# bottom-right causal per sequence, GQA; every row checked (4 heads x 202).
check varlen 0 "varlen seqlens_q=100,37,0,65 seqlens_k=80,0,12,130" "808 of 808 rows" ": ok" -- \
  --seqlens-q 100,37,0,65 --seqlens-k 80,0,12,130 --causal bottom_right --head-dim 16 --heads-q 4 --heads-kv 2 --dtype fp32 --reps 1 --check-rows 1000
# Varlen + block-sparse with a buffer indexed by the sequence (batch).
check varlen_sparse 0 "partial" "404 of 404 rows" ": ok" -- --seqlens-q 100,37,0,65 --block-sparse \
  --spec 'attention(head_dim=16, heads_q=2, dtype=fp32, mask=kv_idx <= q_idx && buffer<i32>(w)[batch] > q_idx - kv_idx)' \
  --buffer w=5,100,3,20 --reps 1 --check-rows 1000
check seqlens_bad 1 "--seqlens-q '3,x': 'x' is not a length" -- --causal top_left --seqlens-q 3,x
check seqlens_batch 1 "--batch cannot be combined with --seqlens-q" -- --causal top_left --seqlens-q 3 --batch 2
check seqlens_k_count 1 "--seqlens-k has 1 lengths, --seqlens-q 2" -- --causal top_left --seqlens-q 3,4 --seqlens-k 3
check seqlens_k_alone 1 "--seqlens-k needs --seqlens-q" -- --causal top_left --seqlens-k 3
check no_buffer 1 "the variant reads buffer<i32>(doc): give --buffer doc=V1,V2,..." -- --spec "$docspec" --buffer slopes=1,2
check bad_buffer 1 "--buffer 'doc=1,x': 'x' is not an i32 integer" -- --spec "$docspec" --buffer doc=1,x --buffer slopes=1,2
check unknown_buffer 1 "--buffer 'dock=1': no such buffer; the variant's buffers: doc (i32), slopes (f32)" -- --spec "$docspec" --buffer dock=1
check twice_buffer 1 "--buffer 'doc=2': doc given twice" -- --spec "$docspec" --buffer doc=1 --buffer doc=2
printf 'abcde' > "$2.odd"
check odd_file 1 "has 5 bytes, not a multiple of 4" -- --spec "$docspec" --buffer "doc=@$2.odd" --buffer slopes=1,2
# Too few doc ids for seqlen 11: the kernel's range check reports the read.
check short_buffer 1 "buffer 'doc' was read outside [0, 3)" -- --spec "$docspec" --buffer doc=0,0,1 --buffer slopes=1,2 --seqlen-q 11 --reps 1
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
# Paged decoding on the CPU (--kernel decode, issue 17): both page-table
# layouts, a sink, GQA, every row checked against the float64 paged
# reference; bad --paged / --page-size / q_len are refused.
check decode_csr 0 "table=csr" "72 of 72 rows (3 of 3 sequences) against the float64 paged reference" ": ok" -- \
  --kernel decode --sink --causal bottom_right --head-dim 16 --heads-q 6 --heads-kv 2 --dtype fp32 \
  --batch 3 --seqlen-q 4 --seqlen-k 77 --page-size 16 --paged csr --reps 1
check decode_table 0 "table=block-table" "page_size=1 " ": ok" -- \
  --kernel decode --spec "$spec" --param cap=3 --batch 2 --seqlen-q 1 --seqlen-k 50 --page-size 1 --paged block-table --reps 1
# More rows than --check-rows: the first and the last sequence (24 rows).
check decode_sampled 0 "24 of 60 rows (2 of 5 sequences)" ": ok" -- \
  --kernel decode --causal bottom_right --head-dim 16 --heads-q 6 --heads-kv 2 --dtype fp32 \
  --batch 5 --seqlen-q 2 --seqlen-k 77 --page-size 16 --reps 1 --check-rows 20
check decode_splits_cpu 1 "--num-splits is a GPU option" -- \
  --kernel decode --causal bottom_right --seqlen-q 1 --num-splits 4
check decode_device 1 "--device 'tpu' is not cpu or gpu" -- \
  --kernel decode --causal bottom_right --seqlen-q 1 --device tpu
check decode_page_size 1 "page_size = 12, expected a power of two" -- \
  --kernel decode --causal bottom_right --page-size 12
check decode_paged 1 "--paged 'bsr' is not csr or block-table" -- \
  --kernel decode --causal bottom_right --paged bsr
check decode_qlen 1 "--seqlen-q 65 (q_len) is out of range [1, 64]" -- \
  --kernel decode --causal bottom_right --seqlen-q 65
# Decode with a buffer: --buffer binds it (it was dropped before
# 2026-12-02: "missing buffer"); checked against the paged reference.
check decode_buffer 0 ": ok" -- \
  --kernel decode --score 'score - buffer<f32>(s)[head]' --buffer s=0.5,-1.25 \
  --head-dim 16 --heads-q 2 --dtype fp32 --batch 2 --seqlen-q 2 --seqlen-k 40 --reps 1
# Flags of the other kind are errors, not ignored.
check fwd_paged 1 "--paged applies to run --kernel decode only" -- \
  --head-dim 16 --seqlen-q 8 --paged block-table
check fwd_page_size 1 "--page-size applies to run --kernel decode only" -- \
  --head-dim 16 --seqlen-q 8 --page-size 7
check decode_seqlens 1 "--seqlens-q does not apply to run --kernel decode" -- \
  --kernel decode --seqlens-q 1,1 --head-dim 16
check decode_block_sparse 1 "--block-sparse does not apply to run --kernel decode" -- \
  --kernel decode --block-sparse --head-dim 16
# NaN where the float64 reference is NaN too (log of negative scores) is
# the right output, not a mismatch (it exited 3 before 2026-12-02).
check nan_both 0 ": ok" -- \
  --score 'log(score)' --seqlen-q 8 --head-dim 32 --reps 1 --dtype fp32 --seed 1
[ $fail = 0 ] && echo run-ok
exit $fail
