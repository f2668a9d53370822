; ModuleID = 'flashjit_dumped'
source_filename = "flashjit_dumped"

define void @flashjit_dumped(ptr %0, ptr %1, ptr %2, ptr %3, ptr %4, ptr %5, ptr %6, i64 %7, i64 %8, i64 %9, i64 %10, i64 %11, i64 %12, i64 %13, i64 %14, i64 %15, i64 %16, i64 %17, i64 %18, i64 %19, i64 %20, i64 %21, i64 %22, i64 %23, i64 %24, i64 %25, i64 %26, i64 %27, i64 %28, i64 %29, i64 %30) {
  %32 = alloca float, i64 2048, align 64
  %33 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } poison, ptr %32, 0
  %34 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %33, ptr %32, 1
  %35 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %34, i64 0, 2
  %36 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %35, i64 64, 3, 0
  %37 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %36, i64 32, 3, 1
  %38 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %37, i64 32, 4, 0
  %39 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %38, i64 1, 4, 1
  %40 = alloca float, i64 2048, align 64
  %41 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } poison, ptr %40, 0
  %42 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %41, ptr %40, 1
  %43 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %42, i64 0, 2
  %44 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %43, i64 64, 3, 0
  %45 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %44, i64 32, 3, 1
  %46 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %45, i64 32, 4, 0
  %47 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %46, i64 1, 4, 1
  %48 = alloca float, i64 2048, align 64
  %49 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } poison, ptr %48, 0
  %50 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %49, ptr %48, 1
  %51 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %50, i64 0, 2
  %52 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %51, i64 64, 3, 0
  %53 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %52, i64 32, 3, 1
  %54 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %53, i64 32, 4, 0
  %55 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %54, i64 1, 4, 1
  %56 = alloca float, i64 4096, align 64
  %57 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } poison, ptr %56, 0
  %58 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %57, ptr %56, 1
  %59 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %58, i64 0, 2
  %60 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %59, i64 64, 3, 0
  %61 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %60, i64 64, 3, 1
  %62 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %61, i64 64, 4, 0
  %63 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %62, i64 1, 4, 1
  %64 = alloca float, i64 2048, align 64
  %65 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } poison, ptr %64, 0
  %66 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %65, ptr %64, 1
  %67 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %66, i64 0, 2
  %68 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %67, i64 64, 3, 0
  %69 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %68, i64 32, 3, 1
  %70 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %69, i64 32, 4, 0
  %71 = insertvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %70, i64 1, 4, 1
  %72 = alloca float, i64 64, align 64
  %73 = insertvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } poison, ptr %72, 0
  %74 = insertvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %73, ptr %72, 1
  %75 = insertvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %74, i64 0, 2
  %76 = insertvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %75, i64 64, 3, 0
  %77 = insertvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %76, i64 1, 4, 0
  %78 = alloca float, i64 64, align 64
  %79 = insertvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } poison, ptr %78, 0
  %80 = insertvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %79, ptr %78, 1
  %81 = insertvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %80, i64 0, 2
  %82 = insertvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %81, i64 64, 3, 0
  %83 = insertvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %82, i64 1, 4, 0
  %84 = alloca float, i64 64, align 64
  %85 = insertvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } poison, ptr %84, 0
  %86 = insertvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %85, ptr %84, 1
  %87 = insertvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %86, i64 0, 2
  %88 = insertvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %87, i64 64, 3, 0
  %89 = insertvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %88, i64 1, 4, 0
  %90 = alloca float, i64 64, align 64
  %91 = insertvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } poison, ptr %90, 0
  %92 = insertvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %91, ptr %90, 1
  %93 = insertvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %92, i64 0, 2
  %94 = insertvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %93, i64 64, 3, 0
  %95 = insertvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %94, i64 1, 4, 0
  %96 = add i64 %8, 63
  %97 = sdiv i64 %96, 64
  br label %98

98:                                               ; preds = %650, %31
  %99 = phi i64 [ %651, %650 ], [ %29, %31 ]
  %100 = icmp slt i64 %99, %30
  br i1 %100, label %101, label %652

101:                                              ; preds = %98
  %102 = srem i64 %99, %97
  %103 = sdiv i64 %99, %97
  %104 = mul i64 %102, 64
  %105 = add i64 %9, 63
  %106 = sdiv i64 %105, 64
  %107 = sub i64 %8, %104
  %108 = call i64 @llvm.smin.i64(i64 %107, i64 64)
  %109 = mul i64 %104, %12
  %110 = mul i64 %103, %10
  %111 = add i64 %110, %109
  br label %112

112:                                              ; preds = %148, %101
  %113 = phi i64 [ %149, %148 ], [ 0, %101 ]
  %114 = icmp slt i64 %113, 64
  br i1 %114, label %115, label %150

115:                                              ; preds = %112
  %116 = icmp slt i64 %113, %108
  br i1 %116, label %117, label %137

117:                                              ; preds = %115
  %118 = mul i64 %113, %12
  %119 = add i64 %111, %118
  br label %120

120:                                              ; preds = %123, %117
  %121 = phi i64 [ %135, %123 ], [ 0, %117 ]
  %122 = icmp slt i64 %121, 32
  br i1 %122, label %123, label %136

123:                                              ; preds = %120
  %124 = mul i64 %121, %13
  %125 = add i64 %119, %124
  %126 = getelementptr bfloat, ptr %0, i64 %125
  %127 = load i16, ptr %126, align 2
  %128 = zext i16 %127 to i32
  %129 = shl i32 %128, 16
  %130 = bitcast i32 %129 to float
  %131 = extractvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %39, 1
  %132 = mul nuw nsw i64 %113, 32
  %133 = add nuw nsw i64 %132, %121
  %134 = getelementptr inbounds nuw float, ptr %131, i64 %133
  store float %130, ptr %134, align 4
  %135 = add i64 %121, 1
  br label %120

136:                                              ; preds = %120
  br label %148

137:                                              ; preds = %115
  br label %138

138:                                              ; preds = %141, %137
  %139 = phi i64 [ %146, %141 ], [ 0, %137 ]
  %140 = icmp slt i64 %139, 32
  br i1 %140, label %141, label %147

141:                                              ; preds = %138
  %142 = extractvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %39, 1
  %143 = mul nuw nsw i64 %113, 32
  %144 = add nuw nsw i64 %143, %139
  %145 = getelementptr inbounds nuw float, ptr %142, i64 %144
  store float 0.000000e+00, ptr %145, align 4
  %146 = add i64 %139, 1
  br label %138

147:                                              ; preds = %138
  br label %148

148:                                              ; preds = %136, %147
  %149 = add i64 %113, 1
  br label %112

150:                                              ; preds = %112
  br label %151

151:                                              ; preds = %164, %150
  %152 = phi i64 [ %165, %164 ], [ 0, %150 ]
  %153 = icmp slt i64 %152, 64
  br i1 %153, label %154, label %166

154:                                              ; preds = %151
  br label %155

155:                                              ; preds = %158, %154
  %156 = phi i64 [ %163, %158 ], [ 0, %154 ]
  %157 = icmp slt i64 %156, 32
  br i1 %157, label %158, label %164

158:                                              ; preds = %155
  %159 = extractvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %71, 1
  %160 = mul nuw nsw i64 %152, 32
  %161 = add nuw nsw i64 %160, %156
  %162 = getelementptr inbounds nuw float, ptr %159, i64 %161
  store float 0.000000e+00, ptr %162, align 4
  %163 = add i64 %156, 1
  br label %155

164:                                              ; preds = %155
  %165 = add i64 %152, 1
  br label %151

166:                                              ; preds = %151
  br label %167

167:                                              ; preds = %170, %166
  %168 = phi i64 [ %173, %170 ], [ 0, %166 ]
  %169 = icmp slt i64 %168, 64
  br i1 %169, label %170, label %174

170:                                              ; preds = %167
  %171 = extractvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %77, 1
  %172 = getelementptr inbounds nuw float, ptr %171, i64 %168
  store float 0xFFF0000000000000, ptr %172, align 4
  %173 = add i64 %168, 1
  br label %167

174:                                              ; preds = %167
  br label %175

175:                                              ; preds = %178, %174
  %176 = phi i64 [ %181, %178 ], [ 0, %174 ]
  %177 = icmp slt i64 %176, 64
  br i1 %177, label %178, label %182

178:                                              ; preds = %175
  %179 = extractvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %89, 1
  %180 = getelementptr inbounds nuw float, ptr %179, i64 %176
  store float 0.000000e+00, ptr %180, align 4
  %181 = add i64 %176, 1
  br label %175

182:                                              ; preds = %175
  br label %183

183:                                              ; preds = %584, %182
  %184 = phi i64 [ %585, %584 ], [ 0, %182 ]
  %185 = icmp slt i64 %184, %106
  br i1 %185, label %186, label %586

186:                                              ; preds = %183
  %187 = mul i64 %184, 64
  %188 = sub i64 %9, %187
  %189 = call i64 @llvm.smin.i64(i64 %188, i64 64)
  %190 = add i64 %104, %108
  %191 = sub i64 %190, 1
  %192 = add i64 %187, %189
  %193 = sub i64 %192, 1
  %194 = sext i64 %9 to i128
  %195 = sext i64 %8 to i128
  %196 = sub i128 %194, %195
  %197 = icmp sle i128 %196, 2147483647
  %198 = icmp sge i128 %196, -2147483648
  %199 = and i1 %198, %197
  %200 = trunc i128 %196 to i64
  %201 = sext i64 %104 to i128
  %202 = sext i64 %191 to i128
  %203 = sext i64 %200 to i128
  %204 = add i128 %202, %203
  %205 = add i128 %201, %203
  %206 = icmp sle i128 %204, 2147483647
  %207 = icmp sge i128 %205, -2147483648
  %208 = and i1 %207, %206
  %209 = trunc i128 %204 to i64
  %210 = trunc i128 %205 to i64
  %211 = and i1 %199, %208
  %212 = icmp sgt i64 %193, %210
  %213 = icmp sle i64 %187, %209
  %214 = xor i1 %211, true
  %215 = or i1 %214, %213
  %216 = or i1 %214, %212
  %217 = xor i1 %215, true
  %218 = and i1 %216, %217
  %219 = xor i1 %218, true
  br i1 %219, label %220, label %584

220:                                              ; preds = %186
  %221 = mul i64 %187, %16
  %222 = mul i64 %103, %14
  %223 = add i64 %222, %221
  %224 = mul i64 %187, %20
  %225 = mul i64 %103, %18
  %226 = add i64 %225, %224
  br label %227

227:                                              ; preds = %263, %220
  %228 = phi i64 [ %264, %263 ], [ 0, %220 ]
  %229 = icmp slt i64 %228, 64
  br i1 %229, label %230, label %265

230:                                              ; preds = %227
  %231 = icmp slt i64 %228, %189
  br i1 %231, label %232, label %252

232:                                              ; preds = %230
  %233 = mul i64 %228, %16
  %234 = add i64 %223, %233
  br label %235

235:                                              ; preds = %238, %232
  %236 = phi i64 [ %250, %238 ], [ 0, %232 ]
  %237 = icmp slt i64 %236, 32
  br i1 %237, label %238, label %251

238:                                              ; preds = %235
  %239 = mul i64 %236, %17
  %240 = add i64 %234, %239
  %241 = getelementptr bfloat, ptr %1, i64 %240
  %242 = load i16, ptr %241, align 2
  %243 = zext i16 %242 to i32
  %244 = shl i32 %243, 16
  %245 = bitcast i32 %244 to float
  %246 = extractvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %47, 1
  %247 = mul nuw nsw i64 %228, 32
  %248 = add nuw nsw i64 %247, %236
  %249 = getelementptr inbounds nuw float, ptr %246, i64 %248
  store float %245, ptr %249, align 4
  %250 = add i64 %236, 1
  br label %235

251:                                              ; preds = %235
  br label %263

252:                                              ; preds = %230
  br label %253

253:                                              ; preds = %256, %252
  %254 = phi i64 [ %261, %256 ], [ 0, %252 ]
  %255 = icmp slt i64 %254, 32
  br i1 %255, label %256, label %262

256:                                              ; preds = %253
  %257 = extractvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %47, 1
  %258 = mul nuw nsw i64 %228, 32
  %259 = add nuw nsw i64 %258, %254
  %260 = getelementptr inbounds nuw float, ptr %257, i64 %259
  store float 0.000000e+00, ptr %260, align 4
  %261 = add i64 %254, 1
  br label %253

262:                                              ; preds = %253
  br label %263

263:                                              ; preds = %251, %262
  %264 = add i64 %228, 1
  br label %227

265:                                              ; preds = %227
  br label %266

266:                                              ; preds = %302, %265
  %267 = phi i64 [ %303, %302 ], [ 0, %265 ]
  %268 = icmp slt i64 %267, 64
  br i1 %268, label %269, label %304

269:                                              ; preds = %266
  %270 = icmp slt i64 %267, %189
  br i1 %270, label %271, label %291

271:                                              ; preds = %269
  %272 = mul i64 %267, %20
  %273 = add i64 %226, %272
  br label %274

274:                                              ; preds = %277, %271
  %275 = phi i64 [ %289, %277 ], [ 0, %271 ]
  %276 = icmp slt i64 %275, 32
  br i1 %276, label %277, label %290

277:                                              ; preds = %274
  %278 = mul i64 %275, %21
  %279 = add i64 %273, %278
  %280 = getelementptr bfloat, ptr %2, i64 %279
  %281 = load i16, ptr %280, align 2
  %282 = zext i16 %281 to i32
  %283 = shl i32 %282, 16
  %284 = bitcast i32 %283 to float
  %285 = extractvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %55, 1
  %286 = mul nuw nsw i64 %267, 32
  %287 = add nuw nsw i64 %286, %275
  %288 = getelementptr inbounds nuw float, ptr %285, i64 %287
  store float %284, ptr %288, align 4
  %289 = add i64 %275, 1
  br label %274

290:                                              ; preds = %274
  br label %302

291:                                              ; preds = %269
  br label %292

292:                                              ; preds = %295, %291
  %293 = phi i64 [ %300, %295 ], [ 0, %291 ]
  %294 = icmp slt i64 %293, 32
  br i1 %294, label %295, label %301

295:                                              ; preds = %292
  %296 = extractvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %55, 1
  %297 = mul nuw nsw i64 %267, 32
  %298 = add nuw nsw i64 %297, %293
  %299 = getelementptr inbounds nuw float, ptr %296, i64 %298
  store float 0.000000e+00, ptr %299, align 4
  %300 = add i64 %293, 1
  br label %292

301:                                              ; preds = %292
  br label %302

302:                                              ; preds = %290, %301
  %303 = add i64 %267, 1
  br label %266

304:                                              ; preds = %266
  br label %305

305:                                              ; preds = %338, %304
  %306 = phi i64 [ %339, %338 ], [ 0, %304 ]
  %307 = icmp slt i64 %306, 64
  br i1 %307, label %308, label %340

308:                                              ; preds = %305
  br label %309

309:                                              ; preds = %331, %308
  %310 = phi i64 [ %337, %331 ], [ 0, %308 ]
  %311 = icmp slt i64 %310, 64
  br i1 %311, label %312, label %338

312:                                              ; preds = %309
  br label %313

313:                                              ; preds = %317, %312
  %314 = phi i64 [ %330, %317 ], [ 0, %312 ]
  %315 = phi float [ %329, %317 ], [ 0.000000e+00, %312 ]
  %316 = icmp slt i64 %314, 32
  br i1 %316, label %317, label %331

317:                                              ; preds = %313
  %318 = extractvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %47, 1
  %319 = mul nuw nsw i64 %310, 32
  %320 = add nuw nsw i64 %319, %314
  %321 = getelementptr inbounds nuw float, ptr %318, i64 %320
  %322 = load float, ptr %321, align 4
  %323 = extractvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %39, 1
  %324 = mul nuw nsw i64 %306, 32
  %325 = add nuw nsw i64 %324, %314
  %326 = getelementptr inbounds nuw float, ptr %323, i64 %325
  %327 = load float, ptr %326, align 4
  %328 = fmul reassoc float %327, %322
  %329 = fadd reassoc float %315, %328
  %330 = add i64 %314, 1
  br label %313

331:                                              ; preds = %313
  %332 = fmul float %315, 0x3FD0527DC0000000
  %333 = extractvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %63, 1
  %334 = mul nuw nsw i64 %306, 64
  %335 = add nuw nsw i64 %334, %310
  %336 = getelementptr inbounds nuw float, ptr %333, i64 %335
  store float %332, ptr %336, align 4
  %337 = add i64 %310, 1
  br label %309

338:                                              ; preds = %309
  %339 = add i64 %306, 1
  br label %305

340:                                              ; preds = %305
  br i1 %216, label %341, label %381

341:                                              ; preds = %340
  br label %342

342:                                              ; preds = %378, %341
  %343 = phi i64 [ %379, %378 ], [ 0, %341 ]
  %344 = icmp slt i64 %343, 64
  br i1 %344, label %345, label %380

345:                                              ; preds = %342
  br label %346

346:                                              ; preds = %366, %345
  %347 = phi i64 [ %377, %366 ], [ 0, %345 ]
  %348 = icmp slt i64 %347, 64
  br i1 %348, label %349, label %378

349:                                              ; preds = %346
  %350 = icmp slt i64 %347, %189
  %351 = icmp slt i64 %343, %108
  %352 = and i1 %351, %350
  br i1 %352, label %353, label %363

353:                                              ; preds = %349
  %354 = add i64 %104, %343
  %355 = trunc i64 %354 to i32
  %356 = add i64 %187, %347
  %357 = trunc i64 %356 to i32
  %358 = trunc i64 %8 to i32
  %359 = trunc i64 %9 to i32
  %360 = sub i32 %359, %358
  %361 = add i32 %355, %360
  %362 = icmp sle i32 %357, %361
  br label %364

363:                                              ; preds = %349
  br label %364

364:                                              ; preds = %353, %363
  %365 = phi i1 [ false, %363 ], [ %362, %353 ]
  br label %366

366:                                              ; preds = %364
  %367 = extractvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %63, 1
  %368 = mul nuw nsw i64 %343, 64
  %369 = add nuw nsw i64 %368, %347
  %370 = getelementptr inbounds nuw float, ptr %367, i64 %369
  %371 = load float, ptr %370, align 4
  %372 = select i1 %365, float %371, float 0xFFF0000000000000
  %373 = extractvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %63, 1
  %374 = mul nuw nsw i64 %343, 64
  %375 = add nuw nsw i64 %374, %347
  %376 = getelementptr inbounds nuw float, ptr %373, i64 %375
  store float %372, ptr %376, align 4
  %377 = add i64 %347, 1
  br label %346

378:                                              ; preds = %346
  %379 = add i64 %343, 1
  br label %342

380:                                              ; preds = %342
  br label %400

381:                                              ; preds = %340
  br label %382

382:                                              ; preds = %397, %381
  %383 = phi i64 [ %398, %397 ], [ 0, %381 ]
  %384 = icmp slt i64 %383, 64
  br i1 %384, label %385, label %399

385:                                              ; preds = %382
  %386 = icmp slt i64 %383, %108
  %387 = select i1 %386, i64 %189, i64 0
  br label %388

388:                                              ; preds = %391, %385
  %389 = phi i64 [ %396, %391 ], [ %387, %385 ]
  %390 = icmp slt i64 %389, 64
  br i1 %390, label %391, label %397

391:                                              ; preds = %388
  %392 = extractvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %63, 1
  %393 = mul nuw nsw i64 %383, 64
  %394 = add nuw nsw i64 %393, %389
  %395 = getelementptr inbounds nuw float, ptr %392, i64 %394
  store float 0xFFF0000000000000, ptr %395, align 4
  %396 = add i64 %389, 1
  br label %388

397:                                              ; preds = %388
  %398 = add i64 %383, 1
  br label %382

399:                                              ; preds = %382
  br label %400

400:                                              ; preds = %380, %399
  br label %401

401:                                              ; preds = %420, %400
  %402 = phi i64 [ %423, %420 ], [ 0, %400 ]
  %403 = icmp slt i64 %402, 64
  br i1 %403, label %404, label %424

404:                                              ; preds = %401
  %405 = extractvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %77, 1
  %406 = getelementptr inbounds nuw float, ptr %405, i64 %402
  %407 = load float, ptr %406, align 4
  br label %408

408:                                              ; preds = %412, %404
  %409 = phi i64 [ %419, %412 ], [ 0, %404 ]
  %410 = phi float [ %418, %412 ], [ %407, %404 ]
  %411 = icmp slt i64 %409, 64
  br i1 %411, label %412, label %420

412:                                              ; preds = %408
  %413 = extractvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %63, 1
  %414 = mul nuw nsw i64 %402, 64
  %415 = add nuw nsw i64 %414, %409
  %416 = getelementptr inbounds nuw float, ptr %413, i64 %415
  %417 = load float, ptr %416, align 4
  %418 = call reassoc float @llvm.maximum.f32(float %410, float %417)
  %419 = add i64 %409, 1
  br label %408

420:                                              ; preds = %408
  %421 = extractvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %83, 1
  %422 = getelementptr inbounds nuw float, ptr %421, i64 %402
  store float %410, ptr %422, align 4
  %423 = add i64 %402, 1
  br label %401

424:                                              ; preds = %401
  br label %425

425:                                              ; preds = %450, %424
  %426 = phi i64 [ %451, %450 ], [ 0, %424 ]
  %427 = icmp slt i64 %426, 64
  br i1 %427, label %428, label %452

428:                                              ; preds = %425
  %429 = extractvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %83, 1
  %430 = getelementptr inbounds nuw float, ptr %429, i64 %426
  %431 = load float, ptr %430, align 4
  %432 = fcmp oeq float %431, 0xFFF0000000000000
  br label %433

433:                                              ; preds = %436, %428
  %434 = phi i64 [ %449, %436 ], [ 0, %428 ]
  %435 = icmp slt i64 %434, 64
  br i1 %435, label %436, label %450

436:                                              ; preds = %433
  %437 = extractvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %63, 1
  %438 = mul nuw nsw i64 %426, 64
  %439 = add nuw nsw i64 %438, %434
  %440 = getelementptr inbounds nuw float, ptr %437, i64 %439
  %441 = load float, ptr %440, align 4
  %442 = fsub float %441, %431
  %443 = call float @llvm.exp2.f32(float %442)
  %444 = select i1 %432, float 0.000000e+00, float %443
  %445 = extractvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %63, 1
  %446 = mul nuw nsw i64 %426, 64
  %447 = add nuw nsw i64 %446, %434
  %448 = getelementptr inbounds nuw float, ptr %445, i64 %447
  store float %444, ptr %448, align 4
  %449 = add i64 %434, 1
  br label %433

450:                                              ; preds = %433
  %451 = add i64 %426, 1
  br label %425

452:                                              ; preds = %425
  br label %453

453:                                              ; preds = %456, %452
  %454 = phi i64 [ %469, %456 ], [ 0, %452 ]
  %455 = icmp slt i64 %454, 64
  br i1 %455, label %456, label %470

456:                                              ; preds = %453
  %457 = extractvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %83, 1
  %458 = getelementptr inbounds nuw float, ptr %457, i64 %454
  %459 = load float, ptr %458, align 4
  %460 = fcmp oeq float %459, 0xFFF0000000000000
  %461 = extractvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %77, 1
  %462 = getelementptr inbounds nuw float, ptr %461, i64 %454
  %463 = load float, ptr %462, align 4
  %464 = fsub float %463, %459
  %465 = call float @llvm.exp2.f32(float %464)
  %466 = select i1 %460, float 0.000000e+00, float %465
  %467 = extractvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %95, 1
  %468 = getelementptr inbounds nuw float, ptr %467, i64 %454
  store float %466, ptr %468, align 4
  %469 = add i64 %454, 1
  br label %453

470:                                              ; preds = %453
  br label %471

471:                                              ; preds = %474, %470
  %472 = phi i64 [ %484, %474 ], [ 0, %470 ]
  %473 = icmp slt i64 %472, 64
  br i1 %473, label %474, label %485

474:                                              ; preds = %471
  %475 = extractvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %95, 1
  %476 = getelementptr inbounds nuw float, ptr %475, i64 %472
  %477 = load float, ptr %476, align 4
  %478 = extractvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %89, 1
  %479 = getelementptr inbounds nuw float, ptr %478, i64 %472
  %480 = load float, ptr %479, align 4
  %481 = fmul float %480, %477
  %482 = extractvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %89, 1
  %483 = getelementptr inbounds nuw float, ptr %482, i64 %472
  store float %481, ptr %483, align 4
  %484 = add i64 %472, 1
  br label %471

485:                                              ; preds = %471
  br label %486

486:                                              ; preds = %502, %485
  %487 = phi i64 [ %509, %502 ], [ 0, %485 ]
  %488 = icmp slt i64 %487, 64
  br i1 %488, label %489, label %510

489:                                              ; preds = %486
  br label %490

490:                                              ; preds = %494, %489
  %491 = phi i64 [ %501, %494 ], [ 0, %489 ]
  %492 = phi float [ %500, %494 ], [ 0.000000e+00, %489 ]
  %493 = icmp slt i64 %491, 64
  br i1 %493, label %494, label %502

494:                                              ; preds = %490
  %495 = extractvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %63, 1
  %496 = mul nuw nsw i64 %487, 64
  %497 = add nuw nsw i64 %496, %491
  %498 = getelementptr inbounds nuw float, ptr %495, i64 %497
  %499 = load float, ptr %498, align 4
  %500 = fadd reassoc float %492, %499
  %501 = add i64 %491, 1
  br label %490

502:                                              ; preds = %490
  %503 = extractvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %89, 1
  %504 = getelementptr inbounds nuw float, ptr %503, i64 %487
  %505 = load float, ptr %504, align 4
  %506 = fadd float %505, %492
  %507 = extractvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %89, 1
  %508 = getelementptr inbounds nuw float, ptr %507, i64 %487
  store float %506, ptr %508, align 4
  %509 = add i64 %487, 1
  br label %486

510:                                              ; preds = %486
  br label %511

511:                                              ; preds = %533, %510
  %512 = phi i64 [ %534, %533 ], [ 0, %510 ]
  %513 = icmp slt i64 %512, 64
  br i1 %513, label %514, label %535

514:                                              ; preds = %511
  %515 = extractvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %95, 1
  %516 = getelementptr inbounds nuw float, ptr %515, i64 %512
  %517 = load float, ptr %516, align 4
  br label %518

518:                                              ; preds = %521, %514
  %519 = phi i64 [ %532, %521 ], [ 0, %514 ]
  %520 = icmp slt i64 %519, 32
  br i1 %520, label %521, label %533

521:                                              ; preds = %518
  %522 = extractvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %71, 1
  %523 = mul nuw nsw i64 %512, 32
  %524 = add nuw nsw i64 %523, %519
  %525 = getelementptr inbounds nuw float, ptr %522, i64 %524
  %526 = load float, ptr %525, align 4
  %527 = fmul float %526, %517
  %528 = extractvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %71, 1
  %529 = mul nuw nsw i64 %512, 32
  %530 = add nuw nsw i64 %529, %519
  %531 = getelementptr inbounds nuw float, ptr %528, i64 %530
  store float %527, ptr %531, align 4
  %532 = add i64 %519, 1
  br label %518

533:                                              ; preds = %518
  %534 = add i64 %512, 1
  br label %511

535:                                              ; preds = %511
  br label %536

536:                                              ; preds = %572, %535
  %537 = phi i64 [ %573, %572 ], [ 0, %535 ]
  %538 = icmp slt i64 %537, 64
  br i1 %538, label %539, label %574

539:                                              ; preds = %536
  br label %540

540:                                              ; preds = %570, %539
  %541 = phi i64 [ %571, %570 ], [ 0, %539 ]
  %542 = icmp slt i64 %541, 64
  br i1 %542, label %543, label %572

543:                                              ; preds = %540
  %544 = extractvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %63, 1
  %545 = mul nuw nsw i64 %537, 64
  %546 = add nuw nsw i64 %545, %541
  %547 = getelementptr inbounds nuw float, ptr %544, i64 %546
  %548 = load float, ptr %547, align 4
  br label %549

549:                                              ; preds = %552, %543
  %550 = phi i64 [ %569, %552 ], [ 0, %543 ]
  %551 = icmp slt i64 %550, 32
  br i1 %551, label %552, label %570

552:                                              ; preds = %549
  %553 = extractvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %55, 1
  %554 = mul nuw nsw i64 %541, 32
  %555 = add nuw nsw i64 %554, %550
  %556 = getelementptr inbounds nuw float, ptr %553, i64 %555
  %557 = load float, ptr %556, align 4
  %558 = fmul float %548, %557
  %559 = extractvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %71, 1
  %560 = mul nuw nsw i64 %537, 32
  %561 = add nuw nsw i64 %560, %550
  %562 = getelementptr inbounds nuw float, ptr %559, i64 %561
  %563 = load float, ptr %562, align 4
  %564 = fadd float %563, %558
  %565 = extractvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %71, 1
  %566 = mul nuw nsw i64 %537, 32
  %567 = add nuw nsw i64 %566, %550
  %568 = getelementptr inbounds nuw float, ptr %565, i64 %567
  store float %564, ptr %568, align 4
  %569 = add i64 %550, 1
  br label %549

570:                                              ; preds = %549
  %571 = add i64 %541, 1
  br label %540

572:                                              ; preds = %540
  %573 = add i64 %537, 1
  br label %536

574:                                              ; preds = %536
  %575 = extractvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %83, 3, 0
  %576 = mul i64 1, %575
  %577 = mul i64 %576, 4
  %578 = extractvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %83, 1
  %579 = extractvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %83, 2
  %580 = getelementptr float, ptr %578, i64 %579
  %581 = extractvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %77, 1
  %582 = extractvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %77, 2
  %583 = getelementptr float, ptr %581, i64 %582
  call void @llvm.memcpy.p0.p0.i64(ptr %583, ptr %580, i64 %577, i1 false)
  br label %584

584:                                              ; preds = %574, %186
  %585 = add i64 %184, 1
  br label %183

586:                                              ; preds = %183
  %587 = mul i64 %104, %24
  %588 = mul i64 %103, %22
  %589 = add i64 %588, %587
  br label %590

590:                                              ; preds = %625, %586
  %591 = phi i64 [ %626, %625 ], [ 0, %586 ]
  %592 = icmp slt i64 %591, %108
  br i1 %592, label %593, label %627

593:                                              ; preds = %590
  %594 = extractvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %89, 1
  %595 = getelementptr inbounds nuw float, ptr %594, i64 %591
  %596 = load float, ptr %595, align 4
  %597 = fcmp oeq float %596, 0.000000e+00
  %598 = fdiv float 1.000000e+00, %596
  %599 = select i1 %597, float 0.000000e+00, float %598
  %600 = mul i64 %591, %24
  %601 = add i64 %589, %600
  br label %602

602:                                              ; preds = %605, %593
  %603 = phi i64 [ %624, %605 ], [ 0, %593 ]
  %604 = icmp slt i64 %603, 32
  br i1 %604, label %605, label %625

605:                                              ; preds = %602
  %606 = extractvalue { ptr, ptr, i64, [2 x i64], [2 x i64] } %71, 1
  %607 = mul nuw nsw i64 %591, 32
  %608 = add nuw nsw i64 %607, %603
  %609 = getelementptr inbounds nuw float, ptr %606, i64 %608
  %610 = load float, ptr %609, align 4
  %611 = fmul float %610, %599
  %612 = mul i64 %603, %25
  %613 = add i64 %601, %612
  %614 = getelementptr bfloat, ptr %3, i64 %613
  %615 = bitcast float %611 to i32
  %616 = lshr i32 %615, 16
  %617 = and i32 %616, 1
  %618 = add i32 %617, 32767
  %619 = add i32 %615, %618
  %620 = lshr i32 %619, 16
  %621 = fcmp uno float %611, %611
  %622 = select i1 %621, i32 32704, i32 %620
  %623 = trunc i32 %622 to i16
  store i16 %623, ptr %614, align 2
  %624 = add i64 %603, 1
  br label %602

625:                                              ; preds = %602
  %626 = add i64 %591, 1
  br label %590

627:                                              ; preds = %590
  %628 = mul i64 %104, %28
  %629 = mul i64 %103, %26
  %630 = add i64 %629, %628
  br label %631

631:                                              ; preds = %634, %627
  %632 = phi i64 [ %649, %634 ], [ 0, %627 ]
  %633 = icmp slt i64 %632, %108
  br i1 %633, label %634, label %650

634:                                              ; preds = %631
  %635 = extractvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %89, 1
  %636 = getelementptr inbounds nuw float, ptr %635, i64 %632
  %637 = load float, ptr %636, align 4
  %638 = fcmp oeq float %637, 0.000000e+00
  %639 = call float @llvm.log2.f32(float %637)
  %640 = extractvalue { ptr, ptr, i64, [1 x i64], [1 x i64] } %77, 1
  %641 = getelementptr inbounds nuw float, ptr %640, i64 %632
  %642 = load float, ptr %641, align 4
  %643 = fadd float %642, %639
  %644 = fmul float %643, 0x3FE62E4300000000
  %645 = mul i64 %632, %28
  %646 = add i64 %630, %645
  %647 = select i1 %638, float 0xFFF0000000000000, float %644
  %648 = getelementptr float, ptr %4, i64 %646
  store float %647, ptr %648, align 4
  %649 = add i64 %632, 1
  br label %631

650:                                              ; preds = %631
  %651 = add i64 %99, 1
  br label %98

652:                                              ; preds = %98
  ret void
}

; Function Attrs: nocallback nocreateundeforpoison nofree nosync nounwind speculatable willreturn memory(none)
declare i64 @llvm.smin.i64(i64, i64) #0

; Function Attrs: nocallback nocreateundeforpoison nofree nosync nounwind speculatable willreturn memory(none)
declare float @llvm.log2.f32(float) #0

; Function Attrs: nocallback nofree nounwind willreturn memory(argmem: readwrite)
declare void @llvm.memcpy.p0.p0.i64(ptr noalias writeonly captures(none), ptr noalias readonly captures(none), i64, i1 immarg) #1

; Function Attrs: nocallback nocreateundeforpoison nofree nosync nounwind speculatable willreturn memory(none)
declare float @llvm.exp2.f32(float) #0

; Function Attrs: nocallback nocreateundeforpoison nofree nosync nounwind speculatable willreturn memory(none)
declare float @llvm.maximum.f32(float, float) #0

attributes #0 = { nocallback nocreateundeforpoison nofree nosync nounwind speculatable willreturn memory(none) }
attributes #1 = { nocallback nofree nounwind willreturn memory(argmem: readwrite) }

!llvm.module.flags = !{!0}

!0 = !{i32 2, !"Debug Info Version", i32 3}
