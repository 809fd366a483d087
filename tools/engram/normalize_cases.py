#!/usr/bin/env python3
"""Writes normaliser cases for the C port of the Engram key normaliser (src/model/engram_token_map.c).

Every Unicode scalar value alone, then random short strings drawn from pools that stress the chain
(combining marks of every Unicode age, Hangul jamo and syllables, whitespace variants, compatibility
characters, Greek, U+E000, code points whose tables changed after Unicode 9.0), each normalised with
the reference's HF `tokenizers` normalizer Sequence (token_map.reference_normalizer).

  normalize_cases.py OUT.json [--random N] [--seed S]

Output: {"decoded_hex": [...], "normalized_hex": [...]} (UTF-8 bytes in hex), read by
`test_engram_token_map_hf_check OUT.json`.
"""
import argparse
import json
import os
import random
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from token_map import reference_normalizer  # noqa: E402


def pools():
    marks = [c for c in range(0x110000)
             if not 0xD800 <= c < 0xE000 and unicodedata.category(chr(c)).startswith("M")]
    return [
        list(range(0x20, 0x7F)), list(range(0xA0, 0x250)), marks,
        list(range(0x1100, 0x1200)) + list(range(0xAC00, 0xAC40)) + list(range(0x11A8, 0x11C3)),
        [0x20, 0x9, 0xA, 0xD, 0xA0, 0x3000, 0x2028, 0x85, 0x1680, 0x2000, 0x200B, 0xE000, 0x1C, 0xFEFF],
        list(range(0x370, 0x400)), list(range(0xF900, 0xFB50)), list(range(0x1E00, 0x1F00)),
        [0x1CF2, 0x1CF3, 0x111C9, 0x1C89, 0xA7CB, 0x10D50, 0x16EA0, 0x32FF, 0x1F16C, 0x7FD, 0x1CF7],
        list(range(0x3300, 0x3400)), list(range(0xFF00, 0xFFF0)),
    ]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--random", type=int, default=100000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    cases = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    rng = random.Random(args.seed)
    ps = pools()
    for _ in range(args.random):
        cases.append("".join(chr(rng.choice(rng.choice(ps))) for _ in range(rng.randint(1, 7))))
    norm = reference_normalizer()
    with open(args.out, "w") as f:
        json.dump({"decoded_hex": [c.encode("utf-8").hex() for c in cases],
                   "normalized_hex": [norm.normalize_str(c).encode("utf-8").hex() for c in cases]}, f)
    print("wrote %d normaliser cases" % len(cases))


if __name__ == "__main__":
    main()
