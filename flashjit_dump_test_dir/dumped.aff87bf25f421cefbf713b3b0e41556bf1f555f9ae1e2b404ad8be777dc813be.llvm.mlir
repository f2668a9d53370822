module {
  llvm.func @flashjit_dumped(%arg0: !llvm.ptr, %arg1: !llvm.ptr, %arg2: !llvm.ptr, %arg3: !llvm.ptr, %arg4: !llvm.ptr, %arg5: !llvm.ptr, %arg6: !llvm.ptr, %arg7: i64, %arg8: i64, %arg9: i64, %arg10: i64, %arg11: i64, %arg12: i64, %arg13: i64, %arg14: i64, %arg15: i64, %arg16: i64, %arg17: i64, %arg18: i64, %arg19: i64, %arg20: i64, %arg21: i64, %arg22: i64, %arg23: i64, %arg24: i64, %arg25: i64, %arg26: i64, %arg27: i64, %arg28: i64, %arg29: i64, %arg30: i64) {
    %0 = llvm.mlir.constant(0.693147182 : f32) : f32
    %1 = llvm.mlir.constant(32704 : i32) : i32
    %2 = llvm.mlir.constant(32767 : i32) : i32
    %3 = llvm.mlir.constant(1 : i32) : i32
    %4 = llvm.mlir.constant(1.000000e+00 : f32) : f32
    %5 = llvm.mlir.constant(false) : i1
    %6 = llvm.mlir.constant(0.255034864 : f32) : f32
    %7 = llvm.mlir.constant(16 : i32) : i32
    %8 = llvm.mlir.constant(32 : index) : i64
    %9 = llvm.mlir.constant(1 : index) : i64
    %10 = llvm.mlir.constant(0 : index) : i64
    %11 = llvm.mlir.constant(64 : index) : i64
    %12 = llvm.mlir.constant(-2147483648 : i128) : i128
    %13 = llvm.mlir.constant(2147483647 : i128) : i128
    %14 = llvm.mlir.constant(true) : i1
    %15 = llvm.mlir.constant(0 : i64) : i64
    %16 = llvm.mlir.constant(1 : i64) : i64
    %17 = llvm.mlir.constant(63 : i64) : i64
    %18 = llvm.mlir.constant(64 : i64) : i64
    %19 = llvm.mlir.constant(0.000000e+00 : f32) : f32
    %20 = llvm.mlir.constant(0xFF800000 : f32) : f32
    %21 = llvm.mlir.constant(64 : index) : i64
    %22 = llvm.mlir.constant(32 : index) : i64
    %23 = llvm.mlir.constant(1 : index) : i64
    %24 = llvm.mlir.constant(2048 : index) : i64
    %25 = llvm.alloca %24 x f32 {alignment = 64 : i64} : (i64) -> !llvm.ptr
    %26 = llvm.mlir.poison : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)>
    %27 = llvm.insertvalue %25, %26[0] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %28 = llvm.insertvalue %25, %27[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %29 = llvm.mlir.constant(0 : index) : i64
    %30 = llvm.insertvalue %29, %28[2] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %31 = llvm.insertvalue %21, %30[3, 0] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %32 = llvm.insertvalue %22, %31[3, 1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %33 = llvm.insertvalue %22, %32[4, 0] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %34 = llvm.insertvalue %23, %33[4, 1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %35 = llvm.mlir.constant(64 : index) : i64
    %36 = llvm.mlir.constant(32 : index) : i64
    %37 = llvm.mlir.constant(1 : index) : i64
    %38 = llvm.mlir.constant(2048 : index) : i64
    %39 = llvm.alloca %38 x f32 {alignment = 64 : i64} : (i64) -> !llvm.ptr
    %40 = llvm.mlir.poison : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)>
    %41 = llvm.insertvalue %39, %40[0] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %42 = llvm.insertvalue %39, %41[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %43 = llvm.mlir.constant(0 : index) : i64
    %44 = llvm.insertvalue %43, %42[2] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %45 = llvm.insertvalue %35, %44[3, 0] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %46 = llvm.insertvalue %36, %45[3, 1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %47 = llvm.insertvalue %36, %46[4, 0] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %48 = llvm.insertvalue %37, %47[4, 1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %49 = llvm.mlir.constant(64 : index) : i64
    %50 = llvm.mlir.constant(32 : index) : i64
    %51 = llvm.mlir.constant(1 : index) : i64
    %52 = llvm.mlir.constant(2048 : index) : i64
    %53 = llvm.alloca %52 x f32 {alignment = 64 : i64} : (i64) -> !llvm.ptr
    %54 = llvm.mlir.poison : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)>
    %55 = llvm.insertvalue %53, %54[0] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %56 = llvm.insertvalue %53, %55[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %57 = llvm.mlir.constant(0 : index) : i64
    %58 = llvm.insertvalue %57, %56[2] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %59 = llvm.insertvalue %49, %58[3, 0] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %60 = llvm.insertvalue %50, %59[3, 1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %61 = llvm.insertvalue %50, %60[4, 0] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %62 = llvm.insertvalue %51, %61[4, 1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %63 = llvm.mlir.constant(64 : index) : i64
    %64 = llvm.mlir.constant(64 : index) : i64
    %65 = llvm.mlir.constant(1 : index) : i64
    %66 = llvm.mlir.constant(4096 : index) : i64
    %67 = llvm.alloca %66 x f32 {alignment = 64 : i64} : (i64) -> !llvm.ptr
    %68 = llvm.mlir.poison : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)>
    %69 = llvm.insertvalue %67, %68[0] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %70 = llvm.insertvalue %67, %69[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %71 = llvm.mlir.constant(0 : index) : i64
    %72 = llvm.insertvalue %71, %70[2] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %73 = llvm.insertvalue %63, %72[3, 0] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %74 = llvm.insertvalue %64, %73[3, 1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %75 = llvm.insertvalue %64, %74[4, 0] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %76 = llvm.insertvalue %65, %75[4, 1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %77 = llvm.mlir.constant(64 : index) : i64
    %78 = llvm.mlir.constant(32 : index) : i64
    %79 = llvm.mlir.constant(1 : index) : i64
    %80 = llvm.mlir.constant(2048 : index) : i64
    %81 = llvm.alloca %80 x f32 {alignment = 64 : i64} : (i64) -> !llvm.ptr
    %82 = llvm.mlir.poison : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)>
    %83 = llvm.insertvalue %81, %82[0] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %84 = llvm.insertvalue %81, %83[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %85 = llvm.mlir.constant(0 : index) : i64
    %86 = llvm.insertvalue %85, %84[2] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %87 = llvm.insertvalue %77, %86[3, 0] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %88 = llvm.insertvalue %78, %87[3, 1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %89 = llvm.insertvalue %78, %88[4, 0] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %90 = llvm.insertvalue %79, %89[4, 1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %91 = llvm.mlir.constant(64 : index) : i64
    %92 = llvm.mlir.constant(1 : index) : i64
    %93 = llvm.alloca %91 x f32 {alignment = 64 : i64} : (i64) -> !llvm.ptr
    %94 = llvm.mlir.poison : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    %95 = llvm.insertvalue %93, %94[0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %96 = llvm.insertvalue %93, %95[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %97 = llvm.mlir.constant(0 : index) : i64
    %98 = llvm.insertvalue %97, %96[2] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %99 = llvm.insertvalue %91, %98[3, 0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %100 = llvm.insertvalue %92, %99[4, 0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %101 = llvm.mlir.constant(64 : index) : i64
    %102 = llvm.mlir.constant(1 : index) : i64
    %103 = llvm.alloca %101 x f32 {alignment = 64 : i64} : (i64) -> !llvm.ptr
    %104 = llvm.mlir.poison : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    %105 = llvm.insertvalue %103, %104[0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %106 = llvm.insertvalue %103, %105[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %107 = llvm.mlir.constant(0 : index) : i64
    %108 = llvm.insertvalue %107, %106[2] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %109 = llvm.insertvalue %101, %108[3, 0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %110 = llvm.insertvalue %102, %109[4, 0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %111 = llvm.mlir.constant(64 : index) : i64
    %112 = llvm.mlir.constant(1 : index) : i64
    %113 = llvm.alloca %111 x f32 {alignment = 64 : i64} : (i64) -> !llvm.ptr
    %114 = llvm.mlir.poison : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    %115 = llvm.insertvalue %113, %114[0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %116 = llvm.insertvalue %113, %115[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %117 = llvm.mlir.constant(0 : index) : i64
    %118 = llvm.insertvalue %117, %116[2] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %119 = llvm.insertvalue %111, %118[3, 0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %120 = llvm.insertvalue %112, %119[4, 0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %121 = llvm.mlir.constant(64 : index) : i64
    %122 = llvm.mlir.constant(1 : index) : i64
    %123 = llvm.alloca %121 x f32 {alignment = 64 : i64} : (i64) -> !llvm.ptr
    %124 = llvm.mlir.poison : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
    %125 = llvm.insertvalue %123, %124[0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %126 = llvm.insertvalue %123, %125[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %127 = llvm.mlir.constant(0 : index) : i64
    %128 = llvm.insertvalue %127, %126[2] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %129 = llvm.insertvalue %121, %128[3, 0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %130 = llvm.insertvalue %122, %129[4, 0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %131 = llvm.add %arg8, %17 : i64
    %132 = llvm.sdiv %131, %18 : i64
    llvm.br ^bb1(%arg29 : i64)
  ^bb1(%133: i64):  // 2 preds: ^bb0, ^bb131
    %134 = llvm.icmp "slt" %133, %arg30 : i64
    llvm.cond_br %134, ^bb2, ^bb132
  ^bb2:  // pred: ^bb1
    %135 = llvm.srem %133, %132 : i64
    %136 = llvm.sdiv %133, %132 : i64
    %137 = llvm.mul %135, %18 : i64
    %138 = llvm.add %arg9, %17 : i64
    %139 = llvm.sdiv %138, %18 : i64
    %140 = llvm.sub %arg8, %137 : i64
    %141 = llvm.intr.smin(%140, %18) : (i64, i64) -> i64
    %142 = llvm.mul %137, %arg12 : i64
    %143 = llvm.mul %136, %arg10 : i64
    %144 = llvm.add %143, %142 : i64
    llvm.br ^bb3(%10 : i64)
  ^bb3(%145: i64):  // 2 preds: ^bb2, ^bb13
    %146 = llvm.icmp "slt" %145, %11 : i64
    llvm.cond_br %146, ^bb4, ^bb14
  ^bb4:  // pred: ^bb3
    %147 = llvm.icmp "slt" %145, %141 : i64
    llvm.cond_br %147, ^bb5, ^bb9
  ^bb5:  // pred: ^bb4
    %148 = llvm.mul %145, %arg12 : i64
    %149 = llvm.add %144, %148 : i64
    llvm.br ^bb6(%10 : i64)
  ^bb6(%150: i64):  // 2 preds: ^bb5, ^bb7
    %151 = llvm.icmp "slt" %150, %8 : i64
    llvm.cond_br %151, ^bb7, ^bb8
  ^bb7:  // pred: ^bb6
    %152 = llvm.mul %150, %arg13 : i64
    %153 = llvm.add %149, %152 : i64
    %154 = llvm.getelementptr %arg0[%153] : (!llvm.ptr, i64) -> !llvm.ptr, bf16
    %155 = llvm.load %154 : !llvm.ptr -> i16
    %156 = llvm.zext %155 : i16 to i32
    %157 = llvm.shl %156, %7 : i32
    %158 = llvm.bitcast %157 : i32 to f32
    %159 = llvm.extractvalue %34[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %160 = llvm.mlir.constant(32 : index) : i64
    %161 = llvm.mul %145, %160 overflow<nsw, nuw> : i64
    %162 = llvm.add %161, %150 overflow<nsw, nuw> : i64
    %163 = llvm.getelementptr inbounds|nuw %159[%162] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    llvm.store %158, %163 : f32, !llvm.ptr
    %164 = llvm.add %150, %9 : i64
    llvm.br ^bb6(%164 : i64)
  ^bb8:  // pred: ^bb6
    llvm.br ^bb13
  ^bb9:  // pred: ^bb4
    llvm.br ^bb10(%10 : i64)
  ^bb10(%165: i64):  // 2 preds: ^bb9, ^bb11
    %166 = llvm.icmp "slt" %165, %8 : i64
    llvm.cond_br %166, ^bb11, ^bb12
  ^bb11:  // pred: ^bb10
    %167 = llvm.extractvalue %34[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %168 = llvm.mlir.constant(32 : index) : i64
    %169 = llvm.mul %145, %168 overflow<nsw, nuw> : i64
    %170 = llvm.add %169, %165 overflow<nsw, nuw> : i64
    %171 = llvm.getelementptr inbounds|nuw %167[%170] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    llvm.store %19, %171 : f32, !llvm.ptr
    %172 = llvm.add %165, %9 : i64
    llvm.br ^bb10(%172 : i64)
  ^bb12:  // pred: ^bb10
    llvm.br ^bb13
  ^bb13:  // 2 preds: ^bb8, ^bb12
    %173 = llvm.add %145, %9 : i64
    llvm.br ^bb3(%173 : i64)
  ^bb14:  // pred: ^bb3
    llvm.br ^bb15(%10 : i64)
  ^bb15(%174: i64):  // 2 preds: ^bb14, ^bb19
    %175 = llvm.icmp "slt" %174, %11 : i64
    llvm.cond_br %175, ^bb16, ^bb20
  ^bb16:  // pred: ^bb15
    llvm.br ^bb17(%10 : i64)
  ^bb17(%176: i64):  // 2 preds: ^bb16, ^bb18
    %177 = llvm.icmp "slt" %176, %8 : i64
    llvm.cond_br %177, ^bb18, ^bb19
  ^bb18:  // pred: ^bb17
    %178 = llvm.extractvalue %90[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %179 = llvm.mlir.constant(32 : index) : i64
    %180 = llvm.mul %174, %179 overflow<nsw, nuw> : i64
    %181 = llvm.add %180, %176 overflow<nsw, nuw> : i64
    %182 = llvm.getelementptr inbounds|nuw %178[%181] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    llvm.store %19, %182 : f32, !llvm.ptr
    %183 = llvm.add %176, %9 : i64
    llvm.br ^bb17(%183 : i64)
  ^bb19:  // pred: ^bb17
    %184 = llvm.add %174, %9 : i64
    llvm.br ^bb15(%184 : i64)
  ^bb20:  // pred: ^bb15
    llvm.br ^bb21(%10 : i64)
  ^bb21(%185: i64):  // 2 preds: ^bb20, ^bb22
    %186 = llvm.icmp "slt" %185, %11 : i64
    llvm.cond_br %186, ^bb22, ^bb23
  ^bb22:  // pred: ^bb21
    %187 = llvm.extractvalue %100[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %188 = llvm.getelementptr inbounds|nuw %187[%185] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    llvm.store %20, %188 : f32, !llvm.ptr
    %189 = llvm.add %185, %9 : i64
    llvm.br ^bb21(%189 : i64)
  ^bb23:  // pred: ^bb21
    llvm.br ^bb24(%10 : i64)
  ^bb24(%190: i64):  // 2 preds: ^bb23, ^bb25
    %191 = llvm.icmp "slt" %190, %11 : i64
    llvm.cond_br %191, ^bb25, ^bb26
  ^bb25:  // pred: ^bb24
    %192 = llvm.extractvalue %120[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %193 = llvm.getelementptr inbounds|nuw %192[%190] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    llvm.store %19, %193 : f32, !llvm.ptr
    %194 = llvm.add %190, %9 : i64
    llvm.br ^bb24(%194 : i64)
  ^bb26:  // pred: ^bb24
    llvm.br ^bb27(%15 : i64)
  ^bb27(%195: i64):  // 2 preds: ^bb26, ^bb121
    %196 = llvm.icmp "slt" %195, %139 : i64
    llvm.cond_br %196, ^bb28, ^bb122
  ^bb28:  // pred: ^bb27
    %197 = llvm.mul %195, %18 : i64
    %198 = llvm.sub %arg9, %197 : i64
    %199 = llvm.intr.smin(%198, %18) : (i64, i64) -> i64
    %200 = llvm.add %137, %141 : i64
    %201 = llvm.sub %200, %16 : i64
    %202 = llvm.add %197, %199 : i64
    %203 = llvm.sub %202, %16 : i64
    %204 = llvm.sext %arg9 : i64 to i128
    %205 = llvm.sext %arg8 : i64 to i128
    %206 = llvm.sub %204, %205 : i128
    %207 = llvm.icmp "sle" %206, %13 : i128
    %208 = llvm.icmp "sge" %206, %12 : i128
    %209 = llvm.and %208, %207 : i1
    %210 = llvm.trunc %206 : i128 to i64
    %211 = llvm.sext %137 : i64 to i128
    %212 = llvm.sext %201 : i64 to i128
    %213 = llvm.sext %210 : i64 to i128
    %214 = llvm.add %212, %213 : i128
    %215 = llvm.add %211, %213 : i128
    %216 = llvm.icmp "sle" %214, %13 : i128
    %217 = llvm.icmp "sge" %215, %12 : i128
    %218 = llvm.and %217, %216 : i1
    %219 = llvm.trunc %214 : i128 to i64
    %220 = llvm.trunc %215 : i128 to i64
    %221 = llvm.and %209, %218 : i1
    %222 = llvm.icmp "sgt" %203, %220 : i64
    %223 = llvm.icmp "sle" %197, %219 : i64
    %224 = llvm.xor %221, %14 : i1
    %225 = llvm.or %224, %223 : i1
    %226 = llvm.or %224, %222 : i1
    %227 = llvm.xor %225, %14 : i1
    %228 = llvm.and %226, %227 : i1
    %229 = llvm.xor %228, %14 : i1
    llvm.cond_br %229, ^bb29, ^bb121
  ^bb29:  // pred: ^bb28
    %230 = llvm.mul %197, %arg16 : i64
    %231 = llvm.mul %136, %arg14 : i64
    %232 = llvm.add %231, %230 : i64
    %233 = llvm.mul %197, %arg20 : i64
    %234 = llvm.mul %136, %arg18 : i64
    %235 = llvm.add %234, %233 : i64
    llvm.br ^bb30(%10 : i64)
  ^bb30(%236: i64):  // 2 preds: ^bb29, ^bb40
    %237 = llvm.icmp "slt" %236, %11 : i64
    llvm.cond_br %237, ^bb31, ^bb41
  ^bb31:  // pred: ^bb30
    %238 = llvm.icmp "slt" %236, %199 : i64
    llvm.cond_br %238, ^bb32, ^bb36
  ^bb32:  // pred: ^bb31
    %239 = llvm.mul %236, %arg16 : i64
    %240 = llvm.add %232, %239 : i64
    llvm.br ^bb33(%10 : i64)
  ^bb33(%241: i64):  // 2 preds: ^bb32, ^bb34
    %242 = llvm.icmp "slt" %241, %8 : i64
    llvm.cond_br %242, ^bb34, ^bb35
  ^bb34:  // pred: ^bb33
    %243 = llvm.mul %241, %arg17 : i64
    %244 = llvm.add %240, %243 : i64
    %245 = llvm.getelementptr %arg1[%244] : (!llvm.ptr, i64) -> !llvm.ptr, bf16
    %246 = llvm.load %245 : !llvm.ptr -> i16
    %247 = llvm.zext %246 : i16 to i32
    %248 = llvm.shl %247, %7 : i32
    %249 = llvm.bitcast %248 : i32 to f32
    %250 = llvm.extractvalue %48[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %251 = llvm.mlir.constant(32 : index) : i64
    %252 = llvm.mul %236, %251 overflow<nsw, nuw> : i64
    %253 = llvm.add %252, %241 overflow<nsw, nuw> : i64
    %254 = llvm.getelementptr inbounds|nuw %250[%253] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    llvm.store %249, %254 : f32, !llvm.ptr
    %255 = llvm.add %241, %9 : i64
    llvm.br ^bb33(%255 : i64)
  ^bb35:  // pred: ^bb33
    llvm.br ^bb40
  ^bb36:  // pred: ^bb31
    llvm.br ^bb37(%10 : i64)
  ^bb37(%256: i64):  // 2 preds: ^bb36, ^bb38
    %257 = llvm.icmp "slt" %256, %8 : i64
    llvm.cond_br %257, ^bb38, ^bb39
  ^bb38:  // pred: ^bb37
    %258 = llvm.extractvalue %48[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %259 = llvm.mlir.constant(32 : index) : i64
    %260 = llvm.mul %236, %259 overflow<nsw, nuw> : i64
    %261 = llvm.add %260, %256 overflow<nsw, nuw> : i64
    %262 = llvm.getelementptr inbounds|nuw %258[%261] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    llvm.store %19, %262 : f32, !llvm.ptr
    %263 = llvm.add %256, %9 : i64
    llvm.br ^bb37(%263 : i64)
  ^bb39:  // pred: ^bb37
    llvm.br ^bb40
  ^bb40:  // 2 preds: ^bb35, ^bb39
    %264 = llvm.add %236, %9 : i64
    llvm.br ^bb30(%264 : i64)
  ^bb41:  // pred: ^bb30
    llvm.br ^bb42(%10 : i64)
  ^bb42(%265: i64):  // 2 preds: ^bb41, ^bb52
    %266 = llvm.icmp "slt" %265, %11 : i64
    llvm.cond_br %266, ^bb43, ^bb53
  ^bb43:  // pred: ^bb42
    %267 = llvm.icmp "slt" %265, %199 : i64
    llvm.cond_br %267, ^bb44, ^bb48
  ^bb44:  // pred: ^bb43
    %268 = llvm.mul %265, %arg20 : i64
    %269 = llvm.add %235, %268 : i64
    llvm.br ^bb45(%10 : i64)
  ^bb45(%270: i64):  // 2 preds: ^bb44, ^bb46
    %271 = llvm.icmp "slt" %270, %8 : i64
    llvm.cond_br %271, ^bb46, ^bb47
  ^bb46:  // pred: ^bb45
    %272 = llvm.mul %270, %arg21 : i64
    %273 = llvm.add %269, %272 : i64
    %274 = llvm.getelementptr %arg2[%273] : (!llvm.ptr, i64) -> !llvm.ptr, bf16
    %275 = llvm.load %274 : !llvm.ptr -> i16
    %276 = llvm.zext %275 : i16 to i32
    %277 = llvm.shl %276, %7 : i32
    %278 = llvm.bitcast %277 : i32 to f32
    %279 = llvm.extractvalue %62[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %280 = llvm.mlir.constant(32 : index) : i64
    %281 = llvm.mul %265, %280 overflow<nsw, nuw> : i64
    %282 = llvm.add %281, %270 overflow<nsw, nuw> : i64
    %283 = llvm.getelementptr inbounds|nuw %279[%282] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    llvm.store %278, %283 : f32, !llvm.ptr
    %284 = llvm.add %270, %9 : i64
    llvm.br ^bb45(%284 : i64)
  ^bb47:  // pred: ^bb45
    llvm.br ^bb52
  ^bb48:  // pred: ^bb43
    llvm.br ^bb49(%10 : i64)
  ^bb49(%285: i64):  // 2 preds: ^bb48, ^bb50
    %286 = llvm.icmp "slt" %285, %8 : i64
    llvm.cond_br %286, ^bb50, ^bb51
  ^bb50:  // pred: ^bb49
    %287 = llvm.extractvalue %62[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %288 = llvm.mlir.constant(32 : index) : i64
    %289 = llvm.mul %265, %288 overflow<nsw, nuw> : i64
    %290 = llvm.add %289, %285 overflow<nsw, nuw> : i64
    %291 = llvm.getelementptr inbounds|nuw %287[%290] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    llvm.store %19, %291 : f32, !llvm.ptr
    %292 = llvm.add %285, %9 : i64
    llvm.br ^bb49(%292 : i64)
  ^bb51:  // pred: ^bb49
    llvm.br ^bb52
  ^bb52:  // 2 preds: ^bb47, ^bb51
    %293 = llvm.add %265, %9 : i64
    llvm.br ^bb42(%293 : i64)
  ^bb53:  // pred: ^bb42
    llvm.br ^bb54(%10 : i64)
  ^bb54(%294: i64):  // 2 preds: ^bb53, ^bb61
    %295 = llvm.icmp "slt" %294, %11 : i64
    llvm.cond_br %295, ^bb55, ^bb62
  ^bb55:  // pred: ^bb54
    llvm.br ^bb56(%10 : i64)
  ^bb56(%296: i64):  // 2 preds: ^bb55, ^bb60
    %297 = llvm.icmp "slt" %296, %11 : i64
    llvm.cond_br %297, ^bb57, ^bb61
  ^bb57:  // pred: ^bb56
    llvm.br ^bb58(%10, %19 : i64, f32)
  ^bb58(%298: i64, %299: f32):  // 2 preds: ^bb57, ^bb59
    %300 = llvm.icmp "slt" %298, %8 : i64
    llvm.cond_br %300, ^bb59, ^bb60
  ^bb59:  // pred: ^bb58
    %301 = llvm.extractvalue %48[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %302 = llvm.mlir.constant(32 : index) : i64
    %303 = llvm.mul %296, %302 overflow<nsw, nuw> : i64
    %304 = llvm.add %303, %298 overflow<nsw, nuw> : i64
    %305 = llvm.getelementptr inbounds|nuw %301[%304] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %306 = llvm.load %305 : !llvm.ptr -> f32
    %307 = llvm.extractvalue %34[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %308 = llvm.mlir.constant(32 : index) : i64
    %309 = llvm.mul %294, %308 overflow<nsw, nuw> : i64
    %310 = llvm.add %309, %298 overflow<nsw, nuw> : i64
    %311 = llvm.getelementptr inbounds|nuw %307[%310] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %312 = llvm.load %311 : !llvm.ptr -> f32
    %313 = llvm.fmul %312, %306 {fastmathFlags = #llvm.fastmath<reassoc>} : f32
    %314 = llvm.fadd %299, %313 {fastmathFlags = #llvm.fastmath<reassoc>} : f32
    %315 = llvm.add %298, %9 : i64
    llvm.br ^bb58(%315, %314 : i64, f32)
  ^bb60:  // pred: ^bb58
    %316 = llvm.fmul %299, %6 : f32
    %317 = llvm.extractvalue %76[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %318 = llvm.mlir.constant(64 : index) : i64
    %319 = llvm.mul %294, %318 overflow<nsw, nuw> : i64
    %320 = llvm.add %319, %296 overflow<nsw, nuw> : i64
    %321 = llvm.getelementptr inbounds|nuw %317[%320] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    llvm.store %316, %321 : f32, !llvm.ptr
    %322 = llvm.add %296, %9 : i64
    llvm.br ^bb56(%322 : i64)
  ^bb61:  // pred: ^bb56
    %323 = llvm.add %294, %9 : i64
    llvm.br ^bb54(%323 : i64)
  ^bb62:  // pred: ^bb54
    llvm.cond_br %226, ^bb63, ^bb74
  ^bb63:  // pred: ^bb62
    llvm.br ^bb64(%10 : i64)
  ^bb64(%324: i64):  // 2 preds: ^bb63, ^bb72
    %325 = llvm.icmp "slt" %324, %11 : i64
    llvm.cond_br %325, ^bb65, ^bb73
  ^bb65:  // pred: ^bb64
    llvm.br ^bb66(%10 : i64)
  ^bb66(%326: i64):  // 2 preds: ^bb65, ^bb71
    %327 = llvm.icmp "slt" %326, %11 : i64
    llvm.cond_br %327, ^bb67, ^bb72
  ^bb67:  // pred: ^bb66
    %328 = llvm.icmp "slt" %326, %199 : i64
    %329 = llvm.icmp "slt" %324, %141 : i64
    %330 = llvm.and %329, %328 : i1
    llvm.cond_br %330, ^bb68, ^bb69
  ^bb68:  // pred: ^bb67
    %331 = llvm.add %137, %324 : i64
    %332 = llvm.trunc %331 : i64 to i32
    %333 = llvm.add %197, %326 : i64
    %334 = llvm.trunc %333 : i64 to i32
    %335 = llvm.trunc %arg8 : i64 to i32
    %336 = llvm.trunc %arg9 : i64 to i32
    %337 = llvm.sub %336, %335 : i32
    %338 = llvm.add %332, %337 : i32
    %339 = llvm.icmp "sle" %334, %338 : i32
    llvm.br ^bb70(%339 : i1)
  ^bb69:  // pred: ^bb67
    llvm.br ^bb70(%5 : i1)
  ^bb70(%340: i1):  // 2 preds: ^bb68, ^bb69
    llvm.br ^bb71
  ^bb71:  // pred: ^bb70
    %341 = llvm.extractvalue %76[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %342 = llvm.mlir.constant(64 : index) : i64
    %343 = llvm.mul %324, %342 overflow<nsw, nuw> : i64
    %344 = llvm.add %343, %326 overflow<nsw, nuw> : i64
    %345 = llvm.getelementptr inbounds|nuw %341[%344] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %346 = llvm.load %345 : !llvm.ptr -> f32
    %347 = llvm.select %340, %346, %20 : i1, f32
    %348 = llvm.extractvalue %76[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %349 = llvm.mlir.constant(64 : index) : i64
    %350 = llvm.mul %324, %349 overflow<nsw, nuw> : i64
    %351 = llvm.add %350, %326 overflow<nsw, nuw> : i64
    %352 = llvm.getelementptr inbounds|nuw %348[%351] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    llvm.store %347, %352 : f32, !llvm.ptr
    %353 = llvm.add %326, %9 : i64
    llvm.br ^bb66(%353 : i64)
  ^bb72:  // pred: ^bb66
    %354 = llvm.add %324, %9 : i64
    llvm.br ^bb64(%354 : i64)
  ^bb73:  // pred: ^bb64
    llvm.br ^bb81
  ^bb74:  // pred: ^bb62
    llvm.br ^bb75(%10 : i64)
  ^bb75(%355: i64):  // 2 preds: ^bb74, ^bb79
    %356 = llvm.icmp "slt" %355, %11 : i64
    llvm.cond_br %356, ^bb76, ^bb80
  ^bb76:  // pred: ^bb75
    %357 = llvm.icmp "slt" %355, %141 : i64
    %358 = llvm.select %357, %199, %10 : i1, i64
    llvm.br ^bb77(%358 : i64)
  ^bb77(%359: i64):  // 2 preds: ^bb76, ^bb78
    %360 = llvm.icmp "slt" %359, %11 : i64
    llvm.cond_br %360, ^bb78, ^bb79
  ^bb78:  // pred: ^bb77
    %361 = llvm.extractvalue %76[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %362 = llvm.mlir.constant(64 : index) : i64
    %363 = llvm.mul %355, %362 overflow<nsw, nuw> : i64
    %364 = llvm.add %363, %359 overflow<nsw, nuw> : i64
    %365 = llvm.getelementptr inbounds|nuw %361[%364] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    llvm.store %20, %365 : f32, !llvm.ptr
    %366 = llvm.add %359, %9 : i64
    llvm.br ^bb77(%366 : i64)
  ^bb79:  // pred: ^bb77
    %367 = llvm.add %355, %9 : i64
    llvm.br ^bb75(%367 : i64)
  ^bb80:  // pred: ^bb75
    llvm.br ^bb81
  ^bb81:  // 2 preds: ^bb73, ^bb80
    llvm.br ^bb82(%10 : i64)
  ^bb82(%368: i64):  // 2 preds: ^bb81, ^bb86
    %369 = llvm.icmp "slt" %368, %11 : i64
    llvm.cond_br %369, ^bb83, ^bb87
  ^bb83:  // pred: ^bb82
    %370 = llvm.extractvalue %100[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %371 = llvm.getelementptr inbounds|nuw %370[%368] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %372 = llvm.load %371 : !llvm.ptr -> f32
    llvm.br ^bb84(%10, %372 : i64, f32)
  ^bb84(%373: i64, %374: f32):  // 2 preds: ^bb83, ^bb85
    %375 = llvm.icmp "slt" %373, %11 : i64
    llvm.cond_br %375, ^bb85, ^bb86
  ^bb85:  // pred: ^bb84
    %376 = llvm.extractvalue %76[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %377 = llvm.mlir.constant(64 : index) : i64
    %378 = llvm.mul %368, %377 overflow<nsw, nuw> : i64
    %379 = llvm.add %378, %373 overflow<nsw, nuw> : i64
    %380 = llvm.getelementptr inbounds|nuw %376[%379] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %381 = llvm.load %380 : !llvm.ptr -> f32
    %382 = llvm.intr.maximum(%374, %381) {fastmathFlags = #llvm.fastmath<reassoc>} : (f32, f32) -> f32
    %383 = llvm.add %373, %9 : i64
    llvm.br ^bb84(%383, %382 : i64, f32)
  ^bb86:  // pred: ^bb84
    %384 = llvm.extractvalue %110[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %385 = llvm.getelementptr inbounds|nuw %384[%368] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    llvm.store %374, %385 : f32, !llvm.ptr
    %386 = llvm.add %368, %9 : i64
    llvm.br ^bb82(%386 : i64)
  ^bb87:  // pred: ^bb82
    llvm.br ^bb88(%10 : i64)
  ^bb88(%387: i64):  // 2 preds: ^bb87, ^bb92
    %388 = llvm.icmp "slt" %387, %11 : i64
    llvm.cond_br %388, ^bb89, ^bb93
  ^bb89:  // pred: ^bb88
    %389 = llvm.extractvalue %110[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %390 = llvm.getelementptr inbounds|nuw %389[%387] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %391 = llvm.load %390 : !llvm.ptr -> f32
    %392 = llvm.fcmp "oeq" %391, %20 : f32
    llvm.br ^bb90(%10 : i64)
  ^bb90(%393: i64):  // 2 preds: ^bb89, ^bb91
    %394 = llvm.icmp "slt" %393, %11 : i64
    llvm.cond_br %394, ^bb91, ^bb92
  ^bb91:  // pred: ^bb90
    %395 = llvm.extractvalue %76[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %396 = llvm.mlir.constant(64 : index) : i64
    %397 = llvm.mul %387, %396 overflow<nsw, nuw> : i64
    %398 = llvm.add %397, %393 overflow<nsw, nuw> : i64
    %399 = llvm.getelementptr inbounds|nuw %395[%398] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %400 = llvm.load %399 : !llvm.ptr -> f32
    %401 = llvm.fsub %400, %391 : f32
    %402 = llvm.intr.exp2(%401) : (f32) -> f32
    %403 = llvm.select %392, %19, %402 : i1, f32
    %404 = llvm.extractvalue %76[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %405 = llvm.mlir.constant(64 : index) : i64
    %406 = llvm.mul %387, %405 overflow<nsw, nuw> : i64
    %407 = llvm.add %406, %393 overflow<nsw, nuw> : i64
    %408 = llvm.getelementptr inbounds|nuw %404[%407] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    llvm.store %403, %408 : f32, !llvm.ptr
    %409 = llvm.add %393, %9 : i64
    llvm.br ^bb90(%409 : i64)
  ^bb92:  // pred: ^bb90
    %410 = llvm.add %387, %9 : i64
    llvm.br ^bb88(%410 : i64)
  ^bb93:  // pred: ^bb88
    llvm.br ^bb94(%10 : i64)
  ^bb94(%411: i64):  // 2 preds: ^bb93, ^bb95
    %412 = llvm.icmp "slt" %411, %11 : i64
    llvm.cond_br %412, ^bb95, ^bb96
  ^bb95:  // pred: ^bb94
    %413 = llvm.extractvalue %110[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %414 = llvm.getelementptr inbounds|nuw %413[%411] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %415 = llvm.load %414 : !llvm.ptr -> f32
    %416 = llvm.fcmp "oeq" %415, %20 : f32
    %417 = llvm.extractvalue %100[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %418 = llvm.getelementptr inbounds|nuw %417[%411] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %419 = llvm.load %418 : !llvm.ptr -> f32
    %420 = llvm.fsub %419, %415 : f32
    %421 = llvm.intr.exp2(%420) : (f32) -> f32
    %422 = llvm.select %416, %19, %421 : i1, f32
    %423 = llvm.extractvalue %130[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %424 = llvm.getelementptr inbounds|nuw %423[%411] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    llvm.store %422, %424 : f32, !llvm.ptr
    %425 = llvm.add %411, %9 : i64
    llvm.br ^bb94(%425 : i64)
  ^bb96:  // pred: ^bb94
    llvm.br ^bb97(%10 : i64)
  ^bb97(%426: i64):  // 2 preds: ^bb96, ^bb98
    %427 = llvm.icmp "slt" %426, %11 : i64
    llvm.cond_br %427, ^bb98, ^bb99
  ^bb98:  // pred: ^bb97
    %428 = llvm.extractvalue %130[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %429 = llvm.getelementptr inbounds|nuw %428[%426] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %430 = llvm.load %429 : !llvm.ptr -> f32
    %431 = llvm.extractvalue %120[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %432 = llvm.getelementptr inbounds|nuw %431[%426] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %433 = llvm.load %432 : !llvm.ptr -> f32
    %434 = llvm.fmul %433, %430 : f32
    %435 = llvm.extractvalue %120[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %436 = llvm.getelementptr inbounds|nuw %435[%426] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    llvm.store %434, %436 : f32, !llvm.ptr
    %437 = llvm.add %426, %9 : i64
    llvm.br ^bb97(%437 : i64)
  ^bb99:  // pred: ^bb97
    llvm.br ^bb100(%10 : i64)
  ^bb100(%438: i64):  // 2 preds: ^bb99, ^bb104
    %439 = llvm.icmp "slt" %438, %11 : i64
    llvm.cond_br %439, ^bb101, ^bb105
  ^bb101:  // pred: ^bb100
    llvm.br ^bb102(%10, %19 : i64, f32)
  ^bb102(%440: i64, %441: f32):  // 2 preds: ^bb101, ^bb103
    %442 = llvm.icmp "slt" %440, %11 : i64
    llvm.cond_br %442, ^bb103, ^bb104
  ^bb103:  // pred: ^bb102
    %443 = llvm.extractvalue %76[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %444 = llvm.mlir.constant(64 : index) : i64
    %445 = llvm.mul %438, %444 overflow<nsw, nuw> : i64
    %446 = llvm.add %445, %440 overflow<nsw, nuw> : i64
    %447 = llvm.getelementptr inbounds|nuw %443[%446] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %448 = llvm.load %447 : !llvm.ptr -> f32
    %449 = llvm.fadd %441, %448 {fastmathFlags = #llvm.fastmath<reassoc>} : f32
    %450 = llvm.add %440, %9 : i64
    llvm.br ^bb102(%450, %449 : i64, f32)
  ^bb104:  // pred: ^bb102
    %451 = llvm.extractvalue %120[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %452 = llvm.getelementptr inbounds|nuw %451[%438] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %453 = llvm.load %452 : !llvm.ptr -> f32
    %454 = llvm.fadd %453, %441 : f32
    %455 = llvm.extractvalue %120[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %456 = llvm.getelementptr inbounds|nuw %455[%438] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    llvm.store %454, %456 : f32, !llvm.ptr
    %457 = llvm.add %438, %9 : i64
    llvm.br ^bb100(%457 : i64)
  ^bb105:  // pred: ^bb100
    llvm.br ^bb106(%10 : i64)
  ^bb106(%458: i64):  // 2 preds: ^bb105, ^bb110
    %459 = llvm.icmp "slt" %458, %11 : i64
    llvm.cond_br %459, ^bb107, ^bb111
  ^bb107:  // pred: ^bb106
    %460 = llvm.extractvalue %130[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %461 = llvm.getelementptr inbounds|nuw %460[%458] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %462 = llvm.load %461 : !llvm.ptr -> f32
    llvm.br ^bb108(%10 : i64)
  ^bb108(%463: i64):  // 2 preds: ^bb107, ^bb109
    %464 = llvm.icmp "slt" %463, %8 : i64
    llvm.cond_br %464, ^bb109, ^bb110
  ^bb109:  // pred: ^bb108
    %465 = llvm.extractvalue %90[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %466 = llvm.mlir.constant(32 : index) : i64
    %467 = llvm.mul %458, %466 overflow<nsw, nuw> : i64
    %468 = llvm.add %467, %463 overflow<nsw, nuw> : i64
    %469 = llvm.getelementptr inbounds|nuw %465[%468] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %470 = llvm.load %469 : !llvm.ptr -> f32
    %471 = llvm.fmul %470, %462 : f32
    %472 = llvm.extractvalue %90[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %473 = llvm.mlir.constant(32 : index) : i64
    %474 = llvm.mul %458, %473 overflow<nsw, nuw> : i64
    %475 = llvm.add %474, %463 overflow<nsw, nuw> : i64
    %476 = llvm.getelementptr inbounds|nuw %472[%475] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    llvm.store %471, %476 : f32, !llvm.ptr
    %477 = llvm.add %463, %9 : i64
    llvm.br ^bb108(%477 : i64)
  ^bb110:  // pred: ^bb108
    %478 = llvm.add %458, %9 : i64
    llvm.br ^bb106(%478 : i64)
  ^bb111:  // pred: ^bb106
    llvm.br ^bb112(%10 : i64)
  ^bb112(%479: i64):  // 2 preds: ^bb111, ^bb119
    %480 = llvm.icmp "slt" %479, %11 : i64
    llvm.cond_br %480, ^bb113, ^bb120
  ^bb113:  // pred: ^bb112
    llvm.br ^bb114(%10 : i64)
  ^bb114(%481: i64):  // 2 preds: ^bb113, ^bb118
    %482 = llvm.icmp "slt" %481, %11 : i64
    llvm.cond_br %482, ^bb115, ^bb119
  ^bb115:  // pred: ^bb114
    %483 = llvm.extractvalue %76[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %484 = llvm.mlir.constant(64 : index) : i64
    %485 = llvm.mul %479, %484 overflow<nsw, nuw> : i64
    %486 = llvm.add %485, %481 overflow<nsw, nuw> : i64
    %487 = llvm.getelementptr inbounds|nuw %483[%486] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %488 = llvm.load %487 : !llvm.ptr -> f32
    llvm.br ^bb116(%10 : i64)
  ^bb116(%489: i64):  // 2 preds: ^bb115, ^bb117
    %490 = llvm.icmp "slt" %489, %8 : i64
    llvm.cond_br %490, ^bb117, ^bb118
  ^bb117:  // pred: ^bb116
    %491 = llvm.extractvalue %62[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %492 = llvm.mlir.constant(32 : index) : i64
    %493 = llvm.mul %481, %492 overflow<nsw, nuw> : i64
    %494 = llvm.add %493, %489 overflow<nsw, nuw> : i64
    %495 = llvm.getelementptr inbounds|nuw %491[%494] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %496 = llvm.load %495 : !llvm.ptr -> f32
    %497 = llvm.fmul %488, %496 : f32
    %498 = llvm.extractvalue %90[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %499 = llvm.mlir.constant(32 : index) : i64
    %500 = llvm.mul %479, %499 overflow<nsw, nuw> : i64
    %501 = llvm.add %500, %489 overflow<nsw, nuw> : i64
    %502 = llvm.getelementptr inbounds|nuw %498[%501] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %503 = llvm.load %502 : !llvm.ptr -> f32
    %504 = llvm.fadd %503, %497 : f32
    %505 = llvm.extractvalue %90[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %506 = llvm.mlir.constant(32 : index) : i64
    %507 = llvm.mul %479, %506 overflow<nsw, nuw> : i64
    %508 = llvm.add %507, %489 overflow<nsw, nuw> : i64
    %509 = llvm.getelementptr inbounds|nuw %505[%508] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    llvm.store %504, %509 : f32, !llvm.ptr
    %510 = llvm.add %489, %9 : i64
    llvm.br ^bb116(%510 : i64)
  ^bb118:  // pred: ^bb116
    %511 = llvm.add %481, %9 : i64
    llvm.br ^bb114(%511 : i64)
  ^bb119:  // pred: ^bb114
    %512 = llvm.add %479, %9 : i64
    llvm.br ^bb112(%512 : i64)
  ^bb120:  // pred: ^bb112
    %513 = llvm.mlir.constant(1 : index) : i64
    %514 = llvm.extractvalue %110[3, 0] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %515 = llvm.mul %513, %514 : i64
    %516 = llvm.mlir.zero : !llvm.ptr
    %517 = llvm.getelementptr %516[1] : (!llvm.ptr) -> !llvm.ptr, f32
    %518 = llvm.ptrtoint %517 : !llvm.ptr to i64
    %519 = llvm.mul %515, %518 : i64
    %520 = llvm.extractvalue %110[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %521 = llvm.extractvalue %110[2] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %522 = llvm.getelementptr %520[%521] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %523 = llvm.extractvalue %100[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %524 = llvm.extractvalue %100[2] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %525 = llvm.getelementptr %523[%524] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    "llvm.intr.memcpy"(%525, %522, %519) <{isVolatile = false}> : (!llvm.ptr, !llvm.ptr, i64) -> ()
    llvm.br ^bb121
  ^bb121:  // 2 preds: ^bb28, ^bb120
    %526 = llvm.add %195, %16 : i64
    llvm.br ^bb27(%526 : i64)
  ^bb122:  // pred: ^bb27
    %527 = llvm.mul %137, %arg24 : i64
    %528 = llvm.mul %136, %arg22 : i64
    %529 = llvm.add %528, %527 : i64
    llvm.br ^bb123(%10 : i64)
  ^bb123(%530: i64):  // 2 preds: ^bb122, ^bb127
    %531 = llvm.icmp "slt" %530, %141 : i64
    llvm.cond_br %531, ^bb124, ^bb128
  ^bb124:  // pred: ^bb123
    %532 = llvm.extractvalue %120[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %533 = llvm.getelementptr inbounds|nuw %532[%530] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %534 = llvm.load %533 : !llvm.ptr -> f32
    %535 = llvm.fcmp "oeq" %534, %19 : f32
    %536 = llvm.fdiv %4, %534 : f32
    %537 = llvm.select %535, %19, %536 : i1, f32
    %538 = llvm.mul %530, %arg24 : i64
    %539 = llvm.add %529, %538 : i64
    llvm.br ^bb125(%10 : i64)
  ^bb125(%540: i64):  // 2 preds: ^bb124, ^bb126
    %541 = llvm.icmp "slt" %540, %8 : i64
    llvm.cond_br %541, ^bb126, ^bb127
  ^bb126:  // pred: ^bb125
    %542 = llvm.extractvalue %90[1] : !llvm.struct<(ptr, ptr, i64, array<2 x i64>, array<2 x i64>)> 
    %543 = llvm.mlir.constant(32 : index) : i64
    %544 = llvm.mul %530, %543 overflow<nsw, nuw> : i64
    %545 = llvm.add %544, %540 overflow<nsw, nuw> : i64
    %546 = llvm.getelementptr inbounds|nuw %542[%545] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %547 = llvm.load %546 : !llvm.ptr -> f32
    %548 = llvm.fmul %547, %537 : f32
    %549 = llvm.mul %540, %arg25 : i64
    %550 = llvm.add %539, %549 : i64
    %551 = llvm.getelementptr %arg3[%550] : (!llvm.ptr, i64) -> !llvm.ptr, bf16
    %552 = llvm.bitcast %548 : f32 to i32
    %553 = llvm.lshr %552, %7 : i32
    %554 = llvm.and %553, %3 : i32
    %555 = llvm.add %554, %2 : i32
    %556 = llvm.add %552, %555 : i32
    %557 = llvm.lshr %556, %7 : i32
    %558 = llvm.fcmp "uno" %548, %548 : f32
    %559 = llvm.select %558, %1, %557 : i1, i32
    %560 = llvm.trunc %559 : i32 to i16
    llvm.store %560, %551 : i16, !llvm.ptr
    %561 = llvm.add %540, %9 : i64
    llvm.br ^bb125(%561 : i64)
  ^bb127:  // pred: ^bb125
    %562 = llvm.add %530, %9 : i64
    llvm.br ^bb123(%562 : i64)
  ^bb128:  // pred: ^bb123
    %563 = llvm.mul %137, %arg28 : i64
    %564 = llvm.mul %136, %arg26 : i64
    %565 = llvm.add %564, %563 : i64
    llvm.br ^bb129(%10 : i64)
  ^bb129(%566: i64):  // 2 preds: ^bb128, ^bb130
    %567 = llvm.icmp "slt" %566, %141 : i64
    llvm.cond_br %567, ^bb130, ^bb131
  ^bb130:  // pred: ^bb129
    %568 = llvm.extractvalue %120[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %569 = llvm.getelementptr inbounds|nuw %568[%566] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %570 = llvm.load %569 : !llvm.ptr -> f32
    %571 = llvm.fcmp "oeq" %570, %19 : f32
    %572 = llvm.intr.log2(%570) : (f32) -> f32
    %573 = llvm.extractvalue %100[1] : !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)> 
    %574 = llvm.getelementptr inbounds|nuw %573[%566] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    %575 = llvm.load %574 : !llvm.ptr -> f32
    %576 = llvm.fadd %575, %572 : f32
    %577 = llvm.fmul %576, %0 : f32
    %578 = llvm.mul %566, %arg28 : i64
    %579 = llvm.add %565, %578 : i64
    %580 = llvm.select %571, %20, %577 : i1, f32
    %581 = llvm.getelementptr %arg4[%579] : (!llvm.ptr, i64) -> !llvm.ptr, f32
    llvm.store %580, %581 : f32, !llvm.ptr
    %582 = llvm.add %566, %9 : i64
    llvm.br ^bb129(%582 : i64)
  ^bb131:  // pred: ^bb129
    %583 = llvm.add %133, %16 : i64
    llvm.br ^bb1(%583 : i64)
  ^bb132:  // pred: ^bb1
    llvm.return
  }
}
