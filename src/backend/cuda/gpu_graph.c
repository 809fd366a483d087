/* Forward calls as CUDA graphs (issue 5, item 2).
 *
 * A decode step launches ~2,400 kernels at B = 1, most of them a few microseconds long; launched
 * one by one, the device waits for the host between them. A call of up to GPU_GRAPH_MAX_ROWS rows
 * therefore runs with its stream in capture mode: the host code of the call runs exactly as in
 * eager mode (it plans the lists, fills the pinned staging, advances the sequences' host state),
 * but its launches and copies are recorded and launched as graphs, whose kernels the device runs
 * back to back. The call is cut into pieces (gpu_graph_cut): the call's set-up, the embedding and
 * layer 0, then GPU_GRAPH_PIECE_LAYERS layers each; a piece is launched as soon as it is captured,
 * so the host captures the next piece while the device runs this one, and the device waits only
 * for the first piece's capture (kept short: one layer). Pieces of 2 layers rather than 4 (session
 * 51, H100, ms a step over 3-5 rounds on one machine): B = 1 9.76-9.99 against 10.13-10.98, B = 8
 * 23.26-23.49 against 23.61-23.98, B = 64 35.3-35.7 against 35.9-36.5, B = 256 unchanged; the
 * host's update time fell with the pieces' size faster than linearly (B = 64: 6.3-6.4 -> 3.3-5.0 ms
 * a step), and the device's span with it although it waited under 0.2 ms for pieces either way.
 * Pieces of 1 and 3 layers fell between (B = 1 9.99-10.14 and 10.09-10.92), one piece of all 40
 * took 16-20 ms.
 *
 * Executable graphs are kept per piece and topology (GPU_GRAPH_SLOTS of them, keyed by piece
 * index, node count and node types: they change with which stages ran, e.g. whether a compressor
 * emitted entries) and updated in place with the new call's parameters (cudaGraphExecUpdate: kernel
 * arguments, grids, copy addresses), which costs far less than instantiating. Because the graphs
 * are rebuilt from the host code each call, what runs is always what eager mode would launch:
 * results are bit-identical.
 *
 * A captured call is reusable only if it needed no spill chunk and no extra pinned memory: while
 * capturing, temporaries of every size come from the arena and copies go through pinned staging;
 * a call that overflowed either (the first at a new size; both grow for the next call) took plain
 * allocations freed after it (never graph memory nodes: gpu_spill in gpu_internal.h) and is
 * instantiated, launched once and dropped. A copy node cannot be updated to memory of
 * another allocation once its own is freed, so growing staging or the arena drops every kept
 * graph, and no copy node touches sequence state (which comes and goes): the driver refuses no
 * update (test_device_graphs checks it; each refusal would be an API error under
 * compute-sanitizer).
 *
 * DEEPINFER_GPU_PDL (m->device_pdl): each captured piece's edges from a kernel to one of this
 * backend's kernels become programmatic (port cudaGraphKernelNodePortProgrammatic) before it is
 * instantiated or used for an update: the dependent may then be launched as its predecessor's
 * blocks exit (none of ours triggers earlier), before the grid has completed and its memory been
 * flushed; each of ours first waits for that in griddepcontrol.wait (DI_PDL_BEGIN, cuda_common.cuh),
 * before any load or store. So the bits are those of plain edges; what overlaps is the dependent's
 * launch with its predecessor's end (session 46, H100: B = 1 10.84 -> 10.58 ms a step, B = 64
 * -0.9%, B = 256 -0.6%). Edges into other kernels (cuBLAS's, which wait for nothing) and into copies stay
 * plain, and so do edges out of cuBLAS's kernels (launched through the driver API, they have no
 * runtime function for graph_scan to check). tools/cuda/probe_pdl.cu measures the forms on a chain
 * shaped like a B = 1 layer.
 *
 * Not captured (eager): exact mode and debug runs (they download mid-call), forced or exported
 * indexer selections, the stage profile (it synchronises at stage boundaries), calls above
 * GPU_GRAPH_MAX_ROWS rows (prefill chunks: launch overhead is small there), DEEPINFER_ENFORCE_EAGER,
 * and any call whose capture cannot begin (an emulator without graphs). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/gpu_internal.h"
#include "base/clock.h"

bool gpu_graph_begin(gpu_fwd *f) {
    const di_batch *b = f->b;
    if (!f->m->device_graphs || f->cx->exact || b->debug_fn || b->forced_topk || b->topk_out || gpu_profiling() ||
        f->R > GPU_GRAPH_MAX_ROWS)
        return false;
    /* relaxed: growing the GEMM scratch or a pinned piece may allocate while capturing */
    if (cudaStreamBeginCapture(f->s, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    f->capturing = f->cx->capturing = f->cx_side->capturing = true;
    f->graph_reusable = true;
    f->graph_piece = 0;
    f->capture_t0 = di_seconds_now();
    return true;
}

/* Is func (a kernel node's function) one of this backend's kernels -- in the module that holds this
 * code, whose kernels all begin with DI_PDL_BEGIN? dladdr walks symbol tables, so answers are
 * cached by address (a few dozen distinct kernels; engines on several threads share the cache).
 * Kernels launched through the driver API (libraries) are not found in this module. */
static bool own_kernel(const void *func) {
    enum { CACHE = 512 };
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static const void *seen[CACHE];
    static bool verdict[CACHE];
    static void *own_base;
    if (!func) return false;
    pthread_mutex_lock(&lock);
    size_t h = ((uintptr_t)func >> 4) % CACHE;
    for (int probe = 0; probe < CACHE && seen[h] && seen[h] != func; probe++) h = (h + 1) % CACHE;
    if (seen[h] != func) {
        Dl_info me, it;
        if (!own_base && dladdr((const void *)&own_kernel, &me)) own_base = me.dli_fbase;
        const bool ours = own_base && dladdr(func, &it) && it.dli_fbase == own_base;
        if (seen[h]) { /* a full table: answer without caching */
            pthread_mutex_unlock(&lock);
            return ours;
        }
        seen[h] = func;
        verdict[h] = ours;
    }
    const bool ours = verdict[h];
    pthread_mutex_unlock(&lock);
    return ours;
}

/* a node of the piece being scanned, in graph_scan's table */
typedef struct {
    cudaGraphNode_t node;
    const void *func; /* a kernel node's function; NULL for other nodes */
} scan_node;

/* the slot of node in the open-addressed table `tab` (cap a power of two, >= 2x the nodes) */
static size_t node_slot(const scan_node *tab, size_t cap, cudaGraphNode_t node) {
    size_t h = ((uintptr_t)node >> 4) * 0x9e3779b97f4a7c15ull & (cap - 1);
    while (tab[h].node && tab[h].node != node) h = (h + 1) & (cap - 1);
    return h;
}

/* One pass over a captured piece: the host's work between a piece's capture and its launch, which
 * at B = 1 the device can wait for (session 50, H100: a graph step's wall time follows the host's
 * capture + update ms, 10.2 ms at ~2.8 of them, 11.2-11.5 at ~4.5; direct launches 10.4-10.6).
 * It was a signature pass plus one or two runtime calls an edge and a removal and addition each
 * (76-116 us a piece); node types and functions looked up from one table and the edges changed in
 * one call each: 40-60 us (the same pieces timed both ways, 44 pieces, two runs). Returns the
 * piece's topology key: a hash of its nodes in order -- type, kernel function, copy direction (a
 * single-stream capture is a chain) -- and *n_nodes; an update is tried only against kept graphs
 * of the same key (a copy that changes direction, or a kernel that changes function, may be
 * refused -- cudaErrorGraphExecUpdateFailure -- and a refused update is an API error to tools like
 * compute-sanitizer). With `programmatic` it also makes the piece's kernel -> own-kernel edges
 * programmatic (gpu_graph.c's header), all in one removal and one addition, and returns how many
 * in *changed; a driver that refuses them gets the plain edges back and *refused set (the caller
 * stops asking). */
static uint64_t graph_scan(cudaGraph_t graph, bool programmatic, size_t *n_nodes, int64_t *memory_nodes,
                           int64_t *changed, bool *refused) {
    GPU_CK(cudaGraphGetNodes(graph, NULL, n_nodes));
    size_t n = *n_nodes;
    cudaGraphNode_t *nodes = di_xmalloc(sizeof(cudaGraphNode_t) * (n ? n : 1));
    GPU_CK(cudaGraphGetNodes(graph, nodes, &n));
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    scan_node *tab = di_xcalloc(cap, sizeof(scan_node)); /* node -> its type and function */
    uint64_t h = 0xcbf29ce484222325ull;                  /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        enum cudaGraphNodeType t;
        GPU_CK(cudaGraphNodeGetType(nodes[i], &t));
        uint64_t v = (uint64_t)t;
        scan_node *e = &tab[node_slot(tab, cap, nodes[i])];
        e->node = nodes[i];
        if (t == cudaGraphNodeTypeKernel) {
            struct cudaKernelNodeParams kp;
            if (cudaGraphKernelNodeGetParams(nodes[i], &kp) == cudaSuccess) {
                v ^= (uint64_t)(uintptr_t)kp.func << 8;
                e->func = kp.func;
            } else { /* a library's kernel launched through the driver API (cuBLAS's): the runtime has no
                      * function for it (cudaErrorInvalidDeviceFunction) -- foreign, its edges stay plain, its
                      * key its type (a kept graph refusing the update of another such kernel is instantiated anew) */
                cudaGetLastError();
                v ^= 0xb1a5ull << 8;
            }
        } else if (t == cudaGraphNodeTypeMemcpy) {
            struct cudaMemcpy3DParms cp;
            GPU_CK(cudaGraphMemcpyNodeGetParams(nodes[i], &cp));
            v ^= (uint64_t)cp.kind << 8;
        } else if (t == cudaGraphNodeTypeMemAlloc || t == cudaGraphNodeTypeMemFree) {
            ++*memory_nodes;
        }
        h = (h ^ v) * 0x100000001b3ull;
    }
    free(nodes);
    size_t ne = 0;
    if (programmatic) GPU_CK(cudaGraphGetEdges(graph, NULL, NULL, NULL, &ne));
    if (ne) {
        cudaGraphNode_t *from = di_xmalloc(sizeof(cudaGraphNode_t) * ne), *to = di_xmalloc(sizeof(cudaGraphNode_t) * ne);
        cudaGraphEdgeData *data = di_xcalloc(ne, sizeof(cudaGraphEdgeData));
        GPU_CK(cudaGraphGetEdges(graph, from, to, data, &ne));
        size_t k = 0; /* the edges to change, moved to the front */
        for (size_t i = 0; i < ne; i++) {
            const scan_node *a = &tab[node_slot(tab, cap, from[i])], *b = &tab[node_slot(tab, cap, to[i])];
            if (!a->func || !b->func || data[i].type != cudaGraphDependencyTypeDefault || !own_kernel(b->func))
                continue;
            from[k] = from[i], to[k] = to[i], data[k] = data[i];
            k++;
        }
        if (k) {
            cudaGraphEdgeData *pe = di_xcalloc(k, sizeof(cudaGraphEdgeData));
            for (size_t i = 0; i < k; i++) {
                pe[i].from_port = cudaGraphKernelNodePortProgrammatic;
                pe[i].type = cudaGraphDependencyTypeProgrammatic;
            }
            GPU_CK(cudaGraphRemoveDependencies(graph, from, to, data, k));
            if (cudaGraphAddDependencies(graph, from, to, pe, k) != cudaSuccess) {
                cudaGetLastError();
                GPU_CK(cudaGraphAddDependencies(graph, from, to, data, k));
                *refused = true;
            } else {
                *changed += (int64_t)k;
            }
            free(pe);
        }
        free(from);
        free(to);
        free(data);
    }
    free(tab);
    return h;
}

/* a kept executable graph of this (piece, topology) updated to `graph`, or NULL */
static cudaGraphExec_t update_kept(gpu_graphs *gs, cudaGraph_t graph, int piece, size_t n_nodes, uint64_t sig) {
    for (int i = 0; i < GPU_GRAPH_SLOTS; i++) {
        if (!gs->slot[i].exec || gs->slot[i].piece != piece || gs->slot[i].n_nodes != n_nodes ||
            gs->slot[i].sig != sig)
            continue;
        cudaGraphExecUpdateResultInfo info;
        if (cudaGraphExecUpdate(gs->slot[i].exec, graph, &info) == cudaSuccess) {
            gs->slot[i].last_use = ++gs->tick;
            return gs->slot[i].exec;
        }
        cudaGetLastError(); /* refused despite the same topology key: try another kept variant */
        gs->stats.rejected++;
    }
    return NULL;
}

/* keeps exec, replacing the least recently used slot */
static void keep(gpu_graphs *gs, cudaGraphExec_t exec, int piece, size_t n_nodes, uint64_t sig) {
    int victim = 0;
    for (int i = 0; i < GPU_GRAPH_SLOTS; i++) {
        if (!gs->slot[i].exec) {
            victim = i;
            break;
        }
        if (gs->slot[i].last_use < gs->slot[victim].last_use) victim = i;
    }
    if (gs->slot[victim].exec) GPU_CK(cudaGraphExecDestroy(gs->slot[victim].exec));
    gs->slot[victim].exec = exec;
    gs->slot[victim].piece = piece;
    gs->slot[victim].n_nodes = n_nodes;
    gs->slot[victim].sig = sig;
    gs->slot[victim].last_use = ++gs->tick;
}

void gpu_graph_launch(gpu_fwd *f, cudaEvent_t start) {
    gpu_graphs *gs = &((gpu_model *)f->g)->graphs;
    cudaGraph_t graph = NULL;
    const cudaError_t e = cudaStreamEndCapture(f->s, &graph);
    f->capturing = f->cx->capturing = f->cx_side->capturing = false;
    if (e != cudaSuccess)
        di_die("CUDA graph capture of a forward call failed: %s (DEEPINFER_ENFORCE_EAGER=1 runs without graphs)",
               cudaGetErrorString(e));
    const double t1 = di_seconds_now();
    if (f->graph_piece == 0) gs->stats.captured++;
    gs->stats.capture_s += t1 - f->capture_t0;
    const bool pdl = f->m->device_pdl && !gs->pdl_refused;
    size_t n_nodes = 0;
    const uint64_t sig =
        graph_scan(graph, pdl, &n_nodes, &gs->stats.memory_nodes, &gs->stats.programmatic_edges, &gs->pdl_refused);
    if (pdl && gs->pdl_refused)
        fprintf(stderr, "deepinfer: the CUDA driver refused a programmatic graph edge; plain edges from here on "
                        "(DEEPINFER_GPU_PDL=0 asks for them)\n");
    cudaGraphExec_t exec = f->graph_reusable ? update_kept(gs, graph, f->graph_piece, n_nodes, sig) : NULL;
    const double t2 = di_seconds_now();
    if (exec) {
        gs->stats.updated++;
        gs->stats.update_s += t2 - t1;
    } else {
        /* the kernel nodes keep the priority of the stream they were captured from (gpu_backend.c attach) */
        GPU_CK(cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagUseNodePriority));
        gs->stats.instantiated++;
        gs->stats.instantiate_s += di_seconds_now() - t2;
    }
    gpu_model *g = (gpu_model *)f->g;
    const int k = f->graph_piece;
    const bool timed = g->piece_timing && k < GPU_PIECE_EVENTS && f->pieces_timed == k; /* contiguous from 0 */
    if (k == 0) GPU_CK(cudaEventRecord(start, f->s));
    else if (timed) GPU_CK(cudaEventRecord(g->ev_piece_in[k], f->s));
    GPU_CK(cudaGraphLaunch(exec, f->s));
    if (timed) {
        GPU_CK(cudaEventRecord(g->ev_piece_out[k], f->s));
        f->pieces_timed = k + 1;
    }
    if (f->graph_reusable) {
        bool kept = false;
        for (int i = 0; i < GPU_GRAPH_SLOTS; i++) kept |= gs->slot[i].exec == exec;
        if (!kept) keep(gs, exec, f->graph_piece, n_nodes, sig);
    } else {
        GPU_CK(cudaGraphExecDestroy(exec)); /* freed once the launch completes */
    }
    GPU_CK(cudaGraphDestroy(graph));
}

void gpu_graph_cut(gpu_fwd *f, cudaEvent_t start) {
    if (!f->capturing) return;
    gpu_graph_launch(f, start);
    f->graph_piece++;
    if (cudaStreamBeginCapture(f->s, cudaStreamCaptureModeRelaxed) != cudaSuccess) {
        cudaGetLastError(); /* the rest of the call runs eagerly */
        return;
    }
    f->capturing = f->cx->capturing = f->cx_side->capturing = true;
    f->graph_reusable = true;
    f->capture_t0 = di_seconds_now();
}

void gpu_graphs_drop(gpu_model *g) {
    gpu_graphs *gs = &g->graphs;
    for (int i = 0; i < GPU_GRAPH_SLOTS; i++)
        if (gs->slot[i].exec) {
            GPU_CK(cudaGraphExecDestroy(gs->slot[i].exec));
            gs->slot[i].exec = NULL;
        }
}

void gpu_graphs_free(gpu_model *g) {
    gpu_graphs *gs = &g->graphs;
    gpu_graphs_drop(g);
    for (int i = 0; i < gs->n_extra; i++) cudaFreeHost(gs->extra_pinned[i]);
    free(gs->extra_pinned);
    for (int i = 0; i < gs->spill.n; i++) cudaFree(gs->spill.chunk[i].base);
    free(gs->spill.chunk);
    memset(gs, 0, sizeof *gs);
}

void gpu_graph_stats(const di_model *m, di_graph_stats *out) { *out = ((const gpu_model *)m->dev)->graphs.stats; }
