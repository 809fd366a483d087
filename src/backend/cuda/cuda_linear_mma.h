/* Shared between the two tensor-core GEMMs of the quantised linears (internal header):
 * cuda_linear_mma.cu (mma.sync, every mode and size) and cuda_linear_wgmma.cu (bf16 wgmma, the
 * FP8 / FP4 modes at prefill sizes with di_cuda_ctx.wgmma, the default), which the first calls. */
#ifndef DI_CUDA_LINEAR_MMA_H
#define DI_CUDA_LINEAR_MMA_H

#include <stdint.h>

#include <cuda_runtime.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_ops.h"

struct mm_groups {
    const uint8_t *const *wdata, *const *wscale; /* [n_groups] device pointers */
    const int *row_off;                          /* [n_groups + 1] or NULL */
    const int *active;                           /* row_off groups: grid.z slot -> group (-1: none), or NULL */
    /* row_off NULL and several groups: block-diagonal slices of one matrix (wo_a): group g reads
     * A columns g*a_col_off.., weight rows g*w_row_off.. and writes y columns g*y_col_off.. */
    int64_t a_col_off, w_row_off, y_col_off;
    const int *tiles; /* row_off groups: NULL, or the row-tile list (di_group_tiles) that gz indexes */
    /* row_off groups on the wgmma kernel: NULL, or the activations' rows through a list (the MoE's
     * gather): list row p's values start at xb + (x_rows[p] - x_base), xb holding the bf16
     * act_quant values of x_base's rows in x_base's layout (lda = K, offsets below 2^31) */
    const float *const *x_rows;
    const float *x_base;
};

/* In a kernel over row_off groups (grid.z slot gz, this block's first row *m0 -- through the tile
 * list, entry gz's): false when the slot has no group or the group no rows at *m0; else the group's
 * rows, weights and first row. */
static __device__ __forceinline__ bool mm_group_select(const mm_groups &grp, int gz, int64_t *m0, int64_t *rows,
                                                        const uint8_t *__restrict__ *wdata,
                                                        const uint8_t *__restrict__ *wscale, int *first_row) {
    int gi;
    if (!di_dev_block_group(grp.row_off, grp.active, grp.tiles, gz, m0, &gi, first_row, rows)) return false;
    *wdata = grp.wdata[gi];
    *wscale = grp.wscale[gi];
    return true;
}

/* The quantised GEMM on wgmma (cuda_linear_wgmma.cu): y = bf16(sum over K of the dequantised
 * products, fp32 accumulation in the tensor core) -- the reference's sum to fp32 rounding, not the
 * mma.sync kernel's bits. xb [rows][lda] bf16 values: act_quant's (di_cuda_act_quant_bf16) or
 * bf16 activations (wo_a; lda % 8 == 0); y [rows][ldy]. Groups through grp.row_off / grp.active,
 * or block-diagonal slices (row_off NULL, several groups); rows_per_group picks the tile;
 * ksplit > 1: fp32 partial sums of split_blocks K blocks each into part[ks] (row stride ldy),
 * unrounded. wdata_b / wscale_b / y_b (row_off groups, ksplit 1): a second weight set over the same
 * rows in the same launch (the experts' w1 / w3 pair); grp.x_rows: those rows through the list
 * (xb not offset by the groups' first rows). consumers: 0, the kernel's choice of two or
 * three consumer warpgroups for a call that may take three (by its waves), or 2 / 3 (tests:
 * di_cuda_ctx.wg_consumers). _fits: the K it takes (K % 128 == 0; the weight scales of a split fit
 * the CTA's cache). */
bool di_wg_gemm_fits(bool fp4, int64_t K);
void di_wg_gemm(bool fp4, const uint16_t *xb, int64_t lda, int64_t max_rows, int64_t rows_per_group, int64_t N,
                int64_t K, const uint8_t *wdata, const uint8_t *wscale, float *y, int64_t ldy, const mm_groups &grp,
                int n_groups, int64_t rows, int ksplit, int split_blocks, float *part, cudaStream_t s,
                const di_group_tiles *tiles = nullptr, const uint8_t *const *wdata_b = nullptr,
                const uint8_t *const *wscale_b = nullptr, float *y_b = nullptr, int consumers = 0);
/* The same kernel over BF16 weights (the plain linears past the decode sizes): y [rows][N] = xb [rows][K]
 * (bf16) @ w [N][K]^T, fp32 sums of the exact products in the tensor core; rounded to bf16 where
 * out_bf16 and ksplit == 1, else as di_wg_gemm's parts (ksplit > 1). K % 128 == 0. */
void di_wg_gemm_w16(const uint16_t *xb, int64_t rows, int64_t N, int64_t K, const uint16_t *w, float *y, bool out_bf16,
                    int ksplit, int split_blocks, float *part, cudaStream_t s);
/* the token rows of di_wg_gemm's CTAs for rows_per_group (row_off groups: grouped) -- the tile a
 * row-tile list for it must have (tiles: that list, or NULL) */
int di_wg_gemm_tile(int64_t rows_per_group, bool grouped);
/* the time a CTA of three consumer warpgroups takes, in % of one of two (the same stages; 1.5x the
 * weight rows): ~1.27 on the H200's 128-token tiles (session 38), for the choices between them */
#define DI_WG_THREE_TIME_PCT 127
/* CTAs of di_wg_gemm's kernel for tiles of bt tokens a multiprocessor holds at once */
int di_wg_gemm_ctas_per_sm(bool fp4, int bt);

/* BF16-weight linears with fp32 outputs on cuBLAS (cuda_linear_blas.cu). _taken: whether a call of m
 * rows and N outputs goes there (ctx->blas_w16_rows / _n, outside exact mode; the caller has checked
 * that the wgmma kernel would take it). y [m, N] = xb [m, K] (bf16 values) times w [N, K]^T, fp32
 * sums, not rounded. */
bool di_cuda_blas_w16_taken(const di_cuda_ctx *ctx, int64_t m, int64_t N);
void di_cuda_blas_w16(di_cuda_ctx *ctx, const uint16_t *xb, int64_t m, const uint16_t *w, int64_t N, int64_t K, float *y);
/* Dense FP8 linears on cuBLAS's BF16 GEMM (cuda_linear_blas.cu). _reserve: whether a call of `rows`
 * rows over the n_w weights wd (codes; a set's matrices, N rows the largest's) goes there -- every
 * one kept as bf16 (ctx->dense16) and rows >= ctx->dense16_rows, or rows >= ctx->blas_rows outside
 * capture (the weight dequantised in the call); outside exact mode, the caller having checked that
 * the wgmma kernel would take it -- and its scratch fits after the caller's act_bytes of activations
 * (grown without aborting: di_cuda_scratch_try; while capturing the caller's di_cuda_scratch grows
 * it): the bytes it needs there, or 0 (the wgmma kernel then). y [m, ldy] = xb [m, lda] (bf16
 * values; group g's inputs at column g K) times the n_groups diagonal blocks of rows_per_group rows
 * of the FP8 weight (wd [N, K] codes, ws its [N / 32][K / 32] e8m0 scales, or wd's bf16 copy),
 * rounded to bf16; scratch: what _reserve returned for N = all groups' rows. */
size_t di_cuda_blas_reserve(di_cuda_ctx *ctx, int64_t rows, int64_t N, int64_t K, size_t act_bytes, int n_w,
                            const uint8_t *const *wd);
void di_cuda_blas_fp8(di_cuda_ctx *ctx, const uint16_t *xb, int64_t lda, int64_t m, const uint8_t *wd,
                      const uint8_t *ws, int64_t rows_per_group, int n_groups, int64_t K, float *y, int64_t ldy,
                      void *scratch);

#endif
