/* Mixture of experts (model-spec §2.6): sqrt-softplus router in fp32, selection with the
 * correction bias, weights normalised on the unbiased scores and scaled by route_scale, clamped
 * SwiGLU experts (FP4 routed, FP8 shared), and a fixed accumulation order per row: routed experts
 * in ascending expert id into an fp32 buffer, then the shared expert, rounded once to bf16.
 *
 * Rows routed to the same expert are gathered and run as one GEMM; every row's arithmetic is
 * independent of which other rows share that GEMM, so results do not depend on the batch. */
#include <stdlib.h>
#include <string.h>

#include "forward/forward_internal.h"
#include "forward/host_steps.h"

typedef struct route {
    int32_t expert[DI_FWD_MAX_TOPK_EXPERTS]; /* selected experts, selection order */
    float weight[DI_FWD_MAX_TOPK_EXPERTS];   /* their routing weights */
} route;

void di_moe_route_row(const di_model *m, const di_ffn_weights *f, const float *logits, int32_t *expert,
                      float *weight) {
    di_cpu_moe_route(logits, f->gate_bias, f->n_experts, f->top_k, (float)m->cfg.routed_scaling_factor, expert,
                     weight);
}

static void route_row(const di_model *m, const di_ffn_weights *f, const float *x, route *out) {
    float logits[DI_FWD_MAX_EXPERTS];
    di_cpu_linear(&f->gate, x, 1, logits, DI_LIN_F32);
    di_moe_route_row(m, f, logits, out->expert, out->weight);
}

/* SwiGLU expert on n rows: y = w2(bf16(silu(min(g, L)) * clamp(u, -L, L) * wt)) */
static void expert_ffn(const di_model *m, const di_weight *w1, const di_weight *w2, const di_weight *w3,
                       const float *x, int n, const float *wt, float *y) {
    const int64_t inter = w1->rows;
    const float lim = (float)m->cfg.swiglu_limit;
    float *g = malloc(sizeof(float) * (size_t)n * inter); /* [n, inter] bf16 */
    float *u = malloc(sizeof(float) * (size_t)n * inter);
    di_cpu_linear(w1, x, n, g, DI_LIN_QUANT);
    di_cpu_linear(w3, x, n, u, DI_LIN_QUANT);
    for (int r = 0; r < n; r++) {
        for (int64_t i = 0; i < inter; i++) {
            float gv = fminf(g[r * inter + i], lim), uv = di_clampf(u[r * inter + i], -lim, lim);
            float h = gv / (1.0f + expf(-gv)) * uv;
            if (wt) h *= wt[r];
            g[r * inter + i] = di_bf16_round(h);
        }
    }
    di_cpu_linear(w2, g, n, y, DI_LIN_QUANT);
    free(g);
    free(u);
}

void di_fwd_moe(fwd_ctx *c, const di_layer *L, const float *x, float *out) {
    const di_model *m = c->m;
    const int R = c->R;
    const di_ffn_weights *f = &L->ffn;
    const int64_t D = m->cfg.hidden_size;
    const int E = f->n_experts, K = f->top_k;
    route *routes = malloc(sizeof(route) * (size_t)R);
    for (int r = 0; r < R; r++) route_row(m, f, x + r * D, &routes[r]);
    if (c->b->debug_fn) {
        float *dbg = malloc(sizeof(float) * (size_t)R * K * 2); /* [R, K] experts, then weights */
        for (int r = 0; r < R; r++)
            for (int j = 0; j < K; j++) {
                dbg[r * K + j] = (float)routes[r].expert[j];
                dbg[R * K + r * K + j] = routes[r].weight[j];
            }
        di_fwd_debug(c, "route_experts", L->id, dbg, (int64_t)R * K);
        di_fwd_debug(c, "route_weights", L->id, dbg + R * K, (int64_t)R * K);
        free(dbg);
    }
    /* expert outputs per (row, slot) [R, K, D] bf16 */
    float *eo = malloc(sizeof(float) * (size_t)R * K * D);
    float *xg = malloc(sizeof(float) * (size_t)R * D), *yg = malloc(sizeof(float) * (size_t)R * D);
    int *rows = malloc(sizeof(int) * (size_t)R), *slots = malloc(sizeof(int) * (size_t)R);
    float *wts = malloc(sizeof(float) * (size_t)R);
    for (int e = 0; e < E; e++) {
        int n = 0;
        for (int r = 0; r < R; r++)
            for (int j = 0; j < K; j++)
                if (routes[r].expert[j] == e) {
                    rows[n] = r;
                    slots[n] = j;
                    wts[n] = routes[r].weight[j];
                    memcpy(xg + n * D, x + rows[n] * D, sizeof(float) * (size_t)D);
                    n++;
                }
        if (!n) continue;
        expert_ffn(m, &f->w1[e], &f->w2[e], &f->w3[e], xg, n, wts, yg);
        for (int i = 0; i < n; i++)
            memcpy(eo + ((size_t)rows[i] * K + slots[i]) * D, yg + i * D, sizeof(float) * (size_t)D);
    }
    expert_ffn(m, &f->sh_w1, &f->sh_w2, &f->sh_w3, x, R, NULL, yg);
    for (int r = 0; r < R; r++) {
        int order[DI_FWD_MAX_TOPK_EXPERTS];
        for (int j = 0; j < K; j++) order[j] = j;
        for (int a = 1; a < K; a++) /* ascending expert id */
            for (int b = a; b > 0 && routes[r].expert[order[b]] < routes[r].expert[order[b - 1]]; b--) {
                int t = order[b];
                order[b] = order[b - 1];
                order[b - 1] = t;
            }
        for (int64_t k = 0; k < D; k++) {
            float acc = 0.0f;
            for (int j = 0; j < K; j++) acc += eo[((size_t)r * K + order[j]) * D + k];
            acc += yg[r * D + k];
            out[r * D + k] = di_bf16_round(acc);
        }
    }
    free(routes);
    free(eo);
    free(xg);
    free(yg);
    free(rows);
    free(slots);
    free(wts);
}
