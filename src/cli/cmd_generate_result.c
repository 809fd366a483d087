/* Result lines of `deepinfer generate` (see cmd_generate_result.h). */
#include "cli/cmd_generate_result.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s[0, n), or 0 when it is not one (RFC 3629: no overlongs,
 * no surrogates, nothing above U+10FFFF). */
static size_t utf8_len(const unsigned char *s, size_t n) {
    if (s[0] < 0x80) return 1;
    size_t len = s[0] >= 0xc2 && s[0] <= 0xdf ? 2 : s[0] >= 0xe0 && s[0] <= 0xef ? 3 : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
    if (!len || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    if (s[0] == 0xe0 && s[1] < 0xa0) return 0; /* overlong */
    if (s[0] == 0xed && s[1] >= 0xa0) return 0; /* surrogate */
    if (s[0] == 0xf0 && s[1] < 0x90) return 0; /* overlong */
    if (s[0] == 0xf4 && s[1] >= 0x90) return 0; /* > U+10FFFF */
    return len;
}

char *di_json_quote(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    char *out = di_xmalloc(6 * n + 3), *o = out; /* worst case: every byte -> \u00XX */
    *o++ = '"';
    for (size_t i = 0; i < n;) {
        unsigned char c = u[i];
        if (c == '"' || c == '\\') {
            *o++ = '\\';
            *o++ = (char)c;
        } else if (c == '\n') {
            o += sprintf(o, "\\n");
        } else if (c == '\t') {
            o += sprintf(o, "\\t");
        } else if (c == '\r') {
            o += sprintf(o, "\\r");
        } else if (c < 0x20 || c == 0x7f) {
            o += sprintf(o, "\\u%04x", c);
        } else if (c < 0x80) {
            *o++ = (char)c;
        } else {
            size_t len = utf8_len(u + i, n - i);
            if (!len) {
                o += sprintf(o, "\\ufffd");
                i++;
                continue;
            }
            memcpy(o, u + i, len);
            o += len;
            i += len;
            continue;
        }
        i++;
    }
    *o++ = '"';
    *o = 0;
    return out;
}

static cJSON *f32_item(float x) {
    if (!isfinite(x)) return cJSON_CreateNull();
    char buf[32];
    snprintf(buf, sizeof buf, "%.9g", (double)x);
    return cJSON_CreateRaw(buf);
}

static cJSON *token_logprob(int32_t id, float logprob) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "token_id", id);
    cJSON_AddItemToObject(o, "logprob", f32_item(logprob));
    return o;
}

static cJSON *logprobs_item(const di_gen_request *gr, const di_result *r) {
    cJSON *content = cJSON_CreateArray();
    for (int i = 0; i < r->n_tokens; i++) {
        cJSON *t = token_logprob(r->token_ids[i], r->logprobs ? r->logprobs[i] : -INFINITY);
        cJSON *top = cJSON_AddArrayToObject(t, "top_logprobs");
        const int n = gr->top_logprobs < r->n_top ? gr->top_logprobs : r->n_top;
        for (int k = 0; k < n && r->top_logprobs; k++) {
            const di_token_logprob *e = &r->top_logprobs[(size_t)i * (size_t)r->n_top + (size_t)k];
            if (e->token_id >= 0) cJSON_AddItemToArray(top, token_logprob(e->token_id, e->logprob));
        }
        cJSON_AddItemToArray(content, t);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "content", content);
    return o;
}

static cJSON *id_item(const cJSON *id) { return id ? cJSON_Duplicate(id, false) : cJSON_CreateNull(); }

char *di_gen_result_json(const cJSON *id, const di_gen_request *gr, const di_result *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "id", id_item(id));
    if (r->text) {
        char *q = di_json_quote(r->text, r->text_len);
        cJSON_AddRawToObject(o, "text", q);
        free(q);
    }
    cJSON *ids = cJSON_AddArrayToObject(o, "token_ids");
    for (int i = 0; i < r->n_tokens; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(r->token_ids[i]));
    cJSON_AddStringToObject(o, "finish_reason", di_finish_reason_name(r->finish));
    cJSON *usage = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(usage, "prompt_tokens", r->prompt_tokens);
    cJSON_AddNumberToObject(usage, "completion_tokens", r->n_tokens);
    if (gr->logprobs) cJSON_AddItemToObject(o, "logprobs", logprobs_item(gr, r));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

char *di_gen_error_json(const cJSON *id, const char *message, const char *type) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "id", id_item(id));
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    char *q = di_json_quote(message, strlen(message));
    cJSON_AddRawToObject(e, "message", q);
    free(q);
    cJSON_AddStringToObject(e, "type", type);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
