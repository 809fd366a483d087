/* DSpark draft blocks (model-spec §4.2): three SWA-only blocks with their own rings and a 128-expert
 * MoE, run non-causally over a block of 5 rows [next token, noise x 4], then the shared head plus a
 * rank-r Markov bigram bias applied row by row (semi-autoregressive), and a confidence logit per
 * row. The rings hold only rows derived from the backbone (main_x of accepted positions). */
#include <stdlib.h>
#include <string.h>

#include "forward/forward_internal.h"

/* main_x = RMSNorm(main_norm, main_proj(main_hidden)) for n rows */
static void main_x_rows(const di_model *m, const float *main_hidden, int n, float *main_x) {
    const int64_t D = m->cfg.hidden_size;
    float *t = malloc(sizeof(float) * (size_t)n * D);
    di_cpu_linear(&m->dspark.main_proj, main_hidden, n, t, DI_LIN_QUANT);
    di_cpu_rmsnorm(t, m->dspark.main_norm, n, D, (float)m->cfg.rms_norm_eps, main_x);
    free(t);
}

void di_dspark_seed(const di_model *m, di_seq_state *s, const float *main_hidden, int64_t pos0, int n) {
    if (s->mem) return; /* device state: DSpark runs on the CPU backend only so far (draft refuses) */
    const di_config *cf = &m->cfg;
    const int64_t D = cf->hidden_size, Dh = cf->head_dim;
    float *mx = malloc(sizeof(float) * (size_t)n * D);  /* [n, D] bf16 */
    float *t = malloc(sizeof(float) * (size_t)n * Dh);  /* [n, Dh] */
    float *kv = malloc(sizeof(float) * (size_t)n * Dh); /* [n, Dh] bf16 (FP8 grid) */
    int64_t *pos = malloc(sizeof(int64_t) * (size_t)n);
    for (int r = 0; r < n; r++) pos[r] = pos0 + r;
    main_x_rows(m, main_hidden, n, mx);
    for (int k = 0; k < cf->num_nextn_predict_layers; k++) {
        const di_layer *L = &m->layers[m->n_layers + k];
        di_cpu_linear(&L->attn.wkv, mx, n, t, DI_LIN_QUANT);
        di_cpu_rmsnorm(t, L->attn.kv_norm, n, Dh, (float)cf->rms_norm_eps, kv);
        di_fwd_rope_rows(m, 0, kv, 1, Dh, Dh - cf->qk_rope_head_dim, pos, n, false);
        di_cpu_act_quant_inplace(kv, (int64_t)n * Dh, 32);
        for (int r = 0; r < n; r++)
            memcpy(s->swa[L->id] + (size_t)(pos[r] % cf->sliding_window) * Dh, kv + r * Dh, sizeof(float) * (size_t)Dh);
    }
    free(mx);
    free(t);
    free(kv);
    free(pos);
}

/* Attention of a draft block: every row sees ring slots 0..min(W, p+1)-1 in slot order, then all
 * block rows (non-causal). */
void di_fwd_dspark_attention(fwd_ctx *c, const di_layer *L, const float *x, float *out) {
    const di_model *m = c->m;
    const di_config *cf = &m->cfg;
    const int R = c->R, H = cf->num_attention_heads, Dh = cf->head_dim, W = cf->sliding_window;
    const int64_t p = c->row_pos[0] - 1;
    float *qr = malloc(sizeof(float) * (size_t)R * cf->q_lora_rank);
    float *q = malloc(sizeof(float) * (size_t)R * H * Dh);
    float *kv = malloc(sizeof(float) * (size_t)R * Dh);
    float *o = malloc(sizeof(float) * (size_t)R * H * Dh);
    const float **list = malloc(sizeof(float *) * (size_t)(W + R));
    di_fwd_q_kv(m, L, x, R, c->row_pos, qr, q, kv);
    int n = 0;
    const float *ring = c->b->seqs[0]->swa[L->id];
    for (int64_t slot = 0; slot < W && slot <= p; slot++) list[n++] = ring + slot * Dh;
    for (int r = 0; r < R; r++) list[n++] = kv + (size_t)r * Dh;
    const float scale = (float)(1.0 / sqrt((double)Dh));
    for (int r = 0; r < R; r++)
        di_cpu_sparse_attn(q + (size_t)r * H * Dh, H, Dh, list, n, L->attn.attn_sink, scale, o + (size_t)r * H * Dh);
    di_fwd_rope_rows(m, 0, o, H, Dh, Dh - cf->qk_rope_head_dim, c->row_pos, R, true);
    di_fwd_output_proj(m, &L->attn, o, R, out);
    free(qr);
    free(q);
    free(kv);
    free(o);
    free(list);
}

/* Head: base logits from the shared head, Markov bias from each row's input token, confidence. */
static void draft_head(const di_model *m, const float *X, const float *pre, int R, int32_t first,
                       di_dspark_out *out) {
    const di_config *cf = &m->cfg;
    const int n = cf->hc_mult, rank = cf->dspark_markov_rank;
    const int64_t D = cf->hidden_size, V = cf->vocab_size;
    float *xh = malloc(sizeof(float) * (size_t)D), *xn = malloc(sizeof(float) * (size_t)D);
    float *logits = malloc(sizeof(float) * (size_t)V), *bias = malloc(sizeof(float) * (size_t)V);
    float *cat = malloc(sizeof(float) * (size_t)(D + rank));
    int32_t y = first;
    out->tokens[0] = first;
    for (int i = 0; i < R; i++) {
        di_cpu_hc_pre(X + (size_t)i * n * D, n, D, pre + i * n, xh);
        di_cpu_rmsnorm(xh, m->dspark.norm, 1, D, (float)cf->rms_norm_eps, xn);
        di_cpu_linear(&m->head, xn, 1, logits, DI_LIN_F32);
        const uint8_t *e = (const uint8_t *)m->dspark.markov_embed.data + (size_t)y * rank * 2;
        memcpy(cat, xh, sizeof(float) * (size_t)D);
        for (int k = 0; k < rank; k++) cat[D + k] = di_bf16_load(e + 2 * k);
        di_cpu_linear(&m->dspark.markov_head, cat + D, 1, bias, DI_LIN_F32);
        int64_t best = 0;
        for (int64_t v = 0; v < V; v++) {
            logits[v] += bias[v];
            if (logits[v] > logits[best]) best = v;
        }
        if (out->logits) memcpy(out->logits + (size_t)i * V, logits, sizeof(float) * (size_t)V);
        di_cpu_linear(&m->dspark.conf_proj, cat, 1, &out->confidence[i], DI_LIN_F32);
        y = (int32_t)best;
        out->tokens[i + 1] = y;
    }
    free(xh);
    free(xn);
    free(logits);
    free(bias);
    free(cat);
}

di_status di_dspark_draft(const di_model *m, di_seq_state *s, int64_t p, int32_t next_token,
                          di_dspark_out *out, di_err *err) {
    const di_config *cf = &m->cfg;
    const int R = cf->dspark_block_size, n = cf->hc_mult;
    const int64_t D = cf->hidden_size;
    if (cf->num_nextn_predict_layers <= 0) return di_errf(err, DI_EUNSUPPORTED, "model has no DSpark blocks");
    if (s->mem) return di_errf(err, DI_EUNSUPPORTED, "DSpark drafting runs on the CPU backend only so far");
    if (R > DI_FWD_MAX_DSPARK_BLOCK) return di_errf(err, DI_EUNSUPPORTED, "dspark_block_size %d > %d", R, DI_FWD_MAX_DSPARK_BLOCK);
    if (next_token < 0 || next_token >= cf->vocab_size)
        return di_errf(err, DI_ERANGE, "DSpark anchor token %d out of range", next_token);
    if (p < 0) return di_errf(err, DI_EINVAL, "DSpark anchor position %lld", (long long)p);
    int32_t tokens[DI_FWD_MAX_DSPARK_BLOCK + 1];
    int64_t pos[DI_FWD_MAX_DSPARK_BLOCK + 1];
    int row_seq[DI_FWD_MAX_DSPARK_BLOCK + 1] = {0};
    for (int r = 0; r < R; r++) {
        tokens[r] = r == 0 ? next_token : cf->dspark_noise_token_id;
        pos[r] = p + 1 + r;
    }
    di_batch b = {.n_rows = R, .tokens = tokens, .n_seqs = 1, .seqs = &s, .seq_n_rows = &R};
    fwd_ctx c = {.m = m, .b = &b, .R = R, .row_seq = row_seq, .row_pos = pos};
    float *X = malloc(sizeof(float) * (size_t)R * n * D);
    float *pre = calloc((size_t)R * n, sizeof(float));
    for (int r = 0; r < R; r++) {
        const uint8_t *e = (const uint8_t *)m->embed + (size_t)tokens[r] * D * 2;
        for (int i = 0; i < n; i++)
            for (int64_t k = 0; k < D; k++) X[((size_t)r * n + i) * D + k] = di_bf16_load(e + 2 * k);
        pre[r * n] = 1.0f;
    }
    for (int k = 0; k < cf->num_nextn_predict_layers; k++) di_fwd_block(&c, &m->layers[m->n_layers + k], X, pre);
    draft_head(m, X, pre, R, next_token, out);
    free(X);
    free(pre);
    return DI_OK;
}
