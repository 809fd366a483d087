/* Tokenizer tests: the HF golden file (every text encodes to the golden ids and decodes back),
 * load time, id/token lookups, the lossy UTF-8 rule, the streaming detokenizer, and the errors for
 * malformed tokenizer.json, invalid UTF-8 and out-of-range ids. Data: tests/data/tokenizer/ (the V3
 * tokenizer and golden file, copied from ../shared/tokenizer) and assets/tokenizer/ (V4.1). */
#include <cjson/cJSON.h>
#include <time.h>

#include "test_harness.h"

/* CHECK for loops of many items: only failures are counted and printed (once). */
#define CHECK_QUIET(cond)                                                                 \
    do {                                                                                  \
        static bool reported_;                                                            \
        if (!(cond) && !reported_) {                                                      \
            reported_ = true;                                                             \
            CHECK(cond);                                                                  \
        }                                                                                 \
    } while (0)
#include "tokenizer/tokenizer.h"

#define V3_PATH "tests/data/tokenizer/deepseek_v3_tokenizer.json"
#define GOLDEN_PATH "tests/data/tokenizer/golden_v3_hf_tokenizers_0.23.2.jsonl"
#define SHARED_GOLDEN_PATH "../shared/tokenizer/golden_v3_hf_tokenizers_0.23.2.jsonl"
#define V41_PATH "assets/tokenizer/tokenizer.json"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static char *read_all(const char *path, size_t *len) {
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

static void test_golden(di_tokenizer *t, const char *path) {
    size_t len;
    char *all = read_all(path, &len);
    CHECKF(all != NULL, "cannot read %s", path);
    if (!all) return;
    int lines = 0, enc_ok = 0, dec_ok = 0;
    for (char *line = strtok(all, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *text = cJSON_GetObjectItem(j, "text"), *ids = cJSON_GetObjectItem(j, "ids");
        lines++;
        di_token_vec v = {0};
        di_err err = {0};
        di_status st = di_tokenizer_encode(t, text->valuestring, strlen(text->valuestring), true, &v, &err);
        bool same = !st && (size_t)cJSON_GetArraySize(ids) == v.n;
        for (size_t i = 0; same && i < v.n; i++) same = cJSON_GetArrayItem(ids, (int)i)->valueint == v.ids[i];
        if (same) enc_ok++;
        else {
            fprintf(stderr, "golden line %d: encode mismatch (%s; %zu ids vs %d)\n", lines, err.msg, v.n,
                    cJSON_GetArraySize(ids));
            for (size_t i = 0; i < v.n && i < (size_t)cJSON_GetArraySize(ids); i++)
                if (cJSON_GetArrayItem(ids, (int)i)->valueint != v.ids[i]) {
                    fprintf(stderr, "  first difference at %zu: %d vs golden %d\n", i, v.ids[i],
                            cJSON_GetArrayItem(ids, (int)i)->valueint);
                    break;
                }
        }
        int32_t *gold = malloc(sizeof(int32_t) * (size_t)cJSON_GetArraySize(ids) + 4);
        for (int i = 0; i < cJSON_GetArraySize(ids); i++) gold[i] = cJSON_GetArrayItem(ids, i)->valueint;
        char *out;
        size_t out_len;
        st = di_tokenizer_decode(t, gold, (size_t)cJSON_GetArraySize(ids), false, &out, &out_len, &err);
        if (!st && out_len == strlen(text->valuestring) && !memcmp(out, text->valuestring, out_len)) dec_ok++;
        else fprintf(stderr, "golden line %d: decode mismatch\n", lines);
        free(out);
        free(gold);
        di_token_vec_free(&v);
        cJSON_Delete(j);
    }
    printf("golden %s: %d lines, %d encode exactly, %d decode back\n", path, lines, enc_ok, dec_ok);
    CHECK(lines >= 100);
    CHECK(enc_ok == lines);
    CHECK(dec_ok == lines);
    free(all);
}

static void test_lookups(di_tokenizer *t) {
    CHECK(di_tokenizer_vocab_size(t) == 128815);
    CHECK(di_tokenizer_token_id(t, "<｜User｜>", strlen("<｜User｜>")) == 128803);
    CHECK(di_tokenizer_token_id(t, "Ġthe", strlen("Ġthe")) >= 0);
    CHECK(di_tokenizer_token_id(t, "no such token", 13) == -1);
    size_t n;
    const char *s = di_tokenizer_id_to_token(t, 128803, &n);
    CHECK(s && n == strlen("<｜User｜>") && !memcmp(s, "<｜User｜>", n));
    CHECK(di_tokenizer_id_to_token(t, -1, &n) == NULL);
    CHECK(di_tokenizer_id_to_token(t, 1 << 20, &n) == NULL);
    CHECK(di_tokenizer_is_special(t, 0) && di_tokenizer_is_added(t, 0));
    CHECK(!di_tokenizer_is_special(t, 128803) && di_tokenizer_is_added(t, 128803));
    CHECK(!di_tokenizer_is_added(t, 100));
    /* unused ids between the base vocab and the added tokens: V3 has none below 128815 */
    char *one;
    size_t one_len;
    CHECK(di_tokenizer_decode_id(t, 128803, &one, &one_len, NULL) == DI_OK && !strcmp(one, "<｜User｜>"));
    free(one);
    CHECK(di_tokenizer_decode_id(t, -5, &one, &one_len, NULL) == DI_ERANGE);
    int32_t id = di_tokenizer_token_id(t, "Ġhello", strlen("Ġhello"));
    const uint8_t *b = di_tokenizer_id_bytes(t, id, &n);
    CHECK(b && n == 6 && !memcmp(b, " hello", 6));
}

static bool decode_eq(di_tokenizer *t, const int32_t *ids, size_t n, bool skip, const char *want) {
    char *out;
    size_t len;
    di_err err = {0};
    if (di_tokenizer_decode(t, ids, n, skip, &out, &len, &err)) return false;
    bool ok = len == strlen(want) && !memcmp(out, want, len);
    if (!ok) fprintf(stderr, "decoded \"%s\", want \"%s\"\n", out, want);
    free(out);
    return ok;
}

/* Byte-level tokens for single bytes, to build arbitrary byte strings. */
static int32_t byte_tok(di_tokenizer *t, uint8_t b) {
    char s[4] = {(char)b, 0};
    di_token_vec v = {0};
    /* encode of a one-byte ASCII char is its byte token; non-ASCII bytes need the alphabet */
    if (b < 0x80) {
        di_tokenizer_encode(t, s, 1, false, &v, NULL);
        int32_t id = v.n == 1 ? v.ids[0] : -1;
        di_token_vec_free(&v);
        return id;
    }
    int cp = (b >= 0xA1 && b <= 0xAC) || b >= 0xAE ? b : -1;
    if (cp < 0) { /* 0x80..0xA0, 0xAD map to U+0100 + n after the 0..0x20, 0x7F run */
        int n = 0;
        for (int x = 0; x < 256; x++) {
            bool pr = (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE;
            if (pr) continue;
            if (x == b) cp = 256 + n;
            n++;
        }
    }
    char u[3] = {(char)(0xC0 | (cp >> 6)), (char)(0x80 | (cp & 0x3F)), 0};
    return di_tokenizer_token_id(t, u, 2);
}

static void test_decode_rules(di_tokenizer *t) {
    int32_t e2 = byte_tok(t, 0xE2), x82 = byte_tok(t, 0x82), xac = byte_tok(t, 0xAC), a = byte_tok(t, 'a');
    int32_t ff = byte_tok(t, 0xFF), c0 = byte_tok(t, 0xC0);
    CHECK(e2 >= 0 && x82 >= 0 && xac >= 0 && a >= 0 && ff >= 0 && c0 >= 0);
    int32_t euro[] = {e2, x82, xac};
    CHECK(decode_eq(t, euro, 3, false, "€"));
    int32_t cut[] = {e2, x82};
    CHECK(decode_eq(t, cut, 2, false, "\xEF\xBF\xBD"));                     /* incomplete at end: one */
    int32_t cut_a[] = {e2, x82, a};
    CHECK(decode_eq(t, cut_a, 3, false, "\xEF\xBF\xBD" "a"));               /* maximal subpart: one */
    int32_t bad[] = {ff, c0, a};
    CHECK(decode_eq(t, bad, 3, false, "\xEF\xBF\xBD\xEF\xBF\xBD" "a"));     /* each bad lead: one each */
    int32_t sp[] = {0, a, 1};
    CHECK(decode_eq(t, sp, 3, false, "<｜begin▁of▁sentence｜>a<｜end▁of▁sentence｜>"));
    CHECK(decode_eq(t, sp, 3, true, "a"));
    int32_t oob[] = {a, 999999};
    char *out;
    size_t len;
    di_err err = {0};
    CHECK(di_tokenizer_decode(t, oob, 2, false, &out, &len, &err) == DI_ERANGE);
    CHECKF(strstr(err.msg, "999999") != NULL, "%s", err.msg);
}

/* Streams ids one by one and checks that the pieces are whole UTF-8 and add up to decode(). */
static bool stream_matches(di_tokenizer *t, const int32_t *ids, size_t n) {
    di_detok d;
    di_detok_init(&d, t, false);
    char *acc = calloc(1, 1);
    size_t acc_len = 0;
    bool pieces_valid = true;
    for (size_t i = 0; i <= n; i++) {
        const char *s;
        size_t len;
        if (i < n) di_detok_push(&d, ids[i], &s, &len, NULL);
        else di_detok_finish(&d, &s, &len);
        if (!di_utf8_valid(s, len, NULL)) pieces_valid = false;
        acc = realloc(acc, acc_len + len + 1);
        memcpy(acc + acc_len, s, len);
        acc_len += len;
    }
    char *whole;
    size_t whole_len;
    di_tokenizer_decode(t, ids, n, false, &whole, &whole_len, NULL);
    bool ok = pieces_valid && whole_len == acc_len && !memcmp(whole, acc, acc_len);
    free(whole);
    free(acc);
    di_detok_free(&d);
    return ok;
}

static void test_streaming(di_tokenizer *t) {
    const char *text = "Hello 世界! Ünïcödé ☃ 🎉🎉 emoji 👨‍👩‍👧 and a 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 line\n";
    di_token_vec v = {0};
    CHECK(di_tokenizer_encode(t, text, strlen(text), false, &v, NULL) == DI_OK);
    CHECK(stream_matches(t, v.ids, v.n));
    /* random byte tokens, including invalid sequences */
    uint32_t seed = 12345;
    int32_t ids[200];
    for (int round = 0; round < 200; round++) {
        size_t n = 1 + round % 37;
        for (size_t i = 0; i < n; i++) {
            seed = seed * 1103515245u + 12345u;
            uint8_t b = (uint8_t)(seed >> 16);
            ids[i] = (seed >> 8) % 5 == 0 ? v.ids[(seed >> 4) % v.n] : byte_tok(t, b);
        }
        if (!stream_matches(t, ids, n)) {
            CHECKF(false, "stream mismatch in round %d", round);
            break;
        }
    }
    di_token_vec_free(&v);
}

static void test_encode_errors(di_tokenizer *t) {
    di_token_vec v = {0};
    di_err err = {0};
    CHECK(di_tokenizer_encode(t, "ab\xC3(", 4, false, &v, &err) == DI_EINVAL);
    CHECKF(strstr(err.msg, "offset 2") != NULL, "%s", err.msg);
    CHECK(v.n == 0);
    CHECK(di_tokenizer_encode(t, "\xED\xA0\x80", 3, false, &v, &err) == DI_EINVAL); /* surrogate */
    CHECK(di_tokenizer_encode(t, "", 0, true, &v, &err) == DI_OK && v.n == 0);
    /* added tokens are text when allow_special is false */
    CHECK(di_tokenizer_encode(t, "<｜User｜>", strlen("<｜User｜>"), false, &v, &err) == DI_OK);
    CHECK(v.n > 1);
    for (size_t i = 0; i < v.n; i++) CHECK(v.ids[i] != 128803);
    di_token_vec_free(&v);
    /* NEL is White_Space in Oniguruma: it splits from the following letter (HF: a, Â, ħ, b) */
    CHECK(di_tokenizer_encode(t, "a\xC2\x85" "b", 4, false, &v, &err) == DI_OK);
    CHECKF(v.n == 4 && v.ids[0] == 67 && v.ids[1] == 129 && v.ids[2] == 230 && v.ids[3] == 68,
           "NEL split gave %zu ids", v.n);
    di_token_vec_free(&v);
    /* U+13F6A (Unicode 16) is a letter to HF's Oniguruma, so the space joins it: [86387, 244, 124, 106] */
    CHECK(di_tokenizer_encode(t, " \xF0\x93\xBD\xAA", 5, false, &v, &err) == DI_OK);
    CHECKF(v.n == 4 && v.ids[0] == 86387 && v.ids[3] == 106, "U+13F6A gave %zu ids, first %d", v.n,
           v.n ? v.ids[0] : -1);
    di_token_vec_free(&v);
}

static void expect_load_error(const char *json, di_status want, const char *needle) {
    di_tokenizer *t = NULL;
    di_err err = {0};
    di_status st = di_tokenizer_load_json(json, strlen(json), "bad.json", &t, &err);
    CHECKF(st == want && t == NULL, "status %d want %d: %s", st, want, err.msg);
    CHECKF(strstr(err.msg, needle) != NULL, "message \"%s\" lacks \"%s\"", err.msg, needle);
    di_tokenizer_free(t);
}

#define PRE "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}," \
            "\"decoder\":{\"type\":\"ByteLevel\"},"

static void test_load_errors(void) {
    di_tokenizer *t = NULL;
    di_err err = {0};
    CHECK(di_tokenizer_load("/nonexistent/tokenizer.json", &t, &err) == DI_EIO && !t);
    CHECK(strstr(err.msg, "/nonexistent/tokenizer.json") != NULL);
    expect_load_error("{\"model\": {", DI_EFORMAT, "not valid JSON");
    expect_load_error("[1,2]", DI_EFORMAT, "not a JSON object");
    expect_load_error("{" PRE "\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", DI_EUNSUPPORTED, "model.type");
    expect_load_error("{" PRE "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":\"x\"},\"merges\":[]}}", DI_EFORMAT,
                      "model.vocab[\"a\"]");
    expect_load_error("{" PRE "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a c\"]}}",
                      DI_EFORMAT, "model.merges[0]");
    expect_load_error("{" PRE "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]}}",
                      DI_EFORMAT, "merged token");
    expect_load_error("{" PRE "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":0},\"merges\":[]}}",
                      DI_EFORMAT, "used twice");
    expect_load_error("{\"decoder\":{\"type\":\"ByteLevel\"},\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":"
                      "{\"Regex\":\"(a\"},\"behavior\":\"Isolated\"},\"model\":{\"vocab\":{\"a\":0},\"merges\":[]}}",
                      DI_EFORMAT, "PCRE2");
    expect_load_error("{\"decoder\":{\"type\":\"ByteLevel\"},\"normalizer\":{\"type\":\"NFC\"},"
                      "\"model\":{\"vocab\":{\"a\":0},\"merges\":[]}}", DI_EUNSUPPORTED, "normalizer");
    expect_load_error("{" PRE "\"added_tokens\":[{\"id\":5}],\"model\":{\"vocab\":{\"a\":0},\"merges\":[]}}",
                      DI_EFORMAT, "added_tokens[0].content");
}

/* The shipped V4.1 file: id layout, the flags that changed from V4, and plain text unchanged. */
static void test_v41(void) {
    di_tokenizer *t = NULL;
    di_err err = {0};
    double t0 = now_ms();
    di_status st = di_tokenizer_load(V41_PATH, &t, &err);
    CHECKF(st == DI_OK, "%s", err.msg);
    if (st) return;
    printf("loaded %s in %.1f ms\n", V41_PATH, now_ms() - t0);
    CHECK(di_tokenizer_vocab_size(t) == 129280);
    static const struct { const char *s; int32_t id; bool special; } k[] = {
        {"<｜begin▁of▁sentence｜>", 0, true}, {"<｜end▁of▁sentence｜>", 1, true}, {"<｜▁pad▁｜>", 2, true},
        {"<｜System｜>", 128799, false}, {"<｜User｜>", 128803, false}, {"<｜Assistant｜>", 128804, false},
        {"<think>", 128821, false}, {"</think>", 128822, false}, {"｜DSML｜", 128825, false},
        {"<｜latest_reminder｜>", 128828, false}, {"<｜deepseek_image｜>", 129264, false},
        {"<|place_holder_mm_span_0442|>", 129279, true},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        CHECKF(di_tokenizer_token_id(t, k[i].s, strlen(k[i].s)) == k[i].id, "%s", k[i].s);
        CHECKF(di_tokenizer_is_special(t, k[i].id) == k[i].special, "%s special flag", k[i].s);
    }
    for (int32_t id = 0; id < 129280; id++) CHECK_QUIET(di_tokenizer_id_to_token(t, id, NULL) != NULL);
    const char *text = "<｜System｜>sys<｜User｜>hi<｜Assistant｜><think>";
    di_token_vec v = {0};
    CHECK(di_tokenizer_encode(t, text, strlen(text), true, &v, &err) == DI_OK);
    CHECK(v.n == 6 && v.ids[0] == 128799 && v.ids[2] == 128803 && v.ids[5] == 128821);
    char *out;
    size_t len;
    CHECK(di_tokenizer_decode(t, v.ids, v.n, true, &out, &len, &err) == DI_OK);
    CHECK(!strcmp(out, text)); /* <｜System｜> is not special in V4.1: skip_special keeps it */
    free(out);
    di_token_vec_free(&v);
    di_tokenizer_free(t);
}

int main(void) {
    di_tokenizer *t = NULL;
    di_err err = {0};
    double t0 = now_ms();
    di_status st = di_tokenizer_load(V3_PATH, &t, &err);
    double ms = now_ms() - t0;
    CHECKF(st == DI_OK, "%s", err.msg);
    if (st) return TEST_SUMMARY();
    printf("loaded %s in %.1f ms (%d ids)\n", V3_PATH, ms, di_tokenizer_vocab_size(t));
    test_golden(t, GOLDEN_PATH);
    FILE *shared = fopen(SHARED_GOLDEN_PATH, "rb"); /* the original, when ../shared is beside the repo */
    if (shared) {
        fclose(shared);
        test_golden(t, SHARED_GOLDEN_PATH);
    } else {
        printf("note: %s is absent; the golden test used the copy in tests/data only\n", SHARED_GOLDEN_PATH);
    }
    test_lookups(t);
    test_decode_rules(t);
    test_streaming(t);
    test_encode_errors(t);
    test_load_errors();
    di_tokenizer_free(t);
    test_v41();
    return TEST_SUMMARY();
}
