/* libFuzzer target for the tokenizer, the prompt encoder and the output parser. The first input
 * byte picks a mode; the rest is the payload. Besides "no crash, no sanitizer report" it checks the
 * invariants the code promises:
 *   0/1  encode (allow_special off/on): valid UTF-8 encodes and decodes back to the same bytes;
 *        invalid UTF-8 is DI_EINVAL.
 *   2    ids (payload as little-endian 24-bit ids): decode succeeds iff every id is assigned, gives
 *        valid UTF-8, and the streaming detokenizer concatenates to the same text.
 *   3    chat request JSON: render either fails with a message or gives ids starting with BOS.
 *   4    model output: the parser gives the same events whole and fed in 3-byte pieces.
 *   5    tokenizer.json text: load fails cleanly or succeeds.
 * Built and run by run.sh (clang -fsanitize=fuzzer,address,undefined). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/json_lite.h"
#include "tokenizer/prompt.h"
#include "tokenizer/tokenizer.h"

static di_tokenizer *g_tok;

#define REQUIRE(c)                                                            \
    do {                                                                      \
        if (!(c)) {                                                           \
            fprintf(stderr, "invariant failed: %s (line %d)\n", #c, __LINE__); \
            abort();                                                          \
        }                                                                     \
    } while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    di_err err = {0};
    if (di_tokenizer_load("assets/tokenizer/tokenizer.json", &g_tok, &err)) {
        fprintf(stderr, "fuzz: %s (run from the repository root)\n", err.msg);
        exit(1);
    }
    return 0;
}

static void fuzz_encode(const char *s, size_t n, bool special) {
    di_token_vec v = {0};
    di_err err = {0};
    bool valid = di_utf8_valid(s, n, NULL);
    di_status st = di_tokenizer_encode(g_tok, s, n, special, &v, &err);
    REQUIRE(valid ? st == DI_OK : st == DI_EINVAL);
    if (!st) {
        char *text;
        size_t len;
        REQUIRE(di_tokenizer_decode(g_tok, v.ids, v.n, false, &text, &len, &err) == DI_OK);
        REQUIRE(len == n && !memcmp(text, s, n));
        free(text);
    }
    di_token_vec_free(&v);
}

static void fuzz_ids(const uint8_t *d, size_t n) {
    size_t k = n / 3;
    int32_t *ids = malloc((k + 1) * sizeof *ids);
    bool all_ok = true;
    for (size_t i = 0; i < k; i++) {
        ids[i] = (int32_t)(d[3 * i] | d[3 * i + 1] << 8 | (d[3 * i + 2] & 0x03) << 16) - 1000;
        all_ok = all_ok && di_tokenizer_id_to_token(g_tok, ids[i], NULL) != NULL;
    }
    char *text = NULL;
    size_t len = 0;
    di_err err = {0};
    di_status st = di_tokenizer_decode(g_tok, ids, k, false, &text, &len, &err);
    REQUIRE(all_ok ? st == DI_OK : st == DI_ERANGE);
    if (!st) {
        REQUIRE(di_utf8_valid(text, len, NULL));
        di_detok dt;
        di_detok_init(&dt, g_tok, false);
        char *acc = malloc(len + 16);
        size_t acc_len = 0;
        for (size_t i = 0; i <= k; i++) {
            const char *piece;
            size_t pl;
            if (i < k) REQUIRE(di_detok_push(&dt, ids[i], &piece, &pl, &err) == DI_OK);
            else di_detok_finish(&dt, &piece, &pl);
            REQUIRE(acc_len + pl <= len && di_utf8_valid(piece, pl, NULL));
            memcpy(acc + acc_len, piece, pl);
            acc_len += pl;
        }
        REQUIRE(acc_len == len && !memcmp(acc, text, len));
        free(acc);
        di_detok_free(&dt);
    }
    free(text);
    free(ids);
}

static void fuzz_render(const char *s, size_t n) {
    di_token_vec v = {0};
    di_err err = {0};
    di_status st = di_prompt_render_request(g_tok, s, n, &v, &err);
    REQUIRE(st ? err.msg[0] != 0 : (v.n > 0 && v.ids[0] == 0));
    di_token_vec_free(&v);
}

/* Event log: for each event a kind byte, then its text; a new record starts whenever the kind
 * changes or the event carries no text (tool begin/end), so different cuts give the same log. */
typedef struct evlog {
    di_sbuf b;
    int last;
} evlog;

static void record(void *user, di_out_kind kind, const char *text, size_t len) {
    evlog *e = user;
    if ((int)kind != e->last || !len) {
        char k[2] = {(char)0xFF, (char)kind}; /* 0xFF never occurs in the parser's UTF-8 output... */
        di_sbuf_put(&e->b, k, 2);             /* ...except as input bytes copied through; see below */
    }
    di_sbuf_put(&e->b, text, len);
    e->last = len ? (int)kind : -1;
}

static void fuzz_output(const char *s, size_t n, bool thinking) {
    if (memchr(s, 0xFF, n)) return; /* keeps the log's separator unambiguous */
    evlog whole = {{0}, -1}, cut = {{0}, -1};
    di_out_parser p;
    di_out_parser_init(&p, thinking, false);
    di_out_parser_feed(&p, s, n, record, &whole);
    di_out_parser_finish(&p, record, &whole);
    di_out_parser_free(&p);
    di_out_parser_init(&p, thinking, false);
    for (size_t i = 0; i < n; i += 3) di_out_parser_feed(&p, s + i, n - i < 3 ? n - i : 3, record, &cut);
    di_out_parser_finish(&p, record, &cut);
    di_out_parser_free(&p);
    REQUIRE(whole.b.len == cut.b.len && (!whole.b.len || !memcmp(whole.b.s, cut.b.s, whole.b.len)));
    di_sbuf_free(&whole.b);
    di_sbuf_free(&cut.b);
}

static void fuzz_load(const char *s, size_t n) {
    di_tokenizer *t = NULL;
    di_err err = {0};
    di_status st = di_tokenizer_load_json(s, n, "fuzz.json", &t, &err);
    REQUIRE(st ? (t == NULL && err.msg[0]) : t != NULL);
    if (t) {
        di_token_vec v = {0};
        di_tokenizer_encode(t, "hello world 123", 15, true, &v, &err);
        di_token_vec_free(&v);
    }
    di_tokenizer_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    switch (data[0] % 7) {
    case 0: fuzz_encode(s, n, false); break;
    case 1: fuzz_encode(s, n, true); break;
    case 2: fuzz_ids(data + 1, n); break;
    case 3: fuzz_render(s, n); break;
    case 4: fuzz_output(s, n, false); break;
    case 5: fuzz_output(s, n, true); break;
    case 6: fuzz_load(s, n); break;
    }
    return 0;
}
