#!/usr/bin/env python3
"""MaskBench coverage of the peers (llguidance, xgrammar from PyPI) on the same sample and the
same instance serialisation as tools/constrain/maskbench.py, for the side-by-side table in
docs/PERFORMANCE.md. An instance is accepted when every token of it (tokenised with the same
tokenizer.json) is accepted and then EOS is (the matcher is accepting). Per-schema timeout.

usage: maskbench_peers.py [--engines llguidance,xgrammar] [--every 1] [--timeout 60]
"""
import argparse, collections, json, multiprocessing as mp, os, sys, tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOK = os.path.join(ROOT, 'assets/tokenizer/tokenizer.json')
_state = {}


def _init(engine):
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast
    hf = PreTrainedTokenizerFast(tokenizer_file=TOK)
    hf.eos_token = '<｜end▁of▁sentence｜>'
    _state['tok'] = Tokenizer.from_file(TOK)
    _state['engine'] = engine
    if engine == 'llguidance':
        import llguidance.hf
        _state['lt'] = llguidance.hf.from_tokenizer(hf, n_vocab=129280)
    else:
        import xgrammar as xgr
        info = xgr.TokenizerInfo.from_huggingface(hf, vocab_size=129280, stop_token_ids=[1])
        _state['comp'] = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)


def _check(schema, tests):
    tok = _state['tok']
    if _state['engine'] == 'llguidance':
        import llguidance
        g = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema))
        m0 = llguidance.LLMatcher(_state['lt'], g)
        if m0.is_error():
            return 'unsupported', []
        res = []
        for t in tests:
            m = llguidance.LLMatcher(_state['lt'], g)
            ids = tok.encode(json.dumps(t['data'], ensure_ascii=False), add_special_tokens=False).ids
            ok = all(m.consume_token(i) for i in ids) and not m.is_error() and m.consume_token(1)
            res.append(bool(ok))
        return 'ok', res
    import xgrammar as xgr
    cg = _state['comp'].compile_json_schema(json.dumps(schema))
    res = []
    for t in tests:
        m = xgr.GrammarMatcher(cg)
        ids = tok.encode(json.dumps(t['data'], ensure_ascii=False), add_special_tokens=False).ids
        ok = all(m.accept_token(i) for i in ids) and m.accept_token(1)
        res.append(bool(ok))
    return 'ok', res


def _task(args):
    schema, tests = args
    try:
        return _check(schema, tests)
    except Exception as e:  # noqa: BLE001 (a compile failure is "unsupported")
        return 'unsupported', str(e)[:80]


def run(engine, items, timeout):
    counts = collections.Counter()
    fa = fr = 0
    pool = mp.Pool(1, _init, (engine,))
    for name, d in items:
        tests = d.get('tests', [])
        r = pool.apply_async(_task, ((d['schema'], tests),))
        try:
            st, res = r.get(timeout)
        except mp.TimeoutError:
            pool.terminate()
            pool = mp.Pool(1, _init, (engine,))
            counts['timeout'] += 1
            continue
        if st != 'ok':
            counts['unsupported'] += 1
            continue
        a = sum(1 for t, ok in zip(tests, res) if not t['valid'] and ok)
        b = sum(1 for t, ok in zip(tests, res) if t['valid'] and not ok)
        fa += a
        fr += b
        counts['pass' if not a and not b else 'fail'] += 1
    pool.terminate()
    n = len(items)
    print(f"| {engine} | {counts['pass']} ({100.0 * counts['pass'] / n:.1f} %) | {counts['fail']} | "
          f"{counts['unsupported']} | {counts['timeout']} | {fa} | {fr} |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--data', default=os.path.join(ROOT, '../shared/fixtures/maskbench/data.tar.gz'))
    ap.add_argument('--engines', default='llguidance,xgrammar')
    ap.add_argument('--every', type=int, default=1)
    ap.add_argument('--timeout', type=float, default=60)
    args = ap.parse_args()
    items = []
    with tarfile.open(args.data) as tf:
        for m in sorted((m for m in tf.getmembers() if m.isfile() and m.name.endswith('.json')), key=lambda m: m.name):
            items.append((os.path.basename(m.name), json.load(tf.extractfile(m))))
    items = items[::args.every]
    print(f'{len(items)} schemas')
    print('| engine | pass | fail | unsupported / compile error | timeout | invalid accepted | valid rejected |')
    print('|---|---:|---:|---:|---:|---:|---:|')
    for e in args.engines.split(','):
        run(e, items, args.timeout)


if __name__ == '__main__':
    sys.exit(main())
