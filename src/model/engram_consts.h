/* Engram constants (model-spec §2.2): the compressed token map, and per Engram layer the hash
 * multipliers, the prime moduli and the row offsets; plus the per-position n-gram hash that turns
 * compressed token ids into table rows.
 *
 * Everything here is derived the way the reference derives it (the multipliers from numpy's
 * default_rng, the primes by an ordered search, the token map from the tokenizer's decoded and raw
 * token strings through the HF normalizer chain), so that a checkpoint with other Engram settings
 * still gets the right constants. Nothing depends on di_config: callers pass plain values.
 *
 * Layout, with n-gram order n = 2..max_ngram and head h:
 *   col = (n - 2) * n_heads + h          (n_cols = (max_ngram - 1) * n_heads)
 *   row = (rolling_xor(n) mod primes[col]) + offsets[col],  offsets = exclusive prefix sum of primes
 * so each (n-gram, head) column owns a disjoint row range of the layer's table, which has
 * num_rows = sum(primes) rows. */
#ifndef DI_MODEL_ENGRAM_CONSTS_H
#define DI_MODEL_ENGRAM_CONSTS_H

#include <stddef.h>
#include <stdint.h>
#include "base/error.h"

#define DI_ENGRAM_MAX_LAYERS 4
#define DI_ENGRAM_MAX_NGRAM 8
#define DI_ENGRAM_MAX_HEADS 32
#define DI_ENGRAM_MAX_COLS ((DI_ENGRAM_MAX_NGRAM - 1) * DI_ENGRAM_MAX_HEADS)

/* A compressed id that blocks every n-gram reaching it (image-span tokens, ids outside the map). */
#define DI_ENGRAM_DEAD (-1)

typedef struct di_engram_layer_consts {
    int layer_id;                          /* backbone layer index (1 and 14 in the released model) */
    int64_t mult[DI_ENGRAM_MAX_NGRAM];     /* [max_ngram] odd, 2*v+1 with v from default_rng(10007*layer) */
    int64_t primes[DI_ENGRAM_MAX_COLS];    /* [n_cols] prime modulus per column */
    int64_t offsets[DI_ENGRAM_MAX_COLS];   /* [n_cols] first table row of each column */
    int64_t num_rows;                      /* sum of primes = engram_num_embeddings of the layer */
} di_engram_layer_consts;

typedef struct di_engram_consts {
    int n_layers, max_ngram, n_heads, n_cols;
    int64_t engram_vocab_size, compressed_vocab_size;
    di_engram_layer_consts layer[DI_ENGRAM_MAX_LAYERS]; /* [n_layers], in the order of layer_ids */
} di_engram_consts;

/* Derives multipliers, primes and offsets. expected_num_embeddings ([n_layers], the config's
 * engram_num_embeddings) may be NULL; otherwise a layer whose prime sum differs is an error.
 * Limits: n_layers <= DI_ENGRAM_MAX_LAYERS, 2 <= max_ngram <= DI_ENGRAM_MAX_NGRAM,
 * n_heads <= DI_ENGRAM_MAX_HEADS, engram_vocab_size >= 2, compressed_vocab_size >= 1. */
di_status di_engram_consts_init(di_engram_consts *ec, const int *layer_ids, int n_layers,
                                int max_ngram, int n_heads, int64_t engram_vocab_size,
                                int64_t compressed_vocab_size,
                                const int64_t *expected_num_embeddings, di_err *err);

/* Index of layer_id in ec->layer, or -1 if that layer has no Engram. */
int di_engram_consts_slot(const di_engram_consts *ec, int layer_id);

/* Row ids of one position for the Engram layer in `slot`.
 * last_ids[s] ([n_last]) is the compressed id of the token s places back (last_ids[0] = the
 * current token), or DI_ENGRAM_DEAD. n_last < max_ngram means the sequence starts there (the
 * missing older tokens count as blocked); extra entries beyond max_ngram are ignored. Once a shift
 * is blocked, it and every longer shift use pad_id (sticky). Ids must lie in
 * [0, compressed_vocab_size) or be DEAD; pad_id must lie in [0, compressed_vocab_size).
 * rows_out: [n_cols] table rows. */
void di_engram_hash_position(const di_engram_consts *ec, int slot, int32_t pad_id,
                             const int32_t *last_ids, int n_last, int64_t *rows_out);

/* All positions of one sequence from its start: ids [n] compressed ids (or DEAD) at positions
 * 0..n-1; rows_out [n, n_cols]. */
void di_engram_hash_sequence(const di_engram_consts *ec, int slot, int32_t pad_id,
                             const int32_t *ids, int n, int64_t *rows_out);

/* ---- compressed token map (engram_token_map.c) ---- */

typedef struct di_engram_token_map {
    int32_t *map;      /* [vocab_size] compressed id per token id */
    int vocab_size;
    int n_compressed;  /* distinct keys = engram_compressed_vocab_size when the tokenizer matches */
} di_engram_token_map;

#define DI_ENGRAM_NORMALIZE_MAX_BYTES (1 << 20)

/* The reference normalizer chain on one UTF-8 string of at most DI_ENGRAM_NORMALIZE_MAX_BYTES: NFKC, NFD, strip marks (general category
 * M), per-character full lowercase, [ \t\r\n]+ -> " ", "^ $" -> U+E000, strip White_Space on both
 * sides, U+E000 -> " ", with the Unicode data versions of HF `tokenizers` (engram_token_map.c).
 * text may contain NUL bytes. *out is malloc'ed and NUL-terminated. */
di_status di_engram_normalize(const char *text, size_t len, char **out, size_t *out_len,
                              di_err *err);

/* Builds the map from per-token strings (explicit lengths; NUL bytes allowed):
 * decoded[t] = the tokenizer's decode of t alone (special tokens kept), raw[t] = id_to_token(t).
 * Key = raw if decoded contains U+FFFD, else normalize(decoded), or decoded if that is empty;
 * ids are handed out by first appearance in token-id order from one dictionary. */
di_status di_engram_token_map_build(const char *const *decoded, const size_t *decoded_len,
                                    const char *const *raw, const size_t *raw_len,
                                    int vocab_size, di_engram_token_map *out, di_err *err);

/* Builds the map from a checkpoint's tokenizer.json (engram_token_map_tok.c). */
di_status di_engram_token_map_from_tokenizer(const char *path, di_engram_token_map *out, di_err *err);

/* Builds the map from a fixture's tokenizer_stub.json (`decode`, `id_to_token`). */
di_status di_engram_token_map_from_stub(const char *path, di_engram_token_map *out, di_err *err);

/* The compressed id of token_id, or DI_ENGRAM_DEAD if it lies outside the map (as the reference
 * treats negative and out-of-vocabulary ids). pad id = di_engram_token_map_get(m, pad_token_id). */
int32_t di_engram_token_map_get(const di_engram_token_map *m, int64_t token_id);

void di_engram_token_map_free(di_engram_token_map *m);

#endif
