/* CSA2 compressed global KV on the GPU: the twin of src/forward/indexer.c. The compressor of
 * KV-source layers (ratio-2 gated pairs, ratio-1 rows), the entries and index keys (their FP4 and
 * MXFP4 records, forward/kv_record.h and index_key.h) written into the device pool, the lightning indexer's scores over
 * each sequence's paged keys, the candidate pool and the top-k (exact ties to the lower position,
 * as on the CPU).
 *
 * Pairing is decided on the host from positions, as the CPU does row by row: a pair's first token
 * is the previous row of this call or the sequence's pending buffer from an earlier call; a
 * sequence whose last row starts a pair leaves it pending (copied after the pairs read the old
 * pending rows: stream order). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/gpu_internal.h"

void gpu_compress(gpu_fwd *f, const di_layer *L, const di_layer *hL, const float *x) {
    (void)hL;
    const di_model *m = f->m;
    const di_config *cf = &m->cfg;
    const di_batch *b = f->b;
    const int R = f->R, Dh = cf->head_dim, idim = cf->index_head_dim, rd = cf->qk_rope_head_dim;
    const int half = rd / 2;
    const float eps = (float)cf->rms_norm_eps;
    float *k = gpu_alloc(f, sizeof(float) * (size_t)R * Dh); /* [R, Dh] fp32 (ratio 2) or bf16 */
    float *z = NULL;                                          /* [R, Dh] fp32 gate logits */
    if (L->ratio == 2) {
        z = gpu_alloc(f, sizeof(float) * (size_t)R * Dh);
        gpu_linear(f, &L->attn.cmp_wkv, x, R, k, DI_LIN_F32);
        gpu_linear(f, &L->attn.cmp_wgate, x, R, z, DI_LIN_F32);
    } else {
        gpu_linear(f, &L->attn.cmp_wkv, x, R, k, DI_LIN_BF16);
    }
    /* host plan: entries in append order, with their sources and destinations */
    const float **k0 = di_xmalloc(sizeof(float *) * (size_t)R), **z0 = di_xmalloc(sizeof(float *) * (size_t)R);
    const float **k1 = di_xmalloc(sizeof(float *) * (size_t)R), **z1 = di_xmalloc(sizeof(float *) * (size_t)R);
    uint8_t **dst_kv = di_xmalloc(sizeof(uint8_t *) * (size_t)R); /* the entries' KV row records */
    uint8_t **dst_key = di_xmalloc(sizeof(uint8_t *) * (size_t)R); /* the entries' key records */
    float *cs = di_xmalloc(sizeof(float) * (size_t)R * half), *sn = di_xmalloc(sizeof(float) * (size_t)R * half);
    float **pend_dst = di_xmalloc(sizeof(float *) * 2 * (size_t)b->n_seqs);
    const float **pend_src = di_xmalloc(sizeof(float *) * 2 * (size_t)b->n_seqs);
    int E = 0, n_pend = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        di_seq_state *st = b->seqs[s];
        di_kv_source_state *ks = &st->kv[L->kv_slot];
        const float *first_k = NULL, *first_z = NULL; /* pending first token, if from this call */
        for (int j = 0; j < b->seq_n_rows[s]; j++) {
            const int r = f->seq_row0[s] + j;
            const int64_t p = f->row_pos[r];
            const float *kr = k + (size_t)r * Dh;
            int64_t g;
            if (L->ratio == 1) {
                k1[E] = kr;
                g = p;
            } else {
                const float *zr = z + (size_t)r * Dh;
                if (p % 2 == 0) {
                    first_k = kr;
                    first_z = zr;
                    ks->has_pending = true;
                    continue;
                }
                if (!ks->has_pending)
                    di_die("compressor: layer %d pair at position %lld lost its first token", L->id, (long long)p);
                k0[E] = first_k ? first_k : ks->pend_k;
                z0[E] = first_k ? first_z : ks->pend_z;
                k1[E] = kr;
                z1[E] = zr;
                first_k = first_z = NULL;
                ks->has_pending = false;
                g = (p - 1) / 2;
            }
            dst_kv[E] = di_seq_kv_rec(st, L->kv_slot, ks->n);
            dst_key[E] = di_seq_ikey(st, L->kv_slot, ks->n);
            ks->n++;
            di_model_rope_row(m, 1, g * L->ratio, cs + (size_t)E * half, sn + (size_t)E * half);
            E++;
        }
        if (first_k) { /* the sequence ends on a pair's first token */
            pend_dst[n_pend] = ks->pend_k;
            pend_src[n_pend++] = first_k;
            pend_dst[n_pend] = ks->pend_z;
            pend_src[n_pend++] = first_z;
        }
    }
    if (E > 0) {
        float *latent = gpu_alloc(f, sizeof(float) * (size_t)E * Dh);  /* [E, Dh] bf16 pre-norm */
        float *normed = gpu_alloc(f, sizeof(float) * (size_t)E * Dh);  /* [E, Dh] */
        float *key_raw = gpu_alloc(f, sizeof(float) * (size_t)E * idim); /* [E, idim] */
        float *key = gpu_alloc(f, sizeof(float) * (size_t)E * idim);
        if (L->ratio == 2) {
            const float **d_k0 = gpu_upload(f, k0, sizeof(float *) * (size_t)E);
            const float **d_z0 = gpu_upload(f, z0, sizeof(float *) * (size_t)E);
            const float **d_k1 = gpu_upload(f, k1, sizeof(float *) * (size_t)E);
            const float **d_z1 = gpu_upload(f, z1, sizeof(float *) * (size_t)E);
            di_cuda_cmp_pair(d_k0, d_z0, d_k1, d_z1, E, Dh, latent, f->s);
            gpu_free(f, (void *)d_k0);
            gpu_free(f, (void *)d_z0);
            gpu_free(f, (void *)d_k1);
            gpu_free(f, (void *)d_z1);
        } else {
            float **rows = di_xmalloc(sizeof(float *) * (size_t)E);
            for (int e = 0; e < E; e++) rows[e] = latent + (size_t)e * Dh;
            gpu_copy_rows(f, rows, k1, E, Dh);
            free(rows);
        }
        di_cuda_rmsnorm(latent, L->attn.cmp_norm, E, Dh, eps, normed, f->s);
        if (b->debug_fn)
            for (int e = 0; e < E; e++) gpu_debug(f, "compressor_latent_row", L->id, normed + (size_t)e * Dh, Dh);
        gpu_linear(f, &L->attn.idx_wk, normed, E, key_raw, DI_LIN_BF16);
        di_cuda_rmsnorm(key_raw, L->attn.idx_k_norm, E, idim, eps, key, f->s);
        float *d_cs = gpu_upload(f, cs, sizeof(float) * (size_t)E * half);
        float *d_sn = gpu_upload(f, sn, sizeof(float) * (size_t)E * half);
        di_cuda_rope(key, E, 1, idim, idim - rd, rd, d_cs, d_sn, false, f->s);
        uint8_t **d_dst_key = gpu_upload(f, dst_key, sizeof(uint8_t *) * (size_t)E);
        di_cuda_index_key_quant(key, E, idim, b->seqs[0]->key_bytes, d_dst_key, f->s); /* into the records */
        gpu_free(f, d_dst_key);
        di_cuda_rope(normed, E, 1, Dh, Dh - rd, rd, d_cs, d_sn, false, f->s);
        uint8_t **d_dst_kv = gpu_upload(f, dst_kv, sizeof(uint8_t *) * (size_t)E);
        di_cuda_kv_record_quant(normed, E, Dh, b->seqs[0]->row_bytes, d_dst_kv, f->s); /* into the records */
        gpu_free(f, d_dst_kv);
        gpu_free(f, d_cs);
        gpu_free(f, d_sn);
        gpu_free(f, latent);
        gpu_free(f, normed);
        gpu_free(f, key_raw);
        gpu_free(f, key);
    }
    gpu_copy_rows(f, pend_dst, pend_src, n_pend, Dh);
    free(k0);
    free(z0);
    free(k1);
    free(z1);
    free(dst_kv);
    free(dst_key);
    free(cs);
    free(sn);
    free(pend_dst);
    free(pend_src);
    gpu_free(f, k);
    gpu_free(f, z);
}

/* top k of R rows of P scores ([R, P] -> out [R, k]), long rows in stages over arena scratch */
static void gpu_topk(gpu_fwd *f, const float *score, int R, int64_t P, int k, int32_t *out) {
    void *scratch = gpu_alloc(f, di_cuda_topk_scratch_bytes(R, P, k));
    di_cuda_topk(score, R, P, k, out, scratch, f->s);
    gpu_free(f, scratch);
}

void gpu_indexer(gpu_fwd *f, const di_layer *L, const di_layer *hL, const float *x, const float *qr) {
    (void)hL;
    const di_model *m = f->m;
    const di_config *cf = &m->cfg;
    const di_batch *b = f->b;
    const int R = f->R, nh = cf->index_n_heads, idim = cf->index_head_dim, K = cf->index_topk;
    const int slot = L->index_slot, ns = b->n_seqs, bs = cf->candidate_block_size;
    int32_t *sel = f->d_sel[slot]; /* [R, K] */
    if (b->forced_topk) {
        cudaMemcpyAsync(sel, b->forced_topk + (size_t)slot * R * K, sizeof(int32_t) * (size_t)R * K,
                        cudaMemcpyHostToDevice, f->s);
        f->sel_len[slot] = K;
        f->sel_valid[slot] = true;
        return;
    }
    float *qi = gpu_alloc(f, sizeof(float) * (size_t)R * nh * idim); /* [R, nh, idim] FP4 grid */
    float *w = gpu_alloc(f, sizeof(float) * (size_t)R * nh);         /* [R, nh] bf16 */
    gpu_linear(f, &L->attn.idx_wq_b, qr, R, qi, DI_LIN_QUANT);
    gpu_rope_rows(f, 1, qi, nh, idim, idim - cf->qk_rope_head_dim, false);
    di_cuda_fp4_quant_inplace(qi, (int64_t)R * nh * idim, 32, DI_FP4_SCALE_UE8M0, f->s);
    gpu_linear(f, &L->attn.idx_weights_proj, x, R, w, DI_LIN_BF16);
    di_cuda_scale_bf16(w, (int64_t)R * nh, (float)(1.0 / sqrt((double)idim) / sqrt((double)nh)), f->s);
    /* all sequences in one pass: each row carries its sequence's pool, block table and key count;
     * scores [R, Pmax] are -inf past a row's keys, which top-k and block maxima skip exactly as on
     * the unpadded rows (one launch per step instead of one per sequence) */
    int sel_len = 0;
    int64_t Pmax = 0;
    const float **row_pool = di_xmalloc(sizeof(float *) * (size_t)R);
    const int32_t **row_blocks = di_xmalloc(sizeof(int32_t *) * (size_t)R);
    int64_t *row_keys = di_xmalloc(sizeof(int64_t) * (size_t)R), *visible = di_xmalloc(sizeof(int64_t) * (size_t)R);
    const di_kv_pool *pool0 = b->seqs[0]->pool;
    for (int s = 0; s < ns; s++) {
        const di_seq_state *st = b->seqs[s];
        const int64_t P = st->kv[L->kv_slot].n;
        if (st->pool->block_entries != pool0->block_entries || st->pool->entry_floats != pool0->entry_floats ||
            st->row_bytes != b->seqs[0]->row_bytes)
            di_die("indexer: sequences of one batch have differently shaped KV pools");
        if ((P < K ? (int)P : K) > sel_len) sel_len = P < K ? (int)P : K;
        if (P > Pmax) Pmax = P;
        for (int j = f->seq_row0[s]; j < f->seq_row0[s] + b->seq_n_rows[s]; j++) {
            row_pool[j] = st->pool->dev_base;
            row_blocks[j] = f->d_blocks[(size_t)L->kv_slot * ns + s];
            row_keys[j] = P;
            visible[j] = (f->row_pos[j] + 1) / L->ratio;
        }
    }
    const di_index_rows rows = {gpu_upload(f, row_pool, sizeof(float *) * (size_t)R),
                                gpu_upload(f, row_blocks, sizeof(int32_t *) * (size_t)R),
                                gpu_upload(f, row_keys, sizeof(int64_t) * (size_t)R)};
    int64_t *d_visible = gpu_upload(f, visible, sizeof(int64_t) * (size_t)R);
    float *score = gpu_alloc(f, sizeof(float) * (size_t)R * Pmax); /* [R, Pmax] */
    /* a block's key records follow its KV row records (state.h di_seq_ikey) */
    const int be = pool0->block_entries, key_floats = b->seqs[0]->key_bytes / 4;
    const int keys_floats = (int)(di_seq_keys_offset(be, b->seqs[0]->row_bytes) / 4);
    di_cuda_index_score_paged(qi, w, NULL, NULL, be, (int64_t)be * pool0->entry_floats, keys_floats, key_floats, true, R,
                              Pmax, nh, idim, d_visible, &rows, score, f->s);
    if (L->is_candidate_source) {
        const int64_t nb = (Pmax + bs - 1) / bs;
        const int keep = cf->candidate_topk_blocks < nb ? cf->candidate_topk_blocks : (int)nb;
        float *bscore = gpu_alloc(f, sizeof(float) * (size_t)R * nb);       /* [R, nb] */
        int32_t *blocks = gpu_alloc(f, sizeof(int32_t) * (size_t)R * keep); /* [R, keep] */
        uint8_t *flags = gpu_alloc(f, (size_t)R * nb);                      /* [R, nb] */
        if (nb > 0) {
            di_cuda_block_max(score, R, Pmax, bs, d_visible, bscore, f->s);
            if (b->debug_fn)
                for (int j = 0; j < R; j++)
                    gpu_debug(f, "candidate_block_score_row", cf->candidate_source_layer_id, bscore + (size_t)j * nb,
                              (row_keys[j] + bs - 1) / bs);
            gpu_topk(f, bscore, R, nb, keep, blocks);
            di_cuda_cand_flags(blocks, R, keep, nb, flags, f->s);
        }
        gpu_free(f, f->d_cand);
        f->d_cand = flags;
        f->cand_nb = nb;
        gpu_free(f, bscore);
        gpu_free(f, blocks);
    }
    if (L->uses_candidates && f->cand_nb >= 0 && Pmax > 0)
        di_cuda_cand_apply(score, R, Pmax, bs, f->d_cand, f->cand_nb, f->s);
    if (b->debug_fn)
        for (int j = 0; j < R; j++) gpu_debug(f, "index_score_row", L->id, score + (size_t)j * Pmax, row_keys[j]);
    gpu_topk(f, score, R, Pmax, K, sel);
    gpu_free(f, score);
    gpu_free(f, d_visible);
    gpu_free(f, (void *)rows.pool);
    gpu_free(f, (void *)rows.blocks);
    gpu_free(f, (void *)rows.n_keys);
    free(row_pool);
    free(row_blocks);
    free(row_keys);
    free(visible);
    f->sel_len[slot] = sel_len;
    f->sel_valid[slot] = sel_len > 0;
    if (b->topk_out) gpu_download(f, b->topk_out + (size_t)slot * R * K, sel, sizeof(int32_t) * (size_t)R * K);
    gpu_free(f, qi);
    gpu_free(f, w);
}
