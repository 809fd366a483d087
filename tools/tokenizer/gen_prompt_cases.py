#!/usr/bin/env python3
"""Writes tests/data/tokenizer/prompt_cases.json: chat requests with the prompt text and ids that
DeepSeek's own encoder (PyPI deepseek-recipe, ChatCompletionRequest.convert + DeepseekV41Encoding)
gives for them with assets/tokenizer/tokenizer.json. tests/test_prompt.c checks deepinfer against it.

usage: pip install deepseek-recipe==0.2.0 && python3 tools/tokenizer/gen_prompt_cases.py
"""
import json

from deepseek_recipe import (ChatCompletionRequest, ConversionOptions, DeepseekV41Encoding, Tokenizer,
                             __version__)

TOOLS = [{"type": "function", "function": {"name": "w", "description": "weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "maximum": 14.0}}}}}]

CASES = {
    "empty_user": {"messages": [{"role": "user", "content": ""}], "thinking": {"type": "disabled"}},
    "thinking_default_effort": {"messages": [{"role": "user", "content": "Hello"}]},
    "thinking_max": {"messages": [{"role": "user", "content": "Hello"}], "reasoning_effort": "max"},
    "thinking_low_system": {"messages": [{"role": "system", "content": "Be terse."},
                                         {"role": "user", "content": "Hi"}], "reasoning_effort": "low"},
    "user_literal": {"messages": [{"role": "user", "content": "<｜User｜>"}], "thinking": {"type": "disabled"}},
    "mid_system": {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                                {"role": "system", "content": "Now answer in French."},
                                {"role": "user", "content": "Bye"}], "thinking": {"type": "disabled"}},
    "history_reasoning_dropped": {"messages": [{"role": "user", "content": "Hi"},
                                               {"role": "assistant", "content": "Hello!", "reasoning_content": "greet"},
                                               {"role": "user", "content": "Bye"}]},
    "tools_multi_turn": {"messages": [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "", "reasoning_content": "Call both.", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "w", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}},
            {"id": "b", "type": "function", "function": {"name": "w", "arguments": "{\"city\": \"Rome\"}"}}]},
        {"role": "tool", "tool_call_id": "b", "content": "rain"},
        {"role": "tool", "tool_call_id": "a", "content": "sun"},
        {"role": "assistant", "content": "Paris: sun. Rome: rain.", "reasoning_content": "Done."},
        {"role": "user", "content": "Thanks"}], "tools": TOOLS},
    "tool_choice_required": {"messages": [{"role": "user", "content": "Paris?"}], "tools": TOOLS,
                             "tool_choice": "required", "thinking": {"type": "disabled"}},
    "json_mode_reminder": {"messages": [{"role": "user", "content": "Give json"},
                                        {"role": "latest_reminder", "content": "Be brief."}],
                           "response_format": {"type": "json_object"}, "thinking": {"type": "disabled"}},
    "prefix_thinking": {"messages": [{"role": "user", "content": "Count to 3"},
                                     {"role": "assistant", "content": "", "reasoning_content": "Start at 1",
                                      "prefix": True}]},
}


def main():
    enc = DeepseekV41Encoding().with_tokenizer(Tokenizer.from_file("assets/tokenizer/tokenizer.json"))
    out = {"generator": f"deepseek-recipe {__version__}", "cases": {}}
    for name, req in CASES.items():
        req = dict(req, model="DeepSeek-V4.1-Flash")
        conv = ChatCompletionRequest(req).convert(ConversionOptions()).conversation
        out["cases"][name] = {"request": req, "prompt": DeepseekV41Encoding().render_conversation(conv).prompt,
                              "ids": enc.encode(conv)}
    with open("tests/data/tokenizer/prompt_cases.json", "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
