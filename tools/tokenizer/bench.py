#!/usr/bin/env python3
"""Tokenizer benchmark: deepinfer vs HF `tokenizers`, one core each, on the same text.

Builds tools/tokenizer/bench_tokenizer.c against build/libdeepinfer_core.a (run `make` first), then
for each corpus (../shared/corpora/*.gz, decompressed) encodes ~4 KB documents sequentially:
deepinfer through the C API, HF through `Tokenizer.encode(doc, add_special_tokens=False)` with
RAYON_NUM_THREADS=1 (HF's encode of one document is single-threaded anyway). Both run pinned to one
CPU (taskset). Prints a Markdown table for docs/PERFORMANCE.md.

usage: python3 tools/tokenizer/bench.py [--tokenizer assets/tokenizer/tokenizer.json] [--shared ../shared]
"""
import argparse
import glob
import gzip
import os
import re
import subprocess
import sys
import tempfile
import time


def build(out):
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "libpcre2-8", "libcjson", "icu-uc"],
                           capture_output=True, text=True, check=True).stdout.split()
    subprocess.run(["cc", "-std=c11", "-O2", "-Iinclude", "-Isrc", "tools/tokenizer/bench_tokenizer.c",
                    "build/libdeepinfer_core.a", *flags, "-fopenmp", "-lm", "-lpthread", "-o", out], check=True)


def chunks(text, size=4000):
    out, cur, n = [], [], 0
    for line in text.splitlines(keepends=True):
        cur.append(line)
        n += len(line.encode())
        if n >= size:
            out.append("".join(cur))
            cur, n = [], 0
    if cur:
        out.append("".join(cur))
    return out


def hf_bench(tok_path, text, repeats):
    os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    from tokenizers import Tokenizer
    t0 = time.perf_counter()
    tok = Tokenizer.from_file(tok_path)
    load = time.perf_counter() - t0
    docs = chunks(text)
    n_bytes = len(text.encode())
    res = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        n_ids = sum(len(tok.encode(d, add_special_tokens=False).ids) for d in docs)
        dt = time.perf_counter() - t0
        res.append((n_bytes / 1e6 / dt, n_ids / 1e6 / dt))
    return load, res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer", default="assets/tokenizer/tokenizer.json")
    ap.add_argument("--shared", default="../shared")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    exe = os.path.join(tmp, "bench_tokenizer")
    build(exe)
    corpora = sorted(glob.glob(os.path.join(args.shared, "corpora", "*.gz")))
    if not corpora:
        sys.exit(f"no corpora under {args.shared}/corpora")
    cpu = str(sorted(os.sched_getaffinity(0))[0])
    rows = []
    for path in corpora:
        text = gzip.open(path, "rb").read().decode("utf-8", errors="replace")
        txt = os.path.join(tmp, "corpus.txt")
        open(txt, "w", encoding="utf-8").write(text)
        out = subprocess.run(["taskset", "-c", cpu, exe, args.tokenizer, txt, str(args.repeats)],
                             capture_output=True, text=True, check=True).stdout
        print(out, end="")
        load_ms = float(re.search(r"load_ms ([\d.]+)", out).group(1))
        passes = [(float(a), float(b)) for a, b in re.findall(r"= ([\d.]+) MB/s, ([\d.]+) M tokens/s", out)]
        hf = subprocess.run([sys.executable, "-c",
                             "import sys; sys.path.insert(0, 'tools/tokenizer'); import bench; "
                             f"l, r = bench.hf_bench({args.tokenizer!r}, open({txt!r}, encoding='utf-8').read(), "
                             f"{args.repeats}); print(l); print(r)"],
                            capture_output=True, text=True, check=True, env=dict(os.environ, RAYON_NUM_THREADS="1"),
                            preexec_fn=lambda: os.sched_setaffinity(0, {int(cpu)})).stdout.split("\n")
        hf_load, hf_res = float(hf[0]), eval(hf[1])
        print(f"HF tokenizers: load {hf_load * 1e3:.1f} ms, passes {hf_res}")
        rows.append((os.path.basename(path), len(text.encode()) / 1e6, load_ms, passes, hf_load * 1e3, hf_res))
    print("\n| corpus | MB | deepinfer load ms | deepinfer MB/s (cold / warm) | HF load ms | HF MB/s (cold / warm) | ratio (warm) |")
    print("|---|---|---|---|---|---|---|")
    for name, mb, load, passes, hfl, hfr in rows:
        print(f"| {name} | {mb:.2f} | {load:.0f} | {passes[0][0]:.1f} / {max(p[0] for p in passes[1:]):.1f} | "
              f"{hfl:.0f} | {hfr[0][0]:.1f} / {max(r[0] for r in hfr[1:]):.1f} | "
              f"{max(p[0] for p in passes[1:]) / max(r[0] for r in hfr[1:]):.2f}x |")


if __name__ == "__main__":
    main()
