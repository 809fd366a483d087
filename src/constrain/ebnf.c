/* EBNF (GBNF / xgrammar syntax) -> grammar rules.
 *
 *   root ::= "{" ws pair ("," ws pair)* "}"      # the start rule is `root`
 *   pair ::= [a-z]+ ":" ( num | "null" )
 *   num  ::= "-"? [0-9]{1,10}
 *
 * Rules `name ::= body`; a rule ends where the next `name ::=` begins. Bodies: string literals
 * "..." (escapes \n \r \t \\ \" \' \[ \] \xHH \uHHHH \UHHHHHHHH), character classes [...] / [^...]
 * over code points, `.` (any character), rule names ([A-Za-z0-9_-]+, defined anywhere in the
 * file), groups ( ), alternation |, and postfix * + ? {m} {m,} {m,n}. Comments run from # to the
 * end of the line. Lookahead assertions and other xgrammar extensions are `unsupported:`. Left
 * recursion is refused when the grammar is built (grammar.c). */
#include "constrain/constrain.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct eb {
    g_builder *g;
    const char *s;
    size_t n, i;
    di_err *err;
    di_status st;
    int depth;
} eb;

static int eb_fail(eb *p, di_status st, const char *what) {
    if (!p->st) {
        if (st == DI_EUNSUPPORTED) p->st = di_errf(p->err, st, "unsupported: ebnf %s", what);
        else {
            int line = 1;
            for (size_t k = 0; k < p->i && k < p->n; k++) line += p->s[k] == '\n';
            p->st = di_errf(p->err, st, "ebnf: %s (line %d)", what, line);
        }
    }
    return -1;
}

static void skip_ws(eb *p) {
    while (p->i < p->n) {
        char c = p->s[p->i];
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') p->i++;
        else if (c == '#') {
            while (p->i < p->n && p->s[p->i] != '\n') p->i++;
        } else break;
    }
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
}

static size_t name_len(eb *p, size_t at) {
    size_t k = at;
    while (k < p->n && is_name_char(p->s[k]) && !(p->s[k] == '.' && k == at)) k++;
    return k - at;
}

/* Is there `name ::=` at position at? */
static bool rule_start_at(eb *p, size_t at) {
    size_t l = name_len(p, at);
    if (!l) return false;
    size_t k = at + l;
    while (k < p->n && (p->s[k] == ' ' || p->s[k] == '\t')) k++;
    return k + 3 <= p->n && !memcmp(p->s + k, "::=", 3);
}

static uint32_t next_cp(eb *p) {
    uint32_t c;
    p->i += (size_t)g_utf8_decode((const uint8_t *)p->s + p->i, p->n - p->i, &c);
    return c;
}

/* One possibly escaped character inside a literal or class. */
static bool read_char(eb *p, uint32_t *out) {
    if (p->i >= p->n) return false;
    if (p->s[p->i] != '\\') {
        *out = next_cp(p);
        return true;
    }
    p->i++;
    if (p->i >= p->n) return false;
    char e = p->s[p->i++];
    int digits = 0;
    switch (e) {
    case 'n': *out = '\n'; return true;
    case 'r': *out = '\r'; return true;
    case 't': *out = '\t'; return true;
    case 'f': *out = '\f'; return true;
    case 'v': *out = '\v'; return true;
    case '0': *out = 0; return true;
    case 'x': digits = 2; break;
    case 'u': digits = 4; break;
    case 'U': digits = 8; break;
    default: *out = (uint8_t)e; return true; /* \\ \" \' \[ \] \- \^ ... */
    }
    uint32_t v = 0;
    for (int k = 0; k < digits; k++) {
        if (p->i >= p->n || g_hex_value(p->s[p->i]) < 0) return false;
        v = v * 16 + (uint32_t)g_hex_value(p->s[p->i++]);
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return false;
    *out = v;
    return true;
}

static int parse_alt(eb *p);

static int parse_literal(eb *p, char q) {
    g_ivec bytes = {0};
    for (;;) {
        if (p->i >= p->n) { g_ivec_free(&bytes); return eb_fail(p, DI_EINVAL, "unterminated string literal"); }
        if (p->s[p->i] == q) { p->i++; break; }
        uint32_t cp;
        if (!read_char(p, &cp)) { g_ivec_free(&bytes); return eb_fail(p, DI_EINVAL, "bad escape in string literal"); }
        char buf[4];
        int l = g_utf8_encode(cp, buf);
        for (int k = 0; k < l; k++) g_ivec_push(&bytes, (uint8_t)buf[k]);
    }
    char *t = di_xmalloc((size_t)bytes.n + 1);
    for (int k = 0; k < bytes.n; k++) t[k] = (char)bytes.v[k];
    int r = g_lit(p->g, t, (size_t)bytes.n);
    free(t);
    g_ivec_free(&bytes);
    return r;
}

static int parse_class(eb *p) {
    bool neg = false;
    if (p->i < p->n && p->s[p->i] == '^') neg = true, p->i++;
    g_ivec r = {0};
    for (;;) {
        if (p->i >= p->n) { g_ivec_free(&r); return eb_fail(p, DI_EINVAL, "unterminated character class"); }
        if (p->s[p->i] == ']') { p->i++; break; }
        uint32_t lo, hi;
        if (!read_char(p, &lo)) { g_ivec_free(&r); return eb_fail(p, DI_EINVAL, "bad escape in character class"); }
        hi = lo;
        if (p->i + 1 < p->n && p->s[p->i] == '-' && p->s[p->i + 1] != ']') {
            p->i++;
            if (!read_char(p, &hi)) { g_ivec_free(&r); return eb_fail(p, DI_EINVAL, "bad escape in character class"); }
            if (hi < lo) { g_ivec_free(&r); return eb_fail(p, DI_EINVAL, "character range out of order"); }
        }
        g_ivec_push(&r, (int)lo);
        g_ivec_push(&r, (int)hi);
    }
    uint32_t *u = di_xmalloc((size_t)(r.n + 4) * sizeof(uint32_t));
    int nr = 0;
    if (neg) {
        /* complement over [0, 0x10FFFF] */
        int m = r.n / 2;
        for (int a = 0; a < m; a++) /* sort by lo */
            for (int b = a + 1; b < m; b++)
                if (r.v[2 * b] < r.v[2 * a]) {
                    int t0 = r.v[2 * a], t1 = r.v[2 * a + 1];
                    r.v[2 * a] = r.v[2 * b], r.v[2 * a + 1] = r.v[2 * b + 1];
                    r.v[2 * b] = t0, r.v[2 * b + 1] = t1;
                }
        u = di_xrealloc(u, (size_t)(r.n + 4) * sizeof(uint32_t));
        int64_t prev = 0;
        for (int a = 0; a < m; a++) {
            if (r.v[2 * a] > prev) u[2 * nr] = (uint32_t)prev, u[2 * nr + 1] = (uint32_t)r.v[2 * a] - 1, nr++;
            if (r.v[2 * a + 1] + 1 > prev) prev = r.v[2 * a + 1] + 1;
        }
        if (prev <= 0x10FFFF) u[2 * nr] = (uint32_t)prev, u[2 * nr + 1] = 0x10FFFF, nr++;
    } else {
        for (int k = 0; k < r.n; k++) u[k] = (uint32_t)r.v[k];
        nr = r.n / 2;
    }
    int res = g_utf8_class(p->g, u, nr);
    free(u);
    g_ivec_free(&r);
    return res;
}

static bool parse_uint(eb *p, int *out) {
    size_t st = p->i;
    long v = 0;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
        v = v * 10 + (p->s[p->i++] - '0');
        if (v > 100000) v = 100000;
    }
    *out = (int)v;
    return p->i > st;
}

static int parse_atom(eb *p) {
    char c = p->s[p->i];
    if (c == '"' || c == '\'') { p->i++; return parse_literal(p, c); }
    if (c == '[') { p->i++; return parse_class(p); }
    if (c == '.') {
        p->i++;
        uint32_t all[] = {0, 0x10FFFF};
        return g_utf8_class(p->g, all, 1);
    }
    if (c == '(') {
        p->i++;
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] == '=') return eb_fail(p, DI_EUNSUPPORTED, "lookahead assertion");
        if (++p->depth > 200) return eb_fail(p, DI_EUNSUPPORTED, "nesting deeper than 200");
        int r = parse_alt(p);
        p->depth--;
        if (p->st) return -1;
        skip_ws(p);
        if (p->i >= p->n || p->s[p->i] != ')') return eb_fail(p, DI_EINVAL, "missing ')'");
        p->i++;
        return r;
    }
    size_t l = name_len(p, p->i);
    if (l) {
        char name[256];
        if (l >= sizeof name) return eb_fail(p, DI_EINVAL, "rule name too long");
        memcpy(name, p->s + p->i, l);
        name[l] = 0;
        p->i += l;
        int rule = g_rule_find(p->g, name);
        if (rule < 0) rule = g_rule_new(p->g, name);
        return g_ref(p->g, rule);
    }
    return eb_fail(p, DI_EINVAL, "unexpected character");
}

static int parse_seq(eb *p) {
    g_ivec items = {0};
    for (;;) {
        skip_ws(p);
        if (p->i >= p->n || p->st) break;
        char c = p->s[p->i];
        if (c == '|' || c == ')') break;
        if (rule_start_at(p, p->i)) break;
        int a = parse_atom(p);
        if (p->st) break;
        for (;;) { /* postfix operators (no whitespace before them) */
            if (p->i >= p->n) break;
            char q = p->s[p->i];
            if (q == '*') a = g_star(p->g, a), p->i++;
            else if (q == '+') a = g_repeat(p->g, a, 1, -1), p->i++;
            else if (q == '?') a = g_opt(p->g, a), p->i++;
            else if (q == '{') {
                p->i++;
                int mn, mx;
                skip_ws(p);
                if (!parse_uint(p, &mn)) { eb_fail(p, DI_EINVAL, "bad {m,n} repetition"); break; }
                skip_ws(p);
                mx = mn;
                if (p->i < p->n && p->s[p->i] == ',') {
                    p->i++;
                    skip_ws(p);
                    if (!parse_uint(p, &mx)) mx = -1;
                    skip_ws(p);
                }
                if (p->i >= p->n || p->s[p->i] != '}') { eb_fail(p, DI_EINVAL, "bad {m,n} repetition"); break; }
                p->i++;
                if (mx >= 0 && mx < mn) { eb_fail(p, DI_EINVAL, "repetition {m,n} with n < m"); break; }
                if (mn > 10000 || mx > 10000) { eb_fail(p, DI_EUNSUPPORTED, "repetition count above 10000"); break; }
                a = g_repeat(p->g, a, mn, mx);
            } else break;
        }
        if (p->st) break;
        g_ivec_push(&items, a);
    }
    int r = p->st ? -1 : g_seq(p->g, items.v, items.n);
    g_ivec_free(&items);
    return r;
}

static int parse_alt(eb *p) {
    g_ivec alts = {0};
    for (;;) {
        int s = parse_seq(p);
        if (p->st) break;
        g_ivec_push(&alts, s);
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] == '|') { p->i++; continue; }
        break;
    }
    int r = p->st ? -1 : g_alt(p->g, alts.v, alts.n);
    g_ivec_free(&alts);
    return r;
}

di_status di_ebnf_build(g_builder *g, const char *src, size_t len, int *root, di_err *err) {
    size_t bad;
    if (!di_utf8_valid(src, len, &bad)) return di_errf(err, DI_EINVAL, "ebnf: invalid UTF-8 at byte %zu", bad);
    eb p = {.g = g, .s = src, .n = len, .err = err};
    int first = g->n_rules;
    uint8_t *defined = NULL;
    for (;;) {
        skip_ws(&p);
        if (p.i >= p.n) break;
        if (!rule_start_at(&p, p.i)) return eb_fail(&p, DI_EINVAL, "expected `name ::=`"), p.st;
        size_t l = name_len(&p, p.i);
        char name[256];
        if (l >= sizeof name) return eb_fail(&p, DI_EINVAL, "rule name too long"), p.st;
        memcpy(name, p.s + p.i, l);
        name[l] = 0;
        p.i += l;
        while (p.s[p.i] != ':') p.i++;
        p.i += 3;
        int rule = g_rule_find(g, name);
        if (rule < 0) rule = g_rule_new(g, name);
        if (g->rule_body[rule] >= 0) {
            char msg[300];
            snprintf(msg, sizeof msg, "rule '%s' defined twice", name);
            return eb_fail(&p, DI_EINVAL, msg), p.st;
        }
        int body = parse_alt(&p);
        if (p.st) return p.st;
        skip_ws(&p);
        if (p.i < p.n && !rule_start_at(&p, p.i)) return eb_fail(&p, DI_EINVAL, "unexpected character"), p.st;
        g_rule_set(g, rule, body);
    }
    (void)first;
    (void)defined;
    int r = g_rule_find(g, "root");
    if (r < 0 || g->rule_body[r] < 0) return di_errf(err, DI_EINVAL, "ebnf: no rule 'root'");
    *root = r;
    return DI_OK;
}
