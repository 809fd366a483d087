/* Per-sequence state allocation (see state.h). */
#include "forward/state.h"

#include <stdlib.h>
#include <string.h>

di_seq_state *di_seq_state_new(const di_model *m) {
    const di_config *c = &m->cfg;
    di_seq_state *s = di_xcalloc(1, sizeof *s);
    s->n_layers = m->n_total_layers;
    s->n_kv = c->n_kv_sources;
    s->swa = di_xcalloc((size_t)m->n_total_layers, sizeof(float *));
    for (int l = 0; l < m->n_total_layers; l++)
        s->swa[l] = di_xcalloc((size_t)c->sliding_window * c->head_dim, sizeof(float));
    s->kv = di_xcalloc((size_t)c->n_kv_sources, sizeof(di_kv_source_state));
    for (int i = 0; i < c->n_kv_sources; i++) {
        s->kv[i].pend_k = di_xcalloc((size_t)c->head_dim, sizeof(float));
        s->kv[i].pend_z = di_xcalloc((size_t)c->head_dim, sizeof(float));
    }
    s->main_hidden = di_xcalloc((size_t)(c->n_dspark_targets ? c->n_dspark_targets : 1) * c->hidden_size,
                                sizeof(float));
    return s;
}

void di_seq_state_free(di_seq_state *s) {
    if (!s) return;
    for (int l = 0; l < s->n_layers; l++) free(s->swa[l]);
    free(s->swa);
    for (int i = 0; i < s->n_kv; i++) {
        free(s->kv[i].ckv);
        free(s->kv[i].ikeys);
        free(s->kv[i].pend_k);
        free(s->kv[i].pend_z);
    }
    free(s->kv);
    free(s->main_hidden);
    free(s);
}

void di_kv_source_append(di_kv_source_state *ks, const float *ckv_row, const float *ikey_row,
                         int dh, int idx_dim) {
    if (ks->n == ks->cap) {
        ks->cap = ks->cap ? ks->cap * 2 : 64;
        ks->ckv = di_xrealloc(ks->ckv, sizeof(float) * (size_t)(ks->cap * dh));
        ks->ikeys = di_xrealloc(ks->ikeys, sizeof(float) * (size_t)(ks->cap * idx_dim));
    }
    memcpy(ks->ckv + ks->n * dh, ckv_row, sizeof(float) * (size_t)dh);
    memcpy(ks->ikeys + ks->n * idx_dim, ikey_row, sizeof(float) * (size_t)idx_dim);
    ks->n++;
}

void di_seq_state_reset(di_seq_state *s) {
    s->n_tokens = 0;
    s->n_hist = 0;
    s->has_main_hidden = false;
    for (int i = 0; i < s->n_kv; i++) {
        s->kv[i].n = 0;
        s->kv[i].has_pending = false;
    }
}

size_t di_seq_state_bytes(const di_model *m, const di_seq_state *s) {
    const di_config *c = &m->cfg;
    size_t bytes = sizeof *s + (size_t)s->n_layers * c->sliding_window * c->head_dim * sizeof(float);
    for (int i = 0; i < s->n_kv; i++)
        bytes += (size_t)s->kv[i].cap * (c->head_dim + c->index_head_dim) * sizeof(float) +
                 2 * (size_t)c->head_dim * sizeof(float);
    return bytes;
}
