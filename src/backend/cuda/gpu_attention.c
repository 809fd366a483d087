/* Attention of one layer on the GPU: the twin of src/forward/attention.c. Query and own SWA
 * key/value, the compressor and indexer of source layers (gpu_indexer.c), the index lists built on
 * the device in the reference's order (gpu_kernels.cu; at decode they also write the rows into the
 * SWA rings), sparse attention with sinks (tensor cores, which also apply q's RoPE and the output's
 * inverse RoPE; or the CPU-exact kernels under DEEPINFER_GPU_EXACT=1), the ring write, and the
 * grouped output LoRA (whose launch past the decode twin's rows reads the attention output as bf16
 * bits: the attention kernel writes them so, instead of fp32 values and a conversion launch). */
#include <math.h>
#include <stdlib.h>

#include "backend/cuda/gpu_internal.h"

/* q [R, H*Dh] (RoPE applied unless the attention kernel applies it: rope_q false) and own kv [R, Dh]
 * (RoPE applied, on the FP8 grid); qr [R, q_lora_rank] the normed q LoRA, with (qr_q non-NULL) its
 * act_quant noted for wq_b and the indexer's idx_wq_b */
static void q_kv(gpu_fwd *f, const di_layer *L, const float *x, float *qr, const di_cuda_act_forms *qr_q, bool rope_q,
                 float *q, float *kv) {
    const di_config *cf = &f->m->cfg;
    const int R = f->R, H = cf->num_attention_heads, Dh = cf->head_dim, rd = cf->qk_rope_head_dim;
    const float eps = (float)cf->rms_norm_eps;
    const int kind = L->ratio > 0;
    float *tq = gpu_alloc(f, sizeof(float) * (size_t)R * cf->q_lora_rank); /* [R, q_lora_rank] */
    float *tkv = gpu_alloc(f, sizeof(float) * (size_t)R * Dh);            /* [R, Dh] */
    const di_weight *w[2] = {&L->attn.wq_a, &L->attn.wkv};                /* both read x: one launch */
    float *const t[2] = {tq, tkv};
    gpu_linear_quant_set(f, 2, w, x, R, t);
    /* kv: RMSNorm, RoPE and act_quant in one kernel; with the q norm in the same launch where both fit */
    const bool kv_fused = di_cuda_rmsnorm_rope_quant_supported(Dh, Dh - rd, rd);
    if (kv_fused && di_cuda_rmsnorm_q_supported(cf->q_lora_rank)) {
        di_cuda_rmsnorm_q_kv(R, eps, tq, L->attn.q_norm, cf->q_lora_rank, qr, qr_q, tkv, L->attn.kv_norm, Dh, Dh - rd,
                             rd, f->d_cos[kind], f->d_sin[kind], kv, f->s);
    } else {
        di_cuda_rmsnorm_q(tq, L->attn.q_norm, R, cf->q_lora_rank, eps, qr, qr_q, f->s);
        if (kv_fused) {
            di_cuda_rmsnorm_rope_quant(tkv, L->attn.kv_norm, R, Dh, eps, Dh - rd, rd, f->d_cos[kind], f->d_sin[kind],
                                       kv, f->s);
        } else {
            di_cuda_rmsnorm(tkv, L->attn.kv_norm, R, Dh, eps, kv, f->s);
            gpu_rope_rows(f, kind, kv, 1, Dh, Dh - rd, false);
            di_cuda_act_quant_inplace(kv, (int64_t)R * Dh, 32, f->s);
        }
    }
    if (qr_q) di_cuda_act_forms_note(f->cx, qr, R, cf->q_lora_rank, *qr_q);
    gpu_linear(f, &L->attn.wq_b, qr, R, q, DI_LIN_QUANT);
    if (rope_q) gpu_rope_rows(f, kind, q, H, Dh, Dh - rd, false);
    gpu_free(f, tq);
    gpu_free(f, tkv);
}

/* Writes this call's SWA rows into each sequence's ring (after every row attended; a decode step's
 * rows are written by the list builder instead, gpu_list_args.write_rings). */
static void ring_write(gpu_fwd *f, const di_layer *L, const float *kv) {
    const di_config *cf = &f->m->cfg;
    const di_batch *b = f->b;
    float **dst = di_xmalloc(sizeof(float *) * (size_t)f->R);
    const float **src = di_xmalloc(sizeof(float *) * (size_t)f->R);
    int n = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        const int S = b->seq_n_rows[s];
        const int j0 = S > cf->sliding_window ? S - cf->sliding_window : 0;
        for (int j = j0; j < S; j++) {
            int64_t p = f->seq_pos0[s] + j;
            dst[n] = b->seqs[s]->swa[L->id] + (size_t)(p % cf->sliding_window) * cf->head_dim;
            src[n++] = kv + (size_t)(f->seq_row0[s] + j) * cf->head_dim;
        }
    }
    gpu_copy_rows(f, dst, src, n, cf->head_dim);
    free(dst);
    free(src);
}

/* wo_a's groups as one weight of rank rows and a group's columns (di_cuda_linear_bf16w8's view) */
static di_weight wo_a_group(const di_config *cf, const di_attn_weights *a) {
    di_weight wg = a->wo_a;
    wg.rows = cf->o_lora_rank;
    wg.cols = (int64_t)cf->num_attention_heads / cf->o_groups * cf->head_dim;
    return wg;
}

/* Does output_proj take wo_a's grouped tensor-core launch (no per-group copies)? wg: wo_a_group's */
static bool wo_a_grouped(const gpu_fwd *f, const di_weight *wg) {
    const int G = f->m->cfg.o_groups;
    return !f->cx->exact && di_cuda_linear_bf16w8_supported(wg, wg->rows, G, (int64_t)G * wg->cols);
}

/* o [R, H*Dh] -> out [R, D]: r_g = wo_a[g] @ o_g (bf16), out = wo_b(concat_g r_g) (FP8). o's bf16 form,
 * where its producer noted one, is what the grouped launch reads. */
static void output_proj(gpu_fwd *f, const di_attn_weights *a, const float *o, float *out) {
    const di_config *cf = &f->m->cfg;
    const int R = f->R, G = cf->o_groups, rank = cf->o_lora_rank;
    const int64_t gcols = (int64_t)cf->num_attention_heads / G * cf->head_dim;
    float *cat = gpu_alloc(f, sizeof(float) * (size_t)R * G * rank);  /* [R, G*rank] bf16 */
    di_weight wg = wo_a_group(cf, a);
    if (wo_a_grouped(f, &wg)) {
        /* all groups in one tensor-core launch, reading o and writing cat in place; at decode the same
         * launch makes cat's act_quant for wo_b */
        di_cuda_act_forms cat_q = {NULL}; /* all NULL */
        if (di_cuda_linear_act_form(f->cx, &a->wo_b, false, 1, R, R) == DI_ACT_FORM_E4M3) {
            cat_q.q = gpu_alloc(f, (size_t)R * G * rank);                             /* [R, G*rank] e4m3 */
            cat_q.scale = gpu_alloc(f, sizeof(float) * (size_t)R * (G * rank / 32)); /* [R, G*rank / 32] */
        }
        if (di_cuda_linear_bf16w8(f->cx, &wg, rank, G, o, (int64_t)G * gcols, R, cat, (int64_t)G * rank,
                                  cat_q.q ? &cat_q : NULL))
            di_cuda_act_forms_note(f->cx, cat, R, (int64_t)G * rank, cat_q);
        gpu_linear(f, &a->wo_b, cat, R, out, DI_LIN_QUANT);
        di_cuda_act_forms_forget(f->cx, cat);
        gpu_free(f, cat_q.q);
        gpu_free(f, cat_q.scale);
        gpu_free(f, cat);
        return;
    }
    float *og = gpu_alloc(f, sizeof(float) * (size_t)R * gcols);      /* [R, gcols] one group */
    float *rg = gpu_alloc(f, sizeof(float) * (size_t)R * rank);       /* [R, rank] */
    for (int g = 0; g < G; g++) { /* exact path, or groups off 32-row scale blocks: group by group */
        wg.row0 = (int64_t)g * rank;
        di_cuda_copy_strided(og, gcols, o + g * gcols, (int64_t)G * gcols, gcols, R, f->s);
        gpu_linear(f, &wg, og, R, rg, DI_LIN_BF16);
        di_cuda_copy_strided(cat + (size_t)g * rank, (int64_t)G * rank, rg, rank, rank, R, f->s);
    }
    gpu_linear(f, &a->wo_b, cat, R, out, DI_LIN_QUANT);
    gpu_free(f, og);
    gpu_free(f, rg);
    gpu_free(f, cat);
}

void gpu_attention(gpu_fwd *f, const di_layer *L, const di_layer *hL, const float *x, float *out) {
    const di_model *m = f->m;
    const di_config *cf = &m->cfg;
    const di_batch *b = f->b;
    const int R = f->R, H = cf->num_attention_heads, Dh = cf->head_dim, rd = cf->qk_rope_head_dim;
    const int W = cf->sliding_window;
    float *qr = gpu_alloc(f, sizeof(float) * (size_t)R * cf->q_lora_rank); /* [R, q_lora] bf16 */
    float *q = gpu_alloc(f, sizeof(float) * (size_t)R * H * Dh);          /* [R, H, Dh] bf16 */
    float *kv = gpu_alloc(f, sizeof(float) * (size_t)R * Dh);             /* [R, Dh] FP8 grid */
    float *o = gpu_alloc(f, sizeof(float) * (size_t)R * H * Dh);          /* [R, H, Dh] bf16 */
    di_cuda_act_forms qr_q = {NULL}; /* all NULL; qr's act_quant, made by its norm */
    const bool quant_qr = !f->cx->exact && di_cuda_rmsnorm_q_supported(cf->q_lora_rank);
    if (quant_qr) {
        qr_q.q = gpu_alloc(f, (size_t)R * cf->q_lora_rank);                             /* [R, q_lora] e4m3 */
        qr_q.scale = gpu_alloc(f, sizeof(float) * (size_t)R * (cf->q_lora_rank / 32)); /* [R, q_lora / 32] */
    }
    /* the tensor-core kernels rotate q as they stage it and the output back as they write it */
    const bool tc = !f->cx->exact && di_cuda_sparse_attn_mma_supported(H, Dh);
    const bool rope_folded = tc && di_attn_rope_ok(Dh, Dh - rd, rd);
    /* o as bf16 bits alone, written by the attention kernel, where wo_a's launch reads that form
     * (past the decode twin's rows): no conversion launch, half the output's bytes */
    uint16_t *o16 = NULL; /* [R, H, Dh] bf16 */
    const di_weight wo_a = wo_a_group(cf, &L->attn);
    if (rope_folded && wo_a_grouped(f, &wo_a) &&
        di_cuda_linear_bf16w8_reads_bf16(f->cx, &wo_a, wo_a.rows, cf->o_groups, R))
        o16 = gpu_alloc(f, sizeof(uint16_t) * (size_t)R * H * Dh);
    gpu_stage(f, ST_ATTN_QKV);
    q_kv(f, L, x, qr, quant_qr ? &qr_q : NULL, !rope_folded, q, kv);
    gpu_stage(f, ST_COMPRESS);
    if (L->is_kv_source) gpu_compress(f, L, hL, x);
    gpu_stage(f, ST_INDEXER);
    if (L->is_index_source) gpu_indexer(f, L, hL, x, qr);
    gpu_stage(f, ST_ATTN_CORE);

    /* the list builder: per-call tables (gpu_fwd), this layer's rings and entry counts */
    const int ns = b->n_seqs;
    float **ring = di_xmalloc(sizeof(float *) * (size_t)ns);
    int64_t *n_ent = di_xcalloc((size_t)ns, sizeof(int64_t));
    bool one_row_each = true;
    for (int s = 0; s < ns; s++) {
        ring[s] = b->seqs[s]->swa[L->id];
        if (L->ratio > 0) n_ent[s] = b->seqs[s]->kv[L->kv_slot].n;
        one_row_each = one_row_each && b->seq_n_rows[s] == 1;
    }
    const bool use_sel = L->ratio > 0 && L->index_slot >= 0 && f->sel_valid[L->index_slot];
    gpu_list_args a = {0};
    a.row_seq = f->d_row_seq;
    a.row_pos = f->d_row_pos;
    a.seq_pos0 = f->d_seq_pos0;
    a.seq_row0 = f->d_seq_row0;
    a.seq_n_rows = f->d_seq_n_rows;
    a.ring = gpu_upload(f, ring, sizeof(float *) * (size_t)ns);
    a.kv = kv;
    a.window = W;
    a.dh = Dh;
    if (use_sel) {
        a.sel = f->d_sel[L->index_slot];
        a.sel_stride = cf->index_topk;
        a.sel_len = f->sel_len[L->index_slot];
        a.n_entries = gpu_upload(f, n_ent, sizeof(int64_t) * (size_t)ns);
        a.blocks = (const int32_t *const *)f->d_blocks_dev + (size_t)L->kv_slot * ns;
        a.pool = f->d_pools;
        a.block_entries = b->seqs[0]->pool->block_entries;
        a.entry_floats = b->seqs[0]->pool->entry_floats;
        a.row_bytes = b->seqs[0]->row_bytes;
    }
    const int n_list = W + a.sel_len;
    /* a decode step's ring write by the list builder: a row at position p replaces p - W, which only
     * a later row of its own sequence could still need */
    a.write_rings = one_row_each && n_list >= Dh / 4 && Dh % 4 == 0;
    const float **list = gpu_alloc(f, sizeof(float *) * (size_t)R * n_list); /* [R, n_list] */
    gpu_build_attn_lists(&a, R, n_list, list, f->s);
    const float scale = (float)(1.0 / sqrt((double)Dh));
    if (tc) {
        /* batch invariance: one kernel whatever the rows (the default picks by grid size) */
        const int hpb = f->m->batch_invariant && di_cuda_sparse_attn_wg_supported(H, Dh) ? 64 : 0;
        const int kind = L->ratio > 0;
        const di_attn_rope rope = {f->d_cos[kind], f->d_sin[kind], Dh - rd, rd};
        di_cuda_sparse_attn_mma(q, R, H, Dh, list, n_list, L->attn.attn_sink, scale, o, o16, hpb,
                                f->m->batch_invariant ? DI_ATTN_SPLIT_FIXED : DI_ATTN_SPLIT_AUTO,
                                rope_folded ? &rope : NULL, f->s);
    } else { /* the CPU's sums, bit for bit */
        const int64_t slice = di_cuda_sparse_attn_slice_rows(R, H, Dh, n_list);
        float *ws = gpu_alloc(f, di_cuda_sparse_attn_ws_bytes(R, H, Dh, n_list, slice));
        di_cuda_sparse_attn_sliced(q, R, H, Dh, list, n_list, L->attn.attn_sink, scale, o, slice, ws, f->s);
        gpu_free(f, ws);
    }
    if (!rope_folded) gpu_rope_rows(f, L->ratio > 0, o, H, Dh, Dh - rd, true);
    if (!a.write_rings) ring_write(f, L, kv);
    gpu_stage(f, ST_ATTN_OUT);
    if (o16) di_cuda_act_forms_note(f->cx, o, R, (int64_t)H * Dh, (di_cuda_act_forms){.bf16 = o16});
    output_proj(f, &L->attn, o, out);
    if (o16) di_cuda_act_forms_forget(f->cx, o);
    gpu_stage(f, ST_OTHER);
    gpu_free(f, (void *)a.ring);
    gpu_free(f, (void *)a.n_entries);
    gpu_free(f, list);
    free(ring);
    free(n_ent);
    di_cuda_act_forms_forget(f->cx, qr);
    gpu_free(f, qr);
    gpu_free(f, qr_q.q);
    gpu_free(f, qr_q.scale);
    gpu_free(f, q);
    gpu_free(f, kv);
    gpu_free(f, o);
    gpu_free(f, o16);
}
