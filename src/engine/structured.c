/* Structured output in the engine: a request's regex / EBNF / JSON schema / JSON-object constraint
 * is compiled when the request is added (an invalid one fails that request alone), a token mask is
 * computed for each of its sampled rows (src/constrain, cached per automaton state) and handed to
 * the sampler as allowed_mask, and the matcher follows each committed token. EOS is in the mask
 * only where the output is complete. Requests with different constraints share a batch: masks are
 * per row. The engine computes a step's masks between di_forward_begin and di_forward_end, so on a
 * device they overlap the forward pass (step.c). */
#include <stdlib.h>
#include <string.h>

#include "constrain/constrain.h"
#include "engine/engine_internal.h"

di_status di_engine_constraint_init(di_engine *e, engine_req *r, const di_request *q, di_err *err) {
    int n = (q->regex != NULL) + (q->grammar_ebnf != NULL) + (q->json_schema != NULL) + (q->json_object ? 1 : 0);
    if (n == 0) return DI_OK;
    if (n > 1) return di_errf(err, DI_EINVAL, "request: give at most one of regex, grammar, json_schema, json_object");
    if (!e->tok) return di_errf(err, DI_EINVAL, "request: structured output needs the model's tokenizer.json");
    if (!e->vocab_trie) {
        di_status st = di_token_trie_build(e->tok, e->model->cfg.eos_token_id, &e->vocab_trie, err);
        if (st) return st;
    }
    di_constrain_kind kind = q->regex ? DI_CONSTRAIN_REGEX
                           : q->grammar_ebnf ? DI_CONSTRAIN_EBNF
                           : q->json_schema ? DI_CONSTRAIN_JSON_SCHEMA : DI_CONSTRAIN_JSON_OBJECT;
    const char *text = q->regex ? q->regex : q->grammar_ebnf ? q->grammar_ebnf : q->json_schema ? q->json_schema : "";
    di_constrain_opts o;
    di_constrain_opts_init(&o);
    /* generated JSON is compact: a model cannot run away in whitespace */
    o.json_ws_flexible = false;
    di_status st = di_constrain_compile(kind, text, strlen(text), &o, &r->grammar, err);
    if (st) return di_err_prefix(err, "request: %s", kind == DI_CONSTRAIN_REGEX ? "regex" : kind == DI_CONSTRAIN_EBNF ? "grammar" : "json_schema");
    r->matcher = di_matcher_new(r->grammar, e->vocab_trie);
    /* the sampler reads the mask over the model's vocabulary; should the tokenizer have fewer ids
     * (a model without Engram may: with it the loader insists on equal sizes), the words past the
     * matcher's stay 0 and the padding ids are never allowed */
    const int32_t trie_vocab = di_token_trie_vocab_size(e->vocab_trie), model_vocab = e->model->cfg.vocab_size;
    const size_t words = ((size_t)(trie_vocab > model_vocab ? trie_vocab : model_vocab) + 31) / 32;
    r->allowed = di_xcalloc(words, sizeof(uint32_t));
    return DI_OK;
}

const uint32_t *di_engine_constraint_mask(di_engine *e, engine_req *r) {
    (void)e;
    if (!r->matcher) return NULL;
    di_matcher_fill_mask(r->matcher, r->allowed);
    return r->allowed;
}

const uint32_t *di_engine_constraint_current(const engine_req *r) { return r->matcher ? r->allowed : NULL; }

bool di_engine_constraint_commit(engine_req *r, int32_t token) {
    return !r->matcher || di_matcher_accept_token(r->matcher, token);
}

void di_engine_constraint_free(engine_req *r) {
    di_matcher_free(r->matcher);
    di_grammar_free(r->grammar);
    free(r->allowed);
    r->matcher = NULL;
    r->grammar = NULL;
    r->allowed = NULL;
}

void di_engine_constraint_release(di_engine *e) {
    di_token_trie_free(e->vocab_trie);
    e->vocab_trie = NULL;
}
