#!/usr/bin/env python3
"""Instruction mix of kernels from Nsight Compute's SASS source page (issue 5's profiling).

Reads the text that `device_profile.sh` writes with
    NCU_DETAIL="--page source --print-source sass --section SourceCounters -k regex:NAME --launch-count N"
(one block a profiled launch: a "Kernel Name" line, then a line a SASS instruction -- its address in
columns 0-24, the instruction in 25-84, then whitespace-separated counters: warp stall samples (all),
(not issued), samples, warp instructions executed, ...). For each launch it prints the warp
instructions executed and the opcodes that took most of them; with --top it also lists the
instructions executed most often, with their index, so that a loop or a serial warp shows itself (an
instruction executed once is one warp's; 32 times, every warp of a 1,024-thread block once).

    python3 tools/cuda/ncu_sass_mix.py detail-src.txt [--launch 2] [--top 30] [--opcodes 12]

Stall samples are printed too, but a launch of a few microseconds gets only a handful at ncu's
default sampling interval (session 25: 11 for a 12.7 us kernel); the executed counts are exact.
"""
import argparse
import collections
import sys

INSTR_START, INSTR_END = 25, 85


def launches(lines):
    """(title, [(index, instruction, executed, stall samples)]) for each profiled launch"""
    starts = [i for i, l in enumerate(lines) if l.startswith("Kernel Name")]
    for k, a in enumerate(starts):
        b = starts[k + 1] if k + 1 < len(starts) else len(lines)
        rows = []
        for l in lines[a:b]:
            if not l.startswith("0x"):
                continue
            values = l[INSTR_END:].split()
            if len(values) < 4 or not values[3].isdigit():
                continue
            rows.append((len(rows), l[INSTR_START:INSTR_END].strip(), int(values[3]), int(values[0] or 0)))
        yield lines[a][19:].strip(), rows


def opcode(instruction):
    words = instruction.split()
    word = words[1] if words and words[0].startswith("@") and len(words) > 1 else (words[0] if words else "")
    return word.split(".")[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file")
    ap.add_argument("--launch", type=int, action="append", help="only these launches (0-based; repeatable)")
    ap.add_argument("--top", type=int, default=0, help="list the N instructions executed most often")
    ap.add_argument("--opcodes", type=int, default=12, help="opcodes to list a launch")
    args = ap.parse_args()
    lines = open(args.file, errors="replace").read().split("\n")
    found = False
    for k, (title, rows) in enumerate(launches(lines)):
        if args.launch and k not in args.launch:
            continue
        found = True
        executed = sum(r[2] for r in rows)
        print(f"launch {k}: {title[:100]}")
        print(f"  {len(rows)} SASS instructions, {executed} warp instructions executed, "
              f"{sum(r[3] for r in rows)} stall samples")
        mix = collections.Counter()
        for _, ins, n, _ in rows:
            mix[opcode(ins)] += n
        print("  " + ", ".join(f"{op} {n} ({100.0 * n / max(executed, 1):.0f}%)"
                               for op, n in mix.most_common(args.opcodes)))
        if args.top:
            for i, ins, n, samples in sorted(sorted(rows, key=lambda r: -r[2])[:args.top]):
                print(f"    {i:5d}  x{n:<6d} samples {samples:<4d} {ins[:70]}")
    if not found:
        sys.exit("ncu_sass_mix: no launch found (is this ncu's --page source --print-source sass text?)")


if __name__ == "__main__":
    main()
