/* The CUDA device backend (forward/device.h): device probing, memory for sequence state, and the
 * weight upload that turns a loaded (mmapped) model into a device-resident one.
 *
 * Upload is per tensor (safetensors offsets are not 16-byte aligned; cudaMalloc'd copies are, as
 * the block-scaled GEMM wants). A weight whose host data is NULL (a model built from a config
 * alone, as `deepinfer bench` does) gets deterministic pseudo-random bytes generated on the device
 * instead (gpu_fill_random), so benchmarks need no checkpoint. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_profiler_api.h>

#include "backend/cuda/cuda_ceilings.h"
#include "backend/cuda/gpu_internal.h"
#include "sample/sample_edits.h"

void gpu_fill_random(void *dev, size_t bytes, uint64_t seed, int kind, cudaStream_t s);
void gpu_fill_kv_blocks(void *dev, size_t bytes, int block_bytes, int block_entries, int row_bytes, int dh,
                        int key_bytes, int idim, uint64_t seed, cudaStream_t s);
void gpu_profile(bool on, const char *const **names, double *seconds);

/* ---- state memory (synchronous with respect to the backend's work: the default stream) ---- */
static void *mem_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    GPU_CK(cudaMemset(p, 0, bytes));
    return p;
}
static void mem_release(void *p) {
    if (p) GPU_CK(cudaFree(p));
}
static void mem_copy(void *dst, const void *src, size_t bytes) {
    GPU_CK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
}
static void up(void *dev, const void *host, size_t bytes) { GPU_CK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice)); }
static void down(void *host, const void *dev, size_t bytes) { GPU_CK(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost)); }

/* ---- per-call temporaries and transfers ---- */
enum { ARENA_MAX_PIECE = 4 << 20 }; /* larger temporaries use the pool */

/* the next `need` bytes of b (need a multiple of 256), or NULL, counted for the next call's growth */
static uint8_t *bump_take(gpu_bump *b, size_t need) {
    if (b->used + need > b->cap) {
        b->want += need;
        return NULL;
    }
    uint8_t *p = b->base + b->used;
    b->used += need;
    return p;
}
/* the capacity b grows to for the next call (0: no growth) */
static size_t bump_growth(const gpu_bump *b, size_t first) {
    if (!b->want) return 0;
    size_t cap = b->cap ? b->cap : first;
    while (cap < b->used + b->want) cap *= 2;
    return cap;
}

/* p lies in b's buffer */
static bool bump_holds(const gpu_bump *b, const void *p) {
    return (const uint8_t *)p >= b->base && (const uint8_t *)p < b->base + b->cap;
}

enum { SPILL_CHUNK = 16 << 20 };
/* `need` bytes of the newest spill chunk, or of a new one (the arena was full while capturing) */
static void *spill_take(gpu_fwd *f, size_t need) {
    gpu_graphs *gr = &((gpu_model *)f->g)->graphs;
    gpu_spill *sp = &gr->spill;
    void *p = sp->n ? bump_take(&sp->chunk[sp->n - 1], need) : NULL;
    if (!p) {
        if (sp->n == sp->cap) {
            sp->cap = sp->cap ? 2 * sp->cap : 8;
            sp->chunk = di_xrealloc(sp->chunk, sizeof(gpu_bump) * (size_t)sp->cap);
        }
        gpu_bump *c = &sp->chunk[sp->n++];
        *c = (gpu_bump){.cap = need > SPILL_CHUNK ? need : SPILL_CHUNK};
        GPU_CK(cudaMalloc((void **)&c->base, c->cap));
        gr->stats.spill_chunks++;
        p = bump_take(c, need);
    }
    f->graph_reusable = false; /* its memory is freed after this call */
    return p;
}

/* While capturing, every size comes from the arena, then from spill chunks: a pool allocation
 * would put memory nodes into the graph (gpu_spill says why none may be there). */
void *gpu_alloc(const gpu_fwd *f, size_t bytes) {
    const size_t need = ((bytes ? bytes : 16) + 255) & ~(size_t)255;
    void *p = need <= ARENA_MAX_PIECE || f->capturing ? bump_take(f->arena, need) : NULL;
    if (!p && f->capturing) p = spill_take((gpu_fwd *)f, need);
    if (!p) GPU_CK(cudaMallocAsync(&p, need, f->s));
    return p;
}
void gpu_free(const gpu_fwd *f, void *p) {
    if (!p || bump_holds(f->arena, p)) return; /* arena and spill chunks: freed at reset */
    const gpu_spill *sp = &((const gpu_model *)f->g)->graphs.spill;
    for (int i = 0; i < sp->n; i++)
        if (bump_holds(&sp->chunk[i], p)) return;
    GPU_CK(cudaFreeAsync(p, f->s));
}
/* pinned host memory for one transfer of this call: staging, or while capturing (the graph copies
 * later, so no pageable memory) a piece of its own; NULL: go pageable */
static void *pinned_piece(const gpu_fwd *f, size_t bytes) {
    void *p = bump_take(f->stg, (bytes + 255) & ~(size_t)255);
    if (!p && f->capturing) p = gpu_pinned_extra((gpu_fwd *)f, bytes);
    return p;
}
void *gpu_upload(const gpu_fwd *f, const void *host, size_t bytes) {
    void *p = gpu_alloc(f, bytes);
    if (!bytes) return p;
    void *pinned = pinned_piece(f, bytes);
    if (pinned) memcpy(pinned, host, bytes);
    GPU_CK(cudaMemcpyAsync(p, pinned ? pinned : host, bytes, cudaMemcpyHostToDevice, f->s));
    return p;
}
void *gpu_pinned_extra(gpu_fwd *f, size_t bytes) {
    gpu_graphs *gr = &((gpu_model *)f->g)->graphs;
    void *p = NULL;
    GPU_CK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
    if (gr->n_extra == gr->cap_extra) {
        gr->cap_extra = gr->cap_extra ? 2 * gr->cap_extra : 16;
        gr->extra_pinned = di_xrealloc(gr->extra_pinned, sizeof(void *) * (size_t)gr->cap_extra);
    }
    gr->extra_pinned[gr->n_extra++] = p;
    f->graph_reusable = false;
    return p;
}
void gpu_bumps_reset(gpu_fwd *f) {
    gpu_bump *st = f->stg, *a = f->arena;
    gpu_graphs *gr = &((gpu_model *)f->g)->graphs;
    if (st->used || st->want || a->used || a->want || gr->n_extra || gr->spill.n || f->cx->n_retired ||
        f->cx_side->n_retired)
        GPU_CK(cudaStreamSynchronize(f->s)); /* the last call is done (the side stream joins into it) */
    for (int i = 0; i < gr->n_extra; i++) GPU_CK(cudaFreeHost(gr->extra_pinned[i]));
    gr->n_extra = 0;
    for (int i = 0; i < gr->spill.n; i++) GPU_CK(cudaFree(gr->spill.chunk[i].base));
    gr->spill.n = 0;
    di_cuda_ctx_release_retired(f->cx);
    di_cuda_ctx_release_retired(f->cx_side);
    const size_t st_cap = bump_growth(st, (size_t)1 << 20), a_cap = bump_growth(a, (size_t)16 << 20);
    /* kept graphs copy from and to these buffers: they cannot be updated to new ones */
    if (st_cap || a_cap) gpu_graphs_drop((gpu_model *)f->g);
    if (st_cap) {
        if (st->base) GPU_CK(cudaFreeHost(st->base));
        GPU_CK(cudaHostAlloc((void **)&st->base, st_cap, cudaHostAllocDefault));
        st->cap = st_cap;
    }
    if (a_cap) {
        if (a->base) GPU_CK(cudaFree(a->base));
        GPU_CK(cudaMalloc((void **)&a->base, a_cap));
        a->cap = a_cap;
    }
    st->used = st->want = a->used = a->want = 0;
}
void gpu_download(const gpu_fwd *f, void *host, const void *dev, size_t bytes) {
    if (!bytes) return;
    GPU_CK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, f->s));
    GPU_CK(cudaStreamSynchronize(f->s));
}
/* ---- result buffers (host_alloc): page-locked host memory the device writes into directly.
 * Registered here so that a download can tell them from pageable memory without a CUDA query
 * (none is made while a graph is being captured). ---- */
#define RESULT_BUFS 64
static struct {
    const char *p;
    size_t bytes;
} g_results[RESULT_BUFS];
static int g_n_results;
static pthread_mutex_t g_results_mu = PTHREAD_MUTEX_INITIALIZER;

static void *result_alloc(size_t bytes) {
    void *p = NULL;
    pthread_mutex_lock(&g_results_mu);
    if (g_n_results < RESULT_BUFS && cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault) == cudaSuccess) {
        g_results[g_n_results].p = p;
        g_results[g_n_results++].bytes = bytes;
    } else {
        cudaGetLastError();
        p = malloc(bytes ? bytes : 1); /* pageable: downloads go through the staging buffer */
    }
    pthread_mutex_unlock(&g_results_mu);
    return p;
}
static void result_free(void *p) {
    if (!p) return;
    pthread_mutex_lock(&g_results_mu);
    int i = 0;
    while (i < g_n_results && g_results[i].p != p) i++;
    if (i < g_n_results) {
        g_results[i] = g_results[--g_n_results];
        GPU_CK(cudaFreeHost(p));
    } else {
        free(p);
    }
    pthread_mutex_unlock(&g_results_mu);
}
static bool in_result_buffer(const void *host, size_t bytes) {
    const char *h = host;
    bool in = false;
    pthread_mutex_lock(&g_results_mu);
    for (int i = 0; i < g_n_results && !in; i++)
        in = h >= g_results[i].p && h + bytes <= g_results[i].p + g_results[i].bytes;
    pthread_mutex_unlock(&g_results_mu);
    return in;
}

void gpu_download_async(gpu_fwd *f, void *host, const void *dev, size_t bytes) {
    if (!bytes) return;
    if (in_result_buffer(host, bytes)) { /* page-locked: straight there, no host copy after */
        GPU_CK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, f->s));
        return;
    }
    void *pinned = pinned_piece(f, bytes);
    if (!pinned) { /* staging full (it grows for the next call): wait here */
        gpu_download(f, host, dev, bytes);
        return;
    }
    GPU_CK(cudaMemcpyAsync(pinned, dev, bytes, cudaMemcpyDeviceToHost, f->s));
    if (f->n_dl == f->cap_dl) {
        f->cap_dl = f->cap_dl ? 2 * f->cap_dl : 4;
        f->dl = di_xrealloc(f->dl, sizeof *f->dl * (size_t)f->cap_dl);
    }
    f->dl[f->n_dl++] = (struct gpu_pending_download){host, pinned, bytes};
}
void gpu_downloads_finish(gpu_fwd *f) {
    for (int i = 0; i < f->n_dl; i++) memcpy(f->dl[i].host, f->dl[i].pinned, f->dl[i].bytes);
    free(f->dl);
    f->dl = NULL;
    f->n_dl = f->cap_dl = 0;
}
void gpu_debug(const gpu_fwd *f, const char *name, int layer, float *dev, int64_t n) {
    if (!f->b->debug_fn) return;
    float *h = di_xmalloc(sizeof(float) * (size_t)(n ? n : 1));
    gpu_download(f, h, dev, sizeof(float) * (size_t)n);
    f->b->debug_fn(f->b->debug_user, name, layer, h, n);
    /* the hook may have replaced the values (test_fixture_debug feeds each sublayer the reference's
     * input): forms a producer made of the old ones (act_quant codes, bf16 bits) are stale then, and
     * the readers convert the new ones themselves */
    di_cuda_act_forms_forget(f->cx, dev);
    GPU_CK(cudaMemcpyAsync(dev, h, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice, f->s));
    GPU_CK(cudaStreamSynchronize(f->s));
    free(h);
}
void gpu_debug_bf16(const gpu_fwd *f, const char *name, int layer, uint16_t *dev, int64_t n) {
    if (!f->b->debug_fn) return;
    float *wide = gpu_alloc(f, sizeof(float) * (size_t)(n ? n : 1)); /* [n] */
    di_cuda_bf16_to_f32(dev, 1, n, wide, n, f->s);
    gpu_debug(f, name, layer, wide, n);
    di_cuda_f32_to_bf16(wide, n, dev, f->s); /* values the hook wrote are bf16 values: exact */
    gpu_free(f, wide);
}

/* ---- weight upload ---- */
static void *dev_copy(gpu_model *g, const void *host, size_t bytes, int random_kind) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 16) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    if (g->n_allocs == g->cap_allocs) {
        g->cap_allocs = g->cap_allocs ? 2 * g->cap_allocs : 1024;
        g->allocs = di_xrealloc(g->allocs, sizeof(void *) * (size_t)g->cap_allocs);
    }
    g->allocs[g->n_allocs++] = p;
    g->bytes += bytes;
    if (host) GPU_CK(cudaMemcpyAsync(p, host, bytes, cudaMemcpyHostToDevice, g->cx.stream));
    else gpu_fill_random(p, bytes, (uint64_t)g->n_allocs * 0x9e3779b97f4a7c15ull, random_kind, g->cx.stream);
    return p;
}

typedef struct uploader {
    gpu_model *g;
    bool synthetic; /* generate every weight on the device (bench proxy) */
    bool failed;
    size_t failed_bytes;
} uploader;

/* random kinds for weights generated on the device: bytes of a type that decodes to finite,
 * moderate values */
enum { RND_BYTES_E4M3 = 0, RND_BYTES_SCALE = 1, RND_BF16 = 2, RND_F32 = 3, RND_BYTES_FP4 = 4 };
enum { UPLOAD_HOST_ALWAYS = -1 }; /* a table built here from device pointers: copied even when synthetic */

static const void *upload(uploader *u, const void *host, size_t bytes, int random_kind) {
    if (u->failed || !bytes) return NULL;
    const bool copy = !u->synthetic || random_kind == UPLOAD_HOST_ALWAYS;
    void *p = dev_copy(u->g, copy ? host : NULL, bytes, random_kind);
    if (!p) {
        u->failed = true;
        u->failed_bytes = bytes;
    }
    return p;
}

static size_t dtype_bytes(di_dtype t, int64_t n) {
    switch (t) {
    case DI_DT_F8_E4M3: return (size_t)n;
    case DI_DT_I8: return (size_t)n / 2; /* two FP4 codes per byte */
    case DI_DT_BF16: return 2 * (size_t)n;
    case DI_DT_F32: return 4 * (size_t)n;
    default: return 0;
    }
}

static void upload_weight(uploader *u, di_weight *w) {
    if (!w->rows || !w->cols) return;
    const int rk = w->dtype == DI_DT_F8_E4M3 ? RND_BYTES_E4M3
                   : w->dtype == DI_DT_I8    ? RND_BYTES_FP4
                   : w->dtype == DI_DT_BF16  ? RND_BF16
                                             : RND_F32;
    w->data = upload(u, w->data, dtype_bytes(w->dtype, w->rows * w->cols), rk);
    if (w->dtype == DI_DT_F8_E4M3)
        w->scale = upload(u, w->scale, (size_t)((w->rows + 31) / 32) * ((w->cols + 31) / 32), RND_BYTES_SCALE);
    else if (w->dtype == DI_DT_I8)
        w->scale = upload(u, w->scale, (size_t)w->rows * (w->cols / 32), RND_BYTES_SCALE);
}

static const void *upload_bf16(uploader *u, const void *host, int64_t n) {
    return upload(u, host, 2 * (size_t)n, RND_BF16);
}
static float *upload_f32(uploader *u, const void *host, int64_t n) {
    return (float *)upload(u, host, 4 * (size_t)n, RND_F32);
}

static void upload_layer(uploader *u, const di_model *m, di_layer *L, gpu_layer_consts *hc) {
    const di_config *c = &m->cfg;
    const int n = c->hc_mult, nmix = n * (n + 2);
    const int64_t D = c->hidden_size;
    L->attn_norm = upload_bf16(u, L->attn_norm, D);
    L->ffn_norm = upload_bf16(u, L->ffn_norm, D);
    L->hc_attn_fn = upload_f32(u, L->hc_attn_fn, (int64_t)nmix * n * D);
    L->hc_ffn_fn = upload_f32(u, L->hc_ffn_fn, (int64_t)nmix * n * D);
    hc->attn_base = upload_f32(u, L->hc_attn_base, nmix);
    hc->ffn_base = upload_f32(u, L->hc_ffn_base, nmix);
    hc->attn_scale = upload_f32(u, L->hc_attn_scale, 3);
    hc->ffn_scale = upload_f32(u, L->hc_ffn_scale, 3);
    di_attn_weights *a = &L->attn;
    upload_weight(u, &a->wq_a);
    upload_weight(u, &a->wq_b);
    upload_weight(u, &a->wkv);
    upload_weight(u, &a->wo_a);
    upload_weight(u, &a->wo_b);
    a->q_norm = upload_bf16(u, a->q_norm, c->q_lora_rank);
    a->kv_norm = upload_bf16(u, a->kv_norm, c->head_dim);
    a->attn_sink = upload_f32(u, a->attn_sink, c->num_attention_heads);
    if (L->is_kv_source) {
        upload_weight(u, &a->cmp_wkv);
        upload_weight(u, &a->cmp_wgate);
        a->cmp_norm = upload_bf16(u, a->cmp_norm, c->head_dim);
        upload_weight(u, &a->idx_wk);
        a->idx_k_norm = upload_bf16(u, a->idx_k_norm, c->index_head_dim);
    }
    if (L->is_index_source) {
        upload_weight(u, &a->idx_wq_b);
        upload_weight(u, &a->idx_weights_proj);
    }
    di_ffn_weights *fw = &L->ffn;
    upload_weight(u, &fw->gate);
    hc->gate_bias = upload_f32(u, fw->gate_bias, fw->n_experts); /* fw->gate_bias stays the host copy */
    di_weight *w1 = di_xmalloc(sizeof(di_weight) * (size_t)fw->n_experts);
    di_weight *w2 = di_xmalloc(sizeof(di_weight) * (size_t)fw->n_experts);
    di_weight *w3 = di_xmalloc(sizeof(di_weight) * (size_t)fw->n_experts);
    for (int e = 0; e < fw->n_experts; e++) {
        w1[e] = fw->w1[e];
        w2[e] = fw->w2[e];
        w3[e] = fw->w3[e];
        if (m->proxy.resident_experts && e >= m->proxy.resident_experts) { /* bench EP-N proxy */
            w1[e].data = w2[e].data = w3[e].data = NULL;
            continue;
        }
        upload_weight(u, &w1[e]);
        upload_weight(u, &w2[e]);
        upload_weight(u, &w3[e]);
    }
    fw->w1 = w1;
    fw->w2 = w2;
    fw->w3 = w3;
    fw->gate_bias = fw->gate_bias_vl = NULL; /* host copies are used */
    /* the grouped expert GEMMs' weight pointers [6][E] (w1, w3, w2: data, scale) of the resident
     * experts: constant, so uploaded once here rather than by every step */
    const int E = gpu_resident_experts(m, fw);
    const uint8_t **wp = di_xmalloc(sizeof(uint8_t *) * 6 * (size_t)E);
    for (int e = 0; e < E; e++) {
        const di_weight *ws[3] = {&w1[e], &w3[e], &w2[e]};
        for (int k = 0; k < 3; k++) {
            wp[(2 * k) * E + e] = ws[k]->data;
            wp[(2 * k + 1) * E + e] = ws[k]->scale;
        }
    }
    hc->expert_ptrs = upload(u, wp, sizeof(uint8_t *) * 6 * (size_t)E, UPLOAD_HOST_ALWAYS);
    free(wp);
    upload_weight(u, &fw->sh_w1);
    upload_weight(u, &fw->sh_w2);
    upload_weight(u, &fw->sh_w3);
    if (L->engram_slot >= 0) {
        di_engram_weights *e = &L->engram;
        const int hd = c->engram_head_dim;
        if (m->proxy.engram_rows && m->proxy.engram_rows < e->rows) e->rows = m->proxy.engram_rows;
        e->table = upload(u, e->table, (size_t)e->rows * hd, RND_BYTES_E4M3);
        e->table_scale = upload(u, e->table_scale, (size_t)e->rows * (hd / 32), RND_BYTES_SCALE);
        upload_weight(u, &e->wkv);
        e->qk = upload_f32(u, e->qk, (int64_t)n * D);
    }
}

/* DEEPINFER_GPU_DENSE_BF16: the dense FP8 matrices of the attention and the shared expert (whole matrices;
 * the FP8 linears look their codes up: cuda_linear_blas.cu) also as bf16, as far as the device holds them */
static void keep_dense16(const di_model *m, gpu_model *g) {
    int wanted = 0;
    for (int l = 0; l < m->n_layers; l++) {
        const di_attn_weights *a = &g->layers[l].attn;
        const di_ffn_weights *fw = &g->layers[l].ffn;
        const di_weight *ws[] = {&a->wq_a, &a->wkv, &a->wq_b, &a->wo_a, &a->wo_b, &fw->sh_w1, &fw->sh_w3, &fw->sh_w2};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
            const di_weight *w = ws[i];
            if (w->dtype != DI_DT_F8_E4M3 || w->row0 != 0 || !w->rows || w->cols % 32 != 0) continue;
            wanted++;
            di_cuda_dense16_add(&g->dense16, (const uint8_t *)w->data, w->scale, w->rows, w->cols, g->cx.stream);
        }
    }
    GPU_CK(cudaStreamSynchronize(g->cx.stream));
    fprintf(stderr, "deepinfer: %d of %d dense FP8 matrices kept as bf16 too (%.2f GB; DEEPINFER_GPU_DENSE_BF16=%lld)%s\n",
            g->dense16.n, wanted, (double)g->dense16.bytes / 1e9, (long long)m->dense16_rows,
            g->dense16.n < wanted ? ": the device has no room for the rest" : "");
    g->cx.dense16 = g->cx_side.dense16 = &g->dense16;
    g->cx.dense16_rows = g->cx_side.dense16_rows = m->dense16_rows;
}

static void detach(di_model *m) {
    gpu_model *g = m->dev;
    if (!g) return;
    gpu_forward_end(m, NULL, NULL); /* a call begun and never ended */
    cudaStreamSynchronize(g->cx.stream);
    for (int i = 0; i < g->n_allocs; i++) cudaFree(g->allocs[i]);
    for (int l = 0; l < m->n_layers; l++) { /* DSpark layers are not uploaded (CPU only so far) */
        free(g->layers[l].ffn.w1);
        free(g->layers[l].ffn.w2);
        free(g->layers[l].ffn.w3);
    }
    gpu_graphs_free(g);
    di_cuda_dense16_free(&g->dense16);
    di_sample_editor_free(g->editor);
    if (g->stg.base) cudaFreeHost(g->stg.base);
    if (g->arena.base) cudaFree(g->arena.base);
    cudaEventDestroy(g->ev_start);
    cudaEventDestroy(g->ev_end);
    cudaEventDestroy(g->ev_prev_end);
    for (int i = 0; i < GPU_PIECE_EVENTS; i++) {
        if (g->ev_piece_in[i]) cudaEventDestroy(g->ev_piece_in[i]);
        if (g->ev_piece_out[i]) cudaEventDestroy(g->ev_piece_out[i]);
    }
    free(g->allocs);
    free(g->layers);
    free(g->hc);
    di_cuda_ctx_free(&g->cx);
    di_cuda_ctx_free(&g->cx_side);
    cudaEventDestroy(g->ev_fork);
    cudaEventDestroy(g->ev_join);
    cudaEventDestroy(g->ev_hc_join);
    free(g);
    m->dev = NULL;
}

static di_status attach(di_model *m, di_err *err) {
    gpu_model *g = di_xcalloc(1, sizeof *g);
    if (!di_cuda_ctx_init(&g->cx)) {
        free(g);
        return di_errf(err, DI_EUNSUPPORTED, "no usable CUDA device");
    }
    g->cx.exact = m->exact_gemm;
    g->cx.wgmma = m->wgmma_gemm && !m->batch_invariant; /* opt-in; batch invariance keeps the fixed-order tiles */
    g->cx.fp4_imma = !m->batch_invariant; /* exact sums, but not the f16 twin's bits that batch invariance needs */
    g->cx.blas_rows = m->blas_gemm && g->cx.wgmma ? DI_CUDA_BLAS_MIN_ROWS : 0; /* cuBLAS's sums: past the wgmma kernel's */
    g->cx.blas_w16_rows = m->blas_gemm && g->cx.wgmma ? DI_CUDA_BLAS_W16_MIN_ROWS : 0;
    g->cx.blas_w16_n = DI_CUDA_BLAS_W16_MIN_N;
    if (!di_cuda_ctx_init(&g->cx_side)) {
        di_cuda_ctx_free(&g->cx);
        free(g);
        return di_errf(err, DI_EUNSUPPORTED, "no usable CUDA device (second stream)");
    }
    /* the main stream's blocks first: the routed experts' chain (router, routing, the int8 twin) is
     * mostly one-block and latency-bound, and without priorities the shared expert's GEMV blocks on
     * the side stream could hold the multiprocessors it waits for (B = 1: session 22 and session 25
     * call 6 found the side stream slower or bimodal without them; docs/PERFORMANCE.md session 25) */
    di_cuda_ctx_set_priority(&g->cx, false);
    di_cuda_ctx_set_priority(&g->cx_side, true);
    g->cx_side.exact = g->cx.exact;
    g->cx_side.wgmma = g->cx.wgmma;
    g->cx_side.fp4_imma = g->cx.fp4_imma;
    g->cx_side.blas_rows = g->cx.blas_rows;
    g->cx_side.blas_w16_rows = g->cx.blas_w16_rows;
    g->cx_side.blas_w16_n = g->cx.blas_w16_n;
    GPU_CK(cudaEventCreateWithFlags(&g->ev_fork, cudaEventDisableTiming));
    GPU_CK(cudaEventCreateWithFlags(&g->ev_join, cudaEventDisableTiming));
    GPU_CK(cudaEventCreateWithFlags(&g->ev_hc_join, cudaEventDisableTiming));
    GPU_CK(cudaEventCreate(&g->ev_start));
    GPU_CK(cudaEventCreate(&g->ev_end));
    GPU_CK(cudaEventCreate(&g->ev_prev_end));
    for (int i = 0; i < GPU_PIECE_EVENTS; i++) {
        GPU_CK(cudaEventCreate(&g->ev_piece_in[i]));
        GPU_CK(cudaEventCreate(&g->ev_piece_out[i]));
    }
    /* temporaries of forward calls come from the stream-ordered pool: keep what it grew to */
    cudaMemPool_t pool;
    int dev = 0;
    GPU_CK(cudaGetDevice(&dev));
    GPU_CK(cudaDeviceGetDefaultMemPool(&pool, dev));
    uint64_t keep = UINT64_MAX;
    GPU_CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    g->dm = *m;
    g->dm.dev_backend = NULL;
    g->dm.dev = NULL;
    g->layers = di_xmalloc(sizeof(di_layer) * (size_t)m->n_total_layers);
    memcpy(g->layers, m->layers, sizeof(di_layer) * (size_t)m->n_total_layers);
    g->hc = di_xcalloc((size_t)m->n_total_layers, sizeof(gpu_layer_consts));
    g->dm.layers = g->layers;
    m->dev = g; /* detach can run from here on */
    uploader u = {g, m->proxy.synthetic, false, 0};
    const di_config *c = &m->cfg;
    g->dm.embed = upload_bf16(&u, m->embed, (int64_t)c->vocab_size * c->hidden_size);
    g->dm.norm = upload_bf16(&u, m->norm, c->hidden_size);
    upload_weight(&u, &g->dm.head);
    for (int l = 0; l < m->n_layers; l++) upload_layer(&u, m, &g->layers[l], &g->hc[l]);
    GPU_CK(cudaStreamSynchronize(g->cx.stream));
    if (u.failed) {
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        di_status st = di_errf(err, DI_ENOMEM, "the weights do not fit the device: %.2f GB uploaded, "
                               "%.2f GB more wanted, %.2f of %.2f GB free", (double)g->bytes / 1e9,
                               (double)u.failed_bytes / 1e9, (double)free_b / 1e9, (double)total_b / 1e9);
        detach(m);
        return st;
    }
    if (m->dense16_rows > 0 && g->cx.wgmma && !g->cx.exact) keep_dense16(m, g);
    else if (m->dense16_rows > 0) /* the copies serve the calls that the wgmma kernel would take */
        fprintf(stderr, "deepinfer: DEEPINFER_GPU_DENSE_BF16 ignored: no bf16 copies under DEEPINFER_GPU_WGMMA=0, "
                        "DEEPINFER_BATCH_INVARIANT=1 or DEEPINFER_GPU_EXACT=1\n");
    return DI_OK;
}

static void describe(char *buf, size_t cap) {
    struct cudaDeviceProp p;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&p, dev) != cudaSuccess) {
        snprintf(buf, cap, "CUDA device (unknown)");
        return;
    }
    snprintf(buf, cap, "%s (sm_%d%d, %.0f GB)", p.name, p.major, p.minor, (double)p.totalGlobalMem / 1e9);
}

static void ceilings(bool quick, double *hbm_gbs, double *bf16_tflops, double *fp8_tflops) {
    di_cuda_ceilings c;
    di_cuda_measure_ceilings(quick, false, &c);
    *hbm_gbs = c.hbm_gbs;
    *bf16_tflops = c.bf16_tflops;
    *fp8_tflops = c.fp8_tflops;
}
/* free device memory, counting what the stream-ordered pool keeps cached for forward temporaries (attach
 * sets its release threshold to keep what it grew to) as free: the pool gives it back first */
static void mem_info(size_t *free_b, size_t *total_b) {
    cudaMemPool_t pool;
    int dev = 0;
    GPU_CK(cudaGetDevice(&dev));
    GPU_CK(cudaDeviceGetDefaultMemPool(&pool, dev));
    GPU_CK(cudaDeviceSynchronize());
    GPU_CK(cudaMemPoolTrimTo(pool, 0));
    GPU_CK(cudaMemGetInfo(free_b, total_b));
}
static void fill_random(void *dev, size_t bytes, uint64_t seed) {
    gpu_fill_random(dev, bytes, seed, RND_F32, 0);
    GPU_CK(cudaDeviceSynchronize());
}

static void fill_kv_pool(void *dev, size_t bytes, int block_bytes, int block_entries, int row_bytes, int dh,
                         int key_bytes, int idim, uint64_t seed) {
    gpu_fill_kv_blocks(dev, bytes, block_bytes, block_entries, row_bytes, dh, key_bytes, idim, seed, 0);
    GPU_CK(cudaDeviceSynchronize());
}

static void profiler_range(bool on) {
    GPU_CK(cudaDeviceSynchronize());
    GPU_CK(on ? cudaProfilerStart() : cudaProfilerStop());
}

/* both streams' contexts (the side one runs the shared expert) */
static void path_counts(const di_model *m, di_device_path_counts *out) {
    const gpu_model *g = m->dev;
    const di_cuda_path_counts *c[2] = {&g->cx.counts, &g->cx_side.counts};
    *out = (di_device_path_counts){0};
    for (int i = 0; i < 2; i++) {
        out->fp4_imma += c[i]->fp4_imma;
        out->fp4_imma_row += c[i]->fp4_imma_row;
        out->fp4_imma_swiglu += c[i]->fp4_imma_swiglu;
        out->blas_kept += c[i]->blas_kept;
    }
}

static const di_device_backend cuda_backend = {
    .name = "cuda",
    .mem = {mem_alloc, mem_release, mem_copy, down},
    .upload = up,
    .download = down,
    .attach = attach,
    .detach = detach,
    .forward_begin = gpu_forward_begin,
    .forward_end = gpu_forward_end,
    .describe = describe,
    .ceilings = ceilings,
    .mem_info = mem_info,
    .fill_random = fill_random,
    .fill_kv_pool = fill_kv_pool,
    .profile = gpu_profile,
    .n_profile_stages = ST_COUNT,
    .step_times = gpu_step_times,
    .graph_stats = gpu_graph_stats,
    .path_counts = path_counts,
    .profiler_range = profiler_range,
    .host_alloc = result_alloc,
    .host_free = result_free,
};

const di_device_backend *di_cuda_backend_probe(const char **why) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        cudaGetLastError();
        if (why) *why = e == cudaSuccess ? "no CUDA device present" : cudaGetErrorString(e);
        return NULL;
    }
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) == cudaSuccess && p.major < 9) {
        if (why) *why = "the CUDA kernels are built for sm_90a (Hopper); this device is older";
        return NULL;
    }
    return &cuda_backend;
}
