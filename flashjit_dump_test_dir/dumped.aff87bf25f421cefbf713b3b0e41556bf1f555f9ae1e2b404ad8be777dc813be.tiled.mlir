module {
  func.func @flashjit_dumped(%arg0: !llvm.ptr, %arg1: !llvm.ptr, %arg2: !llvm.ptr, %arg3: !llvm.ptr, %arg4: !llvm.ptr, %arg5: !llvm.ptr, %arg6: !llvm.ptr, %arg7: i64, %arg8: i64, %arg9: i64, %arg10: i64, %arg11: i64, %arg12: i64, %arg13: i64, %arg14: i64, %arg15: i64, %arg16: i64, %arg17: i64, %arg18: i64, %arg19: i64, %arg20: i64, %arg21: i64, %arg22: i64, %arg23: i64, %arg24: i64, %arg25: i64, %arg26: i64, %arg27: i64, %arg28: i64, %arg29: i64, %arg30: i64) {
    %c-2147483648_i128 = arith.constant -2147483648 : i128
    %c2147483647_i128 = arith.constant 2147483647 : i128
    %true = arith.constant true
    %c0_i64 = arith.constant 0 : i64
    %c1_i64 = arith.constant 1 : i64
    %c63_i64 = arith.constant 63 : i64
    %c64_i64 = arith.constant 64 : i64
    %cst = arith.constant 0.000000e+00 : f32
    %cst_0 = arith.constant 0xFF800000 : f32
    %alloca = memref.alloca() {alignment = 64 : i64} : memref<64x32xf32>
    %alloca_1 = memref.alloca() {alignment = 64 : i64} : memref<64x32xf32>
    %alloca_2 = memref.alloca() {alignment = 64 : i64} : memref<64x32xf32>
    %alloca_3 = memref.alloca() {alignment = 64 : i64} : memref<64x64xf32>
    %alloca_4 = memref.alloca() {alignment = 64 : i64} : memref<64x32xf32>
    %alloca_5 = memref.alloca() {alignment = 64 : i64} : memref<64xf32>
    %alloca_6 = memref.alloca() {alignment = 64 : i64} : memref<64xf32>
    %alloca_7 = memref.alloca() {alignment = 64 : i64} : memref<64xf32>
    %alloca_8 = memref.alloca() {alignment = 64 : i64} : memref<64xf32>
    %0 = arith.addi %arg8, %c63_i64 : i64
    %1 = arith.divsi %0, %c64_i64 : i64
    scf.for %arg31 = %arg29 to %arg30 step %c1_i64  : i64 {
      %2 = arith.remsi %arg31, %1 : i64
      %3 = arith.divsi %arg31, %1 : i64
      %4 = arith.muli %2, %c64_i64 : i64
      %5 = arith.addi %arg9, %c63_i64 : i64
      %6 = arith.divsi %5, %c64_i64 : i64
      %7 = arith.subi %arg8, %4 : i64
      %8 = arith.minsi %7, %c64_i64 : i64
      %9 = arith.muli %4, %arg12 : i64
      %10 = arith.muli %3, %arg10 : i64
      %11 = arith.addi %10, %9 : i64
      attn.load_tile %arg0[%11] rows %8 strides(%arg12, %arg13) into %alloca : bf16, memref<64x32xf32>
      attn.fill %cst, %alloca_4 : f32, memref<64x32xf32>
      attn.fill %cst_0, %alloca_5 : f32, memref<64xf32>
      attn.fill %cst, %alloca_7 : f32, memref<64xf32>
      scf.for %arg32 = %c0_i64 to %6 step %c1_i64  : i64 {
        %18 = arith.muli %arg32, %c64_i64 : i64
        %19 = arith.subi %arg9, %18 : i64
        %20 = arith.minsi %19, %c64_i64 : i64
        %21 = arith.addi %4, %8 : i64
        %22 = arith.subi %21, %c1_i64 : i64
        %23 = arith.addi %18, %20 : i64
        %24 = arith.subi %23, %c1_i64 : i64
        %25 = arith.extsi %arg9 : i64 to i128
        %26 = arith.extsi %arg8 : i64 to i128
        %27 = arith.subi %25, %26 : i128
        %28 = arith.cmpi sle, %27, %c2147483647_i128 : i128
        %29 = arith.cmpi sge, %27, %c-2147483648_i128 : i128
        %30 = arith.andi %29, %28 : i1
        %31 = arith.trunci %27 : i128 to i64
        %32 = arith.extsi %4 : i64 to i128
        %33 = arith.extsi %22 : i64 to i128
        %34 = arith.extsi %31 : i64 to i128
        %35 = arith.addi %33, %34 : i128
        %36 = arith.addi %32, %34 : i128
        %37 = arith.cmpi sle, %35, %c2147483647_i128 : i128
        %38 = arith.cmpi sge, %36, %c-2147483648_i128 : i128
        %39 = arith.andi %38, %37 : i1
        %40 = arith.trunci %35 : i128 to i64
        %41 = arith.trunci %36 : i128 to i64
        %42 = arith.andi %30, %39 : i1
        %43 = arith.cmpi sgt, %24, %41 : i64
        %44 = arith.cmpi sle, %18, %40 : i64
        %45 = arith.xori %42, %true : i1
        %46 = arith.ori %45, %44 : i1
        %47 = arith.ori %45, %43 : i1
        %48 = arith.xori %46, %true : i1
        %49 = arith.andi %47, %48 : i1
        %50 = arith.xori %49, %true : i1
        scf.if %50 {
          %51 = arith.muli %18, %arg16 : i64
          %52 = arith.muli %3, %arg14 : i64
          %53 = arith.addi %52, %51 : i64
          %54 = arith.muli %18, %arg20 : i64
          %55 = arith.muli %3, %arg18 : i64
          %56 = arith.addi %55, %54 : i64
          attn.load_tile %arg1[%53] rows %20 strides(%arg16, %arg17) into %alloca_1 : bf16, memref<64x32xf32>
          attn.load_tile %arg2[%56] rows %20 strides(%arg20, %arg21) into %alloca_2 : bf16, memref<64x32xf32>
          attn.dot %alloca, %alloca_1 transpose_rhs into %alloca_3 scale 0.255034864 : memref<64x32xf32>, memref<64x32xf32>, memref<64x64xf32>
          scf.if %47 {
            attn.mask_select %alloca_3 at(%4, %18) valid(%8, %20) batch %3 head %c0_i64 seqlens(%arg8, %arg9) : memref<64x64xf32> {
            ^bb0(%batch: i32, %head: i32, %q_idx: i32, %kv_idx: i32, %seqlen_q: i32, %seqlen_k: i32):
              %57 = arith.subi %seqlen_k, %seqlen_q : i32
              %58 = arith.addi %q_idx, %57 : i32
              %59 = arith.cmpi sle, %kv_idx, %58 : i32
              attn.yield %59 : i1
            }
          } else {
            attn.mask_select %alloca_3 at(%4, %18) valid(%8, %20) batch %3 head %c0_i64 seqlens(%arg8, %arg9) : memref<64x64xf32> {
            ^bb0(%batch: i32, %head: i32, %q_idx: i32, %kv_idx: i32, %seqlen_q: i32, %seqlen_k: i32):
              attn.yield %true : i1
            }
          }
          attn.row_max %alloca_3, %alloca_5 into %alloca_6 : memref<64x64xf32>, memref<64xf32>, memref<64xf32>
          attn.exp2 %alloca_3, %alloca_6 into %alloca_3 : memref<64x64xf32>, memref<64xf32>, memref<64x64xf32>
          attn.exp2 %alloca_5, %alloca_6 into %alloca_8 : memref<64xf32>, memref<64xf32>, memref<64xf32>
          attn.rescale %alloca_7 by %alloca_8 : memref<64xf32>, memref<64xf32>
          attn.row_sum %alloca_3 into %alloca_7 : memref<64x64xf32>, memref<64xf32>
          attn.rescale %alloca_4 by %alloca_8 : memref<64x32xf32>, memref<64xf32>
          attn.dot %alloca_3, %alloca_2 into %alloca_4 accumulate scale 1.000000e+00 : memref<64x64xf32>, memref<64x32xf32>, memref<64x32xf32>
          memref.copy %alloca_6, %alloca_5 : memref<64xf32> to memref<64xf32>
        }
      }
      %12 = arith.muli %4, %arg24 : i64
      %13 = arith.muli %3, %arg22 : i64
      %14 = arith.addi %13, %12 : i64
      attn.store_tile %alloca_4, %alloca_7 into %arg3[%14] rows %8 strides(%arg24, %arg25) : memref<64x32xf32>, memref<64xf32> -> bf16
      %15 = arith.muli %4, %arg28 : i64
      %16 = arith.muli %3, %arg26 : i64
      %17 = arith.addi %16, %15 : i64
      attn.store_lse %alloca_5, %alloca_7 into %arg4[%17] rows %8 stride %arg28 : memref<64xf32>, memref<64xf32>
    }
    return
  }
}
