/* Structured output: compile a regex, an EBNF grammar or a JSON schema, then drive a token-level
 * matcher that says which vocabulary tokens may come next (a bit mask for the sampler) and follows
 * the tokens actually chosen. docs/STRUCTURED_OUTPUT.md describes the supported syntax.
 *
 *   di_grammar *g;  di_constrain_compile(DI_CONSTRAIN_JSON_SCHEMA, text, len, &opts, &g, &err);
 *   di_token_trie *v; di_token_trie_build(tokenizer, eos_id, &v, &err);   (once per vocabulary)
 *   di_matcher *m = di_matcher_new(g, v);
 *   loop: di_matcher_fill_mask(m, mask); sample with mask; di_matcher_accept_token(m, id);
 *
 * Errors: a construct we do not implement is DI_EUNSUPPORTED with a message "unsupported: <feature>";
 * malformed input is DI_EINVAL with "error"-style text naming the position or keyword.
 *
 * Threads: a compiled grammar carries caches shared by its matchers (states, transitions, masks);
 * use a grammar and its matchers from one thread at a time. A token trie is immutable. */
#ifndef DI_CONSTRAIN_CONSTRAIN_H
#define DI_CONSTRAIN_CONSTRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "constrain/grammar.h"
#include "tokenizer/tokenizer.h"

typedef enum di_constrain_kind {
    DI_CONSTRAIN_REGEX,
    DI_CONSTRAIN_EBNF,
    DI_CONSTRAIN_JSON_SCHEMA,
    DI_CONSTRAIN_JSON_OBJECT, /* any JSON object (text ignored) */
} di_constrain_kind;

typedef struct di_constrain_opts {
    /* JSON: whitespace allowed between tokens. false = none (compact, e.g. {"a":1,"b":[2,3]}) */
    bool json_ws_flexible;
    /* JSON: upper bound on one whitespace run when flexible (0 = unbounded) */
    int json_ws_max;
} di_constrain_opts;

void di_constrain_opts_init(di_constrain_opts *o); /* flexible whitespace, unbounded */

di_status di_constrain_compile(di_constrain_kind kind, const char *text, size_t len,
                               const di_constrain_opts *opts, di_grammar **out, di_err *err);

/* Front ends (each builds the grammar's rules and returns the root rule). */
di_status di_regex_build(g_builder *g, const char *re, size_t len, bool json_string, int *root, di_err *err);
/* A regex as an expression node (not a rule), for embedding (JSON-schema patterns). */
di_status di_regex_node(g_builder *g, const char *re, size_t len, bool json_string, int *node, di_err *err);
/* Code-point ranges as an expression: raw UTF-8, or (json) the JSON-string-escaped form. */
int di_cp_class_node(g_builder *g, const uint32_t *ranges, int n_ranges, bool json);
di_status di_ebnf_build(g_builder *g, const char *src, size_t len, int *root, di_err *err);
di_status di_json_schema_build(g_builder *g, const char *json, size_t len, const di_constrain_opts *o,
                               int *root, di_err *err);

/* ---- vocabulary ---- */

typedef struct di_token_trie di_token_trie;

/* Indexes every token's bytes (added tokens are never allowed, except eos_id at the end). */
di_status di_token_trie_build(const di_tokenizer *t, int32_t eos_id, di_token_trie **out, di_err *err);
/* Same from raw byte strings: tokens[i] of lens[i] bytes; NULL = an id that is never allowed. */
di_token_trie *di_token_trie_from_bytes(const uint8_t *const *tokens, const size_t *lens, int32_t n_vocab,
                                        int32_t eos_id);
void di_token_trie_free(di_token_trie *v);
int32_t di_token_trie_vocab_size(const di_token_trie *v);
int32_t di_token_trie_eos(const di_token_trie *v);

/* ---- matcher ---- */

typedef struct di_matcher di_matcher;

di_matcher *di_matcher_new(di_grammar *g, const di_token_trie *v);
void di_matcher_free(di_matcher *m);
/* Advances by one token; false (state unchanged) if the grammar does not allow it. The EOS token
 * is allowed only where the text so far is complete; after it the matcher is finished. */
bool di_matcher_accept_token(di_matcher *m, int32_t id);
/* Advances by raw bytes as one step (for tests and checks); false (unchanged) if not allowed. */
bool di_matcher_accept_bytes(di_matcher *m, const uint8_t *b, size_t n);
bool di_matcher_can_end(di_matcher *m);     /* the text so far is complete */
bool di_matcher_is_finished(const di_matcher *m); /* EOS was accepted */
/* Undoes the last n accepted tokens (speculative decoding). Returns how many were undone. */
int di_matcher_rollback(di_matcher *m, int n);
/* Fills mask[(vocab + 31) / 32]: bit (id % 32) of word id / 32 = id allowed next. After EOS only
 * EOS is allowed. Masks are cached per automaton state. */
void di_matcher_fill_mask(di_matcher *m, uint32_t *mask);
/* The same mask by the plainest method (one trie walk from the whole stack set, no per-state or
 * shared caches, nothing stored): the reference that tests compare di_matcher_fill_mask with. */
void di_matcher_fill_mask_reference(di_matcher *m, uint32_t *mask);
/* Cache statistics of the grammar's runtime (states, stacks, masks computed). */
void di_grammar_stats(const di_grammar *g, int64_t *n_nodes, int64_t *n_sets, int64_t *n_masks);

#endif
