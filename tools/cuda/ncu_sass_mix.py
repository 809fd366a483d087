#!/usr/bin/env python3
"""Instruction mix of kernels from Nsight Compute's SASS source page (issue 5's profiling).

Reads the text that `device_profile.sh` writes with
    NCU_DETAIL="--page source --print-source sass --section SourceCounters -k regex:NAME --launch-count N"
(one block a profiled launch: a "Kernel Name" line, then a line a SASS instruction -- its address, the
instruction, then counters: warp stall samples (all), (not issued), samples, warp instructions
executed, thread instructions executed, ...; fields apart by two or more spaces, since the
instruction column's width varies with the kernel). For each launch it prints the warp instructions
executed and the opcodes that took most of them; with --top it also lists the instructions executed
most often, with their index, so that a loop or a serial warp shows itself (an instruction executed
once is one warp's; 32 times, every warp of a 1,024-thread block once); with --stalls the
instructions with the most stall samples (a sample names the instruction a warp waits to issue:
the one after a barrier, or the first use of a load) and the samples by stretch of code.

    python3 tools/cuda/ncu_sass_mix.py detail-src.txt [--launch 2] [--top 30] [--stalls 20] [--opcodes 12]

A launch of a few microseconds gets only some hundreds of stall samples at ncu's default sampling
interval (session 26: 580 for a 22 us attention launch of 40 blocks); the executed counts are exact.
(Sessions 25-26 read the counters at fixed columns; where the instruction column was wider the first
counter fell off, so "executed" was the thread count and "samples" the not-issued samples.)
"""
import argparse
import collections
import re
import sys


def launches(lines):
    """(title, [(index, instruction, executed, stall samples)]) for each profiled launch"""
    starts = [i for i, l in enumerate(lines) if l.startswith("Kernel Name")]
    for k, a in enumerate(starts):
        b = starts[k + 1] if k + 1 < len(starts) else len(lines)
        rows = []
        for l in lines[a:b]:
            if not l.startswith("0x"):
                continue
            fields = re.split(r"\s{2,}", l.strip())  # address, [predicate,] instruction, counters
            if fields[1].startswith("@") and " " not in fields[1] and len(fields) > 2:
                fields[1:3] = [fields[1] + " " + fields[2]]
            values = fields[2:]
            if len(values) < 4 or not all(v.isdigit() for v in values[:4]):
                continue
            rows.append((len(rows), fields[1], int(values[3]), int(values[0])))
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
    ap.add_argument("--stalls", type=int, default=0,
                    help="list the N instructions with the most stall samples, and the samples by stretch of code")
    ap.add_argument("--stretch", type=int, default=150, help="SASS instructions a stretch (--stalls)")
    args = ap.parse_args()
    lines = open(args.file, errors="replace").read().split("\n")
    found = False
    profiled = list(launches(lines))
    for k, (title, rows) in enumerate(profiled):
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
        if args.stalls:
            total = max(sum(r[3] for r in rows), 1)
            print("  most stall samples:")
            for i, ins, n, samples in sorted(rows, key=lambda r: -r[3])[:args.stalls]:
                print(f"    {i:5d}  samples {samples:<5d} ({100.0 * samples / total:4.1f}%)  x{n:<6d} {ins[:60]}")
            print(f"  by stretch of {args.stretch} instructions (first index: samples, warp instructions):")
            for a in range(0, len(rows), args.stretch):
                part = rows[a:a + args.stretch]
                samples = sum(r[3] for r in part)
                ops = collections.Counter()
                for _, ins, n, _ in part:
                    ops[opcode(ins)] += n
                top = ", ".join(f"{op} {n}" for op, n in ops.most_common(3))
                print(f"    {a:5d}: {samples:5d} ({100.0 * samples / total:4.1f}%), {sum(r[2] for r in part):8d}  [{top}]")
    if not found and profiled:
        sys.exit(f"ncu_sass_mix: the file holds {len(profiled)} launch(es), 0 .. {len(profiled) - 1}; "
                 f"--launch {args.launch} names none of them")
    if not found:
        sys.exit("ncu_sass_mix: no launch found (is this ncu's --page source --print-source sass text?)")


if __name__ == "__main__":
    main()
