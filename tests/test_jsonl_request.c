/* Unit tests of the request-line parser of `deepinfer generate` (src/cli/cmd_generate_request.c):
 * every field and its effect on the di_request, defaults from the command line, wrong types,
 * unknown and duplicate fields, ranges, prompt forms, chat keys -> chat_json, logprobs forms, the
 * id kept for error results, and the result-line writer's JSON string escaping. */
#include <cjson/cJSON.h>

#include "cli/cmd_generate_request.h"
#include "cli/cmd_generate_result.h"
#include "test_harness.h"

static di_request g_defaults;

/* Parses `line`; returns the status and leaves the message in g_err. */
static di_err g_err;
static di_status parse(const char *line, di_gen_request *r) {
    memset(&g_err, 0, sizeof g_err);
    return di_gen_request_parse(line, strlen(line), &g_defaults, r, &g_err);
}

/* The line must be refused with a message containing `needle`. */
static void expect_error(const char *line, const char *needle) {
    di_gen_request r;
    di_status st = parse(line, &r);
    CHECKF(st == DI_EINVAL && strstr(g_err.msg, needle), "%s -> [%s] (want [%s])", line, g_err.msg, needle);
    di_gen_request_free(&r);
}

static void test_every_field(void) {
    di_gen_request r;
    const char *line =
        "{\"id\": \"req-1\", \"prompt_ids\": [0, 17, 42], \"max_tokens\": 9, \"temperature\": 0.5, "
        "\"top_p\": 0.9, \"top_k\": 40, \"min_p\": 0.05, \"seed\": 1234, \"stop\": [\"\\n\\n\", \"END\"], "
        "\"stop_token_ids\": [1, 2], \"presence_penalty\": 0.25, \"frequency_penalty\": -0.5, "
        "\"repetition_penalty\": 1.2, \"logit_bias\": {\"100\": 2.5, \"7\": -100}, \"logprobs\": true, "
        "\"top_logprobs\": 3, \"ignore_eos\": true}";
    CHECKF(parse(line, &r) == DI_OK, "%s", g_err.msg);
    const di_request *q = &r.req;
    CHECK(cJSON_IsString(r.id) && !strcmp(r.id->valuestring, "req-1"));
    CHECK(q->prompt_ids && q->n_prompt_ids == 3 && q->prompt_ids[2] == 42 && !q->prompt && !q->chat_json);
    CHECK(q->max_tokens == 9);
    CHECK(q->sampling.temperature == 0.5f && q->sampling.top_p == 0.9f && q->sampling.top_k == 40);
    CHECK(q->sampling.min_p == 0.05f);
    CHECK(q->has_seed && q->sampling.seed == 1234);
    CHECK(q->n_stop == 2 && !strcmp(q->stop[0], "\n\n") && !strcmp(q->stop[1], "END"));
    CHECK(q->n_stop_token_ids == 2 && q->stop_token_ids[1] == 2);
    CHECK(q->sampling.presence_penalty == 0.25f && q->sampling.frequency_penalty == -0.5f);
    CHECK(q->sampling.repetition_penalty == 1.2f);
    CHECK(q->sampling.n_logit_bias == 2 && q->sampling.logit_bias[0].token_id == 100 &&
          q->sampling.logit_bias[0].bias == 2.5f && q->sampling.logit_bias[1].token_id == 7 &&
          q->sampling.logit_bias[1].bias == -100.0f);
    CHECK(r.logprobs && r.top_logprobs == 3 && q->sampling.logprobs == 3);
    CHECK(q->ignore_eos);
    di_gen_request_free(&r);
}

static void test_defaults_and_nulls(void) {
    di_gen_request r;
    CHECKF(parse("{\"prompt\": \"hi\"}", &r) == DI_OK, "%s", g_err.msg);
    CHECK(r.id == NULL && r.req.prompt && !strcmp(r.req.prompt, "hi"));
    CHECK(r.req.max_tokens == 0 && r.req.sampling.temperature == 1.0f && r.req.sampling.top_p == 1.0f);
    CHECK(!r.req.has_seed && !r.logprobs && r.req.sampling.logprobs == 0 && !r.req.ignore_eos);
    di_gen_request_free(&r);
    /* command-line defaults apply, a line's own field wins; null means "not given" */
    g_defaults.max_tokens = 33;
    g_defaults.sampling.temperature = 0;
    CHECKF(parse("{\"prompt\": \"hi\", \"temperature\": 0.7, \"top_p\": null, \"stop\": null, \"id\": null}", &r) ==
               DI_OK, "%s", g_err.msg);
    CHECK(r.req.max_tokens == 33 && r.req.sampling.temperature == 0.7f && r.req.n_stop == 0 && !r.id);
    di_gen_request_free(&r);
    CHECKF(parse("{\"prompt\": \"hi\"}", &r) == DI_OK, "%s", g_err.msg);
    CHECK(r.req.sampling.temperature == 0);
    di_gen_request_free(&r);
    di_sampling_params_init(&g_defaults.sampling);
    g_defaults.max_tokens = 0;
    /* whitespace around the object (and a CR from a CRLF file) is fine */
    CHECKF(parse("  {\"prompt_ids\": [1]} \r", &r) == DI_OK, "%s", g_err.msg);
    di_gen_request_free(&r);
}

static void test_ids(void) {
    di_gen_request r;
    CHECK(parse("{\"id\": 42, \"prompt_ids\": [0]}", &r) == DI_OK && cJSON_IsNumber(r.id) && r.id->valueint == 42);
    di_gen_request_free(&r);
    /* the id survives an error elsewhere in the line */
    CHECK(parse("{\"id\": \"x7\", \"prompt_ids\": [0], \"bogus\": 1}", &r) == DI_EINVAL && r.id &&
          !strcmp(r.id->valuestring, "x7"));
    di_gen_request_free(&r);
    CHECK(parse("{\"bogus\": 1, \"id\": 9, \"prompt_ids\": [0]}", &r) == DI_EINVAL && r.id && r.id->valueint == 9);
    di_gen_request_free(&r);
    CHECK(parse("{\"id\": \"t\", \"prompt_ids\": [0]} x", &r) == DI_EINVAL && r.id && !strcmp(r.id->valuestring, "t"));
    di_gen_request_free(&r);
    CHECK(parse("[{\"id\": \"t\"}]", &r) == DI_EINVAL && !r.id);
    di_gen_request_free(&r);
    expect_error("{\"id\": [1], \"prompt_ids\": [0]}", "\"id\" must be a string or an integer, not an array");
    expect_error("{\"id\": 1.5, \"prompt_ids\": [0]}", "\"id\" must be a string or an integer");
}

static void test_json_errors(void) {
    expect_error("{\"prompt_ids\": [0, 1", "not valid JSON");
    expect_error("{\"prompt\": \"x\",}", "not valid JSON");
    expect_error("", "not valid JSON");
    expect_error("[1, 2]", "must be a JSON object, not an array");
    expect_error("\"text\"", "must be a JSON object, not a string");
    expect_error("{\"prompt\": \"x\"} {\"prompt\": \"y\"}", "unexpected text after the JSON object at byte 16");
    expect_error("{\"prompt\": \"x\", \"prompt\": \"y\"}", "field \"prompt\" appears twice");
    expect_error("{\"prompt\": \"x\", \"max_token\": 3}", "unknown field \"max_token\"");
    expect_error("{\"prompt\": \"x\", \"n\": 2}", "unknown field \"n\"");
    expect_error("{\"prompt\": \"x\", \"Temperature\": 1}", "unknown field \"Temperature\"");
}

static void test_prompt_forms(void) {
    expect_error("{\"max_tokens\": 3}", "no prompt: give one of");
    expect_error("{\"prompt\": \"x\", \"prompt_ids\": [1]}", "give only one of");
    expect_error("{\"messages\": [], \"prompt\": \"x\"}", "give only one of");
    expect_error("{\"prompt\": \"x\", \"tools\": []}", "\"tools\" goes with \"messages\"");
    expect_error("{\"prompt_ids\": [1], \"thinking\": false}", "\"thinking\" goes with \"messages\"");
    expect_error("{\"prompt\": 5}", "\"prompt\" must be a string, not a number");
    expect_error("{\"messages\": {\"role\": \"user\"}}", "\"messages\" must be an array of messages, not an object");
    expect_error("{\"prompt_ids\": \"0 1\"}", "\"prompt_ids\" must be an array of token ids, not a string");
    expect_error("{\"prompt_ids\": [0, -1]}", "\"prompt_ids[1]\" = -1 is out of range");
    expect_error("{\"prompt_ids\": [0, 1.5]}", "\"prompt_ids[1]\" must be an integer, not 1.5");
    expect_error("{\"prompt_ids\": [0, \"1\"]}", "\"prompt_ids[1]\" must be an integer, not a string");
    expect_error("{\"prompt_ids\": [3000000000]}", "out of range");
    /* chat keys -> one JSON object for the renderer; other keys stay out of it */
    di_gen_request r;
    CHECKF(parse("{\"id\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"thinking\": "
                 "{\"type\": \"disabled\"}, \"reasoning_effort\": \"high\", \"tools\": [], \"tool_choice\": "
                 "\"auto\", \"response_format\": {\"type\": \"json_object\"}, \"max_tokens\": 4}", &r) == DI_OK,
           "%s", g_err.msg);
    CHECK(r.req.chat_json && !r.req.prompt && !r.req.prompt_ids);
    CHECK(r.req.json_object); /* JSON mode in the template and as a decoding constraint */
    cJSON *chat = cJSON_Parse(r.req.chat_json);
    CHECK(chat && cJSON_GetArraySize(chat) == 6);
    CHECK(cJSON_GetObjectItem(chat, "messages") && cJSON_GetObjectItem(chat, "thinking") &&
          cJSON_GetObjectItem(chat, "reasoning_effort") && cJSON_GetObjectItem(chat, "tools") &&
          cJSON_GetObjectItem(chat, "tool_choice") && cJSON_GetObjectItem(chat, "response_format"));
    CHECK(!cJSON_GetObjectItem(chat, "max_tokens") && !cJSON_GetObjectItem(chat, "id"));
    CHECK(!strcmp(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(chat, "messages"), 0), "content")
                      ->valuestring, "Hi"));
    cJSON_Delete(chat);
    di_gen_request_free(&r);
}

static void test_sampling_ranges(void) {
    expect_error("{\"prompt\": \"x\", \"max_tokens\": 0}", "\"max_tokens\" = 0 is out of range [1,");
    expect_error("{\"prompt\": \"x\", \"max_tokens\": -3}", "\"max_tokens\" = -3 is out of range");
    expect_error("{\"prompt\": \"x\", \"max_tokens\": 2.5}", "\"max_tokens\" must be an integer, not 2.5");
    expect_error("{\"prompt\": \"x\", \"max_tokens\": \"8\"}", "\"max_tokens\" must be an integer, not a string");
    expect_error("{\"prompt\": \"x\", \"temperature\": -0.1}", "\"temperature\" = -0.1 is out of range: must be >= 0");
    expect_error("{\"prompt\": \"x\", \"temperature\": \"hot\"}", "\"temperature\" must be a number, not a string");
    expect_error("{\"prompt\": \"x\", \"top_p\": 0}", "\"top_p\" = 0 is out of range: must be in (0, 1]");
    expect_error("{\"prompt\": \"x\", \"top_p\": 1.5}", "\"top_p\" = 1.5 is out of range");
    expect_error("{\"prompt\": \"x\", \"top_k\": -2}", "\"top_k\" = -2 is out of range [-1,");
    expect_error("{\"prompt\": \"x\", \"top_k\": 0.5}", "\"top_k\" must be an integer");
    expect_error("{\"prompt\": \"x\", \"min_p\": 1.01}", "\"min_p\" = 1.01 is out of range: must be in [0, 1]");
    expect_error("{\"prompt\": \"x\", \"seed\": -1}", "\"seed\" = -1 is out of range");
    expect_error("{\"prompt\": \"x\", \"seed\": 1e300}", "\"seed\" must be an integer");
    expect_error("{\"prompt\": \"x\", \"presence_penalty\": 2.5}", "\"presence_penalty\" = 2.5 is out of range");
    expect_error("{\"prompt\": \"x\", \"frequency_penalty\": -3}", "\"frequency_penalty\" = -3 is out of range");
    expect_error("{\"prompt\": \"x\", \"repetition_penalty\": 0}", "\"repetition_penalty\" = 0 is out of range: must be > 0");
    expect_error("{\"prompt\": \"x\", \"ignore_eos\": 1}", "\"ignore_eos\" must be a boolean, not a number");
    di_gen_request r;
    CHECK(parse("{\"prompt\": \"x\", \"top_k\": -1, \"temperature\": 0, \"top_p\": 1, \"seed\": 0}", &r) == DI_OK &&
          r.req.sampling.top_k == 0 && r.req.sampling.temperature == 0 && r.req.has_seed && r.req.sampling.seed == 0);
    di_gen_request_free(&r);
    CHECK(parse("{\"prompt\": \"x\", \"seed\": 9007199254740992}", &r) == DI_OK &&
          r.req.sampling.seed == 9007199254740992ull);
    di_gen_request_free(&r);
}

static void test_stop_and_bias(void) {
    di_gen_request r;
    CHECK(parse("{\"prompt\": \"x\", \"stop\": \"###\"}", &r) == DI_OK && r.req.n_stop == 1 &&
          !strcmp(r.req.stop[0], "###"));
    di_gen_request_free(&r);
    CHECK(parse("{\"prompt\": \"x\", \"stop\": []}", &r) == DI_OK && r.req.n_stop == 0);
    di_gen_request_free(&r);
    expect_error("{\"prompt\": \"x\", \"stop\": \"\"}", "\"stop\" must not be an empty string");
    expect_error("{\"prompt\": \"x\", \"stop\": [\"a\", \"\"]}", "\"stop[1]\" must not be empty");
    expect_error("{\"prompt\": \"x\", \"stop\": [\"a\", 3]}", "\"stop[1]\" must be a string, not a number");
    expect_error("{\"prompt\": \"x\", \"stop\": 3}", "\"stop\" must be a string or an array of strings");
    expect_error("{\"prompt\": \"x\", \"stop_token_ids\": [1, \"2\"]}", "\"stop_token_ids[1]\" must be an integer");
    expect_error("{\"prompt\": \"x\", \"stop_token_ids\": 1}", "\"stop_token_ids\" must be an array");
    expect_error("{\"prompt\": \"x\", \"logit_bias\": [1]}", "\"logit_bias\" must be an object");
    expect_error("{\"prompt\": \"x\", \"logit_bias\": {\"abc\": 1}}", "key \"abc\" is not a token id");
    expect_error("{\"prompt\": \"x\", \"logit_bias\": {\"-5\": 1}}", "key \"-5\" is not a token id");
    expect_error("{\"prompt\": \"x\", \"logit_bias\": {\"12x\": 1}}", "key \"12x\" is not a token id");
    expect_error("{\"prompt\": \"x\", \"logit_bias\": {\"99999999999\": 1}}", "is not a token id");
    expect_error("{\"prompt\": \"x\", \"logit_bias\": {\"5\": 101}}", "the bias of token 5 must be a number in [-100, 100]");
    expect_error("{\"prompt\": \"x\", \"logit_bias\": {\"5\": \"1\"}}", "the bias of token 5");
    CHECK(parse("{\"prompt\": \"x\", \"logit_bias\": {}}", &r) == DI_OK && r.req.sampling.n_logit_bias == 0);
    di_gen_request_free(&r);
}

static void test_logprobs(void) {
    di_gen_request r;
    /* chat style: a boolean, with top_logprobs alternatives (0 = only the chosen token) */
    CHECK(parse("{\"prompt\": \"x\", \"logprobs\": true}", &r) == DI_OK && r.logprobs && r.top_logprobs == 0 &&
          r.req.sampling.logprobs == 1);
    di_gen_request_free(&r);
    CHECK(parse("{\"prompt\": \"x\", \"logprobs\": false}", &r) == DI_OK && !r.logprobs && r.req.sampling.logprobs == 0);
    di_gen_request_free(&r);
    CHECK(parse("{\"prompt\": \"x\", \"top_logprobs\": 20, \"logprobs\": true}", &r) == DI_OK &&
          r.top_logprobs == 20 && r.req.sampling.logprobs == 20);
    di_gen_request_free(&r);
    /* completions style: the number of alternatives */
    CHECK(parse("{\"prompt\": \"x\", \"logprobs\": 5}", &r) == DI_OK && r.logprobs && r.top_logprobs == 5 &&
          r.req.sampling.logprobs == 5);
    di_gen_request_free(&r);
    CHECK(parse("{\"prompt\": \"x\", \"logprobs\": 0}", &r) == DI_OK && r.logprobs && r.top_logprobs == 0 &&
          r.req.sampling.logprobs == 1);
    di_gen_request_free(&r);
    expect_error("{\"prompt\": \"x\", \"logprobs\": 21}", "\"logprobs\" = 21 is out of range [0, 20]");
    expect_error("{\"prompt\": \"x\", \"logprobs\": \"yes\"}", "\"logprobs\" must be a boolean or an integer");
    expect_error("{\"prompt\": \"x\", \"top_logprobs\": 2}", "\"top_logprobs\" needs \"logprobs\": true");
    expect_error("{\"prompt\": \"x\", \"logprobs\": 3, \"top_logprobs\": 2}", "\"top_logprobs\" needs \"logprobs\": true");
    expect_error("{\"prompt\": \"x\", \"logprobs\": true, \"top_logprobs\": 21}", "\"top_logprobs\" = 21 is out of range");
}

static void test_quote(void) {
    struct {
        const char *in;
        size_t n;
        const char *want;
    } cases[] = {
        {"plain", 5, "\"plain\""},
        {"a\"b\\c", 5, "\"a\\\"b\\\\c\""},
        {"l1\nl2\t\r", 7, "\"l1\\nl2\\t\\r\""},
        {"nul\0x", 5, "\"nul\\u0000x\""},
        {"\x01\x1f\x7f", 3, "\"\\u0001\\u001f\\u007f\""},
        {"caf\xc3\xa9 \xe4\xb8\x96 \xf0\x9f\x8e\x89", 14, "\"caf\xc3\xa9 \xe4\xb8\x96 \xf0\x9f\x8e\x89\""},
        {"bad\xff!", 5, "\"bad\\ufffd!\""},
        {"cut\xe4\xb8", 5, "\"cut\\ufffd\\ufffd\""},
        {"\xc0\xaf", 2, "\"\\ufffd\\ufffd\""},          /* overlong */
        {"\xed\xa0\x80", 3, "\"\\ufffd\\ufffd\\ufffd\""}, /* surrogate */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *q = di_json_quote(cases[i].in, cases[i].n);
        CHECKF(!strcmp(q, cases[i].want), "case %zu: %s", i, q);
        cJSON *v = cJSON_Parse(q); /* always valid JSON */
        CHECK(cJSON_IsString(v));
        cJSON_Delete(v);
        free(q);
    }
}

static void test_result_lines(void) {
    di_gen_request gr;
    CHECK(parse("{\"id\": \"r\", \"prompt_ids\": [0], \"logprobs\": true, \"top_logprobs\": 1}", &gr) == DI_OK);
    const int32_t toks[2] = {5, 6};
    const float lps[2] = {-0.5f, -1.25f};
    const di_token_logprob top[4] = {{5, -0.5f}, {9, -2.0f}, {7, -0.75f}, {-1, -INFINITY}};
    di_result r = {.finish = DI_FINISH_LENGTH, .token_ids = toks, .n_tokens = 2, .text = "a\0b", .text_len = 3,
                   .prompt_tokens = 1, .logprobs = lps, .top_logprobs = top, .n_top = 2};
    char *s = di_gen_result_json(gr.id, &gr, &r);
    CHECKF(!strcmp(s, "{\"id\":\"r\",\"text\":\"a\\u0000b\",\"token_ids\":[5,6],\"finish_reason\":\"length\","
                      "\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2},\"logprobs\":{\"content\":["
                      "{\"token_id\":5,\"logprob\":-0.5,\"top_logprobs\":[{\"token_id\":5,\"logprob\":-0.5}]},"
                      "{\"token_id\":6,\"logprob\":-1.25,\"top_logprobs\":[{\"token_id\":7,\"logprob\":-0.75}]}]}}"),
           "%s", s);
    cJSON_free(s);
    r.text = NULL; /* no tokenizer: no text field */
    gr.logprobs = false;
    s = di_gen_result_json(NULL, &gr, &r);
    CHECKF(!strcmp(s, "{\"id\":null,\"token_ids\":[5,6],\"finish_reason\":\"length\",\"usage\":{\"prompt_tokens\":1,"
                      "\"completion_tokens\":2}}"), "%s", s);
    cJSON_free(s);
    s = di_gen_error_json(gr.id, "line 3: bad \"x\"", "invalid_request_error");
    CHECKF(!strcmp(s, "{\"id\":\"r\",\"error\":{\"message\":\"line 3: bad \\\"x\\\"\",\"type\":\"invalid_request_error\"}}"),
           "%s", s);
    cJSON_free(s);
    di_gen_request_free(&gr);
}

int main(void) {
    di_sampling_params_init(&g_defaults.sampling);
    test_every_field();
    test_defaults_and_nulls();
    test_ids();
    test_json_errors();
    test_prompt_forms();
    test_sampling_ranges();
    test_stop_and_bias();
    test_logprobs();
    test_quote();
    test_result_lines();
    return TEST_SUMMARY();
}
