/* DeepSeek-V4.1 prompt encoding (deepseek-recipe `DeepseekV41Encoding`, as released in the PyPI
 * package deepseek-recipe 0.2.0) and DSML tool calls: rendering a conversation to ids, parsing an
 * OpenAI-style chat request into a conversation, and parsing model output (reasoning, content,
 * tool calls), whole or streamed. Format details are in prompt.c and dsml.c. */
#ifndef DI_TOKENIZER_PROMPT_H
#define DI_TOKENIZER_PROMPT_H

#include "tokenizer/tokenizer.h"

typedef enum di_role {
    DI_ROLE_SYSTEM,
    DI_ROLE_USER,
    DI_ROLE_ASSISTANT,
    DI_ROLE_TOOL,
    DI_ROLE_LATEST_REMINDER,
} di_role;

typedef struct di_tool_call {
    char *id;        /* may be "" */
    char *name;
    char *arguments; /* JSON text of the arguments object, as the API carries it */
} di_tool_call;

typedef struct di_chat_msg {
    di_role role;
    char *content;        /* "" when absent; may contain NUL bytes (content_len) */
    size_t content_len;
    char *reasoning;      /* assistant reasoning_content, NULL when absent */
    size_t reasoning_len;
    di_tool_call *calls;  /* assistant tool calls [n_calls] */
    size_t n_calls;
    char *tool_call_id;   /* tool results: the call answered, NULL when absent */
    bool prefix;          /* last assistant message to be continued (no EOS, no generation prompt) */
} di_chat_msg;

typedef struct di_tool_def {
    char *name;
    char *schema; /* {"name": ..., "description": ..., "parameters": ...} in Python JSON style */
} di_tool_def;

typedef enum di_tool_choice { DI_TOOL_CHOICE_AUTO, DI_TOOL_CHOICE_NONE, DI_TOOL_CHOICE_REQUIRED } di_tool_choice;

typedef struct di_conversation {
    di_chat_msg *msgs;
    size_t n_msgs;
    di_tool_def *tools;
    size_t n_tools;
    bool thinking;          /* thinking mode (default true, as DeepSeek's API) */
    int effort;             /* reasoning effort score: 50 (low), 75 (high/xhigh, default), 100 (max) */
    di_tool_choice tool_choice;
    bool json_object;       /* response_format {"type": "json_object"} */
} di_conversation;

/* Parses an OpenAI-style chat-completions request: messages (system, user, assistant, tool,
 * latest_reminder; content as a string or text parts joined by "\n\n"; assistant reasoning_content,
 * tool_calls, prefix), tools, tool_choice, thinking {"type": "enabled"|"disabled"},
 * reasoning_effort (none|minimal|low|medium|high|xhigh|max), response_format (text|json_object).
 * Unknown roles, images and unsupported formats are errors naming the field. */
di_status di_conversation_parse(const char *json, size_t len, di_conversation *conv, di_err *err);
void di_conversation_free(di_conversation *conv);

/* Renders a conversation to prompt ids (BOS included), appending to *out. If text is not NULL it
 * also gets the rendered prompt string (malloc'd, caller frees). */
di_status di_prompt_render(di_tokenizer *t, const di_conversation *conv, di_token_vec *out, char **text,
                           di_err *err);

/* di_conversation_parse + di_prompt_render. */
di_status di_prompt_render_request(di_tokenizer *t, const char *json, size_t len, di_token_vec *out,
                                   di_err *err);

/* ---- model output ---- */

/* What a piece of parsed output is. */
typedef enum di_out_kind {
    DI_OUT_REASONING,  /* text inside <think> ... </think> */
    DI_OUT_CONTENT,    /* answer text */
    DI_OUT_TOOL_BEGIN, /* a tool call starts (no text) */
    DI_OUT_TOOL_NAME,  /* (part of) the tool name */
    DI_OUT_TOOL_ARGS,  /* (part of) the arguments as JSON object text */
    DI_OUT_TOOL_END,   /* the tool call is complete (no text) */
} di_out_kind;

typedef void (*di_out_fn)(void *user, di_out_kind kind, const char *text, size_t len);

/* Incremental parser of generated text (after the generation prompt). Text may be fed in any
 * pieces (e.g. per token); markers split across pieces are held back until decided, so the events
 * are the same whatever the split. */
typedef struct di_out_parser {
    int stage;          /* internal stage */
    bool leading;       /* newlines at the start of a section are dropped */
    char *pending;      /* undecided bytes */
    size_t n_pending, cap_pending;
} di_out_parser;

/* thinking: the prompt ended with <think> (output starts in reasoning); in_calls: the prompt ended
 * inside "<｜DSML｜ calls>" (tool_choice required). */
void di_out_parser_init(di_out_parser *p, bool thinking, bool in_calls);
void di_out_parser_feed(di_out_parser *p, const char *text, size_t len, di_out_fn fn, void *user);
void di_out_parser_finish(di_out_parser *p, di_out_fn fn, void *user);
void di_out_parser_free(di_out_parser *p);

/* Whole-output convenience: reasoning, content and the tool calls (id left ""). A call cut off by
 * the end of the output is included with what arrived (its arguments then are not complete JSON). */
typedef struct di_parsed_output {
    char *reasoning, *content;
    size_t reasoning_len, content_len;
    di_tool_call *calls;
    size_t n_calls;
} di_parsed_output;

void di_output_parse(const char *text, size_t len, bool thinking, bool in_calls, di_parsed_output *out);
void di_parsed_output_free(di_parsed_output *out);

/* DSML text of tool calls as the V4.1 template writes them ("<｜DSML｜ calls>\n...\n</｜DSML｜ calls>"),
 * malloc'd. Arguments that are not a JSON object become one string parameter "arguments". */
char *di_dsml_render_calls(const di_tool_call *calls, size_t n);

#endif
