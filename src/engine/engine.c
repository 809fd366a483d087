/* The engine: owns the model, tokenizer, sampler and KV pool, keeps every request from arrival to
 * release, and runs the step loop (plan in schedule.c, run in step.c). Requests are checked on
 * arrival, so one bad request is refused on its own and never disturbs the others. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/clock.h"
#include "engine/engine_internal.h"
#include "forward/device.h"
#include "tokenizer/prompt.h"

static di_status fail(char *errbuf, size_t cap, const di_err *err) {
    if (errbuf && cap) snprintf(errbuf, cap, "%s", err->msg);
    return err->status;
}

const char *di_finish_reason_name(di_finish_reason r) {
    switch (r) {
    case DI_FINISH_NONE: return "none";
    case DI_FINISH_STOP: return "stop";
    case DI_FINISH_LENGTH: return "length";
    case DI_FINISH_CANCELLED: return "cancelled";
    case DI_FINISH_ERROR: return "error";
    }
    return "unknown";
}

static int64_t largest_fitting_tokens(const di_engine *e) {
    /* a fresh state's block needs are linear in the length: search the largest length that fits */
    di_seq_state *probe = di_seq_state_new_in(e->model, (di_kv_pool *)&e->pool);
    int64_t lo = 0, hi = e->model->cfg.max_position_embeddings;
    const int64_t bb = (int64_t)di_kv_pool_block_bytes(&e->pool);
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (e->seq_fixed_bytes + di_seq_state_blocks_needed(probe, mid) * bb <= e->opt.kv_budget_bytes) lo = mid;
        else hi = mid - 1;
    }
    di_seq_state_free(probe);
    return lo;
}

di_status di_engine_create(const di_engine_options *opt, di_engine **out, char *errbuf, size_t errcap) {
    di_err err = {0};
    *out = NULL;
    if (!opt || !opt->model_dir || !*opt->model_dir) {
        di_errf(&err, DI_EINVAL, "engine: no model directory given");
        return fail(errbuf, errcap, &err);
    }
    di_engine *e = di_xcalloc(1, sizeof *e);
    e->opt = *opt;
    if (!e->opt.kv_budget_bytes) e->opt.kv_budget_bytes = (int64_t)1 << 30;
    if (!e->opt.max_num_seqs) e->opt.max_num_seqs = 64;
    if (!e->opt.max_batch_tokens) e->opt.max_batch_tokens = 2048;
    if (!e->opt.max_prefill_chunk) e->opt.max_prefill_chunk = e->opt.max_batch_tokens;
    e->next_id = 1;
    if (e->opt.max_num_seqs < 0 || e->opt.max_batch_tokens < 0 || e->opt.max_prefill_chunk < 0 ||
        e->opt.kv_budget_bytes < 0 || e->opt.dense_bf16_rows < 0) {
        di_errf(&err, DI_EINVAL, "engine: negative option");
        free(e);
        return fail(errbuf, errcap, &err);
    }
    di_status st = di_model_load(&e->model, opt->model_dir, &err);
    if (!st) e->model->dense16_rows = opt->dense_bf16_rows;
    if (!st) st = di_model_select_backend(e->model, opt->backend,
                                                  (opt->batch_invariant ? DI_BACKEND_BATCH_INVARIANT : 0) |
                                                      (opt->exact ? DI_BACKEND_EXACT : 0) |
                                                      (opt->eager ? DI_BACKEND_EAGER : 0) |
                                                      (opt->no_wgmma ? 0 : DI_BACKEND_WGMMA) |
                                                      (opt->no_pdl ? 0 : DI_BACKEND_PDL) |
                                                      (opt->no_blas ? 0 : DI_BACKEND_BLAS),
                                                  &err);
    char path[4096];
    struct stat sb;
    snprintf(path, sizeof path, "%s/tokenizer.json", opt->model_dir);
    if (!st && stat(path, &sb) == 0) st = di_tokenizer_load(path, &e->tok, &err);
    if (!st) st = di_sampler_pool_create(e->model->cfg.vocab_size, &e->samplers, &err);
    if (st) {
        di_engine_free(e);
        return fail(errbuf, errcap, &err);
    }
    di_kv_pool_init(&e->pool, 16, di_kv_entry_floats(e->model), 0); /* 16 entries a block, as vLLM */
    if (e->model->dev_backend) { /* device memory: the whole KV budget is taken at the first block */
        di_kv_pool_set_mem(&e->pool, &e->model->dev_backend->mem);
        e->pool.max_blocks = e->opt.kv_budget_bytes / (int64_t)di_kv_pool_block_bytes(&e->pool) + 1;
    }
    di_seq_state *probe = di_seq_state_new_in(e->model, &e->pool);
    e->seq_fixed_bytes = (int64_t)di_seq_state_bytes(e->model, probe);
    di_seq_state_free(probe);
    e->max_prompt_tokens = largest_fitting_tokens(e);
    if (e->max_prompt_tokens < 2) {
        di_errf(&err, DI_ENOMEM, "engine: KV budget of %lld bytes cannot hold one sequence (%lld bytes of "
                "fixed state each)", (long long)e->opt.kv_budget_bytes, (long long)e->seq_fixed_bytes);
        di_engine_free(e);
        return fail(errbuf, errcap, &err);
    }
    e->stats.kv_budget_bytes = e->opt.kv_budget_bytes;
    e->stats.seq_fixed_bytes = e->seq_fixed_bytes;
    *out = e;
    return DI_OK;
}

static void req_free(engine_req *r) {
    if (!r) return;
    di_seq_state_free(r->state);
    free(r->tokens);
    free(r->error);
    free(r->logit_bias);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->stop_ids);
    free(r->text);
    if (r->has_detok) di_detok_free(&r->detok);
    di_engine_constraint_free(r);
    free(r->logprobs);
    free(r->top);
    free(r);
}

void di_engine_free(di_engine *e) {
    if (!e) return;
    for (int i = 0; i < e->n_reqs; i++) req_free(e->reqs[i]);
    free(e->reqs);
    di_kv_pool_destroy(&e->pool);
    if (e->model) {
        di_model_result_free(e->model, e->logits);
        di_model_result_free(e->model, e->head_tokens);
        di_model_result_free(e->model, e->head_logprobs);
    }
    di_sampler_pool_free(e->samplers);
    di_engine_constraint_release(e);
    di_tokenizer_free(e->tok);
    di_model_free(e->model);
    free(e);
}

void di_engine_set_callback(di_engine *e, di_token_callback cb, void *user) {
    e->cb = cb;
    e->cb_user = user;
}

bool di_engine_has_tokenizer(const di_engine *e) { return e->tok != NULL; }

/* The prompt of a request as token ids. */
static di_status request_prompt(di_engine *e, const di_request *q, di_token_vec *ids, di_err *err) {
    int forms = (q->prompt != NULL) + (q->chat_json != NULL) + (q->prompt_ids != NULL);
    if (forms != 1) return di_errf(err, DI_EINVAL, "request: give exactly one of prompt, messages, prompt_ids");
    if (q->prompt_ids) {
        for (int i = 0; i < q->n_prompt_ids; i++)
            if (q->prompt_ids[i] < 0 || q->prompt_ids[i] >= e->model->cfg.vocab_size)
                return di_errf(err, DI_ERANGE, "request: prompt_ids[%d] = %d outside [0, %d)", i,
                               q->prompt_ids[i], e->model->cfg.vocab_size);
        di_token_vec_append(ids, q->prompt_ids, (size_t)q->n_prompt_ids);
        return DI_OK;
    }
    if (!e->tok)
        return di_errf(err, DI_EINVAL, "request: this model directory has no tokenizer.json; use prompt_ids");
    if (q->prompt) return di_tokenizer_encode(e->tok, q->prompt, strlen(q->prompt), false, ids, err);
    return di_prompt_render_request(e->tok, q->chat_json, strlen(q->chat_json), ids, err);
}

static di_status check_request(const di_engine *e, const di_request *q, int64_t n_prompt, di_err *err) {
    if (n_prompt == 0) return di_errf(err, DI_EINVAL, "request: empty prompt");
    if (q->max_tokens < 0) return di_errf(err, DI_EINVAL, "request: max_tokens must be >= 0");
    const int64_t gen = q->max_tokens ? q->max_tokens : 16;
    if (n_prompt + gen > e->model->cfg.max_position_embeddings)
        return di_errf(err, DI_ERANGE, "request: prompt of %lld tokens + max_tokens %lld exceeds the model's "
                       "context of %d tokens", (long long)n_prompt, (long long)gen,
                       e->model->cfg.max_position_embeddings);
    if (n_prompt + gen > e->max_prompt_tokens)
        return di_errf(err, DI_ENOMEM, "request: prompt of %lld tokens + max_tokens %lld needs more KV memory "
                       "than the whole budget holds (%lld tokens)", (long long)n_prompt, (long long)gen,
                       (long long)e->max_prompt_tokens);
    for (int i = 0; i < q->n_stop_token_ids; i++)
        if (q->stop_token_ids[i] < 0 || q->stop_token_ids[i] >= e->model->cfg.vocab_size)
            return di_errf(err, DI_ERANGE, "request: stop_token_ids[%d] = %d out of range", i, q->stop_token_ids[i]);
    return di_sampling_params_validate(&q->sampling, e->model->cfg.vocab_size, err);
}

static uint64_t mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void copy_request(di_engine *e, engine_req *r, const di_request *q) {
    r->max_tokens = q->max_tokens ? q->max_tokens : 16;
    r->sampling = q->sampling;
    if (!q->has_seed) r->sampling.seed = mix64(e->opt.seed ^ mix64(r->id));
    if (q->sampling.n_logit_bias > 0) {
        r->logit_bias = di_xmalloc(sizeof(di_logit_bias) * (size_t)q->sampling.n_logit_bias);
        memcpy(r->logit_bias, q->sampling.logit_bias, sizeof(di_logit_bias) * (size_t)q->sampling.n_logit_bias);
    }
    r->sampling.logit_bias = r->logit_bias;
    r->n_stop = q->n_stop;
    r->stop = di_xcalloc((size_t)(q->n_stop ? q->n_stop : 1), sizeof(char *));
    for (int i = 0; i < q->n_stop; i++) r->stop[i] = di_xstrdup(q->stop[i]);
    r->n_stop_ids = q->n_stop_token_ids;
    r->stop_ids = di_xmalloc(sizeof(int32_t) * (size_t)(q->n_stop_token_ids ? q->n_stop_token_ids : 1));
    if (q->n_stop_token_ids > 0) memcpy(r->stop_ids, q->stop_token_ids, sizeof(int32_t) * (size_t)q->n_stop_token_ids);
    r->ignore_eos = q->ignore_eos;
    if (e->tok) {
        di_detok_init(&r->detok, e->tok, true);
        r->has_detok = true;
    }
}

di_status di_engine_add_request(di_engine *e, const di_request *q, uint64_t *id_out, char *errbuf, size_t errcap) {
    di_err err = {0};
    di_token_vec ids = {0};
    di_status st = request_prompt(e, q, &ids, &err);
    if (!st) st = check_request(e, q, (int64_t)ids.n, &err);
    if (st) {
        di_token_vec_free(&ids);
        return fail(errbuf, errcap, &err);
    }
    engine_req *r = di_xcalloc(1, sizeof *r);
    r->id = e->next_id++;
    r->n_prompt = r->n_tokens = (int64_t)ids.n;
    r->cap_tokens = (int64_t)ids.n + 16;
    r->tokens = di_xmalloc(sizeof(int32_t) * (size_t)r->cap_tokens);
    memcpy(r->tokens, ids.ids, sizeof(int32_t) * ids.n);
    di_token_vec_free(&ids);
    copy_request(e, r, q);
    if (di_engine_constraint_init(e, r, q, &err)) {
        req_free(r);
        return fail(errbuf, errcap, &err);
    }
    if (e->n_reqs == e->cap_reqs) {
        e->cap_reqs = e->cap_reqs ? e->cap_reqs * 2 : 64;
        e->reqs = di_xrealloc(e->reqs, sizeof(engine_req *) * (size_t)e->cap_reqs);
    }
    e->reqs[e->n_reqs++] = r;
    if (id_out) *id_out = r->id;
    return DI_OK;
}

static engine_req *find_req(const di_engine *e, uint64_t id) {
    for (int i = 0; i < e->n_reqs; i++)
        if (e->reqs[i]->id == id) return e->reqs[i];
    return NULL;
}

void di_engine_finish_req(di_engine *e, engine_req *r, di_finish_reason why, const char *error) {
    r->phase = REQ_FINISHED;
    r->finish = why;
    if (error) r->error = di_xstrdup(error);
    di_seq_state_free(r->state);
    r->state = NULL;
    if (error && e->cb) {
        di_token_event ev = {.request_id = r->id, .token_id = -1, .text = "", .finish = why};
        e->cb(e->cb_user, &ev);
    }
}

void di_engine_preempt(di_engine *e, engine_req *r) {
    di_seq_state_free(r->state);
    r->state = NULL;
    r->n_computed = 0;
    r->phase = REQ_WAITING;
    e->stats.preemptions++;
}

di_status di_engine_cancel(di_engine *e, uint64_t id) {
    engine_req *r = find_req(e, id);
    if (!r) return DI_EINVAL;
    if (r->phase != REQ_FINISHED) di_engine_finish_req(e, r, DI_FINISH_CANCELLED, NULL);
    return DI_OK;
}

di_status di_engine_step(di_engine *e, int *active, char *errbuf, size_t errcap) {
    di_err err = {0};
    step_plan plan;
    double t0 = di_seconds_now();
    di_engine_plan(e, &plan);
    e->stats.plan_seconds += di_seconds_now() - t0;
    di_status st = di_engine_execute(e, &plan, &err);
    if (plan.n) e->stats.steps++;
    di_step_plan_free(&plan);
    int n_active = 0;
    for (int i = 0; i < e->n_reqs; i++) n_active += e->reqs[i]->phase != REQ_FINISHED;
    if (active) *active = n_active;
    if (st) return fail(errbuf, errcap, &err);
    return DI_OK;
}

di_status di_engine_run(di_engine *e, char *errbuf, size_t errcap) {
    int active = 1;
    while (active > 0) {
        di_status st = di_engine_step(e, &active, errbuf, errcap);
        if (st) return st;
    }
    return DI_OK;
}

di_status di_engine_result(const di_engine *e, uint64_t id, di_result *out) {
    const engine_req *r = find_req(e, id);
    if (!r) return DI_EINVAL;
    *out = (di_result){.request_id = r->id, .finish = r->finish, .token_ids = r->tokens + r->n_prompt,
                       .n_tokens = (int)(r->n_tokens - r->n_prompt), .text = r->has_detok ? (r->text ? r->text : "") : NULL,
                       .text_len = r->text_len, .prompt_tokens = (int)r->n_prompt, .logprobs = r->logprobs,
                       .top_logprobs = r->top, .n_top = r->sampling.logprobs, .error = r->error};
    return DI_OK;
}

void di_engine_release(di_engine *e, uint64_t id) {
    for (int i = 0; i < e->n_reqs; i++) {
        if (e->reqs[i]->id != id) continue;
        req_free(e->reqs[i]);
        memmove(e->reqs + i, e->reqs + i + 1, sizeof(engine_req *) * (size_t)(e->n_reqs - i - 1));
        e->n_reqs--;
        return;
    }
}

void di_engine_get_stats(const di_engine *e, di_engine_stats *out) {
    *out = e->stats;
    out->kv_bytes_in_use = di_engine_kv_bytes_in_use(e);
    const di_config *c = &e->model->cfg;
    double per_token = 0;
    for (int i = 0; i < c->n_kv_sources; i++)
        per_token += (double)di_kv_entry_floats(e->model) * sizeof(float) / c->compress_ratios[c->kv_source_layer_ids[i]];
    out->kv_bytes_per_token = per_token;
    out->running = out->waiting = out->finished = 0;
    for (int i = 0; i < e->n_reqs; i++) {
        out->running += e->reqs[i]->phase == REQ_RUNNING;
        out->waiting += e->reqs[i]->phase == REQ_WAITING;
        out->finished += e->reqs[i]->phase == REQ_FINISHED;
    }
}

int64_t di_engine_model_bytes(const di_engine *e) {
    int64_t total = 0;
    for (size_t i = 0; i < di_checkpoint_count(e->model->ck); i++) total += (int64_t)di_checkpoint_at(e->model->ck, i)->nbytes;
    return total;
}
