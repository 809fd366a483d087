/* Internal state of one forward call, shared by the stage files (forward.c, attention.c,
 * indexer.c, moe.c, engram.c). Not part of any public interface. */
#ifndef DI_FORWARD_INTERNAL_H
#define DI_FORWARD_INTERNAL_H

#include "backend/cpu/cpu_ops.h"
#include "forward/forward.h"

typedef struct fwd_ctx {
    const di_model *m;
    di_batch *b;
    int R;                        /* rows */
    int *row_seq;                 /* [R] sequence index */
    int64_t *row_pos;             /* [R] absolute position */
    int *seq_row0;                /* [n_seqs] first row */
    int64_t *seq_pos0;            /* [n_seqs] position of the first row (state length at entry) */
    /* published indexer selections, per index-source slot: [R, index_topk] compressed positions,
     * -1 = none; sel_valid[slot] once that source ran in this call */
    int32_t **sel;
    int *sel_len;                 /* [n_index_sources] entries per row (k = min(topk, P)) */
    bool *sel_valid;
    uint8_t **cand;               /* [R] -> [n_blocks] candidate-pool block flags of the row */
    int64_t *cand_nblocks;        /* [R] */
    float *main_hidden;           /* [R, n_targets*D] capture */
} fwd_ctx;

/* attention.c: x [R, D] attention input (normed) -> out [R, D] */
void di_fwd_attention(fwd_ctx *c, const di_layer *L, const float *x, float *out);
/* dspark.c: attention of a draft block (ring slots + all block rows) */
void di_fwd_dspark_attention(fwd_ctx *c, const di_layer *L, const float *x, float *out);
/* attention.c helpers shared with dspark.c */
void di_fwd_q_kv(const di_model *m, const di_layer *L, const float *x, int R, const int64_t *pos,
                 float *qr, float *q, float *kv);
void di_fwd_output_proj(const di_model *m, const di_attn_weights *a, const float *o, int R, float *out);
/* indexer.c: compressor + index keys of a KV source, for the rows of this call */
void di_fwd_compress(fwd_ctx *c, const di_layer *L, const float *x);
/* indexer.c: the indexer of an index source: publishes c->sel[L->index_slot] */
void di_fwd_indexer(fwd_ctx *c, const di_layer *L, const float *x, const float *qr);
/* moe.c: x [R, D] ffn input (normed) -> out [R, D] */
void di_fwd_moe(fwd_ctx *c, const di_layer *L, const float *x, float *out);
/* engram.c: X [R, hc, D] in place */
void di_fwd_engram(fwd_ctx *c, const di_layer *L, float *X);

/* Debug hook (see di_batch.debug_fn) */
static inline void di_fwd_debug(const fwd_ctx *c, const char *name, int layer, const float *data,
                                int64_t n) {
    if (c->b->debug_fn) c->b->debug_fn(c->b->debug_user, name, layer, (float *)data, n);
}

/* Helpers shared by the stages */
void di_fwd_rope_rows(const di_model *m, int kind, float *x, int64_t n_vec_per_row, int64_t stride,
                      int64_t offset, const int64_t *pos, int rows, bool inverse);
/* One block (model-spec §2.3) on rows [R, hc, D] with incoming pre-mix [R, hc]; pre is replaced
 * by this block's FFN pre-mix. */
void di_fwd_block(fwd_ctx *c, const di_layer *L, float *X, float *pre);

#endif
