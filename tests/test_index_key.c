/* The index key record (forward/index_key.h) against the CPU quantiser it packs:
 *   - its values are di_cpu_fp4_quant_inplace(key, 32, ue8m0)'s, bit for bit (signs of zeros
 *     included), on random keys of several scales, on ties between e2m1 values, on blocks at the
 *     scale's floor (2^-126: values down to 2^-127) and on zero blocks;
 *   - the layout: codes word-interleaved (word t of block b at t * nb + b), scale bytes after the
 *     codes, zero padding to a multiple of 32 bytes;
 *   - a block holding a NaN or an infinity reads back as NaN, the other blocks untouched. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "forward/index_key.h"
#include "test_harness.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static double unit(void) { return test_unit(&g_rng); }

/* values of the record against the quantiser's, bitwise; returns the count that differ */
static int round_trip(const float *key, int idim) {
    uint8_t rec[1024];
    float want[512], got[512];
    memset(rec, 0xAB, sizeof rec);
    di_index_key_quant(key, idim, rec);
    memcpy(want, key, sizeof(float) * (size_t)idim);
    di_cpu_fp4_quant_inplace(want, idim, 32, DI_FP4_SCALE_UE8M0);
    di_index_key_values(rec, idim, got);
    int bad = 0;
    for (int d = 0; d < idim; d++) bad += memcmp(&want[d], &got[d], 4) != 0;
    for (int i = idim / 2 + idim / 32; i < di_index_key_bytes(idim); i++) bad += rec[i] != 0; /* padding */
    return bad;
}

static void test_values(void) {
    const int dims[] = {32, 64, 96, 128, 512};
    float key[512];
    for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
        const int idim = dims[k];
        CHECK(di_index_key_bytes(idim) % 32 == 0 && di_index_key_bytes(idim) >= idim / 2 + idim / 32);
        int bad = 0;
        for (int trial = 0; trial < 200; trial++) {
            const double scale = ldexp(1.0, (int)(unit() * 60) - 30);
            for (int d = 0; d < idim; d++) key[d] = (float)((unit() * 2 - 1) * scale);
            if (trial % 4 == 1) /* ties: halfway between e2m1 values of the block's scale */
                for (int d = 0; d < idim; d++) key[d] = (float)((int)(unit() * 12) * 0.25 * (unit() < 0.5 ? -1 : 1));
            if (trial % 4 == 2) /* the scale's floor: values down to 2^-127 */
                for (int d = 0; d < idim; d++) key[d] = (float)((unit() * 2 - 1) * 0x1p-124);
            if (trial % 4 == 3) /* a zero block and a block of signed zeros */
                for (int d = 0; d < 64 && d < idim; d++) key[d] = d < 32 ? 0.0f : -0.0f;
            bad += round_trip(key, idim);
        }
        CHECKF(bad == 0, "idim %d: %d values off the quantiser's", idim, bad);
    }
}

static void test_layout(void) {
    /* idim 128: dim 32 b + 8 t + i has value (i + 1) * 0.5 * 2^b in the code of word t * 4 + b */
    float key[128];
    for (int d = 0; d < 128; d++) key[d] = (float)ldexp((d % 8 + 1) * 0.5 > 6 ? 6 : (d % 8 + 1) * 0.5, d / 32);
    for (int d = 0; d < 128; d++)
        if (d % 8 == 6) key[d] = 3.0f * (float)ldexp(1.0, d / 32); /* 3.5 is no e2m1 value */
    uint8_t rec[96];
    di_index_key_quant(key, 128, rec);
    CHECK(di_index_key_bytes(128) == 96);
    int bad = 0;
    for (int b = 0; b < 4; b++) {
        bad += rec[64 + b] != 127 + b; /* every block's largest value 4 * 2^b: scale 2^b */
        for (int t = 0; t < 4; t++) {
            const uint8_t *w = rec + 4 * (t * 4 + b);
            /* codes of 0.5, 1, 1.5, 2, 3 (2.5 rounds to even 2), 3, 3.5 -> 3 ... as pairs */
            bad += w[0] != (1 | 2 << 4) || w[1] != (3 | 4 << 4) || w[2] != (4 | 5 << 4) || w[3] != (5 | 6 << 4);
        }
    }
    CHECKF(bad == 0, "%d record bytes off the layout", bad);
}

static void test_not_finite(void) {
    float key[64], got[64];
    uint8_t rec[64];
    for (int d = 0; d < 64; d++) key[d] = (float)(d - 20) * 0.125f;
    key[40] = NAN;
    di_index_key_quant(key, 64, rec);
    di_index_key_values(rec, 64, got);
    float want[64];
    memcpy(want, key, sizeof want);
    di_cpu_fp4_quant_inplace(want, 32, 32, DI_FP4_SCALE_UE8M0); /* block 0 only */
    CHECK(memcmp(got, want, 32 * sizeof(float)) == 0);
    int nan = 0;
    for (int d = 32; d < 64; d++) nan += isnan(got[d]);
    CHECK(nan == 32 && rec[33] == 255);
    key[40] = INFINITY;
    di_index_key_quant(key, 64, rec);
    di_index_key_values(rec, 64, got);
    CHECK(rec[33] == 255 && isnan(got[63]) && !isnan(got[0]));
}

int main(void) {
    di_numerics_init();
    test_values();
    test_layout();
    test_not_finite();
    return TEST_SUMMARY();
}
