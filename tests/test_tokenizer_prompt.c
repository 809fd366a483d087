/* Prompt encoding tests: the spec §6.2 cases by hand, the cases of tests/data/tokenizer/
 * prompt_cases.json (ids and text from DeepSeek's deepseek-recipe encoder, see
 * tools/tokenizer/gen_prompt_cases.py), request errors, the Python-style JSON writer, DSML rendering,
 * and the model-output parser whole and streamed. */
#include "test_harness.h"
#include "tokenizer/json_lite.h"
#include "tokenizer/prompt.h"

#define V41_PATH "assets/tokenizer/tokenizer.json"
#define V3_PATH "tests/data/tokenizer/deepseek_v3_tokenizer.json"
#define CASES_PATH "tests/data/tokenizer/prompt_cases.json"
#define OUTPUT_CASES_PATH "tests/data/tokenizer/output_cases.json"

static bool ids_eq(const di_token_vec *v, const int32_t *want, size_t n) {
    if (v->n != n) return false;
    for (size_t i = 0; i < n; i++)
        if (v->ids[i] != want[i]) return false;
    return true;
}

static di_status render(di_tokenizer *t, const char *req, di_token_vec *v, char **text, di_err *err) {
    di_conversation c;
    v->n = 0;
    di_status st = di_conversation_parse(req, strlen(req), &c, err);
    if (st) return st;
    st = di_prompt_render(t, &c, v, text, err);
    di_conversation_free(&c);
    return st;
}

static void test_spec_cases(di_tokenizer *t) {
    di_token_vec v = {0};
    di_err err = {0};
    char *text = NULL;
    /* §6.2: non-thinking, empty user: BOS <｜User｜> <｜Assistant｜> </think> */
    CHECK(!render(t, "{\"messages\":[{\"role\":\"user\",\"content\":\"\"}],\"thinking\":{\"type\":\"disabled\"}}", &v,
                  &text, &err));
    static const int32_t empty[] = {0, 128803, 128804, 128822};
    CHECK(ids_eq(&v, empty, 4));
    CHECK(text && !strcmp(text, "<｜begin▁of▁sentence｜><｜User｜><｜Assistant｜></think>"));
    free(text);
    /* a typed control token is 5 plain tokens (the official API counts 9 prompt tokens) */
    CHECK(!render(t, "{\"messages\":[{\"role\":\"user\",\"content\":\"<｜User｜>\"}],\"thinking\":false}", &v, NULL, &err));
    static const int32_t literal[] = {0, 128803, 30, 28217, 6756, 28217, 32, 128804, 128822};
    CHECK(ids_eq(&v, literal, 9));
    /* thinking (default effort 75): BOS <｜System｜> effort-line <｜User｜> Hello <｜Assistant｜> <think> */
    CHECK(!render(t, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}", &v, &text, &err));
    CHECK(v.n == 31 && v.ids[0] == 0 && v.ids[1] == 128799 && v.ids[27] == 128803 && v.ids[28] == 19923 &&
          v.ids[29] == 128804 && v.ids[30] == 128821);
    CHECK(text && strstr(text, "<｜System｜>Reasoning Effort: 75 (range 1-100, the higher the value, the more "
                               "thorough the reasoning)\n\n<｜User｜>Hello<｜Assistant｜><think>"));
    free(text);
    di_token_vec_free(&v);
}

/* Every case of the recipe-generated file: same ids and same text. */
static void test_recipe_cases(di_tokenizer *t) {
    FILE *f = fopen(CASES_PATH, "rb");
    CHECKF(f != NULL, "cannot open %s", CASES_PATH);
    if (!f) return;
    char *buf = malloc(1 << 20);
    size_t len = fread(buf, 1, (1 << 20) - 1, f);
    fclose(f);
    di_json root;
    di_err err = {0};
    CHECKF(!di_json_parse(buf, len, &root, &err), "%s", err.msg);
    const di_json *cases = di_json_get(&root, "cases");
    int ok = 0, n = 0;
    for (size_t i = 0; cases && i < cases->n; i++, n++) {
        const di_json *c = &cases->items[i], *ids = di_json_get(c, "ids"), *prompt = di_json_get(c, "prompt");
        di_sbuf req = {0};
        di_json_write_py(di_json_get(c, "request"), &req); /* keeps 14.0 a float, unlike cJSON */
        di_token_vec v = {0};
        char *text = NULL;
        di_status st = render(t, req.s, &v, &text, &err);
        bool same = !st && v.n == ids->n && text && strlen(text) == prompt->len && !memcmp(text, prompt->str, prompt->len);
        for (size_t k = 0; same && k < v.n; k++) same = v.ids[k] == atoi(ids->items[k].str);
        if (same) ok++;
        else fprintf(stderr, "prompt case %s differs (%s)\n", c->key, st ? err.msg : "ids or text");
        free(text);
        di_token_vec_free(&v);
        di_sbuf_free(&req);
    }
    printf("prompt cases from deepseek-recipe: %d of %d identical\n", ok, n);
    CHECK(n >= 10 && ok == n);
    di_json_free(&root);
    free(buf);
}

static void expect_request_error(di_tokenizer *t, const char *req, const char *needle) {
    di_token_vec v = {0};
    di_err err = {0};
    di_status st = render(t, req, &v, NULL, &err);
    CHECKF(st != DI_OK && strstr(err.msg, needle), "request %s: status %d, message \"%s\"", req, st, err.msg);
    di_token_vec_free(&v);
}

static void test_request_errors(di_tokenizer *t, di_tokenizer *v3) {
    expect_request_error(t, "{\"messages\":[]}", "messages is empty");
    expect_request_error(t, "{\"messages\":[{\"role\":\"developer\",\"content\":\"x\"}]}", "messages[0].role");
    expect_request_error(t, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
                         "messages[0].content[0] is not a text part");
    expect_request_error(t, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":\"extreme\"}",
                         "reasoning_effort");
    expect_request_error(t, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}", "JSON");
    expect_request_error(t, "{\"messages\":[{\"role\":\"user\",\"content\":\"\\ud800\"}]}", "surrogate");
    /* a NULL error buffer still reports failure */
    di_token_vec v = {0};
    CHECK(di_prompt_render_request(t, "{", 1, &v, NULL) != DI_OK && v.n == 0);
    CHECK(di_prompt_render_request(t, "{\"messages\":[]}", 15, &v, NULL) != DI_OK && v.n == 0);
    di_token_vec_free(&v);
    /* a tokenizer without V4.1's <｜System｜>: a clear error, not a wrong prompt */
    expect_request_error(v3, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "no token \"<｜System｜>\"");
}

static void check_py(const char *json, const char *want) {
    di_json v;
    di_sbuf out = {0};
    di_err err = {0};
    CHECKF(!di_json_parse(json, strlen(json), &v, &err), "%s", err.msg);
    di_json_write_py(&v, &out);
    CHECKF(out.s && !strcmp(out.s, want), "%s -> %s, want %s", json, out.s, want);
    di_sbuf_free(&out);
    di_json_free(&v);
}

static void test_json_py(void) {
    check_py("{\"a\":1,\"b\":[1.0,2.5,1e-7,0.00001,0.0001,1e16,1e15,-0.0,1E2]}",
             "{\"a\": 1, \"b\": [1.0, 2.5, 1e-07, 1e-05, 0.0001, 1e+16, 1000000000000000.0, -0.0, 100.0]}");
    check_py("[12345678901234567890, 99999999999999999999999, -5, 5e-324, 1.7976931348623157e308]",
             "[12345678901234567890, 1e+23, -5, 5e-324, 1.7976931348623157e+308]");
    check_py("{\"s\":\"é\\\"\\\\\\n\\u0001/\\u00e9\",\"dup\":1,\"x\":null,\"dup\":2}",
             "{\"s\": \"é\\\"\\\\\\n\\u0001/é\", \"dup\": 2, \"x\": null}");
}

typedef struct events {
    di_sbuf all; /* "K:text|" per event, adjacent same-kind texts merged */
    int last_kind;
} events;

static void record(void *user, di_out_kind kind, const char *text, size_t len) {
    events *e = user;
    static const char kinds[] = "RCBNAE";
    if ((int)kind != e->last_kind || kind == DI_OUT_TOOL_BEGIN || kind == DI_OUT_TOOL_END) {
        di_sbuf_put(&e->all, "|", 1);
        di_sbuf_put(&e->all, &kinds[kind], 1);
        di_sbuf_put(&e->all, ":", 1);
    }
    di_sbuf_put(&e->all, text, len);
    e->last_kind = (int)kind;
}

/* Parses text whole and in chunks of every size 1..7; all event streams must agree. */
static char *parse_events(const char *text, bool thinking, bool in_calls, size_t chunk) {
    events e = {{0}, -1};
    di_sbuf_put(&e.all, "", 0);
    di_out_parser p;
    di_out_parser_init(&p, thinking, in_calls);
    size_t len = strlen(text);
    for (size_t i = 0; i < len; i += chunk) di_out_parser_feed(&p, text + i, i + chunk <= len ? chunk : len - i, record, &e);
    di_out_parser_finish(&p, record, &e);
    di_out_parser_free(&p);
    return e.all.s;
}

static void check_output(const char *text, bool thinking, bool in_calls, const char *want) {
    char *whole = parse_events(text, thinking, in_calls, strlen(text) + 1);
    CHECKF(!strcmp(whole, want), "parsed %s\n   want %s", whole, want);
    for (size_t chunk = 1; chunk <= 7; chunk++) {
        char *part = parse_events(text, thinking, in_calls, chunk);
        CHECKF(!strcmp(part, whole), "chunk %zu: %s", chunk, part);
        free(part);
    }
    free(whole);
}

static void test_output_parser(void) {
    check_output("\nI think.\n</think>\n\nThe answer.", true, false, "|R:I think.|C:The answer.");
    check_output("Plain answer </think> x\n\n", false, false, "|C:Plain answer  x\n\n");
    const char *calls =
        "Let me check.\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"w\">\n<｜DSML｜ parameter name=\"city\" "
        "string=\"true\">Pa\"ris\n</｜DSML｜ parameter>\n<｜DSML｜ parameter name=\"days\" string=\"false\">2"
        "</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n<｜DSML｜ invoke name=\"noop\">\n\n</｜DSML｜ invoke>\n</｜DSML｜ calls>"
        "ignored";
    check_output(calls, false, false,
                 "|C:Let me check.|B:|N:w|A:{\"city\": \"Pa\\\"ris\\n\", \"days\": 2}|E:|B:|N:noop|A:{}|E:");
    /* V4 spelling, and a prompt that ended inside the calls block (tool_choice required) */
    check_output("<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"q\" string=\"true\">x</｜DSML｜parameter>\n"
                 "</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
                 false, true, "|B:|N:f|A:{\"q\": \"x\"}|E:");
    check_output("thinking...\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n</｜DSML｜ invoke>\n</｜DSML｜ calls>", true,
                 false, "|R:thinking...|B:|N:f|A:{}|E:");
    /* the whole-output helper, and DSML rendering round-tripping through the parser */
    di_tool_call in[2] = {{"1", "get", "{\"city\": \"Paris\", \"n\": 1.0, \"l\": [1, {\"a\": null}]}"},
                          {"2", "raw", "not json"}};
    char *dsml = di_dsml_render_calls(in, 2);
    CHECK(!strcmp(dsml, "<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"get\">\n<｜DSML｜ parameter name=\"city\" string=\"true\">"
                        "Paris</｜DSML｜ parameter>\n<｜DSML｜ parameter name=\"n\" string=\"false\">1.0</｜DSML｜ parameter>\n"
                        "<｜DSML｜ parameter name=\"l\" string=\"false\">[1, {\"a\": null}]</｜DSML｜ parameter>\n</｜DSML｜ "
                        "invoke>\n<｜DSML｜ invoke name=\"raw\">\n<｜DSML｜ parameter name=\"arguments\" string=\"true\">not "
                        "json</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n</｜DSML｜ calls>"));
    di_sbuf text = {0};
    di_sbuf_puts(&text, "<think>r</think>Sure.\n\n");
    di_sbuf_puts(&text, dsml);
    di_parsed_output out;
    di_output_parse(text.s + 7, text.len - 7, true, false, &out);
    CHECK(!strcmp(out.reasoning, "r") && !strcmp(out.content, "Sure."));
    CHECK(out.n_calls == 2 && !strcmp(out.calls[0].name, "get") && !strcmp(out.calls[1].name, "raw"));
    CHECK(out.n_calls == 2 && !strcmp(out.calls[0].arguments, "{\"city\": \"Paris\", \"n\": 1.0, \"l\": [1, {\"a\": null}]}"));
    CHECK(out.n_calls == 2 && !strcmp(out.calls[1].arguments, "{\"arguments\": \"not json\"}"));
    di_parsed_output_free(&out);
    di_sbuf_free(&text);
    free(dsml);
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *b = malloc((size_t)n + 1);
    *len = fread(b, 1, (size_t)n, f);
    b[*len] = 0;
    fclose(f);
    return b;
}

static bool str_eq(const char *s, size_t n, const di_json *v) { return v && v->len == n && !memcmp(s, v->str, n); }

/* Model outputs with what deepseek-recipe's own parser extracts (tools/tokenizer/gen_output_cases.py). */
static void test_output_cases(void) {
    size_t len;
    char *buf = read_file(OUTPUT_CASES_PATH, &len);
    CHECKF(buf != NULL, "cannot open %s", OUTPUT_CASES_PATH);
    if (!buf) return;
    di_json root;
    di_err err = {0};
    CHECKF(!di_json_parse(buf, len, &root, &err), "%s", err.msg);
    const di_json *cases = di_json_get(&root, "cases");
    int ok = 0, n = 0;
    for (size_t i = 0; cases && i < cases->n; i++, n++) {
        const di_json *c = &cases->items[i], *text = di_json_get(c, "text"), *exp = di_json_get(c, "expect");
        const di_json *calls = di_json_get(exp, "calls");
        di_parsed_output out;
        di_output_parse(text->str, text->len, di_json_get(c, "thinking")->type == DI_JSON_TRUE,
                        di_json_get(c, "required")->type == DI_JSON_TRUE, &out);
        bool same = str_eq(out.reasoning, out.reasoning_len, di_json_get(exp, "reasoning")) &&
                    str_eq(out.content, out.content_len, di_json_get(exp, "content")) && out.n_calls == calls->n;
        for (size_t k = 0; same && k < out.n_calls; k++)
            same = str_eq(out.calls[k].name, strlen(out.calls[k].name), &calls->items[k].items[0]) &&
                   str_eq(out.calls[k].arguments, strlen(out.calls[k].arguments), &calls->items[k].items[1]);
        if (same) ok++;
        else if (n - ok <= 3) fprintf(stderr, "output case %zu differs: content [%s] calls %zu\n", i, out.content, out.n_calls);
        di_parsed_output_free(&out);
    }
    printf("output cases from deepseek-recipe: %d of %d parsed identically\n", ok, n);
    CHECK(n >= 100 && ok == n);
    di_json_free(&root);
    free(buf);
}

int main(void) {
    di_tokenizer *t = NULL, *v3 = NULL;
    di_err err = {0};
    CHECKF(!di_tokenizer_load(V41_PATH, &t, &err), "%s", err.msg);
    CHECKF(!di_tokenizer_load(V3_PATH, &v3, &err), "%s", err.msg);
    if (!t || !v3) return TEST_SUMMARY();
    test_spec_cases(t);
    test_recipe_cases(t);
    test_request_errors(t, v3);
    test_json_py();
    test_output_parser();
    test_output_cases();
    di_tokenizer_free(t);
    di_tokenizer_free(v3);
    return TEST_SUMMARY();
}
