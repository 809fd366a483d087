/* The backend op table: every numerical operation of the V4.1 forward pass, written once against
 * these signatures. The CPU implementation (src/backend/cpu/) is the reference with a fixed
 * reduction order; a CUDA backend implements the same table and is tested op by op against it.
 *
 * Buffers are row-major float arrays. "bf16" in a shape comment means the values are bf16-exact
 * (the CPU reference stores activations as float holding bf16 values; see base/numerics.h). */
#ifndef DI_BACKEND_OPS_H
#define DI_BACKEND_OPS_H

#include <stdbool.h>
#include <stdint.h>
#include "model/safetensors.h"

/* A weight matrix [rows = out, cols = in] as stored in the checkpoint. */
typedef struct di_weight {
    di_dtype dtype;       /* F8_E4M3 (32x32 e8m0 blocks), I8 (FP4 e2m1 packed, 1x32 e8m0), BF16, F32 */
    const void *data;     /* the whole stored matrix */
    const uint8_t *scale; /* e8m0 bytes: [ceil(rows/32), ceil(cols/32)] for FP8, [rows, cols/32] FP4 */
    int64_t rows, cols;   /* of this view */
    int64_t row0;         /* the view's first row in the stored matrix (a row block, e.g. one wo_a
                             group); 0 for whole matrices */
} di_weight;

/* How a linear layer computes, mirroring the reference's four kinds (model-spec §2.0). */
typedef enum di_linear_mode {
    DI_LIN_QUANT,  /* FP8/FP4 weight: act_quant(x, 32, ue8m0) then block-scaled fp32 acc; bf16 out */
    DI_LIN_BF16,   /* bf16 x, bf16 w, fp32 accumulate, bf16 out (F.linear in bf16); an FP8 weight is
                      read as its exact bf16 dequantisation (wo_a, which the reference dequantises) */
    DI_LIN_F32,    /* fp32 x, weight widened to fp32, fp32 out */
} di_linear_mode;

typedef enum di_fp4_scale { DI_FP4_SCALE_UE8M0, DI_FP4_SCALE_E4M3 } di_fp4_scale;

typedef struct di_ops {
    const char *name;
    /* y[M, w.rows] = x[M, w.cols] @ w^T under `mode` */
    void (*linear)(const di_weight *w, const float *x, int64_t m, float *y, di_linear_mode mode);
    /* in place: x := bf16(e4m3(x/s) * s), s = pow2_ceil(amax/448) per `block` values */
    void (*act_quant_inplace)(float *x, int64_t n, int block);
    /* in place FP4 fake quant per `block` values (ue8m0 or e4m3 scale) */
    void (*fp4_quant_inplace)(float *x, int64_t n, int block, di_fp4_scale kind);
    /* y[m, d] = bf16(w * x * rsqrt(mean(x^2) + eps)); w bf16 bits (unaligned ok) */
    void (*rmsnorm)(const float *x, const void *w_bf16, int64_t m, int64_t d, float eps, float *y);
} di_ops;

extern const di_ops di_cpu_ops;

#endif
