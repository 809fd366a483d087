/* DSML tool calls (DeepSeek-V4.1): writing them into prompts and reading them out of model output.
 *
 * Written form (V4.1 tags carry a space after ｜DSML｜; V4 used "tool_calls", "invoke", "parameter"):
 *   <｜DSML｜ calls>
 *   <｜DSML｜ invoke name="NAME">
 *   <｜DSML｜ parameter name="KEY" string="true">raw string</｜DSML｜ parameter>
 *   <｜DSML｜ parameter name="KEY" string="false">JSON in Python style</｜DSML｜ parameter>
 *   </｜DSML｜ invoke>
 *   </｜DSML｜ calls>
 *
 * Reading follows deepseek-recipe's output state machine (stream/state_machine.rs): stages with a
 * few literal markers each; text between markers gets the stage's action (reasoning, content, tool
 * name, argument bytes, or dropped). Newlines right before "<｜DSML｜" and "</think>" and at the start
 * of the reasoning and the content are dropped. Arguments come out as a JSON object built on the fly
 * ({"key": "escaped string", "key2": raw}), so a streaming consumer can forward them as they come.
 * Both V4 and V4.1 tag spellings are read. Incremental feeding holds back a tail that could still be
 * the start of a marker (plus the newlines before it), so events do not depend on how the text is cut. */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/prompt_internal.h"

#define DSML "｜DSML｜"

/* ---- writing ---- */

/* Every ｜DSML｜ in the markup is a control token; names, keys and values are text. */
static void write_param(di_pbuf *b, const char *key, size_t key_len, const di_json *value) {
    bool is_str = value->type == DI_JSON_STRING;
    di_pbuf_textz(b, "<");
    di_pbuf_special(b, DSML);
    di_pbuf_textz(b, " parameter name=\"");
    di_pbuf_text(b, key, key_len);
    di_pbuf_textz(b, is_str ? "\" string=\"true\">" : "\" string=\"false\">");
    if (is_str) {
        di_pbuf_text(b, value->str, value->len);
    } else {
        di_sbuf v = {0};
        di_json_write_py(value, &v);
        di_pbuf_text(b, v.s, v.len);
        di_sbuf_free(&v);
    }
    di_pbuf_textz(b, "</");
    di_pbuf_special(b, DSML);
    di_pbuf_textz(b, " parameter>");
}

/* Parameters of one call, joined by "\n": the members of the arguments object (a repeated name at
 * its first position with its last value, as serde_json's map), else one string "arguments". */
static void write_arguments(di_pbuf *b, const char *arguments) {
    di_json args;
    bool parsed = !di_json_parse(arguments, strlen(arguments), &args, NULL);
    if (!parsed || args.type != DI_JSON_OBJECT) {
        if (parsed) di_json_free(&args);
        di_json fallback = {.type = DI_JSON_STRING, .str = (char *)arguments, .len = strlen(arguments)};
        write_param(b, "arguments", 9, &fallback);
        return;
    }
    bool first = true;
    for (size_t i = 0; i < args.n; i++) {
        const di_json *m = &args.items[i], *last = m;
        bool seen = false;
        for (size_t j = 0; j < i && !seen; j++)
            seen = args.items[j].key_len == m->key_len && !memcmp(args.items[j].key, m->key, m->key_len);
        if (seen) continue;
        for (size_t j = i + 1; j < args.n; j++)
            if (args.items[j].key_len == m->key_len && !memcmp(args.items[j].key, m->key, m->key_len)) last = &args.items[j];
        if (!first) di_pbuf_textz(b, "\n");
        first = false;
        write_param(b, m->key, m->key_len, last);
    }
    di_json_free(&args);
}

void di_dsml_write_calls(di_pbuf *b, const di_tool_call *calls, size_t n) {
    di_pbuf_textz(b, "<");
    di_pbuf_special(b, DSML);
    di_pbuf_textz(b, " calls>\n");
    for (size_t k = 0; k < n; k++) {
        if (k) di_pbuf_textz(b, "\n");
        di_pbuf_textz(b, "<");
        di_pbuf_special(b, DSML);
        di_pbuf_textz(b, " invoke name=\"");
        di_pbuf_textz(b, calls[k].name);
        di_pbuf_textz(b, "\">\n");
        write_arguments(b, calls[k].arguments ? calls[k].arguments : "");
        di_pbuf_textz(b, "\n</");
        di_pbuf_special(b, DSML);
        di_pbuf_textz(b, " invoke>");
    }
    di_pbuf_textz(b, "\n</");
    di_pbuf_special(b, DSML);
    di_pbuf_textz(b, " calls>");
}

char *di_dsml_render_calls(const di_tool_call *calls, size_t n) {
    di_pbuf b = {0};
    di_dsml_write_calls(&b, calls, n);
    char *s = b.text.s;
    b.text.s = NULL;
    di_pbuf_free(&b);
    return s;
}

/* ---- reading ---- */

enum stage { COMMON, REASONING, TOOL_CALLS, TOOL_NAME, ARGS, PARAM_NAME, PARAM_TYPE, VALUE_STR, VALUE_RAW, FINISHED };

typedef struct marker {
    const char *s;
    bool newlines_before; /* "\n*" + s: the newlines are part of the match */
    int next;
    bool next_leading;
} marker;

#define M(s, nl, next, lead) {s, nl, next, lead}
static const marker k_common[] = {M("<" DSML, true, TOOL_CALLS, false), M("</think>", false, COMMON, false)};
static const marker k_reasoning[] = {M("<" DSML, true, TOOL_CALLS, false), M("</think>", true, COMMON, true)};
static const marker k_calls[] = {M("invoke name=\"", false, TOOL_NAME, false),
                                 M("</" DSML "tool_calls>", false, FINISHED, false),
                                 M("</" DSML " calls>", false, FINISHED, false)};
static const marker k_name[] = {M("\"", false, ARGS, true)};
static const marker k_args[] = {M("parameter name=\"", false, PARAM_NAME, false), M("</" DSML, false, TOOL_CALLS, false)};
static const marker k_param_name[] = {M("\"", false, PARAM_TYPE, false)};
static const marker k_param_type[] = {M("true\">", false, VALUE_STR, false), M("false\">", false, VALUE_RAW, false)};
static const marker k_value[] = {M("</" DSML, false, ARGS, false)};

static const marker *markers_of(int stage, size_t *n) {
#define CASE(st, arr) case st: *n = sizeof arr / sizeof arr[0]; return arr
    switch (stage) {
        CASE(COMMON, k_common);
        CASE(REASONING, k_reasoning);
        CASE(TOOL_CALLS, k_calls);
        CASE(TOOL_NAME, k_name);
        CASE(ARGS, k_args);
        CASE(PARAM_NAME, k_param_name);
        CASE(PARAM_TYPE, k_param_type);
        CASE(VALUE_STR, k_value);
        CASE(VALUE_RAW, k_value);
    default: *n = 0; return NULL;
    }
#undef CASE
}

void di_out_parser_init(di_out_parser *p, bool thinking, bool in_calls) {
    memset(p, 0, sizeof *p);
    p->stage = in_calls ? TOOL_CALLS : thinking ? REASONING : COMMON;
    p->leading = true;
}

void di_out_parser_free(di_out_parser *p) {
    free(p->pending);
    memset(p, 0, sizeof *p);
}

/* Text between markers: the stage's action. */
static void emit_unmatched(di_out_parser *p, const char *s, size_t n, di_out_fn fn, void *user) {
    if ((p->stage == COMMON || p->stage == REASONING) && p->leading) {
        while (n && *s == '\n') s++, n--;
        if (n) p->leading = false;
    }
    if (!n) return;
    switch (p->stage) {
    case COMMON: fn(user, DI_OUT_CONTENT, s, n); break;
    case REASONING: fn(user, DI_OUT_REASONING, s, n); break;
    case TOOL_NAME: fn(user, DI_OUT_TOOL_NAME, s, n); break;
    case PARAM_NAME:
    case VALUE_RAW: fn(user, DI_OUT_TOOL_ARGS, s, n); break;
    case VALUE_STR: {
        di_sbuf b = {0};
        di_json_write_string(s, n, &b); /* escaped, without the surrounding quotes */
        fn(user, DI_OUT_TOOL_ARGS, b.s + 1, b.len - 2);
        di_sbuf_free(&b);
        break;
    }
    default: break; /* markup between the interesting parts, or text after the calls */
    }
}

/* What a matched marker produces, then the stage change. */
static void take_marker(di_out_parser *p, const marker *m, di_out_fn fn, void *user) {
    int from = p->stage;
    if (from == TOOL_CALLS && m->next == TOOL_NAME) fn(user, DI_OUT_TOOL_BEGIN, "", 0);
    if (from == ARGS && m->next == PARAM_NAME) fn(user, DI_OUT_TOOL_ARGS, p->leading ? "{\"" : ", \"", p->leading ? 2 : 3);
    if (from == ARGS && m->next == TOOL_CALLS) {
        fn(user, DI_OUT_TOOL_ARGS, p->leading ? "{}" : "}", p->leading ? 2 : 1);
        fn(user, DI_OUT_TOOL_END, "", 0);
    }
    if (from == PARAM_NAME) fn(user, DI_OUT_TOOL_ARGS, "\": ", 3);
    if (from == PARAM_TYPE && m->next == VALUE_STR) fn(user, DI_OUT_TOOL_ARGS, "\"", 1);
    if (from == VALUE_STR) fn(user, DI_OUT_TOOL_ARGS, "\"", 1);
    p->stage = m->next;
    p->leading = m->next_leading; /* COMMON after </think>: newlines dropped; ARGS: first parameter */
}

/* Earliest marker match in s[0..n) by end position (then by list order): start and end offsets. */
static const marker *find_marker(const marker *ms, size_t nm, const char *s, size_t n, size_t *start, size_t *end) {
    const marker *best = NULL;
    for (size_t k = 0; k < nm; k++) {
        size_t ml = strlen(ms[k].s);
        const char *hit = ml <= n ? memmem(s, n, ms[k].s, ml) : NULL;
        if (!hit) continue;
        size_t e = (size_t)(hit - s) + ml;
        if (best && e >= *end) continue;
        size_t st = (size_t)(hit - s);
        if (ms[k].newlines_before)
            while (st > 0 && s[st - 1] == '\n') st--;
        best = &ms[k];
        *start = st;
        *end = e;
    }
    return best;
}

/* Length of the longest tail of s that could still grow into a marker match. */
static size_t undecided_tail(const marker *ms, size_t nm, const char *s, size_t n) {
    size_t hold = 0;
    for (size_t k = 0; k < nm; k++) {
        size_t ml = strlen(ms[k].s);
        size_t t = ml - 1 < n ? ml - 1 : n;
        for (; t > 0; t--)
            if (!memcmp(s + n - t, ms[k].s, t)) break;
        size_t h = t;
        if (ms[k].newlines_before)
            while (h < n && s[n - h - 1] == '\n') h++;
        if (h > hold) hold = h;
    }
    return hold;
}

static void process(di_out_parser *p, bool final, di_out_fn fn, void *user) {
    size_t off = 0;
    if (!p->n_pending) return;
    for (;;) {
        size_t nm, start = 0, end = 0;
        const marker *ms = markers_of(p->stage, &nm);
        const char *s = p->pending + off;
        size_t n = p->n_pending - off;
        const marker *m = nm ? find_marker(ms, nm, s, n, &start, &end) : NULL;
        if (m) {
            emit_unmatched(p, s, start, fn, user);
            off += end;
            take_marker(p, m, fn, user);
            continue;
        }
        size_t hold = final || !nm ? 0 : undecided_tail(ms, nm, s, n);
        emit_unmatched(p, s, n - hold, fn, user);
        off += n - hold;
        break;
    }
    if (off && p->n_pending > off) memmove(p->pending, p->pending + off, p->n_pending - off);
    p->n_pending -= off;
}

void di_out_parser_feed(di_out_parser *p, const char *text, size_t len, di_out_fn fn, void *user) {
    if (p->n_pending + len > p->cap_pending) {
        p->cap_pending = (p->n_pending + len) * 2 + 64;
        p->pending = di_xrealloc(p->pending, p->cap_pending);
    }
    if (len) memcpy(p->pending + p->n_pending, text, len);
    p->n_pending += len;
    process(p, false, fn, user);
}

void di_out_parser_finish(di_out_parser *p, di_out_fn fn, void *user) {
    process(p, true, fn, user);
}

/* ---- whole output ---- */

typedef struct collect {
    di_parsed_output *out;
    di_sbuf reasoning, content, name, args; /* name/args: the call in progress */
    bool in_call;
} collect;

/* Stores the call in progress (also when the output was cut before the call closed, as
 * deepseek-recipe reports what arrived). */
static void flush_call(collect *c) {
    if (!c->in_call) return;
    c->in_call = false;
    if (!c->name.len && !c->args.len) return; /* cut right after `invoke name="`: nothing to report */
    di_parsed_output *o = c->out;
    o->calls = di_xrealloc(o->calls, (o->n_calls + 1) * sizeof *o->calls);
    o->calls[o->n_calls++] = (di_tool_call){di_xstrdup(""), di_xstrdup(c->name.s ? c->name.s : ""),
                                            di_xstrdup(c->args.s ? c->args.s : "")};
}

static void collect_fn(void *user, di_out_kind kind, const char *text, size_t len) {
    collect *c = user;
    switch (kind) {
    case DI_OUT_REASONING: di_sbuf_put(&c->reasoning, text, len); break;
    case DI_OUT_CONTENT: di_sbuf_put(&c->content, text, len); break;
    case DI_OUT_TOOL_BEGIN:
        flush_call(c);
        c->in_call = true;
        c->name.len = c->args.len = 0;
        di_sbuf_put(&c->name, "", 0);
        di_sbuf_put(&c->args, "", 0);
        break;
    case DI_OUT_TOOL_NAME: di_sbuf_put(&c->name, text, len); break;
    case DI_OUT_TOOL_ARGS: di_sbuf_put(&c->args, text, len); break;
    case DI_OUT_TOOL_END: flush_call(c); break;
    }
}

void di_output_parse(const char *text, size_t len, bool thinking, bool in_calls, di_parsed_output *out) {
    memset(out, 0, sizeof *out);
    collect c = {out, {0}, {0}, {0}, {0}, false};
    di_sbuf_put(&c.reasoning, "", 0);
    di_sbuf_put(&c.content, "", 0);
    di_out_parser p;
    di_out_parser_init(&p, thinking, in_calls);
    di_out_parser_feed(&p, text, len, collect_fn, &c);
    di_out_parser_finish(&p, collect_fn, &c);
    flush_call(&c);
    di_out_parser_free(&p);
    out->reasoning = c.reasoning.s;
    out->reasoning_len = c.reasoning.len;
    out->content = c.content.s;
    out->content_len = c.content.len;
    di_sbuf_free(&c.name);
    di_sbuf_free(&c.args);
}

void di_parsed_output_free(di_parsed_output *o) {
    free(o->reasoning);
    free(o->content);
    for (size_t k = 0; k < o->n_calls; k++) {
        free(o->calls[k].id);
        free(o->calls[k].name);
        free(o->calls[k].arguments);
    }
    free(o->calls);
    memset(o, 0, sizeof *o);
}
