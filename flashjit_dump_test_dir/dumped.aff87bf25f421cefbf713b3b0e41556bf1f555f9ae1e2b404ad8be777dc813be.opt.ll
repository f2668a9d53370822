; ModuleID = 'flashjit_dumped'
source_filename = "flashjit_dumped"
target datalayout = "e-m:e-p270:32:32-p271:32:32-p272:64:64-i64:64-i128:128-f80:128-n8:16:32:64-S128"
target triple = "x86_64-pc-linux-gnu"

; Function Attrs: nofree norecurse nosync nounwind memory(argmem: readwrite)
define void @flashjit_dumped(ptr readonly captures(none) %0, ptr readonly captures(none) %1, ptr readonly captures(none) %2, ptr writeonly captures(none) %3, ptr writeonly captures(none) %4, ptr readnone captures(none) %5, ptr readnone captures(none) %6, i64 %7, i64 %8, i64 %9, i64 %10, i64 %11, i64 %12, i64 %13, i64 %14, i64 %15, i64 %16, i64 %17, i64 %18, i64 %19, i64 %20, i64 %21, i64 %22, i64 %23, i64 %24, i64 %25, i64 %26, i64 %27, i64 %28, i64 %29, i64 %30) local_unnamed_addr #0 {
  %32 = alloca [2048 x float], align 64
  %33 = alloca [2048 x float], align 64
  %34 = alloca [2048 x float], align 64
  %35 = alloca [4096 x float], align 64
  %36 = alloca [2048 x float], align 64
  %37 = alloca [64 x float], align 64
  %38 = alloca [64 x float], align 64
  %39 = alloca [64 x float], align 64
  %40 = alloca [64 x float], align 64
  %41 = add i64 %8, 63
  %42 = sdiv i64 %41, 64
  %43 = icmp slt i64 %29, %30
  br i1 %43, label %.lr.ph99, label %._crit_edge100

.lr.ph99:                                         ; preds = %31
  %44 = add i64 %9, 63
  %45 = sdiv i64 %44, 64
  %46 = icmp sgt i64 %44, 63
  %47 = sext i64 %9 to i128
  %48 = sext i64 %8 to i128
  %49 = sub nsw i128 %47, %48
  %50 = add nsw i128 %49, -2147483648
  %51 = icmp ult i128 %50, -4294967296
  %52 = shl i128 %49, 64
  %53 = ashr exact i128 %52, 64
  %54 = trunc i64 %8 to i32
  %55 = trunc i64 %9 to i32
  %56 = sub i32 %55, %54
  %ident.check349.not = icmp eq i64 %13, 1
  %57 = getelementptr inbounds nuw i8, ptr %37, i64 32
  %58 = getelementptr inbounds nuw i8, ptr %37, i64 64
  %59 = getelementptr inbounds nuw i8, ptr %37, i64 96
  %60 = getelementptr inbounds nuw i8, ptr %37, i64 128
  %61 = getelementptr inbounds nuw i8, ptr %37, i64 160
  %62 = getelementptr inbounds nuw i8, ptr %37, i64 192
  %63 = getelementptr inbounds nuw i8, ptr %37, i64 224
  %ident.check333.not = icmp eq i64 %17, 1
  %ident.check323.not = icmp eq i64 %21, 1
  %64 = getelementptr inbounds nuw i8, ptr %40, i64 32
  %65 = getelementptr inbounds nuw i8, ptr %40, i64 64
  %66 = getelementptr inbounds nuw i8, ptr %40, i64 96
  %67 = getelementptr inbounds nuw i8, ptr %39, i64 32
  %68 = getelementptr inbounds nuw i8, ptr %39, i64 64
  %69 = getelementptr inbounds nuw i8, ptr %39, i64 96
  %70 = getelementptr inbounds nuw i8, ptr %40, i64 128
  %71 = getelementptr inbounds nuw i8, ptr %40, i64 160
  %72 = getelementptr inbounds nuw i8, ptr %40, i64 192
  %73 = getelementptr inbounds nuw i8, ptr %40, i64 224
  %74 = getelementptr inbounds nuw i8, ptr %39, i64 128
  %75 = getelementptr inbounds nuw i8, ptr %39, i64 160
  %76 = getelementptr inbounds nuw i8, ptr %39, i64 192
  %77 = getelementptr inbounds nuw i8, ptr %39, i64 224
  %ident.check172.not = icmp eq i64 %25, 1
  %ident.check.not = icmp eq i64 %28, 1
  br label %78

78:                                               ; preds = %.lr.ph99, %._crit_edge97
  %79 = phi i64 [ %29, %.lr.ph99 ], [ %763, %._crit_edge97 ]
  %80 = srem i64 %79, %42
  %81 = sdiv i64 %79, %42
  %82 = shl nsw i64 %80, 6
  %83 = sub i64 %8, %82
  %84 = mul i64 %82, %12
  %85 = mul i64 %81, %10
  %86 = getelementptr bfloat, ptr %0, i64 %85
  %87 = getelementptr bfloat, ptr %86, i64 %84
  br label %88

88:                                               ; preds = %78, %.loopexit82
  %89 = phi i64 [ 0, %78 ], [ %165, %.loopexit82 ]
  %90 = shl nuw nsw i64 %89, 7
  %scevgep = getelementptr i8, ptr %32, i64 %90
  %91 = icmp sgt i64 %83, %89
  br i1 %91, label %vector.scevcheck348, label %.preheader83

.preheader83:                                     ; preds = %88
  call void @llvm.memset.p0.i64(ptr noundef nonnull align 64 dereferenceable(128) %scevgep, i8 0, i64 128, i1 false)
  br label %.loopexit82

vector.scevcheck348:                              ; preds = %88
  %92 = mul i64 %89, %12
  %93 = getelementptr bfloat, ptr %87, i64 %92
  br i1 %ident.check349.not, label %vector.body352, label %scalar.ph350

vector.body352:                                   ; preds = %vector.scevcheck348
  %94 = getelementptr i8, ptr %93, i64 16
  %95 = getelementptr i8, ptr %93, i64 32
  %96 = getelementptr i8, ptr %93, i64 48
  %wide.load353 = load <8 x i16>, ptr %93, align 2
  %wide.load354 = load <8 x i16>, ptr %94, align 2
  %wide.load355 = load <8 x i16>, ptr %95, align 2
  %wide.load356 = load <8 x i16>, ptr %96, align 2
  %97 = zext <8 x i16> %wide.load353 to <8 x i32>
  %98 = zext <8 x i16> %wide.load354 to <8 x i32>
  %99 = zext <8 x i16> %wide.load355 to <8 x i32>
  %100 = zext <8 x i16> %wide.load356 to <8 x i32>
  %101 = shl nuw <8 x i32> %97, splat (i32 16)
  %102 = shl nuw <8 x i32> %98, splat (i32 16)
  %103 = shl nuw <8 x i32> %99, splat (i32 16)
  %104 = shl nuw <8 x i32> %100, splat (i32 16)
  %105 = getelementptr inbounds nuw i8, ptr %scevgep, i64 32
  %106 = getelementptr inbounds nuw i8, ptr %scevgep, i64 64
  %107 = getelementptr inbounds nuw i8, ptr %scevgep, i64 96
  store <8 x i32> %101, ptr %scevgep, align 64
  store <8 x i32> %102, ptr %105, align 32
  store <8 x i32> %103, ptr %106, align 64
  store <8 x i32> %104, ptr %107, align 32
  br label %.loopexit82

scalar.ph350:                                     ; preds = %vector.scevcheck348, %scalar.ph350
  %108 = phi i64 [ %164, %scalar.ph350 ], [ 0, %vector.scevcheck348 ]
  %109 = mul i64 %108, %13
  %110 = getelementptr bfloat, ptr %93, i64 %109
  %111 = load i16, ptr %110, align 2
  %112 = zext i16 %111 to i32
  %113 = shl nuw i32 %112, 16
  %114 = getelementptr inbounds nuw float, ptr %scevgep, i64 %108
  store i32 %113, ptr %114, align 32
  %115 = or disjoint i64 %108, 1
  %116 = mul i64 %115, %13
  %117 = getelementptr bfloat, ptr %93, i64 %116
  %118 = load i16, ptr %117, align 2
  %119 = zext i16 %118 to i32
  %120 = shl nuw i32 %119, 16
  %121 = getelementptr inbounds nuw float, ptr %scevgep, i64 %115
  store i32 %120, ptr %121, align 4
  %122 = or disjoint i64 %108, 2
  %123 = mul i64 %122, %13
  %124 = getelementptr bfloat, ptr %93, i64 %123
  %125 = load i16, ptr %124, align 2
  %126 = zext i16 %125 to i32
  %127 = shl nuw i32 %126, 16
  %128 = getelementptr inbounds nuw float, ptr %scevgep, i64 %122
  store i32 %127, ptr %128, align 8
  %129 = or disjoint i64 %108, 3
  %130 = mul i64 %129, %13
  %131 = getelementptr bfloat, ptr %93, i64 %130
  %132 = load i16, ptr %131, align 2
  %133 = zext i16 %132 to i32
  %134 = shl nuw i32 %133, 16
  %135 = getelementptr inbounds nuw float, ptr %scevgep, i64 %129
  store i32 %134, ptr %135, align 4
  %136 = or disjoint i64 %108, 4
  %137 = mul i64 %136, %13
  %138 = getelementptr bfloat, ptr %93, i64 %137
  %139 = load i16, ptr %138, align 2
  %140 = zext i16 %139 to i32
  %141 = shl nuw i32 %140, 16
  %142 = getelementptr inbounds nuw float, ptr %scevgep, i64 %136
  store i32 %141, ptr %142, align 16
  %143 = or disjoint i64 %108, 5
  %144 = mul i64 %143, %13
  %145 = getelementptr bfloat, ptr %93, i64 %144
  %146 = load i16, ptr %145, align 2
  %147 = zext i16 %146 to i32
  %148 = shl nuw i32 %147, 16
  %149 = getelementptr inbounds nuw float, ptr %scevgep, i64 %143
  store i32 %148, ptr %149, align 4
  %150 = or disjoint i64 %108, 6
  %151 = mul i64 %150, %13
  %152 = getelementptr bfloat, ptr %93, i64 %151
  %153 = load i16, ptr %152, align 2
  %154 = zext i16 %153 to i32
  %155 = shl nuw i32 %154, 16
  %156 = getelementptr inbounds nuw float, ptr %scevgep, i64 %150
  store i32 %155, ptr %156, align 8
  %157 = or disjoint i64 %108, 7
  %158 = mul i64 %157, %13
  %159 = getelementptr bfloat, ptr %93, i64 %158
  %160 = load i16, ptr %159, align 2
  %161 = zext i16 %160 to i32
  %162 = shl nuw i32 %161, 16
  %163 = getelementptr inbounds nuw float, ptr %scevgep, i64 %157
  store i32 %162, ptr %163, align 4
  %164 = add nuw nsw i64 %108, 8
  %exitcond.not.7 = icmp eq i64 %164, 32
  br i1 %exitcond.not.7, label %.loopexit82, label %scalar.ph350, !llvm.loop !1

.loopexit82:                                      ; preds = %scalar.ph350, %vector.body352, %.preheader83
  %165 = add nuw nsw i64 %89, 1
  %exitcond107.not = icmp eq i64 %165, 64
  br i1 %exitcond107.not, label %.preheader81.preheader, label %88

.preheader81.preheader:                           ; preds = %.loopexit82
  call void @llvm.memset.p0.i64(ptr noundef nonnull align 64 dereferenceable(8192) %36, i8 0, i64 8192, i1 false)
  store <8 x float> splat (float 0xFFF0000000000000), ptr %37, align 64
  store <8 x float> splat (float 0xFFF0000000000000), ptr %57, align 32
  store <8 x float> splat (float 0xFFF0000000000000), ptr %58, align 64
  store <8 x float> splat (float 0xFFF0000000000000), ptr %59, align 32
  store <8 x float> splat (float 0xFFF0000000000000), ptr %60, align 64
  store <8 x float> splat (float 0xFFF0000000000000), ptr %61, align 32
  store <8 x float> splat (float 0xFFF0000000000000), ptr %62, align 64
  store <8 x float> splat (float 0xFFF0000000000000), ptr %63, align 32
  call void @llvm.memset.p0.i64(ptr noundef nonnull align 64 dereferenceable(256) %39, i8 0, i64 256, i1 false)
  %166 = tail call i64 @llvm.smin.i64(i64 %83, i64 64)
  br i1 %46, label %.lr.ph91, label %._crit_edge

.lr.ph91:                                         ; preds = %.preheader81.preheader
  %167 = add nsw i64 %82, -1
  %168 = add i64 %167, %166
  %169 = sext i64 %82 to i128
  %170 = sext i64 %168 to i128
  %171 = add nsw i128 %53, %170
  %172 = add nsw i128 %53, %169
  %173 = icmp sgt i128 %171, 2147483647
  %174 = icmp slt i128 %172, -2147483648
  %.not37 = or i1 %174, %173
  %175 = trunc i128 %171 to i64
  %176 = trunc i128 %172 to i64
  %.not35 = or i1 %51, %.not37
  %177 = mul i64 %81, %14
  %178 = mul i64 %81, %18
  %179 = getelementptr bfloat, ptr %1, i64 %177
  %180 = getelementptr bfloat, ptr %2, i64 %178
  br label %181

181:                                              ; preds = %.lr.ph91, %592
  %182 = phi i64 [ 0, %.lr.ph91 ], [ %593, %592 ]
  %183 = shl i64 %182, 6
  %184 = sub i64 %9, %183
  %185 = tail call i64 @llvm.smin.i64(i64 %184, i64 64)
  %186 = add nsw i64 %183, -1
  %187 = add i64 %186, %185
  %188 = icmp sgt i64 %187, %176
  %189 = icmp sle i64 %183, %175
  %190 = or i1 %.not35, %188
  %.not = xor i1 %188, true
  %191 = or i1 %189, %.not
  %192 = or i1 %.not35, %191
  br i1 %192, label %193, label %592

193:                                              ; preds = %181
  %194 = mul i64 %183, %16
  %195 = getelementptr bfloat, ptr %179, i64 %194
  br label %198

.preheader80:                                     ; preds = %.loopexit66
  %196 = mul i64 %183, %20
  %197 = getelementptr bfloat, ptr %180, i64 %196
  br label %276

198:                                              ; preds = %193, %.loopexit66
  %199 = phi i64 [ 0, %193 ], [ %275, %.loopexit66 ]
  %200 = shl nuw nsw i64 %199, 7
  %scevgep110 = getelementptr i8, ptr %33, i64 %200
  %201 = icmp sgt i64 %184, %199
  br i1 %201, label %vector.scevcheck332, label %.preheader67

.preheader67:                                     ; preds = %198
  call void @llvm.memset.p0.i64(ptr noundef nonnull align 64 dereferenceable(128) %scevgep110, i8 0, i64 128, i1 false)
  br label %.loopexit66

vector.scevcheck332:                              ; preds = %198
  %202 = mul i64 %199, %16
  %203 = getelementptr bfloat, ptr %195, i64 %202
  br i1 %ident.check333.not, label %vector.body336, label %scalar.ph334

vector.body336:                                   ; preds = %vector.scevcheck332
  %204 = getelementptr i8, ptr %203, i64 16
  %205 = getelementptr i8, ptr %203, i64 32
  %206 = getelementptr i8, ptr %203, i64 48
  %wide.load337 = load <8 x i16>, ptr %203, align 2
  %wide.load338 = load <8 x i16>, ptr %204, align 2
  %wide.load339 = load <8 x i16>, ptr %205, align 2
  %wide.load340 = load <8 x i16>, ptr %206, align 2
  %207 = zext <8 x i16> %wide.load337 to <8 x i32>
  %208 = zext <8 x i16> %wide.load338 to <8 x i32>
  %209 = zext <8 x i16> %wide.load339 to <8 x i32>
  %210 = zext <8 x i16> %wide.load340 to <8 x i32>
  %211 = shl nuw <8 x i32> %207, splat (i32 16)
  %212 = shl nuw <8 x i32> %208, splat (i32 16)
  %213 = shl nuw <8 x i32> %209, splat (i32 16)
  %214 = shl nuw <8 x i32> %210, splat (i32 16)
  %215 = getelementptr inbounds nuw i8, ptr %scevgep110, i64 32
  %216 = getelementptr inbounds nuw i8, ptr %scevgep110, i64 64
  %217 = getelementptr inbounds nuw i8, ptr %scevgep110, i64 96
  store <8 x i32> %211, ptr %scevgep110, align 64
  store <8 x i32> %212, ptr %215, align 32
  store <8 x i32> %213, ptr %216, align 64
  store <8 x i32> %214, ptr %217, align 32
  br label %.loopexit66

scalar.ph334:                                     ; preds = %vector.scevcheck332, %scalar.ph334
  %218 = phi i64 [ %274, %scalar.ph334 ], [ 0, %vector.scevcheck332 ]
  %219 = mul i64 %218, %17
  %220 = getelementptr bfloat, ptr %203, i64 %219
  %221 = load i16, ptr %220, align 2
  %222 = zext i16 %221 to i32
  %223 = shl nuw i32 %222, 16
  %224 = getelementptr inbounds nuw float, ptr %scevgep110, i64 %218
  store i32 %223, ptr %224, align 32
  %225 = or disjoint i64 %218, 1
  %226 = mul i64 %225, %17
  %227 = getelementptr bfloat, ptr %203, i64 %226
  %228 = load i16, ptr %227, align 2
  %229 = zext i16 %228 to i32
  %230 = shl nuw i32 %229, 16
  %231 = getelementptr inbounds nuw float, ptr %scevgep110, i64 %225
  store i32 %230, ptr %231, align 4
  %232 = or disjoint i64 %218, 2
  %233 = mul i64 %232, %17
  %234 = getelementptr bfloat, ptr %203, i64 %233
  %235 = load i16, ptr %234, align 2
  %236 = zext i16 %235 to i32
  %237 = shl nuw i32 %236, 16
  %238 = getelementptr inbounds nuw float, ptr %scevgep110, i64 %232
  store i32 %237, ptr %238, align 8
  %239 = or disjoint i64 %218, 3
  %240 = mul i64 %239, %17
  %241 = getelementptr bfloat, ptr %203, i64 %240
  %242 = load i16, ptr %241, align 2
  %243 = zext i16 %242 to i32
  %244 = shl nuw i32 %243, 16
  %245 = getelementptr inbounds nuw float, ptr %scevgep110, i64 %239
  store i32 %244, ptr %245, align 4
  %246 = or disjoint i64 %218, 4
  %247 = mul i64 %246, %17
  %248 = getelementptr bfloat, ptr %203, i64 %247
  %249 = load i16, ptr %248, align 2
  %250 = zext i16 %249 to i32
  %251 = shl nuw i32 %250, 16
  %252 = getelementptr inbounds nuw float, ptr %scevgep110, i64 %246
  store i32 %251, ptr %252, align 16
  %253 = or disjoint i64 %218, 5
  %254 = mul i64 %253, %17
  %255 = getelementptr bfloat, ptr %203, i64 %254
  %256 = load i16, ptr %255, align 2
  %257 = zext i16 %256 to i32
  %258 = shl nuw i32 %257, 16
  %259 = getelementptr inbounds nuw float, ptr %scevgep110, i64 %253
  store i32 %258, ptr %259, align 4
  %260 = or disjoint i64 %218, 6
  %261 = mul i64 %260, %17
  %262 = getelementptr bfloat, ptr %203, i64 %261
  %263 = load i16, ptr %262, align 2
  %264 = zext i16 %263 to i32
  %265 = shl nuw i32 %264, 16
  %266 = getelementptr inbounds nuw float, ptr %scevgep110, i64 %260
  store i32 %265, ptr %266, align 8
  %267 = or disjoint i64 %218, 7
  %268 = mul i64 %267, %17
  %269 = getelementptr bfloat, ptr %203, i64 %268
  %270 = load i16, ptr %269, align 2
  %271 = zext i16 %270 to i32
  %272 = shl nuw i32 %271, 16
  %273 = getelementptr inbounds nuw float, ptr %scevgep110, i64 %267
  store i32 %272, ptr %273, align 4
  %274 = add nuw nsw i64 %218, 8
  %exitcond111.not.7 = icmp eq i64 %274, 32
  br i1 %exitcond111.not.7, label %.loopexit66, label %scalar.ph334, !llvm.loop !3

.loopexit66:                                      ; preds = %scalar.ph334, %vector.body336, %.preheader67
  %275 = add nuw nsw i64 %199, 1
  %exitcond112.not = icmp eq i64 %275, 64
  br i1 %exitcond112.not, label %.preheader80, label %198

276:                                              ; preds = %.preheader80, %.loopexit
  %277 = phi i64 [ 0, %.preheader80 ], [ %353, %.loopexit ]
  %278 = shl nuw nsw i64 %277, 7
  %scevgep113 = getelementptr i8, ptr %34, i64 %278
  %279 = icmp sgt i64 %184, %277
  br i1 %279, label %vector.scevcheck322, label %.preheader64

.preheader64:                                     ; preds = %276
  call void @llvm.memset.p0.i64(ptr noundef nonnull align 64 dereferenceable(128) %scevgep113, i8 0, i64 128, i1 false)
  br label %.loopexit

vector.scevcheck322:                              ; preds = %276
  %280 = mul i64 %277, %20
  %281 = getelementptr bfloat, ptr %197, i64 %280
  br i1 %ident.check323.not, label %vector.body326, label %scalar.ph324

vector.body326:                                   ; preds = %vector.scevcheck322
  %282 = getelementptr i8, ptr %281, i64 16
  %283 = getelementptr i8, ptr %281, i64 32
  %284 = getelementptr i8, ptr %281, i64 48
  %wide.load327 = load <8 x i16>, ptr %281, align 2
  %wide.load328 = load <8 x i16>, ptr %282, align 2
  %wide.load329 = load <8 x i16>, ptr %283, align 2
  %wide.load330 = load <8 x i16>, ptr %284, align 2
  %285 = zext <8 x i16> %wide.load327 to <8 x i32>
  %286 = zext <8 x i16> %wide.load328 to <8 x i32>
  %287 = zext <8 x i16> %wide.load329 to <8 x i32>
  %288 = zext <8 x i16> %wide.load330 to <8 x i32>
  %289 = shl nuw <8 x i32> %285, splat (i32 16)
  %290 = shl nuw <8 x i32> %286, splat (i32 16)
  %291 = shl nuw <8 x i32> %287, splat (i32 16)
  %292 = shl nuw <8 x i32> %288, splat (i32 16)
  %293 = getelementptr inbounds nuw i8, ptr %scevgep113, i64 32
  %294 = getelementptr inbounds nuw i8, ptr %scevgep113, i64 64
  %295 = getelementptr inbounds nuw i8, ptr %scevgep113, i64 96
  store <8 x i32> %289, ptr %scevgep113, align 64
  store <8 x i32> %290, ptr %293, align 32
  store <8 x i32> %291, ptr %294, align 64
  store <8 x i32> %292, ptr %295, align 32
  br label %.loopexit

scalar.ph324:                                     ; preds = %vector.scevcheck322, %scalar.ph324
  %296 = phi i64 [ %352, %scalar.ph324 ], [ 0, %vector.scevcheck322 ]
  %297 = mul i64 %296, %21
  %298 = getelementptr bfloat, ptr %281, i64 %297
  %299 = load i16, ptr %298, align 2
  %300 = zext i16 %299 to i32
  %301 = shl nuw i32 %300, 16
  %302 = getelementptr inbounds nuw float, ptr %scevgep113, i64 %296
  store i32 %301, ptr %302, align 32
  %303 = or disjoint i64 %296, 1
  %304 = mul i64 %303, %21
  %305 = getelementptr bfloat, ptr %281, i64 %304
  %306 = load i16, ptr %305, align 2
  %307 = zext i16 %306 to i32
  %308 = shl nuw i32 %307, 16
  %309 = getelementptr inbounds nuw float, ptr %scevgep113, i64 %303
  store i32 %308, ptr %309, align 4
  %310 = or disjoint i64 %296, 2
  %311 = mul i64 %310, %21
  %312 = getelementptr bfloat, ptr %281, i64 %311
  %313 = load i16, ptr %312, align 2
  %314 = zext i16 %313 to i32
  %315 = shl nuw i32 %314, 16
  %316 = getelementptr inbounds nuw float, ptr %scevgep113, i64 %310
  store i32 %315, ptr %316, align 8
  %317 = or disjoint i64 %296, 3
  %318 = mul i64 %317, %21
  %319 = getelementptr bfloat, ptr %281, i64 %318
  %320 = load i16, ptr %319, align 2
  %321 = zext i16 %320 to i32
  %322 = shl nuw i32 %321, 16
  %323 = getelementptr inbounds nuw float, ptr %scevgep113, i64 %317
  store i32 %322, ptr %323, align 4
  %324 = or disjoint i64 %296, 4
  %325 = mul i64 %324, %21
  %326 = getelementptr bfloat, ptr %281, i64 %325
  %327 = load i16, ptr %326, align 2
  %328 = zext i16 %327 to i32
  %329 = shl nuw i32 %328, 16
  %330 = getelementptr inbounds nuw float, ptr %scevgep113, i64 %324
  store i32 %329, ptr %330, align 16
  %331 = or disjoint i64 %296, 5
  %332 = mul i64 %331, %21
  %333 = getelementptr bfloat, ptr %281, i64 %332
  %334 = load i16, ptr %333, align 2
  %335 = zext i16 %334 to i32
  %336 = shl nuw i32 %335, 16
  %337 = getelementptr inbounds nuw float, ptr %scevgep113, i64 %331
  store i32 %336, ptr %337, align 4
  %338 = or disjoint i64 %296, 6
  %339 = mul i64 %338, %21
  %340 = getelementptr bfloat, ptr %281, i64 %339
  %341 = load i16, ptr %340, align 2
  %342 = zext i16 %341 to i32
  %343 = shl nuw i32 %342, 16
  %344 = getelementptr inbounds nuw float, ptr %scevgep113, i64 %338
  store i32 %343, ptr %344, align 8
  %345 = or disjoint i64 %296, 7
  %346 = mul i64 %345, %21
  %347 = getelementptr bfloat, ptr %281, i64 %346
  %348 = load i16, ptr %347, align 2
  %349 = zext i16 %348 to i32
  %350 = shl nuw i32 %349, 16
  %351 = getelementptr inbounds nuw float, ptr %scevgep113, i64 %345
  store i32 %350, ptr %351, align 4
  %352 = add nuw nsw i64 %296, 8
  %exitcond114.not.7 = icmp eq i64 %352, 32
  br i1 %exitcond114.not.7, label %.loopexit, label %scalar.ph324, !llvm.loop !4

.loopexit:                                        ; preds = %scalar.ph324, %vector.body326, %.preheader64
  %353 = add nuw nsw i64 %277, 1
  %exitcond115.not = icmp eq i64 %353, 64
  br i1 %exitcond115.not, label %.preheader63, label %276

.preheader63:                                     ; preds = %.loopexit, %374
  %354 = phi i64 [ %375, %374 ], [ 0, %.loopexit ]
  %.idx49 = shl nuw nsw i64 %354, 7
  %355 = getelementptr inbounds nuw i8, ptr %32, i64 %.idx49
  %.idx47 = shl nuw nsw i64 %354, 8
  %356 = getelementptr inbounds nuw i8, ptr %35, i64 %.idx47
  %357 = getelementptr inbounds nuw i8, ptr %355, i64 96
  %wide.load316 = load <8 x float>, ptr %357, align 32
  %358 = getelementptr inbounds nuw i8, ptr %355, i64 64
  %wide.load315 = load <8 x float>, ptr %358, align 64
  %359 = getelementptr inbounds nuw i8, ptr %355, i64 32
  %wide.load314 = load <8 x float>, ptr %359, align 32
  %wide.load313 = load <8 x float>, ptr %355, align 64
  br label %.preheader

.preheader:                                       ; preds = %.preheader63, %.preheader
  %360 = phi i64 [ 0, %.preheader63 ], [ %373, %.preheader ]
  %.idx48 = shl nuw nsw i64 %360, 7
  %361 = getelementptr inbounds nuw i8, ptr %33, i64 %.idx48
  %362 = getelementptr inbounds nuw i8, ptr %361, i64 96
  %wide.load312 = load <8 x float>, ptr %362, align 32
  %363 = fmul reassoc <8 x float> %wide.load312, %wide.load316
  %364 = getelementptr inbounds nuw i8, ptr %361, i64 64
  %wide.load311 = load <8 x float>, ptr %364, align 64
  %365 = fmul reassoc <8 x float> %wide.load311, %wide.load315
  %366 = getelementptr inbounds nuw i8, ptr %361, i64 32
  %wide.load310 = load <8 x float>, ptr %366, align 32
  %367 = fmul reassoc <8 x float> %wide.load310, %wide.load314
  %wide.load309 = load <8 x float>, ptr %361, align 64
  %368 = fmul reassoc <8 x float> %wide.load309, %wide.load313
  %369 = fadd reassoc <8 x float> %368, <float 0.000000e+00, float -0.000000e+00, float -0.000000e+00, float -0.000000e+00, float -0.000000e+00, float -0.000000e+00, float -0.000000e+00, float -0.000000e+00>
  %bin.rdx319 = fadd reassoc <8 x float> %367, %369
  %bin.rdx320 = fadd reassoc <8 x float> %365, %bin.rdx319
  %bin.rdx321 = fadd reassoc <8 x float> %363, %bin.rdx320
  %370 = call reassoc float @llvm.vector.reduce.fadd.v8f32(float -0.000000e+00, <8 x float> %bin.rdx321)
  %371 = fmul float %370, 0x3FD0527DC0000000
  %372 = getelementptr inbounds nuw float, ptr %356, i64 %360
  store float %371, ptr %372, align 4
  %373 = add nuw nsw i64 %360, 1
  %exitcond117.not = icmp eq i64 %373, 64
  br i1 %exitcond117.not, label %374, label %.preheader

374:                                              ; preds = %.preheader
  %375 = add nuw nsw i64 %354, 1
  %exitcond118.not = icmp eq i64 %375, 64
  br i1 %exitcond118.not, label %376, label %.preheader63

376:                                              ; preds = %374
  br i1 %190, label %.preheader62.preheader, label %.preheader77

.preheader62.preheader:                           ; preds = %376
  %broadcast.splatinsert275 = insertelement <8 x i64> poison, i64 %184, i64 0
  %broadcast.splat276 = shufflevector <8 x i64> %broadcast.splatinsert275, <8 x i64> poison, <8 x i32> zeroinitializer
  %377 = icmp sgt <8 x i64> %broadcast.splat276, <i64 0, i64 1, i64 2, i64 3, i64 4, i64 5, i64 6, i64 7>
  %broadcast.splatinsert277 = insertelement <8 x i64> poison, i64 %183, i64 0
  %broadcast.splat278 = shufflevector <8 x i64> %broadcast.splatinsert277, <8 x i64> poison, <8 x i32> zeroinitializer
  %378 = trunc <8 x i64> %broadcast.splat278 to <8 x i32>
  %379 = or disjoint <8 x i32> %378, <i32 0, i32 1, i32 2, i32 3, i32 4, i32 5, i32 6, i32 7>
  %380 = icmp sgt <8 x i64> %broadcast.splat276, <i64 8, i64 9, i64 10, i64 11, i64 12, i64 13, i64 14, i64 15>
  %381 = trunc <8 x i64> %broadcast.splat278 to <8 x i32>
  %382 = or disjoint <8 x i32> %381, <i32 8, i32 9, i32 10, i32 11, i32 12, i32 13, i32 14, i32 15>
  %383 = icmp sgt <8 x i64> %broadcast.splat276, <i64 16, i64 17, i64 18, i64 19, i64 20, i64 21, i64 22, i64 23>
  %384 = trunc <8 x i64> %broadcast.splat278 to <8 x i32>
  %385 = or disjoint <8 x i32> %384, <i32 16, i32 17, i32 18, i32 19, i32 20, i32 21, i32 22, i32 23>
  %386 = icmp sgt <8 x i64> %broadcast.splat276, <i64 24, i64 25, i64 26, i64 27, i64 28, i64 29, i64 30, i64 31>
  %387 = trunc <8 x i64> %broadcast.splat278 to <8 x i32>
  %388 = or disjoint <8 x i32> %387, <i32 24, i32 25, i32 26, i32 27, i32 28, i32 29, i32 30, i32 31>
  %389 = icmp sgt <8 x i64> %broadcast.splat276, <i64 32, i64 33, i64 34, i64 35, i64 36, i64 37, i64 38, i64 39>
  %390 = trunc <8 x i64> %broadcast.splat278 to <8 x i32>
  %391 = or disjoint <8 x i32> %390, <i32 32, i32 33, i32 34, i32 35, i32 36, i32 37, i32 38, i32 39>
  %392 = icmp sgt <8 x i64> %broadcast.splat276, <i64 40, i64 41, i64 42, i64 43, i64 44, i64 45, i64 46, i64 47>
  %393 = trunc <8 x i64> %broadcast.splat278 to <8 x i32>
  %394 = or disjoint <8 x i32> %393, <i32 40, i32 41, i32 42, i32 43, i32 44, i32 45, i32 46, i32 47>
  %395 = icmp sgt <8 x i64> %broadcast.splat276, <i64 48, i64 49, i64 50, i64 51, i64 52, i64 53, i64 54, i64 55>
  %396 = trunc <8 x i64> %broadcast.splat278 to <8 x i32>
  %397 = or disjoint <8 x i32> %396, <i32 48, i32 49, i32 50, i32 51, i32 52, i32 53, i32 54, i32 55>
  %398 = icmp sgt <8 x i64> %broadcast.splat276, <i64 56, i64 57, i64 58, i64 59, i64 60, i64 61, i64 62, i64 63>
  %399 = trunc <8 x i64> %broadcast.splat278 to <8 x i32>
  %400 = or disjoint <8 x i32> %399, <i32 56, i32 57, i32 58, i32 59, i32 60, i32 61, i32 62, i32 63>
  br label %.preheader62

.preheader62:                                     ; preds = %.preheader62.preheader, %.preheader62
  %401 = phi i64 [ %455, %.preheader62 ], [ 0, %.preheader62.preheader ]
  %402 = add nuw nsw i64 %401, %82
  %403 = trunc i64 %402 to i32
  %404 = add i32 %56, %403
  %broadcast.splatinsert273 = insertelement <8 x i32> poison, i32 %404, i64 0
  %broadcast.splat274 = shufflevector <8 x i32> %broadcast.splatinsert273, <8 x i32> poison, <8 x i32> zeroinitializer
  %405 = icmp slt i64 %401, %166
  %broadcast.splatinsert271 = insertelement <8 x i1> poison, i1 %405, i64 0
  %broadcast.splat272 = shufflevector <8 x i1> %broadcast.splatinsert271, <8 x i1> poison, <8 x i32> zeroinitializer
  %.idx4657 = shl nuw nsw i64 %401, 8
  %406 = getelementptr inbounds nuw i8, ptr %35, i64 %.idx4657
  %407 = and <8 x i1> %broadcast.splat272, %377
  %408 = getelementptr float, ptr %406, <8 x i64> <i64 0, i64 1, i64 2, i64 3, i64 4, i64 5, i64 6, i64 7>
  %409 = icmp sge <8 x i32> %broadcast.splat274, %379
  %410 = extractelement <8 x ptr> %408, i64 0
  %wide.masked.load = call <8 x float> @llvm.masked.load.v8f32.p0(ptr align 4 %410, <8 x i1> %407, <8 x float> poison)
  %411 = freeze <8 x i1> %409
  %412 = and <8 x i1> %407, %411
  %predphi = select <8 x i1> %412, <8 x float> %wide.masked.load, <8 x float> splat (float 0xFFF0000000000000)
  call void @llvm.masked.scatter.v8f32.v8p0(<8 x float> %predphi, <8 x ptr> align 4 %408, <8 x i1> splat (i1 true))
  %413 = and <8 x i1> %broadcast.splat272, %380
  %414 = getelementptr float, ptr %406, <8 x i64> <i64 8, i64 9, i64 10, i64 11, i64 12, i64 13, i64 14, i64 15>
  %415 = icmp sge <8 x i32> %broadcast.splat274, %382
  %416 = extractelement <8 x ptr> %414, i64 0
  %wide.masked.load.1 = call <8 x float> @llvm.masked.load.v8f32.p0(ptr align 4 %416, <8 x i1> %413, <8 x float> poison)
  %417 = freeze <8 x i1> %415
  %418 = and <8 x i1> %413, %417
  %predphi.1 = select <8 x i1> %418, <8 x float> %wide.masked.load.1, <8 x float> splat (float 0xFFF0000000000000)
  call void @llvm.masked.scatter.v8f32.v8p0(<8 x float> %predphi.1, <8 x ptr> align 4 %414, <8 x i1> splat (i1 true))
  %419 = and <8 x i1> %broadcast.splat272, %383
  %420 = getelementptr float, ptr %406, <8 x i64> <i64 16, i64 17, i64 18, i64 19, i64 20, i64 21, i64 22, i64 23>
  %421 = icmp sge <8 x i32> %broadcast.splat274, %385
  %422 = extractelement <8 x ptr> %420, i64 0
  %wide.masked.load.2 = call <8 x float> @llvm.masked.load.v8f32.p0(ptr align 4 %422, <8 x i1> %419, <8 x float> poison)
  %423 = freeze <8 x i1> %421
  %424 = and <8 x i1> %419, %423
  %predphi.2 = select <8 x i1> %424, <8 x float> %wide.masked.load.2, <8 x float> splat (float 0xFFF0000000000000)
  call void @llvm.masked.scatter.v8f32.v8p0(<8 x float> %predphi.2, <8 x ptr> align 4 %420, <8 x i1> splat (i1 true))
  %425 = and <8 x i1> %broadcast.splat272, %386
  %426 = getelementptr float, ptr %406, <8 x i64> <i64 24, i64 25, i64 26, i64 27, i64 28, i64 29, i64 30, i64 31>
  %427 = icmp sge <8 x i32> %broadcast.splat274, %388
  %428 = extractelement <8 x ptr> %426, i64 0
  %wide.masked.load.3 = call <8 x float> @llvm.masked.load.v8f32.p0(ptr align 4 %428, <8 x i1> %425, <8 x float> poison)
  %429 = freeze <8 x i1> %427
  %430 = and <8 x i1> %425, %429
  %predphi.3 = select <8 x i1> %430, <8 x float> %wide.masked.load.3, <8 x float> splat (float 0xFFF0000000000000)
  call void @llvm.masked.scatter.v8f32.v8p0(<8 x float> %predphi.3, <8 x ptr> align 4 %426, <8 x i1> splat (i1 true))
  %431 = and <8 x i1> %broadcast.splat272, %389
  %432 = getelementptr float, ptr %406, <8 x i64> <i64 32, i64 33, i64 34, i64 35, i64 36, i64 37, i64 38, i64 39>
  %433 = icmp sge <8 x i32> %broadcast.splat274, %391
  %434 = extractelement <8 x ptr> %432, i64 0
  %wide.masked.load.4 = call <8 x float> @llvm.masked.load.v8f32.p0(ptr align 4 %434, <8 x i1> %431, <8 x float> poison)
  %435 = freeze <8 x i1> %433
  %436 = and <8 x i1> %431, %435
  %predphi.4 = select <8 x i1> %436, <8 x float> %wide.masked.load.4, <8 x float> splat (float 0xFFF0000000000000)
  call void @llvm.masked.scatter.v8f32.v8p0(<8 x float> %predphi.4, <8 x ptr> align 4 %432, <8 x i1> splat (i1 true))
  %437 = and <8 x i1> %broadcast.splat272, %392
  %438 = getelementptr float, ptr %406, <8 x i64> <i64 40, i64 41, i64 42, i64 43, i64 44, i64 45, i64 46, i64 47>
  %439 = icmp sge <8 x i32> %broadcast.splat274, %394
  %440 = extractelement <8 x ptr> %438, i64 0
  %wide.masked.load.5 = call <8 x float> @llvm.masked.load.v8f32.p0(ptr align 4 %440, <8 x i1> %437, <8 x float> poison)
  %441 = freeze <8 x i1> %439
  %442 = and <8 x i1> %437, %441
  %predphi.5 = select <8 x i1> %442, <8 x float> %wide.masked.load.5, <8 x float> splat (float 0xFFF0000000000000)
  call void @llvm.masked.scatter.v8f32.v8p0(<8 x float> %predphi.5, <8 x ptr> align 4 %438, <8 x i1> splat (i1 true))
  %443 = and <8 x i1> %broadcast.splat272, %395
  %444 = getelementptr float, ptr %406, <8 x i64> <i64 48, i64 49, i64 50, i64 51, i64 52, i64 53, i64 54, i64 55>
  %445 = icmp sge <8 x i32> %broadcast.splat274, %397
  %446 = extractelement <8 x ptr> %444, i64 0
  %wide.masked.load.6 = call <8 x float> @llvm.masked.load.v8f32.p0(ptr align 4 %446, <8 x i1> %443, <8 x float> poison)
  %447 = freeze <8 x i1> %445
  %448 = and <8 x i1> %443, %447
  %predphi.6 = select <8 x i1> %448, <8 x float> %wide.masked.load.6, <8 x float> splat (float 0xFFF0000000000000)
  call void @llvm.masked.scatter.v8f32.v8p0(<8 x float> %predphi.6, <8 x ptr> align 4 %444, <8 x i1> splat (i1 true))
  %449 = and <8 x i1> %broadcast.splat272, %398
  %450 = getelementptr float, ptr %406, <8 x i64> <i64 56, i64 57, i64 58, i64 59, i64 60, i64 61, i64 62, i64 63>
  %451 = icmp sge <8 x i32> %broadcast.splat274, %400
  %452 = extractelement <8 x ptr> %450, i64 0
  %wide.masked.load.7 = call <8 x float> @llvm.masked.load.v8f32.p0(ptr align 4 %452, <8 x i1> %449, <8 x float> poison)
  %453 = freeze <8 x i1> %451
  %454 = and <8 x i1> %449, %453
  %predphi.7 = select <8 x i1> %454, <8 x float> %wide.masked.load.7, <8 x float> splat (float 0xFFF0000000000000)
  call void @llvm.masked.scatter.v8f32.v8p0(<8 x float> %predphi.7, <8 x ptr> align 4 %450, <8 x i1> splat (i1 true))
  %455 = add nuw nsw i64 %401, 1
  %exitcond122.not = icmp eq i64 %455, 64
  br i1 %exitcond122.not, label %.loopexit76.preheader, label %.preheader62

.preheader77:                                     ; preds = %376, %select.unfold._crit_edge
  %456 = phi i64 [ %474, %select.unfold._crit_edge ], [ 0, %376 ]
  %457 = icmp sgt i64 %83, %456
  %spec.select59 = select i1 %457, i64 %185, i64 0
  %458 = icmp slt i64 %spec.select59, 64
  br i1 %458, label %iter.check, label %select.unfold._crit_edge

iter.check:                                       ; preds = %.preheader77
  %.idx38 = shl nuw nsw i64 %456, 8
  %459 = getelementptr inbounds nuw i8, ptr %35, i64 %.idx38
  %460 = sub i64 64, %spec.select59
  %min.iters.check284 = icmp ult i64 %460, 4
  br i1 %min.iters.check284, label %select.unfold.preheader, label %vector.main.loop.iter.check

vector.main.loop.iter.check:                      ; preds = %iter.check
  %min.iters.check286 = icmp ult i64 %460, 32
  br i1 %min.iters.check286, label %vec.epilog.ph, label %vector.ph287

vector.ph287:                                     ; preds = %vector.main.loop.iter.check
  %n.mod.vf288 = and i64 %460, 28
  %n.vec289 = and i64 %460, -32
  %461 = getelementptr float, ptr %459, i64 %spec.select59
  br label %vector.body290

vector.body290:                                   ; preds = %vector.body290, %vector.ph287
  %index291 = phi i64 [ 0, %vector.ph287 ], [ %index.next292, %vector.body290 ]
  %462 = getelementptr float, ptr %461, i64 %index291
  %463 = getelementptr inbounds nuw i8, ptr %462, i64 32
  %464 = getelementptr inbounds nuw i8, ptr %462, i64 64
  %465 = getelementptr inbounds nuw i8, ptr %462, i64 96
  store <8 x float> splat (float 0xFFF0000000000000), ptr %462, align 4
  store <8 x float> splat (float 0xFFF0000000000000), ptr %463, align 4
  store <8 x float> splat (float 0xFFF0000000000000), ptr %464, align 4
  store <8 x float> splat (float 0xFFF0000000000000), ptr %465, align 4
  %index.next292 = add nuw i64 %index291, 32
  %466 = icmp eq i64 %index.next292, %n.vec289
  br i1 %466, label %middle.block293, label %vector.body290, !llvm.loop !5

middle.block293:                                  ; preds = %vector.body290
  %cmp.n294 = icmp eq i64 %460, %n.vec289
  br i1 %cmp.n294, label %select.unfold._crit_edge, label %vec.epilog.iter.check

vec.epilog.iter.check:                            ; preds = %middle.block293
  %ind.end = add i64 %spec.select59, %n.vec289
  %min.epilog.iters.check = icmp eq i64 %n.mod.vf288, 0
  br i1 %min.epilog.iters.check, label %select.unfold.preheader, label %vec.epilog.ph, !prof !7

vec.epilog.ph:                                    ; preds = %vector.main.loop.iter.check, %vec.epilog.iter.check
  %vec.epilog.resume.val = phi i64 [ %n.vec289, %vec.epilog.iter.check ], [ 0, %vector.main.loop.iter.check ]
  %n.vec296 = and i64 %460, -4
  %467 = add i64 %spec.select59, %n.vec296
  %468 = getelementptr float, ptr %459, i64 %spec.select59
  br label %vec.epilog.vector.body

vec.epilog.vector.body:                           ; preds = %vec.epilog.vector.body, %vec.epilog.ph
  %index297 = phi i64 [ %vec.epilog.resume.val, %vec.epilog.ph ], [ %index.next298, %vec.epilog.vector.body ]
  %469 = getelementptr float, ptr %468, i64 %index297
  store <4 x float> splat (float 0xFFF0000000000000), ptr %469, align 4
  %index.next298 = add nuw i64 %index297, 4
  %470 = icmp eq i64 %index.next298, %n.vec296
  br i1 %470, label %vec.epilog.middle.block, label %vec.epilog.vector.body, !llvm.loop !8

vec.epilog.middle.block:                          ; preds = %vec.epilog.vector.body
  %cmp.n299 = icmp eq i64 %460, %n.vec296
  br i1 %cmp.n299, label %select.unfold._crit_edge, label %select.unfold.preheader

select.unfold.preheader:                          ; preds = %iter.check, %vec.epilog.iter.check, %vec.epilog.middle.block
  %.ph = phi i64 [ %spec.select59, %iter.check ], [ %ind.end, %vec.epilog.iter.check ], [ %467, %vec.epilog.middle.block ]
  br label %select.unfold

select.unfold:                                    ; preds = %select.unfold.preheader, %select.unfold
  %471 = phi i64 [ %473, %select.unfold ], [ %.ph, %select.unfold.preheader ]
  %472 = getelementptr inbounds nuw float, ptr %459, i64 %471
  store float 0xFFF0000000000000, ptr %472, align 4
  %473 = add i64 %471, 1
  %exitcond119.not = icmp eq i64 %473, 64
  br i1 %exitcond119.not, label %select.unfold._crit_edge, label %select.unfold, !llvm.loop !9

select.unfold._crit_edge:                         ; preds = %select.unfold, %middle.block293, %vec.epilog.middle.block, %.preheader77
  %474 = add nuw nsw i64 %456, 1
  %exitcond120.not = icmp eq i64 %474, 64
  br i1 %exitcond120.not, label %.loopexit76.preheader, label %.preheader77

.loopexit76.preheader:                            ; preds = %select.unfold._crit_edge, %.preheader62
  br label %.loopexit76

.loopexit76:                                      ; preds = %.loopexit76.preheader, %.loopexit76
  %475 = phi i64 [ %496, %.loopexit76 ], [ 0, %.loopexit76.preheader ]
  %476 = getelementptr inbounds nuw float, ptr %37, i64 %475
  %477 = load float, ptr %476, align 4
  %broadcast.splatinsert253 = insertelement <8 x float> poison, float %477, i64 0
  %broadcast.splat254 = shufflevector <8 x float> %broadcast.splatinsert253, <8 x float> poison, <8 x i32> zeroinitializer
  %.idx45 = shl nuw nsw i64 %475, 8
  %478 = getelementptr inbounds nuw i8, ptr %35, i64 %.idx45
  %479 = getelementptr inbounds nuw i8, ptr %478, i64 32
  %480 = getelementptr inbounds nuw i8, ptr %478, i64 64
  %481 = getelementptr inbounds nuw i8, ptr %478, i64 96
  %wide.load261 = load <8 x float>, ptr %478, align 64
  %wide.load262 = load <8 x float>, ptr %479, align 32
  %wide.load263 = load <8 x float>, ptr %480, align 64
  %wide.load264 = load <8 x float>, ptr %481, align 32
  %482 = call reassoc <8 x float> @llvm.maximum.v8f32(<8 x float> %broadcast.splat254, <8 x float> %wide.load261)
  %483 = call reassoc <8 x float> @llvm.maximum.v8f32(<8 x float> %broadcast.splat254, <8 x float> %wide.load262)
  %484 = call reassoc <8 x float> @llvm.maximum.v8f32(<8 x float> %broadcast.splat254, <8 x float> %wide.load263)
  %485 = call reassoc <8 x float> @llvm.maximum.v8f32(<8 x float> %broadcast.splat254, <8 x float> %wide.load264)
  %486 = getelementptr inbounds nuw i8, ptr %478, i64 128
  %487 = getelementptr inbounds nuw i8, ptr %478, i64 160
  %488 = getelementptr inbounds nuw i8, ptr %478, i64 192
  %489 = getelementptr inbounds nuw i8, ptr %478, i64 224
  %wide.load261.1 = load <8 x float>, ptr %486, align 64
  %wide.load262.1 = load <8 x float>, ptr %487, align 32
  %wide.load263.1 = load <8 x float>, ptr %488, align 64
  %wide.load264.1 = load <8 x float>, ptr %489, align 32
  %490 = call reassoc <8 x float> @llvm.maximum.v8f32(<8 x float> %482, <8 x float> %wide.load261.1)
  %491 = call reassoc <8 x float> @llvm.maximum.v8f32(<8 x float> %483, <8 x float> %wide.load262.1)
  %492 = call reassoc <8 x float> @llvm.maximum.v8f32(<8 x float> %484, <8 x float> %wide.load263.1)
  %493 = call reassoc <8 x float> @llvm.maximum.v8f32(<8 x float> %485, <8 x float> %wide.load264.1)
  %rdx.minmax = call reassoc <8 x float> @llvm.maximum.v8f32(<8 x float> %490, <8 x float> %491)
  %rdx.minmax267 = call reassoc <8 x float> @llvm.maximum.v8f32(<8 x float> %rdx.minmax, <8 x float> %492)
  %rdx.minmax268 = call reassoc <8 x float> @llvm.maximum.v8f32(<8 x float> %rdx.minmax267, <8 x float> %493)
  %494 = call reassoc float @llvm.vector.reduce.fmaximum.v8f32(<8 x float> %rdx.minmax268)
  %495 = getelementptr inbounds nuw float, ptr %38, i64 %475
  store float %494, ptr %495, align 4
  %496 = add nuw nsw i64 %475, 1
  %exitcond124.not = icmp eq i64 %496, 64
  br i1 %exitcond124.not, label %.preheader74, label %.loopexit76

.preheader74:                                     ; preds = %.loopexit76, %middle.block250
  %497 = phi i64 [ %507, %middle.block250 ], [ 0, %.loopexit76 ]
  %498 = getelementptr inbounds nuw float, ptr %38, i64 %497
  %499 = load float, ptr %498, align 4
  %500 = fcmp oeq float %499, 0xFFF0000000000000
  %.idx44 = shl nuw nsw i64 %497, 8
  %501 = getelementptr inbounds nuw i8, ptr %35, i64 %.idx44
  %broadcast.splatinsert244 = insertelement <8 x float> poison, float %499, i64 0
  %broadcast.splat245 = shufflevector <8 x float> %broadcast.splatinsert244, <8 x float> poison, <8 x i32> zeroinitializer
  br label %vector.body246

vector.body246:                                   ; preds = %vector.body246, %.preheader74
  %index247 = phi i64 [ 0, %.preheader74 ], [ %index.next249, %vector.body246 ]
  %502 = getelementptr inbounds nuw float, ptr %501, i64 %index247
  %wide.load248 = load <8 x float>, ptr %502, align 32
  %503 = fsub <8 x float> %wide.load248, %broadcast.splat245
  %504 = call <8 x float> @llvm.exp2.v8f32(<8 x float> %503)
  %505 = select i1 %500, <8 x float> zeroinitializer, <8 x float> %504
  store <8 x float> %505, ptr %502, align 32
  %index.next249 = add nuw i64 %index247, 8
  %506 = icmp eq i64 %index.next249, 64
  br i1 %506, label %middle.block250, label %vector.body246, !llvm.loop !10

middle.block250:                                  ; preds = %vector.body246
  %507 = add nuw nsw i64 %497, 1
  %exitcond126.not = icmp eq i64 %507, 64
  br i1 %exitcond126.not, label %vector.body236, label %.preheader74

vector.body236:                                   ; preds = %middle.block250, %vector.body236
  %index237 = phi i64 [ %index.next240, %vector.body236 ], [ 0, %middle.block250 ]
  %508 = getelementptr inbounds nuw float, ptr %38, i64 %index237
  %wide.load238 = load <8 x float>, ptr %508, align 32
  %509 = fcmp oeq <8 x float> %wide.load238, splat (float 0xFFF0000000000000)
  %510 = getelementptr inbounds nuw float, ptr %37, i64 %index237
  %wide.load239 = load <8 x float>, ptr %510, align 32
  %511 = fsub <8 x float> %wide.load239, %wide.load238
  %512 = call <8 x float> @llvm.exp2.v8f32(<8 x float> %511)
  %513 = select <8 x i1> %509, <8 x float> zeroinitializer, <8 x float> %512
  %514 = getelementptr inbounds nuw float, ptr %40, i64 %index237
  store <8 x float> %513, ptr %514, align 32
  %index.next240 = add nuw i64 %index237, 8
  %515 = icmp eq i64 %index.next240, 64
  br i1 %515, label %vector.body222, label %vector.body236, !llvm.loop !11

vector.body222:                                   ; preds = %vector.body236
  %wide.load224 = load <8 x float>, ptr %40, align 64
  %wide.load225 = load <8 x float>, ptr %64, align 32
  %wide.load226 = load <8 x float>, ptr %65, align 64
  %wide.load227 = load <8 x float>, ptr %66, align 32
  %wide.load228 = load <8 x float>, ptr %39, align 64
  %wide.load229 = load <8 x float>, ptr %67, align 32
  %wide.load230 = load <8 x float>, ptr %68, align 64
  %wide.load231 = load <8 x float>, ptr %69, align 32
  %516 = fmul <8 x float> %wide.load224, %wide.load228
  %517 = fmul <8 x float> %wide.load225, %wide.load229
  %518 = fmul <8 x float> %wide.load226, %wide.load230
  %519 = fmul <8 x float> %wide.load227, %wide.load231
  store <8 x float> %516, ptr %39, align 64
  store <8 x float> %517, ptr %67, align 32
  store <8 x float> %518, ptr %68, align 64
  store <8 x float> %519, ptr %69, align 32
  %wide.load224.1 = load <8 x float>, ptr %70, align 64
  %wide.load225.1 = load <8 x float>, ptr %71, align 32
  %wide.load226.1 = load <8 x float>, ptr %72, align 64
  %wide.load227.1 = load <8 x float>, ptr %73, align 32
  %wide.load228.1 = load <8 x float>, ptr %74, align 64
  %wide.load229.1 = load <8 x float>, ptr %75, align 32
  %wide.load230.1 = load <8 x float>, ptr %76, align 64
  %wide.load231.1 = load <8 x float>, ptr %77, align 32
  %520 = fmul <8 x float> %wide.load224.1, %wide.load228.1
  %521 = fmul <8 x float> %wide.load225.1, %wide.load229.1
  %522 = fmul <8 x float> %wide.load226.1, %wide.load230.1
  %523 = fmul <8 x float> %wide.load227.1, %wide.load231.1
  store <8 x float> %520, ptr %74, align 64
  store <8 x float> %521, ptr %75, align 32
  store <8 x float> %522, ptr %76, align 64
  store <8 x float> %523, ptr %77, align 32
  br label %.preheader61

.preheader61:                                     ; preds = %vector.body222, %.preheader61
  %524 = phi i64 [ %542, %.preheader61 ], [ 0, %vector.body222 ]
  %.idx43 = shl nuw nsw i64 %524, 8
  %525 = getelementptr inbounds nuw i8, ptr %35, i64 %.idx43
  %526 = getelementptr inbounds nuw i8, ptr %525, i64 32
  %527 = getelementptr inbounds nuw i8, ptr %525, i64 64
  %528 = getelementptr inbounds nuw i8, ptr %525, i64 96
  %wide.load212 = load <8 x float>, ptr %525, align 64
  %wide.load213 = load <8 x float>, ptr %526, align 32
  %wide.load214 = load <8 x float>, ptr %527, align 64
  %wide.load215 = load <8 x float>, ptr %528, align 32
  %529 = fadd reassoc <8 x float> %wide.load212, <float 0.000000e+00, float -0.000000e+00, float -0.000000e+00, float -0.000000e+00, float -0.000000e+00, float -0.000000e+00, float -0.000000e+00, float -0.000000e+00>
  %530 = getelementptr inbounds nuw i8, ptr %525, i64 128
  %531 = getelementptr inbounds nuw i8, ptr %525, i64 160
  %532 = getelementptr inbounds nuw i8, ptr %525, i64 192
  %533 = getelementptr inbounds nuw i8, ptr %525, i64 224
  %wide.load212.1 = load <8 x float>, ptr %530, align 64
  %wide.load213.1 = load <8 x float>, ptr %531, align 32
  %wide.load214.1 = load <8 x float>, ptr %532, align 64
  %wide.load215.1 = load <8 x float>, ptr %533, align 32
  %534 = fadd reassoc <8 x float> %529, %wide.load212.1
  %535 = fadd reassoc <8 x float> %wide.load213, %wide.load213.1
  %536 = fadd reassoc <8 x float> %wide.load214, %wide.load214.1
  %537 = fadd reassoc <8 x float> %wide.load215, %wide.load215.1
  %bin.rdx = fadd reassoc <8 x float> %535, %534
  %bin.rdx218 = fadd reassoc <8 x float> %536, %bin.rdx
  %bin.rdx219 = fadd reassoc <8 x float> %537, %bin.rdx218
  %538 = call reassoc float @llvm.vector.reduce.fadd.v8f32(float -0.000000e+00, <8 x float> %bin.rdx219)
  %539 = getelementptr inbounds nuw float, ptr %39, i64 %524
  %540 = load float, ptr %539, align 4
  %541 = fadd float %538, %540
  store float %541, ptr %539, align 4
  %542 = add nuw nsw i64 %524, 1
  %exitcond130.not = icmp eq i64 %542, 64
  br i1 %exitcond130.not, label %.preheader70, label %.preheader61

.preheader70:                                     ; preds = %.preheader61, %.preheader70
  %543 = phi i64 [ %565, %.preheader70 ], [ 0, %.preheader61 ]
  %.idx42 = shl nuw nsw i64 %543, 7
  %544 = getelementptr inbounds nuw i8, ptr %36, i64 %.idx42
  %545 = getelementptr inbounds nuw float, ptr %40, i64 %543
  %546 = load float, ptr %545, align 8
  %broadcast.splatinsert197 = insertelement <8 x float> poison, float %546, i64 0
  %broadcast.splat198 = shufflevector <8 x float> %broadcast.splatinsert197, <8 x float> poison, <8 x i32> zeroinitializer
  %547 = getelementptr inbounds nuw i8, ptr %544, i64 32
  %548 = getelementptr inbounds nuw i8, ptr %544, i64 64
  %549 = getelementptr inbounds nuw i8, ptr %544, i64 96
  %wide.load200 = load <8 x float>, ptr %544, align 64
  %wide.load201 = load <8 x float>, ptr %547, align 32
  %wide.load202 = load <8 x float>, ptr %548, align 64
  %wide.load203 = load <8 x float>, ptr %549, align 32
  %550 = fmul <8 x float> %broadcast.splat198, %wide.load200
  %551 = fmul <8 x float> %broadcast.splat198, %wide.load201
  %552 = fmul <8 x float> %broadcast.splat198, %wide.load202
  %553 = fmul <8 x float> %broadcast.splat198, %wide.load203
  store <8 x float> %550, ptr %544, align 64
  store <8 x float> %551, ptr %547, align 32
  store <8 x float> %552, ptr %548, align 64
  store <8 x float> %553, ptr %549, align 32
  %554 = or disjoint i64 %543, 1
  %.idx42.1 = shl nuw nsw i64 %554, 7
  %555 = getelementptr inbounds nuw i8, ptr %36, i64 %.idx42.1
  %556 = getelementptr inbounds nuw float, ptr %40, i64 %554
  %557 = load float, ptr %556, align 4
  %broadcast.splatinsert197.1 = insertelement <8 x float> poison, float %557, i64 0
  %broadcast.splat198.1 = shufflevector <8 x float> %broadcast.splatinsert197.1, <8 x float> poison, <8 x i32> zeroinitializer
  %558 = getelementptr inbounds nuw i8, ptr %555, i64 32
  %559 = getelementptr inbounds nuw i8, ptr %555, i64 64
  %560 = getelementptr inbounds nuw i8, ptr %555, i64 96
  %wide.load200.1 = load <8 x float>, ptr %555, align 64
  %wide.load201.1 = load <8 x float>, ptr %558, align 32
  %wide.load202.1 = load <8 x float>, ptr %559, align 64
  %wide.load203.1 = load <8 x float>, ptr %560, align 32
  %561 = fmul <8 x float> %broadcast.splat198.1, %wide.load200.1
  %562 = fmul <8 x float> %broadcast.splat198.1, %wide.load201.1
  %563 = fmul <8 x float> %broadcast.splat198.1, %wide.load202.1
  %564 = fmul <8 x float> %broadcast.splat198.1, %wide.load203.1
  store <8 x float> %561, ptr %555, align 64
  store <8 x float> %562, ptr %558, align 32
  store <8 x float> %563, ptr %559, align 64
  store <8 x float> %564, ptr %560, align 32
  %565 = add nuw nsw i64 %543, 2
  %exitcond132.not.1 = icmp eq i64 %565, 64
  br i1 %exitcond132.not.1, label %.preheader60, label %.preheader70

.preheader60:                                     ; preds = %.preheader70, %589
  %566 = phi i64 [ %590, %589 ], [ 0, %.preheader70 ]
  %.idx39 = shl nuw nsw i64 %566, 8
  %567 = getelementptr inbounds nuw i8, ptr %35, i64 %.idx39
  %.idx41 = shl nuw nsw i64 %566, 7
  %568 = getelementptr inbounds nuw i8, ptr %36, i64 %.idx41
  %569 = getelementptr inbounds nuw i8, ptr %568, i64 32
  %570 = getelementptr inbounds nuw i8, ptr %568, i64 64
  %571 = getelementptr inbounds nuw i8, ptr %568, i64 96
  %.promoted = load <8 x float>, ptr %568, align 64
  %.promoted369 = load <8 x float>, ptr %569, align 32
  %.promoted372 = load <8 x float>, ptr %570, align 64
  %.promoted375 = load <8 x float>, ptr %571, align 32
  br label %vector.ph182

vector.ph182:                                     ; preds = %.preheader60, %vector.ph182
  %wide.load193376 = phi <8 x float> [ %.promoted375, %.preheader60 ], [ %587, %vector.ph182 ]
  %wide.load192373 = phi <8 x float> [ %.promoted372, %.preheader60 ], [ %586, %vector.ph182 ]
  %wide.load191370 = phi <8 x float> [ %.promoted369, %.preheader60 ], [ %585, %vector.ph182 ]
  %572 = phi <8 x float> [ %.promoted, %.preheader60 ], [ %584, %vector.ph182 ]
  %573 = phi i64 [ 0, %.preheader60 ], [ %588, %vector.ph182 ]
  %.idx40 = shl nuw nsw i64 %573, 7
  %574 = getelementptr inbounds nuw i8, ptr %34, i64 %.idx40
  %575 = getelementptr inbounds nuw float, ptr %567, i64 %573
  %576 = load float, ptr %575, align 4
  %broadcast.splatinsert183 = insertelement <8 x float> poison, float %576, i64 0
  %broadcast.splat184 = shufflevector <8 x float> %broadcast.splatinsert183, <8 x float> poison, <8 x i32> zeroinitializer
  %577 = getelementptr inbounds nuw i8, ptr %574, i64 32
  %578 = getelementptr inbounds nuw i8, ptr %574, i64 64
  %579 = getelementptr inbounds nuw i8, ptr %574, i64 96
  %wide.load186 = load <8 x float>, ptr %574, align 64
  %wide.load187 = load <8 x float>, ptr %577, align 32
  %wide.load188 = load <8 x float>, ptr %578, align 64
  %wide.load189 = load <8 x float>, ptr %579, align 32
  %580 = fmul <8 x float> %broadcast.splat184, %wide.load186
  %581 = fmul <8 x float> %broadcast.splat184, %wide.load187
  %582 = fmul <8 x float> %broadcast.splat184, %wide.load188
  %583 = fmul <8 x float> %broadcast.splat184, %wide.load189
  %584 = fadd <8 x float> %572, %580
  %585 = fadd <8 x float> %wide.load191370, %581
  %586 = fadd <8 x float> %wide.load192373, %582
  %587 = fadd <8 x float> %wide.load193376, %583
  %588 = add nuw nsw i64 %573, 1
  %exitcond134.not = icmp eq i64 %588, 64
  br i1 %exitcond134.not, label %589, label %vector.ph182

589:                                              ; preds = %vector.ph182
  store <8 x float> %584, ptr %568, align 64
  store <8 x float> %585, ptr %569, align 32
  store <8 x float> %586, ptr %570, align 64
  store <8 x float> %587, ptr %571, align 32
  %590 = add nuw nsw i64 %566, 1
  %exitcond135.not = icmp eq i64 %590, 64
  br i1 %exitcond135.not, label %591, label %.preheader60

591:                                              ; preds = %589
  call void @llvm.memcpy.p0.p0.i64(ptr noundef nonnull align 64 dereferenceable(256) %37, ptr noundef nonnull align 64 dereferenceable(256) %38, i64 256, i1 false)
  br label %592

592:                                              ; preds = %591, %181
  %593 = add nuw nsw i64 %182, 1
  %exitcond136.not = icmp eq i64 %593, %45
  br i1 %exitcond136.not, label %._crit_edge, label %181

._crit_edge:                                      ; preds = %592, %.preheader81.preheader
  %594 = icmp sgt i64 %83, 0
  br i1 %594, label %.lr.ph93, label %._crit_edge97

.lr.ph93:                                         ; preds = %._crit_edge
  %595 = mul i64 %81, %22
  %596 = mul i64 %82, %24
  %597 = getelementptr bfloat, ptr %3, i64 %595
  %598 = getelementptr bfloat, ptr %597, i64 %596
  %smax = call i64 @llvm.smax.i64(i64 %166, i64 1)
  br label %vector.scevcheck171

vector.scevcheck171:                              ; preds = %.lr.ph93, %.loopexit358
  %599 = phi i64 [ 0, %.lr.ph93 ], [ %685, %.loopexit358 ]
  %600 = getelementptr inbounds nuw float, ptr %39, i64 %599
  %601 = load float, ptr %600, align 4
  %602 = fcmp oeq float %601, 0.000000e+00
  %603 = fdiv float 1.000000e+00, %601
  %604 = select i1 %602, float 0.000000e+00, float %603
  %605 = mul i64 %599, %24
  %.idx = shl nuw nsw i64 %599, 7
  %606 = getelementptr inbounds nuw i8, ptr %36, i64 %.idx
  %607 = getelementptr bfloat, ptr %598, i64 %605
  br i1 %ident.check172.not, label %vector.body175, label %scalar.ph173

vector.body175:                                   ; preds = %vector.scevcheck171
  %broadcast.splatinsert = insertelement <8 x float> poison, float %604, i64 0
  %broadcast.splat = shufflevector <8 x float> %broadcast.splatinsert, <8 x float> poison, <8 x i32> zeroinitializer
  %608 = getelementptr inbounds nuw i8, ptr %606, i64 32
  %609 = getelementptr inbounds nuw i8, ptr %606, i64 64
  %610 = getelementptr inbounds nuw i8, ptr %606, i64 96
  %wide.load176 = load <8 x float>, ptr %606, align 64
  %wide.load177 = load <8 x float>, ptr %608, align 32
  %wide.load178 = load <8 x float>, ptr %609, align 64
  %wide.load179 = load <8 x float>, ptr %610, align 32
  %611 = fmul <8 x float> %broadcast.splat, %wide.load176
  %612 = fmul <8 x float> %broadcast.splat, %wide.load177
  %613 = fmul <8 x float> %broadcast.splat, %wide.load178
  %614 = fmul <8 x float> %broadcast.splat, %wide.load179
  %615 = bitcast <8 x float> %611 to <8 x i32>
  %616 = bitcast <8 x float> %612 to <8 x i32>
  %617 = bitcast <8 x float> %613 to <8 x i32>
  %618 = bitcast <8 x float> %614 to <8 x i32>
  %619 = lshr <8 x i32> %615, splat (i32 16)
  %620 = lshr <8 x i32> %616, splat (i32 16)
  %621 = lshr <8 x i32> %617, splat (i32 16)
  %622 = lshr <8 x i32> %618, splat (i32 16)
  %623 = and <8 x i32> %619, splat (i32 1)
  %624 = and <8 x i32> %620, splat (i32 1)
  %625 = and <8 x i32> %621, splat (i32 1)
  %626 = and <8 x i32> %622, splat (i32 1)
  %627 = add <8 x i32> %615, splat (i32 32767)
  %628 = add <8 x i32> %616, splat (i32 32767)
  %629 = add <8 x i32> %617, splat (i32 32767)
  %630 = add <8 x i32> %618, splat (i32 32767)
  %631 = add <8 x i32> %627, %623
  %632 = add <8 x i32> %628, %624
  %633 = add <8 x i32> %629, %625
  %634 = add <8 x i32> %630, %626
  %635 = lshr <8 x i32> %631, splat (i32 16)
  %636 = lshr <8 x i32> %632, splat (i32 16)
  %637 = lshr <8 x i32> %633, splat (i32 16)
  %638 = lshr <8 x i32> %634, splat (i32 16)
  %639 = fcmp uno <8 x float> %611, zeroinitializer
  %640 = fcmp uno <8 x float> %612, zeroinitializer
  %641 = fcmp uno <8 x float> %613, zeroinitializer
  %642 = fcmp uno <8 x float> %614, zeroinitializer
  %643 = trunc nuw <8 x i32> %635 to <8 x i16>
  %644 = trunc nuw <8 x i32> %636 to <8 x i16>
  %645 = trunc nuw <8 x i32> %637 to <8 x i16>
  %646 = trunc nuw <8 x i32> %638 to <8 x i16>
  %647 = select <8 x i1> %639, <8 x i16> splat (i16 32704), <8 x i16> %643
  %648 = select <8 x i1> %640, <8 x i16> splat (i16 32704), <8 x i16> %644
  %649 = select <8 x i1> %641, <8 x i16> splat (i16 32704), <8 x i16> %645
  %650 = select <8 x i1> %642, <8 x i16> splat (i16 32704), <8 x i16> %646
  %651 = getelementptr i8, ptr %607, i64 16
  %652 = getelementptr i8, ptr %607, i64 32
  %653 = getelementptr i8, ptr %607, i64 48
  store <8 x i16> %647, ptr %607, align 2
  store <8 x i16> %648, ptr %651, align 2
  store <8 x i16> %649, ptr %652, align 2
  store <8 x i16> %650, ptr %653, align 2
  br label %.loopexit358

scalar.ph173:                                     ; preds = %vector.scevcheck171, %scalar.ph173
  %654 = phi i64 [ %684, %scalar.ph173 ], [ 0, %vector.scevcheck171 ]
  %655 = getelementptr inbounds nuw float, ptr %606, i64 %654
  %656 = load float, ptr %655, align 8
  %657 = fmul float %604, %656
  %658 = mul i64 %654, %25
  %659 = getelementptr bfloat, ptr %607, i64 %658
  %660 = bitcast float %657 to i32
  %661 = lshr i32 %660, 16
  %662 = and i32 %661, 1
  %663 = add i32 %660, 32767
  %664 = add i32 %663, %662
  %665 = lshr i32 %664, 16
  %666 = fcmp uno float %657, 0.000000e+00
  %667 = trunc nuw i32 %665 to i16
  %668 = select i1 %666, i16 32704, i16 %667
  store i16 %668, ptr %659, align 2
  %669 = or disjoint i64 %654, 1
  %670 = getelementptr inbounds nuw float, ptr %606, i64 %669
  %671 = load float, ptr %670, align 4
  %672 = fmul float %604, %671
  %673 = mul i64 %669, %25
  %674 = getelementptr bfloat, ptr %607, i64 %673
  %675 = bitcast float %672 to i32
  %676 = lshr i32 %675, 16
  %677 = and i32 %676, 1
  %678 = add i32 %675, 32767
  %679 = add i32 %678, %677
  %680 = lshr i32 %679, 16
  %681 = fcmp uno float %672, 0.000000e+00
  %682 = trunc nuw i32 %680 to i16
  %683 = select i1 %681, i16 32704, i16 %682
  store i16 %683, ptr %674, align 2
  %684 = add nuw nsw i64 %654, 2
  %exitcond137.not.1 = icmp eq i64 %684, 32
  br i1 %exitcond137.not.1, label %.loopexit358, label %scalar.ph173, !llvm.loop !12

.loopexit358:                                     ; preds = %scalar.ph173, %vector.body175
  %685 = add nuw nsw i64 %599, 1
  %exitcond138.not = icmp eq i64 %685, %smax
  br i1 %exitcond138.not, label %.lr.ph96, label %vector.scevcheck171

.lr.ph96:                                         ; preds = %.loopexit358
  %686 = mul i64 %81, %26
  %687 = mul i64 %82, %28
  %688 = getelementptr float, ptr %4, i64 %686
  %689 = getelementptr float, ptr %688, i64 %687
  %smax139 = call i64 @llvm.smax.i64(i64 %166, i64 1)
  %min.iters.check = icmp sgt i64 %83, 7
  %or.cond = select i1 %min.iters.check, i1 %ident.check.not, i1 false
  br i1 %or.cond, label %vector.ph, label %scalar.ph.preheader

vector.ph:                                        ; preds = %.lr.ph96
  %n.vec = and i64 %smax, 120
  br label %vector.body

vector.body:                                      ; preds = %vector.body, %vector.ph
  %index = phi i64 [ 0, %vector.ph ], [ %index.next, %vector.body ]
  %690 = getelementptr inbounds nuw float, ptr %39, i64 %index
  %wide.load = load <8 x float>, ptr %690, align 32
  %691 = fcmp oeq <8 x float> %wide.load, zeroinitializer
  %692 = call <8 x float> @llvm.log2.v8f32(<8 x float> %wide.load)
  %693 = getelementptr inbounds nuw float, ptr %37, i64 %index
  %wide.load170 = load <8 x float>, ptr %693, align 32
  %694 = fadd <8 x float> %wide.load170, %692
  %695 = fmul <8 x float> %694, splat (float 0x3FE62E4300000000)
  %696 = select <8 x i1> %691, <8 x float> splat (float 0xFFF0000000000000), <8 x float> %695
  %697 = getelementptr float, ptr %689, i64 %index
  store <8 x float> %696, ptr %697, align 4
  %index.next = add nuw i64 %index, 8
  %698 = icmp eq i64 %index.next, %n.vec
  br i1 %698, label %middle.block, label %vector.body, !llvm.loop !13

middle.block:                                     ; preds = %vector.body
  %cmp.n = icmp eq i64 %smax, %n.vec
  br i1 %cmp.n, label %._crit_edge97, label %scalar.ph.preheader

scalar.ph.preheader:                              ; preds = %.lr.ph96, %middle.block
  %.ph360 = phi i64 [ 0, %.lr.ph96 ], [ %n.vec, %middle.block ]
  %xtraiter = and i64 %smax, 3
  %lcmp.mod.not = icmp eq i64 %xtraiter, 0
  br i1 %lcmp.mod.not, label %scalar.ph.prol.loopexit, label %scalar.ph.prol

scalar.ph.prol:                                   ; preds = %scalar.ph.preheader, %scalar.ph.prol
  %699 = phi i64 [ %711, %scalar.ph.prol ], [ %.ph360, %scalar.ph.preheader ]
  %prol.iter = phi i64 [ %prol.iter.next, %scalar.ph.prol ], [ 0, %scalar.ph.preheader ]
  %700 = getelementptr inbounds nuw float, ptr %39, i64 %699
  %701 = load float, ptr %700, align 4
  %702 = fcmp oeq float %701, 0.000000e+00
  %703 = tail call float @llvm.log2.f32(float %701)
  %704 = getelementptr inbounds nuw float, ptr %37, i64 %699
  %705 = load float, ptr %704, align 4
  %706 = fadd float %705, %703
  %707 = fmul float %706, 0x3FE62E4300000000
  %708 = mul i64 %699, %28
  %709 = select i1 %702, float 0xFFF0000000000000, float %707
  %710 = getelementptr float, ptr %689, i64 %708
  store float %709, ptr %710, align 4
  %711 = add nuw nsw i64 %699, 1
  %prol.iter.next = add i64 %prol.iter, 1
  %prol.iter.cmp.not = icmp eq i64 %prol.iter.next, %xtraiter
  br i1 %prol.iter.cmp.not, label %scalar.ph.prol.loopexit, label %scalar.ph.prol, !llvm.loop !14

scalar.ph.prol.loopexit:                          ; preds = %scalar.ph.prol, %scalar.ph.preheader
  %.unr = phi i64 [ %.ph360, %scalar.ph.preheader ], [ %711, %scalar.ph.prol ]
  %712 = sub nsw i64 %.ph360, %smax
  %713 = icmp ugt i64 %712, -4
  br i1 %713, label %._crit_edge97, label %scalar.ph

scalar.ph:                                        ; preds = %scalar.ph.prol.loopexit, %scalar.ph
  %714 = phi i64 [ %762, %scalar.ph ], [ %.unr, %scalar.ph.prol.loopexit ]
  %715 = getelementptr inbounds nuw float, ptr %39, i64 %714
  %716 = load float, ptr %715, align 4
  %717 = fcmp oeq float %716, 0.000000e+00
  %718 = tail call float @llvm.log2.f32(float %716)
  %719 = getelementptr inbounds nuw float, ptr %37, i64 %714
  %720 = load float, ptr %719, align 4
  %721 = fadd float %720, %718
  %722 = fmul float %721, 0x3FE62E4300000000
  %723 = mul i64 %714, %28
  %724 = select i1 %717, float 0xFFF0000000000000, float %722
  %725 = getelementptr float, ptr %689, i64 %723
  store float %724, ptr %725, align 4
  %726 = add nuw nsw i64 %714, 1
  %727 = getelementptr inbounds nuw float, ptr %39, i64 %726
  %728 = load float, ptr %727, align 4
  %729 = fcmp oeq float %728, 0.000000e+00
  %730 = tail call float @llvm.log2.f32(float %728)
  %731 = getelementptr inbounds nuw float, ptr %37, i64 %726
  %732 = load float, ptr %731, align 4
  %733 = fadd float %732, %730
  %734 = fmul float %733, 0x3FE62E4300000000
  %735 = mul i64 %726, %28
  %736 = select i1 %729, float 0xFFF0000000000000, float %734
  %737 = getelementptr float, ptr %689, i64 %735
  store float %736, ptr %737, align 4
  %738 = add nuw nsw i64 %714, 2
  %739 = getelementptr inbounds nuw float, ptr %39, i64 %738
  %740 = load float, ptr %739, align 4
  %741 = fcmp oeq float %740, 0.000000e+00
  %742 = tail call float @llvm.log2.f32(float %740)
  %743 = getelementptr inbounds nuw float, ptr %37, i64 %738
  %744 = load float, ptr %743, align 4
  %745 = fadd float %744, %742
  %746 = fmul float %745, 0x3FE62E4300000000
  %747 = mul i64 %738, %28
  %748 = select i1 %741, float 0xFFF0000000000000, float %746
  %749 = getelementptr float, ptr %689, i64 %747
  store float %748, ptr %749, align 4
  %750 = add nuw nsw i64 %714, 3
  %751 = getelementptr inbounds nuw float, ptr %39, i64 %750
  %752 = load float, ptr %751, align 4
  %753 = fcmp oeq float %752, 0.000000e+00
  %754 = tail call float @llvm.log2.f32(float %752)
  %755 = getelementptr inbounds nuw float, ptr %37, i64 %750
  %756 = load float, ptr %755, align 4
  %757 = fadd float %756, %754
  %758 = fmul float %757, 0x3FE62E4300000000
  %759 = mul i64 %750, %28
  %760 = select i1 %753, float 0xFFF0000000000000, float %758
  %761 = getelementptr float, ptr %689, i64 %759
  store float %760, ptr %761, align 4
  %762 = add nuw nsw i64 %714, 4
  %exitcond140.not.3 = icmp eq i64 %762, %smax139
  br i1 %exitcond140.not.3, label %._crit_edge97, label %scalar.ph, !llvm.loop !16

._crit_edge97:                                    ; preds = %scalar.ph.prol.loopexit, %scalar.ph, %middle.block, %._crit_edge
  %763 = add nsw i64 %79, 1
  %exitcond141.not = icmp eq i64 %763, %30
  br i1 %exitcond141.not, label %._crit_edge100, label %78

._crit_edge100:                                   ; preds = %._crit_edge97, %31
  ret void
}

; Function Attrs: mustprogress nocallback nocreateundeforpoison nofree nosync nounwind speculatable willreturn memory(none)
declare i64 @llvm.smin.i64(i64, i64) #1

; Function Attrs: mustprogress nocallback nocreateundeforpoison nofree nosync nounwind speculatable willreturn memory(none)
declare float @llvm.log2.f32(float) #1

; Function Attrs: mustprogress nocallback nofree nounwind willreturn memory(argmem: readwrite)
declare void @llvm.memcpy.p0.p0.i64(ptr noalias writeonly captures(none), ptr noalias readonly captures(none), i64, i1 immarg) #2

; Function Attrs: nofree norecurse nosync nounwind memory(readwrite, inaccessiblemem: none, target_mem0: none, target_mem1: none)
define void @_mlir_flashjit_dumped(ptr readonly captures(none) %0) local_unnamed_addr #3 {
  %2 = load ptr, ptr %0, align 8
  %3 = load ptr, ptr %2, align 8
  %4 = getelementptr i8, ptr %0, i64 8
  %5 = load ptr, ptr %4, align 8
  %6 = load ptr, ptr %5, align 8
  %7 = getelementptr i8, ptr %0, i64 16
  %8 = load ptr, ptr %7, align 8
  %9 = load ptr, ptr %8, align 8
  %10 = getelementptr i8, ptr %0, i64 24
  %11 = load ptr, ptr %10, align 8
  %12 = load ptr, ptr %11, align 8
  %13 = getelementptr i8, ptr %0, i64 32
  %14 = load ptr, ptr %13, align 8
  %15 = load ptr, ptr %14, align 8
  %16 = getelementptr i8, ptr %0, i64 64
  %17 = load ptr, ptr %16, align 8
  %18 = load i64, ptr %17, align 8
  %19 = getelementptr i8, ptr %0, i64 72
  %20 = load ptr, ptr %19, align 8
  %21 = load i64, ptr %20, align 8
  %22 = getelementptr i8, ptr %0, i64 80
  %23 = load ptr, ptr %22, align 8
  %24 = load i64, ptr %23, align 8
  %25 = getelementptr i8, ptr %0, i64 96
  %26 = load ptr, ptr %25, align 8
  %27 = load i64, ptr %26, align 8
  %28 = getelementptr i8, ptr %0, i64 104
  %29 = load ptr, ptr %28, align 8
  %30 = load i64, ptr %29, align 8
  %31 = getelementptr i8, ptr %0, i64 112
  %32 = load ptr, ptr %31, align 8
  %33 = load i64, ptr %32, align 8
  %34 = getelementptr i8, ptr %0, i64 128
  %35 = load ptr, ptr %34, align 8
  %36 = load i64, ptr %35, align 8
  %37 = getelementptr i8, ptr %0, i64 136
  %38 = load ptr, ptr %37, align 8
  %39 = load i64, ptr %38, align 8
  %40 = getelementptr i8, ptr %0, i64 144
  %41 = load ptr, ptr %40, align 8
  %42 = load i64, ptr %41, align 8
  %43 = getelementptr i8, ptr %0, i64 160
  %44 = load ptr, ptr %43, align 8
  %45 = load i64, ptr %44, align 8
  %46 = getelementptr i8, ptr %0, i64 168
  %47 = load ptr, ptr %46, align 8
  %48 = load i64, ptr %47, align 8
  %49 = getelementptr i8, ptr %0, i64 176
  %50 = load ptr, ptr %49, align 8
  %51 = load i64, ptr %50, align 8
  %52 = getelementptr i8, ptr %0, i64 192
  %53 = load ptr, ptr %52, align 8
  %54 = load i64, ptr %53, align 8
  %55 = getelementptr i8, ptr %0, i64 200
  %56 = load ptr, ptr %55, align 8
  %57 = load i64, ptr %56, align 8
  %58 = getelementptr i8, ptr %0, i64 208
  %59 = load ptr, ptr %58, align 8
  %60 = load i64, ptr %59, align 8
  %61 = getelementptr i8, ptr %0, i64 224
  %62 = load ptr, ptr %61, align 8
  %63 = load i64, ptr %62, align 8
  %64 = getelementptr i8, ptr %0, i64 232
  %65 = load ptr, ptr %64, align 8
  %66 = load i64, ptr %65, align 8
  %67 = getelementptr i8, ptr %0, i64 240
  %68 = load ptr, ptr %67, align 8
  %69 = load i64, ptr %68, align 8
  tail call void @flashjit_dumped(ptr %3, ptr %6, ptr %9, ptr %12, ptr %15, ptr poison, ptr poison, i64 poison, i64 %18, i64 %21, i64 %24, i64 poison, i64 %27, i64 %30, i64 %33, i64 poison, i64 %36, i64 %39, i64 %42, i64 poison, i64 %45, i64 %48, i64 %51, i64 poison, i64 %54, i64 %57, i64 %60, i64 poison, i64 %63, i64 %66, i64 %69)
  ret void
}

; Function Attrs: nocallback nofree nounwind willreturn memory(argmem: write)
declare void @llvm.memset.p0.i64(ptr writeonly captures(none), i8, i64, i1 immarg) #4

; Function Attrs: nocallback nocreateundeforpoison nofree nosync nounwind speculatable willreturn memory(none)
declare i64 @llvm.smax.i64(i64, i64) #5

; Function Attrs: nocallback nocreateundeforpoison nofree nosync nounwind speculatable willreturn memory(none)
declare <8 x float> @llvm.log2.v8f32(<8 x float>) #5

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare float @llvm.vector.reduce.fadd.v8f32(float, <8 x float>) #6

; Function Attrs: nocallback nocreateundeforpoison nofree nosync nounwind speculatable willreturn memory(none)
declare <8 x float> @llvm.exp2.v8f32(<8 x float>) #5

; Function Attrs: nocallback nocreateundeforpoison nofree nosync nounwind speculatable willreturn memory(none)
declare <8 x float> @llvm.maximum.v8f32(<8 x float>, <8 x float>) #5

; Function Attrs: nocallback nofree nosync nounwind speculatable willreturn memory(none)
declare float @llvm.vector.reduce.fmaximum.v8f32(<8 x float>) #6

; Function Attrs: nocallback nofree nosync nounwind willreturn memory(argmem: read)
declare <8 x float> @llvm.masked.load.v8f32.p0(ptr captures(none), <8 x i1>, <8 x float>) #7

; Function Attrs: nocallback nofree nosync nounwind willreturn memory(write)
declare void @llvm.masked.scatter.v8f32.v8p0(<8 x float>, <8 x ptr>, <8 x i1>) #8

attributes #0 = { nofree norecurse nosync nounwind memory(argmem: readwrite) }
attributes #1 = { mustprogress nocallback nocreateundeforpoison nofree nosync nounwind speculatable willreturn memory(none) }
attributes #2 = { mustprogress nocallback nofree nounwind willreturn memory(argmem: readwrite) }
attributes #3 = { nofree norecurse nosync nounwind memory(readwrite, inaccessiblemem: none, target_mem0: none, target_mem1: none) }
attributes #4 = { nocallback nofree nounwind willreturn memory(argmem: write) }
attributes #5 = { nocallback nocreateundeforpoison nofree nosync nounwind speculatable willreturn memory(none) }
attributes #6 = { nocallback nofree nosync nounwind speculatable willreturn memory(none) }
attributes #7 = { nocallback nofree nosync nounwind willreturn memory(argmem: read) }
attributes #8 = { nocallback nofree nosync nounwind willreturn memory(write) }

!llvm.module.flags = !{!0}

!0 = !{i32 2, !"Debug Info Version", i32 3}
!1 = distinct !{!1, !2}
!2 = !{!"llvm.loop.isvectorized", i32 1}
!3 = distinct !{!3, !2}
!4 = distinct !{!4, !2}
!5 = distinct !{!5, !2, !6}
!6 = !{!"llvm.loop.unroll.runtime.disable"}
!7 = !{!"branch_weights", i32 4, i32 28}
!8 = distinct !{!8, !2, !6}
!9 = distinct !{!9, !6, !2}
!10 = distinct !{!10, !2, !6}
!11 = distinct !{!11, !2, !6}
!12 = distinct !{!12, !2}
!13 = distinct !{!13, !2, !6}
!14 = distinct !{!14, !15}
!15 = !{!"llvm.loop.unroll.disable"}
!16 = distinct !{!16, !2}
