/* numpy's default random generator, reproduced bit for bit: `numpy.random.default_rng(seed)` with
 * an int seed (SeedSequence -> PCG64) and `Generator.integers(low, high, size, dtype=int64)`.
 *
 * The Engram hash multipliers (model-spec §2.2 (b)) are defined as numpy draws, so the engine
 * re-derives them here instead of trusting a copied table. Only what that needs is implemented:
 * non-negative int seeds, no spawn keys, 64-bit draws, and the unmasked (Lemire) bounded-int path
 * that `Generator.integers` uses. */
#ifndef DI_MODEL_NUMPY_PCG64_H
#define DI_MODEL_NUMPY_PCG64_H

#include <stddef.h>
#include <stdint.h>

/* PCG64 state. The 128-bit LCG state and increment are kept as two 64-bit halves so that this
 * header does not expose a compiler extension; numpy_pcg64.c works on unsigned __int128. */
typedef struct di_numpy_pcg64 {
    uint64_t state_hi, state_lo;
    uint64_t inc_hi, inc_lo;
    int has_uint32;    /* numpy buffers the upper half of a 64-bit draw for the next 32-bit one */
    uint32_t uinteger; /* that buffered upper half */
} di_numpy_pcg64;

/* SeedSequence(entropy).generate_state(n_out, uint32): the pool is 4 words, entropy is the seed
 * split into little-endian 32-bit words ([0] for seed 0). */
void di_numpy_seed_sequence_state(uint64_t seed, uint32_t *out, size_t n_out);

/* numpy.random.default_rng(seed) for an int seed >= 0 (PCG64 seeded from
 * SeedSequence(seed).generate_state(4, uint64)). */
void di_numpy_pcg64_seed(di_numpy_pcg64 *g, uint64_t seed);

uint64_t di_numpy_pcg64_next64(di_numpy_pcg64 *g);
uint32_t di_numpy_pcg64_next32(di_numpy_pcg64 *g);

/* Generator.integers(low, high, size=n, dtype=np.int64) with the default endpoint=False:
 * out[i] in [low, high). Requires low < high. */
void di_numpy_integers_i64(di_numpy_pcg64 *g, int64_t low, int64_t high, size_t n, int64_t *out);

#endif
