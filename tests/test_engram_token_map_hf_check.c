/* The C compressed-token-map builder against HF `tokenizers` on a real vocabulary.
 *
 * `test_engram_token_map_hf_check DUMP.json` reads the per-id decoded texts and raw tokens that
 * tools/engram/token_map.py --dump wrote (hex-encoded UTF-8), builds the map with
 * di_engram_token_map_build and compares it id by id with the map HF produced. Given a dump of
 * tools/engram/normalize_cases.py instead, it compares di_engram_normalize string by string with
 * HF's normaliser. Run with a dump by
 * tests/test_engram_token_map_hf.sh; without arguments (as ctest runs every test binary) it only
 * says so and passes. */
#include "model/engram_consts.h"
#include "test_harness.h"

#include <cjson/cJSON.h>

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)size + 1);
    *n = fread(buf, 1, (size_t)size, f);
    buf[*n] = 0;
    fclose(f);
    return buf;
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Decodes the hex strings of array `name` into s[i]/len[i] (malloc'ed); returns the count. */
static int unhex_array(const cJSON *root, const char *name, char **s, size_t *len, int n) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, name), *it;
    int i = 0;
    cJSON_ArrayForEach(it, arr) {
        if (i >= n || !cJSON_IsString(it)) return -1;
        size_t h = strlen(it->valuestring);
        s[i] = malloc(h / 2 + 1);
        len[i] = h / 2;
        for (size_t k = 0; k < h / 2; k++) {
            int a = hexval(it->valuestring[2 * k]), b = hexval(it->valuestring[2 * k + 1]);
            if (a < 0 || b < 0) return -1;
            s[i][k] = (char)(a << 4 | b);
        }
        i++;
    }
    return i;
}

static void print_bytes(const char *label, const char *s, size_t n) {
    fprintf(stderr, "  %s \"", label);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') fputc(c, stderr);
        else fprintf(stderr, "\\x%02x", c);
    }
    fprintf(stderr, "\"\n");
}

static void compare(const cJSON *root, char **dec, size_t *dl, char **raw, size_t *rl, int n) {
    di_engram_token_map m;
    di_err err = {0};
    CHECKF(di_engram_token_map_build((const char *const *)dec, dl, (const char *const *)raw, rl,
                                     n, &m, &err) == DI_OK, "%s", err.msg);
    if (!m.map) return;
    const cJSON *want = cJSON_GetObjectItemCaseSensitive(root, "token_map"), *it;
    int want_count = (int)cJSON_GetObjectItemCaseSensitive(root, "n_compressed")->valuedouble;
    int i = 0, diff = 0;
    cJSON_ArrayForEach(it, want) {
        if (i < n && m.map[i] != (int32_t)it->valuedouble && diff++ < 10) {
            fprintf(stderr, "token %d: C id %d, HF id %d\n", i, m.map[i], (int)it->valuedouble);
            print_bytes("decoded", dec[i], dl[i]);
            char *key = NULL;
            size_t kl = 0;
            if (di_engram_normalize(dec[i], dl[i], &key, &kl, &err) == DI_OK)
                print_bytes("C normalised", key, kl);
            free(key);
        }
        i++;
    }
    printf("%s: %d token ids, %d compressed ids (HF %d), %d ids differ\n",
           cJSON_GetObjectItemCaseSensitive(root, "tokenizer")->valuestring, n, m.n_compressed,
           want_count, diff);
    CHECK(i == n);
    CHECK(diff == 0);
    CHECK(m.n_compressed == want_count);
    di_engram_token_map_free(&m);
}

/* normalize_cases.py dumps: di_engram_normalize of each decoded string vs HF's normalised string. */
static void compare_normalized(const cJSON *root, char **dec, size_t *dl, int n) {
    char **want = calloc((size_t)n, sizeof *want);
    size_t *wl = calloc((size_t)n, sizeof *wl);
    CHECK(unhex_array(root, "normalized_hex", want, wl, n) == n);
    int diff = 0;
    for (int i = 0; i < n; i++) {
        char *out = NULL;
        size_t ol = 0;
        di_err err = {0};
        di_status st = di_engram_normalize(dec[i], dl[i], &out, &ol, &err);
        if (st || !want[i] || ol != wl[i] || memcmp(out, want[i], ol) != 0) {
            if (diff++ < 10) {
                fprintf(stderr, "case %d differs (%s)\n", i, err.msg);
                print_bytes("input", dec[i], dl[i]);
                print_bytes("C", out ? out : "", ol);
                if (want[i]) print_bytes("HF", want[i], wl[i]);
            }
        }
        free(out);
    }
    printf("normaliser: %d cases, %d differ from HF\n", n, diff);
    CHECK(diff == 0);
    for (int i = 0; i < n; i++) free(want[i]);
    free(want);
    free(wl);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        printf("no dump given; tests/test_engram_token_map_hf.sh runs this with one\n");
        return TEST_SUMMARY();
    }
    size_t n_bytes = 0;
    char *text = read_file(argv[1], &n_bytes);
    CHECKF(text != NULL, "cannot read %s", argv[1]);
    cJSON *root = text ? cJSON_ParseWithLength(text, n_bytes) : NULL;
    free(text);
    CHECKF(root != NULL, "%s: not JSON", argv[1]);
    if (!root) return TEST_SUMMARY();
    int normalize_mode = cJSON_HasObjectItem(root, "normalized_hex");
    int n = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(root, "decoded_hex"));
    char **dec = calloc((size_t)n, sizeof *dec), **raw = calloc((size_t)n, sizeof *raw);
    size_t *dl = calloc((size_t)n, sizeof *dl), *rl = calloc((size_t)n, sizeof *rl);
    int nd = unhex_array(root, "decoded_hex", dec, dl, n);
    int nr = normalize_mode ? n : unhex_array(root, "raw_hex", raw, rl, n);
    CHECKF(n > 0 && nd == n && nr == n, "dump arrays: %d decoded, %d raw, %d expected", nd, nr, n);
    if (n > 0 && nd == n && nr == n) {
        if (normalize_mode) compare_normalized(root, dec, dl, n);
        else compare(root, dec, dl, raw, rl, n);
    }
    for (int i = 0; i < n; i++) {
        free(dec[i]);
        free(raw[i]);
    }
    free(dec);
    free(raw);
    free(dl);
    free(rl);
    cJSON_Delete(root);
    return TEST_SUMMARY();
}
