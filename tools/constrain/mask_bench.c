/* Mask-computation benchmark (not a test): for each MaskBench schema with valid instances, compile
 * it (timed), then for each valid instance tokenise its JSON text and, at every position, time
 * di_matcher_fill_mask over the whole vocabulary, then advance by the instance's token. One core.
 *
 * Input on stdin, one JSON object per line: {"name": ..., "schema": {...}, "instances": ["text", ...]}
 * (tools/constrain/bench_masks.py writes it). Output: one line per schema
 *   name status compile_us n_tokens  (status ok | unsupported | error | reject)
 * and on stderr-free stdout a final "mask_us" line with every per-token time, for the driver to
 * summarise next to llguidance and xgrammar.
 *
 * With --check (after the tokenizer), every mask is also compared with di_matcher_fill_mask_reference
 * and a schema whose masks differ anywhere is reported as "mismatch" (times are then meaningless).
 *
 * Build: see bench_masks.py (links build/libdeepinfer_core.a). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "constrain/constrain.h"
#include "tokenizer/tokenizer.h"

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: mask_bench TOKENIZER_JSON [--compact] [--check] < cases.jsonl\n");
        return 2;
    }
    di_err err = {0};
    di_tokenizer *tok = NULL;
    if (di_tokenizer_load(argv[1], &tok, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    di_constrain_opts opts;
    di_constrain_opts_init(&opts);
    bool check = false;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--compact")) opts.json_ws_flexible = false;
        if (!strcmp(argv[i], "--check")) check = true;
    }
    di_token_trie *v = NULL;
    di_token_trie_build(tok, 1, &v, &err);
    int32_t n_vocab = di_tokenizer_vocab_size(tok);
    size_t words = ((size_t)n_vocab + 31) / 32;
    uint32_t *mask = malloc(words * 4), *ref = malloc(words * 4);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    size_t n_times = 0, cap_times = 1 << 16;
    double *times = malloc(cap_times * sizeof(double));
    while ((n = getline(&line, &cap, stdin)) > 0) {
        cJSON *c = cJSON_ParseWithLength(line, (size_t)n);
        if (!c) continue;
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(c, "name"));
        char *schema = cJSON_PrintUnformatted(cJSON_GetObjectItem(c, "schema"));
        di_grammar *g = NULL;
        double t0 = now_us();
        di_status st = di_constrain_compile(DI_CONSTRAIN_JSON_SCHEMA, schema, strlen(schema), &opts, &g, &err);
        double compile_us = now_us() - t0;
        free(schema);
        if (st) {
            printf("%s %s %.1f 0\n", name, st == DI_EUNSUPPORTED ? "unsupported" : "error", compile_us);
            cJSON_Delete(c);
            continue;
        }
        int n_tok = 0;
        bool all_ok = true, same = true;
        const cJSON *inst;
        cJSON_ArrayForEach(inst, cJSON_GetObjectItem(c, "instances")) {
            const char *text = cJSON_GetStringValue(inst);
            di_token_vec ids = {0};
            if (!text || di_tokenizer_encode(tok, text, strlen(text), false, &ids, &err)) continue;
            di_matcher *m = di_matcher_new(g, v);
            for (size_t i = 0; i <= ids.n; i++) {
                double a = now_us();
                di_matcher_fill_mask(m, mask);
                double b = now_us();
                if (n_times == cap_times) times = realloc(times, (cap_times *= 2) * sizeof(double));
                times[n_times++] = b - a;
                if (check) {
                    di_matcher_fill_mask_reference(m, ref);
                    same &= !memcmp(mask, ref, words * 4);
                }
                n_tok++;
                int32_t next = i < ids.n ? ids.ids[i] : 1;
                if (!((mask[next / 32] >> (next % 32)) & 1) || !di_matcher_accept_token(m, next)) {
                    all_ok = false;
                    break;
                }
            }
            di_matcher_free(m);
            di_token_vec_free(&ids);
        }
        printf("%s %s %.1f %d\n", name, !same ? "mismatch" : all_ok ? "ok" : "reject", compile_us, n_tok);
        di_grammar_free(g);
        cJSON_Delete(c);
    }
    printf("mask_us");
    for (size_t i = 0; i < n_times; i++) printf(" %.2f", times[i]);
    printf("\n");
    free(times);
    free(line);
    free(mask);
    free(ref);
    di_token_trie_free(v);
    di_tokenizer_free(tok);
    return 0;
}
