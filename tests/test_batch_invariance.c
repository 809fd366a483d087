/* Batch invariance (issue 5, DEEPINFER_BATCH_INVARIANT): one request's logits are bit-identical
 * whether it runs alone or inside batches of 2..64 random other sequences -- prefills of random
 * length, chunks of sequences that already have context, single decode tokens -- with the target
 * at a random place in the batch. Four calls: the target's prefill, then three decode steps.
 *
 * The other sequences' last rows want their logits, only their greedy token, only a sampled token
 * or, on a device, only a token taken after a mask, a bias and penalties (applied to the row where
 * its logits are: the target's must not notice) (di_batch.want_logits: the device gathers the rows
 * that leave it); every row's greedy token must
 * be the argmax of its logits as the sampler takes it (di_sample_greedy_token), where the logits
 * come back, and every sampled token a token of the vocabulary (test_engine and test_cuda_fwd_ops
 * check the draws themselves against the host sampler).
 *
 * On the CPU this holds by construction (every op is per row with a fixed order); the device run
 * (DEEPINFER_ACCELERATOR=nvidia) checks the GPU backend in its batch-invariant mode. */
#include <stdint.h>
#include <string.h>

#include "forward/forward.h"
#include "sample/sampler.h"
#include "test_harness.h"
#include "fixture_util.h"

enum { PROMPT = 23, STEPS = 4 };

static uint64_t g_rng = 0x243f6a8885a308d3ull;
static uint32_t rnd(uint32_t n) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(g_rng >> 33) % n;
}

static const int32_t k_target[PROMPT + STEPS] = {0,   17,  912, 44,  1203, 7,   7,   88,  1500, 3,
                                                 42,  256, 999, 12,  640,  31,  77,  5,   1900, 64,
                                                 128, 18,  11,  301, 5,    1777, 23};

/* Runs call `step` of the target (prefill for step 0, else one decode token) with `n_others`
 * random other sequences; returns the target's logits [V] in out. */
static int run_call(const di_model *m, di_seq_state *target, di_seq_state **others, int n_others, int step,
                    float *out, di_err *err) {
    const int64_t V = m->cfg.vocab_size;
    const int n = n_others + 1, slot = rnd((uint32_t)n);
    di_seq_state **seqs = malloc(sizeof *seqs * (size_t)n);
    int *rows = malloc(sizeof(int) * (size_t)n);
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)(n * 48 + PROMPT));
    int R = 0, target_row = -1, o = 0;
    for (int i = 0; i < n; i++) {
        if (i == slot) {
            seqs[i] = target;
            rows[i] = step == 0 ? PROMPT : 1;
            for (int j = 0; j < rows[i]; j++) tokens[R + j] = k_target[step == 0 ? j : PROMPT + step - 1];
            target_row = R + rows[i] - 1;
        } else {
            seqs[i] = others[o++];
            /* a fresh prefill, a chunk or a decode token */
            rows[i] = seqs[i]->n_tokens == 0 ? 1 + (int)rnd(40) : (rnd(3) == 0 ? 1 + (int)rnd(8) : 1);
            for (int j = 0; j < rows[i]; j++) tokens[R + j] = 3 + (int32_t)rnd(2000);
            if (seqs[i]->n_tokens == 0) tokens[R] = 0;
        }
        R += rows[i];
    }
    uint8_t *want = calloc((size_t)R, 1);
    di_plain_sampling *sampling = calloc((size_t)R, sizeof *sampling); /* [R] */
    di_sample_row *edited = calloc((size_t)R, sizeof *edited);           /* [R] */
    const int64_t words = (V + 31) / 32;
    uint32_t *mask = malloc(sizeof(uint32_t) * (size_t)words); /* every other id allowed */
    for (int64_t w = 0; w < words; w++) mask[w] = 0x55555555u;
    static const di_logit_bias bias[2] = {{6, 3.0f}, {2, -1.0f}};
    static const int32_t hist[4] = {6, 8, 8, 10};
    static const di_sample_history h = {hist, 2, hist + 2, 2};
    di_sampling_params ep, ep_lp; /* edited rows: without and with logprobs (of the sampled distribution) */
    di_sampling_params_init(&ep);
    ep.logit_bias = bias, ep.n_logit_bias = 2, ep.repetition_penalty = 1.5f, ep.frequency_penalty = 0.5f;
    ep_lp = ep;
    ep_lp.logprobs = 3, ep_lp.logprobs_mode = DI_LOGPROBS_PROCESSED;
    int n_want = 0, n_logit_rows = 0, target_out = -1;
    for (int i = 0, r = 0; i < n; r += rows[i], i++) { /* every sequence's last row: the head's GEMM sees n rows */
        const bool target_seq = r + rows[i] - 1 == target_row;
        const uint32_t kind = rnd(m->dev_backend ? 4 : 3);
        want[r + rows[i] - 1] = target_seq || kind == 0 ? DI_WANT_LOGITS
                                : kind == 1             ? DI_WANT_TOKEN
                                : kind == 2             ? DI_WANT_SAMPLE : DI_WANT_EDITED;
        sampling[r + rows[i] - 1] = (di_plain_sampling){.temperature = 0.5f + (float)rnd(3), .top_p = 0.9f,
                                                        .top_k = (int32_t)rnd(50), .seed = rnd(1000),
                                                        .position = (uint64_t)step};
        edited[r + rows[i] - 1] = (di_sample_row){.params = rnd(2) ? &ep_lp : &ep, .history = &h,
                                                  .allowed_mask = mask, .position = (uint64_t)step};
        if (target_seq) target_out = n_logit_rows;
        n_logit_rows += want[r + rows[i] - 1] == DI_WANT_LOGITS;
        n_want++;
    }
    float *logits = malloc(sizeof(float) * (size_t)n_logit_rows * V);
    int32_t *greedy = malloc(sizeof(int32_t) * (size_t)n_want);
    di_sample_result *lp = malloc(sizeof *lp * (size_t)n_want);
    di_batch b = {.n_rows = R, .tokens = tokens, .n_seqs = n, .seqs = seqs, .seq_n_rows = rows, .logits = logits,
                  .want_logits = want, .head_tokens = greedy, .head_logprobs = lp, .row_sampling = sampling,
                  .sample_rows = edited};
    di_status st = di_forward(m, &b, err);
    if (!st) {
        memcpy(out, logits + (size_t)target_out * V, sizeof(float) * (size_t)V);
        int mismatched = 0;
        for (int r = 0, w = 0, l = 0; r < R; r++) { /* rows whose logits came back: their greedy token */
            if (!want[r]) continue;
            if (want[r] == DI_WANT_LOGITS)
                mismatched += greedy[w] != di_sample_greedy_token(logits + (size_t)l++ * V, (int32_t)V);
            mismatched += greedy[w] < 0 || greedy[w] >= V;
            if (want[r] == DI_WANT_EDITED) mismatched += greedy[w] % 2 != 0; /* the mask's */
            if (want[r] == DI_WANT_EDITED && edited[r].params->logprobs) { /* its token's, a sorted list */
                mismatched += lp[w].token_id != greedy[w] || lp[w].n_top != 3 || !(lp[w].logprob <= 0.0f);
                for (int k = 1; k < 3; k++) mismatched += !(lp[w].top[k].logprob <= lp[w].top[k - 1].logprob);
            }
            w++;
        }
        CHECKF(mismatched == 0, "batch of %d, step %d: %d greedy tokens not the argmax of their logits", n, step,
               mismatched);
    }
    free(greedy);
    free(lp);
    free(sampling);
    free(edited);
    free(mask);
    free(seqs);
    free(rows);
    free(tokens);
    free(want);
    free(logits);
    return st;
}

int main(void) {
    di_err err = {0};
    di_model *m = NULL;
    /* batch-invariant mode on devices (the default mode may take cuBLAS for large row counts) */
    if (di_model_load(&m, DI_TINY_FIXTURE_DIR, &err) || di_model_select_backend(m, test_backend(), DI_BACKEND_BATCH_INVARIANT, &err)) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return 1;
    }
    printf("batch invariance, %s backend%s\n", di_model_backend_name(m), m->batch_invariant ? " (batch-invariant mode)" : "");
    { /* a want_logits value that names nothing, or a token wanted with nowhere to put it: refused */
        di_seq_state *st = di_seq_state_new(m);
        int32_t toks[2] = {0, 5};
        int nr = 2;
        uint8_t want[2] = {0, 5};
        int32_t greedy[2];
        di_batch b = {.n_rows = 2, .tokens = toks, .n_seqs = 1, .seqs = &st, .seq_n_rows = &nr, .want_logits = want,
                      .head_tokens = greedy};
        di_err e = {0};
        CHECK(di_forward(m, &b, &e) == DI_EINVAL && strstr(e.msg, "want_logits[1] = 5"));
        /* an edited token: a device's, with sampler inputs, room for its logprobs if it asks for them,
         * a history a penalty can read */
        want[1] = DI_WANT_EDITED;
        if (!m->dev_backend) {
            CHECK(di_forward(m, &b, &e) == DI_EINVAL && strstr(e.msg, "device backend"));
        } else {
            CHECK(di_forward(m, &b, &e) == DI_EINVAL && strstr(e.msg, "sample_rows"));
            di_sampling_params sp;
            di_sampling_params_init(&sp);
            sp.logprobs = 2;
            di_sample_row srows[2] = {{0}, {.params = &sp}};
            b.sample_rows = srows;
            CHECK(di_forward(m, &b, &e) == DI_EINVAL && strstr(e.msg, "row 1") && strstr(e.msg, "head_logprobs"));
            sp.logprobs = 0, sp.repetition_penalty = 1.2f;
            const int32_t bad[1] = {m->cfg.vocab_size + 5};
            const di_sample_history bh = {bad, 1, NULL, 0};
            srows[1].history = &bh;
            CHECK(di_forward(m, &b, &e) == DI_ERANGE && strstr(e.msg, "prompt_ids[0]"));
            b.sample_rows = NULL;
        }
        want[1] = DI_WANT_TOKEN, b.head_tokens = NULL;
        CHECK(di_forward(m, &b, &e) == DI_EINVAL && strstr(e.msg, "head_tokens"));
        want[1] = DI_WANT_SAMPLE, b.head_tokens = greedy;
        CHECK(di_forward(m, &b, &e) == DI_EINVAL && strstr(e.msg, "row_sampling"));
        di_plain_sampling ps[2] = {{0}, {.temperature = 0.0f, .top_p = 1.0f}};
        b.row_sampling = ps;
        CHECK(di_forward(m, &b, &e) == DI_EINVAL && strstr(e.msg, "row 1") && strstr(e.msg, "temperature"));
        CHECK(st->n_tokens == 0);
        di_seq_state_free(st);
    }
    const int64_t V = m->cfg.vocab_size;
    float *ref = malloc(sizeof(float) * (size_t)V * STEPS), *got = malloc(sizeof(float) * (size_t)V);
    di_seq_state *alone = di_seq_state_new(m);
    for (int step = 0; step < STEPS; step++)
        CHECKF(run_call(m, alone, NULL, 0, step, ref + (size_t)step * V, &err) == DI_OK, "%s", err.msg);
    di_seq_state_free(alone);
    const int sizes[] = {2, 3, 8, 17, 32, 64};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        const int n_others = sizes[si] - 1;
        di_seq_state *target = di_seq_state_new(m);
        di_seq_state **others = malloc(sizeof *others * (size_t)n_others);
        for (int i = 0; i < n_others; i++) {
            others[i] = di_seq_state_new(m);
            if (i % 2) { /* half of them already hold context */
                int32_t toks[64];
                int len = 1 + (int)rnd(60);
                for (int j = 0; j < len; j++) toks[j] = j ? 3 + (int32_t)rnd(2000) : 0;
                int nr = len;
                di_batch b = {.n_rows = len, .tokens = toks, .n_seqs = 1, .seqs = &others[i], .seq_n_rows = &nr};
                CHECKF(di_forward(m, &b, &err) == DI_OK, "%s", err.msg);
            }
        }
        int differing_steps = 0;
        for (int step = 0; step < STEPS; step++) {
            CHECKF(run_call(m, target, others, n_others, step, got, &err) == DI_OK, "%s", err.msg);
            if (memcmp(got, ref + (size_t)step * V, sizeof(float) * (size_t)V) != 0) {
                int64_t nd = 0, first = -1;
                for (int64_t v = 0; v < V; v++)
                    if (memcmp(&got[v], &ref[(size_t)step * V + v], 4)) {
                        if (first < 0) first = v;
                        nd++;
                    }
                fprintf(stderr, "batch of %d, step %d: %lld of %lld logits differ (first at %lld: %.9g vs %.9g)\n",
                        sizes[si], step, (long long)nd, (long long)V, (long long)first, got[first],
                        ref[(size_t)step * V + first]);
                differing_steps++;
            }
        }
        CHECKF(differing_steps == 0, "batch of %d: %d of %d calls not bit-identical to the request alone", sizes[si],
               differing_steps, STEPS);
        printf("  batch of %2d: %s\n", sizes[si], differing_steps ? "DIFFERS" : "bit-identical in all 4 calls");
        for (int i = 0; i < n_others; i++) di_seq_state_free(others[i]);
        free(others);
        di_seq_state_free(target);
    }
    free(ref);
    free(got);
    di_model_free(m);
    return TEST_SUMMARY();
}
