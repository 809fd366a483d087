/* Request lines of `deepinfer generate` -> di_request (see cmd_generate_request.h). One handler per
 * field, found by name in a table: adding a field is one table row and one function. Every error
 * message starts with the field's name in quotes, so a user can find it in the line. */
#include "cli/cmd_generate_request.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 2^53: the largest range in which every integer is exact in a JSON number read as a double */
#define MAX_EXACT_INT 9007199254740992.0

typedef struct parse_ctx {
    di_gen_request *out;
    cJSON *chat;          /* chat keys collected for chat_json (NULL until one is seen) */
    bool has_messages;
    const char *chat_extra; /* name of a chat key other than messages, for the error without messages */
    const cJSON *logprobs, *top_logprobs;
} parse_ctx;

static const char *type_name(const cJSON *v) {
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "an invalid value";
}

static di_status want_type(const cJSON *v, const char *what, di_err *err) {
    return di_errf(err, DI_EINVAL, "\"%s\" must be %s, not %s", v->string, what, type_name(v));
}

static bool is_integer(const cJSON *v) {
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble == floor(v->valuedouble) &&
           fabs(v->valuedouble) <= MAX_EXACT_INT;
}

/* An integer in [lo, hi]. `name` is the field (or element) for the message. */
static di_status get_int(const cJSON *v, const char *name, double lo, double hi, int64_t *out, di_err *err) {
    if (!is_integer(v)) {
        if (cJSON_IsNumber(v))
            return di_errf(err, DI_EINVAL, "\"%s\" must be an integer, not %g", name, v->valuedouble);
        return di_errf(err, DI_EINVAL, "\"%s\" must be an integer, not %s", name, type_name(v));
    }
    if (v->valuedouble < lo || v->valuedouble > hi)
        return di_errf(err, DI_EINVAL, "\"%s\" = %.0f is out of range [%.0f, %.0f]", name, v->valuedouble, lo, hi);
    *out = (int64_t)v->valuedouble;
    return DI_OK;
}

/* A finite number; `lo_open` makes the lower bound exclusive. */
static di_status get_num(const cJSON *v, double lo, bool lo_open, double hi, const char *range, float *out,
                         di_err *err) {
    if (!cJSON_IsNumber(v)) return want_type(v, "a number", err);
    double x = v->valuedouble;
    if (!isfinite(x) || x < lo || (lo_open && x == lo) || x > hi)
        return di_errf(err, DI_EINVAL, "\"%s\" = %g is out of range: must be %s", v->string, x, range);
    *out = (float)x;
    return DI_OK;
}

static di_status get_int_array(const cJSON *v, int32_t **out, int *n_out, di_err *err) {
    if (!cJSON_IsArray(v)) return want_type(v, "an array of token ids", err);
    int n = cJSON_GetArraySize(v), i = 0;
    int32_t *ids = di_xmalloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    const cJSON *x;
    cJSON_ArrayForEach(x, v) {
        char name[64];
        snprintf(name, sizeof name, "%s[%d]", v->string, i);
        int64_t id;
        if (get_int(x, name, 0, INT32_MAX, &id, err)) {
            free(ids);
            return err->status;
        }
        ids[i++] = (int32_t)id;
    }
    *out = ids;
    *n_out = n;
    return DI_OK;
}

/* ------------------------------------------------------------------------------ field handlers */

static di_status f_id(parse_ctx *c, const cJSON *v, di_err *err) {
    (void)c;
    if (cJSON_IsString(v) || is_integer(v)) return DI_OK; /* copied before the other fields */
    return want_type(v, "a string or an integer", err);
}

static di_status f_prompt(parse_ctx *c, const cJSON *v, di_err *err) {
    if (!cJSON_IsString(v)) return want_type(v, "a string", err);
    c->out->prompt = di_xstrdup(v->valuestring);
    return DI_OK;
}

static void add_chat_key(parse_ctx *c, const cJSON *v) {
    if (!c->chat) c->chat = cJSON_CreateObject();
    cJSON_AddItemToObject(c->chat, v->string, cJSON_Duplicate(v, true));
}

static di_status f_messages(parse_ctx *c, const cJSON *v, di_err *err) {
    if (!cJSON_IsArray(v)) return want_type(v, "an array of messages", err);
    c->has_messages = true;
    add_chat_key(c, v);
    return DI_OK;
}

/* tools, tool_choice, thinking, reasoning_effort: the chat renderer checks them */
static di_status f_chat_extra(parse_ctx *c, const cJSON *v, di_err *err) {
    (void)err;
    c->chat_extra = v->string;
    add_chat_key(c, v);
    return DI_OK;
}

/* OpenAI's response_format: {"type": "text" | "json_object" | "json_schema", "json_schema":
 * {"name", "schema", "strict"} (or the schema itself)}. A schema constrains decoding; json_object
 * constrains to any JSON object and, in a chat request, also asks the template for JSON mode. */
static di_status f_response_format(parse_ctx *c, const cJSON *v, di_err *err) {
    if (!cJSON_IsObject(v)) return want_type(v, "an object", err);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(v, "type");
    if (!cJSON_IsString(type))
        return di_errf(err, DI_EINVAL, "\"response_format\" needs \"type\": \"text\", \"json_object\" or \"json_schema\"");
    for (const cJSON *k = v->child; k; k = k->next)
        if (strcmp(k->string, "type") && strcmp(k->string, "json_schema"))
            return di_errf(err, DI_EINVAL, "\"response_format\": unknown field \"%s\"", k->string);
    if (!strcmp(type->valuestring, "text")) return DI_OK;
    if (!strcmp(type->valuestring, "json_object")) {
        c->out->req.json_object = true;
        c->chat_extra = v->string;
        add_chat_key(c, v);
        return DI_OK;
    }
    if (strcmp(type->valuestring, "json_schema"))
        return di_errf(err, DI_EINVAL, "\"response_format\": unknown type \"%s\"", type->valuestring);
    const cJSON *js = cJSON_GetObjectItemCaseSensitive(v, "json_schema");
    if (!cJSON_IsObject(js))
        return di_errf(err, DI_EINVAL, "\"response_format\": \"json_schema\" must be an object holding the schema");
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(js, "schema");
    if (schema && !cJSON_IsObject(schema) && !cJSON_IsBool(schema))
        return di_errf(err, DI_EINVAL, "\"response_format\": \"json_schema.schema\" must be an object");
    c->out->json_schema = cJSON_PrintUnformatted(schema ? schema : js);
    return DI_OK;
}

static di_status f_string_copy(const cJSON *v, char **out, di_err *err) {
    if (!cJSON_IsString(v)) return want_type(v, "a string", err);
    *out = di_xstrdup(v->valuestring);
    return DI_OK;
}

static di_status f_regex(parse_ctx *c, const cJSON *v, di_err *err) { return f_string_copy(v, &c->out->regex, err); }
static di_status f_grammar(parse_ctx *c, const cJSON *v, di_err *err) { return f_string_copy(v, &c->out->grammar, err); }

static di_status f_prompt_ids(parse_ctx *c, const cJSON *v, di_err *err) {
    return get_int_array(v, &c->out->prompt_ids, &c->out->req.n_prompt_ids, err);
}

static di_status f_max_tokens(parse_ctx *c, const cJSON *v, di_err *err) {
    int64_t n;
    if (get_int(v, v->string, 1, INT32_MAX, &n, err)) return err->status;
    c->out->req.max_tokens = (int)n;
    return DI_OK;
}

static di_status f_temperature(parse_ctx *c, const cJSON *v, di_err *err) {
    return get_num(v, 0, false, INFINITY, ">= 0 (0 = greedy)", &c->out->req.sampling.temperature, err);
}

static di_status f_top_p(parse_ctx *c, const cJSON *v, di_err *err) {
    return get_num(v, 0, true, 1, "in (0, 1] (1 = off)", &c->out->req.sampling.top_p, err);
}

static di_status f_top_k(parse_ctx *c, const cJSON *v, di_err *err) {
    int64_t k;
    if (get_int(v, v->string, -1, INT32_MAX, &k, err)) return err->status;
    c->out->req.sampling.top_k = k < 0 ? 0 : (int32_t)k; /* -1 = off, as in vLLM */
    return DI_OK;
}

static di_status f_min_p(parse_ctx *c, const cJSON *v, di_err *err) {
    return get_num(v, 0, false, 1, "in [0, 1] (0 = off)", &c->out->req.sampling.min_p, err);
}

static di_status f_penalty(parse_ctx *c, const cJSON *v, di_err *err) {
    float *slot = !strcmp(v->string, "presence_penalty") ? &c->out->req.sampling.presence_penalty
                                                          : &c->out->req.sampling.frequency_penalty;
    return get_num(v, -2, false, 2, "in [-2, 2] (0 = off)", slot, err);
}

static di_status f_repetition_penalty(parse_ctx *c, const cJSON *v, di_err *err) {
    return get_num(v, 0, true, INFINITY, "> 0 (1 = off)", &c->out->req.sampling.repetition_penalty, err);
}

static di_status f_seed(parse_ctx *c, const cJSON *v, di_err *err) {
    int64_t s;
    if (get_int(v, v->string, 0, MAX_EXACT_INT, &s, err)) return err->status;
    c->out->req.sampling.seed = (uint64_t)s;
    c->out->req.has_seed = true;
    return DI_OK;
}

static di_status f_stop(parse_ctx *c, const cJSON *v, di_err *err) {
    di_gen_request *o = c->out;
    if (cJSON_IsString(v)) {
        if (!*v->valuestring) return di_errf(err, DI_EINVAL, "\"stop\" must not be an empty string");
        o->stop = di_xmalloc(sizeof(char *));
        o->stop[0] = di_xstrdup(v->valuestring);
        o->req.n_stop = 1;
        return DI_OK;
    }
    if (!cJSON_IsArray(v)) return want_type(v, "a string or an array of strings", err);
    int n = cJSON_GetArraySize(v);
    o->stop = di_xcalloc((size_t)(n ? n : 1), sizeof(char *));
    const cJSON *x;
    cJSON_ArrayForEach(x, v) {
        if (!cJSON_IsString(x))
            return di_errf(err, DI_EINVAL, "\"stop[%d]\" must be a string, not %s", o->req.n_stop, type_name(x));
        if (!*x->valuestring) return di_errf(err, DI_EINVAL, "\"stop[%d]\" must not be empty", o->req.n_stop);
        o->stop[o->req.n_stop++] = di_xstrdup(x->valuestring);
    }
    return DI_OK;
}

static di_status f_stop_token_ids(parse_ctx *c, const cJSON *v, di_err *err) {
    return get_int_array(v, &c->out->stop_token_ids, &c->out->req.n_stop_token_ids, err);
}

static di_status f_logit_bias(parse_ctx *c, const cJSON *v, di_err *err) {
    if (!cJSON_IsObject(v)) return want_type(v, "an object {\"token id\": bias}", err);
    di_gen_request *o = c->out;
    int n = cJSON_GetArraySize(v), i = 0;
    o->logit_bias = di_xmalloc(sizeof(di_logit_bias) * (size_t)(n ? n : 1));
    const cJSON *x;
    cJSON_ArrayForEach(x, v) {
        const char *k = x->string;
        char *end = NULL;
        long id = isdigit((unsigned char)k[0]) ? strtol(k, &end, 10) : -1;
        if (id < 0 || *end || id > INT32_MAX)
            return di_errf(err, DI_EINVAL, "\"logit_bias\": key \"%s\" is not a token id (a decimal integer >= 0)", k);
        if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) || fabs(x->valuedouble) > 100)
            return di_errf(err, DI_EINVAL, "\"logit_bias\": the bias of token %ld must be a number in [-100, 100]", id);
        o->logit_bias[i++] = (di_logit_bias){(int32_t)id, (float)x->valuedouble};
    }
    o->req.sampling.logit_bias = o->logit_bias;
    o->req.sampling.n_logit_bias = n;
    return DI_OK;
}

static di_status f_logprobs(parse_ctx *c, const cJSON *v, di_err *err) {
    int64_t n;
    if (cJSON_IsBool(v)) {
        c->out->logprobs = cJSON_IsTrue(v);
    } else if (cJSON_IsNumber(v)) { /* the completions API: the number of alternatives */
        if (get_int(v, v->string, 0, DI_MAX_LOGPROBS, &n, err)) return err->status;
        c->out->logprobs = true;
        c->out->top_logprobs = (int)n;
    } else {
        return want_type(v, "a boolean or an integer", err);
    }
    c->logprobs = v;
    return DI_OK;
}

static di_status f_top_logprobs(parse_ctx *c, const cJSON *v, di_err *err) {
    int64_t n;
    if (get_int(v, v->string, 0, DI_MAX_LOGPROBS, &n, err)) return err->status;
    c->top_logprobs = v;
    return DI_OK;
}

static di_status f_ignore_eos(parse_ctx *c, const cJSON *v, di_err *err) {
    if (!cJSON_IsBool(v)) return want_type(v, "a boolean", err);
    c->out->req.ignore_eos = cJSON_IsTrue(v);
    return DI_OK;
}

typedef di_status (*field_fn)(parse_ctx *c, const cJSON *v, di_err *err);

static const struct {
    const char *name;
    field_fn fn;
} k_fields[] = {
    {"id", f_id},
    {"prompt", f_prompt},
    {"messages", f_messages},
    {"tools", f_chat_extra},
    {"tool_choice", f_chat_extra},
    {"thinking", f_chat_extra},
    {"reasoning_effort", f_chat_extra},
    {"response_format", f_response_format},
    {"regex", f_regex},
    {"grammar", f_grammar},
    {"prompt_ids", f_prompt_ids},
    {"max_tokens", f_max_tokens},
    {"temperature", f_temperature},
    {"top_p", f_top_p},
    {"top_k", f_top_k},
    {"min_p", f_min_p},
    {"seed", f_seed},
    {"stop", f_stop},
    {"stop_token_ids", f_stop_token_ids},
    {"presence_penalty", f_penalty},
    {"frequency_penalty", f_penalty},
    {"repetition_penalty", f_repetition_penalty},
    {"logit_bias", f_logit_bias},
    {"logprobs", f_logprobs},
    {"top_logprobs", f_top_logprobs},
    {"ignore_eos", f_ignore_eos},
};

/* ------------------------------------------------------------------------------------ the line */

static di_status parse_json(const char *line, size_t len, cJSON **root, di_err *err) {
    const char *end = NULL;
    *root = cJSON_ParseWithLengthOpts(line, len, &end, false);
    if (!*root) {
        size_t at = end && end >= line && end <= line + len ? (size_t)(end - line) : 0;
        const char *e = cJSON_GetErrorPtr();
        if (e && e >= line && e <= line + len) at = (size_t)(e - line);
        if (at >= len) return di_errf(err, DI_EINVAL, "not valid JSON (the line ends inside a value)");
        return di_errf(err, DI_EINVAL, "not valid JSON (error at byte %zu: \"%.*s\")", at,
                       (int)(len - at < 20 ? len - at : 20), line + at);
    }
    for (const char *p = end; p < line + len; p++)
        if (!isspace((unsigned char)*p))
            return di_errf(err, DI_EINVAL, "unexpected text after the JSON object at byte %zu", (size_t)(p - line));
    if (!cJSON_IsObject(*root)) return di_errf(err, DI_EINVAL, "a request line must be a JSON object, not %s", type_name(*root));
    return DI_OK;
}

/* After every field: one prompt form, chat keys only with messages, logprobs consistency. */
static di_status finish_request(parse_ctx *c, di_err *err) {
    di_gen_request *o = c->out;
    int forms = (o->prompt != NULL) + c->has_messages + (o->prompt_ids != NULL);
    if (forms == 0) return di_errf(err, DI_EINVAL, "no prompt: give one of \"prompt\", \"messages\", \"prompt_ids\"");
    if (forms > 1) return di_errf(err, DI_EINVAL, "give only one of \"prompt\", \"messages\", \"prompt_ids\"");
    if (c->chat_extra && !c->has_messages && strcmp(c->chat_extra, "response_format"))
        return di_errf(err, DI_EINVAL, "\"%s\" goes with \"messages\" (a chat request)", c->chat_extra);
    if ((o->json_schema != NULL) + (o->regex != NULL) + (o->grammar != NULL) + o->req.json_object > 1)
        return di_errf(err, DI_EINVAL, "give at most one of \"response_format\" (json), \"regex\", \"grammar\"");
    o->req.json_schema = o->json_schema;
    o->req.regex = o->regex;
    o->req.grammar_ebnf = o->grammar;
    if (c->top_logprobs) {
        if (!c->logprobs || !cJSON_IsBool(c->logprobs))
            return di_errf(err, DI_EINVAL, "\"top_logprobs\" needs \"logprobs\": true");
        o->top_logprobs = (int)c->top_logprobs->valuedouble;
    }
    if (c->has_messages) o->chat_json = cJSON_PrintUnformatted(c->chat);
    /* the engine's logprobs count is both "on" and the number of alternatives: ask for at least one
     * to get the chosen token's logprob, and list only the number asked for */
    o->req.sampling.logprobs = o->logprobs ? (o->top_logprobs > 0 ? o->top_logprobs : 1) : 0;
    o->req.prompt = o->prompt;
    o->req.chat_json = o->chat_json;
    o->req.prompt_ids = o->prompt_ids;
    o->req.stop = (const char *const *)o->stop;
    o->req.stop_token_ids = o->stop_token_ids;
    return DI_OK;
}

static di_status parse_fields(parse_ctx *c, const cJSON *root, di_err *err) {
    for (const cJSON *v = root->child; v; v = v->next) {
        for (const cJSON *w = root->child; w != v; w = w->next)
            if (!strcmp(w->string, v->string)) return di_errf(err, DI_EINVAL, "field \"%s\" appears twice", v->string);
        size_t k = 0;
        while (k < sizeof k_fields / sizeof k_fields[0] && strcmp(k_fields[k].name, v->string)) k++;
        if (k == sizeof k_fields / sizeof k_fields[0])
            return di_errf(err, DI_EINVAL, "unknown field \"%s\"", v->string);
        if (cJSON_IsNull(v)) continue; /* null = not given, as OpenAI clients send it */
        if (k_fields[k].fn(c, v, err)) return err->status;
    }
    return finish_request(c, err);
}

di_status di_gen_request_parse(const char *line, size_t len, const di_request *defaults, di_gen_request *out,
                               di_err *err) {
    memset(out, 0, sizeof *out);
    out->req.max_tokens = defaults->max_tokens;
    out->req.sampling = defaults->sampling;
    out->req.sampling.logit_bias = NULL;
    out->req.sampling.n_logit_bias = 0;
    out->req.has_seed = defaults->has_seed;
    out->req.ignore_eos = defaults->ignore_eos;
    cJSON *root = NULL;
    di_status st = parse_json(line, len, &root, err);
    /* the id first, so that an error anywhere else (even text after the object) still reports it */
    const cJSON *id = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "id") : NULL;
    if (id && (cJSON_IsString(id) || is_integer(id))) out->id = cJSON_Duplicate(id, false);
    if (!st) {
        parse_ctx c = {.out = out};
        st = parse_fields(&c, root, err);
        cJSON_Delete(c.chat);
    }
    cJSON_Delete(root);
    return st;
}

void di_gen_request_free(di_gen_request *r) {
    if (!r) return;
    cJSON_Delete(r->id);
    free(r->prompt);
    cJSON_free(r->chat_json);
    free(r->prompt_ids);
    for (int i = 0; i < r->req.n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->stop_token_ids);
    free(r->logit_bias);
    cJSON_free(r->json_schema);
    free(r->regex);
    free(r->grammar);
    memset(r, 0, sizeof *r);
}
