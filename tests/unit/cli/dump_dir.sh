#!/bin/sh
# FLASHJIT_DUMP_DIR names every dumped stage <variant>.<cache key>.<stage>:
# compiles of the same variant name with different specs (head dims) or
# targets leave separate files, each under the key `compile` prints.
# Usage: dump_dir.sh FLASHJIT WORK_DIR
f="$1"; w="$2"
rm -rf "$w"; mkdir -p "$w"
export FLASHJIT_DUMP_DIR="$w/dump"
set -e
key() { "$f" compile --cache-dir "$w/cache" "$@" | sed -n 's/^key *//p'; }
k1=$(key --target cpu --causal top_left --head-dim 32)
k2=$(key --target cpu --causal top_left --head-dim 64)
k3=$(key --target sm_80 --causal top_left --head-dim 64)
test -n "$k1" && test -n "$k2" && test -n "$k3"
test "$k1" != "$k2"
for k in "$k1" "$k2"; do
  for s in attn.mlir tiled.mlir llvm.mlir ll opt.ll; do
    test -s "$FLASHJIT_DUMP_DIR/attention.$k.$s" || { echo "missing attention.$k.$s"; ls "$FLASHJIT_DUMP_DIR"; exit 1; }
  done
done
for s in attn.mlir gpu.mlir sm_80.ptx; do
  test -s "$FLASHJIT_DUMP_DIR/attention.$k3.$s" || { echo "missing attention.$k3.$s"; ls "$FLASHJIT_DUMP_DIR"; exit 1; }
done
# The two CPU dumps hold their own head dims.
grep -q "64" "$FLASHJIT_DUMP_DIR/attention.$k2.attn.mlir"
! cmp -s "$FLASHJIT_DUMP_DIR/attention.$k1.attn.mlir" "$FLASHJIT_DUMP_DIR/attention.$k2.attn.mlir"
n=$(ls "$FLASHJIT_DUMP_DIR" | wc -l)
test "$n" = 13 || { echo "expected 13 files, got $n"; ls "$FLASHJIT_DUMP_DIR"; exit 1; }
# A cache hit compiles nothing and dumps nothing.
key --target cpu --causal top_left --head-dim 32 > /dev/null
test "$(ls "$FLASHJIT_DUMP_DIR" | wc -l)" = 13
echo dump-ok
