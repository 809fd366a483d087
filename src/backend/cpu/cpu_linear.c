/* CPU reference linear layers (model-spec §2.0 "Linear layers").
 *
 * Quantised weights (FP8 32x32 blocks, FP4 with 1x32 scales): the input row is act_quant'ed per 32,
 * then for each output one fp32 accumulator takes the 32-wide block sums in K order:
 *   acc += (sum_{k in b} xq[k] * wq[n,k]) * xs[b] * ws[n,b]          y = bf16(acc)
 * BF16 weights: fp32 accumulation, bf16 output. F32 mode: fp32 input and output. */
#include <assert.h>
#include <stdlib.h>

#include "backend/cpu/cpu_ops.h"

/* Weight value (n, k) of a quantised matrix, without its scale. */
static inline float wq_at(const di_weight *w, int64_t n, int64_t k) {
    const uint8_t *d = w->data;
    n += w->row0;
    if (w->dtype == DI_DT_F8_E4M3) return di_e4m3_to_f32(d[n * w->cols + k]);
    uint8_t byte = d[n * (w->cols / 2) + k / 2];
    return di_e2m1_lut[(k & 1) ? (byte >> 4) : (byte & 15)];
}

static inline float wscale_at(const di_weight *w, int64_t n, int64_t kb) {
    n += w->row0;
    if (w->dtype == DI_DT_F8_E4M3) {
        int64_t scale_cols = (w->cols + 31) / 32;
        return di_e8m0_to_f32(w->scale[(n / 32) * scale_cols + kb]);
    }
    return di_e8m0_to_f32(w->scale[n * (w->cols / 32) + kb]);
}

static inline float weight_plain_at(const di_weight *w, int64_t n, int64_t k) {
    const uint8_t *d = w->data;
    if (w->dtype == DI_DT_F8_E4M3) return wq_at(w, n, k) * wscale_at(w, n, k / 32); /* exact in bf16 */
    n += w->row0;
    if (w->dtype == DI_DT_BF16) return di_bf16_load(d + 2 * (n * w->cols + k));
    return di_f32_load(d + 4 * (n * w->cols + k));
}

static void linear_quant(const di_weight *w, const float *x, int64_t m, float *y) {
    const int64_t K = w->cols, N = w->rows, nb = K / 32;
    assert(K % 32 == 0);
    float *xq = malloc(sizeof(float) * (size_t)(m * K)); /* [m, K] e4m3 grid values */
    float *xs = malloc(sizeof(float) * (size_t)(m * nb)); /* [m, K/32] power-of-two scales */
    for (int64_t r = 0; r < m; r++)
        for (int64_t b = 0; b < nb; b++)
            di_cpu_act_quant_block(x + r * K + b * 32, 32, xq + r * K + b * 32, xs + r * nb + b);
#pragma omp parallel if (N * K * m > DI_CPU_PARALLEL_MIN_WORK)
    {
        float *acc = malloc(sizeof(float) * (size_t)m); /* [m] fp32 accumulators of output n */
#pragma omp for schedule(static)
        for (int64_t n = 0; n < N; n++) {
            for (int64_t r = 0; r < m; r++) acc[r] = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                float wrow[32]; /* weight block (n, b) on the e4m3 / e2m1 grid */
                for (int k = 0; k < 32; k++) wrow[k] = wq_at(w, n, b * 32 + k);
                const float ws = wscale_at(w, n, b);
                for (int64_t r = 0; r < m; r++) {
                    const float *xr = xq + r * K + b * 32;
                    double bs = 0.0;
                    for (int k = 0; k < 32; k++) bs += (double)xr[k] * wrow[k];
                    acc[r] += (float)bs * xs[r * nb + b] * ws;
                }
            }
            for (int64_t r = 0; r < m; r++) y[r * N + n] = di_bf16_round(acc[r]);
        }
        free(acc);
    }
    free(xq);
    free(xs);
}

static void linear_plain(const di_weight *w, const float *x, int64_t m, float *y, bool bf16_out) {
    const int64_t K = w->cols, N = w->rows;
#pragma omp parallel for schedule(static) if (N * K * m > DI_CPU_PARALLEL_MIN_WORK)
    for (int64_t n = 0; n < N; n++) {
        for (int64_t r = 0; r < m; r++) {
            double acc = 0.0;
            for (int64_t k = 0; k < K; k++) acc += (double)x[r * K + k] * weight_plain_at(w, n, k);
            y[r * N + n] = bf16_out ? di_bf16_round((float)acc) : (float)acc;
        }
    }
}

void di_cpu_linear(const di_weight *w, const float *x, int64_t m, float *y, di_linear_mode mode) {
    switch (mode) {
    case DI_LIN_QUANT:
        assert(w->dtype == DI_DT_F8_E4M3 || w->dtype == DI_DT_I8);
        linear_quant(w, x, m, y);
        return;
    case DI_LIN_BF16:
        assert(w->dtype == DI_DT_BF16 || w->dtype == DI_DT_F8_E4M3);
        linear_plain(w, x, m, y, true);
        return;
    case DI_LIN_F32:
        assert(w->dtype == DI_DT_BF16 || w->dtype == DI_DT_F32);
        linear_plain(w, x, m, y, false);
        return;
    }
}
