/* Regex -> grammar expression (the common ECMAScript / Python subset).
 *
 * Supported: literals (UTF-8), `.`, classes `[...]` / `[^...]` with ranges and escapes, `\d \D \w
 * \W \s \S`, escapes `\n \r \t \f \v \0 \xHH \uHHHH \u{H..}` and escaped punctuation, groups
 * `(...)`, `(?:...)`, `(?<name>...)`, `(?P<name>...)`, alternation, quantifiers `* + ? {m} {m,}
 * {m,n}` (lazy `?` variants accepted: laziness does not change the language), and `^` / `$` at the
 * start / end of a top-level alternative. Anything else (lookaround, backreferences, word
 * boundaries, inline flags, Unicode properties, possessive quantifiers) is `unsupported: <feature>`.
 *
 * Semantics are chosen so a match here is a match for both Python `re` and ECMAScript: `.` is any
 * character but \n \r U+2028 U+2029; `\d` is [0-9], `\w` [A-Za-z0-9_], `\s` the whitespace both
 * agree on. Full-match mode (a `regex` constraint) matches the whole output. JSON-string mode (a
 * JSON-schema `pattern`) has search semantics (an unanchored side gets `.*`, any character) and
 * emits the JSON-escaped form of each character: `"` as \", `\` as \\, control characters as \n,
 * \t, ... or \u00XX, `/` as / or \/. */
#include "constrain/constrain.h"

#include <stdlib.h>
#include <string.h>

#define RE_MAX_REPEAT 10000

typedef struct re_parser {
    g_builder *g;
    const char *s;
    size_t n, i;
    bool json;
    int depth;
    di_err *err;
    di_status st;
} re_parser;

typedef struct cp_set {
    g_ivec r; /* pairs lo, hi */
} cp_set;

static void cs_add(cp_set *c, uint32_t lo, uint32_t hi) {
    g_ivec_push(&c->r, (int)lo);
    g_ivec_push(&c->r, (int)hi);
}

static int cmp_pair_u(const void *a, const void *b) {
    const int *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

static void cs_normalize(cp_set *c) {
    int n = c->r.n / 2;
    if (n > 1) qsort(c->r.v, (size_t)n, 2 * sizeof(int), cmp_pair_u);
    int m = 0;
    for (int i = 0; i < n; i++) {
        int lo = c->r.v[2 * i], hi = c->r.v[2 * i + 1];
        if (m && lo <= c->r.v[2 * m - 1] + 1) {
            if (hi > c->r.v[2 * m - 1]) c->r.v[2 * m - 1] = hi;
        } else {
            c->r.v[2 * m] = lo;
            c->r.v[2 * m + 1] = hi;
            m++;
        }
    }
    c->r.n = 2 * m;
}

static void cs_negate(cp_set *c) {
    cs_normalize(c);
    g_ivec out = {0};
    int prev = 0;
    for (int i = 0; i < c->r.n; i += 2) {
        if (c->r.v[i] > prev) g_ivec_push(&out, prev), g_ivec_push(&out, c->r.v[i] - 1);
        prev = c->r.v[i + 1] + 1;
    }
    if (prev <= 0x10FFFF) g_ivec_push(&out, prev), g_ivec_push(&out, 0x10FFFF);
    g_ivec_free(&c->r);
    c->r = out;
}

static bool cs_has(const cp_set *c, uint32_t cp) {
    for (int i = 0; i < c->r.n; i += 2)
        if ((int)cp >= c->r.v[i] && (int)cp <= c->r.v[i + 1]) return true;
    return false;
}

/* [0-9a-fA-F] matching one hex digit whose value is in [lo, hi]. */
static int hex_digit_node(g_builder *g, int lo, int hi) {
    uint8_t set[32] = {0};
    for (int v = lo; v <= hi; v++) {
        int cs[2] = {v < 10 ? '0' + v : 'a' + v - 10, v < 10 ? '0' + v : 'A' + v - 10};
        for (int k = 0; k < 2; k++) set[cs[k] >> 3] |= (uint8_t)(1u << (cs[k] & 7));
    }
    return g_bytes(g, set);
}

/* The JSON escapes of a character that must (or may) be escaped inside a JSON string. */
static int json_escape_node(g_builder *g, uint32_t cp) {
    const char *short_esc = NULL;
    switch (cp) {
    case '"': short_esc = "\\\""; break;
    case '\\': short_esc = "\\\\"; break;
    case '\b': short_esc = "\\b"; break;
    case '\f': short_esc = "\\f"; break;
    case '\n': short_esc = "\\n"; break;
    case '\r': short_esc = "\\r"; break;
    case '\t': short_esc = "\\t"; break;
    case '/': return g_alt2(g, g_lits(g, "/"), g_lits(g, "\\/"));
    }
    if (short_esc) return g_lits(g, short_esc);
    /* \u00XX */
    int k[6] = {g_lits(g, "\\u"), g_lits(g, "0"), g_lits(g, "0"), hex_digit_node(g, (int)(cp >> 4), (int)(cp >> 4)),
                hex_digit_node(g, (int)(cp & 15), (int)(cp & 15))};
    return g_seq(g, k, 5);
}

/* A code-point set as grammar: raw UTF-8, or in JSON mode with the escapes JSON requires. */
int di_cp_class_node(g_builder *g, const uint32_t *ranges, int n_ranges, bool json) {
    if (!json) return g_utf8_class(g, ranges, n_ranges);
    cp_set c = {0}, plain = {0};
    for (int i = 0; i < n_ranges; i++) cs_add(&c, ranges[2 * i], ranges[2 * i + 1]);
    cs_normalize(&c);
    g_ivec alts = {0};
    /* plain = c minus controls, '"', '\\', '/' */
    static const uint32_t specials[][2] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}, {'/', '/'}};
    cp_set sp = {0};
    for (int i = 0; i < 4; i++) cs_add(&sp, specials[i][0], specials[i][1]);
    cs_negate(&sp);
    for (int i = 0; i < c.r.n; i += 2)
        for (int j = 0; j < sp.r.n; j += 2) {
            int lo = c.r.v[i] > sp.r.v[j] ? c.r.v[i] : sp.r.v[j];
            int hi = c.r.v[i + 1] < sp.r.v[j + 1] ? c.r.v[i + 1] : sp.r.v[j + 1];
            if (lo <= hi) cs_add(&plain, (uint32_t)lo, (uint32_t)hi);
        }
    if (plain.r.n) {
        uint32_t *u = di_xmalloc((size_t)plain.r.n * sizeof(uint32_t));
        for (int i = 0; i < plain.r.n; i++) u[i] = (uint32_t)plain.r.v[i];
        g_ivec_push(&alts, g_utf8_class(g, u, plain.r.n / 2));
        free(u);
    }
    for (uint32_t cp = 0; cp < 0x20; cp++)
        if (cs_has(&c, cp)) g_ivec_push(&alts, json_escape_node(g, cp));
    if (cs_has(&c, '"')) g_ivec_push(&alts, json_escape_node(g, '"'));
    if (cs_has(&c, '\\')) g_ivec_push(&alts, json_escape_node(g, '\\'));
    if (cs_has(&c, '/')) g_ivec_push(&alts, json_escape_node(g, '/'));
    int r = g_alt(g, alts.v, alts.n);
    g_ivec_free(&alts);
    g_ivec_free(&c.r);
    g_ivec_free(&plain.r);
    g_ivec_free(&sp.r);
    return r;
}

static int cs_node(re_parser *p, cp_set *c) {
    cs_normalize(c);
    uint32_t *u = di_xmalloc((size_t)(c->r.n + 2) * sizeof(uint32_t));
    for (int i = 0; i < c->r.n; i++) u[i] = (uint32_t)c->r.v[i];
    int r = di_cp_class_node(p->g, u, c->r.n / 2, p->json);
    free(u);
    return r;
}

static int fail(re_parser *p, di_status st, const char *fmt, const char *what) {
    if (!p->st) {
        if (st == DI_EUNSUPPORTED) p->st = di_errf(p->err, st, "unsupported: regex %s", what);
        else p->st = di_errf(p->err, st, "regex: %s at offset %zu", fmt, p->i);
    }
    return -1;
}

/* Decodes one UTF-8 code point at p->i (the input is validated UTF-8). */
static uint32_t next_cp(re_parser *p) {
    uint32_t c;
    p->i += (size_t)g_utf8_decode((const uint8_t *)p->s + p->i, p->n - p->i, &c);
    return c;
}

static bool read_hex(re_parser *p, int digits, uint32_t *out) {
    uint32_t v = 0;
    for (int k = 0; k < digits; k++) {
        if (p->i >= p->n || g_hex_value(p->s[p->i]) < 0) return false;
        v = v * 16 + (uint32_t)g_hex_value(p->s[p->i++]);
    }
    *out = v;
    return true;
}

/* Class escapes. Python (Unicode) and ECMAScript disagree on \d \w \s, so a match must hold for
 * both: in a positive position an escape takes the narrow set (what both engines include), inside
 * a negated class the wide one (anything either includes), so the complement is again narrow.
 *   narrow: \d [0-9]   \w [A-Za-z0-9_]   \s whitespace in both   \D \W \S: complements of wide
 *   wide:   \d [0-9] + non-ASCII   \w [A-Za-z0-9_] + non-ASCII   \s whitespace in either
 * (non-ASCII stands in for Unicode digits / word characters: no tables needed, still exact-safe). */
static void add_ws(cp_set *c, bool wide) {
    cs_add(c, 9, 13); cs_add(c, ' ', ' '); cs_add(c, 0xA0, 0xA0); cs_add(c, 0x1680, 0x1680);
    cs_add(c, 0x2000, 0x200A); cs_add(c, 0x2028, 0x2029); cs_add(c, 0x202F, 0x202F);
    cs_add(c, 0x205F, 0x205F); cs_add(c, 0x3000, 0x3000);
    if (wide) { cs_add(c, 0x1C, 0x1F); cs_add(c, 0x85, 0x85); cs_add(c, 0xFEFF, 0xFEFF); }
}

static void add_class_escape(cp_set *c, char e, bool wide) {
    cp_set t = {0};
    switch (e) {
    case 'd': cs_add(c, '0', '9'); if (wide) cs_add(c, 0x80, 0x10FFFF); return;
    case 'w':
        cs_add(c, '0', '9'); cs_add(c, 'A', 'Z'); cs_add(c, 'a', 'z'); cs_add(c, '_', '_');
        if (wide) cs_add(c, 0x80, 0x10FFFF);
        return;
    case 's': add_ws(c, wide); return;
    case 'D': case 'W': add_class_escape(&t, (char)(e + 32), !wide); break;
    case 'S': add_ws(&t, !wide); break;
    }
    cs_negate(&t);
    for (int i = 0; i < t.r.n; i++) g_ivec_push(&c->r, t.r.v[i]);
    g_ivec_free(&t.r);
}

/* An escape after '\'. Sets *cp for a single character, or fills c for a class escape; returns
 * 1 = character, 2 = class, -1 = error. in_class: \b is backspace. */
static int parse_escape(re_parser *p, bool in_class, bool wide, uint32_t *cp, cp_set *c) {
    if (p->i >= p->n) return fail(p, DI_EINVAL, "trailing backslash", NULL);
    char e = p->s[p->i++];
    switch (e) {
    case 'd': case 'D': case 'w': case 'W': case 's': case 'S': add_class_escape(c, e, wide); return 2;
    case 'n': *cp = '\n'; return 1;
    case 'r': *cp = '\r'; return 1;
    case 't': *cp = '\t'; return 1;
    case 'f': *cp = '\f'; return 1;
    case 'v': *cp = '\v'; return 1;
    case '0':
        if (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') return fail(p, DI_EUNSUPPORTED, "", "octal escape");
        *cp = 0;
        return 1;
    case 'x':
        if (!read_hex(p, 2, cp)) return fail(p, DI_EINVAL, "bad \\x escape", NULL);
        return 1;
    case 'u':
        if (p->i < p->n && p->s[p->i] == '{') {
            p->i++;
            uint32_t v = 0;
            int nd = 0;
            while (p->i < p->n && g_hex_value(p->s[p->i]) >= 0 && nd < 7) v = v * 16 + (uint32_t)g_hex_value(p->s[p->i++]), nd++;
            if (!nd || p->i >= p->n || p->s[p->i] != '}' || v > 0x10FFFF) return fail(p, DI_EINVAL, "bad \\u{} escape", NULL);
            p->i++;
            *cp = v;
            return 1;
        }
        if (!read_hex(p, 4, cp)) return fail(p, DI_EINVAL, "bad \\u escape", NULL);
        if (*cp >= 0xD800 && *cp <= 0xDBFF && p->i + 6 <= p->n && p->s[p->i] == '\\' && p->s[p->i + 1] == 'u') {
            size_t save = p->i;
            uint32_t lo;
            p->i += 2;
            if (read_hex(p, 4, &lo) && lo >= 0xDC00 && lo <= 0xDFFF) {
                *cp = 0x10000 + ((*cp - 0xD800) << 10) + (lo - 0xDC00);
                return 1;
            }
            p->i = save;
        }
        if (*cp >= 0xD800 && *cp <= 0xDFFF) return fail(p, DI_EUNSUPPORTED, "", "lone surrogate escape");
        return 1;
    case 'b':
        if (in_class) { *cp = '\b'; return 1; }
        return fail(p, DI_EUNSUPPORTED, "", "word boundary \\b");
    case 'B': return fail(p, DI_EUNSUPPORTED, "", "word boundary \\B");
    case 'A': case 'Z': case 'z': case 'G': return fail(p, DI_EUNSUPPORTED, "", "anchor escape");
    case 'p': case 'P': return fail(p, DI_EUNSUPPORTED, "", "Unicode property \\p");
    case 'k': return fail(p, DI_EUNSUPPORTED, "", "backreference");
    case 'c': return fail(p, DI_EUNSUPPORTED, "", "control escape \\c");
    }
    if (e >= '1' && e <= '9') return fail(p, DI_EUNSUPPORTED, "", "backreference");
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) return fail(p, DI_EUNSUPPORTED, "", "unknown letter escape");
    p->i--;
    *cp = next_cp(p);
    return 1;
}

static int parse_class(re_parser *p) {
    /* p->i is after '[' */
    cp_set c = {0};
    bool neg = false;
    if (p->i < p->n && p->s[p->i] == '^') neg = true, p->i++;
    bool first = true;
    for (;;) {
        if (p->i >= p->n) { g_ivec_free(&c.r); return fail(p, DI_EINVAL, "unterminated character class", NULL); }
        if (p->s[p->i] == ']' && !first) { p->i++; break; }
        if (p->s[p->i] == ']' && first) {
            /* "[]" is an empty class in ECMAScript but "]" literal in Python: refuse the ambiguity */
            g_ivec_free(&c.r);
            return fail(p, DI_EUNSUPPORTED, "", "empty or ']'-first character class");
        }
        first = false;
        uint32_t lo;
        int k;
        if (p->s[p->i] == '\\') {
            p->i++;
            k = parse_escape(p, true, neg, &lo, &c);
            if (k < 0) { g_ivec_free(&c.r); return -1; }
            if (k == 2) continue;
        } else {
            if (p->s[p->i] == '[' && p->i + 1 < p->n && (p->s[p->i + 1] == ':' || p->s[p->i + 1] == '=' || p->s[p->i + 1] == '.')) {
                g_ivec_free(&c.r);
                return fail(p, DI_EUNSUPPORTED, "", "POSIX class or nested set");
            }
            if (p->s[p->i] == '&' && p->i + 1 < p->n && p->s[p->i + 1] == '&') {
                g_ivec_free(&c.r);
                return fail(p, DI_EUNSUPPORTED, "", "set operation &&");
            }
            lo = next_cp(p);
        }
        uint32_t hi = lo;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            if (p->s[p->i] == '\\') {
                p->i++;
                cp_set dummy = {0};
                k = parse_escape(p, true, neg, &hi, &dummy);
                g_ivec_free(&dummy.r);
                if (k < 0) { g_ivec_free(&c.r); return -1; }
                if (k == 2) { g_ivec_free(&c.r); return fail(p, DI_EUNSUPPORTED, "", "class escape as range end"); }
            } else {
                hi = next_cp(p);
            }
            if (hi < lo) { g_ivec_free(&c.r); return fail(p, DI_EINVAL, "range out of order in character class", NULL); }
        }
        cs_add(&c, lo, hi);
    }
    if (neg) cs_negate(&c);
    int r = cs_node(p, &c);
    g_ivec_free(&c.r);
    return r;
}

static int parse_alt(re_parser *p, bool top);

static bool parse_int(re_parser *p, int *out) {
    size_t st = p->i;
    long v = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        v = v * 10 + (p->s[p->i++] - '0');
        if (v > 1000000) v = 1000000;
    }
    *out = (int)v;
    return p->i > st;
}

/* Quantifier after an atom; returns the quantified node. */
static int parse_quant(re_parser *p, int atom) {
    while (p->i < p->n && !p->st) {
        char c = p->s[p->i];
        int mn, mx;
        if (c == '*') mn = 0, mx = -1, p->i++;
        else if (c == '+') mn = 1, mx = -1, p->i++;
        else if (c == '?') mn = 0, mx = 1, p->i++;
        else if (c == '{') {
            size_t save = p->i;
            p->i++;
            if (p->i < p->n && p->s[p->i] == ',') return fail(p, DI_EUNSUPPORTED, "", "'{,n}' (a quantifier in Python, literal text in ECMAScript)");
            if (!parse_int(p, &mn)) { p->i = save; return atom; } /* literal '{' */
            mx = mn;
            if (p->i < p->n && p->s[p->i] == ',') {
                p->i++;
                if (!parse_int(p, &mx)) mx = -1;
            }
            if (p->i >= p->n || p->s[p->i] != '}') { p->i = save; return atom; }
            p->i++;
            if (mx >= 0 && mx < mn) return fail(p, DI_EINVAL, "quantifier {m,n} with n < m", NULL);
            if (mn > RE_MAX_REPEAT || mx > RE_MAX_REPEAT) return fail(p, DI_EUNSUPPORTED, "", "repetition count above 10000");
        } else {
            return atom;
        }
        if (p->i < p->n && p->s[p->i] == '?') p->i++; /* lazy: same language */
        else if (p->i < p->n && p->s[p->i] == '+') return fail(p, DI_EUNSUPPORTED, "", "possessive quantifier");
        atom = g_repeat(p->g, atom, mn, mx);
        if (p->i < p->n && (p->s[p->i] == '*' || p->s[p->i] == '+' || p->s[p->i] == '?' || p->s[p->i] == '{')) {
            /* a{2}* style stacking is legal in Python; keep applying */
            continue;
        }
        return atom;
    }
    return atom;
}

/* Any character: in JSON mode every character; for a `.`, not \n \r U+2028 U+2029. */
static int any_char(re_parser *p, bool dot) {
    cp_set c = {0};
    if (dot) {
        cs_add(&c, '\n', '\n');
        cs_add(&c, '\r', '\r');
        cs_add(&c, 0x2028, 0x2029);
        cs_negate(&c);
    } else {
        cs_add(&c, 0, 0x10FFFF);
    }
    int r = cs_node(p, &c);
    g_ivec_free(&c.r);
    return r;
}

static int parse_seq(re_parser *p, bool top) {
    g_ivec items = {0};
    bool anchored_start = false, anchored_end = false;
    while (p->i < p->n && !p->st) {
        char c = p->s[p->i];
        if (c == '|' || c == ')') break;
        if (anchored_end) { fail(p, DI_EUNSUPPORTED, "", "'$' before the end of the pattern"); break; }
        int atom;
        if (c == '^') {
            p->i++;
            if (!top || items.n || anchored_start) { fail(p, DI_EUNSUPPORTED, "", "'^' inside the pattern"); break; }
            anchored_start = true;
            continue;
        }
        if (c == '$') {
            p->i++;
            if (!top) { fail(p, DI_EUNSUPPORTED, "", "'$' inside a group"); break; }
            anchored_end = true;
            continue;
        }
        if (c == '(') {
            p->i++;
            if (p->i < p->n && p->s[p->i] == '?') {
                p->i++;
                if (p->i < p->n && p->s[p->i] == ':') p->i++;
                else if (p->i < p->n && (p->s[p->i] == '<' || p->s[p->i] == 'P') &&
                         !(p->s[p->i] == '<' && p->i + 1 < p->n && (p->s[p->i + 1] == '=' || p->s[p->i + 1] == '!'))) {
                    if (p->s[p->i] == 'P') p->i++;
                    if (p->i >= p->n || p->s[p->i] != '<') { fail(p, DI_EUNSUPPORTED, "", "(?P...) construct"); break; }
                    while (p->i < p->n && p->s[p->i] != '>') p->i++;
                    if (p->i >= p->n) { fail(p, DI_EINVAL, "unterminated group name", NULL); break; }
                    p->i++;
                } else if (p->i < p->n && (p->s[p->i] == '=' || p->s[p->i] == '!' || p->s[p->i] == '<')) {
                    fail(p, DI_EUNSUPPORTED, "", "lookaround");
                    break;
                } else {
                    fail(p, DI_EUNSUPPORTED, "", "inline flags or (?...) group");
                    break;
                }
            }
            if (++p->depth > 200) { fail(p, DI_EUNSUPPORTED, "", "nesting deeper than 200"); break; }
            atom = parse_alt(p, false);
            p->depth--;
            if (p->st) break;
            if (p->i >= p->n || p->s[p->i] != ')') { fail(p, DI_EINVAL, "missing ')'", NULL); break; }
            p->i++;
        } else if (c == '[') {
            p->i++;
            atom = parse_class(p);
        } else if (c == '.') {
            p->i++;
            atom = any_char(p, true);
        } else if (c == '\\') {
            p->i++;
            uint32_t cp;
            cp_set cs = {0};
            int k = parse_escape(p, false, false, &cp, &cs);
            if (k == 1) cs_add(&cs, cp, cp);
            atom = k < 0 ? -1 : cs_node(p, &cs);
            g_ivec_free(&cs.r);
        } else if (c == '*' || c == '+' || c == '?') {
            fail(p, DI_EINVAL, "nothing to repeat", NULL);
            break;
        } else {
            uint32_t cp = next_cp(p);
            cp_set cs = {0};
            cs_add(&cs, cp, cp);
            atom = cs_node(p, &cs);
            g_ivec_free(&cs.r);
        }
        if (p->st) break;
        atom = parse_quant(p, atom);
        if (p->st) break;
        g_ivec_push(&items, atom);
    }
    int body = p->st ? -1 : g_seq(p->g, items.v, items.n);
    g_ivec_free(&items);
    if (p->st) return -1;
    if (top && p->json) { /* search semantics */
        if (!anchored_start) body = g_seq2(p->g, g_star(p->g, any_char(p, false)), body);
        if (!anchored_end) body = g_seq2(p->g, body, g_star(p->g, any_char(p, false)));
    }
    return body;
}

static int parse_alt(re_parser *p, bool top) {
    g_ivec alts = {0};
    for (;;) {
        int s = parse_seq(p, top);
        if (p->st) break;
        g_ivec_push(&alts, s);
        if (p->i < p->n && p->s[p->i] == '|') { p->i++; continue; }
        break;
    }
    int r = p->st ? -1 : g_alt(p->g, alts.v, alts.n);
    g_ivec_free(&alts);
    return r;
}

/* Builds the expression of a regex; returns the node (not a rule). */
di_status di_regex_node(g_builder *g, const char *re, size_t len, bool json_string, int *node, di_err *err) {
    size_t bad;
    if (!di_utf8_valid(re, len, &bad)) return di_errf(err, DI_EINVAL, "regex: invalid UTF-8 at byte %zu", bad);
    re_parser p = {.g = g, .s = re, .n = len, .json = json_string, .err = err};
    int r = parse_alt(&p, true);
    if (p.st) return p.st;
    if (p.i < p.n) return di_errf(err, DI_EINVAL, "regex: unbalanced ')' at offset %zu", p.i);
    *node = r;
    return DI_OK;
}

di_status di_regex_build(g_builder *g, const char *re, size_t len, bool json_string, int *root, di_err *err) {
    int node;
    di_status st = di_regex_node(g, re, len, json_string, &node, err);
    if (st) return st;
    *root = g_rule_new(g, "regex");
    g_rule_set(g, *root, node);
    return DI_OK;
}
