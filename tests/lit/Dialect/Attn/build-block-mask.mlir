// RUN: flashjit-opt %s -split-input-file -attn-build-block-mask="block-m=16 block-n=32" | FileCheck %s
// RUN: flashjit-opt %s -split-input-file -attn-build-block-mask="varlen=true" | FileCheck %s --check-prefix=VARLEN

// A document mask: the builder ABI (status, the buffer, seqlens, the four
// list pointers, extents, row bounds), one loop over rows and one over the
// row's key tiles. Each key tile is classified by interval arithmetic with
// the buffer-range rule: doc_id over the q rows and over the key tile is
// scanned for its minimum and maximum (plain loads, only when the index
// interval lies inside [0, size) and spans at most 1024 indices: the loop
// is empty otherwise). Tiles that this cannot decide are evaluated by
// attn.mask_reduce with the buffer read bounds-checked; partial and full
// tiles are appended to their lists and the counts stored. attn.attention
// stays for attn-tile.

// CHECK: attn.attention @doc
// CHECK-LABEL: func.func @doc_block_mask(
// CHECK-SAME: %[[STATUS:[^:]*]]: !llvm.ptr, %[[DOC:[^:]*]]: !llvm.ptr, %[[SIZE:[^:]*]]: i64,
// CHECK-SAME: %[[SQ:[^:]*]]: i64, %[[SK:[^:]*]]: i64,
// CHECK-SAME: %[[NUM:[^:]*]]: !llvm.ptr, %[[IDX:[^:]*]]: !llvm.ptr, %[[FNUM:[^:]*]]: !llvm.ptr, %[[FIDX:[^:]*]]: !llvm.ptr,
// CHECK-SAME: %{{[^:]*}}: i64, %[[MH:[^:]*]]: i64, %[[NQ:[^:]*]]: i64, %[[CAP:[^:]*]]: i64,
// CHECK-SAME: %[[BEGIN:[^:]*]]: i64, %[[END:[^:]*]]: i64)
// CHECK: scf.for %[[ROW:.*]] = %[[BEGIN]] to %[[END]]
// CHECK: %[[NT:.*]]:2 = scf.for {{.*}} iter_args
// CHECK: %[[INSIDE:.*]] = arith.cmpi slt, %[[QHI:.*]], %[[SIZE]] : i64
// CHECK: %[[NARROW:.*]] = arith.cmpi slt, %{{.*}}, %{{.*}} : i128
// CHECK: %[[SCAN:.*]] = arith.select %{{.*}}, %{{.*}}, %[[QLO:.*]] : i64
// CHECK: %[[QR:.*]]:2 = scf.for %[[I:.*]] = %[[QLO]] to %[[SCAN]] step %{{.*}} iter_args(%[[MIN:.*]] = %{{.*}}, %[[MAX:.*]] = %{{.*}}) -> (i32, i32)
// CHECK-NEXT: %[[P:.*]] = llvm.getelementptr %[[DOC]][%[[I]]]
// CHECK-NEXT: %[[E:.*]] = llvm.load %[[P]] : !llvm.ptr -> i32
// CHECK-NEXT: arith.minsi %[[MIN]], %[[E]] : i32
// CHECK-NEXT: arith.maxsi %[[MAX]], %[[E]] : i32
// CHECK: scf.for {{.*}} -> (i32, i32)
// CHECK: llvm.load
// CHECK-NOT: status
// CHECK: %[[ANYALL:.*]]:2 = scf.if
// CHECK: attn.mask_reduce
// CHECK: attn.load_elem %[[DOC]][%{{.*}}] size %[[SIZE]] status %[[STATUS]][0]
// CHECK: } else {
// CHECK: llvm.getelementptr %[[IDX]]
// CHECK: llvm.getelementptr %[[FIDX]]
// CHECK: llvm.getelementptr %[[NUM]][%[[ROW]]]
// CHECK: llvm.getelementptr %[[FNUM]][%[[ROW]]]
// CHECK-NOT: attn.buffer_load
// CHECK: return

// The varlen builder reads each sequence's bounds from cu_seqlens.
// VARLEN-LABEL: func.func @doc_block_mask(
// VARLEN-SAME: %{{[^:]*}}: i64, %{{[^:]*}}: i64, %[[CUQ:[^:]*]]: !llvm.ptr, %[[CUK:[^:]*]]: !llvm.ptr,
// VARLEN: llvm.getelementptr %[[CUQ]]
// VARLEN: llvm.getelementptr %[[CUK]]
attn.attention @doc attributes {
    dtype_q = bf16, dtype_k = bf16, dtype_v = bf16, dtype_o = bf16,
    head_dim_qk = 64 : i64, head_dim_v = 64 : i64, heads_q = 2 : i64,
    heads_kv = 1 : i64, scale = 0.125 : f32, return_lse = true,
    params = {}, buffers = {doc_id = i32}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %dq = attn.buffer_load "doc_id"[%q] : i32 -> i32
  %dk = attn.buffer_load "doc_id"[%kv] : i32 -> i32
  %0 = arith.cmpi eq, %dq, %dk : i32
  attn.yield %0 : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
}
