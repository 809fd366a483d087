/* Prefill-then-decode driver for one sequence (see run.h). */
#include <stdlib.h>
#include <string.h>

#include "forward/run.h"

static di_status run_call(const di_model *m, di_seq_state *st, const int32_t *ids, int n,
                          const di_replay_topk *replay, float *logits, int32_t *topk_out,
                          float *main_hidden, di_err *err) {
    const di_config *c = &m->cfg;
    const int K = c->index_topk, NI = c->n_index_sources;
    int32_t *forced = NULL, *own = NULL;
    const int64_t pos0 = st->n_tokens;
    if (replay) {
        if (pos0 + n > replay->n_positions)
            return di_errf(err, DI_ERANGE, "replay top-k covers %lld positions, run needs %lld",
                           (long long)replay->n_positions, (long long)(pos0 + n));
        forced = malloc(sizeof(int32_t) * (size_t)NI * n * K);
        for (int i = 0; i < NI; i++)
            memcpy(forced + (size_t)i * n * K, replay->sel + ((size_t)i * replay->n_positions + pos0) * K,
                   sizeof(int32_t) * (size_t)n * K);
    }
    if (topk_out) {
        own = malloc(sizeof(int32_t) * (size_t)NI * n * K);
        for (size_t i = 0; i < (size_t)NI * n * K; i++) own[i] = -1;
    }
    di_seq_state *seqs[1] = {st};
    int rows[1] = {n};
    di_batch b = {.n_rows = n, .tokens = ids, .n_seqs = 1, .seqs = seqs, .seq_n_rows = rows,
                  .logits = logits, .main_hidden = main_hidden, .forced_topk = forced, .topk_out = own};
    di_status s = di_forward(m, &b, err);
    if (!s && own) memcpy(topk_out, own, sizeof(int32_t) * (size_t)NI * n * K);
    free(forced);
    free(own);
    return s;
}

di_status di_run_ids(const di_model *m, const int32_t *ids, int n_ids, int n_prefill,
                     const di_replay_topk *replay, float *logits, int32_t *topk_out,
                     float *main_hidden, di_seq_state **keep_state, di_err *err) {
    if (n_ids <= 0) return di_errf(err, DI_EINVAL, "no ids to run");
    if (n_prefill < 0 || n_prefill > n_ids) n_prefill = n_ids;
    if (n_prefill == 0) n_prefill = 1;
    const di_config *c = &m->cfg;
    const int64_t V = c->vocab_size, MH = (int64_t)c->n_dspark_targets * c->hidden_size;
    const int K = c->index_topk, NI = c->n_index_sources;
    di_seq_state *st = di_seq_state_new(m);
    int32_t *own = topk_out ? malloc(sizeof(int32_t) * (size_t)NI * n_ids * K) : NULL;
    di_status s = DI_OK;
    for (int done = 0; done < n_ids && !s;) {
        int n = done == 0 ? n_prefill : 1;
        s = run_call(m, st, ids + done, n, replay, logits ? logits + done * V : NULL,
                     own ? own + (size_t)done * NI * K : NULL, main_hidden ? main_hidden + done * MH : NULL,
                     err);
        done += n;
    }
    if (!s && topk_out) { /* chunks were stored [chunk][NI][n][K]; regroup to [NI][n_ids][K] */
        int done = 0;
        while (done < n_ids) {
            int n = done == 0 ? n_prefill : 1;
            for (int i = 0; i < NI; i++)
                memcpy(topk_out + ((size_t)i * n_ids + done) * K, own + (size_t)done * NI * K + (size_t)i * n * K,
                       sizeof(int32_t) * (size_t)n * K);
            done += n;
        }
    }
    free(own);
    if (keep_state && !s) *keep_state = st;
    else di_seq_state_free(st);
    return s;
}

typedef struct replay_owner {
    di_checkpoint *ck;
} replay_owner;

di_status di_replay_topk_load(const di_model *m, const char *spec, di_replay_topk *out, void **owner,
                              di_err *err) {
    const char *colon = strrchr(spec, ':');
    if (!colon || colon == spec || !colon[1])
        return di_errf(err, DI_EINVAL, "--replay-topk: expected FILE:TENSOR, got '%s'", spec);
    char *path = di_xstrdup(spec);
    path[colon - spec] = 0;
    replay_owner *o = di_xcalloc(1, sizeof *o);
    di_status s = di_safetensors_open_file(&o->ck, path, err);
    free(path);
    if (s) {
        free(o);
        return s;
    }
    const di_tensor *t = di_checkpoint_find(o->ck, colon + 1);
    const di_config *c = &m->cfg;
    if (!t) s = di_errf(err, DI_EINVAL, "--replay-topk: no tensor '%s' in %.*s", colon + 1,
                        (int)(colon - spec), spec);
    else if (t->dtype != DI_DT_I32 || t->ndim != 3 || t->shape[0] != c->n_index_sources ||
             t->shape[2] != c->index_topk)
        s = di_errf(err, DI_EINVAL, "--replay-topk: %s must be I32 [%d, n_positions, %d]", colon + 1,
                    c->n_index_sources, c->index_topk);
    else if ((uintptr_t)t->data % 4)
        s = di_errf(err, DI_EFORMAT, "--replay-topk: %s is not 4-byte aligned in its file", colon + 1);
    if (s) {
        di_checkpoint_close(o->ck);
        free(o);
        return s;
    }
    out->sel = t->data;
    out->n_positions = t->shape[1];
    *owner = o;
    return DI_OK;
}

void di_replay_topk_free(void *owner) {
    replay_owner *o = owner;
    if (!o) return;
    di_checkpoint_close(o->ck);
    free(o);
}
