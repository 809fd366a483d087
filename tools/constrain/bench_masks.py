#!/usr/bin/env python3
"""Mask-time benchmark (not a test): deepinfer next to llguidance and xgrammar (PyPI) in one run,
on the same MaskBench schemas and valid instances, on the real 129,280-token vocabulary.

For each schema with valid instances: compile (timed), then for every valid instance walk its
tokens, timing the full-vocabulary mask at every position (the instance's next token must be in
it), then advance. Instances are serialised compactly (json.dumps separators (",", ":")), which
every engine's default whitespace accepts. One thread each. Prints one row per engine: schemas
compiled, instances followed to the end, mask mean / p50 / p99 (us per token), compile p50 / mean.

usage: bench_masks.py --build build [--every 10] [--engines deepinfer,llguidance,xgrammar]
"""
import argparse, glob, json, os, subprocess, sys, tarfile, tempfile, time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOK = os.path.join(ROOT, 'assets/tokenizer/tokenizer.json')


def load_cases(data, every):
    cases = []
    with tarfile.open(data) as tf:
        members = sorted((m for m in tf.getmembers() if m.isfile() and m.name.endswith('.json')), key=lambda m: m.name)
        for m in members[::every]:
            d = json.load(tf.extractfile(m))
            inst = [json.dumps(t['data'], separators=(',', ':'), ensure_ascii=False) for t in d.get('tests', []) if t['valid']]
            if inst:
                cases.append({'name': os.path.basename(m.name), 'schema': d['schema'], 'instances': inst})
    return cases


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))] if xs else float('nan')


def row(name, n_cases, compiled, followed, n_inst, mask_us, compile_us):
    mean = sum(mask_us) / len(mask_us) if mask_us else float('nan')
    cmean = sum(compile_us) / len(compile_us) if compile_us else float('nan')
    return (f"| {name} | {compiled}/{n_cases} | {followed}/{n_inst} | {len(mask_us)} | {mean:.0f} | {pct(mask_us, .5):.1f} | "
            f"{pct(mask_us, .99):.0f} | {pct(compile_us, .5):.0f} | {cmean:.0f} |")


def run_deepinfer(build, cases):
    exe = os.path.join(tempfile.mkdtemp(), 'mask_bench')
    libs = subprocess.check_output(['pkg-config', '--cflags', '--libs', 'libcjson', 'libpcre2-8', 'icu-uc'], text=True).split()
    subprocess.check_call(['cc', '-O2', '-o', exe, os.path.join(ROOT, 'tools/constrain/mask_bench.c'), '-I' + os.path.join(ROOT, 'include'),
                           '-I' + os.path.join(ROOT, 'src'), os.path.join(build, 'libdeepinfer_core.a')] + libs + ['-fopenmp', '-lm', '-lpthread'])
    inp = ''.join(json.dumps(c) + '\n' for c in cases)
    out = subprocess.run([exe, TOK], input=inp, capture_output=True, text=True, check=True).stdout
    compile_us, compiled, followed = [], 0, 0
    mask_us = []
    for line in out.splitlines():
        if line.startswith('mask_us'):
            mask_us = [float(x) for x in line.split()[1:]]
            continue
        name, st, cus, _ = line.split()
        if st in ('ok', 'reject'):
            compiled += 1
            compile_us.append(float(cus))
        followed += 0
    n_inst = sum(len(c['instances']) for c in cases)
    # instances followed: count per schema line "ok" means all followed
    ok_inst = sum(len(c['instances']) for c, line in zip(cases, out.splitlines()) if line.split()[1] == 'ok')
    return row('deepinfer', len(cases), compiled, ok_inst, n_inst, mask_us, compile_us)


def hf_tokenizer():
    from tokenizers import Tokenizer
    return Tokenizer.from_file(TOK)


def run_llguidance(cases):
    import llguidance, llguidance.hf, llguidance.numpy
    import numpy as np
    from transformers import PreTrainedTokenizerFast  # noqa: F401 (llguidance.hf wants a HF tokenizer)
    hf = PreTrainedTokenizerFast(tokenizer_file=TOK)
    hf.eos_token = '<｜end▁of▁sentence｜>'
    lt = llguidance.hf.from_tokenizer(hf, n_vocab=129280)
    tok = hf_tokenizer()
    mask_us, compile_us, compiled, followed, n_inst = [], [], 0, 0, 0
    bm = llguidance.numpy.allocate_token_bitmask(1, lt.vocab_size)
    for c in cases:
        n_inst += len(c['instances'])
        t0 = time.perf_counter()
        try:
            g = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(c['schema']))
            m = llguidance.LLMatcher(lt, g)
            if m.is_error():
                continue
        except Exception:
            continue
        compile_us.append((time.perf_counter() - t0) * 1e6)
        compiled += 1
        for text in c['instances']:
            m = llguidance.LLMatcher(lt, g)
            ids = tok.encode(text, add_special_tokens=False).ids + [1]
            ok = True
            for t in ids:
                a = time.perf_counter()
                llguidance.numpy.fill_next_token_bitmask(m, bm, 0)
                mask_us.append((time.perf_counter() - a) * 1e6)
                if not (int(bm[0, t // 32]) >> (t % 32)) & 1 or not m.consume_token(t):
                    ok = False
                    break
            followed += ok
    return row('llguidance', len(cases), compiled, followed, n_inst, mask_us, compile_us)


def run_xgrammar(cases):
    import xgrammar as xgr
    from transformers import PreTrainedTokenizerFast
    hf = PreTrainedTokenizerFast(tokenizer_file=TOK)
    info = xgr.TokenizerInfo.from_huggingface(hf, vocab_size=129280, stop_token_ids=[1])
    comp = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    tok = hf_tokenizer()
    bm = xgr.allocate_token_bitmask(1, 129280)
    mask_us, compile_us, compiled, followed, n_inst = [], [], 0, 0, 0
    for c in cases:
        n_inst += len(c['instances'])
        t0 = time.perf_counter()
        try:
            cg = comp.compile_json_schema(json.dumps(c['schema']))
        except Exception:
            continue
        compile_us.append((time.perf_counter() - t0) * 1e6)
        compiled += 1
        for text in c['instances']:
            m = xgr.GrammarMatcher(cg)
            ids = tok.encode(text, add_special_tokens=False).ids + [1]
            ok = True
            for t in ids:
                a = time.perf_counter()
                m.fill_next_token_bitmask(bm)
                mask_us.append((time.perf_counter() - a) * 1e6)
                if not (int(bm[0, t // 32]) >> (t % 32)) & 1 or not m.accept_token(t):
                    ok = False
                    break
            followed += ok
    return row('xgrammar', len(cases), compiled, followed, n_inst, mask_us, compile_us)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--build', default=os.path.join(ROOT, 'build'))
    ap.add_argument('--data', default=os.path.join(ROOT, '../shared/fixtures/maskbench/data.tar.gz'))
    ap.add_argument('--every', type=int, default=10, help='take every Nth schema (sorted by name)')
    ap.add_argument('--engines', default='deepinfer,llguidance,xgrammar')
    args = ap.parse_args()
    cases = load_cases(args.data, args.every)
    print(f"{len(cases)} schemas with valid instances ({sum(len(c['instances']) for c in cases)} instances), every {args.every}th\n")
    print('| engine | schemas compiled | instances followed | mask calls | mean us | p50 us | p99 us | compile p50 us | compile mean us |')
    print('|---|---:|---:|---:|---:|---:|---:|---:|---:|')
    for e in args.engines.split(','):
        try:
            print({'deepinfer': lambda: run_deepinfer(args.build, cases), 'llguidance': lambda: run_llguidance(cases),
                   'xgrammar': lambda: run_xgrammar(cases)}[e](), flush=True)
        except ImportError as ex:
            print(f"| {e} | not installed ({ex}) |", flush=True)


if __name__ == '__main__':
    main()
