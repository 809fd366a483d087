/* RoPE rows by position, each computed once (di_model_rope_row; model-spec §1.5).
 *
 * A row is cos and sin of pos x freq[i] for the rotary half-dimensions, in double of the fp32
 * angle, as the reference builds them. libm's cos / sin of angles up to ~10^6 rad take ~40 ns each,
 * 2 x 32 a row and kind, and a decode step needs a row of both kinds for every sequence, plus one
 * for every compressed entry it emits: ~1.3 ms of host time before a B = 256 step's first kernel,
 * every step (the device idles for it). Positions recur -- every sequence passes through the same
 * ones -- so rows are kept: in chunks of ROPE_CHUNK positions per kind, a chunk computed whole on
 * its first use (~0.6 ms) under the cache's lock, then read without it (the chunk pointer is
 * published with release / acquire). Memory grows with the longest context seen: 128 KB per 256
 * positions of both kinds (64 MB for a 128K context). The values are the same function of the
 * position as before, bit for bit. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "forward/model.h"

#define ROPE_CHUNK 256 /* positions */

struct di_rope_cache {
    pthread_mutex_t mu;
    int64_t n_chunks;              /* covering positions [0, max_position_embeddings) */
    _Atomic(float *) *chunk[2];    /* [kind][n_chunks] -> [ROPE_CHUNK][2][half] (cos, then sin), or NULL */
};

static void rope_compute(const di_model *m, int kind, int64_t pos, float *cos_out, float *sin_out) {
    const int half = m->cfg.qk_rope_head_dim / 2;
    for (int i = 0; i < half; i++) {
        float angle = (float)pos * m->rope_freq[kind][i];
        cos_out[i] = (float)cos((double)angle);
        sin_out[i] = (float)sin((double)angle);
    }
}

void di_rope_cache_init(di_model *m) {
    struct di_rope_cache *c = di_xcalloc(1, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    const int64_t positions = m->cfg.max_position_embeddings > 0 ? m->cfg.max_position_embeddings : 0;
    c->n_chunks = (positions + ROPE_CHUNK - 1) / ROPE_CHUNK;
    for (int kind = 0; kind < 2; kind++) {
        c->chunk[kind] = di_xcalloc((size_t)(c->n_chunks ? c->n_chunks : 1), sizeof *c->chunk[kind]);
        for (int64_t i = 0; i < c->n_chunks; i++) atomic_init(&c->chunk[kind][i], NULL);
    }
    m->rope_cache = c;
}

void di_rope_cache_free(di_model *m) {
    struct di_rope_cache *c = m->rope_cache;
    if (!c) return;
    for (int kind = 0; kind < 2; kind++) {
        for (int64_t i = 0; i < c->n_chunks; i++) free(atomic_load_explicit(&c->chunk[kind][i], memory_order_relaxed));
        free(c->chunk[kind]);
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
    m->rope_cache = NULL;
}

/* The chunk of `pos`, computed on first use; NULL for a position outside the cache. */
static const float *rope_chunk(const di_model *m, int kind, int64_t pos) {
    struct di_rope_cache *c = m->rope_cache;
    if (!c || pos < 0 || pos / ROPE_CHUNK >= c->n_chunks) return NULL;
    const int64_t k = pos / ROPE_CHUNK;
    float *rows = atomic_load_explicit(&c->chunk[kind][k], memory_order_acquire);
    if (rows) return rows;
    pthread_mutex_lock(&c->mu);
    rows = atomic_load_explicit(&c->chunk[kind][k], memory_order_relaxed);
    if (!rows) { /* another thread may have made it meanwhile */
        const int half = m->cfg.qk_rope_head_dim / 2;
        rows = di_xmalloc(sizeof(float) * ROPE_CHUNK * 2 * (size_t)half);
        for (int j = 0; j < ROPE_CHUNK; j++)
            rope_compute(m, kind, k * ROPE_CHUNK + j, rows + (size_t)j * 2 * half, rows + (size_t)j * 2 * half + half);
        atomic_store_explicit(&c->chunk[kind][k], rows, memory_order_release);
    }
    pthread_mutex_unlock(&c->mu);
    return rows;
}

void di_model_rope_row(const di_model *m, int kind, int64_t pos, float *cos_out, float *sin_out) {
    const int half = m->cfg.qk_rope_head_dim / 2;
    const float *rows = rope_chunk(m, kind, pos);
    if (!rows) {
        rope_compute(m, kind, pos, cos_out, sin_out);
        return;
    }
    const float *row = rows + (size_t)(pos % ROPE_CHUNK) * 2 * half;
    memcpy(cos_out, row, sizeof(float) * (size_t)half);
    memcpy(sin_out, row + half, sizeof(float) * (size_t)half);
}
