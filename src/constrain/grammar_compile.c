/* The grammar compiler (grammar.h): rules reachable from the root, byte classes, one Thompson NFA
 * holding every reachable rule, the left-recursion check, and the per-rule DFAs, built lazily.
 *
 * Byte classes partition the 256 byte values so that every byte set used anywhere is a union of
 * classes (DFA rows are n_classes wide, not 256). A DFA state is an epsilon-closed set of NFA
 * states of one rule (NFA states are numbered across all rules, so one set table interns them all
 * and a state's id is its set's index). Creating a state only scans its set's edges for its flags
 * (final, consumes bytes, calls rules); expanding it computes, per byte class, the closure of the
 * targets (the subset construction step) and, per callee, the state after the call returns. The
 * matcher expands states as its walks reach them, so a schema's compile cost no longer grows with
 * the states an output never visits (most of them, for large schemas).
 *
 * Left recursion (a rule that can call itself before consuming a byte) is refused at build time,
 * on the NFA: a rule is nullable when its accept state is reachable from its start through epsilon
 * edges and calls of nullable rules; it calls q "on the left" when an edge calling q leaves a state
 * reachable that way. A cycle of left calls is left recursion. */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/grammar_nfa.h"

typedef struct g_lazy {
    nfa a;
    dfa_ctx c;              /* closure scratch, byte classes of the builder's sets */
    int32_t *rule_accept;   /* [n_rules] accept NFA state of each reachable rule */
    g_set_table sets;       /* NFA sets; set index = DFA state */
    g_ivec *buckets;        /* [n_classes] NFA targets per class (scratch) */
    uint64_t *bucket_hash;  /* [n_classes] */
    int32_t *row;           /* [n_classes] (scratch) */
    int32_t *count, *first; /* [n_classes] NFA targets per class: how many, the first (scratch) */
    int n_sets;             /* length of c.set_classes */
    int32_t *single;        /* [a.n] DFA state of the closure of {NFA state}, -1 = not yet */
    int32_t *slot_of_hash;  /* [2 * n_classes rounded up to a power of 2] bucket dedupe (scratch) */
    int32_t *slot_stamp;    /* [same] slot in use when equal to the expansion's stamp */
    int n_hash_slots, stamp;
    g_ivec cur, pairs, seeds, set;
} g_lazy;

static int cmp_pair(const void *a, const void *b) {
    const int *x = a, *y = b;
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return x[1] < y[1] ? -1 : x[1] > y[1];
}

static void grow_states(di_grammar *gr) {
    int cap = gr->cap_states ? gr->cap_states * 2 : 256;
    gr->next = di_xrealloc(gr->next, (size_t)cap * (size_t)gr->n_classes * sizeof(int32_t));
    gr->state_rule = di_xrealloc(gr->state_rule, (size_t)cap * sizeof(int32_t));
    gr->call_first = di_xrealloc(gr->call_first, (size_t)cap * sizeof(int32_t));
    gr->call_count = di_xrealloc(gr->call_count, (size_t)cap * sizeof(int32_t));
    gr->accepting = di_xrealloc(gr->accepting, (size_t)cap);
    gr->has_bytes = di_xrealloc(gr->has_bytes, (size_t)cap);
    gr->has_calls = di_xrealloc(gr->has_calls, (size_t)cap);
    gr->light = di_xrealloc(gr->light, (size_t)cap);
    gr->expanded = di_xrealloc(gr->expanded, (size_t)cap);
    gr->cap_states = cap;
}

/* The state of the closed NFA set (sorted) of rule `rule`, created (flags only) if new. */
static int state_of_set(di_grammar *gr, g_lazy *lz, const int *set, int n, int rule) {
    bool added;
    int id = g_st_intern(&lz->sets, set, n, &added);
    if (!added) return id;
    assert(id == gr->n_states);
    if (id == gr->cap_states) grow_states(gr);
    bool acc = false, bytes = false, calls = false;
    for (int i = 0; i < n; i++) {
        if (set[i] == lz->rule_accept[rule]) acc = true;
        for (int e = lz->a.head[set[i]]; e >= 0; e = lz->a.e[e].next) {
            bytes |= lz->a.e[e].type == E_BYTES;
            calls |= lz->a.e[e].type == E_RULE;
        }
    }
    gr->state_rule[id] = rule;
    gr->accepting[id] = acc;
    gr->has_bytes[id] = bytes;
    gr->has_calls[id] = calls;
    gr->light[id] = bytes && !calls && !acc;
    gr->expanded[id] = 0;
    gr->call_first[id] = gr->call_count[id] = 0;
    gr->n_states++;
    return id;
}

static int state_of_closure(di_grammar *gr, g_lazy *lz, const int *seeds, int n, int rule) {
    /* one NFA state (most buckets: literals, embedded DFAs) always closes to the same state */
    if (n == 1 && lz->single[seeds[0]] >= 0) return lz->single[seeds[0]];
    g_eps_closure(&lz->c, seeds, n, &lz->cur);
    int id = state_of_set(gr, lz, lz->cur.v, lz->cur.n, rule);
    if (n == 1) lz->single[seeds[0]] = id;
    return id;
}

void g_expand_state(di_grammar *gr, int s) {
    g_lazy *lz = gr->lazy;
    if (gr->expanded[s]) return;
    const int nc = gr->n_classes, rule = gr->state_rule[s];
    /* copy the set: interning new states may move the pool */
    int off = lz->sets.off.v[s], len = lz->sets.off.v[s + 1] - off;
    lz->set.n = 0;
    for (int i = 0; i < len; i++) g_ivec_push(&lz->set, lz->sets.pool.v[off + i]);
    /* pass 1: per class, how many NFA targets and the first one (most classes have one) */
    for (int i = 0; i < nc; i++) lz->count[i] = 0;
    lz->pairs.n = 0;
    bool multi = false;
    for (int i = 0; i < len; i++)
        for (int e = lz->a.head[lz->set.v[i]]; e >= 0; e = lz->a.e[e].next) {
            const nfa_edge *ed = &lz->a.e[e];
            if (ed->type == E_BYTES) {
                const g_ivec *cl = &lz->c.set_classes[ed->label];
                for (int j = 0; j < cl->n; j++) {
                    int k = cl->v[j];
                    if (lz->count[k]++ == 0) lz->first[k] = ed->to;
                    else multi = true;
                }
            } else if (ed->type == E_RULE) {
                g_ivec_push(&lz->pairs, ed->label);
                g_ivec_push(&lz->pairs, ed->to);
            }
        }
    /* pass 2, only when needed: the target lists of classes with several */
    if (multi) {
        for (int i = 0; i < nc; i++) lz->buckets[i].n = 0;
        for (int i = 0; i < len; i++)
            for (int e = lz->a.head[lz->set.v[i]]; e >= 0; e = lz->a.e[e].next) {
                const nfa_edge *ed = &lz->a.e[e];
                if (ed->type != E_BYTES) continue;
                const g_ivec *cl = &lz->c.set_classes[ed->label];
                for (int j = 0; j < cl->n; j++)
                    if (lz->count[cl->v[j]] > 1) g_ivec_push(&lz->buckets[cl->v[j]], ed->to);
            }
    }
    /* classes with the same NFA targets (edges are visited in the same order) share the closure:
     * a single target through the per-NFA-state cache, several through an open-addressing table
     * over bucket hashes */
    const int hmask = lz->n_hash_slots - 1, stamp = ++lz->stamp;
    for (int i = 0; i < nc; i++) {
        int target = -1;
        const g_ivec *b = &lz->buckets[i];
        if (lz->count[i] == 1) {
            target = state_of_closure(gr, lz, &lz->first[i], 1, rule); /* cached per NFA state */
        } else if (lz->count[i] > 1) {
            uint64_t h = g_hash_ints(b->v, b->n);
            lz->bucket_hash[i] = h;
            int j = (int)(h & (uint64_t)hmask);
            for (; lz->slot_stamp[j] == stamp; j = (j + 1) & hmask) {
                int k = lz->slot_of_hash[j];
                if (lz->bucket_hash[k] == h && lz->buckets[k].n == b->n && !memcmp(lz->buckets[k].v, b->v, (size_t)b->n * sizeof(int))) {
                    target = lz->row[k];
                    break;
                }
            }
            if (target < 0) {
                target = state_of_closure(gr, lz, b->v, b->n, rule);
                lz->slot_of_hash[j] = i;
                lz->slot_stamp[j] = stamp;
            }
        }
        lz->row[i] = target;
    }
    memcpy(gr->next + (size_t)s * (size_t)nc, lz->row, (size_t)nc * sizeof(int32_t));
    /* rule calls grouped by callee */
    int np = lz->pairs.n / 2;
    if (np > 1) qsort(lz->pairs.v, (size_t)np, 2 * sizeof(int), cmp_pair);
    int first = gr->call_rule.n;
    for (int i = 0; i < np;) {
        int j = i;
        lz->seeds.n = 0;
        while (j < np && lz->pairs.v[2 * j] == lz->pairs.v[2 * i]) g_ivec_push(&lz->seeds, lz->pairs.v[2 * j + 1]), j++;
        int to = state_of_closure(gr, lz, lz->seeds.v, lz->seeds.n, rule);
        g_ivec_push(&gr->call_rule, lz->pairs.v[2 * i]);
        g_ivec_push(&gr->call_to, to);
        i = j;
    }
    gr->call_first[s] = first;
    gr->call_count[s] = gr->call_rule.n - first;
    gr->expanded[s] = 1;
}

/* Walks rule r's NFA from its start through epsilon edges and calls of nullable rules; returns
 * whether the accept state is reached, and appends every callee met to adj when adj != NULL. */
static bool left_walk(const g_lazy *lz, int r, int start, const uint8_t *nullable, int *seen, int stamp,
                      g_ivec *stack, g_ivec *adj) {
    const nfa *a = &lz->a;
    bool accept = false;
    stack->n = 0;
    g_ivec_push(stack, start);
    seen[start] = stamp;
    while (stack->n) {
        int s = stack->v[--stack->n];
        if (s == lz->rule_accept[r]) accept = true;
        for (int e = a->head[s]; e >= 0; e = a->e[e].next) {
            const nfa_edge *ed = &a->e[e];
            if (ed->type == E_BYTES) continue;
            if (ed->type == E_RULE) {
                if (adj) g_ivec_push(adj, ed->label);
                if (!nullable[ed->label]) continue;
            }
            if (seen[ed->to] != stamp) seen[ed->to] = stamp, g_ivec_push(stack, ed->to);
        }
    }
    return accept;
}

/* Nullable rules (to a fixed point) and the left-call graph on the NFA, then a cycle search. */
static di_status check_left_recursion(const di_grammar *gr, const g_lazy *lz, const int *nfa_start, di_err *err) {
    int R = gr->n_rules;
    uint8_t *nullable = di_xcalloc((size_t)(R ? R : 1), 1);
    int *seen = di_xcalloc((size_t)lz->a.n + 1, sizeof(int)); /* stamp per walk */
    int stamp = 0;
    g_ivec stack = {0};
    g_ivec *adj = di_xcalloc((size_t)(R ? R : 1), sizeof(g_ivec));
    for (bool changed = true; changed;) {
        changed = false;
        for (int r = 0; r < R; r++)
            if (nfa_start[r] >= 0 && !nullable[r] && left_walk(lz, r, nfa_start[r], nullable, seen, ++stamp, &stack, NULL))
                nullable[r] = 1, changed = true;
    }
    for (int r = 0; r < R; r++)
        if (nfa_start[r] >= 0) left_walk(lz, r, nfa_start[r], nullable, seen, ++stamp, &stack, &adj[r]);
    /* cycle detection: iterative DFS, colour 1 = on the path, 2 = done */
    di_status st = DI_OK;
    uint8_t *vis = di_xcalloc((size_t)R, 1);
    int *edge_pos = di_xcalloc((size_t)R, sizeof(int));
    for (int r0 = 0; r0 < R && !st; r0++) {
        if (vis[r0]) continue;
        stack.n = 0;
        g_ivec_push(&stack, r0);
        vis[r0] = 1;
        while (stack.n && !st) {
            int q = stack.v[stack.n - 1];
            if (edge_pos[q] < adj[q].n) {
                int p = adj[q].v[edge_pos[q]++];
                if (vis[p] == 1) {
                    st = di_errf(err, DI_EUNSUPPORTED, "unsupported: left recursion (rule '%s')", gr->rule_names[p]);
                } else if (!vis[p]) {
                    vis[p] = 1;
                    g_ivec_push(&stack, p);
                }
            } else {
                vis[q] = 2;
                stack.n--;
            }
        }
    }
    for (int r = 0; r < R; r++) g_ivec_free(&adj[r]);
    free(edge_pos);
    free(vis);
    free(adj);
    free(nullable);
    free(seen);
    g_ivec_free(&stack);
    return st;
}

/* Rules reachable from root (reach[r] = 1); an undefined one is an error. */
static di_status reachable_rules(const g_builder *g, int root, uint8_t *reach, di_err *err) {
    g_ivec stack = {0}, nodes = {0};
    reach[root] = 1;
    g_ivec_push(&stack, root);
    di_status st = DI_OK;
    while (stack.n && !st) {
        int r = stack.v[--stack.n];
        if (g->rule_body[r] < 0) {
            st = di_errf(err, DI_EINVAL, "undefined rule '%s'", g->rule_names[r]);
            break;
        }
        nodes.n = 0;
        g_ivec_push(&nodes, g->rule_body[r]);
        while (nodes.n) {
            const g_node *nd = &g->nodes[nodes.v[--nodes.n]];
            if (nd->kind == G_RULE && !reach[nd->a]) reach[nd->a] = 1, g_ivec_push(&stack, nd->a);
            if (nd->kind == G_SEQ || nd->kind == G_ALT)
                for (int i = 0; i < nd->b; i++) g_ivec_push(&nodes, g->kids.v[nd->a + i]);
            if (nd->kind == G_REPEAT) g_ivec_push(&nodes, nd->a);
        }
    }
    g_ivec_free(&stack);
    g_ivec_free(&nodes);
    return st;
}

di_status di_grammar_build(const g_builder *g, int root, di_grammar **out, di_err *err) {
    *out = NULL;
    uint8_t *reach = di_xcalloc((size_t)g->n_rules + 1, 1);
    di_status st = reachable_rules(g, root, reach, err);
    if (st) {
        free(reach);
        return st;
    }
    di_grammar *gr = di_xcalloc(1, sizeof *gr);
    g_lazy *lz = di_xcalloc(1, sizeof *lz);
    gr->lazy = lz;
    gr->n_rules = g->n_rules;
    gr->root_rule = root;
    gr->rule_names = di_xmalloc((size_t)(g->n_rules ? g->n_rules : 1) * sizeof(char *));
    gr->rule_start = di_xmalloc((size_t)(g->n_rules ? g->n_rules : 1) * sizeof(int));
    lz->rule_accept = di_xmalloc((size_t)(g->n_rules ? g->n_rules : 1) * sizeof(int32_t));
    int *nfa_start = di_xmalloc((size_t)(g->n_rules ? g->n_rules : 1) * sizeof(int));
    for (int r = 0; r < g->n_rules; r++) {
        gr->rule_names[r] = di_xstrdup(g->rule_names[r]);
        gr->rule_start[r] = nfa_start[r] = lz->rule_accept[r] = -1;
    }
    lz->c.g = g;
    g_compute_classes(&lz->c);
    lz->c.g = NULL;
    lz->n_sets = g->n_sets;
    memcpy(gr->byte_class, lz->c.byte_class, 256);
    gr->n_classes = lz->c.n_classes;
    for (int r = 0; r < g->n_rules && !st; r++) {
        if (!reach[r]) continue;
        g_nfa_build(g, &lz->a, g->rule_body[r], &nfa_start[r], &lz->rule_accept[r]);
        if (lz->a.overflow)
            st = di_errf(err, DI_EUNSUPPORTED, "unsupported: grammar too large (rule '%s' over %d NFA states)",
                         g->rule_names[r], DI_G_MAX_NFA_STATES);
    }
    free(reach);
    if (!st) {
        lz->c.a = &lz->a;
        lz->c.mark = di_xcalloc((size_t)(lz->a.n ? lz->a.n : 1), sizeof(int));
        lz->buckets = di_xcalloc((size_t)gr->n_classes, sizeof(g_ivec));
        lz->bucket_hash = di_xmalloc((size_t)gr->n_classes * sizeof(uint64_t));
        lz->row = di_xmalloc((size_t)gr->n_classes * sizeof(int32_t));
        lz->count = di_xmalloc((size_t)gr->n_classes * sizeof(int32_t));
        lz->first = di_xmalloc((size_t)gr->n_classes * sizeof(int32_t));
        lz->n_hash_slots = 16;
        while (lz->n_hash_slots < 2 * gr->n_classes) lz->n_hash_slots *= 2;
        lz->slot_of_hash = di_xmalloc((size_t)lz->n_hash_slots * sizeof(int32_t));
        lz->slot_stamp = di_xcalloc((size_t)lz->n_hash_slots, sizeof(int32_t));
        lz->single = di_xmalloc((size_t)(lz->a.n ? lz->a.n : 1) * sizeof(int32_t));
        for (int i = 0; i < lz->a.n; i++) lz->single[i] = -1;
        st = check_left_recursion(gr, lz, nfa_start, err);
    }
    for (int r = 0; r < g->n_rules && !st; r++)
        if (nfa_start[r] >= 0) gr->rule_start[r] = state_of_closure(gr, lz, &nfa_start[r], 1, r);
    free(nfa_start);
    if (st) {
        di_grammar_free(gr);
        return st;
    }
    *out = gr;
    return DI_OK;
}

void g_grammar_free_tables(di_grammar *gr) {
    g_lazy *lz = gr->lazy;
    if (lz) {
        free(lz->a.head);
        free(lz->a.e);
        free(lz->c.mark);
        g_ivec_free(&lz->c.stack);
        g_ivec_free(&lz->c.tmp);
        for (int i = 0; i < lz->n_sets; i++) g_ivec_free(&lz->c.set_classes[i]);
        free(lz->c.set_classes);
        free(lz->rule_accept);
        g_st_free(&lz->sets);
        if (lz->buckets)
            for (int i = 0; i < gr->n_classes; i++) g_ivec_free(&lz->buckets[i]);
        free(lz->buckets);
        free(lz->bucket_hash);
        free(lz->row);
        free(lz->count);
        free(lz->first);
        free(lz->slot_of_hash);
        free(lz->slot_stamp);
        free(lz->single);
        g_ivec_free(&lz->cur);
        g_ivec_free(&lz->pairs);
        g_ivec_free(&lz->seeds);
        g_ivec_free(&lz->set);
        free(lz);
    }
    free(gr->next);
    free(gr->state_rule);
    free(gr->accepting);
    free(gr->has_bytes);
    free(gr->has_calls);
    free(gr->light);
    free(gr->expanded);
    free(gr->call_first);
    free(gr->call_count);
    g_ivec_free(&gr->call_rule);
    g_ivec_free(&gr->call_to);
}
