/* DeepSeek-V4.1 prompt rendering (deepseek-recipe `DeepseekV41Encoding`) and DSML tool calls.
 * See prompt.c for the format. */
#ifndef DI_TOKENIZER_PROMPT_H
#define DI_TOKENIZER_PROMPT_H

#include "tokenizer/tokenizer.h"

/* Renders an OpenAI-style chat request (JSON: messages, tools, thinking, ...) to prompt ids,
 * appending to *out (BOS included, as the template has it). */
di_status di_prompt_render_request(di_tokenizer *t, const char *json, size_t len, di_token_vec *out,
                                   di_err *err);

#endif
