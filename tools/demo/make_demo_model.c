/* make_demo_model OUTDIR: writes deepinfer's demonstration model (src/model/demo_model.c) into
 * OUTDIR (created if absent): a tiny DeepSeek-V4.1 with random weights, the real tensor layout and
 * the real tokenizer. The engine generates the same files on its own into its cache on first use;
 * this tool is for inspecting them or shipping them elsewhere. Build: see tools/demo/README.md. */
#include <stdio.h>
#include <time.h>

#include "model/demo_model.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
        return 2;
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    di_err err = {0};
    if (di_demo_model_write(argv[1], &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%s: demo model (%s) written in %.2f s\n", argv[1], DI_DEMO_MODEL_VERSION,
           (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    return 0;
}
