/* Per-sequence state allocation (see state.h). */
#include "forward/state.h"

#include "forward/device.h"
#include "forward/index_key.h"
#include "forward/kv_record.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

enum { BLOCK_ENTRIES = 64 };

int di_kv_entry_floats(const di_model *m) {
    return (di_kv_record_bytes(m->cfg.head_dim) + di_index_key_bytes(m->cfg.index_head_dim)) / 4;
}

di_seq_state *di_seq_state_new(const di_model *m) {
    di_kv_pool *pool = di_xmalloc(sizeof *pool);
    di_kv_pool_init(pool, BLOCK_ENTRIES, di_kv_entry_floats(m), 0);
    if (m->dev_backend) di_kv_pool_set_mem(pool, &m->dev_backend->mem);
    di_seq_state *s = di_seq_state_new_in(m, pool);
    s->owns_pool = true;
    return s;
}

/* n zeroed floats in the state's memory (host or device) */
static float *state_floats(const di_seq_state *s, size_t n) {
    if (!s->mem) return di_xcalloc(n, sizeof(float));
    float *p = s->mem->alloc(n * sizeof(float));
    if (!p) di_die("device out of memory allocating %zu bytes of sequence state", n * sizeof(float));
    return p;
}

static void state_release(const di_seq_state *s, void *p) {
    if (!s->mem) free(p);
    else if (p) s->mem->release(p);
}

di_seq_state *di_seq_state_new_in(const di_model *m, di_kv_pool *pool) {
    const di_config *c = &m->cfg;
    assert(pool->entry_floats == di_kv_entry_floats(m));
    assert(!m->dev_backend == !pool->mem); /* a device model needs a device pool */
    di_seq_state *s = di_xcalloc(1, sizeof *s);
    s->mem = m->dev_backend ? &m->dev_backend->mem : NULL;
    s->pool = pool;
    s->dh = c->head_dim;
    s->idx_dim = c->index_head_dim;
    s->row_bytes = di_kv_record_bytes(c->head_dim);
    s->key_bytes = di_index_key_bytes(c->index_head_dim);
    s->n_layers = m->n_total_layers;
    s->n_kv = c->n_kv_sources;
    s->swa = di_xcalloc((size_t)m->n_total_layers, sizeof(float *));
    for (int l = 0; l < m->n_total_layers; l++)
        s->swa[l] = state_floats(s, (size_t)c->sliding_window * c->head_dim);
    s->kv = di_xcalloc((size_t)c->n_kv_sources, sizeof(di_kv_source_state));
    for (int i = 0; i < c->n_kv_sources; i++) {
        s->kv[i].ratio = c->compress_ratios[c->kv_source_layer_ids[i]];
        s->kv[i].pend_k = state_floats(s, (size_t)c->head_dim);
        s->kv[i].pend_z = state_floats(s, (size_t)c->head_dim);
    }
    s->main_hidden = state_floats(s, (size_t)(c->n_dspark_targets ? c->n_dspark_targets : 1) * c->hidden_size);
    return s;
}

void di_seq_state_free(di_seq_state *s) {
    if (!s) return;
    for (int l = 0; l < s->n_layers; l++) state_release(s, s->swa[l]);
    free(s->swa);
    for (int i = 0; i < s->n_kv; i++) {
        for (int64_t b = 0; b < s->kv[i].n_blocks; b++) di_kv_pool_free(s->pool, s->kv[i].blocks[b]);
        free(s->kv[i].blocks);
        state_release(s, s->kv[i].pend_k);
        state_release(s, s->kv[i].pend_z);
    }
    free(s->kv);
    state_release(s, s->main_hidden);
    if (s->owns_pool) {
        di_kv_pool_destroy(s->pool);
        free(s->pool);
    }
    free(s);
}

void di_seq_append_entry(di_seq_state *s, int src, const uint8_t *kv_rec, const uint8_t *ikey_rec) {
    di_kv_source_state *ks = &s->kv[src];
    assert(!s->mem); /* host states only: device backends write entries with their own kernels */
    assert(ks->n / s->pool->block_entries < ks->n_blocks); /* reserved beforehand */
    memcpy(di_seq_kv_rec(s, src, ks->n), kv_rec, (size_t)s->row_bytes);
    memcpy(di_seq_ikey(s, src, ks->n), ikey_rec, (size_t)s->key_bytes);
    ks->n++;
}

int64_t di_seq_state_blocks_needed(const di_seq_state *s, int64_t n_tokens) {
    int64_t total = 0;
    const int64_t be = s->pool->block_entries;
    for (int i = 0; i < s->n_kv; i++) total += (n_tokens / s->kv[i].ratio + be - 1) / be;
    return total;
}

di_status di_seq_state_reserve(di_seq_state *s, int64_t n_tokens_total, di_err *err) {
    int64_t missing = 0;
    const int64_t be = s->pool->block_entries;
    for (int i = 0; i < s->n_kv; i++) {
        int64_t need = (n_tokens_total / s->kv[i].ratio + be - 1) / be;
        if (need > s->kv[i].n_blocks) missing += need - s->kv[i].n_blocks;
    }
    if (missing > di_kv_pool_available(s->pool))
        return di_errf(err, DI_ENOMEM, "KV pool exhausted: %lld more blocks needed, %lld free",
                       (long long)missing, (long long)di_kv_pool_available(s->pool));
    for (int i = 0; i < s->n_kv; i++) {
        di_kv_source_state *ks = &s->kv[i];
        int64_t need = (n_tokens_total / ks->ratio + be - 1) / be;
        if (need > ks->cap_blocks) {
            ks->cap_blocks = need * 2;
            ks->blocks = di_xrealloc(ks->blocks, sizeof(int32_t) * (size_t)ks->cap_blocks);
        }
        while (ks->n_blocks < need) {
            int32_t b = di_kv_pool_alloc(s->pool);
            if (b < 0) /* a device pool that could not grow */
                return di_errf(err, DI_ENOMEM, "KV pool: device memory exhausted at %lld blocks",
                               (long long)s->pool->n_blocks);
            ks->blocks[ks->n_blocks++] = b;
        }
    }
    return DI_OK;
}

void di_seq_state_reset(di_seq_state *s) {
    s->n_tokens = 0;
    s->n_hist = 0;
    s->has_main_hidden = false;
    for (int i = 0; i < s->n_kv; i++) {
        for (int64_t b = 0; b < s->kv[i].n_blocks; b++) di_kv_pool_free(s->pool, s->kv[i].blocks[b]);
        s->kv[i].n_blocks = 0;
        s->kv[i].n = 0;
        s->kv[i].has_pending = false;
    }
}

void di_seq_state_read(const di_seq_state *s, float *dst, const float *src, size_t n) {
    if (s->mem) s->mem->to_host(dst, src, n * sizeof(float));
    else memcpy(dst, src, n * sizeof(float));
}

void di_seq_ikey_values(const di_seq_state *s, int src, int64_t g, float *out) {
    float rec[DI_FWD_MAX_HEAD_DIM]; /* the record, [bytes / 4] (idx_dim <= DI_FWD_MAX_HEAD_DIM) */
    const int bytes = s->key_bytes;
    assert(bytes <= (int)sizeof rec);
    di_seq_state_read(s, rec, (const float *)di_seq_ikey(s, src, g), (size_t)bytes / 4);
    di_index_key_values((const uint8_t *)rec, s->idx_dim, out);
}

void di_seq_kv_values(const di_seq_state *s, int src, int64_t g, float *out) {
    float rec[DI_FWD_MAX_HEAD_DIM]; /* the record, [bytes / 4] (< dh floats) */
    const int bytes = s->row_bytes;
    assert(bytes <= (int)sizeof rec);
    di_seq_state_read(s, rec, (const float *)di_seq_kv_rec(s, src, g), (size_t)bytes / 4);
    di_kv_record_values((const uint8_t *)rec, s->dh, out);
}

size_t di_seq_state_bytes(const di_model *m, const di_seq_state *s) {
    const di_config *c = &m->cfg;
    size_t bytes = sizeof *s + (size_t)s->n_layers * c->sliding_window * c->head_dim * sizeof(float);
    for (int i = 0; i < s->n_kv; i++)
        bytes += (size_t)s->kv[i].n_blocks * di_kv_pool_block_bytes(s->pool) + 2 * (size_t)c->head_dim * sizeof(float);
    return bytes;
}
