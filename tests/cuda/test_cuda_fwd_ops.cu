/* Parity of the forward-pass kernels of cuda_fwd_ops.h against the CPU loops they twin
 * (src/forward/*.c, src/backend/cpu/cpu_linear.c), in the manner of test_cuda_ops.cu: random
 * inputs, device outputs poisoned (NaN) before each run, one PASS/FAIL line per case with the max
 * relative error, the number of elements whose bits differ and the criterion.
 *
 * The CPU references are di_cpu_linear for the fixed linear and, for stages that are static loops
 * inside src/forward/*.c, a copy of that loop here (named ref_*, with the function it follows).
 * Criteria:
 *   exact       bit-identical: everything except the two double sums below
 *   exact(mod)  linear_fixed and engram_gate sum in double in another order than the CPU; they are
 *               required bit-exact on bf16-exact inputs of moderate range (the double sums are then
 *               exact in any order), expected so on real activations
 *   batch-inv   linear_fixed / engram_gate: row j of an m-row call equals the row computed alone,
 *               bit for bit, on inputs of wide range
 *   twin        the decode-sized quantised GEMM (cuda_linear_gemv.cu) equals the tiled tensor-core
 *               kernel (di_cuda_ctx.tiled_only) bit for bit; the e2m1 -> e4m3 widening and the
 *               wgmma kernel's dequantisations (e2m1 / e4m3 -> bf16 times a scale) equal the
 *               tables on every input (the wgmma kernel's sums have other bits: its grouping is
 *               checked exact here, its sums against the CPU within test_cuda_ops's tensor-core
 *               bound, there and here on the grouping's references)
 * Prints "SKIPPED: no CUDA device" and exits 0 without a GPU; exits 1 on any FAIL. `--quick` runs
 * small shapes only (the CPU emulator, compute-sanitizer); `--medium` the real shapes except the
 * vocab-size head linear (the emulator's full run); `--wgmma` the small wgmma cases alone, `--index`
 * the small index-score cases, `--moe` the routing and grouping cases, `--sample` the greedy,
 * sampled and edited tokens and the logprobs (a B = 256 head's rows included), `--sample-small`
 * those at emulator sizes, `--sample-many` only the cases past the grid's y dimension. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <vector>

extern "C" {
#include "backend/cpu/cpu_ops.h"
#include "forward/index_key.h"
#include "forward/kv_record.h"
#include "sample/sample_edits.h"
#include "sample/sampler.h"
}
#include "backend/cuda/cuda_fwd_ops.h"
#include "backend/cuda/cuda_mma.cuh"
#include "backend/cuda/cuda_ops.h"

#define CUDA_TEST_SEED 0x2545f4914f6cdd1dull
#include "cuda_test_util.cuh"

static int g_pass, g_fail;
static di_cuda_ctx g_cx; /* stream and scratch of the tensor-core linears; .exact selects the exact kernels */

/* ---- random inputs beyond cuda_test_util.cuh's ---- */
/* bf16-exact, moderate range: +-(1 + j/128) 2^e * scale, e in [-4, 3], some exact zeros */
static float rnd_moderate(float scale) {
    const uint64_t r = rnd_u64();
    if ((r & 255) == 0) return 0.0f;
    const float v = ldexpf(1.0f + (float)((r >> 8) & 127) / 128.0f, (int)((r >> 16) % 8) - 4);
    return di_bf16_round(((r >> 24) & 1 ? -v : v) * scale);
}
static void fill_moderate(float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++) x[i] = rnd_moderate(scale);
}
static uint8_t rnd_e4m3(void) {
    for (;;) {
        uint8_t b = (uint8_t)rnd_u64();
        if ((b & 0x7f) != 0x7f) return b;
    }
}

static float *host_poisoned(int64_t n) {
    float *p = (float *)malloc(4 * (size_t)(n ? n : 1));
    memset(p, 0xff, 4 * (size_t)n);
    return p;
}

/* ---- comparison: bits, except that NaN matches only the same NaN bits ---- */
static void compare(const char *op, const char *shape, const float *gpu, const float *cpu, int64_t n,
                    const char *crit) {
    int64_t ndiff = 0;
    double maxrel = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (memcmp(&gpu[i], &cpu[i], 4) == 0) continue;
        ndiff++;
        double rel = isnan(gpu[i]) || isnan(cpu[i]) ? INFINITY
                                                     : fabs((double)gpu[i] - cpu[i]) / fmax(fabs((double)cpu[i]), 1e-30);
        if (rel > maxrel) maxrel = rel;
    }
    printf("%s  %-20s %-40s max_rel_err %.3e  differing %lld / %lld  [%s]\n", ndiff ? "FAIL" : "PASS", op, shape,
           maxrel, (long long)ndiff, (long long)n, crit);
    for (int64_t i = 0, shown = 0; ndiff && i < n && shown < 4; i++) {
        if (memcmp(&gpu[i], &cpu[i], 4) == 0) continue;
        printf("      [%lld] gpu %a (%.9g)  cpu %a (%.9g)\n", (long long)i, gpu[i], gpu[i], cpu[i], cpu[i]);
        shown++;
    }
    fflush(stdout);
    if (ndiff) g_fail++;
    else g_pass++;
}

/* ---- data movement ---- */
static void test_copy_rows(int64_t n, int64_t width) {
    const int64_t pool_rows = 2 * n + 3;
    float *src = (float *)malloc(4 * pool_rows * width), *ref = host_poisoned(pool_rows * width);
    float *got = (float *)malloc(4 * pool_rows * width);
    fill_wide(src, pool_rows * width, 1.0f);
    float *dsrc = (float *)dev_upload(src, 4 * pool_rows * width), *ddst = (float *)dev_poisoned(4 * pool_rows * width);
    const float **hs = (const float **)malloc(sizeof(float *) * n);
    float **hd = (float **)malloc(sizeof(float *) * n);
    for (int64_t i = 0; i < n; i++) { /* scattered rows; each dst row distinct; some NULLs */
        const int64_t srow = (int64_t)(rnd_u64() % pool_rows), drow = 2 * i + 1;
        const bool null_src = rnd_u64() % 5 == 0, null_dst = rnd_u64() % 7 == 0;
        hs[i] = null_src ? NULL : dsrc + srow * width;
        hd[i] = null_dst ? NULL : ddst + drow * width;
        if (!null_dst)
            for (int64_t k = 0; k < width; k++) ref[drow * width + k] = null_src ? 0.0f : src[srow * width + k];
    }
    const float *const *ds = (const float *const *)dev_upload(hs, sizeof(float *) * n);
    float *const *dd = (float *const *)dev_upload(hd, sizeof(float *) * n);
    di_cuda_copy_rows(dd, ds, n, width, 0);
    dev_download(got, ddst, 4 * pool_rows * width);
    char shape[64];
    snprintf(shape, sizeof shape, "n=%lld width=%lld", (long long)n, (long long)width);
    compare("copy_rows", shape, got, ref, pool_rows * width, "exact");
    cudaFree(dsrc), cudaFree(ddst), cudaFree((void *)ds), cudaFree((void *)dd);
    free(src), free(ref), free(got), free(hs), free(hd);
}

/* ---- sampling ---- */
/* More head rows than a grid's y dimension holds (65,535): the launches go in pieces. */
#define DI_ROWS_PAST_GRID_Y (65535 + 70)

/* A token a row, the device's against the host's: the first differing rows (described by
 * describe(r, ctx) into a line) and the PASS / FAIL line. */
static void check_row_tokens(const char *name, int64_t n, int64_t V, const int32_t *got, const int32_t *ref,
                             void (*describe)(int64_t r, const void *ctx, char *line, size_t cap), const void *ctx) {
    int64_t ndiff = 0;
    for (int64_t r = 0; r < n; r++) {
        if (got[r] == ref[r]) continue;
        if (ndiff++ < 4) {
            char line[160];
            describe(r, ctx, line, sizeof line);
            printf("      row %lld (%s): gpu %d cpu %d\n", (long long)r, line, got[r], ref[r]);
        }
    }
    printf("%s  %-20s n=%-5lld V=%-34lld differing %lld / %lld  [exact]\n", ndiff ? "FAIL" : "PASS", name,
           (long long)n, (long long)V, (long long)ndiff, (long long)n);
    fflush(stdout);
    if (ndiff) g_fail++;
    else g_pass++;
}

static void describe_greedy_row(int64_t r, const void *, char *line, size_t cap) {
    snprintf(line, cap, "kind %d", (int)(r % 4));
}

/* cuda_sample.cu's greedy tokens against di_sample_greedy_token (the sampler's argmax) row by row.
 * Rows of kind 0: random logits with the row's maximum planted at a few places (ties across slices:
 * the lowest id must win); 1: a pool of 0, -0, +-inf, NaN, FLT_MAX and denormals (sanitising and
 * sign-of-zero rules); 2: -inf and NaN only (-1); 3: the maximum at the last id. */
static void test_greedy_tokens(int64_t n, int64_t V) {
    static const float pool[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, FLT_MAX, 1e-45f, -1e-45f, 1.0f, -3.0f};
    float *x = (float *)malloc(4 * n * V);
    int32_t *ref = (int32_t *)malloc(4 * n), *got = (int32_t *)malloc(4 * n);
    for (int64_t r = 0; r < n; r++) {
        float *row = x + r * V;
        const int kind = (int)(r % 4);
        for (int64_t i = 0; i < V; i++)
            row[i] = kind == 0 || kind == 3 ? rnd_normalish() * 4.0f
                     : kind == 1           ? pool[rnd_u64() % 10]
                                           : (rnd_u64() & 1 ? -INFINITY : NAN);
        if (kind == 0)
            for (int t = 0; t < 3; t++) row[rnd_u64() % V] = 100.0f;
        if (kind == 3) row[V - 1] = 100.0f;
        ref[r] = di_sample_greedy_token(row, (int32_t)V);
    }
    float *dx = (float *)dev_upload(x, 4 * n * V);
    int32_t *dt = (int32_t *)dev_poisoned(4 * n);
    void *ws = dev_poisoned(di_cuda_greedy_ws_bytes(n, V));
    di_cuda_greedy_tokens(dx, n, V, ws, dt, 0);
    dev_download(got, dt, 4 * n);
    check_row_tokens("greedy_tokens", n, V, got, ref, describe_greedy_row, NULL);
    cudaFree(dx), cudaFree(dt), cudaFree(ws);
    free(x), free(ref), free(got);
}

static void describe_sampled_row(int64_t r, const void *ctx, char *line, size_t cap) {
    const di_plain_sampling *p = (const di_plain_sampling *)ctx + r;
    snprintf(line, cap, "row %lld: T %g top_k %d top_p %g min_p %g", (long long)r, p->temperature, p->top_k, p->top_p,
             p->min_p);
}

/* cuda_sample_draw.cu's sampled tokens against the host sampler (di_sampler_sample_plain) row by row,
 * each row with its own settings and seed. Rows of kind 0: model-like logits (a wide body, a few
 * strong tokens), random temperature / top_k / top_p / min_p; 1: every logit equal, top_p 0.5 (the
 * cut's weight bucket holds the whole row: past SAMPLE_CAP, read again from the row); 2: heavy exact
 * ties (half-integers), top_k and top_p cutting inside ties; 3: a pool of 0, -0, +-inf, NaN,
 * FLT_MAX and denormals; 4: -inf and NaN only (-1); 5: temperature 0 (not a sampled row: its entry
 * is left alone); 6: the bf16 grid at temperature 5 and top_p 0.999 (nearly uniform); 7: Gumbel
 * noise at a low temperature with min_p. Row r is of kind (r + first_kind) % 8. */
static void test_sample_tokens(int64_t n, int64_t V, int first_kind = 0) {
    static const float pool[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, FLT_MAX, 1e-45f, -1e-45f, 1.0f, -3.0f};
    const int32_t untouched = 0x5eed;
    float *x = (float *)malloc(4 * n * V);
    di_plain_sampling *ps = (di_plain_sampling *)calloc(n, sizeof *ps);
    int32_t *ref = (int32_t *)malloc(4 * n), *got = (int32_t *)malloc(4 * n), *init = (int32_t *)malloc(4 * n);
    di_sampler *smp = NULL;
    di_err err = {};
    if (di_sampler_create((int32_t)V, &smp, &err)) abort();
    for (int64_t r = 0; r < n; r++) {
        float *row = x + r * V;
        const int kind = (int)((r + first_kind) % 8);
        di_plain_sampling *p = &ps[r];
        p->temperature = (float)(0.3 + 1.7 * (rnd_u64() % 1000) / 1000.0);
        p->top_p = rnd_u64() % 3 ? (float)(0.05 + 0.95 * (rnd_u64() % 1000) / 1000.0) : 1.0f;
        p->top_k = rnd_u64() % 2 ? (int32_t)(rnd_u64() % (uint64_t)(V + V / 4 + 1)) : 0;
        p->min_p = rnd_u64() % 4 == 0 ? (float)(0.2 * (rnd_u64() % 1000) / 1000.0) : 0.0f;
        p->seed = rnd_u64();
        p->position = rnd_u64() % 100000;
        for (int64_t i = 0; i < V; i++) {
            const float u = (float)((rnd_u64() >> 11) * 0x1p-53);
            row[i] = kind == 0 ? rnd_normalish() * 3.0f
                     : kind == 1 ? 0.25f
                     : kind == 2 ? (float)(int)(u * 6) * 0.5f
                     : kind == 3 ? pool[rnd_u64() % 10]
                     : kind == 4 ? (rnd_u64() & 1 ? -INFINITY : NAN)
                     : kind == 6 ? di_bf16_round(20.0f * u - 10.0f)
                                 : -logf(-logf(u + 1e-12f) + 1e-12f);
        }
        if (kind == 0)
            for (int t = 0; t < 6; t++) row[rnd_u64() % V] = 9.0f + (float)t;
        if (kind == 1) p->top_p = 0.5f, p->top_k = 0, p->min_p = 0.0f, p->temperature = 1.0f;
        if (kind == 5) p->temperature = 0.0f;
        if (kind == 6) p->temperature = 5.0f, p->top_p = 0.999f, p->top_k = 0, p->min_p = 0.0f;
        if (kind == 7) p->temperature = 0.2f, p->min_p = 0.001f;
        init[r] = untouched;
        if (kind == 5) {
            ref[r] = untouched;
        } else {
            di_sampler_sample_plain(smp, row, p, &ref[r], &err); /* -1 for kind 4 */
        }
    }
    float *dx = (float *)dev_upload(x, 4 * n * V);
    int32_t *dt = (int32_t *)dev_upload(init, 4 * n);
    di_plain_sampling *dp = (di_plain_sampling *)dev_upload(ps, sizeof *ps * n);
    void *ws = dev_poisoned(di_cuda_sample_ws_bytes(n, V));
    di_cuda_sample_tokens(dx, n, V, dp, ws, dt, 0);
    dev_download(got, dt, 4 * n);
    check_row_tokens("sample_tokens", n, V, got, ref, describe_sampled_row, ps);
    cudaFree(dx), cudaFree(dt), cudaFree(dp), cudaFree(ws);
    free(x), free(ps), free(ref), free(got), free(init);
    di_sampler_free(smp);
}

/* The sampler's results of the rows asked (ask[r]), the device's against the host's: token, logprob,
 * n_top and the top list, bit for bit. */
static void check_logprob_results(const char *name, int64_t n, int64_t V, const di_sample_result *got,
                                  const di_sample_result *ref, const bool *ask) {
    int64_t ndiff = 0, asked = 0, listed = 0;
    for (int64_t r = 0; r < n; r++) {
        if (!ask[r]) continue;
        asked++;
        const di_sample_result *g = &got[r], *w = &ref[r];
        bool same = g->token_id == w->token_id && g->n_top == w->n_top && !memcmp(&g->logprob, &w->logprob, 4);
        for (int k = 0; same && k < w->n_top; k++)
            same = g->top[k].token_id == w->top[k].token_id && !memcmp(&g->top[k].logprob, &w->top[k].logprob, 4);
        listed += w->n_top;
        if (!same && ndiff++ < 4) {
            printf("      row %lld: gpu token %d logprob %a n_top %d top0 %d %a; cpu token %d logprob %a n_top %d "
                   "top0 %d %a\n", (long long)r, g->token_id, g->logprob, g->n_top, g->top[0].token_id,
                   g->top[0].logprob, w->token_id, w->logprob, w->n_top, w->top[0].token_id, w->top[0].logprob);
            for (int k = 0; k < w->n_top && k < g->n_top; k++)
                if (g->top[k].token_id != w->top[k].token_id || g->top[k].logprob != w->top[k].logprob) {
                    printf("        rank %d: gpu %d %a, cpu %d %a\n", k, g->top[k].token_id, g->top[k].logprob,
                           w->top[k].token_id, w->top[k].logprob);
                    break;
                }
        }
    }
    printf("%s  %-20s n=%-5lld V=%-34lld differing %lld / %lld rows (%lld listed)  [exact]\n", ndiff ? "FAIL" : "PASS",
           name, (long long)n, (long long)V, (long long)ndiff, (long long)asked, (long long)listed);
    fflush(stdout);
    if (ndiff || !asked) g_fail++;
    else g_pass++;
}

/* cuda_sample_logprob.cu against the host sampler's raw logprobs (di_sampler_sample, temperature 0,
 * logprobs 1..20) row by row, the host's tokens given. Rows of kind 0: values near 0 and one of
 * 1,000 (lse dwarfs the listed logits: many round to one logprob, ties of value broken by id);
 * 1: every magnitude down to 2^-120 and one of 1,000; 2: exact ties (half-integers); 3: broad
 * (+-10); 4: a pool of 0, -0, +-inf, NaN, FLT_MAX and denormals; 5: -inf but for a few ids (fewer
 * finite values than the list asks); 6: -inf and NaN only (no token: -1, nothing listed). */
static void test_logprob_rows(int64_t n, int64_t V) {
    static const float pool[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, FLT_MAX, 1e-45f, -1e-45f, 1.0f, -3.0f};
    float *x = (float *)malloc(4 * n * V);
    di_sample_result *ref = (di_sample_result *)calloc(n, sizeof *ref), *got = (di_sample_result *)calloc(n, sizeof *got);
    bool *ask = (bool *)calloc(n, 1);
    int32_t *tok = (int32_t *)malloc(4 * n);
    std::vector<di_cuda_logprob_row> lp;
    di_sampler *smp = NULL;
    di_err err = {};
    if (di_sampler_create((int32_t)V, &smp, &err)) abort();
    for (int64_t r = 0; r < n; r++) {
        float *row = x + r * V;
        const int kind = (int)(r % 7);
        for (int64_t i = 0; i < V; i++) {
            const double u = (double)(rnd_u64() >> 11) * 0x1p-53;
            row[i] = kind == 0   ? (float)((u - 0.5) * 1e-4)
                     : kind == 1 ? (float)ldexp(u - 0.5, -(int)(u * 1000) % 120)
                     : kind == 2 ? (float)((int)(u * 7) * 0.5)
                     : kind == 3 ? (float)((u - 0.5) * 20.0)
                     : kind == 4 ? pool[rnd_u64() % 10]
                     : kind == 5 ? -INFINITY
                                 : (rnd_u64() & 1 ? -INFINITY : NAN);
        }
        if (kind < 2) row[rnd_u64() % V] = 1000.0f;
        if (kind == 5)
            for (int t = 0; t < 3; t++) row[rnd_u64() % V] = (float)t;
        di_sampling_params p;
        di_sampling_params_init(&p);
        p.temperature = 0.0f;
        p.logprobs = 1 + (int32_t)(rnd_u64() % DI_SAMPLER_MAX_LOGPROBS);
        const di_sample_row srow = {.logits = row, .params = &p, .position = 0};
        di_sampler_sample(smp, &srow, &ref[r], &err); /* kind 6: -1, nothing listed */
        if (ref[r].token_id < 0) ref[r] = (di_sample_result){.token_id = -1};
        tok[r] = ref[r].token_id;
        ask[r] = true;
        di_cuda_logprob_row l = {};
        l.head_row = (int32_t)r, l.n_top = p.logprobs;
        lp.push_back(l);
    }
    float *dx = (float *)dev_upload(x, 4 * n * V);
    for (auto &l : lp) l.src = dx + l.head_row * V;
    di_cuda_logprob_row *dl = (di_cuda_logprob_row *)dev_upload(lp.data(), sizeof lp[0] * lp.size());
    int32_t *dt = (int32_t *)dev_upload(tok, 4 * n);
    di_sample_result *dout = (di_sample_result *)dev_poisoned(sizeof *dout * n);
    di_cuda_logprob_rows(dl, (int64_t)lp.size(), V, dt, dout, 0);
    dev_download(got, dout, sizeof *dout * n);
    check_logprob_results("logprob_rows", n, V, got, ref, ask);
    cudaFree(dx), cudaFree(dl), cudaFree(dt), cudaFree(dout);
    free(x), free(ref), free(got), free(ask), free(tok);
    di_sampler_free(smp);
}

/* cuda_sample_edit.cu's edits, then the greedy and sampled tokens over the edited rows, against the
 * host sampler (di_sampler_sample with the same params, history and mask) row by row; and the
 * edited rows themselves, sanitised, against di_sample_edits_apply on the host's sanitised copy,
 * bit for bit. Only every other row is edited (the rest must stay as they were). Each edited row
 * draws: a logit bias of up to 40 entries over a few ids (duplicates, out of order, some huge), a
 * mask (none, random, all but a few ids, or nothing allowed: -1), repetition / frequency / presence
 * penalties over a history drawn from a few ids (every fifth row of a vocabulary of 20,000 or
 * more: up to 7,000 ids over the whole vocabulary, so that a thread of the edit kernel edits several
 * batches of listed ids), a temperature of 0 (greedy) or > 0 with random
 * filters, and most ask for logprobs (raw or processed: cuda_sample_logprob.cu after the tokens,
 * the raw ones from a copy taken before the edits, the processed ones of sampled rows from the
 * draws' workspace, as gpu_head.c runs them); the logits model-like, with specials (+-inf, NaN)
 * here and there. */
static void test_edit_tokens(int64_t n, int64_t V) {
    float *x = (float *)malloc(4 * n * V), *want = (float *)malloc(4 * n * V), *got = (float *)malloc(4 * n * V);
    di_sampling_params *params = (di_sampling_params *)calloc(n, sizeof *params);
    di_plain_sampling *ps = (di_plain_sampling *)calloc(n, sizeof *ps);
    di_logit_bias *bias = (di_logit_bias *)malloc(sizeof *bias * 40 * n);
    const int64_t words = (V + 31) / 32;
    uint32_t *mask = (uint32_t *)malloc(4 * words * n);
    const int hist_max = 7000;
    int32_t *hist = (int32_t *)malloc(4 * (size_t)hist_max * n);
    int32_t *ref = (int32_t *)malloc(4 * n), *tok = (int32_t *)malloc(4 * n);
    di_sample_result *lp_ref = (di_sample_result *)calloc(n, sizeof *lp_ref), *lp_got = (di_sample_result *)calloc(n, sizeof *lp_got);
    bool *lp_ask = (bool *)calloc(n, 1);
    std::vector<di_cuda_logprob_row> lp;
    std::vector<bool> lp_raw;
    std::vector<di_cuda_row_edits> hdr;
    std::vector<void *> dev_arrays;
    di_sampler *smp = NULL;
    di_err err = {};
    if (di_sampler_create((int32_t)V, &smp, &err)) abort();
    di_sample_editor *ed = di_sample_editor_new((int32_t)V);
    auto up = [&](const void *h, size_t bytes) -> void * {
        void *d = bytes ? dev_upload(h, bytes) : dev_poisoned(4); /* an empty list: never read */
        dev_arrays.push_back(d);
        return d;
    };
    for (int64_t r = 0; r < n; r++) {
        float *row = x + r * V;
        for (int64_t i = 0; i < V; i++) {
            const uint64_t u = rnd_u64();
            row[i] = u % 211 == 0 ? (u & 256 ? INFINITY : NAN) : u % 173 == 0 ? -INFINITY : rnd_normalish() * 3.0f;
        }
        for (int t = 0; t < 4; t++) row[rnd_u64() % V] = 8.0f + (float)t;
        di_sampling_params *p = &params[r];
        di_sampling_params_init(p);
        p->temperature = r % 3 == 0 ? 0.0f : (float)(0.3 + 1.5 * (rnd_u64() % 1000) / 1000.0);
        p->top_p = rnd_u64() % 2 ? (float)(0.1 + 0.9 * (rnd_u64() % 1000) / 1000.0) : 1.0f;
        p->top_k = rnd_u64() % 3 == 0 ? (int32_t)(1 + rnd_u64() % 100) : 0;
        p->min_p = rnd_u64() % 4 == 0 ? 0.05f : 0.0f;
        p->seed = rnd_u64();
        p->logprobs = rnd_u64() % 4 ? (int32_t)(1 + rnd_u64() % DI_SAMPLER_MAX_LOGPROBS) : 0;
        p->logprobs_mode = rnd_u64() % 2 ? DI_LOGPROBS_PROCESSED : DI_LOGPROBS_RAW;
        const int64_t few = 1 + (int64_t)(rnd_u64() % (V < 50 ? V : 50));
        const int kind = (int)(r / 2 % 8);
        di_logit_bias *b = bias + 40 * r;
        p->n_logit_bias = kind & 1 ? (int32_t)(1 + rnd_u64() % 40) : 0;
        for (int32_t i = 0; i < p->n_logit_bias; i++)
            b[i] = (di_logit_bias){(int32_t)(rnd_u64() % (uint64_t)few),
                                   rnd_u64() % 9 == 0 ? 3e38f : (float)((int)(rnd_u64() % 2001) - 1000) * 0.013f};
        p->logit_bias = b;
        p->repetition_penalty = kind & 2 ? 0.6f + 0.2f * (float)(rnd_u64() % 6) : 1.0f;
        p->frequency_penalty = kind & 4 ? (float)((int)(rnd_u64() % 9) - 4) * 0.5f : 0.0f;
        p->presence_penalty = kind & 4 ? (float)((int)(rnd_u64() % 9) - 4) * 0.375f : 0.0f;
        int32_t *h = hist + (int64_t)hist_max * r;
        const bool long_history = V >= 20000 && r % 5 == 4;
        const int n_prompt = long_history ? 3000 + (int)(rnd_u64() % 2000) : (int)(rnd_u64() % 48),
                  n_output = long_history ? 1000 + (int)(rnd_u64() % 1000) : (int)(rnd_u64() % 48);
        for (int i = 0; i < n_prompt + n_output; i++)
            h[i] = (int32_t)(rnd_u64() % (uint64_t)(long_history ? V : few));
        di_sample_history hi = {h, n_prompt, h + n_prompt, n_output};
        uint32_t *m = mask + words * r;
        const int mask_kind = (int)(r / 16 % 4); /* 0 none, 1 random, 2 all but a few, 3 nothing */
        for (int64_t w = 0; w < words; w++)
            m[w] = mask_kind == 1 ? (uint32_t)rnd_u64() : mask_kind == 2 ? 0xffffffffu : 0u;
        if (mask_kind == 2)
            for (int t = 0; t < 5; t++) {
                const uint64_t id = rnd_u64() % (uint64_t)V;
                m[id / 32] &= ~(1u << (id % 32));
            }
        const di_sample_row srow = {.logits = row, .params = p, .history = &hi,
                                    .allowed_mask = mask_kind ? m : NULL, .position = rnd_u64() % 100000};
        memcpy(want + r * V, row, 4 * V);
        if (r % 2) { /* not edited: greedy on the raw row, left as it was */
            ref[r] = di_sample_greedy_token(row, (int32_t)V);
            continue;
        }
        di_sample_result res;
        di_sampler_sample(smp, &srow, &res, &err); /* -1 when the mask leaves nothing */
        ref[r] = res.token_id;
        if (p->logprobs > 0 && res.token_id >= 0) { /* (no token: the engine reports the error) */
            lp_ref[r] = res, lp_ask[r] = true;
            di_cuda_logprob_row l = {};
            l.head_row = (int32_t)r, l.n_top = p->logprobs, l.temperature = p->temperature;
            lp.push_back(l);
            lp_raw.push_back(p->logprobs_mode == DI_LOGPROBS_RAW);
        }
        if (p->temperature > 0.0f) ps[r] = di_plain_sampling_of(p, srow.position);
        di_sample_edits e;
        if (di_sample_edits_build(ed, &srow, &e, &err)) abort();
        di_sample_sanitized_copy(DI_SAMPLE_SCALAR, want + r * V, row, (int32_t)V);
        di_sample_edits_apply(DI_SAMPLE_SCALAR, &e, want + r * V, (int32_t)V);
        std::vector<int32_t> ids(e.n_bias);
        std::vector<float> vals(e.n_bias);
        for (int32_t i = 0; i < e.n_bias; i++) ids[i] = e.bias[i].token_id, vals[i] = e.bias[i].bias;
        di_cuda_row_edits d = {};
        d.row = r;
        d.bias_ids = (const int32_t *)up(ids.data(), 4 * ids.size());
        d.bias = (const float *)up(vals.data(), 4 * vals.size());
        d.mask = e.mask ? (const uint32_t *)up(e.mask, 4 * words) : NULL;
        d.repeated = (const int32_t *)up(e.repeated, 4 * (size_t)e.n_repeated);
        d.output_ids = (const int32_t *)up(e.output_ids, 4 * (size_t)e.n_output);
        d.output_counts = (const uint32_t *)up(e.output_counts, 4 * (size_t)e.n_output);
        d.n_bias = e.n_bias, d.n_repeated = e.n_repeated, d.n_output = e.n_output;
        d.repetition_penalty = e.repetition_penalty;
        d.frequency_penalty = e.frequency_penalty, d.presence_penalty = e.presence_penalty;
        hdr.push_back(d);
    }
    float *dx = (float *)dev_upload(x, 4 * n * V);
    di_cuda_row_edits *dh = (di_cuda_row_edits *)dev_upload(hdr.data(), sizeof hdr[0] * hdr.size());
    int32_t *dt = (int32_t *)dev_poisoned(4 * n);
    di_plain_sampling *dp = (di_plain_sampling *)dev_upload(ps, sizeof *ps * n);
    float *dx_raw = (float *)dev_upload(x, 4 * n * V); /* the raw rows, as gpu_head.c copies them */
    void *gws = dev_poisoned(di_cuda_greedy_ws_bytes(n, V)), *sws = dev_poisoned(di_cuda_sample_ws_bytes(n, V));
    int n_candidates = 0; /* rows whose logprobs are of the draw's candidates */
    for (size_t k = 0; k < lp.size(); k++) {
        lp[k].src = (lp_raw[k] ? dx_raw : dx) + lp[k].head_row * V;
        if (!lp_raw[k] && lp[k].temperature > 0.0f) lp[k].sample_ws = sws, lp[k].sample_ws_rows = n, n_candidates++;
    }
    di_cuda_logprob_row *dl = (di_cuda_logprob_row *)dev_upload(lp.data(), sizeof lp[0] * (lp.size() + 1));
    di_sample_result *dlp = (di_sample_result *)dev_poisoned(sizeof *dlp * n);
    di_cuda_edit_logits(dx, V, dh, (int64_t)hdr.size(), 0);
    dev_download(got, dx, 4 * n * V);
    di_cuda_greedy_tokens(dx, n, V, gws, dt, 0);
    di_cuda_sample_tokens(dx, n, V, dp, sws, dt, 0);
    di_cuda_logprob_rows(dl, (int64_t)lp.size(), V, dt, dlp, 0);
    dev_download(tok, dt, 4 * n);
    dev_download(lp_got, dlp, sizeof *dlp * n);
    for (int64_t r = 0; r < n; r += 2) /* the edited rows as the samplers read them */
        for (int64_t i = 0; i < V; i++) got[r * V + i] = di_sample_sanitize(got[r * V + i]);
    char shape[64];
    snprintf(shape, sizeof shape, "n=%lld V=%lld", (long long)n, (long long)V);
    compare("edit_logits", shape, got, want, n * V, "exact");
    check_row_tokens("edited_tokens", n, V, tok, ref, describe_sampled_row, ps);
    printf("      logprob rows: %zu, of them %d processed of a sampled row (the draw's candidates)\n", lp.size(),
           n_candidates);
    check_logprob_results("edited_logprobs", n, V, lp_got, lp_ref, lp_ask);
    for (void *d : dev_arrays) cudaFree(d);
    cudaFree(dx), cudaFree(dh), cudaFree(dt), cudaFree(dp), cudaFree(gws), cudaFree(sws);
    cudaFree(dx_raw), cudaFree(dl), cudaFree(dlp);
    free(lp_ref), free(lp_got), free(lp_ask);
    free(x), free(want), free(got), free(params), free(ps), free(bias), free(mask), free(hist), free(ref), free(tok);
    di_sample_editor_free(ed);
    di_sampler_free(smp);
}

/* forward.c di_forward's embedding loop */
static void test_embed(int64_t V, int64_t R, int n, int64_t D) {
    uint16_t *table = (uint16_t *)malloc(2 * V * D);
    for (int64_t i = 0; i < V * D; i++) table[i] = di_f32_to_bf16(rnd_normalish() * 0.02f);
    int32_t *tok = (int32_t *)malloc(4 * R);
    for (int64_t r = 0; r < R; r++) tok[r] = (int32_t)(rnd_u64() % V);
    tok[R - 1] = (int32_t)(V - 1);
    float *X = (float *)malloc(4 * R * n * D), *pre = (float *)calloc((size_t)(R * n), 4);
    for (int64_t r = 0; r < R; r++) {
        const uint8_t *e = (const uint8_t *)table + (size_t)tok[r] * D * 2;
        for (int i = 0; i < n; i++)
            for (int64_t k = 0; k < D; k++) X[(r * n + i) * D + k] = di_bf16_load(e + 2 * k);
        pre[r * n] = 1.0f;
    }
    uint16_t *dt = (uint16_t *)dev_upload(table, 2 * V * D);
    int32_t *dtok = (int32_t *)dev_upload(tok, 4 * R);
    uint16_t *dX = (uint16_t *)dev_poisoned(2 * R * n * D); /* [R, n, D] bf16 */
    float *dpre = (float *)dev_poisoned(4 * R * n);
    di_cuda_embed(dt, dtok, R, n, D, dX, dpre, 0);
    float *gX = (float *)malloc(4 * R * n * D), *gpre = (float *)malloc(4 * R * n);
    dev_download_bf16(gX, dX, R * n * D);
    dev_download(gpre, dpre, 4 * R * n);
    char shape[64];
    snprintf(shape, sizeof shape, "V=%lld R=%lld n=%d D=%lld", (long long)V, (long long)R, n, (long long)D);
    compare("embed.X", shape, gX, X, R * n * D, "exact");
    compare("embed.pre", shape, gpre, pre, R * n, "exact");
    cudaFree(dt), cudaFree(dtok), cudaFree(dX), cudaFree(dpre);
    free(table), free(tok), free(X), free(pre), free(gX), free(gpre);
}

/* forward.c capture_target, into column block `target` of a [R, ntargets * D] buffer */
static void test_hc_mean(int64_t R, int n, int64_t D, int ntargets, int target) {
    const int64_t W = (int64_t)ntargets * D;
    float *X = (float *)malloc(4 * R * n * D), *ref = host_poisoned(R * W), *got = (float *)malloc(4 * R * W);
    fill_wide(X, R * n * D, 1.0f);
    for (int64_t r = 0; r < R; r++)
        for (int64_t k = 0; k < D; k++) {
            float s = 0.0f;
            for (int i = 0; i < n; i++) s += X[(r * n + i) * D + k];
            ref[r * W + target * D + k] = di_bf16_round(s / (float)n);
        }
    uint16_t *dX = dev_upload_bf16(X, R * n * D); /* fill_wide's values are on the bf16 grid */
    float *dout = (float *)dev_poisoned(4 * R * W);
    di_cuda_hc_mean(dX, R, n, D, dout + target * D, W, 0);
    dev_download(got, dout, 4 * R * W);
    char shape[64];
    snprintf(shape, sizeof shape, "R=%lld n=%d D=%lld target %d/%d", (long long)R, n, (long long)D, target, ntargets);
    compare("hc_mean", shape, got, ref, R * W, "exact");
    cudaFree(dX), cudaFree(dout);
    free(X), free(ref), free(got);
}

/* indexer.c di_cpu_indexer: w[i] = bf16(w[i] * wscale) */
static void test_scale_bf16(int64_t n, int nh, int idim) {
    float *x = (float *)malloc(4 * n), *ref = (float *)malloc(4 * n), *got = (float *)malloc(4 * n);
    fill_wide(x, n, 1.0f);
    const float wscale = (float)(1.0 / sqrt((double)idim) / sqrt((double)nh));
    for (int64_t i = 0; i < n; i++) ref[i] = di_bf16_round(x[i] * wscale);
    float *dx = (float *)dev_upload(x, 4 * n);
    di_cuda_scale_bf16(dx, n, wscale, 0);
    dev_download(got, dx, 4 * n);
    char shape[64];
    snprintf(shape, sizeof shape, "n=%lld scale 1/sqrt(%d*%d)", (long long)n, idim, nh);
    compare("scale_bf16", shape, got, ref, n, "exact");
    cudaFree(dx);
    free(x), free(ref), free(got);
}

/* ---- fixed-order linear ---- */
typedef struct lin_case {
    di_weight w;            /* host data */
    void *wd;               /* host weight bytes */
    uint8_t *ws;            /* host scale bytes (FP8) */
    size_t wbytes, sbytes;
    di_weight dw;           /* the same on the device */
} lin_case;

/* weight [N_stored, K] of dtype dt (view rows [row0, row0 + N)); values bf16-exact, moderate
 * range (or, `wide`, bf16 of a normal-ish spread) */
static lin_case lin_make(di_dtype dt, int64_t N_stored, int64_t row0, int64_t N, int64_t K, bool wide) {
    lin_case c;
    memset(&c, 0, sizeof c);
    const int64_t nw = N_stored * K;
    c.wbytes = dt == DI_DT_F8_E4M3 ? (size_t)nw : dt == DI_DT_BF16 ? (size_t)nw * 2 : (size_t)nw * 4;
    c.wd = malloc(c.wbytes);
    for (int64_t i = 0; i < nw; i++) {
        const float v = wide ? di_bf16_round(rnd_normalish() * 0.05f) : rnd_moderate(1.0f / 32.0f);
        if (dt == DI_DT_F8_E4M3) ((uint8_t *)c.wd)[i] = rnd_e4m3();
        else if (dt == DI_DT_BF16) ((uint16_t *)c.wd)[i] = di_f32_to_bf16(v);
        else ((float *)c.wd)[i] = v;
    }
    if (dt == DI_DT_F8_E4M3) {
        c.sbytes = (size_t)(((N_stored + 31) / 32) * ((K + 31) / 32));
        c.ws = (uint8_t *)malloc(c.sbytes);
        for (size_t i = 0; i < c.sbytes; i++) c.ws[i] = (uint8_t)(118 + rnd_u64() % 12);
    }
    c.w.dtype = dt;
    c.w.data = c.wd;
    c.w.scale = c.ws;
    c.w.rows = N;
    c.w.cols = K;
    c.w.row0 = row0;
    c.dw = c.w;
    c.dw.data = dev_upload(c.wd, c.wbytes);
    c.dw.scale = c.sbytes ? (const uint8_t *)dev_upload(c.ws, c.sbytes) : NULL;
    return c;
}
static void lin_free(lin_case *c) {
    cudaFree((void *)c->dw.data);
    if (c->dw.scale) cudaFree((void *)c->dw.scale);
    free(c->wd), free(c->ws);
}
static const char *dt_name(di_dtype dt) {
    return dt == DI_DT_F8_E4M3 ? "fp8" : dt == DI_DT_BF16 ? "bf16" : "f32";
}

/* against di_cpu_linear on bf16-exact inputs of moderate range: exact */
static void test_linear_fixed(di_dtype dt, di_linear_mode mode, int64_t m, int64_t K, int64_t N, int64_t N_stored,
                              int64_t row0) {
    lin_case c = lin_make(dt, N_stored, row0, N, K, false);
    float *x = (float *)malloc(4 * m * K), *ref = (float *)malloc(4 * m * N), *got = (float *)malloc(4 * m * N);
    fill_moderate(x, m * K, 1.0f);
    di_cpu_linear(&c.w, x, m, ref, mode);
    float *dx = (float *)dev_upload(x, 4 * m * K), *dy = (float *)dev_poisoned(4 * m * N);
    di_cuda_linear_fixed(&c.dw, dx, m, dy, mode, 0);
    dev_download(got, dy, 4 * m * N);
    char name[48], shape[96];
    snprintf(name, sizeof name, "linear_fixed %s %s", dt_name(dt), mode == DI_LIN_BF16 ? "bf16" : "f32");
    snprintf(shape, sizeof shape, "M=%lld K=%lld N=%lld (rows %lld+ of %lld)", (long long)m, (long long)K, (long long)N,
             (long long)row0, (long long)N_stored);
    compare(name, shape, got, ref, m * N, "exact(mod)");
    cudaFree(dx), cudaFree(dy);
    lin_free(&c);
    free(x), free(ref), free(got);
}

/* row j of an m-row call == row j alone, bit for bit, for m in {1, 3, 8, 17, 64}, wide inputs */
static void test_linear_batch_inv(di_dtype dt, di_linear_mode mode, int64_t K, int64_t N) {
    static const int64_t ms[] = {1, 3, 8, 17, 64};
    const int64_t mmax = 64;
    lin_case c = lin_make(dt, N + 32, 32, N, K, true);
    float *x = (float *)malloc(4 * mmax * K), *all = (float *)malloc(4 * mmax * N), *one = (float *)malloc(4 * mmax * N);
    fill_wide(x, mmax * K, 1.0f);
    float *dx = (float *)dev_upload(x, 4 * mmax * K), *dy = (float *)dev_poisoned(4 * mmax * N);
    for (int64_t r = 0; r < mmax; r++) di_cuda_linear_fixed(&c.dw, dx + r * K, 1, dy + r * N, mode, 0);
    dev_download(one, dy, 4 * mmax * N);
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        const int64_t m = ms[i], off = mmax - m; /* the last m rows: row offsets not multiples of 8 */
        float *dym = (float *)dev_poisoned(4 * m * N);
        di_cuda_linear_fixed(&c.dw, dx + off * K, m, dym, mode, 0);
        dev_download(all, dym, 4 * m * N);
        char name[48], shape[96];
        snprintf(name, sizeof name, "batch_inv %s %s", dt_name(dt), mode == DI_LIN_BF16 ? "bf16" : "f32");
        snprintf(shape, sizeof shape, "M=%lld K=%lld N=%lld (rows alone vs in batch)", (long long)m, (long long)K,
                 (long long)N);
        compare(name, shape, all, one + off * N, m * N, "batch-inv");
        cudaFree(dym);
    }
    cudaFree(dx), cudaFree(dy);
    lin_free(&c);
    free(x), free(all), free(one);
}

/* ---- compressor, indexer ---- */
/* indexer.c di_cpu_compress, the ratio-2 pair loop */
static void test_cmp_pair(int64_t n, int dh) {
    const int64_t pool = 4 * n + 1;
    float *kp = (float *)malloc(4 * pool * dh), *zp = (float *)malloc(4 * pool * dh);
    for (int64_t i = 0; i < pool * dh; i++) {
        kp[i] = rnd_normalish() * 3.0f; /* fp32 linear outputs */
        zp[i] = rnd_normalish() * (rnd_u64() % 4 == 0 ? 40.0f : 4.0f);
    }
    float *dk = (float *)dev_upload(kp, 4 * pool * dh), *dz = (float *)dev_upload(zp, 4 * pool * dh);
    const float **h[4], **hd[4];
    float *ref = (float *)malloc(4 * n * dh), *got = (float *)malloc(4 * n * dh);
    for (int a = 0; a < 4; a++) {
        h[a] = (const float **)malloc(sizeof(float *) * n);
        hd[a] = (const float **)malloc(sizeof(float *) * n);
    }
    for (int64_t i = 0; i < n; i++)
        for (int a = 0; a < 4; a++) {
            const int64_t row = (int64_t)(rnd_u64() % pool);
            h[a][i] = ((a & 1) ? zp : kp) + row * dh;
            hd[a][i] = ((a & 1) ? dz : dk) + row * dh;
        }
    for (int64_t i = 0; i < n; i++)
        for (int d = 0; d < dh; d++) {
            float z0 = h[1][i][d], z1 = h[3][i][d], mx = fmaxf(z0, z1);
            float e0 = expf(z0 - mx), e1 = expf(z1 - mx), sum = e0 + e1;
            ref[i * dh + d] = di_bf16_round(h[0][i][d] * (e0 / sum) + h[2][i][d] * (e1 / sum));
        }
    const float *const *dp[4];
    for (int a = 0; a < 4; a++) dp[a] = (const float *const *)dev_upload(hd[a], sizeof(float *) * n);
    float *dl = (float *)dev_poisoned(4 * n * dh);
    di_cuda_cmp_pair(dp[0], dp[1], dp[2], dp[3], n, dh, dl, 0);
    dev_download(got, dl, 4 * n * dh);
    char shape[64];
    snprintf(shape, sizeof shape, "n=%lld dh=%d", (long long)n, dh);
    compare("cmp_pair", shape, got, ref, n * dh, "exact");
    for (int a = 0; a < 4; a++) cudaFree((void *)dp[a]), free(h[a]), free(hd[a]);
    cudaFree(dk), cudaFree(dz), cudaFree(dl);
    free(kp), free(zp), free(ref), free(got);
}

/* indexer.c index_scores over a paged pool, then the visible mask of di_cpu_indexer. The pool: fp32
 * keys inside their entries (key t at entry t's key_offset, entries of entry_floats), or (records) the
 * forward pass's blocks (state.h di_seq_ikey): [block_entries][key_offset floats] KV row records, then
 * the entries' key records (forward/index_key.h; entry_floats ignored) */
static void test_index_score_paged(int64_t R, int64_t P, int nh, int idim, int block_entries, int entry_floats,
                                   int key_offset, bool vis_null, bool records = false) {
    const int rec_floats = di_index_key_bytes(idim) / 4;
    if (records) entry_floats = key_offset + rec_floats;
    const int64_t block_floats = (int64_t)block_entries * entry_floats;
    const int key_base = records ? block_entries * key_offset : key_offset;
    const int key_stride = records ? rec_floats : entry_floats;
    const int64_t nblk = (P + block_entries - 1) / block_entries, pool_blocks = nblk + 3;
    const int64_t pool_floats = pool_blocks * block_floats;
    float *pool = (float *)malloc(4 * pool_floats);
    fill_wide(pool, pool_floats, 1.0f);
    int32_t *perm = (int32_t *)malloc(4 * pool_blocks), *blocks = perm; /* [nblk] distinct pool blocks */
    for (int64_t b = 0; b < pool_blocks; b++) perm[b] = (int32_t)b;
    for (int64_t b = pool_blocks - 1; b > 0; b--) {
        const int64_t a = (int64_t)(rnd_u64() % (uint64_t)(b + 1));
        const int32_t t = perm[b];
        perm[b] = perm[a];
        perm[a] = t;
    }
    float *keys = (float *)malloc(4 * P * idim); /* [P, idim] the sequence's keys, contiguous */
    fill_wide(keys, P * idim, 1.0f);
    di_cpu_fp4_quant_inplace(keys, P * idim, 32, DI_FP4_SCALE_UE8M0);
    for (int64_t t = 0; t < P; t++) {
        float *kt = pool + blocks[t / block_entries] * block_floats + key_base + (t % block_entries) * key_stride;
        if (records) di_index_key_quant(keys + t * idim, idim, (uint8_t *)kt);
        else memcpy(kt, keys + t * idim, 4 * (size_t)idim);
    }
    float *qi = (float *)malloc(4 * R * nh * idim), *w = (float *)malloc(4 * R * nh);
    fill_wide(qi, R * nh * idim, 1.0f);
    di_cpu_fp4_quant_inplace(qi, R * nh * idim, 32, DI_FP4_SCALE_UE8M0);
    for (int64_t i = 0; i < R * nh; i++) w[i] = di_bf16_round(rnd_normalish() * (1.0f / 64.0f));
    int64_t *vis = (int64_t *)malloc(8 * R);
    float *ref = (float *)malloc(4 * R * P), *got = (float *)malloc(4 * R * P);
    for (int64_t r = 0; r < R; r++) {
        vis[r] = r == 0 || vis_null ? P : P - (int64_t)(rnd_u64() % (P / 3 + 1));
        for (int64_t t = 0; t < P; t++) {
            const float *kt = keys + t * idim;
            double sum = 0.0;
            for (int hh = 0; hh < nh; hh++) {
                double dot = 0.0;
                for (int d = 0; d < idim; d++) dot += (double)qi[(r * nh + hh) * idim + d] * kt[d];
                float s = di_bf16_round((float)dot);
                sum += di_bf16_round(fmaxf(s, 0.0f) * w[r * nh + hh]);
            }
            ref[r * P + t] = t < vis[r] ? di_bf16_round((float)sum) : -INFINITY;
        }
    }
    float *dpool = (float *)dev_upload(pool, 4 * pool_floats), *dq = (float *)dev_upload(qi, 4 * R * nh * idim);
    float *dw = (float *)dev_upload(w, 4 * R * nh), *ds = (float *)dev_poisoned(4 * R * P);
    int32_t *db = (int32_t *)dev_upload(blocks, 4 * nblk);
    int64_t *dv = (int64_t *)dev_upload(vis, 8 * R);
    di_cuda_index_score_paged(dq, dw, dpool, db, block_entries, block_floats, key_base, key_stride, records, R, P, nh,
                              idim, vis_null ? NULL : dv, NULL, ds, 0);
    dev_download(got, ds, 4 * R * P);
    char shape[96];
    snprintf(shape, sizeof shape, "R=%lld P=%lld %dx%d blk=%d ent=%d@%d%s%s", (long long)R, (long long)P, nh, idim,
             block_entries, entry_floats, key_offset, vis_null ? " vis=NULL" : "", records ? " records" : "");
    compare("index_score_paged", shape, got, ref, R * P, "exact");
    /* batched: rows of "several sequences" -- odd rows read a second copy of the pool, and rows
     * have fewer keys (r % 3 quarters short); scores past a row's keys must be -inf */
    float *dpool2 = (float *)dev_upload(pool, 4 * pool_floats);
    const float **rp = (const float **)malloc(sizeof(float *) * R);
    const int32_t **rb = (const int32_t **)malloc(sizeof(int32_t *) * R);
    int64_t *rk = (int64_t *)malloc(8 * R);
    for (int64_t r = 0; r < R; r++) {
        rp[r] = r % 2 ? dpool2 : dpool;
        rb[r] = db;
        rk[r] = P - (r % 3) * (P / 4);
        for (int64_t t = rk[r]; t < P; t++) ref[r * P + t] = -INFINITY;
    }
    const di_index_rows rows = {(const float *const *)dev_upload(rp, sizeof(float *) * R),
                                (const int32_t *const *)dev_upload(rb, sizeof(int32_t *) * R),
                                (const int64_t *)dev_upload(rk, 8 * R)};
    di_cuda_index_score_paged(dq, dw, NULL, NULL, block_entries, block_floats, key_base, key_stride, records, R, P, nh,
                              idim, vis_null ? NULL : dv, &rows, ds, 0);
    dev_download(got, ds, 4 * R * P);
    compare("index_score batched", shape, got, ref, R * P, "exact");
    cudaFree((void *)rows.pool), cudaFree((void *)rows.blocks), cudaFree((void *)rows.n_keys), cudaFree(dpool2);
    free(rp), free(rb), free(rk);
    cudaFree(dpool), cudaFree(dq), cudaFree(dw), cudaFree(ds), cudaFree(db), cudaFree(dv);
    free(pool), free(blocks), free(keys), free(qi), free(w), free(vis), free(ref), free(got);
}

/* The CPU's records against the device's, byte for byte: index keys (kv false: di_index_key_quant /
 * di_cuda_index_key_quant, blocks of 32) or compressed KV rows (kv true: di_kv_record_quant /
 * di_cuda_kv_record_quant, blocks of 16), n vectors of dim wide-ranged values with zero,
 * signed-zero, tiny (the scale's floor) and non-finite blocks, written through a pointer list into
 * entries of a pool (the compressor's use) */
static void test_record_quant(bool kv, int64_t n, int dim) {
    const int blk = kv ? 16 : 32, nb = dim / blk;
    const int bytes = kv ? di_kv_record_bytes(dim) : di_index_key_bytes(dim), entry = 4 * dim + 2 * bytes;
    float *x = (float *)malloc(4 * n * dim);
    fill_wide(x, n * dim, 1.0f);
    for (int64_t k = 0; k < n; k++) {
        float *v = x + k * dim + blk * (k % nb);
        if (k % 5 == 1) for (int i = 0; i < blk; i++) v[i] = i % 2 ? -0.0f : 0.0f;
        if (k % 5 == 2) for (int i = 0; i < blk; i++) v[i] *= kv ? 0x1p-12f : 0x1p-126f;
        if (k % 5 == 3) v[k % blk] = k % 2 ? NAN : -INFINITY;
    }
    uint8_t *want = (uint8_t *)malloc((size_t)n * entry), *got = (uint8_t *)malloc((size_t)n * entry);
    memset(want, 0x5A, (size_t)n * entry);
    for (int64_t k = 0; k < n; k++) {
        uint8_t *rec = want + (n - 1 - k) * entry + 4 * dim;
        if (kv) di_kv_record_quant(x + k * dim, dim, rec);
        else di_index_key_quant(x + k * dim, dim, rec);
    }
    memset(got, 0x5A, (size_t)n * entry); /* the pool before: the records' bytes 0x33, the rest as after */
    for (int64_t k = 0; k < n; k++) memset(got + k * entry + 4 * dim, 0x33, (size_t)bytes);
    uint8_t *dpool = (uint8_t *)dev_upload(got, (size_t)n * entry);
    uint8_t **dst = (uint8_t **)malloc(sizeof(uint8_t *) * n);
    for (int64_t k = 0; k < n; k++) dst[k] = dpool + (n - 1 - k) * entry + 4 * dim; /* reversed: a pointer list */
    uint8_t **ddst = (uint8_t **)dev_upload(dst, sizeof(uint8_t *) * n);
    float *dx = (float *)dev_upload(x, 4 * n * dim);
    if (kv) di_cuda_kv_record_quant(dx, n, dim, bytes, ddst, 0);
    else di_cuda_index_key_quant(dx, n, dim, bytes, ddst, 0);
    dev_download(got, dpool, (size_t)n * entry);
    int64_t bad = 0;
    for (int64_t i = 0; i < n * entry; i++) bad += got[i] != want[i];
    printf("%s  %-20s n=%lld dim=%d  differing %lld / %lld bytes  [exact]\n", bad ? "FAIL" : "PASS",
           kv ? "kv_record_quant" : "index_key_quant", (long long)n, dim, (long long)bad, (long long)(n * entry));
    if (bad) g_fail++;
    else g_pass++;
    cudaFree(dpool), cudaFree(ddst), cudaFree(dx);
    free(x), free(want), free(got), free(dst);
}

/* indexer.c candidate_pool (block max, pin, flags) and di_cpu_indexer's use of the flags. Scores
 * have no zeros (fmaxf's choice between -0 and +0 is not pinned down; the top-k treats them as
 * equal anyway). */
static void test_candidates(int64_t R, int64_t P, int bs, int keep_max, int64_t nb_apply_cut) {
    const int64_t nb = (P + bs - 1) / bs;
    float *score = (float *)malloc(4 * R * P);
    for (int64_t i = 0; i < R * P; i++) {
        float v = (float)(1 + rnd_u64() % 50) * 0.125f * (rnd_u64() & 1 ? 1.0f : -1.0f);
        score[i] = rnd_u64() % 10 == 0 ? -INFINITY : v;
    }
    int64_t *vis = (int64_t *)malloc(8 * R);
    for (int64_t r = 0; r < R; r++) {
        vis[r] = r == 0 ? 0 : r == 1 ? P : (int64_t)(rnd_u64() % (P + 1));
        for (int64_t t = vis[r]; t < P; t++) score[r * P + t] = -INFINITY;
    }
    /* step 1: block max */
    float *bref = (float *)malloc(4 * R * nb), *bgot = (float *)malloc(4 * R * nb);
    for (int64_t r = 0; r < R; r++) di_cpu_block_max(score + r * P, P, bs, vis[r], bref + r * nb);
    float *dscore = (float *)dev_upload(score, 4 * R * P), *dbs = (float *)dev_poisoned(4 * R * nb);
    int64_t *dv = (int64_t *)dev_upload(vis, 8 * R);
    di_cuda_block_max(dscore, R, P, bs, dv, dbs, 0);
    dev_download(bgot, dbs, 4 * R * nb);
    char shape[96];
    snprintf(shape, sizeof shape, "R=%lld P=%lld bs=%d nb=%lld", (long long)R, (long long)P, bs, (long long)nb);
    compare("block_max", shape, bgot, bref, R * nb, "exact");

    /* step 2: flags from the kept blocks (the CPU's top-k of the CPU's block scores) */
    const int keep = keep_max < nb ? keep_max : (int)nb;
    int32_t *kept = (int32_t *)malloc(4 * R * (keep ? keep : 1));
    for (int64_t r = 0; r < R; r++) di_cpu_topk_select(bref + r * nb, nb, keep, kept + r * keep);
    float *fref = (float *)calloc((size_t)(R * nb), 4), *fgot = (float *)malloc(4 * R * nb);
    for (int64_t r = 0; r < R; r++)
        for (int j = 0; j < keep; j++)
            if (kept[r * keep + j] >= 0) fref[r * nb + kept[r * keep + j]] = 1.0f;
    int32_t *dkept = (int32_t *)dev_upload(kept, 4 * R * (keep ? keep : 1));
    uint8_t *dflags = (uint8_t *)dev_poisoned(R * nb), *hflags = (uint8_t *)malloc(R * nb);
    di_cuda_cand_flags(dkept, R, keep, nb, dflags, 0);
    dev_download(hflags, dflags, R * nb);
    for (int64_t i = 0; i < R * nb; i++) fgot[i] = hflags[i] == 1 ? 1.0f : hflags[i] == 0 ? 0.0f : NAN;
    snprintf(shape, sizeof shape, "R=%lld nb=%lld keep=%d", (long long)R, (long long)nb, keep);
    compare("cand_flags", shape, fgot, fref, R * nb, "exact");

    /* use: mask the scores; the flags cut to nb_apply_cut blocks exercise t / bs >= nb */
    const int64_t nba = nb_apply_cut > 0 && nb_apply_cut < nb ? nb_apply_cut : nb;
    uint8_t *fl = (uint8_t *)malloc(R * nba);
    for (int64_t r = 0; r < R; r++)
        for (int64_t b = 0; b < nba; b++) fl[r * nba + b] = fref[r * nb + b] != 0.0f;
    float *sref = (float *)malloc(4 * R * P), *sgot = (float *)malloc(4 * R * P);
    memcpy(sref, score, 4 * R * P);
    for (int64_t r = 0; r < R; r++)
        for (int64_t t = 0; t < P; t++)
            if (t / bs >= nba || !fl[r * nba + t / bs]) sref[r * P + t] = -INFINITY;
    uint8_t *dfl = (uint8_t *)dev_upload(fl, R * nba);
    di_cuda_cand_apply(dscore, R, P, bs, dfl, nba, 0);
    dev_download(sgot, dscore, 4 * R * P);
    snprintf(shape, sizeof shape, "R=%lld P=%lld bs=%d nb=%lld", (long long)R, (long long)P, bs, (long long)nba);
    compare("cand_apply", shape, sgot, sref, R * P, "exact");

    cudaFree(dscore), cudaFree(dbs), cudaFree(dv), cudaFree(dkept), cudaFree(dflags), cudaFree(dfl);
    free(score), free(vis), free(bref), free(bgot), free(kept), free(fref), free(fgot), free(hflags), free(fl);
    free(sref), free(sgot);
}

/* act_quant made beside a kernel's output (dq's bytes, ds's nb scales) against the act_quant launch's
 * (rq, rs) on the same output, exact: the bytes compared as values. names: the bytes', the scales' */
static void compare_quant_forms(const char *names[2], const char *shape, const uint8_t *dq, const float *ds,
                                const uint8_t *rq, const float *rs, int64_t bytes, int64_t nb) {
    float *a = (float *)malloc(4 * bytes), *b = (float *)malloc(4 * bytes);
    uint8_t *qa = (uint8_t *)malloc(bytes), *qb = (uint8_t *)malloc(bytes);
    dev_download(qa, rq, bytes);
    dev_download(qb, dq, bytes);
    for (int64_t i = 0; i < bytes; i++) a[i] = qa[i], b[i] = qb[i];
    compare(names[0], shape, b, a, bytes, "exact");
    dev_download(a, rs, 4 * nb);
    dev_download(b, ds, 4 * nb);
    compare(names[1], shape, b, a, nb, "exact");
    free(a), free(b), free(qa), free(qb);
}

/* ---- MoE, Engram ---- */

/* moe.c expert_ffn's SwiGLU loop; `alias`: h written over g */
static void test_swiglu(int64_t n, int64_t inter, bool with_wt, bool alias) {
    const float lim = 10.0f;
    float *g = (float *)malloc(4 * n * inter), *u = (float *)malloc(4 * n * inter), *wt = (float *)malloc(4 * n);
    float *ref = (float *)malloc(4 * n * inter), *got = (float *)malloc(4 * n * inter);
    fill_wide(g, n * inter, 4.0f);
    fill_wide(u, n * inter, 4.0f);
    for (int64_t r = 0; r < n; r++) wt[r] = rnd_unit() * 1.5f;
    for (int64_t r = 0; r < n; r++)
        for (int64_t i = 0; i < inter; i++) {
            float gv = fminf(g[r * inter + i], lim), uv = di_clampf(u[r * inter + i], -lim, lim);
            float h = gv / (1.0f + expf(-gv)) * uv;
            if (with_wt) h *= wt[r];
            ref[r * inter + i] = di_bf16_round(h);
        }
    float *dg = (float *)dev_upload(g, 4 * n * inter), *du = (float *)dev_upload(u, 4 * n * inter);
    float *dwt = (float *)dev_upload(wt, 4 * n), *dh = alias ? dg : (float *)dev_poisoned(4 * n * inter);
    di_cuda_swiglu(dg, du, n, inter, lim, with_wt ? dwt : NULL, dh, 0);
    dev_download(got, dh, 4 * n * inter);
    char shape[64];
    snprintf(shape, sizeof shape, "n=%lld inter=%lld%s%s", (long long)n, (long long)inter, with_wt ? " wt" : "",
             alias ? " h=g" : "");
    compare("swiglu", shape, got, ref, n * inter, "exact");
    /* with h's act_quant (the codes, then the int8 twin's digits): the same h, and the bytes of the
     * act_quant launches on that h */
    for (int form = 0; form < 2 && di_cuda_swiglu_forms_supported(dg, du, inter, dh); form++) {
        const int64_t nb = n * inter / 32, bytes = form ? 3 * n * inter : n * inter;
        uint8_t *dq = (uint8_t *)dev_poisoned(bytes), *rq = (uint8_t *)dev_poisoned(bytes);
        float *ds = (float *)dev_poisoned(4 * nb), *rs = (float *)dev_poisoned(4 * nb);
        float *dh2 = (float *)dev_poisoned(4 * n * inter), *dg2 = (float *)dev_upload(g, 4 * n * inter);
        const di_cuda_act_forms forms = {form ? NULL : dq, form ? NULL : ds, NULL, form ? dq : NULL, form ? ds : NULL};
        di_cuda_swiglu_forms(dg2, du, n, inter, lim, with_wt ? dwt : NULL, alias ? dg2 : dh2, &forms, 0);
        float *h2 = alias ? dg2 : dh2;
        if (form) di_cuda_act_quant_digits(h2, NULL, 0, nb, rq, rs, 0);
        else di_cuda_act_quant_e4m3(h2, NULL, 0, nb, rq, rs, 0);
        float *a = (float *)malloc(4 * n * inter);
        dev_download(a, h2, 4 * n * inter);
        compare(form ? "swiglu_forms(digits).h" : "swiglu_forms(e4m3).h", shape, a, ref, n * inter, "exact");
        free(a);
        const char *digit_names[2] = {"swiglu_forms digits", "swiglu_forms digit scales"};
        const char *code_names[2] = {"swiglu_forms codes", "swiglu_forms scales"};
        compare_quant_forms(form ? digit_names : code_names, shape, dq, ds, rq, rs, bytes, nb);
        cudaFree(dq), cudaFree(rq), cudaFree(ds), cudaFree(rs), cudaFree(dh2), cudaFree(dg2);
    }
    /* act_quant's values as bf16 (the wgmma GEMM's operand): act_quant_bf16's bits on that h */
    if (di_cuda_swiglu_forms_supported(dg, du, inter, dh)) {
        const int64_t nb = n * inter / 32;
        uint16_t *dqb = (uint16_t *)dev_poisoned(2 * n * inter), *rqb = (uint16_t *)dev_poisoned(2 * n * inter);
        float *dh2 = (float *)dev_poisoned(4 * n * inter), *dg2 = (float *)dev_upload(g, 4 * n * inter);
        di_cuda_act_forms forms = {NULL};
        forms.qbf16 = dqb;
        di_cuda_swiglu_forms(dg2, du, n, inter, lim, with_wt ? dwt : NULL, alias ? dg2 : dh2, &forms, 0);
        float *h2 = alias ? dg2 : dh2;
        di_cuda_act_quant_bf16(h2, NULL, 0, nb, rqb, 0);
        float *a = (float *)malloc(4 * n * inter);
        dev_download(a, h2, 4 * n * inter);
        compare("swiglu_forms(qbf16).h", shape, a, ref, n * inter, "exact");
        uint16_t *qa = (uint16_t *)malloc(2 * n * inter), *qr = (uint16_t *)malloc(2 * n * inter);
        dev_download(qa, dqb, 2 * n * inter);
        dev_download(qr, rqb, 2 * n * inter);
        float *fa = (float *)malloc(4 * n * inter), *fr = (float *)malloc(4 * n * inter);
        for (int64_t i = 0; i < n * inter; i++) fa[i] = di_bf16_to_f32(qa[i]), fr[i] = di_bf16_to_f32(qr[i]);
        compare("swiglu_forms bf16 values", shape, fa, fr, n * inter, "exact");
        free(a), free(qa), free(qr), free(fa), free(fr);
        cudaFree(dqb), cudaFree(rqb), cudaFree(dh2), cudaFree(dg2);
    }
    cudaFree(dg), cudaFree(du), cudaFree(dwt);
    if (!alias) cudaFree(dh);
    free(g), free(u), free(wt), free(ref), free(got);
}

/* moe.c di_cpu_moe's combine: ascending-expert order, then the shared expert */
static void test_moe_combine(int64_t R, int K, int64_t D) {
    float *eo = (float *)malloc(4 * R * K * D), *sh = (float *)malloc(4 * R * D);
    float *ref = (float *)malloc(4 * R * D), *got = (float *)malloc(4 * R * D);
    fill_wide(eo, R * K * D, 0.5f);
    fill_wide(sh, R * D, 0.5f);
    int32_t *order = (int32_t *)malloc(4 * R * K);
    for (int64_t r = 0; r < R; r++) { /* a random permutation per row */
        for (int j = 0; j < K; j++) order[r * K + j] = j;
        for (int j = K - 1; j > 0; j--) {
            int a = (int)(rnd_u64() % (j + 1)), t = order[r * K + j];
            order[r * K + j] = order[r * K + a];
            order[r * K + a] = t;
        }
        for (int64_t k = 0; k < D; k++) {
            float acc = 0.0f;
            for (int j = 0; j < K; j++) acc += eo[((size_t)r * K + order[r * K + j]) * D + k];
            acc += sh[r * D + k];
            ref[r * D + k] = di_bf16_round(acc);
        }
    }
    float *deo = (float *)dev_upload(eo, 4 * R * K * D), *dsh = (float *)dev_upload(sh, 4 * R * D);
    int32_t *dord = (int32_t *)dev_upload(order, 4 * R * K);
    float *dout = (float *)dev_poisoned(4 * R * D);
    /* the slots' rows through a list: slot i's row stored at (i * 7) % (R K) (R K prime to 7) */
    std::vector<const float *> rows((size_t)(R * K));
    float *dperm = (float *)dev_poisoned(4 * R * K * D);
    for (int64_t i = 0; i < R * K; i++) {
        const int64_t at = i * 7 % (R * K);
        cudaMemcpy(dperm + at * D, deo + i * D, 4 * D, cudaMemcpyDeviceToDevice);
        rows[i] = dperm + at * D;
    }
    const float **drows = (const float **)dev_upload(rows.data(), sizeof(float *) * R * K);
    di_cuda_moe_combine(drows, dord, dsh, R, K, D, dout, 0);
    dev_download(got, dout, 4 * R * D);
    char shape[64];
    snprintf(shape, sizeof shape, "R=%lld K=%d D=%lld", (long long)R, K, (long long)D);
    compare("moe_combine", shape, got, ref, R * D, "exact");
    cudaFree(deo), cudaFree(dsh), cudaFree(dord), cudaFree(dout), cudaFree(dperm), cudaFree((void *)drows);
    free(eo), free(sh), free(ref), free(got), free(order);
}

/* engram.c di_cpu_engram's gather loop */
static void test_engram_gather(int64_t T, int64_t R, int ncols, int hd) {
    uint8_t *table = (uint8_t *)malloc(T * hd), *scale = (uint8_t *)malloc(T * (hd / 32));
    for (int64_t i = 0; i < T * hd; i++) table[i] = rnd_e4m3();
    for (int64_t i = 0; i < T * (hd / 32); i++) scale[i] = (uint8_t)(110 + rnd_u64() % 30);
    int64_t *rows = (int64_t *)malloc(8 * R * ncols);
    for (int64_t i = 0; i < R * ncols; i++) rows[i] = (int64_t)(rnd_u64() % T);
    const int64_t E = (int64_t)ncols * hd;
    float *ref = (float *)malloc(4 * R * E), *got = (float *)malloc(4 * R * E);
    for (int64_t r = 0; r < R; r++)
        for (int c = 0; c < ncols; c++) {
            const uint8_t *q = table + (size_t)rows[r * ncols + c] * hd;
            const uint8_t *sc = scale + (size_t)rows[r * ncols + c] * (hd / 32);
            for (int d = 0; d < hd; d++)
                ref[r * E + c * hd + d] = di_bf16_round(di_e4m3_to_f32(q[d]) * di_e8m0_to_f32(sc[d / 32]));
        }
    uint8_t *dt = (uint8_t *)dev_upload(table, T * hd), *ds = (uint8_t *)dev_upload(scale, T * (hd / 32));
    int64_t *dr = (int64_t *)dev_upload(rows, 8 * R * ncols);
    float *de = (float *)dev_poisoned(4 * R * E);
    di_cuda_engram_gather(dt, ds, dr, R, ncols, hd, de, 0);
    dev_download(got, de, 4 * R * E);
    char shape[64];
    snprintf(shape, sizeof shape, "T=%lld R=%lld cols=%d hd=%d", (long long)T, (long long)R, ncols, hd);
    compare("engram_gather", shape, got, ref, R * E, "exact");
    cudaFree(dt), cudaFree(ds), cudaFree(dr), cudaFree(de);
    free(table), free(scale), free(rows), free(ref), free(got);
}

/* exact on moderate-range bf16 inputs; then batch invariance on wide ones */
static void test_engram_gate(int64_t R, int n, int64_t D) {
    const float eps = 1e-20f, isd = (float)(1.0 / sqrt((double)D));
    float *X = (float *)malloc(4 * R * n * D), *kv = (float *)malloc(4 * R * (n + 1) * D), *qk = (float *)malloc(4 * n * D);
    float *ref = (float *)malloc(4 * R * n * D), *got = (float *)malloc(4 * R * n * D);
    fill_moderate(X, R * n * D, 1.0f);
    fill_moderate(kv, R * (n + 1) * D, 1.0f);
    for (int64_t i = 0; i < n * D; i++) qk[i] = rnd_moderate(1.0f) * rnd_moderate(0.25f); /* q_weight * k_weight */
    memcpy(ref, X, 4 * R * n * D);
    di_cpu_engram_gate(ref, kv, qk, R, n, D, eps, isd);
    uint16_t *dX = dev_upload_bf16(X, R * n * D); /* the stream, bf16 (X is on the grid) */
    float *dkv = (float *)dev_upload(kv, 4 * R * (n + 1) * D), *dqk = (float *)dev_upload(qk, 4 * n * D);
    di_cuda_engram_gate(dX, dkv, dqk, R, n, D, eps, isd, 0);
    dev_download_bf16(got, dX, R * n * D);
    char shape[64];
    snprintf(shape, sizeof shape, "R=%lld n=%d D=%lld", (long long)R, n, (long long)D);
    compare("engram_gate", shape, got, ref, R * n * D, "exact(mod)");

    /* batch invariance: the last m rows in one call vs each alone */
    fill_wide(X, R * n * D, 1.0f);
    fill_wide(kv, R * (n + 1) * D, 1.0f);
    CK(cudaMemcpy(dkv, kv, 4 * R * (n + 1) * D, cudaMemcpyHostToDevice));
    float *one = (float *)malloc(4 * R * n * D);
    dev_copy_bf16(dX, X, R * n * D);
    for (int64_t r = 0; r < R; r++)
        di_cuda_engram_gate(dX + r * n * D, dkv + r * (n + 1) * D, dqk, 1, n, D, eps, isd, 0);
    dev_download_bf16(one, dX, R * n * D);
    static const int64_t ms[] = {3, 8, 17};
    for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++) {
        const int64_t m = ms[k] < R ? ms[k] : R, off = R - m;
        dev_copy_bf16(dX, X, R * n * D);
        di_cuda_engram_gate(dX + off * n * D, dkv + off * (n + 1) * D, dqk, m, n, D, eps, isd, 0);
        dev_download_bf16(got, dX, R * n * D);
        snprintf(shape, sizeof shape, "R=%lld n=%d D=%lld (alone vs batch)", (long long)m, n, (long long)D);
        compare("engram_gate batch", shape, got + off * n * D, one + off * n * D, m * n * D, "batch-inv");
    }
    cudaFree(dX), cudaFree(dkv), cudaFree(dqk);
    free(X), free(kv), free(qk), free(ref), free(got), free(one);
}

/* G groups of an FP8 (32x32 e8m0 scales) or FP4 (1x32) weight [N, K] with random codes and scales
 * near 1, each group's own device copy; rows[g] activation rows each: offsets, the largest group,
 * the active-group list (groups with rows in ascending order, then -1: di_cuda_moe_group's) and
 * their device copies; the pair calls' second weight set, the groups in reverse order (d_rwd) */
typedef struct grp_case {
    di_weight shape; /* dtype and shape only */
    std::vector<void *> wd, ws;
    std::vector<int> off, act;
    size_t dbytes, sbytes; /* a group's weight codes and scales */
    int M, max_rows;
    const uint8_t **d_wd, **d_ws;
    const uint8_t **d_rwd, **d_rws; /* [G] wd / ws reversed */
    int *d_off, *d_act;
} grp_case;
static grp_case grp_make(di_dtype dt, int64_t K, int64_t N, const int *rows, int G) {
    grp_case c;
    const bool fp4 = dt == DI_DT_I8;
    const size_t dbytes = fp4 ? (size_t)N * K / 2 : (size_t)N * K;
    const size_t sbytes = fp4 ? (size_t)N * (K / 32) : (size_t)((N + 31) / 32) * ((K + 31) / 32);
    c.dbytes = dbytes, c.sbytes = sbytes;
    c.shape = di_weight{};
    c.shape.dtype = dt;
    c.shape.rows = N;
    c.shape.cols = K;
    c.wd.resize(G), c.ws.resize(G), c.off.assign(G + 1, 0), c.act.assign(G, -1);
    c.max_rows = 0;
    for (int g = 0, j = 0; g < G; g++) {
        c.off[g + 1] = c.off[g] + rows[g];
        c.max_rows = rows[g] > c.max_rows ? rows[g] : c.max_rows;
        if (rows[g]) c.act[j++] = g;
    }
    c.M = c.off[G];
    std::vector<uint8_t> hb(dbytes), hs(sbytes);
    for (int g = 0; g < G; g++) {
        for (size_t i = 0; i < dbytes; i++) hb[i] = fp4 ? (uint8_t)rnd_u64() : rnd_e4m3();
        for (size_t i = 0; i < sbytes; i++) hs[i] = (uint8_t)(118 + rnd_u64() % 12);
        c.wd[g] = dev_upload(hb.data(), dbytes);
        c.ws[g] = dev_upload(hs.data(), sbytes);
    }
    c.d_wd = (const uint8_t **)dev_upload(c.wd.data(), sizeof(void *) * G);
    c.d_ws = (const uint8_t **)dev_upload(c.ws.data(), sizeof(void *) * G);
    const std::vector<void *> rwd(c.wd.rbegin(), c.wd.rend()), rws(c.ws.rbegin(), c.ws.rend());
    c.d_rwd = (const uint8_t **)dev_upload(rwd.data(), sizeof(void *) * G);
    c.d_rws = (const uint8_t **)dev_upload(rws.data(), sizeof(void *) * G);
    c.d_off = (int *)dev_upload(c.off.data(), sizeof(int) * (G + 1));
    c.d_act = (int *)dev_upload(c.act.data(), sizeof(int) * G);
    return c;
}
static void grp_free(grp_case *c) {
    for (size_t g = 0; g < c->wd.size(); g++) cudaFree(c->wd[g]), cudaFree(c->ws[g]);
    cudaFree((void *)c->d_wd), cudaFree((void *)c->d_ws), cudaFree(c->d_off), cudaFree(c->d_act);
    cudaFree((void *)c->d_rwd), cudaFree((void *)c->d_rws);
}

/* a w1 / w3 pair launch's outputs (device ya, yb, n values each) against each weight set's own
 * result (host ref_a, ref_b), bit for bit: "<name>.pair_a<suffix>", "<name>.pair_b<suffix>" */
static void check_pair(const char *name, const char *suffix, const char *shp, const float *ya, const float *yb,
                       const float *ref_a, const float *ref_b, int64_t n) {
    float *got = host_poisoned(n);
    char op[96];
    dev_download(got, ya, sizeof(float) * (size_t)n);
    snprintf(op, sizeof op, "%s.pair_a%s", name, suffix);
    compare(op, shp, got, ref_a, n, "exact");
    dev_download(got, yb, sizeof(float) * (size_t)n);
    snprintf(op, sizeof op, "%s.pair_b%s", name, suffix);
    compare(op, shp, got, ref_b, n, "exact");
    free(got);
}

/* the row-tile list of G groups at offsets off (di_group_tiles, as the grouping kernels make it): each
 * group's bt-row tiles {group, first row, rows, tile's first row}, groups ascending, then group -1
 * entries up to cap; false where the tiles overrun cap (di_group_tiles_cap too small) */
static bool want_tile_list(const std::vector<int> &off, int G, int bt, int cap, std::vector<int> *l) {
    l->clear();
    for (int g = 0; g < G; g++)
        for (int m0 = 0; m0 < off[g + 1] - off[g]; m0 += bt) l->insert(l->end(), {g, off[g], off[g + 1] - off[g], m0});
    const bool fits = (int)l->size() <= 4 * cap;
    while ((int)l->size() < 4 * cap) l->insert(l->end(), {-1, 0, 0, 0});
    return fits;
}

/* c's list of the tiles a grouped call of its shape launches over (di_cuda_linear_group_tile),
 * built on the host and noted on g_cx for c.d_off (list NULL where the call takes none); then
 * grp_tiles_drop */
static di_group_tiles grp_tiles(const grp_case &c) {
    const int G = (int)c.wd.size();
    di_group_tiles t = {NULL, di_cuda_linear_group_tile(&g_cx, &c.shape, G, c.M, c.max_rows), 0};
    t.cap = di_group_tiles_cap(t.bt, G, c.M, c.max_rows);
    std::vector<int> l;
    if (t.bt <= 0 || t.cap <= 0) return t;
    if (!want_tile_list(c.off, G, t.bt, t.cap, &l)) {
        printf("FAIL  group_tiles_cap: %d tiles of %d rows > cap %d\n", (int)l.size() / 4, t.bt, t.cap);
        g_fail++;
        return di_group_tiles{NULL, 0, 0};
    }
    t.list = (int *)dev_upload(l.data(), sizeof(int) * l.size());
    di_cuda_group_tiles_note(&g_cx, c.d_off, &t, 1);
    return t;
}
static void grp_tiles_drop(const grp_case &c, di_group_tiles *t) {
    di_cuda_group_tiles_forget(&g_cx, c.d_off);
    cudaFree(t->list);
    t->list = NULL;
}

/* x [M, K] on the device copied to *copy row i at M - 1 - i, and the device list of its rows in
 * x's order (the MoE's gather: rows through a list, anywhere) */
static const float **rows_reversed(const float *x, int M, int64_t K, float **copy) {
    *copy = (float *)dev_poisoned(sizeof(float) * (size_t)M * K);
    std::vector<const float *> xr(M);
    for (int i = 0; i < M; i++) {
        cudaMemcpy(*copy + (size_t)(M - 1 - i) * K, x + (size_t)i * K, sizeof(float) * K, cudaMemcpyDeviceToDevice);
        xr[i] = *copy + (size_t)(M - 1 - i) * K;
    }
    return (const float **)dev_upload(xr.data(), sizeof(void *) * M);
}

/* ---- grouped quantised linear: each group's rows equal that group computed alone -- a single-matrix
 * call on the exact kernel; a one-group grouped call on the tensor-core one (single matrices there
 * may split K by their shape, groups never do) ---- */
static void test_linear_grouped1(di_dtype dt, int64_t K, int64_t N, const int *rows, int G, bool exact) {
    g_cx.exact = exact;
    const bool fp4 = dt == DI_DT_I8;
    grp_case c = grp_make(dt, K, N, rows, G);
    const int M = c.M, max_rows = c.max_rows;
    const std::vector<int> &off = c.off;
    const di_weight shape = c.shape;
    float *hx = (float *)malloc(sizeof(float) * (size_t)(M ? M : 1) * K);
    fill_moderate(hx, (int64_t)M * K, 2.0f);
    float *x = (float *)dev_upload(hx, sizeof(float) * (size_t)M * K);
    float *yg = (float *)dev_poisoned(sizeof(float) * (size_t)M * N), *y1 = (float *)dev_poisoned(sizeof(float) * (size_t)M * N);
    for (int g = 0; g < G; g++) { /* reference: one call per group */
        di_weight w = shape;
        w.data = c.wd[g];
        w.scale = (const uint8_t *)c.ws[g];
        if (exact) {
            di_cuda_linear_quant(&g_cx, &w, x + (size_t)off[g] * K, rows[g], y1 + (size_t)off[g] * N);
        } else if (rows[g]) {
            const uint8_t **d1w = (const uint8_t **)dev_upload(&c.wd[g], sizeof(void *));
            const uint8_t **d1s = (const uint8_t **)dev_upload(&c.ws[g], sizeof(void *));
            const int one[2] = {0, rows[g]};
            int *d1o = (int *)dev_upload(one, sizeof one);
            di_cuda_linear_quant_grouped(&g_cx, &shape, d1w, d1s, d1o, NULL, 1, rows[g], rows[g],
                                         x + (size_t)off[g] * K, y1 + (size_t)off[g] * N);
            cudaFree((void *)d1w), cudaFree((void *)d1s), cudaFree(d1o);
        }
    }
    di_cuda_linear_quant_grouped(&g_cx, &shape, c.d_wd, c.d_ws, c.d_off, NULL, G, M, max_rows, x, yg);
    float *a = host_poisoned((int64_t)M * N), *b = host_poisoned((int64_t)M * N);
    dev_download(a, yg, sizeof(float) * (size_t)M * N);
    dev_download(b, y1, sizeof(float) * (size_t)M * N);
    char shp[96];
    snprintf(shp, sizeof shp, "%s %s G=%d M=%d K=%lld N=%lld", exact ? "exact" : "mma", fp4 ? "fp4" : "fp8", G, M,
             (long long)K, (long long)N);
    compare("linear_quant_grouped", shp, a, b, (int64_t)M * N, "exact");
    /* the same through the active-group list, which launches min(G, M) group slots */
    float *ya = (float *)dev_poisoned(sizeof(float) * (size_t)M * N);
    di_cuda_linear_quant_grouped(&g_cx, &shape, c.d_wd, c.d_ws, c.d_off, c.d_act, G, M, max_rows, x, ya);
    dev_download(a, ya, sizeof(float) * (size_t)M * N);
    compare("linear_quant_grouped.active", shp, a, b, (int64_t)M * N, "exact");
    /* the pair call (w1 and w3 over one x): weight set b = the same weights in reverse group order */
    {
        float *yb1 = (float *)dev_poisoned(sizeof(float) * (size_t)M * N), *yp = (float *)dev_poisoned(sizeof(float) * (size_t)M * N);
        float *yb2 = (float *)dev_poisoned(sizeof(float) * (size_t)M * N);
        di_cuda_linear_quant_grouped(&g_cx, &shape, c.d_rwd, c.d_rws, c.d_off, c.d_act, G, M, max_rows, x, yb1);
        di_cuda_linear_quant_grouped_pair(&g_cx, &shape, c.d_wd, c.d_ws, c.d_rwd, c.d_rws, c.d_off, c.d_act, G, M,
                                          max_rows, x, NULL, yp, yb2);
        float *c1 = host_poisoned((int64_t)M * N);
        dev_download(c1, yb1, sizeof(float) * (size_t)M * N);
        check_pair("linear_quant_grouped", "", shp, yp, yb2, b, c1, (int64_t)M * N);
        if (!exact && M > 0) { /* x's rows through a list (the MoE's gather) */
            float *xp;
            const float **d_xr = rows_reversed(x, M, K, &xp);
            di_cuda_linear_quant_grouped_pair(&g_cx, &shape, c.d_wd, c.d_ws, c.d_rwd, c.d_rws, c.d_off, c.d_act, G, M,
                                              max_rows, NULL, d_xr, yp, yb2);
            check_pair("linear_quant_grouped", " rows", shp, yp, yb2, b, c1, (int64_t)M * N);
            cudaFree(xp), cudaFree((void *)d_xr);
        }
        free(c1);
        cudaFree(yb1), cudaFree(yb2), cudaFree(yp);
    }
    cudaFree(ya);
    grp_free(&c);
    cudaFree(x), cudaFree(yg), cudaFree(y1);
    free(hx), free(a), free(b);
    g_cx.exact = false;
}
static void test_linear_grouped(di_dtype dt, int64_t K, int64_t N, const int *rows, int G) {
    test_linear_grouped1(dt, K, N, rows, G, true);
    test_linear_grouped1(dt, K, N, rows, G, false);
}

/* ---- the decode-sized GEMM twin against the tiled kernel: bit for bit. G == 0: one matrix of
 * rows[0] rows (K splits from its shape); else G groups, through the active list too. odd_scales
 * (FP8): scale bytes 0 (2^-127, subnormal) and 255 (NaN) in the first 32-row block, K blocks 1 and
 * 6: their decode in both kernels ---- */
static void test_gemv_twin(di_dtype dt, int64_t K, int64_t N, const int *rows, int G, bool odd_scales = false) {
    const bool fp4 = dt == DI_DT_I8, single = G == 0;
    const int ng = single ? 1 : G;
    grp_case c = grp_make(dt, K, N, rows, ng);
    if (odd_scales && !fp4) {
        const uint8_t zero = 0, nan_byte = 255;
        cudaMemcpy((uint8_t *)c.ws[0] + 1, &zero, 1, cudaMemcpyHostToDevice);
        cudaMemcpy((uint8_t *)c.ws[0] + 6, &nan_byte, 1, cudaMemcpyHostToDevice);
    }
    const int M = c.M, max_rows = c.max_rows;
    float *hx = (float *)malloc(sizeof(float) * (size_t)M * K);
    fill_wide(hx, (int64_t)M * K, 1.0f);
    float *x = (float *)dev_upload(hx, sizeof(float) * (size_t)M * K);
    const int64_t per_group = single ? M : (M + ng - 1) / ng;
    char shp[112];
    snprintf(shp, sizeof shp, "%s %s M=%d K=%lld N=%lld%s%s", fp4 ? "fp4" : "fp8", single ? "one" : "groups", M,
             (long long)K, (long long)N, odd_scales ? " odd-scales" : "",
             di_cuda_gemv_ok(false, !single, K, per_group < max_rows ? per_group : max_rows, 1) ? "" : " NOT-TWIN");
    float *a = host_poisoned((int64_t)M * N), *b = host_poisoned((int64_t)M * N);
    /* groups: with and without the active list, and through a row-tile list */
    for (int variant = 0; variant < (single ? 1 : 3); variant++) {
        const int with_active = variant & 1;
        float *y[2];
        for (int tiled = 0; tiled < 2; tiled++) {
            g_cx.tiled_only = tiled;
            di_group_tiles tl = {NULL, 0, 0};
            if (variant == 2 && !tiled) tl = grp_tiles(c);
            y[tiled] = (float *)dev_poisoned(sizeof(float) * (size_t)M * N);
            if (single)
                di_cuda_linear_mma(&g_cx, &c.shape, (const uint8_t *)c.wd[0], (const uint8_t *)c.ws[0], NULL, NULL, NULL,
                                   NULL, 1, M, M, x, y[tiled]);
            else
                di_cuda_linear_mma(&g_cx, &c.shape, NULL, NULL, c.d_wd, c.d_ws, c.d_off, with_active ? c.d_act : NULL, ng,
                                   M, max_rows, x, y[tiled]);
            if (variant == 2 && !tiled && !tl.list) {
                printf("FAIL  gemv_twin.tiles: %s takes no tile list\n", shp);
                g_fail++;
            }
            if (tl.list) grp_tiles_drop(c, &tl);
        }
        g_cx.tiled_only = false;
        dev_download(a, y[0], sizeof(float) * (size_t)M * N);
        dev_download(b, y[1], sizeof(float) * (size_t)M * N);
        static const char *names[3] = {"gemv_twin", "gemv_twin.active", "gemv_twin.tiles"};
        compare(names[variant], shp, a, b, (int64_t)M * N, "twin");
        cudaFree(y[0]), cudaFree(y[1]);
    }
    if (strstr(shp, "NOT-TWIN")) { /* a case meant for the twin that does not reach it */
        printf("FAIL  gemv_twin: %s does not take the decode-sized kernel\n", shp);
        g_fail++;
    }
    grp_free(&c);
    cudaFree(x);
    free(hx), free(a), free(b);
}

/* ---- the int8 FP4 twin (di_cuda_ctx.fp4_imma; at most DI_GEMV_IMMA_ROWS rows a group on average)
 * against the exact kernel, bit for bit: its block sums are exact and its fold is the CPU's. G
 * groups through the slot list and the active list, then as the w1 / w3 pair over a row list (the
 * MoE's gather), the second weight set being the groups in reverse order ---- */
static void test_gemv_imma(int64_t K, int64_t N, const int *rows, int G, bool nan_scale = false) {
    grp_case c = grp_make(DI_DT_I8, K, N, rows, G);
    if (nan_scale) { /* scale byte 255 (NaN) at row 3, block 5 of group 0: that chunk takes di_dev_e8m0 */
        const uint8_t nan_byte = 255;
        cudaMemcpy((uint8_t *)c.ws[0] + 3 * (K / 32) + 5, &nan_byte, 1, cudaMemcpyHostToDevice);
    }
    const int M = c.M, max_rows = c.max_rows;
    const int64_t per_group = (M + G - 1) / G, n = (int64_t)M * N;
    float *hx = (float *)malloc(sizeof(float) * (size_t)M * K);
    fill_wide(hx, (int64_t)M * K, 1.0f);
    float *x = (float *)dev_upload(hx, sizeof(float) * (size_t)M * K);
    const bool taken = per_group <= DI_GEMV_IMMA_ROWS && di_cuda_gemv_ok(false, true, K, per_group, 1) &&
                       di_cuda_gemv_imma_ok(K, max_rows);
    char shp[112];
    snprintf(shp, sizeof shp, "fp4 G=%d M=%d max=%d K=%lld N=%lld%s%s", G, M, max_rows, (long long)K, (long long)N,
             nan_scale ? " nan-scale" : "", taken ? "" : " NOT-IMMA");
    float *ref_a = (float *)dev_poisoned(sizeof(float) * (size_t)n), *ref_b = (float *)dev_poisoned(sizeof(float) * (size_t)n);
    g_cx.exact = true;
    di_cuda_linear_quant_grouped(&g_cx, &c.shape, c.d_wd, c.d_ws, c.d_off, NULL, G, M, max_rows, x, ref_a);
    di_cuda_linear_quant_grouped(&g_cx, &c.shape, c.d_rwd, c.d_rws, c.d_off, NULL, G, M, max_rows, x, ref_b);
    g_cx.exact = false;
    g_cx.fp4_imma = true;
    float *a = host_poisoned(n), *b = host_poisoned(n), *hb = host_poisoned(n); /* b, hb: the two sets' references */
    dev_download(b, ref_a, sizeof(float) * (size_t)n);
    dev_download(hb, ref_b, sizeof(float) * (size_t)n);
    for (int variant = 0; variant < 3; variant++) { /* the slots, the active list, a row-tile list */
        float *y = (float *)dev_poisoned(sizeof(float) * (size_t)n);
        di_group_tiles tl = {NULL, 0, 0};
        if (variant == 2 && !(tl = grp_tiles(c)).list) {
            printf("FAIL  gemv_imma.tiles: %s takes no tile list\n", shp);
            g_fail++;
        }
        di_cuda_linear_quant_grouped(&g_cx, &c.shape, c.d_wd, c.d_ws, c.d_off, variant ? c.d_act : NULL, G, M, max_rows,
                                     x, y);
        if (tl.list) grp_tiles_drop(c, &tl);
        dev_download(a, y, sizeof(float) * (size_t)n);
        static const char *names[3] = {"gemv_imma", "gemv_imma.active", "gemv_imma.tiles"};
        compare(names[variant], shp, a, b, n, "exact");
        cudaFree(y);
    }
    /* the pair over x's rows through a list */
    float *xp;
    const float **d_xr = rows_reversed(x, M, K, &xp);
    float *ya = (float *)dev_poisoned(sizeof(float) * (size_t)n), *yb = (float *)dev_poisoned(sizeof(float) * (size_t)n);
    di_cuda_linear_quant_grouped_pair(&g_cx, &c.shape, c.d_wd, c.d_ws, c.d_rwd, c.d_rws, c.d_off, c.d_act, G, M,
                                      max_rows, NULL, d_xr, ya, yb);
    check_pair("gemv_imma", "", shp, ya, yb, b, hb, n);
    { /* the pair over the row list through a row-tile list */
        di_group_tiles tl = grp_tiles(c);
        CK(cudaMemset(ya, 0xff, sizeof(float) * (size_t)n));
        CK(cudaMemset(yb, 0xff, sizeof(float) * (size_t)n));
        di_cuda_linear_quant_grouped_pair(&g_cx, &c.shape, c.d_wd, c.d_ws, c.d_rwd, c.d_rws, c.d_off, c.d_act, G, M,
                                          max_rows, NULL, d_xr, ya, yb);
        if (tl.list) grp_tiles_drop(c, &tl);
        check_pair("gemv_imma", " tiles", shp, ya, yb, b, hb, n);
    }
    { /* the same list over a buffer whose producer made its digits (the FFN input's, by hc_block_in):
       * the twin reads them through the list, no gathered copy */
        const int64_t nb = K / 32;
        di_cuda_act_forms made = {NULL};
        made.digits = (uint8_t *)dev_poisoned((size_t)(3 * M * K));
        made.digit_scale = (float *)dev_poisoned(sizeof(float) * (size_t)(M * nb));
        di_cuda_act_quant_digits(xp, NULL, nb, M * nb, made.digits, made.digit_scale, 0);
        di_cuda_act_forms_note(&g_cx, xp, M, K, made);
        CK(cudaMemset(ya, 0xff, sizeof(float) * (size_t)n));
        CK(cudaMemset(yb, 0xff, sizeof(float) * (size_t)n));
        di_cuda_linear_quant_grouped_pair(&g_cx, &c.shape, c.d_wd, c.d_ws, c.d_rwd, c.d_rws, c.d_off, c.d_act, G, M,
                                          max_rows, xp, d_xr, ya, yb);
        di_cuda_act_forms_forget(&g_cx, xp);
        check_pair("gemv_imma", " made digits", shp, ya, yb, b, hb, n);
        cudaFree(made.digits), cudaFree(made.digit_scale);
    }
    g_cx.fp4_imma = false;
    if (!taken) { /* a case meant for the int8 twin that does not reach it */
        printf("FAIL  gemv_imma: %s does not take the int8 kernel\n", shp);
        g_fail++;
    }
    cudaFree(xp), cudaFree((void *)d_xr), cudaFree(ya), cudaFree(yb), cudaFree(ref_a), cudaFree(ref_b);
    cudaFree(x);
    grp_free(&c);
    free(hx), free(a), free(b), free(hb);
}

/* the int8 twin's one-row kernel making the w1 / w3 pair's SwiGLU itself (di_cuda_linear_mma_pair_swiglu)
 * against the pair and di_cuda_swiglu_forms' digits on its outputs, bit for bit: h, the digits, their
 * scales; over x's rows through a list (the MoE's gather), with and without the rows' weights.
 * tiles: through a row-tile list of one-row tiles (groups of up to a few rows, one a group on average) */
static void test_gemv_imma_swiglu(int64_t K, int64_t N, const int *rows, int G, bool with_wt, bool tiles = false) {
    grp_case c = grp_make(DI_DT_I8, K, N, rows, G);
    const int M = c.M, max_rows = c.max_rows;
    const int64_t n = (int64_t)M * N, nb = n / 32;
    const float lim = 10.0f;
    float *hx = (float *)malloc(sizeof(float) * (size_t)M * K), *hw = (float *)malloc(sizeof(float) * (size_t)M);
    fill_wide(hx, (int64_t)M * K, 1.0f);
    for (int i = 0; i < M; i++) hw[i] = 0.25f + rnd_unit();
    float *x = (float *)dev_upload(hx, sizeof(float) * (size_t)M * K), *wt = (float *)dev_upload(hw, sizeof(float) * (size_t)M);
    float *xp;
    const float **d_xr = rows_reversed(x, M, K, &xp);
    char shp[112];
    snprintf(shp, sizeof shp, "fp4 G=%d M=%d max=%d K=%lld N=%lld%s%s", G, M, max_rows, (long long)K, (long long)N,
             with_wt ? " wt" : "", tiles ? " tiles" : "");
    g_cx.fp4_imma = true;
    /* the reference: the pair, then the SwiGLU with its digits */
    float *ya = (float *)dev_poisoned(sizeof(float) * (size_t)n), *yb = (float *)dev_poisoned(sizeof(float) * (size_t)n);
    di_cuda_linear_quant_grouped_pair(&g_cx, &c.shape, c.d_wd, c.d_ws, c.d_rwd, c.d_rws, c.d_off, c.d_act, G, M,
                                      max_rows, NULL, d_xr, ya, yb);
    uint8_t *rq = (uint8_t *)dev_poisoned(3 * n), *dq = (uint8_t *)dev_poisoned(3 * n);
    float *rs = (float *)dev_poisoned(4 * nb), *ds = (float *)dev_poisoned(4 * nb), *h = (float *)dev_poisoned(4 * n);
    const di_cuda_act_forms ref_forms = {NULL, NULL, NULL, rq, rs};
    di_cuda_swiglu_forms(ya, yb, M, N, lim, with_wt ? wt : NULL, ya, &ref_forms, 0);
    const di_gemv_swiglu sw = {lim, with_wt ? wt : NULL, h, dq, ds};
    di_group_tiles tl = {NULL, 0, 0};
    if (tiles) tl = grp_tiles(c);
    if (tiles && tl.bt != 1) {
        printf("FAIL  gemv_imma_swiglu: %s lists tiles of %d rows (1 wanted)\n", shp, tl.bt);
        g_fail++;
    }
    const bool taken = di_cuda_linear_mma_pair_swiglu(&g_cx, &c.shape, c.d_wd, c.d_ws, c.d_rwd, c.d_rws, c.d_off, c.d_act, G, M,
                                                      max_rows, NULL, d_xr, &sw);
    if (tl.list) grp_tiles_drop(c, &tl);
    g_cx.fp4_imma = false;
    if (!taken) {
        printf("FAIL  gemv_imma_swiglu: %s does not take the one-row kernel\n", shp);
        g_fail++;
    } else {
        float *a = host_poisoned(n), *b = host_poisoned(n);
        dev_download(a, h, sizeof(float) * (size_t)n);
        dev_download(b, ya, sizeof(float) * (size_t)n);
        compare("gemv_imma_swiglu.h", shp, a, b, n, "exact");
        const char *names[2] = {"gemv_imma_swiglu digits", "gemv_imma_swiglu digit scales"};
        compare_quant_forms(names, shp, dq, ds, rq, rs, 3 * n, nb);
        free(a), free(b);
    }
    cudaFree(ya), cudaFree(yb), cudaFree(rq), cudaFree(dq), cudaFree(rs), cudaFree(ds), cudaFree(h);
    cudaFree(xp), cudaFree((void *)d_xr), cudaFree(x), cudaFree(wt);
    grp_free(&c);
    free(hx), free(hw);
}

/* ---- two single matrices of one K over the same rows in one twin launch (di_cuda_linear_mma_set:
 * wq_a and wkv, the shared expert's w1 and w3), each output against its matrix alone on the tiled
 * kernel, bit for bit; N0 and N1 differ in their K splits, so the launch's blocks differ in warps.
 * wg (past 16 rows, di_cuda_ctx.wgmma): the set's one conversion of x and a wgmma call a matrix,
 * against each matrix's own call, bit for bit ---- */
static void test_gemv_set(di_dtype dt, int64_t K, int64_t N0, int64_t N1, int M, bool wg = false, bool blas = false) {
    const bool fp4 = dt == DI_DT_I8;
    const int rows[1] = {M};
    grp_case c[2] = {grp_make(dt, K, N0, rows, 1), grp_make(dt, K, N1, rows, 1)};
    float *hx = (float *)malloc(sizeof(float) * (size_t)M * K);
    fill_wide(hx, (int64_t)M * K, 1.0f);
    float *x = (float *)dev_upload(hx, sizeof(float) * (size_t)M * K);
    di_weight w[2];
    const di_weight *wp[2] = {&w[0], &w[1]};
    float *ys[2], *yr[2];
    for (int i = 0; i < 2; i++) {
        w[i] = c[i].shape;
        w[i].data = c[i].wd[0];
        w[i].scale = (const uint8_t *)c[i].ws[0];
        ys[i] = (float *)dev_poisoned(sizeof(float) * (size_t)M * w[i].rows);
        yr[i] = (float *)dev_poisoned(sizeof(float) * (size_t)M * w[i].rows);
    }
    char shp[112];
    snprintf(shp, sizeof shp, "%s M=%d K=%lld N=%lld+%lld", fp4 ? "fp4" : "fp8", M, (long long)K, (long long)N0,
             (long long)N1);
    g_cx.wgmma = wg;
    g_cx.blas_rows = blas ? 1 : 0; /* blas: the set and the singles on cuBLAS (from one row) */
    const int64_t blas_before = g_cx.counts.blas;
    if (!di_cuda_linear_mma_set(&g_cx, 2, wp, x, M, ys)) {
        printf("FAIL  %s: %s does not take the set's path\n", wg ? "wgmma_set" : "gemv_set", shp);
        g_fail++;
    }
    g_cx.tiled_only = !wg;
    for (int i = 0; i < 2; i++)
        di_cuda_linear_mma(&g_cx, &w[i], (const uint8_t *)w[i].data, w[i].scale, NULL, NULL, NULL, NULL, 1, M, M, x,
                           yr[i]);
    g_cx.tiled_only = false;
    g_cx.wgmma = false;
    g_cx.blas_rows = 0;
    if (blas && g_cx.counts.blas != blas_before + 4) {
        printf("FAIL  blas_set: %s took cuBLAS %lld times of 4\n", shp, (long long)(g_cx.counts.blas - blas_before));
        g_fail++;
    }
    for (int i = 0; i < 2; i++) {
        const int64_t n = (int64_t)M * w[i].rows;
        float *a = host_poisoned(n), *b = host_poisoned(n);
        dev_download(a, ys[i], sizeof(float) * (size_t)n);
        dev_download(b, yr[i], sizeof(float) * (size_t)n);
        static const char *names[3][2] = {{"gemv_set.a", "gemv_set.b"}, {"wgmma_set.a", "wgmma_set.b"},
                                          {"blas_set.a", "blas_set.b"}};
        compare(names[blas ? 2 : wg][i], shp, a, b, n, wg ? "exact" : "twin");
        free(a), free(b);
        cudaFree(ys[i]), cudaFree(yr[i]);
        grp_free(&c[i]);
    }
    cudaFree(x);
    free(hx);
}

/* The references of test_wgmma_grouping (b [M, N]: each group alone, or the two halves) against
 * di_cpu_linear on the host copies of the groups' weights, within quant_linear_bound (test_cuda_ops's
 * tensor-core bound). So the grouped forms, equal to these bit for bit, meet the CPU at the op
 * level too (not only end to end). Up to 2^27 products. */
static void grp_check_cpu(const grp_case &c, bool single, const float *hx, const float *b, const char *shp) {
    const int64_t K = c.shape.cols, N = c.shape.rows;
    if ((int64_t)c.M * N * K > ((int64_t)1 << 27)) return;
    const bool fp4 = c.shape.dtype == DI_DT_I8;
    std::vector<uint8_t> wd(c.dbytes), ws(c.sbytes);
    std::vector<float> ref((size_t)c.M * N);
    int64_t ndiff = 0, nout = 0;
    double worst = 0.0;
    for (size_t g = 0; g < c.wd.size(); g++) {
        const int64_t r0 = single ? 0 : c.off[g], rows = single ? c.M : c.off[g + 1] - c.off[g];
        if (!rows) continue;
        dev_download(wd.data(), c.wd[g], c.dbytes);
        dev_download(ws.data(), c.ws[g], c.sbytes);
        di_weight w = c.shape;
        w.data = wd.data();
        w.scale = ws.data();
        di_cpu_linear(&w, hx + r0 * K, rows, ref.data() + r0 * N, DI_LIN_QUANT);
        for (int64_t r = r0; r < r0 + rows; r++)
            for (int64_t n = 0; n < N; n++) {
                const float rf = ref[r * N + n], got = b[r * N + n];
                const double lim = quant_linear_bound(fp4, wd.data(), ws.data(), K, hx + r * K, n, rf);
                const double err = fabs((double)got - rf), of_bound = err != err ? INFINITY : err / lim;
                ndiff += memcmp(&got, &rf, 4) != 0;
                nout += !(err <= lim); /* NaN too */
                if (of_bound > worst) worst = of_bound;
            }
    }
    printf("%s  %-20s %-40s worst %.3f of the bound  differing %lld / %lld  [tensor-core bound]\n", nout ? "FAIL" : "PASS",
           "wgmma_grouping.cpu", shp, worst, (long long)ndiff, (long long)c.M * N);
    if (nout) g_fail++;
    else g_pass++;
}

/* ---- the wgmma GEMM (di_cuda_ctx.wgmma): its tiling and grouping, bit for bit --
 * G groups (each empty or of more than 8 rows) against one-group calls of each group and through
 * the active list and a row-tile list, and there as the w1 / w3 pair of one launch; G == 0: one
 * matrix of rows[0] rows against two calls on its two halves (both past 16 rows; 32-, 64- and
 * 128-token tiles where the halves and the whole differ). consumers 2 / 3: the calls under test take
 * that many consumer warpgroups, the references the other count (di_cuda_ctx.wg_consumers; 0: the
 * kernel's choice for both). The references against the CPU within a bound: grp_check_cpu. ---- */
static void test_wgmma_grouping(di_dtype dt, int64_t K, int64_t N, const int *rows, int G, int consumers = 0) {
    const bool fp4 = dt == DI_DT_I8, single = G == 0;
    const int ng = single ? 1 : G;
    grp_case c = grp_make(dt, K, N, rows, ng);
    const int M = c.M, max_rows = c.max_rows;
    g_cx.wgmma = true;
    float *hx = (float *)malloc(sizeof(float) * (size_t)M * K);
    fill_wide(hx, (int64_t)M * K, 1.0f);
    float *x = (float *)dev_upload(hx, sizeof(float) * (size_t)M * K);
    const int64_t avg = single ? M : (M + ng - 1) / ng, per_group = avg < max_rows ? avg : max_rows;
    char shp[112];
    snprintf(shp, sizeof shp, "%s %s M=%d K=%lld N=%lld%s", fp4 ? "fp4" : "fp8", single ? "one" : "groups", M,
             (long long)K, (long long)N, di_cuda_wgmma_taken(&g_cx, fp4, K, per_group) ? "" : " NOT-WGMMA");
    float *a = host_poisoned((int64_t)M * N), *b = host_poisoned((int64_t)M * N);
    float *yr = (float *)dev_poisoned(sizeof(float) * (size_t)M * N);
    g_cx.wg_consumers = consumers ? 5 - consumers : 0;
    if (single) { /* the two halves alone, with the whole's K split (the split follows the rows; the
                   * whole may weigh three-consumer CTAs for it, so ask as a call does) */
        const int h = M / 2;
        int blocks, whole_consumers;
        g_cx.wg_ksplit = di_cuda_wg_ksplit(&g_cx, fp4, N, M, K, &blocks, &whole_consumers);
        di_cuda_linear_mma(&g_cx, &c.shape, (const uint8_t *)c.wd[0], (const uint8_t *)c.ws[0], NULL, NULL, NULL, NULL, 1,
                           h, h, x, yr);
        di_cuda_linear_mma(&g_cx, &c.shape, (const uint8_t *)c.wd[0], (const uint8_t *)c.ws[0], NULL, NULL, NULL, NULL, 1,
                           M - h, M - h, x + (size_t)h * K, yr + (size_t)h * N);
        g_cx.wg_ksplit = 0;
    } else { /* each group alone */
        for (int g = 0; g < ng; g++) {
            if (!rows[g]) continue;
            const uint8_t **d1w = (const uint8_t **)dev_upload(&c.wd[g], sizeof(void *));
            const uint8_t **d1s = (const uint8_t **)dev_upload(&c.ws[g], sizeof(void *));
            const int one[2] = {0, rows[g]};
            int *d1o = (int *)dev_upload(one, sizeof one);
            di_cuda_linear_mma(&g_cx, &c.shape, NULL, NULL, d1w, d1s, d1o, NULL, 1, rows[g], rows[g],
                               x + (size_t)c.off[g] * K, yr + (size_t)c.off[g] * N);
            cudaFree((void *)d1w), cudaFree((void *)d1s), cudaFree(d1o);
        }
    }
    dev_download(b, yr, sizeof(float) * (size_t)M * N);
    grp_check_cpu(c, single, hx, b, shp);
    g_cx.wg_consumers = consumers;
    for (int variant = 0; variant < (single ? 1 : 3); variant++) { /* groups: the active list, a row-tile list */
        float *y = (float *)dev_poisoned(sizeof(float) * (size_t)M * N);
        di_group_tiles tl = {NULL, 0, 0};
        if (variant == 2 && !(tl = grp_tiles(c)).list) {
            printf("FAIL  wgmma_grouping.tiles: %s takes no tile list\n", shp);
            g_fail++;
        }
        if (single)
            di_cuda_linear_mma(&g_cx, &c.shape, (const uint8_t *)c.wd[0], (const uint8_t *)c.ws[0], NULL, NULL, NULL, NULL,
                               1, M, M, x, y);
        else
            di_cuda_linear_mma(&g_cx, &c.shape, NULL, NULL, c.d_wd, c.d_ws, c.d_off, variant ? c.d_act : NULL, ng, M,
                               max_rows, x, y);
        if (tl.list) grp_tiles_drop(c, &tl);
        dev_download(a, y, sizeof(float) * (size_t)M * N);
        static const char *names[3] = {"wgmma_grouping", "wgmma_grouping.active", "wgmma_grouping.tiles"};
        compare(names[variant], shp, a, b, (int64_t)M * N, "exact");
        if (!single && variant > 0) { /* the w1 / w3 pair in one launch (set b: the weights in reverse
                                       * group order) against each set alone */
            float *yb = (float *)dev_poisoned(sizeof(float) * (size_t)M * N);
            float *pa = (float *)dev_poisoned(sizeof(float) * (size_t)M * N), *pb = (float *)dev_poisoned(sizeof(float) * (size_t)M * N);
            if (variant == 2) tl = grp_tiles(c);
            di_cuda_linear_mma(&g_cx, &c.shape, NULL, NULL, c.d_rwd, c.d_rws, c.d_off, c.d_act, ng, M, max_rows, x, yb);
            di_cuda_linear_mma_pair(&g_cx, &c.shape, c.d_wd, c.d_ws, c.d_rwd, c.d_rws, c.d_off, c.d_act, ng, M, max_rows, x,
                                    NULL, pa, pb);
            if (tl.list) grp_tiles_drop(c, &tl);
            float *c1 = host_poisoned((int64_t)M * N);
            dev_download(c1, yb, sizeof(float) * (size_t)M * N);
            check_pair("wgmma_grouping", variant == 2 ? " tiles" : "", shp, pa, pb, b, c1, (int64_t)M * N);
            { /* x's rows through a list (the MoE's gather) over a buffer whose producer made act_quant's
               * bf16 values (the MoE's input): the FP4 pair launch reads them through the list (FP8
               * pairs convert the gathered rows) */
                float *xp;
                const float **d_xr = rows_reversed(x, M, K, &xp);
                di_cuda_act_forms made = {NULL};
                made.qbf16 = (uint16_t *)dev_poisoned(sizeof(uint16_t) * (size_t)(M * K));
                di_cuda_act_quant_bf16(xp, NULL, K / 32, M * (K / 32), made.qbf16, 0);
                di_cuda_act_forms_note(&g_cx, xp, M, K, made);
                if (variant == 2) tl = grp_tiles(c);
                CK(cudaMemset(pa, 0xff, sizeof(float) * (size_t)M * N));
                CK(cudaMemset(pb, 0xff, sizeof(float) * (size_t)M * N));
                const int64_t gathers = g_cx.counts.wg_gather;
                di_cuda_linear_mma_pair(&g_cx, &c.shape, c.d_wd, c.d_ws, c.d_rwd, c.d_rws, c.d_off, c.d_act, ng, M,
                                        max_rows, xp, d_xr, pa, pb);
                if (tl.list) grp_tiles_drop(c, &tl);
                di_cuda_act_forms_forget(&g_cx, xp);
                check_pair("wgmma_grouping", variant == 2 ? " rows made qbf16 tiles" : " rows made qbf16", shp, pa, pb, b,
                           c1, (int64_t)M * N);
                if (fp4 && di_cuda_wgmma_taken(&g_cx, fp4, K, per_group) && g_cx.counts.wg_gather != gathers + 1) {
                    printf("FAIL  wgmma_grouping rows made qbf16: %s converted its gathered rows\n", shp);
                    g_fail++;
                }
                cudaFree(made.qbf16), cudaFree(xp), cudaFree((void *)d_xr);
            }
            free(c1);
            cudaFree(yb), cudaFree(pa), cudaFree(pb);
        }
        cudaFree(y);
    }
    { /* x's act_quant values as bf16 made by its producer (the SwiGLU's, di_cuda_swiglu_forms): the GEMM
       * reads them instead of converting x -- here a buffer of zeros, noted with the real x's values */
        const int64_t nb = K / 32;
        float *xz = (float *)dev_poisoned(sizeof(float) * (size_t)M * K), *y = (float *)dev_poisoned(sizeof(float) * (size_t)M * N);
        CK(cudaMemset(xz, 0, sizeof(float) * (size_t)M * K));
        di_cuda_act_forms made = {NULL};
        made.qbf16 = (uint16_t *)dev_poisoned(sizeof(uint16_t) * (size_t)M * K);
        di_cuda_act_quant_bf16(x, NULL, nb, M * nb, made.qbf16, 0);
        di_cuda_act_forms_note(&g_cx, xz, M, K, made);
        if (single)
            di_cuda_linear_mma(&g_cx, &c.shape, (const uint8_t *)c.wd[0], (const uint8_t *)c.ws[0], NULL, NULL, NULL, NULL,
                               1, M, M, xz, y);
        else
            di_cuda_linear_mma(&g_cx, &c.shape, NULL, NULL, c.d_wd, c.d_ws, c.d_off, c.d_act, ng, M, max_rows, xz, y);
        di_cuda_act_forms_forget(&g_cx, xz);
        dev_download(a, y, sizeof(float) * (size_t)M * N);
        compare("wgmma_grouping.made", shp, a, b, (int64_t)M * N, "exact");
        cudaFree(xz), cudaFree(y), cudaFree(made.qbf16);
    }
    if (strstr(shp, "NOT-WGMMA")) { /* a case meant for the wgmma kernel that does not reach it */
        printf("FAIL  wgmma_grouping: %s does not take the wgmma kernel\n", shp);
        g_fail++;
    }
    g_cx.wgmma = false;
    g_cx.wg_consumers = 0;
    grp_free(&c);
    cudaFree(x), cudaFree(yr);
    free(hx), free(a), free(b);
}

/* the wgmma kernel's K split of a single matrix (di_cuda_wg_ksplit_slots) on the H200's 132 CTA slots:
 * with two consumers a CTA, the splits session 34 measured fastest there (docs/PERFORMANCE.md) --
 * wo_b 3 and the shared expert's w1 / w3 4 and w2 1 at 256 rows, w1 / w3 5 at 128 -- none where the
 * unsplit grid fills the card twice over (a 4,096-row prefill); each split on 16-block boundaries,
 * covering K. With three allowed (session 38), the model's pick for its 1.27x longer CTAs of 1.5x
 * the rows: wo_b at 256 rows 2 splits of three consumers, the shared w1 / w3 5 of three, the rest
 * as before on two; the full grids left to the kernel (0). A host function: no device work. */
static void test_wg_ksplit(void) {
    static const struct {
        int64_t N, rows, K;
        int want, want3, want3_nc; /* splits with two consumers; splits and consumers with three allowed */
    } c[] = {{5120, 256, 8192, 3, 2, 3}, {2304, 256, 5120, 4, 5, 3}, {5120, 256, 2304, 1, 1, 2},
             {2304, 128, 5120, 5, 5, 2}, {5120, 4096, 8192, 1, 1, 0}, {512, 4096, 5120, 1, 1, 2}};
    for (const auto &t : c)
        for (int three = 0; three < 2; three++) {
            int blocks = 0, nc = -1;
            const int k = di_cuda_wg_ksplit_slots(t.N, t.rows, t.K, 132, &blocks, three ? &nc : NULL);
            const int64_t nb = t.K / 32;
            const int want = three ? t.want3 : t.want, want_nc = three ? t.want3_nc : -1;
            const bool ok = k == want && nc == want_nc && blocks % 16 == 0 && (int64_t)k * blocks >= nb &&
                            (int64_t)(k - 1) * blocks < nb;
            printf("%s  %-20s N=%lld rows=%lld K=%lld  %d splits of %d blocks, consumers %d (want %d, %d)\n",
                   ok ? "PASS" : "FAIL", "wg_ksplit", (long long)t.N, (long long)t.rows, (long long)t.K, k, blocks, nc,
                   want, want_nc);
            if (ok) g_pass++;
            else g_fail++;
        }
}

/* every 16-bit input of di_e2m1x4_to_e4m3x4 against the e2m1 table */
__global__ void e2m1_widen_kernel(uint32_t *out) {
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < 65536) out[i] = di_e2m1x4_to_e4m3x4(i);
}
static void test_e2m1_widen(void) {
    static const uint8_t mag[8] = {0x00, 0x30, 0x38, 0x3C, 0x40, 0x44, 0x48, 0x4C}; /* 0 .. 6 as e4m3 */
    uint32_t *d = (uint32_t *)dev_poisoned(4 * 65536);
    e2m1_widen_kernel<<<256, 256>>>(d);
    CK(cudaGetLastError());
    std::vector<uint32_t> got(65536);
    dev_download(got.data(), d, 4 * 65536);
    std::vector<float> a(65536), b(65536);
    for (uint32_t i = 0; i < 65536; i++) {
        uint32_t ref = 0;
        for (int n = 0; n < 4; n++) {
            const uint32_t c = (i >> (4 * n)) & 15;
            ref |= (uint32_t)(mag[c & 7] | (c & 8 ? 0x80 : 0)) << (8 * n);
        }
        memcpy(&a[i], &got[i], 4);
        memcpy(&b[i], &ref, 4);
    }
    compare("e2m1_widen", "all 65536 inputs (bits as floats)", a.data(), b.data(), 65536, "twin");
    cudaFree(d);
}

/* every 16-bit input of di_e2m1x4_to_off64 -> di_off64x4_to_bf16x4 (the wgmma GEMM's FP4
 * dequantisation), times e8m0 scales both ways (the one-fma path where the scale is plain, the fma
 * and multiply everywhere), against the e2m1 table times the scale as bf16 bits. A -0 code comes out
 * +0: the reference clears the sign of zeros (the GEMM's sums start from +0, so the sign of a zero
 * product never reaches an output). */
__global__ void e2m1_bf16_kernel(uint32_t e8, bool plain, uint32_t *out) {
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= 65536) return;
    uint32_t o[2];
    di_off64x4_to_bf16x4(di_e2m1x4_to_off64(i | (i * 2654435761u) << 16), di_e2m1_bf16_scale(e8, plain), plain,
                         o); /* bits 16.. must not matter */
    out[2 * i] = o[0];
    out[2 * i + 1] = o[1];
}
static void test_e2m1_bf16(void) {
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    static const uint32_t scales[] = {0, 1, 2, 100, 120, 127, 140, 248, 249, 250, 254};
    uint32_t *d = (uint32_t *)dev_poisoned(8 * 65536);
    std::vector<uint32_t> got(2 * 65536);
    std::vector<float> a(4 * 65536), b(4 * 65536);
    for (uint32_t e8 : scales)
        for (int plain = 0; plain < 2; plain++) {
            if (plain && !(e8 >= 2 && e8 <= 248)) continue; /* the plain scales */
            e2m1_bf16_kernel<<<256, 256>>>(e8, plain != 0, d);
            CK(cudaGetLastError());
            dev_download(got.data(), d, 8 * 65536);
            for (uint32_t i = 0; i < 65536; i++)
                for (int n = 0; n < 4; n++) {
                    const uint32_t c = (i >> (4 * n)) & 15;
                    const float v = ldexpf(c & 8 ? -mag[c & 7] : mag[c & 7], (int)e8 - 127) + 0.0f; /* exact; -0 -> +0 */
                    uint32_t ref_bits, got_bits = (got[2 * i + n / 2] >> (16 * (n & 1))) << 16;
                    memcpy(&ref_bits, &v, 4);
                    ref_bits &= 0xffff0000u;
                    memcpy(&a[4 * i + n], &got_bits, 4);
                    memcpy(&b[4 * i + n], &ref_bits, 4);
                }
            char shp[64];
            snprintf(shp, sizeof shp, "all 65536 inputs x 2^%d, %s (bits)", (int)e8 - 127, plain ? "plain" : "general");
            compare("e2m1_bf16", shp, a.data(), b.data(), 4 * 65536, "twin");
        }
    cudaFree(d);
}

/* every pair of e4m3 codes through di_e4m3x2_to_bf16x2_m112 and the multiply by
 * di_e4m3_bf16_scale (the wgmma GEMM's plain FP8 dequantisation) against the CPU's e4m3 table times
 * the scale, as bf16 bits, at plain scale bytes (10..142); NaN codes (0x7f, 0xff) come out finite
 * there and are left out, their pair's other value not (the device's f16 NaN has its low bits set) */
__global__ void e4m3_bf16_kernel(uint32_t e8, uint32_t *out) {
    const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < 65536) out[i] = di_bf16x2_mul(di_e4m3x2_to_bf16x2_m112((uint16_t)i), di_e4m3_bf16_scale(e8));
}
static void test_e4m3_bf16(void) {
    static const uint32_t scales[] = {10, 11, 100, 118, 127, 135, 142};
    uint32_t *d = (uint32_t *)dev_poisoned(4 * 65536);
    std::vector<uint32_t> got(65536);
    std::vector<float> a, b;
    for (uint32_t e8 : scales) {
        e4m3_bf16_kernel<<<256, 256>>>(e8, d);
        CK(cudaGetLastError());
        dev_download(got.data(), d, 4 * 65536);
        a.clear(), b.clear();
        for (uint32_t i = 0; i < 65536; i++)
            for (int n = 0; n < 2; n++) {
                const uint8_t c = (uint8_t)(i >> (8 * n));
                if ((c & 0x7f) == 0x7f) continue;
                const float v = di_e4m3_to_f32(c) * di_e8m0_to_f32((uint8_t)e8); /* exact, a bf16 value */
                uint32_t ref_bits, got_bits = (got[i] >> (16 * n)) << 16;
                memcpy(&ref_bits, &v, 4);
                float fa, fb;
                memcpy(&fa, &got_bits, 4);
                memcpy(&fb, &ref_bits, 4);
                a.push_back(fa), b.push_back(fb);
            }
        char shp[64];
        snprintf(shp, sizeof shp, "all code pairs x 2^%d (bits)", (int)e8 - 127);
        compare("e4m3_bf16", shp, a.data(), b.data(), (int64_t)a.size(), "twin");
    }
    cudaFree(d);
}

/* di_e8m0x4_any_odd (which dequantisation the wgmma kernel's CTAs take) against the bytes one by
 * one: every byte value at every position among plain ones, then random words */
__global__ void e8m0_odd_kernel(const uint32_t *w, int n, uint8_t *out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = (uint8_t)(di_e8m0x4_any_odd(true, w[i]) | di_e8m0x4_any_odd(false, w[i]) << 1);
}
static void test_e8m0_odd(void) {
    std::vector<uint32_t> w;
    for (uint32_t b = 0; b < 256; b++)
        for (int pos = 0; pos < 4; pos++) w.push_back((0x76767676u & ~(0xFFu << (8 * pos))) | b << (8 * pos));
    while (w.size() < (1u << 20)) w.push_back((uint32_t)rnd_u64());
    const int n = (int)w.size();
    uint32_t *dw = (uint32_t *)dev_upload(w.data(), 4 * (size_t)n);
    uint8_t *dout = (uint8_t *)dev_poisoned((size_t)n);
    e8m0_odd_kernel<<<(n + 255) / 256, 256>>>(dw, n, dout);
    CK(cudaGetLastError());
    std::vector<uint8_t> got(n);
    dev_download(got.data(), dout, (size_t)n);
    std::vector<float> a(n), b(n);
    for (int i = 0; i < n; i++) {
        bool odd4 = false, odd8 = false;
        for (int k = 0; k < 4; k++) {
            const uint32_t e = (w[i] >> (8 * k)) & 255u;
            odd4 |= e < 2 || e > 248;
            odd8 |= e < 10 || e > 142;
        }
        a[i] = (float)got[i];
        b[i] = (float)(odd4 | odd8 << 1);
    }
    compare("e8m0_odd", "every byte at every position, random words", a.data(), b.data(), n, "exact");
    cudaFree(dw), cudaFree(dout);
}

/* every ue8m0 scale byte through the branch-free di_dev_e8m0 against the CPU's di_e8m0_to_f32
 * (0 is 2^-127, 255 NaN) */
__global__ void e8m0_decode_kernel(float *out) { out[threadIdx.x] = di_dev_e8m0((uint8_t)threadIdx.x); }
static void test_e8m0_decode(void) {
    float *d = (float *)dev_poisoned(4 * 256);
    e8m0_decode_kernel<<<1, 256>>>(d);
    CK(cudaGetLastError());
    float got[256], ref[256];
    dev_download(got, d, sizeof got);
    for (int i = 0; i < 256; i++) ref[i] = di_e8m0_to_f32((uint8_t)i);
    compare("e8m0_decode", "all 256 scale bytes", got, ref, 256, "twin");
    cudaFree(d);
}

/* ---- bf16 x FP8 tensor-core linear (wo_a): n_groups diagonal blocks of one FP8 weight against
 * the CPU's DI_LIN_BF16 (a double sum rounded once). The tensor core sums each block of 32
 * products (exact: bf16 x e4m3) in fp32 with about 14 bits kept relative to the largest addend
 * (DeepSeek-V3 report, §3.3.2): an output is off by at most 2^-9 * sum_k |x_k w_k| plus one bf16
 * ulp of the final rounding; the wgmma kernel (ctx->wgmma, past 16 rows) sums the exact products
 * over K in fp32, well inside that. Then: each row alone equals the row in the m-row call, bit for
 * bit. */
static void check_bf16w8(const char *name, const lin_case &c, const float *x, const float *got, int64_t m, int64_t K,
                         int64_t rank, int G) {
    const int64_t lda = K * G, ldy = rank * G;
    float *og = (float *)malloc(4 * m * K), *rg = (float *)malloc(4 * m * rank);
    int64_t nbad = 0, ndiff = 0;
    double worst = 0.0;
    for (int g = 0; g < G; g++) {
        di_weight wg = c.w;
        wg.row0 = (int64_t)g * rank;
        for (int64_t r = 0; r < m; r++) memcpy(og + r * K, x + r * lda + g * K, 4 * K);
        di_cpu_linear(&wg, og, m, rg, DI_LIN_BF16);
        for (int64_t r = 0; r < m; r++)
            for (int64_t n = 0; n < rank; n++) {
                const float h = rg[r * rank + n], d = got[r * ldy + g * rank + n];
                double sabs = 0.0;
                for (int64_t k = 0; k < K; k++) {
                    const int64_t wr = g * rank + n;
                    sabs += fabs((double)og[r * K + k] * di_e4m3_to_f32(((const uint8_t *)c.wd)[wr * K + k]) *
                                 di_e8m0_to_f32(c.ws[(wr / 32) * (K / 32) + k / 32]));
                }
                const double bound = 0x1p-9 * sabs + ldexp(1.0, ilogb(h == 0.0f ? 1e-30f : h) - 7);
                const double err = fabs((double)d - h);
                if (memcmp(&d, &h, 4)) ndiff++;
                if (!(err <= bound)) nbad++;
                worst = fmax(worst, err / bound);
            }
    }
    printf("%s  %-20s M=%lld K=%lld rank=%lld G=%d  differing %lld / %lld  worst %.3f of the bound\n",
           nbad ? "FAIL" : "PASS", name, (long long)m, (long long)K, (long long)rank, G, (long long)ndiff,
           (long long)(m * ldy), worst);
    if (nbad) g_fail++;
    else g_pass++;
    free(og), free(rg);
}
static void test_linear_bf16w8(int64_t m, int64_t K, int64_t rank, int G) {
    lin_case c = lin_make(DI_DT_F8_E4M3, rank * G, 0, rank, K, false);
    const int64_t lda = K * G, ldy = rank * G;
    float *x = (float *)malloc(4 * m * lda), *got = (float *)malloc(4 * m * ldy), *one = (float *)malloc(4 * m * ldy);
    fill_moderate(x, m * lda, 1.0f);
    for (int64_t i = 0; i < m * lda; i++) x[i] = di_bf16_round(x[i]); /* attention outputs are bf16 */
    float *dx = (float *)dev_upload(x, 4 * m * lda), *dy = (float *)dev_poisoned(4 * m * ldy);
    g_cx.wgmma = true;
    /* past the decode twin's rows (which take the call whatever the wgmma setting) */
    const bool tiled = di_cuda_linear_bf16w8_reads_bf16(&g_cx, &c.dw, rank, G, m) && di_cuda_wgmma_taken(&g_cx, false, K, m);
    if (tiled) {
        di_cuda_linear_bf16w8(&g_cx, &c.dw, rank, G, dx, lda, m, dy, ldy, NULL);
        dev_download(got, dy, 4 * m * ldy);
        check_bf16w8("linear_bf16w8 wgmma", c, x, got, m, K, rank, G);
    }
    /* and on cuBLAS's BF16 GEMM (a strided batch of the groups; DI_CUDA_BLAS_MIN_ROWS lowered to one) */
    if (tiled) {
        const int64_t before = g_cx.counts.blas;
        g_cx.blas_rows = 1;
        di_cuda_linear_bf16w8(&g_cx, &c.dw, rank, G, dx, lda, m, dy, ldy, NULL);
        g_cx.blas_rows = 0;
        dev_download(got, dy, 4 * m * ldy);
        if (g_cx.counts.blas != before + 1) {
            printf("FAIL  linear_bf16w8 blas: M=%lld K=%lld did not take cuBLAS\n", (long long)m, (long long)K);
            g_fail++;
        } else {
            check_bf16w8("linear_bf16w8 blas", c, x, got, m, K, rank, G);
        }
    }
    g_cx.wgmma = false;
    di_cuda_linear_bf16w8(&g_cx, &c.dw, rank, G, dx, lda, m, dy, ldy, NULL);
    dev_download(got, dy, 4 * m * ldy);
    check_bf16w8("linear_bf16w8", c, x, got, m, K, rank, G);
    { /* with y's act_quant made by the twin's K-split sum (wo_a's codes for wo_b): the same y, and the
       * bytes of act_quant on that y */
        const int64_t nb = m * ldy / 32;
        uint8_t *dq = (uint8_t *)dev_poisoned(m * ldy), *rq = (uint8_t *)dev_poisoned(m * ldy);
        float *ds = (float *)dev_poisoned(4 * nb), *rs = (float *)dev_poisoned(4 * nb);
        const di_cuda_act_forms yf = {dq, ds, NULL, NULL, NULL};
        CK(cudaMemset(dy, 0xff, 4 * m * ldy));
        if (di_cuda_linear_bf16w8(&g_cx, &c.dw, rank, G, dx, lda, m, dy, ldy, &yf)) {
            char shape[96];
            snprintf(shape, sizeof shape, "M=%lld K=%lld rank=%lld G=%d", (long long)m, (long long)K, (long long)rank, G);
            dev_download(one, dy, 4 * m * ldy);
            compare("linear_bf16w8 +codes y", shape, one, got, m * ldy, "exact");
            di_cuda_act_quant_e4m3(dy, NULL, 0, nb, rq, rs, 0);
            const char *names[2] = {"linear_bf16w8 +codes", "linear_bf16w8 +scales"};
            compare_quant_forms(names, shape, dq, ds, rq, rs, m * ldy, nb);
        }
        cudaFree(dq), cudaFree(rq), cudaFree(ds), cudaFree(rs);
    }
    /* rows alone = the m-row call (groups never split K) */
    for (int64_t r = 0; r < m; r++) di_cuda_linear_bf16w8(&g_cx, &c.dw, rank, G, dx + r * lda, lda, 1, dy + r * ldy, ldy, NULL);
    dev_download(one, dy, 4 * m * ldy);
    char shape[96];
    snprintf(shape, sizeof shape, "M=%lld K=%lld rank=%lld G=%d (alone vs batch)", (long long)m, (long long)K,
             (long long)rank, G);
    compare("linear_bf16w8 batch", shape, one, got, m * ldy, "batch-inv");
    /* the decode-sized twin (taken at m <= DI_GEMV_MAX_ROWS, K % 128 == 0) against the tiled kernel */
    g_cx.tiled_only = true;
    di_cuda_linear_bf16w8(&g_cx, &c.dw, rank, G, dx, lda, m, dy, ldy, NULL);
    g_cx.tiled_only = false;
    dev_download(one, dy, 4 * m * ldy);
    snprintf(shape, sizeof shape, "M=%lld K=%lld rank=%lld G=%d (%s)", (long long)m, (long long)K, (long long)rank, G,
             di_cuda_gemv_ok(true, G > 1, K, m, 1) ? "twin vs tiled" : "tiled both");
    compare("linear_bf16w8 twin", shape, got, one, m * ldy, "twin");
    cudaFree(dx), cudaFree(dy);
    lin_free(&c);
    free(x), free(got), free(one);
}

/* ---- bf16 x BF16 tensor-core linear (plain modes): against the CPU's exactly rounded double sums,
 * within the same block-sum bound as above; rows alone = rows in the batch ---- */

/* got [m, N] (a GPU linear_w16's) against ref, the CPU's, within the bound; counts a pass or fail */
static void check_w16(const char *name, const lin_case &c, const float *x, const float *ref, const float *got, int64_t m,
                      int64_t K, int64_t N, bool out_bf16) {
    int64_t nbad = 0, ndiff = 0;
    double worst = 0.0;
    for (int64_t r = 0; r < m; r++)
        for (int64_t n = 0; n < N; n++) {
            double sabs = 0.0;
            for (int64_t k = 0; k < K; k++) sabs += fabs((double)x[r * K + k] * di_bf16_load((const uint8_t *)c.wd + 2 * (n * K + k)));
            const float h = ref[r * N + n], d = got[r * N + n];
            const double bound = 0x1p-9 * sabs + ldexp(1.0, ilogb(h == 0.0f ? 1e-30f : h) - (out_bf16 ? 7 : 23));
            const double err = fabs((double)d - h);
            if (memcmp(&d, &h, 4)) ndiff++;
            if (!(err <= bound)) nbad++;
            worst = fmax(worst, err / bound);
        }
    printf("%s  %-20s M=%lld K=%lld N=%lld %s  differing %lld / %lld  worst %.3f of the bound\n", nbad ? "FAIL" : "PASS",
           name, (long long)m, (long long)K, (long long)N, out_bf16 ? "bf16" : "f32", (long long)ndiff, (long long)(m * N),
           worst);
    if (nbad) g_fail++;
    else g_pass++;
}

static void test_linear_w16(int64_t m, int64_t K, int64_t N, bool out_bf16) {
    lin_case c = lin_make(DI_DT_BF16, N, 0, N, K, true);
    float *x = (float *)malloc(4 * m * K), *ref = (float *)malloc(4 * m * N), *got = (float *)malloc(4 * m * N),
          *one = (float *)malloc(4 * m * N);
    fill_moderate(x, m * K, 1.0f);
    for (int64_t i = 0; i < m * K; i++) x[i] = di_bf16_round(x[i]); /* norm outputs are bf16 */
    di_cpu_linear(&c.w, x, m, ref, out_bf16 ? DI_LIN_BF16 : DI_LIN_F32);
    float *dx = (float *)dev_upload(x, 4 * m * K), *dy = (float *)dev_poisoned(4 * m * N);
    di_cuda_linear_w16(&g_cx, &c.dw, dx, m, dy, out_bf16);
    dev_download(got, dy, 4 * m * N);
    check_w16("linear_w16", c, x, ref, got, m, K, N, out_bf16);
    for (int64_t r = 0; r < m; r++) di_cuda_linear_w16(&g_cx, &c.dw, dx + r * K, 1, dy + r * N, out_bf16);
    dev_download(one, dy, 4 * m * N);
    char shape[96];
    snprintf(shape, sizeof shape, "M=%lld K=%lld N=%lld (alone vs batch)", (long long)m, (long long)K, (long long)N);
    compare("linear_w16 batch", shape, one, got, m * N, "batch-inv");
    /* the decode twin (<= 16 rows, K % 128 == 0) against the tiled kernel, bit for bit */
    g_cx.tiled_only = true;
    di_cuda_linear_w16(&g_cx, &c.dw, dx, m, dy, out_bf16);
    g_cx.tiled_only = false;
    dev_download(one, dy, 4 * m * N);
    snprintf(shape, sizeof shape, "M=%lld K=%lld N=%lld (%s)", (long long)m, (long long)K, (long long)N,
             di_cuda_w16_twin_taken(&g_cx, &c.dw, m) ? "twin vs tiled" : "tiled both");
    compare("linear_w16 twin", shape, got, one, m * N, "twin");
    /* the wgmma kernel (di_cuda_ctx.wgmma, the default outside batch-invariant mode) past the twin's
     * rows: its own sums, within the same bound; its K split's parts (the router's) add up in
     * split order to them */
    g_cx.wgmma = true;
    if (di_cuda_wgmma_taken(&g_cx, false, K, m)) {
        float *poisoned = (float *)dev_poisoned(4 * m * N);
        di_cuda_linear_w16(&g_cx, &c.dw, dx, m, poisoned, out_bf16);
        dev_download(got, poisoned, 4 * m * N);
        check_w16("linear_w16 wgmma", c, x, ref, got, m, K, N, out_bf16);
        if (!out_bf16) {
            int ks = 0;
            const float *parts = di_cuda_linear_w16_parts(&g_cx, &c.dw, dx, m, dy, &ks);
            std::vector<float> p((size_t)(ks * m * N));
            dev_download(p.data(), parts, 4 * p.size());
            for (int64_t i = 0; i < m * N; i++) {
                float v = p[i];
                for (int k = 1; k < ks; k++) v += p[k * m * N + i];
                one[i] = v;
            }
            snprintf(shape, sizeof shape, "M=%lld K=%lld N=%lld (%d parts)", (long long)m, (long long)K, (long long)N, ks);
            compare("linear_w16 wgmma parts", shape, one, got, m * N, "parts");
            /* fp32 outputs on cuBLAS (the head from DI_CUDA_BLAS_W16_MIN_ROWS rows; here from one row
             * and output): its own fp32 sums, within the same bound */
            const int64_t before = g_cx.counts.blas;
            g_cx.blas_w16_rows = g_cx.blas_w16_n = 1;
            di_cuda_linear_w16(&g_cx, &c.dw, dx, m, poisoned, out_bf16);
            g_cx.blas_w16_rows = g_cx.blas_w16_n = 0;
            dev_download(got, poisoned, 4 * m * N);
            if (g_cx.counts.blas != before + 1) {
                printf("FAIL  linear_w16 blas: M=%lld K=%lld N=%lld did not take cuBLAS\n", (long long)m, (long long)K,
                       (long long)N);
                g_fail++;
            } else {
                check_w16("linear_w16 blas", c, x, ref, got, m, K, N, out_bf16);
            }
        }
        cudaFree(poisoned);
    }
    g_cx.wgmma = false;
    cudaFree(dx), cudaFree(dy);
    lin_free(&c);
    free(x), free(ref), free(got), free(one);
}

static int64_t ulp_dist32(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    if ((ia < 0) != (ib < 0)) return a == b ? 0 : INT64_MAX;
    const int64_t d = (int64_t)ia - ib;
    return d < 0 ? -d : d;
}

/* ---- MoE routing and grouping on the device: experts and slot order exactly the CPU's (di_cpu_moe_route;
 * CUDA's log1pf and glibc's are each within 1 ulp, so may differ by 2, which random logits never turn
 * into a tie); weights = score / sum of K scores: each score then differs by <= 1.5 ulps (sqrt halves
 * the relative error, plus its rounding), the sum by as much relatively, the quotient and scaling
 * add 2 roundings: within 8 fp32 ulps. The groups: counts and rows ascending within each expert, as
 * the host builds them ---- */
/* ties: logits on a grid of 0.5 and no bias, so equal biased scores are common (the lower expert
 * wins on both sides) */
static void test_moe_route(int64_t R, int E, int K, int resident, bool ties = false) {
    const int64_t n = R * K, D = 8;
    float *logits = (float *)malloc(4 * R * E), *bias = (float *)malloc(4 * E);
    for (int64_t i = 0; i < R * E; i++)
        logits[i] = ties ? rintf(rnd_normalish() * 4.0f) * 0.5f : rnd_normalish() * 4.0f;
    for (int e = 0; e < E; e++) bias[e] = ties ? 0.0f : rnd_normalish() * 0.1f;
    std::vector<int32_t> ex(n), ord(n), gex(n), gord(n);
    std::vector<float> wt(n), gwt(n);
    for (int64_t r = 0; r < R; r++) {
        di_cpu_moe_route(logits + r * E, bias, E, K, 1.5f, &ex[r * K], &wt[r * K]);
        if (resident)
            for (int j = 0; j < K; j++) ex[r * K + j] = (int32_t)((r * K + j) % resident);
        for (int j = 0; j < K; j++) ord[r * K + j] = j;
        for (int a = 1; a < K; a++)
            for (int b = a; b > 0 && ex[r * K + ord[r * K + b]] < ex[r * K + ord[r * K + b - 1]]; b--) {
                const int32_t t = ord[r * K + b];
                ord[r * K + b] = ord[r * K + b - 1];
                ord[r * K + b - 1] = t;
            }
    }
    float *dl = (float *)dev_upload(logits, 4 * R * E), *db = (float *)dev_upload(bias, 4 * E);
    int32_t *dex = (int32_t *)dev_poisoned(4 * n), *dord = (int32_t *)dev_poisoned(4 * n);
    float *dwt = (float *)dev_poisoned(4 * n);
    di_cuda_moe_route(dl, 1, db, R, E, K, 1.5f, resident, dex, dwt, dord, 0);
    dev_download(gex.data(), dex, 4 * n);
    dev_download(gord.data(), dord, 4 * n);
    dev_download(gwt.data(), dwt, 4 * n);
    int64_t bad_ex = 0, bad_w = 0, max_ulp = 0;
    for (int64_t i = 0; i < n; i++) {
        bad_ex += gex[i] != ex[i] || gord[i] != ord[i];
        bad_w += ulp_dist32(gwt[i], wt[i]) > 8;
        max_ulp = ulp_dist32(gwt[i], wt[i]) > max_ulp ? ulp_dist32(gwt[i], wt[i]) : max_ulp;
    }
    printf("%s  %-20s R=%lld E=%d K=%d resident=%d%s  experts/order differing %lld, weights beyond 8 ulps %lld / %lld "
           "(max %lld ulps)\n",
           bad_ex || bad_w ? "FAIL" : "PASS", "moe_route", (long long)R, E, K, resident, ties ? " ties" : "",
           (long long)bad_ex, (long long)bad_w, (long long)n, (long long)max_ulp);
    if (bad_ex || bad_w) g_fail++;
    else g_pass++;
    /* grouping, from the CPU's experts */
    const int G = resident ? resident : E;
    std::vector<int> off(G + 1, 0), goff(G + 1);
    for (int64_t i = 0; i < n; i++) off[ex[i] + 1]++;
    for (int e = 0; e < G; e++) off[e + 1] += off[e];
    std::vector<int64_t> want_src(n);
    {
        std::vector<int> fill(off.begin(), off.end() - 1);
        for (int64_t i = 0; i < n; i++) want_src[fill[ex[i]]++] = i;
    }
    float *x = (float *)dev_poisoned(4 * R * D), *yg = (float *)dev_poisoned(4 * n * D), *wts = (float *)dev_poisoned(4 * n);
    int *doff = (int *)dev_poisoned(4 * (G + 1)), *dact = (int *)dev_poisoned(4 * G);
    void **lists = (void **)dev_poisoned(sizeof(void *) * 2 * n); /* x_rows, slot_rows */
    /* two row-tile lists: of one row (every group's rows a tile each) and of 3 */
    di_group_tiles tiles[2] = {{NULL, 1, 0}, {NULL, 3, 0}};
    for (di_group_tiles &t : tiles) {
        t.cap = di_group_tiles_cap(t.bt, G, n, R);
        t.list = (int *)dev_poisoned(4 * sizeof(int) * (size_t)(t.cap > 0 ? t.cap : 1));
    }
    di_cuda_moe_group(dex, dwt, R, K, G, x, yg, D, doff, dact, (const float **)lists, (const float **)lists + n, wts,
                      tiles, 2, 0);
    /* a list downloaded against the one the offsets give (want_tile_list): entries differing */
    auto tiles_differing = [&](const di_group_tiles &t, const std::vector<int> &offs) {
        std::vector<int> want, got(4 * (size_t)t.cap);
        int64_t bad = want_tile_list(offs, G, t.bt, t.cap, &want) ? 0 : 1; /* cap too small */
        dev_download(got.data(), t.list, sizeof(int) * got.size());
        for (size_t i = 0; i < got.size() && i < want.size(); i++) bad += got[i] != want[i];
        return bad;
    };
    std::vector<void *> hl(2 * n);
    std::vector<float> hw(n);
    std::vector<int> gact(G);
    dev_download(goff.data(), doff, 4 * (G + 1));
    dev_download(gact.data(), dact, 4 * G);
    dev_download(hl.data(), lists, sizeof(void *) * 2 * n);
    dev_download(hw.data(), wts, 4 * n);
    int64_t bad_g = 0;
    for (int e = 0; e <= G; e++) bad_g += goff[e] != off[e];
    for (int e = 0, j = 0; e < G; e++) /* the active list: experts with rows ascending, then -1 */
        if (off[e + 1] > off[e]) bad_g += gact[j++] != e;
    int n_act = 0;
    for (int e = 0; e < G; e++) n_act += off[e + 1] > off[e];
    for (int j = n_act; j < G; j++) bad_g += gact[j] != -1;
    for (int64_t p = 0; p < n; p++) {
        const int64_t a = want_src[p], r = a / K;
        bad_g += hl[p] != (void *)(x + r * D) || hl[n + a] != (void *)(yg + p * D) || memcmp(&hw[p], &gwt[a], 4) != 0;
    }
    for (const di_group_tiles &t : tiles) bad_g += tiles_differing(t, off);
    printf("%s  %-20s R=%lld E=%d K=%d  offsets/lists/tiles differing %lld\n", bad_g ? "FAIL" : "PASS", "moe_group",
           (long long)R, G, K, (long long)bad_g);
    if (bad_g) g_fail++;
    else g_pass++;
    /* routing and grouping in one call (one launch at <= 16 rows) from logits [ks][R, E] added in
     * split order: every array it writes, downloaded */
    struct routed {
        std::vector<int32_t> ex, ord;
        std::vector<float> wt, wts;
        std::vector<int> off, act;
        std::vector<void *> lists;
        int64_t tiles_bad; /* the row-tile lists' entries against those of off */
    };
    auto route_group = [&](const float *dlog, int ks) {
        int32_t *fex = (int32_t *)dev_poisoned(4 * n), *ford = (int32_t *)dev_poisoned(4 * n);
        float *fwt = (float *)dev_poisoned(4 * n), *fwts = (float *)dev_poisoned(4 * n);
        int *foff = (int *)dev_poisoned(4 * (G + 1)), *fact = (int *)dev_poisoned(4 * G);
        void **flists = (void **)dev_poisoned(sizeof(void *) * 2 * n);
        di_cuda_moe_route_group(dlog, ks, db, R, E, K, 1.5f, resident, G, fex, fwt, ford, x, yg, D, foff, fact,
                                (const float **)flists, (const float **)flists + n, fwts, tiles, 2, 0);
        routed o{std::vector<int32_t>(n), std::vector<int32_t>(n), std::vector<float>(n), std::vector<float>(n),
                 std::vector<int>(G + 1), std::vector<int>(G), std::vector<void *>(2 * n), 0};
        dev_download(o.ex.data(), fex, 4 * n);
        dev_download(o.ord.data(), ford, 4 * n);
        dev_download(o.wt.data(), fwt, 4 * n);
        dev_download(o.wts.data(), fwts, 4 * n);
        dev_download(o.off.data(), foff, 4 * (G + 1));
        dev_download(o.act.data(), fact, 4 * G);
        dev_download(o.lists.data(), flists, sizeof(void *) * 2 * n);
        o.tiles_bad = 0;
        for (const di_group_tiles &t : tiles) o.tiles_bad += tiles_differing(t, o.off);
        cudaFree(fex), cudaFree(ford), cudaFree(fwt), cudaFree(fwts), cudaFree(foff), cudaFree(fact), cudaFree(flists);
        return o;
    };
    auto differing = [&](const routed &a, const routed &b) {
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++)
            bad += a.ex[i] != b.ex[i] || a.ord[i] != b.ord[i] || memcmp(&a.wt[i], &b.wt[i], 4) != 0 ||
                   memcmp(&a.wts[i], &b.wts[i], 4) != 0 || a.lists[i] != b.lists[i] || a.lists[n + i] != b.lists[n + i];
        for (int e = 0; e <= G; e++) bad += a.off[e] != b.off[e];
        for (int e = 0; e < G; e++) bad += a.act[e] != b.act[e];
        return bad + a.tiles_bad + b.tiles_bad;
    };
    auto report = [&](const char *name, int64_t bad) {
        printf("%s  %-20s R=%lld E=%d K=%d  arrays differing %lld\n", bad ? "FAIL" : "PASS", name, (long long)R, E, K,
               (long long)bad);
        if (bad) g_fail++;
        else g_pass++;
    };
    const routed fused = route_group(dl, 1);
    report("moe_route_group", differing(fused, routed{gex, gord, gwt, hw, goff, gact, hl, 0})); /* the two launches' */
    {   /* the router's K splits (di_cuda_linear_w16_parts): the bits of routing their split-order sum */
        const int ks = 3;
        std::vector<float> parts((size_t)(ks * R * E)), sum((size_t)(R * E));
        for (float &v : parts) v = rnd_normalish() * 2.0f;
        for (int64_t i = 0; i < R * E; i++) {
            float v = parts[i];
            for (int k = 1; k < ks; k++) v += parts[k * R * E + i];
            sum[i] = v;
        }
        float *dp = (float *)dev_upload(parts.data(), 4 * parts.size()), *ds = (float *)dev_upload(sum.data(), 4 * sum.size());
        report("moe_route K splits", differing(route_group(dp, ks), route_group(ds, 1)));
        cudaFree(dp), cudaFree(ds);
    }
    cudaFree(dl), cudaFree(db), cudaFree(dex), cudaFree(dord), cudaFree(dwt), cudaFree(x), cudaFree(yg);
    cudaFree(dact);
    cudaFree(wts), cudaFree(doff), cudaFree(lists), cudaFree(tiles[0].list), cudaFree(tiles[1].list);
    free(logits), free(bias);
}

/* the wgmma kernel: partial weight tiles (N 96, 200), K splits (one matrix, K 1024),
 * an empty group, groups of 9-130 rows (partial and several token tiles; 32-, 64- and 128-token
 * tiles; tiles of at most half their tokens on wgmmas of half the width), more stages than
 * slots, wo_a's bf16 x FP8 slices, BF16 weights; the FP4 dequantisation on every input; the K
 * split's choice. Alone with --wgmma (a short run under the CPU emulator, compute-sanitizer). */
static void run_wgmma_quick(void) {
    const int r100[] = {100}, r40[] = {40}, r160[] = {160}, pre_rows[] = {70, 0, 17, 130, 40},
              dec_rows[] = {9, 0, 31, 12, 40, 16};
    test_wgmma_grouping(DI_DT_F8_E4M3, 1024, 64, r100, 0);
    /* 160 rows: 128-token tiles, the second one half (32 rows on n64 wgmmas) against the halves'
     * 80 rows on n128 -- the same bits whatever the wgmma's width */
    test_wgmma_grouping(DI_DT_F8_E4M3, 512, 64, r160, 0);
    test_wgmma_grouping(DI_DT_I8, 512, 96, r160, 0);
    test_wgmma_grouping(DI_DT_F8_E4M3, 512, 96, r40, 0);  /* halves of 20 rows on 32-token tiles */
    test_wgmma_grouping(DI_DT_I8, 512, 200, dec_rows, 6); /* 32-token tiles (mean 18), a group past one */
    test_linear_bf16w8(20, 256, 32, 3);  /* wo_a's block-diagonal slices (partial weight tiles) */
    test_linear_bf16w8(40, 1024, 32, 1); /* one slice: K splits */
    test_wgmma_grouping(DI_DT_I8, 256, 96, pre_rows, 5);
    test_wgmma_grouping(DI_DT_I8, 1024, 96, pre_rows, 5); /* 16 stages: every slot reused */
    test_wgmma_grouping(DI_DT_F8_E4M3, 384, 200, pre_rows, 5);
    /* three consumer warpgroups (192 weight rows a CTA: 128-token tiles of an unsplit K) against
     * two: one whole tile against its 64-row halves, a partial weight tile, groups of 128-token
     * tiles against each alone on two consumers (and two against three) */
    const int r128[] = {128}, pre3_rows[] = {100, 130, 0, 90};
    test_wgmma_grouping(DI_DT_F8_E4M3, 256, 384, r128, 0, 3);
    test_wgmma_grouping(DI_DT_I8, 256, 400, r128, 0, 3);
    test_wgmma_grouping(DI_DT_I8, 256, 384, pre3_rows, 4, 3);
    test_wgmma_grouping(DI_DT_F8_E4M3, 512, 400, pre3_rows, 4, 2);
    /* wq_a / wkv-like sets past 16 rows: one conversion of x, a wgmma call a matrix, each with the
     * K split the device's model gives its N (64- and 32-token tiles, a partial weight tile) */
    test_gemv_set(DI_DT_F8_E4M3, 1024, 96, 512, 64, true);
    test_gemv_set(DI_DT_F8_E4M3, 512, 200, 64, 40, true);
    test_gemv_set(DI_DT_F8_E4M3, 512, 200, 64, 40, true, true); /* on cuBLAS: the set's bits are each matrix's */
    /* BF16 weights (WG_W16): 64-token tiles with a partial weight tile; 128-token ones, 10 stages */
    test_linear_w16(40, 256, 200, true);
    test_linear_w16(160, 640, 96, false);
    test_e2m1_bf16();
    test_e4m3_bf16();
    test_e8m0_odd();
    test_wg_ksplit();
}


/* the int8 FP4 twin: one token a block (partial feature tiles), two, four (a group of 4 rows), a
 * group of 5 rows over two row tiles; K of one partial ring step and of whole steps + a remainder */
static void run_imma_quick(void) {
    const int imma1[] = {1, 0, 1, 1, 0, 1}, imma2[] = {2, 1, 0, 2, 1, 0}, imma4[] = {4, 0, 1, 0, 1, 2, 0, 0};
    const int imma5[] = {5, 0, 0, 0, 1};
    test_gemv_imma(256, 40, imma1, 6);
    test_gemv_imma(768, 96, imma2, 6);
    test_gemv_imma(384, 200, imma4, 8);
    test_gemv_imma(640, 64, imma5, 5);
    test_gemv_imma(256, 40, imma2, 6, true);
    /* one row a group (gemv_fp4_imma_row_kernel): an odd number of 4-block quads (a last step of
     * one), and a NaN scale in the first step */
    test_gemv_imma(640, 40, imma1, 6);
    test_gemv_imma(384, 40, imma1, 6, true);
    test_gemv_imma_swiglu(256, 128, imma1, 6, true);
    test_gemv_imma_swiglu(640, 64, imma1, 6, false);
    /* the ring depth by grid: 12 blocks take the three-quad ring (K's 12 quads in whole steps here),
     * 420 blocks (past two a multiprocessor of 132) the two-quad one */
    test_gemv_imma_swiglu(1536, 128, imma1, 6, true);
    test_gemv_imma_swiglu(256, 4480, imma1, 6, true);
    test_gemv_imma_swiglu(256, 128, imma2, 6, true, true); /* one-row tiles of groups of up to 2 rows */
}

/* the index-score cases (small shapes; the CPU emulator runs them): in the quick run and --index */
static void run_index_quick(void) {
    test_index_score_paged(2, 100, 32, 128, 16, 656, 520, false);
    test_index_score_paged(3, 37, 8, 64, 8, 200, 3, true);
    test_index_score_paged(13, 150, 20, 96, 16, 400, 8, false); /* a part-filled head tile, rows past a CTA */
    test_index_score_paged(9, 64, 8, 32, 4, 72, 40, false);     /* the tiny model's heads and dims */
    test_index_score_paged(1, 700, 32, 128, 16, 656, 520, false); /* one row: a CTA's 8 warps share it */
    test_index_score_paged(2, 300, 8, 64, 8, 200, 3, false);      /* two rows, 4 warps each */
    test_index_score_paged(3, 500, 20, 96, 16, 400, 8, false);    /* three rows on a CTA of four slots */
    /* entries aligned to 8 bytes only: the 8-byte key loads (the others above: 16-byte loads of a
     * permuted k, or scalar loads) */
    test_index_score_paged(9, 200, 32, 128, 16, 658, 522, false);
    test_index_score_paged(1, 300, 32, 128, 16, 658, 522, false);
    /* the compressor's records, CPU against device */
    test_record_quant(false, 300, 128);
    test_record_quant(false, 37, 96);
    test_record_quant(false, 50, 32);
    test_record_quant(true, 300, 512);
    test_record_quant(true, 37, 48);
    test_record_quant(true, 50, 16);
    /* key records in the forward pass's blocks (KV row records of key_offset floats, then the key
     * records; the released model: 288-byte (72-float) rows, 96-byte key records; the tiny one:
     * 64-byte rows, 32-byte keys): 4 blocks in one 16-byte load, or 1 to 3 blocks in 4-byte loads */
    test_index_score_paged(2, 100, 32, 128, 16, 0, 72, false, true);
    test_index_score_paged(1, 300, 32, 128, 16, 0, 72, false, true);
    test_index_score_paged(2, 100, 32, 128, 16, 0, 512, false, true);
    test_index_score_paged(1, 700, 32, 128, 16, 0, 512, false, true);
    test_index_score_paged(9, 200, 32, 128, 16, 0, 512, false, true);
    test_index_score_paged(3, 37, 8, 64, 8, 0, 4, true, true);
    test_index_score_paged(13, 150, 20, 96, 16, 0, 8, false, true);
    test_index_score_paged(9, 64, 8, 32, 4, 0, 64, false, true); /* the tiny model's heads and dims */
}

/* the noted forms' slots (host bookkeeping, no launch): a note of a new x takes a free slot before it
 * replaces a live one, else the one noted longest ago; a re-note keeps x's slot */
static void test_act_forms_slots(void) {
    static_assert(DI_CUDA_ACT_FORMS_SLOTS == 2, "the case below fills the two slots");
    di_cuda_ctx cx;
    memset(&cx, 0, sizeof cx);
    static float bufs[4][32];
    const float *a = bufs[0], *b = bufs[1], *c = bufs[2], *d = bufs[3];
    const di_cuda_act_forms f = {NULL};
    bool ok = true;
    di_cuda_act_forms_note(&cx, a, 1, 32, f);
    di_cuda_act_forms_note(&cx, b, 1, 32, f);
    di_cuda_act_forms_forget(&cx, b);
    di_cuda_act_forms_note(&cx, c, 1, 32, f); /* the free slot: a stays */
    ok = ok && di_cuda_act_forms_find(&cx, a, 1, 32) && di_cuda_act_forms_find(&cx, c, 1, 32);
    ok = ok && !di_cuda_act_forms_find(&cx, b, 1, 32);
    di_cuda_act_forms_note(&cx, a, 1, 32, f); /* a re-noted: now c is the older */
    di_cuda_act_forms_note(&cx, d, 1, 32, f); /* replaces c */
    ok = ok && di_cuda_act_forms_find(&cx, a, 1, 32) && di_cuda_act_forms_find(&cx, d, 1, 32);
    ok = ok && !di_cuda_act_forms_find(&cx, c, 1, 32);
    ok = ok && !di_cuda_act_forms_find(&cx, a, 2, 32); /* other rows: not these forms */
    printf("%s  act_forms slots       free slot first, then the oldest note\n", ok ? "PASS" : "FAIL");
    if (ok) g_pass++;
    else g_fail++;
}

static void run_quick(void) {
    test_act_forms_slots();
    test_moe_route(5, 16, 4, 0);
    test_moe_route(37, 40, 6, 12);
    test_moe_route(9, 384, 6, 0, true);
    test_moe_route(3, 500, 8, 0, true); /* E not a multiple of 32 */
    test_moe_route(16, 384, 6, 0);      /* the fused route + group's most rows */
    test_moe_route(1, 384, 6, 0);       /* a decode step of one */
    test_moe_route(8, 384, 6, 48);      /* the bench's EP-8 proxy: 48 resident experts */
    test_linear_w16(3, 96, 40, false); /* K = 3 blocks: a partial last stage, unaligned scale rows */
    test_linear_w16(18, 256, 72, true);
    test_linear_w16(2, 256, 8192, false); /* the decode twin (>= 8192 features, <= 4 rows): one K split */
    test_linear_w16(3, 1024, 8200, true); /* a partial feature tile */
    test_linear_bf16w8(2, 96, 32, 2);
    test_linear_bf16w8(3, 256, 64, 2);
    test_linear_bf16w8(20, 128, 32, 3);
    test_linear_bf16w8(9, 256, 32, 1);   /* 16-row tiles of the twin (one group) */
    test_linear_bf16w8(2, 1024, 32, 1);  /* one group: K splits */
    test_greedy_tokens(1, 129280); /* a decode step of one: 32 slices */
    test_greedy_tokens(5, 40000);
    test_greedy_tokens(300, 1000); /* one slice a row: no second pass */
    test_greedy_tokens(3, 7);
    test_sample_tokens(64, 129280);
    test_sample_tokens(40, 3000);
    test_sample_tokens(16, 5);
    test_sample_tokens(8, 129280);
    test_edit_tokens(64, 3000);
    test_logprob_rows(70, 3000);
    test_logprob_rows(7, 5);
    test_copy_rows(37, 300);
    test_copy_rows(5, 1);
    test_copy_rows(6, 16384 + 7); /* several blocks per row, a partial chunk */
    test_embed(50, 5, 4, 264);
    test_hc_mean(3, 4, 300, 3, 1);
    test_scale_bf16(1000, 32, 128);

    test_linear_fixed(DI_DT_BF16, DI_LIN_BF16, 3, 256, 40, 40, 0);
    test_linear_fixed(DI_DT_BF16, DI_LIN_F32, 9, 100, 37, 37, 0);
    test_linear_fixed(DI_DT_F32, DI_LIN_F32, 2, 333, 20, 20, 0);
    test_linear_fixed(DI_DT_F8_E4M3, DI_LIN_BF16, 5, 256, 64, 128, 64);
    test_linear_fixed(DI_DT_F8_E4M3, DI_LIN_BF16, 2, 96, 24, 100, 40);
    test_linear_batch_inv(DI_DT_BF16, DI_LIN_BF16, 200, 12);
    test_linear_batch_inv(DI_DT_F8_E4M3, DI_LIN_BF16, 128, 8);
    test_linear_batch_inv(DI_DT_F32, DI_LIN_F32, 96, 8);

    test_cmp_pair(6, 512);
    run_index_quick();
    test_candidates(4, 300, 8, 10, 0);
    test_candidates(3, 45, 8, 64, 4);

    test_swiglu(3, 300, false, false);
    test_swiglu(3, 300, true, true);
    test_swiglu(6, 96, true, true);  /* the tiny model's experts: h's act_quant made by the SwiGLU */
    test_swiglu(5, 160, false, false); /* the last warp partly past the end */
    test_moe_combine(3, 6, 300);
    test_moe_combine(2, 6, 301); /* D % 4 != 0: a value a thread */
    test_moe_combine(3, 10, 64); /* K past the four-value kernel's 8 */
    test_engram_gather(40, 3, 24, 64);
    test_engram_gate(17, 4, 512);
    const int grp_rows[] = {3, 0, 8, 1, 17};
    test_linear_grouped(DI_DT_I8, 256, 96, grp_rows, 5);
    test_linear_grouped(DI_DT_F8_E4M3, 160, 40, grp_rows, 5);
    test_linear_grouped(DI_DT_F8_E4M3, 256, 72, grp_rows, 5);
    test_linear_grouped(DI_DT_F8_E4M3, 96, 40, grp_rows, 5); /* K = 3 blocks */
    const int big_rows[] = {70, 3, 130}; /* the 64- and 128-row tile configurations */
    test_linear_grouped(DI_DT_I8, 256, 40, big_rows, 3);
    const int decode_rows[] = {0, 1, 0, 0, 1, 0, 0, 0}; /* fewer rows than groups: 2 active slots */
    test_linear_grouped(DI_DT_I8, 256, 40, decode_rows, 8);

    test_e2m1_widen();
    test_e8m0_decode();
    const int one[] = {1}, three[] = {3}, nine[] = {9}, sixteen[] = {16}, two[] = {2};
    test_gemv_twin(DI_DT_F8_E4M3, 256, 40, one, 0);   /* a partial feature tile */
    test_gemv_twin(DI_DT_F8_E4M3, 256, 40, nine, 0);  /* 16-row tiles */
    test_gemv_twin(DI_DT_F8_E4M3, 1024, 64, three, 0); /* two K splits */
    test_gemv_twin(DI_DT_F8_E4M3, 1024, 64, sixteen, 0);
    test_gemv_twin(DI_DT_F8_E4M3, 1024, 64, three, 0, true); /* chunks with scale bytes 0 / 255 */
    test_gemv_twin(DI_DT_F8_E4M3, 1024, 64, sixteen, 0, true);
    test_gemv_twin(DI_DT_I8, 2048, 48, two, 0);        /* four K splits */
    const int few_rows[] = {1, 0, 2, 1, 0, 3}, one_big[] = {17, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    test_gemv_twin(DI_DT_I8, 256, 96, few_rows, 6);
    test_gemv_twin(DI_DT_I8, 384, 40, one_big, 10);    /* a 17-row group: three 8-row tiles */
    test_gemv_twin(DI_DT_F8_E4M3, 256, 40, decode_rows, 8);
    /* groups take one K split: whole steps and a remainder (the buffer refilled in part, then a
     * short step; 16 / 8 blocks a step) */
    const int one_two[] = {1, 2};
    test_gemv_twin(DI_DT_I8, 768, 40, one_two, 2);
    test_gemv_twin(DI_DT_F8_E4M3, 640, 24, one_two, 2);
    run_imma_quick();
    test_gemv_set(DI_DT_F8_E4M3, 1536, 64, 4096, 1); /* 3 and 2 K splits: 6 and 8 warps a block */
    test_gemv_set(DI_DT_F8_E4M3, 1024, 40, 200, 3);
    test_gemv_set(DI_DT_F8_E4M3, 512, 96, 32, 16);  /* 16-row tiles */
    test_gemv_set(DI_DT_I8, 2048, 48, 96, 2);
    run_wgmma_quick();
}

/* real shapes; `head`: also the 129280-row head (--medium leaves it out: the CPU emulator takes
 * far too long over 129280 warps) */
static void run_full(bool head) {
    test_moe_route(256, 384, 6, 0);
    test_moe_route(4096, 384, 6, 48);
    test_linear_bf16w8(1, 4096, 1024, 8); /* wo_a: 8 groups of 4096 -> 1024 */
    test_linear_w16(1, 5120, 384, false);  /* router gate */
    test_linear_w16(64, 5120, 384, false);
    test_linear_w16(256, 5120, 384, false); /* the router gate at B = 256: wgmma with K splits */
    test_linear_w16(300, 5120, 512, false);
    test_linear_w16(4, 5120, 8192, false); /* a head-like slab */
    test_linear_bf16w8(70, 4096, 1024, 8);
    const int expert_rows[] = {8, 0, 13, 1, 64, 8, 8, 2};
    test_linear_grouped(DI_DT_I8, 5120, 2304, expert_rows, 8); /* w1 / w3 of 8 experts */
    test_linear_grouped(DI_DT_I8, 2304, 5120, expert_rows, 8); /* w2 */
    /* the decode-sized twin at the model's shapes: wq_a (5 K splits), wq_b, wo_b (2 splits), the
     * shared expert (4 splits), wkv; the routed experts at decode (6 of 48 experts, one row each,
     * and 8 rows each) */
    const int r1[] = {1}, r4[] = {4}, r16[] = {16};
    test_gemv_twin(DI_DT_F8_E4M3, 5120, 1280, r1, 0);
    test_gemv_twin(DI_DT_F8_E4M3, 1280, 32768, r4, 0);
    test_gemv_twin(DI_DT_F8_E4M3, 8192, 5120, r1, 0);
    test_gemv_twin(DI_DT_F8_E4M3, 8192, 5120, r16, 0);
    test_gemv_twin(DI_DT_F8_E4M3, 5120, 2304, r4, 0);
    test_gemv_twin(DI_DT_F8_E4M3, 5120, 512, r16, 0);
    test_gemv_set(DI_DT_F8_E4M3, 5120, 1280, 512, 1); /* wq_a and wkv: 7 and 8 K splits */
    test_gemv_set(DI_DT_F8_E4M3, 5120, 2304, 2304, 4); /* the shared expert's w1 and w3 */
    test_gemv_set(DI_DT_F8_E4M3, 5120, 1280, 512, 256, true); /* the same at B = 256 on wgmma */
    test_gemv_set(DI_DT_F8_E4M3, 5120, 1280, 512, 1024, true, true); /* a prefill chunk's on cuBLAS */
    test_gemv_set(DI_DT_F8_E4M3, 5120, 2304, 2304, 256, true);
    int e1[48] = {0}, e8[48] = {0};
    for (int i = 0; i < 6; i++) e1[7 * i + 3] = 1, e8[8 * i] = 8;
    test_gemv_twin(DI_DT_I8, 5120, 2304, e1, 48);
    test_gemv_twin(DI_DT_I8, 2304, 5120, e1, 48);
    test_gemv_twin(DI_DT_I8, 5120, 2304, e8, 48);
    /* the int8 FP4 twin at decode: B = 1 (six experts of one row), B = 16 of EP-8 (96 rows) */
    int e16[48] = {0};
    for (int i = 0; i < 96; i++) e16[(i * 5 + i * i % 13) % 48]++; /* up to 6 rows, 12 experts none */
    test_gemv_imma(5120, 2304, e1, 48);
    test_gemv_imma(2304, 5120, e1, 48);
    test_gemv_imma(5120, 2304, e16, 48);
    int e48[48]; /* every expert one row (B = 8 of EP-8): the one-row kernel on several waves */
    for (int i = 0; i < 48; i++) e48[i] = 1;
    test_gemv_imma(5120, 2304, e48, 48);
    test_gemv_imma_swiglu(5120, 2304, e1, 48, true); /* the routed experts' w1 / w3 at B = 1 */
    int e48b[48]; /* B = 8 of EP-8 as routing leaves it: some experts 2 rows, some none, one on average */
    for (int i = 0; i < 48; i++) e48b[i] = i % 12 == 5 ? 2 : i % 12 == 7 ? 0 : 1;
    test_gemv_imma_swiglu(5120, 2304, e48b, 48, true, true);
    test_gemv_imma(5120, 2304, e48b, 48);
    /* the wgmma kernel at prefill: 8 experts of 64 rows and 4 of 300, wq_a / wo_b-like
     * single matrices (K splits), and one whose halves fill the GPU twice over (no K split) */
    int e64[8], e300[4];
    for (int i = 0; i < 8; i++) e64[i] = 64;
    for (int i = 0; i < 4; i++) e300[i] = 300;
    const int r512[] = {512}, r2048[] = {2048};
    test_wgmma_grouping(DI_DT_F8_E4M3, 1024, 5120, r2048, 0);
    test_wgmma_grouping(DI_DT_I8, 5120, 2304, e64, 8);
    test_wgmma_grouping(DI_DT_I8, 2304, 5120, e300, 4);
    test_wgmma_grouping(DI_DT_F8_E4M3, 5120, 1280, r512, 0);
    test_wgmma_grouping(DI_DT_F8_E4M3, 8192, 5120, r512, 0);
    test_copy_rows(1000, 5120);
    test_copy_rows(64, 640);
    test_greedy_tokens(256, 129280); /* B = 256's head: two slices a row */
    test_greedy_tokens(8, 129280);
    test_sample_tokens(256, 129280);
    test_edit_tokens(256, 129280); /* a B = 256 head of edited rows (structured output, penalties) */
    test_logprob_rows(256, 129280);
    test_greedy_tokens(DI_ROWS_PAST_GRID_Y, 3); /* launches in pieces of 65,535 rows */
    test_sample_tokens(DI_ROWS_PAST_GRID_Y, 3);
    test_embed(129280, 64, 4, 5120);
    test_hc_mean(64, 4, 5120, 3, 2);
    test_scale_bf16(64 * 32, 32, 128);

    /* idx_weights_proj 5120 -> 32 (BF16), compressor wkv/wgate 5120 -> 512 (F32 mode, bf16 w),
     * wo_a groups (FP8 [8 x 1024, 4096] read as bf16, a row-block view), the head 5120 -> 129280
     * (F32 mode, m = 1..4), router 5120 -> 384 (F32) */
    test_linear_fixed(DI_DT_BF16, DI_LIN_BF16, 64, 5120, 32, 32, 0);
    test_linear_fixed(DI_DT_BF16, DI_LIN_F32, 17, 5120, 512, 512, 0);
    test_linear_fixed(DI_DT_F8_E4M3, DI_LIN_BF16, 8, 4096, 1024, 8192, 3072);
    test_linear_fixed(DI_DT_F8_E4M3, DI_LIN_BF16, 1, 4096, 1024, 8192, 7168);
    test_linear_fixed(DI_DT_F32, DI_LIN_F32, 3, 5120, 384, 384, 0);
    if (head) {
        test_linear_fixed(DI_DT_BF16, DI_LIN_F32, 1, 5120, 129280, 129280, 0);
        test_linear_fixed(DI_DT_BF16, DI_LIN_F32, 4, 5120, 129280, 129280, 0);
    }
    test_linear_batch_inv(DI_DT_BF16, DI_LIN_BF16, 5120, 64);
    test_linear_batch_inv(DI_DT_F8_E4M3, DI_LIN_BF16, 4096, 64);
    test_linear_batch_inv(DI_DT_F32, DI_LIN_F32, 5120, 48);

    test_cmp_pair(64, 512);
    test_index_score_paged(4, 2048, 32, 128, 64, 656, 528, false);
    test_index_score_paged(2, 333, 32, 128, 16, 640, 512, false);
    test_index_score_paged(37, 2048, 32, 128, 64, 656, 528, false);
    test_index_score_paged(37, 2048, 32, 128, 64, 0, 512, false, true);
    test_candidates(4, 16384, 8, 2048, 0);
    test_candidates(2, 1000, 8, 2048, 100);

    test_swiglu(64, 2304, true, true);
    test_swiglu(17, 2304, false, false);
    test_moe_combine(64, 6, 5120);
    test_engram_gather(99092, 64, 24, 256);
    test_engram_gate(64, 4, 5120);
}

int main(int argc, char **argv) {
    const bool quick = argc > 1 && !strcmp(argv[1], "--quick");
    const bool medium = argc > 1 && !strcmp(argv[1], "--medium");
    if (!cuda_test_device()) return 0;
    if (!di_cuda_ctx_init(&g_cx)) {
        printf("FAIL: no CUDA context\n");
        return 1;
    }
    if (quick) run_quick();
    else if (argc > 1 && !strcmp(argv[1], "--wgmma")) run_wgmma_quick();
    else if (argc > 1 && !strcmp(argv[1], "--imma")) run_imma_quick();
    else if (argc > 1 && !strcmp(argv[1], "--index")) run_index_quick(); /* the index-score cases alone */
    else if (argc > 1 && !strcmp(argv[1], "--sample")) { /* the sampling cases alone, a B = 256 head included */
        test_greedy_tokens(256, 129280);
        test_sample_tokens(16, 5);
        test_sample_tokens(40, 3000);
        test_sample_tokens(256, 129280);
        test_sample_tokens(8, 129280);  /* the draw's clusters: 8 ranks a row */
        test_sample_tokens(33, 20000);  /* 4 ranks on a 132-multiprocessor card */
        test_edit_tokens(64, 3000);
        test_edit_tokens(256, 129280);
        test_logprob_rows(70, 3000);
        test_logprob_rows(256, 129280);
        test_logprob_rows(16, 129280); /* clusters of 8 */
        test_greedy_tokens(DI_ROWS_PAST_GRID_Y, 3);
        test_sample_tokens(DI_ROWS_PAST_GRID_Y, 3);
    } else if (argc > 1 && !strcmp(argv[1], "--sample-many")) { /* past the grid's y: slow on the emulator */
        test_greedy_tokens(DI_ROWS_PAST_GRID_Y, 3);
        test_sample_tokens(DI_ROWS_PAST_GRID_Y, 3);
    } else if (argc > 1 && !strcmp(argv[1], "--sample-small")) { /* the same at emulator sizes */
        test_greedy_tokens(3, 7);
        test_sample_tokens(16, 5);
        test_sample_tokens(24, 3000);
        test_sample_tokens(8, 20000); /* past SAMPLE_CAP in the equal row */
        test_sample_tokens(1, 20000, 1); /* the equal row alone: the draw's clusters (4 ranks on 4 SMs) */
        test_sample_tokens(2, 20000, 6); /* 2 ranks (EMU_SMS=132: 8) */
        test_sample_tokens(17, 70000, 1); /* one block a row (17 x 8 > 132): the equal row's cut over two digits */
        test_edit_tokens(64, 3000);
        test_edit_tokens(10, 20000); /* row 4 (edited, repetition penalty): a history of thousands of ids */
        test_edit_tokens(4, 5);
        test_logprob_rows(70, 3000);
        test_logprob_rows(14, 20000); /* EMU_SMS=132: clusters of 8 */
        test_logprob_rows(1, 20000);  /* clusters of 4 (4 SMs) */
        test_logprob_rows(2, 20000);  /* clusters of 2 (4 SMs) */
        test_logprob_rows(7, 5);
    }
    else if (argc > 1 && !strcmp(argv[1], "--moe")) { /* routing, grouping, the SwiGLU and combine alone, one
                                                         prefill-sized; grouped GEMMs of x's rows through a list */
        test_moe_route(5, 16, 4, 0);
        test_moe_route(37, 40, 6, 12);
        test_moe_route(9, 384, 6, 0, true);
        test_moe_route(8, 384, 6, 48); /* one launch routing and grouping, the proxy's resident experts */
        test_moe_route(1000, 384, 6, 48);
        test_moe_combine(3, 6, 300);
        test_swiglu(6, 96, true, true);    /* the SwiGLU with each form of h's act_quant */
        test_swiglu(5, 160, false, false);
        const int g_rows[] = {3, 0, 9, 1};
        test_linear_grouped(DI_DT_I8, 256, 40, g_rows, 4);
    }
    else run_full(!medium);
    printf("%s: %d passed, %d failed\n", g_fail ? "FAIL" : "PASS", g_pass, g_fail);
    di_cuda_ctx_free(&g_cx);
    return g_fail ? 1 : 0;
}
