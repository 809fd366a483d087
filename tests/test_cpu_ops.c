/* CPU reference kernels, part 1: activation quantisers, linear layers, RMSNorm, RoPE, MoE routing
 * (src/backend/cpu/cpu_quant.c, cpu_linear.c, cpu_norm_rope.c, cpu_select.c; model-spec §2.0,
 * §2.6, §5.3).
 *
 * Hand-computed cases pin the formulas; random cases compare each kernel with an independent
 * double-precision reference written from the spec (dequantise the weight bytes with a formula of
 * the format, not the project's LUT; quantise activations by a brute-force nearest-grid search).
 * Tolerances are derived where each check is made. Sparse attention and mHC are in
 * test_cpu_attention.c. */
#include "backend/cpu/cpu_ops.h"
#include "test_harness.h"

#include <omp.h>
#include <stdint.h>

/* ---- helpers ---- */

static uint64_t rng_state = 0x243F6A8885A308D3ull;
static uint32_t rng_u32(void) { /* xorshift64*, deterministic */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}
static double rng_unit(void) { return rng_u32() / 4294967296.0; }  /* [0, 1) */
static float rng_sym(void) { return (float)(2.0 * rng_unit() - 1.0); } /* [-1, 1) */

/* A bf16-exact value: uniform in [-1, 1) times 2^e. */
static float rand_bf16(int e) { return di_bf16_round(ldexpf(rng_sym(), e)); }

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* One bf16 ulp at |v| (the spacing of bf16 values in v's binade). */
static double bf16_ulp(double v) {
    int e;
    frexp(fabs(v) > 0x1p-126 ? fabs(v) : 0x1p-126, &e); /* |v| in [2^(e-1), 2^e) */
    return ldexp(1.0, e - 8);
}

/* Independent e4m3fn and e2m1 decoders (bit layouts, in double). */
static double e4m3_val(int b) {
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7) return NAN;
    double mag = e == 0 ? m * ldexp(1.0, -9) : (8 + m) * ldexp(1.0, e - 10);
    return s ? -mag : mag;
}
static double e2m1_val(int c) {
    int s = c >> 3, e = (c >> 1) & 3, m = c & 1;
    double mag = e == 0 ? m * 0.5 : (2 + m) * ldexp(1.0, e - 2);
    return s ? -mag : mag;
}

/* Nearest value of a grid (increasing, indexed by code; parity of the code = parity of the
 * mantissa), ties to the even code; sign by symmetry. */
static double grid_rne(double x, const double *grid, int n) {
    double a = fabs(x);
    int best = 0;
    for (int c = 1; c < n; c++) {
        double d = fabs(grid[c] - a), db = fabs(grid[best] - a);
        if (d < db || (d == db && (c & 1) == 0)) best = c;
    }
    return x < 0 ? -grid[best] : grid[best];
}
static double g_e4m3_grid[127], g_e2m1_grid[8];
static void init_grids(void) {
    for (int c = 0; c < 127; c++) g_e4m3_grid[c] = e4m3_val(c);
    for (int c = 0; c < 8; c++) g_e2m1_grid[c] = e2m1_val(c);
}

/* pow2_ceil from the fp32 bits (spec §2.0): 2^(exponent - 127 + (mantissa != 0)). */
static float pow2_ceil_ref(float v) {
    uint32_t u = f2u(v);
    return (float)ldexp(1.0, (int)((u >> 23) & 0xff) - 127 + ((u & 0x7fffffu) != 0));
}

/* act_quant of one block, from the spec: amax floored at 1e-4, s = pow2_ceil(amax * fp32(1/448)),
 * q = e4m3_RNE(clamp(x / s, +-448)). */
static void act_quant_ref(const float *x, int n, double *q, float *s_out) {
    float amax = 1e-4f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
    float s = pow2_ceil_ref(amax * (1.0f / 448.0f));
    for (int i = 0; i < n; i++) {
        double v = (double)x[i] / s;
        v = v > 448 ? 448 : (v < -448 ? -448 : v);
        q[i] = grid_rne(v, g_e4m3_grid, 127);
    }
    *s_out = s;
}

/* ---- act_quant ---- */

static void test_act_quant_hand(void) {
    float x[32] = {0}, q[32], s;
    /* amax 3: 3/448 = 0.0067 -> s = 2^-7; 1 -> 128, -0.5 -> -64, 3 -> 384,
     * 0.1/2^-7 = 12.8 -> 13 (quantum 1 in [8,16)), 0.0390625/2^-7 = 5 exactly. */
    x[0] = 1.0f, x[1] = -0.5f, x[2] = 3.0f, x[3] = 0.1f, x[4] = 0.0390625f;
    di_cpu_act_quant_block(x, 32, q, &s);
    CHECK(s == 0x1p-7f);
    CHECK(q[0] == 128 && q[1] == -64 && q[2] == 384 && q[3] == 13 && q[4] == 5 && q[5] == 0);
    /* amax floor: values far below 1e-4 use amax = 1e-4: 1e-4/448 = 2.23e-7 -> s = 2^-22;
     * 1e-6 / 2^-22 = 4.19 -> 4 (quantum 0.5 in [4,8)). An all-zero block also gets 2^-22. */
    memset(x, 0, sizeof x);
    x[7] = 1e-6f, x[8] = -3e-7f;
    di_cpu_act_quant_block(x, 32, q, &s);
    CHECK(s == 0x1p-22f);
    CHECK(q[7] == 4.0f && q[8] == -1.25f && q[0] == 0.0f); /* 3e-7/2^-22 = 1.258 -> 1.25 */
    memset(x, 0, sizeof x);
    di_cpu_act_quant_block(x, 32, q, &s);
    CHECK(s == 0x1p-22f && q[0] == 0.0f && q[31] == 0.0f);
    /* amax exactly 448 * 2^k: s = 2^k and the max element is 448 (the largest e4m3, no overflow);
     * negative amax likewise. */
    memset(x, 0, sizeof x);
    x[5] = -896.0f, x[6] = 447.0f, x[9] = 13.5f * 64, x[10] = 12.5f * 64;
    di_cpu_act_quant_block(x, 32, q, &s);
    CHECK(s == 2.0f);
    CHECK(q[5] == -448.0f);
    CHECK(q[6] == 224.0f);           /* 223.5 -> 224 (quantum 16 in [128,256)) */
    CHECK(q[9] == 448.0f);           /* 432 = 13.5 * 32: tie 416 | 448 -> 448 (even) */
    CHECK(q[10] == 384.0f);          /* 400 = 12.5 * 32: tie 384 | 416 -> 384 */
    /* Just above 448 * 2^k: the scale doubles. */
    memset(x, 0, sizeof x);
    x[0] = 449.0f;
    di_cpu_act_quant_block(x, 32, q, &s);
    CHECK(s == 2.0f && q[0] == 224.0f);
    /* Subnormal tie of e4m3: with s = 1 (amax 448), 2^-10 lies between 0 and 2^-9 -> 0. */
    memset(x, 0, sizeof x);
    x[0] = 448.0f, x[1] = 0x1p-10f, x[2] = 3 * 0x1p-10f;
    di_cpu_act_quant_block(x, 32, q, &s);
    CHECK(s == 1.0f && q[1] == 0.0f && q[2] == 2 * 0x1p-9f);
}

/* Saturation: the max element of a block never leaves [-448, 448], including amax just around
 * 448 * 2^k, where amax * fp32(1/448) can round either way. */
static void test_act_quant_saturation(void) {
    int bad = 0;
    for (int k = -20; k <= 20; k++) {
        float base = ldexpf(448.0f, k);
        float a = base;
        for (int step = 0; step < 8; step++, a = nextafterf(a, 0.0f)) {
            float b = base;
            for (int up = 0; up < 8; up++, b = nextafterf(b, INFINITY)) {
                float x[32] = {0}, q[32], s;
                x[3] = a, x[4] = -b;
                di_cpu_act_quant_block(x, 32, q, &s);
                bad += !(fabsf(q[3]) <= 448.0f && fabsf(q[4]) <= 448.0f);
            }
        }
    }
    CHECKF(bad == 0, "%d saturation cases out of range", bad);
}

static void test_act_quant_random(void) {
    int bad_q = 0, bad_s = 0, bad_inplace = 0;
    for (int blk = 0; blk < 4000; blk++) {
        float x[32], q[32], s, s_ref;
        double qr[32];
        int e = (int)(rng_u32() % 40) - 25;
        for (int i = 0; i < 32; i++) x[i] = rand_bf16(e - (int)(rng_u32() % 6));
        if (blk % 7 == 0) x[rng_u32() % 32] = rand_bf16(e + 6); /* an outlier */
        di_cpu_act_quant_block(x, 32, q, &s);
        act_quant_ref(x, 32, qr, &s_ref);
        bad_s += s != s_ref;
        for (int i = 0; i < 32; i++) bad_q += (double)q[i] != qr[i];
        /* In place: x := bf16(q * s), and q * s is already exact in bf16. */
        float xi[32];
        memcpy(xi, x, sizeof x);
        di_cpu_act_quant_inplace(xi, 32, 32);
        for (int i = 0; i < 32; i++) {
            double want = qr[i] * s_ref;
            bad_inplace += (double)xi[i] != want || di_bf16_round(xi[i]) != xi[i];
        }
    }
    CHECKF(bad_s == 0, "%d act_quant scales differ", bad_s);
    CHECKF(bad_q == 0, "%d act_quant values differ", bad_q);
    CHECKF(bad_inplace == 0, "%d in-place act_quant values differ", bad_inplace);
    /* In place over several blocks: each block gets its own scale (block 64 here, as on KV). */
    float x[128];
    for (int i = 0; i < 128; i++) x[i] = rand_bf16(i < 64 ? 8 : -8);
    float y[128];
    memcpy(y, x, sizeof x);
    di_cpu_act_quant_inplace(y, 128, 64);
    int bad = 0;
    for (int b = 0; b < 2; b++) {
        double qr[64];
        float s;
        act_quant_ref(x + 64 * b, 64, qr, &s);
        for (int i = 0; i < 64; i++) bad += (double)y[64 * b + i] != qr[i] * s;
    }
    CHECK(bad == 0);
}

/* ---- fp4_act_quant ---- */

static void fp4_quant_ref(const float *x, int n, di_fp4_scale kind, double *out) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
    float s;
    if (kind == DI_FP4_SCALE_UE8M0) {
        if (amax < 6.0f * 0x1p-126f) amax = 6.0f * 0x1p-126f;
        s = pow2_ceil_ref(amax * (1.0f / 6.0f));
    } else {
        if (amax < 6.0f * 0x1p-9f) amax = 6.0f * 0x1p-9f;
        s = (float)grid_rne((double)(amax / 6.0f), g_e4m3_grid, 127);
    }
    for (int i = 0; i < n; i++) {
        double v = (double)(x[i] / s); /* the spec's fp32 x / s */
        v = v > 6 ? 6 : (v < -6 ? -6 : v);
        out[i] = grid_rne(v, g_e2m1_grid, 8) * s;
    }
}

static void test_fp4_quant_hand(void) {
    /* ue8m0, block 32: amax 6 -> 6 * fp32(1/6) rounds to exactly 1 -> s = 1. Every e2m1 tie. */
    float x[32] = {6, 3, 1.25f, -0.75f, 5, 2.5f, 3.5f, 0.25f, 1.75f, -5.5f, 0.2f};
    di_cpu_fp4_quant_inplace(x, 32, 32, DI_FP4_SCALE_UE8M0);
    const float want[11] = {6, 3, 1, -1, 4, 2, 4, 0, 2, -6, 0};
    for (int i = 0; i < 11; i++) CHECKF(x[i] == want[i], "fp4 ue8m0 [%d] = %g want %g", i, x[i], want[i]);
    /* amax 7: 7/6 -> s = 2; 7/2 = 3.5 -> 4 -> 8 (rounds up past amax); 1 / 2 = 0.5 -> 1. */
    float y[32] = {7, 1, -2.5f};
    di_cpu_fp4_quant_inplace(y, 32, 32, DI_FP4_SCALE_UE8M0);
    CHECK(y[0] == 8 && y[1] == 1 && y[2] == -2); /* -1.25 -> -1 (tie) -> -2 */
    /* ue8m0 floor 6 * 2^-126: an all-zero or subnormal block has s = 2^-126. */
    float z[32] = {0x1p-130f, -0x1p-127f};
    di_cpu_fp4_quant_inplace(z, 32, 32, DI_FP4_SCALE_UE8M0);
    CHECK(z[0] == 0.0f && z[1] == -0x1p-127f); /* 2^-4 -> 0; 0.5 -> 0.5 */
    /* e4m3 scale, block 16: amax 7 -> 7/6 = 1.1667 -> e4m3 1.125 (not a power of two).
     * 7/1.125 = 6.22 -> clamp 6 -> 6.75; 3/1.125 = 2.67 -> 3 -> 3.375; -1 -> -0.889 -> -1 ->
     * -1.125; 0.3 -> 0.267 -> 0.5 -> 0.5625. */
    float w[32] = {7, 3, -1, 0.3f};
    w[16] = 6.0f, w[17] = 0.75f; /* second block: s = e4m3(1) = 1; 0.75 -> 1 (tie, even) */
    di_cpu_fp4_quant_inplace(w, 32, 16, DI_FP4_SCALE_E4M3);
    CHECK(w[0] == 6.75f && w[1] == 3.375f && w[2] == -1.125f && w[3] == 0.5625f);
    CHECK(w[16] == 6.0f && w[17] == 1.0f);
    /* e4m3 floor 6 * 2^-9: s = 2^-9 (the smallest e4m3 subnormal); 2^-9 -> 1 -> 2^-9. */
    float t[16] = {0x1p-9f, 0x1p-12f, 0};
    di_cpu_fp4_quant_inplace(t, 16, 16, DI_FP4_SCALE_E4M3);
    CHECK(t[0] == 0x1p-9f && t[1] == 0.0f && t[2] == 0.0f); /* 2^-12 / 2^-9 = 0.125 -> 0 */
}

static void test_fp4_quant_random(void) {
    int bad[2] = {0, 0};
    for (int kind = 0; kind < 2; kind++) {
        int block = kind == DI_FP4_SCALE_UE8M0 ? 32 : 16;
        for (int it = 0; it < 3000; it++) {
            float x[32], y[32];
            double want[32];
            /* e4m3 scales: amax/6 kept within the e4m3 range here (see test_fp4_e4m3_scale_range) */
            int e = kind == DI_FP4_SCALE_UE8M0 ? (int)(rng_u32() % 30) - 15 : (int)(rng_u32() % 24) - 15;
            for (int i = 0; i < block; i++) x[i] = rand_bf16(e - (int)(rng_u32() % 4));
            memcpy(y, x, sizeof x);
            di_cpu_fp4_quant_inplace(y, block, block, (di_fp4_scale)kind);
            fp4_quant_ref(x, block, (di_fp4_scale)kind, want);
            for (int i = 0; i < block; i++) bad[kind] += (double)y[i] != want[i] || di_bf16_round(y[i]) != y[i];
        }
    }
    CHECKF(bad[0] == 0, "%d fp4 (ue8m0) values differ", bad[0]);
    CHECKF(bad[1] == 0, "%d fp4 (e4m3 scale) values differ", bad[1]);
}

/* The e4m3 scale of the FP4 KV cache is stored as an e4m3 byte (288 B per entry, §3.1), so it
 * must be an e4m3 value: for amax / 6 beyond 448 the rounding has to saturate at 448 (Appendix A:
 * "e4m3 RNE (saturating)"; the CUDA cast with SATFINITE does the same), and x / s is then clamped
 * to +-6 as usual. amax = 6000: s = 448, 6000 / 448 = 13.4 -> 6 -> 2688; amax = 2820: amax / 6 =
 * 470 would round to 480, which e4m3 does not have (0x7f is NaN) -> s = 448, 2820 -> 2688. */
static void test_fp4_e4m3_scale_range(void) {
    float x[16] = {6000.0f, 448.0f};
    di_cpu_fp4_quant_inplace(x, 16, 16, DI_FP4_SCALE_E4M3);
    CHECKF(x[0] == 2688.0f && x[1] == 448.0f, "amax 6000: got %g %g, want 2688 448 (scale 448)", x[0], x[1]);
    float y[16] = {-2820.0f};
    di_cpu_fp4_quant_inplace(y, 16, 16, DI_FP4_SCALE_E4M3);
    CHECKF(y[0] == -2688.0f, "amax 2820: got %g, want -2688 (scale 448)", y[0]);
    /* In range, right at the top: amax 2688 -> s = 448 exactly. */
    float z[16] = {2688.0f, 1.0f};
    di_cpu_fp4_quant_inplace(z, 16, 16, DI_FP4_SCALE_E4M3);
    CHECK(z[0] == 2688.0f && z[1] == 0.0f);
}

/* ---- linear ---- */

typedef struct {
    di_weight w;
    uint8_t *data, *scale;
} test_weight;

/* FP8 [N, K] with 32x32 scales [ceil(N/32), K/32]; FP4 [N, K/2] packed with scales [N, K/32].
 * Scale bytes near 127 (2^-8 .. 2^4) so that products stay normal. */
static test_weight make_quant_weight(di_dtype dt, int64_t N, int64_t K) {
    test_weight t;
    int64_t nbytes = dt == DI_DT_F8_E4M3 ? N * K : N * K / 2;
    int64_t nscale = dt == DI_DT_F8_E4M3 ? ((N + 31) / 32) * (K / 32) : N * (K / 32);
    t.data = malloc((size_t)nbytes);
    t.scale = malloc((size_t)nscale);
    for (int64_t i = 0; i < nbytes; i++) {
        uint8_t b = (uint8_t)rng_u32();
        if (dt == DI_DT_F8_E4M3 && (b & 0x7f) == 0x7f) b = 0x7e; /* no NaN codes */
        t.data[i] = b;
    }
    for (int64_t i = 0; i < nscale; i++) t.scale[i] = (uint8_t)(119 + rng_u32() % 12);
    t.w = (di_weight){.dtype = dt, .data = t.data, .scale = t.scale, .rows = N, .cols = K};
    return t;
}
static void free_weight(test_weight *t) {
    free(t->data);
    free(t->scale);
}

/* Dequantised weight (n, k) from the bytes, by the formulas of §5.3. */
static double wdeq(const test_weight *t, int64_t n, int64_t k) {
    const int64_t K = t->w.cols;
    if (t->w.dtype == DI_DT_F8_E4M3)
        return e4m3_val(t->data[n * K + k]) * ldexp(1.0, t->scale[(n / 32) * (K / 32) + k / 32] - 127);
    uint8_t byte = t->data[n * (K / 2) + k / 2];
    int code = (k % 2 == 0) ? (byte & 15) : (byte >> 4); /* low nibble = even element */
    return e2m1_val(code) * ldexp(1.0, t->scale[n * (K / 32) + k / 32] - 127);
}

/* Random activations [m, K]: bf16 values, each 32-block with its own magnitude. */
static float *rand_acts(int64_t m, int64_t K) {
    float *x = malloc(sizeof(float) * (size_t)(m * K));
    for (int64_t i = 0; i < m * K; i += 32) {
        int e = (int)(rng_u32() % 12) - 6;
        for (int j = 0; j < 32; j++) x[i + j] = rand_bf16(e - (int)(rng_u32() % 3));
    }
    return x;
}

/* Quantised linear vs the double reference dequantise-then-matmul.
 *
 * The kernel quantises its input, so the reference uses the same quantised activations (checked
 * bit for bit against act_quant_ref). Then: each product xq*wq has <= 8 significant bits and the
 * 32 products of a block span < 2^40, so the block sum is exact in double, and the kernel's only
 * roundings are (a) each block sum to fp32, (b) the fp32 accumulation over K/32 blocks (scales are
 * powers of two: exact), (c) the final bf16. With S = sum |xq xs w| the fp32 error is at most
 * (nb + 1) * 2^-24 * S, and bf16 adds at most half an ulp; we allow
 *     |y - y_ref| <= (nb + 1) * 2^-24 * S + 1 ulp_bf16(|y_ref|),
 * i.e. one bf16 ulp wherever there is no heavy cancellation. We also require bit equality with
 * an emulation of the spec's order (block sum, scale, fp32 accumulate in K order, bf16): since
 * the block sums are exact, that result does not depend on the open order inside a block (Q5). */
static void check_quant_linear(di_dtype dt, int64_t N, int64_t K, int64_t m, const char *name) {
    test_weight t = make_quant_weight(dt, N, K);
    float *x = rand_acts(m, K);
    float *y = malloc(sizeof(float) * (size_t)(m * N));
    di_cpu_linear(&t.w, x, m, y, DI_LIN_QUANT);
    const int64_t nb = K / 32;
    double *xq = malloc(sizeof(double) * (size_t)(m * K)); /* [m, K] xq * xs, exact */
    float *xs = malloc(sizeof(float) * (size_t)(m * nb));  /* [m, nb] */
    int bad_aq = 0;
    for (int64_t r = 0; r < m; r++)
        for (int64_t b = 0; b < nb; b++) {
            float q[32], s;
            act_quant_ref(x + r * K + b * 32, 32, xq + r * K + b * 32, xs + r * nb + b);
            di_cpu_act_quant_block(x + r * K + b * 32, 32, q, &s);
            bad_aq += s != xs[r * nb + b];
            for (int k = 0; k < 32; k++) bad_aq += (double)q[k] != xq[r * K + b * 32 + k];
        }
    CHECKF(bad_aq == 0, "%s: %d act_quant values differ from the reference", name, bad_aq);
    int bad_tol = 0, bad_emul = 0, exact = 0;
    double worst_ulps = 0.0;
    for (int64_t r = 0; r < m; r++)
        for (int64_t n = 0; n < N; n++) {
            double ref = 0.0, S = 0.0;
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                double bs = 0.0;
                for (int k = 0; k < 32; k++) {
                    int64_t kk = b * 32 + k;
                    double w = wdeq(&t, n, kk);
                    double term = xq[r * K + kk] * xs[r * nb + b] * w;
                    ref += term;
                    S += fabs(term);
                    bs += xq[r * K + kk] * w; /* w includes its power-of-two scale: same fp32 */
                }
                acc += (float)bs * xs[r * nb + b];
            }
            float got = y[r * N + n];
            double tol = (double)(nb + 1) * 0x1p-24 * S + bf16_ulp(ref);
            if (fabs(got - ref) > tol) {
                if (bad_tol++ < 5) fprintf(stderr, "%s [%ld,%ld]: %.9g vs %.9g\n", name, (long)r, (long)n, got, ref);
            }
            double u = fabs(got - ref) / bf16_ulp(ref);
            if (u > worst_ulps) worst_ulps = u;
            exact += got == di_bf16_round((float)ref);
            bad_emul += f2u(got) != f2u(di_bf16_round(acc));
        }
    CHECKF(bad_tol == 0, "%s: %d outputs beyond tolerance", name, bad_tol);
    CHECKF(bad_emul == 0, "%s: %d outputs differ from the spec-order emulation", name, bad_emul);
    printf("%s [%ld x %ld, m=%ld]: %d/%ld outputs equal bf16(exact), worst %.2f bf16 ulp\n", name,
           (long)N, (long)K, (long)m, exact, (long)(m * N), worst_ulps);
    free(xq);
    free(xs);
    free(x);
    free(y);
    free_weight(&t);
}

/* Per-32 block-scaled emulation used above folds the weight scale into w; to make sure the
 * weight scale indexing itself is right, decode single columns through the kernel: with x = e_k
 * the block of k quantises to q = 256, s = 2^-8 (exact 1.0), every other block to 0, so
 * y[n] = bf16(W[n, k]) = W[n, k] exactly (e4m3/e2m1 times a power of two fits in bf16). The
 * Appendix A probe bytes sit in row 0 (see test_numerics.c for their derivation). */
static void check_one_hot_decode(di_dtype dt, int64_t N, int64_t K) {
    test_weight t = make_quant_weight(dt, N, K);
    if (dt == DI_DT_F8_E4M3) {
        const uint8_t probe[4] = {0xd8, 0x71, 0xf2, 0x79}; /* wkv row 0, scale 0x73 */
        memcpy(t.data, probe, 4);
        t.scale[0] = 0x73;
    } else {
        const uint8_t probe[3] = {0xa0, 0xa0, 0x0c}; /* expert 0 w1 row 0, scale 0x78 */
        memcpy(t.data, probe, 3);
        t.scale[0] = 0x78;
    }
    float *x = calloc((size_t)K, sizeof(float));
    float *y = malloc(sizeof(float) * (size_t)N);
    int bad = 0;
    for (int64_t k = 0; k < K; k++) {
        x[k] = 1.0f;
        di_cpu_linear(&t.w, x, 1, y, DI_LIN_QUANT);
        x[k] = 0.0f;
        for (int64_t n = 0; n < N; n++) bad += (double)y[n] != wdeq(&t, n, k);
        if (k < 5) {
            static const float fp8_want[4] = {-0.00390625f, 0.03515625f, -0.0390625f, 0.0703125f};
            static const float fp4_want[5] = {0.0f, -0.0078125f, 0.0f, -0.0078125f, -0.015625f};
            if (dt == DI_DT_F8_E4M3 && k < 4) CHECKF(y[0] == fp8_want[k], "fp8 probe %ld: %g", (long)k, y[0]);
            if (dt == DI_DT_I8) CHECKF(y[0] == fp4_want[k], "fp4 probe %ld: %g", (long)k, y[0]);
        }
    }
    CHECKF(bad == 0, "%s one-hot decode: %d weights differ", dt == DI_DT_F8_E4M3 ? "fp8" : "fp4", bad);
    free(x);
    free(y);
    free_weight(&t);
}

/* BF16 and F32 linear. With bf16 weights and inputs in [2^-8, 1) in magnitude the products are
 * exact in double and span < 2^18, so the double sum of K = 256 of them is exact: the kernel
 * must return exactly bf16(fp32(exact)) (BF16 mode) or fp32(exact) (F32 mode). With full fp32
 * weights the double sum carries ~K * 2^-53 relative error: allow 1 fp32 ulp. */
static void test_plain_linear(void) {
    const int64_t N = 48, K = 256, m = 3;
    uint16_t *wb = malloc(2 * (size_t)(N * K));
    float *wf = malloc(4 * (size_t)(N * K));
    float *x = malloc(4 * (size_t)(m * K));
    float *y = malloc(4 * (size_t)(m * N));
    for (int64_t i = 0; i < N * K; i++) {
        float v = rng_sym();
        v = copysignf(fmaxf(fabsf(v), 0x1p-8f), v);
        wb[i] = di_f32_to_bf16(v);
        wf[i] = rng_sym() * 3.0f;
    }
    for (int64_t i = 0; i < m * K; i++) {
        float v = rng_sym();
        x[i] = di_bf16_round(copysignf(fmaxf(fabsf(v), 0x1p-8f), v));
    }
    di_weight wbf = {.dtype = DI_DT_BF16, .data = wb, .rows = N, .cols = K};
    di_weight wf32 = {.dtype = DI_DT_F32, .data = wf, .rows = N, .cols = K};
    int bad_bf16 = 0, bad_widen = 0, bad_f32 = 0;
    di_cpu_linear(&wbf, x, m, y, DI_LIN_BF16);
    for (int64_t r = 0; r < m; r++)
        for (int64_t n = 0; n < N; n++) {
            double ref = 0.0;
            for (int64_t k = 0; k < K; k++) ref += (double)x[r * K + k] * di_bf16_to_f32(wb[n * K + k]);
            bad_bf16 += y[r * N + n] != di_bf16_round((float)ref);
        }
    di_cpu_linear(&wbf, x, m, y, DI_LIN_F32); /* bf16 weight widened, fp32 out */
    for (int64_t r = 0; r < m; r++)
        for (int64_t n = 0; n < N; n++) {
            double ref = 0.0;
            for (int64_t k = 0; k < K; k++) ref += (double)x[r * K + k] * di_bf16_to_f32(wb[n * K + k]);
            bad_widen += y[r * N + n] != (float)ref;
        }
    di_cpu_linear(&wf32, x, m, y, DI_LIN_F32);
    for (int64_t r = 0; r < m; r++)
        for (int64_t n = 0; n < N; n++) {
            double ref = 0.0;
            for (int64_t k = 0; k < K; k++) ref += (double)x[r * K + k] * wf[n * K + k];
            float f = (float)ref;
            bad_f32 += fabsf(y[r * N + n] - f) > nextafterf(fabsf(f), INFINITY) - fabsf(f);
        }
    CHECKF(bad_bf16 == 0, "%d bf16 linear outputs differ", bad_bf16);
    CHECKF(bad_widen == 0, "%d widened-bf16 f32 linear outputs differ", bad_widen);
    CHECKF(bad_f32 == 0, "%d f32 linear outputs differ", bad_f32);
    /* A hand case: [1, 2] . [0.5, -0.25] = 0; [3, 1] . [0.5, -0.25] = 1.25. */
    uint16_t w2[2] = {di_f32_to_bf16(0.5f), di_f32_to_bf16(-0.25f)};
    float x2[4] = {1, 2, 3, 1}, y2[2];
    di_weight wh = {.dtype = DI_DT_BF16, .data = w2, .rows = 1, .cols = 2};
    di_cpu_linear(&wh, x2, 2, y2, DI_LIN_BF16);
    CHECK(y2[0] == 0.0f && y2[1] == 1.25f);
    free(wb);
    free(wf);
    free(x);
    free(y);
}

/* Results must not depend on the thread count (threads split output columns only). The sizes are
 * above the kernels' parallel threshold (N * K * m > 65536). */
static void test_thread_invariance(void) {
    const int64_t N = 256, K = 512, m = 4;
    float *x = rand_acts(m, K);
    float *y1 = malloc(4 * (size_t)(m * N)), *y2 = malloc(4 * (size_t)(m * N));
    int saved = omp_get_max_threads();
    static const di_dtype dts[3] = {DI_DT_F8_E4M3, DI_DT_I8, DI_DT_BF16};
    for (int i = 0; i < 3; i++) {
        test_weight t;
        uint16_t *wb = NULL;
        if (dts[i] == DI_DT_BF16) {
            wb = malloc(2 * (size_t)(N * K));
            for (int64_t j = 0; j < N * K; j++) wb[j] = di_f32_to_bf16(rng_sym());
            t.data = t.scale = NULL;
            t.w = (di_weight){.dtype = DI_DT_BF16, .data = wb, .rows = N, .cols = K};
        } else {
            t = make_quant_weight(dts[i], N, K);
        }
        di_linear_mode mode = dts[i] == DI_DT_BF16 ? DI_LIN_BF16 : DI_LIN_QUANT;
        omp_set_num_threads(1);
        di_cpu_linear(&t.w, x, m, y1, mode);
        omp_set_num_threads(2);
        CHECK(omp_get_max_threads() == 2);
        di_cpu_linear(&t.w, x, m, y2, mode);
        CHECKF(memcmp(y1, y2, 4 * (size_t)(m * N)) == 0, "linear dtype %d: 1 vs 2 threads differ", (int)dts[i]);
        omp_set_num_threads(3); /* an uneven split too */
        di_cpu_linear(&t.w, x, m, y2, mode);
        CHECKF(memcmp(y1, y2, 4 * (size_t)(m * N)) == 0, "linear dtype %d: 1 vs 3 threads differ", (int)dts[i]);
        if (wb) free(wb);
        else free_weight(&t);
    }
    omp_set_num_threads(saved);
    free(x);
    free(y1);
    free(y2);
}

/* ---- RMSNorm ---- */

/* Reference in double: y = w * x / sqrt(mean(x^2) + eps). The kernel rounds mean, sqrt, the
 * reciprocal and two products in fp32 (about 5 * 2^-24 relative), then to bf16: allow half a bf16
 * ulp plus 2^-20 relative; nearly all outputs are exactly bf16(reference). */
static void test_rmsnorm(void) {
    const int64_t m = 5, d = 512;
    float *x = malloc(4 * (size_t)(m * d)), *y = malloc(4 * (size_t)(m * d));
    uint16_t *w = malloc(2 * (size_t)d);
    for (int64_t i = 0; i < d; i++) w[i] = di_f32_to_bf16(rng_sym() * 2.0f);
    for (int64_t r = 0; r < m; r++)
        for (int64_t i = 0; i < d; i++) x[r * d + i] = rand_bf16((int)r * 3 - 6);
    di_cpu_rmsnorm(x, w, m, d, 1e-20f, y);
    int bad = 0, exact = 0;
    for (int64_t r = 0; r < m; r++) {
        double ss = 0.0;
        for (int64_t i = 0; i < d; i++) ss += (double)x[r * d + i] * x[r * d + i];
        double inv = 1.0 / sqrt(ss / d + 1e-20);
        for (int64_t i = 0; i < d; i++) {
            double ref = di_bf16_to_f32(w[i]) * (x[r * d + i] * inv);
            double got = y[r * d + i];
            bad += fabs(got - ref) > bf16_ulp(ref) / 2 + fabs(ref) * 0x1p-20;
            exact += got == di_bf16_round((float)ref);
        }
    }
    CHECKF(bad == 0, "%d rmsnorm outputs beyond tolerance", bad);
    printf("rmsnorm: %d/%ld outputs equal bf16(exact)\n", exact, (long)(m * d));
    /* Hand cases: x = [2, -2, 2, -2] -> rms 2 -> y = w * [1, -1, 1, -1]; a zero row stays 0
     * (eps keeps rsqrt finite); unaligned weight pointer. */
    float xh[8] = {2, -2, 2, -2, 0, 0, 0, 0}, yh[8];
    unsigned char wbytes[9];
    uint16_t wh[4] = {di_f32_to_bf16(0.5f), di_f32_to_bf16(3.0f), di_f32_to_bf16(-1.0f), di_f32_to_bf16(1.0f)};
    memcpy(wbytes + 1, wh, 8);
    di_cpu_rmsnorm(xh, wbytes + 1, 2, 4, 1e-20f, yh);
    CHECK(yh[0] == 0.5f && yh[1] == -3.0f && yh[2] == -1.0f && yh[3] == -1.0f);
    CHECK(yh[4] == 0.0f && yh[5] == 0.0f && yh[6] == 0.0f && yh[7] == 0.0f);
    /* x = [3, 4]: mean 12.5, y = [3, 4] / sqrt(12.5) = [0.8485, 1.1314] -> bf16 */
    float x34[2] = {3, 4}, y34[2];
    uint16_t w1[2] = {0x3f80, 0x3f80};
    di_cpu_rmsnorm(x34, w1, 1, 2, 1e-20f, y34);
    CHECK(y34[0] == di_bf16_round((float)(3 / sqrt(12.5))) && y34[1] == di_bf16_round((float)(4 / sqrt(12.5))));
    free(x);
    free(y);
    free(w);
}

/* ---- RoPE ---- */

static void test_rope(void) {
    /* Hand case: interleaved pairs (x0, x1), (x2, x3); angle 90 deg (cos 0, sin 1) maps (a, b) to
     * (-b, a); cos 0.6 sin 0.8 maps (1, 0) to (0.6, 0.8) rounded to bf16. Only rot_dim values
     * from `offset` change. */
    float v[8] = {9, 9, 1, 2, 1, 0, 7, 7};
    float cs[2] = {0.0f, 0.6f}, sn[2] = {1.0f, 0.8f};
    di_cpu_rope(v, 1, 8, 2, 4, cs, sn, false);
    CHECK(v[0] == 9 && v[1] == 9 && v[6] == 7 && v[7] == 7);
    CHECK(v[2] == -2 && v[3] == 1);
    CHECK(v[4] == di_bf16_round(0.6f) && v[5] == di_bf16_round(0.8f));
    di_cpu_rope(v, 1, 8, 2, 4, cs, sn, true); /* inverse of 90 deg is exact */
    CHECK(v[2] == 1 && v[3] == 2);
    /* Random: several vectors with a stride, forward then inverse. Each bf16 rounding moves a
     * component by <= 2^-8 |component| <= 2^-8 r (r = the pair's norm); the forward's two errors
     * (norm <= 2^-8 * sqrt2 * r) survive the exact inverse rotation, the inverse adds <= 2^-8 r per
     * component, fp32 rounding is far below: |x' - x| <= (sqrt2 + 1) * 2^-8 * r < 2^-6.6 r. */
    const int64_t nv = 6, stride = 80, off = 16;
    const int rd = 64;
    float *x = malloc(4 * (size_t)(nv * stride)), *x0 = malloc(4 * (size_t)(nv * stride));
    float c[32], s[32];
    for (int i = 0; i < 32; i++) {
        double th = 37.0 * pow(10000.0, -2.0 * i / rd);
        c[i] = (float)cos(th);
        s[i] = (float)sin(th);
    }
    for (int64_t i = 0; i < nv * stride; i++) x[i] = x0[i] = rand_bf16(2);
    di_cpu_rope(x, nv, stride, off, rd, c, s, false);
    int bad_fwd = 0, bad_rt = 0, untouched = 1;
    for (int64_t v2 = 0; v2 < nv; v2++)
        for (int i = 0; i < rd / 2; i++) {
            const float *p0 = x0 + v2 * stride + off + 2 * i;
            const float *p = x + v2 * stride + off + 2 * i;
            double a = p0[0] * (double)c[i] - p0[1] * (double)s[i];
            double b = p0[0] * (double)s[i] + p0[1] * (double)c[i];
            bad_fwd += fabs(p[0] - a) > bf16_ulp(a) / 2 + 1e-6 * fabs(a);
            bad_fwd += fabs(p[1] - b) > bf16_ulp(b) / 2 + 1e-6 * fabs(b);
            bad_fwd += di_bf16_round(p[0]) != p[0] || di_bf16_round(p[1]) != p[1];
        }
    di_cpu_rope(x, nv, stride, off, rd, c, s, true);
    for (int64_t v2 = 0; v2 < nv; v2++) {
        for (int64_t i = 0; i < stride; i++) {
            int64_t j = v2 * stride + i;
            if (i < off || i >= off + rd) untouched &= x[j] == x0[j];
        }
        for (int i = 0; i < rd / 2; i++) {
            int64_t j = v2 * stride + off + 2 * i;
            double r = hypot(x0[j], x0[j + 1]);
            bad_rt += hypot(x[j] - x0[j], x[j + 1] - x0[j + 1]) > 2.5 * 0x1p-8 * r;
        }
    }
    CHECKF(bad_fwd == 0, "%d rope outputs differ from the rotation", bad_fwd);
    CHECKF(bad_rt == 0, "%d rope round trips beyond tolerance", bad_rt);
    CHECK(untouched);
    free(x);
    free(x0);
}

static void test_ops_table(void) {
    CHECK(di_cpu_ops.linear == di_cpu_linear);
    CHECK(di_cpu_ops.act_quant_inplace == di_cpu_act_quant_inplace);
    CHECK(di_cpu_ops.fp4_quant_inplace == di_cpu_fp4_quant_inplace);
    CHECK(di_cpu_ops.rmsnorm == di_cpu_rmsnorm);
}

/* MoE routing (di_cpu_moe_route, model-spec §2.6): sqrt(softplus) scores, selection on score +
 * bias with the lower expert on exact ties, weights from the unbiased scores, the z > 20 branch */
static void test_moe_route(void) {
    int32_t ex[4];
    float w[4];
    { /* experts 1 and 2 tie exactly; 3 has the largest score but a bias that excludes it */
        const float z[4] = {0.0f, 1.0f, 1.0f, 25.0f}, b[4] = {0.0f, 0.0f, 0.0f, -100.0f};
        di_cpu_moe_route(z, b, 4, 2, 1.5f, ex, w);
        CHECK(ex[0] == 1 && ex[1] == 2);
        CHECK(w[0] == 0.75f && w[1] == 0.75f); /* s / (2 s) * 1.5, exact */
    }
    { /* softplus(z) = z above 20: one expert takes the whole (scaled) weight */
        const float z[3] = {21.0f, 0.0f, 0.0f}, b[3] = {0.0f, 0.0f, 0.0f};
        di_cpu_moe_route(z, b, 3, 1, 1.0f, ex, w);
        CHECK(ex[0] == 0 && w[0] == 1.0f);
    }
    { /* the bias picks expert 2 first; the weights use the unbiased scores, in selection order */
        const float z[3] = {2.0f, 0.0f, -2.0f}, b[3] = {0.0f, 0.0f, 5.0f};
        di_cpu_moe_route(z, b, 3, 2, 1.0f, ex, w);
        const double s0 = sqrt(log1p(exp(2.0))), s2 = sqrt(log1p(exp(-2.0)));
        CHECK(ex[0] == 2 && ex[1] == 0);
        CHECKF(fabs(w[0] - s2 / (s0 + s2)) < 1e-6 && fabs(w[1] - s0 / (s0 + s2)) < 1e-6, "weights %g %g", w[0], w[1]);
    }
}

int main(void) {
    init_grids();
    test_act_quant_hand();
    test_act_quant_saturation();
    test_act_quant_random();
    test_fp4_quant_hand();
    test_fp4_quant_random();
    test_fp4_e4m3_scale_range();
    check_one_hot_decode(DI_DT_F8_E4M3, 70, 96);
    check_one_hot_decode(DI_DT_I8, 40, 96);
    check_quant_linear(DI_DT_F8_E4M3, 80, 512, 3, "fp8 linear");
    check_quant_linear(DI_DT_F8_E4M3, 32, 32, 1, "fp8 linear (one block)");
    check_quant_linear(DI_DT_I8, 72, 512, 3, "fp4 linear");
    test_plain_linear();
    test_thread_invariance();
    test_rmsnorm();
    test_rope();
    test_ops_table();
    test_moe_route();
    return TEST_SUMMARY();
}
