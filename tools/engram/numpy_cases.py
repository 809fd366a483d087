#!/usr/bin/env python3
"""Writes numpy default_rng cases for the C port (src/model/numpy_pcg64.c).

Output lines, read by `test_engram_consts --numpy-cases FILE`:
  ints SEED LOW HIGH N v0 .. v(N-1)    default_rng(SEED).integers(LOW, HIGH, size=N, dtype=int64)
  state SEED N w0 .. w(N-1)            SeedSequence(SEED).generate_state(N, uint32)

The cases cover the Engram multipliers (seeds 10007*layer, bounds from the real and tiny compressed
vocabularies), every branch of numpy's bounded draw (empty range, the 32-bit Lemire path with its
buffered half-words, exactly 2^32 values, the 64-bit path up to 2^63 - 1), seed 0 and two-word seeds.
Usage: numpy_cases.py OUT_FILE
"""
import sys

import numpy as np


def bound(compressed_vocab):
    return max(1, (np.iinfo(np.int64).max // compressed_vocab) // 2)


def main():
    out = open(sys.argv[1], "w")
    seeds = [0, 1, 2, 7, 10007, 40028, 140098, 10007 * 39, 2**31 - 1, 2**32 - 1, 2**32,
             2**32 + 1, 12345678901234, 2**63 - 1, 2**64 - 1]
    ranges = [(0, 1), (5, 6), (0, 2), (0, 3), (0, 1000), (-1000, 1000), (0, 2**31), (0, 2**32 - 1),
              (0, 2**32), (0, 2**32 + 1), (-5, 2**32 + 10), (0, 2**40 + 3), (0, 3 * 2**61 + 7),
              (0, 2**63 - 1), (-(2**62), 2**62)]
    ranges += [(0, bound(v)) for v in (99092, 773, 129280, 1, 3)]
    n = 0
    for seed in seeds:
        state = np.random.SeedSequence(seed).generate_state(8, np.uint32)
        out.write("state %d 8 %s\n" % (seed, " ".join(str(int(w)) for w in state)))
        for lo, hi in ranges:
            size = 9
            vals = np.random.default_rng(seed).integers(lo, hi, size=size, dtype=np.int64)
            out.write("ints %d %d %d %d %s\n" % (seed, lo, hi, size, " ".join(str(int(v)) for v in vals)))
            n += 1
    # long runs, so that rejection loops and the 32-bit buffer are exercised many times
    for seed, lo, hi in [(3, 0, 3 * 2**30), (4, 0, 2**63 - 3), (5, 0, 6)]:
        vals = np.random.default_rng(seed).integers(lo, hi, size=2000, dtype=np.int64)
        out.write("ints %d %d %d 2000 %s\n" % (seed, lo, hi, " ".join(str(int(v)) for v in vals)))
        n += 1
    out.close()
    print("wrote %d integer cases with numpy %s" % (n, np.__version__))


if __name__ == "__main__":
    main()
