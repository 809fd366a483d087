/* Engram compressed token map: the normaliser chain on hand-picked strings (expected values printed
 * by HF `tokenizers` 0.23.3 with the reference's normalizer Sequence), the builder's key rules, and
 * the map of the tiny fixture's tokenizer_stub.json (773 ids, pad id 2, equal to its stored
 * `engram_token_map`). */
#include "model/engram_consts.h"
#include "test_harness.h"

#include <cjson/cJSON.h>

static void check_norm(const char *in, size_t in_len, const char *want, size_t want_len) {
    char *out = NULL;
    size_t n = 0;
    di_err err = {0};
    di_status st = di_engram_normalize(in, in_len, &out, &n, &err);
    CHECKF(st == DI_OK && n == want_len && memcmp(out, want, n) == 0,
           "normalize(\"%s\") = \"%s\", want \"%s\" (%s)", in, out ? out : "", want, err.msg);
    free(out);
}

#define NORM(in, want) check_norm(in, sizeof(in) - 1, want, sizeof(want) - 1)

static void test_normalize(void) {
    NORM("  Hello\t World ", "hello world");
    NORM(" ", " ");                    /* a lone space survives (via U+E000) */
    NORM("\t\n", " ");
    NORM("\r\n ab \r", "ab");
    NORM("\xc4\xb0", "i");             /* U+0130: NFD splits off the dot, marks are dropped */
    NORM("\xce\xa3\xce\x91\xce\xa3", "\xcf\x83\xce\xb1\xcf\x83"); /* no final sigma: ΣΑΣ -> σασ */
    NORM("Caf\xc3\xa9", "cafe");
    NORM("\xef\xac\x81", "fi");        /* U+FB01 ligature, NFKC */
    NORM("\xc2\xa0x\xe3\x80\x80", "x"); /* NBSP and U+3000 become spaces, then stripped */
    NORM("", "");
    NORM("a\xe0\xa4\x83" "b", "ab");   /* U+0903 is Mc: StripAccents drops all marks */
    NORM("x\xe2\x80\xa8", "x");        /* U+2028 is White_Space */
    NORM("\xe1\xba\x9e", "\xc3\x9f");  /* U+1E9E -> U+00DF */
    NORM("\xc7\x85", "dz");            /* titlecase U+01C5 */
    NORM("\xe2\x85\xab", "xii");       /* U+216B */
    NORM("\xee\x80\x80", " ");         /* U+E000 itself ends as a space */
    NORM(" \xee\x80\x80 ", " ");
    NORM("x\x1c", "x\x1c");            /* U+001C is not White_Space */
    NORM("\x00", "\x00");              /* NUL is kept, length-aware */
    /* HF's normalisation and mark tables are Unicode 9.0, its lowercase is newer than ICU 72's */
    NORM("a\xe1\xb3\xb2", "a");          /* U+1CF2 was Mc in 9.0 (Lo now): stripped */
    NORM("a\xf0\x91\x87\x89", "a\xf0\x91\x87\x89"); /* U+111C9 Mn only since 11.0: kept */
    NORM("a\xdf\xbd", "a\xdf\xbd");      /* U+07FD, a mark new in 11.0: kept */
    NORM("e\xcc\x81\xdf\xbd", "e\xdf\xbd");
    NORM("\xe3\x8b\xbf", "\xe3\x8b\xbf"); /* U+32FF (12.1) has no NFKC mapping there */
    NORM("\xe1\xb2\x89", "\xe1\xb2\x8a"); /* U+1C89 -> U+1C8A (Unicode 16 lowercase) */
    NORM("\xea\x9f\x9c", "\xc6\x9b");     /* U+A7DC -> U+019B */
    char *out = NULL;
    size_t n;
    di_err err = {0};
    CHECK(di_engram_normalize("\xff", 1, &out, &n, &err) == DI_EINVAL);
    CHECK(strstr(err.msg, "UTF-8") != NULL);
    CHECK(di_engram_normalize(NULL, 0, &out, &n, &err) == DI_OK && n == 0);
    free(out);
    char *big = calloc(DI_ENGRAM_NORMALIZE_MAX_BYTES + 1, 1);
    CHECK(di_engram_normalize(big, DI_ENGRAM_NORMALIZE_MAX_BYTES + 1, &out, &n, &err) == DI_EINVAL);
    CHECK(di_engram_normalize(big, 1000, &out, &n, &err) == DI_OK && n == 1000);
    free(out);
    free(big);
}

/* Raw keys for U+FFFD texts, one dictionary for both key kinds, empty normalisation keeps text. */
static void test_builder_rules(void) {
    const char *dec[] = {"A", "a", "\xef\xbf\xbd", "b", "\xef\xbf\xbd", " \n", "\xcc\x81", "\x00"};
    const char *raw[] = {"A", "a", "b", "x", "y", "z", "q", "r"};
    size_t dl[8], rl[8];
    for (int i = 0; i < 8; i++) {
        dl[i] = i == 7 ? 1 : strlen(dec[i]);
        rl[i] = strlen(raw[i]);
    }
    di_engram_token_map m;
    di_err err = {0};
    CHECK(di_engram_token_map_build(dec, dl, raw, rl, 8, &m, &err) == DI_OK);
    /* 0:"a" 1:"a" 2:raw "b" 3:"b" 4:raw "y" 5:" " 6:U+0301 (normalises to "") 7:"\0" */
    static const int32_t want[8] = {0, 0, 1, 1, 2, 3, 4, 5};
    for (int i = 0; i < 8; i++) CHECKF(m.map[i] == want[i], "token %d -> %d", i, m.map[i]);
    CHECK(m.n_compressed == 6);
    CHECK(di_engram_token_map_get(&m, 3) == 1);
    CHECK(di_engram_token_map_get(&m, -1) == DI_ENGRAM_DEAD);
    CHECK(di_engram_token_map_get(&m, 8) == DI_ENGRAM_DEAD);
    di_engram_token_map_free(&m);
    CHECK(di_engram_token_map_build(dec, dl, raw, rl, 0, &m, &err) == DI_EINVAL);
    const char *bad[] = {"\xc3"};
    size_t bl[] = {1};
    CHECK(di_engram_token_map_build(bad, bl, bad, bl, 1, &m, &err) == DI_EINVAL);
    CHECK(strstr(err.msg, "token 0") != NULL);
}

static void test_stub(void) {
    const char *path = DI_TINY_FIXTURE_DIR "/tokenizer_stub.json";
    di_engram_token_map m;
    di_err err = {0};
    CHECKF(di_engram_token_map_from_stub(path, &m, &err) == DI_OK, "%s", err.msg);
    CHECK(m.vocab_size == 2048);
    CHECK(m.n_compressed == 773);
    CHECK(di_engram_token_map_get(&m, 2) == 2); /* pad id */

    FILE *f = fopen(path, "rb");
    char *text = malloc(1 << 20);
    size_t n = f ? fread(text, 1, (1 << 20) - 1, f) : 0;
    if (f) fclose(f);
    text[n] = 0;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *want = cJSON_GetObjectItemCaseSensitive(root, "engram_token_map");
    CHECK(cJSON_GetArraySize(want) == 2048);
    int diff = 0, i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, want) diff += i < m.vocab_size && m.map[i++] != (int32_t)it->valuedouble;
    CHECKF(diff == 0, "%d ids differ from the stub's engram_token_map", diff);
    CHECK((int)cJSON_GetObjectItemCaseSensitive(root, "engram_compressed_vocab_size")->valuedouble ==
          m.n_compressed);
    CHECK((int)cJSON_GetObjectItemCaseSensitive(root, "engram_pad_compressed_id")->valuedouble ==
          di_engram_token_map_get(&m, 2));
    cJSON_Delete(root);
    di_engram_token_map_free(&m);

    CHECK(di_engram_token_map_from_stub("tests/data/no-such-stub.json", &m, &err) == DI_EIO);
    CHECK(strstr(err.msg, "no-such-stub.json") != NULL);
    CHECK(di_engram_token_map_from_stub(DI_TINY_FIXTURE_DIR "/config.json", &m, &err) ==
          DI_EFORMAT);
    CHECK(strstr(err.msg, "decode") != NULL);
}

int main(void) {
    test_normalize();
    test_builder_rules();
    test_stub();
    return TEST_SUMMARY();
}
