module {
  attn.attention @dumped attributes {buffers = {}, dtype_k = bf16, dtype_o = bf16, dtype_q = bf16, dtype_v = bf16, head_dim_qk = 32 : i64, head_dim_v = 32 : i64, heads_kv = 1 : i64, heads_q = 1 : i64, params = {}, return_lse = true, scale = 0.176776692 : f32} mask {
  ^bb0(%batch: i32 loc("../../frontend/lib/Variant.cpp":159:28), %head: i32 loc("../../frontend/lib/Variant.cpp":159:28), %q_idx: i32 loc("../../frontend/lib/Variant.cpp":159:28), %kv_idx: i32 loc("../../frontend/lib/Variant.cpp":159:28), %seqlen_q: i32 loc("../../frontend/lib/Variant.cpp":159:28), %seqlen_k: i32 loc("../../frontend/lib/Variant.cpp":159:28)):
    %0 = arith.subi %seqlen_k, %seqlen_q : i32 loc("../../frontend/lib/Variant.cpp":159:28)
    %1 = arith.addi %q_idx, %0 : i32 loc("../../frontend/lib/Variant.cpp":159:28)
    %2 = arith.cmpi sle, %kv_idx, %1 : i32 loc("../../frontend/lib/Variant.cpp":159:28)
    attn.yield %2 : i1 loc("../../frontend/lib/Variant.cpp":159:28)
  } score {
  ^bb0(%score: f32 loc("":0:0), %batch: i32 loc("":0:0), %head: i32 loc("":0:0), %q_idx: i32 loc("":0:0), %kv_idx: i32 loc("":0:0), %seqlen_q: i32 loc("":0:0), %seqlen_k: i32 loc("":0:0)):
    attn.yield %score : f32 loc("":0:0)
  } loc("../../frontend/lib/Variant.cpp":159:28)
} loc("../../frontend/lib/Variant.cpp":159:28)