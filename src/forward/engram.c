/* Engram (model-spec §2.2 (c)): for each row, the n-gram hash rows of its position are looked up
 * in the layer's FP8 table (1x32 scales), projected by wkv into per-copy keys and one value, and
 * each hc copy gets value * gate, gate = sigmoid(signed sqrt of a normalised key.stream dot). */
#include <stdlib.h>
#include <string.h>

#include "forward/forward_internal.h"
#include "forward/host_steps.h"

int di_engram_row_history(const di_model *m, const di_seq_state *st, const int32_t *seq_tokens, int64_t pos0,
                          int64_t pos, int32_t *last_ids, int max_n) {
    int n = 0;
    for (int64_t q = pos; q >= 0 && n < max_n; q--, n++) {
        if (q >= pos0) {
            last_ids[n] = di_engram_token_map_get(&m->token_map, seq_tokens[q - pos0]);
        } else {
            int back = (int)(pos0 - 1 - q); /* 0 = newest token in the state */
            if (back >= st->n_hist) break;
            last_ids[n] = st->engram_hist[back];
        }
    }
    return n;
}

void di_seq_commit_tokens(const di_model *m, di_seq_state *st, const int32_t *tokens, int n) {
    for (int j = 0; j < n; j++) {
        int32_t id = m->token_map.map ? di_engram_token_map_get(&m->token_map, tokens[j]) : DI_ENGRAM_DEAD;
        memmove(st->engram_hist + 1, st->engram_hist, sizeof(int32_t) * 7);
        st->engram_hist[0] = id;
        if (st->n_hist < 8) st->n_hist++;
    }
    st->n_tokens += n;
}

/* last_ids[0..n) for row r: compressed ids of its token and the tokens before it (newest first) */
static int row_history(const fwd_ctx *c, int r, int32_t *last_ids, int max_n) {
    const int s = c->row_seq[r];
    return di_engram_row_history(c->m, c->b->seqs[s], c->b->tokens + c->seq_row0[s], c->seq_pos0[s],
                                 c->row_pos[r], last_ids, max_n);
}

void di_fwd_engram(fwd_ctx *c, const di_layer *L, float *X) {
    const di_model *m = c->m;
    const di_config *cf = &m->cfg;
    const di_engram_weights *ew = &L->engram;
    const int R = c->R, n = cf->hc_mult, hd = cf->engram_head_dim, ncols = m->engram.n_cols;
    const int64_t D = cf->hidden_size, E = (int64_t)ncols * hd, KV = (int64_t)(n + 1) * D;
    const float eps = (float)cf->rms_norm_eps, inv_sqrt_d = (float)(1.0 / sqrt((double)D));
    float *e = calloc((size_t)R * E, sizeof(float));     /* [R, cols*hd] bf16 gathered rows */
    float *kv = malloc(sizeof(float) * (size_t)R * KV); /* [R, (hc+1)*D] bf16 keys + value */
    for (int r = 0; r < R; r++) {
        int32_t last[DI_ENGRAM_MAX_NGRAM];
        int64_t rows[DI_ENGRAM_MAX_COLS];
        int nl = row_history(c, r, last, cf->engram_max_ngram_size);
        di_engram_hash_position(&m->engram, L->engram_slot, m->engram_pad_id, last, nl, rows);
        for (int col = 0; col < ncols; col++) {
            const uint8_t *q = ew->table + (size_t)rows[col] * hd;
            const uint8_t *sc = ew->table_scale + (size_t)rows[col] * (hd / 32);
            for (int d = 0; d < hd; d++)
                e[r * E + col * hd + d] = di_bf16_round(di_e4m3_to_f32(q[d]) * di_e8m0_to_f32(sc[d / 32]));
        }
    }
    di_cpu_linear(&ew->wkv, e, R, kv, DI_LIN_QUANT);
    di_cpu_engram_gate(X, kv, ew->qk, R, n, D, eps, inv_sqrt_d);
    free(e);
    free(kv);
}
