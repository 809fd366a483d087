/* Thompson NFAs and their subset construction, shared by the byte-DFA operations (grammar.c,
 * g_node_dfa) and the grammar compiler (grammar_compile.c). Internal to src/constrain. */
#ifndef DI_CONSTRAIN_GRAMMAR_NFA_H
#define DI_CONSTRAIN_GRAMMAR_NFA_H

#include "constrain/grammar.h"

enum { E_EPS, E_BYTES, E_RULE };

typedef struct nfa_edge {
    int type, label, to, next; /* label: byte-set index (E_BYTES) or callee rule (E_RULE) */
} nfa_edge;

typedef struct nfa {
    int *head; /* [n] first edge, -1 = none */
    int n, cap;
    nfa_edge *e;
    int ne, ce;
    bool overflow; /* more than DI_G_MAX_NFA_STATES: the expression is refused */
} nfa;

/* Builds expression node between fresh states *s (start) and *t (accept). */
void g_nfa_build(const g_builder *g, nfa *a, int node, int *s, int *t);

typedef struct dfa_ctx {
    const g_builder *g;  /* for compute_classes only */
    nfa *a;
    int *mark;           /* [a->n] stamp */
    int stamp;
    g_ivec stack, tmp;
    uint8_t byte_class[256];
    int n_classes;
    g_ivec *set_classes; /* [n_sets] classes inside each byte set */
    int64_t work;        /* NFA states visited by closures */
} dfa_ctx;

/* Closures may visit this many NFA states in one byte-DFA operation (a quarter of it) before the
 * operation is refused as too large. */
#define DI_G_MAX_CLOSURE_WORK 50000000

/* Epsilon closure of seeds -> sorted unique set in out. */
void g_eps_closure(dfa_ctx *c, const int *seeds, int n, g_ivec *out);
/* Byte classes of the builder's byte sets (c->byte_class, n_classes, set_classes). */
void g_compute_classes(dfa_ctx *c);

#endif
