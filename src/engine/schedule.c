/* Planning one engine step (the CPU half of the async step loop: on the GPU this runs while the
 * previous step executes).
 *
 * Policy: running requests first, oldest admitted first, each taking its remaining tokens (one
 * decode token, or the next chunk of its prompt, at most max_prefill_chunk) while the step's token
 * budget lasts; then waiting requests are admitted in arrival order (a preempted request keeps its
 * place) while the budget, max_num_seqs and memory allow. Memory counts both kinds of state: the
 * fixed part of every running sequence (SWA rings, pair state) and the paged compressed entries
 * the planned tokens will need. When the planned growth does not fit, the newest admitted request
 * is preempted: its state is freed and it is recomputed from its tokens later, with the same
 * result. */
#include <stdlib.h>

#include "engine/engine_internal.h"

void di_step_plan_free(step_plan *p) {
    free(p->req);
    free(p->n_rows);
    free(p->samples);
    *p = (step_plan){0};
}

static void plan_add(step_plan *p, engine_req *r, int n, bool samples) {
    if (p->n == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 16;
        p->req = di_xrealloc(p->req, sizeof(engine_req *) * (size_t)p->cap);
        p->n_rows = di_xrealloc(p->n_rows, sizeof(int) * (size_t)p->cap);
        p->samples = di_xrealloc(p->samples, sizeof(bool) * (size_t)p->cap);
    }
    p->req[p->n] = r;
    p->n_rows[p->n] = n;
    p->samples[p->n] = samples;
    p->n++;
    p->total_rows += n;
}

/* Bytes a running request will hold once its state covers n_tokens tokens. */
static int64_t req_bytes(const di_engine *e, const engine_req *r, int64_t n_tokens) {
    int64_t blocks = r->state ? di_seq_state_blocks_needed(r->state, n_tokens) : 0;
    return e->seq_fixed_bytes + blocks * (int64_t)di_kv_pool_block_bytes(&e->pool);
}

int64_t di_engine_kv_bytes_in_use(const di_engine *e) {
    int64_t total = 0;
    for (int i = 0; i < e->n_reqs; i++)
        if (e->reqs[i]->phase == REQ_RUNNING) total += req_bytes(e, e->reqs[i], e->reqs[i]->n_computed);
    return total;
}

/* Memory after the plan: every running request at its planned length. */
static int64_t planned_bytes(const di_engine *e, const step_plan *p) {
    int64_t total = 0;
    for (int i = 0; i < e->n_reqs; i++) {
        const engine_req *r = e->reqs[i];
        if (r->phase != REQ_RUNNING) continue;
        int64_t n = r->n_computed;
        for (int j = 0; j < p->n; j++)
            if (p->req[j] == r) n += p->n_rows[j];
        total += req_bytes(e, r, n);
    }
    return total;
}

static engine_req *newest_running(const di_engine *e) {
    engine_req *best = NULL;
    for (int i = 0; i < e->n_reqs; i++) {
        engine_req *r = e->reqs[i];
        if (r->phase == REQ_RUNNING && (!best || r->admit_order > best->admit_order)) best = r;
    }
    return best;
}

static void plan_remove(step_plan *p, const engine_req *r) {
    for (int j = 0; j < p->n; j++) {
        if (p->req[j] != r) continue;
        p->total_rows -= p->n_rows[j];
        for (int k = j + 1; k < p->n; k++) {
            p->req[k - 1] = p->req[k];
            p->n_rows[k - 1] = p->n_rows[k];
            p->samples[k - 1] = p->samples[k];
        }
        p->n--;
        return;
    }
}

static int cmp_admit(const void *a, const void *b) {
    const engine_req *x = *(engine_req *const *)a, *y = *(engine_req *const *)b;
    return (x->admit_order > y->admit_order) - (x->admit_order < y->admit_order);
}

static int schedule_running(di_engine *e, step_plan *plan, int budget) {
    engine_req **run = malloc(sizeof(engine_req *) * (size_t)(e->n_reqs ? e->n_reqs : 1));
    int n_run = 0;
    for (int i = 0; i < e->n_reqs; i++)
        if (e->reqs[i]->phase == REQ_RUNNING) run[n_run++] = e->reqs[i];
    qsort(run, (size_t)n_run, sizeof *run, cmp_admit);
    for (int i = 0; i < n_run && budget > 0; i++) {
        engine_req *r = run[i];
        int64_t left = r->n_tokens - r->n_computed;
        int n = (int)(left < e->opt.max_prefill_chunk ? left : e->opt.max_prefill_chunk);
        if (n > budget) n = budget;
        if (n <= 0) continue;
        plan_add(plan, r, n, r->n_computed + n == r->n_tokens);
        budget -= n;
    }
    free(run);
    return budget;
}

static void admit_waiting(di_engine *e, step_plan *plan, int budget) {
    int running = 0;
    for (int i = 0; i < e->n_reqs; i++) running += e->reqs[i]->phase == REQ_RUNNING;
    for (int i = 0; i < e->n_reqs && budget > 0 && running < e->opt.max_num_seqs; i++) {
        engine_req *r = e->reqs[i]; /* arrival order */
        if (r->phase != REQ_WAITING) continue;
        int64_t left = r->n_tokens - r->n_computed;
        int n = (int)(left < e->opt.max_prefill_chunk ? left : e->opt.max_prefill_chunk);
        if (n > budget) n = budget;
        r->state = di_seq_state_new_in(e->model, &e->pool);
        r->phase = REQ_RUNNING;
        r->admit_order = ++e->admit_counter;
        plan_add(plan, r, n, r->n_computed + n == r->n_tokens);
        if (planned_bytes(e, plan) > e->opt.kv_budget_bytes) { /* does not fit now: wait (FCFS) */
            plan_remove(plan, r);
            di_seq_state_free(r->state);
            r->state = NULL;
            r->phase = REQ_WAITING;
            break;
        }
        budget -= n;
        running++;
    }
}

void di_engine_plan(di_engine *e, step_plan *plan) {
    *plan = (step_plan){0};
    int budget = schedule_running(e, plan, e->opt.max_batch_tokens);
    /* growth of the running requests must fit: preempt the newest until it does */
    while (plan->n > 0 && planned_bytes(e, plan) > e->opt.kv_budget_bytes) {
        engine_req *victim = newest_running(e);
        int running = 0;
        for (int i = 0; i < e->n_reqs; i++) running += e->reqs[i]->phase == REQ_RUNNING;
        if (running <= 1) { /* alone and still too big: add_request's bound makes this unreachable */
            plan_remove(plan, victim);
            di_engine_finish_req(e, victim, DI_FINISH_ERROR, "KV budget too small for this request");
            break;
        }
        for (int j = 0; j < plan->n; j++)
            if (plan->req[j] == victim) budget += plan->n_rows[j];
        plan_remove(plan, victim);
        di_engine_preempt(e, victim);
    }
    admit_waiting(e, plan, budget);
}
