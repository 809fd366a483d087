/* Number formats of V4.1 (model-spec §2.0, §5.3), as exact scalar conversions.
 *
 * Convention of the CPU reference: activations live in `float` buffers whose values are exactly
 * representable in bf16 ("bf16-exact"); di_bf16_round() is the rounding point wherever the reference
 * rounds to bf16. Minifloat formats (e4m3, e2m1) are handled as values on their grid: quantising
 * returns the float the code stands for, which is exact in fp32 and in bf16. */
#ifndef DI_BASE_NUMERICS_H
#define DI_BASE_NUMERICS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---- bf16 ---- */
static inline float di_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint16_t di_f32_to_bf16(float f) { /* round to nearest even; NaN stays NaN */
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float di_bf16_round(float f) { return di_bf16_to_f32(di_f32_to_bf16(f)); }
/* Reads a bf16 from a possibly unaligned address (safetensors data need not be aligned). */
static inline float di_bf16_load(const void *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return di_bf16_to_f32(h);
}
static inline float di_f32_load(const void *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}

/* ---- E8M0 scale byte: 2^(b-127); 255 is NaN ---- */
static inline float di_e8m0_to_f32(uint8_t b) {
    if (b == 255) return NAN;
    if (b == 0) return 0x1p-127f;
    uint32_t u = (uint32_t)b << 23; /* exponent field b, mantissa 0: exactly 2^(b-127) */
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- E4M3 (OCP "fn": bias 7, max 448, no inf; 0x7f/0xff are NaN) ---- */
extern float di_e4m3_lut[256];
static inline float di_e4m3_to_f32(uint8_t b) { return di_e4m3_lut[b]; }

/* ---- E2M1 (FP4) code -> value ---- */
extern const float di_e2m1_lut[16];

/* Rounds x to the grid of a minifloat with `mant_bits` mantissa bits and minimum normal exponent
 * `min_exp` (subnormals below it), ties to even. No saturation: callers clamp first. */
static inline float di_minifloat_rne(float x, int mant_bits, int min_exp) {
    if (x == 0.0f || !isfinite(x)) return x;
    int e;
    frexpf(x, &e); /* |x| = m * 2^e, m in [0.5, 1) -> floor(log2|x|) = e - 1 */
    int exp = e - 1;
    if (exp < min_exp) exp = min_exp;
    float quantum = ldexpf(1.0f, exp - mant_bits);
    return rintf(x / quantum) * quantum; /* x/quantum is exact; rintf rounds half to even */
}
static inline float di_e4m3_rne(float x) { return di_minifloat_rne(x, 3, -6); }
static inline float di_e2m1_rne(float x) { return di_minifloat_rne(x, 1, 0); }

/* The kernels' fast_round_scale, from the fp32 bits: 2^(exponent + (mantissa != 0)). For normal v
 * this is the smallest power of two >= v; every positive subnormal gives 2^-126. */
static inline float di_pow2_ceil(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    int e = (int)((u >> 23) & 0xffu) - 127 + ((u & 0x7fffffu) != 0);
    return ldexpf(1.0f, e);
}

static inline float di_clampf(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

/* The code of a value on a grid (its inverse LUT): e2m1 -- sign bit 8, magnitude index 0..7 (di_e2m1_lut);
 * e4m3 -- the byte of a finite value >= 0. -1 where v is not on the grid. */
static inline int di_e2m1_encode(float v) {
    const float a = fabsf(v);
    for (int m = 0; m < 8; m++)
        if (di_e2m1_lut[m] == a) return signbit(v) ? 8 | m : m;
    return -1;
}
static inline int di_e4m3_encode(float v) {
    if (!(v >= 0.0f) || v > 448.0f) return -1;
    int e, b;
    frexpf(v, &e); /* v = f 2^e, f in [0.5, 1): exponent e - 1, field e + 6 */
    if (v < 0x1p-6f) b = (int)(v * 512.0f); /* subnormal: m / 8 * 2^-6 */
    else b = (e + 6) << 3 | (int)(ldexpf(v, 1 - e) * 8.0f - 8.0f);
    return di_e4m3_lut[b] == v && !signbit(v) ? b : -1;
}

/* Initialises the lookup tables (idempotent, thread-safe after the first call returns). */
void di_numerics_init(void);

#endif
