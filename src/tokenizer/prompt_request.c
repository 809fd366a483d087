/* OpenAI-style chat-completions request -> di_conversation, with the conversions DeepSeek's
 * deepseek-recipe applies (ChatCompletionRequest.convert, checked against PyPI 0.2.0):
 *   thinking: {"type": "enabled"|"disabled"} (or a boolean); default enabled.
 *   reasoning_effort: none -> thinking off unless thinking is explicitly enabled; minimal/low -> 50;
 *     medium/high/xhigh -> 75; max -> 100 (the score in the "Reasoning Effort" line).
 *   content: a string, null, or text parts joined with "\n\n" (other part types are refused).
 *   tools: [{"type": "function", "function": {name, description = "", parameters = {}}}]
 *   tool_choice: "auto" | "none" | "required" (a named-function object counts as required).
 *   response_format: {"type": "text" | "json_object"}.
 *   system messages with empty content are dropped.
 * Conversion-time validation that the recipe does (e.g. a tool message must answer a preceding
 * call) is not repeated here: the renderer accepts any order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/json_lite.h"
#include "tokenizer/prompt.h"

static char *dup_n(const char *s, size_t n) {
    char *d = di_xmalloc(n + 1);
    if (n) memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static bool str_is(const di_json *v, const char *s) {
    return v && v->type == DI_JSON_STRING && v->len == strlen(s) && !memcmp(v->str, s, v->len);
}

/* content: string | null | [ {type: text, text: ...} ... ] joined with "\n\n" */
static di_status get_content(const di_json *m, const char *key, const char *where, char **out, size_t *len,
                             bool *present, di_err *err) {
    const di_json *c = di_json_get(m, key);
    *out = NULL;
    *len = 0;
    if (present) *present = c && c->type != DI_JSON_NULL;
    if (!c || c->type == DI_JSON_NULL) {
        *out = dup_n("", 0);
        return DI_OK;
    }
    if (c->type == DI_JSON_STRING) {
        *out = dup_n(c->str, c->len);
        *len = c->len;
        return DI_OK;
    }
    if (c->type != DI_JSON_ARRAY) return di_errf(err, DI_EINVAL, "%s.%s is not a string, null or an array of parts", where, key);
    di_sbuf b = {0};
    di_sbuf_put(&b, "", 0);
    for (size_t i = 0; i < c->n; i++) {
        const di_json *part = &c->items[i], *text = di_json_get(part, "text");
        if (!str_is(di_json_get(part, "type"), "text") || !text || text->type != DI_JSON_STRING) {
            di_sbuf_free(&b);
            return di_errf(err, DI_EUNSUPPORTED, "%s.%s[%zu] is not a text part (only text content is supported)",
                           where, key, i);
        }
        if (i) di_sbuf_puts(&b, "\n\n");
        di_sbuf_put(&b, text->str, text->len);
    }
    *out = b.s;
    *len = b.len;
    return DI_OK;
}

static di_status get_string(const di_json *obj, const char *key, const char *where, bool required, char **out,
                            di_err *err) {
    const di_json *v = di_json_get(obj, key);
    *out = NULL;
    if (!v || v->type == DI_JSON_NULL) {
        if (required) return di_errf(err, DI_EINVAL, "%s.%s is missing", where, key);
        return DI_OK;
    }
    if (v->type != DI_JSON_STRING) return di_errf(err, DI_EINVAL, "%s.%s is not a string", where, key);
    *out = dup_n(v->str, v->len);
    return DI_OK;
}

static di_status parse_tool_calls(const di_json *arr, const char *where, di_chat_msg *m, di_err *err) {
    if (!arr || arr->type == DI_JSON_NULL) return DI_OK;
    if (arr->type != DI_JSON_ARRAY) return di_errf(err, DI_EINVAL, "%s.tool_calls is not an array", where);
    m->calls = di_xcalloc(arr->n + 1, sizeof *m->calls);
    char w[96];
    for (size_t k = 0; k < arr->n; k++) {
        m->n_calls = k + 1; /* counted before filling, so an error path frees what was set */
        snprintf(w, sizeof w, "%s.tool_calls[%zu]", where, k);
        const di_json *tc = &arr->items[k], *fn = di_json_get(tc, "function");
        di_tool_call *call = &m->calls[k];
        if (!fn || fn->type != DI_JSON_OBJECT) return di_errf(err, DI_EINVAL, "%s.function is missing", w);
        if (get_string(tc, "id", w, false, &call->id, err)) return err->status;
        if (!call->id) call->id = dup_n("", 0);
        snprintf(w, sizeof w, "%s.tool_calls[%zu].function", where, k);
        if (get_string(fn, "name", w, true, &call->name, err) ||
            get_string(fn, "arguments", w, false, &call->arguments, err))
            return err->status;
        if (!call->arguments) call->arguments = dup_n("{}", 2);
    }
    return DI_OK;
}

static di_status parse_message(const di_json *j, size_t i, di_chat_msg *m, di_err *err) {
    char where[48];
    snprintf(where, sizeof where, "messages[%zu]", i);
    if (!j || j->type != DI_JSON_OBJECT) return di_errf(err, DI_EINVAL, "%s is not an object", where);
    static const char *const roles[] = {"system", "user", "assistant", "tool", "latest_reminder"};
    const di_json *role = di_json_get(j, "role");
    size_t r = 0;
    while (r < 5 && !str_is(role, roles[r])) r++;
    if (r == 5)
        return di_errf(err, DI_EINVAL, "%s.role is not one of system, user, assistant, tool, latest_reminder", where);
    m->role = (di_role)r;
    if (get_content(j, "content", where, &m->content, &m->content_len, NULL, err)) return err->status;
    if (m->role == DI_ROLE_ASSISTANT) {
        bool has;
        if (get_content(j, "reasoning_content", where, &m->reasoning, &m->reasoning_len, &has, err)) return err->status;
        if (!has) {
            free(m->reasoning);
            m->reasoning = NULL;
        }
        const di_json *prefix = di_json_get(j, "prefix");
        m->prefix = prefix && prefix->type == DI_JSON_TRUE;
        if (parse_tool_calls(di_json_get(j, "tool_calls"), where, m, err)) return err->status;
    }
    if (m->role == DI_ROLE_TOOL && get_string(j, "tool_call_id", where, false, &m->tool_call_id, err))
        return err->status;
    return DI_OK;
}

static di_status parse_tools(const di_json *tools, di_conversation *c, di_err *err) {
    if (!tools || tools->type == DI_JSON_NULL) return DI_OK;
    if (tools->type != DI_JSON_ARRAY) return di_errf(err, DI_EINVAL, "tools is not an array");
    c->tools = di_xcalloc(tools->n + 1, sizeof *c->tools);
    char where[48];
    for (size_t k = 0; k < tools->n; k++) {
        snprintf(where, sizeof where, "tools[%zu].function", k);
        const di_json *fn = di_json_get(&tools->items[k], "function");
        if (!fn || fn->type != DI_JSON_OBJECT)
            return di_errf(err, DI_EUNSUPPORTED, "tools[%zu] is not a function tool", k);
        const di_json *name = di_json_get(fn, "name"), *desc = di_json_get(fn, "description"),
                      *params = di_json_get(fn, "parameters");
        if (!name || name->type != DI_JSON_STRING) return di_errf(err, DI_EINVAL, "%s.name is missing", where);
        if (desc && desc->type != DI_JSON_STRING && desc->type != DI_JSON_NULL)
            return di_errf(err, DI_EINVAL, "%s.description is not a string", where);
        di_sbuf b = {0};
        di_sbuf_puts(&b, "{\"name\": ");
        di_json_write_string(name->str, name->len, &b);
        di_sbuf_puts(&b, ", \"description\": ");
        if (desc && desc->type == DI_JSON_STRING) di_json_write_string(desc->str, desc->len, &b);
        else di_sbuf_puts(&b, "\"\"");
        di_sbuf_puts(&b, ", \"parameters\": ");
        if (params && params->type != DI_JSON_NULL) di_json_write_py(params, &b);
        else di_sbuf_puts(&b, "{}");
        di_sbuf_puts(&b, "}");
        c->tools[k].name = dup_n(name->str, name->len);
        c->tools[k].schema = b.s;
        c->n_tools++;
    }
    return DI_OK;
}

static di_status parse_options(const di_json *root, di_conversation *c, di_err *err) {
    const di_json *thinking = di_json_get(root, "thinking"), *effort = di_json_get(root, "reasoning_effort");
    bool thinking_given = thinking && thinking->type != DI_JSON_NULL;
    c->thinking = true;
    c->effort = 75;
    if (thinking_given) {
        const di_json *type = di_json_get(thinking, "type");
        if (thinking->type == DI_JSON_TRUE || str_is(type, "enabled")) c->thinking = true;
        else if (thinking->type == DI_JSON_FALSE || str_is(type, "disabled")) c->thinking = false;
        else return di_errf(err, DI_EINVAL, "thinking is not {\"type\": \"enabled\"|\"disabled\"}");
    }
    if (effort && effort->type != DI_JSON_NULL) {
        if (str_is(effort, "none")) {
            if (!thinking_given) c->thinking = false;
        } else if (str_is(effort, "minimal") || str_is(effort, "low")) {
            c->effort = 50;
        } else if (str_is(effort, "medium") || str_is(effort, "high") || str_is(effort, "xhigh")) {
            c->effort = 75;
        } else if (str_is(effort, "max")) {
            c->effort = 100;
        } else {
            return di_errf(err, DI_EINVAL, "reasoning_effort is not one of none, minimal, low, medium, high, xhigh, max");
        }
    }
    const di_json *choice = di_json_get(root, "tool_choice");
    c->tool_choice = DI_TOOL_CHOICE_AUTO;
    if (str_is(choice, "none")) c->tool_choice = DI_TOOL_CHOICE_NONE;
    else if (str_is(choice, "required") || (choice && choice->type == DI_JSON_OBJECT)) c->tool_choice = DI_TOOL_CHOICE_REQUIRED;
    else if (choice && choice->type != DI_JSON_NULL && !str_is(choice, "auto"))
        return di_errf(err, DI_EINVAL, "tool_choice is not auto, none, required or a function");
    const di_json *rf = di_json_get(root, "response_format");
    if (rf && rf->type != DI_JSON_NULL) {
        const di_json *type = di_json_get(rf, "type");
        if (str_is(type, "json_object")) c->json_object = true;
        else if (!str_is(type, "text"))
            return di_errf(err, DI_EUNSUPPORTED, "response_format.type must be text or json_object");
    }
    return DI_OK;
}

di_status di_conversation_parse(const char *json, size_t len, di_conversation *c, di_err *err) {
    di_err local = {0};
    if (!err) err = &local;
    memset(c, 0, sizeof *c);
    di_json root;
    if (di_json_parse(json, len, &root, err)) return di_err_prefix(err, "chat request");
    di_status st = DI_OK;
    const di_json *msgs = di_json_get(&root, "messages");
    if (root.type != DI_JSON_OBJECT) st = di_errf(err, DI_EINVAL, "chat request: not a JSON object");
    else if (!msgs || msgs->type != DI_JSON_ARRAY) st = di_errf(err, DI_EINVAL, "chat request: messages is missing");
    else if (!msgs->n) st = di_errf(err, DI_EINVAL, "chat request: messages is empty");
    if (!st) {
        c->msgs = di_xcalloc(msgs->n, sizeof *c->msgs);
        for (size_t i = 0; i < msgs->n && !st; i++) {
            di_chat_msg *m = &c->msgs[c->n_msgs++];
            st = parse_message(&msgs->items[i], i, m, err);
            if (!st && m->role == DI_ROLE_SYSTEM && !m->content_len) { /* empty system messages are dropped */
                free(m->content);
                memset(m, 0, sizeof *m);
                c->n_msgs--;
            }
        }
        if (!st) st = parse_tools(di_json_get(&root, "tools"), c, err);
        if (!st) st = parse_options(&root, c, err);
        if (st) di_err_prefix(err, "chat request");
    }
    di_json_free(&root);
    if (st) di_conversation_free(c);
    return st;
}

void di_conversation_free(di_conversation *c) {
    for (size_t i = 0; i < c->n_msgs; i++) {
        di_chat_msg *m = &c->msgs[i];
        free(m->content);
        free(m->reasoning);
        free(m->tool_call_id);
        for (size_t k = 0; k < m->n_calls; k++) {
            free(m->calls[k].id);
            free(m->calls[k].name);
            free(m->calls[k].arguments);
        }
        free(m->calls);
    }
    free(c->msgs);
    for (size_t k = 0; k < c->n_tools; k++) {
        free(c->tools[k].name);
        free(c->tools[k].schema);
    }
    free(c->tools);
    memset(c, 0, sizeof *c);
}
