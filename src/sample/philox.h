/* Philox4x32-10: the counter-based random generator of Salmon et al., "Parallel random numbers: as
 * easy as 1, 2, 3" (SC'11), as in Random123 and cuRAND. A pure function of a 128-bit counter and a
 * 64-bit key, so any thread or device can produce the value for (seed, position) without shared state
 * and without advancing a stream: that is what makes seeded sampling independent of the batch.
 *
 * The sampler's keying: key = seed (low word first), counter = {position low, position high,
 * stream, 0}. `stream` separates independent uses at one position (0: the sampler's draw; later
 * speculative decoding can take 1, 2, ... for its acceptance tests) so they never share bits. */
#ifndef DI_SAMPLE_PHILOX_H
#define DI_SAMPLE_PHILOX_H

#include <stdint.h>

/* Streams of one position (the third counter word). */
enum { DI_PHILOX_STREAM_SAMPLE = 0 };

/* out = Philox4x32-10(ctr, key). out may alias neither input. */
void di_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4]);

/* A uniform double in [0, 1) with 53 random bits, from the first two output words of
 * Philox4x32-10(counter = {position lo, position hi, stream, 0}, key = {seed lo, seed hi}). */
double di_philox_uniform(uint64_t seed, uint64_t position, uint32_t stream);

#endif
