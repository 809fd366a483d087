/* DeepSeek-V4.1 prompt rendering, following deepseek-recipe's `DeepseekV41Encoding` (PyPI
 * deepseek-recipe 0.2.0; checked against it case by case, see tests/test_prompt.c and
 * tools/tokenizer/crosscheck_prompt.py).
 *
 * The prompt is rendered as text plus the spans of it that are control tokens (prompt_internal.h):
 * the template's markers (BOS, <｜System｜>, <｜User｜>, <｜Assistant｜>, <think>, </think>, EOS, and
 * every ｜DSML｜ / <think> / </think> that the tool prompt and the DSML calls spell). Each span becomes
 * its token id; the text between spans is tokenised as plain BPE in one piece, so message text can
 * never become a control token (a typed "<｜User｜>" is 5 ordinary tokens) and text from adjacent
 * parts (e.g. the effort line and the system prompt) is tokenised together, as deepseek-recipe does.
 *
 *   BOS
 *   per message i (after normalisation: consecutive user messages joined by "\n\n", tool results
 *   reordered to the order of the calls they answer):
 *     i == 0 and (thinking or system):  <｜System｜>
 *     i == 0 and thinking:              "Reasoning Effort: E (range 1-100, ...)\n\n"   (content)
 *     system:    (i > 0: <｜System｜>) content
 *     user:      ("\n\n" after a user/tool message, else <｜User｜>) content
 *     tool:      same prefix, "<tool_result>" content "</tool_result>"
 *     latest_reminder: <｜latest_reminder｜> content
 *     assistant: <｜Assistant｜> (keep ? <think> reasoning </think> : </think>) content
 *                ["\n\n" DSML calls] (prefix ? "" : EOS)
 *   unless the last message is a prefix assistant: <｜Assistant｜> (thinking ? <think> : </think>)
 *     ["\n\n<｜DSML｜ calls>\n" when tool_choice is required]
 *
 * keep = thinking and tools in use (history keeps its reasoning in agentic conversations), or the
 * message is the prefix assistant being continued in thinking mode; a prefix assistant with no
 * content yet leaves </think> out, so generation continues the reasoning. With tools (tool_choice not
 * none) or a JSON response format, the first message is (or becomes) a system message and gets
 * "\n\n" + the tool prompt and/or the response-format block appended. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/prompt_internal.h"

#define T_BOS "<｜begin▁of▁sentence｜>"
#define T_EOS "<｜end▁of▁sentence｜>"
#define T_SYSTEM "<｜System｜>"
#define T_USER "<｜User｜>"
#define T_ASSISTANT "<｜Assistant｜>"
#define T_REMINDER "<｜latest_reminder｜>"
#define T_THINK "<think>"
#define T_THINK_END "</think>"

/* The V4.1 tool prompt (deepseek-recipe render_tool_prompt with " calls", " invoke", " parameter"),
 * split around the tool schema list. */
static const char k_tool_prompt_head[] =
    "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools "
    "by writing a \"<｜DSML｜ calls>\" block like the following:\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke "
    "name=\"$TOOL_NAME\">\n<｜DSML｜ parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE"
    "</｜DSML｜ parameter>\n...\n</｜DSML｜ invoke>\n<｜DSML｜ invoke name=\"$TOOL_NAME2\">\n...\n</｜DSML｜ "
    "invoke>\n</｜DSML｜ calls>\n\nString parameters should be specified as is and set `string=\"true\"`. For "
    "all other types (numbers, booleans, arrays, objects), pass the value in JSON format and set "
    "`string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by <think>), you MUST output your "
    "complete reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\nOtherwise, "
    "output directly after </think> with tool calls or final response.\n\n### Available Tool Schemas\n\n";
static const char k_tool_prompt_tail[] =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";
static const char k_response_format[] =
    "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n{\"type\": \"json_object\"}";

/* ---- prompt buffer ---- */

void di_pbuf_text(di_pbuf *b, const char *s, size_t n) { di_sbuf_put(&b->text, s, n); }
void di_pbuf_textz(di_pbuf *b, const char *s) { di_sbuf_put(&b->text, s, strlen(s)); }

void di_pbuf_special(di_pbuf *b, const char *token) {
    if (b->n_spans == b->cap_spans) {
        b->cap_spans = b->cap_spans ? b->cap_spans * 2 : 32;
        b->spans = di_xrealloc(b->spans, b->cap_spans * sizeof *b->spans);
    }
    b->spans[b->n_spans++] = (di_pspan){b->text.len, strlen(token)};
    di_pbuf_textz(b, token);
}

void di_pbuf_template(di_pbuf *b, const char *s, const char *const *specials) {
    while (*s) {
        const char *best = NULL, *tok = NULL;
        for (const char *const *sp = specials; *sp; sp++) {
            const char *hit = strstr(s, *sp);
            if (hit && (!best || hit < best)) best = hit, tok = *sp;
        }
        if (!best) break;
        di_pbuf_text(b, s, (size_t)(best - s));
        di_pbuf_special(b, tok);
        s = best + strlen(tok);
    }
    di_pbuf_textz(b, s);
}

void di_pbuf_free(di_pbuf *b) {
    di_sbuf_free(&b->text);
    free(b->spans);
    memset(b, 0, sizeof *b);
}

/* Spans -> their ids, text between them -> plain BPE. */
static di_status encode_pbuf(di_tokenizer *t, const di_pbuf *b, di_token_vec *out, di_err *err) {
    size_t pos = 0;
    for (size_t k = 0; k <= b->n_spans; k++) {
        size_t end = k < b->n_spans ? b->spans[k].off : b->text.len;
        if (end > pos && di_tokenizer_encode(t, b->text.s + pos, end - pos, false, out, err)) return err->status;
        if (k == b->n_spans) break;
        const char *tok = b->text.s + b->spans[k].off;
        int32_t id = di_tokenizer_token_id(t, tok, b->spans[k].len);
        if (id < 0)
            return di_errf(err, DI_EFORMAT, "the tokenizer has no token \"%.*s\" (not a DeepSeek-V4.1 tokenizer?)",
                           (int)b->spans[k].len, tok);
        di_token_vec_push(out, id);
        pos = b->spans[k].off + b->spans[k].len;
    }
    return DI_OK;
}

static bool is_user_like(const di_chat_msg *m) { return m && (m->role == DI_ROLE_USER || m->role == DI_ROLE_TOOL); }

static void render_assistant(di_pbuf *b, const di_chat_msg *m, bool keep_reasoning) {
    di_pbuf_special(b, T_ASSISTANT);
    if (keep_reasoning) {
        di_pbuf_special(b, T_THINK);
        if (m->reasoning) di_pbuf_text(b, m->reasoning, m->reasoning_len);
        /* a prefix turn with no answer yet continues its reasoning: </think> stays open */
        if (m->prefix && !m->content_len && !m->n_calls) return;
    }
    di_pbuf_special(b, T_THINK_END);
    di_pbuf_text(b, m->content, m->content_len);
    if (m->n_calls) {
        di_pbuf_textz(b, "\n\n");
        di_dsml_write_calls(b, m->calls, m->n_calls);
    }
    if (!m->prefix) di_pbuf_special(b, T_EOS);
}

static void render_message(di_pbuf *b, const di_conversation *c, const di_chat_msg *msgs, size_t i,
                           bool tools_in_use) {
    const di_chat_msg *m = &msgs[i], *prev = i ? &msgs[i - 1] : NULL;
    if (i == 0 && (c->thinking || m->role == DI_ROLE_SYSTEM)) di_pbuf_special(b, T_SYSTEM);
    if (i == 0 && c->thinking) {
        char eff[160];
        snprintf(eff, sizeof eff,
                 "Reasoning Effort: %d (range 1-100, the higher the value, the more thorough the reasoning)\n\n",
                 c->effort);
        di_pbuf_textz(b, eff);
    }
    switch (m->role) {
    case DI_ROLE_SYSTEM:
        if (i > 0) di_pbuf_special(b, T_SYSTEM);
        di_pbuf_text(b, m->content, m->content_len);
        break;
    case DI_ROLE_USER:
    case DI_ROLE_TOOL:
        if (is_user_like(prev)) di_pbuf_textz(b, "\n\n");
        else di_pbuf_special(b, T_USER);
        if (m->role == DI_ROLE_TOOL) di_pbuf_textz(b, "<tool_result>");
        di_pbuf_text(b, m->content, m->content_len);
        if (m->role == DI_ROLE_TOOL) di_pbuf_textz(b, "</tool_result>");
        break;
    case DI_ROLE_LATEST_REMINDER:
        di_pbuf_special(b, T_REMINDER);
        di_pbuf_text(b, m->content, m->content_len);
        break;
    case DI_ROLE_ASSISTANT:
        render_assistant(b, m, c->thinking && (tools_in_use || m->prefix));
        break;
    }
}

/* ---- normalisation ---- */

static void msg_copy(di_chat_msg *dst, const di_chat_msg *src) {
    *dst = *src; /* shallow: the normalised list borrows strings, except merged contents */
}

/* Consecutive user messages are joined with "\n\n" and a run of reminders keeps its first; returns the count. Merged contents are new
 * allocations recorded in `owned` (freed by the caller). */
static size_t merge_users(const di_conversation *c, di_chat_msg *out, char **owned, size_t *n_owned) {
    size_t n = 0;
    for (size_t i = 0; i < c->n_msgs; i++) {
        const di_chat_msg *m = &c->msgs[i];
        /* a reminder right after a reminder is not rendered (measured on deepseek-recipe 0.2.0) */
        if (m->role == DI_ROLE_LATEST_REMINDER && n && out[n - 1].role == DI_ROLE_LATEST_REMINDER) continue;
        if (m->role == DI_ROLE_USER && n && out[n - 1].role == DI_ROLE_USER) {
            di_chat_msg *p = &out[n - 1];
            char *joined = di_xmalloc(p->content_len + 2 + m->content_len + 1);
            memcpy(joined, p->content, p->content_len);
            memcpy(joined + p->content_len, "\n\n", 2);
            memcpy(joined + p->content_len + 2, m->content, m->content_len);
            p->content_len += 2 + m->content_len;
            joined[p->content_len] = 0;
            p->content = joined;
            owned[(*n_owned)++] = joined;
            continue;
        }
        msg_copy(&out[n++], m);
    }
    return n;
}

static size_t call_position(const di_chat_msg *assistant, const char *id) {
    if (!assistant || !id) return 0;
    for (size_t k = 0; k < assistant->n_calls; k++)
        if (!strcmp(assistant->calls[k].id, id)) return k;
    return 0;
}

/* In each run of user/tool messages after an assistant with tool calls, the tool messages are
 * stably sorted by the position of the call they answer (unknown ids count as position 0). */
static void sort_tool_results(di_chat_msg *msgs, size_t n) {
    const di_chat_msg *order = NULL;
    size_t i = 0;
    while (i < n) {
        if (msgs[i].role == DI_ROLE_ASSISTANT && msgs[i].n_calls) {
            order = &msgs[i++];
            continue;
        }
        if (!is_user_like(&msgs[i])) {
            i++;
            continue;
        }
        size_t start = i;
        while (i < n && is_user_like(&msgs[i])) i++;
        if (!order) continue;
        size_t *slots = di_xmalloc((i - start) * sizeof *slots), n_slots = 0;
        di_chat_msg *tools = di_xmalloc((i - start) * sizeof *tools);
        for (size_t k = start; k < i; k++)
            if (msgs[k].role == DI_ROLE_TOOL) tools[n_slots] = msgs[k], slots[n_slots++] = k;
        for (size_t a = 1; a < n_slots; a++) { /* stable insertion sort by call position */
            di_chat_msg m = tools[a];
            size_t pos = call_position(order, m.tool_call_id), b = a;
            for (; b > 0 && call_position(order, tools[b - 1].tool_call_id) > pos; b--) tools[b] = tools[b - 1];
            tools[b] = m;
        }
        for (size_t k = 0; k < n_slots; k++) msgs[slots[k]] = tools[k];
        free(slots);
        free(tools);
    }
}

/* The first message's system text when tools or a JSON format are in use: its own text, then
 * "\n\n" + the tool prompt, then the response-format block. */
static void write_first_system(di_pbuf *b, const di_conversation *c, const di_chat_msg *first, bool tools_in_use) {
    static const char *const specials[] = {"｜DSML｜", T_THINK, T_THINK_END, NULL};
    if (first) di_pbuf_text(b, first->content, first->content_len);
    if (tools_in_use) {
        di_pbuf_textz(b, "\n\n");
        di_pbuf_template(b, k_tool_prompt_head, specials);
        for (size_t k = 0; k < c->n_tools; k++) {
            if (k) di_pbuf_textz(b, "\n");
            di_pbuf_textz(b, c->tools[k].schema);
        }
        di_pbuf_textz(b, k_tool_prompt_tail);
    }
    if (c->json_object) di_pbuf_textz(b, k_response_format);
}

di_status di_prompt_render(di_tokenizer *t, const di_conversation *c, di_token_vec *out, char **text,
                           di_err *err) {
    di_err local = {0};
    if (!err) err = &local;
    if (text) *text = NULL;
    size_t n0 = out->n;
    di_chat_msg *msgs = di_xcalloc(c->n_msgs + 1, sizeof *msgs); /* [0] is room for a system message */
    char **owned = di_xcalloc(c->n_msgs + 1, sizeof *owned);
    size_t n_owned = 0;
    size_t n = merge_users(c, msgs + 1, owned, &n_owned);
    sort_tool_results(msgs + 1, n);
    di_chat_msg *list = msgs + 1;
    bool tools_in_use = c->tool_choice != DI_TOOL_CHOICE_NONE && c->n_tools > 0;
    bool extend_system = tools_in_use || c->json_object;
    if (extend_system && (!n || list[0].role != DI_ROLE_SYSTEM)) {
        list = msgs;
        list[0].role = DI_ROLE_SYSTEM;
        list[0].content = "";
        n++;
    }
    di_pbuf b = {0};
    di_pbuf_special(&b, T_BOS);
    for (size_t i = 0; i < n; i++) {
        if (i == 0 && extend_system) { /* the first system message, with the tool prompt appended */
            di_chat_msg head = list[0];
            head.content = "", head.content_len = 0;
            render_message(&b, c, &head, 0, tools_in_use); /* markers and effort line only */
            write_first_system(&b, c, &list[0], tools_in_use);
            continue;
        }
        render_message(&b, c, list, i, tools_in_use);
    }
    if (!(n && list[n - 1].role == DI_ROLE_ASSISTANT && list[n - 1].prefix)) {
        di_pbuf_special(&b, T_ASSISTANT);
        di_pbuf_special(&b, c->thinking ? T_THINK : T_THINK_END);
        if (c->tool_choice == DI_TOOL_CHOICE_REQUIRED && c->n_tools) {
            di_pbuf_textz(&b, "\n\n<");
            di_pbuf_special(&b, "｜DSML｜");
            di_pbuf_textz(&b, " calls>\n");
        }
    }
    for (size_t k = 0; k < n_owned; k++) free(owned[k]);
    free(owned);
    free(msgs);
    di_status st = encode_pbuf(t, &b, out, err);
    if (st) {
        out->n = n0;
        di_pbuf_free(&b);
        return di_err_prefix(err, "rendering the prompt");
    }
    if (text) {
        *text = b.text.s ? b.text.s : di_xcalloc(1, 1);
        b.text.s = NULL;
    }
    di_pbuf_free(&b);
    return DI_OK;
}

di_status di_prompt_render_request(di_tokenizer *t, const char *json, size_t len, di_token_vec *out,
                                   di_err *err) {
    di_err local = {0};
    if (!err) err = &local;
    di_conversation c;
    di_status st = di_conversation_parse(json, len, &c, err);
    if (st) return st;
    st = di_prompt_render(t, &c, out, NULL, err);
    di_conversation_free(&c);
    return st;
}
