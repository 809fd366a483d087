#!/usr/bin/env python3
"""Validates constrained generations (JSON lines {"kind", "finish", "text"}) with real validators:
json_schema outputs with Python `jsonschema`, regex outputs with `re.fullmatch`. Outputs that
finished "stop" must validate; outputs cut by max_tokens ("length") must NOT be claimed complete
(they are counted, not validated). Exit status 1 on any failure."""
import argparse, json, re, sys

import jsonschema


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--outputs', required=True)
    ap.add_argument('--schema', required=True)
    ap.add_argument('--regex', required=True)
    a = ap.parse_args()
    schema = json.load(open(a.schema))
    rx = re.compile(open(a.regex).read().rstrip('\n'))
    bad, counts = 0, {}
    for line in open(a.outputs):
        o = json.loads(line)
        counts[(o['kind'], o['finish'])] = counts.get((o['kind'], o['finish']), 0) + 1
        if o['finish'] != 'stop':
            continue
        if o['kind'] == 'json_schema':
            try:
                jsonschema.validate(json.loads(o['text']), schema)
            except Exception as e:  # noqa: BLE001
                bad += 1
                print(f"INVALID json_schema output {o['text']!r}: {e}")
        elif o['kind'] == 'regex' and not rx.fullmatch(o['text']):
            bad += 1
            print(f"INVALID regex output {o['text']!r}")
    print('validated:', ', '.join(f'{k}/{f}: {n}' for (k, f), n in sorted(counts.items())), f'; invalid: {bad}')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
