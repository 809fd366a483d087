/* Byte-pair encoding of one pre-tokenized piece, as HF's `Word::merge_all`.
 *
 * The piece's bytes start as one symbol each (the vocab id of the byte's byte-level char; a byte
 * without one is dropped, as HF does with no unk token). A min-heap holds candidate merges keyed by
 * (rank, left position); popping the smallest, we skip it if its pair no longer exists (a neighbour
 * changed; checking the rank is enough, since a position's pair only ever grows), else merge the
 * right symbol into the left one and push the new pairs on each side. Equal ranks pop leftmost first,
 * as in HF.
 *
 * Results for pieces up to 255 bytes are cached (piece bytes -> ids) in a bounded table that is
 * simply cleared when full; the cache is guarded by a mutex so encode is thread-safe. */
#include <string.h>

#include "tokenizer/tok_internal.h"

#define CACHE_SLOTS (1u << 16)
#define CACHE_BYTES (8u << 20)
#define CACHE_MAX_KEY 255

void di_bpe_cache_init(di_bpe_cache *c) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->lock, NULL);
    c->cap = CACHE_SLOTS;
    c->slots = di_xcalloc(c->cap, sizeof *c->slots);
    c->data_cap = CACHE_BYTES;
    c->data = di_xmalloc(c->data_cap);
}

void di_bpe_cache_free(di_bpe_cache *c) {
    if (!c->slots) return;
    pthread_mutex_destroy(&c->lock);
    free(c->slots);
    free(c->data);
    memset(c, 0, sizeof *c);
}

typedef struct cache_hdr {
    uint32_t hash;
    uint16_t key_len, n_ids;
} cache_hdr;

static size_t entry_size(size_t key_len, size_t n_ids) {
    return sizeof(cache_hdr) + ((key_len + 3) & ~(size_t)3) + n_ids * sizeof(int32_t);
}

/* Appends the cached ids of the piece to out; false on a miss. */
static bool cache_get(di_bpe_cache *c, const uint8_t *key, size_t len, uint32_t h, di_token_vec *out) {
    bool hit = false;
    pthread_mutex_lock(&c->lock);
    for (size_t j = h & (c->cap - 1); c->slots[j]; j = (j + 1) & (c->cap - 1)) {
        const uint8_t *e = c->data + c->slots[j] - 1;
        cache_hdr hd;
        memcpy(&hd, e, sizeof hd);
        if (hd.hash == h && hd.key_len == len && !memcmp(e + sizeof hd, key, len)) {
            di_token_vec_append(out, (const int32_t *)(e + sizeof hd + ((len + 3) & ~(size_t)3)), hd.n_ids);
            hit = true;
            break;
        }
    }
    pthread_mutex_unlock(&c->lock);
    return hit;
}

static void cache_put(di_bpe_cache *c, const uint8_t *key, size_t len, uint32_t h, const int32_t *ids,
                      size_t n) {
    size_t need = entry_size(len, n);
    pthread_mutex_lock(&c->lock);
    if ((c->n + 1) * 2 > c->cap || c->data_len + need > c->data_cap) {
        memset(c->slots, 0, c->cap * sizeof *c->slots);
        c->n = 0;
        c->data_len = 0;
    }
    size_t j = h & (c->cap - 1);
    while (c->slots[j]) j = (j + 1) & (c->cap - 1); /* a duplicate (two threads) is harmless */
    uint8_t *e = c->data + c->data_len;
    cache_hdr hd = {h, (uint16_t)len, (uint16_t)n};
    memcpy(e, &hd, sizeof hd);
    memcpy(e + sizeof hd, key, len);
    memcpy(e + sizeof hd + ((len + 3) & ~(size_t)3), ids, n * sizeof *ids);
    c->slots[j] = (uint32_t)c->data_len + 1;
    c->data_len += need;
    c->n++;
    pthread_mutex_unlock(&c->lock);
}

/* ---- min-heap of (rank << 32 | pos) ---- */
typedef struct heap {
    uint64_t *a;
    size_t n;
} heap;

static void heap_push(heap *h, uint64_t v) {
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h->a[p] <= v) break;
        h->a[i] = h->a[p];
        i = p;
    }
    h->a[i] = v;
}

static uint64_t heap_pop(heap *h) {
    uint64_t top = h->a[0], v = h->a[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= h->n) break;
        if (l + 1 < h->n && h->a[l + 1] < h->a[l]) l++;
        if (v <= h->a[l]) break;
        h->a[i] = h->a[l];
        i = l;
    }
    if (h->n) h->a[i] = v;
    return top;
}

static void push_pair(const di_tokenizer *t, heap *h, const int32_t *id, int32_t pos, int32_t right) {
    const di_pmap_slot *m = di_pmap_get(&t->merges, id[pos], id[right]);
    if (m) heap_push(h, ((uint64_t)(uint32_t)m->rank << 32) | (uint32_t)pos);
}

/* Runs the merges over n symbols; id/prev/next are scratch arrays of n entries each. */
static void merge_all(const di_tokenizer *t, int32_t *id, int32_t *prev, int32_t *next, size_t n,
                      heap *h) {
    for (size_t i = 0; i < n; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) push_pair(t, h, id, (int32_t)i, (int32_t)i + 1);
    while (h->n) {
        uint64_t top = heap_pop(h);
        int32_t pos = (int32_t)(uint32_t)top, rank = (int32_t)(top >> 32);
        int32_t r = next[pos];
        if (id[pos] < 0 || r < 0) continue;
        const di_pmap_slot *m = di_pmap_get(&t->merges, id[pos], id[r]);
        if (!m || m->rank != rank) continue; /* stale entry */
        id[pos] = m->merged;
        id[r] = -1;
        next[pos] = next[r];
        if (next[r] >= 0) prev[next[r]] = pos;
        if (prev[pos] >= 0) push_pair(t, h, id, prev[pos], pos);
        if (next[pos] >= 0) push_pair(t, h, id, pos, next[pos]);
    }
}

void di_bpe_piece(di_tokenizer *t, const uint8_t *piece, size_t len, di_token_vec *out) {
    if (len == 1) {
        if (t->byte_id[piece[0]] >= 0) di_token_vec_push(out, t->byte_id[piece[0]]);
        return;
    }
    uint32_t hash = 0;
    bool cacheable = len <= CACHE_MAX_KEY;
    if (cacheable) {
        hash = di_hash_bytes(piece, len);
        if (cache_get(&t->cache, piece, len, hash, out)) return;
    }
    enum { SMALL = 128 };
    int32_t small[3 * SMALL];
    uint64_t small_heap[3 * SMALL];
    bool big = len > SMALL;
    int32_t *id = big ? di_xmalloc(3 * len * sizeof *id) : small;
    int32_t *prev = id + len, *next = prev + len;
    /* each merge pushes at most two entries, plus the initial n-1 */
    heap h = {big ? di_xmalloc(3 * len * sizeof *h.a) : small_heap, 0};
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        if (t->byte_id[piece[i]] >= 0) id[n++] = t->byte_id[piece[i]];
    merge_all(t, id, prev, next, n, &h);
    size_t n0 = out->n;
    for (int32_t i = n ? 0 : -1; i >= 0; i = next[i]) di_token_vec_push(out, id[i]);
    if (cacheable && out->n > n0) cache_put(&t->cache, piece, len, hash, out->ids + n0, out->n - n0);
    if (big) {
        free(id);
        free(h.a);
    }
}
