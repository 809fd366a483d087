/* Device kernels the GPU forward pass (src/backend/cuda/gpu_forward*.c) needs beyond the op
 * table's (cuda_ops.h): data movement through pointer lists, the small element-wise stages of
 * the forward pass (src/forward/), and the fixed-order plain linear that makes every row's
 * result independent of the batch.
 *
 * Each function is the device twin of a loop in src/forward/ or src/backend/cpu/ and is tested
 * against a CPU reference in tests/cuda/test_cuda_fwd_ops.cu. All pointers are device pointers
 * (including the pointer arrays); every call is asynchronous on stream `s`. Buffers hold floats
 * with bf16-exact values where the CPU's do. */
#ifndef DI_BACKEND_CUDA_FWD_OPS_H
#define DI_BACKEND_CUDA_FWD_OPS_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend/cuda/cuda_ops.h"
#include "backend/ops.h"
#include "sample/sample_arith.h"
#include "sample/sampler.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- data movement (cuda_fwd_copy.cu) ---- */
/* for i < n: dst[i][0..width) = src[i][0..width); a NULL src[i] writes zeros, a NULL dst[i]
 * skips the row. Rows may be anywhere (ring slots, pool entries, chunk rows). */
void di_cuda_copy_rows(float *const *dst, const float *const *src, int64_t n, int64_t width,
                       cudaStream_t s);
/* dst [rows, width] (row stride dpitch floats) = src [rows, width] (row stride spitch floats): a
 * kernel, not a 2D copy (a graph's 2D copy nodes cannot be updated to another height) */
void di_cuda_copy_strided(float *dst, int64_t dpitch, const float *src, int64_t spitch, int64_t width,
                          int64_t rows, cudaStream_t s);
/* X [R, n, D] bf16 (the stream, cuda_ops.h mHC) = n copies of bf16 row tokens[r] of table [V, D]
 * (bf16 bits); pre [R, n] = one-hot copy 0 (forward.c, di_forward's embedding loop). tokens [R]
 * device. */
void di_cuda_embed(const uint16_t *table, const int32_t *tokens, int64_t R, int n, int64_t D,
                   uint16_t *X, float *pre, cudaStream_t s);
/* out[r * out_stride + k] = bf16((sum_i X[r, i, k]) / n), the fp32 sum in i order, X bf16
 * (forward.c capture_target) */
void di_cuda_hc_mean(const uint16_t *X, int64_t R, int n, int64_t D, float *out, int64_t out_stride,
                     cudaStream_t s);
/* x[i] = bf16(x[i] * scale) for i < n (the indexer's head-weight scale) */
void di_cuda_scale_bf16(float *x, int64_t n, float scale, cudaStream_t s);

/* ---- fixed-order plain linear (cuda_fwd_linear.cu) ---- */
/* y [m, w->rows] = x [m, w->cols] @ w^T with w BF16 or F32 (device data, any alignment of 2/4),
 * or F8_E4M3 read as its exact bf16 dequantisation (32x32 e8m0 blocks, w->row0 honoured: a row
 * block view). Each output is a double sum over k in a fixed order that does not depend on m
 * (lane l of a warp sums k = l, l+32, ... in order, then a fixed shuffle tree), rounded once to
 * fp32 (F32 mode) or to bf16 (BF16 mode): batch invariant by construction, and equal to the CPU's
 * K-ordered double sum whenever that sum is exact (bf16 x bf16 products: almost always). */
void di_cuda_linear_fixed(const di_weight *w, const float *x, int64_t m, float *y,
                          di_linear_mode mode, cudaStream_t s);

/* ---- grouped quantised linear (cuda_linear_quant.cu): the routed experts of a layer in one launch ---- */
/* For g < n_groups: y[row_off[g] .. row_off[g+1]) = x[same rows] @ W_g^T, W_g = (wdata[g], wscale[g])
 * with the dtype and shape of `shape` (FP8 32x32 or FP4 1x32 e8m0, 16-byte aligned); each group's
 * rows are bit for bit that group computed alone (exact path: = di_cuda_linear_quant; tensor cores:
 * = a one-group call -- a single-matrix call may split K by the weight's shape, groups never do). wdata, wscale, row_off
 * [n_groups + 1] are device arrays; rows (host) = row_off[n_groups] (x holds them contiguously) and
 * max_rows (host) bounds the rows of any group. active (device, or NULL): the groups with rows in
 * ascending order, then -1 (di_cuda_moe_group's list); the tensor-core kernel then launches
 * min(n_groups, rows) group slots instead of n_groups (a decode step's 6 experts of 48 or 384).
 * Where a row-tile list of its kernel's tile is noted for row_off (di_cuda_group_tiles_note,
 * di_cuda_linear_group_tile) it launches over that list's tiles instead: the same bits. */
void di_cuda_linear_quant_grouped(di_cuda_ctx *ctx, const di_weight *shape, const uint8_t *const *wdata,
                                  const uint8_t *const *wscale, const int *row_off, const int *active,
                                  int n_groups, int64_t rows, int64_t max_rows, const float *x, float *y);
/* The same for two weight sets over one x (the experts' w1 and w3), x quantised once: the bits of
 * two di_cuda_linear_quant_grouped calls. x_rows (or NULL): x's rows through a device list [rows]
 * instead, which only the tensor-core path takes (not exact mode: an error there); x (or NULL) is
 * then the buffer they point into, whose forms its producer may have noted (the int8 twin reads
 * its digits through the list). */
void di_cuda_linear_quant_grouped_pair(di_cuda_ctx *ctx, const di_weight *shape, const uint8_t *const *wdata_a,
                                       const uint8_t *const *wscale_a, const uint8_t *const *wdata_b,
                                       const uint8_t *const *wscale_b, const int *row_off, const int *active,
                                       int n_groups, int64_t rows, int64_t max_rows, const float *x,
                                       const float *const *x_rows, float *y_a, float *y_b);

/* ---- tensor-core linears (cuda_linear_mma.cu): run on ctx's stream, converted activations in
 * ctx's scratch (di_cuda_scratch) ---- */
/* act_quant(x, 32) of x [n_blocks * 32] as e4m3 codes q [n_blocks * 32] and power-of-two scales
 * [n_blocks]: the CPU's di_cpu_act_quant_block, bit for bit (the GEMMs' first step). rows (or
 * NULL): x's rows through a device list instead, rows[r] the r-th row of row_blocks blocks (x
 * unused): the MoE's gather into expert order, done while quantising. */
void di_cuda_act_quant_e4m3(const float *x, const float *const *rows, int64_t row_blocks, int64_t n_blocks, uint8_t *q,
                            float *scale, cudaStream_t s);
/* The values the act_quant leaves (codes times scales: the CPU's di_cpu_act_quant_block) as bf16
 * xb [n_blocks * 32], exact (the wgmma GEMM's operand; cuda_linear_wgmma.cu); rows as above */
void di_cuda_act_quant_bf16(const float *x, const float *const *rows, int64_t row_blocks, int64_t n_blocks, uint16_t *xb,
                            cudaStream_t s);
/* true when the tensor-core kernel takes this weight (K % 32 == 0, FP8 or FP4, whole matrix) */
bool di_cuda_linear_mma_supported(const di_weight *w);
/* One matrix (wdata, wscale; row_off NULL, n_groups 1) or groups (wdata_g, wscale_g, row_off device
 * arrays as di_cuda_linear_quant_grouped): x [rows, K] -> y [rows, N], bf16-rounded. */
void di_cuda_linear_mma(di_cuda_ctx *ctx, const di_weight *shape, const uint8_t *wdata, const uint8_t *wscale,
                        const uint8_t *const *wdata_g, const uint8_t *const *wscale_g, const int *row_off,
                        const int *active, int n_groups, int64_t rows, int64_t max_rows, const float *x, float *y);
/* Two grouped weight sets of one shape over the same x (the experts' w1 and w3): x quantised once;
 * y_a, y_b the bits of two di_cuda_linear_mma calls. x_rows (or NULL): x's rows through a device
 * list [rows] (di_cuda_act_quant_e4m3's rows; x, or NULL, the buffer they point into, as above). */
void di_cuda_linear_mma_pair(di_cuda_ctx *ctx, const di_weight *shape, const uint8_t *const *wdata_a,
                             const uint8_t *const *wscale_a, const uint8_t *const *wdata_b,
                             const uint8_t *const *wscale_b, const int *row_off, const int *active, int n_groups,
                             int64_t rows, int64_t max_rows, const float *x, const float *const *x_rows, float *y_a,
                             float *y_b);
/* the operand form of x a quantised linear of this shape (grouped: row_off given) quantises x to, so
 * that x's producer can make it (di_cuda_act_forms): e4m3 codes (the decode twin, the tiles), the
 * int8 twin's digits (FP4 at a few rows an expert), act_quant's values as bf16 (the wgmma GEMM;
 * through a row list read from the producer by the experts' w1 / w3 pair launch alone), or none it
 * can take (exact mode) */
typedef enum { DI_ACT_FORM_NONE, DI_ACT_FORM_E4M3, DI_ACT_FORM_DIGITS, DI_ACT_FORM_QBF16 } di_act_form;
di_act_form di_cuda_linear_act_form(const di_cuda_ctx *ctx, const di_weight *shape, bool grouped, int n_groups,
                                    int64_t rows, int64_t max_rows);
/* the rows of the tiles a grouped call of this shape (rows in n_groups groups, none past max_rows)
 * launches over when a row-tile list of them is noted for its row_off (di_cuda_group_tiles_note);
 * 0 where its kernel takes no list (exact mode, the mma.sync tiles). The grouping kernels make
 * the list (di_cuda_moe_group's tiles); without one the call launches over its groups' slots. */
int di_cuda_linear_group_tile(const di_cuda_ctx *ctx, const di_weight *shape, int n_groups, int64_t rows,
                              int64_t max_rows);

/* Single matrices of one K and dtype over the same x (wq_a and wkv; the shared expert's w1 and w3):
 * at the decode twin's sizes x is quantised once and one twin launch runs all n (<=
 * DI_GEMV_MAX_MATS), each y[i] the bits of its own di_cuda_linear_mma call. Returns false, having
 * launched nothing, where that does not apply (other sizes, exact mode, unsupported weights). */
bool di_cuda_linear_mma_set(di_cuda_ctx *ctx, int n, const di_weight *const *w, const float *x, int64_t m,
                            float *const *y);

/* With ctx->wgmma (DEEPINFER_GPU_WGMMA, default on), di_cuda_linear_mma's FP8 / FP4 (fp4) calls
 * and di_cuda_linear_bf16w8's past the decode twin's sizes (more than 16 rows of one matrix, 8 a
 * group; K % 128 == 0, FP4 K <= 5120) run on the wgmma kernel (cuda_linear_wgmma.cu):
 * bf16-dequantised operands summed over K in fp32 -- within the CPU's bound (test_cuda_ops
 * "linear_* wgmma", test_cuda_fwd_ops "linear_bf16w8 wgmma"), not the mma.sync kernel's bits. */
bool di_cuda_wgmma_taken(const di_cuda_ctx *ctx, bool fp4, int64_t K, int64_t rows_per_group);
/* The K split (returned; *split_blocks its length in blocks of 32) that a single matrix's wgmma call
 * of rows x N x K takes on `slots` CTA slots (the device's multiprocessors times the kernel's CTAs
 * each): the one whose CTAs the block scheduler finishes first, reduce included; 1 where the
 * unsplit grid fills the slots twice over. consumers (NULL: two only): the consumer warpgroups a
 * CTA that go with it -- 2, 3 (128-token tiles: 192 weight rows a CTA, the model's CTAs
 * DI_WG_THREE_TIME_PCT % as long), or 0 where the grid fills the slots (the kernel's choice). */
int di_cuda_wg_ksplit_slots(int64_t N, int64_t rows, int64_t K, int64_t slots, int *split_blocks, int *consumers);
/* the split such a call takes on this device: di_cuda_ctx.wg_ksplit where set (consumers 0), else the above */
int di_cuda_wg_ksplit(const di_cuda_ctx *ctx, bool fp4, int64_t N, int64_t rows, int64_t K, int *split_blocks,
                      int *consumers);

/* The decode-sized twins (cuda_linear_gemv.cu) that di_cuda_linear_mma and di_cuda_linear_bf16w8
 * hand calls of at most DI_GEMV_MAX_ROWS rows (one matrix) or DI_GEMV_MAX_GROUP_ROWS rows per group
 * (experts, wo_a; 8 since the twin's mma covers 8 tokens: B = 64 decode 119 -> 101 ms):
 * the same outputs bit for bit, weights streamed from global memory by warps of 16 features, the
 * K-split sums inside the one kernel. _ok: K % 128 == 0, the row bound, the activations (bf16_act:
 * as bf16) fit shared memory. */
#define DI_GEMV_MAX_ROWS 16
#define DI_GEMV_MAX_GROUP_ROWS 8
bool di_cuda_gemv_ok(bool bf16_act, bool grouped, int64_t K, int64_t rows_per_group, int ksplit);
/* One matrix of a twin launch: N output features, its weights (one matrix: wdata, wscale; groups:
 * the device arrays wdata_g, wscale_g), its K split (mm_ksplit's) and output y [rows, N]. A launch
 * takes up to DI_GEMV_MAX_MATS of them over the same activations (each matrix's bits those of a
 * launch of its own): w1 and w3, wq_a and wkv fill the card together. */
#define DI_GEMV_MAX_MATS 2
typedef struct {
    int64_t N;
    const uint8_t *wdata, *wscale;
    const uint8_t *const *wdata_g, *const *wscale_g;
    int ksplit, split_blocks;
    float *y;
} di_gemv_mat;
void di_cuda_gemv_quant(cudaStream_t s, bool fp4, int64_t K, int n_mats, const di_gemv_mat *mats, const int *row_off,
                        const int *active, int n_groups, int64_t rows, int64_t max_rows, int64_t rows_per_group,
                        const uint8_t *xq, const float *xs, const di_group_tiles *tiles);
/* the rows of a block of di_cuda_gemv_quant for rows_per_group: a row-tile list (tiles, or NULL)
 * for the groups' blocks has tiles of at most that many rows */
int di_cuda_gemv_tile(int64_t rows_per_group);
/* FP4 groups of at most DI_GEMV_IMMA_ROWS rows on average (the routed experts at decode) with
 * ctx->fp4_imma (outside batch-invariant mode): cuda_linear_gemv_imma.cu, exact block sums on int8
 * tensor cores -- the CPU's bits, not the f16 twin's. xd / xs: di_cuda_act_quant_digits's
 * [rows][K / 32][3][32] int8 digits of the act_quant codes' integers and [rows][K / 32] scales
 * times 2^-10. _ok: K % 128 == 0 and the rows' digits fit shared memory; no K split (ksplit 1). */
#define DI_GEMV_IMMA_ROWS 4
bool di_cuda_gemv_imma_ok(int64_t K, int64_t max_rows);
void di_cuda_act_quant_digits(const float *x, const float *const *rows, int64_t row_blocks, int64_t n_blocks,
                              uint8_t *dg, float *xs, cudaStream_t s);
/* The SwiGLU of a w1 / w3 pair's outputs made by the launch that computes them: h = di_cuda_swiglu_forms'
 * h (over g = matrix 0's output, u = matrix 1's) and its int8-twin digits, the same bits; the two
 * outputs themselves are not written. Only the one-row kernel takes it (di_cuda_gemv_imma_swiglu_ok). */
typedef struct {
    float limit;
    const float *wt;    /* [rows] the rows' weights, or NULL */
    float *h;           /* [rows, N] */
    uint8_t *digits;    /* [rows, N / 32][3][32] */
    float *digit_scale; /* [rows, N / 32] */
} di_gemv_swiglu;
bool di_cuda_gemv_imma_swiglu_ok(int64_t K, int64_t N, int64_t max_rows);
/* the call takes the one-row kernel (every group at most one row) */
bool di_cuda_gemv_imma_one_row(int64_t max_rows);
/* the token rows of the int8 twin's blocks for groups of rows_per_group rows (over a row-tile list:
 * tiles of at most that many rows; without one the blocks take the largest group's, max_rows) */
int di_cuda_gemv_imma_tile(int64_t rows_per_group);
/* x_rows (or NULL): the rows' digits through the MoE's row list instead, row p's those of row
 * (x_rows[p] - x_base) / K of xd / xs (the FFN input's own digits, made by its producer). sw (or
 * NULL): two matrices' SwiGLU instead of their outputs (needs di_cuda_gemv_imma_swiglu_ok) */
void di_cuda_gemv_fp4_imma(cudaStream_t s, int64_t K, int n_mats, const di_gemv_mat *mats, const int *row_off,
                           const int *active, int n_groups, int64_t rows, int64_t max_rows, const uint8_t *xd,
                           const float *xs, const float *const *x_rows, const float *x_base, const di_gemv_swiglu *sw,
                           const di_group_tiles *tiles);
/* di_cuda_linear_mma_pair (the experts' w1 / w3 over x) and then di_cuda_swiglu_forms' digits on its two
 * outputs, in one launch where the pair takes the one-row int8 kernel: true, sw's h, digits and
 * scales written (not the pair's outputs); false, and nothing done, otherwise */
bool di_cuda_linear_mma_pair_swiglu(di_cuda_ctx *ctx, const di_weight *shape, const uint8_t *const *wdata_a,
                                    const uint8_t *const *wscale_a, const uint8_t *const *wdata_b,
                                    const uint8_t *const *wscale_b, const int *row_off, const int *active, int n_groups,
                                    int64_t rows, int64_t max_rows, const float *x, const float *const *x_rows,
                                    const di_gemv_swiglu *sw);
/* di_cuda_linear_w16 takes its twin (below) for this weight and m rows: large matrices (the head) at
 * a few rows (cuda_linear_mma.cu W16_TWIN_*) */
bool di_cuda_w16_twin_taken(const di_cuda_ctx *ctx, const di_weight *w, int64_t m);
/* di_cuda_linear_w16's twin: BF16 weights [N, K], x [m, K] (bf16-exact fp32 values) -> y [m, N], fp32
 * or bf16-rounded */
void di_cuda_gemv_w16(cudaStream_t s, const uint16_t *wdata, int64_t N, int64_t K, const float *x, int64_t m, float *y,
                      bool out_bf16, int ksplit, int split_blocks);
/* di_cuda_linear_bf16w8's twin: wdata / wscale from the weight's first row (row0) */
/* yq / ysc (or NULL): act_quant(y, 32)'s codes [m, ldy] and scales [m, ldy / 32] too, made with the
 * K splits' sum (the bits of di_cuda_act_quant_e4m3 on y); needs di_cuda_gemv_codes_ok */
bool di_cuda_gemv_codes_ok(int64_t N, int64_t ldy, int ksplit);
void di_cuda_gemv_bf16w8(cudaStream_t s, const uint8_t *wdata, const uint8_t *wscale, int64_t rows_per_group,
                         int n_groups, int64_t K, const float *x, int64_t lda, int64_t m, float *y, int64_t ldy,
                         int ksplit, int split_blocks, uint8_t *yq, float *ysc);

/* bf16 activations x FP8 weights on tensor cores (DI_LIN_BF16, the attention's wo_a): for group
 * g < n_groups, y[:, g*rows_per_group ..] (row stride ldy) = bf16(x[:, g*w->cols ..] (row stride
 * lda, bf16-exact values) @ W_g^T), W_g = rows w->row0 + g*rows_per_group .. of the FP8 weight.
 * Rows never interact; without ctx->wgmma (batch-invariant mode) the bits do not depend on the
 * row count either (past 16 rows ctx->wgmma takes the wgmma kernel's fp32 sums). _supported: FP8
 * with scales, K % 32 == 0, row0 % 32 == 0, and with several groups rows_per_group % 32 == 0 (each
 * group starts on a scale block). */
bool di_cuda_linear_bf16w8_supported(const di_weight *w, int64_t rows_per_group, int n_groups, int64_t lda);
/* yq (or NULL): where the decode twin runs with a K split (wo_a at decode), y's act_quant codes and
 * scales are made by the same launch into yq->q / yq->scale, and true is returned (else false,
 * yq untouched) */
bool di_cuda_linear_bf16w8(di_cuda_ctx *ctx, const di_weight *w, int64_t rows_per_group, int n_groups,
                           const float *x, int64_t lda, int64_t m, float *y, int64_t ldy, const di_cuda_act_forms *yq);
/* Does that call read x as bf16 bits (past the decode twin's rows: a bf16 form of x noted by its
 * producer, di_cuda_act_forms_note, spares the conversion; the twin reads x itself)? */
bool di_cuda_linear_bf16w8_reads_bf16(const di_cuda_ctx *ctx, const di_weight *w, int64_t rows_per_group, int n_groups,
                                      int64_t m);
/* bf16 activations x BF16 weights on tensor cores: y [m, N] = x [m, K] (bf16-exact) @ W^T, fp32 sums,
 * bf16-rounded when out_bf16. _supported: BF16, K % 32 == 0, whole matrix, 16-byte aligned. */
bool di_cuda_linear_w16_supported(const di_weight *w);
void di_cuda_linear_w16(di_cuda_ctx *ctx, const di_weight *w, const float *x, int64_t m, float *y, bool out_bf16);
/* The same with fp32 output, leaving a K split's reduce to the consumer: returns the partial sums
 * [*ksplit][m, N] in the context's GEMM scratch (valid until its next linear; di_cuda_moe_route adds
 * them), or y, written, with *ksplit = 1 */
const float *di_cuda_linear_w16_parts(di_cuda_ctx *ctx, const di_weight *w, const float *x, int64_t m, float *y,
                                      int *ksplit);

/* ---- compressor and indexer (cuda_fwd_index.cu) ---- */
/* ratio-2 compressor pairs (indexer.c di_fwd_compress): for i < n, d < dh
 *   latent[i, d] = bf16(k0[i][d] * (e0 / sum) + k1[i][d] * (e1 / sum)),
 *   mx = fmaxf(z0, z1), e0 = expf(z0 - mx), e1 = expf(z1 - mx), sum = e0 + e1 (glibc expf twin) */
void di_cuda_cmp_pair(const float *const *k0, const float *const *z0, const float *const *k1,
                      const float *const *z1, int64_t n, int dh, float *latent, cudaStream_t s);
/* fp4_act_quant(key, 32, ue8m0) of n index keys [n, idim] fp32 into their records (forward/index_key.h,
 * rec_bytes = di_index_key_bytes(idim)) at the device pointers dst [n]: the CPU's di_index_key_quant,
 * byte for byte */
void di_cuda_index_key_quant(const float *key, int64_t n, int idim, int rec_bytes, uint8_t *const *dst, cudaStream_t s);
/* fp4_act_quant(row, 16, e4m3) of n compressed KV rows [n, dh] fp32 into their records
 * (forward/kv_record.h, rec_bytes = di_kv_record_bytes(dh)) at the device pointers dst [n]: the
 * CPU's di_kv_record_quant, byte for byte */
void di_cuda_kv_record_quant(const float *row, int64_t n, int dh, int rec_bytes, uint8_t *const *dst, cudaStream_t s);
/* Per-row paging of a batched index-score call (device arrays [R]): the pool base, block table and
 * key count of each row's sequence. */
typedef struct di_index_rows {
    const float *const *pool;
    const int32_t *const *blocks;
    const int64_t *n_keys;
} di_index_rows;
/* Index scores of R query rows of ONE sequence over its P paged index keys: key t is at
 * pool + blocks[t / block_entries] * block_floats + key_offset + (t % block_entries) * key_stride
 *      (block_entries a power of two)
 *      ([idim] floats, or with `records` its record of forward/index_key.h: the forward pass's pools,
 *      whose blocks hold their keys' records together after the KV rows; block_floats, key_offset and
 *      key_stride then multiples of 4, the pool 16-byte aligned).
 * The values of di_cuda_index_score (cuda_ops.h), from the same tensor-core kernel
 * (cuda_index_score_mma.cu: needs FP4-grid q and keys, nh <= 32, idim % 32 == 0, idim <= 128);
 * t >= visible[r] (host value per row, passed as a device array [R]) scores -inf; visible NULL =
 * all visible, as there. blocks NULL (rows NULL): key t at pool + key_offset + t key_stride.
 * rows non-NULL: rows of several sequences in one call, each with its own pool, block table and
 * key count from *rows (pool and blocks are then ignored); P is the row stride of score [R, P] and
 * keys past a row's count score -inf (top-k and block maxima then behave as on the unpadded row). */
void di_cuda_index_score_paged(const float *qi, const float *w, const float *pool,
                               const int32_t *blocks, int block_entries, int64_t block_floats,
                               int key_offset, int key_stride, bool records, int64_t R, int64_t P, int nh, int idim,
                               const int64_t *visible, const di_index_rows *rows, float *score, cudaStream_t s);
/* Candidate pool, step 1 (indexer.c candidate_pool): bscore [R, nb] = max of score [R, P] over
 * each block of bs positions (nb = ceil(P / bs)); the block of position visible[r] - 1 is pinned
 * to +inf when visible[r] > 0. The caller then runs di_cuda_topk(bscore, R, nb, keep, blocks). */
void di_cuda_block_max(const float *score, int64_t R, int64_t P, int bs, const int64_t *visible,
                       float *bscore, cudaStream_t s);
/* Candidate pool, step 2: flags [R, nb] = 1 for the kept blocks (blocks [R, keep], -1 = none),
 * else 0. */
void di_cuda_cand_flags(const int32_t *blocks, int64_t R, int keep, int64_t nb, uint8_t *flags,
                        cudaStream_t s);
/* Candidate pool, use: score[r, t] = -inf where t / bs >= nb or !flags[r, t / bs]. */
void di_cuda_cand_apply(float *score, int64_t R, int64_t P, int bs, const uint8_t *flags,
                        int64_t nb, cudaStream_t s);

/* ---- MoE and Engram (cuda_fwd_moe.cu) ---- */
#define DI_MOE_ROUTE_MAX_E 512
#define DI_MOE_ROUTE_MAX_K 16
/* Routing on the device (moe.c di_moe_route_row): logits [ksplit][R, E] fp32 (ksplit >= 1: the
 * router's partial sums over its K splits, di_cuda_linear_w16_parts', added in split order as
 * mm_reduce_kernel adds them), bias [E] -> expert, weight, order [R, K] (order: slot indices by
 * ascending expert id). resident > 0: the bench's EP-N proxy (expert of slot j of row r =
 * (r K + j) % resident, weights from the real scores). */
void di_cuda_moe_route(const float *logits, int ksplit, const float *bias, int64_t R, int E, int K, float scale,
                       int resident, int32_t *expert, float *weight, int32_t *order, cudaStream_t s);
/* Groups the R*K assignments per expert (E <= 1024; rows ascending within an expert): row_off
 * [E + 1]; active [E] (or NULL) the experts that got rows in ascending order, then -1; per
 * position p in expert order: x_rows[p] the token's row of x [R, D] (the grouped GEMMs read it
 * through this list: no gathered copy) and wts[p] the slot weight; per assignment i = r K + j:
 * slot_rows[i] = yg + p D, its expert output's row (di_cuda_moe_combine reads it there: no
 * scatter); and the n_tiles (<= DI_GROUP_TILE_LISTS, host array) row-tile lists of `tiles`, each
 * of cap >= di_group_tiles_cap(bt, E, R * K, R) entries. All other arrays are device arrays. */
void di_cuda_moe_group(const int32_t *expert, const float *weight, int64_t R, int K, int E,
                       const float *x, const float *yg, int64_t D, int *row_off, int *active,
                       const float **x_rows, const float **slot_rows, float *wts, const di_group_tiles *tiles,
                       int n_tiles, cudaStream_t s);
/* di_cuda_moe_route (E experts) then di_cuda_moe_group (G groups: the resident experts) on its output,
 * the same arrays and bits: in one launch for up to 16 rows (a decode step), else the two calls */
void di_cuda_moe_route_group(const float *logits, int ksplit, const float *bias, int64_t R, int E, int K, float scale,
                             int resident, int G, int32_t *expert, float *weight, int32_t *order, const float *x,
                             const float *yg, int64_t D, int *row_off, int *active, const float **x_rows,
                             const float **slot_rows, float *wts, const di_group_tiles *tiles, int n_tiles,
                             cudaStream_t s);
/* SwiGLU (moe.c expert_ffn): h[r, i] = bf16(silu(min(g, L)) * clamp(u, -L, L) [* wt[r]]),
 * silu(v) = v / (1 + expf(-v)) (glibc expf twin); g, u, h [n, inter]; wt [n] or NULL. h may
 * alias g. */
void di_cuda_swiglu(const float *g, const float *u, int64_t n, int64_t inter, float limit,
                    const float *wt, float *h, cudaStream_t s);
/* and h's act_quant as the next linear reads it (forms->q and scale, or forms->digits and
 * digit_scale; the other fields NULL): the bits of di_cuda_act_quant_e4m3 / _digits on h. Needs
 * inter % 32 == 0 and 16-byte aligned g, u, h (di_cuda_swiglu_forms_supported). */
bool di_cuda_swiglu_forms_supported(const float *g, const float *u, int64_t inter, const float *h);
void di_cuda_swiglu_forms(const float *g, const float *u, int64_t n, int64_t inter, float limit, const float *wt,
                          float *h, const di_cuda_act_forms *forms, cudaStream_t s);
/* out [R, D] = bf16(sum_j slot_rows[r K + order[r, j]][:] (j ascending, fp32) + shared[r, :]);
 * slot_rows [R*K] device list of the slots' expert-output rows (D floats each; 16-byte aligned where
 * D % 4 == 0, as rows of a [*, D] device buffer are), order [R, K] slot indices (the caller sorts
 * them by expert id) (moe.c). */
void di_cuda_moe_combine(const float *const *slot_rows, const int32_t *order, const float *shared, int64_t R,
                         int K, int64_t D, float *out, cudaStream_t s);
/* e [R, ncols * hd] = bf16(e4m3(table[rows[r, c], d]) * e8m0(scale[rows[r, c], d / 32]))
 * (engram.c); table [T, hd] e4m3 bytes, scale [T, hd / 32] e8m0 bytes, rows [R, ncols] int64 */
void di_cuda_engram_gather(const uint8_t *table, const uint8_t *scale, const int64_t *rows,
                           int64_t R, int ncols, int hd, float *e, cudaStream_t s);
/* Engram gate, in place on the stream X [R, n, D] bf16 (engram.c di_fwd_engram): per (r, i)
 *   sx = sum x^2, sk = sum key^2, dot = sum (double)(x * qk_i * key) (doubles, k order on the
 *   CPU; a fixed tree here), rx = 1/sqrtf((float)(sx/D) + eps), rk likewise,
 *   g = (float)dot * (rx * rk) * inv_sqrt_d, g = sigmoid(copysignf(sqrtf(fmaxf(|g|, 1e-6)), g)),
 *   x = bf16(x + g * value)
 * kv [R, (n + 1) * D]: n keys then the value; qk [n, D]. */
void di_cuda_engram_gate(uint16_t *X, const float *kv, const float *qk, int64_t R, int n, int64_t D,
                         float eps, float inv_sqrt_d, cudaStream_t s);

/* ---- sampling (cuda_sample.cu) ---- */
/* tokens[i] = the greedy token of logits row i, bit for bit di_sample_greedy_token (src/sample/
 * sampler.c: NaN as -inf, +inf as FLT_MAX, ties to the lowest id; -1 when every entry is -inf or
 * NaN). logits [n, V] fp32, tokens [n] int32, ws di_cuda_greedy_ws_bytes(n, V) bytes; all device. */
size_t di_cuda_greedy_ws_bytes(int64_t n, int64_t V);
void di_cuda_greedy_tokens(const float *logits, int64_t n, int64_t V, void *ws, int32_t *tokens,
                           cudaStream_t s);
/* tokens[i] = the token di_sampler_sample_plain (src/sample/sampler.h) draws from logits row i with
 * params[i], for the rows whose params[i].temperature is > 0 (-1 when every logit is -inf or NaN);
 * other rows are left as they are (run di_cuda_greedy_tokens first for them). params must be valid
 * (di_plain_sampling_validate). logits [n, V] fp32, params [n], tokens [n] int32, ws
 * di_cuda_sample_ws_bytes(n, V) bytes (the rows' weights: 8 V bytes a row); all device. */
size_t di_cuda_sample_ws_bytes(int64_t n, int64_t V);
void di_cuda_sample_tokens(const float *logits, int64_t n, int64_t V, const di_plain_sampling *params, void *ws,
                           int32_t *tokens, cudaStream_t s);

/* A row's sampler edits (sample/sample_edits.h's lists) in device memory. */
typedef struct di_cuda_row_edits {
    int64_t row;                   /* the logits row they edit */
    const int32_t *bias_ids;       /* [n_bias] grouped by id, request order within an id */
    const float *bias;             /* [n_bias] */
    const uint32_t *mask;          /* [(V + 31) / 32] allowed-token bits, or NULL */
    const int32_t *repeated;       /* [n_repeated] distinct ids of prompt + output */
    const int32_t *output_ids;     /* [n_output] distinct output ids */
    const uint32_t *output_counts; /* [n_output] */
    int32_t n_bias, n_repeated, n_output;
    float repetition_penalty, frequency_penalty, presence_penalty;
} di_cuda_row_edits;
/* In place on logits [*, V]: for each of the n rows edits[i] names, the sampler's steps 1-3 (bias,
 * mask, repetition / frequency / presence penalties), bit for bit di_sample_edits_apply on the
 * host's sanitised copy at the ids the lists touch (cuda_sample_edit.cu); the other ids keep their
 * raw values, which di_cuda_greedy_tokens / di_cuda_sample_tokens sanitise as they read. */
void di_cuda_edit_logits(float *logits, int64_t V, const di_cuda_row_edits *edits, int64_t n, cudaStream_t s);

/* A head row whose logprobs the device computes (cuda_sample_logprob.cu). */
typedef struct di_cuda_logprob_row {
    const float *src;        /* [V] the logits they are of: the raw row (logprobs_mode raw), or the row
                                after its edits (processed) */
    int32_t head_row;        /* its token is tokens[head_row], its result out[head_row] */
    int32_t n_top;           /* 1 .. DI_SAMPLER_MAX_LOGPROBS */
    /* processed logprobs of a sampled row (the distribution drawn from: the draw's candidates):
     * the workspace di_cuda_sample_tokens left for its sample_ws_rows rows (this row's is head_row)
     * and the row's temperature; NULL: the full log-softmax of src */
    const void *sample_ws;
    int64_t sample_ws_rows;
    float temperature;
} di_cuda_logprob_row;
/* For each of the n rows: out[head_row] = di_sampler_sample's result for src with logprobs =
 * n_top and the token tokens[head_row] (token_id, logprob, n_top, top[]), bit for bit -- its
 * full_logprobs, or its candidate_logprobs where sample_ws is given; token -1 (none could be
 * drawn): nothing listed, logprob 0. rows [n], tokens [*], out [*]; all device. */
void di_cuda_logprob_rows(const di_cuda_logprob_row *rows, int64_t n, int64_t V, const int32_t *tokens,
                          di_sample_result *out, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
