// RUN: flashjit-opt %s -convert-attn-to-nvvm="block-n=64 num-warps=4 decode=true" | FileCheck %s
// RUN: flashjit-opt %s -convert-attn-to-nvvm="block-n=64 num-warps=4 decode=true arch=sm_80" | FileCheck %s --check-prefix=SM80
// RUN: not flashjit-opt %s -convert-attn-to-nvvm="decode=true arch=sm_70" 2>&1 | FileCheck %s --check-prefix=ARCH
// The merge kernel is launched as the split kernel's programmatic
// dependent on sm_90 (DecodeMerge.h: emitGridDependency): the split kernel
// lets it launch first thing, each merge entry waits for the split
// kernel's grid (its stores visible) before its first global load. sm_80
// kernels have neither.

// CHECK-LABEL: gpu.func @dense_decode(
// CHECK-NOT: llvm.load
// CHECK: llvm.inline_asm has_side_effects {{.*}}"griddepcontrol.launch_dependents;", "~{memory}"
// CHECK-NOT: griddepcontrol.wait
// CHECK: gpu.return
// CHECK-LABEL: gpu.func @dense_decode_merge(
// CHECK-NOT: llvm.load {{.*}} !llvm.ptr<1>
// CHECK: llvm.inline_asm has_side_effects {{.*}}"griddepcontrol.wait;", "~{memory}"
// CHECK-NOT: griddepcontrol
// CHECK: gpu.return
// CHECK-LABEL: gpu.func @dense_decode_merge_serial(
// CHECK-NOT: llvm.load {{.*}} !llvm.ptr<1>
// CHECK: llvm.inline_asm has_side_effects {{.*}}"griddepcontrol.wait;", "~{memory}"
// CHECK-NOT: griddepcontrol
// CHECK: gpu.return

// SM80-NOT: griddepcontrol
// SM80: gpu.func @dense_decode_merge_serial(
// SM80-NOT: griddepcontrol

// ARCH: unsupported GPU kernel shape: {{.*}}arch sm_80 or sm_90a
attn.attention @dense attributes {
    dtype_q = f16, dtype_k = f16, dtype_v = f16, dtype_o = f16,
    head_dim_qk = 64 : i64, head_dim_v = 64 : i64, heads_q = 2 : i64,
    heads_kv = 2 : i64, scale = 0.125 : f32, return_lse = true,
    params = {}, buffers = {}} mask {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  %0 = arith.constant true
  attn.yield %0 : i1
} score {
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %sq: i32, %sk: i32):
  attn.yield %s : f32
}
