/* CPU reference of the activation quantisers (model-spec §2.0 act_quant / fp4_act_quant). They
 * quantise and immediately dequantise, which is what the reference's in-place kernels and its FP8
 * GEMM inputs amount to: every value afterwards is exactly e4m3 (or e2m1) times a scale. */
#include "backend/cpu/cpu_ops.h"

#include <assert.h>

void di_cpu_act_quant_block(const float *x, int n, float *q, float *scale_out) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    amax = fmaxf(amax, 1e-4f);
    float s = di_pow2_ceil(amax * (1.0f / 448.0f));
    for (int i = 0; i < n; i++) q[i] = di_e4m3_rne(di_clampf(x[i] / s, -448.0f, 448.0f));
    *scale_out = s;
}

void di_cpu_act_quant_inplace(float *x, int64_t n, int block) {
    assert(n % block == 0 && block <= 128);
    float q[128], s;
    for (int64_t b = 0; b < n; b += block) {
        di_cpu_act_quant_block(x + b, block, q, &s);
        for (int i = 0; i < block; i++) x[b + i] = di_bf16_round(q[i] * s);
    }
}

float di_cpu_fp4_scale(float amax, di_fp4_scale kind) {
    if (kind == DI_FP4_SCALE_UE8M0) return di_pow2_ceil(fmaxf(amax, 6.0f * 0x1p-126f) * (1.0f / 6.0f));
    return di_e4m3_rne(fminf(fmaxf(amax, 6.0f * 0x1p-9f) / 6.0f, 448.0f)); /* saturating: an e4m3 byte */
}

float di_cpu_fp4_code_value(float x, float s) { return di_e2m1_rne(di_clampf(x / s, -6.0f, 6.0f)); }

bool di_cpu_fp4_block_codes(const float *x, int n, di_fp4_scale kind, float *scale, uint8_t *codes) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    const float s = *scale = di_cpu_fp4_scale(amax, kind);
    if (!isfinite(s)) return false;
    for (int i = 0; i < n; i++) {
        const float q = di_cpu_fp4_code_value(x[i], s); /* di_cpu_fp4_quant_inplace's */
        if (isnan(q)) return false;
        codes[i] = (uint8_t)di_e2m1_encode(q);
    }
    return true;
}

void di_cpu_fp4_quant_inplace(float *x, int64_t n, int block, di_fp4_scale kind) {
    assert(n % block == 0);
    for (int64_t b = 0; b < n; b += block) {
        float amax = 0.0f;
        for (int i = 0; i < block; i++) amax = fmaxf(amax, fabsf(x[b + i]));
        const float s = di_cpu_fp4_scale(amax, kind);
        for (int i = 0; i < block; i++) {
            x[b + i] = di_bf16_round(di_cpu_fp4_code_value(x[b + i], s) * s);
        }
    }
}
