/* Top level of the forward pass (model-spec §2.1, §2.3): embedding into the 4-copy hc stream,
 * Engram and the mHC blocks layer by layer over all rows, then collapse, final norm and head.
 * The stages live in attention.c, indexer.c, moe.c and engram.c. */
#include <stdlib.h>
#include <string.h>

#include "forward/device.h"
#include "forward/forward_internal.h"
#include "forward/host_steps.h"
#include "sample/sample_edits.h"
#include "sample/sampler.h"

void di_fwd_rope_rows(const di_model *m, int kind, float *x, int64_t n_vec_per_row, int64_t stride,
                      int64_t offset, const int64_t *pos, int rows, bool inverse) {
    const int rd = m->cfg.qk_rope_head_dim;
    float cs[DI_FWD_MAX_ROPE_DIM / 2], sn[DI_FWD_MAX_ROPE_DIM / 2];
    for (int r = 0; r < rows; r++) {
        di_model_rope_row(m, kind, pos[r], cs, sn);
        di_cpu_rope(x + (size_t)r * n_vec_per_row * stride, n_vec_per_row, stride, offset, rd, cs, sn,
                    inverse);
    }
}

/* hc_mixes of one token: stream [hc, D] -> pre [hc], post [hc], comb [hc, hc] */
static void hc_mixes(const di_model *m, const float *x, const void *fn, const float *scale,
                     const float *base, float *pre, float *post, float *comb) {
    const di_config *c = &m->cfg;
    float mix[DI_FWD_MAX_HC * (DI_FWD_MAX_HC + 2)];
    di_cpu_hc_mix_logits(x, c->hc_mult, c->hidden_size, fn, (float)c->rms_norm_eps, mix);
    di_cpu_hc_split_sinkhorn(mix, scale, base, c->hc_mult, c->hc_sinkhorn_iters, (float)c->hc_eps,
                             pre, post, comb);
}

void di_fwd_block(fwd_ctx *c, const di_layer *L, float *X, float *pre) {
    const di_model *m = c->m;
    const int R = c->R, n = m->cfg.hc_mult;
    const int64_t D = m->cfg.hidden_size, HD = n * D;
    const float eps = (float)m->cfg.rms_norm_eps;
    float *a_pre = malloc(sizeof(float) * (size_t)R * n);      /* [R, hc] */
    float *a_post = malloc(sizeof(float) * (size_t)R * n);     /* [R, hc] */
    float *a_comb = malloc(sizeof(float) * (size_t)R * n * n); /* [R, hc, hc] */
    float *f_post = malloc(sizeof(float) * (size_t)R * n);
    float *f_comb = malloc(sizeof(float) * (size_t)R * n * n);
    float *tmp = calloc((size_t)R * D, sizeof(float));         /* [R, D] bf16 */
    float *sub_in = malloc(sizeof(float) * (size_t)R * D);     /* [R, D] bf16 */
    float *sub_out = malloc(sizeof(float) * (size_t)R * D);    /* [R, D] bf16 */
    float *Y = malloc(sizeof(float) * (size_t)R * HD);         /* [R, hc, D] bf16 */

    di_fwd_debug(c, "pre_mix_in", L->id, pre, (int64_t)R * n);
    for (int r = 0; r < R; r++) {
        hc_mixes(m, X + r * HD, L->hc_attn_fn, L->hc_attn_scale, L->hc_attn_base, a_pre + r * n,
                 a_post + r * n, a_comb + r * n * n);
        di_cpu_hc_pre(X + r * HD, n, D, pre + r * n, tmp + r * D);
    }
    di_cpu_rmsnorm(tmp, L->attn_norm, R, D, eps, sub_in);
    di_fwd_debug(c, "attn_in", L->id, sub_in, R * D);
    di_fwd_attention(c, L, sub_in, sub_out);
    di_fwd_debug(c, "attn_out", L->id, sub_out, R * D);
    for (int r = 0; r < R; r++) {
        di_cpu_hc_post(sub_out + r * D, X + r * HD, n, D, a_post + r * n, a_comb + r * n * n, Y + r * HD);
        hc_mixes(m, Y + r * HD, L->hc_ffn_fn, L->hc_ffn_scale, L->hc_ffn_base, pre + r * n,
                 f_post + r * n, f_comb + r * n * n);
        di_cpu_hc_pre(Y + r * HD, n, D, a_pre + r * n, tmp + r * D);
    }
    di_cpu_rmsnorm(tmp, L->ffn_norm, R, D, eps, sub_in);
    di_fwd_debug(c, "ffn_in", L->id, sub_in, R * D);
    di_fwd_moe(c, L, sub_in, sub_out);
    di_fwd_debug(c, "ffn_out", L->id, sub_out, R * D);
    di_fwd_debug(c, "pre_mix_out", L->id, pre, (int64_t)R * n);
    for (int r = 0; r < R; r++)
        di_cpu_hc_post(sub_out + r * D, Y + r * HD, n, D, f_post + r * n, f_comb + r * n * n, X + r * HD);
    free(a_pre);
    free(a_post);
    free(a_comb);
    free(f_post);
    free(f_comb);
    free(tmp);
    free(sub_in);
    free(sub_out);
    free(Y);
}

/* A DI_WANT_EDITED row: a device's, with its sampler inputs valid, a buffer for its logprobs if it
 * asks for them, and a history whose ids a penalty can read. */
static di_status check_edited_row(const di_model *m, const di_batch *b, int r, di_err *err) {
    if (!m->dev_backend)
        return di_errf(err, DI_EINVAL, "forward: row %d: DI_WANT_EDITED is a device backend's (the CPU "
                       "backend's caller samples the logits: DI_WANT_LOGITS)", r);
    if (!b->sample_rows || !b->sample_rows[r].params)
        return di_errf(err, DI_EINVAL, "forward: row %d wants an edited token but the batch has no sample_rows", r);
    const di_sample_row *row = &b->sample_rows[r];
    di_status st = di_sampling_params_validate(row->params, m->cfg.vocab_size, err);
    if (!st && row->params->logprobs > 0 && !b->head_logprobs)
        st = di_errf(err, DI_EINVAL, "sampling: logprobs = %d but the batch has no head_logprobs buffer",
                     row->params->logprobs);
    if (!st) st = di_sample_history_check(row, m->cfg.vocab_size, err);
    return st ? di_err_prefix(err, "forward: row %d", r) : DI_OK;
}

static di_status check_batch(const di_model *m, const di_batch *b, di_err *err) {
    if (b->n_rows <= 0 || b->n_seqs <= 0) return di_errf(err, DI_EINVAL, "forward: empty batch");
    int total = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        if (b->seq_n_rows[s] <= 0) return di_errf(err, DI_EINVAL, "forward: sequence %d has no rows", s);
        total += b->seq_n_rows[s];
        if (b->seqs[s]->n_tokens + b->seq_n_rows[s] > m->cfg.max_position_embeddings)
            return di_errf(err, DI_ERANGE, "forward: sequence %d would reach position %lld, beyond "
                           "max_position_embeddings %d", s,
                           (long long)(b->seqs[s]->n_tokens + b->seq_n_rows[s]),
                           m->cfg.max_position_embeddings);
        for (int t = 0; t < s; t++)
            if (b->seqs[t] == b->seqs[s])
                return di_errf(err, DI_EINVAL, "forward: sequence state %d appears twice", s);
    }
    if (total != b->n_rows)
        return di_errf(err, DI_EINVAL, "forward: rows per sequence add up to %d, batch has %d", total,
                       b->n_rows);
    /* compressed-entry blocks for every sequence, before anything is written */
    for (int s = 0; s < b->n_seqs; s++) {
        di_seq_state *st = b->seqs[s];
        if (di_seq_state_reserve(st, st->n_tokens + b->seq_n_rows[s], err))
            return di_err_prefix(err, "forward: sequence %d", s);
    }
    for (int r = 0; r < b->n_rows && b->want_logits; r++) {
        const uint8_t w = b->want_logits[r];
        if (w > DI_WANT_EDITED)
            return di_errf(err, DI_EINVAL, "forward: want_logits[%d] = %d: not a DI_WANT_* value", r, w);
        if ((w == DI_WANT_TOKEN || w == DI_WANT_SAMPLE || w == DI_WANT_EDITED) && !b->head_tokens)
            return di_errf(err, DI_EINVAL, "forward: row %d wants its %s token but the batch has no "
                           "head_tokens buffer", r, w == DI_WANT_TOKEN ? "greedy" : "sampled");
        if (w == DI_WANT_EDITED) {
            di_status st = check_edited_row(m, b, r, err);
            if (st) return st;
        }
        if (w == DI_WANT_SAMPLE && !b->row_sampling)
            return di_errf(err, DI_EINVAL, "forward: row %d wants a sampled token but the batch has no "
                           "row_sampling", r);
        if (w == DI_WANT_SAMPLE && di_plain_sampling_validate(&b->row_sampling[r], m->cfg.vocab_size, err))
            return di_err_prefix(err, "forward: row %d", r);
    }
    for (int r = 0; r < b->n_rows; r++)
        if (b->tokens[r] < 0 || b->tokens[r] >= m->cfg.vocab_size)
            return di_errf(err, DI_ERANGE, "forward: token id %d at row %d outside [0, %d)",
                           b->tokens[r], r, m->cfg.vocab_size);
    return DI_OK;
}

static void ctx_init(fwd_ctx *c, const di_model *m, di_batch *b) {
    memset(c, 0, sizeof *c);
    c->m = m;
    c->b = b;
    c->R = b->n_rows;
    c->row_seq = malloc(sizeof(int) * (size_t)c->R);
    c->row_pos = malloc(sizeof(int64_t) * (size_t)c->R);
    c->seq_row0 = malloc(sizeof(int) * (size_t)b->n_seqs);
    c->seq_pos0 = malloc(sizeof(int64_t) * (size_t)b->n_seqs);
    int r = 0;
    for (int s = 0; s < b->n_seqs; s++) {
        c->seq_row0[s] = r;
        c->seq_pos0[s] = b->seqs[s]->n_tokens;
        for (int j = 0; j < b->seq_n_rows[s]; j++, r++) {
            c->row_seq[r] = s;
            c->row_pos[r] = c->seq_pos0[s] + j;
        }
    }
    const int n_idx = m->cfg.n_index_sources;
    c->sel = calloc((size_t)n_idx, sizeof(int32_t *));
    c->sel_len = calloc((size_t)n_idx, sizeof(int));
    c->sel_valid = calloc((size_t)n_idx, sizeof(bool));
    for (int i = 0; i < n_idx; i++)
        c->sel[i] = malloc(sizeof(int32_t) * (size_t)c->R * m->cfg.index_topk);
    c->cand = calloc((size_t)c->R, sizeof(uint8_t *));
    c->cand_nblocks = calloc((size_t)c->R, sizeof(int64_t));
}

static void ctx_free(fwd_ctx *c) {
    for (int i = 0; i < c->m->cfg.n_index_sources; i++) free(c->sel[i]);
    for (int r = 0; r < c->R; r++) free(c->cand[r]);
    free(c->sel);
    free(c->sel_len);
    free(c->sel_valid);
    free(c->cand);
    free(c->cand_nblocks);
    free(c->row_seq);
    free(c->row_pos);
    free(c->seq_row0);
    free(c->seq_pos0);
    free(c->main_hidden);
}

/* DSpark input: mean over the hc copies of the stream entering a target layer, bf16(fp32 sum / n) */
static void capture_target(fwd_ctx *c, int target, const float *X) {
    const di_config *cf = &c->m->cfg;
    const int n = cf->hc_mult;
    const int64_t D = cf->hidden_size, W = (int64_t)cf->n_dspark_targets * D;
    for (int r = 0; r < c->R; r++) {
        for (int64_t k = 0; k < D; k++) {
            float s = 0.0f;
            for (int i = 0; i < n; i++) s += X[(r * n + i) * D + k];
            c->main_hidden[r * W + target * D + k] = di_bf16_round(s / (float)n);
        }
    }
}

static void head(fwd_ctx *c, const float *X, const float *pre) {
    const di_model *m = c->m;
    const int n = m->cfg.hc_mult;
    const int64_t D = m->cfg.hidden_size, V = m->cfg.vocab_size;
    const di_batch *b = c->b;
    float *y = malloc(sizeof(float) * (size_t)D), *yn = malloc(sizeof(float) * (size_t)D);
    float *row_logits = malloc(sizeof(float) * (size_t)V); /* [V] a row whose logits stay here */
    int64_t logit_row = 0, wanted = 0;
    di_sampler *sampler = NULL; /* the DI_WANT_SAMPLE rows' (5 MB of scratch at V4.1's vocabulary) */
    for (int r = 0; r < c->R; r++) {
        const int want = b->want_logits ? b->want_logits[r] : DI_WANT_LOGITS;
        if (want == DI_WANT_NONE) continue;
        di_cpu_hc_pre(X + r * n * D, n, D, pre + r * n, y);
        di_cpu_rmsnorm(y, m->norm, 1, D, (float)m->cfg.rms_norm_eps, yn);
        di_fwd_debug(c, "final_norm_out_row", r, yn, D);
        float *out = want == DI_WANT_LOGITS && b->logits ? b->logits + logit_row++ * V : row_logits;
        di_cpu_linear(&m->head, yn, 1, out, DI_LIN_F32);
        if (want == DI_WANT_SAMPLE) {
            di_err serr = {0};
            if (!sampler && di_sampler_create((int32_t)V, &sampler, &serr)) abort(); /* only V <= 0 fails */
            /* validated with the batch; the only failure left is a row with no finite logit (-1) */
            di_sampler_sample_plain(sampler, out, &b->row_sampling[r], &b->head_tokens[wanted], &serr);
        } else if (b->head_tokens) {
            b->head_tokens[wanted] = di_sample_greedy_token(out, (int32_t)V);
        }
        wanted++;
    }
    di_sampler_free(sampler);
    free(y);
    free(yn);
    free(row_logits);
}

/* After the layers: advance each sequence, keep its Engram history and newest DSpark input. */
static void commit_states(fwd_ctx *c) {
    const di_model *m = c->m;
    const di_batch *b = c->b;
    const int64_t W = (int64_t)m->cfg.n_dspark_targets * m->cfg.hidden_size;
    for (int s = 0; s < b->n_seqs; s++) {
        di_seq_state *st = b->seqs[s];
        di_seq_commit_tokens(m, st, b->tokens + c->seq_row0[s], b->seq_n_rows[s]);
        if (W > 0) {
            int last = c->seq_row0[s] + b->seq_n_rows[s] - 1;
            memcpy(st->main_hidden, c->main_hidden + last * W, sizeof(float) * (size_t)W);
            st->has_main_hidden = true;
        }
    }
}

static void cpu_forward(const di_model *m, di_batch *b) {
    const di_config *cf = &m->cfg;
    const int n = cf->hc_mult;
    const int64_t D = cf->hidden_size;
    fwd_ctx c;
    ctx_init(&c, m, b);
    const int R = c.R;
    c.main_hidden = calloc((size_t)R * (cf->n_dspark_targets ? cf->n_dspark_targets : 1) * D, sizeof(float));
    float *X = malloc(sizeof(float) * (size_t)R * n * D); /* [R, hc, D] bf16 stream */
    float *pre = calloc((size_t)R * n, sizeof(float));     /* [R, hc] fp32 pre-mix */
    for (int r = 0; r < R; r++) {
        const uint8_t *e = (const uint8_t *)m->embed + (size_t)b->tokens[r] * D * 2;
        for (int i = 0; i < n; i++)
            for (int64_t k = 0; k < D; k++) X[(r * n + i) * D + k] = di_bf16_load(e + 2 * k);
        pre[r * n] = 1.0f; /* identity pre-mix: copy 0 */
    }
    if (b->debug_fn) {
        float *e = malloc(sizeof(float) * (size_t)R * D);
        for (int r = 0; r < R; r++) memcpy(e + r * D, X + r * n * D, sizeof(float) * (size_t)D);
        di_fwd_debug(&c, "embed_out", -1, e, R * D);
        free(e);
    }
    for (int l = 0; l < m->n_layers; l++) {
        const di_layer *L = &m->layers[l];
        if (L->engram_slot >= 0) {
            di_fwd_engram(&c, L, X);
            di_fwd_debug(&c, "engram_out", l, X, R * n * D);
        }
        for (int t = 0; t < cf->n_dspark_targets; t++)
            if (cf->dspark_target_layer_ids[t] == l) capture_target(&c, t, X);
        di_fwd_debug(&c, "block_in", l, X, R * n * D);
        di_fwd_block(&c, L, X, pre);
        di_fwd_debug(&c, "block_out", l, X, R * n * D);
    }
    di_fwd_debug(&c, "main_hidden", -1, c.main_hidden, R * (int64_t)cf->n_dspark_targets * D);
    if (b->logits || b->head_tokens) head(&c, X, pre);
    if (b->main_hidden)
        memcpy(b->main_hidden, c.main_hidden, sizeof(float) * (size_t)R * cf->n_dspark_targets * D);
    commit_states(&c);
    free(X);
    free(pre);
    ctx_free(&c);
}

di_status di_forward_begin(const di_model *m, di_batch *b, di_err *err) {
    di_status st = check_batch(m, b, err);
    if (st) return st;
    if (m->dev_backend) return m->dev_backend->forward_begin(m, b, err);
    cpu_forward(m, b); /* the CPU computes on the calling thread: all of it here */
    return DI_OK;
}

di_status di_forward_end(const di_model *m, di_batch *b, di_err *err) {
    return m->dev_backend ? m->dev_backend->forward_end(m, b, err) : DI_OK;
}

di_status di_forward(const di_model *m, di_batch *b, di_err *err) {
    di_status st = di_forward_begin(m, b, err);
    return st ? st : di_forward_end(m, b, err);
}
