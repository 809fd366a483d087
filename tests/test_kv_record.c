/* The compressed KV record (forward/kv_record.h) against the CPU quantiser it packs:
 *   - its values are di_cpu_fp4_quant_inplace(row, 16, e4m3)'s, bit for bit (signs of zeros
 *     included), on random rows of several scales, on ties between e2m1 values, on rows at the
 *     scale's floor (2^-9, e4m3 subnormal scales) and past its ceiling (448), on zero blocks;
 *   - the layout: codes in dim order, two a byte, the e4m3 scale bytes after them, zero padding to
 *     a multiple of 32 bytes;
 *   - an infinity quantises to a finite value as in place; a NaN marks its block (0x7F), which
 *     reads back as NaN, the other blocks untouched;
 *   - the e4m3 / e2m1 code helpers of numerics.h invert their tables. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_ops.h"
#include "forward/kv_record.h"
#include "test_harness.h"

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static double unit(void) { return test_unit(&g_rng); }

/* values of the record against the quantiser's, bitwise; returns the count that differ */
static int round_trip(const float *row, int dh) {
    uint8_t rec[1024];
    float want[1024], got[1024];
    memset(rec, 0xAB, sizeof rec);
    di_kv_record_quant(row, dh, rec);
    memcpy(want, row, sizeof(float) * (size_t)dh);
    di_cpu_fp4_quant_inplace(want, dh, 16, DI_FP4_SCALE_E4M3);
    di_kv_record_values(rec, dh, got);
    int bad = 0;
    for (int d = 0; d < dh; d++) bad += memcmp(&want[d], &got[d], 4) != 0;
    for (int i = dh / 2 + dh / 16; i < di_kv_record_bytes(dh); i++) bad += rec[i] != 0; /* padding */
    return bad;
}

static void test_values(void) {
    const int dims[] = {16, 48, 64, 512, 1024};
    float row[1024];
    for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
        const int dh = dims[k];
        CHECK(di_kv_record_bytes(dh) % 32 == 0 && di_kv_record_bytes(dh) >= dh / 2 + dh / 16);
        int bad = 0;
        for (int trial = 0; trial < 200; trial++) {
            const double scale = ldexp(1.0, (int)(unit() * 30) - 16);
            for (int d = 0; d < dh; d++) row[d] = (float)((unit() * 2 - 1) * scale);
            if (trial % 5 == 1) /* ties: halfway between e2m1 values of the block's scale */
                for (int d = 0; d < dh; d++) row[d] = (float)((int)(unit() * 12) * 0.25 * (unit() < 0.5 ? -1 : 1));
            if (trial % 5 == 2) /* the scale's floor: e4m3 subnormal scales */
                for (int d = 0; d < dh; d++) row[d] = (float)((unit() * 2 - 1) * ldexp(1.0, -9 - (int)(unit() * 6)));
            if (trial % 5 == 3) /* past the ceiling: the scale saturates at 448, values clamp to +-6 * 448 */
                for (int d = 0; d < dh; d++) row[d] = (float)((unit() * 2 - 1) * 1e4);
            if (trial % 5 == 4) /* a zero block and a block of signed zeros */
                for (int d = 0; d < 32 && d < dh; d++) row[d] = d < 16 ? 0.0f : -0.0f;
            bad += round_trip(row, dh);
        }
        CHECKF(bad == 0, "dh %d: %d values off the quantiser's", dh, bad);
    }
}

static void test_layout(void) {
    /* dh 32: block 0 holds 0.5 .. 4 (scale 4 / 6 -> e4m3 0.625: 0x2D ... computed below), block 1
     * exactly the e2m1 grid times 2^-3 (scale 6 * 2^-3 / 6 = 2^-3: e4m3 byte 0x20) */
    float row[32];
    for (int d = 0; d < 16; d++) row[d] = (float)(d % 8) * 0.5f;
    for (int d = 16; d < 32; d++) row[d] = di_e2m1_lut[d - 16] * 0.125f;
    uint8_t rec[64];
    di_kv_record_quant(row, 32, rec);
    CHECK(di_kv_record_bytes(32) == 32 && di_kv_record_bytes(512) == 288);
    CHECK(rec[17] == 0x20);
    CHECK(di_e4m3_to_f32(rec[16]) == di_cpu_fp4_scale(3.5f, DI_FP4_SCALE_E4M3));
    int bad = 0;
    for (int i = 0; i < 8; i++) bad += rec[8 + i] != (uint8_t)((2 * i) | (2 * i + 1) << 4); /* codes 0..15 */
    CHECKF(bad == 0, "%d code bytes off the layout", bad);
    for (int i = 18; i < 32; i++) bad += rec[i] != 0;
    CHECK(bad == 0);
}

static void test_not_finite(void) {
    float row[48], got[48], want[48];
    uint8_t rec[64];
    for (int d = 0; d < 48; d++) row[d] = (float)(d - 20) * 0.125f;
    row[20] = NAN;
    di_kv_record_quant(row, 48, rec);
    di_kv_record_values(rec, 48, got);
    memcpy(want, row, sizeof want);
    di_cpu_fp4_quant_inplace(want, 48, 16, DI_FP4_SCALE_E4M3);
    CHECK(memcmp(got, want, 16 * sizeof(float)) == 0 && memcmp(got + 32, want + 32, 16 * sizeof(float)) == 0);
    int nan = 0;
    for (int d = 16; d < 32; d++) nan += isnan(got[d]);
    CHECK(nan == 16 && rec[24 + 1] == DI_KV_RECORD_NAN);
    row[20] = -INFINITY; /* saturates, as in place */
    CHECK(round_trip(row, 48) == 0);
}

static void test_codes(void) {
    int bad = 0;
    for (int b = 0; b < 256; b++) {
        const float v = di_e4m3_to_f32((uint8_t)b);
        const int want = (b < 128 && b != 0x7F) ? b : -1; /* positive finite bytes invert (+0 is 0) */
        if (di_e4m3_encode(v) != want && !(b == 128 && di_e4m3_encode(v) == -1)) bad++;
    }
    CHECKF(bad == 0, "%d e4m3 bytes do not invert", bad);
    CHECK(di_e4m3_encode(0.3f) == -1 && di_e4m3_encode(500.0f) == -1 && di_e4m3_encode(NAN) == -1);
    for (int c = 0; c < 16; c++) bad += di_e2m1_encode(di_e2m1_lut[c]) != c;
    CHECK(bad == 0 && di_e2m1_encode(2.5f) == -1);
}

int main(void) {
    di_numerics_init();
    test_values();
    test_layout();
    test_not_finite();
    test_codes();
    return TEST_SUMMARY();
}
