/* Encoding: text -> ids, in HF's order of stages.
 *
 * 1. Added tokens (only when allow_special): the text is scanned for non-normalized added tokens,
 *    then each gap for normalized ones (HF's two Aho-Corasick passes; with no normalizer the second
 *    pass sees the same bytes). Matches are leftmost-longest and non-overlapping; lstrip / rstrip /
 *    single_word adjust or veto a match exactly as HF's `AddedVocabulary::find_matches`.
 * 2. Each remaining gap goes through the Split regexes in order; every piece produced by step k is
 *    split by step k+1 on its own (so a lookahead never sees past its piece), and gaps between
 *    matches are pieces too (behavior "Isolated").
 * 3. Each final piece is BPE-encoded on its bytes (tok_bpe.c). */
#include <string.h>
#include <unicode/uchar.h>

#include "tokenizer/tok_internal.h"

typedef struct enc_ctx {
    di_tokenizer *t;
    pcre2_match_data *md;
    di_token_vec *out;
    di_err *err;
} enc_ctx;

bool di_utf8_valid(const char *str, size_t len, size_t *bad_offset) {
    const uint8_t *s = (const uint8_t *)str;
    size_t i = 0;
    while (i < len) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c >= 0xE0 && c <= 0xEF) need = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        else if (c >= 0xF0 && c <= 0xF4) need = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        else break;
        if (i + need >= len) break; /* truncated sequence */
        if (s[i + 1] < lo || s[i + 1] > hi) break;
        size_t k = 2;
        for (; k <= need; k++)
            if ((s[i + k] & 0xC0) != 0x80) break;
        if (k <= need) break;
        i += need + 1;
    }
    if (i < len) {
        if (bad_offset) *bad_offset = i;
        return false;
    }
    return true;
}

/* Decodes the code point at s[i] (valid UTF-8) and returns its length. */
static size_t cp_at(const uint8_t *s, size_t i, uint32_t *cp) {
    uint8_t c = s[i];
    if (c < 0x80) return *cp = c, 1;
    if (c < 0xE0) return *cp = ((c & 0x1Fu) << 6) | (s[i + 1] & 0x3Fu), 2;
    if (c < 0xF0) return *cp = ((c & 0x0Fu) << 12) | ((s[i + 1] & 0x3Fu) << 6) | (s[i + 2] & 0x3Fu), 3;
    *cp = ((c & 0x07u) << 18) | ((s[i + 1] & 0x3Fu) << 12) | ((s[i + 2] & 0x3Fu) << 6) | (s[i + 3] & 0x3Fu);
    return 4;
}

/* Start of the code point that ends at s[i-1]. */
static size_t cp_before(const uint8_t *s, size_t i) {
    do i--;
    while (i > 0 && (s[i] & 0xC0) == 0x80);
    return i;
}

static bool is_ws(uint32_t cp) { return u_isUWhiteSpace((UChar32)cp); }
/* Rust char::is_alphanumeric (Alphabetic or Numeric) or '_': HF's word characters. */
static bool is_word(uint32_t cp) {
    if (cp == '_') return true;
    int8_t gc = u_charType((UChar32)cp);
    return u_hasBinaryProperty((UChar32)cp, UCHAR_ALPHABETIC) || gc == U_DECIMAL_DIGIT_NUMBER ||
           gc == U_LETTER_NUMBER || gc == U_OTHER_NUMBER;
}

static di_status split_level(enc_ctx *c, const uint8_t *s, size_t len, int level) {
    di_tokenizer *t = c->t;
    if (level == t->n_splits) {
        di_bpe_piece(t, s, len, c->out);
        return DI_OK;
    }
    pcre2_code *re = t->split_re[level];
    size_t pos = 0, last = 0;
    while (pos < len) {
        int rc = t->split_jit[level] ? pcre2_jit_match(re, s, len, pos, 0, c->md, NULL)
                                     : PCRE2_ERROR_JIT_BADOPTION;
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT || rc == PCRE2_ERROR_JIT_BADOPTION)
            rc = pcre2_match(re, s, len, pos, PCRE2_NO_UTF_CHECK, c->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[200];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return di_errf(c->err, DI_EINTERNAL, "pre-tokenizer regex %d failed: %s", level, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(c->md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* an empty match splits nothing; step over one code point */
            uint32_t cp;
            pos = ms + (ms < len ? cp_at(s, ms, &cp) : 1);
            continue;
        }
        if (ms > last && split_level(c, s + last, ms - last, level + 1)) return c->err->status;
        if (split_level(c, s + ms, me - ms, level + 1)) return c->err->status;
        last = pos = me;
    }
    if (last < len) return split_level(c, s + last, len - last, level + 1);
    return DI_OK;
}

/* Applies lstrip/rstrip/single_word to a match [*start, *stop) in s[0..len); false = veto. */
static bool adjust_match(const di_tokenizer *t, int32_t id, const uint8_t *s, size_t len, size_t floor,
                         size_t *start, size_t *stop) {
    uint8_t f = t->flags[id];
    uint32_t cp;
    if (f & DI_TOKF_SINGLE_WORD) {
        if (*start > 0 && (cp_at(s, cp_before(s, *start), &cp), is_word(cp))) return false;
        if (*stop < len && (cp_at(s, *stop, &cp), is_word(cp))) return false;
    }
    if (f & DI_TOKF_LSTRIP) {
        size_t i = *start;
        while (i > 0) {
            size_t j = cp_before(s, i);
            cp_at(s, j, &cp);
            if (!is_ws(cp)) break;
            i = j;
        }
        *start = i > floor ? i : floor;
    }
    if (f & DI_TOKF_RSTRIP) {
        while (*stop < len) {
            size_t n = cp_at(s, *stop, &cp);
            if (!is_ws(cp)) break;
            *stop += n;
        }
    }
    return true;
}

/* Finds added tokens of one trie in s[0..len); gaps go to the next stage (the normalized trie, then
 * the pre-tokenizer). */
static di_status added_stage(enc_ctx *c, const uint8_t *s, size_t len, int stage) {
    di_tokenizer *t = c->t;
    const di_trie *tr = stage == 0 ? &t->trie_raw : &t->trie_norm;
    size_t last = 0;
    for (size_t i = 0; i < len && tr->n_tokens;) {
        int32_t id;
        size_t n = tr->first_byte[s[i]] ? di_trie_longest(tr, s + i, len - i, &id) : 0;
        if (!n) {
            i++;
            continue;
        }
        size_t start = i, stop = i + n;
        i = stop;
        if (!adjust_match(t, id, s, len, last, &start, &stop)) continue;
        if (start > last) {
            di_status st = stage == 0 ? added_stage(c, s + last, start - last, 1)
                                      : split_level(c, s + last, start - last, 0);
            if (st) return st;
        }
        di_token_vec_push(c->out, id);
        last = i = stop;
    }
    if (last < len)
        return stage == 0 ? added_stage(c, s + last, len - last, 1) : split_level(c, s + last, len - last, 0);
    return DI_OK;
}

static di_status encode_impl(di_tokenizer *t, const char *text, size_t len, bool allow_special,
                             di_token_vec *out, di_err *err) {
    di_err local = {0};
    if (!err) err = &local;
    size_t bad;
    if (!di_utf8_valid(text, len, &bad))
        return di_errf(err, DI_EINVAL, "input text is not valid UTF-8 (bad byte 0x%02x at offset %zu)",
                       (uint8_t)text[bad], bad);
    enc_ctx c = {t, pcre2_match_data_create(1, NULL), out, err};
    if (!c.md) di_die("out of memory (pcre2 match data)");
    const uint8_t *s = (const uint8_t *)text;
    di_status st = allow_special ? added_stage(&c, s, len, 0) : split_level(&c, s, len, 0);
    pcre2_match_data_free(c.md);
    return st;
}

di_status di_tokenizer_encode(di_tokenizer *t, const char *text, size_t len, bool allow_special,
                              di_token_vec *out, di_err *err) {
    size_t n0 = out->n;
    di_status st = encode_impl(t, text, len, allow_special, out, err);
    if (st) out->n = n0;
    return st;
}

di_status di_tok_encode_plain(di_tokenizer *t, const char *text, size_t len, di_token_vec *out,
                              di_err *err) {
    return di_tokenizer_encode(t, text, len, false, out, err);
}
