#!/usr/bin/env python3
"""Reference Engram compressed token map, computed with HF `tokenizers` (model-spec §2.2 (a)).

Every token id is decoded alone (skip_special_tokens=False). If the text contains U+FFFD the key is
the raw token string (id_to_token), else the text through the reference's normalizer Sequence, or
the text itself if that normalises to "". Compressed ids are handed out by first appearance.

  token_map.py TOKENIZER_JSON [--dump OUT.json] [--expect-count N] [--pad-token-id ID]

--dump writes, for the C builder's comparison test (tests/test_engram_token_map_hf.sh):
  {"tokenizer": path, "vocab_size": n, "decoded_hex": [...], "raw_hex": [...],
   "token_map": [...], "n_compressed": k}
with every string as the hex of its UTF-8 bytes, so that texts with U+0000 survive any JSON reader.
Ids are 0 .. get_vocab_size(with_added_tokens=True) - 1; an id without a token has raw "".
"""
import argparse
import json
import sys

from tokenizers import Regex, Tokenizer, normalizers

SENTINEL = "\ue000"


def reference_normalizer():
    return normalizers.Sequence([
        normalizers.NFKC(),
        normalizers.NFD(),
        normalizers.StripAccents(),
        normalizers.Lowercase(),
        normalizers.Replace(Regex(r"[ \t\r\n]+"), " "),
        normalizers.Replace(Regex(r"^ $"), SENTINEL),
        normalizers.Strip(),
        normalizers.Replace(SENTINEL, " "),
    ])


def build(tok):
    norm = reference_normalizer()
    n = tok.get_vocab_size(with_added_tokens=True)
    decoded, raw, token_map, key_to_id = [], [], [], {}
    for t in range(n):
        text = tok.decode([t], skip_special_tokens=False)
        r = tok.id_to_token(t) or ""
        if "\ufffd" in text:
            key = r
        else:
            normalized = norm.normalize_str(text)
            key = normalized if normalized else text
        token_map.append(key_to_id.setdefault(key, len(key_to_id)))
        decoded.append(text)
        raw.append(r)
    return decoded, raw, token_map, len(key_to_id)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tokenizer")
    ap.add_argument("--dump")
    ap.add_argument("--expect-count", type=int)
    ap.add_argument("--pad-token-id", type=int, default=2)
    args = ap.parse_args()
    tok = Tokenizer.from_file(args.tokenizer)
    decoded, raw, token_map, count = build(tok)
    pad = token_map[args.pad_token_id] if args.pad_token_id < len(token_map) else None
    print("%s: %d token ids, %d compressed ids, pad id %s" % (args.tokenizer, len(token_map), count, pad))
    if args.dump:
        with open(args.dump, "w") as f:
            json.dump({
                "tokenizer": args.tokenizer,
                "vocab_size": len(token_map),
                "decoded_hex": [s.encode("utf-8").hex() for s in decoded],
                "raw_hex": [s.encode("utf-8").hex() for s in raw],
                "token_map": token_map,
                "n_compressed": count,
            }, f)
    if args.expect_count is not None and count != args.expect_count:
        print("error: expected %d compressed ids" % args.expect_count, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
