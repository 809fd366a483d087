/* Running a planned step (the backend half of the step loop): one forward over the planned rows of
 * every scheduled request, then sampling, stop checks, streaming and commit for the requests whose
 * prompt is complete. The forward is begun, the structured-output masks of the rows to be sampled
 * are computed while a device runs it (they depend on committed tokens only), then it is ended: a
 * device applies them then (with the row's bias and penalties) and samples the row where its
 * logits are, unless the request wants logprobs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "engine/engine_internal.h"
#include "forward/device.h"

static void text_append(engine_req *r, const char *s, size_t n) {
    if (r->text_len + n + 1 > r->text_cap) {
        r->text_cap = (r->text_len + n + 1) * 2;
        r->text = di_xrealloc(r->text, r->text_cap);
    }
    memcpy(r->text + r->text_len, s, n);
    r->text_len += n;
    r->text[r->text_len] = 0;
}

/* Finds the earliest stop string ending in the text added since `from`; returns its start or -1. */
static int64_t find_stop(const engine_req *r, size_t from) {
    int64_t best = -1;
    for (int i = 0; i < r->n_stop; i++) {
        size_t n = strlen(r->stop[i]);
        if (!n || r->text_len < n) continue;
        size_t start = from >= n - 1 ? from - (n - 1) : 0;
        for (size_t at = start; at + n <= r->text_len; at++)
            if (!memcmp(r->text + at, r->stop[i], n)) {
                if (best < 0 || (int64_t)at < best) best = (int64_t)at;
                break;
            }
    }
    return best;
}

static size_t longest_stop(const engine_req *r) {
    size_t m = 0;
    for (int i = 0; i < r->n_stop; i++)
        if (strlen(r->stop[i]) > m) m = strlen(r->stop[i]);
    return m;
}

/* Appends a sampled token, decides whether the request stops, streams what became final. */
static void commit_token(di_engine *e, engine_req *r, const di_sample_result *s) {
    const int64_t gen_index = r->n_tokens - r->n_prompt;
    if (r->n_tokens == r->cap_tokens) {
        r->cap_tokens *= 2;
        r->tokens = di_xrealloc(r->tokens, sizeof(int32_t) * (size_t)r->cap_tokens);
    }
    r->tokens[r->n_tokens++] = s->token_id;
    if (r->sampling.logprobs > 0) {
        r->logprobs = di_xrealloc(r->logprobs, sizeof(float) * (size_t)(gen_index + 1));
        r->logprobs[gen_index] = s->logprob;
        r->top = di_xrealloc(r->top, sizeof(di_token_logprob) * (size_t)(gen_index + 1) * r->sampling.logprobs);
        memcpy(r->top + gen_index * r->sampling.logprobs, s->top, sizeof(di_token_logprob) * (size_t)s->n_top);
        for (int k = s->n_top; k < r->sampling.logprobs; k++)
            r->top[gen_index * r->sampling.logprobs + k] = (di_token_logprob){-1, -INFINITY};
    }
    di_finish_reason finish = DI_FINISH_NONE;
    bool stop_token = (!r->ignore_eos && s->token_id == e->model->cfg.eos_token_id);
    for (int i = 0; i < r->n_stop_ids; i++) stop_token |= s->token_id == r->stop_ids[i];
    size_t emitted_before = r->text_len; /* text already final before this token */
    if (r->has_detok && !stop_token) {
        const char *t;
        size_t n;
        di_err err = {0};
        if (di_detok_push(&r->detok, s->token_id, &t, &n, &err) == DI_OK) text_append(r, t, n);
    }
    if (stop_token) finish = DI_FINISH_STOP;
    if (r->n_stop && !finish) {
        int64_t at = find_stop(r, emitted_before);
        if (at >= 0) {
            r->text_len = (size_t)at;
            r->text[at] = 0;
            finish = DI_FINISH_STOP;
        }
    }
    if (!finish && gen_index + 1 >= r->max_tokens) finish = DI_FINISH_LENGTH;
    if (finish && r->has_detok && finish != DI_FINISH_STOP) {
        const char *t;
        size_t n;
        di_detok_finish(&r->detok, &t, &n);
        text_append(r, t, n);
    }
    if (e->cb) {
        /* hold back text that could still become the start of a stop string */
        size_t hold = finish ? 0 : (longest_stop(r) ? longest_stop(r) - 1 : 0);
        size_t final_len = r->text_len > hold ? r->text_len - hold : 0;
        size_t from = r->streamed < final_len ? r->streamed : final_len;
        di_token_event ev = {.request_id = r->id, .token_id = s->token_id, .text = r->text ? r->text + from : "",
                             .text_len = final_len - from, .logprob = s->logprob, .top = s->top,
                             .n_top = s->n_top, .finish = finish};
        r->streamed = final_len;
        e->cb(e->cb_user, &ev);
    }
    if (finish) di_engine_finish_req(e, r, finish, NULL);
}

/* A request's tokens as the sampler's history: the prompt, then what it has generated. */
static di_sample_history request_history(const engine_req *r) {
    return (di_sample_history){r->tokens, r->n_prompt, r->tokens + r->n_prompt, r->n_tokens - r->n_prompt};
}

/* What the forward hands back for a request's sampled row: its greedy token alone when that is all
 * the request needs (no constraint mask, bias, penalty or logprobs); on a device the token drawn
 * there too when the request samples with no such extras, and otherwise the sampler's whole result
 * taken there (after its bias, mask and penalties, with its logprobs) -- the host's sampler would
 * give the same. The CPU backend leaves these rows to the host's sampler threads (the logits), as
 * a device does with host_sampling. */
static uint8_t head_want(const di_engine *e, const engine_req *r) {
    const bool device = e->model->dev_backend != NULL;
    if (device && e->opt.host_sampling) return DI_WANT_LOGITS;
    if (!r->matcher && di_sampling_is_plain_greedy(&r->sampling)) return DI_WANT_TOKEN;
    if (!r->matcher && device && di_sampling_is_plain_sampled(&r->sampling)) return DI_WANT_SAMPLE;
    return device ? DI_WANT_EDITED : DI_WANT_LOGITS;
}

/* The sampled rows whose logits came back to the host (DI_WANT_LOGITS), in plan order: sampled on
 * the host threads at once (each row's draw is a function of the row alone; the requests are
 * committed in plan order afterwards). */
typedef struct host_samples {
    int n;
    di_sample_row *rows;       /* [n] */
    di_sample_history *hist;   /* [n] */
    di_sample_result *res;     /* [n] */
    di_status *status;         /* [n] */
    di_err *errs;              /* [n] */
} host_samples;

static void sample_on_host(di_engine *e, const step_plan *plan, const uint8_t *want, const float *logits,
                           host_samples *hs) {
    const int64_t V = e->model->cfg.vocab_size;
    for (int i = 0, row_end = 0; i < plan->n; i++) {
        row_end += plan->n_rows[i];
        hs->n += plan->samples[i] && want[row_end - 1] == DI_WANT_LOGITS;
    }
    hs->rows = calloc((size_t)hs->n + 1, sizeof *hs->rows);
    hs->hist = calloc((size_t)hs->n + 1, sizeof *hs->hist);
    hs->res = calloc((size_t)hs->n + 1, sizeof *hs->res);
    hs->status = calloc((size_t)hs->n + 1, sizeof *hs->status);
    hs->errs = calloc((size_t)hs->n + 1, sizeof *hs->errs);
    for (int i = 0, row_end = 0, j = 0; i < plan->n; i++) {
        engine_req *r = plan->req[i];
        row_end += plan->n_rows[i];
        if (!plan->samples[i] || want[row_end - 1] != DI_WANT_LOGITS) continue;
        hs->hist[j] = request_history(r);
        hs->rows[j] = (di_sample_row){.logits = logits + (size_t)j * V, .params = &r->sampling,
                                      .history = &hs->hist[j], .allowed_mask = di_engine_constraint_current(r),
                                      .position = (uint64_t)r->n_tokens};
        j++;
    }
    if (!hs->n) return;
    const double t0 = di_seconds_now();
    di_sampler_pool_sample(e->samplers, hs->rows, hs->n, hs->res, hs->status, hs->errs);
    e->stats.sample_seconds += di_seconds_now() - t0;
}

static void host_samples_free(host_samples *hs) {
    free(hs->rows);
    free(hs->hist);
    free(hs->res);
    free(hs->status);
    free(hs->errs);
}

di_status di_engine_execute(di_engine *e, const step_plan *plan, di_err *err) {
    if (plan->n == 0) return DI_OK;
    const int64_t V = e->model->cfg.vocab_size;
    if (plan->n > e->logits_rows) {
        /* once, for every running sequence (a step samples at most one row a request): page-locking
         * costs far more than a step, and a kept CUDA graph's copy into a freed buffer could not be
         * updated to a new one */
        const int rows = plan->n > e->opt.max_num_seqs ? plan->n : e->opt.max_num_seqs;
        di_model_result_free(e->model, e->logits);
        di_model_result_free(e->model, e->head_tokens);
        di_model_result_free(e->model, e->head_logprobs);
        e->logits = di_model_result_alloc(e->model, sizeof(float) * (size_t)rows * (size_t)V);
        e->head_tokens = di_model_result_alloc(e->model, sizeof(int32_t) * (size_t)rows);
        e->head_logprobs = di_model_result_alloc(e->model, sizeof(di_sample_result) * (size_t)rows);
        e->logits_rows = e->logits && e->head_tokens && e->head_logprobs ? rows : 0;
        if (!e->logits_rows) return di_errf(err, DI_ENOMEM, "engine: no memory for %d rows of logits", rows);
    }
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)plan->total_rows);
    di_seq_state **seqs = malloc(sizeof(di_seq_state *) * (size_t)plan->n);
    uint8_t *want = calloc((size_t)plan->total_rows, 1);
    di_plain_sampling *row_sampling = calloc((size_t)plan->total_rows, sizeof *row_sampling); /* [total_rows] */
    di_sample_row *sample_rows = calloc((size_t)plan->total_rows, sizeof *sample_rows);        /* [total_rows] */
    di_sample_history *hist = calloc((size_t)plan->n, sizeof *hist);                           /* [plan->n] */
    int row = 0, token_rows = 0;
    int64_t prefill_rows = 0, decode_rows = 0;
    for (int i = 0; i < plan->n; i++) {
        engine_req *r = plan->req[i];
        memcpy(tokens + row, r->tokens + r->n_computed, sizeof(int32_t) * (size_t)plan->n_rows[i]);
        seqs[i] = r->state;
        row += plan->n_rows[i];
        if (plan->samples[i]) { /* unless the row needs its logits on the host, only its token leaves the device */
            want[row - 1] = head_want(e, r);
            token_rows += want[row - 1] != DI_WANT_LOGITS;
            if (want[row - 1] == DI_WANT_SAMPLE) row_sampling[row - 1] = di_plain_sampling_of(&r->sampling, (uint64_t)r->n_tokens);
            if (want[row - 1] == DI_WANT_EDITED) { /* the mask's words are filled while the step runs */
                hist[i] = request_history(r);
                sample_rows[row - 1] = (di_sample_row){.params = &r->sampling, .history = &hist[i],
                                                       .allowed_mask = di_engine_constraint_current(r),
                                                       .position = (uint64_t)r->n_tokens};
            }
        }
        if (plan->n_rows[i] == 1 && r->n_computed >= r->n_prompt) decode_rows++; /* generating */
        else prefill_rows += plan->n_rows[i];                                    /* prompt or recompute */
    }
    float *logits = e->logits; /* the sampled rows that need logits in plan order, [<= plan->n, V] */
    /* head tokens only where a row wants its token alone (else the host sampler takes the argmax) */
    di_batch b = {.n_rows = plan->total_rows, .tokens = tokens, .n_seqs = plan->n, .seqs = seqs,
                  .seq_n_rows = plan->n_rows, .logits = logits, .want_logits = want,
                  .head_tokens = token_rows ? e->head_tokens : NULL,
                  .head_logprobs = token_rows ? e->head_logprobs : NULL, .row_sampling = row_sampling,
                  .sample_rows = sample_rows};
    double t0 = di_seconds_now(), mask_s = 0.0;
    di_status st = di_forward_begin(e->model, &b, err);
    if (!st) { /* while a device computes the step: the constraint masks of its sampled rows */
        const double tm = di_seconds_now();
        for (int i = 0; i < plan->n; i++)
            if (plan->samples[i]) di_engine_constraint_mask(e, plan->req[i]);
        mask_s = di_seconds_now() - tm;
        e->stats.mask_seconds += mask_s;
        st = di_forward_end(e->model, &b, err);
    }
    const double dt = di_seconds_now() - t0 - mask_s; /* the forward's exposed time */
    if (prefill_rows >= decode_rows) e->stats.prefill_seconds += dt;
    else e->stats.decode_seconds += dt;
    e->stats.prefill_tokens += prefill_rows;
    e->stats.decode_tokens += decode_rows;
    host_samples hs = {0};
    if (!st) sample_on_host(e, plan, want, logits, &hs);
    for (int i = 0, row_end = 0, sampled = 0, host = 0; i < plan->n && !st; i++) {
        engine_req *r = plan->req[i];
        r->n_computed += plan->n_rows[i];
        row_end += plan->n_rows[i];
        if (!plan->samples[i]) continue;
        di_sample_result token = {.token_id = -1};
        const int k = sampled++; /* the row's place among the head's rows (e->head_tokens) */
        if (want[row_end - 1] != DI_WANT_LOGITS) { /* the sampler's token, taken on the device */
            if (r->sampling.logprobs > 0) token = e->head_logprobs[k]; /* and its logprobs */
            token.token_id = e->head_tokens[k];
            if (token.token_id < 0) {
                di_err serr = {0};
                di_sample_no_token_error((uint64_t)r->n_tokens, &serr);
                di_engine_finish_req(e, r, DI_FINISH_ERROR, serr.msg);
                continue;
            }
        } else {
            const int j = host++;
            if (hs.status[j]) {
                di_engine_finish_req(e, r, DI_FINISH_ERROR, hs.errs[j].msg);
                continue;
            }
            token = hs.res[j];
        }
        if (!di_engine_constraint_commit(r, token.token_id)) {
            di_engine_finish_req(e, r, DI_FINISH_ERROR, "structured output: sampled token outside the constraint");
            continue;
        }
        commit_token(e, r, &token);
    }
    host_samples_free(&hs);
    free(tokens);
    free(seqs);
    free(want);
    free(row_sampling);
    free(sample_rows);
    free(hist);
    return st;
}
