/* Grammars for structured output: what every front end (regex, EBNF, JSON schema) builds, and the
 * compiled form the token matcher runs.
 *
 * Front ends build an expression tree per rule with a g_builder: byte sets, sequences, alternations,
 * bounded/unbounded repetition and references to other rules (so recursion, e.g. nested JSON, is
 * a rule calling itself). Text is always UTF-8 bytes: code-point classes are turned into byte
 * sequences by g_utf8_class.
 *
 * di_grammar_build compiles each rule's expression into a DFA over (byte classes + rule calls):
 * Thompson NFA, then subset construction, done lazily state by state as the matcher needs them.
 * The result is a set of per-rule DFAs whose "rule call" edges make it a pushdown automaton;
 * src/constrain/matcher.c runs it on a set of stacks (so ambiguous grammars work) and turns it into
 * token masks. Left recursion is refused at build time (it would make the stack grow without
 * consuming input).
 *
 * Limits (each an `unsupported:` error, never a silent cut): DI_G_MAX_NFA_STATES, and
 * DI_G_MAX_OP_STATES for the byte-DFA operations. */
#ifndef DI_CONSTRAIN_GRAMMAR_H
#define DI_CONSTRAIN_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

#define DI_G_MAX_NFA_STATES 4000000

/* A growable int array (builder scratch). */
typedef struct g_ivec {
    int *v;
    int n, cap;
} g_ivec;
void g_ivec_push(g_ivec *a, int x);
void g_ivec_free(g_ivec *a);

/* Interning of int sets (sorted, unique arrays): each distinct set gets an index 0, 1, ... */
typedef struct g_set_table {
    g_ivec pool; /* concatenated sets */
    g_ivec off;  /* [n + 1] */
    int *slots;  /* open addressing: set index or -1 */
    int n_slots;
} g_set_table;
uint64_t g_hash_ints(const int *v, int n);
int g_st_intern(g_set_table *t, const int *v, int n, bool *added);
void g_st_free(g_set_table *t);

typedef enum g_kind { G_EMPTY, G_NONE, G_BYTES, G_SEQ, G_ALT, G_REPEAT, G_RULE, G_AUTO } g_kind;

typedef struct g_node {
    int kind; /* g_kind */
    int a;    /* BYTES: byteset index; SEQ/ALT: first kid offset; REPEAT: child; RULE: rule id;
                 AUTO: embedded automaton index */
    int b;    /* SEQ/ALT: kid count; REPEAT: min */
    int c;    /* REPEAT: max (-1 = unbounded) */
} g_node;

typedef struct g_builder {
    g_node *nodes;
    int n_nodes, cap_nodes;
    g_ivec kids;
    uint8_t (*sets)[32]; /* [n_sets][32] byte bitsets, each distinct */
    int n_sets, cap_sets;
    int *set_slots;      /* open addressing over sets: index or -1 */
    int n_set_slots;
    char **rule_names; /* [n_rules] */
    int *rule_body;    /* [n_rules], -1 = not yet defined */
    int n_rules, cap_rules;
    struct g_auto *autos; /* embedded byte automata (G_AUTO) */
    int n_autos, cap_autos;
} g_builder;

/* An embedded automaton: state 0 starts; edges (from, byte set, to); accepting flags. */
typedef struct g_auto {
    int n_states;
    uint8_t *accept; /* [n_states] */
    g_ivec from, set, to;
} g_auto;

/* A complete DFA over bytes, for boolean operations on terminal-only expressions (patterns with
 * lengths, keys excluding names). State 0 starts; next[s * 256 + b] = -1 is the dead state. */
typedef struct g_dfa {
    int n;
    int32_t *next;   /* [n * 256] */
    uint8_t *accept; /* [n] */
} g_dfa;

#define DI_G_MAX_OP_STATES 200000
/* Determinises a terminal-only expression (no rule references). */
di_status g_node_dfa(const g_builder *g, int node, g_dfa *out, di_err *err);
/* and_not = false: a AND b; true: a AND NOT b. Only reachable states that can still accept. */
di_status g_dfa_product(const g_dfa *a, const g_dfa *b, bool and_not, g_dfa *out, di_err *err);
bool g_dfa_empty(const g_dfa *d);
bool g_dfa_match(const g_dfa *d, const uint8_t *s, size_t n);
void g_dfa_free(g_dfa *d);
/* Embeds a DFA into the builder as an expression. */
int g_dfa_node(g_builder *g, const g_dfa *d);

void g_builder_init(g_builder *g);
void g_builder_free(g_builder *g);

int g_empty(g_builder *g);
int g_none(g_builder *g); /* matches nothing */
int g_bytes(g_builder *g, const uint8_t set[32]);
int g_byte_range(g_builder *g, int lo, int hi);
int g_lit(g_builder *g, const char *s, size_t n); /* exact bytes */
int g_lits(g_builder *g, const char *s);
int g_seq(g_builder *g, const int *kids, int n);
int g_alt(g_builder *g, const int *kids, int n);
int g_seq2(g_builder *g, int a, int b);
int g_seq3(g_builder *g, int a, int b, int c);
int g_alt2(g_builder *g, int a, int b);
int g_repeat(g_builder *g, int child, int min, int max);
int g_opt(g_builder *g, int child);
int g_star(g_builder *g, int child);
int g_ref(g_builder *g, int rule);
/* Rules: g_rule_new returns the id of a new undefined rule; name is copied (for messages). */
int g_rule_new(g_builder *g, const char *name);
void g_rule_set(g_builder *g, int rule, int body);
int g_rule_find(const g_builder *g, const char *name);

/* Code-point ranges (sorted or not, may overlap) -> expression over UTF-8 bytes. Surrogates
 * (U+D800..U+DFFF) are never matched. n_ranges pairs lo,hi inclusive. */
int g_utf8_class(g_builder *g, const uint32_t *ranges, int n_ranges);
/* Appends the UTF-8 encoding of cp to buf; returns its length (1..4). */
int g_utf8_encode(uint32_t cp, char *buf);
/* Decodes the code point starting at s (avail >= 1 bytes there) into *cp and returns its length;
 * a sequence longer than avail decodes its lead byte alone (length 1). The grammar sources are
 * UTF-8 text, so no further validation happens here. */
int g_utf8_decode(const uint8_t *s, size_t avail, uint32_t *cp);
/* Value of a hexadecimal digit, or -1. */
int g_hex_value(char c);

/* ---- compiled grammar ---- */

/* The per-rule DFAs are built lazily (grammar_compile.c): a state exists once some transition or
 * call reaches it (its flags are then known), and its row of transitions and its rule calls are
 * computed the first time they are needed (g_expand_state). Arrays indexed by state grow as
 * states are created, so never keep a pointer into them across a call that may expand a state. */
typedef struct di_grammar {
    int n_rules;
    int root_rule;
    char **rule_names;     /* [n_rules] */
    int *rule_start;       /* [n_rules] DFA state where each rule starts, -1 = unreachable */
    uint8_t byte_class[256];
    int n_classes;
    int n_states;          /* DFA states created so far, all rules */
    int cap_states;        /* allocated length of the per-state arrays */
    int32_t *next;         /* [cap_states * n_classes] next state on a byte class, -1 = none (once expanded) */
    int32_t *state_rule;   /* [cap_states] the rule a state belongs to */
    uint8_t *accepting;    /* [cap_states] the rule may finish here */
    uint8_t *has_bytes;    /* [cap_states] any byte transition */
    uint8_t *has_calls;    /* [cap_states] any rule call */
    uint8_t *light;        /* [cap_states] has_bytes, no calls, not accepting: a walk needs no stack */
    uint8_t *expanded;     /* [cap_states] next row and calls computed */
    int32_t *call_first;   /* [cap_states] rule calls of state s: call_rule/call_to.v[call_first[s] ...] */
    int32_t *call_count;   /* [cap_states] (once expanded) */
    g_ivec call_rule;      /* [calls] callee */
    g_ivec call_to;        /* [calls] state after the callee returns */
    struct g_lazy *lazy;   /* NFA and subset tables for expansion (grammar_compile.c) */
    struct g_runtime *rt;  /* matcher caches (matcher.c) */
} di_grammar;

/* Compiles rules reachable from root. Takes nothing from g (g is still freed by the caller).
 * Errors: an undefined rule (DI_EINVAL), left recursion or an NFA over DI_G_MAX_NFA_STATES
 * (DI_EUNSUPPORTED). */
di_status di_grammar_build(const g_builder *g, int root_rule, di_grammar **out, di_err *err);
/* Computes state s's transitions and calls (creating the states they reach). */
void g_expand_state(di_grammar *gr, int s);
static inline void g_state_ready(di_grammar *gr, int s) {
    if (!gr->expanded[s]) g_expand_state(gr, s);
}
/* Frees what grammar_compile.c owns (the lazy tables and per-state arrays). */
void g_grammar_free_tables(di_grammar *gr);
void di_grammar_free(di_grammar *gr);

#endif
