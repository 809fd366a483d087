/* Sampler tests: Philox against Random123's known answers; parameter validation naming the field;
 * greedy argmax and ties, and the argmax alone as a device takes it; the temperature distribution (a chi-square bound over many positions with
 * a fixed seed, so the test is deterministic); the exact sets top_k / top_p / min_p keep (hand cases
 * read through processed logprobs; a 129,280-token row and 400 random rows of several shapes against
 * a full-sort reference);
 * penalties, logit bias, masks and logprobs against hand-computed values; determinism, seed
 * sensitivity and independence from the other rows and the call order; non-finite logits; the
 * thread pool against the sampler alone; the shared arithmetic of sample_arith.h (exp against libm,
 * conversions and products against the compiler's) and the plain-row entry against the full one;
 * the edit lists of steps 1-3 (sample_edits.h) against the stages applied in request order. */
#include <float.h>
#include <omp.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/numerics.h"
#include "sample/philox.h"
#include "sample/sample_edits.h"
#include "sample/sampler.h"
#include "sample/sample_simd.h"
#include "sample/sampler_pool.h"
#include "test_harness.h"

#define BIG_VOCAB 129280

__extension__ typedef unsigned __int128 u128; /* the references' exact products */

static di_sampler *g_s;   /* vocab 8 */
static di_sampler *g_big; /* vocab BIG_VOCAB */

static bool close_to(double a, double b, double tol) { return fabs(a - b) <= tol; }

/* ---- Philox ---- */

static void test_philox_kat(void) {
    static const uint32_t ctr[3][4] = {{0, 0, 0, 0},
                                       {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                                       {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
    static const uint32_t key[3][2] = {{0, 0}, {0xffffffffu, 0xffffffffu}, {0xa4093822u, 0x299f31d0u}};
    static const uint32_t want[3][4] = {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
                                        {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
                                        {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
    for (int v = 0; v < 3; v++) {
        uint32_t out[4];
        di_philox4x32_10(ctr[v], key[v], out);
        for (int i = 0; i < 4; i++) CHECKF(out[i] == want[v][i], "KAT %d word %d: %08x != %08x", v, i, out[i], want[v][i]);
    }
    /* The uniform is the first two words of the (position, seed) block, 53 bits, in [0, 1). */
    uint32_t c[4] = {7, 0, DI_PHILOX_STREAM_SAMPLE, 0}, k[2] = {42, 0}, r[4];
    di_philox4x32_10(c, k, r);
    double u = di_philox_uniform(42, 7, DI_PHILOX_STREAM_SAMPLE);
    CHECK(u == (double)(((uint64_t)r[0] << 21) | (r[1] >> 11)) * 0x1p-53);
    double lo = 1, hi = 0, mean = 0;
    for (uint64_t pos = 0; pos < 100000; pos++) {
        double x = di_philox_uniform(0x123456789abcdefull, pos, 0);
        lo = fmin(lo, x);
        hi = fmax(hi, x);
        mean += x;
    }
    mean /= 100000;
    CHECK(lo >= 0.0 && hi < 1.0);
    CHECKF(fabs(mean - 0.5) < 0.005, "mean %g", mean);
    CHECK(di_philox_uniform(1, 5, 0) != di_philox_uniform(1, 5, 1));
    CHECK(di_philox_uniform(1, 5, 0) != di_philox_uniform(2, 5, 0));
    CHECK(di_philox_uniform(1, (uint64_t)1 << 32, 0) != di_philox_uniform(1, 0, 0));
}

/* ---- the arithmetic shared with the device (sample_arith.h) ---- */

static double ulps_apart(double a, double b) {
    if (a == b) return 0;
    return fabs(a - b) / (nextafter(fmax(a, b), INFINITY) - fmax(a, b));
}

static void test_arith(void) {
    /* exp: 1 at 0, within 2 ulp of libm over [-745, 0] (the subnormal range: within 2 of its ulps) */
    CHECK(di_sample_exp(0.0) == 1.0 && di_sample_exp(-0.0) == 1.0);
    CHECK(di_sample_exp(-746.0) == 0.0 && di_sample_exp(-INFINITY) == 0.0 && di_sample_exp(NAN) == 0.0);
    double worst = 0, worst_x = 0;
    for (int i = 0; i < 400000; i++) {
        const double u = di_philox_uniform(11, (uint64_t)i, 0);
        const double x = i % 4 == 0 ? -745.0 * u : i % 4 == 1 ? -40.0 * u : i % 4 == 2 ? -1.0 * u : -1e-6 * u;
        const double e = ulps_apart(di_sample_exp(x), exp(x));
        if (e > worst) worst = e, worst_x = x;
    }
    CHECKF(worst <= 2.0, "di_sample_exp is %g ulp from libm at %a", worst, worst_x);
    /* log: within 1 ulp of libm over the doubles' whole range (the subnormals, near 1 on both sides,
     * the sqrt(2) seam, what an exp sum can be: 1 .. 129,280), exact at 1, and its edges */
    CHECK(di_sample_log(1.0) == 0.0 && di_sample_log(0.0) == -INFINITY && di_sample_log(-0.0) == -INFINITY);
    CHECK(di_sample_log(INFINITY) == INFINITY && isnan(di_sample_log(-1.0)) && isnan(di_sample_log(NAN)));
    CHECK(di_sample_log(0x1p-1074) == log(0x1p-1074) && di_sample_log(DBL_MAX) == log(DBL_MAX));
    worst = 0, worst_x = 0;
    for (int i = 0; i < 600000; i++) {
        const double u = di_philox_uniform(12, (uint64_t)i, 0);
        const double x = i % 6 == 0   ? ldexp(1.0 + u, (int)(u * 2098.0) - 1074)
                         : i % 6 == 1 ? 1.0 + (u - 0.5) * 1e-3
                         : i % 6 == 2 ? 1.0 + (u - 0.5) * 1e-12
                         : i % 6 == 3 ? 0x1.6a09e667f3bcdp+0 * (1.0 + (u - 0.5) * 1e-9) * ldexp(1.0, i % 40 - 20)
                         : i % 6 == 4 ? 1.0 + u * 129280.0
                                      : ldexp(u, -1060);
        const double e = ulps_apart(di_sample_log(x), log(x));
        if (e > worst) worst = e, worst_x = x;
    }
    CHECKF(worst <= 1.0, "di_sample_log is %g ulp from libm at %a", worst, worst_x);
    /* u64 -> double: the correctly rounded conversion of the compiler, halfway cases included */
    const uint64_t edge[] = {0, 1, (1ull << 53) - 1, 1ull << 53, (1ull << 53) + 1, (1ull << 53) + 3,
                             (1ull << 54) + 2, (1ull << 54) + 6, (1ull << 63) - 1, 1ull << 63, ~0ull,
                             0x8000000000000400ull, 0x8000000000000c00ull, 0x8000000000000401ull};
    for (size_t i = 0; i < sizeof edge / sizeof edge[0]; i++)
        CHECKF(di_sample_u64_to_double(edge[i]) == (double)edge[i], "u64 %llx", (unsigned long long)edge[i]);
    int bad = 0;
    for (uint64_t i = 0; i < 200000; i++) {
        const uint64_t a = di_philox_bits53(3, i, 0) << (i % 12), b = di_philox_bits53(4, i, 0) << (i % 11);
        bad += di_sample_u64_to_double(a ^ (b >> 20)) != (double)(a ^ (b >> 20));
        const uint64_t r = di_philox_bits53(5, i, 0), t = di_philox_bits53(6, i, 0) << (i % 11);
        bad += di_sample_mul_shift53(r, t) != (uint64_t)(((u128)r * t) >> 53);
    }
    CHECKF(bad == 0, "%d conversions or products differ", bad);
    CHECK(di_sample_mul_shift53((1ull << 53) - 1, (1ull << 63) - 1) == ((1ull << 63) - 1) - (1ull << 10));
    /* weights: bits for the vocabulary, exact powers, buckets monotone and 8 an octave */
    CHECK(di_sample_weight_bits(129280) == 46 && di_sample_weight_bits(8) == 60 && di_sample_weight_bits(131072) == 46);
    CHECK(di_sample_weight_bits(131073) == 45 && di_sample_weight_bits(1) == 63);
    CHECK(di_sample_weight_fixed(1.0, 46) == 1ull << 46 && di_sample_weight_fixed(0x1p-47, 46) == 0);
    CHECK(di_sample_weight_bucket(1) == 0 && di_sample_weight_bucket(1ull << 46) == 46 * 8);
    CHECK(di_sample_weight_bucket(~0ull) == DI_SAMPLE_WEIGHT_BUCKETS - 1);
    uint64_t prev = 0;
    uint32_t prev_bucket = 0;
    for (int i = 1; i < 5000; i++) {
        const uint64_t w = prev + 1 + (di_philox_bits53(7, (uint64_t)i, 0) >> (53 - i % 40));
        const uint32_t bk = di_sample_weight_bucket(w);
        CHECKF(bk >= prev_bucket, "bucket of %llu < bucket of %llu", (unsigned long long)w, (unsigned long long)prev);
        prev = w, prev_bucket = bk;
    }
    /* a weight below the skip point is 0 whatever min_p; above it, the exp decides */
    const double skip = di_sample_skip_below(46, -INFINITY);
    CHECK(di_sample_weight(-32.0f, 0.0f, -INFINITY, 1.0, 0.0, skip, 46) == 0);
    CHECK(di_sample_weight(-31.0f, 0.0f, -INFINITY, 1.0, 0.0, skip, 46) ==
          (uint64_t)ldexp(di_sample_exp(-31.0), 46));
    CHECK(di_sample_weight(-31.0f, 0.0f, -INFINITY, 1.0, 0.0, -INFINITY, 46) ==
          di_sample_weight(-31.0f, 0.0f, -INFINITY, 1.0, 0.0, skip, 46));
    CHECK(di_sample_weight(-1.0f, 0.0f, -0.5f, 1.0, 0.0, skip, 46) == 0);  /* below top_k's value */
    CHECK(di_sample_weight(-1.0f, 0.0f, -INFINITY, 1.0, 0.5, skip, 46) == 0); /* e^-1 < min_p */
    CHECK(di_sample_weight(-INFINITY, 0.0f, -INFINITY, 1.0, 0.0, skip, 46) == 0);
    /* the skip shortcut never changes a weight: every x in a fine grid around the skip points */
    for (int i = 0; i < 20000; i++) {
        const float z = (float)(-40.0 + i * 0.0005);
        const double min_p = 0x1p-40;
        const uint64_t with = di_sample_weight(z, 0.0f, -INFINITY, 1.0, min_p, di_sample_skip_below(46, log(min_p)), 46);
        bad += with != di_sample_weight(z, 0.0f, -INFINITY, 1.0, min_p, -INFINITY, 46);
    }
    CHECKF(bad == 0, "%d weights change with the skip", bad);
}

/* ---- the row passes' SIMD forms (sample_simd.h) against the scalar form, every token ---- */

/* A row of n logits of kind `kind` (0: broad, 1: peaked with exact ties, 2: every special value, 3:
 * spread over [-760, 0], so that exp(z - max) runs into the subnormals and below) */
static void simd_row(float *z, int32_t n, int kind, uint64_t seed) {
    static const float special[] = {NAN, INFINITY, -INFINITY, -0.0f, 0.0f, FLT_MAX, -FLT_MAX, 0x1p-149f, -0x1p-149f,
                                    0x1p-126f, 1.0f, -1.0f};
    for (int32_t i = 0; i < n; i++) {
        const double u = di_philox_uniform(seed, (uint64_t)i, 0);
        if (kind == 0) z[i] = (float)((u - 0.5) * 40.0);
        else if (kind == 1) z[i] = (float)floor(u * 8.0) * 0.25f + (i % 97 == 0 ? 6.0f : 0.0f);
        else if (kind == 2) z[i] = i % 5 ? special[(uint32_t)(u * 12.0) % 12] : (float)((u - 0.5) * 1e3);
        else z[i] = i == n / 3 ? 0.0f : (float)(-760.0 * u);
    }
}

static void test_simd_forms(void) {
    const di_sample_form best = di_sample_best_form();
    static const char *names[] = {"scalar", "avx2", "avx512"};
    printf("sampler row passes: this CPU runs the scalar form%s%s (the others are checked where a CPU has them)\n",
           best >= DI_SAMPLE_AVX2 ? ", avx2" : "", best >= DI_SAMPLE_AVX512 ? ", avx512" : "");
    static const int32_t sizes[] = {129280, 2048, 1500, 1000, 37, 5};
    static const float temps[] = {1.0f, 0.05f, 0.7f, 5.0f, 300.0f};
    const int32_t most = sizes[0];
    float *z = malloc(sizeof(float) * most), *c0 = malloc(sizeof(float) * most), *c1 = malloc(sizeof(float) * most);
    uint64_t *w0 = malloc(8 * (size_t)most), *w1 = malloc(8 * (size_t)most);
    uint16_t *b0 = malloc(2 * (size_t)most), *b1 = malloc(2 * (size_t)most);
    int cases = 0, bad = 0;
    for (int form = DI_SAMPLE_AVX2; form <= (int)best; form++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (int kind = 0; kind < 4; kind++) {
                const int32_t n = sizes[si];
                simd_row(z, n, kind, 100 + si * 3 + (uint64_t)kind);
                /* the copy: bit for bit */
                di_sample_sanitized_copy(DI_SAMPLE_SCALAR, c0, z, n);
                di_sample_sanitized_copy((di_sample_form)form, c1, z, n);
                bad += memcmp(c0, c1, sizeof(float) * n) != 0;
                /* the argmax: raw and sanitised rows; every entry -inf / NaN gives -1 */
                for (int raw = 0; raw < 2; raw++) {
                    float m0, m1;
                    const int32_t a0 = di_sample_argmax(DI_SAMPLE_SCALAR, raw ? z : c0, n, raw, &m0);
                    const int32_t a1 = di_sample_argmax((di_sample_form)form, raw ? z : c0, n, raw, &m1);
                    if (a0 != a1 || memcmp(&m0, &m1, sizeof m0)) {
                        bad++;
                        fprintf(stderr, "%s argmax n %d kind %d raw %d: %d (%a) != %d (%a)\n", names[form], n, kind, raw,
                                a1, m1, a0, m0);
                    }
                }
                /* a mask: words of every density, the row's tail past the last whole vector */
                uint32_t *mask = malloc(sizeof(uint32_t) * (size_t)((n + 31) / 32));
                for (int32_t wd = 0; wd < (n + 31) / 32; wd++) {
                    const uint64_t r = di_philox_bits53(12, (uint64_t)wd, (uint32_t)kind);
                    mask[wd] = wd % 3 == 0 ? (uint32_t)r : wd % 3 == 1 ? (uint32_t)(r & (r >> 20)) : ~(uint32_t)(r & (r >> 9));
                }
                memcpy(c1, c0, sizeof(float) * n);
                float *c2 = malloc(sizeof(float) * n);
                memcpy(c2, c0, sizeof(float) * n);
                di_sample_apply_mask(DI_SAMPLE_SCALAR, c1, mask, n);
                di_sample_apply_mask((di_sample_form)form, c2, mask, n);
                bad += memcmp(c1, c2, sizeof(float) * n) != 0;
                for (int32_t i = 0; i < n; i++) /* the scalar form is the definition */
                    bad += ((mask[i / 32] >> (i % 32)) & 1u) ? memcmp(&c1[i], &c0[i], 4) != 0 : c1[i] != -INFINITY;
                free(c2), free(mask);
                /* the search for a value at or above a threshold, from several places */
                for (int q = 0; q < 12; q++) {
                    const int32_t from = q % 3 == 0 ? 0 : (int32_t)(di_philox_uniform(7, (uint64_t)q, 0) * n);
                    const float thr = q % 4 == 0 ? -INFINITY : c0[(int32_t)(di_philox_uniform(8, (uint64_t)q, 0) * n)];
                    bad += di_sample_find_at_least(DI_SAMPLE_SCALAR, z, from, n, thr) !=
                           di_sample_find_at_least((di_sample_form)form, z, from, n, thr);
                }
                /* the exp sum, over the raw row, bit for bit */
                float max;
                di_sample_argmax(DI_SAMPLE_SCALAR, z, n, true, &max);
                const double e0 = di_sample_exp_sum(DI_SAMPLE_SCALAR, z, n, max);
                const double e1 = di_sample_exp_sum((di_sample_form)form, z, n, max);
                if (memcmp(&e0, &e1, sizeof e0)) {
                    bad++;
                    fprintf(stderr, "%s exp sum n %d kind %d: %a != %a\n", names[form], n, kind, e1, e0);
                }
                /* the weights and their buckets under every filter */
                di_sample_argmax(DI_SAMPLE_SCALAR, c0, n, false, &max);
                const int bits = di_sample_weight_bits(n);
                for (size_t ti = 0; ti < sizeof temps / sizeof temps[0]; ti++)
                    for (int filt = 0; filt < 3; filt++) {
                        const double min_p = filt == 1 ? 0.01 : 0.0;
                        const di_weight_filter f = {
                            .max = max, .kth = filt == 2 ? c0[n / 2] : -INFINITY,
                            .inv_t = di_sample_inv_temperature(temps[ti]), .min_p = min_p,
                            .skip = di_sample_skip_below(bits, min_p > 0 ? log(min_p) : -INFINITY), .bits = bits};
                        const uint64_t s0 = di_sample_weights(DI_SAMPLE_SCALAR, c0, n, &f, w0, b0);
                        const uint64_t s1 = di_sample_weights((di_sample_form)form, c0, n, &f, w1, b1);
                        memset(b1, 0xee, 2); /* no bucket array asked: none written, the weights the same */
                        const uint64_t s2 = di_sample_weights((di_sample_form)form, c0, n, &f, w1, NULL);
                        int diff = s0 != s1 || s0 != s2 || b1[0] != 0xeeee ||
                                   memcmp(w0, w1, 8 * (size_t)n) != 0;
                        di_sample_weights((di_sample_form)form, c0, n, &f, w1, b1);
                        diff += memcmp(b0, b1, 2 * (size_t)n) != 0;
                        for (int32_t i = 0; i < n && diff; i++)
                            if (w0[i] != w1[i] || b0[i] != b1[i]) {
                                fprintf(stderr, "%s weights n %d kind %d T %g filter %d id %d: %llu/%u != %llu/%u\n",
                                        names[form], n, kind, temps[ti], filt, i, (unsigned long long)w1[i], b1[i],
                                        (unsigned long long)w0[i], b0[i]);
                                break;
                            }
                        bad += diff != 0;
                        cases++;
                    }
            }
    /* the scalar form's buckets are di_sample_weight_bucket's, DI_SAMPLE_NO_BUCKET for no weight */
    simd_row(z, 4096, 0, 9);
    float max;
    di_sample_argmax(DI_SAMPLE_SCALAR, z, 4096, false, &max);
    const di_weight_filter f = {.max = max, .kth = -INFINITY, .inv_t = 1.0, .min_p = 0.0,
                                .skip = di_sample_skip_below(51, -INFINITY), .bits = 51};
    di_sample_weights(DI_SAMPLE_SCALAR, z, 4096, &f, w0, b0);
    int zero = 0;
    for (int32_t i = 0; i < 4096; i++) {
        zero += w0[i] == 0;
        bad += b0[i] != (w0[i] ? di_sample_weight_bucket(w0[i]) : DI_SAMPLE_NO_BUCKET);
    }
    CHECKF(zero > 100 && zero < 4000, "%d of 4096 broad logits without weight", zero);
    /* the exp sum is the sum: against libm's exps added in long double, rows reaching the subnormals */
    for (int kind = 0; kind < 4; kind++) {
        simd_row(z, 50000, kind, 77 + (uint64_t)kind);
        di_sample_argmax(DI_SAMPLE_SCALAR, z, 50000, true, &max);
        long double ref = 0;
        for (int32_t i = 0; i < 50000; i++) ref += expl((long double)di_sample_sanitize(z[i]) - max);
        const double got = di_sample_exp_sum(DI_SAMPLE_SCALAR, z, 50000, max);
        CHECKF(fabs(got - (double)ref) <= 1e-13 * (double)ref, "kind %d: exp sum %.17g, long double %.17Lg", kind, got,
               ref);
    }
    CHECKF(bad == 0, "%d of %d row-pass cases differ from the scalar form", bad, cases);
    free(z), free(c0), free(c1), free(w0), free(w1), free(b0), free(b1);
}

/* ---- helpers ---- */

static di_sampling_params params(float temperature) {
    di_sampling_params p;
    di_sampling_params_init(&p);
    p.temperature = temperature;
    return p;
}

static int32_t sample_full(di_sampler *s, const float *logits, const di_sampling_params *p,
                           const di_sample_history *h, const uint32_t *mask, uint64_t pos, di_sample_result *res) {
    di_sample_row row = {logits, p, h, mask, pos};
    di_err err = {0};
    di_status st = di_sampler_sample(s, &row, res, &err);
    CHECKF(st == DI_OK, "sample failed: %s", err.msg);
    return st == DI_OK ? res->token_id : -1;
}

static int32_t sample1(di_sampler *s, const float *logits, const di_sampling_params *p, uint64_t pos) {
    di_sample_result res;
    return sample_full(s, logits, p, NULL, NULL, pos, &res);
}

/* The survivor set of a small-vocab row, read through processed logprobs (a filtered token has
 * logprob -inf and is not listed). Returns a bit mask of the ids. */
static uint32_t survivors(const float *logits, di_sampling_params p, const di_sample_history *h) {
    p.logprobs = DI_SAMPLER_MAX_LOGPROBS;
    p.logprobs_mode = DI_LOGPROBS_PROCESSED;
    di_sample_result res;
    if (sample_full(g_s, logits, &p, h, NULL, 0, &res) < 0) return 0;
    uint32_t set = 0;
    for (int i = 0; i < res.n_top; i++) set |= 1u << res.top[i].token_id;
    return set;
}

/* ---- validation ---- */

static void expect_invalid(di_sampling_params p, const char *field) {
    di_err err = {0};
    di_status st = di_sampling_params_validate(&p, 8, &err);
    CHECKF(st == DI_EINVAL && strstr(err.msg, field), "%s: status %d, message '%s'", field, st, err.msg);
    /* The sampler validates too, and does not touch anything on failure. */
    float logits[8] = {0};
    di_sample_row row = {logits, &p, NULL, NULL, 0};
    di_sample_result res;
    di_err err2 = {0};
    st = di_sampler_sample(g_s, &row, &res, &err2);
    CHECKF(st == DI_EINVAL && strstr(err2.msg, field) && res.token_id == -1, "%s via sample: '%s'", field,
           err2.msg);
}

static void test_validation(void) {
    di_sampling_params p = params(1.0f);
    di_err err = {0};
    CHECK(di_sampling_params_validate(&p, 8, &err) == DI_OK);
    p.temperature = -0.5f;
    expect_invalid(p, "temperature");
    p.temperature = NAN;
    expect_invalid(p, "temperature");
    p.temperature = INFINITY;
    expect_invalid(p, "temperature");
    p = params(1.0f), p.top_k = -1;
    expect_invalid(p, "top_k");
    p = params(1.0f), p.top_p = 0.0f;
    expect_invalid(p, "top_p");
    p.top_p = 1.01f;
    expect_invalid(p, "top_p");
    p.top_p = NAN;
    expect_invalid(p, "top_p");
    p = params(1.0f), p.min_p = -0.1f;
    expect_invalid(p, "min_p");
    p.min_p = 1.5f;
    expect_invalid(p, "min_p");
    p.min_p = NAN;
    expect_invalid(p, "min_p");
    p = params(1.0f), p.repetition_penalty = 0.0f;
    expect_invalid(p, "repetition_penalty");
    p.repetition_penalty = NAN;
    expect_invalid(p, "repetition_penalty");
    p = params(1.0f), p.presence_penalty = 2.5f;
    expect_invalid(p, "presence_penalty");
    p.presence_penalty = NAN;
    expect_invalid(p, "presence_penalty");
    p = params(1.0f), p.frequency_penalty = -3.0f;
    expect_invalid(p, "frequency_penalty");
    di_logit_bias bad_id[2] = {{1, 1.0f}, {8, 1.0f}};
    p = params(1.0f), p.logit_bias = bad_id, p.n_logit_bias = 2;
    expect_invalid(p, "logit_bias[1].token_id");
    bad_id[1].token_id = -1;
    expect_invalid(p, "logit_bias[1].token_id");
    di_logit_bias bad_bias[1] = {{3, NAN}};
    p.logit_bias = bad_bias, p.n_logit_bias = 1;
    expect_invalid(p, "logit_bias[0].bias");
    p.logit_bias = NULL;
    expect_invalid(p, "logit_bias");
    p = params(1.0f), p.logprobs = 21;
    expect_invalid(p, "logprobs");
    p.logprobs = -1;
    expect_invalid(p, "logprobs");
    p = params(1.0f), p.logprobs_mode = (di_logprobs_mode)7;
    expect_invalid(p, "logprobs_mode");
    p = params(1.0f), p.top_k = 1000, p.top_p = 1.0f, p.min_p = 1.0f, p.logprobs = 20;
    CHECK(di_sampling_params_validate(&p, 8, &err) == DI_OK); /* boundaries are valid */

    /* A history id outside the vocabulary is DI_ERANGE when a penalty reads it. */
    float logits[8] = {0};
    int32_t ids[2] = {3, 9};
    di_sample_history h = {ids, 2, NULL, 0};
    p = params(1.0f), p.repetition_penalty = 1.2f;
    di_sample_row row = {logits, &p, &h, NULL, 0};
    di_sample_result res;
    di_status st = di_sampler_sample(g_s, &row, &res, &err);
    CHECKF(st == DI_ERANGE && strstr(err.msg, "history.prompt_ids[1]"), "%s", err.msg);
    h = (di_sample_history){NULL, 0, ids, 2};
    p = params(1.0f), p.frequency_penalty = 0.5f;
    st = di_sampler_sample(g_s, &row, &res, &err);
    CHECKF(st == DI_ERANGE && strstr(err.msg, "history.output_ids[1]"), "%s", err.msg);
    di_sampler *none = NULL;
    CHECK(di_sampler_create(0, &none, &err) == DI_EINVAL && none == NULL);
}

/* ---- greedy ---- */

static void test_greedy(void) {
    di_sampling_params p = params(0.0f);
    float a[8] = {1, 3, 3, 2, -5, 0, 3, 2.5f};
    CHECK(sample1(g_s, a, &p, 0) == 1); /* three-way tie at 3: lowest id */
    p.seed = 99;
    CHECK(sample1(g_s, a, &p, 12345) == 1); /* greedy ignores seed and position */
    p.top_k = 1, p.top_p = 0.1f, p.min_p = 0.9f;
    CHECK(sample1(g_s, a, &p, 3) == 1);
    float b[8] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -1e30f};
    p = params(0.0f);
    CHECK(sample1(g_s, b, &p, 0) == 7);
    float c[8] = {NAN, 1, INFINITY, 2, INFINITY, NAN, 0, 0};
    CHECK(sample1(g_s, c, &p, 0) == 2); /* NaN never wins; +inf ties go to the lowest id */
    float d[8] = {NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
    di_sample_row row = {d, &p, NULL, NULL, 0};
    di_sample_result res;
    di_err err = {0};
    CHECK(di_sampler_sample(g_s, &row, &res, &err) == DI_EINVAL && strstr(err.msg, "no token"));
    for (int i = 0; i < 8; i++) d[i] = -INFINITY;
    p.temperature = 1.0f;
    CHECK(di_sampler_sample(g_s, &row, &res, &err) == DI_EINVAL && strstr(err.msg, "no token"));
}

/* di_sample_greedy_token (what a device computes for plain-greedy rows) is the sampler's argmax:
 * hand cases of the sanitising and tie rules, then random rows full of ties and non-finite values
 * against di_sampler_sample at temperature 0; and which params count as plain greedy. */
static void test_greedy_token(void) {
    const float a[8] = {1, 3, 3, 2, -5, 0, 3, 2.5f};
    CHECK(di_sample_greedy_token(a, 8) == 1);
    const float b[8] = {NAN, 1, INFINITY, 2, FLT_MAX, NAN, INFINITY, 0};
    CHECK(di_sample_greedy_token(b, 8) == 2); /* +inf counts as FLT_MAX: ties with id 4 go to id 2 */
    const float c[8] = {-INFINITY, -0.0f, 0.0f, -1e-45f, NAN, -INFINITY, 0.0f, -0.0f};
    CHECK(di_sample_greedy_token(c, 8) == 1); /* -0 equals +0 */
    const float d[4] = {-INFINITY, 1e-45f, 0.0f, 1e-45f};
    CHECK(di_sample_greedy_token(d, 4) == 1); /* a denormal beats zero */
    const float e[4] = {NAN, -INFINITY, NAN, -INFINITY};
    CHECK(di_sample_greedy_token(e, 4) == -1);
    di_err err = {0};
    CHECK(di_sample_no_token_error(17, &err) == DI_EINVAL && strstr(err.msg, "no token") && strstr(err.msg, "17"));
    static const float pool[] = {0.0f, -0.0f, 1.0f, -1.0f, 1e-45f, -1e-45f, FLT_MAX, -FLT_MAX, INFINITY, -INFINITY,
                                 NAN, 2.5f, 3e38f};
    const int n_pool = (int)(sizeof pool / sizeof pool[0]);
    di_sampling_params p = params(0.0f);
    uint64_t r = 0x9e3779b97f4a7c15ull;
    float row[8];
    int bad = 0;
    for (int t = 0; t < 20000; t++) {
        for (int i = 0; i < 8; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            row[i] = pool[(r >> 33) % (uint64_t)(t % 3 ? n_pool : 5)]; /* a third of the rows: 0 / 1 / denormals only */
        }
        const int32_t want = di_sample_greedy_token(row, 8);
        di_sample_row sr = {row, &p, NULL, NULL, 0};
        di_sample_result res;
        const di_status st = di_sampler_sample(g_s, &sr, &res, &err);
        bad += st ? want != -1 : want != res.token_id;
    }
    CHECKF(bad == 0, "%d of 20000 rows: di_sample_greedy_token differs from the sampler's greedy token", bad);
    CHECK(di_sampling_is_plain_greedy(&p));
    di_sampling_params q = p;
    q.top_k = 5, q.top_p = 0.5f, q.min_p = 0.1f, q.seed = 3; /* ignored at temperature 0 */
    CHECK(di_sampling_is_plain_greedy(&q));
    q = p, q.temperature = 0.5f;
    CHECK(!di_sampling_is_plain_greedy(&q));
    q = p, q.logprobs = 1;
    CHECK(!di_sampling_is_plain_greedy(&q));
    q = p, q.repetition_penalty = 1.1f;
    CHECK(!di_sampling_is_plain_greedy(&q));
    q = p, q.presence_penalty = 0.5f;
    CHECK(!di_sampling_is_plain_greedy(&q));
    q = p, q.frequency_penalty = -0.5f;
    CHECK(!di_sampling_is_plain_greedy(&q));
    const di_logit_bias lb = {3, 1.0f};
    q = p, q.logit_bias = &lb, q.n_logit_bias = 1;
    CHECK(!di_sampling_is_plain_greedy(&q));
}

/* ---- temperature: the sampled distribution ---- */

/* Samples `n` positions and returns the chi-square statistic against `expect` (probabilities). */
static double chi_square(const float *logits, const di_sampling_params *p, const double *expect, int n,
                         int *outside) {
    int count[8] = {0};
    *outside = 0;
    for (int pos = 0; pos < n; pos++) count[sample1(g_s, logits, p, (uint64_t)pos)]++;
    double chi = 0;
    for (int i = 0; i < 8; i++) {
        if (expect[i] == 0) {
            *outside += count[i];
            continue;
        }
        double e = expect[i] * n;
        chi += (count[i] - e) * (count[i] - e) / e;
    }
    return chi;
}

static void softmax_ref(const float *logits, double t, const uint32_t keep, double *out) {
    double m = -INFINITY, sum = 0;
    for (int i = 0; i < 8; i++)
        if (keep >> i & 1) m = fmax(m, logits[i]);
    for (int i = 0; i < 8; i++) sum += out[i] = (keep >> i & 1) ? exp((logits[i] - m) / t) : 0;
    for (int i = 0; i < 8; i++) out[i] /= sum;
}

static void test_temperature_distribution(void) {
    float logits[8] = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f, 0.0f, 2.2f, -0.3f};
    double expect[8];
    int outside;
    const float temps[3] = {0.6f, 1.0f, 1.7f};
    for (int t = 0; t < 3; t++) {
        di_sampling_params p = params(temps[t]);
        p.seed = 20261129 + (uint64_t)t;
        softmax_ref(logits, temps[t], 0xff, expect);
        double chi = chi_square(logits, &p, expect, 40000, &outside);
        /* 7 degrees of freedom: P(chi2 > 24.3) = 0.001. Deterministic for this seed. */
        CHECKF(chi < 24.3, "T=%g: chi2 %g", temps[t], chi);
    }
    /* With top_k = 3 the renormalised survivors {6, 1, 4} and nothing else. */
    di_sampling_params p = params(0.8f);
    p.top_k = 3, p.seed = 7;
    softmax_ref(logits, 0.8, (1u << 6) | (1u << 1) | (1u << 4), expect);
    double chi = chi_square(logits, &p, expect, 30000, &outside);
    CHECKF(chi < 13.8 && outside == 0, "top_k 3: chi2 %g outside %d", chi, outside); /* 2 dof, p = 0.001 */
}

/* ---- the sets top_k, top_p and min_p keep ---- */

static void test_filter_sets(void) {
    float a[8] = {0, 5, 3, 5, 1, 4, -2, 2};
    di_sampling_params p = params(1.0f);
    p.top_k = 2;
    CHECK(survivors(a, p, NULL) == ((1u << 1) | (1u << 3)));
    p.top_k = 3;
    CHECK(survivors(a, p, NULL) == ((1u << 1) | (1u << 3) | (1u << 5)));
    p.top_k = 1; /* ties at the k-th value are all kept (HF/vLLM) */
    CHECK(survivors(a, p, NULL) == ((1u << 1) | (1u << 3)));
    p.top_k = 8;
    CHECK(survivors(a, p, NULL) == 0xff);
    p.top_k = 100;
    CHECK(survivors(a, p, NULL) == 0xff);
    p.top_k = 0;
    CHECK(survivors(a, p, NULL) == 0xff);
    float neg[8] = {-3, -INFINITY, -1.5f, NAN, -7, -INFINITY, -0.0f, 0.0f};
    p.top_k = 2; /* negative values and signed zeros order right; -0 and +0 tie */
    CHECK(survivors(neg, p, NULL) == ((1u << 6) | (1u << 7)));
    p.top_k = 3;
    CHECK(survivors(neg, p, NULL) == ((1u << 2) | (1u << 6) | (1u << 7)));
    p.top_k = 6; /* fewer than k finite tokens: all finite ones */
    CHECK(survivors(neg, p, NULL) == ((1u << 0) | (1u << 2) | (1u << 4) | (1u << 6) | (1u << 7)));

    /* top_p on probabilities 0.4 0.25 0.15 0.1 0.05 0.03 0.02 0 (last one -inf). */
    const double prob[8] = {0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.02, 0};
    float b[8];
    for (int i = 0; i < 8; i++) b[i] = prob[i] > 0 ? (float)log(prob[i]) : -INFINITY;
    p = params(1.0f);
    p.top_p = 0.3f;
    CHECK(survivors(b, p, NULL) == 0x01);
    p.top_p = 0.6f;
    CHECK(survivors(b, p, NULL) == 0x03);
    p.top_p = 0.7f;
    CHECK(survivors(b, p, NULL) == 0x07);
    p.top_p = 0.85f;
    CHECK(survivors(b, p, NULL) == 0x0f);
    p.top_p = 0.97f;
    CHECK(survivors(b, p, NULL) == 0x3f);
    p.top_p = 0.99f;
    CHECK(survivors(b, p, NULL) == 0x7f);
    p.top_p = 1e-6f;
    CHECK(survivors(b, p, NULL) == 0x01); /* at least one token */
    /* top_p after top_k, on the renormalised top_k set: 0.4/0.8 = 0.5, 0.65/0.8 = 0.81 */
    p.top_k = 3, p.top_p = 0.75f;
    CHECK(survivors(b, p, NULL) == 0x03);
    /* Equal probabilities: the sort is (prob desc, id asc), so the lowest ids make the nucleus. */
    float c[8] = {0, 1, 1, 1, 1, 0, 0, 0};
    p = params(1.0f);
    p.top_p = 0.3f; /* each 1-token has e/(4e+4) = 0.2 */
    CHECK(survivors(c, p, NULL) == 0x06);

    /* min_p relative to the top probability (0.4): keeps p >= min_p * 0.4. */
    p = params(1.0f);
    p.min_p = 0.5f; /* >= 0.2 */
    CHECK(survivors(b, p, NULL) == 0x03);
    p.min_p = 0.3f; /* >= 0.12 */
    CHECK(survivors(b, p, NULL) == 0x07);
    p.min_p = 0.2f; /* >= 0.08 */
    CHECK(survivors(b, p, NULL) == 0x0f);
    p.min_p = 1.0f; /* the top token and its exact ties */
    CHECK(survivors(b, p, NULL) == 0x01);
    CHECK(survivors(c, p, NULL) == 0x1e);
    /* min_p then top_p on the min_p survivors {0.4, 0.25, 0.15}: 0.4/0.8 = 0.5 < 0.55 */
    p.min_p = 0.3f, p.top_p = 0.55f;
    CHECK(survivors(b, p, NULL) == 0x03);
    /* temperature changes what min_p and top_p see: at T = 0.5, p ~ prob^2 */
    p = params(0.5f);
    p.min_p = 0.3f; /* prob^2 >= 0.3 * 0.16 = 0.048: 0.4, 0.25 (0.0625) */
    CHECK(survivors(b, p, NULL) == 0x03);
}

/* A full-sort reference of the filters for a big row: returns the sampled token for 53 random bits
 * r53 by inverse CDF in id order over fixed-point weights (the sampler's documented procedure,
 * docs/SAMPLING.md, written the plain way: a full sort, C's own conversions, 128-bit products). */
static int cmp_desc_ref(const void *a, const void *b) {
    const uint64_t *x = a, *y = b; /* pairs (W, id) */
    if (x[0] != y[0]) return x[0] > y[0] ? -1 : 1;
    return (x[1] > y[1]) - (x[1] < y[1]);
}
static int cmp_float_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* The token the filters and the draw give, by full sorts; *n_keep: the survivors' count; kept_w
 * (may be NULL): each id's weight among the survivors (0 for the others) and *kept_total their sum. */
static int32_t reference_sample_kept(const float *z, int32_t v, const di_sampling_params *p, uint64_t r53,
                                     int32_t *n_keep, uint64_t *kept_w, uint64_t *kept_total) {
    float *copy = malloc(sizeof(float) * (size_t)v);
    uint64_t *pairs = malloc(sizeof(uint64_t) * 2 * (size_t)v); /* (W, id) */
    uint64_t *w = calloc((size_t)v, sizeof(uint64_t));
    memcpy(copy, z, sizeof(float) * (size_t)v);
    qsort(copy, (size_t)v, sizeof(float), cmp_float_desc);
    float m = copy[0];
    float kth = (p->top_k > 0 && p->top_k < v) ? copy[p->top_k - 1] : -INFINITY;
    int bits = 63;
    while (((int64_t)1 << (63 - bits)) < v) bits--;
    int32_t n = 0;
    uint64_t total = 0;
    for (int32_t i = 0; i < v; i++) {
        if (z[i] < kth || z[i] == -INFINITY) continue;
        double wi = di_sample_exp(((double)z[i] - m) * (1.0 / p->temperature));
        if (wi < p->min_p) continue;
        uint64_t W = (uint64_t)ldexp(wi, bits);
        if (!W) continue;
        w[i] = W;
        total += W;
        pairs[2 * n] = W, pairs[2 * n + 1] = (uint64_t)i, n++;
    }
    if (p->top_p < 1.0f) {
        qsort(pairs, (size_t)n, 2 * sizeof(uint64_t), cmp_desc_ref);
        const double target = (double)p->top_p * (double)total;
        uint64_t cum = 0;
        int32_t keep = 0;
        while (keep < n && (double)cum < target) cum += pairs[2 * keep++];
        for (int32_t j = keep; j < n; j++) w[pairs[2 * j + 1]] = 0;
        n = keep;
        total = cum;
    }
    *n_keep = n;
    if (kept_w) memcpy(kept_w, w, sizeof(uint64_t) * (size_t)v), *kept_total = total;
    const uint64_t target = (uint64_t)(((u128)r53 * total) >> 53);
    uint64_t acc = 0;
    int32_t pick = -1;
    for (int32_t i = 0; i < v && pick < 0; i++) {
        acc += w[i];
        if (w[i] && acc > target) pick = i;
    }
    free(copy), free(pairs), free(w);
    return pick;
}

static int32_t reference_sample(const float *z, int32_t v, const di_sampling_params *p, uint64_t r53,
                                int32_t *n_keep) {
    return reference_sample_kept(z, v, p, r53, n_keep, NULL, NULL);
}

/* Processed logprobs: the drawn token's and the top list over the reference's survivors, each
 * ((z - max) / T - log(survivors' mass / 2^bits)), ranked (value desc, id asc) by a scan of every id
 * (the sampler's search only looks at the logits that could enter). */
static void test_processed_logprobs_against_reference(void) {
    float *z = malloc(sizeof(float) * BIG_VOCAB);
    uint64_t *kw = malloc(sizeof(uint64_t) * BIG_VOCAB);
    for (int32_t i = 0; i < BIG_VOCAB; i++) z[i] = (float)(8.0 * di_philox_uniform(51, (uint64_t)i, 0) - 4.0);
    for (int32_t i = 0; i < 30; i++) z[(i * 4099) % BIG_VOCAB] = 6.0f + 0.125f * (float)(i % 4); /* ties */
    const struct { float t, top_p, min_p; int32_t top_k; } cases[] = {
        {1.0f, 1.0f, 0.0f, 0}, {0.7f, 0.95f, 0.0f, 0}, {1.0f, 1.0f, 0.0f, 12}, {0.5f, 0.3f, 0.0f, 0},
        {1.5f, 0.99f, 0.02f, 500}};
    int bad = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        di_sampling_params p = params(cases[c].t);
        p.top_p = cases[c].top_p, p.min_p = cases[c].min_p, p.top_k = cases[c].top_k, p.seed = 300 + c;
        p.logprobs = DI_SAMPLER_MAX_LOGPROBS, p.logprobs_mode = DI_LOGPROBS_PROCESSED;
        int32_t n_keep;
        uint64_t total;
        const int32_t want = reference_sample_kept(z, BIG_VOCAB, &p, di_philox_bits53(p.seed, 0, 0), &n_keep, kw, &total);
        float max = -INFINITY;
        for (int32_t i = 0; i < BIG_VOCAB; i++) max = z[i] > max ? z[i] : max;
        const double log_total = log(ldexp(di_sample_u64_to_double(total), -di_sample_weight_bits(BIG_VOCAB)));
        int32_t ids[DI_SAMPLER_MAX_LOGPROBS];
        double vals[DI_SAMPLER_MAX_LOGPROBS];
        int m = 0;
        for (int32_t i = 0; i < BIG_VOCAB; i++) {
            if (!kw[i]) continue;
            const double v = ((double)z[i] - (double)max) / (double)p.temperature - log_total;
            if (m == DI_SAMPLER_MAX_LOGPROBS && !(v > vals[m - 1])) continue;
            int k = m < DI_SAMPLER_MAX_LOGPROBS ? m++ : m - 1;
            for (; k > 0 && vals[k - 1] < v; k--) vals[k] = vals[k - 1], ids[k] = ids[k - 1];
            vals[k] = v, ids[k] = i;
        }
        di_sample_result res;
        const int32_t got = sample_full(g_big, z, &p, NULL, NULL, 0, &res);
        int diff = got != want || res.n_top != m ||
                   res.logprob != (float)(((double)z[want] - (double)max) / (double)p.temperature - log_total);
        for (int k = 0; k < m && k < res.n_top && !diff; k++)
            diff = res.top[k].token_id != ids[k] || res.top[k].logprob != (float)vals[k];
        if (diff) fprintf(stderr, "processed logprobs, case %zu: token %d / %d, %d of %d listed\n", c, got, want,
                          res.n_top, m);
        bad += diff;
    }
    CHECKF(bad == 0, "%d processed-logprob cases differ from the reference", bad);
    free(z), free(kw);
}

static void test_big_row_against_reference(void) {
    float *z = malloc(sizeof(float) * BIG_VOCAB);
    /* Logits like a model's: a few strong candidates above a wide flat tail (Philox for the noise). */
    for (int32_t i = 0; i < BIG_VOCAB; i++) z[i] = (float)(6.0 * di_philox_uniform(3, (uint64_t)i, 9) - 3.0);
    for (int32_t i = 0; i < 40; i++) z[(i * 7919) % BIG_VOCAB] = 10.0f - 0.25f * (float)i;
    z[5000] = z[6000] = z[7000] = 9.0f; /* exact ties */
    struct { float t; int32_t k; float p, min_p; } cases[] = {
        {1.0f, 0, 0.9f, 0}, {1.0f, 0, 0.999f, 0}, {0.7f, 0, 0.5f, 0}, {1.0f, 50, 0.95f, 0},
        {2.0f, 0, 0.95f, 0},  /* a flat distribution: the nucleus reaches deep into the tail */
        {5.0f, 0, 0.99f, 0},  /* nearly uniform: every threshold level is needed */
        {1.0f, 1000, 1.0f, 0}, {1.0f, 3, 1.0f, 0}, {1.0f, 5, 1.0f, 0} /* k-th value tied 4 ways */,
        {0.5f, 7, 0.9f, 0}, {1.0f, 0, 1.0f, 0.05f}, {1.3f, 200, 0.8f, 0.01f},
        {1.0f, 0, 1.0f, 0},
    };
    int mismatches = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        di_sampling_params p = params(cases[c].t);
        p.top_k = cases[c].k, p.top_p = cases[c].p, p.min_p = cases[c].min_p, p.seed = 1000 + c;
        for (uint64_t pos = 0; pos < 12; pos++) {
            int32_t n_keep;
            int32_t want = reference_sample(z, BIG_VOCAB, &p, di_philox_bits53(p.seed, pos, 0), &n_keep);
            int32_t got = sample1(g_big, z, &p, pos);
            if (got != want) {
                mismatches++;
                fprintf(stderr, "case %zu pos %llu: got %d want %d (reference keeps %d)\n", c,
                        (unsigned long long)pos, got, want, n_keep);
            }
        }
    }
    CHECK(mismatches == 0);
    /* a rising row: every token would enter top_k's heap, so the radix select takes over */
    for (int32_t i = 0; i < BIG_VOCAB; i++) z[i] = (float)i * 1e-4f;
    const int32_t ks[] = {1, 50, 1024, 1025};
    for (size_t c = 0; c < sizeof ks / sizeof ks[0]; c++) {
        di_sampling_params p = params(0.01f);
        p.top_k = ks[c], p.seed = 77;
        for (uint64_t pos = 0; pos < 4; pos++) {
            int32_t n_keep;
            const int32_t want = reference_sample(z, BIG_VOCAB, &p, di_philox_bits53(p.seed, pos, 0), &n_keep);
            CHECKF(sample1(g_big, z, &p, pos) == want && want >= BIG_VOCAB - ks[c], "rising row, top_k %d", ks[c]);
        }
    }
    free(z);
}

/* Random rows of several shapes (flat, heavy exact ties, the bf16 grid, many -inf, Gumbel, rising --
 * the heap top_k's worst order, which hands it to the radix select) and random filter settings
 * against the same reference: the bucketed top_p and the heap and radix top_k must pick exactly the
 * full sort's tokens. */
static void test_random_rows_against_reference(void) {
    int mismatches = 0;
    for (int trial = 0; trial < 400; trial++) {
        int32_t v = 1 + (int32_t)(di_philox_uniform(5, (uint64_t)trial, 0) * 3000);
        float *z = malloc(sizeof(float) * (size_t)v);
        int shape = trial % 6;
        for (int32_t i = 0; i < v; i++) {
            double u = di_philox_uniform(6 + (uint64_t)trial, (uint64_t)i, 0);
            float x = (float)(8 * u);
            if (shape == 1) x = (float)(int)(u * 6) * 0.5f;
            if (shape == 2) x = di_bf16_round((float)(20 * u - 10));
            if (shape == 3) x = u < 0.3 ? -INFINITY : (float)(3 * u);
            if (shape == 4) x = (float)-log(-log(u + 1e-12) + 1e-12);
            if (shape == 5) x = (float)i * 0.01f - (float)(u < 0.1);
            z[i] = x;
        }
        if (shape == 3) z[v / 2] = 1.0f;
        di_sampling_params p = params((float)(0.05 + 3 * di_philox_uniform(7, (uint64_t)trial, 0)));
        if (di_philox_uniform(7, (uint64_t)trial, 1) >= 0.4)
            p.top_k = (int32_t)(1 + di_philox_uniform(7, (uint64_t)trial, 2) * v * 1.2);
        if (di_philox_uniform(7, (uint64_t)trial, 3) >= 0.3)
            p.top_p = (float)(0.01 + 0.99 * di_philox_uniform(7, (uint64_t)trial, 4));
        if (di_philox_uniform(7, (uint64_t)trial, 5) >= 0.6)
            p.min_p = (float)(0.3 * di_philox_uniform(7, (uint64_t)trial, 6));
        p.seed = (uint64_t)trial;
        di_sampler *s;
        di_err err = {0};
        di_sampler_create(v, &s, &err);
        for (uint64_t pos = 0; pos < 5; pos++) {
            int32_t n_keep;
            int32_t want = reference_sample(z, v, &p, di_philox_bits53(p.seed, pos, 0), &n_keep);
            if (sample1(s, z, &p, pos) != want) mismatches++;
        }
        di_sampler_free(s);
        free(z);
    }
    CHECKF(mismatches == 0, "%d of 2000 draws differ from the reference", mismatches);
}

/* di_sampler_sample_plain is di_sampler_sample without history or mask; the plain predicates. */
static void test_plain_rows(void) {
    float *z = malloc(sizeof(float) * BIG_VOCAB);
    for (int32_t i = 0; i < BIG_VOCAB; i++) z[i] = (float)(12.0 * di_philox_uniform(8, (uint64_t)i, 0) - 6.0);
    int differ = 0;
    for (int c = 0; c < 40; c++) {
        di_sampling_params p = params((float)(0.2 + 0.1 * c));
        p.top_k = c % 3 ? 0 : 20 * c + 1, p.top_p = c % 2 ? 0.9f : 1.0f, p.min_p = c % 5 ? 0.0f : 0.01f;
        p.seed = 77 + (uint64_t)c;
        const di_plain_sampling ps = di_plain_sampling_of(&p, 1000 + (uint64_t)c);
        di_err err = {0};
        CHECK(di_plain_sampling_validate(&ps, BIG_VOCAB, &err) == DI_OK);
        int32_t tok = -1;
        CHECK(di_sampler_sample_plain(g_big, z, &ps, &tok, &err) == DI_OK);
        differ += tok != sample1(g_big, z, &p, 1000 + (uint64_t)c);
    }
    CHECK(differ == 0);
    di_sampling_params p = params(0.7f);
    CHECK(di_sampling_is_plain_sampled(&p) && !di_sampling_is_plain_greedy(&p));
    p.logprobs = 1;
    CHECK(!di_sampling_is_plain_sampled(&p));
    p = params(0.0f);
    CHECK(!di_sampling_is_plain_sampled(&p) && di_sampling_is_plain_greedy(&p));
    p = params(1.0f);
    p.presence_penalty = 0.5f;
    CHECK(!di_sampling_is_plain_sampled(&p));
    di_plain_sampling ps = di_plain_sampling_of(&p, 0);
    ps.temperature = 0.0f;
    di_err err = {0};
    CHECK(di_plain_sampling_validate(&ps, BIG_VOCAB, &err) == DI_EINVAL && strstr(err.msg, "temperature"));
    ps.temperature = 1.0f, ps.top_p = 0.0f;
    CHECK(di_plain_sampling_validate(&ps, BIG_VOCAB, &err) == DI_EINVAL && strstr(err.msg, "top_p"));
    free(z);
}

/* ---- penalties, bias, mask ---- */

/* The processed logits (up to a constant) through processed logprobs at temperature 0. */
static void processed_logprobs(const float *logits, di_sampling_params p, const di_sample_history *h,
                               const uint32_t *mask, di_sample_result *res) {
    p.logprobs = 8, p.logprobs_mode = DI_LOGPROBS_PROCESSED;
    sample_full(g_s, logits, &p, h, mask, 0, res);
}

/* Checks that res lists exactly the log_softmax of want[] (finite entries), in order. */
static void check_logsoftmax(const di_sample_result *res, const double *want, const char *label) {
    double m = -INFINITY, sum = 0;
    int finite = 0;
    for (int i = 0; i < 8; i++) m = fmax(m, want[i]);
    for (int i = 0; i < 8; i++) sum += exp(want[i] - m), finite += isfinite(want[i]);
    double lse = m + log(sum);
    CHECKF(res->n_top == finite, "%s: n_top %d want %d", label, res->n_top, finite);
    for (int j = 0; j < res->n_top; j++) {
        int32_t id = res->top[j].token_id;
        CHECKF(close_to(res->top[j].logprob, want[id] - lse, 1e-5), "%s: token %d logprob %g want %g", label, id,
               res->top[j].logprob, want[id] - lse);
        if (j > 0) CHECK(res->top[j - 1].logprob >= res->top[j].logprob);
    }
    CHECKF(close_to(res->logprob, want[res->token_id] - lse, 1e-5), "%s: chosen", label);
}

static void test_penalties(void) {
    const float logits[8] = {2.0f, -1.0f, 0.5f, 1.5f, 0.0f, -3.0f, 1.0f, 0.25f};
    di_sample_result res;
    /* repetition 2 over prompt {0, 5} + output {1, 1, 4}: positives halved, negatives doubled, zero
     * stays, each distinct token once. */
    int32_t prompt[2] = {0, 5}, output[3] = {1, 1, 4};
    di_sample_history h = {prompt, 2, output, 3};
    di_sampling_params p = params(0.0f);
    p.repetition_penalty = 2.0f;
    processed_logprobs(logits, p, &h, NULL, &res);
    double want_rep[8] = {1.0, -2.0, 0.5, 1.5, 0.0, -6.0, 1.0, 0.25};
    CHECK(res.token_id == 3);
    check_logsoftmax(&res, want_rep, "repetition");
    /* frequency 0.5 and presence 0.25 over output {2, 2, 0, 7} only (prompt {3} is not penalised). */
    int32_t prompt2[1] = {3}, output2[4] = {2, 2, 0, 7};
    h = (di_sample_history){prompt2, 1, output2, 4};
    p = params(0.0f);
    p.frequency_penalty = 0.5f, p.presence_penalty = 0.25f;
    processed_logprobs(logits, p, &h, NULL, &res);
    double want_fp[8] = {1.25, -1.0, -0.75, 1.5, 0.0, -3.0, 1.0, -0.5};
    CHECK(res.token_id == 3);
    check_logsoftmax(&res, want_fp, "frequency/presence");
    /* negative penalties encourage repetition */
    p.frequency_penalty = -1.0f, p.presence_penalty = -0.5f;
    processed_logprobs(logits, p, &h, NULL, &res);
    double want_neg[8] = {3.5, -1.0, 3.0, 1.5, 0.0, -3.0, 1.0, 1.75};
    CHECK(res.token_id == 0);
    check_logsoftmax(&res, want_neg, "negative penalties");
    /* all three: repetition first (prompt + output), then frequency and presence (output). */
    p = params(0.0f);
    p.repetition_penalty = 1.25f, p.frequency_penalty = 0.5f, p.presence_penalty = 0.25f;
    processed_logprobs(logits, p, &h, NULL, &res);
    double want_all[8] = {2.0 / 1.25 - 0.75, -1.0, 0.5 / 1.25 - 1.25, 1.5 / 1.25, 0.0, -3.0, 1.0, 0.25 / 1.25 - 0.75};
    check_logsoftmax(&res, want_all, "all penalties");
    /* The scratch marks are cleared: the same call on a fresh sampler and a plain call after agree. */
    di_sampler *fresh;
    di_err err = {0};
    di_sampler_create(8, &fresh, &err);
    di_sampling_params plain = params(0.0f);
    plain.logprobs = 8, plain.logprobs_mode = DI_LOGPROBS_PROCESSED;
    di_sample_result a, b;
    sample_full(g_s, logits, &plain, &h, NULL, 0, &a);
    sample_full(fresh, logits, &plain, &h, NULL, 0, &b);
    CHECK(memcmp(&a, &b, sizeof a) == 0);
    double want_plain[8] = {2.0, -1.0, 0.5, 1.5, 0.0, -3.0, 1.0, 0.25};
    check_logsoftmax(&a, want_plain, "no penalty after penalties");
    di_sampler_free(fresh);
}

static void test_bias_and_mask(void) {
    float zero[8] = {0};
    di_sample_result res;
    di_logit_bias bias[3] = {{2, 5.0f}, {6, 3.0f}, {2, -10.0f}};
    di_sampling_params p = params(0.0f);
    p.logit_bias = bias, p.n_logit_bias = 2;
    CHECK(sample1(g_s, zero, &p, 0) == 2);
    p.n_logit_bias = 3; /* entries for one id add up: token 2 ends at -5 */
    CHECK(sample1(g_s, zero, &p, 0) == 6);
    /* The bias comes before the repetition penalty: (-2 + 5) / 2 = 1.5, not -2 * 2 + 5 = 1. */
    float a[8] = {1.0f, -2.0f, 0, 0, 0, 0, 0, 0};
    di_logit_bias b1[1] = {{1, 5.0f}};
    int32_t prompt[1] = {1};
    di_sample_history h = {prompt, 1, NULL, 0};
    p = params(0.0f);
    p.logit_bias = b1, p.n_logit_bias = 1, p.repetition_penalty = 2.0f;
    processed_logprobs(a, p, &h, NULL, &res);
    double want[8] = {1.0, 1.5, 0, 0, 0, 0, 0, 0};
    CHECK(res.token_id == 1);
    check_logsoftmax(&res, want, "bias then repetition");
    /* A strong negative bias removes a token from sampling in practice. */
    float c[8] = {0, 0, 0, 0, 0, 0, 0, 10};
    di_logit_bias ban[1] = {{7, -100.0f}};
    p = params(1.0f);
    p.logit_bias = ban, p.n_logit_bias = 1;
    int seen7 = 0;
    for (uint64_t pos = 0; pos < 500; pos++) seen7 += sample1(g_s, c, &p, pos) == 7;
    CHECK(seen7 == 0);

    /* Mask: only tokens 3 and 5 allowed. Greedy takes the better allowed one; sampling stays inside. */
    float d[8] = {9, 8, 7, 1, 6, 2, 5, 4};
    uint32_t mask[1] = {(1u << 3) | (1u << 5)};
    p = params(0.0f);
    di_sample_history none = {0};
    CHECK(sample_full(g_s, d, &p, &none, mask, 0, &res) == 5);
    p = params(1.0f);
    int hit[8] = {0};
    for (uint64_t pos = 0; pos < 2000; pos++) hit[sample_full(g_s, d, &p, NULL, mask, pos, &res)]++;
    CHECK(hit[3] + hit[5] == 2000 && hit[3] > 100 && hit[5] > 1000); /* p(3) = 1/(1 + e) = 0.27 */
    /* A mask that allows nothing is an error, not a token. */
    uint32_t empty[1] = {0};
    di_sample_row row = {d, &p, NULL, empty, 0};
    di_err err = {0};
    CHECK(di_sampler_sample(g_s, &row, &res, &err) == DI_EINVAL && res.token_id == -1);
}

/* ---- logprobs ---- */

/* The raw top list against a scan of every id (the sampler's search only looks at the logits that
 * could enter): rows where lse dwarfs the listed logits (1,000 over values near 0, where many
 * floats round to one logprob) and plain rows, the same lse (max + log of the exp sum). */
static void test_logprob_top_list(void) {
    const int32_t n = BIG_VOCAB, n_top = DI_SAMPLER_MAX_LOGPROBS;
    float *z = malloc(sizeof(float) * n);
    int bad = 0;
    for (int kind = 0; kind < 4; kind++) {
        for (int32_t i = 0; i < n; i++) {
            const double u = di_philox_uniform(31, (uint64_t)i, (uint32_t)kind);
            z[i] = kind == 0 ? (float)((u - 0.5) * 1e-4)                      /* near 0, a float ulp ~1e-12 */
                   : kind == 1 ? (float)ldexp(u - 0.5, -(int)(u * 1000) % 120) /* every magnitude to 2^-120 */
                   : kind == 2 ? (float)((int)(u * 7) * 0.5)                  /* exact ties */
                               : (float)((u - 0.5) * 20.0);
        }
        if (kind < 2) z[n / 2] = 1000.0f;
        float max;
        di_sample_argmax(DI_SAMPLE_SCALAR, z, n, false, &max);
        const double lse = (double)max + di_sample_log(di_sample_exp_sum(DI_SAMPLE_SCALAR, z, n, max));
        int32_t want[DI_SAMPLER_MAX_LOGPROBS];
        double want_v[DI_SAMPLER_MAX_LOGPROBS];
        int m = 0;
        for (int32_t i = 0; i < n; i++) { /* insertion into the n_top best, (value desc, id asc) */
            const double v = (double)z[i] - lse;
            if (m == n_top && !(v > want_v[m - 1])) continue;
            int k = m < n_top ? m++ : m - 1;
            for (; k > 0 && want_v[k - 1] < v; k--) want_v[k] = want_v[k - 1], want[k] = want[k - 1];
            want_v[k] = v, want[k] = i;
        }
        di_sampling_params p = params(0.0f);
        p.logprobs = n_top;
        di_sample_result res;
        sample_full(g_big, z, &p, NULL, NULL, 0, &res);
        bad += res.n_top != m;
        for (int k = 0; k < m && k < res.n_top; k++)
            if (res.top[k].token_id != want[k] || res.top[k].logprob != (float)want_v[k]) {
                bad++;
                fprintf(stderr, "kind %d rank %d: id %d (%g), scan %d (%g)\n", kind, k, res.top[k].token_id,
                        res.top[k].logprob, want[k], (float)want_v[k]);
                break;
            }
    }
    CHECKF(bad == 0, "%d top lists differ from the scan", bad);
    free(z);
}

static void test_logprobs(void) {
    const float logits[8] = {1.0f, 2.0f, 3.0f, 0.5f, 3.0f, -1.0f, -INFINITY, NAN};
    double lse = 0;
    for (int i = 0; i < 6; i++) lse += exp((double)logits[i]);
    lse = log(lse);
    /* raw (default): log_softmax of the logits as given, whatever the temperature, bias or filters. */
    di_logit_bias bias[1] = {{0, 4.0f}};
    di_sampling_params p = params(0.8f);
    p.logprobs = 3, p.top_k = 2, p.logit_bias = bias, p.n_logit_bias = 1, p.seed = 5;
    di_sample_result res;
    for (uint64_t pos = 0; pos < 20; pos++) {
        int32_t tok = sample_full(g_s, logits, &p, NULL, NULL, pos, &res);
        CHECK(tok == 0 || tok == 2 || tok == 4); /* top_k 2 of the biased row: 5 (id 0), then the tie at 3 */
        CHECK(close_to(res.logprob, logits[tok] - lse, 1e-6));
        CHECK(res.n_top == 3);
        CHECK(res.top[0].token_id == 2 && res.top[1].token_id == 4 && res.top[2].token_id == 1);
        CHECK(close_to(res.top[0].logprob, 3.0 - lse, 1e-6) && close_to(res.top[2].logprob, 2.0 - lse, 1e-6));
    }
    /* logprobs = 20 over 8 tokens: only the 6 with a finite logprob are listed. */
    p = params(1.0f);
    p.logprobs = 20;
    sample_full(g_s, logits, &p, NULL, NULL, 0, &res);
    CHECK(res.n_top == 6 && res.top[5].token_id == 5);
    /* processed: the distribution sampled from, here top_k 2 at T = 0.5 over {2, 4} tied -> log(1/2). */
    p = params(0.5f);
    p.logprobs = 5, p.top_k = 2, p.logprobs_mode = DI_LOGPROBS_PROCESSED;
    sample_full(g_s, logits, &p, NULL, NULL, 0, &res);
    CHECK(res.n_top == 2 && res.top[0].token_id == 2 && res.top[1].token_id == 4);
    CHECK(close_to(res.logprob, log(0.5), 1e-6) && close_to(res.top[1].logprob, log(0.5), 1e-6));
    /* processed at T = 0.5 with no filter: log_softmax(logits / 0.5) */
    p.top_k = 0;
    sample_full(g_s, logits, &p, NULL, NULL, 3, &res);
    double lse2 = 0;
    for (int i = 0; i < 6; i++) lse2 += exp(2.0 * logits[i]);
    lse2 = log(lse2);
    CHECK(res.n_top == 5 && res.top[2].token_id == 1 && close_to(res.top[2].logprob, 4.0 - lse2, 1e-6));
    CHECK(close_to(res.logprob, 2.0 * logits[res.token_id] - lse2, 1e-6));
    /* logprobs = 0: nothing returned */
    p = params(1.0f);
    sample_full(g_s, logits, &p, NULL, NULL, 0, &res);
    CHECK(res.n_top == 0 && res.logprob == 0.0f);
}

/* ---- determinism and independence ---- */

static void test_determinism(void) {
    float *z = malloc(sizeof(float) * BIG_VOCAB);
    for (int32_t i = 0; i < BIG_VOCAB; i++) z[i] = (float)(4.0 * di_philox_uniform(11, (uint64_t)i, 0));
    di_sampling_params p = params(1.0f);
    p.seed = 31337, p.top_p = 0.95f;
    di_sampler *other;
    di_err err = {0};
    di_sampler_create(BIG_VOCAB, &other, &err);
    int32_t a[100], b[100], c[100];
    for (uint64_t pos = 0; pos < 100; pos++) a[pos] = sample1(g_big, z, &p, pos);
    for (uint64_t pos = 100; pos-- > 0;) b[pos] = sample1(other, z, &p, pos); /* other sampler, reverse order */
    p.seed = 31338;
    int differ = 0, distinct = 0;
    for (uint64_t pos = 0; pos < 100; pos++) c[pos] = sample1(g_big, z, &p, pos);
    for (int i = 0; i < 100; i++) {
        differ += a[i] != c[i];
        distinct += i > 0 && a[i] != a[i - 1];
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECKF(differ >= 95, "seeds 31337 and 31338 agree at %d of 100 positions", 100 - differ);
    CHECKF(distinct >= 95, "a stream repeats itself: %d changes", distinct);
    di_sampler_free(other);
    free(z);
}

/* Rows with different params, histories and seeds give the same tokens and logprobs whatever the
 * order they are sampled in and whatever else is sampled in between. */
static void test_row_independence(void) {
    enum { ROWS = 8 };
    static float logits[ROWS][8];
    di_sampling_params p[ROWS];
    static int32_t hist_ids[ROWS][4];
    di_sample_history h[ROWS];
    di_sample_row rows[ROWS];
    for (int r = 0; r < ROWS; r++) {
        for (int i = 0; i < 8; i++) logits[r][i] = (float)(3.0 * di_philox_uniform(77, (uint64_t)(r * 8 + i), 3));
        p[r] = params(r == 0 ? 0.0f : 0.5f + 0.2f * (float)r);
        p[r].seed = (uint64_t)r * 1000003u;
        p[r].top_k = r % 3 == 1 ? 4 : 0;
        p[r].top_p = r % 4 == 2 ? 0.8f : 1.0f;
        p[r].min_p = r == 5 ? 0.1f : 0.0f;
        p[r].repetition_penalty = r % 2 ? 1.3f : 1.0f;
        p[r].frequency_penalty = r == 3 ? 0.7f : 0.0f;
        p[r].logprobs = r % 4;
        for (int i = 0; i < 4; i++) hist_ids[r][i] = (r + 3 * i) % 8;
        h[r] = (di_sample_history){hist_ids[r], 2, hist_ids[r] + 2, 2};
        rows[r] = (di_sample_row){logits[r], &p[r], &h[r], NULL, (uint64_t)(17 + r)};
    }
    di_sample_result alone[ROWS], batch[ROWS], shuffled[ROWS];
    di_err err = {0};
    for (int r = 0; r < ROWS; r++) {
        di_sampler *fresh;
        di_sampler_create(8, &fresh, &err);
        CHECK(di_sampler_sample(fresh, &rows[r], &alone[r], &err) == DI_OK);
        di_sampler_free(fresh);
    }
    CHECK(di_sampler_sample_rows(g_s, rows, ROWS, batch, &err) == DI_OK);
    const int order[ROWS] = {5, 2, 7, 0, 3, 6, 1, 4};
    for (int i = 0; i < ROWS; i++) {
        int r = order[i];
        di_sample_result junk;
        di_sampler_sample(g_s, &rows[(r + 1) % ROWS], &junk, &err); /* something else in between */
        CHECK(di_sampler_sample(g_s, &rows[r], &shuffled[r], &err) == DI_OK);
    }
    CHECK(memcmp(alone, batch, sizeof alone) == 0);
    CHECK(memcmp(alone, shuffled, sizeof alone) == 0);
    /* A failing row is named. */
    di_sampling_params bad = params(-1.0f);
    rows[3].params = &bad;
    CHECK(di_sampler_sample_rows(g_s, rows, ROWS, batch, &err) == DI_EINVAL && strstr(err.msg, "row 3: "));
}

/* NaN and inf in a sampled (non-greedy) row. */
/* The pool (several host threads) gives each row exactly di_sampler_sample's result, whatever the
 * thread count; a row that cannot be sampled fails alone. */
/* A row sampled alone spreads its weight pass over the threads (sampler.c weigh_tokens): the same
 * results with 1, 3 and 8 threads, rows of V4.1's vocabulary under every filter. */
static void test_weight_pass_threads(void) {
    float *z = malloc(sizeof(float) * BIG_VOCAB);
    for (int32_t i = 0; i < BIG_VOCAB; i++) z[i] = (float)(12.0 * di_philox_uniform(41, (uint64_t)i, 0) - 6.0);
    const struct { float t, top_p, min_p; int32_t top_k; } cases[] = {
        {1.0f, 1.0f, 0.0f, 0}, {0.7f, 0.95f, 0.0f, 0}, {1.3f, 0.9f, 0.01f, 100}, {2.0f, 0.5f, 0.0f, 0}};
    const int threads[] = {1, 3, 8}, saved = omp_get_max_threads();
    int bad = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        di_sampling_params p = params(cases[c].t);
        p.top_p = cases[c].top_p, p.min_p = cases[c].min_p, p.top_k = cases[c].top_k, p.seed = 90 + c;
        p.logprobs = 5, p.logprobs_mode = c % 2 ? DI_LOGPROBS_PROCESSED : DI_LOGPROBS_RAW;
        di_sample_result want[8], got;
        for (int t = 0; t < 3; t++) {
            omp_set_num_threads(threads[t]);
            for (uint64_t pos = 0; pos < 8; pos++) {
                sample_full(g_big, z, &p, NULL, NULL, pos, t ? &got : &want[pos]);
                if (t) bad += memcmp(&got, &want[pos], sizeof got) != 0;
            }
        }
    }
    omp_set_num_threads(saved);
    CHECKF(bad == 0, "%d draws change with the threads of the weight pass", bad);
    free(z);
}

static void test_pool(void) {
    enum { V = 3000, N = 97 };
    float *logits = malloc(sizeof(float) * V * N);
    di_sampling_params *ps = calloc(N, sizeof *ps);
    di_sample_row *rows = calloc(N, sizeof *rows);
    di_sample_result *want = calloc(N, sizeof *want), *got = calloc(N, sizeof *got);
    di_status *st = calloc(N, sizeof *st), want_st[N];
    di_err *errs = calloc(N, sizeof *errs);
    int32_t prompt[5] = {1, 7, 7, 2999, 40};
    di_sample_history h = {prompt, 5, prompt + 2, 3};
    uint64_t r = 0x2545f4914f6cdd1dull;
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < V; k++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            logits[(size_t)i * V + k] = (float)((int64_t)(r >> 40) % 2000) / 97.0f;
        }
        ps[i] = params(i % 4 == 0 ? 0.0f : 0.3f + 0.1f * (float)(i % 9));
        ps[i].top_k = i % 3 == 1 ? 40 : 0;
        ps[i].top_p = i % 5 == 2 ? 0.8f : 1.0f;
        ps[i].repetition_penalty = i % 7 == 3 ? 1.3f : 1.0f;
        ps[i].logprobs = i % 6 == 5 ? 3 : 0;
        ps[i].seed = (uint64_t)i * 31;
        rows[i] = (di_sample_row){logits + (size_t)i * V, &ps[i], &h, NULL, (uint64_t)(100 + i)};
    }
    for (int k = 0; k < V; k++) logits[(size_t)50 * V + k] = -INFINITY; /* row 50: nothing to sample */
    di_sampler *one = NULL;
    di_err err = {0};
    CHECK(di_sampler_create(V, &one, &err) == DI_OK);
    for (int i = 0; i < N; i++) want_st[i] = di_sampler_sample(one, &rows[i], &want[i], &err);
    CHECK(want_st[50] == DI_EINVAL && want_st[0] == DI_OK);
    const int threads[] = {1, 3, 8};
    for (int t = 0; t < 3; t++) {
        omp_set_num_threads(threads[t]);
        di_sampler_pool *pool = NULL;
        CHECK(di_sampler_pool_create(V, &pool, &err) == DI_OK);
        memset(got, 0, sizeof *got * N);
        di_sampler_pool_sample(pool, rows, N, got, st, errs);
        int bad = 0;
        for (int i = 0; i < N; i++)
            bad += st[i] != want_st[i] || (!st[i] && memcmp(&got[i], &want[i], sizeof got[i]) != 0);
        CHECKF(bad == 0, "pool of %d threads: %d of %d rows differ from the sampler alone", threads[t], bad, N);
        CHECK(st[50] == DI_EINVAL && strstr(errs[50].msg, "no token"));
        di_sampler_pool_free(pool);
    }
    di_sampler_pool *pool = NULL;
    CHECK(di_sampler_pool_create(0, &pool, &err) == DI_EINVAL && !pool);
    di_sampler_free(one);
    free(logits), free(ps), free(rows), free(want), free(got), free(st), free(errs);
}

static void test_nonfinite(void) {
    float a[8] = {NAN, 1, 2, NAN, 0, -INFINITY, 1.5f, NAN};
    di_sampling_params p = params(1.0f);
    p.logprobs = 8;
    int hit[8] = {0};
    di_sample_result res;
    for (uint64_t pos = 0; pos < 1000; pos++) {
        hit[sample_full(g_s, a, &p, NULL, NULL, pos, &res)]++;
        CHECK(isfinite(res.logprob));
    }
    CHECK(hit[0] == 0 && hit[3] == 0 && hit[5] == 0 && hit[7] == 0 && hit[2] > hit[1]);
    CHECK(res.n_top == 4);
    float b[8] = {INFINITY, 1e30f, 2, INFINITY, 0, NAN, 1, 3};
    memset(hit, 0, sizeof hit);
    p.logprobs = 0;
    for (uint64_t pos = 0; pos < 1000; pos++) hit[sample1(g_s, b, &p, pos)]++;
    CHECK(hit[0] + hit[3] == 1000 && hit[0] > 400 && hit[3] > 400); /* +inf tokens share the mass */
    /* A penalty that overflows f32 saturates at FLT_MAX instead of poisoning the row with inf - inf. */
    float c[8] = {1e10f, 1, 2, 3, 4, 5, 6, -1e10f};
    int32_t prompt[2] = {0, 7};
    di_sample_history h = {prompt, 2, NULL, 0};
    p = params(1.0f);
    p.repetition_penalty = 1e-30f;
    for (uint64_t pos = 0; pos < 50; pos++) CHECK(sample_full(g_s, c, &p, &h, NULL, pos, &res) == 0);
    p.temperature = 0.0f, p.logprobs = 2, p.logprobs_mode = DI_LOGPROBS_PROCESSED;
    CHECK(sample_full(g_s, c, &p, &h, NULL, 0, &res) == 0 && res.logprob == 0.0f && res.n_top == 2);
}

/* ---- edit lists (sample_edits.h) ---- */

/* Steps 1-3 as the sampler ran them before the edit lists: the bias in request order, the mask,
 * then each distinct prompt / output id's penalties straight from the history. */
static void reference_edits(float *z, int32_t v, const di_sampling_params *p, const di_sample_history *h,
                            const uint32_t *mask) {
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        const int32_t id = p->logit_bias[i].token_id;
        z[id] = di_sample_sanitize(z[id] + p->logit_bias[i].bias);
    }
    for (int32_t id = 0; id < v && mask; id++)
        if (!(mask[id / 32] >> (id % 32) & 1)) z[id] = -INFINITY;
    uint8_t *seen = calloc((size_t)v, 1);
    uint32_t *count = calloc((size_t)v, sizeof *count);
    if (p->repetition_penalty != 1.0f)
        for (int64_t i = 0; i < h->n_prompt + h->n_output; i++) {
            const int32_t id = i < h->n_prompt ? h->prompt_ids[i] : h->output_ids[i - h->n_prompt];
            if (seen[id]++) continue;
            const float rp = p->repetition_penalty;
            z[id] = di_sample_sanitize(z[id] < 0.0f ? z[id] * rp : z[id] / rp);
        }
    if (p->frequency_penalty != 0.0f || p->presence_penalty != 0.0f) {
        for (int64_t i = 0; i < h->n_output; i++) count[h->output_ids[i]]++;
        for (int32_t id = 0; id < v; id++)
            if (count[id]) {
                const float t = z[id] - p->frequency_penalty * (float)count[id];
                z[id] = di_sample_sanitize(t - p->presence_penalty);
            }
    }
    free(seen);
    free(count);
}

/* Random params, histories (ids drawn from a few, so they repeat) and masks over rows of several
 * vocabularies: the built lists are well formed (bias grouped by id and stable within an id, no id
 * twice in a stage, the counts summing to the output's length), and applied to the sanitised row
 * they give the reference's bits; building twice gives the same lists (the scratch is cleared). */
static void test_edit_lists(void) {
    const int32_t vocabs[3] = {5, 300, 4099};
    uint64_t rng = 0x5eed;
    int rows = 0, empty = 0;
    for (int vi = 0; vi < 3; vi++) {
        const int32_t v = vocabs[vi];
        di_sample_editor *ed = di_sample_editor_new(v);
        float *logits = malloc(sizeof(float) * (size_t)v), *z = malloc(sizeof(float) * (size_t)v);
        float *want = malloc(sizeof(float) * (size_t)v);
        uint32_t *mask = malloc(sizeof(uint32_t) * (size_t)((v + 31) / 32));
        int32_t prompt[64], output[64];
        di_logit_bias bias[40];
        for (int it = 0; it < 300; it++, rows++) {
            for (int32_t i = 0; i < v; i++) {
                const uint64_t r = di_philox_bits53(rng, (uint64_t)i, 7);
                logits[i] = (float)((double)(r % 2001) / 100.0 - 10.0);
                if (r % 97 == 0) logits[i] = r % 2 ? INFINITY : NAN;
                if (r % 89 == 0) logits[i] = -INFINITY;
            }
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            const int32_t ids = 1 + (int32_t)(rng >> 40) % (v < 12 ? v : 12); /* histories drawn from few ids */
            di_sampling_params p = params(1.0f);
            const int kind = it % 8;
            p.repetition_penalty = kind & 1 ? 0.5f + (float)(it % 7) * 0.25f : 1.0f;
            p.frequency_penalty = kind & 2 ? -2.0f + (float)(it % 9) * 0.5f : 0.0f;
            p.presence_penalty = kind & 2 ? 1.5f - (float)(it % 5) * 0.75f : 0.0f;
            p.n_logit_bias = kind & 4 ? 1 + it % 40 : 0;
            for (int32_t i = 0; i < p.n_logit_bias; i++)
                bias[i] = (di_logit_bias){(int32_t)(((rng >> (i % 30)) + (uint64_t)i * 7919) % (uint64_t)ids),
                                          (float)(i % 11) - 5.5f + (it % 3 ? 1e30f : 0.0f) * (float)(i == 2)};
            p.logit_bias = bias;
            const int n_prompt = it % 64, n_output = (it * 7) % 64;
            for (int i = 0; i < n_prompt; i++) prompt[i] = (int32_t)((uint64_t)(i * 31 + it) % (uint64_t)ids);
            for (int i = 0; i < n_output; i++) output[i] = (int32_t)((uint64_t)(i * 17 + 3 * it) % (uint64_t)ids);
            di_sample_history h = {prompt, n_prompt, output, n_output};
            for (int32_t w = 0; w < (v + 31) / 32; w++) mask[w] = (uint32_t)(rng >> (w % 32)) | (it % 3 ? 0u : ~0u);
            const uint32_t *m = it % 4 == 1 ? NULL : mask;
            const di_sample_row row = {.logits = logits, .params = &p, .history = &h, .allowed_mask = m};
            di_sample_edits e, again;
            di_err err = {0};
            CHECK(di_sample_edits_build(ed, &row, &e, &err) == DI_OK);
            empty += di_sample_edits_empty(&e);
            for (int32_t i = 1; i < e.n_bias; i++) CHECK(e.bias[i - 1].token_id <= e.bias[i].token_id);
            for (int32_t i = 0; i < e.n_bias; i++) { /* stable: an id's entries in request order */
                int32_t k = 0;
                for (int32_t j = 0; j < p.n_logit_bias; j++)
                    if (bias[j].token_id == e.bias[i].token_id && k++ == 0) {
                        int32_t first = i;
                        while (first > 0 && e.bias[first - 1].token_id == e.bias[i].token_id) first--;
                        int32_t nth = i - first, seen = 0;
                        for (int32_t q = 0; q < p.n_logit_bias; q++)
                            if (bias[q].token_id == e.bias[i].token_id && seen++ == nth)
                                CHECK(bias[q].bias == e.bias[i].bias);
                    }
            }
            int64_t counted = 0;
            for (int32_t i = 0; i < e.n_output; i++) counted += e.output_counts[i];
            CHECK(e.n_output == 0 || counted == n_output);
            for (int32_t i = 0; i < e.n_repeated; i++)
                for (int32_t j = 0; j < i; j++) CHECK(e.repeated[i] != e.repeated[j]);
            for (int32_t i = 0; i < e.n_output; i++)
                for (int32_t j = 0; j < i; j++) CHECK(e.output_ids[i] != e.output_ids[j]);
            di_sample_sanitized_copy(DI_SAMPLE_SCALAR, z, logits, v);
            di_sample_edits_apply(di_sample_best_form(), &e, z, v);
            di_sample_sanitized_copy(DI_SAMPLE_SCALAR, want, logits, v);
            reference_edits(want, v, &p, &h, m);
            CHECKF(!memcmp(z, want, sizeof(float) * (size_t)v), "vocab %d row %d: edits differ from the reference", v, it);
            const int32_t n_rep = e.n_repeated, n_out = e.n_output;
            CHECK(di_sample_edits_build(ed, &row, &again, &err) == DI_OK);
            CHECK(again.n_repeated == n_rep && again.n_output == n_out);
        }
        /* a history id outside the vocabulary is an error where a penalty reads it, as in di_sampler_sample */
        int32_t bad[1] = {v};
        di_sample_history hb = {bad, 1, NULL, 0};
        di_sampling_params p = params(1.0f);
        di_sample_row row = {.logits = logits, .params = &p, .history = &hb};
        di_sample_edits e;
        di_err err = {0};
        CHECK(di_sample_edits_build(ed, &row, &e, &err) == DI_OK); /* no penalty reads it */
        p.repetition_penalty = 1.1f;
        CHECK(di_sample_edits_build(ed, &row, &e, &err) == DI_ERANGE && strstr(err.msg, "prompt_ids[0]"));
        di_sample_editor_free(ed);
        free(logits);
        free(z);
        free(want);
        free(mask);
    }
    printf("edit lists: %d rows against the in-order stages, %d without edits\n", rows, empty);
    CHECK(empty > 0 && empty < rows);
}

int main(void) {
    di_err err = {0};
    CHECK(di_sampler_create(8, &g_s, &err) == DI_OK);
    CHECK(di_sampler_create(BIG_VOCAB, &g_big, &err) == DI_OK);
    test_philox_kat();
    test_arith();
    test_simd_forms();
    test_validation();
    test_greedy();
    test_greedy_token();
    test_temperature_distribution();
    test_filter_sets();
    test_big_row_against_reference();
    test_processed_logprobs_against_reference();
    test_random_rows_against_reference();
    test_plain_rows();
    test_penalties();
    test_bias_and_mask();
    test_edit_lists();
    test_logprobs();
    test_logprob_top_list();
    test_determinism();
    test_row_independence();
    test_nonfinite();
    test_pool();
    test_weight_pass_threads();
    di_sampler_free(g_s);
    di_sampler_free(g_big);
    return TEST_SUMMARY();
}
