/* deepinfer-cuda-bench: the card's ceilings, then our CUDA kernels at V4.1 decode shapes against
 * them (issue 5; method in docs/CUDA.md):
 *   1. HBM copy bandwidth: cudaMemcpy device-to-device and a 16-byte copy kernel over 2 GiB,
 *      counting bytes read + written.
 *   2. Dense matrix rates through cuBLASLt: BF16 and FP8 e4m3 (fp32 accumulation, bf16 out),
 *      8192^3 on random data.
 *   3. Each kernel at B = 1, 8, 64 tokens: the fewest bytes it must move (weights once,
 *      activations in and out), its FLOPs, the median time, and % of the roofline
 *      max(bytes / HBM, FLOPs / matrix rate) -- the FP8 rate for the quantised GEMMs (what a
 *      tensor-core kernel could reach), none for the non-matrix ops. Weights rotate over enough
 *      copies to exceed the L2, so small matrices are timed from HBM, not from the cache.
 *   4. The prefill-sized grouped GEMMs (48 experts x 32 / 64 / 512 rows, and FP8 matrices at 512 to
 *      4,096 rows; at 64-256 the decode batches') on the mma.sync tiles, on the wgmma kernel and
 *      (single FP8 matrices) on cuBLAS's BF16 GEMM over the weight dequantised in the call or over
 *      its kept bf16 copy (cuda_linear_blas.cu), with cuBLASLt's BF16 GEMM on bf16 operands alone
 *      beside them at 4,096 and 256 rows: TFLOP/s and % of the BF16 / FP8 rates.
 *   5. (--gemv alone) the decode GEMVs at B = 1 and 8 from HBM, from the L2, and after an L2
 *      prefetch overlapped with another kernel.
 *   6. (--topk alone) the indexer's top-512 at rows of 1K-128K scores, 1-128 rows: one block a row
 *      against stages, and which the cost model picks.
 * Times include the launch (no CUDA graphs yet). Usage: deepinfer-cuda-bench [--quick] [--gemm | --gemv |
 * --topk] (--gemm: the ceilings and part 4 only; --gemv: the ceilings and part 5 only; --topk: part 6) */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_ceilings.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fwd_ops.h"
#include "backend/cuda/cuda_ops.h"

#define CK(call) DI_CUDA_CHECK(call)

static int g_quick;
static double g_hbm_gbs, g_bf16_tflops, g_fp8_tflops;

/* ---- 3. our kernels ---- */
static di_cuda_ctx g_ctx;

struct lin_arg {
    di_weight w[64];
    int copies;
    float *x, *y;
    int64_t m;
};
static void run_lin(void *p, int rep) {
    lin_arg *a = (lin_arg *)p;
    di_cuda_linear(&g_ctx, &a->w[rep % a->copies], a->x, a->m, a->y, DI_LIN_QUANT);
}

static void row(const char *name, const char *shape, double bytes, double flops, double ms, double rate_tflops) {
    const double t_mem = bytes / (g_hbm_gbs * 1e6), t_mat = rate_tflops > 0 ? flops / (rate_tflops * 1e9) : 0.0;
    const double floor_ms = t_mem > t_mat ? t_mem : t_mat;
    printf("  %-14s %-22s %10.2f %10.3f %10.2f %8.2f%%  %s\n", name, shape, bytes / 1e6, flops / 1e9, ms * 1e3,
           100.0 * floor_ms / ms, t_mem >= t_mat ? "HBM" : "FP8 matrix");
}

/* bytes of one weight's data and of its scales */
static size_t weight_bytes(di_dtype dt, int64_t K, int64_t N) {
    return dt == DI_DT_I8 ? (size_t)(N * K / 2) : (size_t)(N * K);
}
static size_t scale_bytes(di_dtype dt, int64_t K, int64_t N) {
    return dt == DI_DT_I8 ? (size_t)(N * (K / 32)) : (size_t)(((N + 31) / 32) * (K / 32));
}
/* a: enough random copies of an N x K weight to exceed `total` bytes (at most 64), activations
 * x [m, K] and outputs y [m, N]; lin_free undoes it */
static void lin_alloc(lin_arg *a, di_dtype dt, int64_t K, int64_t N, int64_t m, unsigned long long total) {
    memset(a, 0, sizeof *a);
    const size_t wbytes = weight_bytes(dt, K, N), sbytes = scale_bytes(dt, K, N);
    a->copies = (int)(total / (wbytes + sbytes)) + 1;
    if (a->copies > 64) a->copies = 64;
    for (int c = 0; c < a->copies; c++) {
        a->w[c].dtype = dt;
        a->w[c].rows = N;
        a->w[c].cols = K;
        a->w[c].data = di_cuda_dalloc_random(wbytes, dt == DI_DT_F8_E4M3);
        uint8_t *s;
        CK(cudaMalloc(&s, sbytes));
        di_cuda_fill_scale(s, sbytes, (uint32_t)c);
        a->w[c].scale = s;
    }
    a->m = m;
    a->x = di_cuda_dalloc_random_f32((size_t)(m * K));
    CK(cudaMalloc(&a->y, (size_t)(m * N) * 4));
}
static void lin_free(lin_arg *a) {
    for (int c = 0; c < a->copies; c++) {
        cudaFree((void *)a->w[c].data);
        cudaFree((void *)a->w[c].scale);
    }
    cudaFree(a->x), cudaFree(a->y);
}

static void bench_linear(const char *name, di_dtype dt, int64_t K, int64_t N, int64_t m) {
    lin_arg a;
    lin_alloc(&a, dt, K, N, m, 256ull << 20);
    const size_t wbytes = weight_bytes(dt, K, N), sbytes = scale_bytes(dt, K, N);
    const double ms = di_cuda_time_ms(run_lin, &a, a.copies < 20 ? 20 : a.copies, 5);
    /* activations counted as bf16 in / bf16 out, what a fused engine would move */
    const double bytes = (double)wbytes + sbytes + 2.0 * m * K + 2.0 * m * N;
    char shape[64];
    snprintf(shape, sizeof shape, "B=%lld %lldx%lld", (long long)m, (long long)K, (long long)N);
    row(name, shape, bytes, 2.0 * m * N * K, ms, g_fp8_tflops);
    lin_free(&a);
}

/* ---- 5. decode GEMVs with their weights in HBM, in the L2, or prefetched into the L2 while another
 * kernel runs (--gemv): does a B = 1 step gain from loading the next matrix during the small
 * kernels before it, when HBM is otherwise idle? ---- */
__global__ void spin_kernel(long long ns) { /* one warp waiting ns: the small kernels between two GEMVs */
    long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        __nanosleep(256);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}
__global__ void l2_bulk_prefetch_kernel(const uint8_t *p, size_t bytes) { /* 64 KiB a TMA prefetch */
    const size_t chunk = 64 << 10;
    for (size_t off = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * chunk; off < bytes;
         off += (size_t)gridDim.x * blockDim.x * chunk) {
        const unsigned n = (unsigned)(bytes - off < chunk ? bytes - off : chunk);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"(n & ~15u) : "memory");
    }
}
__global__ void l2_line_prefetch_kernel(const uint8_t *p, size_t bytes) { /* one prefetch a 128-byte line */
    for (size_t off = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 128; off < bytes;
         off += (size_t)gridDim.x * blockDim.x * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(p + off) : "memory");
}

struct gemv_arg {
    lin_arg *lin;
    int mode;      /* 0: the GEMV alone; 1: spin, GEMV; 2: bulk prefetch, spin, GEMV; 3: line prefetch, spin, GEMV */
    long long ns;  /* the spin */
    size_t wbytes, sbytes;
};
static void run_gemv(void *p, int rep) {
    gemv_arg *g = (gemv_arg *)p;
    const di_weight *w = &g->lin->w[rep % g->lin->copies];
    if (g->mode == 2) {
        l2_bulk_prefetch_kernel<<<16, 32>>>((const uint8_t *)w->data, g->wbytes);
        l2_bulk_prefetch_kernel<<<1, 32>>>((const uint8_t *)w->scale, g->sbytes);
    } else if (g->mode == 3) {
        l2_line_prefetch_kernel<<<64, 256>>>((const uint8_t *)w->data, g->wbytes);
        l2_line_prefetch_kernel<<<4, 256>>>((const uint8_t *)w->scale, g->sbytes);
    }
    if (g->mode >= 1) spin_kernel<<<1, 32>>>(g->ns);
    run_lin(g->lin, rep);
}

static void bench_gemv(const char *name, di_dtype dt, int64_t K, int64_t N, int64_t m) {
    lin_arg a;
    lin_alloc(&a, dt, K, N, m, 512ull << 20); /* 512 MiB: eight L2s */
    const size_t wbytes = weight_bytes(dt, K, N), sbytes = scale_bytes(dt, K, N);
    gemv_arg g = {&a, 0, 40000, wbytes, sbytes};
    const int reps = a.copies < 20 ? 20 : a.copies;
    const double cold = di_cuda_time_ms(run_gemv, &g, reps, 5);
    const int copies = a.copies;
    a.copies = 1;
    const double warm = di_cuda_time_ms(run_gemv, &g, reps, 5);
    a.copies = copies;
    double t[4];
    for (int mode = 1; mode <= 3; mode++) {
        g.mode = mode;
        t[mode] = di_cuda_time_ms(run_gemv, &g, reps, 5);
    }
    const double bytes = (double)wbytes + sbytes, floor_us = bytes / (g_hbm_gbs * 1e3);
    char shape[64];
    snprintf(shape, sizeof shape, "B=%lld %lldx%lld", (long long)m, (long long)K, (long long)N);
    printf("  %-14s %-22s %8.2f %8.2f %8.1f %8.1f %8.1f %10.1f %10.1f\n", name, shape, bytes / 1e6, floor_us,
           cold * 1e3, warm * 1e3, (t[1] - g.ns * 1e-6) * 1e3, (t[2] - g.ns * 1e-6) * 1e3, (t[3] - g.ns * 1e-6) * 1e3);
    lin_free(&a);
}

static void bench_gemv_all(void) {
    printf("Decode GEMVs (median us; launch and act_quant included). cold: a different copy each run (HBM);\n"
           "warm: the same copy (in the L2 where it fits); after spin: a 40 us one-warp kernel first (the\n"
           "step's small kernels), its time subtracted; + bulk / line prefetch: the matrix prefetched into\n"
           "the L2 (cp.async.bulk.prefetch.L2 / prefetch.global.L2) before the spin\n");
    printf("  %-14s %-22s %8s %8s %8s %8s %8s %10s %10s\n", "matrix", "shape", "MB", "HBM us", "cold", "warm",
           "spin", "+bulk pf", "+line pf");
    const int64_t ms[2] = {1, 8};
    for (int i = 0; i < 2; i++) {
        bench_gemv("fp8 wq_a", DI_DT_F8_E4M3, 5120, 1280, ms[i]);
        bench_gemv("fp8 sh w1", DI_DT_F8_E4M3, 5120, 2304, ms[i]);
        bench_gemv("fp8 sh w2", DI_DT_F8_E4M3, 2304, 5120, ms[i]);
        bench_gemv("fp8 wq_b", DI_DT_F8_E4M3, 1280, 32768, ms[i]);
        bench_gemv("fp8 wo_b", DI_DT_F8_E4M3, 8192, 5120, ms[i]);
        bench_gemv("fp4 expert w1", DI_DT_I8, 5120, 2304, ms[i]);
    }
    printf("\n");
}

/* ---- prefill-sized grouped GEMMs: the routed experts of a layer (G experts x R rows each), and
 * single FP8 matrices, on the mma.sync tiles and on the wgmma kernel (DEEPINFER_GPU_WGMMA) ---- */
struct grp_arg {
    di_weight shape;
    const uint8_t *const *wd, *const *ws; /* device [G] */
    const int *off;                      /* device [G + 1] */
    const uint8_t *wd1, *ws1;            /* G == 0: one matrix */
    int G;
    int64_t rows, R;
    float *x, *y;
};
static void run_grp(void *p, int) {
    grp_arg *a = (grp_arg *)p;
    if (a->G == 0)
        di_cuda_linear_mma(&g_ctx, &a->shape, a->wd1, a->ws1, NULL, NULL, NULL, NULL, 1, a->rows, a->rows, a->x, a->y);
    else
        di_cuda_linear_mma(&g_ctx, &a->shape, NULL, NULL, a->wd, a->ws, a->off, NULL, a->G, a->rows, a->R, a->x, a->y);
}

static void bench_grouped(const char *name, di_dtype dt, int64_t K, int64_t N, int G, int64_t R) {
    grp_arg a;
    memset(&a, 0, sizeof a);
    const bool fp4 = dt == DI_DT_I8;
    const int n = G ? G : 1;
    const size_t wbytes = fp4 ? (size_t)(N * K / 2) : (size_t)(N * K);
    const size_t sbytes = fp4 ? (size_t)(N * (K / 32)) : (size_t)(((N + 31) / 32) * (K / 32));
    a.shape.dtype = dt;
    a.shape.rows = N;
    a.shape.cols = K;
    a.G = G;
    a.R = R;
    a.rows = (int64_t)n * R;
    const uint8_t **hw = (const uint8_t **)malloc(sizeof(void *) * n), **hs = (const uint8_t **)malloc(sizeof(void *) * n);
    int *ho = (int *)malloc(sizeof(int) * (n + 1));
    for (int g = 0; g < n; g++) {
        hw[g] = (const uint8_t *)di_cuda_dalloc_random(wbytes, !fp4);
        uint8_t *sc;
        CK(cudaMalloc(&sc, sbytes));
        di_cuda_fill_scale(sc, sbytes, (uint32_t)g);
        hs[g] = sc;
        ho[g] = (int)(g * R);
    }
    ho[n] = (int)a.rows;
    uint8_t **dw, **ds;
    int *doff;
    CK(cudaMalloc(&dw, sizeof(void *) * n));
    CK(cudaMalloc(&ds, sizeof(void *) * n));
    CK(cudaMalloc(&doff, sizeof(int) * (n + 1)));
    CK(cudaMemcpy(dw, hw, sizeof(void *) * n, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(ds, hs, sizeof(void *) * n, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(doff, ho, sizeof(int) * (n + 1), cudaMemcpyHostToDevice));
    a.wd = dw, a.ws = ds, a.off = doff, a.wd1 = hw[0], a.ws1 = hs[0];
    a.x = di_cuda_dalloc_random_f32((size_t)(a.rows * K));
    CK(cudaMalloc(&a.y, (size_t)(a.rows * N) * 4));
    const double flops = 2.0 * a.rows * N * K, bytes = (double)n * (wbytes + sbytes) + 2.0 * a.rows * (K + N);
    char shape[64];
    snprintf(shape, sizeof shape, "%dx%lld %lldx%lld", n, (long long)R, (long long)K, (long long)N);
    /* the mma.sync tiles, the wgmma kernel, and (single FP8 matrices) cuBLAS's BF16 GEMM on the weight
     * dequantised in the call (cuda_linear_blas.cu, its dequantisation and widening included) and on
     * a kept bf16 copy (DEEPINFER_GPU_DENSE_BF16: its widening included) */
    const int variants = G == 0 && !fp4 ? 4 : 2;
    di_cuda_dense16 kept = {};
    if (variants == 4 && !di_cuda_dense16_add(&kept, hw[0], hs[0], N, K, g_ctx.stream)) {
        fprintf(stderr, "no room for the kept copy\n");
        exit(1);
    }
    double ms[4];
    for (int w = 0; w < variants; w++) {
        g_ctx.wgmma = w >= 1;
        g_ctx.blas_rows = w == 2 ? 1 : 0;
        g_ctx.dense16 = w == 3 ? &kept : NULL;
        g_ctx.dense16_rows = w == 3 ? 1 : 0;
        ms[w] = di_cuda_time_ms(run_grp, &a, 10, 5);
    }
    g_ctx.wgmma = false;
    g_ctx.blas_rows = 0;
    g_ctx.dense16 = NULL;
    g_ctx.dense16_rows = 0;
    di_cuda_dense16_free(&kept);
    const double t_mem = bytes / (g_hbm_gbs * 1e6);
    static const char *kernel[4] = {"mma.sync", "wgmma", "blas", "kept"};
    for (int w = 0; w < variants; w++) {
        const double tf = flops / (ms[w] * 1e9);
        printf("  %-14s %-22s %-8s %10.1f %9.1f %8.1f%% %8.1f%% %8.1f%%\n", name, shape, kernel[w], ms[w] * 1e3, tf,
               100.0 * tf / g_bf16_tflops, 100.0 * tf / g_fp8_tflops, 100.0 * t_mem / ms[w]);
    }
    for (int g = 0; g < n; g++) cudaFree((void *)hw[g]), cudaFree((void *)hs[g]);
    cudaFree(dw), cudaFree(ds), cudaFree(doff), cudaFree(a.x), cudaFree(a.y);
    free(hw), free(hs), free(ho);
}

/* cuBLASLt's BF16 GEMM at a linear's shape: Y [M, N] = X [M, K] W [N, K]^T on bf16 operands alone --
 * what the linear would cost on weights kept dequantised to bf16 (cuda_linear_blas.cu's
 * dequantisation and widening not included) */
static void bench_lt_bf16(const char *name, int64_t M, int64_t K, int64_t N) {
    const double ms = di_cuda_lt_bf16_ms(M, N, K);
    if (ms < 0.0) {
        printf("  %-14s no cuBLASLt algorithm\n", name);
        return;
    }
    const double tf = 2.0 * M * N * K / (ms * 1e9);
    char shape[64];
    snprintf(shape, sizeof shape, "1x%lld %lldx%lld", (long long)M, (long long)K, (long long)N);
    printf("  %-14s %-22s %-8s %10.1f %9.1f %8.1f%% %8.1f%% %8s\n", name, shape, "lt bf16", ms * 1e3, tf,
           100.0 * tf / g_bf16_tflops, 100.0 * tf / g_fp8_tflops, "");
}

/* the head (BF16 weight [vocab, hidden], fp32 out) at decode batches: ours (DI_LIN_F32 through
 * di_cuda_linear_w16: the wgmma kernel past the twin's rows) against cuBLASLt's BF16 GEMM alone */
struct w16_arg {
    di_weight w;
    const float *x;
    float *y;
    int64_t rows;
};
static void run_w16(void *p, int) {
    w16_arg *a = (w16_arg *)p;
    di_cuda_linear_w16(&g_ctx, &a->w, a->x, a->rows, a->y, false);
}
static void bench_head(int64_t rows, int64_t K, int64_t N) {
    w16_arg a;
    memset(&a, 0, sizeof a);
    a.w.dtype = DI_DT_BF16;
    a.w.rows = N;
    a.w.cols = K;
    a.w.data = di_cuda_dalloc_random_f32((size_t)(N * K) / 2); /* bf16 bits of small floats' halves */
    a.x = di_cuda_dalloc_random_f32((size_t)(rows * K));
    CK(cudaMalloc(&a.y, (size_t)(rows * N) * 4));
    a.rows = rows;
    g_ctx.wgmma = true;
    const double ms = di_cuda_time_ms(run_w16, &a, 10, 5);
    g_ctx.wgmma = false;
    const double tf = 2.0 * rows * N * K / (ms * 1e9);
    char shape[64];
    snprintf(shape, sizeof shape, "1x%lld %lldx%lld", (long long)rows, (long long)K, (long long)N);
    printf("  %-14s %-22s %-8s %10.1f %9.1f %8.1f%% %8.1f%% %8.1f%%\n", "bf16 head", shape, "w16", ms * 1e3, tf,
           100.0 * tf / g_bf16_tflops, 100.0 * tf / g_fp8_tflops,
           100.0 * (2.0 * N * K + 4.0 * rows * (K + N)) / (g_hbm_gbs * 1e6) / ms);
    bench_lt_bf16("bf16 head", rows, K, N);
    cudaFree((void *)a.w.data), cudaFree((void *)a.x), cudaFree(a.y);
}

static void bench_grouped_all(void) {
    printf("Prefill-sized GEMMs, mma.sync tiles against the wgmma kernel (median, launch and act_quant included)\n");
    printf("  %-14s %-22s %-8s %10s %9s %9s %9s %9s\n", "kernel", "groups x rows K x N", "kernel", "time us",
           "TFLOP/s", "% BF16", "% FP8", "% HBM");
    const int64_t R[3] = {32, 64, 512}; /* rows per expert: decode B = 256, prefill 512, 4096 (EP-8) */
    for (int i = 0; i < 3; i++) {
        bench_grouped("fp4 w1", DI_DT_I8, 5120, 2304, 48, R[i]);
        bench_grouped("fp4 w2", DI_DT_I8, 2304, 5120, 48, R[i]);
    }
    /* the dense linears of a 4,096-token prefill: ours, then cuBLASLt's BF16 on the same shape */
    static const struct {
        const char *name;
        int64_t K, N;
    } dense[] = {{"fp8 wq_b", 1280, 32768},    {"fp8 wo_b", 8192, 5120},  {"fp8 wo_a group", 4096, 1024},
                 {"fp8 shared w1", 5120, 2304}, {"fp8 shared w2", 2304, 5120}};
    for (const auto &d : dense) {
        bench_grouped(d.name, DI_DT_F8_E4M3, d.K, d.N, 0, 4096);
        bench_lt_bf16(d.name, 4096, d.K, d.N);
    }
    /* decode steps of B = 64, 128, 256: the kept bf16 copies (DEEPINFER_GPU_DENSE_BF16) against the
     * wgmma kernel -- where they start to pay -- and cuBLASLt alone at 256 */
    for (int64_t rows = 64; rows <= 256; rows *= 2)
        for (const auto &d : dense) {
            bench_grouped(d.name, DI_DT_F8_E4M3, d.K, d.N, 0, rows);
            if (rows == 256) bench_lt_bf16(d.name, 256, d.K, d.N);
        }
    for (int64_t rows = 64; rows <= 256; rows *= 2) bench_head(rows, 5120, 129280);
    /* where cuBLAS starts to pay (DI_CUDA_BLAS_MIN_ROWS) */
    for (int64_t rows = 512; rows <= 2048; rows *= 2) {
        bench_grouped("fp8 wq_b", DI_DT_F8_E4M3, 1280, 32768, 0, rows);
        bench_grouped("fp8 wo_b", DI_DT_F8_E4M3, 8192, 5120, 0, rows);
        bench_grouped("fp8 shared w1", DI_DT_F8_E4M3, 5120, 2304, 0, rows);
    }
    printf("\n");
}

/* ---- host-side costs a forward step pays per operation (no CUDA graphs) ---- */
__global__ void empty_kernel(int *p) {
    if (p && threadIdx.x == 1024) *p = 0;
}
static void run_empty(void *, int) { empty_kernel<<<1, 32>>>(nullptr); }
static void run_alloc(void *, int) {
    void *p;
    CK(cudaMallocAsync(&p, 64 << 10, 0));
    CK(cudaFreeAsync(p, 0));
}
static void bench_api(void) {
    printf("Per-operation costs, back to back on one stream (what a step pays per launch without graphs)\n");
    printf("  empty kernel launch            %8.2f us\n", 1e3 * di_cuda_time_ms(run_empty, NULL, 1000, 5));
    printf("  cudaMallocAsync + FreeAsync    %8.2f us  (64 KiB)\n\n", 1e3 * di_cuda_time_ms(run_alloc, NULL, 1000, 5));
}

struct misc_arg {
    int op;
    int64_t m;
    float *x, *y, *sink, *score;
    uint16_t *w16;
    const float *const *rows;
    int32_t *sel;
    void *scratch; /* top-k's candidate lists (NULL: one block a row) */
    int64_t P;     /* top-k's row length (--topk) */
};
static void run_misc(void *p, int rep) {
    misc_arg *a = (misc_arg *)p;
    switch (a->op) {
    case 0: di_cuda_rmsnorm(a->x, a->w16, a->m, 5120, 1e-20f, a->y, 0); break;
    case 1: di_cuda_act_quant_inplace(a->y, a->m * 5120, 32, 0); break;
    case 2: di_cuda_sparse_attn(a->x, a->m, 64, 512, a->rows, 640, a->sink, 0.0441941738f, a->y, 0); break;
    case 3: di_cuda_index_score(a->x, a->sink, a->y, a->m, 8192, 32, 128, NULL, a->score, 0); break;
    case 4: di_cuda_topk(a->score, a->m, 8192, 512, a->sel, a->scratch, 0); break;
    case 5: di_cuda_topk(a->score, a->m, a->P, 512, a->sel, a->scratch, 0); break;
    }
}

static void bench_misc(int64_t m) {
    misc_arg a;
    memset(&a, 0, sizeof a);
    a.m = m;
    char shape[64];
    /* RMSNorm and act_quant over [B, 5120] */
    a.x = di_cuda_dalloc_random_f32((size_t)m * 5120);
    a.y = di_cuda_dalloc_random_f32((size_t)m * 5120);
    CK(cudaMalloc(&a.w16, 5120 * 2));
    di_cuda_fill_bf16(a.w16, 5120, 3);
    snprintf(shape, sizeof shape, "B=%lld D=5120", (long long)m);
    a.op = 0;
    row("rmsnorm", shape, (double)m * 5120 * 4, 0, di_cuda_time_ms(run_misc, &a, 50, 5), 0);
    a.op = 1;
    row("act_quant", shape, (double)m * 5120 * 4, 0, di_cuda_time_ms(run_misc, &a, 50, 5), 0);
    cudaFree(a.x), cudaFree(a.y);

    /* sparse attention: 64 heads x 512, 640 entries (128 window + 512 selected) per query, rows
     * gathered from a 32K-row pool (bf16 in a real cache; fp32 here, counted as bf16) */
    const int64_t pool = 32768;
    float *kv = di_cuda_dalloc_random_f32((size_t)pool * 512);
    const float **h_rows = (const float **)malloc(sizeof(float *) * m * 640);
    for (int64_t i = 0; i < m * 640; i++) h_rows[i] = kv + (size_t)(rand() % pool) * 512;
    const float **d_rows;
    CK(cudaMalloc(&d_rows, sizeof(float *) * m * 640));
    CK(cudaMemcpy(d_rows, h_rows, sizeof(float *) * m * 640, cudaMemcpyHostToDevice));
    a.rows = d_rows;
    a.x = di_cuda_dalloc_random_f32((size_t)m * 64 * 512);
    a.y = di_cuda_dalloc_random_f32((size_t)m * 64 * 512);
    a.sink = di_cuda_dalloc_random_f32(64);
    snprintf(shape, sizeof shape, "B=%lld 64x512 idx=640", (long long)m);
    a.op = 2;
    row("sparse_attn", shape, (double)m * (640 * 512 * 2 + 2 * 64 * 512 * 2), (double)m * 64 * 640 * 512 * 4,
        di_cuda_time_ms(run_misc, &a, 10, 5), g_bf16_tflops);
    cudaFree(kv), cudaFree(d_rows), cudaFree(a.x), cudaFree(a.y), cudaFree(a.sink);
    free(h_rows);

    /* indexer: 32 heads x 128 over 8192 keys (32K context, ratio 4), then top-512 */
    a.x = di_cuda_dalloc_random_f32((size_t)m * 32 * 128);
    a.sink = di_cuda_dalloc_random_f32((size_t)m * 32);
    a.y = di_cuda_dalloc_random_f32((size_t)8192 * 128);
    CK(cudaMalloc(&a.score, (size_t)m * 8192 * 4));
    CK(cudaMalloc(&a.sel, (size_t)m * 512 * 4));
    snprintf(shape, sizeof shape, "B=%lld 32x128 P=8192", (long long)m);
    a.op = 3;
    row("index_score", shape, 8192.0 * 128 * 0.5 + m * 8192.0 * 4, (double)m * 8192 * 32 * 128 * 2,
        di_cuda_time_ms(run_misc, &a, 10, 5), g_fp8_tflops);
    snprintf(shape, sizeof shape, "B=%lld P=8192 k=512", (long long)m);
    a.op = 4;
    const size_t topk_scratch = di_cuda_topk_scratch_bytes(m, 8192, 512); /* 0: one block a row */
    if (topk_scratch) CK(cudaMalloc(&a.scratch, topk_scratch));
    row("topk", shape, m * 8192.0 * 4 + m * 512.0 * 4, 0, di_cuda_time_ms(run_misc, &a, 10, 5), 0);
    cudaFree(a.x), cudaFree(a.sink), cudaFree(a.y), cudaFree(a.score), cudaFree(a.sel), cudaFree(a.w16);
    if (a.scratch) cudaFree(a.scratch);
}

/* --topk: the indexer's top-512 over rows of P scores, one block a row against the stages (the
 * candidate lists of di_cuda_topk's scratch), for B rows; scores random fp32 (real ones are bf16,
 * with more ties: tests/cuda/test_cuda_ops.cu checks those) */
static void bench_topk(void) {
    printf("Top-512 of rows of P scores: one block a row against stages (median us a call, launches included;\n"
           "chosen: what di_cuda_topk's cost model picks given scratch)\n");
    printf("  %6s %8s %12s %12s %8s %8s\n", "rows", "P", "1 block us", "staged us", "ratio", "chosen");
    const int64_t Ps[7] = {1024, 4096, 8192, 16384, 32768, 65536, 131072}, Bs[4] = {1, 8, 64, 128};
    for (int b = 0; b < 4; b++)
        for (int i = 0; i < 7; i++) {
            misc_arg a;
            memset(&a, 0, sizeof a);
            a.op = 5, a.m = Bs[b], a.P = Ps[i];
            a.score = di_cuda_dalloc_random_f32((size_t)a.m * a.P);
            CK(cudaMalloc(&a.sel, (size_t)a.m * 512 * 4));
            const double one = di_cuda_time_ms(run_misc, &a, 20, 5);
            const bool chosen = di_cuda_topk_scratch_bytes(a.m, a.P, 512) > 0;
            di_cuda_topk_always_stage(true);
            const size_t bytes = di_cuda_topk_scratch_bytes(a.m, a.P, 512);
            double staged = one;
            if (bytes) {
                CK(cudaMalloc(&a.scratch, bytes));
                staged = di_cuda_time_ms(run_misc, &a, 20, 5);
                cudaFree(a.scratch);
            }
            di_cuda_topk_always_stage(false);
            char st[16] = "(same)";
            if (bytes) snprintf(st, sizeof st, "%.1f", 1e3 * staged);
            printf("  %6lld %8lld %12.1f %12s %8.2f %8s\n", (long long)a.m, (long long)a.P, 1e3 * one, st, one / staged,
                   chosen ? "staged" : "1 block");
            cudaFree(a.score), cudaFree(a.sel);
        }
    printf("\n");
}

int main(int argc, char **argv) {
    int gemm_only = 0, gemv_only = 0, topk_only = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) g_quick = 1;
        if (!strcmp(argv[i], "--gemm")) gemm_only = 1;
        if (!strcmp(argv[i], "--gemv")) gemv_only = 1;
        if (!strcmp(argv[i], "--topk")) topk_only = 1;
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIPPED: no CUDA device\n");
        return 0;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("deepinfer-cuda-bench on %s (sm_%d%d, %d SMs, %.0f MiB L2, %.1f GiB)\n\n", prop.name, prop.major,
           prop.minor, prop.multiProcessorCount, prop.l2CacheSize / 1048576.0, prop.totalGlobalMem / 1073741824.0);
    if (!di_cuda_ctx_init(&g_ctx)) return 2;
    di_cuda_ceilings ceil;
    di_cuda_measure_ceilings(g_quick, true, &ceil);
    g_hbm_gbs = ceil.hbm_gbs;
    g_bf16_tflops = ceil.bf16_tflops;
    g_fp8_tflops = ceil.fp8_tflops;

    if (topk_only) {
        bench_topk();
        di_cuda_ctx_free(&g_ctx);
        return 0;
    }
    if (gemv_only) {
        bench_gemv_all();
        di_cuda_ctx_free(&g_ctx);
        return 0;
    }
    if (gemm_only) {
        bench_grouped_all();
        di_cuda_ctx_free(&g_ctx);
        return 0;
    }
    bench_api();
    printf("Our kernels at V4.1 decode shapes (median; launch included, no graphs)\n");
    printf("  roofline = max(bytes / %.0f GB/s, FLOPs / matrix rate); %% = roofline time / measured time\n",
           g_hbm_gbs);
    printf("  %-14s %-22s %10s %10s %10s %9s  %s\n", "kernel", "shape", "MB moved", "GFLOP", "time us",
           "% roofl.", "bound");
    const int64_t bs[5] = {1, 8, 64, 512, 4096};
    for (int i = 0; i < (g_quick ? 3 : 5); i++) {
        const int64_t m = bs[i];
        bench_linear("fp8 wq_a", DI_DT_F8_E4M3, 5120, 1280, m);
        bench_linear("fp8 wq_b", DI_DT_F8_E4M3, 1280, 32768, m);
        bench_linear("fp8 wo_b", DI_DT_F8_E4M3, 8192, 5120, m);
        bench_linear("fp4 expert w1", DI_DT_I8, 5120, 2304, m);
        bench_linear("fp4 expert w2", DI_DT_I8, 2304, 5120, m);
        if (m <= 64) bench_misc(m);
    }
    printf("\n");
    bench_grouped_all();
    printf("Notes: the quantised GEMMs run the FP8 tensor-core kernel (mma.sync m16n8k32, block sums\n"
           "folded per 32 in K order; DEEPINFER_GPU_EXACT=1 selects the exact CUDA-core kernel instead);\n"
           "rows 512 and 4096 are prefill-sized (compute-bound: rated against the FP8 rate). See\n"
           "docs/CUDA.md and docs/PERFORMANCE.md.\n");
    di_cuda_ctx_free(&g_ctx);
    return 0;
}
