#!/usr/bin/env python3
"""Cross-check `deepinfer tokenize` against HF `tokenizers` on several MB of mixed text.

Documents come from (whatever is present; each source says so when it is skipped):
  * ../shared/corpora/*.gz           English prose (State of the Union, Moby-Dick)
  * source code on the machine       Python stdlib .py files, C headers under /usr/include
  * multilingual text on the machine man pages in ja/ko/ru/zh/... under /usr/share/man, locale files
  * a synthetic generator            seeded mix of many scripts, digits, emoji, marks and every kind
                                     of Unicode white space (always present)
Every document is encoded by HF (`Tokenizer.encode(text, add_special_tokens=False)`) and by
`deepinfer tokenize --jsonl --special`; ids must match exactly, and HF's decode of the ids must
equal `deepinfer detokenize` of the same ids (checked on a sample). Exit status 0 = zero mismatches.

usage: crosscheck_hf.py --bin build/deepinfer --tokenizer FILE [--min-mb 5] [--max-mb 12]
"""
import argparse
import glob
import gzip
import json
import os
import random
import subprocess
import sys
import time

SYNTH_SEED = 20261129


def chunks(text, size=4000):
    """Splits text into documents of about `size` chars at line ends."""
    out, cur, n = [], [], 0
    for line in text.splitlines(keepends=True):
        cur.append(line)
        n += len(line)
        if n >= size:
            out.append("".join(cur))
            cur, n = [], 0
    if cur:
        out.append("".join(cur))
    return out


def read_text(path):
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            return f.read().decode("utf-8", errors="replace").replace("\x00", "")
    except OSError:
        return ""


def gather(paths, budget_bytes):
    docs, total = [], 0
    for p in paths:
        if total >= budget_bytes:
            break
        t = read_text(p)
        if not t:
            continue
        t = t[: max(0, budget_bytes - total)]
        docs += chunks(t)
        total += len(t.encode("utf-8"))
    return docs, total


def synthetic(n_docs, seed=SYNTH_SEED):
    rng = random.Random(seed)
    ranges = [
        (0x41, 0x5A), (0x61, 0x7A), (0xC0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x5FF),
        (0x600, 0x6FF), (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x3040, 0x30FF),
        (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0xAC00, 0xD7A3), (0xFF00, 0xFFEF), (0x1F300, 0x1F64F),
        (0x1F900, 0x1F9FF), (0x20000, 0x2A6DF), (0x300, 0x36F), (0x2000, 0x206F), (0x2100, 0x22FF),
        (0x2460, 0x24FF), (0x2150, 0x218F), (0x1D400, 0x1D7FF), (0x0660, 0x0669), (0x0966, 0x096F),
    ]
    spaces = [" ", " ", " ", "  ", "\t", "\n", "\n\n", "\r\n", "\r", "\x0b", "\x0c", "\x85", "\xa0",
              "\u1680", "\u2000", "\u2005", "\u200a", "\u2028", "\u2029", "\u202f", "\u205f",
              "\u3000", "\u180e", "\u200b", "\ufeff", " \n ", "   \t\n"]
    punct = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + ["。", "、", "「", "」", "—", "…", "¿", "¡",
                                                         "«", "»", "€", "£", "¥", "©", "®", "°"]
    specials = ["<｜User｜>", "<｜Assistant｜>", "<｜begin▁of▁sentence｜>", "<think>", "</think>",
                "<｜end▁of▁sentence｜>", "<｜tool▁sep｜>", "<｜User", "｜>", "<<｜User｜>>"]
    docs = []
    for _ in range(n_docs):
        parts = []
        for _ in range(rng.randint(20, 400)):
            r = rng.random()
            if r < 0.45:
                lo, hi = rng.choice(ranges)
                parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 12))))
            elif r < 0.55:
                parts.append(str(rng.randint(0, 10 ** rng.randint(1, 9))))
            elif r < 0.65:
                parts.append("".join(rng.choice(punct) for _ in range(rng.randint(1, 4))))
            elif r < 0.68:
                parts.append(rng.choice(specials))
            elif r < 0.72:
                parts.append(rng.choice(["👨\u200d👩\u200d👧", "👍🏽", "❤️", "é", "e\u0301", "ﬁ", "Å"]))
            elif r < 0.76:  # any code point, including ones assigned after Unicode 14 and unassigned
                cps = [rng.randint(1, 0x10FFFF) for _ in range(rng.randint(1, 6))]
                parts.append("".join(chr(c) for c in cps if not 0xD800 <= c <= 0xDFFF))
            parts.append(rng.choice(spaces) if rng.random() < 0.7 else "")
        docs.append("".join(parts))
    return docs


def run_deepinfer(binary, tok, docs, special):
    payload = "".join(json.dumps({"text": d}, ensure_ascii=False) + "\n" for d in docs).encode("utf-8")
    cmd = [binary, "tokenize", "--tokenizer", tok, "--jsonl"] + (["--special"] if special else [])
    t0 = time.time()
    res = subprocess.run(cmd, input=payload, capture_output=True)
    dt = time.time() - t0
    if res.returncode != 0:
        sys.exit("deepinfer tokenize failed: " + res.stderr.decode(errors="replace"))
    lines = res.stdout.decode().splitlines()
    return [json.loads(l) for l in lines], dt


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--shared", default="../shared")
    ap.add_argument("--min-mb", type=float, default=5.0)
    ap.add_argument("--max-mb", type=float, default=12.0)
    args = ap.parse_args()
    try:
        from tokenizers import Tokenizer
        import tokenizers
    except ImportError:
        print("SKIPPED: the HF `tokenizers` Python package is not installed (pip install tokenizers)")
        return 0
    hf = Tokenizer.from_file(args.tokenizer)
    budget = int(args.max_mb * 1e6)
    sources = []
    corpora = sorted(glob.glob(os.path.join(args.shared, "corpora", "*.gz")))
    if not corpora:
        print(f"note: no corpora under {args.shared}/corpora: English prose part SKIPPED")
    sources.append(("prose (corpora)", corpora, int(budget * 0.45)))
    code = sorted(glob.glob("/usr/lib/python3*/**/*.py", recursive=True))[:4000]
    code += sorted(glob.glob("/usr/include/**/*.h", recursive=True))[:4000]
    random.Random(1).shuffle(code)
    sources.append(("source code", code, int(budget * 0.2)))
    multi = []
    for lang in ["ja", "ko", "zh_CN", "zh_TW", "ru", "uk", "de", "fr", "pl", "tr", "cs", "sr"]:
        multi += sorted(glob.glob(f"/usr/share/man/{lang}*/man*/*.gz"))[:150]
    multi += sorted(glob.glob("/usr/share/i18n/locales/*"))[:300]
    random.Random(2).shuffle(multi)
    sources.append(("multilingual (man pages, locales)", multi, int(budget * 0.2)))

    docs, report = [], []
    for name, paths, b in sources:
        d, n = gather(paths, b)
        if not d:
            print(f"note: {name}: nothing found on this machine, SKIPPED")
        report.append((name, len(d), n))
        docs += d
    syn = synthetic(400)
    report.append(("synthetic multi-script", len(syn), sum(len(s.encode()) for s in syn)))
    docs += syn
    total = sum(n for _, _, n in report)
    for name, nd, n in report:
        print(f"  {name:36s} {nd:6d} docs {n / 1e6:7.2f} MB")
    print(f"  total {total / 1e6:.2f} MB in {len(docs)} documents (tokenizers {tokenizers.__version__})")

    t0 = time.time()
    want = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    hf_dt = time.time() - t0
    got, di_dt = run_deepinfer(args.bin, args.tokenizer, docs, True)
    mism = 0
    for i, (w, g) in enumerate(zip(want, got)):
        if w != g:
            mism += 1
            if mism <= 5:
                k = first_diff(w, g)
                ctx = hf.decode(w[max(0, k - 3): k + 3])
                print(f"MISMATCH doc {i}: first difference at id {k}: hf {w[k:k + 4]} deepinfer {g[k:k + 4]}"
                      f" near {ctx!r}")
    if len(got) != len(want):
        print(f"MISMATCH: deepinfer returned {len(got)} documents for {len(want)}")
        mism += 1
    # decode: every document's ids, and every single id (what decode([id]) gives, e.g. for Engram's
    # token map), by both; and with skip_special_tokens on a sample
    n_vocab = hf.get_vocab_size(with_added_tokens=True)
    singles = [[i] for i in range(n_vocab) if hf.id_to_token(i) is not None]
    seqs = want + singles
    res = subprocess.run([args.bin, "detokenize", "--tokenizer", args.tokenizer, "--jsonl"],
                         input="".join(json.dumps(x) + "\n" for x in seqs).encode(), capture_output=True)
    got_text = [json.loads(l) for l in res.stdout.decode("utf-8").split("\n") if l]
    want_text = hf.decode_batch(seqs, skip_special_tokens=False)
    dec_mism = sum(1 for a, b in zip(got_text, want_text) if a != b) + abs(len(got_text) - len(want_text))
    for i, (a, b) in enumerate(zip(got_text, want_text)):
        if a != b and dec_mism <= 3:
            print(f"DECODE MISMATCH {'doc' if i < len(want) else 'id'} {i if i < len(want) else seqs[i][0]}: "
                  f"{a[:60]!r} vs HF {b[:60]!r}")
    res = subprocess.run([args.bin, "detokenize", "--tokenizer", args.tokenizer, "--jsonl", "--skip-special"],
                         input="".join(json.dumps(x) + "\n" for x in want[:200]).encode(), capture_output=True)
    skip_got = [json.loads(l) for l in res.stdout.decode("utf-8").split("\n") if l]
    skip_mism = sum(1 for a, b in zip(skip_got, hf.decode_batch(want[:200], skip_special_tokens=True)) if a != b)
    dec_mism += skip_mism
    sample = singles
    n_ids = sum(len(w) for w in want)
    print(f"cross-check: {total / 1e6:.2f} MB, {len(docs)} documents, {n_ids} ids: {mism} encode mismatches; "
          f"decode of all {len(want)} documents + all {len(singles)} single ids (+200 with skip_special): "
          f"{dec_mism} mismatches "
          f"(hf encode_batch {hf_dt:.2f} s, deepinfer incl. load+JSON {di_dt:.2f} s)")
    if total < args.min_mb * 1e6:
        print(f"note: only {total / 1e6:.2f} MB of text found (< {args.min_mb} MB); the corpora in "
              f"{args.shared}/corpora make up the rest")
    return 1 if mism or dec_mism else 0


if __name__ == "__main__":
    sys.exit(main())
