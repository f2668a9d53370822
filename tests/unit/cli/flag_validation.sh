#!/bin/sh
# Each `flashjit` flag is checked on its own: a bad value exits 1 with a
# message that quotes the value as typed, and no flag's text can set another
# spec field. Usage: flag_validation.sh FLASHJIT
f="$1"
fail=0
# expect_error SUBSTRING ARGS...: flashjit ARGS exits 1 and stderr holds
# SUBSTRING (a fixed string).
expect_error() {
  want="$1"; shift
  err=$("$f" "$@" 2>&1 >/dev/null); rc=$?
  if [ "$rc" != 1 ] || ! printf '%s' "$err" | grep -qF -- "$want"; then
    echo "FAIL: flashjit $*: rc=$rc, wanted 1 and '$want' in: $err"
    fail=1
  fi
}
c="compile --target cpu --no-cache"
# Injection attempts: each is an error about that one flag.
expect_error "--causal 'top_left, heads_q=4' is not one of none, top_left, bottom_right" $c --causal 'top_left, heads_q=4'
expect_error "--dtype 'bf16, heads_q=4' is not one of bf16, fp16, fp32, e4m3, e5m2" $c --dtype 'bf16, heads_q=4'
expect_error "--name 'x, heads_q=4' is not an identifier" $c --name 'x, heads_q=4'
expect_error "--mask: unexpected ')' after the expression at column 5" $c --mask 'true), heads_q=(4'
expect_error "--score: unexpected ')' after the expression at column 6" $c --score 'score), heads_q=(4'
expect_error "'64, heads_q=4' value invalid for integer argument" $c --head-dim '64, heads_q=4'
# Values out of range, quoted as typed.
expect_error "--causal 'TopLeft' is not one of" $c --causal TopLeft
expect_error "--dtype 'fp8' is not one of bf16, fp16, fp32, e4m3, e5m2" $c --dtype fp8
expect_error "--head-dim 0 is out of range [1, 512] (the CPU backend's limit; GPU targets take up to 256)" $c --head-dim 0
expect_error "--head-dim 2000 is out of range [1, 512]" $c --head-dim 2000
expect_error "--head-dim 513 is out of range [1, 512]" $c --head-dim 513
expect_error "--heads-q 0 must be positive" $c --heads-q 0
expect_error "--heads-kv -2 must be positive" $c --heads-kv -2
expect_error "--heads-kv 3 must divide --heads-q 4 (GQA)" $c --heads-q 4 --heads-kv 3
expect_error "--mask 'q_idx + 1': the mask must be a bool expression, got i32" $c --mask 'q_idx + 1'
expect_error "--mask 'score > 0': the mask cannot read 'score'" $c --mask 'score > 0'
expect_error "--score 'q_idx < 3': the score modifier must be a number, got bool" $c --score 'q_idx < 3'
expect_error "--mask: sliding_window left = -1 must be >= 0 at column 16" $c --mask 'sliding_window(-1, 0, top_left)'
expect_error "--name '' is not an identifier" $c --name ''
expect_error "--spec: unknown causal mode 'diagonal'" $c --spec 'attention(causal=diagonal)'
expect_error "--spec 'attention(heads_q=3, heads_kv=2)': heads_kv = 2 must divide heads_q = 3" $c --spec 'attention(heads_q=3, heads_kv=2)'
expect_error "--block-n 7 is not 0 (the default), 16, 32, 64 or 128 (CPU)" $c --causal top_left --block-n 7
expect_error "--block-n 24 is not 0 (the default), 16, 32, 64 or 128 (CPU)" $c --causal top_left --block-n 24
expect_error "--block-n 136 is not 0 (the default) or a multiple of 16" compile --target sm_80 --no-cache --causal top_left --block-n 136
expect_error "--warps 3 is not 0 (the default), 4 or 8 (12: --mma wgmma.tma.ws)" compile --target sm_80 --no-cache --causal top_left --warps 3
expect_error "--rows-per-warp 8 is not 0 (the default), 16 or 32" compile --target sm_80 --no-cache --causal top_left --rows-per-warp 8
expect_error "--mma 'hmma' is not one of default, mma.sync, wgmma" compile --target sm_80 --no-cache --causal top_left --mma hmma
expect_error "--target 'sm_70' is not one of sm_80, sm_90a, cpu" compile --causal top_left --target sm_70
expect_error "--stage 'bogus' is not a CPU stage" inspect --target cpu --no-cache --causal top_left --stage bogus
# Valid flags set exactly their own fields.
out=$("$f" $c --name swa --mask 'sliding_window(8, 0, top_left)' \
  --score 'softcap(30.0)' --head-dim 64 --dtype fp16 --heads-q 4 \
  --heads-kv 2 --causal bottom_right | grep '^spec ')
want="spec    attention(name=swa, mask=((kv_idx >= (q_idx - 8)) && (kv_idx <= q_idx)), score=(30.0 * tanh((score / 30.0))), head_dim_qk=64, head_dim_v=64, dtype_q=fp16, dtype_k=fp16, dtype_v=fp16, dtype_o=fp16, heads_q=4, heads_kv=2, causal=bottom_right, scale=default, lse=true)"
if [ "$out" != "$want" ]; then
  echo "FAIL: flags gave the spec"; echo "  $out"; echo "wanted"; echo "  $want"; fail=1
fi
# bundle --kernel: a comma list of fwd, bwd and decode; decode is GPU only.
expect_error "bundle: --kernel 'fwd,dec': give a comma list of fwd, bwd and decode" \
  bundle --out /tmp/flashjit-flag-bundle --spec 'attention(head_dim=64)' --kernel fwd,dec
expect_error "bundle: --kernel decode is for GPU targets" \
  bundle --out /tmp/flashjit-flag-bundle --spec 'attention(head_dim=64)' --kernel fwd,decode --target sm_90a,cpu
expect_error "--kernel decode --target cpu" compile --kernel decode --target cpu --causal bottom_right
[ $fail = 0 ] && echo flags-ok
exit $fail
