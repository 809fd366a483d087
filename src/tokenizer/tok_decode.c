/* Decoding: ids -> bytes -> UTF-8 text, whole or streamed.
 *
 * Each id contributes precomputed bytes (tok_load.c). The concatenation is repaired the way Rust's
 * `String::from_utf8_lossy` does it, which is what HF's ByteLevel decoder returns: each maximal
 * subpart of an ill-formed sequence becomes one U+FFFD (Unicode §3.9 "substitution of maximal
 * subparts"), and an incomplete sequence at the very end becomes one U+FFFD.
 *
 * The streaming decoder runs the same repair on what it has so far but holds back a trailing
 * proper prefix of a valid sequence (at most 3 bytes) until more bytes arrive; since the repair of
 * a prefix never depends on bytes after it except through such a held-back tail, the streamed text
 * concatenates to exactly the whole-sequence decode. */
#include <string.h>

#include "tokenizer/tok_internal.h"

static void buf_put(char **buf, size_t *len, size_t *cap, const void *p, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1) c *= 2;
        *buf = di_xrealloc(*buf, c);
        *cap = c;
    }
    if (n) memcpy(*buf + *len, p, n);
    *len += n;
    (*buf)[*len] = 0;
}

static const char k_replacement[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

size_t di_utf8_lossy_append(const uint8_t *s, size_t n, bool final, char **buf, size_t *len,
                            size_t *cap) {
    size_t i = 0, run = 0; /* s[run..i) is valid and not yet copied */
    if (!n) {
        buf_put(buf, len, cap, "", 0);
        return 0;
    }
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need = 0;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) need = 1;
        else if (c >= 0xE0 && c <= 0xEF) need = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        else if (c >= 0xF0 && c <= 0xF4) need = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        size_t k = 1; /* bytes of the sequence that are acceptable so far */
        if (need) {
            for (; k <= need && i + k < n; k++) {
                uint8_t b = s[i + k];
                if (k == 1 ? (b < lo || b > hi) : (b & 0xC0) != 0x80) break;
            }
            if (k > need) { /* complete and valid */
                i += need + 1;
                continue;
            }
            if (i + k == n && !final) { /* a valid prefix cut by the end: keep it for later */
                buf_put(buf, len, cap, s + run, i - run);
                return n - i;
            }
        }
        buf_put(buf, len, cap, s + run, i - run);
        buf_put(buf, len, cap, k_replacement, 3);
        i += k;
        run = i;
    }
    buf_put(buf, len, cap, s + run, i - run);
    return 0;
}

static di_status check_id(const di_tokenizer *t, int32_t id, size_t index, di_err *err) {
    if (id < 0 || id >= t->n_ids)
        return di_errf(err, DI_ERANGE, "token id %d (at index %zu) is out of range [0, %d)", id, index, t->n_ids);
    if (!t->flags[id]) return di_errf(err, DI_ERANGE, "token id %d (at index %zu) is not assigned", id, index);
    return DI_OK;
}

di_status di_tokenizer_decode(const di_tokenizer *t, const int32_t *ids, size_t n, bool skip_special,
                              char **text, size_t *len, di_err *err) {
    di_err local = {0};
    if (!err) err = &local;
    *text = NULL;
    *len = 0;
    char *raw = NULL, *out = NULL;
    size_t raw_len = 0, raw_cap = 0, out_len = 0, out_cap = 0;
    for (size_t i = 0; i < n; i++) {
        if (check_id(t, ids[i], i, err)) {
            free(raw);
            return err->status;
        }
        if (skip_special && (t->flags[ids[i]] & DI_TOKF_SPECIAL)) continue;
        buf_put(&raw, &raw_len, &raw_cap, t->arena + t->dec_off[ids[i]], t->dec_len[ids[i]]);
    }
    di_utf8_lossy_append((const uint8_t *)raw, raw_len, true, &out, &out_len, &out_cap);
    free(raw);
    if (!out) out = di_xcalloc(1, 1);
    *text = out;
    *len = out_len;
    return DI_OK;
}

di_status di_tokenizer_decode_id(const di_tokenizer *t, int32_t id, char **text, size_t *len, di_err *err) {
    return di_tokenizer_decode(t, &id, 1, false, text, len, err);
}

void di_detok_init(di_detok *d, const di_tokenizer *t, bool skip_special) {
    memset(d, 0, sizeof *d);
    d->tok = t;
    d->skip_special = skip_special;
}

di_status di_detok_push(di_detok *d, int32_t id, const char **text, size_t *len, di_err *err) {
    di_err local = {0};
    if (!err) err = &local;
    const di_tokenizer *t = d->tok;
    size_t out_len = 0;
    if (d->out) d->out[0] = 0;
    *text = d->out ? d->out : "";
    *len = 0;
    if (check_id(t, id, 0, err)) return err->status;
    if (d->skip_special && (t->flags[id] & DI_TOKF_SPECIAL)) return DI_OK;
    size_t n = t->dec_len[id], total = d->n_pending + n;
    uint8_t small[64];
    uint8_t *joined = total <= sizeof small ? small : di_xmalloc(total); /* [held-back bytes | token] */
    memcpy(joined, d->pending, d->n_pending);
    memcpy(joined + d->n_pending, t->arena + t->dec_off[id], n);
    size_t keep = di_utf8_lossy_append(joined, total, false, &d->out, &out_len, &d->out_cap);
    memcpy(d->pending, joined + total - keep, keep); /* keep <= 3: a proper prefix */
    d->n_pending = keep;
    if (joined != small) free(joined);
    *text = d->out ? d->out : "";
    *len = out_len;
    return DI_OK;
}

void di_detok_finish(di_detok *d, const char **text, size_t *len) {
    size_t out_len = 0;
    if (d->out) d->out[0] = 0;
    if (d->n_pending) di_utf8_lossy_append(d->pending, d->n_pending, true, &d->out, &out_len, &d->out_cap);
    d->n_pending = 0;
    *text = d->out ? d->out : "";
    *len = out_len;
}

void di_detok_free(di_detok *d) {
    free(d->out);
    memset(d, 0, sizeof *d);
}
