// RUN: flashjit-opt %s -split-input-file -attn-test-classify -canonicalize | FileCheck %s
// RUN: flashjit-opt %s -split-input-file -attn-test-classify=buffer-ranges=true -canonicalize | FileCheck %s --check-prefix=RANGES
// The classifier the kernels embed, as a function: 0 empty, 1 partial,
// 2 full.

// A mask that is always true is full everywhere (unless the box is empty).
// CHECK-LABEL: func.func @always_classify(
// CHECK-SAME: %{{.*}}: i64, %{{.*}}: i64, %[[QLO:.*]]: i64, %[[QHI:.*]]: i64, %[[KLO:.*]]: i64, %[[KHI:.*]]: i64, %{{.*}}: i64, %{{.*}}: i64) -> i8
// CHECK-DAG: %[[FULL:.*]] = arith.constant 2 : i8
// CHECK-DAG: %[[EMPTY:.*]] = arith.constant 0 : i8
// CHECK-DAG: arith.cmpi sgt, %[[QLO]], %[[QHI]]
// CHECK-DAG: arith.cmpi sgt, %[[KLO]], %[[KHI]]
// CHECK: arith.select %{{.*}}, %[[EMPTY]], %[[FULL]] : i8
attn.attention @always attributes {
    dtype_q = bf16, dtype_k = bf16, dtype_v = bf16, dtype_o = bf16,
    head_dim_qk = 64 : i64, head_dim_v = 64 : i64, heads_q = 1 : i64,
    heads_kv = 1 : i64, scale = 0.125 : f32, return_lse = true,
    params = {}, buffers = {}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %t = arith.constant true
  attn.yield %t : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
}

// -----

// Sliding window with a runtime parameter: q - w can overflow i32, so the
// bounds are computed in i128 and checked against the i32 range; the
// parameter is an argument of the classifier.
// CHECK-LABEL: func.func @window_classify(
// CHECK-SAME: %[[W:[^:]*]]: i32) -> i8
// CHECK-DAG: arith.constant -2147483648 : i128
// CHECK-DAG: arith.constant 2147483647 : i128
// CHECK: arith.extsi %[[W]] : i32 to i128
// CHECK: return %{{.*}} : i8
attn.attention @window attributes {
    dtype_q = bf16, dtype_k = bf16, dtype_v = bf16, dtype_o = bf16,
    head_dim_qk = 64 : i64, head_dim_v = 64 : i64, heads_q = 1 : i64,
    heads_kv = 1 : i64, scale = 0.125 : f32, return_lse = true,
    params = {w = i32}, buffers = {}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %w = attn.param "w" : i32
  %lo = arith.subi %q, %w : i32
  %0 = arith.cmpi sge, %kv, %lo : i32
  %1 = arith.cmpi sle, %kv, %q : i32
  %2 = arith.andi %0, %1 : i1
  attn.yield %2 : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
}

// -----

// A mask that reads a buffer is never full: the buffer's value is unknown.
// CHECK-LABEL: func.func @doc_classify(
// CHECK-NOT: arith.constant 2 : i8
// CHECK: return
// With buffer-ranges the classifier takes the buffer's (data, size), scans
// doc over the q and the kv interval without status, and can say full.
// RANGES-LABEL: func.func @doc_classify(
// RANGES-SAME: %[[DATA:[^:]*]]: !llvm.ptr, %[[SIZE:[^:]*]]: i64) -> i8
// RANGES-DAG: arith.constant 2 : i8
// RANGES-DAG: arith.cmpi slt, %{{.*}}, %[[SIZE]] : i64
// RANGES: scf.for {{.*}} -> (i32, i32)
// RANGES: llvm.getelementptr %[[DATA]]
// RANGES: scf.for {{.*}} -> (i32, i32)
// RANGES: llvm.getelementptr %[[DATA]]
// RANGES-NOT: attn.buffer_load
// RANGES: return
attn.attention @doc attributes {
    dtype_q = bf16, dtype_k = bf16, dtype_v = bf16, dtype_o = bf16,
    head_dim_qk = 64 : i64, head_dim_v = 64 : i64, heads_q = 1 : i64,
    heads_kv = 1 : i64, scale = 0.125 : f32, return_lse = true,
    params = {}, buffers = {doc = i32}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %0 = attn.buffer_load "doc"[%q] : i32 -> i32
  %1 = attn.buffer_load "doc"[%kv] : i32 -> i32
  %2 = arith.cmpi eq, %0, %1 : i32
  attn.yield %2 : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
}
