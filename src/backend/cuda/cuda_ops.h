/* The CUDA backend's ops (C API over device pointers). Each function is the device twin of a CPU
 * reference kernel (src/backend/cpu/, or the static helpers of src/forward/indexer.c for the
 * indexer score and top-k) and is tested against it op by op in tests/cuda/test_cuda_ops.cu.
 *
 * All pointers are device pointers; buffers are row-major float arrays holding bf16-exact values
 * where the CPU's do. Every call is asynchronous on the context's stream (or the stream given).
 * docs/CUDA.md lists which ops are bit-exact against the CPU and which have a stated bound. */
#ifndef DI_BACKEND_CUDA_OPS_H
#define DI_BACKEND_CUDA_OPS_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>

#include "backend/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Per-device state: the stream every op runs on, a cuBLAS handle, and a scratch buffer that
 * grows on demand (used by the linears to stage converted operands). While the stream is being
 * captured into a CUDA graph (`capturing`), growing the scratch may neither synchronise nor free
 * the old buffer (nodes captured earlier use it): the old one is retired and freed by
 * di_cuda_ctx_release_retired once the graph has run. */
enum { DI_CUDA_MAX_RETIRED = 16 };
/* The other forms of an activation buffer x [rows, K] that the linears read, made by x's producer
 * beside x (each may be NULL): act_quant(x, 32) as e4m3 codes q [rows, K] and power-of-two scales
 * [rows, K / 32] (the quantised linears' operands), as the int8 twin's signed base-128 digits of
 * those codes [rows, K / 32][3][32] and scales times 2^-10 [rows, K / 32] (di_cuda_act_quant_digits'),
 * x's bf16 bits [rows, K] (the bf16 linears'), and act_quant(x, 32)'s values (codes times scales,
 * exact) as bf16 [rows, K] (di_cuda_act_quant_bf16's: the wgmma GEMM's operand) */
typedef struct {
    uint8_t *q;
    float *scale;
    uint16_t *bf16;
    uint8_t *digits;
    float *digit_scale;
    uint16_t *qbf16;
} di_cuda_act_forms;

/* Row tiles of a grouped launch, listed on the device by the grouping kernels (di_cuda_moe_group,
 * di_cuda_moe_route_group) and read by the grouped linears' kernels: list [cap][4] ints, entry t =
 * {group, the group's first row, its rows, the tile's first row within the group} for each tile of
 * bt rows of each group with rows, groups ascending, then entries of group -1 up to cap. A launch
 * over a list has cap blocks along its group axis instead of slots x ceil(max_rows / bt), most of
 * which uniform routing leaves empty (B = 64 of EP-8: 48 slots x 8 tiles of 8 rows for the 48 tiles
 * that have rows). */
typedef struct {
    int *list; /* device, [cap][4] */
    int bt, cap;
} di_group_tiles;
#define DI_GROUP_TILE_LISTS 2 /* a MoE layer's: w1 / w3's tile and, where it differs, w2's */
/* entries a list of bt-row tiles needs at most: `rows` rows in n_groups groups, none past max_rows */
int di_group_tiles_cap(int bt, int n_groups, int64_t rows, int64_t max_rows);

/* a sublayer's input and one buffer inside it at a time (the attention's q LoRA, then its output;
 * a note past them evicts the oldest, whose consumers then convert for themselves) */
#define DI_CUDA_ACT_FORMS_SLOTS 2
/* How often the linears on a context chose some fast paths: counted on the host as the launch is
 * issued (or captured into a CUDA graph: once per capture, which every graph call makes), for tests
 * that must know a path ran (di_device_path_counts in forward/device.h sums the contexts) */
typedef struct {
    int64_t fp4_imma;        /* FP4 expert calls on the int8 twin (cuda_linear_gemv_imma.cu), any kernel */
    int64_t fp4_imma_row;    /* of which on its one-row kernel (a row a block: groups of at most one row,
                              * or a row-tile list's one-row tiles) */
    int64_t fp4_imma_swiglu; /* of which w1 / w3 pairs whose launch made the SwiGLU (di_cuda_linear_mma_pair_swiglu) */
    int64_t blas;            /* FP8 linears on cuBLAS's BF16 GEMM (cuda_linear_blas.cu) */
    int64_t blas_kept;       /* of which over the weight's kept bf16 copy (di_cuda_dense16) */
    int64_t wg_gather;       /* expert w1 / w3 pairs on the wgmma kernel reading x's producer-made bf16
                              * values through the row list (no gathered conversion) */
} di_cuda_path_counts;
/* Rows from which a dense FP8 linear runs on cuBLAS's BF16 GEMM over its weight dequantised once a
 * call (cuda_linear_blas.cu) where DEEPINFER_GPU_BLAS_PREFILL is on. H100, us a call against the
 * wgmma kernel (session 52, `deepinfer-cuda-bench --gemm`): at 512 rows even (wq_b 152 / 148, wo_b
 * 124 / 128, shared w1 49 / 54), at 1,024 ahead (240 / 258, 184 / 247, 67 / 89) */
#define DI_CUDA_BLAS_MIN_ROWS 1024
/* Rows and outputs from which a BF16-weight linear with fp32 outputs (the head: [129,280 x 5,120])
 * runs on cuBLAS's GEMM (cuda_linear_blas.cu) where DEEPINFER_GPU_BLAS_PREFILL is on. H100, us a call
 * against the wgmma kernel (session 53, `deepinfer-cuda-bench --gemm`; cuBLASLt alone): the head at
 * 256 rows 537 / 1,079, at 64 even (488 / 497: there the weight's streaming holds both) */
#define DI_CUDA_BLAS_W16_MIN_ROWS 128
#define DI_CUDA_BLAS_W16_MIN_N 32768
/* Dense FP8 matrices kept also as bf16 on the device (DEEPINFER_GPU_DENSE_BF16; cuda_linear_blas.cu):
 * an open-addressing table from a matrix's codes to its copy [rows, cols] bf16 (code times its 32 x 32
 * block's e8m0 scale: exact), so that calls of ctx->dense16_rows rows or more run cuBLAS's BF16 GEMM
 * on it with no dequantisation a call -- in captured graphs too. Filled at load, read-only after. */
typedef struct {
    const uint8_t *codes; /* the FP8 matrix's codes (the table's key), NULL: a free slot */
    uint16_t *w16;        /* device [rows, cols] bf16 */
    int64_t rows, cols;
} di_cuda_dense16_entry;
typedef struct {
    di_cuda_dense16_entry *slot; /* host [cap]; cap a power of two, at most half full */
    int cap, n;
    size_t bytes;                /* device bytes of the copies */
} di_cuda_dense16;
/* the bytes a copy of a rows x cols matrix takes */
size_t di_cuda_dense16_bytes(int64_t rows, int64_t cols);
/* Adds the bf16 copy of the FP8 matrix (codes [rows, cols], scale [ceil(rows / 32)][cols / 32] e8m0),
 * dequantised on stream s. False where the device has no room for it (nothing added; the matrix's
 * calls then dequantise per call or take the wgmma kernel) or cols % 32 != 0. */
bool di_cuda_dense16_add(di_cuda_dense16 *t, const uint8_t *codes, const uint8_t *scale, int64_t rows, int64_t cols,
                         cudaStream_t s);
/* the copy of the matrix whose codes begin at `codes` with `cols` columns, or NULL */
const uint16_t *di_cuda_dense16_find(const di_cuda_dense16 *t, const uint8_t *codes, int64_t cols);
void di_cuda_dense16_free(di_cuda_dense16 *t);
/* bytes of the workspace each context's cuBLAS handle is given (cublasSetWorkspace: its GEMMs then
 * allocate nothing, also under stream capture) -- the 32 MiB cuBLAS advises for Hopper */
#define DI_CUDA_BLAS_WORKSPACE (32u << 20)
typedef struct di_cuda_ctx {
    cudaStream_t stream;
    void *blas;          /* cublasHandle_t */
    void *blas_ws;       /* [DI_CUDA_BLAS_WORKSPACE] bytes: the handle's workspace */
    void *scratch;       /* device scratch */
    size_t scratch_bytes;
    bool exact;          /* quantised GEMMs and sparse attention with the CPU's exact sums (CUDA cores) */
    bool capturing;      /* the stream is being captured (set by the caller around the capture) */
    bool tiled_only;     /* tests: decode-sized quantised GEMMs through the tiled kernel too */
    int wg_ksplit;       /* tests: > 0 sets a single matrix's wgmma K split (else the block scheduler's model) */
    int wg_consumers;    /* tests: 2 or 3 sets the wgmma kernel's consumer warpgroups where a call may take three
                          * (else its waves decide: di_wg_gemm) */
    bool wgmma;          /* DEEPINFER_GPU_WGMMA (default on): FP8 / FP4 / BF16 GEMMs past decode sizes on bf16 wgmma */
    bool fp4_imma;       /* decode-sized FP4 expert GEMMs on int8 mma (exact sums; not batch-invariant mode) */
    int64_t blas_rows;   /* > 0: dense FP8 linears of at least this many rows on cuBLAS's BF16 GEMM where the wgmma
                          * kernel would take them (cuda_linear_blas.cu; tests set it low) */
    int64_t blas_w16_rows; /* > 0: BF16-weight linears with fp32 out (the head) of at least this many rows and */
    int64_t blas_w16_n;    /* ... this many outputs on cuBLAS's GEMM where the wgmma kernel would take them (also while
                            * capturing; DI_CUDA_BLAS_W16_MIN_ROWS / _N with DEEPINFER_GPU_BLAS_PREFILL; tests set both low) */
    const di_cuda_dense16 *dense16; /* bf16 copies of dense FP8 matrices (DEEPINFER_GPU_DENSE_BF16), or NULL */
    int64_t dense16_rows; /* > 0: dense FP8 linears with a copy there, of at least this many rows, on cuBLAS's
                           * BF16 GEMM over it where the wgmma kernel would take them (also while capturing) */
    size_t scratch_cap;  /* tests: > 0 makes di_cuda_scratch_try refuse more than this many bytes */
    void *retired[DI_CUDA_MAX_RETIRED]; /* scratch buffers outgrown during a capture */
    int n_retired;
    /* activation buffers' other forms, made by their producers (hc_block_in, rmsnorm): the linears
     * of such an x (rows x K) read them instead of launching an act_quant or bf16 conversion of
     * their own. The buffer's owner notes them (di_cuda_act_forms_note) and forgets them before x
     * is rewritten or freed. */
    struct {
        const float *x; /* NULL: a free slot */
        int64_t rows, K;
        di_cuda_act_forms forms;
        uint64_t noted; /* act_forms_clock at the note: the oldest is replaced first */
    } act_forms[DI_CUDA_ACT_FORMS_SLOTS];
    uint64_t act_forms_clock; /* notes so far */
    /* the row tiles listed for the groups of row_off (di_group_tiles): a grouped linear over row_off
     * whose kernel takes tiles of a listed bt launches over that list. Noted by row_off's owner once
     * the grouping kernel is on the stream, forgotten before row_off is rewritten or freed. */
    struct {
        const int *row_off;
        int n;
        di_group_tiles lists[DI_GROUP_TILE_LISTS];
    } group_tiles;
    di_cuda_path_counts counts;
} di_cuda_ctx;

/* x [rows, K]'s other forms are in `forms` (see act_forms); a new x takes a free slot, else the one
 * noted longest ago */
void di_cuda_act_forms_note(di_cuda_ctx *ctx, const float *x, int64_t rows, int64_t K, di_cuda_act_forms forms);
/* x's forms are stale (x is about to be rewritten or freed) */
void di_cuda_act_forms_forget(di_cuda_ctx *ctx, const float *x);
/* the noted forms of x [rows, K], or NULL */
const di_cuda_act_forms *di_cuda_act_forms_find(const di_cuda_ctx *ctx, const float *x, int64_t rows, int64_t K);

/* the grouped launches over row_off may read these n lists (n <= DI_GROUP_TILE_LISTS; a later note
 * replaces an earlier one) */
void di_cuda_group_tiles_note(di_cuda_ctx *ctx, const int *row_off, const di_group_tiles *lists, int n);
/* row_off's lists are stale */
void di_cuda_group_tiles_forget(di_cuda_ctx *ctx, const int *row_off);
/* the noted list of bt-row tiles for row_off, or NULL */
const di_group_tiles *di_cuda_group_tiles_find(const di_cuda_ctx *ctx, const int *row_off, int bt);

/* Returns false (and leaves *ctx zeroed) when no CUDA device is usable. */
bool di_cuda_ctx_init(di_cuda_ctx *ctx);
/* The context's stream made anew with the device's greatest (low = false) or least (true) priority:
 * the block scheduler starts a pending block of a higher-priority stream first (gpu_backend.c attach) */
void di_cuda_ctx_set_priority(di_cuda_ctx *ctx, bool low);
void di_cuda_ctx_free(di_cuda_ctx *ctx);
/* Scratch of at least `bytes` (valid until the next call on this context). */
void *di_cuda_scratch(di_cuda_ctx *ctx, size_t bytes);
/* Whether the scratch holds `bytes` or could be grown to them (not while capturing): a failed
 * allocation leaves the old scratch and returns false instead of aborting, for callers with a
 * path that needs less (cuda_linear_blas.cu's fallback to the wgmma kernel). */
bool di_cuda_scratch_try(di_cuda_ctx *ctx, size_t bytes);
/* Frees the scratch buffers retired during a capture (call when the stream is idle). */
void di_cuda_ctx_release_retired(di_cuda_ctx *ctx);

/* ---- quantisers (cuda_quant.cu) ---- */
/* in place, x [n]: act_quant per `block` (<= 128) values, ue8m0 power-of-two scale */
void di_cuda_act_quant_inplace(float *x, int64_t n, int block, cudaStream_t s);
/* in place, x [n]: FP4 fake quant per `block` values, ue8m0 or e4m3 scale */
void di_cuda_fp4_quant_inplace(float *x, int64_t n, int block, di_fp4_scale kind, cudaStream_t s);

/* ---- linear layers (cuda_linear_quant.cu, cuda_linear_plain.cu) ---- */
/* y [m, w->rows] = x [m, w->cols] @ w^T under `mode`; w->data / w->scale are device pointers,
 * w->data 16-byte aligned for the quantised modes (safetensors offsets are not: copy per tensor) */
void di_cuda_linear(di_cuda_ctx *ctx, const di_weight *w, const float *x, int64_t m, float *y,
                    di_linear_mode mode);
/* out [n] = the bf16 bits of x [n] (round to nearest even) */
void di_cuda_f32_to_bf16(const float *x, int64_t n, uint16_t *out, cudaStream_t s);
/* y [rows, ldy] (first cols columns) = x [rows, cols] bf16 bits widened to fp32 (exact) */
void di_cuda_bf16_to_f32(const uint16_t *x, int64_t rows, int64_t cols, float *y, int64_t ldy, cudaStream_t s);
/* DI_LIN_QUANT alone: the tensor-core kernel (cuda_linear_mma.cu) unless ctx->exact or the shape
 * needs the exact CUDA-core kernel (cuda_linear_quant.cu, bit-identical to the CPU) */
void di_cuda_linear_quant(di_cuda_ctx *ctx, const di_weight *w, const float *x, int64_t m, float *y);

/* ---- RMSNorm and RoPE (cuda_norm_rope.cu) ---- */
/* y [m, d] = bf16(w * x * rsqrt(mean(x^2) + eps)); w_bf16 [d] bf16 bits */
void di_cuda_rmsnorm(const float *x, const uint16_t *w_bf16, int64_t m, int64_t d, float eps,
                     float *y, cudaStream_t s);
/* and (yq non-NULL; di_cuda_rmsnorm_q_supported: d % 32 == 0, d <= 2,048) act_quant(y, 32) as the
 * quantised linears' codes (yq->q and scale; yq->bf16 must be NULL) -- di_cuda_act_quant_e4m3's bits */
bool di_cuda_rmsnorm_q_supported(int64_t d);
void di_cuda_rmsnorm_q(const float *x, const uint16_t *w_bf16, int64_t m, int64_t d, float eps, float *y,
                       const di_cuda_act_forms *yq, cudaStream_t s);
/* di_cuda_rmsnorm, and y's bf16 bits (y_bf16) and act_quant(y, 32)'s values as bf16 (y_qbf16) --
 * either may be NULL -- made by the same launch: the bits di_cuda_f32_to_bf16 and
 * di_cuda_act_quant_bf16 make of y (the sublayer input past the fused kernel's rows, whose linears
 * then convert nothing). _supported: d % 32 == 0. */
bool di_cuda_rmsnorm_forms_supported(int64_t d);
void di_cuda_rmsnorm_forms(const float *x, const uint16_t *w_bf16, int64_t m, int64_t d, float eps, float *y,
                           uint16_t *y_bf16, uint16_t *y_qbf16, cudaStream_t s);
/* y = act_quant(rope(rmsnorm(x)), 32) in one launch (the attention's own kv): the bits of
 * di_cuda_rmsnorm, di_cuda_rope (one vector a row: offset, rot_dim, cos / sin [m][rot_dim / 2], not
 * inverse) and di_cuda_act_quant_inplace(.., 32). Supported: d % 32 == 0, d <= 2,048, offset and
 * rot_dim even, the rotation inside the row. */
bool di_cuda_rmsnorm_rope_quant_supported(int64_t d, int64_t offset, int rot_dim);
void di_cuda_rmsnorm_rope_quant(const float *x, const uint16_t *w_bf16, int64_t m, int64_t d, float eps,
                                int64_t offset, int rot_dim, const float *cos_rows, const float *sin_rows, float *y,
                                cudaStream_t s);
/* di_cuda_rmsnorm_q (xq [m, dq] -> yq, with fq's codes or none) and di_cuda_rmsnorm_rope_quant (xkv
 * [m, dkv] -> ykv) in one launch -- the attention's q and kv norms, which read the two outputs of one
 * GEMV launch: the bits of the two calls. Needs what both need. */
void di_cuda_rmsnorm_q_kv(int64_t m, float eps, const float *xq, const uint16_t *wq, int64_t dq, float *yq,
                          const di_cuda_act_forms *fq, const float *xkv, const uint16_t *wkv, int64_t dkv,
                          int64_t offset, int rot_dim, const float *cos_rows, const float *sin_rows, float *ykv,
                          cudaStream_t s);
/* x [rows, n_vec, stride]: in place rotation of the rot_dim values from `offset` of each vector,
 * interleaved pairs; cos/sin [rows, rot_dim/2] (the table row of each row's position) */
void di_cuda_rope(float *x, int64_t rows, int64_t n_vec, int64_t stride, int64_t offset,
                  int rot_dim, const float *cos_rows, const float *sin_rows, bool inverse,
                  cudaStream_t s);

/* ---- sparse attention, bit-identical to the CPU (cuda_attention.cu): DEEPINFER_GPU_EXACT=1 ---- */
/* q [nq, H, dim]; kv_rows [nq, n_idx] device pointers to KV rows [dim] (NULL = index -1);
 * sink [H]; out [nq, H, dim] bf16. dim <= 512. */
void di_cuda_sparse_attn(const float *q, int64_t nq, int n_heads, int dim,
                         const float *const *kv_rows, int n_idx, const float *sink, float scale,
                         float *out, cudaStream_t s);
/* the same with the rows processed slice_rows at a time (di_cuda_sparse_attn bounds its workspace
 * this way; tests force small slices); the result does not depend on slice_rows. ws: a device
 * workspace of di_cuda_sparse_attn_ws_bytes(nq, n_heads, dim, n_idx, slice_rows) bytes, or NULL
 * to allocate one stream-ordered (a caller capturing a CUDA graph passes its own: allocation
 * nodes would make the graph impossible to update). */
void di_cuda_sparse_attn_sliced(const float *q, int64_t nq, int n_heads, int dim,
                                const float *const *kv_rows, int n_idx, const float *sink, float scale,
                                float *out, int64_t slice_rows, float *ws, cudaStream_t s);
/* the slice size di_cuda_sparse_attn uses, and the workspace bytes of a call */
int64_t di_cuda_sparse_attn_slice_rows(int64_t nq, int n_heads, int dim, int n_idx);
size_t di_cuda_sparse_attn_ws_bytes(int64_t nq, int n_heads, int dim, int n_idx, int64_t slice_rows);

/* ---- sparse attention on tensor cores (cuda_attention_mma.cu): the default path ----
 * The same operation, with the dot products and PV sums on bf16 tensor cores (fp32 sums in the
 * tensor core's order): within a derived bound of the CPU, not bit-identical; batch invariant.
 * Needs dim % 32 == 0 and dim <= 512 (di_cuda_sparse_attn_mma_supported). No workspace.
 * heads_per_block: 0 = by shape and grid: the wgmma kernel (below) where it applies and the rows
 * fill the GPU, else the mma.sync kernel with a block shape by grid (not batch invariant across
 * that switch: batch-invariant mode passes 64 where the wgmma kernel applies); 16 or 32 force the
 * mma.sync kernel with that shape (tests: the result is the same), 64 the wgmma kernel.
 * split: how a row's list of 64-entry runs is shared by the CTAs of a cluster (each split its own
 * bits): DI_ATTN_SPLIT_FIXED a fixed count of runs a CTA whatever the rows (2 mma.sync, 5 wgmma:
 * batch-invariant mode); DI_ATTN_SPLIT_AUTO by the grid: a few rows take a CTA a run (mma.sync),
 * at least a row a multiprocessor a CTA a row (wgmma), else the fixed split;
 * DI_ATTN_SPLIT_WHOLE a CTA a row (tests of that case). */
typedef enum { DI_ATTN_SPLIT_AUTO, DI_ATTN_SPLIT_FIXED, DI_ATTN_SPLIT_WHOLE } di_attn_split;
/* RoPE folded into the tensor-core attention (NULL or cos NULL: none): q's values off .. off + rot
 * of every head rotated as the kernel stages them, and the output's rotated back as it is written,
 * each the bits of di_cuda_rope on q before and di_cuda_rope(inverse) on out after the call (q itself
 * is left as it was). cos / sin [nq][rot / 2] of the call's rows; off % 4 == 0, rot % 4 == 0,
 * off + rot <= dim (di_attn_rope_ok). */
typedef struct di_attn_rope {
    const float *cos, *sin;
    int off, rot;
} di_attn_rope;
bool di_attn_rope_ok(int dim, int off, int rot);
bool di_cuda_sparse_attn_mma_supported(int n_heads, int dim);
/* out [nq, H, dim] fp32 (bf16 values), or, where out_bf16 is non-NULL, the same values' bf16 bits
 * there instead (out unused, may be NULL): the form wo_a's tensor-core kernels read, which spares
 * their conversion launch (di_cuda_act_forms) and half the output's bytes. */
void di_cuda_sparse_attn_mma(const float *q, int64_t nq, int n_heads, int dim, const float *const *kv_rows,
                             int n_idx, const float *sink, float scale, float *out, uint16_t *out_bf16,
                             int heads_per_block, di_attn_split split, const di_attn_rope *rope, cudaStream_t s);
/* The wgmma kernel (cuda_attention_wg.cu): 64 heads a CTA, head dim 512 (V4.1's shape): the same
 * operation in another summation order, within the same bound of the CPU; batch invariant under
 * DI_ATTN_SPLIT_FIXED. */
bool di_cuda_sparse_attn_wg_supported(int n_heads, int dim);
void di_cuda_sparse_attn_wg(const float *q, int64_t nq, int n_heads, int dim, const float *const *kv_rows, int n_idx,
                            const float *sink, float scale, float *out, uint16_t *out_bf16, di_attn_split split,
                            const di_attn_rope *rope, cudaStream_t s);

/* ---- mHC (cuda_mhc.cu); T tokens, n = hc copies, d = model dim ----
 * The residual stream (x, r, out [T, n, d]) is bf16 bits, as the reference keeps it: every value of
 * it is an hc_post (or embedding, Engram) output rounded to bf16, so 2 bytes a value lose nothing. */
/* x [T, n, d] bf16; fn [n(n+2), n d] f32 -> mix [T, n(n+2)]. ws: di_cuda_hc_mix_ws_bytes of device
 * workspace, or NULL to allocate it stream-ordered (not while capturing a graph) */
void di_cuda_hc_mix_logits(const uint16_t *x, int64_t T, int n, int64_t d, const float *fn, float eps,
                           float *mix, void *ws, cudaStream_t s);
size_t di_cuda_hc_mix_ws_bytes(int64_t T, int n, int64_t d);
/* mix [T, n(n+2)]; scale [3]; base [n(n+2)] -> pre [T, n], post [T, n], comb [T, n, n] */
void di_cuda_hc_split_sinkhorn(const float *mix, const float *scale, const float *base, int64_t T,
                               int n, int iters, float eps, float *pre, float *post, float *comb,
                               cudaStream_t s);
/* x [T, n, d] bf16; p [T, n] -> out [T, d] = bf16(sum_i p_i x_i) */
void di_cuda_hc_pre(const uint16_t *x, int64_t T, int n, int64_t d, const float *p, float *out,
                    cudaStream_t s);
/* A sublayer's mHC input, the four steps above in two launches: mix = hc_mix_logits(x, fn, eps);
 * (pre_out, post, comb) = hc_split_sinkhorn(mix, scale, base, iters, hc_eps);
 * y [T, d] = rmsnorm(hc_pre(x, p_in), norm_w, eps) -- the same bits. ws: di_cuda_hc_mix_ws_bytes.
 * For a few tokens (where the separate launches are latency): di_cuda_hc_block_in_supported
 * (T <= 32, n * n <= 32, d <= 5,120). */
bool di_cuda_hc_block_in_supported(int64_t T, int n, int64_t d);
/* yq (NULL: none; else d % 32 == 0, y 16-byte aligned): also y's other forms where not NULL
 * (di_cuda_act_forms: act_quant(y, 32)'s codes and scales, their int8-twin digits -- only with
 * the codes --, y's bf16 bits) */
void di_cuda_hc_block_in(const uint16_t *x, int64_t T, int n, int64_t d, const float *fn, float eps, const float *scale,
                         const float *base, int iters, float hc_eps, const float *p_in, const uint16_t *norm_w,
                         float *pre_out, float *post, float *comb, float *y, const di_cuda_act_forms *yq, void *ws,
                         cudaStream_t s);
/* y [T, d]; r [T, n, d] bf16; post [T, n]; comb [T, n, n] -> out [T, n, d] bf16 (may not alias r) */
void di_cuda_hc_post(const float *y, const uint16_t *r, int64_t T, int n, int64_t d, const float *post,
                     const float *comb, uint16_t *out, cudaStream_t s);
/* di_cuda_hc_post, and with p_in [T, n] (non-NULL) also pre_row [T, d] = di_cuda_hc_pre(out, p_in)
 * in the same launch -- the same bits (past the fused input's rows: one launch and one read of the
 * new stream less a sublayer) */
void di_cuda_hc_post_pre(const float *y, const uint16_t *r, int64_t T, int n, int64_t d, const float *post,
                         const float *comb, uint16_t *out, const float *p_in, float *pre_row, cudaStream_t s);
/* hc_post's operands: out [T, n, d] bf16 = hc_post(y [T, d], r [T, n, d] bf16, post [T, n], comb [T, n, n]).
 * slot_rows non-NULL: y is the MoE's output, made from di_cuda_moe_combine's operands (slot_rows
 * [T, K], order [T, K], shared [T, d]; K <= DI_CUDA_COMBINE_MAX_K) by the kernel that reads it. */
#define DI_CUDA_COMBINE_MAX_K 8
typedef struct {
    const float *y;
    const uint16_t *r;
    const float *post, *comb;
    uint16_t *out;
    const float *const *slot_rows;
    const int32_t *order;
    const float *shared;
    int K;
} di_cuda_hc_post_ops;
/* di_cuda_hc_post_pre over p's operands with y the MoE's combine (p->slot_rows) made by the same
 * launch: the bits of di_cuda_moe_combine then di_cuda_hc_post_pre, one launch and a [T, d] round
 * trip less. _supported: slot_rows set, 1 <= K <= DI_CUDA_COMBINE_MAX_K, d % 4 == 0, shared 16-byte
 * aligned (and pre_row, if any), r and out 8-byte aligned */
bool di_cuda_hc_post_combine_supported(const di_cuda_hc_post_ops *p, int n, int64_t d);
void di_cuda_hc_post_combine_pre(const di_cuda_hc_post_ops *p, int64_t T, int n, int64_t d, const float *p_in,
                                 float *pre_row, cudaStream_t s);
/* di_cuda_hc_post(p) then di_cuda_hc_block_in(x = p->out) in two launches (the chunk kernel of the mix
 * sums makes the stream as it reads it) -- the same bits. Supported where the fused input is, d % 4
 * == 0, the f32 rows 16-byte aligned, the stream's 8, and out not r. */
bool di_cuda_hc_post_block_in_supported(const di_cuda_hc_post_ops *p, int64_t T, int n, int64_t d);
void di_cuda_hc_post_block_in(const di_cuda_hc_post_ops *p, int64_t T, int n, int64_t d, const float *fn, float eps,
                              const float *scale, const float *base, int iters, float hc_eps, const float *p_in,
                              const uint16_t *norm_w, float *pre_out, float *post, float *comb, float *y,
                              const di_cuda_act_forms *yq, void *ws, cudaStream_t s);

/* ---- indexer (scores: cuda_index_score_mma.cu, top-k: cuda_indexer.cu) ---- */
/* qi [R, nh, idim]; w [R, nh] bf16 head weights; keys [P, idim] (one sequence's index keys);
 * visible [R] (keys t >= visible[r] score -inf; NULL = all visible) -> score [R, P]
 * score = bf16(sum_h bf16(relu(bf16(q_h . k_t)) * w_h)). idim <= 128, nh <= 32 */
void di_cuda_index_score(const float *qi, const float *w, const float *keys, int64_t R, int64_t P,
                         int nh, int idim, const int64_t *visible, float *score, cudaStream_t s);
/* score [R, P] -> out [R, k]: positions of the k highest scores (> -inf), ascending; exact ties
 * to the lower position; -1 padded. scratch: di_cuda_topk_scratch_bytes(R, P, k) bytes of device
 * memory for long rows' candidate lists (selected in stages where that is faster); NULL (or 0
 * bytes needed): one block a row. The same selection either way. */
size_t di_cuda_topk_scratch_bytes(int64_t R, int64_t P, int k);
/* tests: stage every row that can be (not only where stages are measured faster) */
void di_cuda_topk_always_stage(bool on);
void di_cuda_topk(const float *score, int64_t R, int64_t P, int k, int32_t *out, void *scratch, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
