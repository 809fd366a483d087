/* Result lines of `deepinfer generate --input` (docs/GENERATE.md), built with cJSON:
 *   {"id", "text"?, "token_ids", "finish_reason", "usage": {"prompt_tokens", "completion_tokens"},
 *    "logprobs"?: {"content": [{"token_id", "logprob", "top_logprobs": [{"token_id", "logprob"}]}]}}
 * or, for a line that could not run, {"id", "error": {"message", "type"}}.
 * Text is written from its byte length (a U+0000 in the output survives) and invalid UTF-8 becomes
 * U+FFFD, so every line is valid JSON. Logprobs are printed with 9 significant digits (exact for
 * float); a -inf logprob is null. (The `cmd_` prefix: src/cli/cmd_*.c is what the build globs.) */
#ifndef DI_CLI_CMD_GENERATE_RESULT_H
#define DI_CLI_CMD_GENERATE_RESULT_H

#include <cjson/cJSON.h>

#include "cli/cmd_generate_request.h"

/* `id` is echoed as given (NULL -> null). The returned strings are malloc'ed (free with cJSON_free). */
char *di_gen_result_json(const cJSON *id, const di_gen_request *gr, const di_result *r);
char *di_gen_error_json(const cJSON *id, const char *message, const char *type);
/* A JSON string literal (quotes included) of s[0, n); malloc'ed. */
char *di_json_quote(const char *s, size_t n);

#endif
