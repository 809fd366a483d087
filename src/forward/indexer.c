/* CSA2 compressed global KV (model-spec §2.4 (3)-(6)): the compressor of KV-source layers (ratio 2
 * gated pairs in fp32, ratio 1 per token), their index keys, the lightning indexer's scores with
 * the reference's bf16 roundings, the hierarchical candidate pool and the top-k selection.
 * Exact top-k ties go to the lower position (see topk_select). */
#include <stdlib.h>
#include <string.h>

#include "forward/forward_internal.h"
#include "forward/index_key.h"
#include "forward/kv_record.h"

/* One finished latent [Dh] (pre-norm, bf16) of group g -> compressed entry + index key. */
static void emit_entry(const fwd_ctx *c, const di_layer *L, di_seq_state *st, float *latent,
                       int64_t g) {
    const di_model *m = c->m;
    const di_config *cf = &m->cfg;
    const int Dh = cf->head_dim, idim = cf->index_head_dim, rd = cf->qk_rope_head_dim;
    const float eps = (float)cf->rms_norm_eps;
    float normed[DI_FWD_MAX_HEAD_DIM], key_raw[DI_FWD_MAX_HEAD_DIM], key[DI_FWD_MAX_HEAD_DIM];
    float key_rec[DI_FWD_MAX_HEAD_DIM]; /* the key's record, [di_index_key_bytes(idim) / 4] */
    float kv_rec[DI_FWD_MAX_HEAD_DIM];  /* the row's record, [di_kv_record_bytes(Dh) / 4] */
    float cs[DI_FWD_MAX_ROPE_DIM / 2], sn[DI_FWD_MAX_ROPE_DIM / 2];
    di_cpu_rmsnorm(latent, L->attn.cmp_norm, 1, Dh, eps, normed);
    di_fwd_debug(c, "compressor_latent_row", L->id, normed, Dh);
    di_cpu_linear(&L->attn.idx_wk, normed, 1, key_raw, DI_LIN_BF16);
    di_cpu_rmsnorm(key_raw, L->attn.idx_k_norm, 1, idim, eps, key);
    di_model_rope_row(m, 1, g * L->ratio, cs, sn); /* an entry stands for the first token of its group */
    di_cpu_rope(key, 1, idim, idim - rd, rd, cs, sn, false);
    di_index_key_quant(key, idim, (uint8_t *)key_rec); /* fp4_act_quant(key, 32, ue8m0), stored packed */
    di_cpu_rope(normed, 1, Dh, Dh - rd, rd, cs, sn, false);
    di_kv_record_quant(normed, Dh, (uint8_t *)kv_rec); /* fp4_act_quant(latent, 16, e4m3), stored packed */
    di_seq_append_entry(st, L->kv_slot, (const uint8_t *)kv_rec, (const uint8_t *)key_rec);
}

void di_fwd_compress(fwd_ctx *c, const di_layer *L, const float *x) {
    const di_model *m = c->m;
    const int R = c->R, Dh = m->cfg.head_dim;
    float *k = malloc(sizeof(float) * (size_t)R * Dh); /* [R, Dh] fp32 (ratio 2) or bf16 (ratio 1) */
    float *z = NULL;                                    /* [R, Dh] fp32 gate logits (ratio 2) */
    float latent[DI_FWD_MAX_HEAD_DIM];
    if (L->ratio == 2) {
        z = malloc(sizeof(float) * (size_t)R * Dh);
        di_cpu_linear(&L->attn.cmp_wkv, x, R, k, DI_LIN_F32);
        di_cpu_linear(&L->attn.cmp_wgate, x, R, z, DI_LIN_F32);
    } else {
        di_cpu_linear(&L->attn.cmp_wkv, x, R, k, DI_LIN_BF16);
    }
    for (int r = 0; r < R; r++) {
        di_seq_state *st = c->b->seqs[c->row_seq[r]];
        di_kv_source_state *ks = &st->kv[L->kv_slot];
        const int64_t p = c->row_pos[r];
        const float *kr = k + (size_t)r * Dh;
        if (L->ratio == 1) {
            emit_entry(c, L, st, (float *)memcpy(latent, kr, sizeof(float) * Dh), p);
            continue;
        }
        const float *zr = z + (size_t)r * Dh;
        if (p % 2 == 0) { /* first token of a pair: wait for its partner */
            memcpy(ks->pend_k, kr, sizeof(float) * Dh);
            memcpy(ks->pend_z, zr, sizeof(float) * Dh);
            ks->has_pending = true;
            continue;
        }
        if (!ks->has_pending) di_die("compressor: layer %d pair at position %lld lost its first token",
                                     L->id, (long long)p);
        for (int d = 0; d < Dh; d++) {
            float z0 = ks->pend_z[d], z1 = zr[d], mx = fmaxf(z0, z1);
            float e0 = expf(z0 - mx), e1 = expf(z1 - mx), sum = e0 + e1;
            latent[d] = di_bf16_round(ks->pend_k[d] * (e0 / sum) + kr[d] * (e1 / sum));
        }
        ks->has_pending = false;
        emit_entry(c, L, st, latent, (p - 1) / 2);
    }
    free(k);
    free(z);
}

/* Candidate pool of one row (model-spec §2.4 (6)): top blocks by max score, the newest pinned. */
static void candidate_pool(fwd_ctx *c, int r, const float *score, int64_t P, int64_t visible) {
    const di_config *cf = &c->m->cfg;
    const int bs = cf->candidate_block_size;
    const int64_t nb = (P + bs - 1) / bs;
    float *bscore = malloc(sizeof(float) * (size_t)(nb ? nb : 1));
    di_cpu_block_max(score, P, bs, visible, bscore);
    di_fwd_debug(c, "candidate_block_score_row", cf->candidate_source_layer_id, bscore, nb);
    int keep = cf->candidate_topk_blocks < nb ? cf->candidate_topk_blocks : (int)nb;
    int32_t *blocks = malloc(sizeof(int32_t) * (size_t)(keep ? keep : 1));
    di_cpu_topk_select(bscore, nb, keep, blocks);
    free(c->cand[r]);
    c->cand[r] = calloc((size_t)(nb ? nb : 1), 1);
    c->cand_nblocks[r] = nb;
    for (int j = 0; j < keep; j++)
        if (blocks[j] >= 0) c->cand[r][blocks[j]] = 1;
    free(blocks);
    free(bscore);
}

/* score[t] = bf16(sum_h bf16(relu(bf16(q_h . k_t)) * w_h)) over the owner's index keys */
static void index_scores(const di_model *m, const float *qi, const float *w, const di_seq_state *st,
                         int src, int64_t P, float *score) {
    const int nh = m->cfg.index_n_heads, idim = m->cfg.index_head_dim;
    float kt[DI_FWD_MAX_HEAD_DIM]; /* [idim] key t's values */
    for (int64_t t = 0; t < P; t++) {
        di_index_key_values(di_seq_ikey(st, src, t), idim, kt);
        double sum = 0.0;
        for (int h = 0; h < nh; h++) {
            double dot = 0.0;
            for (int d = 0; d < idim; d++) dot += (double)qi[h * idim + d] * kt[d];
            float s = di_bf16_round((float)dot);
            sum += di_bf16_round(fmaxf(s, 0.0f) * w[h]);
        }
        score[t] = di_bf16_round((float)sum);
    }
}

static void publish_forced(fwd_ctx *c, const di_layer *L) {
    const int K = c->m->cfg.index_topk, slot = L->index_slot;
    memcpy(c->sel[slot], c->b->forced_topk + (size_t)slot * c->R * K, sizeof(int32_t) * (size_t)c->R * K);
    c->sel_len[slot] = K;
    c->sel_valid[slot] = true;
}

void di_fwd_indexer(fwd_ctx *c, const di_layer *L, const float *x, const float *qr) {
    const di_model *m = c->m;
    const di_config *cf = &m->cfg;
    const int R = c->R, nh = cf->index_n_heads, idim = cf->index_head_dim, K = cf->index_topk;
    const int slot = L->index_slot;
    if (c->b->forced_topk) {
        publish_forced(c, L);
        return;
    }
    float *qi = malloc(sizeof(float) * (size_t)R * nh * idim); /* [R, nh, idim] FP4 grid */
    float *w = malloc(sizeof(float) * (size_t)R * nh);         /* [R, nh] bf16 head weights */
    di_cpu_linear(&L->attn.idx_wq_b, qr, R, qi, DI_LIN_QUANT);
    di_fwd_rope_rows(m, 1, qi, nh, idim, idim - cf->qk_rope_head_dim, c->row_pos, R, false);
    di_cpu_fp4_quant_inplace(qi, (int64_t)R * nh * idim, 32, DI_FP4_SCALE_UE8M0);
    di_cpu_linear(&L->attn.idx_weights_proj, x, R, w, DI_LIN_BF16);
    const float wscale = (float)(1.0 / sqrt((double)idim) / sqrt((double)nh));
    for (int i = 0; i < R * nh; i++) w[i] = di_bf16_round(w[i] * wscale);
    int sel_len = 0;
    for (int r = 0; r < R; r++) {
        const di_seq_state *st = c->b->seqs[c->row_seq[r]];
        const int64_t P = st->kv[L->kv_slot].n, visible = (c->row_pos[r] + 1) / L->ratio;
        int32_t *sel = c->sel[slot] + (size_t)r * K;
        const int k = P < K ? (int)P : K;
        if (k > sel_len) sel_len = k;
        float *score = malloc(sizeof(float) * (size_t)(P ? P : 1));
        index_scores(m, qi + (size_t)r * nh * idim, w + (size_t)r * nh, st, L->kv_slot, P, score);
        for (int64_t t = visible; t < P; t++) score[t] = -INFINITY;
        if (L->is_candidate_source) candidate_pool(c, r, score, P, visible);
        if (L->uses_candidates && c->cand[r]) {
            const int bs = cf->candidate_block_size;
            for (int64_t t = 0; t < P; t++)
                if (t / bs >= c->cand_nblocks[r] || !c->cand[r][t / bs]) score[t] = -INFINITY;
        }
        di_fwd_debug(c, "index_score_row", L->id, score, P);
        di_cpu_topk_select(score, P, K, sel);
        free(score);
    }
    c->sel_len[slot] = sel_len;
    c->sel_valid[slot] = sel_len > 0;
    if (c->b->topk_out) memcpy(c->b->topk_out + (size_t)slot * R * K, c->sel[slot], sizeof(int32_t) * (size_t)R * K);
    free(qi);
    free(w);
}
