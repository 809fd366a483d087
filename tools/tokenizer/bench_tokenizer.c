/* Tokenizer benchmark (not a test): load time and single-thread encode throughput of deepinfer's
 * tokenizer on a text file, split into documents of ~4 KB at line ends (as bench.py does for HF).
 * Built and run by tools/tokenizer/bench.py; usage: bench_tokenizer TOKENIZER.json TEXT_FILE [REPEATS] */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenizer/tokenizer.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOKENIZER.json TEXT_FILE [REPEATS]\n", argv[0]);
        return 2;
    }
    int repeats = argc > 3 ? atoi(argv[3]) : 3;
    di_tokenizer *t = NULL;
    di_err err = {0};
    double best_load = 1e9;
    for (int r = 0; r < 5; r++) { /* load time: best of 5 */
        double t0 = now_s();
        if (di_tokenizer_load(argv[1], &t, &err)) {
            fprintf(stderr, "%s\n", err.msg);
            return 1;
        }
        double dt = now_s() - t0;
        if (dt < best_load) best_load = dt;
        if (r < 4) di_tokenizer_free(t);
    }
    FILE *f = fopen(argv[2], "rb");
    if (!f) return 1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *text = malloc((size_t)n + 1);
    if (fread(text, 1, (size_t)n, f) != (size_t)n) return 1;
    fclose(f);
    size_t n_docs = 0, n_ids = 0;
    di_token_vec v = {0};
    printf("load_ms %.1f\n", best_load * 1e3);
    for (int r = 0; r < repeats; r++) {
        double t0 = now_s();
        n_docs = n_ids = 0;
        for (size_t pos = 0; pos < (size_t)n;) {
            size_t end = pos + 4000 < (size_t)n ? pos + 4000 : (size_t)n;
            while (end < (size_t)n && text[end - 1] != '\n') end++;
            v.n = 0;
            if (di_tokenizer_encode(t, text + pos, end - pos, false, &v, &err)) {
                fprintf(stderr, "%s\n", err.msg);
                return 1;
            }
            n_ids += v.n;
            n_docs++;
            pos = end;
        }
        double dt = now_s() - t0;
        printf("pass %d %s: %.2f MB in %.3f s = %.1f MB/s, %.2f M tokens/s (%zu docs, %zu ids)\n", r + 1,
               r == 0 ? "(cold BPE cache)" : "(warm cache)", n / 1e6, dt, n / 1e6 / dt, n_ids / 1e6 / dt, n_docs, n_ids);
    }
    di_token_vec_free(&v);
    di_tokenizer_free(t);
    free(text);
    return 0;
}
