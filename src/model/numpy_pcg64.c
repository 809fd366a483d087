/* numpy's SeedSequence, PCG64 and bounded-int draws (see numpy_pcg64.h).
 *
 * Written from the algorithm descriptions of numpy's `bit_generator.pyx` (SeedSequence),
 * `pcg64.h` (PCG-XSL-RR 128/64) and `distributions.c` (`random_bounded_uint64_fill`); the
 * tests compare against numpy itself for many seeds and bounds.
 *
 * SeedSequence: entropy words are hashed into a 4-word pool (hashmix with a running multiplier,
 * then every pool word is mixed with every other), and output words are drawn cyclically from the
 * pool through a second hash. All of it is uint32 arithmetic.
 *
 * PCG64: state and increment are 128-bit; seeding with words (s0, s1, i0, i1) uses
 * initstate = s0:s1 and initseq = i0:i1 (high:low), state = 0, inc = initseq << 1 | 1, step,
 * state += initstate, step. A draw steps the LCG and outputs rotr64(hi ^ lo, state >> 122). */
#include "model/numpy_pcg64.h"

#include <assert.h>

typedef unsigned __int128 u128;

#define SS_POOL_SIZE 4
#define SS_INIT_A 0x43b0d7e5u
#define SS_MULT_A 0x931e8875u
#define SS_INIT_B 0x8b51f9ddu
#define SS_MULT_B 0x58f38dedu
#define SS_MIX_MULT_L 0xca01f9ddu
#define SS_MIX_MULT_R 0x4973f715u
#define SS_XSHIFT 16

static uint32_t ss_hashmix(uint32_t value, uint32_t *hash_const) {
    value ^= *hash_const;
    *hash_const *= SS_MULT_A;
    value *= *hash_const;
    value ^= value >> SS_XSHIFT;
    return value;
}

static uint32_t ss_mix(uint32_t x, uint32_t y) {
    uint32_t r = SS_MIX_MULT_L * x - SS_MIX_MULT_R * y;
    r ^= r >> SS_XSHIFT;
    return r;
}

/* The pool after SeedSequence.__init__ for an int entropy value without spawn key. */
static void ss_pool(uint64_t seed, uint32_t pool[SS_POOL_SIZE]) {
    uint32_t entropy[2]; /* little-endian 32-bit words of seed; numpy gives [0] for seed 0 */
    size_t n_entropy = 0;
    do {
        entropy[n_entropy++] = (uint32_t)seed;
        seed >>= 32;
    } while (seed);

    uint32_t hash_const = SS_INIT_A;
    for (size_t i = 0; i < SS_POOL_SIZE; i++)
        pool[i] = ss_hashmix(i < n_entropy ? entropy[i] : 0u, &hash_const);
    for (size_t src = 0; src < SS_POOL_SIZE; src++)
        for (size_t dst = 0; dst < SS_POOL_SIZE; dst++)
            if (src != dst) pool[dst] = ss_mix(pool[dst], ss_hashmix(pool[src], &hash_const));
    /* entropy words beyond the pool size would be mixed in here; a uint64 seed has at most 2 */
}

void di_numpy_seed_sequence_state(uint64_t seed, uint32_t *out, size_t n_out) {
    uint32_t pool[SS_POOL_SIZE];
    ss_pool(seed, pool);
    uint32_t hash_const = SS_INIT_B;
    for (size_t i = 0; i < n_out; i++) {
        uint32_t v = pool[i % SS_POOL_SIZE];
        v ^= hash_const;
        hash_const *= SS_MULT_B;
        v *= hash_const;
        v ^= v >> SS_XSHIFT;
        out[i] = v;
    }
}

static const u128 PCG_MULT = ((u128)2549297995355413924ull << 64) | 4865540595714422341ull;

static u128 pcg_get(uint64_t hi, uint64_t lo) { return ((u128)hi << 64) | lo; }

static void pcg_step(di_numpy_pcg64 *g) {
    u128 s = pcg_get(g->state_hi, g->state_lo) * PCG_MULT + pcg_get(g->inc_hi, g->inc_lo);
    g->state_hi = (uint64_t)(s >> 64);
    g->state_lo = (uint64_t)s;
}

void di_numpy_pcg64_seed(di_numpy_pcg64 *g, uint64_t seed) {
    uint32_t w32[8]; /* generate_state(4, uint64) = 8 uint32 words viewed as 4 little-endian uint64 */
    di_numpy_seed_sequence_state(seed, w32, 8);
    uint64_t w[4];
    for (int i = 0; i < 4; i++) w[i] = (uint64_t)w32[2 * i] | ((uint64_t)w32[2 * i + 1] << 32);

    u128 initseq = pcg_get(w[2], w[3]);
    u128 inc = (initseq << 1) | 1u;
    g->inc_hi = (uint64_t)(inc >> 64);
    g->inc_lo = (uint64_t)inc;
    g->state_hi = g->state_lo = 0;
    pcg_step(g);
    u128 s = pcg_get(g->state_hi, g->state_lo) + pcg_get(w[0], w[1]);
    g->state_hi = (uint64_t)(s >> 64);
    g->state_lo = (uint64_t)s;
    pcg_step(g);
    g->has_uint32 = 0;
    g->uinteger = 0;
}

uint64_t di_numpy_pcg64_next64(di_numpy_pcg64 *g) {
    pcg_step(g);
    uint64_t x = g->state_hi ^ g->state_lo;
    unsigned rot = (unsigned)(g->state_hi >> 58); /* state >> 122 */
    return (x >> rot) | (x << ((64u - rot) & 63u));
}

uint32_t di_numpy_pcg64_next32(di_numpy_pcg64 *g) {
    if (g->has_uint32) {
        g->has_uint32 = 0;
        return g->uinteger;
    }
    uint64_t v = di_numpy_pcg64_next64(g);
    g->has_uint32 = 1;
    g->uinteger = (uint32_t)(v >> 32);
    return (uint32_t)v;
}

/* Lemire's nearly-divisionless draw in [0, rng] for rng < 2^32 - 1, from 32-bit draws. */
static uint32_t bounded_lemire_u32(di_numpy_pcg64 *g, uint32_t rng) {
    const uint32_t rng_excl = rng + 1;
    uint64_t m = (uint64_t)di_numpy_pcg64_next32(g) * rng_excl;
    uint32_t leftover = (uint32_t)m;
    if (leftover < rng_excl) {
        const uint32_t threshold = (UINT32_MAX - rng) % rng_excl;
        while (leftover < threshold) {
            m = (uint64_t)di_numpy_pcg64_next32(g) * rng_excl;
            leftover = (uint32_t)m;
        }
    }
    return (uint32_t)(m >> 32);
}

/* The same in [0, rng] for rng < 2^64 - 1, from 64-bit draws. */
static uint64_t bounded_lemire_u64(di_numpy_pcg64 *g, uint64_t rng) {
    const uint64_t rng_excl = rng + 1;
    u128 m = (u128)di_numpy_pcg64_next64(g) * rng_excl;
    uint64_t leftover = (uint64_t)m;
    if (leftover < rng_excl) {
        const uint64_t threshold = (UINT64_MAX - rng) % rng_excl;
        while (leftover < threshold) {
            m = (u128)di_numpy_pcg64_next64(g) * rng_excl;
            leftover = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

void di_numpy_integers_i64(di_numpy_pcg64 *g, int64_t low, int64_t high, size_t n, int64_t *out) {
    assert(low < high);
    /* numpy works on the inclusive range rng = high - 1 - low and adds the offset as uint64 */
    const uint64_t rng = (uint64_t)high - 1u - (uint64_t)low;
    const uint64_t off = (uint64_t)low;
    for (size_t i = 0; i < n; i++) {
        uint64_t v;
        if (rng == 0)
            v = 0;
        else if (rng == UINT32_MAX)
            v = di_numpy_pcg64_next32(g);
        else if (rng < UINT32_MAX)
            v = bounded_lemire_u32(g, (uint32_t)rng);
        else /* rng < 2^63 here, never the full 64-bit range */
            v = bounded_lemire_u64(g, rng);
        out[i] = (int64_t)(off + v);
    }
}
