/* Philox4x32-10 (see philox.h) for the host: the rounds are in sample/sample_arith.h, shared with the
 * device sampler. Checked against Random123's known-answer vectors in tests/test_sampler.c. */
#include "sample/philox.h"

#include "sample/sample_arith.h"

void di_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]) {
    di_philox4x32_10_block(ctr, key, out);
}

double di_philox_uniform(uint64_t seed, uint64_t position, uint32_t stream) {
    /* k * 2^-53 with k < 2^53: exact, and < 1 */
    return (double)di_philox_bits53(seed, position, stream) * 0x1p-53;
}
