/* Number formats (src/base/numerics.h, model-spec §2.0, §5.3, Appendix A).
 *
 * Every decoder is checked against an independent statement of the format: E8M0 and E4M3 over all
 * 256 bytes from a formula evaluated in double (not the LUT builder's float code), E2M1 against the
 * spec's table. Every rounder is checked against a brute-force "nearest grid value, ties to the even
 * code" search over the decoded grid, on every midpoint of the grid (the ties) and on points just
 * either side of them, plus the specific ties the spec lists. bf16 RNE is checked against a
 * nearest-of-two-neighbours search in double on every tie pattern and on pseudo-random bit patterns.
 * pow2_ceil is checked against its definition from the fp32 bits (exponent + (mantissa != 0)).
 * The Appendix A byte probes refer to the real checkpoint, which we do not have; see test_probes. */
#include "base/numerics.h"
#include "test_harness.h"

#include <float.h>
#include <stdint.h>

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float u2f(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* Bitwise float equality (distinguishes -0 from +0; NaNs compared by isnan by callers). */
static int same_bits(float a, float b) { return f2u(a) == f2u(b); }

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint32_t rng_u32(void) { /* xorshift64*, deterministic */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * 0x2545F4914F6CDD1Dull) >> 32);
}

/* ---- E8M0 ---- */
static void test_e8m0(void) {
    int bad = 0;
    for (int b = 0; b < 255; b++) {
        double want = ldexp(1.0, b - 127); /* 2^-127 (b = 0) is an fp32 subnormal: still exact */
        float got = di_e8m0_to_f32((uint8_t)b);
        if ((double)got != want) {
            bad++;
            fprintf(stderr, "e8m0 byte %d: got %a want %a\n", b, got, want);
        }
    }
    CHECKF(bad == 0, "%d e8m0 bytes decode wrongly", bad);
    CHECK(isnan(di_e8m0_to_f32(255)));
    CHECK(di_e8m0_to_f32(127) == 1.0f);
    CHECK(di_e8m0_to_f32(0x73) == 0x1p-12f);
    CHECK(di_e8m0_to_f32(0x78) == 0x1p-7f);
    CHECK(di_e8m0_to_f32(254) == 0x1p127f);
}

/* ---- E4M3 ---- */

/* Independent statement of OCP e4m3fn in double: S EEEE MMM, bias 7; E = 0 subnormal m * 2^-9;
 * S 1111 111 NaN; no infinities. */
static double e4m3_formula(int b) {
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    if (e == 15 && m == 7) return NAN;
    double mag = e == 0 ? m * ldexp(1.0, -9) : (8 + m) * ldexp(1.0, e - 10);
    return s ? -mag : mag;
}

static void test_e4m3_decode(void) {
    int bad = 0;
    for (int b = 0; b < 256; b++) {
        double want = e4m3_formula(b);
        float got = di_e4m3_to_f32((uint8_t)b);
        if (isnan(want) ? !isnan(got) : ((double)got != want || !signbit(got) != !signbit(want))) {
            bad++;
            fprintf(stderr, "e4m3 byte 0x%02x: got %a want %a\n", b, got, want);
        }
    }
    CHECKF(bad == 0, "%d e4m3 bytes decode wrongly", bad);
    /* The landmarks, by hand. */
    CHECK(di_e4m3_to_f32(0x7e) == 448.0f);
    CHECK(di_e4m3_to_f32(0xfe) == -448.0f);
    CHECK(isnan(di_e4m3_to_f32(0x7f)) && isnan(di_e4m3_to_f32(0xff)));
    CHECK(di_e4m3_to_f32(0x78) == 256.0f);  /* 1111 000: 2^8, a number, not inf */
    CHECK(di_e4m3_to_f32(0x38) == 1.0f);    /* 0111 000 */
    CHECK(di_e4m3_to_f32(0x08) == 0x1p-6f); /* smallest normal */
    CHECK(di_e4m3_to_f32(0x07) == 7 * 0x1p-9f);
    for (int m = 1; m < 8; m++) CHECK(di_e4m3_to_f32((uint8_t)m) == m * 0x1p-9f); /* 2^-9 steps */
    CHECK(same_bits(di_e4m3_to_f32(0x00), 0.0f));
    CHECK(same_bits(di_e4m3_to_f32(0x80), -0.0f)); /* signed zero */
    /* Strictly increasing over the finite positive codes, and symmetric. */
    int mono = 1, sym = 1;
    for (int b = 0; b < 0x7e; b++) mono &= di_e4m3_to_f32((uint8_t)b) < di_e4m3_to_f32((uint8_t)(b + 1));
    for (int b = 0; b < 0x7f; b++) sym &= di_e4m3_to_f32((uint8_t)(b | 0x80)) == -di_e4m3_to_f32((uint8_t)b);
    CHECK(mono);
    CHECK(sym);
}

static void test_e2m1_decode(void) {
    static const float spec[16] = {0, .5, 1, 1.5, 2, 3, 4, 6, -0.0f, -.5, -1, -1.5, -2, -3, -4, -6};
    for (int c = 0; c < 16; c++) CHECKF(same_bits(di_e2m1_lut[c], spec[c]), "e2m1 code %d", c);
    /* The same values from the bit layout: S EE M, bias 1, E = 0 subnormal m * 0.5. */
    for (int c = 0; c < 16; c++) {
        int s = c >> 3, e = (c >> 1) & 3, m = c & 1;
        double mag = e == 0 ? m * 0.5 : (2 + m) * ldexp(1.0, e - 2);
        CHECKF((double)di_e2m1_lut[c] == (s ? -mag : mag), "e2m1 code %d vs bit layout", c);
    }
}

/* Brute-force RNE onto a grid given as `n` increasing non-negative values indexed by code (code
 * parity = mantissa parity): the nearest value, the even code on a tie. Sign by symmetry. */
static double grid_rne(double x, const double *grid, int n) {
    double a = fabs(x);
    int best = 0;
    for (int c = 1; c < n; c++) {
        double d = fabs(grid[c] - a), db = fabs(grid[best] - a);
        if (d < db || (d == db && (c & 1) == 0)) best = c;
    }
    return x < 0 ? -grid[best] : grid[best];
}

/* Checks `rne` at every grid midpoint (a tie), a float step either side of it, and every grid
 * point, against grid_rne; positive and negative. Only up to the largest grid value: the rounder
 * does not saturate, clamping is the caller's business. */
static int check_rounder(float (*rne)(float), const double *grid, int n, const char *name) {
    int bad = 0;
    for (int c = 0; c + 1 < n; c++) {
        float mid = (float)((grid[c] + grid[c + 1]) / 2); /* exact in fp32 */
        float pts[4] = {mid, nextafterf(mid, 0.0f), nextafterf(mid, INFINITY), (float)grid[c]};
        for (int i = 0; i < 4; i++) {
            for (int sg = 0; sg < 2; sg++) {
                float x = sg ? -pts[i] : pts[i];
                double want = grid_rne(x, grid, n);
                float got = rne(x);
                if ((double)got != want) {
                    bad++;
                    if (bad < 10) fprintf(stderr, "%s(%a): got %a want %a\n", name, x, got, want);
                }
            }
        }
    }
    /* Pseudo-random points inside the grid's range. */
    for (int i = 0; i < 200000; i++) {
        float x = (float)((rng_u32() / 4294967296.0) * grid[n - 1]);
        if (rng_u32() & 1) x = -x;
        double want = grid_rne(x, grid, n);
        if ((double)rne(x) != want) {
            bad++;
            if (bad < 10) fprintf(stderr, "%s(%a): got %a want %a\n", name, x, rne(x), want);
        }
    }
    return bad;
}

static float e4m3_rne_fn(float x) { return di_e4m3_rne(x); }
static float e2m1_rne_fn(float x) { return di_e2m1_rne(x); }

static void test_e4m3_rne(void) {
    double grid[127]; /* codes 0x00..0x7e */
    for (int c = 0; c < 127; c++) grid[c] = e4m3_formula(c);
    CHECK(check_rounder(e4m3_rne_fn, grid, 127, "e4m3_rne") == 0);
    /* Hand ties. Normal range: between 1 (0x38) and 1.125 (0x39) -> 1; 1.125..1.25 -> 1.25. */
    CHECK(di_e4m3_rne(1.0625f) == 1.0f);
    CHECK(di_e4m3_rne(1.1875f) == 1.25f);
    CHECK(di_e4m3_rne(-1.1875f) == -1.25f);
    CHECK(di_e4m3_rne(1.9375f) == 2.0f);  /* 1.875 (odd) | 2.0 (next binade, even) */
    CHECK(di_e4m3_rne(13.5f) == 14.0f);   /* quantum 1 in [8,16): 13 odd, 14 even */
    CHECK(di_e4m3_rne(12.5f) == 12.0f);
    /* Subnormals: 2^-9 steps; ties at odd multiples of 2^-10. */
    CHECK(same_bits(di_e4m3_rne(0x1p-10f), 0.0f));    /* 0 | 2^-9 -> 0 */
    CHECK(same_bits(di_e4m3_rne(-0x1p-10f), -0.0f));  /* keeps the sign */
    CHECK(di_e4m3_rne(3 * 0x1p-10f) == 2 * 0x1p-9f);  /* 1 | 2 (x 2^-9) -> 2 */
    CHECK(di_e4m3_rne(5 * 0x1p-10f) == 2 * 0x1p-9f);  /* 2 | 3 -> 2 */
    CHECK(di_e4m3_rne(15 * 0x1p-10f) == 0x1p-6f);     /* 7 (subnormal) | 8 (= min normal) -> 8 */
    CHECK(di_e4m3_rne(0x1p-11f) == 0.0f);
    CHECK(di_e4m3_rne(nextafterf(0x1p-10f, 1.0f)) == 0x1p-9f);
    /* Near 448: 416 | 448 tie -> 448 (mantissa 110 even); 448 | (480) tie at 464 -> 448. */
    CHECK(di_e4m3_rne(432.0f) == 448.0f);
    CHECK(di_e4m3_rne(400.0f) == 384.0f); /* 384 | 416 -> 384 */
    CHECK(di_e4m3_rne(448.0f) == 448.0f);
    CHECK(di_e4m3_rne(464.0f) == 448.0f);
    CHECK(di_e4m3_rne(-464.0f) == -448.0f);
    /* Saturation is the caller's clamp (act_quant clamps to +-448 first). */
    CHECK(di_e4m3_rne(di_clampf(1e6f, -448.0f, 448.0f)) == 448.0f);
    CHECK(di_e4m3_rne(di_clampf(-500.0f, -448.0f, 448.0f)) == -448.0f);
    CHECK(di_e4m3_rne(0.0f) == 0.0f && isnan(di_e4m3_rne(NAN)));
}

static void test_e2m1_rne(void) {
    double grid[8];
    for (int c = 0; c < 8; c++) grid[c] = di_e2m1_lut[c];
    CHECK(check_rounder(e2m1_rne_fn, grid, 8, "e2m1_rne") == 0);
    /* Every tie the spec lists: .25->0, .75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4. */
    static const float tie[7] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
    static const float to[7] = {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 4.0f, 4.0f};
    for (int i = 0; i < 7; i++) {
        CHECKF(di_e2m1_rne(tie[i]) == to[i], "e2m1_rne(%g) = %g, want %g", tie[i], di_e2m1_rne(tie[i]), to[i]);
        CHECKF(di_e2m1_rne(-tie[i]) == -to[i], "e2m1_rne(-%g)", tie[i]);
    }
    CHECK(di_e2m1_rne(6.0f) == 6.0f);
    CHECK(di_e2m1_rne(5.01f) == 6.0f);
    CHECK(di_e2m1_rne(0.26f) == 0.5f);
    CHECK(di_e2m1_rne(di_clampf(7.0f, -6.0f, 6.0f)) == 6.0f); /* fp4_act_quant clamps to +-6 */
}

/* ---- bf16 ---- */

/* Independent RNE of an fp32 bit pattern to bf16 bits: the two neighbours in double, the nearest,
 * the even one on a tie; beyond the largest bf16 (+ half an ulp) rounds to inf. */
static uint16_t bf16_rne_ref(uint32_t u) {
    float f = u2f(u);
    if (isnan(f)) return 0x7fc0;
    if (isinf(f)) return (uint16_t)(u >> 16);
    uint32_t lo = u & 0xffff0000u;
    uint32_t hi = lo + 0x10000u; /* next bf16 away from zero (may be inf's pattern) */
    double dl = fabs((double)f - (double)u2f(lo));
    double vh = ((hi >> 16) & 0x7fff) == 0x7f80 ? ldexp(1.0, 128) : fabs((double)u2f(hi));
    double dh = fabs(fabs((double)f) - vh);
    if (dl < dh) return (uint16_t)(lo >> 16);
    if (dh < dl) return (uint16_t)(hi >> 16);
    return (uint16_t)(((lo >> 16) & 1) ? hi >> 16 : lo >> 16);
}

static void test_bf16(void) {
    CHECK(di_bf16_round(1.0f + 0x1p-8f) == 1.0f);                 /* tie, 1.0 even */
    CHECK(di_bf16_round(1.0f + 3 * 0x1p-8f) == 1.0f + 0x1p-6f);   /* tie, 1+2^-7 odd -> up */
    CHECK(di_bf16_round(1.0f + 0x1p-8f + 0x1p-20f) == 1.0f + 0x1p-7f);
    CHECK(di_bf16_round(-1.0f - 0x1p-8f) == -1.0f);
    CHECK(di_f32_to_bf16(1.0f) == 0x3f80 && di_bf16_to_f32(0x3f80) == 1.0f);
    CHECK(di_f32_to_bf16(-0.0f) == 0x8000);
    CHECK(di_f32_to_bf16(INFINITY) == 0x7f80 && di_f32_to_bf16(-INFINITY) == 0xff80);
    /* NaN stays NaN, including a NaN whose payload is only in the low 16 bits (a plain
     * truncation or rounding add would turn it into inf). */
    CHECK(isnan(di_bf16_round(NAN)));
    CHECK(isnan(di_bf16_to_f32(di_f32_to_bf16(u2f(0x7f800001u)))));
    CHECK(isnan(di_bf16_to_f32(di_f32_to_bf16(u2f(0xff80ffffu)))));
    /* Overflow: largest bf16 is 0x7f7f; FLT_MAX and the tie above 0x7f7f round to inf. */
    CHECK(di_f32_to_bf16(FLT_MAX) == 0x7f80);
    CHECK(di_f32_to_bf16(u2f(0x7f7f8000u)) == 0x7f80);
    CHECK(di_f32_to_bf16(u2f(0x7f7f7fffu)) == 0x7f7f);
    CHECK(di_f32_to_bf16(-FLT_MAX) == 0xff80);
    /* Subnormal tie: 0x00008000 lies halfway between 0 and 0x0001 -> 0. */
    CHECK(di_f32_to_bf16(u2f(0x00008000u)) == 0x0000);
    CHECK(di_f32_to_bf16(u2f(0x00018000u)) == 0x0002);
    /* Every tie pattern (low half 0x8000) for every upper half, and random patterns. */
    int bad = 0;
    for (uint32_t hi = 0; hi < 0x10000u; hi++) {
        uint32_t pats[3] = {hi << 16 | 0x8000u, hi << 16 | 0x7fffu, hi << 16 | 0x8001u};
        for (int i = 0; i < 3; i++) {
            if (isnan(u2f(pats[i]))) {
                bad += !isnan(di_bf16_to_f32(di_f32_to_bf16(u2f(pats[i]))));
                continue;
            }
            bad += di_f32_to_bf16(u2f(pats[i])) != bf16_rne_ref(pats[i]);
        }
    }
    for (int i = 0; i < 1000000; i++) {
        uint32_t u = rng_u32();
        if (isnan(u2f(u))) continue;
        bad += di_f32_to_bf16(u2f(u)) != bf16_rne_ref(u);
    }
    CHECKF(bad == 0, "%d bf16 roundings differ from the reference", bad);
    /* Round trip: every non-NaN bf16 is exact. */
    int rt = 0;
    for (uint32_t h = 0; h < 0x10000u; h++)
        if (!isnan(di_bf16_to_f32((uint16_t)h))) rt += di_f32_to_bf16(di_bf16_to_f32((uint16_t)h)) != h;
    CHECK(rt == 0);
    /* Unaligned loads. */
    unsigned char buf[7] = {0, 0x80, 0x3f, 0, 0, 0x80, 0x3f};
    CHECK(di_bf16_load(buf + 1) == 1.0f);
    CHECK(di_f32_load(buf + 3) == 1.0f);
}

/* ---- pow2_ceil ---- */

/* The definition of the spec (§2.0) and the kernel's fast_round_scale: from the fp32 bits,
 * 2^(exponent field - 127 + (mantissa != 0)). For a subnormal the exponent field is 0, so any
 * positive subnormal maps to 2^-126. */
static float pow2_ceil_bits(float v) {
    uint32_t u = f2u(v);
    int e = (int)((u >> 23) & 0xff) - 127 + ((u & 0x7fffffu) != 0);
    return (float)ldexp(1.0, e);
}

static void test_pow2_ceil(void) {
    int bad = 0;
    for (int e = -126; e <= 127; e++) {
        float p = ldexpf(1.0f, e);
        bad += di_pow2_ceil(p) != p; /* exact powers map to themselves */
        if (e < 127) {
            bad += di_pow2_ceil(nextafterf(p, INFINITY)) != 2 * p;
            bad += di_pow2_ceil(nextafterf(2 * p, 0.0f)) != 2 * p;
            bad += di_pow2_ceil(1.5f * p) != 2 * p;
        }
    }
    CHECKF(bad == 0, "%d normal pow2_ceil results wrong", bad);
    CHECK(di_pow2_ceil(1.0f / 448.0f) == 0x1p-8f);
    CHECK(di_pow2_ceil(3.0f / 448.0f) == 0x1p-7f);
    /* fp32(1/448) is a little above 1/448, yet 448 * fp32(1/448) rounds to exactly 1.0f, so an amax
     * of exactly 448 * 2^k gets scale 2^k (the value then quantises to 448, not 224). */
    CHECK(448.0f * (1.0f / 448.0f) == 1.0f);
    CHECK(di_pow2_ceil(896.0f * (1.0f / 448.0f)) == 2.0f);
    /* Same for the fp4 ue8m0 floor: 6 * 2^-126 * fp32(1/6) rounds to exactly 2^-126. */
    CHECK(6.0f * 0x1p-126f * (1.0f / 6.0f) == 0x1p-126f);
    CHECK(di_pow2_ceil(6.0f * 0x1p-126f * (1.0f / 6.0f)) == 0x1p-126f);
    /* Random normals against the bit definition. */
    int rbad = 0;
    for (int i = 0; i < 200000; i++) {
        uint32_t u = rng_u32() & 0x7fffffffu;
        float v = u2f(u);
        if (!isfinite(v) || v == 0.0f || u >= 0x7f000000u || u < 0x00800000u) continue;
        rbad += di_pow2_ceil(v) != pow2_ceil_bits(v);
    }
    CHECK(rbad == 0);
    /* Subnormals: the bit definition gives 2^-126 for all of them. Not reachable from the kernels
     * (act_quant floors amax at 1e-4, fp4 ue8m0 at 6 * 2^-126, so the argument is always normal),
     * but pow2_ceil is documented as the kernel's fast_round_scale. */
    static const uint32_t sub[4] = {0x00000001u, 0x00400000u, 0x00400001u, 0x007fffffu};
    for (int i = 0; i < 4; i++) {
        float v = u2f(sub[i]);
        CHECKF(di_pow2_ceil(v) == pow2_ceil_bits(v) && pow2_ceil_bits(v) == 0x1p-126f,
               "pow2_ceil(subnormal %a) = %a, the bit definition gives %a", v, di_pow2_ceil(v),
               pow2_ceil_bits(v));
    }
}

/* ---- Appendix A byte probes and FP4 nibble order ---- */

/* Appendix A quotes decoded values of two real-checkpoint rows (from the mlx test). We do not
 * have the checkpoint, so the bytes here are reconstructed by hand: the codes that, with the
 * quoted scale byte, give exactly the quoted values. What this checks is that our decoders turn
 * those bytes into those values; it cannot check that the real file holds these bytes.
 *
 * layers.0.attn.wkv row 0, scale byte 0x73 = 2^-12:
 *   -0.00390625 = -16 * 2^-12, 16 = 1.000b * 2^4   -> S=1 E=4+7=11 M=0 -> 0xd8
 *    0.03515625 = 144 * 2^-12, 144 = 1.001b * 2^7  -> S=0 E=14 M=1   -> 0x71
 *   -0.0390625  = -160 * 2^-12, 160 = 1.010b * 2^7 -> S=1 E=14 M=2   -> 0xf2
 *    0.0703125  = 288 * 2^-12, 288 = 1.001b * 2^8  -> S=0 E=15 M=1   -> 0x79
 * expert 0 w1 row 0, scale byte 0x78 = 2^-7 (e2m1 codes, low nibble = even element):
 *   [0, -0.0078125, 0, -0.0078125, -0.015625] = [0, -1, 0, -1, -2] * 2^-7
 *   0 is code 0x0, -1 is code 0xa (S=1 E=01 M=0), -2 is code 0xc (S=1 E=10 M=0)
 *   -> bytes 0xa0 (elements 0, 1), 0xa0 (2, 3), low nibble 0xc (element 4; element 5 not quoted).
 *   The zeros could as well be code 0x8 (-0); -0 * scale compares equal to 0. */
static void test_probes(void) {
    const uint8_t wkv_bytes[4] = {0xd8, 0x71, 0xf2, 0x79};
    const float wkv_want[4] = {-0.00390625f, 0.03515625f, -0.0390625f, 0.0703125f};
    for (int i = 0; i < 4; i++) {
        float v = di_e4m3_to_f32(wkv_bytes[i]) * di_e8m0_to_f32(0x73);
        CHECKF(v == wkv_want[i], "wkv probe %d: %g, want %g", i, v, wkv_want[i]);
    }
    const uint8_t w1_bytes[3] = {0xa0, 0xa0, 0x0c};
    const float w1_want[5] = {0.0f, -0.0078125f, 0.0f, -0.0078125f, -0.015625f};
    for (int k = 0; k < 5; k++) {
        uint8_t byte = w1_bytes[k / 2];
        int code = (k & 1) ? byte >> 4 : byte & 15; /* low nibble = element 2k */
        float v = di_e2m1_lut[code] * di_e8m0_to_f32(0x78);
        CHECKF(v == w1_want[k], "w1 probe %d: %g, want %g", k, v, w1_want[k]);
    }
    /* Nibble order the other way round would give [-1, 0, -1, 0, ...] * 2^-7: make sure the
     * probe actually distinguishes the two orders. */
    CHECK(di_e2m1_lut[w1_bytes[0] >> 4] * di_e8m0_to_f32(0x78) != w1_want[0]);
}

int main(void) {
    test_e8m0();
    test_e4m3_decode();
    test_e2m1_decode();
    test_e4m3_rne();
    test_e2m1_rne();
    test_bf16();
    test_pow2_ceil();
    test_probes();
    return TEST_SUMMARY();
}
