/* Engine internals shared by engine.c (lifecycle, requests, results), schedule.c (planning a
 * step) and step.c (running a planned step, sampling, stopping). */
#ifndef DI_ENGINE_INTERNAL_H
#define DI_ENGINE_INTERNAL_H

#include "base/error.h"
#include "forward/forward.h"
#include "sample/sampler.h"
#include "sample/sampler_pool.h"
#include "tokenizer/tokenizer.h"

typedef enum req_phase { REQ_WAITING, REQ_RUNNING, REQ_FINISHED } req_phase;

typedef struct engine_req {
    uint64_t id;
    req_phase phase;
    di_finish_reason finish;
    char *error;
    /* tokens: the prompt, then everything generated; a preempted request recomputes all of them */
    int32_t *tokens;
    int64_t n_tokens, cap_tokens;
    int64_t n_prompt;          /* prompt length (generated tokens start here) */
    int64_t n_computed;        /* tokens whose state is in `state` (the next chunk starts here) */
    int max_tokens;
    di_sampling_params sampling;
    di_logit_bias *logit_bias; /* owned copy */
    char **stop;               /* owned copies */
    int n_stop;
    int32_t *stop_ids;
    int n_stop_ids;
    bool ignore_eos;
    di_seq_state *state;       /* NULL unless running */
    int64_t admit_order;       /* for preemption: the newest running request goes first */
    /* output */
    char *text;                /* detokenized output, stop string cut off */
    size_t text_len, text_cap;
    size_t streamed;           /* bytes of text already delivered to the callback */
    di_detok detok;
    bool has_detok;
    float *logprobs;           /* [n generated] */
    di_token_logprob *top;     /* [n generated * sampling.logprobs] */
    /* structured output (structured.c); NULL without a constraint */
    struct di_grammar *grammar;
    struct di_matcher *matcher;
    uint32_t *allowed;         /* [(max(model, tokenizer vocab) + 31) / 32] mask of the next token */
} engine_req;

struct di_engine {
    di_model *model;
    di_tokenizer *tok;          /* NULL when the model dir has no tokenizer.json */
    di_sampler_pool *samplers; /* one a host thread: the rows whose logits come back */
    di_kv_pool pool;
    di_engine_options opt;
    di_token_callback cb;
    void *cb_user;
    engine_req **reqs;          /* every request not yet released, in arrival order */
    int n_reqs, cap_reqs;
    uint64_t next_id;
    int64_t admit_counter;
    int64_t seq_fixed_bytes;    /* rings and pair state of one running sequence */
    int64_t max_prompt_tokens;  /* longest prompt + generation that fits the budget alone */
    di_engine_stats stats;
    struct di_token_trie *vocab_trie; /* structured output: built on the first constrained request */
    float *logits;              /* [logits_rows, V] a step's sampled rows that need their logits,
                                 * kept across steps: page-locked on a device
                                 * (di_model_result_alloc), which writes it */
    int32_t *head_tokens;       /* [logits_rows] every sampled row's token taken where its logits are
                                 * (di_batch.head_tokens: the device's argmax of a plain-greedy row,
                                 * its draw of a plain-sampled one), page-locked the same way */
    di_sample_result *head_logprobs; /* [logits_rows] the sampler's results of the rows whose
                                 * logprobs a device computed (di_batch.head_logprobs), likewise */
    int logits_rows;
};

/* A planned step: for each scheduled request, how many of its tokens to run. */
typedef struct step_plan {
    engine_req **req;           /* [n] */
    int *n_rows;                /* [n] */
    bool *samples;              /* [n] whether the last row's logits are sampled (prompt complete) */
    int n, cap;
    int total_rows;
} step_plan;

/* schedule.c */
void di_step_plan_free(step_plan *p);
/* Plans the next step; preempts running requests (state freed, recomputed later) when the memory
 * budget cannot hold the planned growth. */
void di_engine_plan(di_engine *e, step_plan *plan);
int64_t di_engine_kv_bytes_in_use(const di_engine *e);

/* step.c */
di_status di_engine_execute(di_engine *e, const step_plan *plan, di_err *err);

/* structured.c: structured output per request */
/* Compiles the request's constraint (if any) into r; an invalid or unsupported one fails the
 * request alone with a message naming the problem. */
di_status di_engine_constraint_init(di_engine *e, engine_req *r, const di_request *q, di_err *err);
/* Computes the allowed-token mask for r's next token and returns it, or NULL when r is
 * unconstrained; di_engine_constraint_current returns the last one computed (or NULL). */
const uint32_t *di_engine_constraint_mask(di_engine *e, engine_req *r);
const uint32_t *di_engine_constraint_current(const engine_req *r);
/* Advances r's matcher by the sampled token; false if the token breaks the constraint. */
bool di_engine_constraint_commit(engine_req *r, int32_t token);
void di_engine_constraint_free(engine_req *r);
void di_engine_constraint_release(di_engine *e); /* the engine's vocabulary trie */

/* engine.c */
void di_engine_finish_req(di_engine *e, engine_req *r, di_finish_reason why, const char *error);
void di_engine_preempt(di_engine *e, engine_req *r);

#endif
