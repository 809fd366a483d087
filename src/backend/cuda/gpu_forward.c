/* Top level of the GPU forward pass: the twin of src/forward/forward.c on device buffers
 * (embedding into the hc stream, Engram and the mHC blocks layer by layer, DSpark captures, the
 * head), plus the linear dispatch and the per-call tables (positions, RoPE rows, block tables).
 * The stages are in gpu_attention.c, gpu_indexer.c and gpu_moe.c. */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/gpu_internal.h"
#include "base/clock.h"
#include "forward/host_steps.h"

/* ---- stage profile ---- */
static bool g_prof;
static gpu_stage_id g_cur;
static double g_last, g_stage_s[ST_COUNT];
static const char *const k_stage_names[ST_COUNT] = {
    "other (embedding, tables, transfers)", "mHC mixes, pre/post, norms", "attention q / kv projections",
    "compressor + index keys", "indexer scores, candidates, top-k", "index lists + sparse attention",
    "attention output (wo_a, wo_b)", "MoE router (gate, download, routing)", "MoE routed experts",
    "MoE shared expert + combine", "Engram", "head"};

void gpu_stage(const gpu_fwd *f, gpu_stage_id next) {
    if (!g_prof) return;
    cudaStreamSynchronize(f->s);
    const double t = di_seconds_now();
    g_stage_s[g_cur] += t - g_last;
    g_last = t;
    g_cur = next;
}

bool gpu_profiling(void) { return g_prof; }

void gpu_profile(bool on, const char *const **names, double *seconds) {
    if (names) *names = k_stage_names;
    if (seconds) memcpy(seconds, g_stage_s, sizeof g_stage_s);
    memset(g_stage_s, 0, sizeof g_stage_s);
    g_prof = on;
    g_cur = ST_OTHER;
    g_last = di_seconds_now();
}

/* Rows from which a plain (BF16/F32) linear goes to cuBLAS outside batch-invariant mode: below it
 * the fixed-order kernel is as fast (skinny GEMMs are weight-bandwidth bound) and exact. */
enum { CUBLAS_MIN_ROWS = 256 };

void gpu_linear(const gpu_fwd *f, const di_weight *w, const float *x, int64_t m, float *y,
                di_linear_mode mode) {
    if (m <= 0) return;
    if (mode == DI_LIN_QUANT) {
        di_cuda_linear(f->cx, w, x, m, y, mode);
        return;
    }
    if (!f->cx->exact) { /* tensor cores: batch invariant, so in both modes */
        if (di_cuda_linear_w16_supported(w)) {
            di_cuda_linear_w16(f->cx, w, x, m, y, mode == DI_LIN_BF16);
            return;
        }
        if (mode == DI_LIN_BF16 && di_cuda_linear_bf16w8_supported(w, w->rows, 1, w->cols)) {
            di_cuda_linear_bf16w8(f->cx, w, w->rows, 1, x, w->cols, m, y, w->rows, NULL);
            return;
        }
    }
    const bool cublas_ok = w->row0 == 0 && w->dtype != DI_DT_F8_E4M3 && !f->m->batch_invariant &&
                           m >= CUBLAS_MIN_ROWS;
    if (cublas_ok) di_cuda_linear(f->cx, w, x, m, y, mode);
    else di_cuda_linear_fixed(w, x, m, y, mode, f->s);
}

void gpu_linear_quant_set(const gpu_fwd *f, int n, const di_weight *const *w, const float *x, int64_t m,
                          float *const *y) {
    if (m <= 0 || di_cuda_linear_mma_set(f->cx, n, w, x, m, y)) return;
    for (int i = 0; i < n; i++) gpu_linear(f, w[i], x, m, y[i], DI_LIN_QUANT);
}

void gpu_copy_rows(const gpu_fwd *f, float *const *dst_host, const float *const *src_host, int64_t n,
                   int64_t width) {
    if (n <= 0) return;
    float **d_dst = gpu_upload(f, dst_host, sizeof(float *) * (size_t)n);
    const float **d_src = gpu_upload(f, src_host, sizeof(float *) * (size_t)n);
    di_cuda_copy_rows(d_dst, d_src, n, width, f->s);
    gpu_free(f, d_dst);
    gpu_free(f, (void *)d_src);
}

void gpu_rope_rows(const gpu_fwd *f, int kind, float *x, int64_t n_vec, int64_t stride, int64_t offset,
                   bool inverse) {
    di_cuda_rope(x, f->R, n_vec, stride, offset, f->m->cfg.qk_rope_head_dim, f->d_cos[kind],
                 f->d_sin[kind], inverse, f->s);
}

/* ---- a sublayer's mixes beside the sublayer ----
 * A sublayer's input is pre-mixed with the pre weights of an earlier mix (p_in), so the mixes it
 * makes (pre_out, post, comb) are first read at the next mHC step -- the next input's hc_post (post,
 * comb) and pre-mix (pre_out), the sublayer's whole attention or MoE later. Past the fused input's
 * rows (hc_sublayer_in's separate kernels) the mixes -- chunk sums, their finish, the Sinkhorn,
 * ~39 us a sublayer at B = 256 -- run on the side stream (in order with the shared expert there)
 * and are joined back by hc_mixes_join before that step: the same kernels on the same operands,
 * the bits unchanged (session 49, H100, three calls: B = 64 36.0-37.9 -> 34.7-36.3 ms, B = 256
 * 56.9-57.7 -> 55.4-56.3, a 512-token prefill 84.3-84.7 -> 81.3-82.2). The fused input's
 * Sinkhorn moved there the same way (the kernel leaving the mix for a side-stream Sinkhorn) made
 * B = 1 10.55 -> 11.32 ms and B = 32 slightly slower, and on a third stream of the main stream's
 * priority B = 1 was still 0.1-0.6 ms slower: not done. Not under the stage profile,
 * which times stages on the main stream alone. */
static bool hc_mixes_beside(void) { return !gpu_profiling(); }

/* the forked mixes enqueued; their ws and mix are freed at the join */
static void hc_mixes_forked(gpu_fwd *f, void *ws, float *mix) {
    GPU_CK(cudaEventRecord(f->g->ev_hc_join, f->cx_side->stream));
    f->hc_forked = true;
    f->hc_fork_ws = ws;
    f->hc_fork_mix = mix;
}

/* the main stream waits for the forked mixes (if any) */
static void hc_mixes_join(gpu_fwd *f) {
    if (!f->hc_forked) return;
    GPU_CK(cudaStreamWaitEvent(f->s, f->g->ev_hc_join, 0));
    gpu_free(f, f->hc_fork_ws);
    gpu_free(f, f->hc_fork_mix);
    f->hc_forked = false;
}

/* hc mixes of all rows: stream [R, n, D] -> pre/post [R, n], comb [R, n, n]; on the side stream
 * where hc_mixes_beside (joined by hc_mixes_join) */
static void hc_mixes(gpu_fwd *f, const uint16_t *X, const void *fn, const float *scale,
                     const float *base, float *pre, float *post, float *comb) {
    const di_config *c = &f->m->cfg;
    const int n = c->hc_mult;
    float *mix = gpu_alloc(f, sizeof(float) * (size_t)f->R * n * (n + 2)); /* [R, n(n+2)] */
    void *ws = gpu_alloc(f, di_cuda_hc_mix_ws_bytes(f->R, n, c->hidden_size));
    const bool beside = hc_mixes_beside();
    cudaStream_t s = beside ? gpu_side_fork(f) : f->s;
    di_cuda_hc_mix_logits(X, f->R, n, c->hidden_size, fn, (float)c->rms_norm_eps, mix, ws, s);
    di_cuda_hc_split_sinkhorn(mix, scale, base, f->R, n, c->hc_sinkhorn_iters, (float)c->hc_eps, pre,
                              post, comb, s);
    if (beside) {
        hc_mixes_forked(f, ws, mix);
    } else {
        gpu_free(f, ws);
        gpu_free(f, mix);
    }
}

/* The fused input's other forms of sub_in (yq: NULL, or act_quant codes and scales and bf16 bits to
 * fill) handed to the sublayer's linears (di_cuda_ctx act_forms), which then launch no act_quant or
 * bf16 conversion of their own; the caller forgets them once the sublayer has run. */
static void sub_in_codes_made(const gpu_fwd *f, const float *sub_in, const di_cuda_act_forms *yq) {
    if (yq) di_cuda_act_forms_note(f->cx, sub_in, f->R, f->m->cfg.hidden_size, *yq);
}

/* A sublayer's input: its mixes of the stream X [R, n, D] (-> pre_out, post, comb) and
 * sub_in [R, D] = RMSNorm(hc_pre(X, p_in), norm); for a few rows one fused launch after the mix
 * sums (the same bits; with yq also sub_in's other forms, sub_in_codes_made), else the four kernels
 * -- three where pre_mixed [R, D] is hc_pre(X, p_in) made already (di_cuda_hc_post_pre; else NULL). */
static void hc_sublayer_in(gpu_fwd *f, const uint16_t *X, const void *fn, const float *scale, const float *base,
                           const float *p_in, const void *norm, float *pre_out, float *post, float *comb,
                           float *sub_in, const di_cuda_act_forms *yq, const float *pre_mixed) {
    hc_mixes_join(f); /* p_in */
    const di_config *c = &f->m->cfg;
    const int n = c->hc_mult;
    const int64_t D = c->hidden_size;
    const float eps = (float)c->rms_norm_eps;
    if (!di_cuda_hc_block_in_supported(f->R, n, D)) {
        float *tmp = pre_mixed ? NULL : gpu_alloc(f, sizeof(float) * (size_t)f->R * D); /* [R, D] bf16 */
        hc_mixes(f, X, fn, scale, base, pre_out, post, comb);
        if (tmp) di_cuda_hc_pre(X, f->R, n, D, p_in, tmp, f->s);
        const float *normed = pre_mixed ? pre_mixed : tmp;
        if (yq && (yq->bf16 || yq->qbf16)) { /* the forms block() asks of the norm past the fused rows */
            di_cuda_rmsnorm_forms(normed, norm, f->R, D, eps, sub_in, yq->bf16, yq->qbf16, f->s);
            sub_in_codes_made(f, sub_in, yq);
        } else {
            di_cuda_rmsnorm(normed, norm, f->R, D, eps, sub_in, f->s);
        }
        gpu_free(f, tmp);
        return;
    }
    void *ws = gpu_alloc(f, di_cuda_hc_mix_ws_bytes(f->R, n, D));
    di_cuda_hc_block_in(X, f->R, n, D, fn, eps, scale, base, c->hc_sinkhorn_iters, (float)c->hc_eps, p_in, norm,
                        pre_out, post, comb, sub_in, yq, ws, f->s);
    gpu_free(f, ws);
    sub_in_codes_made(f, sub_in, yq);
}

/* An FFN's hc_post left for the next block to fuse into its attention input (the stream is made by
 * the kernel that sums its mixes: one launch less a sublayer): X = hc_post(sub_out, Y, post, comb).
 * Taken where nothing reads X in between (no Engram, DSpark capture or debug dump at the next layer). */
typedef struct {
    bool live;
    float *sub_out;       /* [R, D] */
    uint16_t *Y;          /* [R, n, D] bf16 */
    float *post, *comb;   /* [R, n], [R, n, n]: all four freed once it has run */
    gpu_moe_combine moe; /* slot_rows non-NULL: sub_out unwritten, the MoE's combine made by that kernel */
} hc_post_pending;

/* hc_post(ops) then a sublayer's input from its output stream ops->out: one fused pair of launches
 * where supported, else hc_post and hc_sublayer_in (the same bits) */
static void hc_post_then_in(gpu_fwd *f, const di_cuda_hc_post_ops *ops, const void *fn, const float *scale,
                            const float *base, const float *p_in, const void *norm, float *pre_out, float *post,
                            float *comb, float *sub_in, const di_cuda_act_forms *yq) {
    hc_mixes_join(f); /* ops->post, ops->comb, p_in */
    const di_config *c = &f->m->cfg;
    const int n = c->hc_mult;
    const int64_t D = c->hidden_size;
    if (!di_cuda_hc_post_block_in_supported(ops, f->R, n, D)) {
        /* past the fused input's rows the pre-mix comes out of the hc_post launch, and so does the MoE's
         * output where it was left to it */
        const bool separate_in = !di_cuda_hc_block_in_supported(f->R, n, D); /* hc_sublayer_in's separate kernels */
        float *pre_mixed = separate_in ? gpu_alloc(f, sizeof(float) * (size_t)f->R * D) : NULL; /* [R, D] bf16 */
        const float *p_mix = separate_in ? p_in : NULL;
        float *y = NULL; /* [R, D]: the MoE's output, where its combine runs alone */
        if (ops->slot_rows && di_cuda_hc_post_combine_supported(ops, n, D)) {
            di_cuda_hc_post_combine_pre(ops, f->R, n, D, p_mix, pre_mixed, f->s);
        } else {
            if (ops->slot_rows) {
                y = gpu_alloc(f, sizeof(float) * (size_t)f->R * D);
                di_cuda_moe_combine(ops->slot_rows, ops->order, ops->shared, f->R, ops->K, D, y, f->s);
            }
            di_cuda_hc_post_pre(y ? y : ops->y, ops->r, f->R, n, D, ops->post, ops->comb, ops->out, p_mix, pre_mixed,
                                f->s);
        }
        if (y) gpu_free(f, y);
        hc_sublayer_in(f, ops->out, fn, scale, base, p_in, norm, pre_out, post, comb, sub_in, yq, pre_mixed);
        gpu_free(f, pre_mixed);
        return;
    }
    void *ws = gpu_alloc(f, di_cuda_hc_mix_ws_bytes(f->R, n, D));
    di_cuda_hc_post_block_in(ops, f->R, n, D, fn, (float)c->rms_norm_eps, scale, base, c->hc_sinkhorn_iters,
                             (float)c->hc_eps, p_in, norm, pre_out, post, comb, sub_in, yq, ws, f->s);
    gpu_free(f, ws);
    sub_in_codes_made(f, sub_in, yq);
}

/* whether layer l's FFN hc_post may wait for layer l + 1's input (hc_post_pending) */
static bool hc_post_defers(const gpu_fwd *f, int l) {
    const di_model *m = f->m;
    if (l + 1 >= m->n_layers || f->b->debug_fn || f->g->layers[l + 1].engram_slot >= 0) return false;
    for (int t = 0; t < m->cfg.n_dspark_targets; t++)
        if (m->cfg.dspark_target_layer_ids[t] == l + 1) return false;
    return true;
}

/* One mHC block (forward.c di_fwd_block): X [R, n, D] in place, pre [R, n] replaced by this
 * block's FFN pre-mix. pend: the previous block's FFN hc_post if it waited for this block (X is
 * then made here); on return, this block's if `defer`, else X is final. */
static void block(gpu_fwd *f, int l, uint16_t *X, float *pre, hc_post_pending *pend, bool defer) {
    const di_model *m = f->m;
    const di_layer *L = &f->g->layers[l], *hL = &m->layers[l];
    const gpu_layer_consts *hc = &f->g->hc[l];
    const int R = f->R, n = m->cfg.hc_mult;
    const int64_t D = m->cfg.hidden_size, HD = n * D;
    float *a_pre = gpu_alloc(f, sizeof(float) * (size_t)R * n);      /* [R, n] */
    float *a_post = gpu_alloc(f, sizeof(float) * (size_t)R * n);     /* [R, n] */
    float *a_comb = gpu_alloc(f, sizeof(float) * (size_t)R * n * n); /* [R, n, n] */
    float *f_post = gpu_alloc(f, sizeof(float) * (size_t)R * n);
    float *f_comb = gpu_alloc(f, sizeof(float) * (size_t)R * n * n);
    float *sub_in = gpu_alloc(f, sizeof(float) * (size_t)R * D);     /* [R, D] bf16 */
    float *sub_out = gpu_alloc(f, sizeof(float) * (size_t)R * D);    /* [R, D] bf16 */
    uint16_t *Y = gpu_alloc(f, sizeof(uint16_t) * (size_t)R * HD);   /* [R, n, D] bf16 */
    /* sub_in's act_quant and bf16 bits, made by the fused input where it runs (the sublayer's linears of
     * sub_in read them: q / kv, compressor, index weights; router, shared expert) */
    di_cuda_act_forms sub_q = {NULL}; /* all NULL */
    const bool quant_in = D % 32 == 0 && !f->cx->exact && di_cuda_hc_block_in_supported(R, n, D);
    if (quant_in) {
        sub_q.q = gpu_alloc(f, (size_t)R * D);                              /* [R, D] e4m3 */
        sub_q.scale = gpu_alloc(f, sizeof(float) * (size_t)R * (D / 32));   /* [R, D / 32] */
        sub_q.bf16 = gpu_alloc(f, sizeof(uint16_t) * (size_t)R * D);        /* [R, D] */
    }
    /* past the fused input's rows the norm makes sub_in's bf16 bits and act_quant values as bf16 (the
     * wgmma and cuBLAS linears' operands: q / kv, the shared and routed experts; the bf16 linears':
     * compressor, index weights, router), so that none of them converts sub_in itself */
    const bool forms_past_fused = !quant_in && !f->cx->exact && di_cuda_rmsnorm_forms_supported(D);
    if (forms_past_fused) {
        sub_q.bf16 = gpu_alloc(f, sizeof(uint16_t) * (size_t)R * D);  /* [R, D] */
        sub_q.qbf16 = gpu_alloc(f, sizeof(uint16_t) * (size_t)R * D); /* [R, D] */
    }
    const di_cuda_act_forms *yq = quant_in || forms_past_fused ? &sub_q : NULL;
    di_cuda_act_forms ffn_q = sub_q; /* the FFN input's: also the routed experts' digits where they read them */
    if (quant_in && gpu_moe_input_digits(f, L)) {
        ffn_q.digits = gpu_alloc(f, (size_t)(3 * R * D));                          /* [R, D / 32][3][32] int8 */
        ffn_q.digit_scale = gpu_alloc(f, sizeof(float) * (size_t)R * (D / 32)); /* [R, D / 32] */
    }

    gpu_debug(f, "pre_mix_in", l, pre, (int64_t)R * n);
    gpu_stage(f, ST_MHC);
    if (pend->live) {
        const di_cuda_hc_post_ops ops = {pend->sub_out, pend->Y, pend->post, pend->comb, X,
                                         pend->moe.slot_rows, pend->moe.order, pend->moe.shared, pend->moe.K};
        hc_post_then_in(f, &ops, L->hc_attn_fn, hc->attn_scale, hc->attn_base, pre, L->attn_norm, a_pre, a_post,
                        a_comb, sub_in, yq);
        gpu_free(f, pend->sub_out);
        gpu_free(f, pend->Y);
        gpu_free(f, pend->post);
        gpu_free(f, pend->comb);
        gpu_moe_combine_free(f, &pend->moe); /* none held (all NULL) unless the combine was left */
        pend->live = false;
    } else {
        hc_sublayer_in(f, X, L->hc_attn_fn, hc->attn_scale, hc->attn_base, pre, L->attn_norm, a_pre, a_post, a_comb,
                       sub_in, yq, NULL);
    }
    gpu_debug(f, "attn_in", l, sub_in, (int64_t)R * D);
    gpu_attention(f, L, hL, sub_in, sub_out);
    di_cuda_act_forms_forget(f->cx, sub_in); /* rewritten next */
    gpu_debug(f, "attn_out", l, sub_out, (int64_t)R * D);
    gpu_stage(f, ST_MHC);
    const di_cuda_hc_post_ops attn_post = {sub_out, X, a_post, a_comb, Y, NULL, NULL, NULL, 0};
    hc_post_then_in(f, &attn_post, L->hc_ffn_fn, hc->ffn_scale, hc->ffn_base, a_pre, L->ffn_norm, pre, f_post, f_comb,
                    sub_in, yq ? &ffn_q : NULL);
    gpu_debug(f, "ffn_in", l, sub_in, (int64_t)R * D);
    gpu_moe_combine moe_c = {0}; /* with defer: the MoE's combine left for the next block's input to make */
    const bool combine_later = defer && gpu_moe_deferred(f, L, sub_in, &moe_c);
    if (!combine_later) gpu_moe(f, L, hL, sub_in, sub_out);
    hc_mixes_join(f); /* the FFN input's mixes (pre, f_post, f_comb): none pending past a block */
    di_cuda_act_forms_forget(f->cx, sub_in);
    if (!combine_later) gpu_debug(f, "ffn_out", l, sub_out, (int64_t)R * D);
    gpu_debug(f, "pre_mix_out", l, pre, (int64_t)R * n);
    gpu_stage(f, ST_MHC);
    if (defer) {
        *pend = (hc_post_pending){true, sub_out, Y, f_post, f_comb, moe_c};
    } else {
        di_cuda_hc_post(sub_out, Y, R, n, D, f_post, f_comb, X, f->s);
        gpu_free(f, f_post);
        gpu_free(f, f_comb);
        gpu_free(f, sub_out);
        gpu_free(f, Y);
    }
    gpu_stage(f, ST_OTHER);
    gpu_free(f, a_pre);
    gpu_free(f, a_post);
    gpu_free(f, a_comb);
    gpu_free(f, sub_in);
    gpu_free(f, sub_q.q);
    gpu_free(f, sub_q.scale);
    gpu_free(f, sub_q.bf16);
    gpu_free(f, sub_q.qbf16);
    gpu_free(f, ffn_q.digits);
    gpu_free(f, ffn_q.digit_scale);
}

/* After the layers (forward.c commit_states): Engram history and positions on the host, the newest
 * DSpark input into the state's device buffer. */
static void commit_states(gpu_fwd *f) {
    const di_model *m = f->m;
    const di_batch *b = f->b;
    const int64_t W = (int64_t)m->cfg.n_dspark_targets * m->cfg.hidden_size;
    float **dst = di_xmalloc(sizeof(float *) * (size_t)b->n_seqs);
    const float **src = di_xmalloc(sizeof(float *) * (size_t)b->n_seqs);
    for (int s = 0; s < b->n_seqs; s++) {
        di_seq_state *st = b->seqs[s];
        di_seq_commit_tokens(m, st, b->tokens + f->seq_row0[s], b->seq_n_rows[s]);
        if (W > 0) {
            const int last = f->seq_row0[s] + b->seq_n_rows[s] - 1;
            dst[s] = st->main_hidden;
            src[s] = f->d_main_hidden + (size_t)last * W;
            st->has_main_hidden = true;
        }
    }
    /* one kernel, not a copy per sequence: a graph's copy nodes must keep their memory across
     * updates, and sequence state comes and goes */
    if (W > 0) gpu_copy_rows(f, dst, src, b->n_seqs, W);
    free(dst);
    free(src);
}

static void call_init(gpu_fwd *f, const di_model *m, di_batch *b) {
    memset(f, 0, sizeof *f);
    f->m = m;
    f->g = m->dev;
    f->dm = &f->g->dm;
    f->b = b;
    f->cx = (di_cuda_ctx *)&f->g->cx;
    f->cx_side = (di_cuda_ctx *)&f->g->cx_side;
    f->s = f->cx->stream;
    f->stg = &((gpu_model *)f->g)->stg;
    f->arena = &((gpu_model *)f->g)->arena;
    gpu_bumps_reset(f);
    f->R = b->n_rows;
    gpu_graph_begin(f); /* from here on the call's operations may be captured */
    const di_config *c = &m->cfg;
    f->row_seq = di_xmalloc(sizeof(int) * (size_t)f->R);
    f->row_pos = di_xmalloc(sizeof(int64_t) * (size_t)f->R);
    f->seq_row0 = di_xmalloc(sizeof(int) * (size_t)b->n_seqs);
    f->seq_pos0 = di_xmalloc(sizeof(int64_t) * (size_t)b->n_seqs);
    for (int s = 0, r = 0; s < b->n_seqs; s++) {
        f->seq_row0[s] = r;
        f->seq_pos0[s] = b->seqs[s]->n_tokens;
        for (int j = 0; j < b->seq_n_rows[s]; j++, r++) {
            f->row_seq[r] = s;
            f->row_pos[r] = f->seq_pos0[s] + j;
        }
    }
    f->d_row_pos = gpu_upload(f, f->row_pos, sizeof(int64_t) * (size_t)f->R);
    f->d_row_seq = gpu_upload(f, f->row_seq, sizeof(int) * (size_t)f->R);
    f->d_seq_pos0 = gpu_upload(f, f->seq_pos0, sizeof(int64_t) * (size_t)b->n_seqs);
    f->d_seq_row0 = gpu_upload(f, f->seq_row0, sizeof(int) * (size_t)b->n_seqs);
    f->d_seq_n_rows = gpu_upload(f, b->seq_n_rows, sizeof(int) * (size_t)b->n_seqs);
    const float **pools = di_xmalloc(sizeof(float *) * (size_t)b->n_seqs);
    for (int s = 0; s < b->n_seqs; s++) pools[s] = b->seqs[s]->pool->dev_base;
    f->d_pools = gpu_upload(f, pools, sizeof(float *) * (size_t)b->n_seqs);
    free(pools);
    /* RoPE rows of every row's position, for both tables */
    const int half = c->qk_rope_head_dim / 2;
    float *cs = di_xmalloc(sizeof(float) * (size_t)f->R * half), *sn = di_xmalloc(sizeof(float) * (size_t)f->R * half);
    for (int kind = 0; kind < 2; kind++) {
        for (int r = 0; r < f->R; r++) di_model_rope_row(m, kind, f->row_pos[r], cs + (size_t)r * half, sn + (size_t)r * half);
        f->d_cos[kind] = gpu_upload(f, cs, sizeof(float) * (size_t)f->R * half);
        f->d_sin[kind] = gpu_upload(f, sn, sizeof(float) * (size_t)f->R * half);
    }
    free(cs);
    free(sn);
    /* block tables (reserved before the call: every entry this call writes has its block), all in
     * one upload: one copy instead of one per sequence and KV source (thousands at B = 256) */
    const int n_tables = c->n_kv_sources * b->n_seqs;
    f->d_blocks = di_xcalloc((size_t)(n_tables ? n_tables : 1), sizeof(int32_t *));
    size_t n_entries = 0;
    for (int k = 0; k < c->n_kv_sources; k++)
        for (int s = 0; s < b->n_seqs; s++) n_entries += (size_t)b->seqs[s]->kv[k].n_blocks;
    int32_t *tables = di_xmalloc(sizeof(int32_t) * (n_entries ? n_entries : 1));
    size_t at = 0;
    for (int k = 0; k < c->n_kv_sources; k++)
        for (int s = 0; s < b->n_seqs; s++) {
            const di_kv_source_state *ks = &b->seqs[s]->kv[k];
            memcpy(tables + at, ks->blocks, sizeof(int32_t) * (size_t)ks->n_blocks);
            at += (size_t)ks->n_blocks;
        }
    f->d_block_tables = gpu_upload(f, tables, sizeof(int32_t) * n_entries);
    free(tables);
    at = 0;
    for (int k = 0; k < c->n_kv_sources; k++)
        for (int s = 0; s < b->n_seqs; s++) {
            f->d_blocks[k * b->n_seqs + s] = f->d_block_tables + at;
            at += (size_t)b->seqs[s]->kv[k].n_blocks;
        }
    f->d_blocks_dev = gpu_upload(f, f->d_blocks, sizeof(int32_t *) * (size_t)c->n_kv_sources * b->n_seqs);
    const int n_idx = c->n_index_sources;
    f->d_sel = di_xcalloc((size_t)(n_idx ? n_idx : 1), sizeof(int32_t *));
    f->sel_len = di_xcalloc((size_t)(n_idx ? n_idx : 1), sizeof(int));
    f->sel_valid = di_xcalloc((size_t)(n_idx ? n_idx : 1), sizeof(bool));
    for (int i = 0; i < n_idx; i++) f->d_sel[i] = gpu_alloc(f, sizeof(int32_t) * (size_t)f->R * c->index_topk);
    f->d_cand = NULL;
    f->cand_nb = -1; /* no candidate pool yet */
    const int64_t W = (int64_t)(c->n_dspark_targets ? c->n_dspark_targets : 1) * c->hidden_size;
    f->d_main_hidden = gpu_alloc(f, sizeof(float) * (size_t)f->R * W);
}

static void call_free(gpu_fwd *f) {
    const di_config *c = &f->m->cfg;
    gpu_free(f, f->d_row_pos);
    gpu_free(f, f->d_row_seq);
    gpu_free(f, f->d_seq_pos0);
    gpu_free(f, f->d_seq_row0);
    gpu_free(f, f->d_seq_n_rows);
    gpu_free(f, (void *)f->d_pools);
    gpu_free(f, f->d_blocks_dev);
    for (int kind = 0; kind < 2; kind++) {
        gpu_free(f, f->d_cos[kind]);
        gpu_free(f, f->d_sin[kind]);
    }
    gpu_free(f, f->d_block_tables);
    for (int i = 0; i < c->n_index_sources; i++) gpu_free(f, f->d_sel[i]);
    gpu_free(f, f->d_cand);
    gpu_free(f, f->d_main_hidden);
    free(f->d_blocks);
    free(f->d_sel);
    free(f->sel_len);
    free(f->sel_valid);
    free(f->row_seq);
    free(f->row_pos);
    free(f->seq_row0);
    free(f->seq_pos0);
}

/* The batch was checked (and blocks reserved) by di_forward_begin. Everything is enqueued (or
 * launched as graphs) here; gpu_forward_end waits and hands the downloads over. */
di_status gpu_forward_begin(const di_model *m, di_batch *b, di_err *err) {
    const di_config *c = &m->cfg;
    gpu_model *g = m->dev;
    if (g->pending) gpu_forward_end(m, NULL, err); /* a call begun and never ended */
    gpu_fwd f;
    call_init(&f, m, b);
    if (g->have_end) { /* the previous call's end: the idle gap runs from it to this start */
        cudaEvent_t t = g->ev_prev_end;
        g->ev_prev_end = g->ev_end;
        g->ev_end = t;
    }
    if (!f.capturing) cudaEventRecord(g->ev_start, f.s); /* else just before the graph's launch */
    const int R = f.R, n = c->hc_mult;
    const int64_t D = c->hidden_size, W = (int64_t)c->n_dspark_targets * D;
    uint16_t *X = gpu_alloc(&f, sizeof(uint16_t) * (size_t)R * n * D); /* [R, n, D] bf16 stream */
    float *pre = gpu_alloc(&f, sizeof(float) * (size_t)R * n);   /* [R, n] fp32 pre-mix */
    int32_t *d_tokens = gpu_upload(&f, b->tokens, sizeof(int32_t) * (size_t)R);
    di_cuda_embed(f.dm->embed, d_tokens, R, n, D, X, pre, f.s);
    gpu_free(&f, d_tokens);
    if (b->debug_fn) { /* each row's copy 0, widened */
        float *e = gpu_alloc(&f, sizeof(float) * (size_t)R * D);
        for (int r = 0; r < R; r++) di_cuda_bf16_to_f32(X + (size_t)r * n * D, 1, D, e + (size_t)r * D, D, f.s);
        gpu_debug(&f, "embed_out", -1, e, (int64_t)R * D);
        gpu_free(&f, e);
    }
    hc_post_pending pend = {false, NULL, NULL, NULL, NULL, {0}};
    for (int l = 0; l < m->n_layers; l++) {
        const di_layer *L = &f.g->layers[l], *hL = &m->layers[l];
        if (L->engram_slot >= 0) {
            gpu_stage(&f, ST_ENGRAM);
            gpu_engram(&f, L, hL, X);
            gpu_stage(&f, ST_OTHER);
            gpu_debug_bf16(&f, "engram_out", l, X, (int64_t)R * n * D);
        }
        for (int t = 0; t < c->n_dspark_targets; t++)
            if (c->dspark_target_layer_ids[t] == l) di_cuda_hc_mean(X, R, n, D, f.d_main_hidden + t * D, W, f.s);
        gpu_debug_bf16(&f, "block_in", l, X, (int64_t)R * n * D);
        const bool defer = hc_post_defers(&f, l);
        block(&f, l, X, pre, &pend, defer);
        if (!defer) gpu_debug_bf16(&f, "block_out", l, X, (int64_t)R * n * D);
        /* the first piece ends after layer 0, so the device starts sooner; then every
         * GPU_GRAPH_PIECE_LAYERS layers */
        if ((l == 0 || (l + 1) % GPU_GRAPH_PIECE_LAYERS == 0) && l + 1 < m->n_layers) gpu_graph_cut(&f, g->ev_start);
    }
    if (W > 0) gpu_debug(&f, "main_hidden", -1, f.d_main_hidden, R * W);
    gpu_stage(&f, ST_HEAD);
    if (b->logits || b->head_tokens) gpu_head(&f, X, pre);
    gpu_stage(&f, ST_OTHER);
    if (b->main_hidden && W > 0) gpu_download_async(&f, b->main_hidden, f.d_main_hidden, sizeof(float) * (size_t)R * W);
    commit_states(&f);
    gpu_free(&f, X);
    gpu_free(&f, pre);
    call_free(&f);
    if (f.capturing) gpu_graph_launch(&f, g->ev_start);
    cudaEventRecord(g->ev_end, f.s);
    g->pending = di_xmalloc(sizeof f);
    *g->pending = f;
    return DI_OK;
}

/* a finished call's device wait for its graph pieces: from each timed piece's end to the next one's
 * launch (gpu_graph_launch's events); -1 with fewer than two timed pieces */
static double pieces_wait_ms(const gpu_model *g, int pieces_timed) {
    double wait = pieces_timed > 1 ? 0.0 : -1.0;
    for (int k = 1; k < pieces_timed; k++) {
        float ms = 0.0f;
        if (cudaEventElapsedTime(&ms, g->ev_piece_out[k - 1], g->ev_piece_in[k]) == cudaSuccess) wait += ms;
    }
    return wait;
}

di_status gpu_forward_end(const di_model *m, di_batch *b, di_err *err) {
    (void)err;
    gpu_model *g = m->dev;
    gpu_fwd *f = g->pending;
    if (!f) return DI_OK;
    if (f->head_pending.logits) { /* the edited rows' token pass, behind the call; the step ends after it */
        if (b) f->b = b;         /* the begun batch (NULL: a call abandoned, whose pass is dropped) */
        gpu_head_finish(f, b != NULL);
        cudaEventRecord(g->ev_end, f->s);
    }
    cudaError_t e = cudaStreamSynchronize(f->s);
    if (e != cudaSuccess) di_die("CUDA error in the forward pass: %s", cudaGetErrorString(e));
    gpu_downloads_finish(f);
    g->last_piece_wait_ms = pieces_wait_ms(g, f->pieces_timed);
    free(f);
    g->pending = NULL;
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, g->ev_start, g->ev_end);
    g->last_gpu_ms = ms;
    g->last_idle_ms = -1.0;
    if (g->have_end && cudaEventElapsedTime(&ms, g->ev_prev_end, g->ev_start) == cudaSuccess) g->last_idle_ms = ms;
    g->have_end = true;
    return DI_OK;
}

void gpu_step_times(const di_model *m, di_step_times *out) {
    gpu_model *g = m->dev;
    g->piece_timing = true; /* from the next call on: a step loop that never asks records no piece events */
    out->gpu_ms = g->last_gpu_ms;
    out->idle_ms = g->last_idle_ms;
    out->piece_wait_ms = g->last_piece_wait_ms;
}
