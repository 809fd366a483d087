/* CUDA graphs (issue 5, item 2): forward calls run as captured graphs give logits bit-identical to
 * the same calls launched kernel by kernel, and kept executable graphs are reused (updated in
 * place) from one decode step to the next.
 *
 * Two device copies of the tiny fixture -- one with graphs (the default), one with
 * DI_BACKEND_EAGER -- run the same schedule: one call prefilling three prompts of different
 * lengths, then decode steps of all three sequences, of a subset, and one where a sequence brings a
 * chunk of several rows, each fed the graph model's greedy token. Every call's logits are compared
 * bit for bit, the sequences' token counts must agree, and the graph model's statistics must show
 * every call captured, over the last steady decode steps every graph piece run by updating a kept
 * graph, and no memory nodes in any graph (the first call's temporaries overflow the empty arena
 * into spill chunks). With DEEPINFER_GPU_PDL=1 the graph model's kernel edges are programmatic
 * (gpu_graph.c): the same bits are asked of it, and at least one edge must have been made so.
 *
 * Needs the CUDA backend and a GPU (tools/cuda/device_model_run.sh runs it); elsewhere it prints
 * SKIPPED. */
#include <stdint.h>
#include <string.h>

#include "forward/device.h"
#include "forward/forward.h"
#include "test_harness.h"
#include "fixture_util.h"

enum { N_SEQ = 3, N_DECODE = 24, STEADY = 6 };

typedef struct side {
    di_model *m;
    di_seq_state *seq[N_SEQ];
} side;

/* One call over the sequences with rows[i] > 0 (tokens in order); logits of each one's last row. */
static di_status run(side *sd, const int *rows, const int32_t *tokens, float *logits, int *n_out, di_err *err) {
    di_seq_state *seqs[N_SEQ];
    int nr[N_SEQ], n = 0, R = 0;
    for (int i = 0; i < N_SEQ; i++)
        if (rows[i] > 0) {
            seqs[n] = sd->seq[i];
            nr[n++] = rows[i];
            R += rows[i];
        }
    uint8_t want[64] = {0};
    for (int i = 0, r = 0; i < n; r += nr[i], i++) want[r + nr[i] - 1] = 1;
    di_batch b = {.n_rows = R, .tokens = tokens, .n_seqs = n, .seqs = seqs, .seq_n_rows = nr, .logits = logits,
                  .want_logits = want};
    *n_out = n;
    return di_forward(sd->m, &b, err);
}

int main(void) {
    di_err err = {0};
    side g = {0}, e = {0};
    if (di_model_load(&g.m, DI_TINY_FIXTURE_DIR, &err) || di_model_load(&e.m, DI_TINY_FIXTURE_DIR, &err)) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return 1;
    }
    const bool pdl = test_settings()->gpu_pdl;
    di_status sg = di_model_select_backend(g.m, "cuda", pdl ? DI_BACKEND_PDL : 0, &err);
    if (sg == DI_EUNSUPPORTED) {
        printf("SKIPPED: %s (CUDA graphs need the CUDA backend and a GPU)\n", err.msg);
        di_model_free(g.m);
        di_model_free(e.m);
        return 0;
    }
    if (sg || di_model_select_backend(e.m, "cuda", DI_BACKEND_EAGER, &err)) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return 1;
    }
    const di_device_backend *be = g.m->dev_backend;
    CHECK(be->graph_stats != NULL);
    const int64_t V = g.m->cfg.vocab_size;
    for (int i = 0; i < N_SEQ; i++) {
        g.seq[i] = di_seq_state_new(g.m);
        e.seq[i] = di_seq_state_new(e.m);
    }
    float *lg = malloc(sizeof(float) * (size_t)N_SEQ * V), *le = malloc(sizeof(float) * (size_t)N_SEQ * V);
    int32_t tokens[64];
    int32_t next[N_SEQ];
    int calls = 0, differing = 0;
    di_graph_stats steady0 = {0};
    for (int call = 0; call <= N_DECODE; call++) {
        if (call == N_DECODE - STEADY + 1) be->graph_stats(g.m, &steady0);
        int rows[N_SEQ] = {1, 1, 1};
        if (call == 0) { /* the prompts */
            rows[0] = 11, rows[1] = 5, rows[2] = 17;
        } else if (call == 6 || call == 7) { /* a subset */
            rows[1] = 0;
        } else if (call == 9) { /* a chunk of 3 rows beside two decode tokens */
            rows[1] = 3;
        }
        int R = 0;
        for (int i = 0; i < N_SEQ; i++)
            for (int j = 0; j < rows[i]; j++, R++)
                tokens[R] = call == 0 ? (j ? 3 + (int32_t)((i * 131 + j * 17) % 900) : 0)
                                      : (j ? 5 + (int32_t)((call * 7 + j) % 500) : next[i]);
        int ng = 0, ne = 0;
        CHECKF(run(&g, rows, tokens, lg, &ng, &err) == DI_OK, "graph call %d: %s", call, err.msg);
        CHECKF(run(&e, rows, tokens, le, &ne, &err) == DI_OK, "eager call %d: %s", call, err.msg);
        calls++;
        if (memcmp(lg, le, sizeof(float) * (size_t)ng * V) != 0) {
            int64_t nd = 0;
            for (int64_t v = 0; v < (int64_t)ng * V; v++) nd += memcmp(&lg[v], &le[v], 4) != 0;
            fprintf(stderr, "call %d: %lld of %lld logits differ between graph and eager\n", call, (long long)nd,
                    (long long)ng * V);
            differing++;
        }
        for (int i = 0, o = 0; i < N_SEQ; i++)
            if (rows[i] > 0) next[i] = argmax_f(lg + (size_t)o++ * V, V);
    }
    CHECKF(differing == 0, "%d of %d calls differ between graph and eager launches", differing, calls);
    for (int i = 0; i < N_SEQ; i++)
        CHECKF(g.seq[i]->n_tokens == e.seq[i]->n_tokens, "sequence %d: %lld tokens vs %lld", i,
               (long long)g.seq[i]->n_tokens, (long long)e.seq[i]->n_tokens);
    di_graph_stats gs, es;
    be->graph_stats(g.m, &gs);
    be->graph_stats(e.m, &es);
    printf("graphs: %lld calls captured; graph pieces: %lld updated in place, %lld instantiated, %lld updates refused "
           "(capture %.2f ms, update %.2f ms, instantiate %.2f ms per call); %lld spill chunks, %lld memory nodes; "
           "eager model: %lld captured; %lld programmatic edges\n",
           (long long)gs.captured, (long long)gs.updated, (long long)gs.instantiated, (long long)gs.rejected,
           gs.capture_s * 1e3 / calls, gs.update_s * 1e3 / calls, gs.instantiate_s * 1e3 / calls,
           (long long)gs.spill_chunks, (long long)gs.memory_nodes, (long long)es.captured,
           (long long)gs.programmatic_edges);
    CHECKF(pdl ? gs.programmatic_edges > 0 : gs.programmatic_edges == 0, "%lld programmatic edges with DEEPINFER_GPU_PDL=%d",
           (long long)gs.programmatic_edges, pdl);
    CHECKF(gs.captured == calls, "%lld of %d calls captured", (long long)gs.captured, calls);
    /* every call runs as one or more pieces; once the sequences' shapes settle, decode steps reuse
     * the kept graphs (new topologies -- the first decode, compressor parities, the subset, the
     * chunk, growing selection lists -- and arena growth instantiate) */
    const int64_t pieces = gs.updated + gs.instantiated;
    CHECKF(pieces >= gs.captured, "%lld pieces for %lld calls", (long long)pieces, (long long)gs.captured);
    /* the last STEADY calls are plain decode steps of all three sequences: every piece of them is
     * an update of a kept graph */
    const int64_t steady_pieces = pieces - (steady0.updated + steady0.instantiated);
    CHECKF(gs.updated - steady0.updated == steady_pieces, "steady decode: %lld of %lld graph pieces reused a kept graph",
           (long long)(gs.updated - steady0.updated), (long long)steady_pieces);
    /* kept graphs are keyed by topology (node types, kernels, copy directions): no update is tried
     * that the driver refuses (each would be an API error under compute-sanitizer) */
    CHECKF(gs.rejected == 0, "%lld graph updates refused", (long long)gs.rejected);
    /* the first call at a size overflows the arena while capturing: its temporaries come from
     * spill chunks, never from the stream-ordered pool (no memory nodes in any graph) */
    CHECKF(gs.spill_chunks > 0, "no call spilled past the arena (the first one should: the arena starts empty)");
    CHECKF(gs.memory_nodes == 0, "%lld memory nodes in captured graphs", (long long)gs.memory_nodes);
    CHECKF(es.captured == 0, "the eager model captured %lld calls", (long long)es.captured);
    printf("%d calls, graph and eager logits %s\n", calls, differing ? "DIFFER" : "bit-identical");
    for (int i = 0; i < N_SEQ; i++) {
        di_seq_state_free(g.seq[i]);
        di_seq_state_free(e.seq[i]);
    }
    free(lg);
    free(le);
    di_model_free(g.m);
    di_model_free(e.m);
    return TEST_SUMMARY();
}
