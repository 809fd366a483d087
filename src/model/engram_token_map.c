/* The Engram compressed token map (model-spec §2.2 (a); API in engram_consts.h).
 *
 * Every token id is given a key: its raw byte-level string if its decoded text contains U+FFFD
 * (a partial UTF-8 byte token), else its normalised decoded text (or the text itself if that
 * normalises to nothing). Keys get compressed ids by first appearance, in token-id order, from one
 * dictionary (an open-addressing hash table over the key bytes).
 *
 * The normaliser reproduces the HF `tokenizers` sequence the reference uses, with ICU:
 *   NFKC, NFD                      unorm2, filtered to code points assigned by Unicode 9.0
 *   StripAccents                   drop code points of general category Mark (Mn, Mc, Me) as of
 *                                  Unicode 9.0; HF tests `is_combining_mark`, the whole category
 *   Lowercase                      per code point, full mapping (u_strToLower on that code point
 *                                  alone): HF lowercases char by char with Rust's
 *                                  char::to_lowercase, so multi-char mappings apply (U+0130 ->
 *                                  "i\u0307") but the context-dependent final sigma does not
 *   Replace([ \t\r\n]+ -> " ")     by hand
 *   Replace(^ $ -> U+E000)         the whole string is one space (no '\n' is left for the
 *                                  line anchors to match elsewhere)
 *   Strip                          White_Space code points, both sides (Rust char::is_whitespace)
 *   Replace(U+E000 -> " ")
 *
 * Unicode versions. HF's NFKC/NFD and mark tables come from the crate
 * unicode-normalization-alignments and behave as Unicode 9.0 data (found by comparing every code
 * point with HF), while its lowercase comes from
 * Rust's std (Unicode 16+). ICU 72 carries Unicode 15. Hence the age filter, three category
 * changes since 9.0 and a small table of lowercase mappings newer than ICU 72. With them every
 * Unicode scalar value alone, 100,000 random short strings and the whole V3 vocabulary normalise
 * exactly as HF `tokenizers` 0.23.3 does (tests/test_engram_token_map_hf.sh). */
#include "model/engram_consts.h"
#include "base/file.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <unicode/uchar.h>
#include <unicode/uset.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

/* The Unicode version of the normalisation and mark tables in HF `tokenizers`
 * (crate unicode-normalization-alignments). */
#define HF_NORM_UNICODE_AGE "9.0"

typedef struct ubuf {
    UChar *p;
    int32_t n;
} ubuf;

/* ICU objects limited to HF's Unicode data version, made once per process (never freed). */
static struct {
    USet *assigned;               /* code points assigned in HF_NORM_UNICODE_AGE or earlier */
    UNormalizer2 *nfkc, *nfd;     /* normalisers filtered to that set */
    UErrorCode status;
} g_hf;
static pthread_once_t g_hf_once = PTHREAD_ONCE_INIT;

static void hf_tables_init(void) {
    UErrorCode st = U_ZERO_ERROR;
    static const char pattern[] = "[:age=" HF_NORM_UNICODE_AGE ":]";
    UChar upat[32];
    u_charsToUChars(pattern, upat, (int32_t)sizeof pattern);
    g_hf.assigned = uset_openPattern(upat, -1, &st);
    if (U_SUCCESS(st)) uset_freeze(g_hf.assigned);
    const UNormalizer2 *nfkc = unorm2_getNFKCInstance(&st);
    const UNormalizer2 *nfd = unorm2_getNFDInstance(&st);
    if (U_SUCCESS(st)) g_hf.nfkc = unorm2_openFiltered(nfkc, g_hf.assigned, &st);
    if (U_SUCCESS(st)) g_hf.nfd = unorm2_openFiltered(nfd, g_hf.assigned, &st);
    g_hf.status = st;
}

/* StripAccents: general category Mark as of Unicode 9.0. Since then U+1CF2/U+1CF3 became Lo and
 * U+111C9 became Mn; nothing else assigned by 9.0 changed in or out of the category. */
static int hf_is_mark(UChar32 c) {
    if (c == 0x1CF2 || c == 0x1CF3) return 1;
    if (c == 0x111C9) return 0;
    return (U_GET_GC_MASK(c) & U_GC_M_MASK) && uset_contains(g_hf.assigned, c);
}

/* Lowercase mappings that Rust's std (Unicode 16/17, used by tokenizers 0.23) has and ICU 72
 * (Unicode 15) lacks: code points first..last map to c + delta. Harmless with a newer ICU. */
static const struct { UChar32 first, last, delta; } k_newer_lower[] = {
    {0x1C89, 0x1C89, 1},      {0xA7CB, 0xA7CB, -42343}, {0xA7CC, 0xA7CC, 1},
    {0xA7CE, 0xA7CE, 1},      {0xA7D2, 0xA7D2, 1},      {0xA7D4, 0xA7D4, 1},
    {0xA7DA, 0xA7DA, 1},      {0xA7DC, 0xA7DC, -42561}, {0x10D50, 0x10D65, 32},
    {0x16EA0, 0x16EB8, 27},
};

/* The newer lowercase of c, or -1 if the table has none. */
static UChar32 newer_lower(UChar32 c) {
    for (size_t i = 0; i < sizeof k_newer_lower / sizeof k_newer_lower[0]; i++)
        if (c >= k_newer_lower[i].first && c <= k_newer_lower[i].last)
            return c + k_newer_lower[i].delta;
    return -1;
}

static di_status utf8_to_u16(const char *s, size_t len, ubuf *out, di_err *err) {
    /* NFKC may grow a string 18-fold and lowercasing 3-fold; this keeps every length in int32 */
    if (len > DI_ENGRAM_NORMALIZE_MAX_BYTES)
        return di_errf(err, DI_EINVAL, "engram normalize: text of %zu bytes (at most %d)", len,
                       DI_ENGRAM_NORMALIZE_MAX_BYTES);
    if (len == 0) s = "";
    UErrorCode st = U_ZERO_ERROR;
    int32_t n = 0;
    u_strFromUTF8(NULL, 0, &n, s, (int32_t)len, &st);
    if (st != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(st))
        return di_errf(err, DI_EINVAL, "engram normalize: invalid UTF-8 (%s)", u_errorName(st));
    out->p = di_xmalloc(((size_t)n + 1) * sizeof(UChar));
    st = U_ZERO_ERROR;
    u_strFromUTF8(out->p, n + 1, &out->n, s, (int32_t)len, &st);
    if (U_FAILURE(st)) {
        free(out->p);
        out->p = NULL;
        return di_errf(err, DI_EINVAL, "engram normalize: invalid UTF-8 (%s)", u_errorName(st));
    }
    return DI_OK;
}

/* Replaces *b by its normalisation under n2. */
static di_status u16_normalize(const UNormalizer2 *n2, ubuf *b, di_err *err) {
    UErrorCode st = U_ZERO_ERROR;
    int32_t n = unorm2_normalize(n2, b->p, b->n, NULL, 0, &st);
    if (st != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(st))
        return di_errf(err, DI_EINTERNAL, "engram normalize: ICU: %s", u_errorName(st));
    UChar *dst = di_xmalloc(((size_t)n + 1) * sizeof(UChar));
    st = U_ZERO_ERROR;
    n = unorm2_normalize(n2, b->p, b->n, dst, n + 1, &st);
    if (U_FAILURE(st)) {
        free(dst);
        return di_errf(err, DI_EINTERNAL, "engram normalize: ICU: %s", u_errorName(st));
    }
    free(b->p);
    b->p = dst;
    b->n = n;
    return DI_OK;
}

/* StripAccents + Lowercase: drops marks, lowercases each remaining code point on its own. */
static di_status u16_strip_marks_lower(ubuf *b, di_err *err) {
    /* full lowercase mappings are at most 3 UTF-16 units per code point */
    UChar *dst = di_xmalloc(((size_t)b->n * 3 + 1) * sizeof(UChar));
    int32_t o = 0;
    for (int32_t i = 0; i < b->n;) {
        int32_t start = i;
        UChar32 c;
        U16_NEXT(b->p, i, b->n, c);
        if (hf_is_mark(c)) continue;
        UChar32 lc = newer_lower(c);
        if (lc >= 0) {
            U16_APPEND_UNSAFE(dst, o, lc);
            continue;
        }
        UErrorCode st = U_ZERO_ERROR;
        int32_t n = u_strToLower(dst + o, (int32_t)(b->n * 3 + 1) - o, b->p + start, i - start,
                                 "", &st);
        if (U_FAILURE(st)) {
            free(dst);
            return di_errf(err, DI_EINTERNAL, "engram normalize: lowercase: %s", u_errorName(st));
        }
        o += n;
    }
    free(b->p);
    b->p = dst;
    b->n = o;
    return DI_OK;
}

static int is_ascii_ws(UChar c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* Replace([ \t\r\n]+ -> " "), Replace(^ $ -> U+E000), Strip, Replace(U+E000 -> " "), in place. */
static void u16_space_steps(ubuf *b) {
    int32_t o = 0;
    int in_run = 0;
    for (int32_t i = 0; i < b->n; i++) {
        int ws = is_ascii_ws(b->p[i]);
        if (!ws) b->p[o++] = b->p[i];
        else if (!in_run) b->p[o++] = ' ';
        in_run = ws;
    }
    b->n = o;
    if (b->n == 1 && b->p[0] == ' ') b->p[0] = 0xE000;

    int32_t lo = 0, hi = b->n; /* strip White_Space code points at both ends */
    while (lo < hi) {
        int32_t i = lo;
        UChar32 c;
        U16_NEXT(b->p, i, hi, c);
        if (!u_isUWhiteSpace(c)) break;
        lo = i;
    }
    while (hi > lo) {
        int32_t i = hi;
        UChar32 c;
        U16_PREV(b->p, lo, i, c);
        if (!u_isUWhiteSpace(c)) break;
        hi = i;
    }
    memmove(b->p, b->p + lo, (size_t)(hi - lo) * sizeof(UChar));
    b->n = hi - lo;
    for (int32_t i = 0; i < b->n; i++)
        if (b->p[i] == 0xE000) b->p[i] = ' ';
}

static di_status u16_to_utf8(const ubuf *b, char **out, size_t *out_len, di_err *err) {
    UErrorCode st = U_ZERO_ERROR;
    int32_t n = 0;
    u_strToUTF8(NULL, 0, &n, b->p, b->n, &st);
    if (st != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(st))
        return di_errf(err, DI_EINTERNAL, "engram normalize: to UTF-8: %s", u_errorName(st));
    char *s = di_xmalloc((size_t)n + 1);
    st = U_ZERO_ERROR;
    u_strToUTF8(s, n + 1, &n, b->p, b->n, &st);
    if (U_FAILURE(st)) {
        free(s);
        return di_errf(err, DI_EINTERNAL, "engram normalize: to UTF-8: %s", u_errorName(st));
    }
    s[n] = 0;
    *out = s;
    *out_len = (size_t)n;
    return DI_OK;
}

di_status di_engram_normalize(const char *text, size_t len, char **out, size_t *out_len,
                              di_err *err) {
    pthread_once(&g_hf_once, hf_tables_init);
    if (U_FAILURE(g_hf.status))
        return di_errf(err, DI_EINTERNAL, "engram normalize: ICU normalizers: %s",
                       u_errorName(g_hf.status));
    ubuf b = {0};
    di_status r = utf8_to_u16(text, len, &b, err);
    if (!r) r = u16_normalize(g_hf.nfkc, &b, err);
    if (!r) r = u16_normalize(g_hf.nfd, &b, err);
    if (!r) r = u16_strip_marks_lower(&b, err);
    if (!r) {
        u16_space_steps(&b);
        r = u16_to_utf8(&b, out, out_len, err);
    }
    free(b.p);
    return r;
}

/* ---- key dictionary ---- */

typedef struct key_slot {
    char *key; /* NULL = empty slot */
    size_t len;
    int32_t id;
} key_slot;

typedef struct key_dict {
    key_slot *slots; /* [cap], cap a power of two, at most half full */
    size_t cap, count;
} key_dict;

static uint64_t fnv1a(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* The id of key, inserting it with the next id if new. Takes ownership of key. */
static int32_t dict_intern(key_dict *d, char *key, size_t len) {
    size_t i = (size_t)fnv1a(key, len) & (d->cap - 1);
    while (d->slots[i].key) {
        if (d->slots[i].len == len && memcmp(d->slots[i].key, key, len) == 0) {
            free(key);
            return d->slots[i].id;
        }
        i = (i + 1) & (d->cap - 1);
    }
    d->slots[i] = (key_slot){key, len, (int32_t)d->count++};
    return d->slots[i].id;
}

static void dict_free(key_dict *d) {
    for (size_t i = 0; i < d->cap; i++) free(d->slots[i].key);
    free(d->slots);
}

static int contains_fffd(const char *s, size_t n) {
    for (size_t i = 0; i + 2 < n; i++) /* U+FFFD = EF BF BD */
        if ((unsigned char)s[i] == 0xEF && (unsigned char)s[i + 1] == 0xBF &&
            (unsigned char)s[i + 2] == 0xBD)
            return 1;
    return 0;
}

static char *dup_bytes(const char *s, size_t n) {
    char *p = di_xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

/* The dictionary key of one token (malloc'ed). */
static di_status token_key(const char *dec, size_t dec_len, const char *raw, size_t raw_len,
                           char **key, size_t *key_len, di_err *err) {
    if (contains_fffd(dec, dec_len)) {
        *key = dup_bytes(raw, raw_len);
        *key_len = raw_len;
        return DI_OK;
    }
    di_status st = di_engram_normalize(dec, dec_len, key, key_len, err);
    if (st) return st;
    if (*key_len == 0) {
        free(*key);
        *key = dup_bytes(dec, dec_len);
        *key_len = dec_len;
    }
    return DI_OK;
}

di_status di_engram_token_map_build(const char *const *decoded, const size_t *decoded_len,
                                    const char *const *raw, const size_t *raw_len,
                                    int vocab_size, di_engram_token_map *out, di_err *err) {
    *out = (di_engram_token_map){0};
    if (vocab_size < 1)
        return di_errf(err, DI_EINVAL, "engram token map: vocabulary size %d", vocab_size);
    key_dict d = {0};
    d.cap = 16;
    while (d.cap < (size_t)vocab_size * 2) d.cap <<= 1;
    d.slots = di_xcalloc(d.cap, sizeof *d.slots);
    int32_t *map = di_xmalloc((size_t)vocab_size * sizeof *map); /* [vocab_size] */
    for (int t = 0; t < vocab_size; t++) {
        char *key;
        size_t key_len;
        di_status st = token_key(decoded[t], decoded_len[t], raw[t], raw_len[t], &key, &key_len,
                                 err);
        if (st) {
            free(map);
            dict_free(&d);
            di_err_prefix(err, "engram token map: token %d", t);
            return st;
        }
        map[t] = dict_intern(&d, key, key_len);
    }
    out->map = map;
    out->vocab_size = vocab_size;
    out->n_compressed = (int)d.count;
    dict_free(&d);
    return DI_OK;
}


/* Pulls the strings of array `name` ([n]) out of the stub; pointers stay owned by root. */
static di_status stub_strings(const cJSON *root, const char *name, int n, const char **s,
                              size_t *len, const char *path, di_err *err) {
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, name);
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != n)
        return di_errf(err, DI_EFORMAT, "%s: `%s` must be an array of %d strings", path, name, n);
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        if (!cJSON_IsString(it))
            return di_errf(err, DI_EFORMAT, "%s: `%s`[%d] is not a string", path, name, i);
        s[i] = it->valuestring;
        len[i] = strlen(it->valuestring);
        i++;
    }
    return DI_OK;
}

di_status di_engram_token_map_from_stub(const char *path, di_engram_token_map *out, di_err *err) {
    *out = (di_engram_token_map){0};
    size_t n_bytes = 0;
    char *text = NULL;
    di_status st = di_read_file(path, (size_t)256 << 20, "tokenizer stub", &text, &n_bytes, err);
    if (st) return st;
    /* cJSON ends strings at NUL, which would silently merge "\u0000" with "" */
    if (strstr(text, "\\u0000")) {
        free(text);
        return di_errf(err, DI_EUNSUPPORTED, "%s: strings with U+0000 are not supported", path);
    }
    cJSON *root = cJSON_ParseWithLength(text, n_bytes);
    free(text);
    if (!root) return di_errf(err, DI_EFORMAT, "%s: not valid JSON", path);
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decode");
    int n = cJSON_IsArray(dec) ? cJSON_GetArraySize(dec) : 0;
    st = DI_OK;
    if (n < 1) st = di_errf(err, DI_EFORMAT, "%s: `decode` must be a non-empty array", path);
    const cJSON *vs = cJSON_GetObjectItemCaseSensitive(root, "vocab_size");
    if (!st && vs && (!cJSON_IsNumber(vs) || vs->valuedouble != n))
        st = di_errf(err, DI_EFORMAT, "%s: `vocab_size` does not match `decode` (%d entries)",
                     path, n);
    const char **s = di_xcalloc((size_t)n * 2 + 1, sizeof *s);
    size_t *len = di_xcalloc((size_t)n * 2 + 1, sizeof *len);
    if (!st) st = stub_strings(root, "decode", n, s, len, path, err);
    if (!st) st = stub_strings(root, "id_to_token", n, s + n, len + n, path, err);
    if (!st) {
        st = di_engram_token_map_build(s, len, s + n, len + n, n, out, err);
        if (st) di_err_prefix(err, "%s", path);
    }
    free(s);
    free(len);
    cJSON_Delete(root);
    return st;
}

int32_t di_engram_token_map_get(const di_engram_token_map *m, int64_t token_id) {
    if (token_id < 0 || token_id >= m->vocab_size) return DI_ENGRAM_DEAD;
    return m->map[token_id];
}

void di_engram_token_map_free(di_engram_token_map *m) {
    free(m->map);
    *m = (di_engram_token_map){0};
}
