/* make_synthetic CONFIG.json OUTDIR: writes a synthetic checkpoint for CONFIG into OUTDIR (created if
 * absent): config.json, model.safetensors.index.json and the release's shard layout with real
 * headers and sparse, all-zero data (src/model/synthetic_checkpoint.c). For the released config the
 * shards add up to 475 GiB of apparent size but only ~20 MB of disk. Used to exercise the loader and,
 * later, GPU benchmarks that need weights in their real shapes. Build: see tools/checkpoint/README.md. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/synthetic_checkpoint.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s CONFIG.json OUTDIR\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open (%s)\n", argv[1], strerror(errno));
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    if (!text || fread(text, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "%s: cannot read\n", argv[1]);
        return 1;
    }
    text[n] = 0;
    fclose(f);
    if (mkdir(argv[2], 0755) && errno != EEXIST) {
        fprintf(stderr, "%s: cannot create (%s)\n", argv[2], strerror(errno));
        return 1;
    }
    di_err err = {0};
    int n_shards = 0;
    if (di_synthetic_checkpoint_write(argv[2], text, &n_shards, &err)) {
        fprintf(stderr, "make_synthetic: %s\n", err.msg);
        return 1;
    }
    printf("%s: %d shards written (sparse)\n", argv[2], n_shards);
    free(text);
    return 0;
}
