#!/usr/bin/env python3
"""Cross-check `deepinfer render` against DeepSeek's own encoder (PyPI deepseek-recipe,
`ChatCompletionRequest(...).convert(...)` + `DeepseekV41Encoding().with_tokenizer(...).encode`).

Generates seeded random chat requests covering: system prompts (first and mid-conversation),
consecutive user messages, text parts, assistant turns with and without reasoning, tool calls with
string / number / float / nested / non-object arguments, tool results out of call order, latest
reminders, a prefix assistant, thinking on/off, every reasoning effort, tools with tool_choice auto /
none / required, JSON response format, and content holding control-token literals. Requests the
recipe's converter rejects are skipped (counted). Exit status 0 = zero mismatches.

usage: crosscheck_prompt.py --bin build/deepinfer --tokenizer assets/tokenizer/tokenizer.json [--n 600]
"""
import argparse
import json
import random
import subprocess
import sys

TEXTS = ["Hello", "", "What is the weather in Paris?", "<｜User｜>", "<think>x</think>", "多语言 テキスト",
         "line1\nline2\n\n", "  spaced  ", "emoji 🎉 and ünïcödé", "json please", "<｜DSML｜ calls>",
         "a" * 50, "12345 678.9", "tab\there", "<｜end▁of▁sentence｜>", "\n\nleading newlines"]

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Get the weather",
                                      "parameters": {"type": "object", "properties": {
                                          "location": {"type": "string", "description": "City"},
                                          "days": {"type": "integer", "minimum": 1, "maximum": 14.0},
                                          "scale": {"type": "number", "default": 0.5e-5}},
                                          "required": ["location"]}}},
    {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {
        "q": {"type": "string"}, "filters": {"type": "array", "items": {"type": "string"}}}}}},
    {"type": "function", "function": {"name": "noop"}},
]

ARGS = ['{"location": "Paris", "days": 3}', '{"q": "deepseek", "filters": ["a", "b"], "n": 1.0}',
        '{"x": 1e-7, "y": 123456789012345678901, "z": -0.0, "w": {"k": [true, null, "s\\n"]}}',
        "not json", "[1, 2]", "{}", '{"s": "quote \\" backslash \\\\ <｜User｜>"}', '{"dup": 1, "dup": 2}']


def rand_text(rng):
    return rng.choice(TEXTS) + (rng.choice(TEXTS) if rng.random() < 0.3 else "")


def rand_content(rng):
    if rng.random() < 0.15:
        return [{"type": "text", "text": rand_text(rng)} for _ in range(rng.randint(1, 3))]
    return rand_text(rng)


def gen_request(rng):
    msgs = []
    for _ in range(rng.choice([0, 0, 1, 2])):
        msgs.append({"role": "system", "content": rand_content(rng)})
    call_id = 0
    for _ in range(rng.randint(1, 4)):
        for _ in range(rng.choice([1, 1, 2])):
            msgs.append({"role": rng.choice(["user"] * 6 + ["latest_reminder"]), "content": rand_content(rng)})
        if rng.random() < 0.15:
            msgs.append({"role": "system", "content": rand_text(rng)})
        a = {"role": "assistant", "content": rand_text(rng)}
        if rng.random() < 0.5:
            a["reasoning_content"] = rand_text(rng)
        if rng.random() < 0.4:
            calls = []
            for _ in range(rng.randint(1, 3)):
                call_id += 1
                calls.append({"id": f"call_{call_id}", "type": "function",
                              "function": {"name": rng.choice(["get_weather", "search", "noop"]),
                                           "arguments": rng.choice(ARGS)}})
            a["tool_calls"] = calls
            if rng.random() < 0.5:
                a["content"] = None
            msgs.append(a)
            results = [{"role": "tool", "tool_call_id": c["id"], "content": rand_text(rng)} for c in calls]
            rng.shuffle(results)
            msgs += results
            if rng.random() < 0.5:
                b = {"role": "assistant", "content": rand_text(rng)}
                if rng.random() < 0.5:
                    b["reasoning_content"] = rand_text(rng)
                msgs.append(b)
        else:
            msgs.append(a)
        if rng.random() < 0.3:
            msgs.pop()  # end on a user turn
    if msgs[-1]["role"] == "assistant" and "tool_calls" not in msgs[-1] and rng.random() < 0.2:
        msgs[-1]["prefix"] = True
    req = {"model": "DeepSeek-V4.1-Flash", "messages": msgs}
    r = rng.random()
    if r < 0.35:
        req["thinking"] = {"type": "enabled"}
    elif r < 0.7:
        req["thinking"] = {"type": "disabled"}
    if rng.random() < 0.4:
        req["reasoning_effort"] = rng.choice(["none", "minimal", "low", "medium", "high", "xhigh", "max"])
    if rng.random() < 0.5:
        req["tools"] = rng.sample(TOOLS, rng.randint(1, 3))
        if rng.random() < 0.4:
            req["tool_choice"] = rng.choice(["auto", "none", "required"])
    if rng.random() < 0.1:
        req["response_format"] = {"type": "json_object"}
        msgs.insert(0, {"role": "system", "content": "Answer in json."})
    return req


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--n", type=int, default=600)
    ap.add_argument("--seed", type=int, default=41)
    args = ap.parse_args()
    try:
        from deepseek_recipe import (ChatCompletionRequest, ConversionOptions, DeepseekV41Encoding,
                                     Tokenizer, __version__)
    except ImportError:
        print("SKIPPED: the deepseek-recipe Python package is not installed (pip install deepseek-recipe)")
        return 0
    enc = DeepseekV41Encoding().with_tokenizer(Tokenizer.from_file(args.tokenizer))
    try:
        from tokenizers import Tokenizer as HFTokenizer
        tok = HFTokenizer.from_file(args.tokenizer)
    except ImportError:
        tok = None
    rng = random.Random(args.seed)
    reqs, want, rejected = [], [], 0
    while len(reqs) < args.n:
        req = gen_request(rng)
        try:
            conv = ChatCompletionRequest(req).convert(ConversionOptions()).conversation
        except Exception:
            rejected += 1
            continue
        reqs.append(req)
        want.append(enc.encode(conv))
    payload = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in reqs).encode()
    res = subprocess.run([args.bin, "render", "--tokenizer", args.tokenizer, "--jsonl"], input=payload,
                         capture_output=True)
    got = [json.loads(l) for l in res.stdout.decode().splitlines()]
    mism = 0
    for i, (w, g) in enumerate(zip(want, got)):
        if w != g:
            mism += 1
            if mism <= 3:
                print(f"MISMATCH request {i}: {json.dumps(reqs[i], ensure_ascii=False)[:400]}")
                g = g or []
                k = next((j for j in range(min(len(w), len(g))) if w[j] != g[j]), min(len(w), len(g)))
                print(f"  first difference at id {k} of {len(w)}: recipe {w[k:k + 8]} deepinfer {g[k:k + 8]}")
                print(f"  recipe text there: {tok.decode(w[max(0, k - 8):k + 8], skip_special_tokens=False)!r}")
    if len(got) != len(want):
        print(f"MISMATCH: {len(got)} results for {len(want)} requests; stderr: {res.stderr.decode()[:300]}")
        mism += 1
    n_ids = sum(len(w) for w in want)
    print(f"prompt cross-check vs deepseek-recipe {__version__}: {len(reqs)} requests ({n_ids} ids), "
          f"{mism} mismatches ({rejected} generated requests rejected by the recipe's converter, skipped)")
    return 1 if mism else 0


if __name__ == "__main__":
    sys.exit(main())
