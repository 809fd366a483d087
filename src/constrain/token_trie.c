/* The vocabulary trie (token_trie.h): built once per vocabulary from every token's bytes, with the
 * plain-string classification of each token and the slice masks that follow from it.
 *
 * Construction: a pointer trie (children in byte order) is built token by token; each node's
 * sub_chars is then computed bottom-up (children were created after their parents, so a pass in
 * decreasing index order sees every child first); finally the trie is flattened breadth-first,
 * enqueueing each node's children by sub_chars, largest first. */
#include "constrain/token_trie.h"

#include <stdlib.h>
#include <string.h>

typedef struct tmp_node {
    int32_t first_child, next_sibling, first_tok;
    int16_t sub;
    uint8_t byte;
} tmp_node;

/* UTF-8 position while reading plain code points: 0 between code points; 1, 2 and 5 need 1, 2 or
 * 3 more continuation bytes (80..BF); 3, 4, 6 and 7 are the second byte after E0, ED, F0 and F4,
 * whose ranges are narrower (no overlong forms, no surrogates, nothing above U+10FFFF). */
int di_trie_plain_step(int u, uint8_t b) {
    switch (u) {
    case 0:
        if (b < 0x80) return b >= 0x20 && b != '"' && b != '\\' ? 0 : -1;
        if (b >= 0xC2 && b <= 0xDF) return 1;
        if (b == 0xE0) return 3;
        if (b == 0xED) return 4;
        if (b >= 0xE1 && b <= 0xEF) return 2;
        if (b == 0xF0) return 6;
        if (b >= 0xF1 && b <= 0xF3) return 5;
        if (b == 0xF4) return 7;
        return -1;
    case 1: return b >= 0x80 && b <= 0xBF ? 0 : -1;
    case 2: return b >= 0x80 && b <= 0xBF ? 1 : -1;
    case 3: return b >= 0xA0 && b <= 0xBF ? 1 : -1;
    case 4: return b >= 0x80 && b <= 0x9F ? 1 : -1;
    case 5: return b >= 0x80 && b <= 0xBF ? 2 : -1;
    case 6: return b >= 0x90 && b <= 0xBF ? 2 : -1;
    case 7: return b >= 0x80 && b <= 0x8F ? 2 : -1;
    default: return -1;
    }
}

int di_trie_plain_chars(const uint8_t *b, size_t n) {
    int chars = 0, u = 0;
    for (size_t i = 0; i < n; i++) {
        if (u == 0) chars++;
        u = di_trie_plain_step(u, b[i]);
        if (u < 0) return -1;
    }
    return chars;
}

static int16_t plain_len16(const uint8_t *b, size_t n) {
    int c = di_trie_plain_chars(b, n);
    return c < 0 || c >= DI_TRIE_NOT_PLAIN ? DI_TRIE_NOT_PLAIN : (int16_t)c;
}


/* Flattens the pointer trie breadth-first into v (children by sub_chars, largest first). */
static void trie_flatten(di_token_trie *v, tmp_node *t, int n, const int32_t *tok_next) {
    v->n_nodes = n;
    v->child_off = di_xmalloc((size_t)(n + 1) * sizeof(int32_t));
    v->child_byte = di_xmalloc((size_t)n);
    v->sub_chars = di_xmalloc((size_t)n * sizeof(int16_t));
    v->tok_off = di_xmalloc((size_t)(n + 1) * sizeof(int32_t));
    v->toks = di_xmalloc((size_t)(v->vocab ? v->vocab : 1) * sizeof(int32_t));
    int32_t *order = di_xmalloc((size_t)n * sizeof(int32_t)); /* new index -> old */
    int head = 0, tail = 0, nt = 0;
    order[tail++] = 0;
    while (head < tail) {
        int old = order[head];
        v->child_off[head] = tail;
        v->child_byte[head] = t[old].byte;
        v->sub_chars[head] = t[old].sub;
        v->tok_off[head] = nt;
        for (int k = t[old].first_tok; k >= 0; k = tok_next[k]) v->toks[nt++] = k;
        int first = tail;
        for (int c = t[old].first_child; c >= 0; c = t[c].next_sibling) order[tail++] = c;
        for (int i = first + 1; i < tail; i++) { /* stable insertion sort, sub largest first */
            int x = order[i], j = i - 1;
            while (j >= first && t[order[j]].sub < t[x].sub) order[j + 1] = order[j], j--;
            order[j + 1] = x;
        }
        head++;
    }
    v->child_off[n] = tail;
    v->tok_off[n] = nt;
    free(order);
}

/* slice_mask rows and max_plain from each token's plain length. */
static void trie_slices(di_token_trie *v, const uint8_t *const *tokens, const size_t *lens) {
    size_t words = ((size_t)v->vocab + 31) / 32;
    v->slice_mask = di_xcalloc((size_t)(DI_TRIE_SLICE_MAX + 1) * words, 4);
    for (int32_t id = 0; id < v->vocab; id++) {
        if (v->node_of[id] < 0) continue;
        int c = di_trie_plain_chars(tokens[id], lens[id]);
        if (c < 1) continue;
        if (c > v->max_plain) v->max_plain = c;
        v->slice_mask[(size_t)id / 32] |= 1u << (id % 32);
        for (int m = c; m <= DI_TRIE_SLICE_MAX; m++) v->slice_mask[(size_t)m * words + (size_t)id / 32] |= 1u << (id % 32);
    }
}

di_token_trie *di_token_trie_from_bytes(const uint8_t *const *tokens, const size_t *lens, int32_t n_vocab,
                                        int32_t eos_id) {
    int cap = 1 << 16, n = 1;
    tmp_node *t = di_xmalloc((size_t)cap * sizeof *t);
    t[0] = (tmp_node){-1, -1, -1, 0, 0};
    int32_t *tok_next = di_xmalloc((size_t)(n_vocab ? n_vocab : 1) * sizeof(int32_t));
    for (int32_t id = 0; id < n_vocab; id++) {
        tok_next[id] = -1;
        if (!tokens[id] || !lens[id] || id == eos_id) continue;
        int cur = 0;
        for (size_t i = 0; i < lens[id]; i++) {
            uint8_t b = tokens[id][i];
            int c = t[cur].first_child, prev = -1;
            while (c >= 0 && t[c].byte < b) prev = c, c = t[c].next_sibling;
            if (c < 0 || t[c].byte != b) {
                if (n == cap) t = di_xrealloc(t, (size_t)(cap *= 2) * sizeof *t);
                t[n] = (tmp_node){-1, c, -1, 0, b};
                if (prev < 0) t[cur].first_child = n;
                else t[prev].next_sibling = n;
                c = n++;
            }
            cur = c;
        }
        tok_next[id] = t[cur].first_tok;
        t[cur].first_tok = id;
        int16_t pl = plain_len16(tokens[id], lens[id]);
        if (pl > t[cur].sub) t[cur].sub = pl;
    }
    for (int x = n - 1; x >= 0; x--)
        for (int c = t[x].first_child; c >= 0; c = t[c].next_sibling)
            if (t[c].sub > t[x].sub) t[x].sub = t[c].sub;
    di_token_trie *v = di_xcalloc(1, sizeof *v);
    v->vocab = n_vocab;
    v->eos = eos_id;
    trie_flatten(v, t, n, tok_next);
    free(tok_next);
    free(t);
    pthread_mutex_init(&v->mu, NULL);
    for (int32_t id = 0; id < n_vocab; id++)
        if (tokens[id] && (int32_t)lens[id] > v->max_depth) v->max_depth = (int32_t)lens[id];
    v->node_of = di_xmalloc((size_t)(n_vocab ? n_vocab : 1) * sizeof(int32_t));
    v->parent_of = di_xmalloc((size_t)n * sizeof(int32_t));
    for (int32_t i = 0; i < n_vocab; i++) v->node_of[i] = -1;
    v->parent_of[0] = -1;
    for (int32_t nd = 0; nd < n; nd++) {
        for (int c = v->child_off[nd]; c < v->child_off[nd + 1]; c++) v->parent_of[c] = nd;
        for (int k = v->tok_off[nd]; k < v->tok_off[nd + 1]; k++) v->node_of[v->toks[k]] = nd;
    }
    trie_slices(v, tokens, lens);
    return v;
}

di_status di_token_trie_build(const di_tokenizer *tok, int32_t eos_id, di_token_trie **out, di_err *err) {
    int32_t n = di_tokenizer_vocab_size(tok);
    if (eos_id < 0 || eos_id >= n) return di_errf(err, DI_ERANGE, "token trie: eos id %d outside [0, %d)", eos_id, n);
    const uint8_t **p = di_xcalloc((size_t)n, sizeof *p);
    size_t *l = di_xcalloc((size_t)n, sizeof *l);
    for (int32_t id = 0; id < n; id++) {
        if (di_tokenizer_is_added(tok, id)) continue;
        p[id] = di_tokenizer_id_bytes(tok, id, &l[id]);
    }
    *out = di_token_trie_from_bytes(p, l, n, eos_id);
    free(p);
    free(l);
    return DI_OK;
}

void di_token_trie_free(di_token_trie *v) {
    if (!v) return;
    free(v->child_off);
    free(v->child_byte);
    free(v->sub_chars);
    free(v->tok_off);
    free(v->toks);
    free(v->node_of);
    free(v->parent_of);
    free(v->slice_mask);
    for (int i = 0; i < v->n_shared; i++) {
        free(v->shared[i].key);
        free(v->shared[i].mask);
        g_ivec_free(&v->shared[i].bounds);
    }
    free(v->shared);
    pthread_mutex_destroy(&v->mu);
    free(v);
}

int32_t di_token_trie_vocab_size(const di_token_trie *v) { return v->vocab; }
int32_t di_token_trie_eos(const di_token_trie *v) { return v->eos; }

const uint8_t *di_trie_token_bytes(const di_token_trie *v, int32_t id, uint8_t *buf, size_t cap, size_t *len) {
    int32_t nd = v->node_of[id];
    if (nd < 0) return NULL;
    size_t n = 0;
    for (int32_t x = nd; x > 0; x = v->parent_of[x]) n++;
    if (n > cap) return NULL;
    size_t i = n;
    for (int32_t x = nd; x > 0; x = v->parent_of[x]) buf[--i] = v->child_byte[x];
    *len = n;
    return buf;
}
