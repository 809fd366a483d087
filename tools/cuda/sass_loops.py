#!/usr/bin/env python3
"""The instruction mix of a kernel's loops from its SASS, by class of pipe -- no device needed.

Reads `cuobjdump -sass` text (of a .cu.o from build-cuda or a cubin; a stdin of "-"), keeps the
functions whose mangled name matches --kernel, finds each loop (a branch back to an earlier
address: the instructions from its target to the branch) and prints, for the loops that hold the
--key opcode (e.g. IMMA, HGMMA), innermost first: instructions, their classes, and the opcodes that
make most of them. Counts are static (a loop body once), so divide by the loop's work -- the quads,
stages or steps it makes -- yourself.

The classes are this tool's reading of opcode names, not a table NVIDIA publishes: `alu` integer
and logic ops (IADD3, LOP3, SHF, PRMT, SEL, ISETP, VIADD, LEA, ...: the pipe of 16 lanes a clock on
sm_80..sm_90, two issue cycles a warp instruction), `fma` float arithmetic and IMAD (IMAD.MOV,
IMAD.SHL, ... included), `conv` conversions, `tensor` HMMA / IMMA / HGMMA / DMMA, `mem` loads,
stores and shuffles, `uniform` the U* datapath, `ctl` branches, barriers and syncs, `other` the rest.
Session 57 used it to see an ALU-heavy loop (104 of 167 instructions a quad) -- and then measured
that moving a third of them to the FMA pipe did not make the kernel faster: a class mix says what a
loop issues, not what bounds it.

    cuobjdump -sass build-cuda/CMakeFiles/deepinfer_cuda.dir/src/backend/cuda/cuda_linear_gemv_imma.cu.o |
        python3 tools/cuda/sass_loops.py - --kernel row_kernelILb1 --key IMMA [--loops 2] [--opcodes 12]
"""
import argparse
import collections
import re
import sys

CLASSES = [  # (class, opcodes: the name before the first dot); U* opcodes are `uniform` first
    ("tensor", ("HMMA", "IMMA", "HGMMA", "DMMA", "QGMMA", "IGMMA", "BMMA")),
    ("conv", ("I2F", "F2I", "I2FP", "F2FP", "F2F", "I2I", "FRND")),
    ("fma", ("FFMA", "FMUL", "FADD", "IMAD", "IMUL", "HFMA2", "HMUL2", "HADD2", "DFMA", "DMUL", "DADD", "FSWZADD")),
    ("alu", ("IADD3", "IADD", "VIADD", "LOP3", "LOP", "SHF", "SHL", "SHR", "PRMT", "SEL", "FSEL", "ISETP", "FSETP",
             "PLOP3", "LEA", "IABS", "IMNMX", "FMNMX", "HMNMX2", "VIMNMX", "POPC", "FLO", "BREV", "MOV", "P2R", "R2P",
             "VOTE", "CS2R", "S2R")),
    ("mem", ("LDG", "STG", "LDS", "STS", "LDL", "STL", "LD", "ST", "LDSM", "LDC", "ATOM", "ATOMS", "ATOMG", "RED",
             "SHFL", "LDGSTS", "LDGDEPBAR", "CCTL", "SYNCS")),
    ("ctl", ("BRA", "BRX", "JMP", "CALL", "RET", "EXIT", "BAR", "BSSY", "BSYNC", "WARPSYNC", "NOP", "YIELD",
             "DEPBAR", "WARPGROUP", "MEMBAR", "ERRBAR", "FENCE", "ACQBULK")),
]

INSN = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
FUNC = re.compile(r"Function\s*:\s*(\S+)")
TARGET = re.compile(r"\bBRA\b.*?(0x[0-9a-f]+)\s*$")


def opcode(text):
    """the instruction's opcode with its modifiers, predicate dropped ("@!P0 IADD3.X R1, .." -> IADD3.X)"""
    parts = text.split()
    if parts and parts[0].startswith("@"):
        parts = parts[1:]
    return parts[0] if parts else ""


def klass(op):
    base = op.split(".")[0]
    if len(base) > 1 and base[0] == "U":  # UIADD3, UMOV, ULOP3, ULEA, ... (R2UR, S2UR: other)
        return "uniform"
    for name, opcodes in CLASSES:
        if base in opcodes:
            return name
    return "other"


def functions(lines):
    """{mangled name: [(address, instruction text)]} in file order"""
    out, name = collections.OrderedDict(), None
    for line in lines:
        m = FUNC.search(line)
        if m:
            name = m.group(1)
            out[name] = []
            continue
        m = INSN.match(line)
        if m and name is not None:
            out[name].append((int(m.group(1), 16), m.group(2).strip()))
    return out


def loops(insns):
    """(first index, last index) of each backward branch's body"""
    at = {a: i for i, (a, _) in enumerate(insns)}
    found = []
    for i, (a, text) in enumerate(insns):
        if opcode(text).split(".")[0] != "BRA":
            continue
        m = TARGET.search(text)
        if m:
            target = int(m.group(1), 16)
            if target <= a and target in at:
                found.append((at[target], i))
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sass", help="cuobjdump -sass text, or - for stdin")
    ap.add_argument("--kernel", default="", help="regex a function's mangled name must match")
    ap.add_argument("--key", default="", help="only loops holding this opcode (prefix), e.g. IMMA")
    ap.add_argument("--loops", type=int, default=3, help="loops a function, innermost first")
    ap.add_argument("--opcodes", type=int, default=10, help="opcodes listed a loop")
    args = ap.parse_args()
    text = sys.stdin.read() if args.sass == "-" else open(args.sass, errors="replace").read()
    funcs = functions(text.split("\n"))
    chosen = [n for n in funcs if re.search(args.kernel, n)]
    if not chosen:
        print("sass_loops: no function matches" + (f" '{args.kernel}'" if args.kernel else ""), file=sys.stderr)
        return 1
    for name in chosen:
        insns = funcs[name]
        body_of = [(b - a + 1, a, b) for a, b in loops(insns)]
        if args.key:
            body_of = [x for x in body_of if any(opcode(t).startswith(args.key) for _, t in insns[x[1]:x[2] + 1])]
        print(f"{name}: {len(insns)} instructions, {len(body_of)} loop(s)" + (f" with {args.key}" if args.key else ""))
        for size, a, b in sorted(body_of)[:args.loops]:
            ops = collections.Counter(opcode(t) for _, t in insns[a:b + 1])
            cls = collections.Counter()
            for op, n in ops.items():
                cls[klass(op)] += n
            key = sum(n for op, n in ops.items() if args.key and op.startswith(args.key))
            print(f"  loop {insns[a][0]:#06x}..{insns[b][0]:#06x}: {size} instructions"
                  + (f", {key} {args.key}" if args.key else "")
                  + f"; alu {cls['alu']} (x2 = {2 * cls['alu']} issue cycles), fma {cls['fma']}, conv {cls['conv']}, "
                  f"tensor {cls['tensor']}, mem {cls['mem']}, uniform {cls['uniform']}, ctl {cls['ctl']}, "
                  f"other {cls['other']}")
            print("    " + ", ".join(f"{op} {n}" for op, n in ops.most_common(args.opcodes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
