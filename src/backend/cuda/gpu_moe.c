/* Mixture of experts and Engram on the GPU: the twins of src/forward/moe.c and engram.c.
 *
 * MoE, default: routing (moe_route kernel, the CPU's arithmetic with CUDA's log1pf) and grouping on
 * the device, no host round trip; the grouped GEMMs read the tokens' rows through a list in
 * expert order (quantised as they are gathered) and the combine reads each slot's expert output
 * through another, so no rows are copied. Exact mode and debug runs: the router's logits are
 * downloaded and routed on the host by the CPU's own function (forward/host_steps.h), so expert
 * choices never differ between backends, and rows are grouped per expert on the host and gathered.
 * One grouped launch per matrix (w1, w3, w2) runs every expert that got rows (block-scaled GEMMs,
 * each row's arithmetic that of a single-matrix call); the combine kernel adds the slots in
 * ascending expert id, then the shared expert, and rounds once, as the CPU does. An
 * expert with no weights on this device (the bench's EP-N rank proxy) is never routed to by real
 * routing; the bench routes only to resident experts. The shared expert runs on a second stream
 * (of lower priority) beside the routed experts (moe_shared_forked), and where the next block
 * takes it the combine is left to that block's input (gpu_moe_deferred): its mix-sum kernel up to
 * 32 rows, its hc_post past them (di_cuda_hc_post_combine_pre).
 *
 * Engram: hash rows are computed on the host (model/engram_consts.h) from the token history and
 * uploaded; gather, projection and gate run on the device. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/gpu_internal.h"
#include "forward/host_steps.h"

/* the buffers of h's act_quant [n, inter] in the form w2's linear takes (`form`; all NULL for none,
 * or where the SwiGLU cannot make them), for the caller to free (forms_free) */
static di_cuda_act_forms swiglu_forms_alloc(gpu_fwd *f, const float *g, const float *u, int64_t n, int64_t inter,
                                            di_act_form form) {
    di_cuda_act_forms forms = {NULL}; /* all NULL */
    if (form == DI_ACT_FORM_NONE || !di_cuda_swiglu_forms_supported(g, u, inter, g)) return forms;
    if (form == DI_ACT_FORM_QBF16) {
        forms.qbf16 = gpu_alloc(f, sizeof(uint16_t) * (size_t)(n * inter)); /* [n, inter] bf16 */
        return forms;
    }
    const int64_t nb = n * inter / 32;
    float *scale = gpu_alloc(f, sizeof(float) * (size_t)nb); /* [n, inter / 32] */
    if (form == DI_ACT_FORM_DIGITS) {
        forms.digits = gpu_alloc(f, (size_t)(3 * n * inter)); /* [n, inter / 32][3][32] */
        forms.digit_scale = scale;
    } else {
        forms.q = gpu_alloc(f, (size_t)(n * inter)); /* [n, inter] e4m3 */
        forms.scale = scale;
    }
    return forms;
}

/* h [n, inter] = SwiGLU(g, u) [* wt] over g, with h's act_quant into forms (swiglu_forms_alloc's) made
 * by the same launch and noted for w2 (di_cuda_act_forms_note; the caller forgets it) */
static void swiglu_run(gpu_fwd *f, float *g, const float *u, int64_t n, int64_t inter, const float *wt,
                       const di_cuda_act_forms *forms) {
    const float lim = (float)f->m->cfg.swiglu_limit;
    if (!forms->q && !forms->digits && !forms->qbf16) {
        di_cuda_swiglu(g, u, n, inter, lim, wt, g, f->s);
        return;
    }
    di_cuda_swiglu_forms(g, u, n, inter, lim, wt, g, forms, f->s);
    di_cuda_act_forms_note(f->cx, g, n, inter, *forms);
}

static void forms_free(gpu_fwd *f, const float *x, di_cuda_act_forms *forms) {
    di_cuda_act_forms_forget(f->cx, x);
    gpu_free(f, forms->q);
    gpu_free(f, forms->scale);
    gpu_free(f, forms->digits);
    gpu_free(f, forms->digit_scale);
    gpu_free(f, forms->qbf16);
}

/* SwiGLU expert on n rows: y [n, D] = w2(bf16(silu(min(g, L)) * clamp(u, -L, L) * wt)) */
static void expert_ffn(gpu_fwd *f, const di_weight *w1, const di_weight *w2, const di_weight *w3,
                       const float *x, int n, const float *wt, float *y) {
    const int64_t inter = w1->rows;
    float *g = gpu_alloc(f, sizeof(float) * (size_t)n * inter); /* [n, inter] */
    float *u = gpu_alloc(f, sizeof(float) * (size_t)n * inter);
    const di_weight *w13[2] = {w1, w3}; /* both read x: one launch */
    float *const gu[2] = {g, u};
    gpu_linear_quant_set(f, 2, w13, x, n, gu);
    di_cuda_act_forms h_forms = swiglu_forms_alloc(f, g, u, n, inter, di_cuda_linear_act_form(f->cx, w2, false, 1, n, n));
    swiglu_run(f, g, u, n, inter, wt, &h_forms);
    gpu_linear(f, w2, g, n, y, DI_LIN_QUANT);
    forms_free(f, g, &h_forms);
    gpu_free(f, g);
    gpu_free(f, u);
}

static float *moe_tail(gpu_fwd *f, const di_ffn_weights *fw, const float *x, const float *const *slot_rows,
                       const int32_t *d_order, float *out, float *shared_made);

/* the routed experts' w1 (which 1) or w2 (2) of the first of the E resident experts that has weights
 * here (their common shape), or NULL */
static const di_weight *routed_shape(const di_ffn_weights *fw, int E, int which) {
    for (int e = 0; e < E; e++)
        if (fw->w1[e].data) return which == 1 ? &fw->w1[e] : &fw->w2[e];
    return NULL;
}

/* The shared expert of x [R, D] on the side stream (gpu_model cx_side), forked from the main
 * stream here; moe_shared_join makes the main stream wait for it. Its kernels are the ones the main
 * stream would run, on the same operands, so the bits do not change; the routed experts' kernels
 * run meanwhile. Returns its output [R, D] (ready after the join), or NULL (nothing launched) where
 * the side stream is not used: the stage profile, which times stages on the main stream. (H200,
 * session 22: B = 8 / 16 / 32 -0.2 / -0.3 / -1.1 ms a step; B = 1 slower or bimodal until the side
 * stream got the lower priority, session 25: -0.35 ms.) */
static float *moe_shared_forked(gpu_fwd *f, const di_ffn_weights *fw, const float *x) {
    if (gpu_profiling()) return NULL;
    float *shared = gpu_alloc(f, sizeof(float) * (size_t)f->R * f->m->cfg.hidden_size); /* [R, D] */
    di_cuda_ctx *side = f->cx_side;
    gpu_side_fork(f);
    memcpy(side->act_forms, f->cx->act_forms, sizeof side->act_forms); /* x's forms, made on the main stream */
    side->act_forms_clock = f->cx->act_forms_clock;
    gpu_fwd fs = *f;
    fs.s = side->stream;
    fs.cx = side;
    expert_ffn(&fs, &fw->sh_w1, &fw->sh_w2, &fw->sh_w3, x, f->R, NULL, shared);
    memset(side->act_forms, 0, sizeof side->act_forms);
    f->graph_reusable = f->graph_reusable && fs.graph_reusable; /* a spill chunk taken there */
    GPU_CK(cudaEventRecord(f->g->ev_join, side->stream));
    return shared;
}
static void moe_shared_join(gpu_fwd *f) { GPU_CK(cudaStreamWaitEvent(f->s, f->g->ev_join, 0)); }

/* The row-tile lists (di_group_tiles) the grouping kernel makes for the grouped launches of the
 * two expert shapes (w1 / w3, w2) over E groups of n rows, none past R: one a tile size their
 * kernels take, allocated (cap entries each) into tiles [DI_GROUP_TILE_LISTS]; returns their count.
 * Uniform routing leaves most of a launch over the groups' slots empty (B = 64 of EP-8: 48 slots x
 * 8 tiles of 8 rows for the 48 tiles that have rows); no list where it would launch as many blocks
 * as the slots (B = 1: six one-row groups). */
static int moe_tile_lists(gpu_fwd *f, const di_weight *const shapes[2], int E, int64_t n, int R,
                          di_group_tiles *tiles) {
    int n_tiles = 0;
    for (int i = 0; i < 2; i++) {
        const int bt = shapes[i] ? di_cuda_linear_group_tile(f->cx, shapes[i], E, n, R) : 0;
        bool listed = bt <= 0;
        for (int j = 0; j < n_tiles; j++) listed = listed || tiles[j].bt == bt;
        const int cap = listed ? 0 : di_group_tiles_cap(bt, E, n, R);
        if (listed || (int64_t)cap >= (n < E ? n : E) * ((R + bt - 1) / bt)) continue;
        tiles[n_tiles++] = (di_group_tiles){gpu_alloc(f, 4 * sizeof(int) * (size_t)cap), bt, cap}; /* [cap][4] */
    }
    return n_tiles;
}

/* x's act_quant values as bf16 [R, D], made once for the routed w1 / w3 pair launch on the wgmma
 * kernel, which reads them through the MoE's row list, and for the shared expert: the pair's
 * activations were converted as gathered, 6 R rows (a 4,096-token prefill: 24,576 rows, ~0.75 GB
 * moved a layer, against R rows' ~0.13 GB), and the shared expert converted its own. Noted as x's
 * form beside the forms x's producer noted (restored by moe_input_qbf16_free). */
typedef struct {
    uint16_t *qbf16;          /* [R, D], or NULL: not made here */
    di_cuda_act_forms before; /* x's noted forms before */
    bool had;                 /* whether x had any */
} moe_input_qbf16;

static moe_input_qbf16 moe_input_qbf16_make(gpu_fwd *f, const di_weight *w1, int E, int64_t n, const float *x) {
    moe_input_qbf16 r = {NULL, {NULL}, false};
    const int R = f->R;
    const int64_t D = f->m->cfg.hidden_size;
    if (w1->cols != D || D % 32 != 0 || di_cuda_linear_act_form(f->cx, w1, true, E, n, R) != DI_ACT_FORM_QBF16) return r;
    const di_cuda_act_forms *had = di_cuda_act_forms_find(f->cx, x, R, D);
    if (had && had->qbf16) return r;
    r.had = had != NULL;
    if (had) r.before = *had;
    r.qbf16 = gpu_alloc(f, sizeof(uint16_t) * (size_t)R * D);
    di_cuda_act_quant_bf16(x, NULL, D / 32, (int64_t)R * (D / 32), r.qbf16, f->s);
    di_cuda_act_forms forms = r.before;
    forms.qbf16 = r.qbf16;
    di_cuda_act_forms_note(f->cx, x, R, D, forms);
    return r;
}

static void moe_input_qbf16_free(gpu_fwd *f, const float *x, moe_input_qbf16 *r) {
    if (!r->qbf16) return;
    if (r->had) di_cuda_act_forms_note(f->cx, x, f->R, f->m->cfg.hidden_size, r->before);
    else di_cuda_act_forms_forget(f->cx, x);
    gpu_free(f, r->qbf16);
    r->qbf16 = NULL;
}

/* The default path: routing and grouping on the device, so the forward call never waits for the
 * GPU here. Groups are the resident experts (weight pointers uploaded once, gpu_layer_consts);
 * the grouped GEMMs launch over the row-tile lists the grouping kernel makes (moe_tile_lists), or
 * min(experts, assignments) slots over the list of experts that got rows, each slot covering up to
 * R rows (no expert gets a row twice). defer (out NULL): the combine's
 * operands go there instead (gpu_moe_deferred). */
static void moe_device(gpu_fwd *f, const di_layer *L, const float *x, float *out, gpu_moe_combine *defer) {
    const di_model *m = f->m;
    const int R = f->R;
    const di_ffn_weights *fw = &L->ffn;
    const int64_t D = m->cfg.hidden_size;
    const int K = fw->top_k, E = gpu_resident_experts(m, fw);
    const int64_t n = (int64_t)R * K;
    const di_weight *shape1 = routed_shape(fw, E, 1), *shape2 = routed_shape(fw, E, 2);
    if (!shape1) di_die("MoE: layer %d has no expert weights on this device", L->id);
    moe_input_qbf16 xq = moe_input_qbf16_make(f, shape1, E, n, x);
    float *shared_side = moe_shared_forked(f, fw, x); /* [R, D] or NULL: made by moe_tail */
    gpu_stage(f, ST_MOE_ROUTE);
    float *d_logits = gpu_alloc(f, sizeof(float) * (size_t)R * fw->n_experts); /* [R, E] fp32 */
    /* the router's K splits are added by the routing kernel (their partial sums stay in the GEMM
     * scratch, which nothing on this stream reuses before it) */
    int ksplit = 1;
    const float *logits = d_logits; /* [ksplit][R, E] */
    if (di_cuda_linear_w16_supported(&fw->gate))
        logits = di_cuda_linear_w16_parts(f->cx, &fw->gate, x, R, d_logits, &ksplit);
    else gpu_linear(f, &fw->gate, x, R, d_logits, DI_LIN_F32);
    int32_t *d_expert = gpu_alloc(f, sizeof(int32_t) * (size_t)n); /* [R, K] */
    int32_t *d_order = gpu_alloc(f, sizeof(int32_t) * (size_t)n);  /* [R, K] */
    float *d_weight = gpu_alloc(f, sizeof(float) * (size_t)n);     /* [R, K] */
    float *yg = gpu_alloc(f, sizeof(float) * (size_t)n * D);              /* [R*K, D] in expert order */
    int *d_off = gpu_alloc(f, sizeof(int) * ((size_t)E + 1));              /* [E + 1] */
    int *d_active = gpu_alloc(f, sizeof(int) * (size_t)E);                 /* [E] experts with rows, then -1 */
    const float **x_rows = gpu_alloc(f, sizeof(float *) * (size_t)n);     /* [R*K] expert order -> row of x */
    const float **slot_rows = gpu_alloc(f, sizeof(float *) * (size_t)n);  /* [R, K] slot -> row of yg */
    float *d_wts = gpu_alloc(f, sizeof(float) * (size_t)n);                /* [R*K] */
    di_group_tiles tiles[DI_GROUP_TILE_LISTS];
    const di_weight *tile_shapes[2] = {shape1, shape2};
    const int n_tiles = moe_tile_lists(f, tile_shapes, E, n, R, tiles);
    di_cuda_moe_route_group(logits, ksplit, f->g->hc[L->id].gate_bias, R, fw->n_experts, K,
                            (float)m->cfg.routed_scaling_factor, m->proxy.resident_experts, E, d_expert, d_weight,
                            d_order, x, yg, D, d_off, d_active, x_rows, slot_rows, d_wts, tiles, n_tiles, f->s);
    di_cuda_group_tiles_note(f->cx, d_off, tiles, n_tiles);
    gpu_stage(f, ST_MOE_EXPERTS);
    const uint8_t *const *d_wp = f->g->hc[L->id].expert_ptrs; /* [6][E] */
    const int64_t inter = shape1->rows;
    float *g = gpu_alloc(f, sizeof(float) * (size_t)n * inter); /* [R*K, inter] */
    float *u = gpu_alloc(f, sizeof(float) * (size_t)n * inter);
    /* w1 and w3 over the same rows (x's, in expert order through x_rows): quantised once, or x's
     * digits made by its producer (gpu_moe_input_digits) read through the list; then the SwiGLU over
     * g. At one row an expert on the int8 twin, its launch makes the SwiGLU (h over g) and h's digits */
    const di_act_form w2_form = di_cuda_linear_act_form(f->cx, shape2, true, E, n, R);
    di_cuda_act_forms h_forms = swiglu_forms_alloc(f, g, u, n, inter, w2_form);
    const di_gemv_swiglu sw = {(float)m->cfg.swiglu_limit, d_wts, g, h_forms.digits, h_forms.digit_scale};
    if (h_forms.digits && di_cuda_linear_mma_pair_swiglu(f->cx, shape1, d_wp, d_wp + E, d_wp + 2 * E, d_wp + 3 * E, d_off,
                                                         d_active, E, n, R, x, x_rows, &sw)) {
        di_cuda_act_forms_note(f->cx, g, n, inter, h_forms);
    } else {
        di_cuda_linear_quant_grouped_pair(f->cx, shape1, d_wp, d_wp + E, d_wp + 2 * E, d_wp + 3 * E, d_off, d_active, E,
                                          n, R, x, x_rows, g, u);
        swiglu_run(f, g, u, n, inter, d_wts, &h_forms);
    }
    di_cuda_linear_quant_grouped(f->cx, shape2, d_wp + 4 * E, d_wp + 5 * E, d_off, d_active, E, n, R, g, yg);
    forms_free(f, g, &h_forms);
    if (shared_side) moe_shared_join(f);
    float *shared = moe_tail(f, fw, x, slot_rows, d_order, out, shared_side);
    moe_input_qbf16_free(f, x, &xq);
    gpu_free(f, g);
    gpu_free(f, u);
    gpu_free(f, d_logits);
    gpu_free(f, d_expert);
    gpu_free(f, d_weight);
    di_cuda_group_tiles_forget(f->cx, d_off);
    for (int i = 0; i < n_tiles; i++) gpu_free(f, tiles[i].list);
    gpu_free(f, d_off);
    gpu_free(f, d_active);
    gpu_free(f, x_rows);
    gpu_free(f, d_wts);
    if (defer) { /* the combine reads these later: they go with it */
        *defer = (gpu_moe_combine){slot_rows, d_order, shared, K, {(void *)slot_rows, d_order, yg, shared}};
        return;
    }
    gpu_free(f, d_order);
    gpu_free(f, yg);
    gpu_free(f, slot_rows);
}

/* shared expert (unless shared_made: its output, made on the side stream), then (out non-NULL) the
 * combine of the routed slots (ascending expert id) and the shared output; out NULL: returns the
 * shared output for a later combine (the caller frees it) */
static float *moe_tail(gpu_fwd *f, const di_ffn_weights *fw, const float *x, const float *const *slot_rows,
                       const int32_t *d_order, float *out, float *shared_made) {
    const int R = f->R, K = fw->top_k;
    const int64_t D = f->m->cfg.hidden_size;
    gpu_stage(f, ST_MOE_SHARED);
    float *shared = shared_made;
    if (!shared) {
        shared = gpu_alloc(f, sizeof(float) * (size_t)R * D); /* [R, D] */
        expert_ffn(f, &fw->sh_w1, &fw->sh_w2, &fw->sh_w3, x, R, NULL, shared);
    }
    gpu_stage(f, ST_OTHER);
    if (!out) return shared;
    di_cuda_moe_combine(slot_rows, d_order, shared, R, K, D, out, f->s);
    gpu_free(f, shared);
    return NULL;
}

static bool moe_on_device(const gpu_fwd *f, const di_layer *L) {
    return !f->cx->exact && !f->b->debug_fn && L->ffn.n_experts <= DI_MOE_ROUTE_MAX_E &&
           L->ffn.top_k <= DI_MOE_ROUTE_MAX_K;
}

bool gpu_moe_input_digits(const gpu_fwd *f, const di_layer *L) {
    if (!moe_on_device(f, L)) return false;
    const int E = gpu_resident_experts(f->m, &L->ffn);
    const di_weight *w1 = routed_shape(&L->ffn, E, 1);
    return w1 && di_cuda_linear_act_form(f->cx, w1, true, E, (int64_t)f->R * L->ffn.top_k, f->R) == DI_ACT_FORM_DIGITS;
}

bool gpu_moe_deferred(gpu_fwd *f, const di_layer *L, const float *x, gpu_moe_combine *c) {
    if (!moe_on_device(f, L) || L->ffn.top_k > DI_CUDA_COMBINE_MAX_K || f->m->cfg.hidden_size % 4 != 0) return false;
    moe_device(f, L, x, NULL, c);
    return true;
}

void gpu_moe_combine_free(gpu_fwd *f, gpu_moe_combine *c) {
    for (int i = 0; i < 4; i++) gpu_free(f, c->own[i]);
    memset(c, 0, sizeof *c);
}

void gpu_moe(gpu_fwd *f, const di_layer *L, const di_layer *hL, const float *x, float *out) {
    if (moe_on_device(f, L)) {
        moe_device(f, L, x, out, NULL);
        return;
    }
    const di_model *m = f->m;
    const int R = f->R;
    const di_ffn_weights *fw = &L->ffn, *hf = &hL->ffn;
    const int64_t D = m->cfg.hidden_size;
    const int E = fw->n_experts, K = fw->top_k;
    /* routing on the host */
    gpu_stage(f, ST_MOE_ROUTE);
    float *d_logits = gpu_alloc(f, sizeof(float) * (size_t)R * E); /* [R, E] fp32 */
    gpu_linear(f, &fw->gate, x, R, d_logits, DI_LIN_F32);
    float *logits = di_xmalloc(sizeof(float) * (size_t)R * E);
    gpu_download(f, logits, d_logits, sizeof(float) * (size_t)R * E);
    gpu_free(f, d_logits);
    int32_t *expert = di_xmalloc(sizeof(int32_t) * (size_t)R * K); /* [R, K] */
    float *weight = di_xmalloc(sizeof(float) * (size_t)R * K);
    int32_t *order = di_xmalloc(sizeof(int32_t) * (size_t)R * K);
    /* rows are independent: a long prefill routes on every host core (~10 us per row) */
#pragma omp parallel for schedule(static) if (R >= 64)
    for (int r = 0; r < R; r++) {
        int32_t *ex = expert + (size_t)r * K, *ord = order + (size_t)r * K;
        di_moe_route_row(m, hf, logits + (size_t)r * E, ex, weight + (size_t)r * K);
        if (m->proxy.resident_experts) /* bench EP-N proxy: uniform over the resident experts */
            for (int j = 0; j < K; j++) ex[j] = (int32_t)(((int64_t)r * K + j) % m->proxy.resident_experts);
        for (int j = 0; j < K; j++) ord[j] = j;
        for (int a = 1; a < K; a++) /* slots in ascending expert id */
            for (int b = a; b > 0 && ex[ord[b]] < ex[ord[b - 1]]; b--) {
                int32_t t = ord[b];
                ord[b] = ord[b - 1];
                ord[b - 1] = t;
            }
    }
    free(logits);
    if (f->b->debug_fn) {
        float *dbg = di_xmalloc(sizeof(float) * (size_t)R * K * 2);
        for (int i = 0; i < R * K; i++) {
            dbg[i] = (float)expert[i];
            dbg[R * K + i] = weight[i];
        }
        f->b->debug_fn(f->b->debug_user, "route_experts", L->id, dbg, (int64_t)R * K);
        f->b->debug_fn(f->b->debug_user, "route_weights", L->id, dbg + R * K, (int64_t)R * K);
        free(dbg);
    }
    /* groups per expert: counting sort of the (row, slot) pairs */
    int *count = di_xcalloc((size_t)E + 1, sizeof(int));
    for (int i = 0; i < R * K; i++) count[expert[i] + 1]++;
    for (int e = 0; e < E; e++) count[e + 1] += count[e];
    int *fill = di_xmalloc(sizeof(int) * (size_t)E);
    memcpy(fill, count, sizeof(int) * (size_t)E);
    float *xg = gpu_alloc(f, sizeof(float) * (size_t)R * K * D);  /* [R*K, D] gathered rows */
    float *yg = gpu_alloc(f, sizeof(float) * (size_t)R * K * D);  /* [R*K, D] */
    const float **src = di_xmalloc(sizeof(float *) * (size_t)R * K);
    float **gdst = di_xmalloc(sizeof(float *) * (size_t)R * K);
    const float **slots = di_xmalloc(sizeof(float *) * (size_t)R * K); /* [R, K] slot -> row of yg */
    float *wts = di_xmalloc(sizeof(float) * (size_t)R * K);
    for (int r = 0; r < R; r++) /* rows ascending within each expert, as the CPU gathers them */
        for (int j = 0; j < K; j++) {
            const int i = fill[expert[(size_t)r * K + j]]++;
            src[i] = x + (size_t)r * D;
            gdst[i] = xg + (size_t)i * D;
            slots[(size_t)r * K + j] = yg + (size_t)i * D;
            wts[i] = weight[(size_t)r * K + j];
        }
    gpu_stage(f, ST_MOE_EXPERTS);
    gpu_copy_rows(f, gdst, src, (int64_t)R * K, D);
    float *d_wts = gpu_upload(f, wts, sizeof(float) * (size_t)R * K);
    /* the experts that got rows, as groups of one launch per matrix (w1, w3, then w2) */
    const uint8_t **wp = di_xmalloc(sizeof(uint8_t *) * 6 * (size_t)E); /* [6][n_act] data, scale */
    int *off = di_xmalloc(sizeof(int) * ((size_t)E + 1));
    int n_act = 0, max_rows = 0;
    for (int e = 0; e < E; e++) {
        const int n = count[e + 1] - count[e];
        if (!n) continue;
        if (!fw->w1[e].data) di_die("MoE: layer %d routed to expert %d, which has no weights on this device", L->id, e);
        const di_weight *ws[3] = {&fw->w1[e], &fw->w3[e], &fw->w2[e]};
        for (int k = 0; k < 3; k++) {
            wp[(2 * k) * E + n_act] = ws[k]->data;
            wp[(2 * k + 1) * E + n_act] = ws[k]->scale;
        }
        off[n_act++] = count[e];
        if (n > max_rows) max_rows = n;
    }
    off[n_act] = R * K;
    if (n_act) {
        const uint8_t **d_wp = gpu_upload(f, wp, sizeof(uint8_t *) * 6 * (size_t)E);
        int *d_off = gpu_upload(f, off, sizeof(int) * ((size_t)n_act + 1));
        const di_weight *w1 = &fw->w1[0], *w2 = &fw->w2[0];
        for (int e = 0; e < E && !w1->data; e++) w1 = &fw->w1[e], w2 = &fw->w2[e]; /* a resident expert's shape */
        const int64_t inter = w1->rows, rows = (int64_t)R * K;
        float *g = gpu_alloc(f, sizeof(float) * (size_t)R * K * inter); /* [R*K, inter] */
        float *u = gpu_alloc(f, sizeof(float) * (size_t)R * K * inter);
        di_cuda_linear_quant_grouped_pair(f->cx, w1, d_wp, d_wp + E, d_wp + 2 * E, d_wp + 3 * E, d_off, NULL, n_act, rows,
                                          max_rows, xg, NULL, g, u);
        di_cuda_swiglu(g, u, (int64_t)R * K, inter, (float)m->cfg.swiglu_limit, d_wts, g, f->s);
        di_cuda_linear_quant_grouped(f->cx, w2, d_wp + 4 * E, d_wp + 5 * E, d_off, NULL, n_act, rows, max_rows, g, yg);
        gpu_free(f, g);
        gpu_free(f, u);
        gpu_free(f, (void *)d_wp);
        gpu_free(f, d_off);
    }
    free(wp);
    free(off);
    int32_t *d_order = gpu_upload(f, order, sizeof(int32_t) * (size_t)R * K);
    const float **d_slots = gpu_upload(f, slots, sizeof(float *) * (size_t)R * K);
    moe_tail(f, fw, x, d_slots, d_order, out, NULL);
    gpu_free(f, d_order);
    gpu_free(f, (void *)d_slots);
    gpu_free(f, d_wts);
    gpu_free(f, xg);
    gpu_free(f, yg);
    free(src);
    free(gdst);
    free(slots);
    free(wts);
    free(count);
    free(fill);
    free(expert);
    free(weight);
    free(order);
}

void gpu_engram(gpu_fwd *f, const di_layer *L, const di_layer *hL, uint16_t *X) {
    (void)hL;
    const di_model *m = f->m;
    const di_config *cf = &m->cfg;
    const di_batch *b = f->b;
    const di_engram_weights *ew = &L->engram;
    const int R = f->R, n = cf->hc_mult, hd = cf->engram_head_dim, ncols = m->engram.n_cols;
    const int64_t D = cf->hidden_size, E = (int64_t)ncols * hd, KV = (int64_t)(n + 1) * D;
    int64_t *rows = di_xmalloc(sizeof(int64_t) * (size_t)R * ncols); /* [R, ncols] table rows */
    for (int r = 0; r < R; r++) {
        int32_t last[DI_ENGRAM_MAX_NGRAM];
        const int s = f->row_seq[r];
        int nl = di_engram_row_history(m, b->seqs[s], b->tokens + f->seq_row0[s], f->seq_pos0[s], f->row_pos[r],
                                       last, cf->engram_max_ngram_size);
        di_engram_hash_position(&m->engram, L->engram_slot, m->engram_pad_id, last, nl, rows + (size_t)r * ncols);
        if (m->proxy.engram_rows) /* bench proxy: reduced tables */
            for (int c = 0; c < ncols; c++) rows[(size_t)r * ncols + c] %= ew->rows;
    }
    int64_t *d_rows = gpu_upload(f, rows, sizeof(int64_t) * (size_t)R * ncols);
    float *e = gpu_alloc(f, sizeof(float) * (size_t)R * E);   /* [R, cols*hd] bf16 */
    float *kv = gpu_alloc(f, sizeof(float) * (size_t)R * KV); /* [R, (n+1)*D] bf16 */
    di_cuda_engram_gather(ew->table, ew->table_scale, d_rows, R, ncols, hd, e, f->s);
    gpu_linear(f, &ew->wkv, e, R, kv, DI_LIN_QUANT);
    di_cuda_engram_gate(X, kv, ew->qk, R, n, D, (float)cf->rms_norm_eps, (float)(1.0 / sqrt((double)D)), f->s);
    gpu_free(f, d_rows);
    gpu_free(f, e);
    gpu_free(f, kv);
    free(rows);
}
