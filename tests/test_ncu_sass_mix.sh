#!/usr/bin/env bash
# tools/cuda/ncu_sass_mix.py reads ncu's SASS source page whatever the width of its instruction
# column: a made-up page of one launch with a predicated instruction ("@P0   IMAD": the predicate
# apart by three spaces) and instruction texts of different lengths; the executed and sampled
# counts, the opcode mix and the --stalls listing must add up.
set -u
fail=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }
tmp=$(mktemp /tmp/di_sass_XXXXXX)
cat > "$tmp" <<'PAGE'
==PROF== Profiling "k": 0%....50%....100% - 5 passes
Kernel Name        void k(int)
------------------ ---------
Address            Source                          Warp S  Warp S # Samp  Instru  Thread
0x7f0000000000           LDC R1, c[0x0][0x28]                                   4      4      4      64     2048   2048
0x7f0000000010     @P0   IMAD.IADD R0, R0, 0x1, -R5                             0      0      0      64     2048   768
0x7f0000000020           HMMA.16816.F32.BF16 R64, R64, R52, R48                 10     9      10     256    8192   8192
0x7f0000000030           BAR.SYNC.DEFER_BLOCKING 0x0                   2      1      2      64     2048   2048
PAGE
out=$(python3 tools/cuda/ncu_sass_mix.py "$tmp" --stalls 2 --stretch 2 2>&1); rc=$?
check "exit 0" "[ $rc -eq 0 ]"
check "4 instructions, 448 executed, 16 samples" "grep -q '4 SASS instructions, 448 warp instructions executed, 16 stall samples' <<<\"\$out\""
check "the predicated IMAD counted" "grep -q 'IMAD 64 (14%)' <<<\"\$out\""
check "HMMA first by samples" "grep -A1 'most stall samples' <<<\"\$out\" | grep -q 'samples 10 .*HMMA'"
check "two stretches" "[ \$(grep -c '^ *[0-9]*: ' <<<\"\$out\") -eq 2 ]"
python3 tools/cuda/ncu_sass_mix.py /dev/null >/dev/null 2>&1; rc=$?
check "no launch: exit 1" "[ $rc -eq 1 ]"
rm -f "$tmp"
exit $fail
