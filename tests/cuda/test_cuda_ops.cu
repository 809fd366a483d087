/* Per-op parity of the CUDA backend against the CPU reference (llama.cpp test-backend-ops style).
 *
 * For every op: random inputs of several shapes (the real V4.1 ones where the CPU reference runs
 * in seconds: D = 5120, 64 heads x 512, q_lora 1280, expert 2304, indexer 32 x 128), the CPU
 * reference and the CUDA op on the same inputs, device outputs poisoned (NaN) before each run.
 * One line per case: PASS/FAIL, op, shape, the max relative error, the number of elements whose
 * bits differ, and the criterion. Criteria:
 *   exact      bit-identical (the op rounds where the CPU rounds, in the same order, or its sums
 *              are exact: quantisers, block-scaled GEMMs, RoPE, mHC pre/post/Sinkhorn, attention,
 *              indexer score, top-k)
 *   bf16-ulp   each element within 1 bf16 ulp of the CPU's (expected bit-exact; a double sum is
 *              taken in a different order, which can move an fp32 rounding only within 2^-29 of a
 *              boundary) -- RMSNorm
 *   f32-ulp    within 2 fp32 ulps (same reason, fp32 output) -- hc_mix_logits
 *   fp32-sum   BF16/F32 linears through cuBLAS (fp32 accumulation in its own order; the CPU sums
 *   bound      exactly): |gpu - cpu| <= (K + 1) 2^-24 sum_k |x_k w_k|, plus 1 bf16 ulp in BF16 mode
 * Prints "SKIPPED: no CUDA device" and exits 0 where no GPU is present; exits 1 on any FAIL.
 * `test_cuda_ops --quick` runs small shapes only (for compute-sanitizer); `--attn` the attention
 * cases of the real shape (the wgmma kernel's) alone, `--mhc` the mHC cases, `--topk` small top-k cases,
 * `--records` small attention cases over compressed KV records. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

extern "C" {
#include "backend/cpu/cpu_ops.h"
#include "forward/kv_record.h"
}
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/cuda_fwd_ops.h"
#include "backend/cuda/cuda_ops.h"

#define CUDA_TEST_SEED 0x9e3779b97f4a7c15ull
#include "cuda_test_util.cuh"

static int g_pass, g_fail;
static di_cuda_ctx g_ctx;

/* ---- comparison ---- */
enum crit { CRIT_EXACT, CRIT_BF16_ULP, CRIT_F32_ULP, CRIT_BOUND };
static const char *crit_name[] = {"exact", "bf16-ulp", "f32-ulp(2)", "fp32-sum bound"};
static const float *g_bound; /* CRIT_BOUND: per-element absolute bound */

static int64_t ulp_dist(float a, float b, int shift) {
    uint32_t ua, ub;
    memcpy(&ua, &a, 4);
    memcpy(&ub, &b, 4);
    int64_t ia = (ua & 0x80000000u) ? -(int64_t)(ua & 0x7fffffffu) : (int64_t)ua;
    int64_t ib = (ub & 0x80000000u) ? -(int64_t)(ub & 0x7fffffffu) : (int64_t)ub;
    int64_t d = ia - ib;
    return (d < 0 ? -d : d) >> shift;
}

/* gpu vs cpu over `rows` rows of `cols`; prints one line, counts pass/fail */
static void compare(const char *op, const char *shape, const float *gpu, const float *cpu, int64_t rows,
                    int64_t cols, enum crit c) {
    int64_t ndiff = 0, nbad = 0, n = rows * cols;
    double maxrel = 0.0, max_of_bound = 0.0; /* CRIT_BOUND: largest |diff| / bound, at worst_i */
    int64_t worst_i = -1;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = 0; j < cols; j++) {
            const float g = gpu[r * cols + j], h = cpu[r * cols + j];
            if (memcmp(&g, &h, 4) == 0) continue;
            ndiff++;
            if (isnan(g) || isnan(h)) {
                nbad++;
                maxrel = INFINITY;
                continue;
            }
            double rel = fabs((double)g - h) / fmax(fabs((double)h), 1e-30);
            if (g == h) rel = 0.0; /* +0 vs -0 */
            if (rel > maxrel) maxrel = rel;
            bool ok = false;
            switch (c) {
            case CRIT_EXACT: ok = false; break;
            case CRIT_BF16_ULP: ok = ulp_dist(g, h, 16) <= 1 || g == h; break;
            case CRIT_F32_ULP: ok = ulp_dist(g, h, 0) <= 2 || g == h; break;
            case CRIT_BOUND:
                ok = fabs((double)g - h) <= g_bound[r * cols + j];
                if (fabs((double)g - h) / g_bound[r * cols + j] > max_of_bound) {
                    max_of_bound = fabs((double)g - h) / g_bound[r * cols + j];
                    worst_i = r * cols + j;
                }
                break;
            }
            if (!ok) nbad++;
        }
    }
    const bool pass = nbad == 0;
    printf("%s  %-22s %-34s max_rel_err %.3e  differing %lld / %lld  [%s]", pass ? "PASS" : "FAIL", op,
           shape, maxrel, (long long)ndiff, (long long)n, crit_name[c]);
    if (c == CRIT_BOUND) printf("  worst %.3f of the bound", max_of_bound);
    printf("\n");
    if (!pass && worst_i >= 0)
        printf("      worst [row %lld, col %lld] gpu %a (%.9g)  cpu %a (%.9g)  bound %.3g\n", (long long)(worst_i / cols),
               (long long)(worst_i % cols), gpu[worst_i], gpu[worst_i], cpu[worst_i], cpu[worst_i], g_bound[worst_i]);
    if (!pass) { /* the first few differences, for diagnosis from the log alone */
        int shown = 0;
        for (int64_t i = 0; i < n && shown < 4; i++) {
            if (memcmp(&gpu[i], &cpu[i], 4) == 0) continue;
            printf("      [row %lld, col %lld] gpu %a (%.9g)  cpu %a (%.9g)\n", (long long)(i / cols),
                   (long long)(i % cols), gpu[i], gpu[i], cpu[i], cpu[i]);
            shown++;
        }
    }
    fflush(stdout);
    if (pass) g_pass++;
    else g_fail++;
}

/* ---- quantisers ---- */
/* the GEMMs' act_quant to e4m3 codes against di_cpu_act_quant_block: codes decoded, values and
 * scales bit for bit (but for the sign of zero, which the codes do not carry); `offset` floats
 * into the buffer (1: not 16-byte aligned); some blocks all zero, some with one huge value */
static void test_act_quant_e4m3(int64_t n_blocks, int offset, float scale) {
    const int64_t n = n_blocks * 32;
    float *x = (float *)malloc(4 * (n + offset)), *ref = (float *)malloc(4 * n), *got = (float *)malloc(4 * n);
    float *rs = (float *)malloc(4 * n_blocks), *gs = (float *)malloc(4 * n_blocks);
    uint8_t *codes = (uint8_t *)malloc(n);
    fill_wide(x + offset, n, scale);
    for (int64_t b = 0; b < n_blocks; b += 7) memset(x + offset + 32 * b, 0, 4 * 32);
    for (int64_t b = 3; b < n_blocks; b += 11) x[offset + 32 * b + 5] = 3.0e4f * scale;
    for (int64_t b = 0; b < n_blocks; b++) di_cpu_act_quant_block(x + offset + 32 * b, 32, ref + 32 * b, rs + b);
    for (int64_t i = 0; i < n; i++) ref[i] += 0.0f; /* -0 -> +0: the codes carry no negative zero */
    float *d = (float *)dev_upload(x, 4 * (n + offset)), *ds = (float *)dev_poisoned(4 * n_blocks);
    uint8_t *dq = (uint8_t *)dev_poisoned(n);
    di_cuda_act_quant_e4m3(d + offset, NULL, 0, n_blocks, dq, ds, 0);
    dev_download(codes, dq, n);
    dev_download(gs, ds, 4 * n_blocks);
    for (int64_t i = 0; i < n; i++) got[i] = di_e4m3_to_f32(codes[i]);
    char shape[80];
    snprintf(shape, sizeof shape, "blocks=%lld offset=%d scale=%g", (long long)n_blocks, offset, scale);
    compare("act_quant_e4m3 codes", shape, got, ref, 1, n, CRIT_EXACT);
    compare("act_quant_e4m3 scales", shape, gs, rs, 1, n_blocks, CRIT_EXACT);
    /* the wgmma GEMM's operand: the values themselves as bf16 */
    uint16_t *h = (uint16_t *)malloc(2 * n), *dh = (uint16_t *)dev_poisoned(2 * n);
    di_cuda_act_quant_bf16(d + offset, NULL, 0, n_blocks, dh, 0);
    dev_download(h, dh, 2 * n);
    for (int64_t i = 0; i < n; i++) {
        const uint32_t bits = (uint32_t)h[i] << 16;
        memcpy(&got[i], &bits, 4);
        ref[i] *= rs[i / 32]; /* code value x power-of-two scale: exact */
    }
    compare("act_quant_bf16 values", shape, got, ref, 1, n, CRIT_EXACT);
    /* the same through a row list (the MoE's gather into expert order): rows of 2 blocks, listed in
     * reverse order, give the contiguous results' rows in reverse order, bit for bit */
    if (n_blocks % 2 == 0) {
        const int64_t R = n_blocks / 2;
        const float **rl = (const float **)malloc(sizeof(float *) * R);
        for (int64_t r = 0; r < R; r++) rl[r] = d + offset + (R - 1 - r) * 64;
        const float **drl = (const float **)dev_upload(rl, sizeof(float *) * R);
        uint8_t *dq2 = (uint8_t *)dev_poisoned(n), *codes2 = (uint8_t *)malloc(n);
        float *ds2 = (float *)dev_poisoned(4 * n_blocks), *gs2 = (float *)malloc(4 * n_blocks);
        uint16_t *dh2 = (uint16_t *)dev_poisoned(2 * n), *h2 = (uint16_t *)malloc(2 * n);
        di_cuda_act_quant_e4m3(NULL, drl, 2, n_blocks, dq2, ds2, 0);
        di_cuda_act_quant_bf16(NULL, drl, 2, n_blocks, dh2, 0);
        dev_download(codes2, dq2, n);
        dev_download(gs2, ds2, 4 * n_blocks);
        dev_download(h2, dh2, 2 * n);
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) {
            const int64_t j = (R - 1 - i / 64) * 64 + i % 64; /* the same value's place in the first results */
            bad += codes2[i] != codes[j] || h2[i] != h[j];
        }
        for (int64_t b = 0; b < n_blocks; b++) bad += memcmp(&gs2[b], &gs[(R - 1 - b / 2) * 2 + b % 2], 4) != 0;
        printf("%s  %-20s %s  rows through a list: %lld of %lld codes, values and scales differ\n",
               bad ? "FAIL" : "PASS", "act_quant rows", shape, (long long)bad, (long long)(2 * n + n_blocks));
        if (bad) g_fail++;
        else g_pass++;
        cudaFree((void *)drl), cudaFree(dq2), cudaFree(ds2), cudaFree(dh2);
        free(rl), free(codes2), free(gs2), free(h2);
    }
    cudaFree(d), cudaFree(ds), cudaFree(dq), cudaFree(dh);
    free(x), free(ref), free(got), free(rs), free(gs), free(codes), free(h);
}

/* the GEMMs' bf16 conversion (di_cuda_f32_to_bf16) against the CPU's rounding, bit for bit:
 * `offset` floats into the buffers (1: neither 16- nor 8-byte aligned: one value a thread), n % 4
 * != 0 (the tail after the vectors); ties, subnormals, infinities and overflow to infinity */
static void test_f32_to_bf16(int64_t n, int offset) {
    float *x = (float *)malloc(4 * (n + offset)), *ref = (float *)malloc(4 * n), *got = (float *)malloc(4 * n);
    uint16_t *h = (uint16_t *)malloc(2 * (n + offset));
    fill_wide(x + offset, n, 1.0f);
    const float special[] = {0x1.0080p0f, 0x1.0180p0f, 0x1p-130f, -0x1.fffffep127f, INFINITY, -INFINITY, -0.0f};
    for (int64_t i = 0; i < n && i < 7; i++) x[offset + i * (n / 7)] = special[i];
    float *d = (float *)dev_upload(x, 4 * (n + offset));
    uint16_t *dh = (uint16_t *)dev_poisoned(2 * (n + offset));
    di_cuda_f32_to_bf16(d + offset, n, dh + offset, 0);
    dev_download(h, dh, 2 * (n + offset));
    for (int64_t i = 0; i < n; i++) {
        const uint32_t bits = (uint32_t)h[offset + i] << 16;
        memcpy(&got[i], &bits, 4);
        ref[i] = di_bf16_round(x[offset + i]);
    }
    char shape[48];
    snprintf(shape, sizeof shape, "n=%lld offset=%d", (long long)n, offset);
    compare("f32_to_bf16", shape, got, ref, 1, n, CRIT_EXACT);
    cudaFree(d), cudaFree(dh);
    free(x), free(ref), free(got), free(h);
}

static void test_act_quant(int64_t n, int block, float scale) {
    float *x = (float *)malloc(4 * n), *ref = (float *)malloc(4 * n), *got = (float *)malloc(4 * n);
    fill_wide(x, n, scale);
    memcpy(ref, x, 4 * n);
    di_cpu_act_quant_inplace(ref, n, block);
    float *d = (float *)dev_upload(x, 4 * n);
    di_cuda_act_quant_inplace(d, n, block, 0);
    dev_download(got, d, 4 * n);
    char shape[64];
    snprintf(shape, sizeof shape, "n=%lld block=%d scale=%g", (long long)n, block, scale);
    compare("act_quant", shape, got, ref, 1, n, CRIT_EXACT);
    cudaFree(d);
    free(x), free(ref), free(got);
}

static void test_fp4_quant(int64_t n, int block, di_fp4_scale kind, float scale) {
    float *x = (float *)malloc(4 * n), *ref = (float *)malloc(4 * n), *got = (float *)malloc(4 * n);
    fill_wide(x, n, scale);
    memcpy(ref, x, 4 * n);
    di_cpu_fp4_quant_inplace(ref, n, block, kind);
    float *d = (float *)dev_upload(x, 4 * n);
    di_cuda_fp4_quant_inplace(d, n, block, kind, 0);
    dev_download(got, d, 4 * n);
    char shape[64];
    snprintf(shape, sizeof shape, "n=%lld block=%d %s scale=%g", (long long)n, block,
             kind == DI_FP4_SCALE_UE8M0 ? "ue8m0" : "e4m3", scale);
    compare("fp4_quant", shape, got, ref, 1, n, CRIT_EXACT);
    cudaFree(d);
    free(x), free(ref), free(got);
}

/* ---- linear layers ---- */
static uint8_t rnd_e4m3(void) {
    for (;;) {
        uint8_t b = (uint8_t)rnd_u64();
        if ((b & 0x7f) != 0x7f) return b;
    }
}

/* odd_scales: every 7th scale byte one the wgmma kernel's plain dequantisation does not take (its
 * CTAs holding one take the general one): FP4 0 or 1 (2^-127, 2^-126), FP8 5 or 143 (2^-122, 2^16) */
static void test_linear(const char *name, di_dtype dt, di_linear_mode mode, int64_t m, int64_t K, int64_t N,
                        bool odd_scales = false) {
    di_weight w = {dt, NULL, NULL, N, K};
    size_t wbytes = 0, sbytes = 0;
    uint8_t *wd = NULL, *ws = NULL;
    if (dt == DI_DT_F8_E4M3) {
        wbytes = (size_t)(N * K);
        sbytes = (size_t)(((N + 31) / 32) * ((K + 31) / 32));
    } else if (dt == DI_DT_I8) {
        wbytes = (size_t)(N * K / 2);
        sbytes = (size_t)(N * (K / 32));
    } else if (dt == DI_DT_BF16) {
        wbytes = (size_t)(N * K * 2);
    } else {
        wbytes = (size_t)(N * K * 4);
    }
    wd = (uint8_t *)malloc(wbytes);
    if (dt == DI_DT_F8_E4M3) {
        for (size_t i = 0; i < wbytes; i++) wd[i] = rnd_e4m3();
    } else if (dt == DI_DT_I8) {
        for (size_t i = 0; i < wbytes; i++) wd[i] = (uint8_t)rnd_u64();
    } else if (dt == DI_DT_BF16) {
        uint16_t *p = (uint16_t *)wd;
        for (int64_t i = 0; i < N * K; i++) p[i] = di_f32_to_bf16(rnd_normalish() * 0.05f);
    } else {
        float *p = (float *)wd;
        for (int64_t i = 0; i < N * K; i++) p[i] = rnd_normalish() * 0.05f;
    }
    if (sbytes) {
        ws = (uint8_t *)malloc(sbytes);
        for (size_t i = 0; i < sbytes; i++) ws[i] = (uint8_t)(!odd_scales || i % 7 != 3 ? 118 + rnd_u64() % 12 : dt == DI_DT_I8 ? i % 2 : i % 2 ? 5 : 143);
    }
    float *x = (float *)malloc(4 * m * K), *ref = (float *)malloc(4 * m * N), *got = (float *)malloc(4 * m * N);
    fill_wide(x, m * K, 1.0f);
    w.data = wd;
    w.scale = ws;
    di_cpu_linear(&w, x, m, ref, mode);

    di_weight wdev = w;
    wdev.data = dev_upload(wd, wbytes);
    wdev.scale = sbytes ? (const uint8_t *)dev_upload(ws, sbytes) : NULL;
    float *dx = (float *)dev_upload(x, 4 * m * K), *dy = (float *)dev_poisoned(4 * m * N);
    char shape[96];
    snprintf(shape, sizeof shape, "M=%lld K=%lld N=%lld", (long long)m, (long long)K, (long long)N);
    float *bound = (float *)malloc(4 * m * N);
    if (mode == DI_LIN_QUANT) {
        /* the exact CUDA-core kernel: the CPU's bits */
        g_ctx.exact = true;
        di_cuda_linear(&g_ctx, &wdev, dx, m, dy, mode);
        g_ctx.exact = false;
        dev_download(got, dy, 4 * m * N);
        char nm[64];
        snprintf(nm, sizeof nm, "%s exact", name);
        compare(nm, shape, got, ref, m, N, CRIT_EXACT);
        /* the tensor-core kernel: within quant_linear_bound (each 32-product block sum from a tensor
         * core keeping ~14 bits, act_quant's 1.07, one bf16 ulp) */
        for (int64_t r = 0; r < m; r++)
            for (int64_t n = 0; n < N; n++)
                bound[r * N + n] = (float)quant_linear_bound(dt == DI_DT_I8, wd, ws, K, x + r * K, n, ref[r * N + n]);
        di_cuda_linear(&g_ctx, &wdev, dx, m, dy, mode);
        dev_download(got, dy, 4 * m * N);
        snprintf(nm, sizeof nm, "%s mma", name);
        g_bound = bound;
        compare(nm, shape, got, ref, m, N, CRIT_BOUND);
        /* the wgmma kernel (DEEPINFER_GPU_WGMMA) where it applies: the same bound */
        g_ctx.wgmma = true;
        if (di_cuda_wgmma_taken(&g_ctx, dt == DI_DT_I8, K, m)) {
            di_cuda_linear(&g_ctx, &wdev, dx, m, dy, mode);
            dev_download(got, dy, 4 * m * N);
            snprintf(nm, sizeof nm, "%s wgmma", name);
            compare(nm, shape, got, ref, m, N, CRIT_BOUND);
            /* FP8 there past DI_CUDA_BLAS_MIN_ROWS (here from one row): cuBLAS's BF16 GEMM on the
             * dequantised weight, the same exact products summed in fp32 -- the same bound */
            if (dt == DI_DT_F8_E4M3 && di_cuda_linear_act_form(&g_ctx, &wdev, false, 1, m, m) == DI_ACT_FORM_QBF16) {
                /* (where the call takes the wgmma kernel, not the decode twin) */
                /* the call with DI_CUDA_BLAS_MIN_ROWS at blas_rows (0: off) and the scratch capped at
                 * `cap` (0: none), checked against `want` by `crit` where it took cuBLAS `taken` times */
                auto blas_case = [&](const char *what, int64_t blas_rows, size_t cap, int taken, const float *want,
                                     enum crit crit) {
                    const int64_t before = g_ctx.counts.blas;
                    g_ctx.blas_rows = blas_rows;
                    g_ctx.scratch_cap = cap;
                    CK(cudaMemset(dy, 0xff, 4 * m * N));
                    di_cuda_linear(&g_ctx, &wdev, dx, m, dy, mode);
                    g_ctx.blas_rows = 0;
                    g_ctx.scratch_cap = 0;
                    dev_download(got, dy, 4 * m * N);
                    snprintf(nm, sizeof nm, "%s %s", name, what);
                    if (g_ctx.counts.blas != before + taken) {
                        printf("FAIL  %s: %s took cuBLAS %lld times, not %d\n", nm, shape,
                               (long long)(g_ctx.counts.blas - before), taken);
                        g_fail++;
                    } else {
                        compare(nm, shape, got, want, m, N, crit);
                    }
                };
                blas_case("blas", 1, 0, 1, ref, CRIT_BOUND);
                float *bits = (float *)malloc(4 * m * N), *wg_bits = (float *)malloc(4 * m * N);
                memcpy(bits, got, 4 * m * N); /* the per-call path's output */
                di_cuda_linear(&g_ctx, &wdev, dx, m, dy, mode);
                dev_download(wg_bits, dy, 4 * m * N);
                /* no room for cuBLAS's scratch (di_cuda_scratch_try refusing): the wgmma kernel's bits */
                blas_case("blas fallback", 1, 1, 0, wg_bits, CRIT_EXACT);
                /* over a kept bf16 copy of the weight (DEEPINFER_GPU_DENSE_BF16; the per-call path off):
                 * from dense16_rows rows the same dequantised values and GEMM -- the per-call path's
                 * bits -- below them the wgmma kernel */
                di_cuda_dense16 kept = {};
                if (!di_cuda_dense16_add(&kept, (const uint8_t *)wdev.data, wdev.scale, N, K, g_ctx.stream)) {
                    printf("FAIL  %s blas kept: %s: no copy made\n", name, shape);
                    g_fail++;
                } else {
                    const int64_t kept_before = g_ctx.counts.blas_kept;
                    g_ctx.dense16 = &kept;
                    g_ctx.dense16_rows = 1;
                    blas_case("blas kept", 0, 0, 1, bits, CRIT_EXACT);
                    g_ctx.dense16_rows = m + 1;
                    blas_case("blas kept, below its rows", 0, 0, 0, wg_bits, CRIT_EXACT);
                    g_ctx.dense16 = NULL;
                    g_ctx.dense16_rows = 0;
                    if (g_ctx.counts.blas_kept != kept_before + 1) {
                        printf("FAIL  %s blas kept: %s took the copy %lld times, not once\n", name, shape,
                               (long long)(g_ctx.counts.blas_kept - kept_before));
                        g_fail++;
                    }
                }
                di_cuda_dense16_free(&kept);
                free(bits);
                free(wg_bits);
            }
        }
        g_ctx.wgmma = false;
    } else {
        di_cuda_linear(&g_ctx, &wdev, dx, m, dy, mode);
        dev_download(got, dy, 4 * m * N);
        /* cuBLAS sums in fp32 in its own order: |error| <= (K + 1) u sum_k |x_k w_k| (u = 2^-24;
         * BF16 products are exact, F32 ones round), plus the final bf16 rounding in BF16 mode, where
         * two roundings of nearby sums can land one bf16 ulp apart */
        for (int64_t r = 0; r < m; r++)
            for (int64_t n = 0; n < N; n++) {
                double sabs = 0.0;
                for (int64_t k = 0; k < K; k++) {
                    const double wv = dt == DI_DT_BF16 ? di_bf16_load(wd + 2 * (n * K + k)) : di_f32_load(wd + 4 * (n * K + k));
                    sabs += fabs(x[r * K + k] * wv);
                }
                double b = (double)(K + 1) * 0x1p-24 * sabs;
                if (mode == DI_LIN_BF16) b = b * 1.01 + ldexp(1.0, ilogb(ref[r * N + n] == 0.0f ? 1e-30f : ref[r * N + n]) - 7);
                bound[r * N + n] = (float)b;
            }
        g_bound = bound;
        compare(name, shape, got, ref, m, N, CRIT_BOUND);
    }
    free(bound);
    cudaFree((void *)wdev.data);
    if (wdev.scale) cudaFree((void *)wdev.scale);
    cudaFree(dx), cudaFree(dy);
    free(wd), free(ws), free(x), free(ref), free(got);
}

/* A row's output must not depend on the other rows of the batch: row r of an M-row call equals
 * the same row computed alone (bit for bit for the quantised linears, whose reductions are fixed;
 * the cuBLAS ones are reported, not required: cuBLAS may pick another algorithm for another M). */
static void test_linear_batch_invariance(const char *name, di_dtype dt, di_linear_mode mode, int64_t m,
                                         int64_t K, int64_t N) {
    size_t wbytes = dt == DI_DT_F8_E4M3 ? (size_t)(N * K) : dt == DI_DT_I8 ? (size_t)(N * K / 2) : (size_t)(N * K * 2);
    size_t sbytes = dt == DI_DT_F8_E4M3 ? (size_t)(((N + 31) / 32) * (K / 32)) : dt == DI_DT_I8 ? (size_t)(N * K / 32) : 0;
    uint8_t *wd = (uint8_t *)malloc(wbytes), *ws = sbytes ? (uint8_t *)malloc(sbytes) : NULL;
    for (size_t i = 0; i < wbytes; i++) wd[i] = dt == DI_DT_F8_E4M3 ? rnd_e4m3() : (uint8_t)rnd_u64();
    if (dt == DI_DT_BF16)
        for (int64_t i = 0; i < N * K; i++) ((uint16_t *)wd)[i] = di_f32_to_bf16(rnd_normalish() * 0.05f);
    for (size_t i = 0; i < sbytes; i++) ws[i] = (uint8_t)(118 + rnd_u64() % 12);
    float *x = (float *)malloc(4 * m * K), *all = (float *)malloc(4 * m * N), *one = (float *)malloc(4 * m * N);
    fill_wide(x, m * K, 1.0f);
    di_weight w = {dt, dev_upload(wd, wbytes), sbytes ? (const uint8_t *)dev_upload(ws, sbytes) : NULL, N, K};
    float *dx = (float *)dev_upload(x, 4 * m * K), *dy = (float *)dev_poisoned(4 * m * N);
    di_cuda_linear(&g_ctx, &w, dx, m, dy, mode);
    dev_download(all, dy, 4 * m * N);
    for (int64_t r = 0; r < m; r++) di_cuda_linear(&g_ctx, &w, dx + r * K, 1, dy + r * N, mode);
    dev_download(one, dy, 4 * m * N);
    int64_t ndiff = 0;
    for (int64_t i = 0; i < m * N; i++) ndiff += memcmp(&all[i], &one[i], 4) != 0;
    const bool required = mode == DI_LIN_QUANT;
    printf("%s  %-22s M=%lld K=%lld N=%lld (rows alone vs in batch) differing %lld / %lld  [%s]\n",
           ndiff == 0 ? "PASS" : (required ? "FAIL" : "INFO"), name, (long long)m, (long long)K, (long long)N,
           (long long)ndiff, (long long)(m * N), required ? "exact" : "reported only");
    if (ndiff && required) g_fail++;
    else g_pass++;
    cudaFree((void *)w.data);
    if (w.scale) cudaFree((void *)w.scale);
    cudaFree(dx), cudaFree(dy);
    free(wd), free(ws), free(x), free(all), free(one);
}

/* di_dev_expf against this machine's expf over 2^24 inputs spread over the finite range (the
 * attention and Sinkhorn parity rest on it; tools/cuda/check_expf.c checks the same on the host) */
__global__ void expf_twin_kernel(const float *x, float *y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = di_dev_expf(x[i]);
}
static void test_expf_twin(void) {
    const int64_t n = 1 << 24;
    float *x = (float *)malloc(4 * n), *ref = (float *)malloc(4 * n), *got = (float *)malloc(4 * n);
    for (int64_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)rnd_u64();
        float v;
        memcpy(&v, &u, 4);
        if (!isfinite(v) || fabsf(v) > 120.0f) v = (rnd_unit() - 0.5f) * 220.0f;
        x[i] = v;
        ref[i] = expf(v);
    }
    float *dx = (float *)dev_upload(x, 4 * n), *dy = (float *)dev_poisoned(4 * n);
    expf_twin_kernel<<<(unsigned)((n + 255) / 256), 256>>>(dx, dy, n);
    CK(cudaGetLastError());
    dev_download(got, dy, 4 * n);
    compare("expf (device twin)", "2^24 random inputs", got, ref, 1, n, CRIT_EXACT);
    cudaFree(dx), cudaFree(dy);
    free(x), free(ref), free(got);
}

/* a producer's act_quant of its output y [rows, d] (device) against act_quant_e4m3_kernel's on y:
 * the same codes and scales, bit for bit */
static void compare_act_q(const char *op, const char *shape, const float *dy, const di_cuda_act_forms *q,
                          int64_t rows, int64_t d) {
    const int64_t n = rows * d, nb = n / 32;
    uint8_t *rq = (uint8_t *)dev_poisoned(n), *ca = (uint8_t *)malloc(n), *cb = (uint8_t *)malloc(n);
    float *rs = (float *)dev_poisoned(4 * nb), *a = (float *)malloc(4 * n), *b = (float *)malloc(4 * n);
    di_cuda_act_quant_e4m3(dy, NULL, 0, nb, rq, rs, 0);
    dev_download(ca, rq, n);
    dev_download(cb, q->q, n);
    for (int64_t i = 0; i < n; i++) a[i] = ca[i], b[i] = cb[i]; /* the code bytes as values */
    char name[96];
    snprintf(name, sizeof name, "%s codes", op);
    compare(name, shape, b, a, rows, d, CRIT_EXACT);
    dev_download(a, rs, 4 * nb);
    dev_download(b, q->scale, 4 * nb);
    snprintf(name, sizeof name, "%s scales", op);
    compare(name, shape, b, a, rows, d / 32, CRIT_EXACT);
    cudaFree(rq), cudaFree(rs);
    free(ca), free(cb), free(a), free(b);
}

/* ---- RMSNorm, RoPE ---- */
static void test_rmsnorm(int64_t m, int64_t d) {
    float *x = (float *)malloc(4 * m * d), *ref = (float *)malloc(4 * m * d), *got = (float *)malloc(4 * m * d);
    uint16_t *w = (uint16_t *)malloc(2 * d);
    fill_wide(x, m * d, 2.0f);
    for (int64_t i = 0; i < d; i++) w[i] = di_f32_to_bf16(0.5f + rnd_unit());
    di_cpu_rmsnorm(x, w, m, d, 1e-20f, ref);
    float *dx = (float *)dev_upload(x, 4 * m * d), *dy = (float *)dev_poisoned(4 * m * d);
    uint16_t *dw = (uint16_t *)dev_upload(w, 2 * d);
    di_cuda_rmsnorm(dx, dw, m, d, 1e-20f, dy, 0);
    dev_download(got, dy, 4 * m * d);
    char shape[64];
    snprintf(shape, sizeof shape, "M=%lld D=%lld", (long long)m, (long long)d);
    compare("rmsnorm", shape, got, ref, m, d, CRIT_BF16_ULP);
    if (di_cuda_rmsnorm_q_supported(d)) { /* with its act_quant: the same y and act_quant_e4m3's codes of it */
        di_cuda_act_forms q = {(uint8_t *)dev_poisoned(m * d), (float *)dev_poisoned(4 * m * d / 32), NULL, NULL, NULL};
        float *dy2 = (float *)dev_poisoned(4 * m * d), *got2 = (float *)malloc(4 * m * d);
        di_cuda_rmsnorm_q(dx, dw, m, d, 1e-20f, dy2, &q, 0);
        dev_download(got2, dy2, 4 * m * d);
        compare("rmsnorm_q.y", shape, got2, got, m, d, CRIT_EXACT);
        compare_act_q("rmsnorm_q", shape, dy, &q, m, d);
        cudaFree(q.q), cudaFree(q.scale), cudaFree(dy2);
        free(got2);
    }
    if (di_cuda_rmsnorm_forms_supported(d)) { /* with y's bf16 bits and act_quant values as bf16: the same y,
                                               * and the bits the conversion kernels make of it */
        const int64_t n = m * d;
        uint16_t *db = (uint16_t *)dev_poisoned(2 * n), *dqb = (uint16_t *)dev_poisoned(2 * n);
        uint16_t *rb = (uint16_t *)dev_poisoned(2 * n), *rqb = (uint16_t *)dev_poisoned(2 * n);
        float *dy2 = (float *)dev_poisoned(4 * n), *got2 = (float *)malloc(4 * n), *want = (float *)malloc(4 * n);
        di_cuda_rmsnorm_forms(dx, dw, m, d, 1e-20f, dy2, db, dqb, 0);
        dev_download(got2, dy2, 4 * n);
        compare("rmsnorm_forms.y", shape, got2, got, m, d, CRIT_EXACT);
        di_cuda_f32_to_bf16(dy2, n, rb, 0);
        di_cuda_act_quant_bf16(dy2, NULL, d / 32, n / 32, rqb, 0);
        const uint16_t *const pairs[2][2] = {{db, rb}, {dqb, rqb}};
        for (int f = 0; f < 2; f++) { /* the form's bits as floats against the conversion's */
            dev_download_bf16(got2, pairs[f][0], n);
            dev_download_bf16(want, pairs[f][1], n);
            compare(f ? "rmsnorm_forms.qbf16" : "rmsnorm_forms.bf16", shape, got2, want, m, d, CRIT_EXACT);
        }
        di_cuda_rmsnorm_forms(dx, dw, m, d, 1e-20f, dy2, NULL, dqb, 0); /* one form alone */
        dev_download_bf16(got2, dqb, n);
        compare("rmsnorm_forms.qbf16 alone", shape, got2, want, m, d, CRIT_EXACT);
        cudaFree(db), cudaFree(dqb), cudaFree(rb), cudaFree(rqb), cudaFree(dy2);
        free(got2), free(want);
    }
    cudaFree(dx), cudaFree(dy), cudaFree(dw);
    free(x), free(ref), free(got), free(w);
}

static void test_rope(int64_t rows, int64_t n_vec, int64_t stride, int64_t offset, int rot, bool inverse) {
    const int64_t n = rows * n_vec * stride, half = rot / 2;
    float *x = (float *)malloc(4 * n), *ref = (float *)malloc(4 * n), *got = (float *)malloc(4 * n);
    float *cs = (float *)malloc(4 * rows * half), *sn = (float *)malloc(4 * rows * half);
    fill_wide(x, n, 1.0f);
    for (int64_t i = 0; i < rows * half; i++) {
        float th = rnd_unit() * 6.2831853f;
        cs[i] = cosf(th);
        sn[i] = sinf(th);
    }
    memcpy(ref, x, 4 * n);
    for (int64_t r = 0; r < rows; r++)
        di_cpu_rope(ref + r * n_vec * stride, n_vec, stride, offset, rot, cs + r * half, sn + r * half, inverse);
    float *dx = (float *)dev_upload(x, 4 * n), *dc = (float *)dev_upload(cs, 4 * rows * half),
          *ds = (float *)dev_upload(sn, 4 * rows * half);
    di_cuda_rope(dx, rows, n_vec, stride, offset, rot, dc, ds, inverse, 0);
    dev_download(got, dx, 4 * n);
    char shape[96];
    snprintf(shape, sizeof shape, "rows=%lld vec=%lldx%lld rot=%d@%lld%s", (long long)rows, (long long)n_vec,
             (long long)stride, rot, (long long)offset, inverse ? " inv" : "");
    compare("rope", shape, got, ref, rows, n_vec * stride, CRIT_EXACT);
    cudaFree(dx), cudaFree(dc), cudaFree(ds);
    free(x), free(ref), free(got), free(cs), free(sn);
}

/* the attention kv's norm, rotation and act_quant in one launch against the three kernels (whose
 * parity with the CPU the tests above show): the same bits */
static void test_rmsnorm_rope_quant(int64_t m, int64_t d, int rot) {
    const int64_t half = rot / 2, off = d - rot;
    float *x = (float *)malloc(4 * m * d), *a = (float *)malloc(4 * m * d), *b = (float *)malloc(4 * m * d);
    float *cs = (float *)malloc(4 * m * half), *sn = (float *)malloc(4 * m * half);
    uint16_t *w = (uint16_t *)malloc(2 * d);
    fill_wide(x, m * d, 2.0f);
    for (int64_t i = 0; i < d; i++) w[i] = di_f32_to_bf16(0.5f + rnd_unit());
    for (int64_t i = 0; i < m * half; i++) {
        const float th = rnd_unit() * 6.2831853f;
        cs[i] = cosf(th), sn[i] = sinf(th);
    }
    float *dx = (float *)dev_upload(x, 4 * m * d), *dc = (float *)dev_upload(cs, 4 * m * half),
          *ds = (float *)dev_upload(sn, 4 * m * half), *dy = (float *)dev_poisoned(4 * m * d),
          *dy2 = (float *)dev_poisoned(4 * m * d);
    uint16_t *dw = (uint16_t *)dev_upload(w, 2 * d);
    di_cuda_rmsnorm(dx, dw, m, d, 1e-20f, dy, 0);
    di_cuda_rope(dy, m, 1, d, off, rot, dc, ds, false, 0);
    di_cuda_act_quant_inplace(dy, m * d, 32, 0);
    di_cuda_rmsnorm_rope_quant(dx, dw, m, d, 1e-20f, off, rot, dc, ds, dy2, 0);
    dev_download(a, dy, 4 * m * d);
    dev_download(b, dy2, 4 * m * d);
    char shape[64];
    snprintf(shape, sizeof shape, "M=%lld D=%lld rot=%d", (long long)m, (long long)d, rot);
    compare("rmsnorm_rope_quant", shape, b, a, m, d, CRIT_EXACT);
    cudaFree(dx), cudaFree(dc), cudaFree(ds), cudaFree(dy), cudaFree(dy2), cudaFree(dw);
    free(x), free(a), free(b), free(cs), free(sn), free(w);
}

/* the attention's q norm (with its codes) and kv norm + rope + quant in one launch against the two
 * calls: the same bits in all four outputs */
static void test_rmsnorm_q_kv(int64_t m, int64_t dq, int64_t dkv, int rot) {
    const int64_t half = rot / 2, off = dkv - rot;
    float *xq = (float *)malloc(4 * m * dq), *xkv = (float *)malloc(4 * m * dkv);
    float *cs = (float *)malloc(4 * m * half), *sn = (float *)malloc(4 * m * half);
    uint16_t *wq = (uint16_t *)malloc(2 * dq), *wkv = (uint16_t *)malloc(2 * dkv);
    fill_wide(xq, m * dq, 2.0f);
    fill_wide(xkv, m * dkv, 2.0f);
    for (int64_t i = 0; i < dq; i++) wq[i] = di_f32_to_bf16(0.5f + rnd_unit());
    for (int64_t i = 0; i < dkv; i++) wkv[i] = di_f32_to_bf16(0.5f + rnd_unit());
    for (int64_t i = 0; i < m * half; i++) {
        const float th = rnd_unit() * 6.2831853f;
        cs[i] = cosf(th), sn[i] = sinf(th);
    }
    float *dxq = (float *)dev_upload(xq, 4 * m * dq), *dxkv = (float *)dev_upload(xkv, 4 * m * dkv);
    float *dc = (float *)dev_upload(cs, 4 * m * half), *ds = (float *)dev_upload(sn, 4 * m * half);
    uint16_t *dwq = (uint16_t *)dev_upload(wq, 2 * dq), *dwkv = (uint16_t *)dev_upload(wkv, 2 * dkv);
    float *y[2][2]; /* [separate, one launch][q, kv] */
    di_cuda_act_forms f[2];
    for (int v = 0; v < 2; v++) {
        y[v][0] = (float *)dev_poisoned(4 * m * dq), y[v][1] = (float *)dev_poisoned(4 * m * dkv);
        f[v] = di_cuda_act_forms{(uint8_t *)dev_poisoned(m * dq), (float *)dev_poisoned(4 * m * dq / 32), NULL, NULL, NULL};
    }
    di_cuda_rmsnorm_q(dxq, dwq, m, dq, 1e-20f, y[0][0], &f[0], 0);
    di_cuda_rmsnorm_rope_quant(dxkv, dwkv, m, dkv, 1e-20f, off, rot, dc, ds, y[0][1], 0);
    di_cuda_rmsnorm_q_kv(m, 1e-20f, dxq, dwq, dq, y[1][0], &f[1], dxkv, dwkv, dkv, off, rot, dc, ds, y[1][1], 0);
    char shape[80];
    snprintf(shape, sizeof shape, "M=%lld Dq=%lld Dkv=%lld rot=%d", (long long)m, (long long)dq, (long long)dkv, rot);
    float *a = (float *)malloc(4 * m * (dq > dkv ? dq : dkv)), *b = (float *)malloc(4 * m * (dq > dkv ? dq : dkv));
    dev_download(a, y[0][0], 4 * m * dq);
    dev_download(b, y[1][0], 4 * m * dq);
    compare("rmsnorm_q_kv q", shape, b, a, m, dq, CRIT_EXACT);
    compare_act_q("rmsnorm_q_kv q", shape, y[0][0], &f[1], m, dq);
    dev_download(a, y[0][1], 4 * m * dkv);
    dev_download(b, y[1][1], 4 * m * dkv);
    compare("rmsnorm_q_kv kv", shape, b, a, m, dkv, CRIT_EXACT);
    for (int v = 0; v < 2; v++) cudaFree(y[v][0]), cudaFree(y[v][1]), cudaFree(f[v].q), cudaFree(f[v].scale);
    cudaFree(dxq), cudaFree(dxkv), cudaFree(dc), cudaFree(ds), cudaFree(dwq), cudaFree(dwkv);
    free(xq), free(xkv), free(cs), free(sn), free(wq), free(wkv), free(a), free(b);
}

/* ---- sparse attention ---- */
/* Per-element bound on |tensor-core attention - CPU attention| for one (row, head): o = sum_j
 * bf16(p_j) v_j / den. The two differ in summation order only:
 *   - each logit's fp32 dot product: at most dim 2^-24 (CPU, sequential) + dim 2^-23 (tensor core,
 *     which may truncate) times scale sum_i |q_i k_i|; call the largest over the entries delta.
 *     The running max moves by at most delta too, so p_j moves by a factor within e^(+-2 delta);
 *   - bf16(p_j) can then round the other way: one bf16 ulp, at most 2^-7 of p_j;
 *   - den (positive terms) and the PV sums (64 a run, then a rescale per run): at most
 *     (64 + runs + 2) roundings of 2^-23 each, of the sum of |terms|.
 *   - where p_j underflows (its exact value below 2^-126), relative bounds fail: bf16(p_j) then
 *     has steps of 2^-133, and the two sides (the GPU's ranks scale their p by exp(m_c - M) at
 *     the merge instead) may differ by up to two of them; den >= 1 (the entry at the max has p = 1).
 * So |diff_d| <= (2^-7 + 4 delta + c)(S_d + |o_d|) (1.01, for bf16(p) against exact p) plus one
 * bf16 ulp of o_d for the final rounding plus n_live 2^-132 max_j |v_jd|, where
 * S_d = sum_j w_j |v_jd| with the exact softmax weights w_j (sink included) and
 * c = (66 + runs) 2^-23. */
static void attn_mma_bound(const float *q, int H, int dim, const float *const *rows, int n_idx, const float *sink,
                           float scale, const float *o, float *bound) {
    const int n_runs = (n_idx + 63) / 64;
    const double c = (66.0 + n_runs) * 0x1p-23;
    double *lg = (double *)malloc(sizeof(double) * (n_idx > 0 ? n_idx : 1));
    for (int h = 0; h < H; h++) {
        const float *qh = q + (size_t)h * dim;
        double mx = sink[h], delta = 0.0;
        for (int j = 0; j < n_idx; j++) {
            if (!rows[j]) continue;
            double dot = 0.0, mag = 0.0;
            for (int i = 0; i < dim; i++) {
                dot += (double)qh[i] * rows[j][i];
                mag += fabs((double)qh[i] * rows[j][i]);
            }
            lg[j] = dot * scale;
            mx = fmax(mx, lg[j]);
            delta = fmax(delta, (dim * 0x1p-24 + dim * 0x1p-23) * scale * mag);
        }
        double z = exp((double)sink[h] - mx);
        for (int j = 0; j < n_idx; j++)
            if (rows[j]) z += exp(lg[j] - mx);
        const double rel = (0x1p-7 + 4.0 * delta + c) * 1.01;
        for (int d = 0; d < dim; d++) {
            double sd = 0.0, vmax = 0.0;
            int n_live = 0;
            for (int j = 0; j < n_idx; j++)
                if (rows[j]) {
                    sd += exp(lg[j] - mx) / z * fabs((double)rows[j][d]);
                    vmax = fmax(vmax, fabs((double)rows[j][d]));
                    n_live++;
                }
            const double od = fabs((double)o[(size_t)h * dim + d]);
            bound[(size_t)h * dim + d] = (float)(rel * (sd + od) + 0x1p-7 * od + n_live * 0x1p-132 * vmax);
        }
    }
    free(lg);
}

/* null_run >= 0 blanks that run of 64 entries in every row; slice_rows > 0 forces the workspace
 * slicing (di_cuda_sparse_attn_sliced); misaligned puts the device KV rows one float off 16-byte
 * alignment (the kernels' scalar staging path); records gives the device lists' entries past a
 * row's first quarter as compressed KV records (forward/kv_record.h, pointers marked
 * DI_KV_REF_RECORD, as the list builder gives pool entries after the window's rows), the pool's
 * values being the records' (so the kernels must decode them to the CPU's bits); the last row of
 * several is all NULL */
static void test_attention(int64_t nq, int H, int dim, int n_idx, int pool, int pct_empty, int null_run = -1,
                           int64_t slice_rows = 0, bool misaligned = false, bool records = false) {
    float *q = (float *)malloc(4 * nq * H * dim), *kv = (float *)malloc(4 * (size_t)pool * dim);
    float *sink = (float *)malloc(4 * H), *ref = (float *)malloc(4 * nq * H * dim),
          *got = (float *)malloc(4 * nq * H * dim);
    fill_wide(q, nq * H * dim, 0.5f);
    fill_wide(kv, (int64_t)pool * dim, 0.5f);
    for (int h = 0; h < H; h++) sink[h] = rnd_normalish() * 2.0f;
    int *idx = (int *)malloc(sizeof(int) * nq * n_idx);
    for (int64_t i = 0; i < nq * n_idx; i++)
        idx[i] = (int)(rnd_u64() % 100) < pct_empty ? -1 : (int)(rnd_u64() % pool);
    if (nq > 1)
        for (int j = 0; j < n_idx; j++) idx[(nq - 1) * n_idx + j] = -1; /* a row with no entry */
    for (int64_t r = 0; r < nq && null_run >= 0; r++)
        for (int j = null_run * 64; j < n_idx && j < null_run * 64 + 64; j++) idx[r * n_idx + j] = -1;
    const int rb = records ? di_kv_record_bytes(dim) : 0;
    uint8_t *rec = (uint8_t *)malloc((size_t)pool * rb + 1), *drec = NULL;
    for (int p = 0; records && p < pool; p++) {
        di_kv_record_quant(kv + (size_t)p * dim, dim, rec + (size_t)p * rb);
        di_kv_record_values(rec + (size_t)p * rb, dim, kv + (size_t)p * dim);
    }
    if (records) drec = (uint8_t *)dev_upload(rec, (size_t)pool * rb);
    float *dkv_alloc = (float *)dev_poisoned(4 * ((size_t)pool * dim + 1)), *dkv = dkv_alloc + (misaligned ? 1 : 0);
    CK(cudaMemcpy(dkv, kv, 4 * (size_t)pool * dim, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize()); /* as dev_upload */
    const float **hrows = (const float **)malloc(sizeof(float *) * nq * n_idx);
    const float **drows_h = (const float **)malloc(sizeof(float *) * nq * n_idx);
    for (int64_t i = 0; i < nq * n_idx; i++) {
        hrows[i] = idx[i] < 0 ? NULL : kv + (size_t)idx[i] * dim;
        drows_h[i] = idx[i] < 0 ? NULL : dkv + (size_t)idx[i] * dim;
        /* a row's first quarter floats (the window's place), then records, as the model's lists: batches
         * of floats alone, of records alone, and where they meet */
        if (records && idx[i] >= 0 && i % n_idx >= n_idx / 4)
            drows_h[i] = (const float *)((uintptr_t)(drec + (size_t)idx[i] * rb) | DI_KV_REF_RECORD);
    }
    const float scale = 1.0f / sqrtf((float)dim);
    for (int64_t s = 0; s < nq; s++)
        di_cpu_sparse_attn(q + s * H * dim, H, dim, hrows + s * n_idx, n_idx, sink, scale, ref + s * H * dim);
    float *dq = (float *)dev_upload(q, 4 * nq * H * dim), *dsink = (float *)dev_upload(sink, 4 * H);
    float *dout = (float *)dev_poisoned(4 * nq * H * dim);
    const float *const *drows = (const float *const *)dev_upload(drows_h, sizeof(float *) * nq * n_idx);
    if (slice_rows > 0) { /* with a caller-provided workspace, as the forward pass passes one */
        float *ws = (float *)dev_poisoned(di_cuda_sparse_attn_ws_bytes(nq, H, dim, n_idx, slice_rows));
        di_cuda_sparse_attn_sliced(dq, nq, H, dim, drows, n_idx, dsink, scale, dout, slice_rows, ws, 0);
        cudaDeviceSynchronize();
        cudaFree(ws);
    } else {
        di_cuda_sparse_attn(dq, nq, H, dim, drows, n_idx, dsink, scale, dout, 0);
    }
    dev_download(got, dout, 4 * nq * H * dim);
    char shape[128];
    int n = snprintf(shape, sizeof shape, "q=%lld H=%d dim=%d idx=%d empty=%d%%", (long long)nq, H, dim, n_idx,
                     pct_empty);
    if (null_run >= 0) n += snprintf(shape + n, sizeof shape - n, " null-run=%d", null_run);
    if (slice_rows > 0) n += snprintf(shape + n, sizeof shape - n, " slices=%lld", (long long)slice_rows);
    if (misaligned) n += snprintf(shape + n, sizeof shape - n, " kv+4B");
    if (records) snprintf(shape + n, sizeof shape - n, " records");
    compare("sparse_attn", shape, got, ref, nq * H, dim, CRIT_EXACT);
    if (di_cuda_sparse_attn_mma_supported(H, dim)) {
        /* the tensor-core paths: mma.sync with 16 and with 32 heads a block, within the bound of
         * the CPU and the same bits either way (the block shape is picked from the grid size);
         * the wgmma kernel (64 heads a block) where it applies, within the same bound */
        float *bound = (float *)malloc(4 * nq * H * dim), *got16 = (float *)malloc(4 * nq * H * dim);
        for (int64_t r = 0; r < nq; r++)
            attn_mma_bound(q + r * H * dim, H, dim, hrows + r * n_idx, n_idx, sink, scale, ref + r * H * dim,
                           bound + r * H * dim);
        g_bound = bound;
        const int hpbs[] = {64, 32, 16}; /* 32 after 64: got ends with 32's bits, for 16v32 below */
        for (int hpb : hpbs) {
            if (hpb == 64 && !di_cuda_sparse_attn_wg_supported(H, dim)) continue;
            CK(cudaMemset(dout, 0xff, 4 * nq * H * dim));
            di_cuda_sparse_attn_mma(dq, nq, H, dim, drows, n_idx, dsink, scale, dout, NULL, hpb, DI_ATTN_SPLIT_AUTO, NULL, 0);
            dev_download(hpb == 16 ? got16 : got, dout, 4 * nq * H * dim);
            char mshape[160];
            snprintf(mshape, sizeof mshape, "%s hpb=%d", shape, hpb);
            compare(hpb == 64 ? "sparse_attn_wg" : "sparse_attn_mma", mshape, hpb == 16 ? got16 : got, ref, nq * H,
                    dim, CRIT_BOUND);
        }
        compare("sparse_attn_mma 16v32", shape, got, got16, nq * H, dim, CRIT_EXACT);
        /* batch-invariant mode's fixed split (other bits than a few rows' one-run split), and a CTA a row
         * (the wgmma kernel's choice from a row a multiprocessor) on both kernels */
        const struct { int hpb; di_attn_split split; const char *name; } other[] = {
            {16, DI_ATTN_SPLIT_FIXED, "sparse_attn_mma fixed split"},
            {16, DI_ATTN_SPLIT_WHOLE, "sparse_attn_mma a CTA a row"},
            {64, DI_ATTN_SPLIT_WHOLE, "sparse_attn_wg a CTA a row"}};
        for (const auto &o : other) {
            if (o.hpb == 64 && !di_cuda_sparse_attn_wg_supported(H, dim)) continue;
            CK(cudaMemset(dout, 0xff, 4 * nq * H * dim));
            di_cuda_sparse_attn_mma(dq, nq, H, dim, drows, n_idx, dsink, scale, dout, NULL, o.hpb, o.split, NULL, 0);
            dev_download(got16, dout, 4 * nq * H * dim);
            compare(o.name, shape, got16, ref, nq * H, dim, CRIT_BOUND);
        }
        /* RoPE folded into the kernels (di_attn_rope): the bits of rope(q), attention, inverse rope(out);
         * dq itself unchanged. The row without entries checks the rotated zeros' signs too. */
        const int rot = dim >= 128 ? 64 : 16, off = dim - rot;
        if (di_attn_rope_ok(dim, off, rot)) {
            float *cs = (float *)malloc(4 * nq * (rot / 2)), *sn = (float *)malloc(4 * nq * (rot / 2));
            for (int64_t i = 0; i < nq * (rot / 2); i++) {
                const double th = 6.283185307179586 * (double)(rnd_u64() % 100000) / 100000.0;
                cs[i] = (float)cos(th), sn[i] = (float)sin(th);
            }
            float *dcs = (float *)dev_upload(cs, 4 * nq * (rot / 2)), *dsn = (float *)dev_upload(sn, 4 * nq * (rot / 2));
            float *dq2 = (float *)dev_upload(q, 4 * nq * H * dim);
            const di_attn_rope rope = {dcs, dsn, off, rot};
            di_cuda_rope(dq2, nq, H, dim, off, rot, dcs, dsn, false, 0);
            for (int hpb : hpbs) {
                if (hpb == 64 && !di_cuda_sparse_attn_wg_supported(H, dim)) continue;
                CK(cudaMemset(dout, 0xff, 4 * nq * H * dim));
                di_cuda_sparse_attn_mma(dq2, nq, H, dim, drows, n_idx, dsink, scale, dout, NULL, hpb, DI_ATTN_SPLIT_AUTO,
                                        NULL, 0);
                di_cuda_rope(dout, nq, H, dim, off, rot, dcs, dsn, true, 0);
                dev_download(got16, dout, 4 * nq * H * dim);
                CK(cudaMemset(dout, 0xff, 4 * nq * H * dim));
                di_cuda_sparse_attn_mma(dq, nq, H, dim, drows, n_idx, dsink, scale, dout, NULL, hpb, DI_ATTN_SPLIT_AUTO,
                                        &rope, 0);
                dev_download(got, dout, 4 * nq * H * dim);
                char mshape[160];
                snprintf(mshape, sizeof mshape, "%s hpb=%d rope %d@%d", shape, hpb, rot, off);
                compare("sparse_attn rope folded", mshape, got, got16, nq * H, dim, CRIT_EXACT);
                /* the output as bf16 bits instead (out_bf16: wo_a's form): the fp32 output's, rounded */
                uint16_t *dout16 = (uint16_t *)dev_poisoned(2 * nq * H * dim);
                di_cuda_sparse_attn_mma(dq, nq, H, dim, drows, n_idx, dsink, scale, NULL, dout16, hpb, DI_ATTN_SPLIT_AUTO,
                                        &rope, 0);
                uint16_t *bits = (uint16_t *)malloc(2 * nq * H * dim);
                dev_download(bits, dout16, 2 * nq * H * dim);
                for (int64_t i = 0; i < nq * H * dim; i++) {
                    got16[i] = di_bf16_to_f32(bits[i]);
                    got[i] = di_bf16_round(got[i]);
                }
                compare("sparse_attn bf16 out", mshape, got16, got, nq * H, dim, CRIT_EXACT);
                cudaFree(dout16);
                free(bits);
            }
            float *q_after = (float *)malloc(4 * nq * H * dim);
            dev_download(q_after, dq, 4 * nq * H * dim);
            compare("sparse_attn rope folded, q kept", shape, q_after, q, nq, H * dim, CRIT_EXACT);
            cudaFree(dcs), cudaFree(dsn), cudaFree(dq2);
            free(cs), free(sn), free(q_after);
        }
        free(bound), free(got16);
    }
    cudaFree(dkv_alloc), cudaFree(dq), cudaFree(dsink), cudaFree(dout), cudaFree((void *)drows), cudaFree(drec);
    free(q), free(kv), free(sink), free(ref), free(got), free(idx), free(hrows), free(drows_h), free(rec);
}

/* The tensor-core path's invariances, bit for bit: the live entries of a run moved to its end
 * (same order), and the list extended by three runs of NULL entries. The first is what a prefill's
 * chunking does to a row's list (the window's NULLs move); the second, a batch whose longest
 * selection differs (the list grows by NULL entries, and so does the count of cluster ranks).
 * A split that never depends on the rows (DI_ATTN_SPLIT_FIXED: batch-invariant mode; _WHOLE) also: the
 * first row alone gives its bits among the others. */
static void test_attention_mma_invariance(int64_t nq, int H, int dim, int n_idx, int pool, int pct_empty,
                                          int hpb = 0, di_attn_split split = DI_ATTN_SPLIT_AUTO) {
    const bool row_free = split != DI_ATTN_SPLIT_AUTO;
    const int n_runs = (n_idx + 63) / 64, n_ext = (n_runs + 3) * 64;
    float *q = (float *)malloc(4 * nq * H * dim), *kv = (float *)malloc(4 * (size_t)pool * dim);
    float *sink = (float *)malloc(4 * H);
    fill_wide(q, nq * H * dim, 0.5f);
    fill_wide(kv, (int64_t)pool * dim, 0.5f);
    for (int h = 0; h < H; h++) sink[h] = rnd_normalish() * 2.0f;
    float *dkv = (float *)dev_upload(kv, 4 * (size_t)pool * dim), *dq = (float *)dev_upload(q, 4 * nq * H * dim),
          *dsink = (float *)dev_upload(sink, 4 * H), *dout = (float *)dev_poisoned(4 * nq * H * dim);
    const float **base = (const float **)calloc((size_t)(nq * n_idx), sizeof(float *));
    const float **moved = (const float **)calloc((size_t)(nq * n_idx), sizeof(float *));
    const float **ext = (const float **)calloc((size_t)(nq * n_ext), sizeof(float *));
    for (int64_t r = 0; r < nq; r++)
        for (int run = 0; run < n_runs; run++) {
            const int j0 = run * 64, cnt = n_idx - j0 < 64 ? n_idx - j0 : 64;
            int live = 0;
            for (int j = j0; j < j0 + cnt; j++) {
                const float *e = (int)(rnd_u64() % 100) < pct_empty ? NULL : dkv + (size_t)(rnd_u64() % pool) * dim;
                base[r * n_idx + j] = ext[r * n_ext + j] = e;
                live += e != NULL;
            }
            for (int j = j0, k = j0 + cnt - live; j < j0 + cnt; j++) /* the live ones to the run's end */
                if (base[r * n_idx + j]) moved[r * n_idx + k++] = base[r * n_idx + j];
        }
    float *want = (float *)malloc(4 * nq * H * dim), *got = (float *)malloc(4 * nq * H * dim);
    const float scale = 1.0f / sqrtf((float)dim);
    for (int pass = 0; pass < (row_free ? 4 : 3); pass++) {
        const int n = pass == 2 ? n_ext : n_idx;
        const int64_t rows_n = pass == 3 ? 1 : nq; /* pass 3: the first row alone */
        const float **rows = pass == 0 || pass == 3 ? base : pass == 1 ? moved : ext;
        const float *const *drows = (const float *const *)dev_upload(rows, sizeof(float *) * rows_n * n);
        CK(cudaMemset(dout, 0xff, 4 * nq * H * dim));
        di_cuda_sparse_attn_mma(dq, rows_n, H, dim, drows, n, dsink, scale, dout, NULL, hpb, split, NULL, 0);
        dev_download(pass == 0 ? want : got, dout, 4 * rows_n * H * dim);
        cudaFree((void *)drows);
        if (pass == 0) continue;
        char shape[128];
        snprintf(shape, sizeof shape, "q=%lld H=%d dim=%d idx=%d hpb=%d%s %s", (long long)nq, H, dim, n_idx, hpb,
                 split == DI_ATTN_SPLIT_FIXED ? " fixed" : split == DI_ATTN_SPLIT_WHOLE ? " whole" : "",
                 pass == 1 ? "NULLs moved" : pass == 2 ? "+3 NULL runs" : "row 0 alone");
        compare("sparse_attn_mma invar.", shape, got, want, rows_n * H, dim, CRIT_EXACT);
    }
    cudaFree(dkv), cudaFree(dq), cudaFree(dsink), cudaFree(dout);
    free(q), free(kv), free(sink), free(base), free(moved), free(ext), free(want), free(got);
}

/* ---- mHC ---- */
/* The MoE combine's operands on the device for T tokens of K slots of d values: random rows at
 * scattered places, a permutation for the slots' order (combine_operands_free frees them) */
struct combine_operands {
    float *slots, *shared;
    const float **rows;
    int32_t *order;
};
static combine_operands combine_operands_make(int64_t T, int K, int64_t d) {
    float *slots = (float *)malloc(4 * T * K * d), *sh = (float *)malloc(4 * T * d);
    fill_wide(slots, T * K * d, 1.0f);
    fill_wide(sh, T * d, 1.0f);
    combine_operands c;
    c.slots = (float *)dev_upload(slots, 4 * T * K * d);
    c.shared = (float *)dev_upload(sh, 4 * T * d);
    const float **rows = (const float **)malloc(sizeof(float *) * T * K);
    int32_t *ord = (int32_t *)malloc(4 * T * K);
    for (int64_t i = 0; i < T * K; i++) rows[i] = c.slots + ((i * 7) % (T * K)) * d; /* scattered rows */
    for (int64_t t = 0; t < T; t++)
        for (int j = 0; j < K; j++) ord[t * K + j] = (int32_t)((j * 5 + t) % K); /* a permutation */
    c.rows = (const float **)dev_upload(rows, sizeof(float *) * T * K);
    c.order = (int32_t *)dev_upload(ord, 4 * T * K);
    free(slots), free(sh), free(rows), free(ord);
    return c;
}
static void combine_operands_free(combine_operands *c) {
    cudaFree(c->slots), cudaFree(c->shared), cudaFree((void *)c->rows), cudaFree(c->order);
}

static void test_mhc(int64_t T, int n, int64_t d) {
    const int nm = n * (n + 2);
    float *x = (float *)malloc(4 * T * n * d), *fn = (float *)malloc(4 * (size_t)nm * n * d);
    fill_wide(x, T * n * d, 1.0f);
    for (int64_t i = 0; i < (int64_t)nm * n * d; i++) fn[i] = rnd_normalish() * 0.02f;
    float *mix_ref = (float *)malloc(4 * T * nm), *mix_got = (float *)malloc(4 * T * nm);
    for (int64_t t = 0; t < T; t++) di_cpu_hc_mix_logits(x + t * n * d, n, d, fn, 1e-6f, mix_ref + t * nm);
    uint16_t *dx = dev_upload_bf16(x, T * n * d); /* the stream [T, n, d] bf16 (x is on the grid) */
    float *dfn = (float *)dev_upload(fn, 4 * (size_t)nm * n * d);
    float *dmix = (float *)dev_poisoned(4 * T * nm);
    di_cuda_hc_mix_logits(dx, T, n, d, dfn, 1e-6f, dmix, NULL, 0);
    dev_download(mix_got, dmix, 4 * T * nm);
    char shape[96];
    snprintf(shape, sizeof shape, "T=%lld n=%d D=%lld", (long long)T, n, (long long)d);
    compare("hc_mix_logits", shape, mix_got, mix_ref, T, nm, CRIT_F32_ULP);

    /* Sinkhorn on the CPU's mix (so that the two sides see identical inputs) */
    float scale[3] = {0.7f, 1.3f, 0.9f}, *base = (float *)malloc(4 * nm);
    for (int i = 0; i < nm; i++) base[i] = rnd_normalish();
    float *pre_r = (float *)malloc(4 * T * n), *post_r = (float *)malloc(4 * T * n), *comb_r = (float *)malloc(4 * T * n * n);
    for (int64_t t = 0; t < T; t++)
        di_cpu_hc_split_sinkhorn(mix_ref + t * nm, scale, base, n, 20, 1e-6f, pre_r + t * n, post_r + t * n,
                                 comb_r + t * n * n);
    float *dmixr = (float *)dev_upload(mix_ref, 4 * T * nm), *dscale = (float *)dev_upload(scale, 12),
          *dbase = (float *)dev_upload(base, 4 * nm);
    float *dpre = (float *)dev_poisoned(4 * T * n), *dpost = (float *)dev_poisoned(4 * T * n),
          *dcomb = (float *)dev_poisoned(4 * T * n * n);
    di_cuda_hc_split_sinkhorn(dmixr, dscale, dbase, T, n, 20, 1e-6f, dpre, dpost, dcomb, 0);
    float *g = (float *)malloc(4 * T * n * n);
    dev_download(g, dpre, 4 * T * n);
    compare("hc_sinkhorn.pre", shape, g, pre_r, T, n, CRIT_EXACT);
    dev_download(g, dpost, 4 * T * n);
    compare("hc_sinkhorn.post", shape, g, post_r, T, n, CRIT_EXACT);
    dev_download(g, dcomb, 4 * T * n * n);
    compare("hc_sinkhorn.comb", shape, g, comb_r, T, n * n, CRIT_EXACT);

    /* hc_pre with the CPU's pre weights; hc_post with its post and comb */
    float *pre_out_r = (float *)malloc(4 * T * d), *pre_out_g = (float *)malloc(4 * T * d);
    for (int64_t t = 0; t < T; t++) di_cpu_hc_pre(x + t * n * d, n, d, pre_r + t * n, pre_out_r + t * d);
    float *dprer = (float *)dev_upload(pre_r, 4 * T * n), *dpo = (float *)dev_poisoned(4 * T * d);
    di_cuda_hc_pre(dx, T, n, d, dprer, dpo, 0);
    dev_download(pre_out_g, dpo, 4 * T * d);
    compare("hc_pre", shape, pre_out_g, pre_out_r, T, d, CRIT_EXACT);

    float *y = (float *)malloc(4 * T * d), *post_out_r = (float *)malloc(4 * T * n * d),
          *post_out_g = (float *)malloc(4 * T * n * d);
    fill_wide(y, T * d, 1.0f);
    for (int64_t t = 0; t < T; t++)
        di_cpu_hc_post(y + t * d, x + t * n * d, n, d, post_r + t * n, comb_r + t * n * n, post_out_r + t * n * d);
    float *dy = (float *)dev_upload(y, 4 * T * d), *dpostr = (float *)dev_upload(post_r, 4 * T * n),
          *dcombr = (float *)dev_upload(comb_r, 4 * T * n * n);
    uint16_t *dout = (uint16_t *)dev_poisoned(2 * T * n * d); /* [T, n, d] bf16 */
    di_cuda_hc_post(dy, dx, T, n, d, dpostr, dcombr, dout, 0);
    dev_download_bf16(post_out_g, dout, T * n * d);
    compare("hc_post", shape, post_out_g, post_out_r, T, n * d, CRIT_EXACT);
    { /* hc_post with the pre-mix of its output in the same launch: hc_post's and hc_pre's bits */
        uint16_t *dout2 = (uint16_t *)dev_poisoned(2 * T * n * d);
        float *dpm = (float *)dev_poisoned(4 * T * d), *dpm_ref = (float *)dev_poisoned(4 * T * d),
              *got = (float *)malloc(4 * T * n * d), *ref = (float *)malloc(4 * T * d);
        di_cuda_hc_post_pre(dy, dx, T, n, d, dpostr, dcombr, dout2, dprer, dpm, 0);
        di_cuda_hc_pre(dout, T, n, d, dprer, dpm_ref, 0);
        dev_download_bf16(got, dout2, T * n * d);
        compare("hc_post_pre.out", shape, got, post_out_r, T, n * d, CRIT_EXACT);
        dev_download(got, dpm, 4 * T * d);
        dev_download(ref, dpm_ref, 4 * T * d);
        compare("hc_post_pre.pre", shape, got, ref, T, d, CRIT_EXACT);
        cudaFree(dout2), cudaFree(dpm), cudaFree(dpm_ref);
        free(got), free(ref);
    }
    { /* y as the MoE's combine of K slots made by that launch: the bits of combining first (any T) */
        for (int K = 1; K <= 6; K += 5) {
            combine_operands co = combine_operands_make(T, K, d);
            float *dyc = (float *)dev_poisoned(4 * T * d), *m1 = (float *)dev_poisoned(4 * T * d),
                  *m2 = (float *)dev_poisoned(4 * T * d);
            uint16_t *o1 = (uint16_t *)dev_poisoned(2 * T * n * d), *o2 = (uint16_t *)dev_poisoned(2 * T * n * d);
            const di_cuda_hc_post_ops ops = {NULL, dx, dpostr, dcombr, o2, co.rows, co.order, co.shared, K};
            char name[64];
            snprintf(name, sizeof name, "hc_post_combine_pre K=%d", K);
            if (di_cuda_hc_post_combine_supported(&ops, n, d)) {
                di_cuda_moe_combine(co.rows, co.order, co.shared, T, K, d, dyc, 0);
                di_cuda_hc_post_pre(dyc, dx, T, n, d, dpostr, dcombr, o1, dprer, m1, 0);
                di_cuda_hc_post_combine_pre(&ops, T, n, d, dprer, m2, 0);
                float *a = (float *)malloc(4 * T * n * d), *b = (float *)malloc(4 * T * n * d);
                dev_download_bf16(a, o1, T * n * d);
                dev_download_bf16(b, o2, T * n * d);
                compare(name, shape, b, a, T, n * d, CRIT_EXACT);
                dev_download(a, m1, 4 * T * d);
                dev_download(b, m2, 4 * T * d);
                strcat(name, ".pre");
                compare(name, shape, b, a, T, d, CRIT_EXACT);
                free(a), free(b);
            } else if (d % 4 == 0) { /* every operand here is 16-byte aligned then */
                printf("FAIL  %s: %s not supported\n", name, shape);
                g_fail++;
            }
            combine_operands_free(&co);
            cudaFree(dyc), cudaFree(o1), cudaFree(o2), cudaFree(m1), cudaFree(m2);
        }
    }

    /* the fused sublayer input against the separate kernels (on the GPU's own mix): the same bits */
    if (di_cuda_hc_block_in_supported(T, n, d)) {
        uint16_t *w = (uint16_t *)malloc(2 * d);
        for (int64_t i = 0; i < d; i++) w[i] = di_f32_to_bf16(0.5f + rnd_unit());
        uint16_t *dw = (uint16_t *)dev_upload(w, 2 * d);
        float *dnorm = (float *)dev_poisoned(4 * T * d), *dy2 = (float *)dev_poisoned(4 * T * d);
        float *dpre2 = (float *)dev_poisoned(4 * T * n), *dpost2 = (float *)dev_poisoned(4 * T * n),
              *dcomb2 = (float *)dev_poisoned(4 * T * n * n);
        void *ws = dev_poisoned(di_cuda_hc_mix_ws_bytes(T, n, d));
        di_cuda_hc_split_sinkhorn(dmix, dscale, dbase, T, n, 20, 1e-6f, dpre, dpost, dcomb, 0);
        di_cuda_hc_pre(dx, T, n, d, dprer, dpo, 0);
        di_cuda_rmsnorm(dpo, dw, T, d, 1e-6f, dnorm, 0);
        di_cuda_hc_block_in(dx, T, n, d, dfn, 1e-6f, dscale, dbase, 20, 1e-6f, dprer, dw, dpre2, dpost2, dcomb2, dy2,
                            NULL, ws, 0);
        float *a = (float *)malloc(4 * T * d), *b = (float *)malloc(4 * T * d);
        const float *pairs[4][2] = {{dnorm, dy2}, {dpre, dpre2}, {dpost, dpost2}, {dcomb, dcomb2}};
        const int64_t cols[4] = {d, n, n, (int64_t)n * n};
        /* the four outputs (y, pre, post, comb) of the two runs, bit for bit */
        auto compare_outputs = [&](const char *op) {
            const char *part[4] = {"y", "pre", "post", "comb"};
            for (int i = 0; i < 4; i++) {
                char name[64];
                snprintf(name, sizeof name, "%s.%s", op, part[i]);
                dev_download(a, pairs[i][0], 4 * T * cols[i]);
                dev_download(b, pairs[i][1], 4 * T * cols[i]);
                compare(name, shape, b, a, T, cols[i], CRIT_EXACT);
            }
        };
        compare_outputs("hc_block_in");
        /* with its act_quant: the same y, and the codes and scales of act_quant_e4m3_kernel on that y */
        if (d % 32 == 0) {
            di_cuda_act_forms yq = {(uint8_t *)dev_poisoned(T * d), (float *)dev_poisoned(4 * T * d / 32),
                                    (uint16_t *)dev_poisoned(2 * T * d), NULL, NULL};
            float *dy3 = (float *)dev_poisoned(4 * T * d);
            di_cuda_hc_block_in(dx, T, n, d, dfn, 1e-6f, dscale, dbase, 20, 1e-6f, dprer, dw, dpre2, dpost2, dcomb2,
                                dy3, &yq, ws, 0);
            dev_download(a, dy2, 4 * T * d);
            dev_download(b, dy3, 4 * T * d);
            compare("hc_block_in+act_quant.y", shape, b, a, T, d, CRIT_EXACT);
            compare_act_q("hc_block_in+act_quant", shape, dy2, &yq, T, d);
            uint16_t *rb = (uint16_t *)dev_poisoned(2 * T * d), *ha = (uint16_t *)malloc(2 * T * d),
                     *hb = (uint16_t *)malloc(2 * T * d);
            di_cuda_f32_to_bf16(dy2, T * d, rb, 0);
            dev_download(ha, rb, 2 * T * d);
            dev_download(hb, yq.bf16, 2 * T * d);
            for (int64_t i = 0; i < T * d; i++) a[i] = ha[i], b[i] = hb[i]; /* the bits as values */
            compare("hc_block_in+bf16 bits", shape, b, a, T, d, CRIT_EXACT);
            free(ha), free(hb);
            cudaFree(rb), cudaFree(yq.q), cudaFree(yq.scale), cudaFree(yq.bf16), cudaFree(dy3);
        }
        /* hc_post fused into the next input's mix sums: the stream and the input as the two separate steps
         * make them (dout: hc_post's, dnorm etc.: recomputed from it below) */
        const di_cuda_hc_post_ops ops = {dy, dx, dpostr, dcombr, (uint16_t *)dev_poisoned(2 * T * n * d)};
        if (di_cuda_hc_post_block_in_supported(&ops, T, n, d)) {
            di_cuda_hc_block_in(dout, T, n, d, dfn, 1e-6f, dscale, dbase, 20, 1e-6f, dprer, dw, dpre, dpost, dcomb,
                                dnorm, NULL, ws, 0);
            di_cuda_hc_post_block_in(&ops, T, n, d, dfn, 1e-6f, dscale, dbase, 20, 1e-6f, dprer, dw, dpre2, dpost2,
                                     dcomb2, dy2, NULL, ws, 0);
            compare_outputs("hc_post_block_in");
            float *so = (float *)malloc(4 * T * n * d);
            dev_download_bf16(so, ops.out, T * n * d);
            compare("hc_post_block_in.stream", shape, so, post_out_r, T, n * d, CRIT_EXACT);
            /* y as the MoE's combine of 6 slots, made by the fused kernel: the same as combining first */
            const int K = 6;
            combine_operands co = combine_operands_make(T, K, d);
            float *dyc = (float *)dev_poisoned(4 * T * d);
            di_cuda_moe_combine(co.rows, co.order, co.shared, T, K, d, dyc, 0);
            di_cuda_hc_post_ops by_y = ops, by_comb = ops;
            by_y.y = dyc;
            by_comb.y = NULL, by_comb.slot_rows = co.rows, by_comb.order = co.order, by_comb.shared = co.shared, by_comb.K = K;
            uint16_t *out2 = (uint16_t *)dev_poisoned(2 * T * n * d);
            by_comb.out = out2;
            if (di_cuda_hc_post_block_in_supported(&by_comb, T, n, d)) {
                di_cuda_hc_post_block_in(&by_y, T, n, d, dfn, 1e-6f, dscale, dbase, 20, 1e-6f, dprer, dw, dpre, dpost,
                                         dcomb, dnorm, NULL, ws, 0);
                di_cuda_hc_post_block_in(&by_comb, T, n, d, dfn, 1e-6f, dscale, dbase, 20, 1e-6f, dprer, dw, dpre2,
                                         dpost2, dcomb2, dy2, NULL, ws, 0);
                compare_outputs("hc_post(combine)_block_in");
                float *s1 = (float *)malloc(4 * T * n * d);
                dev_download_bf16(so, by_y.out, T * n * d);
                dev_download_bf16(s1, out2, T * n * d);
                compare("hc_post(combine)_block_in.stream", shape, s1, so, T, n * d, CRIT_EXACT);
                free(s1);
            }
            combine_operands_free(&co);
            cudaFree(dyc), cudaFree(out2);
            free(so);
        }
        cudaFree(ops.out);
        cudaFree(dw), cudaFree(dnorm), cudaFree(dy2), cudaFree(dpre2), cudaFree(dpost2), cudaFree(dcomb2), cudaFree(ws);
        free(w), free(a), free(b);
    }

    cudaFree(dx), cudaFree(dfn), cudaFree(dmix), cudaFree(dmixr), cudaFree(dscale), cudaFree(dbase);
    cudaFree(dpre), cudaFree(dpost), cudaFree(dcomb), cudaFree(dprer), cudaFree(dpo), cudaFree(dy);
    cudaFree(dpostr), cudaFree(dcombr), cudaFree(dout);
    free(x), free(fn), free(mix_ref), free(mix_got), free(base), free(pre_r), free(post_r), free(comb_r);
    free(g), free(pre_out_r), free(pre_out_g), free(y), free(post_out_r), free(post_out_g);
}

/* ---- indexer: CPU twins of index_scores() / topk_select() in src/forward/indexer.c (static) ---- */
static void ref_index_scores(const float *qi, const float *w, const float *keys, int64_t P, int nh, int idim,
                             float *score) {
    for (int64_t t = 0; t < P; t++) {
        const float *kt = keys + t * idim;
        double sum = 0.0;
        for (int h = 0; h < nh; h++) {
            double dot = 0.0;
            for (int d = 0; d < idim; d++) dot += (double)qi[h * idim + d] * kt[d];
            float s = di_bf16_round((float)dot);
            sum += di_bf16_round(fmaxf(s, 0.0f) * w[h]);
        }
        score[t] = di_bf16_round((float)sum);
    }
}

static void test_index_score(int64_t R, int64_t P, int nh, int idim) {
    float *qi = (float *)malloc(4 * R * nh * idim), *w = (float *)malloc(4 * R * nh);
    float *keys = (float *)malloc(4 * P * idim), *ref = (float *)malloc(4 * R * P), *got = (float *)malloc(4 * R * P);
    fill_wide(qi, R * nh * idim, 1.0f);
    di_cpu_fp4_quant_inplace(qi, R * nh * idim, 32, DI_FP4_SCALE_UE8M0);
    fill_wide(keys, P * idim, 1.0f);
    di_cpu_fp4_quant_inplace(keys, P * idim, 32, DI_FP4_SCALE_UE8M0);
    for (int64_t i = 0; i < R * nh; i++) w[i] = di_bf16_round(rnd_normalish() * (1.0f / 64.0f));
    int64_t *vis = (int64_t *)malloc(sizeof(int64_t) * R);
    for (int64_t r = 0; r < R; r++) {
        vis[r] = P - (int64_t)(rnd_u64() % (P / 4 + 1));
        ref_index_scores(qi + r * nh * idim, w + r * nh, keys, P, nh, idim, ref + r * P);
        for (int64_t t = vis[r]; t < P; t++) ref[r * P + t] = -INFINITY;
    }
    float *dq = (float *)dev_upload(qi, 4 * R * nh * idim), *dw = (float *)dev_upload(w, 4 * R * nh),
          *dk = (float *)dev_upload(keys, 4 * P * idim), *ds = (float *)dev_poisoned(4 * R * P);
    int64_t *dv = (int64_t *)dev_upload(vis, sizeof(int64_t) * R);
    di_cuda_index_score(dq, dw, dk, R, P, nh, idim, dv, ds, 0);
    dev_download(got, ds, 4 * R * P);
    char shape[96];
    snprintf(shape, sizeof shape, "R=%lld P=%lld heads=%dx%d", (long long)R, (long long)P, nh, idim);
    compare("index_score", shape, got, ref, R, P, CRIT_EXACT);
    cudaFree(dq), cudaFree(dw), cudaFree(dk), cudaFree(ds), cudaFree(dv);
    free(qi), free(w), free(keys), free(ref), free(got), free(vis);
}

/* scores drawn from `levels` distinct bf16 values (many exact ties), or (0) any bf16 value, or (-1) any
 * fp32 value (ties rare: the select stops within the score's bits); some -inf, one +inf */
static void test_topk(int64_t R, int64_t P, int k, int levels, int pct_ninf) {
    float *s = (float *)malloc(4 * R * P);
    for (int64_t i = 0; i < R * P; i++) {
        float v = levels > 0 ? (float)(rnd_u64() % levels) * 0.125f - 1.0f
                             : levels == 0 ? di_bf16_round(rnd_normalish()) : rnd_normalish();
        if (v == 0.0f && (rnd_u64() & 1)) v = -0.0f;
        s[i] = (int)(rnd_u64() % 100) < pct_ninf ? -INFINITY : v;
    }
    if (P > 3) s[P / 3] = INFINITY;
    int32_t *ref = (int32_t *)malloc(4 * R * k), *got = (int32_t *)malloc(4 * R * k);
    for (int64_t r = 0; r < R; r++) di_cpu_topk_select(s + r * P, P, k, ref + r * k);
    float *ds = (float *)dev_upload(s, 4 * R * P);
    di_cuda_topk_always_stage(true); /* not only where the stages are faster */
    const size_t scratch_bytes = di_cuda_topk_scratch_bytes(R, P, k);
    /* one block a row, then (where the rows are long enough) in stages; scratch poisoned too */
    for (int staged = 0; staged <= (scratch_bytes > 0); staged++) {
        void *scratch = staged ? dev_poisoned_with(scratch_bytes, 0x5a) : NULL;
        int32_t *dout = (int32_t *)dev_poisoned_with(4 * R * k, 0x7f); /* not -1, the padding value */
        di_cuda_topk(ds, R, P, k, dout, scratch, 0);
        dev_download(got, dout, 4 * R * k);
        int64_t ndiff = 0, first = -1;
        for (int64_t i = 0; i < R * k; i++)
            if (got[i] != ref[i]) {
                ndiff++;
                if (first < 0) first = i;
            }
        printf("%s  %-22s R=%lld P=%lld k=%d levels=%d -inf=%d%% %s%*s differing %lld / %lld  [exact]\n",
               ndiff ? "FAIL" : "PASS", "topk", (long long)R, (long long)P, k, levels, pct_ninf,
               staged ? "staged" : "1 block", 2, "", (long long)ndiff, (long long)(R * k));
        if (ndiff) {
            g_fail++;
            printf("      first difference at row %lld slot %lld: gpu %d cpu %d\n", (long long)(first / k),
                   (long long)(first % k), got[first], ref[first]);
        } else {
            g_pass++;
        }
        cudaFree(dout);
        if (scratch) cudaFree(scratch);
    }
    di_cuda_topk_always_stage(false);
    cudaFree(ds);
    free(s), free(ref), free(got);
}

/* --quick: small shapes of every op (for compute-sanitizer runs, where kernels run ~100x slower) */
static void run_quick(void) {
    test_act_quant(2048, 32, 1.0f);
    test_act_quant_e4m3(37, 0, 1.0f); /* a partial warp */
    test_f32_to_bf16(1003, 0);
    test_f32_to_bf16(1003, 1);
    test_f32_to_bf16(4096, 0);
    test_act_quant_e4m3(64, 1, 1e-3f);
    test_fp4_quant(1024, 32, DI_FP4_SCALE_UE8M0, 1.0f);
    test_fp4_quant(1024, 16, DI_FP4_SCALE_E4M3, 1.0f);
    test_linear("linear_fp8", DI_DT_F8_E4M3, DI_LIN_QUANT, 3, 256, 200);
    test_linear("linear_fp8", DI_DT_F8_E4M3, DI_LIN_QUANT, 9, 1280, 64);
    test_linear("linear_fp8", DI_DT_F8_E4M3, DI_LIN_QUANT, 4, 96, 50);   /* K = 3 blocks */
    test_linear("linear_fp4", DI_DT_I8, DI_LIN_QUANT, 3, 160, 40);       /* K = 5 blocks */
    test_linear("linear_fp4", DI_DT_I8, DI_LIN_QUANT, 5, 512, 96);
    test_linear("linear_fp8", DI_DT_F8_E4M3, DI_LIN_QUANT, 70, 256, 200); /* + the wgmma kernel */
    test_linear("linear_fp4", DI_DT_I8, DI_LIN_QUANT, 70, 512, 96);
    test_linear("linear_fp4 odd-scales", DI_DT_I8, DI_LIN_QUANT, 70, 512, 96, true);
    test_linear("linear_fp4 odd-scales", DI_DT_I8, DI_LIN_QUANT, 40, 512, 96, true); /* 64-token tiles, two CTAs an SM */
    test_linear("linear_fp8 odd-scales", DI_DT_F8_E4M3, DI_LIN_QUANT, 70, 256, 200, true);
    test_linear("linear_bf16", DI_DT_BF16, DI_LIN_BF16, 2, 256, 64);
    test_linear("linear_f32", DI_DT_F32, DI_LIN_F32, 2, 256, 64);
    test_linear_batch_invariance("batch_inv fp8", DI_DT_F8_E4M3, DI_LIN_QUANT, 9, 256, 64);
    test_rmsnorm(3, 512);
    test_rmsnorm(2, 1280); /* the q norm's rows: 5 values a thread in registers */
    test_rmsnorm(3, 300);  /* rows past the first 256 values partly filled */
    test_rmsnorm(2, 5120); /* past 2,048: the two-pass form */
    test_rope(2, 4, 128, 64, 64, false);
    test_rmsnorm_rope_quant(3, 64, 16);  /* the tiny model's kv */
    test_rmsnorm_rope_quant(5, 512, 64); /* V4.1's */
    test_rmsnorm_q_kv(3, 96, 64, 16);    /* the tiny model's q and kv norms in one launch */
    test_rmsnorm_q_kv(5, 1280, 512, 64); /* V4.1's */
    test_attention(2, 8, 512, 130, 200, 10);
    test_attention(1, 64, 512, 128 + 512, 4096, 5);         /* the real shape, decode batch 1 */
    test_attention(3, 24, 64, 300, 500, 10, 2);             /* 24 heads, tail of 44, NULL run 2 */
    test_attention(2, 4, 37, 70, 50, 20);                   /* dim not a multiple of 4 */
    test_attention(7, 20, 64, 200, 300, 10, 1, 3);          /* slices of 3, 3, 1 rows */
    test_attention(2, 16, 64, 0, 10, 0);                    /* empty lists */
    test_attention(2, 16, 64, 100, 50, 10, -1, 0, true);    /* KV rows not 16-byte aligned */
    test_attention(2, 64, 512, 128 + 512, 4096, 5, -1, 0, false, true); /* pool entries as records */
    test_attention(3, 24, 64, 300, 500, 10, 2, 0, false, true);
    test_attention(7, 20, 48, 200, 300, 10, 1, 3, false, true); /* odd multiples of 16, slices */
    test_attention_mma_invariance(2, 24, 64, 150, 300, 30);
    test_attention_mma_invariance(3, 24, 64, 150, 300, 30, 0, DI_ATTN_SPLIT_FIXED);
    test_mhc(2, 4, 256);
    test_mhc(1, 4, 650);  /* 11 chunks of the mix sums, the last one partial */
    test_mhc(3, 6, 64);   /* n * n > 32: the one-thread Sinkhorn */
    test_mhc(37, 4, 300); /* a token group of the mix sums partly empty (a 16-token tile part full, one with no token) */
    test_mhc(3, 4, 130);  /* d % 4 != 0: pre / post a value a thread */
    test_mhc(70, 3, 65);  /* n d % 4 != 0: the mix reads x a value at a time; two token groups */
    test_mhc(2, 5, 1500); /* the fused sublayer input with n at run time */
    test_mhc(3, 4, 64);   /* the tiny model's: a chunk of the mix sums spans the 4 copies of hc_post */
    test_index_score(2, 100, 32, 128);
    test_topk(2, 3000, 512, 20, 5);
}

/* top-k selections of every kind of tie, small enough for the CPU emulator: --topk (and the full run) */
static void run_topk_quick(void) {
    test_topk(3, 2048, 512, -1, 0);  /* fp32 scores: the select stops early */
    test_topk(2, 5000, 512, -1, 10);
    test_topk(2, 700, 512, -1, 50);  /* fewer selectable scores than k */
    test_topk(2, 3000, 512, 20, 5);  /* many exact ties: every pass */
    test_topk(1, 1000, 16, 0, 0);
    /* the row held in registers, KPT scores a thread, at the sizes' edges; then the global passes */
    test_topk(1, 1024, 512, -1, 0);   /* KPT 1, full */
    test_topk(1, 4096, 2048, 50, 1);  /* KPT 4, full, many ties */
    test_topk(1, 4097, 512, -1, 0);   /* the global passes (staged: two chunks), just past */
    test_topk(2, 32768, 512, 0, 1);   /* two stages: 8 chunks, then 4,096 candidates */
    test_topk(1, 40000, 1024, 30, 2); /* three stages: 10 chunks, 3 of the 10,240 candidates, 3,072 */
    test_topk(1, 9000, 2048, -1, 60); /* k at half a chunk: 3 chunks, 2 of 6,144, 4,096; few valid */
    test_topk(1, 12000, 2049, -1, 0); /* k past half a chunk: one block */
}

/* the mHC cases alone (small and real shapes): --mhc */
static void run_mhc(void) {
    test_mhc(2, 4, 256);
    test_mhc(3, 6, 64);
    test_mhc(37, 4, 300);
    test_mhc(4, 4, 5120);
    test_mhc(5, 8, 96); /* nmix 80: ten fn tiles */
    test_mhc(3, 4, 130); /* d % 4 != 0: pre / post a value a thread */
    test_mhc(70, 3, 65); /* n d % 4 != 0: the mix reads x a value at a time; two token groups */
    test_mhc(2, 5, 1500); /* the fused sublayer input with n at run time */
    test_mhc(3, 4, 64);   /* the tiny model's: a chunk of the mix sums spans the 4 copies of hc_post */
    test_mhc(32, 4, 512); /* the fused input's most tokens: four token groups of the chunk kernel */
}

/* the attention cases of the real shape alone (the wgmma kernel's): --attn */
static void run_attn(void) {
    test_attention(1, 64, 512, 128 + 512, 4096, 5);
    test_attention(3, 64, 512, 100, 300, 30);
    test_attention(2, 64, 512, 128 + 512, 4096, 5, 3);
    test_attention(2, 128, 512, 128 + 512, 4096, 5, -1, 0, true);
    test_attention(2, 64, 512, 128 + 512, 4096, 5, 3, 0, false, true); /* pool entries as records */
    test_attention_mma_invariance(2, 64, 512, 128 + 512, 4096, 20, 64);
    test_attention_mma_invariance(2, 64, 512, 128 + 512, 4096, 20);
    test_attention_mma_invariance(5, 64, 512, 128 + 512, 4096, 20, 0, DI_ATTN_SPLIT_FIXED);
    test_attention_mma_invariance(3, 64, 512, 128 + 512, 4096, 20, 64, DI_ATTN_SPLIT_WHOLE);
}

/* the attention cases over compressed KV records at small shapes (the CPU emulator runs them): --records */
static void run_records(void) {
    test_attention(3, 24, 64, 300, 500, 10, 2, 0, false, true);
    test_attention(7, 20, 48, 200, 300, 10, 1, 3, false, true);
    test_attention(2, 16, 64, 150, 40, 0, -1, 0, false, true); /* no NULLs: a run of floats, then records */
}

/* every case at the real shapes */
static void run_full(void) {
    test_act_quant(5120 * 4, 32, 1.0f);
    test_act_quant_e4m3(3072 * 160, 0, 1.0f); /* a 512-token prefill's expert inputs */
    test_act_quant_e4m3(4099, 1, 1e-6f);
    test_act_quant(8192 * 3, 32, 1e-6f);
    test_act_quant(4096, 128, 300.0f);
    test_act_quant(1280, 64, 1.0f);
    test_fp4_quant(32 * 128 * 4, 32, DI_FP4_SCALE_UE8M0, 1.0f);
    test_fp4_quant(32 * 128, 32, DI_FP4_SCALE_UE8M0, 1e-30f);
    test_fp4_quant(512 * 8, 16, DI_FP4_SCALE_E4M3, 1.0f);
    test_fp4_quant(512 * 8, 16, DI_FP4_SCALE_E4M3, 1e-3f);

    /* FP8 block-scaled: wq_a, wkv, wq_b (M reduced for the CPU's sake), wo_b, ragged N */
    test_linear("linear_fp8", DI_DT_F8_E4M3, DI_LIN_QUANT, 1, 5120, 1280);
    test_linear("linear_fp8", DI_DT_F8_E4M3, DI_LIN_QUANT, 8, 5120, 1280);
    test_linear("linear_fp8", DI_DT_F8_E4M3, DI_LIN_QUANT, 64, 5120, 1280);
    test_linear("linear_fp8", DI_DT_F8_E4M3, DI_LIN_QUANT, 3, 1280, 32768);
    test_linear("linear_fp8", DI_DT_F8_E4M3, DI_LIN_QUANT, 5, 8192, 5120);
    test_linear("linear_fp8", DI_DT_F8_E4M3, DI_LIN_QUANT, 13, 96, 1000);
    /* FP4 experts (w4a8): w1/w3 5120 -> 2304, w2 2304 -> 5120 */
    test_linear("linear_fp4", DI_DT_I8, DI_LIN_QUANT, 1, 5120, 2304);
    test_linear("linear_fp4", DI_DT_I8, DI_LIN_QUANT, 8, 5120, 2304);
    test_linear("linear_fp4", DI_DT_I8, DI_LIN_QUANT, 24, 2304, 5120);
    test_linear("linear_fp4", DI_DT_I8, DI_LIN_QUANT, 130, 2304, 5120); /* + the wgmma kernel */
    test_linear("linear_fp8", DI_DT_F8_E4M3, DI_LIN_QUANT, 100, 5120, 1280);
    /* BF16 (weights_proj, wo_a-like) and F32 (router, hc fn, head slice) through cuBLAS */
    test_linear("linear_bf16", DI_DT_BF16, DI_LIN_BF16, 1, 5120, 32);
    test_linear("linear_bf16", DI_DT_BF16, DI_LIN_BF16, 16, 4096, 1024);
    test_linear("linear_f32", DI_DT_F32, DI_LIN_F32, 1, 5120, 384);
    test_linear("linear_f32", DI_DT_F32, DI_LIN_F32, 4, 20480, 24);
    test_linear("linear_f32", DI_DT_F32, DI_LIN_F32, 2, 5120, 16384);
    test_linear("linear_f32(bf16 w)", DI_DT_BF16, DI_LIN_F32, 3, 5120, 512);

    test_linear_batch_invariance("batch_inv fp8", DI_DT_F8_E4M3, DI_LIN_QUANT, 37, 5120, 1280);
    test_linear_batch_invariance("batch_inv fp4", DI_DT_I8, DI_LIN_QUANT, 19, 2304, 1024);
    test_linear_batch_invariance("batch_inv bf16(cublas)", DI_DT_BF16, DI_LIN_BF16, 64, 5120, 512);

    test_expf_twin();
    test_rmsnorm(1, 5120);
    test_rmsnorm(64, 5120);
    test_rmsnorm(9, 1280);
    test_rmsnorm(33, 512);
    test_rope(8, 64, 512, 448, 64, false);
    test_rope(8, 64, 512, 448, 64, true);
    test_rope(5, 32, 128, 64, 64, false);
    test_rmsnorm_rope_quant(64, 512, 64);
    test_rmsnorm_q_kv(64, 1280, 512, 64);

    test_attention(4, 64, 512, 128 + 512, 4096, 5);
    test_attention(3, 64, 512, 100, 300, 30);
    test_attention(2, 16, 64, 257, 1000, 10);
    test_attention(2, 64, 512, 128 + 512, 4096, 5, 3);   /* a NULL run in the middle */
    test_attention(3, 40, 512, 700, 2000, 10, 9);          /* heads not a multiple of 16, tail */
    test_attention(40, 64, 512, 128 + 512, 4096, 5, -1, 16); /* many rows in slices of 16 */
    test_attention(5, 24, 64, 300, 500, 10, 2);
    test_attention(2, 4, 37, 70, 50, 20);
    test_attention(2, 16, 64, 0, 10, 0);
    test_attention(2, 64, 512, 128 + 512, 4096, 5, -1, 0, true);
    test_attention(2, 64, 512, 128 + 512, 4096, 5, 3, 0, false, true); /* records, a NULL run */
    test_attention(3, 40, 512, 700, 2000, 10, 9, 0, false, true);
    test_attention_mma_invariance(3, 64, 512, 128 + 512, 4096, 20);
    test_attention_mma_invariance(6, 64, 512, 128 + 512, 4096, 20, 0, DI_ATTN_SPLIT_FIXED); /* batch-invariant mode */
    test_attention_mma_invariance(4, 64, 512, 128 + 512, 4096, 20, 64, DI_ATTN_SPLIT_WHOLE); /* wgmma, a CTA a row */
    test_attention_mma_invariance(3, 64, 512, 128 + 512, 4096, 20, 64);             /* the wgmma kernel */
    test_attention_mma_invariance(300, 64, 512, 128 + 512, 4096, 5, 32); /* a grid of 32 heads a block */
    test_attention_mma_invariance(300, 64, 512, 128 + 512, 4096, 5); /* by grid: the wgmma kernel */

    test_mhc(4, 4, 5120);
    test_mhc(64, 4, 512);
    test_mhc(1100, 4, 512); /* two slices of the mix sums' workspace */
    test_mhc(1, 4, 5120);   /* a decode step: 80 chunks of the split sums */
    test_mhc(32, 4, 5120);  /* the most tokens of the fused sublayer input */
    test_mhc(1100, 4, 300); /* two token slices, a partial last chunk */
    test_mhc(70, 3, 65);    /* n d % 4 != 0: x read a value at a time; pre / post too */
    test_mhc(5, 6, 160);    /* n * n > 32: the one-thread Sinkhorn */

    test_index_score(4, 2048, 32, 128);
    test_index_score(2, 333, 32, 128);
    test_topk(4, 8192, 512, 40, 5);
    test_topk(3, 2048, 512, 0, 0);
    test_topk(2, 300, 512, 7, 20);
    test_topk(2, 100000, 1024, 1000, 1);
    test_topk(300, 100000, 1024, 1000, 1); /* staged rows in two groups (the scratch's 64 MB cap) */
    test_topk(70000, 40, 8, 0, 0);         /* more rows than a grid's y (65,535): rows go on x */
    run_topk_quick();
}

int main(int argc, char **argv) {
    if (!cuda_test_device()) return 0;
    if (!di_cuda_ctx_init(&g_ctx)) {
        printf("SKIPPED: no CUDA device\n");
        return 0;
    }

    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "--mhc")) run_mhc();
    else if (!strcmp(mode, "--attn")) run_attn();
    else if (!strcmp(mode, "--topk")) run_topk_quick();
    else if (!strcmp(mode, "--quick")) run_quick();
    else if (!strcmp(mode, "--records")) run_records();
    else run_full();
    di_cuda_ctx_free(&g_ctx);
    printf("%s: %d passed, %d failed\n", g_fail ? "FAIL" : "PASS", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
