/* Chunked prefill and mixed batches: a prompt fed in chunks of 1, 7 and 64 tokens (chunks ending
 * inside ratio-2 compressor pairs, prompts longer than the SWA window), interleaved in the same
 * forward calls with other sequences' decode steps, gives the same logits as one-shot prefill. With
 * the tiny model's window (16) and top-k (8) every attention list fits one 64-entry softmax run, so
 * the window layout of a chunk cannot change the result: the logits must be bit-identical. */
#include "forward/run.h"
#include "test_harness.h"
#include "fixture_util.h"

int main(void) {
    di_err err = {0};
    di_model *m = NULL;
    di_checkpoint *golden = NULL;
    if (di_model_load(&m, DI_TINY_FIXTURE_DIR, &err) || test_use_backend(m, &err) ||
        di_safetensors_open_file(&golden, DI_TINY_FIXTURE_DIR "/golden.safetensors", &err)) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return 1;
    }
    const int64_t V = m->cfg.vocab_size;
    int64_t L5, L2;
    int32_t *p5 = golden_i32(golden, "prompt.5.tokens", &L5); /* 150 tokens */
    int32_t *p2 = golden_i32(golden, "prompt.2.tokens", &L2); /* 17 tokens, decoded alongside */
    float *one_shot = malloc(sizeof(float) * (size_t)L5 * V);
    CHECK(di_run_ids(m, p5, (int)L5, (int)L5, NULL, one_shot, NULL, NULL, NULL, &err) == DI_OK);
    /* reference for the companion sequence: prefill of p2, then greedy-free fixed tokens decode */
    const int chunk_sizes[] = {1, 7, 64};
    for (int ci = 0; ci < 3; ci++) {
        const int chunk = chunk_sizes[ci];
        di_seq_state *a = di_seq_state_new(m), *b = di_seq_state_new(m);
        float *got = malloc(sizeof(float) * (size_t)L5 * V);
        /* companion: prefill p2 alone first */
        int rows_b = (int)L2;
        float *lb = malloc(sizeof(float) * (size_t)(L2 + 200) * V);
        di_batch pb = {.n_rows = rows_b, .tokens = p2, .n_seqs = 1, .seqs = &b, .seq_n_rows = &rows_b, .logits = lb};
        CHECK(di_forward(m, &pb, &err) == DI_OK);
        int identical_rows = 0;
        for (int done = 0; done < L5;) {
            int n = (int)(L5 - done < chunk ? L5 - done : chunk);
            int32_t toks[65];
            memcpy(toks, p5 + done, sizeof(int32_t) * (size_t)n);
            toks[n] = p2[(done / chunk) % L2]; /* the companion decodes one token per call */
            di_seq_state *seqs[2] = {a, b};
            int rows[2] = {n, 1};
            float *out = malloc(sizeof(float) * (size_t)(n + 1) * V);
            di_batch bb = {.n_rows = n + 1, .tokens = toks, .n_seqs = 2, .seqs = seqs, .seq_n_rows = rows,
                           .logits = out};
            CHECKF(di_forward(m, &bb, &err) == DI_OK, "%s", err.msg);
            memcpy(got + (size_t)done * V, out, sizeof(float) * (size_t)n * V);
            free(out);
            done += n;
        }
        for (int64_t r = 0; r < L5; r++) identical_rows += !memcmp(got + r * V, one_shot + r * V, sizeof(float) * V);
        logit_stats s = compare_logits(got, one_shot, (int)L5, V);
        printf("  chunks of %2d (with a companion decode each call): %d of %lld rows bit-identical, max |d| %.3g\n",
               chunk, identical_rows, (long long)L5, s.max_abs);
        CHECK(identical_rows == L5);
        free(got);
        free(lb);
        di_seq_state_free(a);
        di_seq_state_free(b);
    }
    free(p5);
    free(p2);
    free(one_shot);
    di_checkpoint_close(golden);
    di_model_free(m);
    return TEST_SUMMARY();
}
