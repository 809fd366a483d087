#!/usr/bin/env bash
# tools/cuda/sass_loops.py on a made-up cuobjdump listing: two functions, one with a loop (a
# predicated branch back to an earlier address) holding a predicated IADD3, an IMAD.MOV, a uniform
# op and an IMMA, and a forward branch that is no loop; the counts by class must add up, --kernel
# must pick the function, --key must drop loops without the opcode, and no match must exit 1.
set -u
fail=0
check() { if eval "$2"; then echo "ok   $1"; else echo "FAIL $1"; fail=1; fi; }
tmp=$(mktemp /tmp/di_sassloops_XXXXXX)
cat > "$tmp" <<'SASS'
	code for sm_90a
		Function : _Z3fooPi
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                    /* 0x00000a00ff017b82 */
        /*0010*/                   S2R R0, SR_TID.X ;                         /* 0x0000000000007919 */
        /*0020*/                   PRMT R2, R3, 0x3210, R4 ;                  /* 0x0000321003027816 */
        /*0030*/              @!P0 IADD3 R5, R5, 0x1, RZ ;                    /* 0x0000000105058810 */
        /*0040*/                   IMAD.MOV.U32 R6, RZ, RZ, R7 ;              /* 0x000000ffff067224 */
        /*0050*/                   UIADD3 UR4, UR4, 0x1, URZ ;                /* 0x0000000104047890 */
        /*0060*/                   IMMA.16832.S8.S8 R8, R12.ROW, R16.COL, R8 ;  /* 0x000000100c08723c */
        /*0070*/                   LDS.64 R16, [R2] ;                         /* 0x0000000002107984 */
        /*0080*/                   ISETP.GE.AND P0, PT, R5, 0x10, PT ;        /* 0x000000100500780c */
        /*0090*/               @P0 BRA 0xb0 ;                                 /* 0x0000000000000947 */
        /*00a0*/                   BRA 0x20 ;                                 /* 0xfffffff000007947 */
        /*00b0*/                   EXIT ;                                     /* 0x000000000000794d */
		..........
		Function : _Z3barPi
        /*0000*/                   FFMA R1, R2, R3, R4 ;                      /* 0x0000000302017223 */
        /*0010*/                   BRA 0x0 ;                                  /* 0xfffffff000007947 */
SASS
out=$(python3 tools/cuda/sass_loops.py "$tmp" --kernel foo --key IMMA 2>&1); rc=$?
check "exit 0" "[ $rc -eq 0 ]"
check "foo alone" "grep -q '^_Z3fooPi: 12 instructions, 1 loop(s) with IMMA' <<<\"\$out\" && ! grep -q bar <<<\"\$out\""
check "the loop 0x20..0xa0: 9 instructions" "grep -q 'loop 0x0020..0x00a0: 9 instructions, 1 IMMA' <<<\"\$out\""
check "classes" "grep -q 'alu 3 (x2 = 6 issue cycles), fma 1, conv 0, tensor 1, mem 1, uniform 1, ctl 2, other 0' <<<\"\$out\""
check "the predicated IADD3 counted" "grep -q 'IADD3 1' <<<\"\$out\""
out=$(python3 tools/cuda/sass_loops.py "$tmp" --kernel bar --key IMMA 2>&1)
check "--key drops bar's loop" "grep -q '^_Z3barPi: 2 instructions, 0 loop(s) with IMMA' <<<\"\$out\""
out=$(python3 tools/cuda/sass_loops.py - --kernel bar < "$tmp" 2>&1)
check "stdin; bar's loop without --key" "grep -q 'loop 0x0000..0x0010: 2 instructions; alu 0 (x2 = 0 issue cycles), fma 1' <<<\"\$out\""
python3 tools/cuda/sass_loops.py "$tmp" --kernel nothing >/dev/null 2>&1; rc=$?
check "no function: exit 1" "[ $rc -eq 1 ]"
rm -f "$tmp"
exit $fail
