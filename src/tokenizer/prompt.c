/* DeepSeek-V4.1 prompt rendering: not written yet (issue 3, item 5). */
#include "tokenizer/prompt.h"

di_status di_prompt_render_request(di_tokenizer *t, const char *json, size_t len, di_token_vec *out,
                                   di_err *err) {
    return di_errf(err, DI_EUNSUPPORTED, "prompt rendering is not implemented yet");
}
