/* JSON reading (lexeme-preserving) and Python-style writing; see json_lite.h.
 *
 * The reader is a plain recursive-descent parser over RFC 8259 with a depth limit; it validates
 * UTF-8 and \u escapes (a lone surrogate is an error, as in serde_json). The writer reproduces
 * DeepSeek's encoder (`stringify_python_style`: serde_json with spaced separators and Python float
 * repr). */
#include "tokenizer/json_lite.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"

#define MAX_DEPTH 256

void di_sbuf_put(di_sbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 256;
        while (c < b->len + n + 1) c *= 2;
        b->s = di_xrealloc(b->s, c);
        b->cap = c;
    }
    if (n) memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

void di_sbuf_puts(di_sbuf *b, const char *s) { di_sbuf_put(b, s, strlen(s)); }

void di_sbuf_free(di_sbuf *b) {
    free(b->s);
    memset(b, 0, sizeof *b);
}

typedef struct parser {
    const char *s;
    size_t n, i;
    di_err *err;
} parser;

static void skip_ws(parser *p) {
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' || p->s[p->i] == '\r'))
        p->i++;
}

static di_status fail(parser *p, const char *what) {
    return di_errf(p->err, DI_EINVAL, "JSON: %s at byte %zu", what, p->i);
}

static void put_utf8(di_sbuf *b, uint32_t cp) {
    char u[4];
    size_t n;
    if (cp < 0x80) u[0] = (char)cp, n = 1;
    else if (cp < 0x800) u[0] = (char)(0xC0 | (cp >> 6)), u[1] = (char)(0x80 | (cp & 0x3F)), n = 2;
    else if (cp < 0x10000)
        u[0] = (char)(0xE0 | (cp >> 12)), u[1] = (char)(0x80 | ((cp >> 6) & 0x3F)), u[2] = (char)(0x80 | (cp & 0x3F)), n = 3;
    else
        u[0] = (char)(0xF0 | (cp >> 18)), u[1] = (char)(0x80 | ((cp >> 12) & 0x3F)),
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), u[3] = (char)(0x80 | (cp & 0x3F)), n = 4;
    di_sbuf_put(b, u, n);
}

static bool hex4(parser *p, uint32_t *v) {
    if (p->i + 4 > p->n) return false;
    *v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p->s[p->i++];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return false;
        *v = *v * 16 + (uint32_t)d;
    }
    return true;
}

static di_status parse_escape(parser *p, di_sbuf *b) {
    char c = p->s[p->i++];
    const char *simple = strchr("\"\\/bfnrt", c);
    if (simple && c) {
        static const char map[] = {'"', '\\', '/', '\b', '\f', '\n', '\r', '\t'};
        di_sbuf_put(b, &map[simple - "\"\\/bfnrt"], 1);
        return DI_OK;
    }
    if (c != 'u') return fail(p, "invalid escape");
    uint32_t cp, lo;
    if (!hex4(p, &cp)) return fail(p, "invalid \\u escape");
    if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(p, "lone trailing surrogate in \\u escape");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (p->i + 2 > p->n || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u')
            return fail(p, "lone leading surrogate in \\u escape");
        p->i += 2;
        if (!hex4(p, &lo) || lo < 0xDC00 || lo > 0xDFFF) return fail(p, "invalid surrogate pair");
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    put_utf8(b, cp);
    return DI_OK;
}

static di_status parse_string(parser *p, char **out, size_t *out_len) {
    di_sbuf b = {0};
    di_sbuf_put(&b, "", 0);
    p->i++; /* opening quote */
    for (;;) {
        size_t run = p->i;
        while (p->i < p->n && p->s[p->i] != '"' && p->s[p->i] != '\\' && (uint8_t)p->s[p->i] >= 0x20) p->i++;
        size_t bad;
        if (!di_utf8_valid(p->s + run, p->i - run, &bad)) {
            p->i = run + bad;
            di_sbuf_free(&b);
            return fail(p, "invalid UTF-8 in a string");
        }
        di_sbuf_put(&b, p->s + run, p->i - run);
        if (p->i >= p->n) {
            di_sbuf_free(&b);
            return fail(p, "unterminated string");
        }
        char c = p->s[p->i];
        if (c == '"') break;
        if (c != '\\') {
            di_sbuf_free(&b);
            return fail(p, "control character in a string");
        }
        p->i++;
        if (p->i >= p->n || parse_escape(p, &b)) {
            di_sbuf_free(&b);
            return p->err && p->err->status ? p->err->status : fail(p, "unterminated escape");
        }
    }
    p->i++;
    *out = b.s;
    *out_len = b.len;
    return DI_OK;
}

static di_status parse_number(parser *p, di_json *v) {
    size_t st = p->i;
    if (p->i < p->n && p->s[p->i] == '-') p->i++;
    if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return fail(p, "invalid number");
    if (p->s[p->i] == '0') p->i++;
    else while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    if (p->i < p->n && p->s[p->i] == '.') {
        p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return fail(p, "invalid number");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-')) p->i++;
        if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9') return fail(p, "invalid number");
        while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    }
    v->type = DI_JSON_NUMBER;
    v->len = p->i - st;
    char tmp[64];
    if (v->len < sizeof tmp) { /* reject what serde_json rejects: out of range for f64 */
        memcpy(tmp, p->s + st, v->len);
        tmp[v->len] = 0;
        double d = strtod(tmp, NULL);
        if (d == HUGE_VAL || d == -HUGE_VAL) return fail(p, "number out of range");
    }
    v->str = di_xmalloc(v->len + 1);
    memcpy(v->str, p->s + st, v->len);
    v->str[v->len] = 0;
    return DI_OK;
}

static di_status parse_value(parser *p, di_json *v, int depth);

static di_status parse_container(parser *p, di_json *v, int depth, bool object) {
    v->type = object ? DI_JSON_OBJECT : DI_JSON_ARRAY;
    size_t cap = 0;
    p->i++;
    skip_ws(p);
    if (p->i < p->n && p->s[p->i] == (object ? '}' : ']')) {
        p->i++;
        return DI_OK;
    }
    for (;;) {
        if (v->n == cap) v->items = di_xrealloc(v->items, (cap = cap ? cap * 2 : 4) * sizeof *v->items);
        di_json *it = &v->items[v->n];
        memset(it, 0, sizeof *it);
        skip_ws(p);
        if (object) {
            if (p->i >= p->n || p->s[p->i] != '"') return fail(p, "expected a member name");
            if (parse_string(p, &it->key, &it->key_len)) return p->err->status;
            skip_ws(p);
            if (p->i >= p->n || p->s[p->i] != ':') {
                v->n++;
                return fail(p, "expected ':'");
            }
            p->i++;
        }
        v->n++;
        if (parse_value(p, it, depth + 1)) return p->err->status;
        skip_ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            continue;
        }
        if (p->i < p->n && p->s[p->i] == (object ? '}' : ']')) {
            p->i++;
            return DI_OK;
        }
        return fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static di_status parse_value(parser *p, di_json *v, int depth) {
    if (depth > MAX_DEPTH) return fail(p, "nesting too deep");
    skip_ws(p);
    if (p->i >= p->n) return fail(p, "unexpected end of input");
    char c = p->s[p->i];
    if (c == '{' || c == '[') return parse_container(p, v, depth, c == '{');
    if (c == '"') {
        v->type = DI_JSON_STRING;
        return parse_string(p, &v->str, &v->len);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(p, v);
    static const struct { const char *w; di_json_type t; } lits[] = {
        {"null", DI_JSON_NULL}, {"true", DI_JSON_TRUE}, {"false", DI_JSON_FALSE}};
    for (size_t k = 0; k < 3; k++) {
        size_t l = strlen(lits[k].w);
        if (p->n - p->i >= l && !memcmp(p->s + p->i, lits[k].w, l)) {
            p->i += l;
            v->type = lits[k].t;
            return DI_OK;
        }
    }
    return fail(p, "unexpected character");
}

di_status di_json_parse(const char *text, size_t len, di_json *out, di_err *err) {
    di_err local = {0};
    parser p = {text, len, 0, err ? err : &local};
    memset(out, 0, sizeof *out);
    di_status st = parse_value(&p, out, 0);
    if (!st) {
        skip_ws(&p);
        if (p.i < p.n) st = fail(&p, "trailing characters after the document");
    }
    if (st) di_json_free(out);
    return st;
}

void di_json_free(di_json *v) {
    for (size_t i = 0; i < v->n; i++) di_json_free(&v->items[i]);
    free(v->items);
    free(v->str);
    free(v->key);
    memset(v, 0, sizeof *v);
}

const di_json *di_json_get(const di_json *obj, const char *key) {
    if (!obj || obj->type != DI_JSON_OBJECT) return NULL;
    size_t kl = strlen(key);
    for (size_t i = obj->n; i-- > 0;)
        if (obj->items[i].key_len == kl && !memcmp(obj->items[i].key, key, kl)) return &obj->items[i];
    return NULL;
}

void di_json_write_string(const char *s, size_t len, di_sbuf *out) {
    static const char hex[] = "0123456789abcdef";
    di_sbuf_put(out, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < len; i++) {
        uint8_t c = (uint8_t)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        di_sbuf_put(out, s + run, i - run);
        run = i + 1;
        char e[6] = {'\\', 0};
        size_t n = 2;
        switch (c) {
        case '"': e[1] = '"'; break;
        case '\\': e[1] = '\\'; break;
        case '\b': e[1] = 'b'; break;
        case '\f': e[1] = 'f'; break;
        case '\n': e[1] = 'n'; break;
        case '\r': e[1] = 'r'; break;
        case '\t': e[1] = 't'; break;
        default: e[1] = 'u', e[2] = '0', e[3] = '0', e[4] = hex[c >> 4], e[5] = hex[c & 15], n = 6;
        }
        di_sbuf_put(out, e, n);
    }
    di_sbuf_put(out, s + run, len - run);
    di_sbuf_put(out, "\"", 1);
}

/* Python repr of a finite double: shortest round-trip digits; positional when the decimal exponent
 * is in [-4, 16), else d.ddde+XX. */
static void write_py_float(double x, di_sbuf *out) {
    char buf[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, x);
        if (strtod(buf, NULL) == x) break;
    }
    /* buf = [-]d[.ddd]e[+-]XX */
    const char *p = buf;
    bool neg = *p == '-';
    if (neg) p++;
    char digits[20];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    if (neg) di_sbuf_put(out, "-", 1);
    if (exp >= -4 && exp < 16) {
        if (exp >= 0) {
            for (int i = 0; i <= exp; i++) di_sbuf_put(out, i < nd ? &digits[i] : "0", 1);
            di_sbuf_put(out, ".", 1);
            if (nd > exp + 1) di_sbuf_put(out, digits + exp + 1, (size_t)(nd - exp - 1));
            else di_sbuf_put(out, "0", 1);
        } else {
            di_sbuf_put(out, "0.", 2);
            for (int i = 0; i < -exp - 1; i++) di_sbuf_put(out, "0", 1);
            di_sbuf_put(out, digits, (size_t)nd);
        }
    } else {
        di_sbuf_put(out, digits, 1);
        if (nd > 1) {
            di_sbuf_put(out, ".", 1);
            di_sbuf_put(out, digits + 1, (size_t)(nd - 1));
        }
        snprintf(buf, sizeof buf, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
        di_sbuf_puts(out, buf);
    }
}

/* An integer lexeme that fits i64/u64 is written as the integer; anything else as a float. */
static void write_py_number(const di_json *v, di_sbuf *out) {
    bool is_int = !strpbrk(v->str, ".eE");
    if (is_int) {
        errno = 0;
        char *end;
        if (v->str[0] == '-') {
            long long x = strtoll(v->str, &end, 10);
            if (!errno) {
                char b[32];
                snprintf(b, sizeof b, "%lld", x);
                di_sbuf_puts(out, b);
                return;
            }
        } else {
            unsigned long long x = strtoull(v->str, &end, 10);
            if (!errno) {
                char b[32];
                snprintf(b, sizeof b, "%llu", x);
                di_sbuf_puts(out, b);
                return;
            }
        }
    }
    write_py_float(strtod(v->str, NULL), out);
}

void di_json_write_py(const di_json *v, di_sbuf *out) {
    switch (v->type) {
    case DI_JSON_NULL: di_sbuf_puts(out, "null"); return;
    case DI_JSON_TRUE: di_sbuf_puts(out, "true"); return;
    case DI_JSON_FALSE: di_sbuf_puts(out, "false"); return;
    case DI_JSON_NUMBER: write_py_number(v, out); return;
    case DI_JSON_STRING: di_json_write_string(v->str, v->len, out); return;
    case DI_JSON_ARRAY:
        di_sbuf_put(out, "[", 1);
        for (size_t i = 0; i < v->n; i++) {
            if (i) di_sbuf_put(out, ", ", 2);
            di_json_write_py(&v->items[i], out);
        }
        di_sbuf_put(out, "]", 1);
        return;
    case DI_JSON_OBJECT: {
        di_sbuf_put(out, "{", 1);
        bool first = true;
        for (size_t i = 0; i < v->n; i++) {
            const di_json *m = &v->items[i];
            bool seen = false; /* a repeated name was written at its first position */
            for (size_t j = 0; j < i && !seen; j++)
                seen = v->items[j].key_len == m->key_len && !memcmp(v->items[j].key, m->key, m->key_len);
            if (seen) continue;
            const di_json *last = m;
            for (size_t j = i + 1; j < v->n; j++)
                if (v->items[j].key_len == m->key_len && !memcmp(v->items[j].key, m->key, m->key_len)) last = &v->items[j];
            if (!first) di_sbuf_put(out, ", ", 2);
            first = false;
            di_json_write_string(m->key, m->key_len, out);
            di_sbuf_put(out, ": ", 2);
            di_json_write_py(last, out);
        }
        di_sbuf_put(out, "}", 1);
        return;
    }
    }
}
