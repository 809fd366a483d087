/* One request line of `deepinfer generate --input FILE` (docs/GENERATE.md): an OpenAI-like JSON
 * object parsed into a di_request whose pointers refer to buffers owned by di_gen_request.
 *
 * The parser checks what the line alone can tell: JSON syntax, one object, known field names (an
 * unknown field is an error that names it, never ignored), no field twice, the type of every
 * field and the ranges of docs/SAMPLING.md. What needs the model (ids inside the vocabulary, the
 * prompt length against the context, chat messages against the template) is checked by
 * di_engine_add_request. Chat keys (messages, tools, tool_choice, thinking, reasoning_effort,
 * response_format) are copied into one JSON object, di_request.chat_json, for the engine's renderer.
 * (The file name keeps the `cmd_` prefix because src/cli/cmd_*.c is what the build globs.) */
#ifndef DI_CLI_CMD_GENERATE_REQUEST_H
#define DI_CLI_CMD_GENERATE_REQUEST_H

#include <cjson/cJSON.h>

#include "base/error.h"

typedef struct di_gen_request {
    di_request req;           /* ready for di_engine_add_request; points into the buffers below */
    cJSON *id;                /* the line's "id" (string or integer), owned; NULL when absent or unreadable */
    char *prompt;             /* "prompt" */
    char *chat_json;          /* {"messages": ..., "tools": ..., ...} */
    int32_t *prompt_ids;      /* [req.n_prompt_ids] */
    char **stop;              /* [req.n_stop] */
    int32_t *stop_token_ids;  /* [req.n_stop_token_ids] */
    di_logit_bias *logit_bias;/* [req.sampling.n_logit_bias] */
    char *json_schema;        /* response_format json_schema: the schema as JSON text */
    char *regex;              /* "regex" */
    char *grammar;            /* "grammar" (EBNF) */
    bool logprobs;            /* the result carries logprobs */
    int top_logprobs;         /* alternatives listed per token, 0..DI_MAX_LOGPROBS */
} di_gen_request;

/* Parses line[0, len) over `defaults` (scalar fields only: max_tokens, sampling, seed, ignore_eos;
 * its pointers are ignored). On failure err names the field at fault and out->id still holds the
 * line's id when it could be read; call di_gen_request_free either way. */
di_status di_gen_request_parse(const char *line, size_t len, const di_request *defaults, di_gen_request *out,
                               di_err *err);
void di_gen_request_free(di_gen_request *r);

#endif
