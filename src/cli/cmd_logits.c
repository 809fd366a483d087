/* `deepinfer logits --model DIR --ids 0,17,42,... [--prefill N] [--replay-topk FILE:TENSOR]
 * [--out FILE]`: runs the first N ids as one prefill and the rest one decode step each, and writes
 * the float32 little-endian logits of every position, [n_ids, vocab], to FILE or stdout. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/commands.h"
#include "forward/device.h"
#include "forward/run.h"

static int parse_ids(const char *text, int32_t **out, int *n_out) {
    int cap = 16, n = 0;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    const char *p = text;
    while (*p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "deepinfer logits: --ids: bad id at '%s'\n", p);
            free(ids);
            return -1;
        }
        if (n == cap) ids = realloc(ids, sizeof(int32_t) * (size_t)(cap *= 2));
        ids[n++] = (int32_t)v;
        p = end;
        if (*p == ',') p++;
        else if (*p) {
            fprintf(stderr, "deepinfer logits: --ids: expected ',' at '%s'\n", p);
            free(ids);
            return -1;
        }
    }
    *out = ids;
    *n_out = n;
    return 0;
}

int di_cmd_logits(di_settings *s, int argc, char **argv) {
    int n_pos = 0;
    if (!di_cli_parse(s, argc, argv, &n_pos)) return 2;
    if (!*s->model_dir || !*s->ids) {
        fprintf(stderr, "usage: deepinfer logits --model DIR --ids 0,17,42,... [--prefill N] "
                        "[--replay-topk FILE:TENSOR] [--out FILE]\n");
        return 2;
    }
    int32_t *ids = NULL;
    int n_ids = 0;
    if (parse_ids(s->ids, &ids, &n_ids) || n_ids == 0) {
        if (!n_ids) fprintf(stderr, "deepinfer logits: --ids is empty\n");
        free(ids);
        return 2;
    }
    di_err err = {0};
    di_model *m = NULL;
    void *replay_owner = NULL;
    di_replay_topk replay = {0};
    float *logits = NULL;
    int rc = 1;
    if (di_model_load(&m, s->model_dir, &err)) goto fail;
    if (di_cli_select_backend(m, di_cli_backend(s), s, &err)) goto fail;
    if (*s->replay_topk && di_replay_topk_load(m, s->replay_topk, &replay, &replay_owner, &err)) goto fail;
    if (s->prefill > n_ids) {
        di_errf(&err, DI_EINVAL, "--prefill %ld exceeds the %d ids", s->prefill, n_ids);
        goto fail;
    }
    const size_t V = (size_t)m->cfg.vocab_size;
    logits = malloc(sizeof(float) * V * (size_t)n_ids);
    if (di_run_ids(m, ids, n_ids, (int)s->prefill, *s->replay_topk ? &replay : NULL, logits, NULL, NULL,
                   NULL, &err))
        goto fail;
    FILE *f = *s->out ? fopen(s->out, "wb") : stdout;
    if (!f) {
        di_errf(&err, DI_EIO, "%s: %s", s->out, strerror(errno));
        goto fail;
    }
    size_t wrote = fwrite(logits, sizeof(float), V * (size_t)n_ids, f);
    if ((f != stdout ? fclose(f) : fflush(f)) != 0 || wrote != V * (size_t)n_ids) {
        di_errf(&err, DI_EIO, "%s: write failed", *s->out ? s->out : "stdout");
        goto fail;
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "deepinfer logits: %s\n", err.msg);
done:
    free(logits);
    free(ids);
    di_replay_topk_free(replay_owner);
    di_model_free(m);
    return rc;
}
