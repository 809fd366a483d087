/* JSON schema -> grammar.
 *
 * The schema (cJSON) is compiled top-down into expressions of a g_builder. Exactness is the rule:
 * every construct either produces a grammar whose language is a subset of the schema's valid
 * instances (serialised as JSON text), or fails with `unsupported: <keyword>`. Where a subset is
 * chosen on purpose (to keep the grammar regular or unambiguous) it is written down here and in
 * docs/STRUCTURED_OUTPUT.md:
 *   - object members appear in the order of `properties`; additional members (when allowed) may
 *     appear anywhere, with keys free of escapes that differ from every declared name;
 *   - strings use escapes only where JSON requires them when a pattern/format applies;
 *   - numbers under minimum/maximum are written without an exponent;
 *   - `oneOf` needs alternatives that are provably disjoint (by JSON type or a differing const).
 * $ref targets become rules (so recursive schemas work); `allOf` and `$ref` with sibling keywords
 * are merged into one schema first (json_schema_merge.c); `anyOf` / `oneOf` siblings are
 * distributed into each alternative. Non-standard keywords are ignored (validators ignore them);
 * standard ones we do not implement are refused by name. */
#include "constrain/json_schema_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- small helpers ---- */

int js_fail(js_ctx *c, di_status st, const char *fmt, ...) {
    if (!c->st) {
        va_list ap;
        va_start(ap, fmt);
        char buf[900];
        vsnprintf(buf, sizeof buf, fmt, ap);
        va_end(ap);
        c->st = di_errf(c->err, st, "%s%s", st == DI_EUNSUPPORTED ? "unsupported: " : "json schema: ", buf);
    }
    return -1;
}

static int ws(js_ctx *c) {
    if (!c->o->json_ws_flexible) return g_empty(c->g);
    int sp = g_bytes(c->g, (const uint8_t[32]){[1] = 0x26, [4] = 0x01}); /* \t \n \r space */
    return g_repeat(c->g, sp, 0, c->o->json_ws_max > 0 ? c->o->json_ws_max : -1);
}

static int tok(js_ctx *c, const char *s) { return g_lits(c->g, s); }

/* ws TOKEN ws */
static int punct(js_ctx *c, const char *s) { return g_seq3(c->g, ws(c), tok(c, s), ws(c)); }

/* One JSON string character, any escape allowed except lone surrogates' \u escapes. */
static int json_char(js_ctx *c) {
    g_builder *g = c->g;
    uint32_t plain[] = {0x20, 0x21, 0x23, 0x5B, 0x5D, 0x10FFFF};
    int p = g_utf8_class(g, plain, 3);
    int hex = g_bytes(g, (const uint8_t[32]){[6] = 0xFF, [7] = 0x03, [8] = 0x7E, [12] = 0x7E});
    /* \u not starting a surrogate: first digit not d/D, or d/D then 0-7 */
    int not_d = g_bytes(g, (const uint8_t[32]){[6] = 0xFF, [7] = 0x03, [8] = 0x6E, [12] = 0x6E});
    int d = g_bytes(g, (const uint8_t[32]){[8] = 0x10, [12] = 0x10});
    int d07 = g_byte_range(g, '0', '7');
    int u4 = g_seq2(g, g_alt2(g, g_seq2(g, not_d, hex), g_seq2(g, d, d07)), g_repeat(g, hex, 2, 2));
    int esc = g_seq2(g, tok(c, "\\"), g_alt2(g, g_bytes(g, (const uint8_t[32]){[4] = 0x84, [5] = 0x80, [11] = 0x10,
                                                                                [12] = 0x44, [13] = 0x40, [14] = 0x14}),
                                             g_seq2(g, tok(c, "u"), u4)));
    return g_alt2(g, p, esc);
}

int js_string_rule(js_ctx *c) {
    if (c->r_string < 0) {
        c->r_string = g_rule_new(c->g, "json_string");
        g_rule_set(c->g, c->r_string, g_seq3(c->g, tok(c, "\""), g_star(c->g, json_char(c)), tok(c, "\"")));
    }
    return g_ref(c->g, c->r_string);
}

static int number_node(js_ctx *c, bool integer) {
    g_builder *g = c->g;
    int digit = g_byte_range(g, '0', '9');
    int intpart = g_alt2(g, tok(c, "0"), g_seq2(g, g_byte_range(g, '1', '9'), g_star(g, digit)));
    int n = g_seq2(g, g_opt(g, tok(c, "-")), intpart);
    if (integer) return n;
    int frac = g_seq2(g, tok(c, "."), g_repeat(g, digit, 1, -1));
    int exp = g_seq3(g, g_bytes(g, (const uint8_t[32]){[8] = 0x20, [12] = 0x20}),
                     g_opt(g, g_bytes(g, (const uint8_t[32]){[5] = 0x28})), g_repeat(g, digit, 1, -1));
    return g_seq3(g, n, g_opt(g, frac), g_opt(g, exp));
}

/* Any JSON value (rule json_value). */
int js_any_rule(js_ctx *c) {
    if (c->r_value >= 0) return g_ref(c->g, c->r_value);
    g_builder *g = c->g;
    c->r_value = g_rule_new(g, "json_value");
    int str = js_string_rule(c);
    int member = g_seq3(g, js_string_rule(c), punct(c, ":"), g_ref(g, c->r_value));
    int obj = g_seq3(g, g_seq2(g, tok(c, "{"), ws(c)),
                     g_opt(g, g_seq2(g, member, g_star(g, g_seq2(g, punct(c, ","), member)))),
                     g_seq2(g, ws(c), tok(c, "}")));
    int elem = g_ref(g, c->r_value);
    int arr = g_seq3(g, g_seq2(g, tok(c, "["), ws(c)),
                     g_opt(g, g_seq2(g, elem, g_star(g, g_seq2(g, punct(c, ","), elem)))),
                     g_seq2(g, ws(c), tok(c, "]")));
    int alts[] = {obj, arr, str, number_node(c, false), tok(c, "true"), tok(c, "false"), tok(c, "null")};
    g_rule_set(g, c->r_value, g_alt(g, alts, 7));
    return g_ref(g, c->r_value);
}

/* ---- literals (enum / const) ---- */

/* The JSON text of a string as Python's json.dumps(ensure_ascii=False) writes it. */
void js_escape_string(const char *s, g_ivec *out_bytes) {
    g_ivec_push(out_bytes, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        const char *e = NULL;
        char buf[8];
        switch (*p) {
        case '"': e = "\\\""; break;
        case '\\': e = "\\\\"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        case '\t': e = "\\t"; break;
        case '\b': e = "\\b"; break;
        case '\f': e = "\\f"; break;
        default:
            if (*p < 0x20) {
                snprintf(buf, sizeof buf, "\\u%04x", *p);
                e = buf;
            }
        }
        if (e) for (; *e; e++) g_ivec_push(out_bytes, (unsigned char)*e);
        else g_ivec_push(out_bytes, *p);
    }
    g_ivec_push(out_bytes, '"');
}

static int bytes_node(js_ctx *c, const g_ivec *b) {
    char *s = di_xmalloc((size_t)b->n + 1);
    for (int i = 0; i < b->n; i++) s[i] = (char)b->v[i];
    int r = g_lit(c->g, s, (size_t)b->n);
    free(s);
    return r;
}

static int number_literal(js_ctx *c, double v) {
    char buf[64];
    if (!isfinite(v)) return g_none(c->g);
    if (v == floor(v) && fabs(v) < 9007199254740992.0) {
        snprintf(buf, sizeof buf, "%.0f", v);
        if (v == 0) snprintf(buf, sizeof buf, "0");
        char buf2[80];
        snprintf(buf2, sizeof buf2, "%s.0", buf);
        return g_alt2(c->g, tok(c, buf), tok(c, buf2));
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    return tok(c, buf);
}

int js_literal(js_ctx *c, const cJSON *v) {
    g_builder *g = c->g;
    if (cJSON_IsNull(v)) return tok(c, "null");
    if (cJSON_IsTrue(v)) return tok(c, "true");
    if (cJSON_IsFalse(v)) return tok(c, "false");
    if (cJSON_IsNumber(v)) return number_literal(c, v->valuedouble);
    if (cJSON_IsString(v)) {
        g_ivec b = {0};
        js_escape_string(v->valuestring, &b);
        int r = bytes_node(c, &b);
        g_ivec_free(&b);
        return r;
    }
    g_ivec parts = {0};
    if (cJSON_IsArray(v)) {
        g_ivec_push(&parts, g_seq2(g, tok(c, "["), ws(c)));
        int i = 0;
        for (const cJSON *e = v->child; e; e = e->next, i++) {
            if (i) g_ivec_push(&parts, punct(c, ","));
            g_ivec_push(&parts, js_literal(c, e));
        }
        g_ivec_push(&parts, g_seq2(g, ws(c), tok(c, "]")));
    } else {
        g_ivec_push(&parts, g_seq2(g, tok(c, "{"), ws(c)));
        int i = 0;
        for (const cJSON *e = v->child; e; e = e->next, i++) {
            if (i) g_ivec_push(&parts, punct(c, ","));
            g_ivec b = {0};
            js_escape_string(e->string, &b);
            g_ivec_push(&parts, bytes_node(c, &b));
            g_ivec_free(&b);
            g_ivec_push(&parts, punct(c, ":"));
            g_ivec_push(&parts, js_literal(c, e));
        }
        g_ivec_push(&parts, g_seq2(g, ws(c), tok(c, "}")));
    }
    int r = g_seq(g, parts.v, parts.n);
    g_ivec_free(&parts);
    return r;
}

/* ---- numbers ---- */

/* Non-negative integers in [lo, hi] (hi < 0: unbounded), canonical decimal. */
static int uint_range(js_ctx *c, uint64_t lo, int64_t hi_s) {
    g_builder *g = c->g;
    char a[24], b[24];
    g_ivec alts = {0};
    bool unbounded = hi_s < 0;
    uint64_t hi = unbounded ? 0 : (uint64_t)hi_s;
    if (!unbounded && lo > hi) return g_none(g);
    int la = snprintf(a, sizeof a, "%llu", (unsigned long long)lo);
    int lb = unbounded ? la : snprintf(b, sizeof b, "%llu", (unsigned long long)hi);
    for (int len = la; len <= lb; len++) {
        /* [max(lo, 10^(len-1)), min(hi, 10^len - 1)] as fixed-length digit strings */
        char x[24], y[24];
        if (len == la) memcpy(x, a, (size_t)len + 1);
        else { x[0] = '1'; memset(x + 1, '0', (size_t)len - 1); x[len] = 0; }
        if (!unbounded && len == lb) memcpy(y, b, (size_t)len + 1);
        else { memset(y, '9', (size_t)len); y[len] = 0; }
        if (len == 1 && x[0] == '0' && y[0] == '0') { g_ivec_push(&alts, tok(c, "0")); continue; }
        /* fixed-length range x..y, built digit by digit (recursive helper below) */
        extern int js_fixed_range(js_ctx *, const char *, const char *, int);
        g_ivec_push(&alts, js_fixed_range(c, x, y, len));
    }
    if (unbounded) { /* longer than lo */
        int digit = g_byte_range(g, '0', '9');
        g_ivec_push(&alts, g_seq2(g, g_byte_range(g, '1', '9'), g_repeat(g, digit, la, -1)));
    }
    int r = g_alt(g, alts.v, alts.n);
    g_ivec_free(&alts);
    return r;
}

int js_fixed_range(js_ctx *c, const char *x, const char *y, int n) {
    g_builder *g = c->g;
    if (n == 0) return g_empty(g);
    if (n == 1) return g_byte_range(g, x[0], y[0]);
    bool full = true; /* x = 00..0 and y = 99..9: any n digits */
    for (int i = 0; i < n && full; i++) full = x[i] == '0' && y[i] == '9';
    if (full) return g_repeat(g, g_byte_range(g, '0', '9'), n, n);
    if (x[0] == y[0]) return g_seq2(g, g_byte_range(g, x[0], x[0]), js_fixed_range(c, x + 1, y + 1, n - 1));
    char nines[24], zeros[24];
    memset(nines, '9', (size_t)n - 1);
    memset(zeros, '0', (size_t)n - 1);
    int alts[3], k = 0;
    alts[k++] = g_seq2(g, g_byte_range(g, x[0], x[0]), js_fixed_range(c, x + 1, nines, n - 1));
    if (y[0] - x[0] > 1)
        alts[k++] = g_seq2(g, g_byte_range(g, x[0] + 1, y[0] - 1), g_repeat(g, g_byte_range(g, '0', '9'), n - 1, n - 1));
    alts[k++] = g_seq2(g, g_byte_range(g, y[0], y[0]), js_fixed_range(c, zeros, y + 1, n - 1));
    return g_alt(g, alts, k);
}

#define NO_LO INT64_MIN
#define NO_HI INT64_MAX

/* Integers in [lo, hi] (NO_LO / NO_HI = unbounded), "-0" excluded. */
static int int_range(js_ctx *c, int64_t lo, int64_t hi) {
    g_builder *g = c->g;
    if (lo > hi) return g_none(g);
    int alts[2], k = 0;
    if (hi >= 0) alts[k++] = uint_range(c, lo < 0 ? 0 : (uint64_t)lo, hi == NO_HI ? -1 : hi);
    if (lo < 0) { /* negative: "-" then [max(1, -hi), -lo] */
        uint64_t mn = hi >= 0 ? 1 : (uint64_t)(-(hi + 1)) + 1;
        int64_t mx = lo == NO_LO ? -1 : (int64_t)((uint64_t)(-(lo + 1)) + 1);
        alts[k++] = g_seq2(g, tok(c, "-"), uint_range(c, mn, mx));
    }
    return g_alt(g, alts, k);
}

/* Reads numeric bounds of s; returns false (after js_fail) for unsupported forms. The result is
 * the closed interval [lo, hi] over integers when integer is true, else over reals with
 * exclusivity flags (bounds must then be integers). */
typedef struct num_bounds {
    bool has_lo, has_hi, lo_ex, hi_ex;
    double lo, hi;
} num_bounds;

static bool read_bounds(js_ctx *c, const cJSON *s, num_bounds *b) {
    memset(b, 0, sizeof *b);
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minimum");
    const cJSON *mx = cJSON_GetObjectItemCaseSensitive(s, "maximum");
    const cJSON *emn = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMinimum");
    const cJSON *emx = cJSON_GetObjectItemCaseSensitive(s, "exclusiveMaximum");
    if (mn) {
        if (!cJSON_IsNumber(mn)) return js_fail(c, DI_EINVAL, "minimum is not a number"), false;
        b->has_lo = true, b->lo = mn->valuedouble;
    }
    if (mx) {
        if (!cJSON_IsNumber(mx)) return js_fail(c, DI_EINVAL, "maximum is not a number"), false;
        b->has_hi = true, b->hi = mx->valuedouble;
    }
    if (cJSON_IsBool(emn)) { /* draft 4 */
        if (cJSON_IsTrue(emn)) { if (!mn) return js_fail(c, DI_EINVAL, "exclusiveMinimum without minimum"), false; b->lo_ex = true; }
    } else if (emn) {
        if (!cJSON_IsNumber(emn)) return js_fail(c, DI_EINVAL, "exclusiveMinimum is not a number"), false;
        if (!b->has_lo || emn->valuedouble >= b->lo) b->has_lo = true, b->lo = emn->valuedouble, b->lo_ex = true;
    }
    if (cJSON_IsBool(emx)) {
        if (cJSON_IsTrue(emx)) { if (!mx) return js_fail(c, DI_EINVAL, "exclusiveMaximum without maximum"), false; b->hi_ex = true; }
    } else if (emx) {
        if (!cJSON_IsNumber(emx)) return js_fail(c, DI_EINVAL, "exclusiveMaximum is not a number"), false;
        if (!b->has_hi || emx->valuedouble <= b->hi) b->has_hi = true, b->hi = emx->valuedouble, b->hi_ex = true;
    }
    if ((b->has_lo && fabs(b->lo) > 1e15) || (b->has_hi && fabs(b->hi) > 1e15))
        return js_fail(c, DI_EUNSUPPORTED, "minimum/maximum beyond 1e15"), false;
    return true;
}

static int integer_node(js_ctx *c, const cJSON *s) {
    num_bounds b;
    if (!read_bounds(c, s, &b)) return -1;
    if (!b.has_lo && !b.has_hi) return number_node(c, true);
    int64_t lo = NO_LO, hi = NO_HI;
    if (b.has_lo) lo = b.lo_ex ? (int64_t)floor(b.lo) + 1 : (int64_t)ceil(b.lo);
    if (b.has_hi) hi = b.hi_ex ? (int64_t)ceil(b.hi) - 1 : (int64_t)floor(b.hi);
    return int_range(c, lo, hi);
}

/* Numbers (no exponent) in a range with integer bounds; see the derivation in STRUCTURED_OUTPUT.md:
 * value I (fraction zero, written I or I.000) needs I in the range; I.F with F non-zero lies
 * strictly between I and I+1 (negative: between -(I+1) and -I). */
static int bounded_number(js_ctx *c, const num_bounds *b) {
    g_builder *g = c->g;
    if ((b->has_lo && b->lo != floor(b->lo)) || (b->has_hi && b->hi != floor(b->hi)))
        return js_fail(c, DI_EUNSUPPORTED, "non-integer minimum/maximum on a number");
    int64_t L = b->has_lo ? (int64_t)b->lo : NO_LO, H = b->has_hi ? (int64_t)b->hi : NO_HI;
    int digit = g_byte_range(g, '0', '9');
    int zero_frac = g_opt(g, g_seq2(g, tok(c, "."), g_repeat(g, tok(c, "0"), 1, -1)));
    int nz_frac = g_seq(g, (int[]){tok(c, "."), g_star(g, digit), g_byte_range(g, '1', '9'), g_star(g, digit)}, 4);
    int alts[4], k = 0;
    /* non-negative, exact integer value */
    int64_t ilo = L == NO_LO ? 0 : (b->lo_ex ? L + 1 : L), ihi = H == NO_HI ? NO_HI : (b->hi_ex ? H - 1 : H);
    if (ilo < 0) ilo = 0;
    if (ilo <= ihi) alts[k++] = g_seq2(g, uint_range(c, (uint64_t)ilo, ihi == NO_HI ? -1 : ihi), zero_frac);
    /* non-negative with a fraction: I in [max(L,0), H-1] */
    int64_t flo = L == NO_LO || L < 0 ? 0 : L, fhi = H == NO_HI ? NO_HI : H - 1;
    if (flo <= fhi) alts[k++] = g_seq2(g, uint_range(c, (uint64_t)flo, fhi == NO_HI ? -1 : fhi), nz_frac);
    /* negative exact: I >= 1 with -I in range */
    int64_t nlo = H == NO_HI || H >= 0 ? 1 : (b->hi_ex ? -H + 1 : -H);
    if (H != NO_HI && H >= 0 && b->hi_ex && H == 0) nlo = 1;
    int64_t nhi = L == NO_LO ? NO_HI : (b->lo_ex ? -L - 1 : -L);
    if (nlo < 1) nlo = 1;
    if (nlo <= nhi) alts[k++] = g_seq3(g, tok(c, "-"), uint_range(c, (uint64_t)nlo, nhi == NO_HI ? -1 : nhi), zero_frac);
    /* negative with a fraction: I in [max(0, -H), -L-1] */
    int64_t mlo = H == NO_HI || H >= 0 ? 0 : -H, mhi = L == NO_LO ? NO_HI : -L - 1;
    if (mlo <= mhi) alts[k++] = g_seq3(g, tok(c, "-"), uint_range(c, (uint64_t)mlo, mhi == NO_HI ? -1 : mhi), nz_frac);
    return g_alt(g, alts, k);
}

static int number_type_node(js_ctx *c, const cJSON *s) {
    num_bounds b;
    if (!read_bounds(c, s, &b)) return -1;
    if (!b.has_lo && !b.has_hi) return number_node(c, false);
    return bounded_number(c, &b);
}

/* ---- strings ---- */

static bool get_count(js_ctx *c, const cJSON *s, const char *key, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
    if (!v) return true;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble))
        return js_fail(c, DI_EINVAL, "%s must be a non-negative integer", key), false;
    *out = v->valuedouble > 1e9 ? 1000000000 : (int64_t)v->valuedouble;
    return true;
}

/* Formats we check, as anchored regexes over the string's characters. */
static const char *format_regex(const char *f) {
    static const char *date =
        "([0-9]{4}-(0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|[0-9]{4}-(0[469]|11)-(0[1-9]|[12][0-9]|30)|"
        "[0-9]{4}-02-(0[1-9]|1[0-9]|2[0-8])|"
        "([0-9]{2}(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29)";
    static const char *time = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
    static char buf[1024];
    if (!strcmp(f, "date")) return snprintf(buf, sizeof buf, "^%s$", date), buf;
    if (!strcmp(f, "time")) return snprintf(buf, sizeof buf, "^%s$", time), buf;
    if (!strcmp(f, "date-time")) return snprintf(buf, sizeof buf, "^%sT%s$", date, time), buf;
    if (!strcmp(f, "uuid"))
        return "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";
    if (!strcmp(f, "email"))
        return "^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@"
               "([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\\.)+[A-Za-z]{2,63}$";
    if (!strcmp(f, "uri")) /* a conservative subset of RFC 3986 absolute URIs (any validator accepts these) */
        return "^[A-Za-z][A-Za-z0-9+.-]*:(//([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*)"
               "(:(6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}|0))?"
               "(/([A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})*)*"
               "|/?(([A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})+(/([A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})*)*)?)"
               "(\\?([A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})*)?(#([A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})*)?$";
    if (!strcmp(f, "ipv4"))
        return "^(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}$";
    return NULL;
}

/* Standard formats (JSON Schema drafts 4..2020-12) that validators may check. */
static bool format_is_standard(const char *f) {
    static const char *std[] = {"date-time", "date", "time", "duration", "email", "idn-email", "hostname",
                                "idn-hostname", "ipv4", "ipv6", "uri", "uri-reference", "iri", "iri-reference",
                                "uuid", "uri-template", "json-pointer", "relative-json-pointer", "regex",
                                "host-name", "ip-address", "color", "style", "phone", "utc-millisec", NULL};
    for (int i = 0; std[i]; i++)
        if (!strcmp(std[i], f)) return true;
    return false;
}

static int string_node(js_ctx *c, const cJSON *s) {
    g_builder *g = c->g;
    int64_t mn = 0, mx = -1;
    if (!get_count(c, s, "minLength", &mn) || !get_count(c, s, "maxLength", &mx)) return -1;
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(s, "pattern");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
    const char *re = NULL;
    if (pat) {
        if (!cJSON_IsString(pat)) return js_fail(c, DI_EINVAL, "pattern must be a string");
        re = pat->valuestring;
    }
    if (fmt && cJSON_IsString(fmt)) {
        const char *fr = format_regex(fmt->valuestring);
        if (!fr && format_is_standard(fmt->valuestring)) return js_fail(c, DI_EUNSUPPORTED, "format %s", fmt->valuestring);
        if (fr && re) return js_fail(c, DI_EUNSUPPORTED, "pattern together with format");
        if (fr) re = fr;
    }
    if (mx >= 0 && mx < mn) return g_none(g);
    if (re) {
        int node;
        di_status st = di_regex_node(g, re, strlen(re), true, &node, c->err);
        if (st) {
            c->st = st;
            if (st != DI_EUNSUPPORTED) c->st = di_errf(c->err, st, "json schema: pattern: %s", c->err->msg);
            return -1;
        }
        if (mn > 0 || mx >= 0) { /* pattern AND length: product of the two automata */
            if (mn > 10000 || mx > 10000) return js_fail(c, DI_EUNSUPPORTED, "minLength/maxLength above 10000 with a pattern");
            g_dfa a, b, p;
            st = g_node_dfa(g, node, &a, c->err);
            if (!st) {
                st = g_node_dfa(g, g_repeat(g, json_char(c), (int)mn, (int)mx), &b, c->err);
                if (!st) {
                    st = g_dfa_product(&a, &b, false, &p, c->err);
                    if (!st) node = g_dfa_node(g, &p), g_dfa_free(&p);
                    g_dfa_free(&b);
                }
                g_dfa_free(&a);
            }
            if (st) return c->st = st, -1;
        }
        return g_seq3(g, tok(c, "\""), node, tok(c, "\""));
    }
    if (mn == 0 && mx < 0) return js_string_rule(c);
    if (mn > 10000 || mx > 10000) return js_fail(c, DI_EUNSUPPORTED, "minLength/maxLength above 10000");
    return g_seq3(g, tok(c, "\""), g_repeat(g, json_char(c), (int)mn, (int)mx), tok(c, "\""));
}

/* ---- arrays ---- */

static int schema_rule(js_ctx *c, const cJSON *s, const char *name);
static int js_schema(js_ctx *c, const cJSON *s);

static int array_node(js_ctx *c, const cJSON *s) {
    g_builder *g = c->g;
    int64_t mn = 0, mx = -1;
    if (!get_count(c, s, "minItems", &mn) || !get_count(c, s, "maxItems", &mx)) return -1;
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    const cJSON *prefix = cJSON_GetObjectItemCaseSensitive(s, "prefixItems");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalItems");
    const cJSON *uniq = cJSON_GetObjectItemCaseSensitive(s, "uniqueItems");
    if (cJSON_IsTrue(uniq)) return js_fail(c, DI_EUNSUPPORTED, "uniqueItems");
    const cJSON *rest = NULL; /* schema of elements after the prefix; NULL = any */
    if (cJSON_IsArray(items)) {
        if (prefix) return js_fail(c, DI_EUNSUPPORTED, "items array together with prefixItems");
        prefix = items;
        rest = addl;
    } else {
        if (prefix && !cJSON_IsArray(prefix)) return js_fail(c, DI_EINVAL, "prefixItems must be an array");
        rest = items;
        if (!prefix && addl) { /* additionalItems without a tuple has no effect */ }
    }
    int k = prefix ? cJSON_GetArraySize(prefix) : 0;
    if (mx >= 0 && mx < mn) return g_none(g);
    if (mn > 10000 || mx > 10000) return js_fail(c, DI_EUNSUPPORTED, "minItems/maxItems above 10000");
    int *elem = di_xmalloc((size_t)(k + 1) * sizeof(int));
    int i = 0;
    for (const cJSON *e = prefix ? prefix->child : NULL; e && !c->st; e = e->next, i++) elem[i] = schema_rule(c, e, "item");
    bool rest_none = cJSON_IsFalse(rest);
    int rest_node = rest_none ? -1 : rest ? schema_rule(c, rest, "items") : js_any_rule(c);
    if (c->st) { free(elem); return -1; }
    /* Tail after element index i (i elements present, i >= 1): built from the back. */
    int64_t max_total = mx;
    if (rest_none && (max_total < 0 || max_total > k)) max_total = k;
    if (max_total >= 0 && mn > max_total) { free(elem); return g_none(g); }
    int sep = punct(c, ",");
    int tail; /* elements from index k on, each preceded by a comma */
    if (rest_none) tail = g_empty(g);
    else {
        int64_t rmin = mn > k ? mn - k : 0;
        int64_t rmax = max_total < 0 ? -1 : max_total - k;
        tail = max_total >= 0 && rmax <= 0 ? g_empty(g) : g_repeat(g, g_seq2(g, sep, rest_node), (int)rmin, (int)rmax);
    }
    /* prefix elements i = k-1 .. 1 (element 0 has no comma) */
    for (int j = k - 1; j >= 1; j--) {
        if (max_total >= 0 && j >= max_total) { tail = g_empty(g); continue; }
        int present = g_seq3(g, sep, elem[j], tail);
        tail = j >= mn ? g_opt(g, present) : present;
    }
    int body;
    if (k > 0) {
        int first = g_seq2(g, elem[0], (max_total >= 0 && max_total <= 1) ? g_empty(g) : tail);
        if (max_total == 0) first = g_none(g);
        body = mn == 0 ? g_opt(g, first) : first;
    } else if (rest_none) {
        body = g_empty(g);
    } else {
        int64_t rmax = max_total;
        if (rmax == 0) body = g_empty(g);
        else {
            int more = g_repeat(g, g_seq2(g, sep, rest_node), mn > 1 ? (int)mn - 1 : 0, rmax < 0 ? -1 : (int)rmax - 1);
            int first = g_seq2(g, rest_node, more);
            body = mn == 0 ? g_opt(g, first) : first;
        }
    }
    free(elem);
    return g_seq3(g, g_seq2(g, tok(c, "["), ws(c)), body, g_seq2(g, ws(c), tok(c, "]")));
}

/* ---- objects ---- */

/* Keys of additional members: strings without escapes that differ from every declared name. The
 * construction walks the trie of declared names over code points: at each prefix, end the key
 * (if the prefix is not a name), or continue with a character that leaves the trie (then any
 * characters), or follow a trie edge. names[i] are code-point arrays of lens[i]. */
static int key_excluding(js_ctx *c, uint32_t **names, const int *lens, int n, int depth) {
    g_builder *g = c->g;
    g_ivec alts = {0};
    bool is_name = false;
    g_ivec kids = {0};
    for (int i = 0; i < n; i++) {
        if (lens[i] == depth) is_name = true;
        else g_ivec_push(&kids, (int)names[i][depth]);
    }
    if (!is_name) g_ivec_push(&alts, tok(c, "\""));
    /* other characters: plain minus kids */
    g_ivec r = {0};
    uint32_t plain[] = {0x20, 0x21, 0x23, 0x5B, 0x5D, 0x10FFFF};
    int star = g_star(g, g_utf8_class(g, plain, 3));
    /* sort kids */
    for (int i = 1; i < kids.n; i++) {
        int x = kids.v[i], j = i - 1;
        while (j >= 0 && kids.v[j] > x) kids.v[j + 1] = kids.v[j], j--;
        kids.v[j + 1] = x;
    }
    for (int k = 0; k < 3; k++) {
        uint32_t lo = plain[2 * k], hi = plain[2 * k + 1];
        for (int i = 0; i < kids.n; i++) {
            uint32_t x = (uint32_t)kids.v[i];
            if (x < lo || x > hi) continue;
            if (x > lo) g_ivec_push(&r, (int)lo), g_ivec_push(&r, (int)x - 1);
            lo = x + 1;
        }
        if (lo <= hi) g_ivec_push(&r, (int)lo), g_ivec_push(&r, (int)hi);
    }
    uint32_t *ru = di_xmalloc((size_t)(r.n + 2) * sizeof(uint32_t));
    for (int i = 0; i < r.n; i++) ru[i] = (uint32_t)r.v[i];
    if (r.n) g_ivec_push(&alts, g_seq3(g, g_utf8_class(g, ru, r.n / 2), star, tok(c, "\"")));
    free(ru);
    g_ivec_free(&r);
    for (int i = 0; i < kids.n; i++) {
        if (i && kids.v[i] == kids.v[i - 1]) continue;
        uint32_t cp = (uint32_t)kids.v[i];
        if (cp < 0x20 || cp == '"' || cp == '\\') continue; /* never equal to an escape-free key */
        uint32_t **sub = di_xmalloc((size_t)n * sizeof(uint32_t *));
        int *sl = di_xmalloc((size_t)n * sizeof(int)), m = 0;
        for (int j = 0; j < n; j++)
            if (lens[j] > depth && names[j][depth] == cp) sub[m] = names[j], sl[m++] = lens[j];
        char buf[4];
        int bl = g_utf8_encode(cp, buf);
        g_ivec_push(&alts, g_seq2(g, g_lit(g, buf, (size_t)bl), key_excluding(c, sub, sl, m, depth + 1)));
        free(sub);
        free(sl);
    }
    g_ivec_free(&kids);
    int res = g_alt(g, alts.v, alts.n);
    g_ivec_free(&alts);
    return res;
}

static int utf8_to_cps(const char *s, uint32_t *out) {
    int n = 0;
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int len = *p < 0x80 ? 1 : *p < 0xE0 ? 2 : *p < 0xF0 ? 3 : 4;
        for (int k = 1; k < len; k++) /* a truncated sequence ends the string: never read past NUL */
            if (!p[k]) return n;
        uint32_t c;
        p += g_utf8_decode(p, (size_t)len, &c);
        out[n++] = c;
    }
    return n;
}

/* JSON-string content (no quotes) of any string, in the escapes the regex compiler emits. */
static int content_any(js_ctx *c) {
    uint32_t all[] = {0, 0x10FFFF};
    return g_star(c->g, di_cp_class_node(c->g, all, 1, true));
}

/* The content of exactly the given names (every accepted encoding of each character). */
static int content_names(js_ctx *c, const char **names, int m) {
    g_ivec alts = {0};
    for (int i = 0; i < m; i++) {
        uint32_t *cp = di_xmalloc((strlen(names[i]) + 1) * sizeof(uint32_t));
        int n = utf8_to_cps(names[i], cp);
        g_ivec seq = {0};
        for (int k = 0; k < n; k++) {
            uint32_t r[2] = {cp[k], cp[k]};
            g_ivec_push(&seq, di_cp_class_node(c->g, r, 1, true));
        }
        g_ivec_push(&alts, g_seq(c->g, seq.v, seq.n));
        g_ivec_free(&seq);
        free(cp);
    }
    int r = g_alt(c->g, alts.v, alts.n);
    g_ivec_free(&alts);
    return r;
}

#define MAX_PATTERN_PROPS 3

/* patternProperties: the DFA of each pattern over key content; which patterns a name matches. */
typedef struct pp_info {
    int k;
    const cJSON *schema[MAX_PATTERN_PROPS];
    g_dfa dfa[MAX_PATTERN_PROPS];
} pp_info;

static bool pp_compile(js_ctx *c, const cJSON *pp, pp_info *out) {
    memset(out, 0, sizeof *out);
    for (const cJSON *e = pp->child; e; e = e->next) {
        if (out->k == MAX_PATTERN_PROPS) return js_fail(c, DI_EUNSUPPORTED, "more than 3 patternProperties"), false;
        int node;
        di_status st = di_regex_node(c->g, e->string, strlen(e->string), true, &node, c->err);
        if (!st) st = g_node_dfa(c->g, node, &out->dfa[out->k], c->err);
        if (st) {
            c->st = st;
            return false;
        }
        out->schema[out->k++] = e;
    }
    return true;
}

static void pp_free(pp_info *p) {
    for (int i = 0; i < p->k; i++) g_dfa_free(&p->dfa[i]);
}

static bool pp_matches(const pp_info *p, int i, const char *name) {
    g_ivec b = {0};
    js_escape_string(name, &b);
    uint8_t *t = di_xmalloc((size_t)b.n);
    for (int k = 0; k < b.n; k++) t[k] = (uint8_t)b.v[k];
    bool r = g_dfa_match(&p->dfa[i], t + 1, (size_t)b.n - 2); /* without the quotes */
    free(t);
    g_ivec_free(&b);
    return r;
}

/* Extra members under patternProperties: one alternative per region of key space (which patterns
 * match, none = additionalProperties), keys never equal to a declared name. */
static int pp_extra_member(js_ctx *c, const pp_info *p, const cJSON *addl, const char **names, int m) {
    g_builder *g = c->g;
    g_dfa u, nm, base;
    di_status st = g_node_dfa(g, content_any(c), &u, c->err);
    if (st) return c->st = st, -1;
    if (m) {
        st = g_node_dfa(g, content_names(c, names, m), &nm, c->err);
        if (!st) st = g_dfa_product(&u, &nm, true, &base, c->err), g_dfa_free(&nm);
        g_dfa_free(&u);
        if (st) return c->st = st, -1;
    } else {
        base = u;
    }
    g_ivec alts = {0};
    for (int r = 0; r < (1 << p->k) && !c->st; r++) {
        if (r == 0 && cJSON_IsFalse(addl)) continue;
        g_dfa cur = base, nx;
        bool own = false;
        for (int i = 0; i < p->k && !st; i++) {
            st = g_dfa_product(&cur, &p->dfa[i], !((r >> i) & 1), &nx, c->err);
            if (own) g_dfa_free(&cur);
            cur = nx, own = true;
        }
        if (st) { c->st = st; break; }
        if (!g_dfa_empty(&cur)) {
            const cJSON *vs = r == 0 ? addl : NULL;
            for (int i = 0; i < p->k && !c->st; i++)
                if ((r >> i) & 1) vs = vs ? js_merge(c, vs, p->schema[i]) : p->schema[i];
            int v = !vs ? js_any_rule(c) : schema_rule(c, vs, "patternProperty");
            int key = g_seq3(g, tok(c, "\""), g_dfa_node(g, &cur), tok(c, "\""));
            g_ivec_push(&alts, g_seq3(g, key, punct(c, ":"), v));
        }
        if (own) g_dfa_free(&cur);
    }
    g_dfa_free(&base);
    int res = c->st ? -1 : g_alt(g, alts.v, alts.n);
    g_ivec_free(&alts);
    return res;
}

/* A non-negative integer keyword into *out (left alone when absent; large values are clamped,
 * they are refused later by size); false after an error. */
static bool count_keyword(js_ctx *c, const cJSON *s, const char *name, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, name);
    if (!v) return true;
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble != floor(v->valuedouble)) {
        js_fail(c, DI_EINVAL, "%s must be a non-negative integer", name);
        return false;
    }
    *out = v->valuedouble > 1e6 ? 1000000 : (int)v->valuedouble;
    return true;
}

/* Object members as rules. Unambiguous member order: T(i, k) = next declared index i, count state
 * k; U(i, k) = after an additional member that must be followed by declared member i (or the end
 * when i = m). Additional members attach to the next declared member, so each text has one
 * derivation. The count state k is (members written, capped at 1 without maxProperties; a lower
 * bound of the distinct names written, capped at minProperties; whether an additional member was
 * written). The lower bound counts every declared member (their names are distinct, and differ
 * from every additional key) but additional members once: two of them may repeat a key, and a
 * validator keeps one of duplicate keys, so counting them all could accept an object with too few
 * properties. maxProperties counts every member (an upper bound of the distinct names). Only
 * reachable (i, k, U) combinations become rules. */
typedef struct member_rules {
    js_ctx *c;
    int m;
    const int *key, *val;
    const bool *required;
    int add_rule, min_props, max_props, comma;
    int n_counts; /* count states: mc (0..mc_max) x lb (0..min_props) x ef (0..1) */
    int *rule;    /* [(m + 1) * n_counts * 2] rule id or -1 */
    g_ivec todo;  /* rule slots to define */
} member_rules;

enum { MEMBERS_MAX_RULES = 20000 };

static int mr_mc_max(const member_rules *r) { return r->max_props >= 0 ? r->max_props : 1; }

static int mr_state(const member_rules *r, int mc, int lb, int ef) {
    return (mc * (r->min_props + 1) + lb) * 2 + ef;
}

/* Count state after one more member (declared or additional), or -1 if maxProperties forbids it. */
static int mr_after(const member_rules *r, int k, bool extra) {
    int ef = k % 2, lb = (k / 2) % (r->min_props + 1), mc = k / 2 / (r->min_props + 1);
    if (r->max_props >= 0 && mc + 1 > r->max_props) return -1;
    int mc2 = mc + 1 > mr_mc_max(r) ? mr_mc_max(r) : mc + 1;
    int lb2 = extra && ef ? lb : (lb + 1 > r->min_props ? r->min_props : lb + 1);
    return mr_state(r, mc2, lb2, extra && r->min_props > 0 ? 1 : ef);
}

static int mr_rule(member_rules *r, int i, int k, int u) {
    int slot = (i * r->n_counts + k) * 2 + u;
    if (r->rule[slot] < 0) {
        r->rule[slot] = g_rule_new(r->c->g, u ? "members_after_extra" : "members");
        g_ivec_push(&r->todo, slot);
    }
    return r->rule[slot];
}

static void mr_define(member_rules *r, int slot) {
    g_builder *g = r->c->g;
    int u = slot % 2, k = slot / 2 % r->n_counts, i = slot / 2 / r->n_counts;
    int mc = k / 2 / (r->min_props + 1), lb = (k / 2) % (r->min_props + 1);
    int sep = mc > 0 ? r->comma : g_empty(g); /* a comma unless nothing is written yet */
    int kd = mr_after(r, k, false), ke = mr_after(r, k, true);
    g_ivec alts = {0};
    if (i < r->m && kd >= 0)
        g_ivec_push(&alts, g_seq(g, (int[]){sep, r->key[i], punct(r->c, ":"), r->val[i], g_ref(g, mr_rule(r, i + 1, kd, 0))}, 5));
    if (!u && i < r->m && !r->required[i]) g_ivec_push(&alts, g_ref(g, mr_rule(r, i + 1, k, 0)));
    if (i == r->m && lb >= r->min_props) g_ivec_push(&alts, g_empty(g));
    if (r->add_rule >= 0 && ke >= 0) g_ivec_push(&alts, g_seq3(g, sep, g_ref(g, r->add_rule), g_ref(g, mr_rule(r, i, ke, 1))));
    g_rule_set(g, r->rule[slot], alts.n ? g_alt(g, alts.v, alts.n) : g_none(g));
    g_ivec_free(&alts);
}

/* Defines the member rules; returns the first one (nothing written yet), or -1 on error. */
static int members_build(member_rules *r) {
    r->n_counts = (mr_mc_max(r) + 1) * (r->min_props + 1) * 2;
    if ((int64_t)(r->m + 1) * r->n_counts * 2 > MEMBERS_MAX_RULES)
        return js_fail(r->c, DI_EUNSUPPORTED, "minProperties/maxProperties with this many properties");
    r->rule = di_xmalloc((size_t)(r->m + 1) * (size_t)r->n_counts * 2 * sizeof(int));
    for (int i = 0; i < (r->m + 1) * r->n_counts * 2; i++) r->rule[i] = -1;
    int first = mr_rule(r, 0, mr_state(r, 0, 0, 0), 0);
    while (r->todo.n) mr_define(r, r->todo.v[--r->todo.n]);
    free(r->rule);
    g_ivec_free(&r->todo);
    return first;
}

static int object_node(js_ctx *c, const cJSON *s) {
    g_builder *g = c->g;
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    const cJSON *pp = cJSON_GetObjectItemCaseSensitive(s, "patternProperties");
    if (pp && !cJSON_IsObject(pp)) return js_fail(c, DI_EINVAL, "patternProperties must be an object");
    pp_info ppi = {0};
    bool has_pp = pp && pp->child;
    if (has_pp && !pp_compile(c, pp, &ppi)) { pp_free(&ppi); return -1; }
    if (props && !cJSON_IsObject(props)) return js_fail(c, DI_EINVAL, "properties must be an object");
    if (req && !cJSON_IsArray(req)) return js_fail(c, DI_EINVAL, "required must be an array");
    if (addl && !cJSON_IsBool(addl) && !cJSON_IsObject(addl)) return js_fail(c, DI_EINVAL, "additionalProperties must be a schema");
    int min_props = 0, max_props = -1;
    if (!count_keyword(c, s, "minProperties", &min_props) || !count_keyword(c, s, "maxProperties", &max_props)) {
        pp_free(&ppi);
        return -1;
    }
    int n = 0;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next) n++;
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) n++;
    const char **names = di_xmalloc((size_t)(n + 1) * sizeof(char *));
    const cJSON **schemas = di_xmalloc((size_t)(n + 1) * sizeof(cJSON *));
    bool *required = di_xcalloc((size_t)n + 1, 1);
    int m = 0;
    for (const cJSON *p = props ? props->child : NULL; p; p = p->next) {
        bool dup = false;
        for (int i = 0; i < m; i++) dup |= !strcmp(names[i], p->string);
        if (dup) continue;
        names[m] = p->string;
        schemas[m++] = p;
    }
    bool addl_false = cJSON_IsFalse(addl);
    bool impossible = false;
    int n_declared = m;
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
        if (!cJSON_IsString(r)) { free(names); free(schemas); free(required); pp_free(&ppi); return js_fail(c, DI_EINVAL, "required entries must be strings"); }
        int at = -1;
        for (int i = 0; i < m; i++)
            if (!strcmp(names[i], r->valuestring)) at = i;
        if (at < 0) {
            names[m] = r->valuestring;
            schemas[m] = addl; /* NULL = any value */
            at = m++;
        }
        required[at] = true;
    }
    /* patterns also apply to declared names that match them; an undeclared required name takes
     * its patterns' schemas, or additionalProperties when it matches none */
    for (int i = 0; i < m && !c->st; i++) {
        bool any = false;
        for (int k = 0; k < ppi.k && !c->st; k++)
            if (pp_matches(&ppi, k, names[i])) {
                const cJSON *base = i < n_declared || any ? schemas[i] : NULL;
                schemas[i] = base ? js_merge(c, base, ppi.schema[k]) : ppi.schema[k];
                any = true;
            }
        if (i >= n_declared && !any && addl_false) impossible = true;
    }
    if (impossible || c->st) { free(names); free(schemas); free(required); pp_free(&ppi); return c->st ? -1 : g_none(g); }
    int *key = di_xmalloc((size_t)(m + 1) * sizeof(int)), *val = di_xmalloc((size_t)(m + 1) * sizeof(int));
    for (int i = 0; i < m && !c->st; i++) {
        g_ivec b = {0};
        js_escape_string(names[i], &b);
        char *t = di_xmalloc((size_t)b.n + 1);
        for (int k = 0; k < b.n; k++) t[k] = (char)b.v[k];
        key[i] = g_lit(g, t, (size_t)b.n);
        free(t);
        g_ivec_free(&b);
        val[i] = schemas[i] ? schema_rule(c, schemas[i], names[i]) : js_any_rule(c);
    }
    int addl_member = -1;
    if (!c->st && has_pp) {
        addl_member = pp_extra_member(c, &ppi, addl, names, m);
    } else if (!c->st && !addl_false) {
        uint32_t **cps = di_xmalloc((size_t)(m + 1) * sizeof(uint32_t *));
        int *lens = di_xmalloc((size_t)(m + 1) * sizeof(int));
        for (int i = 0; i < m; i++) {
            cps[i] = di_xmalloc((strlen(names[i]) + 1) * sizeof(uint32_t));
            lens[i] = utf8_to_cps(names[i], cps[i]);
        }
        int k = g_seq2(g, tok(c, "\""), key_excluding(c, cps, lens, m, 0));
        for (int i = 0; i < m; i++) free(cps[i]);
        free(cps);
        free(lens);
        int v = addl && cJSON_IsObject(addl) ? schema_rule(c, addl, "additionalProperties") : js_any_rule(c);
        addl_member = g_seq3(g, k, punct(c, ":"), v);
    }
    int res = -1;
    if (!c->st) {
        int add_rule = -1;
        if (addl_member >= 0) {
            add_rule = g_rule_new(g, "extra_member");
            g_rule_set(g, add_rule, addl_member);
        }
        member_rules mr = {.c = c, .m = m, .key = key, .val = val, .required = required, .add_rule = add_rule,
                           .min_props = min_props, .max_props = max_props, .comma = punct(c, ",")};
        int first = members_build(&mr);
        if (first >= 0) res = g_seq3(g, g_seq2(g, tok(c, "{"), ws(c)), g_ref(g, first), g_seq2(g, ws(c), tok(c, "}")));
    }
    pp_free(&ppi);
    free(key);
    free(val);
    free(names);
    free(schemas);
    free(required);
    return res;
}

/* ---- keywords, types, composition ---- */

bool js_is_annotation(const char *k) {
    static const char *ann[] = {"$schema", "$id", "id", "title", "description", "default", "examples", "example",
                                "$comment", "readOnly", "writeOnly", "deprecated", "contentMediaType",
                                "contentEncoding", "contentSchema", "$anchor", "$vocabulary", "discriminator",
                                "xml", "externalDocs", "$defs", "definitions", NULL};
    for (int i = 0; ann[i]; i++)
        if (!strcmp(ann[i], k)) return true;
    return false;
}

/* Standard keywords with no implementation here. */
/* `not` of a schema that accepts everything ({} or true, annotations aside) accepts nothing. */
static bool not_is_everything(const cJSON *s) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(s, "not");
    if (!n) return false;
    if (cJSON_IsTrue(n)) return true;
    if (!cJSON_IsObject(n)) return false;
    for (const cJSON *k = n->child; k; k = k->next)
        if (!js_is_annotation(k->string)) return false;
    return true;
}

/* `not` whose only constraint is `type`: the JSON types it excludes (0 if not of that form). */
static int not_types_mask(const cJSON *s) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(s, "not");
    if (!cJSON_IsObject(n)) return 0;
    const cJSON *t = NULL;
    for (const cJSON *k = n->child; k; k = k->next) {
        if (js_is_annotation(k->string)) continue;
        if (strcmp(k->string, "type")) return 0;
        t = k;
    }
    if (!t) return 0;
    static const char *names[] = {"null", "boolean", "object", "array", "string", "integer", "number"};
    int m = 0;
    for (const cJSON *e = cJSON_IsArray(t) ? t->child : t; e; e = cJSON_IsArray(t) ? e->next : NULL) {
        if (!cJSON_IsString(e)) return 0;
        int bit = 0;
        for (int i = 0; i < 7; i++)
            if (!strcmp(names[i], e->valuestring)) bit = 1 << i;
        if (!bit) return 0;
        m |= bit;
    }
    if (m & 64) m |= 32; /* not number: not integer either */
    return m;
}

static const char *unsupported_keyword(const cJSON *s) {
    static const char *kw[] = {"not", "propertyNames", "contains", "minContains", "maxContains",
                               "multipleOf", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef",
                               "$recursiveRef", NULL};
    for (int i = 0; kw[i]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, kw[i]);
        if (!v) continue;
        if (!strcmp(kw[i], "not") && (not_is_everything(s) || cJSON_IsFalse(v) || not_types_mask(s))) continue;
        return kw[i];
    }
    if (cJSON_GetObjectItemCaseSensitive(s, "if") &&
        (cJSON_GetObjectItemCaseSensitive(s, "then") || cJSON_GetObjectItemCaseSensitive(s, "else")))
        return "if/then/else";
    return NULL;
}

enum { T_NULL = 1, T_BOOL = 2, T_OBJECT = 4, T_ARRAY = 8, T_STRING = 16, T_INTEGER = 32, T_NUMBER = 64,
       T_ALL = 127 };

static int type_bit(const char *t) {
    static const char *names[] = {"null", "boolean", "object", "array", "string", "integer", "number"};
    for (int i = 0; i < 7; i++)
        if (!strcmp(names[i], t)) return 1 << i;
    return 0;
}

/* Allowed JSON types of s ("number" includes integers). */
static int schema_types(js_ctx *c, const cJSON *s) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
    int m = 0;
    if (!t) m = T_ALL;
    else if (cJSON_IsString(t)) m = type_bit(t->valuestring);
    else if (cJSON_IsArray(t))
        for (const cJSON *e = t->child; e; e = e->next) m |= cJSON_IsString(e) ? type_bit(e->valuestring) : 0;
    if (t && !m && !(cJSON_IsArray(t) && !t->child)) {
        js_fail(c, DI_EINVAL, "unknown type");
        return 0;
    }
    if (m & T_NUMBER) m |= T_INTEGER;
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(s, "nullable"))) m |= T_NULL;
    return m;
}

static int value_type(const cJSON *v) {
    if (cJSON_IsNull(v)) return T_NULL;
    if (cJSON_IsBool(v)) return T_BOOL;
    if (cJSON_IsObject(v)) return T_OBJECT;
    if (cJSON_IsArray(v)) return T_ARRAY;
    if (cJSON_IsString(v)) return T_STRING;
    if (v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 1e300) return T_INTEGER | T_NUMBER;
    return T_NUMBER;
}

static size_t utf8_len(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* enum / const: the listed values that also pass the sibling keywords we can check. */
static int enum_node(js_ctx *c, const cJSON *s, int types) {
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(s, "const");
    static const char *ok_kw[] = {"type", "nullable", "enum", "const", "minLength", "maxLength", "minimum",
                                  "maximum", "format", NULL};
    for (const cJSON *k = s->child; k; k = k->next) {
        bool ok = js_is_annotation(k->string) || !strncmp(k->string, "x-", 2);
        for (int i = 0; ok_kw[i] && !ok; i++) ok = !strcmp(ok_kw[i], k->string);
        static const char *structural[] = {"properties", "required", "additionalProperties", "items", "prefixItems",
                                           "additionalItems", "minItems", "maxItems", "pattern", "patternProperties",
                                           "exclusiveMinimum", "exclusiveMaximum", "uniqueItems", NULL};
        for (int i = 0; structural[i] && ok; i++)
            if (!strcmp(structural[i], k->string)) ok = false;
        if (!ok) {
            bool std = false;
            for (int i = 0; structural[i]; i++) std |= !strcmp(structural[i], k->string);
            if (std) return js_fail(c, DI_EUNSUPPORTED, "enum/const together with %s", k->string);
        }
    }
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(s, "format");
    if (fmt && cJSON_IsString(fmt) && format_is_standard(fmt->valuestring))
        return js_fail(c, DI_EUNSUPPORTED, "enum/const together with format");
    int64_t mnl = 0, mxl = -1;
    if (!get_count(c, s, "minLength", &mnl) || !get_count(c, s, "maxLength", &mxl)) return -1;
    const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minimum"), *mx = cJSON_GetObjectItemCaseSensitive(s, "maximum");
    g_ivec alts = {0};
    cJSON one = {0};
    const cJSON *list = en;
    if (cn) {
        if (en) { /* const AND enum: const if it is listed */
            bool found = false;
            for (const cJSON *e = en->child; e; e = e->next) found |= cJSON_Compare(e, cn, true);
            if (!found) return g_none(c->g);
        }
        list = NULL;
    } else if (!cJSON_IsArray(en)) {
        return js_fail(c, DI_EINVAL, "enum must be an array");
    }
    (void)one;
    const cJSON *single[1] = {cn};
    int count = cn ? 1 : cJSON_GetArraySize(list);
    const cJSON *e = cn ? single[0] : list->child;
    for (int i = 0; i < count && e; i++, e = cn ? NULL : e->next) {
        int vt = value_type(e);
        if (!(vt & types)) continue;
        if (cJSON_IsString(e)) {
            size_t l = utf8_len(e->valuestring);
            if ((int64_t)l < mnl || (mxl >= 0 && (int64_t)l > mxl)) continue;
        }
        if (cJSON_IsNumber(e)) {
            if (mn && cJSON_IsNumber(mn) && e->valuedouble < mn->valuedouble) continue;
            if (mx && cJSON_IsNumber(mx) && e->valuedouble > mx->valuedouble) continue;
        }
        /* an integer-typed schema must not accept 2.0 written with a fraction */
        if (cJSON_IsNumber(e) && !(types & T_NUMBER) && (types & T_INTEGER)) {
            char buf[64];
            snprintf(buf, sizeof buf, "%.0f", e->valuedouble);
            g_ivec_push(&alts, tok(c, e->valuedouble == 0 ? "0" : buf));
            continue;
        }
        g_ivec_push(&alts, js_literal(c, e));
    }
    int r = g_alt(c->g, alts.v, alts.n);
    g_ivec_free(&alts);
    return r;
}

/* Follows a chain of pure "$ref" schemas (for analysis only). */
static const cJSON *deref(js_ctx *c, const cJSON *s) {
    for (int i = 0; i < 16 && cJSON_IsObject(s); i++) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(s, "$ref");
        if (!cJSON_IsString(r)) break;
        const cJSON *t = js_resolve_ref(c, r->valuestring);
        if (!t) return NULL;
        s = t;
    }
    return s;
}

/* Types an alternative can have, taking enum/const into account (over-approximation). */
static int alt_types(js_ctx *c, const cJSON *s) {
    s = deref(c, s);
    if (!s) return T_ALL;
    if (cJSON_IsFalse(s)) return 0;
    if (!cJSON_IsObject(s)) return T_ALL;
    int t = schema_types(c, s);
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum"), *cn = cJSON_GetObjectItemCaseSensitive(s, "const");
    if (cn) t &= value_type(cn);
    else if (cJSON_IsArray(en)) {
        int m = 0;
        for (const cJSON *e = en->child; e; e = e->next) m |= value_type(e);
        t &= m;
    }
    /* composition inside: be conservative unless types are explicit */
    if (!cJSON_GetObjectItemCaseSensitive(s, "type") && !cn && !en) return T_ALL;
    if (t & T_NUMBER) t |= T_INTEGER;
    return t;
}

/* The values a property can take if fixed by const/enum; NULL if not fixed. */
static const cJSON *fixed_values(js_ctx *c, const cJSON *s, bool *is_const) {
    s = deref(c, s);
    if (!cJSON_IsObject(s)) return NULL;
    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(s, "const");
    if (cn) { *is_const = true; return cn; }
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    if (cJSON_IsArray(en)) { *is_const = false; return en; }
    return NULL;
}

static bool value_in(const cJSON *v, const cJSON *set, bool is_const) {
    if (is_const) return cJSON_Compare(v, set, true);
    for (const cJSON *e = set->child; e; e = e->next)
        if (cJSON_Compare(v, e, true)) return true;
    return false;
}

static bool is_required(const cJSON *s, const char *name) {
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
        if (cJSON_IsString(r) && !strcmp(r->valuestring, name)) return true;
    return false;
}

/* Objects a and b can never both match: a property required by both whose fixed value sets are
 * disjoint, or one required by a that b forbids (additionalProperties false). */
static bool objects_disjoint(js_ctx *c, const cJSON *a, const cJSON *b) {
    a = deref(c, a), b = deref(c, b);
    if (!cJSON_IsObject(a) || !cJSON_IsObject(b)) return false;
    for (int pass = 0; pass < 2; pass++) {
        const cJSON *x = pass ? b : a, *y = pass ? a : b;
        const cJSON *px = cJSON_GetObjectItemCaseSensitive(x, "properties");
        const cJSON *py = cJSON_GetObjectItemCaseSensitive(y, "properties");
        const cJSON *req = cJSON_GetObjectItemCaseSensitive(x, "required");
        for (const cJSON *r = req ? req->child : NULL; r; r = r->next) {
            if (!cJSON_IsString(r)) continue;
            const cJSON *sy = py ? cJSON_GetObjectItemCaseSensitive(py, r->valuestring) : NULL;
            const cJSON *pp = cJSON_GetObjectItemCaseSensitive(y, "patternProperties");
            if (!sy && cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(y, "additionalProperties")) && !(pp && pp->child))
                return true;
            if (!sy || !is_required(y, r->valuestring)) continue;
            const cJSON *sx = px ? cJSON_GetObjectItemCaseSensitive(px, r->valuestring) : NULL;
            bool cx = false, cy = false;
            const cJSON *vx = sx ? fixed_values(c, sx, &cx) : NULL, *vy = fixed_values(c, sy, &cy);
            if (!vx || !vy) continue;
            bool overlap = false;
            if (cx) overlap = value_in(vx, vy, cy);
            else
                for (const cJSON *e = vx->child; e && !overlap; e = e->next) overlap = value_in(e, vy, cy);
            if (!overlap) return true;
        }
    }
    return false;
}

static bool alts_disjoint(js_ctx *c, const cJSON *a, const cJSON *b) {
    int ta = alt_types(c, a), tb = alt_types(c, b);
    if (!(ta & tb)) return true;
    if ((ta & tb) == T_OBJECT) return objects_disjoint(c, a, b);
    return false;
}

/* s without the keyword `drop` (a shallow copy kept in c->owned); NULL if nothing constraining is
 * left (only annotations). */
static const cJSON *without(js_ctx *c, const cJSON *s, const char *drop) {
    cJSON *o = cJSON_CreateObject();
    bool any = false;
    for (const cJSON *k = s->child; k; k = k->next) {
        if (!strcmp(k->string, drop)) continue;
        cJSON_AddItemReferenceToObject(o, k->string, (cJSON *)k);
        if (!js_is_annotation(k->string)) any = true;
    }
    cJSON_AddItemToArray(c->owned, o);
    return any ? o : NULL;
}

static int composition_node(js_ctx *c, const cJSON *s, const char *kw) {
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(s, kw);
    if (!cJSON_IsArray(list)) return js_fail(c, DI_EINVAL, "%s must be an array", kw);
    const cJSON *base = without(c, s, kw);
    if (!list->child) { /* allOf [] holds for everything; anyOf / oneOf [] for nothing */
        if (strcmp(kw, "allOf")) return g_none(c->g);
        return base ? js_schema(c, base) : js_any_rule(c);
    }
    if (!strcmp(kw, "allOf")) {
        const cJSON *m = base;
        for (const cJSON *e = list->child; e && !c->st; e = e->next) m = m ? js_merge(c, m, e) : e;
        return c->st ? -1 : js_schema(c, m);
    }
    int n = cJSON_GetArraySize(list);
    const cJSON **alts = di_xmalloc((size_t)n * sizeof(cJSON *));
    int i = 0;
    for (const cJSON *e = list->child; e && !c->st; e = e->next, i++) alts[i] = base ? js_merge(c, base, e) : e;
    if (!c->st && !strcmp(kw, "oneOf"))
        for (int a = 0; a < n && !c->st; a++)
            for (int b = a + 1; b < n && !c->st; b++)
                if (!alts_disjoint(c, alts[a], alts[b])) js_fail(c, DI_EUNSUPPORTED, "oneOf with overlapping alternatives");
    g_ivec nodes = {0};
    for (i = 0; i < n && !c->st; i++) g_ivec_push(&nodes, js_schema(c, alts[i]));
    int r = c->st ? -1 : g_alt(c->g, nodes.v, nodes.n);
    g_ivec_free(&nodes);
    free(alts);
    return r;
}

static int ref_rule(js_ctx *c, const char *ref) {
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].ref, ref)) return g_ref(c->g, c->refs[i].rule);
    const cJSON *t = js_resolve_ref(c, ref);
    if (!t) return -1;
    if (c->n_refs == c->cap_refs) {
        c->cap_refs = c->cap_refs ? c->cap_refs * 2 : 16;
        c->refs = di_xrealloc(c->refs, (size_t)c->cap_refs * sizeof(js_ref));
    }
    int rule = g_rule_new(c->g, ref);
    c->refs[c->n_refs].ref = di_xstrdup(ref);
    c->refs[c->n_refs++].rule = rule;
    int body = js_schema(c, t);
    if (body < 0) return -1;
    g_rule_set(c->g, rule, body);
    return g_ref(c->g, rule);
}

/* The schema's text without annotations, so equal schemas share one rule. Keys that hold maps of
 * names to schemas (properties, $defs, ...) keep every name. */
static void canon(const cJSON *s, bool schema_pos, g_ivec *out) {
    static const char *maps[] = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", NULL};
    static const char *subs[] = {"items", "additionalProperties", "additionalItems", "not", "contains",
                                 "propertyNames", "if", "then", "else", "allOf", "anyOf", "oneOf", "prefixItems", NULL};
    if (cJSON_IsObject(s)) {
        g_ivec_push(out, '{');
        for (const cJSON *k = s->child; k; k = k->next) {
            if (schema_pos && js_is_annotation(k->string) && strcmp(k->string, "$defs") && strcmp(k->string, "definitions"))
                continue;
            for (const char *p = k->string; *p; p++) g_ivec_push(out, (unsigned char)*p);
            g_ivec_push(out, 0x01);
            bool is_map = false, is_sub = false;
            for (int i = 0; schema_pos && maps[i]; i++) is_map |= !strcmp(maps[i], k->string);
            for (int i = 0; schema_pos && subs[i]; i++) is_sub |= !strcmp(subs[i], k->string);
            if (is_map && cJSON_IsObject(k)) {
                g_ivec_push(out, '{');
                for (const cJSON *e = k->child; e; e = e->next) {
                    for (const char *p = e->string; *p; p++) g_ivec_push(out, (unsigned char)*p);
                    g_ivec_push(out, 0x01);
                    canon(e, true, out);
                }
                g_ivec_push(out, '}');
            } else {
                canon(k, is_sub, out);
            }
            g_ivec_push(out, 0x02);
        }
        g_ivec_push(out, '}');
    } else if (cJSON_IsArray(s)) {
        g_ivec_push(out, '[');
        for (const cJSON *e = s->child; e; e = e->next) canon(e, schema_pos, out), g_ivec_push(out, 0x02);
        g_ivec_push(out, ']');
    } else {
        char *t = cJSON_PrintUnformatted(s);
        for (const char *p = t; *p; p++) g_ivec_push(out, (unsigned char)*p);
        free(t);
    }
}

/* A schema as a rule call (for values inside arrays and objects, so repetition copies a call). */
static int schema_rule(js_ctx *c, const cJSON *s, const char *name) {
    const cJSON *r = cJSON_IsObject(s) ? cJSON_GetObjectItemCaseSensitive(s, "$ref") : NULL;
    if (cJSON_IsString(r) && !without(c, s, "$ref")) return ref_rule(c, r->valuestring);
    if (cJSON_IsBool(s) || (cJSON_IsObject(s) && !s->child)) return cJSON_IsFalse(s) ? g_none(c->g) : js_any_rule(c);
    g_ivec key = {0};
    canon(s, true, &key);
    char *k = di_xmalloc((size_t)key.n + 2);
    k[0] = '=';
    for (int i = 0; i < key.n; i++) k[i + 1] = (char)(key.v[i] ? key.v[i] : 0x03);
    k[key.n + 1] = 0;
    g_ivec_free(&key);
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].ref, k)) {
            free(k);
            return g_ref(c->g, c->refs[i].rule);
        }
    int rule = g_rule_new(c->g, name);
    if (c->n_refs == c->cap_refs) {
        c->cap_refs = c->cap_refs ? c->cap_refs * 2 : 16;
        c->refs = di_xrealloc(c->refs, (size_t)c->cap_refs * sizeof(js_ref));
    }
    c->refs[c->n_refs].ref = k;
    c->refs[c->n_refs++].rule = rule;
    int body = js_schema(c, s);
    if (body < 0) return -1;
    g_rule_set(c->g, rule, body);
    return g_ref(c->g, rule);
}

/* dependencies / dependentRequired / dependentSchemas, rewritten exactly into allOf of anyOf:
 * "if A is present then D" = anyOf [{properties: {A: false}}, {required: [A], ...D}]. Returns the
 * rewritten schema (kept in c->owned), s itself when there is nothing to rewrite, NULL on error. */
static const cJSON *rewrite_dependencies(js_ctx *c, const cJSON *s) {
    static const char *kws[] = {"dependencies", "dependentRequired", "dependentSchemas"};
    int n = 0;
    for (int k = 0; k < 3; k++) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(s, kws[k]);
        if (!d) continue;
        if (!cJSON_IsObject(d)) return js_fail(c, DI_EINVAL, "%s must be an object", kws[k]), NULL;
        n += cJSON_GetArraySize(d);
    }
    if (n == 0) {
        bool any = false;
        for (int k = 0; k < 3; k++) any |= cJSON_GetObjectItemCaseSensitive(s, kws[k]) != NULL;
        if (!any) return s;
    }
    if (n > 6) return js_fail(c, DI_EUNSUPPORTED, "more than 6 dependencies"), NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToArray(c->owned, o);
    cJSON *all = NULL;
    for (const cJSON *k = s->child; k; k = k->next) {
        if (!strcmp(k->string, "dependencies") || !strcmp(k->string, "dependentRequired") ||
            !strcmp(k->string, "dependentSchemas"))
            continue;
        if (!strcmp(k->string, "allOf") && cJSON_IsArray(k)) {
            all = cJSON_AddArrayToObject(o, "allOf");
            for (const cJSON *e = k->child; e; e = e->next) cJSON_AddItemReferenceToArray(all, (cJSON *)e);
            continue;
        }
        cJSON_AddItemReferenceToObject(o, k->string, (cJSON *)k);
    }
    if (!all) all = cJSON_AddArrayToObject(o, "allOf");
    for (int k = 0; k < 3; k++) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(s, kws[k]);
        for (const cJSON *e = d ? d->child : NULL; e; e = e->next) {
            cJSON *absent = cJSON_CreateObject(), *props = cJSON_AddObjectToObject(absent, "properties");
            cJSON_AddFalseToObject(props, e->string);
            cJSON *present = cJSON_CreateObject(), *req = cJSON_AddArrayToObject(present, "required");
            cJSON_AddItemToArray(req, cJSON_CreateString(e->string));
            if (cJSON_IsArray(e)) {
                for (const cJSON *x = e->child; x; x = x->next) {
                    if (!cJSON_IsString(x)) {
                        cJSON_Delete(absent), cJSON_Delete(present);
                        return js_fail(c, DI_EINVAL, "%s entries must be strings", kws[k]), NULL;
                    }
                    cJSON_AddItemToArray(req, cJSON_CreateString(x->valuestring));
                }
            } else {
                cJSON *both = cJSON_CreateArray();
                cJSON_AddItemToArray(both, present);
                cJSON_AddItemReferenceToArray(both, (cJSON *)e);
                present = cJSON_CreateObject();
                cJSON_AddItemToObject(present, "allOf", both);
            }
            cJSON *w = cJSON_CreateObject(), *any = cJSON_AddArrayToObject(w, "anyOf");
            cJSON_AddItemToArray(any, absent);
            cJSON_AddItemToArray(any, present);
            cJSON_AddItemToArray(all, w);
        }
    }
    return o;
}

static int js_schema(js_ctx *c, const cJSON *s) {
    if (c->st) return -1;
    if (cJSON_IsBool(s)) return cJSON_IsTrue(s) ? js_any_rule(c) : g_none(c->g);
    if (!cJSON_IsObject(s)) return js_fail(c, DI_EINVAL, "a schema must be an object or a boolean");
    if (++c->depth > 64) {
        c->depth--;
        return js_fail(c, DI_EUNSUPPORTED, "schema nesting deeper than 64 (or recursive allOf/$ref merge)");
    }
    int r = -1;
    const cJSON *rw = rewrite_dependencies(c, s);
    if (!rw) {
        c->depth--;
        return -1;
    }
    if (rw != s) {
        r = js_schema(c, rw);
        c->depth--;
        return c->st ? -1 : r;
    }
    const char *bad = unsupported_keyword(s);
    const cJSON *ref = cJSON_GetObjectItemCaseSensitive(s, "$ref");
    if (bad) {
        js_fail(c, DI_EUNSUPPORTED, "%s", bad);
    } else if (not_is_everything(s)) {
        r = g_none(c->g);
    } else if (ref) {
        if (!cJSON_IsString(ref)) js_fail(c, DI_EINVAL, "$ref must be a string");
        else {
            const cJSON *rest = without(c, s, "$ref");
            if (!rest) r = ref_rule(c, ref->valuestring);
            else {
                const cJSON *t = js_resolve_ref(c, ref->valuestring);
                const cJSON *m = t ? js_merge(c, t, rest) : NULL;
                if (m) r = js_schema(c, m);
            }
        }
    } else if (cJSON_GetObjectItemCaseSensitive(s, "anyOf")) {
        /* alternatives first: merging allOf items that both carry anyOf would go round in circles */
        r = composition_node(c, s, "anyOf");
    } else if (cJSON_GetObjectItemCaseSensitive(s, "oneOf")) {
        r = composition_node(c, s, "oneOf");
    } else if (cJSON_GetObjectItemCaseSensitive(s, "allOf")) {
        r = composition_node(c, s, "allOf");
    } else {
        int types = schema_types(c, s);
        int excluded = not_types_mask(s);
        if (excluded) {
            /* "not integer" leaves non-integral numbers, which the number grammar cannot single out */
            if ((excluded & T_INTEGER) && !(excluded & T_NUMBER) && (types & T_NUMBER))
                js_fail(c, DI_EUNSUPPORTED, "not: {type: integer} on numbers");
            types &= ~excluded;
        }
        if (c->st) {
        } else if (cJSON_GetObjectItemCaseSensitive(s, "enum") || cJSON_GetObjectItemCaseSensitive(s, "const")) {
            r = enum_node(c, s, types);
        } else {
            g_ivec alts = {0};
            if (types & T_NULL) g_ivec_push(&alts, tok(c, "null"));
            if (types & T_BOOL) g_ivec_push(&alts, g_alt2(c->g, tok(c, "true"), tok(c, "false")));
            if (types & T_OBJECT) g_ivec_push(&alts, object_node(c, s));
            if (types & T_ARRAY) g_ivec_push(&alts, array_node(c, s));
            if (types & T_STRING) g_ivec_push(&alts, string_node(c, s));
            if (types & T_NUMBER) g_ivec_push(&alts, number_type_node(c, s));
            else if (types & T_INTEGER) g_ivec_push(&alts, integer_node(c, s));
            if (!c->st) r = g_alt(c->g, alts.v, alts.n);
            g_ivec_free(&alts);
        }
    }
    c->depth--;
    return c->st ? -1 : r;
}

di_status di_json_schema_build(g_builder *g, const char *json, size_t len, const di_constrain_opts *o,
                               int *root, di_err *err) {
    const char *end = NULL;
    cJSON *doc = cJSON_ParseWithLengthOpts(json, len, &end, false);
    if (!doc) return di_errf(err, DI_EINVAL, "json schema: not valid JSON (near byte %zu)", end ? (size_t)(end - json) : 0);
    js_ctx c = {.g = g, .root = doc, .o = o, .err = err, .r_value = -1, .r_string = -1};
    c.owned = cJSON_CreateArray();
    int r = ref_rule(&c, "#");
    if (r >= 0 && !c.st) *root = c.refs[0].rule;
    for (int i = 0; i < c.n_refs; i++) free(c.refs[i].ref);
    free(c.refs);
    cJSON_Delete(c.owned);
    cJSON_Delete(doc);
    if (!c.st && r < 0) return di_errf(err, DI_EINTERNAL, "json schema: compile failed");
    return c.st;
}
