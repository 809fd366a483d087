#!/usr/bin/env python3
"""Writes tests/data/tokenizer/output_cases.json: model outputs (reasoning, answer, DSML tool calls in
V4.1 and V4 spelling, stray markers, odd newlines, truncation) with what DeepSeek's own output parser
(PyPI deepseek-recipe: StreamProcessor over a chat-completions request, accumulated into a
ChatCompletionResponse) extracts from them. tests/test_tokenizer_prompt.c checks di_output_parse
against it.

usage: pip install deepseek-recipe==0.2.0 && python3 tools/tokenizer/gen_output_cases.py
"""
import json
import random

from deepseek_recipe import (ChatCompletionRequest, ChatCompletionResponse, ConversionOptions, InferenceChunk,
                             InferenceFinishReason, StreamProcessor, __version__)

PIECES = ["Hello", "\n", "\n\n", " ", "多语言", "a \"quoted\" \\ text", "</think>", "<think>", "x < y > z", "😀",
          "{\"json\": 1}", "｜DSML｜", "<｜DSML｜", "invoke name=\"", "parameter"]


def param(rng, v41):
    d = "｜DSML｜ " if v41 else "｜DSML｜"
    if rng.random() < 0.5:
        val = rng.choice(["Paris", "a \"q\"\nline", "", "多语言 😀", "back\\slash", "tab\there"])
        return f'<{d}parameter name="{rng.choice(["city", "q", "k"])}" string="true">{val}</{d}parameter>'
    val = rng.choice(["2", "1.5", "[1, 2]", "{\"a\": null}", "true", "null"])
    return f'<{d}parameter name="{rng.choice(["days", "n", "opts"])}" string="false">{val}</{d}parameter>'


def calls_block(rng, opened):
    v41 = rng.random() < 0.8
    d = "｜DSML｜ " if v41 else "｜DSML｜"
    block_tag = "calls" if v41 else "tool_calls"
    out = "" if opened else f"<{d}{block_tag}>\n"
    invokes = []
    for _ in range(rng.randint(1, 3)):
        ps = "\n".join(param(rng, v41) for _ in range(rng.randint(0, 3)))
        invokes.append(f'<{d}invoke name="{rng.choice(["get_weather", "search", "f"])}">\n{ps}\n</{d}invoke>')
    out += "\n".join(invokes) + f"\n</{d}{block_tag}>"
    if rng.random() < 0.1:
        out += "trailing text"
    return out


def gen(rng):
    thinking = rng.random() < 0.5
    required = rng.random() < 0.15
    text = ""
    if thinking and not required:
        text += rng.choice(["", "\n", "\n\n"]) + "".join(rng.choice(PIECES[:6]) for _ in range(rng.randint(0, 4)))
        if rng.random() < 0.9:
            text += rng.choice(["", "\n", "\n\n"]) + "</think>"
    if not required:
        text += rng.choice(["", "\n", "\n\n"]) + "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 5)))
    if required or rng.random() < 0.5:
        if not required:
            text += rng.choice(["", "\n", "\n\n"])
        block = calls_block(rng, required)
        if rng.random() < 0.1:
            block = block[: rng.randint(1, len(block))]  # truncated output
        text += block
    return {"thinking": thinking, "required": required, "text": text}


def recipe_parse(case):
    body = {"model": "DeepSeek-V4.1-Flash", "messages": [{"role": "user", "content": "hi"}],
            "thinking": {"type": "enabled" if case["thinking"] else "disabled"},
            "tools": [{"type": "function", "function": {"name": "f"}}]}
    if case["required"]:
        body["tool_choice"] = "required"
    req = ChatCompletionRequest(body).convert(ConversionOptions())
    sp = StreamProcessor(ChatCompletionRequest.chunk_generator(req, "id", "m"), req.parsing_options)
    resp = ChatCompletionResponse("id", "m", 0, 1, 0)
    for chunk in [InferenceChunk.ready(), InferenceChunk.text(case["text"], 1), InferenceChunk.finish(InferenceFinishReason.Stop)]:
        for o in sp.push(chunk):
            resp.accumulate(o)
    for o in sp.finish():
        resp.accumulate(o)
    msg = json.loads(resp.to_json())["choices"][0]["message"]
    return {"reasoning": msg.get("reasoning_content") or "", "content": msg.get("content") or "",
            "calls": [[c["function"]["name"], c["function"]["arguments"]] for c in msg.get("tool_calls") or []]}


def main():
    rng = random.Random(2026)
    cases = []
    for _ in range(300):
        c = gen(rng)
        try:
            c["expect"] = recipe_parse(c)
        except Exception as e:  # the recipe rejects some malformed outputs; those are not compared
            continue
        cases.append(c)
    with open("tests/data/tokenizer/output_cases.json", "w", encoding="utf-8") as f:
        json.dump({"generator": f"deepseek-recipe {__version__}", "cases": cases}, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"{len(cases)} cases")


if __name__ == "__main__":
    main()
