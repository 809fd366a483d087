/* Lookup tables for the minifloat formats (see numerics.h). The e4m3 table is computed from the
 * bit layout, not typed in, so it is its own definition: sign, 4 exponent bits (bias 7),
 * 3 mantissa bits; exponent 0 is subnormal (m/8 * 2^-6); S.1111.111 is NaN. */
#include "base/numerics.h"

float di_e4m3_lut[256];
const float di_e2m1_lut[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                               -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

static void init_e4m3(void) {
    for (int b = 0; b < 256; b++) {
        int sign = b >> 7, exp = (b >> 3) & 15, man = b & 7;
        float v;
        if (exp == 15 && man == 7) v = NAN;
        else if (exp == 0) v = ldexpf((float)man / 8.0f, -6);
        else v = ldexpf(1.0f + (float)man / 8.0f, exp - 7);
        di_e4m3_lut[b] = sign ? -v : v;
    }
}

void di_numerics_init(void) {
    static int done;
    if (__atomic_load_n(&done, __ATOMIC_ACQUIRE)) return;
    init_e4m3();
    __atomic_store_n(&done, 1, __ATOMIC_RELEASE);
}

/* Tables are ready before main() runs, so no caller has to remember an init call. */
__attribute__((constructor)) static void numerics_auto_init(void) { di_numerics_init(); }
