/* `deepinfer bench` on a device backend (issue 5): the whole V4.1-Flash forward pass (all 40
 * layers, real shapes) on one GPU as an EP-N rank proxy, without a checkpoint.
 *
 * Method. The released config (bundled; --model DIR uses DIR's config.json) is written as a
 * sparse synthetic checkpoint into a temporary directory and loaded (shapes only: the data are
 * holes); the device backend then generates every weight on the GPU. As one rank of an EP-N
 * deployment (--ep-ranks N, default 8) the GPU holds 384/N experts per layer and runs attention for
 * its B local requests; per MoE layer it processes the 6*B token-expert assignments that uniform
 * routing sends to a rank (routing is made uniform over the resident experts; the all-to-all
 * communication is not part of the measurement). Engram tables keep their row size with fewer
 * rows. Decode: B sequences whose state is fast-forwarded to the context length (random KV
 * entries, index keys and rings in our layout) take one token each per step; the median of a few
 * steps is reported. Prefill: one sequence of N new tokens in one forward call.
 *
 * Every row states the bytes the step must move at least (the weights it touches once, the state
 * it reads, in our formats) and its FLOPs (2 per multiply-add of the matrices, attention and
 * indexer dot products), and the % of the roofline max(bytes / copy bandwidth, FLOPs / FP8 rate)
 * with both ceilings measured at the start of the same run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "cli/commands.h"
#include "forward/device.h"
#include "base/file.h"
#include "model/demo_model.h"
#include "model/synthetic_checkpoint.h"

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static double wbytes(const di_weight *w) {
    if (!w->rows) return 0;
    double n = (double)w->rows * (double)w->cols;
    switch (w->dtype) {
    case DI_DT_F8_E4M3: return n + (double)((w->rows + 31) / 32) * ((w->cols + 31) / 32);
    case DI_DT_I8: return n / 2 + (double)w->rows * (w->cols / 32);
    case DI_DT_BF16: return 2 * n;
    default: return 4 * n;
    }
}
static double wmacs(const di_weight *w) { return (double)w->rows * (double)w->cols; }

/* What one forward call must move and compute, in our formats. */
typedef struct cost {
    double bytes, flops;
} cost;

/* rows: new tokens (B decode rows, or S prefill rows of one sequence); ctx: tokens before them
 * (per sequence); seqs: sequences; experts_touched: distinct resident experts the 6*rows
 * assignments reach per layer. */
static cost step_cost(const di_model *m, int rows, int seqs, int64_t ctx, int resident) {
    const di_config *c = &m->cfg;
    cost k = {0, 0};
    const double R = rows;
    const int64_t per_seq = rows / seqs;
    const double f = 4.0; /* bytes per state float */
    for (int l = 0; l < m->n_layers; l++) {
        const di_layer *L = &m->layers[l];
        const di_attn_weights *a = &L->attn;
        const di_weight *dense[] = {&a->wq_a, &a->wq_b, &a->wkv, &a->wo_a, &a->wo_b, &a->cmp_wkv, &a->cmp_wgate,
                                    &a->idx_wq_b, &a->idx_weights_proj, &L->ffn.gate, &L->ffn.sh_w1,
                                    &L->ffn.sh_w2, &L->ffn.sh_w3, &L->engram.wkv};
        for (size_t i = 0; i < sizeof dense / sizeof dense[0]; i++) {
            k.bytes += wbytes(dense[i]);
            k.flops += 2 * R * wmacs(dense[i]);
        }
        /* idx_wk and the compressor run once per compressed entry (~rows / ratio) */
        if (L->is_kv_source) {
            k.bytes += wbytes(&a->idx_wk);
            k.flops += 2 * (R / (L->ratio ? L->ratio : 1)) * wmacs(&a->idx_wk);
        }
        k.bytes += 2.0 * 24 * c->hc_mult * c->hidden_size * 4; /* hc fns */
        int touched = 6 * rows < resident ? 6 * rows : resident;
        const di_ffn_weights *fw = &L->ffn;
        k.bytes += touched * (wbytes(&fw->w1[0]) + wbytes(&fw->w2[0]) + wbytes(&fw->w3[0]));
        k.flops += 2 * R * fw->top_k * (wmacs(&fw->w1[0]) + wmacs(&fw->w2[0]) + wmacs(&fw->w3[0]));
        if (L->engram_slot >= 0) k.bytes += R * m->engram.n_cols * c->engram_head_dim;
        /* attention: own window (our fp32 ring rows), compressed selections (FP4 records) */
        const int64_t P = L->ratio ? (ctx + per_seq) / L->ratio : 0;
        const double sel = L->ratio ? (double)(P < c->index_topk ? P : c->index_topk) : 0;
        const double win = c->sliding_window;
        const double list = win + sel;
        k.bytes += seqs * (win * c->head_dim * f) + R * sel * (c->head_dim / 2 + c->head_dim / 16);
        k.flops += 2.0 * 2.0 * R * c->num_attention_heads * c->head_dim * list;
        if (L->is_index_source) {
            k.bytes += seqs * (double)P * (c->index_head_dim / 2 + c->index_head_dim / 32); /* MXFP4 key records */
            k.flops += 2.0 * R * c->index_n_heads * c->index_head_dim * (double)P;
        }
    }
    k.bytes += wbytes(&m->head) + R * c->hidden_size * 2.0; /* head + embedding rows */
    k.flops += 2.0 * seqs * wmacs(&m->head);                 /* logits of the last row per sequence */
    return k;
}

/* The Engram token map needs the tokenizer: the embedded V4.1 one (the demo model's). */
static di_status write_tokenizer(const char *dir, di_err *err) {
    size_t n = 0;
    const unsigned char *data = di_demo_asset_tokenizer_json(&n);
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f) return di_errf(err, DI_EIO, "%s: cannot create the tokenizer file", path);
    const bool ok = fwrite(data, 1, n, f) == n;
    if (fclose(f) != 0 || !ok) return di_errf(err, DI_EIO, "%s: cannot write the tokenizer", path);
    return DI_OK;
}

typedef struct ceil3 {
    double hbm, bf16, fp8; /* GB/s, TFLOP/s, TFLOP/s */
} ceil3;

static void print_row(const char *what, int B, int64_t ctx, double ms, double tok_s, cost k, const ceil3 *cl) {
    const double t_mem = k.bytes / (cl->hbm * 1e9), t_fp8 = k.flops / (cl->fp8 * 1e12);
    const double roof = t_mem > t_fp8 ? t_mem : t_fp8;
    printf("| %s | %d | %lld | %.2f | %.1f | %.2f | %.1f | %.3f | %s | %.2f%% |\n", what, B, (long long)ctx, ms,
           tok_s, k.bytes / 1e9, k.flops / 1e12, roof * 1e3, t_mem > t_fp8 ? "HBM" : "FP8",
           100.0 * roof / (ms / 1e3));
    fflush(stdout);
}

/* B sequences fast-forwarded to ctx tokens: blocks reserved for ctx + extra, entries present,
 * contents random. */
static di_status make_states(const di_model *m, di_kv_pool *pool, int B, int64_t ctx, int extra,
                             di_seq_state **st, di_err *err) {
    const di_device_backend *be = m->dev_backend;
    for (int b = 0; b < B; b++) {
        st[b] = di_seq_state_new_in(m, pool);
        di_status s = di_seq_state_reserve(st[b], ctx + extra, err);
        if (s) return s;
        st[b]->n_tokens = ctx;
        for (int k = 0; k < st[b]->n_kv; k++) {
            st[b]->kv[k].n = ctx / st[b]->kv[k].ratio;
            st[b]->kv[k].has_pending = st[b]->kv[k].ratio == 2 && ctx % 2 == 1;
        }
        for (int h = 0; h < 8; h++) st[b]->engram_hist[h] = (int32_t)((b * 131 + h * 977) % 99000);
        st[b]->n_hist = ctx < 8 ? (int)ctx : 8;
        for (int l = 0; l < st[b]->n_layers; l++)
            be->fill_random(st[b]->swa[l], sizeof(float) * (size_t)m->cfg.sliding_window * m->cfg.head_dim, (uint64_t)b * 1000 + l);
    }
    if (pool->dev_base)
        be->fill_kv_pool(pool->dev_base, di_kv_pool_block_bytes(pool) * (size_t)pool->dev_cap_blocks,
                         (int)di_kv_pool_block_bytes(pool), pool->block_entries, st[0]->row_bytes, m->cfg.head_dim,
                         st[0]->key_bytes, m->cfg.index_head_dim, 7);
    return DI_OK;
}

static void free_states(di_seq_state **st, int B) {
    for (int b = 0; b < B; b++) di_seq_state_free(st[b]);
}

/* Where a call's head output goes: every sequence's token, taken on the device (a step of
 * plain-greedy requests, or with --bench-sampled of plain-sampled ones drawn there, or with
 * --bench-edited of requests with a mask, a bias and a penalty, applied and drawn there: 4 bytes a
 * sequence cross PCIe; with --bench-logprobs their raw logprobs too), or with --bench-logits every
 * sequence's logits (a step of requests the host samples: B x 517 KB). Page-locked, as the
 * engine's. One of logits and tokens is NULL. */
typedef struct bench_out {
    float *logits;   /* [DI_BENCH_MAX_BATCH, vocab] */
    int32_t *tokens; /* [DI_BENCH_MAX_BATCH] */
    bool sampled;    /* tokens drawn on the device (--bench-sampled), not greedy */
    bool edited;     /* --bench-edited: each row's edits applied there first (mask below) */
    uint32_t *mask;  /* [(vocab + 31) / 32] --bench-edited: about half the vocabulary allowed */
    int logprobs;    /* --bench-logprobs: the edited rows' listed logprobs (0 = none) */
    di_sample_result *lp; /* [DI_BENCH_MAX_BATCH] their results, when logprobs > 0 */
} bench_out;

/* --bench-edited's sampler settings: T = 1, top_p 0.95, a bias on four ids, every penalty (over
 * a 64-token history, `hist`). */
static const di_logit_bias k_bench_bias[4] = {{11, 1.0f}, {4000, -2.0f}, {70000, 0.5f}, {11, 0.25f}};
static di_sampling_params bench_edited_params(uint64_t seed) {
    di_sampling_params p;
    di_sampling_params_init(&p);
    p.top_p = 0.95f, p.seed = seed;
    p.logit_bias = k_bench_bias, p.n_logit_bias = 4;
    p.repetition_penalty = 1.1f, p.frequency_penalty = 0.2f, p.presence_penalty = 0.1f;
    return p;
}

/* One forward call over the given states (rows_per_seq each); returns seconds, or < 0 on error. */
static double timed_forward(const di_model *m, di_seq_state **st, int n_seqs, int rows_per_seq,
                            const bench_out *out, uint64_t salt, di_err *err) {
    const int R = n_seqs * rows_per_seq;
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)R);
    int *nr = malloc(sizeof(int) * (size_t)n_seqs);
    uint8_t *want = calloc((size_t)R, 1);
    di_plain_sampling *sampling = calloc((size_t)R, sizeof *sampling); /* [R] */
    di_sample_row *rows = calloc((size_t)R, sizeof *rows);               /* [R] --bench-edited */
    di_sampling_params *params = calloc((size_t)n_seqs, sizeof *params); /* [n_seqs] */
    int32_t hist[64];                                                    /* every sequence's history */
    for (int i = 0; i < 64; i++) hist[i] = 3 + (int32_t)((salt + (uint64_t)i * 7919u) % 120000);
    const di_sample_history h = {hist, 32, hist + 32, 32};
    for (int r = 0; r < R; r++) tokens[r] = 3 + (int32_t)((salt * 2654435761u + (uint64_t)r * 40503u) % 120000);
    for (int s = 0; s < n_seqs; s++) {
        const int last = (s + 1) * rows_per_seq - 1;
        const uint64_t position = (uint64_t)st[s]->n_tokens + (uint64_t)rows_per_seq;
        nr[s] = rows_per_seq;
        want[last] = out->logits   ? DI_WANT_LOGITS
                     : out->edited ? DI_WANT_EDITED
                     : out->sampled ? DI_WANT_SAMPLE : DI_WANT_TOKEN;
        sampling[last] = (di_plain_sampling){.temperature = 1.0f, .top_p = 0.95f, .seed = salt + (uint64_t)s,
                                             .position = position};
        params[s] = bench_edited_params(salt + (uint64_t)s);
        params[s].logprobs = out->logprobs;
        rows[last] = (di_sample_row){.params = &params[s], .history = &h, .allowed_mask = out->mask,
                                     .position = position};
    }
    di_batch b = {.n_rows = R, .tokens = tokens, .n_seqs = n_seqs, .seqs = st, .seq_n_rows = nr,
                  .logits = out->logits, .want_logits = want, .head_tokens = out->tokens,
                  .head_logprobs = out->lp, .row_sampling = sampling, .sample_rows = rows};
    double t0 = di_seconds_now();
    di_status s = di_forward(m, &b, err);
    double dt = di_seconds_now() - t0;
    free(tokens);
    free(nr);
    free(want);
    free(sampling);
    free(rows);
    free(params);
    return s ? -1.0 : dt;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Step timing on the device's clock (decode rows at the first context): the wall time of a step,
 * the device's span from its first to its last operation, its idle gap before the step (the
 * host's work between two steps: batch building, then the first launches) and inside the step
 * between graph pieces (the host capturing the next piece later than the device finished the
 * last). Medians. */
#define MAX_STEP_ROWS 8
typedef struct step_timing {
    double wall_ms, gpu_ms, idle_ms, wait_ms; /* medians (wait_ms < 0: no graph pieces) */
    double capture_ms, update_ms;    /* host time per step spent capturing / updating graphs (means) */
    int64_t captured, updated, instantiated, rejected; /* calls captured; graph pieces updated, ... */
} step_timing;
static struct {
    int B;
    step_timing graph, eager;
} g_step_rows[MAX_STEP_ROWS];
static int g_n_step_rows;

double di_bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    return n ? v[n / 2] : -1.0;
}

/* Two warm-up steps (graphs: the two compressor parities) and `steps` timed decode steps of B
 * sequences; returns the steps timed (< steps on error), *slow when a step exceeded budget_s / steps.
 * bracket_last: the last step inside the backend's profiler range (tools/cuda/device_profile.sh). */
static int time_decode_steps(const di_model *m, di_seq_state **st, int B, int steps, double budget_s, const bench_out *out,
                             uint64_t salt, bool bracket_last, double *wall_s, step_timing *tm, bool *slow,
                             di_err *err) {
    const di_device_backend *be = m->dev_backend;
    double span[16], idle[16], wait[16];
    int n_t = 0, n_idle = 0, n_wait = 0;
    di_graph_stats g0 = {0}, g1 = {0};
    const int n_calls = steps + 2 < 16 ? steps + 2 : 16;
    for (int i = 0; i < n_calls; i++) { /* the first two steps warm up */
        if (i == 2 && be->graph_stats) be->graph_stats(m, &g0);
        const bool bracket = bracket_last && be->profiler_range && i == n_calls - 1;
        if (bracket) be->profiler_range(true);
        double dt = timed_forward(m, st, B, 1, out, salt + (uint64_t)i, err);
        if (bracket) be->profiler_range(false);
        if (dt < 0) break;
        if (i > 1) {
            if (be->step_times) {
                di_step_times t;
                be->step_times(m, &t);
                span[n_t] = t.gpu_ms;
                if (t.idle_ms >= 0) idle[n_idle++] = t.idle_ms;
                if (t.piece_wait_ms >= 0) wait[n_wait++] = t.piece_wait_ms;
            }
            wall_s[n_t++] = dt;
        }
        if (dt * steps > budget_s) *slow = true;
    }
    if (be->graph_stats) be->graph_stats(m, &g1);
    memset(tm, 0, sizeof *tm);
    tm->wall_ms = di_bench_median(wall_s, n_t) * 1e3; /* sorts wall_s: the caller takes its median too */
    tm->gpu_ms = be->step_times ? di_bench_median(span, n_t) : -1.0;
    tm->idle_ms = di_bench_median(idle, n_idle);
    tm->wait_ms = di_bench_median(wait, n_wait);
    tm->captured = g1.captured - g0.captured;
    tm->updated = g1.updated - g0.updated;
    tm->rejected = g1.rejected - g0.rejected;
    tm->instantiated = g1.instantiated - g0.instantiated;
    if (n_t) {
        tm->capture_ms = (g1.capture_s - g0.capture_s) * 1e3 / n_t;
        tm->update_ms = (g1.update_s - g0.update_s + g1.instantiate_s - g0.instantiate_s) * 1e3 / n_t;
    }
    return n_t;
}

static void print_step_rows(void) {
    if (!g_n_step_rows) return;
    printf("\ndecode step timing on the device's clock, each forward call as CUDA graph pieces (default) and with\n"
           "every kernel launched directly (DEEPINFER_ENFORCE_EAGER=1), over the same states (medians of the\n"
           "timed steps; span = the device's first to last operation of a step; idle = device idle before\n"
           "the step, i.e. the host's batch building, graph capture and update; piece wait = device idle inside\n"
           "the step, waiting for the host's next graph piece; capture / update = host ms per step; pieces:\n"
           "graph pieces of the timed steps updated in place / instantiated / updates refused):\n\n"
           "| B | graph: wall ms | span ms | idle ms | piece wait ms | capture ms | update ms | pieces u/i/r | eager: "
           "wall ms | span ms | idle ms | graph speed-up |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < g_n_step_rows; i++) {
        const step_timing *g = &g_step_rows[i].graph, *e = &g_step_rows[i].eager;
        printf("| %d | %.2f | %.2f | %.3f | %.3f | %.2f | %.2f | %lld/%lld/%lld | %.2f | %.2f | %.3f | %.2fx |\n",
               g_step_rows[i].B, g->wall_ms, g->gpu_ms, g->idle_ms, g->wait_ms, g->capture_ms, g->update_ms,
               (long long)g->updated, (long long)g->instantiated, (long long)g->rejected, e->wall_ms, e->gpu_ms,
               e->idle_ms, e->wall_ms / g->wall_ms);
    }
}

/* Where one forward call's time goes: the stage profile (synchronising at every stage boundary, so
 * the total exceeds an unprofiled step by the lost overlap) of one more call over the same states.
 * Kept and printed after the table, which they would split. */
enum { MAX_PROFILES = 6, MAX_STAGES = 64 };
static struct {
    char what[64];
    double secs[MAX_STAGES];
} g_profiles[MAX_PROFILES];
static int g_n_profiles;
static const char *const *g_stage_names;

static void profile_call(const di_model *m, di_seq_state **st, int n_seqs, int rows_per_seq, const bench_out *out,
                         const char *what) {
    const di_device_backend *be = m->dev_backend;
    if (g_n_profiles >= MAX_PROFILES || be->n_profile_stages > MAX_STAGES) return;
    di_err err = {0};
    be->profile(true, NULL, NULL);
    const bool ok = timed_forward(m, st, n_seqs, rows_per_seq, out, 77, &err) >= 0;
    be->profile(false, &g_stage_names, g_profiles[g_n_profiles].secs);
    if (!ok) return;
    snprintf(g_profiles[g_n_profiles].what, sizeof g_profiles[0].what, "%s", what);
    g_n_profiles++;
}

static void print_profiles(const di_model *m) {
    const int n_stages = m->dev_backend->n_profile_stages;
    for (int p = 0; p < g_n_profiles; p++) {
        const double *secs = g_profiles[p].secs;
        double total = 0;
        for (int i = 0; i < n_stages; i++) total += secs[i];
        printf("\nstage profile, %s (one call, synchronised at stage boundaries): total %.2f ms\n\n",
               g_profiles[p].what, total * 1e3);
        printf("| stage | ms | share |\n|---|---|---|\n");
        for (int i = 0; i < n_stages; i++)
            if (secs[i] > 0) printf("| %s | %.2f | %.1f%% |\n", g_stage_names[i], secs[i] * 1e3, 100.0 * secs[i] / total);
    }
}

/* Prefill rows: one sequence of S new tokens in one forward call. */
static void bench_prefill(const di_model *m, const ceil3 *cl, const bench_out *out, double budget_s, double deadline,
                          int64_t max_prefill) {
    const di_device_backend *be = m->dev_backend;
    di_err err = {0};
    const int prefills[] = {512, 4096, 16384};
    int profiled = 0; /* the largest prefill that runs goes inside the profiler range */
    for (size_t pi = 0; pi < sizeof prefills / sizeof prefills[0]; pi++)
        if (prefills[pi] <= max_prefill) profiled = prefills[pi];
    for (size_t pi = 0; pi < sizeof prefills / sizeof prefills[0]; pi++) {
        const int S = prefills[pi];
        if (S > max_prefill) continue;
        if (di_seconds_now() > deadline) {
            printf("| prefill | 1 | %d new | skipped: benchmark time budget spent |||||||\n", S);
            continue;
        }
        di_kv_pool pool;
        di_kv_pool_init(&pool, 16, di_kv_entry_floats(m), 0);
        di_kv_pool_set_mem(&pool, &be->mem);
        di_seq_state *st[1] = {di_seq_state_new_in(m, &pool)};
        if (S == profiled && be->profiler_range) be->profiler_range(true);
        double dt = timed_forward(m, st, 1, S, out, 99, &err);
        if (S == profiled && be->profiler_range) be->profiler_range(false);
        if (dt >= 0 && S <= 4096) { /* where the time goes: the same prefill again, profiled */
            char what[64];
            snprintf(what, sizeof what, "prefill of %d tokens", S);
            di_seq_state_reset(st[0]);
            profile_call(m, st, 1, S, out, what);
        }
        di_seq_state_free(st[0]);
        di_kv_pool_destroy(&pool);
        if (dt < 0) {
            printf("| prefill | 1 | %d new | failed: %s |||||||\n", S, err.msg);
            break;
        }
        print_row("prefill", 1, S, dt * 1e3, S / dt, step_cost(m, S, 1, 0, m->proxy.resident_experts), cl);
        if (dt > budget_s) {
            printf("| prefill | 1 | larger | skipped: %d tokens took %.0f s |||||||\n", S, dt);
            break;
        }
    }
}

di_status di_bench_parse_batches(const char *spec, int *out, int *n, di_err *err) {
    static const int defaults[] = {1, 8, 32, 64, 128, 256};
    *n = 0;
    if (!*spec || !strcmp(spec, "0")) {
        for (size_t i = 0; i < sizeof defaults / sizeof defaults[0]; i++) out[(*n)++] = defaults[i];
        return DI_OK;
    }
    bool seen[DI_BENCH_MAX_BATCH + 1] = {false};
    for (const char *p = spec;;) {
        long v = 0;
        const char *digits = p;
        while (*p >= '0' && *p <= '9' && v <= DI_BENCH_MAX_BATCH) v = 10 * v + (*p++ - '0');
        if (p == digits || v < 1 || v > DI_BENCH_MAX_BATCH || (*p && *p != ','))
            return di_errf(err, DI_EINVAL, "--bench-batch: expected batch sizes 1..%d separated by commas, got '%s'",
                           DI_BENCH_MAX_BATCH, spec);
        seen[v] = true;
        if (!*p) break;
        p++; /* the comma */
    }
    for (int b = 1; b <= DI_BENCH_MAX_BATCH; b++)
        if (seen[b]) out[(*n)++] = b;
    return DI_OK;
}

di_status di_bench_check_logprobs(int64_t logprobs, di_err *err) {
    if (logprobs < 0 || logprobs > DI_SAMPLER_MAX_LOGPROBS)
        return di_errf(err, DI_EINVAL, "--bench-logprobs %lld: expected 0..%d (0 = none)", (long long)logprobs,
                       DI_SAMPLER_MAX_LOGPROBS);
    return DI_OK;
}

di_status di_bench_check_contexts(int64_t min_context, int64_t max_context, di_err *err) {
    if (min_context > max_context)
        return di_errf(err, DI_EINVAL,
                       "--bench-min-context %lld is above --bench-max-context %lld: no decode row would run",
                       (long long)min_context, (long long)max_context);
    return DI_OK;
}

int di_cmd_bench_gpu(di_settings *s, const char *backend) {
    di_err err = {0};
    int Bs[DI_BENCH_MAX_BATCH], n_B = 0; /* decode batch sizes, ascending: checked before any work */
    if (di_bench_parse_batches(s->bench_batch, Bs, &n_B, &err)) {
        fprintf(stderr, "deepinfer bench: %s\n", err.msg);
        return 1;
    }
    if (di_bench_check_contexts(s->bench_min_context, s->bench_max_context, &err)) {
        fprintf(stderr, "deepinfer bench: %s\n", err.msg);
        return 1;
    }
    if (di_bench_check_logprobs(s->bench_logprobs, &err)) {
        fprintf(stderr, "deepinfer bench: %s\n", err.msg);
        return 1;
    }
    const int ep = s->ep_ranks > 0 ? (int)s->ep_ranks : 8;
    const bool quick = s->quick;
    char cfg_path[4096];
    if (*s->model_dir) snprintf(cfg_path, sizeof cfg_path, "%s/config.json", s->model_dir);
    else snprintf(cfg_path, sizeof cfg_path, "%s", DI_SOURCE_DIR "/tests/data/v41-flash-config/config.json");
    char *cfg_json = NULL;
    size_t cfg_len = 0;
    if (di_read_file(cfg_path, (size_t)1 << 24, "config", &cfg_json, &cfg_len, &err)) {
        fprintf(stderr, "deepinfer bench: %s\n", err.msg);
        return 1;
    }
    char dir[] = "/tmp/deepinfer-bench-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("deepinfer bench: mkdtemp");
        free(cfg_json);
        return 1;
    }
    di_model *m = NULL;
    int rc = 1;
    fprintf(stderr, "bench: writing a sparse synthetic checkpoint of %s into %s\n", cfg_path, dir);
    if (di_synthetic_checkpoint_write(dir, cfg_json, NULL, &err) || write_tokenizer(dir, &err) ||
        di_model_load(&m, dir, &err))
        goto fail;
    if (m->cfg.n_routed_experts % ep) {
        di_errf(&err, DI_EINVAL, "--ep-ranks %d does not divide %d experts", ep, m->cfg.n_routed_experts);
        goto fail;
    }
    m->proxy.synthetic = true;
    m->proxy.resident_experts = m->cfg.n_routed_experts / ep;
    m->proxy.engram_rows = (int64_t)1 << 20;
    fprintf(stderr, "bench: generating the weights on the device (EP-%d rank: %d experts per layer)\n", ep,
            m->proxy.resident_experts);
    if (di_cli_select_backend(m, backend, s, &err)) goto fail;
    if (!m->dev_backend) {
        di_errf(&err, DI_EUNSUPPORTED, "no device backend: the GPU benchmark needs one (this is the CPU)");
        goto fail;
    }
    const di_device_backend *be = m->dev_backend;
    char devname[256];
    be->describe(devname, sizeof devname);
    ceil3 cl;
    fprintf(stderr, "bench: measuring the card's ceilings\n");
    be->ceilings(quick, &cl.hbm, &cl.bf16, &cl.fp8);
    size_t free_b, total_b;
    be->mem_info(&free_b, &total_b);
    printf("deepinfer bench on %s, backend %s%s%s, EP-%d rank proxy (%d of %d experts per layer resident)\n",
           devname, be->name, m->batch_invariant ? " (batch invariant)" : "",
           m->exact_gemm ? " (exact GEMMs)" : "", ep, m->proxy.resident_experts,
           m->cfg.n_routed_experts);
    printf("ceilings measured now: HBM copy %.0f GB/s, BF16 %.0f TFLOP/s, FP8 %.0f TFLOP/s; "
           "device memory free %.1f of %.1f GB after the weights\n",
           cl.hbm, cl.bf16, cl.fp8, (double)free_b / 1e9, (double)total_b / 1e9);
    printf("each step's output to the host: %s\n\n",
           s->bench_logits    ? "every sequence's logits (--bench-logits: sampled requests, sampled on the host)"
           : s->bench_logprobs ? "every sequence's token and raw logprobs (--bench-logprobs), taken on the device after "
                                 "the edits of --bench-edited"
           : s->bench_edited  ? "every sequence's token, drawn on the device at T = 1, top_p = 0.95 after a mask of about "
                                "half the vocabulary, a bias on 4 ids and 3 penalties over 64 tokens (--bench-edited: "
                                "structured-output requests)"
           : s->bench_sampled ? "every sequence's token, drawn on the device at T = 1, top_p = 0.95 (--bench-sampled: "
                                "sampled requests)"
                              : "every sequence's greedy token, taken on the device (greedy requests; "
                                "--bench-sampled draws sampled tokens there, --bench-edited after a mask, bias and "
                                "penalties, --bench-logits copies the logits)");
    printf("| phase | B | context | ms / step | tokens/s | GB moved | TFLOP | roofline ms | bound | %% of roofline |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    fflush(stdout);
    const bool edited = (s->bench_edited || s->bench_logprobs > 0) && !s->bench_logits;
    bench_out out = {NULL, NULL, s->bench_sampled && !s->bench_logits, edited, NULL, edited ? (int)s->bench_logprobs : 0,
                     NULL};
    if (out.logprobs) out.lp = di_model_result_alloc(m, sizeof(di_sample_result) * DI_BENCH_MAX_BATCH);
    if (out.edited) { /* about half the ids allowed, in a fixed pseudo-random pattern */
        const int64_t words = (m->cfg.vocab_size + 31) / 32;
        out.mask = di_xmalloc(sizeof(uint32_t) * (size_t)words);
        for (int64_t w = 0; w < words; w++) out.mask[w] = (uint32_t)(0x9e3779b97f4a7c15ull * (uint64_t)(w + 1) >> 32);
    }
    if (s->bench_logits)
        out.logits = di_model_result_alloc(m, sizeof(float) * (size_t)m->cfg.vocab_size * DI_BENCH_MAX_BATCH);
    else
        out.tokens = di_model_result_alloc(m, sizeof(int32_t) * DI_BENCH_MAX_BATCH);
    const int64_t ctxs[] = {4096, 32768, 131072};
    const int steps = quick ? 2 : 4;
    const double budget_s = quick ? 20.0 : 60.0; /* per row: larger B at this context are skipped after */
    const double deadline = di_seconds_now() + (quick ? 240.0 : 1500.0); /* the whole table */
    for (size_t ci = 0; ci < sizeof ctxs / sizeof ctxs[0]; ci++) {
        if (ci == 1) /* after 4K decode: the rows that matter most first */
            bench_prefill(m, &cl, &out, budget_s, deadline, s->bench_max_prefill);
        if (ctxs[ci] > s->bench_max_context || ctxs[ci] < s->bench_min_context) continue;
        const bool first_ctx = ci == 0 || ctxs[ci - 1] < s->bench_min_context; /* the first that runs */
        bool slow = false;
        for (int bi = 0; bi < n_B; bi++) {
            const int B = Bs[bi];
            const int64_t ctx = ctxs[ci];
            if (slow || di_seconds_now() > deadline) {
                printf("| decode | %d | %lld | skipped: %s |||||||\n", B, (long long)ctx,
                       slow ? "the previous batch size was too slow" : "benchmark time budget spent");
                continue;
            }
            di_kv_pool pool;
            di_kv_pool_init(&pool, 16, di_kv_entry_floats(m), 0);
            di_kv_pool_set_mem(&pool, &be->mem);
            di_seq_state *probe = di_seq_state_new_in(m, &pool);
            const int64_t blocks = di_seq_state_blocks_needed(probe, ctx + 2 * steps + 6) * B;
            const double need = (double)blocks * di_kv_pool_block_bytes(&pool) + (double)B * di_seq_state_bytes(m, probe);
            di_seq_state_free(probe);
            be->mem_info(&free_b, &total_b);
            if (need > 0.9 * (double)free_b) {
                printf("| decode | %d | %lld | does not fit: %.1f GB of state > %.1f GB free |||||||\n",
                       B, (long long)ctx, need / 1e9, (double)free_b / 1e9);
                di_kv_pool_destroy(&pool);
                continue;
            }
            pool.max_blocks = blocks;
            di_seq_state **st = calloc((size_t)B, sizeof *st);
            double t[16];
            int n_t = 0;
            if (!make_states(m, &pool, B, ctx, 2 * steps + 6, st, &err)) {
                step_timing tm;
                n_t = time_decode_steps(m, st, B, steps, budget_s, &out, 0, false, t, &tm, &slow, &err);
                if (n_t == steps && first_ctx && g_n_step_rows < MAX_STEP_ROWS) {
                    /* the same states, every kernel launched directly (the graphs' gain) */
                    step_timing te;
                    double te_wall[16];
                    bool slow_e = false;
                    const bool graphs = m->device_graphs;
                    m->device_graphs = false;
                    if (time_decode_steps(m, st, B, steps, budget_s, &out, 100, true, te_wall, &te, &slow_e, &err) == steps) {
                        g_step_rows[g_n_step_rows].B = B;
                        g_step_rows[g_n_step_rows].graph = tm;
                        g_step_rows[g_n_step_rows].eager = te;
                        g_n_step_rows++;
                    }
                    m->device_graphs = graphs;
                }
                /* where the time goes */
                if (n_t == steps && first_ctx && (B == 1 || B == 64 || B == 128 || B == 256)) {
                    char what[64];
                    snprintf(what, sizeof what, "decode B = %d at context %lld", B, (long long)ctx);
                    profile_call(m, st, B, 1, &out, what);
                }
            }
            free_states(st, B);
            free(st);
            di_kv_pool_destroy(&pool);
            if (n_t < steps) {
                printf("| decode | %d | %lld | failed: %s |||||||\n", B, (long long)ctx, err.msg);
                continue;
            }
            const double ms = di_bench_median(t, n_t) * 1e3;
            print_row("decode", B, ctx, ms, B / (ms / 1e3), step_cost(m, B, B, ctx, m->proxy.resident_experts), &cl);
        }
    }
    print_profiles(m);
    print_step_rows();
    di_bench_host_sampling((int32_t)m->cfg.vocab_size, Bs, n_B);
    printf("\nprefill rows: context = new tokens in one call from an empty sequence; decode rows: one new token per "
           "sequence per step, median of %d steps after two warm-up steps.\n", steps);
    di_model_result_free(m, out.logits);
    di_model_result_free(m, out.tokens);
    di_model_result_free(m, out.lp);
    free(out.mask);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "deepinfer bench: %s\n", err.msg);
    di_model_free(m);
    if (nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS) != 0) fprintf(stderr, "deepinfer bench: could not remove %s\n", dir);
    free(cfg_json);
    return rc;
}
