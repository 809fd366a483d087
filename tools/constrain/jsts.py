#!/usr/bin/env python3
"""JSON-Schema-Test-Suite (Debian package json-schema-test-suite, draft 7) through
`deepinfer grammar-check`: per test case (schema + instances) compile, then check each instance.
Reports cases compiled / unsupported / error and instances accepted-valid, rejected-invalid,
invalid-accepted (must be 0), valid-rejected. Exit status 1 if an invalid instance was accepted.

usage: jsts.py --bin build/deepinfer --tokenizer assets/tokenizer/tokenizer.json \
               [--dir /usr/share/json-schema-test-suite/tests/draft7]
"""
import argparse, collections, glob, json, os, sys, tempfile
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from maskbench import run_one  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--bin', required=True)
    ap.add_argument('--tokenizer', required=True)
    ap.add_argument('--dir', default='/usr/share/json-schema-test-suite/tests/draft7')
    ap.add_argument('--jobs', type=int, default=os.cpu_count() or 1)
    ap.add_argument('--timeout', type=float, default=60)
    ap.add_argument('--compact', action='store_true')
    args = ap.parse_args()
    cases = []
    for f in sorted(glob.glob(os.path.join(args.dir, '*.json'))):
        for i, case in enumerate(json.load(open(f))):
            name = f'{os.path.basename(f)[:-5]}-{i}.json'
            cases.append((name, {'schema': case['schema'],
                                 'tests': [{'data': t['data'], 'valid': t['valid']} for t in case['tests']]}))
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as ex:
        results = dict(ex.map(lambda x: run_one(args, tmp, *x), cases))
    st = collections.Counter(r['status'] for r in results.values())
    n_inst = sum(len(c['tests']) for _, c in cases)
    tested = {name: c for name, c in cases if results[name]['status'] in ('pass', 'fail')}
    fa = sum(len(results[n].get('false_accepts', [])) for n in tested)
    fr = sum(len(results[n].get('false_rejects', [])) for n in tested)
    n_checked = sum(len(c['tests']) for c in tested.values())
    print(f"draft7 cases {len(cases)}: compiled {st['pass'] + st['fail']} (all instances right: {st['pass']}), "
          f"unsupported {st['unsupported']}, error {st['error']}, crash {st['crash']}, timeout {st['timeout']}")
    print(f"instances {n_inst}: checked {n_checked}, right {n_checked - fa - fr}, invalid accepted {fa}, "
          f"valid rejected {fr}")
    unsup = collections.Counter(r['msg'] for r in results.values() if r['status'] == 'unsupported')
    for m, k in unsup.most_common(15):
        print(f"  {k:4d}  {m}")
    for n, r in sorted(results.items()):
        if r.get('false_accepts'):
            print(f"  FALSE ACCEPT: {n}: {r['false_accepts']}")
        if r['status'] in ('crash', 'error'):
            print(f"  {r['status']}: {n}: {r.get('msg', r.get('stderr'))}")
    return 1 if fa or st['crash'] else 0


if __name__ == '__main__':
    sys.exit(main())
