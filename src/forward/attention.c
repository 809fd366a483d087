/* Attention of one layer over all rows (model-spec §2.4): query, own SWA key/value, the
 * compressor and indexer of source layers, sparse attention over window + selected compressed
 * entries with sinks, inverse RoPE on the output, grouped output LoRA.
 *
 * Index lists follow the reference exactly, because sparse_attn's 64-entry runs depend on them:
 * a fresh prefill (sequence starting at position 0 in this call) gives row t min(S, W) window
 * entries starting at max(0, t-W+1), later positions -1; every other row (decode, later chunks)
 * gets W entries for positions t-W+1..t, -1 for negative positions. Compressed entries follow,
 * decoded from their pool records (forward/kv_record.h) into floats for the row. */
#include <stdlib.h>
#include <string.h>

#include "forward/forward_internal.h"
#include "forward/kv_record.h"

/* The KV row of position `q` of sequence s during this call: a row of the chunk or a ring slot. */
static const float *window_row(const fwd_ctx *c, const di_layer *L, int s, int64_t q, const float *kv) {
    const di_config *cf = &c->m->cfg;
    if (q >= c->seq_pos0[s]) return kv + (size_t)(c->seq_row0[s] + (q - c->seq_pos0[s])) * cf->head_dim;
    return c->b->seqs[s]->swa[L->id] + (size_t)(q % cf->sliding_window) * cf->head_dim;
}

/* list [W + index_topk] <- row r's entries; the compressed ones are decoded into rows [index_topk, Dh] */
static int build_index_list(const fwd_ctx *c, const di_layer *L, int r, const float *kv, const float **list,
                            float *rows) {
    const di_config *cf = &c->m->cfg;
    const int W = cf->sliding_window, s = c->row_seq[r];
    const int64_t t = c->row_pos[r];
    int n = 0;
    if (c->seq_pos0[s] == 0) {
        const int S = c->b->seq_n_rows[s];
        const int nw = S < W ? S : W;
        const int64_t first = t - W + 1 > 0 ? t - W + 1 : 0;
        for (int j = 0; j < nw; j++) {
            int64_t q = first + j;
            list[n++] = q <= t ? window_row(c, L, s, q, kv) : NULL;
        }
    } else {
        for (int j = 0; j < W; j++) {
            int64_t q = t - W + 1 + j;
            list[n++] = q >= 0 ? window_row(c, L, s, q, kv) : NULL;
        }
    }
    if (L->ratio > 0 && L->index_slot >= 0 && c->sel_valid[L->index_slot]) {
        const di_seq_state *st = c->b->seqs[s];
        const int32_t *sel = c->sel[L->index_slot] + (size_t)r * cf->index_topk;
        for (int j = 0; j < c->sel_len[L->index_slot]; j++) {
            const bool live = sel[j] >= 0 && sel[j] < st->kv[L->kv_slot].n;
            float *row = rows + (size_t)j * cf->head_dim;
            if (live) di_kv_record_values(di_seq_kv_rec(st, L->kv_slot, sel[j]), cf->head_dim, row);
            list[n++] = live ? row : NULL;
        }
    }
    return n;
}

/* Writes this call's SWA rows into each sequence's ring (after every row has attended). */
static void ring_write(fwd_ctx *c, const di_layer *L, const float *kv) {
    const di_config *cf = &c->m->cfg;
    for (int s = 0; s < c->b->n_seqs; s++) {
        const int S = c->b->seq_n_rows[s];
        const int j0 = S > cf->sliding_window ? S - cf->sliding_window : 0;
        for (int j = j0; j < S; j++) {
            int64_t p = c->seq_pos0[s] + j;
            memcpy(c->b->seqs[s]->swa[L->id] + (size_t)(p % cf->sliding_window) * cf->head_dim,
                   kv + (size_t)(c->seq_row0[s] + j) * cf->head_dim, sizeof(float) * (size_t)cf->head_dim);
        }
    }
}

/* o [R, H*Dh] -> out [R, D]: r_g = wo_a[g] @ o_g (bf16), out = wo_b(concat_g r_g) (FP8) */
void di_fwd_output_proj(const di_model *m, const di_attn_weights *a, const float *o, int R, float *out) {
    const di_config *cf = &m->cfg;
    const int G = cf->o_groups, rank = cf->o_lora_rank;
    const int64_t gcols = (int64_t)cf->num_attention_heads / G * cf->head_dim;
    float *og = malloc(sizeof(float) * (size_t)R * gcols);   /* [R, gcols] one group's heads */
    float *rg = malloc(sizeof(float) * (size_t)R * rank);    /* [R, rank] */
    float *cat = malloc(sizeof(float) * (size_t)R * G * rank); /* [R, G*rank] bf16 */
    for (int g = 0; g < G; g++) {
        di_weight wg = a->wo_a; /* rows g*rank .. (g+1)*rank-1: group g's block of the diagonal */
        wg.rows = rank;
        wg.row0 = (int64_t)g * rank;
        for (int r = 0; r < R; r++)
            memcpy(og + r * gcols, o + (size_t)r * G * gcols + g * gcols, sizeof(float) * (size_t)gcols);
        di_cpu_linear(&wg, og, R, rg, DI_LIN_BF16);
        for (int r = 0; r < R; r++)
            memcpy(cat + (size_t)r * G * rank + g * rank, rg + r * rank, sizeof(float) * (size_t)rank);
    }
    di_cpu_linear(&a->wo_b, cat, R, out, DI_LIN_QUANT);
    free(og);
    free(rg);
    free(cat);
}

/* q [R, H*Dh] and own SWA kv [R, Dh] of the rows (RoPE applied, kv fake-quantised FP8) */
void di_fwd_q_kv(const di_model *m, const di_layer *L, const float *x, int R, const int64_t *pos,
                 float *qr, float *q, float *kv) {
    const di_config *cf = &m->cfg;
    const int H = cf->num_attention_heads, Dh = cf->head_dim, rd = cf->qk_rope_head_dim;
    const float eps = (float)cf->rms_norm_eps;
    const int kind = L->ratio > 0;
    float *tmp = malloc(sizeof(float) * (size_t)R * (cf->q_lora_rank > Dh ? cf->q_lora_rank : Dh));
    di_cpu_linear(&L->attn.wq_a, x, R, tmp, DI_LIN_QUANT);
    di_cpu_rmsnorm(tmp, L->attn.q_norm, R, cf->q_lora_rank, eps, qr);
    di_cpu_linear(&L->attn.wq_b, qr, R, q, DI_LIN_QUANT);
    di_fwd_rope_rows(m, kind, q, H, Dh, Dh - rd, pos, R, false);
    di_cpu_linear(&L->attn.wkv, x, R, tmp, DI_LIN_QUANT);
    di_cpu_rmsnorm(tmp, L->attn.kv_norm, R, Dh, eps, kv);
    di_fwd_rope_rows(m, kind, kv, 1, Dh, Dh - rd, pos, R, false);
    di_cpu_act_quant_inplace(kv, (int64_t)R * Dh, 32);
    free(tmp);
}

void di_fwd_attention(fwd_ctx *c, const di_layer *L, const float *x, float *out) {
    if (L->is_dspark) {
        di_fwd_dspark_attention(c, L, x, out);
        return;
    }
    const di_model *m = c->m;
    const di_config *cf = &m->cfg;
    const int R = c->R, H = cf->num_attention_heads, Dh = cf->head_dim, rd = cf->qk_rope_head_dim;
    float *qr = malloc(sizeof(float) * (size_t)R * cf->q_lora_rank); /* [R, q_lora] bf16 */
    float *q = malloc(sizeof(float) * (size_t)R * H * Dh);          /* [R, H, Dh] bf16 */
    float *kv = malloc(sizeof(float) * (size_t)R * Dh);             /* [R, Dh] bf16 (FP8 grid) */
    float *o = malloc(sizeof(float) * (size_t)R * H * Dh);          /* [R, H, Dh] bf16 */
    di_fwd_q_kv(m, L, x, R, c->row_pos, qr, q, kv);
    if (L->is_kv_source) di_fwd_compress(c, L, x);
    if (L->is_index_source) di_fwd_indexer(c, L, x, qr);
    const float scale = (float)(1.0 / sqrt((double)Dh));
#pragma omp parallel if ((int64_t)R * H * Dh * (cf->sliding_window + cf->index_topk) > DI_CPU_PARALLEL_MIN_WORK)
    {
        const float **list = malloc(sizeof(float *) * (size_t)(cf->sliding_window + cf->index_topk));
        float *rows = malloc(sizeof(float) * (size_t)cf->index_topk * Dh); /* [index_topk, Dh] decoded entries */
#pragma omp for schedule(dynamic)
        for (int r = 0; r < R; r++) {
            int n = build_index_list(c, L, r, kv, list, rows);
            di_cpu_sparse_attn(q + (size_t)r * H * Dh, H, Dh, list, n, L->attn.attn_sink, scale,
                               o + (size_t)r * H * Dh);
        }
        free(list);
        free(rows);
    }
    di_fwd_rope_rows(m, L->ratio > 0, o, H, Dh, Dh - rd, c->row_pos, R, true);
    ring_write(c, L, kv);
    di_fwd_output_proj(m, &L->attn, o, R, out);
    free(qr);
    free(q);
    free(kv);
    free(o);
}
