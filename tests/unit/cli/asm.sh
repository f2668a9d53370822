#!/bin/sh
# `flashjit inspect --stage asm|resources --target cpu`: the host assembly of
# a CPU kernel, generated again from its optimised IR, with a resource line
# per function. Its instruction count is checked against an independent
# disassembly of the kernel.o that `compile --out` writes (objdump, padding
# nops left out), within 2% (the IR's trip through text moves a few).
# Usage: asm.sh FLASHJIT WORK_DIR
f="$1"; w="$2"
rm -rf "$w"; mkdir -p "$w"
set -e
spec='--spec=attention(name=swa, mask=sliding_window(40, 0, top_left), score=softcap(20.0), head_dim=64, heads_q=4, heads_kv=2)'
c="--cache-dir=$w/cache"
"$f" inspect --stage asm --target cpu "$spec" $c > "$w/k.s"
grep -q '^	.type	flashjit_swa,@function' "$w/k.s"
grep -q '^	.type	flashjit_swa_packed,@function' "$w/k.s"
line=$(grep '^# flashjit_swa: ' "$w/k.s")
echo "$line"
n=$(echo "$line" | sed 's/.*instructions=\([0-9]*\).*/\1/')
test "$n" -gt 100
echo "$line" | grep -q 'stack_frame_bytes=[0-9]* spill_stores=[0-9]* spill_loads=[0-9]*'
# resources: the summary alone, the same numbers.
"$f" inspect --stage resources --target cpu "$spec" $c > "$w/r.txt"
grep -qxF "$line" "$w/r.txt"
test "$(grep -c '^	' "$w/r.txt" || true)" = 0
if command -v objdump > /dev/null; then
  "$f" compile --target cpu "$spec" $c --out "$w/out" > /dev/null
  m=$(objdump -d --no-show-raw-insn "$w/out/kernel.o" |
      awk '/<flashjit_swa>:/{f=1;next} /^$/{if(f)exit} f' |
      grep '^ *[0-9a-f]*:' | grep -v nop | grep -vc 'xchg *%ax,%ax')
  echo "objdump of kernel.o: $m instructions; asm: $n"
  test $((n * 100)) -ge $((m * 98)) && test $((n * 100)) -le $((m * 102))
fi
# --kernel bwd: the backward's functions, not the forward's (it printed
# the forward before 2026-12-02).
"$f" inspect --stage resources --kernel bwd --target cpu "$spec" $c > "$w/b.txt"
grep -q '^# flashjit_swa_bwd: instructions=' "$w/b.txt"
grep -q '^# flashjit_swa_bwd_dq: instructions=' "$w/b.txt"
! grep -q '^# flashjit_swa: ' "$w/b.txt"
echo asm-ok
