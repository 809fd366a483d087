/* Containers for the tokenizer: the id vector, a string -> id hash map, a merge-pair hash map and
 * the byte trie used to find added tokens. All are open addressing with linear probing over a
 * power-of-two table kept at most half full; nothing is ever deleted, so no tombstones. */
#include <assert.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

void di_token_vec_push(di_token_vec *v, int32_t id) {
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 64;
        v->ids = di_xrealloc(v->ids, v->cap * sizeof *v->ids);
    }
    v->ids[v->n++] = id;
}

void di_token_vec_append(di_token_vec *v, const int32_t *ids, size_t n) {
    if (v->n + n > v->cap) {
        size_t cap = v->cap ? v->cap : 64;
        while (cap < v->n + n) cap *= 2;
        v->ids = di_xrealloc(v->ids, cap * sizeof *v->ids);
        v->cap = cap;
    }
    if (n) memcpy(v->ids + v->n, ids, n * sizeof *ids);
    v->n += n;
}

void di_token_vec_free(di_token_vec *v) {
    free(v->ids);
    v->ids = NULL;
    v->n = v->cap = 0;
}

/* FNV-1a over 32-bit words then a final avalanche: fast on the short keys we hash. */
uint32_t di_hash_bytes(const void *p, size_t n) {
    const uint8_t *s = p;
    uint32_t h = 2166136261u;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        uint32_t w;
        memcpy(&w, s + i, 4);
        h = (h ^ w) * 16777619u;
    }
    for (; i < n; i++) h = (h ^ s[i]) * 16777619u;
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c *= 2;
    return c;
}

void di_smap_init(di_smap *m, size_t expected, const char *base, const uint32_t *off, const uint32_t *len) {
    m->cap = pow2_at_least(expected * 2 + 1);
    m->n = 0;
    m->slots = di_xcalloc(m->cap, sizeof *m->slots);
    m->base = base, m->off = off, m->len = len;
}

void di_smap_free(di_smap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

static void smap_grow(di_smap *m) {
    uint64_t *old = m->slots;
    size_t old_cap = m->cap;
    m->cap *= 2;
    m->slots = di_xcalloc(m->cap, sizeof *m->slots);
    for (size_t i = 0; i < old_cap; i++) {
        if (!old[i]) continue;
        size_t j = (old[i] >> 32) & (m->cap - 1);
        while (m->slots[j]) j = (j + 1) & (m->cap - 1);
        m->slots[j] = old[i];
    }
    free(old);
}

static inline bool smap_key_is(const di_smap *m, uint64_t slot, uint32_t h, const char *key, size_t len) {
    if ((uint32_t)(slot >> 32) != h) return false;
    uint32_t id = (uint32_t)slot - 1;
    return m->len[id] == len && !memcmp(m->base + m->off[id], key, len);
}

bool di_smap_put(di_smap *m, int32_t id) {
    if ((m->n + 1) * 2 > m->cap) smap_grow(m);
    const char *key = m->base + m->off[id];
    size_t len = m->len[id];
    uint32_t h = di_hash_bytes(key, len);
    size_t j = h & (m->cap - 1);
    for (; m->slots[j]; j = (j + 1) & (m->cap - 1))
        if (smap_key_is(m, m->slots[j], h, key, len)) return false;
    m->slots[j] = (uint64_t)h << 32 | ((uint32_t)id + 1);
    m->n++;
    return true;
}

int32_t di_smap_get(const di_smap *m, const char *key, size_t len) {
    if (!m->cap) return -1;
    uint32_t h = di_hash_bytes(key, len);
    for (size_t j = h & (m->cap - 1); m->slots[j]; j = (j + 1) & (m->cap - 1))
        if (smap_key_is(m, m->slots[j], h, key, len)) return (int32_t)((uint32_t)m->slots[j] - 1);
    return -1;
}

static inline size_t pair_slot(uint64_t key, size_t cap) {
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
}

void di_pmap_init(di_pmap *m, size_t expected) {
    m->cap = pow2_at_least(expected * 2 + 1);
    m->n = 0;
    m->slots = di_xcalloc(m->cap, sizeof *m->slots);
}

void di_pmap_free(di_pmap *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

static void pmap_grow(di_pmap *m) {
    di_pmap old = *m;
    m->cap *= 2;
    m->slots = di_xcalloc(m->cap, sizeof *m->slots);
    for (size_t i = 0; i < old.cap; i++) {
        if (!old.slots[i].key) continue;
        size_t j = pair_slot(old.slots[i].key, m->cap);
        while (m->slots[j].key) j = (j + 1) & (m->cap - 1);
        m->slots[j] = old.slots[i];
    }
    free(old.slots);
}

bool di_pmap_put(di_pmap *m, int32_t left, int32_t right, int32_t rank, int32_t merged) {
    if ((m->n + 1) * 2 > m->cap) pmap_grow(m);
    uint64_t key = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    size_t j = pair_slot(key, m->cap);
    while (m->slots[j].key) {
        if (m->slots[j].key == key) return false;
        j = (j + 1) & (m->cap - 1);
    }
    m->slots[j] = (di_pmap_slot){key, rank, merged};
    m->n++;
    return true;
}

const di_pmap_slot *di_pmap_get(const di_pmap *m, int32_t left, int32_t right) {
    uint64_t key = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    size_t j = pair_slot(key, m->cap);
    while (m->slots[j].key) {
        if (m->slots[j].key == key) return &m->slots[j];
        j = (j + 1) & (m->cap - 1);
    }
    return NULL;
}

void di_trie_init(di_trie *tr) {
    memset(tr, 0, sizeof *tr);
    tr->cap = 64;
    tr->nodes = di_xmalloc(tr->cap * sizeof *tr->nodes);
    tr->nodes[0] = (di_trie_node){-1, -1, -1, 0};
    tr->n = 1;
}

void di_trie_free(di_trie *tr) {
    free(tr->nodes);
    memset(tr, 0, sizeof *tr);
}

static int32_t trie_child(const di_trie *tr, int32_t node, uint8_t b) {
    for (int32_t c = tr->nodes[node].first_child; c >= 0; c = tr->nodes[c].next_sibling)
        if (tr->nodes[c].byte == b) return c;
    return -1;
}

void di_trie_add(di_trie *tr, const uint8_t *s, size_t len, int32_t id) {
    assert(len > 0);
    int32_t node = 0;
    for (size_t i = 0; i < len; i++) {
        int32_t c = trie_child(tr, node, s[i]);
        if (c < 0) {
            if (tr->n == tr->cap) {
                tr->cap *= 2;
                tr->nodes = di_xrealloc(tr->nodes, tr->cap * sizeof *tr->nodes);
            }
            c = (int32_t)tr->n++;
            tr->nodes[c] = (di_trie_node){-1, tr->nodes[node].first_child, -1, s[i]};
            tr->nodes[node].first_child = c;
        }
        node = c;
    }
    tr->nodes[node].token_id = id;
    tr->first_byte[s[0]] = true;
    tr->n_tokens++;
}

size_t di_trie_longest(const di_trie *tr, const uint8_t *s, size_t len, int32_t *id) {
    size_t best = 0;
    int32_t node = 0;
    for (size_t i = 0; i < len; i++) {
        node = trie_child(tr, node, s[i]);
        if (node < 0) break;
        if (tr->nodes[node].token_id >= 0) {
            best = i + 1;
            *id = tr->nodes[node].token_id;
        }
    }
    return best;
}
