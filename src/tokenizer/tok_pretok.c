/* Pre-tokenizer regexes: HF `tokenizers` compiles Split patterns with Oniguruma; we use PCRE2 (UTF
 * and Unicode properties, JIT when available). The two engines agree on everything these patterns
 * use (alternation order, greedy repeats with backtracking, lookahead, \p{L}/\p{N}/\p{P}/\p{S}/\p{M},
 * literal ranges) except `\s`: in Oniguruma over UTF-8 it is Unicode White_Space, which includes
 * U+0085 (NEL); PCRE2's `\s` under UCP does not. So `\s` and `\S` are rewritten into an explicit
 * White_Space class before compiling. Second, the Unicode tables: HF's Oniguruma knows code points
 * assigned after Unicode 14.0 (PCRE2 10.42's tables), so `\p{L}` `\p{M}` `\p{N}` `\p{P}` `\p{S}` get the
 * ranges of tok_unicode_patch.h (generated from HF itself) added. Constructs whose meaning differs and that we do not rewrite
 * (`\h`, class intersection `&&`, nested classes) are refused rather than silently mismatched. */
#include <stdio.h>
#include <string.h>

#include "tokenizer/tok_internal.h"
#include "tokenizer/tok_unicode_patch.h"

/* Unicode White_Space (PropList.txt), stable since Unicode 6.3. */
#define WS_RANGES "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

typedef struct {
    char *s;
    size_t len, cap;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->s = di_xrealloc(b->s, b->cap);
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static void sb_puts(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* The patch ranges of a one-letter general category, or NULL. */
static const di_cp_range *patch_for(char cls, size_t *n) {
    switch (cls) {
    case 'L': return *n = DI_PATCH_L_N, di_patch_L;
    case 'M': return *n = DI_PATCH_M_N, di_patch_M;
    case 'N': return *n = DI_PATCH_N_N, di_patch_N;
    case 'P': return *n = DI_PATCH_P_N, di_patch_P;
    case 'S': return *n = DI_PATCH_S_N, di_patch_S;
    default: return *n = 0, NULL;
    }
}

/* Writes \p{X} (or \P{X}) with the patch ranges of X; `in_class` says whether we are inside [...].
 * Returns false if the construct cannot be expressed (a negated patched class inside a class). */
static bool put_property(sbuf *out, bool negated, char cls, bool in_class) {
    size_t n;
    const di_cp_range *r = patch_for(cls, &n);
    char tmp[48];
    snprintf(tmp, sizeof tmp, "\\%c{%c}", negated ? 'P' : 'p', cls);
    if (!n) {
        sb_puts(out, tmp);
        return true;
    }
    if (in_class && negated) return false;
    if (!in_class) sb_puts(out, negated ? "[^" : "[");
    snprintf(tmp, sizeof tmp, "\\p{%c}", cls);
    sb_puts(out, tmp);
    for (size_t i = 0; i < n; i++) {
        snprintf(tmp, sizeof tmp, "\\x{%X}-\\x{%X}", r[i].lo, r[i].hi);
        sb_puts(out, tmp);
    }
    if (!in_class) sb_puts(out, "]");
    return true;
}

/* Rewrites an Oniguruma pattern for PCRE2 (see the file comment). */
static di_status translate(const char *p, size_t n, sbuf *out, di_err *err) {
    bool in_class = false;
    size_t class_start = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '\\') {
            if (i + 1 >= n) return di_errf(err, DI_EFORMAT, "pattern ends with a lone backslash");
            char e = p[i + 1];
            if (e == 's' || e == 'S') {
                if (in_class && e == 'S')
                    return di_errf(err, DI_EUNSUPPORTED, "\\S inside a character class (offset %zu)", i);
                sb_puts(out, in_class ? WS_RANGES : e == 's' ? "[" WS_RANGES "]" : "[^" WS_RANGES "]");
            } else if ((e == 'p' || e == 'P') && i + 4 < n && p[i + 2] == '{' && p[i + 4] == '}') {
                if (!put_property(out, e == 'P', p[i + 3], in_class))
                    return di_errf(err, DI_EUNSUPPORTED, "\\P{%c} inside a character class (offset %zu)", p[i + 3], i);
                i += 3; /* with the i++ below: skips \p{X} */
            } else if (e == 'h' || e == 'H') {
                return di_errf(err, DI_EUNSUPPORTED, "\\%c means a hex digit in Oniguruma (offset %zu)", e, i);
            } else {
                sb_put(out, p + i, 2);
            }
            i++;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            class_start = i;
        } else if (in_class && c == ']') {
            bool first = i == class_start + 1 || (i == class_start + 2 && p[class_start + 1] == '^');
            if (!first) in_class = false;
        } else if (in_class && c == '[' && !(i + 1 < n && p[i + 1] == ':')) {
            return di_errf(err, DI_EUNSUPPORTED, "nested character class (offset %zu)", i);
        } else if (in_class && c == '&' && i + 1 < n && p[i + 1] == '&') {
            return di_errf(err, DI_EUNSUPPORTED, "class intersection && (offset %zu)", i);
        }
        sb_put(out, &c, 1);
    }
    if (in_class) return di_errf(err, DI_EFORMAT, "unterminated character class");
    return DI_OK;
}

di_status di_tok_compile_split(di_tokenizer *t, const char *pattern, size_t len, di_err *err) {
    sbuf b = {0};
    sb_put(&b, "", 0);
    if (translate(pattern, len, &b, err)) {
        free(b.s);
        return err->status;
    }
    int code;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)b.s, b.len, PCRE2_UTF | PCRE2_UCP, &code, &off, NULL);
    free(b.s);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return di_errf(err, DI_EFORMAT, "PCRE2 cannot compile it: %s (offset %zu of the rewritten pattern)",
                       (const char *)msg, (size_t)off);
    }
    t->split_jit[t->n_splits] = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
    t->split_re[t->n_splits++] = re;
    return DI_OK;
}
