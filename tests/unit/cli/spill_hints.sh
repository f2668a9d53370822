#!/bin/sh
# `flashjit compile` for GPU targets (no GPU; ptxas assembles): the mma= it
# reports is the kernel's own (wgmma.tma and wgmma.tma.ws were reported as
# wgmma), and a kernel that spills gets only hints that were checked: each
# flag is validated and compiled, and named only if that kernel assembles
# without spills (the wgmma backward was told "--block-n 32", which it
# refuses). Usage: spill_hints.sh FLASHJIT DIR
set -u
fj=$1
dir=$2
rm -rf "$dir"
mkdir -p "$dir"
c="compile --no-cache --target sm_90a"
fail=0
mma() { # EXPECTED ARGS...: the mma= of `compile ARGS`
  want=$1; shift
  got=$("$fj" $c "$@" 2>&1 | sed -n 's/^kernel .* mma=\([^ ]*\) .*/\1/p')
  [ "$got" = "$want" ] || { echo "FAIL: $*: mma=$got, wanted $want"; fail=1; }
}
mma wgmma.tma --spec 'attention(head_dim=64)'
# The overlap and the ping-pong by their --mma names (nu26: both were
# reported as wgmma.tma.ws).
mma wgmma.tma.ws.overlap --spec 'attention(head_dim=128)'
mma wgmma.tma.ws --spec 'attention(head_dim=128)' --mma wgmma.tma.ws
mma wgmma.tma.ws.overlap.pingpong --spec 'attention(head_dim=128)' --mma wgmma.tma.ws.overlap.pingpong
mma wgmma --spec 'attention(head_dim=64)' --mma wgmma
mma mma.sync --spec 'attention(head_dim=96)'
mma wgmma --spec 'attention(head_dim=64)' --kernel bwd
# The wgmma backward asked for by name at head dim 128 with a runtime softcap
# (d s'/d cap keeps the raw score live) spills; mma.sync assembles clean,
# --block-n 32 is refused by the wgmma backward.
"$fj" $c --kernel bwd --mma wgmma \
  --spec 'attention(head_dim=128, score=softcap(param<f32>(cap)))' >"$dir/w.out" 2>"$dir/w.err"
cat "$dir/w.err"
grep -q "^kernel .* mma=wgmma .*spill_bytes=[1-9]" "$dir/w.out" ||
  { echo "FAIL: no spills reported:"; cat "$dir/w.out"; fail=1; }
grep -q "warning: the kernel spills .*; --mma mma.sync assembles without spills (checked)" "$dir/w.err" ||
  { echo "FAIL: no checked mma.sync hint"; fail=1; }
! grep -q -- "--block-n" "$dir/w.err" ||
  { echo "FAIL: a refused --block-n hint"; fail=1; }
# The masked wgmma backward at head dim 128: causal assembles pipelined
# clean; varlen bottom-right causal spills 8 bytes pipelined (ptxas 13) and
# is built with the synchronous step (sync_backward), clean, not with
# mma.sync.
order() { # EXPECTED-SYNC SPEC [FLAGS]: `compile --kernel bwd` of SPEC
  want=$1 spec=$2; shift 2
  out=$("$fj" $c --kernel bwd "$@" --spec "$spec" 2>/dev/null)
  echo "$out" | grep -q "^kernel .* mma=wgmma .*spill_bytes=0" ||
    { echo "FAIL: $spec: $out"; fail=1; }
  if [ "$want" = sync ]; then
    echo "$out" | grep -q " sync_backward" ||
      { echo "FAIL: $spec: not sync_backward: $out"; fail=1; }
  else
    ! echo "$out" | grep -q " sync_backward" ||
      { echo "FAIL: $spec: sync_backward: $out"; fail=1; }
  fi
}
order pipelined 'attention(head_dim=128, causal=top_left)'
order sync 'attention(head_dim=128, causal=bottom_right)' --varlen
[ $fail = 0 ] && echo spill-hints-ok
