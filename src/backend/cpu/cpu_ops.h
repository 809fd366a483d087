/* CPU reference kernels (internal header). Each is the numerical definition the CUDA backend is
 * tested against: fixed reduction orders, no fast-math, results independent of the thread count
 * (threads only split independent outputs). Within a 32-wide GEMM block or a dot product the sum is
 * taken in double and rounded once to fp32: the closest fp32 to the exact sum, which every
 * reference summation order approaches to within an ulp. One exception matches the reference
 * exactly instead: attention logits q.k accumulate in fp32 in index order (with that order the
 * fixture's layer-by-layer prefill is bit-identical; with a double sum one row in 40 differed). */
#ifndef DI_BACKEND_CPU_OPS_H
#define DI_BACKEND_CPU_OPS_H

#include "backend/ops.h"
#include "base/numerics.h"

/* Work (multiply-adds) below which a kernel stays on one thread: an OpenMP region costs tens of
 * microseconds of fork/join and barrier spinning, far more than a small GEMM, and on a loaded
 * machine spinning threads slow everything down (the tiny model ran 20x slower with 2 threads). */
#define DI_CPU_PARALLEL_MIN_WORK (4 << 20)

void di_cpu_linear(const di_weight *w, const float *x, int64_t m, float *y, di_linear_mode mode);
void di_cpu_act_quant_inplace(float *x, int64_t n, int block);
void di_cpu_fp4_quant_inplace(float *x, int64_t n, int block, di_fp4_scale kind);
/* fp4_act_quant's scale of a block whose largest magnitude is amax (fmaxf over the block: NaN dropped) */
float di_cpu_fp4_scale(float amax, di_fp4_scale kind);
/* the e2m1 grid value (code value, before the scale) fp4_act_quant gives x in a block of scale s */
float di_cpu_fp4_code_value(float x, float s);
/* One block of n values of fp4_act_quant as e2m1 codes (sign bit 8, magnitude index 0..7), the form
 * the pool's records store: *scale its scale, codes [n]; false (codes unset) where the scale is not
 * finite or a value is NaN -- a block the records mark as not finite. */
bool di_cpu_fp4_block_codes(const float *x, int n, di_fp4_scale kind, float *scale, uint8_t *codes);
void di_cpu_rmsnorm(const float *x, const void *w_bf16, int64_t m, int64_t d, float eps, float *y);
/* One 32-value (or n-value) block of act_quant: q = e4m3 grid values, *scale = power of two. */
void di_cpu_act_quant_block(const float *x, int n, float *q, float *scale_out);

/* cpu_select.c: positions of the k highest scores of score[n], ascending, exact ties to the lower
 * position, -inf never, -1 padded; the candidate pool's block maxima bscore[ceil(P / bs)] of
 * score[P], the block of position visible-1 pinned to +inf; the Engram gate on X [R, n, D] in
 * place from kv [R, (n+1)*D] (n keys, then the value) and qk [n, D]. */
void di_cpu_topk_select(const float *score, int64_t n, int k, int32_t *out);
/* MoE routing of one row (model-spec §2.6): score = sqrt(softplus(logit)), the k highest of
 * score + bias (the lower expert on ties) in selection order, weights = score / sum * scale.
 * E <= DI_CPU_MOE_MAX_E. */
#define DI_CPU_MOE_MAX_E 1024
void di_cpu_moe_route(const float *logits, const float *bias, int E, int k, float scale, int32_t *expert,
                      float *weight);
void di_cpu_block_max(const float *score, int64_t P, int bs, int64_t visible, float *bscore);
void di_cpu_engram_gate(float *X, const float *kv, const float *qk, int64_t R, int n, int64_t D, float eps,
                        float inv_sqrt_d);

#endif

#include <stdbool.h>
/* RoPE on n_vec vectors of `stride` floats, rotating the rot_dim values from `offset`. */
void di_cpu_rope(float *x, int64_t n_vec, int64_t stride, int64_t offset, int rot_dim,
                 const float *cos_row, const float *sin_row, bool inverse);
/* sparse_attn of one query row: q [n_heads, dim]; kv [n_idx] row pointers (NULL = -1); out [n_heads, dim] */
void di_cpu_sparse_attn(const float *q, int n_heads, int dim, const float *const *kv, int n_idx,
                        const float *sink, float scale, float *out);
void di_cpu_hc_split_sinkhorn(const float *mix, const float *scale, const float *base, int n,
                              int iters, float eps, float *pre, float *post, float *comb);
void di_cpu_hc_mix_logits(const float *x, int n, int64_t d, const void *fn, float eps, float *mix);
void di_cpu_hc_pre(const float *x, int n, int64_t d, const float *p, float *out);
void di_cpu_hc_post(const float *y, const float *r, int n, int64_t d, const float *post,
                    const float *comb, float *out);
