/* The head of the GPU forward pass (forward.c head): the final hc collapse, norm and vocabulary
 * projection for the rows that run it, then what each row wants (di_batch.want_logits): its logits
 * to the host (DI_WANT_LOGITS) or only its token -- the greedy one (DI_WANT_TOKEN), the one drawn
 * from its di_plain_sampling (DI_WANT_SAMPLE) or the one the sampler takes after its edits
 * (DI_WANT_EDITED: logit bias, structured-output mask, penalties; cuda_sample_edit.cu), and for an
 * edited row that asks for logprobs its di_sample_result (cuda_sample_logprob.cu: raw ones whose
 * edits change the row read a copy taken before them, processed ones of sampled rows the draws'
 * workspace).
 *
 * An edited row's mask is computed on the host while the device runs the step (the engine does
 * it between di_forward_begin and di_forward_end), so a call with such rows leaves its token pass
 * -- edits, greedy tokens, draws, the tokens' download -- to gpu_head_finish, which
 * gpu_forward_end runs before it waits: the pass is enqueued behind the call's graphs (the logits
 * stay in the call's temporaries until then) and reads the masks as they are by then. Without
 * edited rows the pass is part of the call (and of its graph) as before. */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/gpu_internal.h"
#include "sample/sample_edits.h"

/* greedy tokens of every head row, draws for the sampled ones (after the edits, if any): the
 * tokens [n_out] in device memory, which the caller downloads and frees; *sample_ws, if asked, the
 * draws' workspace (or NULL without sampled rows), which the caller frees */
static int32_t *token_pass(gpu_fwd *f, float *logits, int n_out, const di_plain_sampling *sampling, bool any_sampled,
                           const di_cuda_row_edits *d_edits, int n_edits, void **sample_ws) {
    const int64_t V = f->m->cfg.vocab_size;
    if (sample_ws) *sample_ws = NULL;
    if (n_edits) di_cuda_edit_logits(logits, V, d_edits, n_edits, f->s);
    int32_t *tok = gpu_alloc(f, sizeof(int32_t) * (size_t)n_out); /* [n_out] */
    void *ws = gpu_alloc(f, di_cuda_greedy_ws_bytes(n_out, V));
    di_cuda_greedy_tokens(logits, n_out, V, ws, tok, f->s);
    if (any_sampled) { /* over the greedy tokens of the sampled rows */
        di_plain_sampling *d_sampling = gpu_upload(f, sampling, sizeof *sampling * (size_t)n_out); /* [n_out] */
        void *sws = gpu_alloc(f, di_cuda_sample_ws_bytes(n_out, V));
        di_cuda_sample_tokens(logits, n_out, V, d_sampling, sws, tok, f->s);
        if (sample_ws) *sample_ws = sws;
        else gpu_free(f, sws);
        gpu_free(f, d_sampling);
    }
    gpu_free(f, ws);
    return tok;
}

static void download_tokens(gpu_fwd *f, int32_t *tok, int n_out) {
    gpu_download_async(f, f->b->head_tokens, tok, sizeof(int32_t) * (size_t)n_out);
    gpu_free(f, tok);
}

/* A logprob row's edits change its logits (so raw-mode logprobs need the row as it was). */
static bool edits_change_row(const di_sample_row *row) {
    const di_sampling_params *p = row->params;
    return row->allowed_mask || p->n_logit_bias || p->repetition_penalty != 1.0f || p->frequency_penalty != 0.0f ||
           p->presence_penalty != 0.0f;
}

/* The logprob rows among the pending head rows (DI_WANT_EDITED with logprobs): their list [*n_lp]
 * for di_cuda_logprob_rows, the raw-mode ones whose edits change them read from a copy taken
 * before the edits (*raw, [n_raw, V] device, or NULL; enqueued here). The processed ones of
 * sampled rows get the draws' workspace later (with_draws). NULL: no such row. */
static di_cuda_logprob_row *logprob_rows(gpu_fwd *f, const gpu_head_pending *hp, int *n_lp, float **raw) {
    const int64_t V = f->m->cfg.vocab_size;
    const di_batch *b = f->b;
    di_cuda_logprob_row *lp = di_xcalloc((size_t)hp->n_out, sizeof *lp); /* [n_out], the first n used */
    float **dst = di_xcalloc((size_t)hp->n_out, sizeof *dst);            /* [n_out] NULL: not copied */
    const float **src = di_xcalloc((size_t)hp->n_out, sizeof *src);      /* [n_out] */
    bool *copy = di_xcalloc((size_t)hp->n_out, sizeof *copy);            /* [n_out] read from *raw */
    int n = 0, n_raw = 0;
    for (int i = 0; i < hp->n_out; i++) {
        const di_sample_row *row = &b->sample_rows[hp->rows[i]];
        if (b->want_logits[hp->rows[i]] != DI_WANT_EDITED || row->params->logprobs == 0) continue;
        src[i] = hp->logits + (size_t)i * V;
        copy[i] = row->params->logprobs_mode == DI_LOGPROBS_RAW && edits_change_row(row);
        n_raw += copy[i];
        lp[n++] = (di_cuda_logprob_row){.src = src[i], .head_row = i, .n_top = row->params->logprobs,
                                        .temperature = row->params->temperature};
    }
    *n_lp = n, *raw = NULL;
    if (n_raw) {
        *raw = gpu_alloc(f, sizeof(float) * (size_t)n_raw * V); /* [n_raw, V] */
        for (int k = 0, j = 0; k < n; k++) {
            const int i = lp[k].head_row;
            if (copy[i]) lp[k].src = dst[i] = *raw + (size_t)j++ * V;
        }
        gpu_copy_rows(f, dst, src, hp->n_out, V);
    }
    free(dst);
    free(src);
    free(copy);
    if (!n) free(lp);
    return n ? lp : NULL;
}

/* The processed-mode logprob rows of sampled rows read the draws' candidates: their workspace
 * (sample_ws, for n_out rows). */
static void with_draws(di_cuda_logprob_row *lp, int n_lp, const di_batch *b, const gpu_head_pending *hp,
                       const void *sample_ws) {
    for (int k = 0; k < n_lp; k++) {
        const di_sampling_params *p = b->sample_rows[hp->rows[lp[k].head_row]].params;
        if (p->logprobs_mode == DI_LOGPROBS_PROCESSED && p->temperature > 0.0f)
            lp[k].sample_ws = sample_ws, lp[k].sample_ws_rows = hp->n_out;
    }
}

/* A growing host buffer of 16-byte aligned arrays; pack(b, NULL, bytes) reserves zeroed room the
 * caller fills through b->p + the offset it returns. */
typedef struct packed {
    uint8_t *p;
    size_t n, cap;
} packed;

static size_t pack(packed *b, const void *src, size_t bytes) {
    const size_t off = (b->n + 15) & ~(size_t)15;
    if (off + bytes > b->cap) {
        b->cap = 2 * (off + bytes) + 4096;
        b->p = di_xrealloc(b->p, b->cap);
    }
    if (src && bytes) memcpy(b->p + off, src, bytes);
    else if (bytes) memset(b->p + off, 0, bytes);
    b->n = off + bytes;
    return off;
}

/* The edited head rows' lists (sample_edits.c, from the batch's sample_rows as they are now) in
 * device memory: one upload of every row's arrays (*d_lists), then their headers [*n_edits]. */
static di_cuda_row_edits *upload_edits(gpu_fwd *f, const gpu_head_pending *hp, void **d_lists, int *n_edits) {
    gpu_model *g = (gpu_model *)f->g;
    const int32_t V = (int32_t)f->m->cfg.vocab_size;
    if (!g->editor) g->editor = di_sample_editor_new(V);
    di_cuda_row_edits *hdr = di_xcalloc((size_t)hp->n_out, sizeof *hdr);          /* [n_out] */
    size_t(*off)[6] = di_xcalloc((size_t)hp->n_out, sizeof *off);                 /* [n_out][6] */
    packed buf = {0};
    int n = 0;
    for (int i = 0; i < hp->n_out; i++) {
        const int r = hp->rows[i];
        if (f->b->want_logits[r] != DI_WANT_EDITED) continue;
        di_sample_edits e;
        di_err err = {0};
        if (di_sample_edits_build(g->editor, &f->b->sample_rows[r], &e, &err)) /* checked by di_forward_begin */
            di_die("GPU head: row %d's edits: %s", r, err.msg);
        di_cuda_row_edits *h = &hdr[n];
        h->row = i;
        h->n_bias = e.n_bias, h->n_repeated = e.n_repeated, h->n_output = e.n_output;
        h->repetition_penalty = e.repetition_penalty;
        h->frequency_penalty = e.frequency_penalty, h->presence_penalty = e.presence_penalty;
        off[n][0] = pack(&buf, NULL, sizeof(int32_t) * (size_t)e.n_bias);
        off[n][1] = pack(&buf, NULL, sizeof(float) * (size_t)e.n_bias);
        for (int32_t k = 0; k < e.n_bias; k++) {
            memcpy(buf.p + off[n][0] + 4 * (size_t)k, &e.bias[k].token_id, 4);
            memcpy(buf.p + off[n][1] + 4 * (size_t)k, &e.bias[k].bias, 4);
        }
        off[n][2] = e.mask ? pack(&buf, e.mask, sizeof(uint32_t) * (size_t)((V + 31) / 32)) : SIZE_MAX;
        off[n][3] = pack(&buf, e.repeated, sizeof(int32_t) * (size_t)e.n_repeated);
        off[n][4] = pack(&buf, e.output_ids, sizeof(int32_t) * (size_t)e.n_output);
        off[n][5] = pack(&buf, e.output_counts, sizeof(uint32_t) * (size_t)e.n_output);
        n++;
    }
    uint8_t *d = gpu_upload(f, buf.p, buf.n);
    *d_lists = d;
    for (int k = 0; k < n; k++) {
        hdr[k].bias_ids = (const int32_t *)(d + off[k][0]);
        hdr[k].bias = (const float *)(d + off[k][1]);
        hdr[k].mask = off[k][2] == SIZE_MAX ? NULL : (const uint32_t *)(d + off[k][2]);
        hdr[k].repeated = (const int32_t *)(d + off[k][3]);
        hdr[k].output_ids = (const int32_t *)(d + off[k][4]);
        hdr[k].output_counts = (const uint32_t *)(d + off[k][5]);
    }
    di_cuda_row_edits *d_hdr = gpu_upload(f, hdr, sizeof *hdr * (size_t)n); /* [n] */
    free(buf.p);
    free(off);
    free(hdr);
    *n_edits = n;
    return d_hdr;
}

void gpu_head(gpu_fwd *f, const uint16_t *X, const float *pre) {
    const di_model *m = f->m;
    const di_batch *b = f->b;
    const int n = m->cfg.hc_mult;
    const int64_t D = m->cfg.hidden_size, V = m->cfg.vocab_size;
    int n_out = 0, n_logit_rows = 0, n_edited = 0;
    int *rows = di_xmalloc(sizeof(int) * (size_t)f->R);     /* [n_out] the batch row of each head row */
    bool *to_host = di_xmalloc(sizeof(bool) * (size_t)f->R); /* [n_out] its logits leave the device */
    /* [n_out] the sampled rows' settings, temperature 0 for the greedy ones */
    di_plain_sampling *sampling = di_xcalloc((size_t)f->R, sizeof *sampling);
    bool any_sampled = false;
    for (int r = 0; r < f->R; r++) {
        const int want = b->want_logits ? b->want_logits[r] : DI_WANT_LOGITS;
        if (want == DI_WANT_NONE) continue;
        to_host[n_out] = want == DI_WANT_LOGITS && b->logits;
        n_logit_rows += to_host[n_out];
        if (want == DI_WANT_SAMPLE) sampling[n_out] = b->row_sampling[r];
        if (want == DI_WANT_EDITED) {
            const di_sample_row *row = &b->sample_rows[r];
            if (row->params->temperature > 0.0f) sampling[n_out] = di_plain_sampling_of(row->params, row->position);
            n_edited++;
        }
        any_sampled |= sampling[n_out].temperature > 0.0f;
        rows[n_out++] = r;
    }
    if (n_out) {
        float *y = gpu_alloc(f, sizeof(float) * (size_t)n_out * D);      /* [n_out, D] bf16 */
        float *yn = gpu_alloc(f, sizeof(float) * (size_t)n_out * D);
        float *logits = gpu_alloc(f, sizeof(float) * (size_t)n_out * V); /* [n_out, V] */
        float **dx = di_xmalloc(sizeof(float *) * (size_t)n_out), **dp = di_xmalloc(sizeof(float *) * (size_t)n_out);
        /* where some rows run no head (a prefill's but the last): the final collapse of every row, then
         * the head rows' gathered -- the stream is bf16, which di_cuda_copy_rows' float rows do not
         * take, and the pre-mix moves ~60 KB a row (~20 ns at the HBM rate) */
        if (n_out == f->R) { /* rows[i] == i */
            di_cuda_hc_pre(X, n_out, n, D, pre, y, f->s);
        } else {
            float *y_all = gpu_alloc(f, sizeof(float) * (size_t)f->R * D); /* [R, D] bf16 */
            di_cuda_hc_pre(X, f->R, n, D, pre, y_all, f->s);
            for (int i = 0; i < n_out; i++) {
                dx[i] = y + (size_t)i * D;
                dp[i] = y_all + (size_t)rows[i] * D;
            }
            gpu_copy_rows(f, dx, (const float *const *)dp, n_out, D);
            gpu_free(f, y_all);
        }
        di_cuda_rmsnorm(y, f->dm->norm, n_out, D, (float)m->cfg.rms_norm_eps, yn, f->s);
        if (b->debug_fn)
            for (int i = 0; i < n_out; i++) gpu_debug(f, "final_norm_out_row", rows[i], yn + (size_t)i * D, D);
        gpu_linear(f, &f->dm->head, yn, n_out, logits, DI_LIN_F32);
        /* the rows that leave go first: the edits (at gpu_head_finish) change the edited rows in place */
        if (n_logit_rows == n_out) {
            gpu_download_async(f, b->logits, logits, sizeof(float) * (size_t)n_out * V);
        } else if (n_logit_rows) { /* a mixed step: the rows that leave, gathered into one copy */
            float *sent = gpu_alloc(f, sizeof(float) * (size_t)n_logit_rows * V); /* [n_logit_rows, V] */
            for (int i = 0, j = 0; i < n_out; i++) {
                dx[i] = to_host[i] ? sent + (size_t)j++ * V : NULL; /* NULL: the row stays */
                dp[i] = logits + (size_t)i * V;
            }
            gpu_copy_rows(f, dx, (const float *const *)dp, n_out, V);
            gpu_download_async(f, b->logits, sent, sizeof(float) * (size_t)n_logit_rows * V);
            gpu_free(f, sent);
        }
        free(dx);
        free(dp);
        gpu_free(f, y);
        gpu_free(f, yn);
        if (b->head_tokens && n_edited) { /* the token pass waits for the masks: gpu_head_finish */
            f->head_pending = (gpu_head_pending){logits, n_out, rows, sampling, any_sampled};
            rows = NULL, sampling = NULL;
        } else {
            if (b->head_tokens)
                download_tokens(f, token_pass(f, logits, n_out, sampling, any_sampled, NULL, 0, NULL), n_out);
            gpu_free(f, logits);
        }
    }
    free(rows);
    free(to_host);
    free(sampling);
}

void gpu_head_finish(gpu_fwd *f, bool run) {
    gpu_head_pending *hp = &f->head_pending;
    if (!hp->logits) return;
    if (run) {
        int n_edits = 0, n_lp = 0;
        void *d_lists = NULL;
        float *raw = NULL;
        di_cuda_logprob_row *lp = logprob_rows(f, hp, &n_lp, &raw); /* before the edits */
        di_cuda_row_edits *d_edits = upload_edits(f, hp, &d_lists, &n_edits);
        void *sws = NULL;
        int32_t *tok = token_pass(f, hp->logits, hp->n_out, hp->sampling, hp->any_sampled, d_edits, n_edits,
                                  n_lp ? &sws : NULL);
        if (n_lp) { /* after the tokens: the results, in head-row order (zeros where none is asked) */
            with_draws(lp, n_lp, f->b, hp, sws);
            const size_t bytes = sizeof(di_sample_result) * (size_t)hp->n_out;
            di_sample_result *out = gpu_alloc(f, bytes); /* [n_out] */
            GPU_CK(cudaMemsetAsync(out, 0, bytes, f->s));
            di_cuda_logprob_row *d_lp = gpu_upload(f, lp, sizeof *lp * (size_t)n_lp); /* [n_lp] */
            di_cuda_logprob_rows(d_lp, n_lp, f->m->cfg.vocab_size, tok, out, f->s);
            gpu_download_async(f, f->b->head_logprobs, out, bytes);
            gpu_free(f, d_lp);
            gpu_free(f, out);
            if (raw) gpu_free(f, raw);
            if (sws) gpu_free(f, sws);
            free(lp);
        }
        download_tokens(f, tok, hp->n_out);
        gpu_free(f, d_edits);
        gpu_free(f, d_lists);
    }
    gpu_free(f, hp->logits);
    free(hp->rows);
    free(hp->sampling);
    memset(hp, 0, sizeof *hp);
}
