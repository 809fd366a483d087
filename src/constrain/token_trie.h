/* The vocabulary trie the matcher walks (token_trie.c builds it; matcher.c reads it).
 *
 * Nodes are numbered breadth-first, so the children of a node are contiguous. Within a node the
 * children are ordered by sub_chars, largest first (not by byte): a walk that may skip every
 * subtree of at most m plain characters stops at the first child with sub_chars <= m.
 *
 * Plain-string slices (the "lexeme" precomputation of llguidance, specialised to JSON strings): a
 * token is *plain* when its bytes are code points that a JSON string may hold unescaped (U+0020 and
 * up, except '"' and '\'), in valid UTF-8, the last one possibly cut short; its plain length is its
 * number of code points (a cut one counts). slice_mask row m (1..DI_TRIE_SLICE_MAX) holds the plain
 * tokens of at most m code points, row 0 every plain token. A DFA state that surely takes any m
 * plain code points allows all of row m without looking at them (matcher.c, plain_capacity). */
#ifndef DI_CONSTRAIN_TOKEN_TRIE_H
#define DI_CONSTRAIN_TOKEN_TRIE_H

#include <pthread.h>

#include "constrain/constrain.h"

#define DI_TRIE_SLICE_MAX 32
#define DI_TRIE_NOT_PLAIN INT16_MAX

struct di_token_trie {
    int32_t vocab, eos;
    int32_t n_nodes;
    int32_t *child_off;  /* [n_nodes + 1] children of node i: child_off[i]..child_off[i+1] */
    uint8_t *child_byte; /* [n_nodes] byte leading to node j (root: unused) */
    int32_t *tok_off;    /* [n_nodes + 1] tokens ending at node i */
    int32_t *toks;       /* [tokens in the trie] */
    int32_t *node_of;    /* [vocab] trie node where token id ends, -1 = never allowed */
    int32_t *parent_of;  /* [n_nodes] */
    int32_t max_depth;   /* longest token in bytes */
    int16_t *sub_chars;  /* [n_nodes] largest plain length of a token in the subtree (the node's own
                            tokens included), DI_TRIE_NOT_PLAIN if one of them is not plain */
    int32_t max_plain;   /* largest plain length of any token */
    uint32_t *slice_mask; /* [DI_TRIE_SLICE_MAX + 1][(vocab + 31) / 32] */
    /* context-free masks shared by every grammar on this vocabulary (matcher.c, light_get) */
    pthread_mutex_t mu;
    struct shared_light *shared;
    int n_shared, cap_shared;
};

typedef struct shared_light {
    uint64_t hash;
    int32_t *key;
    int key_n;
    uint32_t *mask;
    g_ivec bounds; /* pairs (trie node, exit index) */
} shared_light;

/* Reading plain code points byte by byte: u = 0 between code points, else a position inside one;
 * returns the position after byte b, or -1 if b cannot come there. */
int di_trie_plain_step(int u, uint8_t b);
#define DI_TRIE_PLAIN_POSITIONS 8
/* The plain length of a byte string, or -1 if it is not plain. */
int di_trie_plain_chars(const uint8_t *b, size_t n);
/* A token's bytes (walking up from its node) into buf; NULL for a token not in the trie. */
const uint8_t *di_trie_token_bytes(const di_token_trie *v, int32_t id, uint8_t *buf, size_t cap, size_t *len);

#endif
