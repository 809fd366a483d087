/* `deepinfer bench [--model DIR]`: CPU engine benchmark (on a GPU build with a device present, or
 * with --backend cuda, the whole-model GPU benchmark of cmd_bench_gpu.c runs instead). For batch sizes 1..64 it runs B requests
 * of 64 prompt tokens that each generate 16 tokens, and prints prefill and decode tokens/s, the
 * mean scheduling (planning) time per step, and the decode step time against the memory roofline
 * measured in the same run (copy bandwidth: a decode step must at least read the weights it uses).
 * Default model: the bundled tiny fixture. Then the host sampler's table (cmd_bench_sampling.c) at
 * V4.1's vocabulary, whatever the model's: the cost of sampling a step's rows on this CPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "cli/commands.h"
#include "deepinfer.h"
#include "forward/device.h"

#define DI_V41_VOCAB 129280 /* the host sampling table's row length */

/* Copy bandwidth (read + write bytes per second) of a buffer far larger than the caches. */
static double measure_copy_bandwidth(void) {
    const size_t n = (size_t)256 << 20;
    char *a = malloc(n), *b = malloc(n);
    memset(a, 1, n);
    memset(b, 2, n);
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = di_seconds_now();
        memcpy(b, a, n);
        double dt = di_seconds_now() - t0;
        if (2.0 * (double)n / dt > best) best = 2.0 * (double)n / dt;
        a[rep] = b[n - 1 - rep]; /* keep the copies observable */
    }
    free(a);
    free(b);
    return best;
}

static int run_batch(di_engine *e, int B, int prompt_len, int gen, di_engine_stats *before, di_engine_stats *after) {
    static uint64_t s = 12345;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)prompt_len);
    uint64_t *rid = malloc(sizeof(uint64_t) * (size_t)B);
    char msg[512];
    di_engine_get_stats(e, before);
    for (int b = 0; b < B; b++) {
        for (int k = 0; k < prompt_len; k++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            ids[k] = k == 0 ? 0 : 3 + (int32_t)((s >> 33) % 2000);
        }
        di_request q = {.prompt_ids = ids, .n_prompt_ids = prompt_len, .max_tokens = gen, .ignore_eos = true};
        di_sampling_params_init(&q.sampling);
        q.sampling.temperature = 0;
        if (di_engine_add_request(e, &q, &rid[b], msg, sizeof msg)) {
            fprintf(stderr, "deepinfer bench: %s\n", msg);
            return -1;
        }
    }
    if (di_engine_run(e, msg, sizeof msg)) {
        fprintf(stderr, "deepinfer bench: %s\n", msg);
        return -1;
    }
    di_engine_get_stats(e, after);
    for (int b = 0; b < B; b++) di_engine_release(e, rid[b]);
    free(ids);
    free(rid);
    return 0;
}

int di_cmd_bench(di_settings *s, int argc, char **argv) {
    int n_pos = 0;
    if (!di_cli_parse(s, argc, argv, &n_pos)) return 2;
    const char *backend = di_cli_backend(s);
    if (!strcmp(backend, "cuda") || (!strcmp(backend, "auto") && di_cuda_backend(NULL)))
        return di_cmd_bench_gpu(s, backend);
    const char *dir = *s->model_dir ? s->model_dir : DI_SOURCE_DIR "/tests/data/v41-tiny";
    di_engine_options o = {.model_dir = dir, .max_num_seqs = 64, .max_batch_tokens = 64 * 64,
                           .kv_budget_bytes = (int64_t)4 << 30};
    di_engine *e = NULL;
    char msg[512];
    if (di_engine_create(&o, &e, msg, sizeof msg)) {
        fprintf(stderr, "deepinfer bench: %s\n", msg);
        return 1;
    }
    const double bw = measure_copy_bandwidth();
    const double weight_bytes = (double)di_engine_model_bytes(e);
    printf("deepinfer bench (CPU backend), model %s\n", dir);
    printf("copy bandwidth %.2f GB/s (read+write, 256 MiB memcpy); model weights %.2f MB\n", bw / 1e9,
           weight_bytes / 1e6);
    printf("requests: 64 prompt tokens, 16 generated, greedy\n\n");
    printf("| batch | prefill tok/s | decode tok/s | decode step ms | roofline step ms | %% of roofline | plan us/step |\n");
    printf("|---|---|---|---|---|---|---|\n");
    const int sizes[] = {1, 2, 4, 8, 16, 32, 64};
    di_engine_stats w0, w1;
    int rc = run_batch(e, 1, 64, 16, &w0, &w1); /* warm-up: page in the weights, start the threads */
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0] && !rc; i++) {
        di_engine_stats a, b;
        if (run_batch(e, sizes[i], 64, 16, &a, &b)) {
            rc = 1;
            break;
        }
        double pt = (double)(b.prefill_tokens - a.prefill_tokens), ps = b.prefill_seconds - a.prefill_seconds;
        double dtok = (double)(b.decode_tokens - a.decode_tokens), ds = b.decode_seconds - a.decode_seconds;
        double steps = (double)(b.steps - a.steps), plan = b.plan_seconds - a.plan_seconds;
        double decode_steps = dtok / sizes[i];
        double step_ms = decode_steps > 0 ? 1e3 * ds / decode_steps : 0;
        double roof_ms = 1e3 * weight_bytes / (bw / 2); /* reading every weight once per step */
        printf("| %d | %.0f | %.0f | %.3f | %.4f | %.1f%% | %.1f |\n", sizes[i], ps > 0 ? pt / ps : 0,
               ds > 0 ? dtok / ds : 0, step_ms, roof_ms, step_ms > 0 ? 100.0 * roof_ms / step_ms : 0,
               steps > 0 ? 1e6 * plan / steps : 0);
    }
    di_engine_free(e);
    if (!rc) {
        const int Bs[] = {1, 8, 64, 256};
        di_bench_host_sampling(DI_V41_VOCAB, Bs, 4);
    }
    return rc;
}
