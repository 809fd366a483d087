/* Engram multipliers, primes, offsets and the per-position n-gram hash (see engram_consts.h).
 *
 * Multipliers: for layer l, v = default_rng(10007*l).integers(0, bound, size=max_ngram, int64),
 * mult = 2*v + 1, bound = max(1, (2^63-1) // compressed_vocab_size // 2). The bound keeps every
 * product id * mult below 2^63, so the hash never overflows int64 and "mod" is a plain remainder.
 *
 * Primes: the reference's find_next_prime(current, seen) returns the smallest prime > current not
 * yet handed out. Per (layer, n-gram) it restarts at current = engram_vocab_size - 1, and each head
 * continues from the previous head's prime, so every prime is >= engram_vocab_size, none is reused,
 * and the order is layer-major, n-gram-major, head-major. That rule is followed literally below. */
#include "model/engram_consts.h"

#include <assert.h>
#include "model/numpy_pcg64.h"

static int is_prime_u64(uint64_t n) {
    if (n < 2) return 0;
    if (n % 2 == 0) return n == 2;
    if (n % 3 == 0) return n == 3;
    for (uint64_t d = 5; d <= n / d; d += 6) /* trial division: moduli are ~1.6e7, sqrt ~4000 */
        if (n % d == 0 || n % (d + 2) == 0) return 0;
    return 1;
}

static int in_list(const int64_t *list, int n, int64_t v) {
    for (int i = 0; i < n; i++)
        if (list[i] == v) return 1;
    return 0;
}

/* Smallest prime > current that is not in seen[0..n_seen). */
static int64_t next_unused_prime(int64_t current, const int64_t *seen, int n_seen) {
    int64_t c = current + 1;
    while (!is_prime_u64((uint64_t)c) || in_list(seen, n_seen, c)) c++;
    return c;
}

static di_status check_args(const int *layer_ids, int n_layers, int max_ngram, int n_heads,
                            int64_t engram_vocab_size, int64_t compressed_vocab_size, di_err *err) {
    if (n_layers < 0 || n_layers > DI_ENGRAM_MAX_LAYERS)
        return di_errf(err, DI_EUNSUPPORTED, "engram: %d Engram layers (at most %d supported)",
                       n_layers, DI_ENGRAM_MAX_LAYERS);
    if (max_ngram < 2 || max_ngram > DI_ENGRAM_MAX_NGRAM)
        return di_errf(err, DI_EUNSUPPORTED, "engram: engram_max_ngram_size %d (2..%d supported)",
                       max_ngram, DI_ENGRAM_MAX_NGRAM);
    if (n_heads < 1 || n_heads > DI_ENGRAM_MAX_HEADS)
        return di_errf(err, DI_EUNSUPPORTED, "engram: engram_n_heads %d (1..%d supported)",
                       n_heads, DI_ENGRAM_MAX_HEADS);
    if (engram_vocab_size < 2 || engram_vocab_size > ((int64_t)1 << 40))
        return di_errf(err, DI_EINVAL, "engram: engram_vocab_size %lld out of range",
                       (long long)engram_vocab_size);
    if (compressed_vocab_size < 1)
        return di_errf(err, DI_EINVAL, "engram: engram_compressed_vocab_size %lld must be positive",
                       (long long)compressed_vocab_size);
    for (int i = 0; i < n_layers; i++) {
        if (layer_ids[i] < 0)
            return di_errf(err, DI_EINVAL, "engram: engram_layer_ids[%d] = %d is negative", i,
                           layer_ids[i]);
        for (int j = 0; j < i; j++)
            if (layer_ids[j] == layer_ids[i])
                return di_errf(err, DI_EINVAL, "engram: engram_layer_ids lists layer %d twice",
                               layer_ids[i]);
    }
    return DI_OK;
}

static void derive_multipliers(di_engram_layer_consts *lc, int max_ngram,
                               int64_t compressed_vocab_size) {
    int64_t bound = INT64_MAX / compressed_vocab_size / 2;
    if (bound < 1) bound = 1;
    di_numpy_pcg64 g;
    di_numpy_pcg64_seed(&g, 10007u * (uint64_t)lc->layer_id);
    di_numpy_integers_i64(&g, 0, bound, (size_t)max_ngram, lc->mult);
    for (int i = 0; i < max_ngram; i++) lc->mult[i] = 2 * lc->mult[i] + 1;
}

di_status di_engram_consts_init(di_engram_consts *ec, const int *layer_ids, int n_layers,
                                int max_ngram, int n_heads, int64_t engram_vocab_size,
                                int64_t compressed_vocab_size,
                                const int64_t *expected_num_embeddings, di_err *err) {
    *ec = (di_engram_consts){0};
    di_status st = check_args(layer_ids, n_layers, max_ngram, n_heads, engram_vocab_size,
                              compressed_vocab_size, err);
    if (st) return st;
    ec->n_layers = n_layers;
    ec->max_ngram = max_ngram;
    ec->n_heads = n_heads;
    ec->n_cols = (max_ngram - 1) * n_heads;
    ec->engram_vocab_size = engram_vocab_size;
    ec->compressed_vocab_size = compressed_vocab_size;

    int64_t seen[DI_ENGRAM_MAX_LAYERS * DI_ENGRAM_MAX_COLS]; /* every prime handed out so far */
    int n_seen = 0;
    for (int l = 0; l < n_layers; l++) {
        di_engram_layer_consts *lc = &ec->layer[l];
        lc->layer_id = layer_ids[l];
        derive_multipliers(lc, max_ngram, compressed_vocab_size);
        for (int n = 0; n < max_ngram - 1; n++) {
            int64_t current = engram_vocab_size - 1;
            for (int h = 0; h < n_heads; h++) {
                current = next_unused_prime(current, seen, n_seen);
                seen[n_seen++] = current;
                lc->primes[n * n_heads + h] = current;
            }
        }
        int64_t sum = 0;
        for (int c = 0; c < ec->n_cols; c++) {
            lc->offsets[c] = sum;
            sum += lc->primes[c];
        }
        lc->num_rows = sum;
        if (expected_num_embeddings && expected_num_embeddings[l] != sum)
            return di_errf(err, DI_EFORMAT,
                           "engram: layer %d: engram_num_embeddings[%d] = %lld, but the primes "
                           "derived from engram_vocab_size %lld, engram_max_ngram_size %d and "
                           "engram_n_heads %d sum to %lld",
                           lc->layer_id, l, (long long)expected_num_embeddings[l],
                           (long long)engram_vocab_size, max_ngram, n_heads, (long long)sum);
    }
    return DI_OK;
}

int di_engram_consts_slot(const di_engram_consts *ec, int layer_id) {
    for (int l = 0; l < ec->n_layers; l++)
        if (ec->layer[l].layer_id == layer_id) return l;
    return -1;
}

void di_engram_hash_position(const di_engram_consts *ec, int slot, int32_t pad_id,
                             const int32_t *last_ids, int n_last, int64_t *rows_out) {
    assert(slot >= 0 && slot < ec->n_layers);
    assert(pad_id >= 0 && pad_id < ec->compressed_vocab_size);
    const di_engram_layer_consts *lc = &ec->layer[slot];
    int64_t tok[DI_ENGRAM_MAX_NGRAM]; /* [max_ngram] token `shift` places back, pad once blocked */
    int blocked = 0;
    for (int s = 0; s < ec->max_ngram; s++) {
        int32_t src = s < n_last ? last_ids[s] : DI_ENGRAM_DEAD;
        assert(src == DI_ENGRAM_DEAD || (src >= 0 && src < ec->compressed_vocab_size));
        blocked |= src == DI_ENGRAM_DEAD;
        tok[s] = blocked ? pad_id : src;
    }
    /* every product is < 2^63 by the multiplier bound, so the int64 values stay non-negative */
    int64_t rolling = tok[0] * lc->mult[0];
    for (int n = 1; n < ec->max_ngram; n++) {
        rolling ^= tok[n] * lc->mult[n];
        for (int h = 0; h < ec->n_heads; h++) {
            int col = (n - 1) * ec->n_heads + h;
            rows_out[col] = rolling % lc->primes[col] + lc->offsets[col];
        }
    }
}

void di_engram_hash_sequence(const di_engram_consts *ec, int slot, int32_t pad_id,
                             const int32_t *ids, int n, int64_t *rows_out) {
    int32_t last[DI_ENGRAM_MAX_NGRAM]; /* [max_ngram] newest first */
    for (int p = 0; p < n; p++) {
        int n_last = p + 1 < ec->max_ngram ? p + 1 : ec->max_ngram;
        for (int s = 0; s < n_last; s++) last[s] = ids[p - s];
        di_engram_hash_position(ec, slot, pad_id, last, n_last, rows_out + (size_t)p * ec->n_cols);
    }
}
