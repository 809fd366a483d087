/* Structured output through the engine with the demo model (random weights, the real 129,280-token
 * vocabulary): 200 generations per kind (regex, JSON schema, EBNF) at temperature 1, all batched
 * together. Every output that finished with "stop" must be complete under its constraint; one cut
 * by max_tokens must say "length" and be a valid prefix. The outputs are written as JSON lines and,
 * when python3 with `jsonschema` is available, checked by tools/constrain/validate_outputs.py with
 * a real validator (Python `jsonschema`, `re.fullmatch`). Also: an invalid constraint fails that
 * request alone, and constrained requests give the same tokens (and logprobs) whether the engine
 * samples them where the logits are (on a device: mask, bias and penalties applied there) or on the
 * host (host_sampling). `test_constrain_engine paths` runs that check alone (the emulated GPU of
 * tools/cuda/emu/run_emu_model.sh). */
#include <unistd.h>

#include "constrain/constrain.h"
#include "engine/engine_internal.h"
#include "fixture_util.h"
#include "model/demo_model.h"
#include "test_harness.h"

#if defined(__SANITIZE_ADDRESS__)
#define N_PER_KIND 20 /* the sanitizer build is ~10x slower; the release build runs all 200 */
#else
#define N_PER_KIND 200
#endif

static const char *k_schema =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":6},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",\"c\"]},\"maxItems\":3},"
    "\"ok\":{\"type\":\"boolean\"},\"kind\":{\"enum\":[\"x\",\"y\",null]}},"
    "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}";
static const char *k_regex = "(yes|no|maybe): [0-9]{1,3}( [a-z]{1,6}){0,3}\\.";
static const char *k_ebnf = "root ::= expr \".\"\n"
                            "expr ::= term ((\"+\" | \"-\") term){0,3}\n"
                            "term ::= [0-9]{1,3} | \"(\" expr \")\"\n";

static void json_string(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

/* Constrained requests (each kind, greedy and sampled, some with a bias and penalties) run three
 * ways: as they are; with 3 logprobs on an engine that samples every row on the host
 * (host_sampling); with 3 logprobs where the logits are. The tokens must be the same, and the two
 * runs' logprobs bit for bit. On a device the first and third apply the masks there
 * (DI_WANT_EDITED, the third computing the logprobs there too); on the CPU every run samples on the
 * host. */
static void test_sampling_paths(const char *model_dir) {
    enum { N = 12, GEN = 24, TOP = 3 };
    di_engine_options o = {.model_dir = model_dir, .backend = test_backend()};
    di_engine *e = NULL, *eh = NULL;
    char msg[512];
    CHECKF(di_engine_create(&o, &e, msg, sizeof msg) == DI_OK, "%s", msg);
    o.host_sampling = true;
    CHECKF(di_engine_create(&o, &eh, msg, sizeof msg) == DI_OK, "%s", msg);
    if (!e || !eh) return;
    static const di_logit_bias bias[3] = {{16, 1.5f}, {90, -2.0f}, {16, 0.5f}}; /* one id twice */
    static int32_t tokens[3][N][GEN];
    static float lp[3][N][GEN];
    static di_token_logprob top[3][N][GEN * TOP];
    int n_tok[3][N];
    for (int pass = 0; pass < 3; pass++) {
        di_engine *en = pass == 1 ? eh : e;
        uint64_t ids[N];
        for (int i = 0; i < N; i++) {
            di_request q = {.prompt = "Answer:", .max_tokens = GEN, .has_seed = true};
            di_sampling_params_init(&q.sampling);
            q.sampling.temperature = i % 4 == 3 ? 0.0f : 1.0f;
            q.sampling.seed = (uint64_t)(500 + i);
            if (i % 3 == 0) q.regex = k_regex;
            if (i % 3 == 1) q.json_schema = k_schema;
            if (i % 3 == 2) q.grammar_ebnf = k_ebnf;
            if (i % 2) {
                q.sampling.logit_bias = bias, q.sampling.n_logit_bias = 3;
                q.sampling.repetition_penalty = 1.2f, q.sampling.presence_penalty = 0.5f;
            }
            q.sampling.logprobs = pass ? TOP : 0;
            CHECKF(di_engine_add_request(en, &q, &ids[i], msg, sizeof msg) == DI_OK, "%s", msg);
        }
        CHECKF(di_engine_run(en, msg, sizeof msg) == DI_OK, "%s", msg);
        for (int i = 0; i < N; i++) {
            di_result res;
            CHECK(di_engine_result(en, ids[i], &res) == DI_OK);
            CHECKF(res.finish == DI_FINISH_STOP || res.finish == DI_FINISH_LENGTH, "request %d: %s (%s)", i,
                   di_finish_reason_name(res.finish), res.error ? res.error : "");
            n_tok[pass][i] = (int)res.n_tokens;
            memcpy(tokens[pass][i], res.token_ids, sizeof(int32_t) * (size_t)res.n_tokens);
            if (pass && res.logprobs && res.n_top == TOP) {
                memcpy(lp[pass][i], res.logprobs, sizeof(float) * (size_t)res.n_tokens);
                memcpy(top[pass][i], res.top_logprobs, sizeof(di_token_logprob) * (size_t)res.n_tokens * TOP);
            } else if (pass) {
                CHECKF(0, "request %d: no logprobs", i);
            }
            di_engine_release(en, ids[i]);
        }
    }
    int same_host = 0, same_lp = 0, same_values = 0;
    for (int i = 0; i < N; i++) {
        const size_t n = (size_t)n_tok[0][i];
        same_host += n_tok[1][i] == n_tok[0][i] && !memcmp(tokens[1][i], tokens[0][i], sizeof(int32_t) * n);
        same_lp += n_tok[2][i] == n_tok[0][i] && !memcmp(tokens[2][i], tokens[0][i], sizeof(int32_t) * n);
        same_values += n_tok[2][i] == n_tok[1][i] && !memcmp(lp[2][i], lp[1][i], sizeof(float) * n) &&
                       !memcmp(top[2][i], top[1][i], sizeof(di_token_logprob) * n * TOP);
    }
    printf("backend %s: constrained requests sampled where the logits are vs on the host: %d of %d identical; "
           "with logprobs where the logits are %d, their values %d\n", di_model_backend_name(e->model), same_host, N,
           same_lp, same_values);
    CHECK(same_host == N && same_lp == N && same_values == N);
    di_engine_free(e);
    di_engine_free(eh);
}

int main(int argc, char **argv) {
    char dir[] = "/tmp/deepinfer-constrain-engine-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char model_dir[4096], out_path[4200];
    snprintf(model_dir, sizeof model_dir, "%s/demo", dir);
    snprintf(out_path, sizeof out_path, "%s/outputs.jsonl", dir);
    di_err err = {0};
    if (di_demo_model_write(model_dir, &err)) {
        fprintf(stderr, "demo model: %s\n", err.msg);
        return 1;
    }
    test_sampling_paths(model_dir);
    char cmd[16384];
    if (argc > 1 && !strcmp(argv[1], "paths")) {
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd)) {}
        return TEST_SUMMARY();
    }
    di_engine_options o = {.model_dir = model_dir, .backend = test_backend()};
    di_engine *e = NULL;
    char msg[512];
    CHECKF(di_engine_create(&o, &e, msg, sizeof msg) == DI_OK, "%s", msg);
    if (!e) return TEST_SUMMARY();
    printf("backend %s: %d generations a kind\n", di_model_backend_name(e->model), N_PER_KIND);

    /* an invalid constraint fails its own request only */
    di_request bad = {.prompt = "x", .max_tokens = 4, .regex = "(a"};
    di_sampling_params_init(&bad.sampling);
    CHECK(di_engine_add_request(e, &bad, NULL, msg, sizeof msg) != DI_OK && strstr(msg, "regex"));
    bad.regex = NULL;
    bad.json_schema = "{\"type\":\"object\",\"not\":{\"required\":[\"a\"]}}";
    CHECK(di_engine_add_request(e, &bad, NULL, msg, sizeof msg) == DI_EUNSUPPORTED && strstr(msg, "unsupported: not"));

    const char *kinds[3] = {"regex", "json_schema", "ebnf"};
    uint64_t ids[3][N_PER_KIND];
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < N_PER_KIND; i++) {
            di_request q = {.prompt = "Answer:", .max_tokens = 48, .has_seed = true};
            di_sampling_params_init(&q.sampling);
            q.sampling.temperature = 1.0f;
            q.sampling.seed = (uint64_t)(1000 * k + i + 1);
            if (k == 0) q.regex = k_regex;
            if (k == 1) q.json_schema = k_schema;
            if (k == 2) q.grammar_ebnf = k_ebnf;
            CHECKF(di_engine_add_request(e, &q, &ids[k][i], msg, sizeof msg) == DI_OK, "%s", msg);
        }
    /* a generation cut by max_tokens says so */
    di_request cut = {.prompt = "Answer:", .max_tokens = 3, .has_seed = true, .json_schema = k_schema};
    di_sampling_params_init(&cut.sampling);
    uint64_t cut_id = 0;
    CHECKF(di_engine_add_request(e, &cut, &cut_id, msg, sizeof msg) == DI_OK, "%s", msg);
    CHECKF(di_engine_run(e, msg, sizeof msg) == DI_OK, "%s", msg);
    di_result cres;
    CHECK(di_engine_result(e, cut_id, &cres) == DI_OK && cres.finish == DI_FINISH_LENGTH && cres.n_tokens == 3);

    /* check with our own matcher (byte level, as a second path) and write the outputs */
    FILE *f = fopen(out_path, "w");
    const char *srcs[3] = {k_regex, k_schema, k_ebnf};
    di_constrain_kind ck[3] = {DI_CONSTRAIN_REGEX, DI_CONSTRAIN_JSON_SCHEMA, DI_CONSTRAIN_EBNF};
    int n_stop[3] = {0}, n_length[3] = {0};
    for (int k = 0; k < 3; k++) {
        di_constrain_opts co;
        di_constrain_opts_init(&co);
        co.json_ws_flexible = false;
        di_grammar *g = NULL;
        CHECK(di_constrain_compile(ck[k], srcs[k], strlen(srcs[k]), &co, &g, &err) == DI_OK);
        const uint8_t *one[2] = {(const uint8_t *)"x", NULL};
        size_t lens[2] = {1, 0};
        di_token_trie *v = di_token_trie_from_bytes(one, lens, 2, 1);
        for (int i = 0; i < N_PER_KIND; i++) {
            di_result res;
            CHECK(di_engine_result(e, ids[k][i], &res) == DI_OK);
            CHECKF(res.finish == DI_FINISH_STOP || res.finish == DI_FINISH_LENGTH, "%s %d: finish %s (%s)", kinds[k], i,
                   di_finish_reason_name(res.finish), res.error ? res.error : "");
            di_matcher *m = di_matcher_new(g, v);
            bool prefix_ok = di_matcher_accept_bytes(m, (const uint8_t *)res.text, res.text_len);
            CHECKF(prefix_ok, "%s %d: output is not a valid prefix: %.*s", kinds[k], i, (int)res.text_len, res.text);
            if (res.finish == DI_FINISH_STOP) {
                n_stop[k]++;
                CHECKF(prefix_ok && di_matcher_can_end(m), "%s %d: finished 'stop' but incomplete: %.*s", kinds[k], i,
                       (int)res.text_len, res.text);
            } else {
                n_length[k]++;
                CHECK(res.n_tokens == 48);
            }
            di_matcher_free(m);
            fprintf(f, "{\"kind\":\"%s\",\"finish\":\"%s\",\"text\":", kinds[k], di_finish_reason_name(res.finish));
            json_string(f, res.text, res.text_len);
            fputs("}\n", f);
        }
        di_token_trie_free(v);
        di_grammar_free(g);
        printf("%s: %d stop, %d length\n", kinds[k], n_stop[k], n_length[k]);
        CHECKF(n_stop[k] >= N_PER_KIND / 2, "%s: only %d of %d generations completed", kinds[k], n_stop[k], N_PER_KIND);
    }
    fclose(f);
    di_engine_free(e);

    /* a real validator, when there is one */
    snprintf(cmd, sizeof cmd, "python3 -c 'import jsonschema' 2>/dev/null");
    if (system(cmd) == 0) {
        FILE *sf = NULL;
        char schema_path[4300], regex_path[4300];
        snprintf(schema_path, sizeof schema_path, "%s/schema.json", dir);
        snprintf(regex_path, sizeof regex_path, "%s/regex.txt", dir);
        if ((sf = fopen(schema_path, "w"))) fputs(k_schema, sf), fclose(sf);
        if ((sf = fopen(regex_path, "w"))) fputs(k_regex, sf), fclose(sf);
        snprintf(cmd, sizeof cmd, "python3 tools/constrain/validate_outputs.py --outputs %s --schema %s --regex %s",
                 out_path, schema_path, regex_path);
        CHECKF(system(cmd) == 0, "%s failed", cmd);
    } else {
        printf("note: python3 jsonschema not available; external validation skipped\n");
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd)) {}
    return TEST_SUMMARY();
}
