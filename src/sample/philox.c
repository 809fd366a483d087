/* Philox4x32-10 (see philox.h). Ten rounds of two 32x32->64 multiplications with the Weyl-sequence
 * key schedule; constants from Random123's philox.h. Checked against Random123's known-answer
 * vectors in tests/test_sampler.c. */
#include "sample/philox.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u /* golden ratio */
#define PHILOX_W1 0xBB67AE85u /* sqrt(3) - 1 */

void di_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        if (round > 0) {
            k0 += PHILOX_W0;
            k1 += PHILOX_W1;
        }
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t hi0 = (uint32_t)(p0 >> 32), lo0 = (uint32_t)p0;
        uint32_t hi1 = (uint32_t)(p1 >> 32), lo1 = (uint32_t)p1;
        c0 = hi1 ^ c1 ^ k0;
        c1 = lo1;
        c2 = hi0 ^ c3 ^ k1;
        c3 = lo0;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

double di_philox_uniform(uint64_t seed, uint64_t position, uint32_t stream) {
    const uint32_t ctr[4] = {(uint32_t)position, (uint32_t)(position >> 32), stream, 0};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t r[4];
    di_philox4x32_10(ctr, key, r);
    /* 53 bits: 32 from r[0] above 21 from r[1]; the result is k * 2^-53 with k < 2^53, so < 1. */
    uint64_t bits = ((uint64_t)r[0] << 21) | (r[1] >> 11);
    return (double)bits * 0x1p-53;
}
