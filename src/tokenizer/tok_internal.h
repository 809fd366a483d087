/* Internal layout of di_tokenizer, shared by the tok_*.c files (not a public header).
 *
 * Storage: every token string lives in one arena; per id we keep its string (the JSON spelling:
 * byte-level for the base vocab, content for added tokens) and its decoded bytes (the byte-level
 * alphabet mapped back, or the raw UTF-8 of a token with a char outside that alphabet, as HF's
 * ByteLevel decoder does). Lookups use two open-addressing hash maps: string -> id (base vocab and
 * added tokens separately, as HF keeps them) and (left id, right id) -> merge rank. Added tokens are
 * matched with two byte tries (non-normalized first, then normalized), leftmost-longest. */
#ifndef DI_TOKENIZER_TOK_INTERNAL_H
#define DI_TOKENIZER_TOK_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>

#include "tokenizer/tokenizer.h"

/* ---- string -> id map ----
 * Slots hold only (hash, id); a key is compared with the string of its id (base + off[id], len[id]),
 * so the table is 8 bytes a slot and the 128K-entry vocab map stays cache-friendly. */
typedef struct di_smap {
    uint64_t *slots; /* [cap], cap a power of two: hash << 32 | (id + 1); 0 = empty */
    size_t cap, n;
    const char *base;
    const uint32_t *off, *len; /* per id */
} di_smap;

uint32_t di_hash_bytes(const void *p, size_t n);
void di_smap_init(di_smap *m, size_t expected, const char *base, const uint32_t *off, const uint32_t *len);
void di_smap_free(di_smap *m);
/* Inserts id, whose string must already be at base + off[id]; false if that string is present. */
bool di_smap_put(di_smap *m, int32_t id);
int32_t di_smap_get(const di_smap *m, const char *key, size_t len); /* -1 if absent */

/* ---- (left, right) -> (rank, merged id) map ---- */
typedef struct di_pmap_slot {
    uint64_t key; /* (left << 32 | right) + 1; 0 = empty */
    int32_t rank;
    int32_t merged;
} di_pmap_slot;

typedef struct di_pmap {
    di_pmap_slot *slots;
    size_t cap, n;
} di_pmap;

void di_pmap_init(di_pmap *m, size_t expected);
void di_pmap_free(di_pmap *m);
bool di_pmap_put(di_pmap *m, int32_t left, int32_t right, int32_t rank, int32_t merged);
/* Returns the slot or NULL. */
const di_pmap_slot *di_pmap_get(const di_pmap *m, int32_t left, int32_t right);

/* ---- added-token trie ---- */
typedef struct di_trie_node {
    int32_t first_child; /* -1 = none */
    int32_t next_sibling;
    int32_t token_id; /* -1 unless a token ends here */
    uint8_t byte;
} di_trie_node;

typedef struct di_trie {
    di_trie_node *nodes; /* [n]; node 0 is the root */
    size_t n, cap;
    bool first_byte[256]; /* some token starts with this byte */
    size_t n_tokens;
} di_trie;

void di_trie_init(di_trie *tr);
void di_trie_free(di_trie *tr);
void di_trie_add(di_trie *tr, const uint8_t *s, size_t len, int32_t id);
/* Longest token starting at s[0..len): returns its byte length and id, or 0. */
size_t di_trie_longest(const di_trie *tr, const uint8_t *s, size_t len, int32_t *id);

/* ---- BPE result cache (piece bytes -> ids), bounded; cleared when full ---- */
typedef struct di_bpe_cache {
    pthread_mutex_t lock;
    uint32_t *slots;    /* [cap] entry offset + 1 into `data`, 0 = empty */
    size_t cap, n;      /* cap a power of two */
    uint8_t *data;      /* entries: u32 hash, u16 key_len, u16 n_ids, key bytes, pad, i32 ids */
    size_t data_len, data_cap;
} di_bpe_cache;

/* ---- token flags ---- */
enum {
    DI_TOKF_USED = 1,
    DI_TOKF_ADDED = 2,
    DI_TOKF_SPECIAL = 4,
    DI_TOKF_NORMALIZED = 8,
    DI_TOKF_LSTRIP = 16,
    DI_TOKF_RSTRIP = 32,
    DI_TOKF_SINGLE_WORD = 64,
};

#define DI_TOK_MAX_SPLITS 8

struct di_tokenizer {
    char *name;                /* file name for messages */
    int32_t n_ids;             /* id space size */
    int32_t n_base;            /* base vocab entries */
    char *arena;               /* token strings and decoded bytes */
    size_t arena_len, arena_cap;
    uint32_t *str_off, *str_len; /* [n_ids] token string (JSON spelling) in arena */
    uint32_t *dec_off, *dec_len; /* [n_ids] decoded bytes in arena */
    uint8_t *flags;              /* [n_ids] DI_TOKF_* */
    di_smap vocab;               /* base vocab string -> id */
    di_smap added;               /* added token content -> id */
    di_pmap merges;              /* (left, right) -> rank, merged */
    int32_t byte_id[256];        /* id of the one-char byte-level token of each byte, -1 if none */
    char byte_char[256][3];      /* UTF-8 of the byte-level char of each byte */
    uint8_t byte_char_len[256];
    int n_splits;                /* pre-tokenizer Split regexes, applied in order */
    pcre2_code *split_re[DI_TOK_MAX_SPLITS];
    bool split_jit[DI_TOK_MAX_SPLITS];
    di_trie trie_raw;            /* added tokens with normalized = false */
    di_trie trie_norm;           /* added tokens with normalized = true */
    di_bpe_cache cache;
};

/* tok_pretok.c: compiles an Oniguruma-syntax pattern (as HF writes it) for PCRE2, rewriting the
 * constructs whose meaning differs (\s, \S: Unicode White_Space in Oniguruma). */
di_status di_tok_compile_split(di_tokenizer *t, const char *pattern, size_t len, di_err *err);

/* tok_bpe.c */
void di_bpe_cache_init(di_bpe_cache *c);
void di_bpe_cache_free(di_bpe_cache *c);
/* BPE-encodes one pre-tokenized piece of raw bytes, appending ids. */
void di_bpe_piece(di_tokenizer *t, const uint8_t *piece, size_t len, di_token_vec *out);

/* tok_encode.c: pre-tokenize + BPE of a text without added tokens (valid UTF-8 assumed). */
di_status di_tok_encode_plain(di_tokenizer *t, const char *text, size_t len, di_token_vec *out,
                              di_err *err);

#endif
