#!/usr/bin/env python3
"""MaskBench schema coverage: compile each schema with `deepinfer grammar-check` and check every
valid / invalid instance through the token-level matcher.

A schema *passes* when it compiles and every valid instance is accepted and every invalid one
rejected. Instances are serialised with json.dumps(ensure_ascii=False) (any serialisation is valid
JSON; this one keeps non-ASCII characters raw). Prints a summary line per status and the counts;
--json writes the per-schema results. Exit status 1 if any invalid instance was accepted.

usage: maskbench.py --bin build/deepinfer --tokenizer assets/tokenizer/tokenizer.json \
                    --data ../shared/fixtures/maskbench/data.tar.gz [--jobs N] [--limit N]
"""
import argparse, collections, json, os, subprocess, sys, tarfile, tempfile
from concurrent.futures import ThreadPoolExecutor


def load(data):
    out = []
    with tarfile.open(data) as tf:
        for m in sorted(tf.getmembers(), key=lambda m: m.name):
            if m.isfile() and m.name.endswith('.json'):
                out.append((os.path.basename(m.name), json.load(tf.extractfile(m))))
    return out


def run_one(args, tmp, name, d):
    path = os.path.join(tmp, name)
    with open(path, 'w') as f:
        json.dump(d['schema'], f)
    tests = d.get('tests', [])
    stdin = ''.join(json.dumps(json.dumps(t['data'], ensure_ascii=False)) + '\n' for t in tests)
    cmd = [args.bin, 'grammar-check', '--json-schema', path, '--tokenizer', args.tokenizer]
    if args.compact:
        cmd.append('--json-compact')
    try:
        p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return name, {'status': 'timeout'}
    lines = p.stdout.splitlines()
    if not lines:
        return name, {'status': 'crash', 'stderr': p.stderr[-500:], 'rc': p.returncode}
    if lines[0] != 'ok':
        st = 'unsupported' if lines[0].startswith('unsupported:') else 'error'
        return name, {'status': st, 'msg': lines[0]}
    res = lines[1:]
    if len(res) != len(tests):
        return name, {'status': 'crash', 'stderr': p.stderr[-500:], 'rc': p.returncode}
    fa = [i for i, t in enumerate(tests) if not t['valid'] and res[i] == 'accept']
    fr = [i for i, t in enumerate(tests) if t['valid'] and res[i] != 'accept']
    return name, {'status': 'pass' if not fa and not fr else 'fail', 'false_accepts': fa, 'false_rejects': fr,
                  'n_tests': len(tests)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--bin', required=True)
    ap.add_argument('--tokenizer', required=True)
    ap.add_argument('--data', required=True)
    ap.add_argument('--jobs', type=int, default=os.cpu_count() or 1)
    ap.add_argument('--limit', type=int, default=0)
    ap.add_argument('--every', type=int, default=1, help='take every Nth schema (sorted by name)')
    ap.add_argument('--timeout', type=float, default=120)
    ap.add_argument('--compact', action='store_true')
    ap.add_argument('--json', help='write per-schema results here')
    ap.add_argument('--with-tests-only', action='store_true', help='skip schemas without instances')
    args = ap.parse_args()
    items = load(args.data)
    if args.with_tests_only:
        items = [x for x in items if x[1].get('tests')]
    items = items[::args.every]
    if args.limit:
        items = items[:args.limit]
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as ex:
        results = dict(ex.map(lambda x: run_one(args, tmp, *x), items))
    counts = collections.Counter(r['status'] for r in results.values())
    fa = sum(len(r.get('false_accepts', [])) for r in results.values())
    fr = sum(len(r.get('false_rejects', [])) for r in results.values())
    n = len(results)
    unsup = collections.Counter(r['msg'] for r in results.values() if r['status'] == 'unsupported')
    errs = collections.Counter(r['msg'] for r in results.values() if r['status'] == 'error')
    print(f"schemas {n}: pass {counts['pass']} ({100.0 * counts['pass'] / max(n, 1):.1f} %), "
          f"fail {counts['fail']}, unsupported {counts['unsupported']}, error {counts['error']}, "
          f"crash {counts['crash']}, timeout {counts['timeout']}")
    print(f"invalid instances accepted: {fa}; valid instances rejected: {fr}")
    for m, k in unsup.most_common(25):
        print(f"  {k:5d}  {m}")
    for m, k in errs.most_common(10):
        print(f"  {k:5d}  {m}")
    for name, r in sorted(results.items()):
        if r['status'] == 'crash':
            print(f"  crash: {name}: rc {r['rc']}: {r['stderr']}")
        if r.get('false_accepts'):
            print(f"  FALSE ACCEPT: {name}: instances {r['false_accepts']}")
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(results, f, indent=1)
    return 1 if fa or counts['crash'] else 0


if __name__ == '__main__':
    sys.exit(main())
