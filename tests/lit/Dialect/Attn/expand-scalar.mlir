// RUN: flashjit-opt %s -split-input-file -attn-expand-scalar | FileCheck %s
// The DSL's scalar ops become standard ops that never trap.

// x / 0 = 0 and MIN / -1 = MIN: the divisor is made safe, then selects.
// CHECK-LABEL: func.func @div(
// CHECK-SAME: %[[X:.*]]: i32, %[[Y:.*]]: i32)
// CHECK-DAG: %[[ZERO:.*]] = arith.constant 0 : i32
// CHECK-DAG: %[[ONE:.*]] = arith.constant 1 : i32
// CHECK-DAG: %[[IS0:.*]] = arith.cmpi eq, %[[Y]], %[[ZERO]]
// CHECK-DAG: %[[ISM1:.*]] = arith.cmpi eq, %[[Y]], %{{.*}}
// CHECK: %[[SPECIAL:.*]] = arith.ori %[[IS0]], %[[ISM1]]
// CHECK: %[[SAFE:.*]] = arith.select %[[SPECIAL]], %[[ONE]], %[[Y]]
// CHECK: %[[Q:.*]] = arith.divsi %[[X]], %[[SAFE]]
// CHECK: %[[NEG:.*]] = arith.subi %[[ZERO]], %[[X]]
// CHECK: %[[R:.*]] = arith.select %[[ISM1]], %[[NEG]], %[[Q]]
// CHECK: %[[OUT:.*]] = arith.select %[[IS0]], %[[ZERO]], %[[R]]
// CHECK: return %[[OUT]]
func.func @div(%x: i32, %y: i32) -> i32 {
  %0 = attn.div %x, %y : i32
  return %0 : i32
}

// -----

// CHECK-LABEL: func.func @rem(
// CHECK: arith.remsi
// CHECK: arith.select
// CHECK-NOT: attn.rem
func.func @rem(%x: i64, %y: i64) -> i64 {
  %0 = attn.rem %x, %y : i64
  return %0 : i64
}

// -----

// Saturating conversion: clamp before fptosi (out-of-range fptosi is
// poison), NaN gives 0.
// CHECK-LABEL: func.func @sat(
// CHECK-DAG: arith.constant 2.14748365E+9 : f32
// CHECK-DAG: arith.constant -2.14748365E+9 : f32
// CHECK-DAG: arith.constant 2147483647 : i32
// CHECK-DAG: arith.constant -2147483648 : i32
// CHECK: arith.fptosi
// CHECK: arith.cmpf uno
// CHECK-NOT: attn.fptosi_sat
func.func @sat(%x: f32) -> i32 {
  %0 = attn.fptosi_sat %x : f32 to i32
  return %0 : i32
}

// -----

// A bounds-checked read: in range loads, out of range flags the status word
// atomically and gives 0.
// CHECK-LABEL: func.func @load(
// CHECK-SAME: %[[P:.*]]: !llvm.ptr, %[[I:.*]]: i32, %[[N:.*]]: i64, %[[S:.*]]: !llvm.ptr)
// CHECK: %[[I64:.*]] = arith.extsi %[[I]] : i32 to i64
// CHECK-DAG: arith.cmpi sge, %[[I64]]
// CHECK-DAG: arith.cmpi slt, %[[I64]], %[[N]]
// CHECK: scf.if %{{.*}} -> (i32) {
// CHECK: %[[ADDR:.*]] = llvm.getelementptr %[[P]][%[[I64]]] : (!llvm.ptr, i64) -> !llvm.ptr, i32
// CHECK: llvm.load %[[ADDR]] : !llvm.ptr -> i32
// CHECK: } else {
// CHECK: %[[FLAG:.*]] = llvm.getelementptr %[[S]][%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, i32
// CHECK: llvm.atomicrmw _or %[[FLAG]], %{{.*}} monotonic
func.func @load(%p: !llvm.ptr, %i: i32, %n: i64, %s: !llvm.ptr) -> i32 {
  %0 = attn.load_elem %p[%i] size %n status %s[2] : i32 -> i32
  return %0 : i32
}
