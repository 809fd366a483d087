/* The tiny fixture's golden outputs (tests/data/v41-tiny, from DeepSeek's reference), end to end:
 *   replay mode  - selections forced to the recorded ones: prefill rows vs prefill_logits and decode
 *                  rows vs decode_logits (recorded top-k) and vs repaired_decode_logits (repaired
 *                  top-k); bounds mean <= 0.02, p99 <= 0.3, max <= 0.8, argmax >= 98%
 *   free mode    - own top-k, incremental decode of the recorded tokens vs one prefill over the
 *                  extended sequence (intended semantics): mean <= 0.2, max <= 3 per prompt; every
 *                  selection that differs from extended_topk must be a near-tie in our own scores
 *   greedy       - free greedy continuation vs repaired_greedy_tokens, diverging only where the
 *                  golden margin is below 0.5
 *   batched      - all prompts in one batch (prefills of different lengths, then decode steps of
 *                  all rows together) give bit-identical logits to the single-prompt runs
 * Prints the measured errors per prompt. */
#include "forward/run.h"
#include "test_harness.h"
#include "fixture_util.h"

#define N_PROMPTS 6
#define N_DECODE 16

typedef struct fixture {
    di_model *m;
    di_checkpoint *golden;
    int64_t V;
} fixture;

static float *gf(const fixture *f, int i, const char *what, int64_t *n) {
    char name[128];
    snprintf(name, sizeof name, "prompt.%d.%s", i, what);
    return golden_f32(f->golden, name, n);
}
static int32_t *gi(const fixture *f, int i, const char *what, int64_t *n) {
    char name[128];
    snprintf(name, sizeof name, "prompt.%d.%s", i, what);
    return golden_i32(f->golden, name, n);
}

static void print_stats(const char *label, int i, logit_stats s) {
    printf("  %-28s prompt %d: rows %3d  mean %.4f  p99 %.4f  max %.4f  argmax %d/%d\n", label, i,
           s.rows, s.mean_abs, s.p99_abs, s.max_abs, s.argmax_agree, s.rows);
}

static int g_argmax_rows, g_argmax_agree;

static void check_replay_bounds(const char *label, int i, logit_stats s) {
    print_stats(label, i, s);
    CHECKF(s.mean_abs <= 0.02, "%s prompt %d: mean %.4f", label, i, s.mean_abs);
    CHECKF(s.p99_abs <= 0.3, "%s prompt %d: p99 %.4f", label, i, s.p99_abs);
    CHECKF(s.max_abs <= 0.8, "%s prompt %d: max %.4f", label, i, s.max_abs);
    g_argmax_rows += s.rows;
    g_argmax_agree += s.argmax_agree;
}

/* argmax agreement is pooled over every replay row of every prompt: with margins as flat as this
 * untrained model's (median 0.34), one near-tie in a 17-row prompt would already be 6%. */
static void check_pooled_argmax(void) {
    printf("  replay argmax agreement, all prompts: %d of %d rows (%.1f%%)\n", g_argmax_agree, g_argmax_rows,
           100.0 * g_argmax_agree / g_argmax_rows);
    CHECK(g_argmax_agree >= 0.98 * g_argmax_rows);
}

/* ids = prompt + the 16 recorded greedy tokens g0..g15 */
static int32_t *prompt_plus_greedy(const fixture *f, int i, int64_t *L_out) {
    int64_t L = 0, ng = 0;
    int32_t *tok = gi(f, i, "tokens", &L);
    int32_t *g = gi(f, i, "greedy_tokens", &ng);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(L + N_DECODE));
    memcpy(ids, tok, sizeof(int32_t) * (size_t)L);
    memcpy(ids + L, g, sizeof(int32_t) * N_DECODE);
    free(tok);
    free(g);
    *L_out = L;
    return ids;
}

static void replay_mode(const fixture *f, int i, const char *topk_name, const char *decode_name) {
    int64_t L, nsel;
    int32_t *ids = prompt_plus_greedy(f, i, &L);
    const int n = (int)L + N_DECODE;
    int32_t *sel = gi(f, i, topk_name, &nsel);
    di_replay_topk replay = {sel, nsel / ((int64_t)f->m->cfg.n_index_sources * f->m->cfg.index_topk)};
    float *logits = malloc(sizeof(float) * (size_t)n * f->V);
    di_err err = {0};
    CHECKF(di_run_ids(f->m, ids, n, (int)L, &replay, logits, NULL, NULL, NULL, &err) == DI_OK, "%s", err.msg);
    float *pre = gf(f, i, "prefill_logits", NULL), *dec = gf(f, i, decode_name, NULL);
    /* all rows of the prompt: the prefill rows, then the 16 decode rows */
    float *want = malloc(sizeof(float) * (size_t)n * f->V);
    memcpy(want, pre, sizeof(float) * (size_t)L * f->V);
    memcpy(want + L * f->V, dec, sizeof(float) * N_DECODE * f->V);
    char label[64];
    snprintf(label, sizeof label, "replay %s", topk_name);
    check_replay_bounds(label, i, compare_logits(logits, want, n, f->V));
    snprintf(label, sizeof label, "  of which decode rows");
    print_stats(label, i, compare_logits(logits + L * f->V, dec, N_DECODE, f->V));
    free(want);
    free(ids);
    free(sel);
    free(logits);
    free(pre);
    free(dec);
}

typedef struct score_capture {
    const di_model *m;
    float **rows;   /* [n_index_sources * n_positions] -> scores of that (layer, position) */
    int64_t *len;
    int64_t n_positions, next_pos[64];
} score_capture;

static void on_scores(void *user, const char *name, int layer, float *data, int64_t n) {
    score_capture *sc = user;
    if (strcmp(name, "index_score_row")) return;
    int slot = -1;
    for (int s = 0; s < sc->m->cfg.n_index_sources; s++)
        if (sc->m->cfg.index_source_layer_ids[s] == layer) slot = s;
    if (slot < 0) return;
    int64_t pos = sc->next_pos[slot]++;
    size_t k = (size_t)slot * sc->n_positions + pos;
    sc->rows[k] = malloc(sizeof(float) * (size_t)(n ? n : 1));
    memcpy(sc->rows[k], data, sizeof(float) * (size_t)n);
    sc->len[k] = n;
}

/* bf16 spacing at |x| */
static float bf16_ulp_at(float x) {
    int e;
    frexpf(fmaxf(fabsf(x), 1e-30f), &e);
    return ldexpf(1.0f, e - 8);
}

/* The first (position, layer) whose own selection differs from the reference's is checked for a
 * near-tie: every entry swapped in or out must score, in our own scores, within `NEAR_TIE_ULPS`
 * bf16 ulps of our k-th score. Before that position both paths saw the same selections, so only
 * rounding separates them; after it the states differ and scores drift, so later differences are
 * counted but not judged. Returns 1 if the first difference is not a near-tie. */
#define NEAR_TIE_ULPS 4.0f
static int first_difference_is_tie(const fixture *f, const score_capture *sc, const int32_t *own,
                                   const int32_t *ref, int64_t n_pos, int *n_differ, int64_t *first_pos) {
    const int K = f->m->cfg.index_topk, NI = f->m->cfg.n_index_sources;
    *first_pos = -1;
    int bad = 0;
    for (int64_t p = 0; p < n_pos; p++)
        for (int s = 0; s < NI; s++) {
            const int32_t *a = own + ((size_t)s * n_pos + p) * K, *b = ref + ((size_t)s * n_pos + p) * K;
            if (!memcmp(a, b, sizeof(int32_t) * (size_t)K)) continue;
            (*n_differ)++;
            if (*first_pos >= 0) continue; /* only the first (position, layer) is judged */
            *first_pos = p;
            const float *score = sc->rows[(size_t)s * sc->n_positions + p];
            float kth = INFINITY;
            for (int j = 0; j < K; j++)
                if (a[j] >= 0 && score[a[j]] < kth) kth = score[a[j]];
            for (int side = 0; side < 2; side++)
                for (int j = 0; j < K; j++) {
                    const int32_t *x = side ? b : a, *y = side ? a : b;
                    if (x[j] < 0) continue;
                    int in_other = 0;
                    for (int q = 0; q < K; q++) in_other |= y[q] == x[j];
                    if (in_other) continue;
                    float gap = fabsf(score[x[j]] - kth) / bf16_ulp_at(kth);
                    printf("    first difference: layer %d pos %lld entry %d (%s only) score %g, k-th %g: %.1f ulps\n",
                           f->m->cfg.index_source_layer_ids[s], (long long)p, x[j], side ? "reference" : "ours",
                           score[x[j]], kth, gap);
                    if (!(gap <= NEAR_TIE_ULPS)) bad = 1;
                }
        }
    return bad;
}

static void free_mode(const fixture *f, int i) {
    int64_t L, nref;
    int32_t *ids = prompt_plus_greedy(f, i, &L);
    const int n = (int)L + N_DECODE, K = f->m->cfg.index_topk, NI = f->m->cfg.n_index_sources;
    float *logits = malloc(sizeof(float) * (size_t)n * f->V);
    int32_t *own = malloc(sizeof(int32_t) * (size_t)NI * n * K);
    score_capture sc = {f->m, calloc((size_t)NI * n, sizeof(float *)), calloc((size_t)NI * n, sizeof(int64_t)), n, {0}};
    /* run with a debug hook to capture our own scores: prefill then decode steps */
    di_seq_state *st = di_seq_state_new(f->m);
    di_err err = {0};
    for (int done = 0; done < n;) {
        int rows = done == 0 ? (int)L : 1;
        int32_t *own_chunk = malloc(sizeof(int32_t) * (size_t)NI * rows * K);
        di_batch b = {.n_rows = rows, .tokens = ids + done, .n_seqs = 1, .seqs = &st, .seq_n_rows = &rows,
                      .logits = logits + done * f->V, .topk_out = own_chunk, .debug_fn = on_scores,
                      .debug_user = &sc};
        CHECKF(di_forward(f->m, &b, &err) == DI_OK, "%s", err.msg);
        for (int s = 0; s < NI; s++)
            memcpy(own + ((size_t)s * n + done) * K, own_chunk + (size_t)s * rows * K,
                   sizeof(int32_t) * (size_t)rows * K);
        free(own_chunk);
        done += rows;
    }
    float *ext = gf(f, i, "extended_prefill_logits", NULL);
    int32_t *ref = gi(f, i, "extended_topk", &nref);
    logit_stats s = compare_logits(logits, ext, n, f->V);
    print_stats("free vs extended prefill", i, s);
    CHECKF(s.mean_abs <= 0.2, "free prompt %d: mean %.4f", i, s.mean_abs);
    CHECKF(s.max_abs <= 3.0, "free prompt %d: max %.4f", i, s.max_abs);
    /* rows before the first logit difference above 0.01 saw the reference's state up to rounding */
    int64_t drift = n;
    for (int64_t r = n - 1; r >= 0; r--) {
        logit_stats rs = compare_logits(logits + r * f->V, ext + r * f->V, 1, f->V);
        if (rs.max_abs > 0.01) drift = r;
    }
    int n_differ = 0;
    int64_t first = -1;
    int bad = first_difference_is_tie(f, &sc, own, ref, n, &n_differ, &first);
    printf("  %-28s prompt %d: %d of %d (layer, position) selections differ, first at position %lld; "
           "logits drift (> 0.01) from row %lld\n", "free selections", i, n_differ, NI * n,
           (long long)first, (long long)drift);
    if (first >= 0 && first <= drift)
        CHECKF(!bad, "prompt %d: the first selection difference (position %lld) is not a near-tie", i,
               (long long)first);
    else if (first >= 0)
        printf("    (first difference comes after the logits drifted: state differs, not judged)\n");
    for (int k = 0; k < NI * n; k++) free(sc.rows[k]);
    free(sc.rows);
    free(sc.len);
    di_seq_state_free(st);
    free(ids);
    free(logits);
    free(own);
    free(ext);
    free(ref);
}

static void greedy_mode(const fixture *f, int i) {
    int64_t L, nr, nm;
    int32_t *tok = gi(f, i, "tokens", &L);
    int32_t *r = gi(f, i, "repaired_greedy_tokens", &nr);
    float *margin = gf(f, i, "repaired_greedy_margin", &nm);
    di_seq_state *st = di_seq_state_new(f->m);
    float *logits = malloc(sizeof(float) * (size_t)L * f->V);
    di_err err = {0};
    int rows = (int)L;
    di_batch b = {.n_rows = rows, .tokens = tok, .n_seqs = 1, .seqs = &st, .seq_n_rows = &rows, .logits = logits};
    CHECKF(di_forward(f->m, &b, &err) == DI_OK, "%s", err.msg);
    int32_t next = argmax_f(logits + (L - 1) * f->V, f->V);
    int agree = 0, diverged_at = -1;
    for (int j = 0; j < (int)nr; j++) {
        if (next != r[j]) {
            diverged_at = j;
            break;
        }
        agree++;
        if (j + 1 == (int)nr) break;
        rows = 1;
        di_batch d = {.n_rows = 1, .tokens = &next, .n_seqs = 1, .seqs = &st, .seq_n_rows = &rows, .logits = logits};
        CHECKF(di_forward(f->m, &d, &err) == DI_OK, "%s", err.msg);
        next = argmax_f(logits, f->V);
    }
    printf("  %-28s prompt %d: %d of %lld tokens equal", "greedy vs repaired_greedy", i, agree, (long long)nr);
    if (diverged_at >= 0) printf(", diverges at choice %d (golden margin %.3f)", diverged_at, margin[diverged_at]);
    printf("\n");
    CHECKF(diverged_at < 0 || margin[diverged_at] < 0.5f, "prompt %d diverges at choice %d, margin %.3f",
           i, diverged_at, diverged_at >= 0 ? margin[diverged_at] : 0.0f);
    di_seq_state_free(st);
    free(tok);
    free(r);
    free(margin);
    free(logits);
}

/* All prompts in one batch: one forward with every prefill, then 16 steps decoding every prompt.
 * Batched = single holds in batch-invariant mode (always on the CPU; a device's default mode takes
 * cuBLAS for >= 256 rows), so the device runs it in that mode. */
static void batched_mode(const fixture *f) {
    const bool was_invariant = f->m->batch_invariant;
    f->m->batch_invariant = true;
    int64_t L[N_PROMPTS];
    int32_t *ids[N_PROMPTS];
    float *single[N_PROMPTS];
    di_seq_state *st[N_PROMPTS];
    di_err err = {0};
    int total = 0;
    for (int i = 0; i < N_PROMPTS; i++) {
        ids[i] = prompt_plus_greedy(f, i, &L[i]);
        single[i] = malloc(sizeof(float) * (size_t)(L[i] + N_DECODE) * f->V);
        CHECK(di_run_ids(f->m, ids[i], (int)L[i] + N_DECODE, (int)L[i], NULL, single[i], NULL, NULL, NULL,
                         &err) == DI_OK);
        st[i] = di_seq_state_new(f->m);
        total += (int)L[i];
    }
    int32_t *tokens = malloc(sizeof(int32_t) * (size_t)total);
    float *logits = malloc(sizeof(float) * (size_t)total * f->V);
    int rows[N_PROMPTS], off = 0;
    for (int i = 0; i < N_PROMPTS; i++) {
        rows[i] = (int)L[i];
        memcpy(tokens + off, ids[i], sizeof(int32_t) * (size_t)L[i]);
        off += (int)L[i];
    }
    di_batch b = {.n_rows = total, .tokens = tokens, .n_seqs = N_PROMPTS, .seqs = st, .seq_n_rows = rows,
                  .logits = logits};
    CHECKF(di_forward(f->m, &b, &err) == DI_OK, "%s", err.msg);
    int identical = 0, compared = 0;
    off = 0;
    for (int i = 0; i < N_PROMPTS; i++) {
        compared++;
        identical += !memcmp(logits + (size_t)off * f->V, single[i], sizeof(float) * (size_t)L[i] * f->V);
        off += (int)L[i];
    }
    for (int j = 0; j < N_DECODE; j++) {
        int32_t step_tok[N_PROMPTS];
        int ones[N_PROMPTS];
        for (int i = 0; i < N_PROMPTS; i++) {
            step_tok[i] = ids[i][L[i] + j];
            ones[i] = 1;
        }
        di_batch d = {.n_rows = N_PROMPTS, .tokens = step_tok, .n_seqs = N_PROMPTS, .seqs = st,
                      .seq_n_rows = ones, .logits = logits};
        CHECKF(di_forward(f->m, &d, &err) == DI_OK, "%s", err.msg);
        for (int i = 0; i < N_PROMPTS; i++) {
            compared++;
            identical += !memcmp(logits + (size_t)i * f->V, single[i] + (L[i] + j) * f->V, sizeof(float) * f->V);
        }
    }
    printf("  batched (6 prompts, prefill + 16 decode steps): %d of %d row groups bit-identical to single runs\n",
           identical, compared);
    CHECK(identical == compared);
    f->m->batch_invariant = was_invariant;
    for (int i = 0; i < N_PROMPTS; i++) {
        free(ids[i]);
        free(single[i]);
        di_seq_state_free(st[i]);
    }
    free(tokens);
    free(logits);
}

int main(void) {
    fixture f = {0};
    di_err err = {0};
    if (di_model_load(&f.m, DI_TINY_FIXTURE_DIR, &err) || test_use_backend(f.m, &err) ||
        di_safetensors_open_file(&f.golden, DI_TINY_FIXTURE_DIR "/golden.safetensors", &err)) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return 1;
    }
    f.V = f.m->cfg.vocab_size;
    printf("v41-tiny fixture, %s backend:\n", di_model_backend_name(f.m));
    for (int i = 0; i < N_PROMPTS; i++) {
        replay_mode(&f, i, "topk", "decode_logits");
        replay_mode(&f, i, "repaired_topk", "repaired_decode_logits");
        free_mode(&f, i);
        greedy_mode(&f, i);
    }
    check_pooled_argmax();
    batched_mode(&f);
    di_checkpoint_close(f.golden);
    di_model_free(f.m);
    return TEST_SUMMARY();
}
