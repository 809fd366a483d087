/* The token-level matcher: runs a compiled grammar (per-rule DFAs with rule calls, grammar.h) as a
 * pushdown automaton over a *set* of stacks, and computes token masks with a vocabulary trie.
 *
 * Stacks are persistent and hash-consed: a node is (DFA state, parent node), so a whole stack is one
 * node id and equal stacks are equal ids. A matcher position is a sorted set of node ids, itself
 * interned: the set id names the automaton state completely. Because DFA states (not byte offsets)
 * are stored, positions repeat a lot (every character inside a JSON string leads back to the same
 * set), so three caches keyed by set id make the matcher fast:
 *   - the closure: stacks whose top can consume a byte (after pushing callees and popping finished
 *     rules) and whether the text is complete (the root rule can finish);
 *   - transitions: set x byte class -> set (or dead);
 *   - token masks: set -> bit mask over the vocabulary, computed by a depth-first walk of the token
 *     trie that follows transitions and prunes dead subtrees.
 * A new set's mask is the union over its stacks (mask_compute): a stack whose top state is light
 * (no stack needed to walk through it) takes the state's cached light mask (light_get), which
 * starts from the vocabulary's plain-string slice for the state's plain capacity (plain_capacity)
 * and skips the trie subtrees that slice covers, then continues below the entry's bounds with its
 * own parent. The grammar's DFA rows are built lazily (ready), so arrays indexed by DFA state grow
 * (rt_fit) and no pointer into them is kept across a call that may expand a state.
 * Rollback is free: a matcher keeps the set id after each accepted token.
 *
 * An ambiguous grammar can double its stacks with every byte (item ::= "~" item "}" | root with root
 * ::= "~" item "}": after n "~" each of 2^n parse paths is a stack of its own -- the constraint
 * fuzzer's case that took 3 GB in 64 bytes): a step that would leave more than MATCHER_MAX_STACKS
 * stacks is dead instead, so the text cannot go on that way (an engine request whose mask empties
 * fails with the sampler's no-token error) and memory stays bounded. Sets of real grammars hold a
 * few dozen stacks at most. */
#include "constrain/token_trie.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- runtime caches of a grammar ---- */

#define MATCHER_MAX_STACKS 4096 /* stacks a set may hold (the ambiguity cap above) */

typedef struct set_info {
    int32_t ready_off, ready_n; /* closure: nodes whose top state consumes bytes */
    int8_t closed, accept;
    int32_t *trans;             /* [n_classes] -2 unknown, -1 dead, else set id */
    uint32_t *mask;             /* [(vocab + 31) / 32] or NULL */
    const di_token_trie *mask_vocab;
} set_info;

typedef struct light_entry {
    uint32_t *mask;            /* tokens the top rule consumes alone from this state */
    g_ivec bounds;             /* pairs (trie node, DFA state) where the stack below is needed */
    const di_token_trie *vocab;
} light_entry;

typedef struct g_runtime {
    /* nodes: (state, parent) */
    g_ivec node_state, node_parent;
    int64_t *slot_key;  /* open addressing, key = state << 32 | (parent + 1) */
    int32_t *slot_val;
    int64_t n_slots;
    g_set_table sets;
    set_info *info;
    int info_cap;
    g_ivec ready_pool;
    int *stamp;
    int stamp_cap, cur_stamp;
    g_ivec stack, tmp;
    int64_t n_masks;
    /* per DFA state, grown with the grammar's states by rt_fit (fit_cap entries) */
    int fit_cap;
    light_entry *light;               /* light_get cache */
    int32_t *canon_idx, *canon_stamp; /* scratch of light_canon */
    int32_t *or_stamp;                /* scratch of mask_compute */
    int32_t *plain_seen;              /* [fit_cap * DI_TRIE_PLAIN_POSITIONS] stamps */
    int32_t *plain_idx, *plain_idx_stamp;
    int16_t *plain_dist;              /* distance to failure, -1 = not known */
    int canon_cur;
    int *plain_rep_n;      /* [DI_TRIE_PLAIN_POSITIONS] (plain_capacity) */
    uint8_t *plain_rep;    /* [DI_TRIE_PLAIN_POSITIONS][256] byte class of each representative byte */
    uint8_t *plain_rep_u;  /* [DI_TRIE_PLAIN_POSITIONS][256] UTF-8 position after each */
    int plain_cur, plain_idx_cur;
    int or_cur;
    int n_light;
} g_runtime;

#define GROW(p, n_old, n_new, fill)                                                        \
    do {                                                                                  \
        (p) = di_xrealloc((p), (size_t)(n_new) * sizeof *(p));                             \
        for (size_t i_ = (size_t)(n_old); i_ < (size_t)(n_new); i_++) (p)[i_] = (fill);    \
    } while (0)

/* Grows the per-state arrays to the grammar's state capacity. */
static void rt_fit(di_grammar *g, g_runtime *r) {
    int old = r->fit_cap, cap = g->cap_states;
    if (cap <= old) return;
    r->light = di_xrealloc(r->light, (size_t)cap * sizeof(light_entry));
    memset(r->light + old, 0, (size_t)(cap - old) * sizeof(light_entry));
    GROW(r->canon_idx, old, cap, 0);
    GROW(r->canon_stamp, old, cap, 0);
    GROW(r->or_stamp, old, cap, 0);
    GROW(r->plain_seen, (size_t)old * DI_TRIE_PLAIN_POSITIONS, (size_t)cap * DI_TRIE_PLAIN_POSITIONS, 0);
    GROW(r->plain_idx, old, cap, 0);
    GROW(r->plain_idx_stamp, old, cap, 0);
    GROW(r->plain_dist, old, cap, -1);
    r->fit_cap = cap;
}

static g_runtime *rt_get(di_grammar *g) {
    if (!g->rt) {
        g->rt = di_xcalloc(1, sizeof(g_runtime));
        rt_fit(g, g->rt);
    }
    return g->rt;
}

/* Makes state s's transitions and calls available (the grammar builds them lazily). */
static inline void ready(di_grammar *g, int s) {
    if (g->expanded[s]) return;
    g_expand_state(g, s);
    rt_fit(g, g->rt);
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static void node_rehash(g_runtime *r) {
    int64_t ns = r->n_slots ? r->n_slots * 2 : 4096;
    int64_t *k = di_xmalloc((size_t)ns * sizeof(int64_t));
    int32_t *v = di_xmalloc((size_t)ns * sizeof(int32_t));
    for (int64_t i = 0; i < ns; i++) v[i] = -1;
    for (int i = 0; i < r->node_state.n; i++) {
        int64_t key = ((int64_t)r->node_state.v[i] << 32) | (uint32_t)(r->node_parent.v[i] + 1);
        int64_t j = (int64_t)(mix64((uint64_t)key) & (uint64_t)(ns - 1));
        while (v[j] >= 0) j = (j + 1) & (ns - 1);
        k[j] = key;
        v[j] = i;
    }
    free(r->slot_key);
    free(r->slot_val);
    r->slot_key = k;
    r->slot_val = v;
    r->n_slots = ns;
}

static int node_intern(g_runtime *r, int state, int parent) {
    if ((int64_t)(r->node_state.n + 1) * 2 > r->n_slots) node_rehash(r);
    int64_t key = ((int64_t)state << 32) | (uint32_t)(parent + 1);
    int64_t j = (int64_t)(mix64((uint64_t)key) & (uint64_t)(r->n_slots - 1));
    while (r->slot_val[j] >= 0) {
        if (r->slot_key[j] == key) return r->slot_val[j];
        j = (j + 1) & (r->n_slots - 1);
    }
    int id = r->node_state.n;
    g_ivec_push(&r->node_state, state);
    g_ivec_push(&r->node_parent, parent);
    r->slot_key[j] = key;
    r->slot_val[j] = id;
    return id;
}

static int set_intern(g_runtime *r, const int *nodes, int n) {
    bool added;
    int id = g_st_intern(&r->sets, nodes, n, &added);
    if (added) {
        if (id >= r->info_cap) {
            int nc = r->info_cap ? r->info_cap * 2 : 1024;
            r->info = di_xrealloc(r->info, (size_t)nc * sizeof(set_info));
            r->info_cap = nc;
        }
        memset(&r->info[id], 0, sizeof(set_info));
    }
    return id;
}

/* Closure of a set: depth-first over pushes (rule calls) and pops (finished rules). */
static void set_close(di_grammar *g, g_runtime *r, int set) {
    set_info *si = &r->info[set];
    if (si->closed) return;
    if (r->stamp_cap < r->node_state.n + 1024) {
        int nc = (r->node_state.n + 1024) * 2;
        r->stamp = di_xrealloc(r->stamp, (size_t)nc * sizeof(int));
        memset(r->stamp + r->stamp_cap, 0, (size_t)(nc - r->stamp_cap) * sizeof(int));
        r->stamp_cap = nc;
    }
    r->cur_stamp++;
    int off = r->sets.off.v[set], n = r->sets.off.v[set + 1] - off;
    r->stack.n = 0;
    r->tmp.n = 0;
    for (int i = 0; i < n; i++) g_ivec_push(&r->stack, r->sets.pool.v[off + i]);
    bool accept = false;
    while (r->stack.n) {
        int nd = r->stack.v[--r->stack.n];
        if (nd < r->stamp_cap && r->stamp[nd] == r->cur_stamp) continue;
        if (nd >= r->stamp_cap) {
            int nc = (nd + 1024) * 2;
            r->stamp = di_xrealloc(r->stamp, (size_t)nc * sizeof(int));
            memset(r->stamp + r->stamp_cap, 0, (size_t)(nc - r->stamp_cap) * sizeof(int));
            r->stamp_cap = nc;
        }
        r->stamp[nd] = r->cur_stamp;
        int s = r->node_state.v[nd], p = r->node_parent.v[nd];
        if (g->has_bytes[s]) g_ivec_push(&r->tmp, nd);
        if (g->has_calls[s]) ready(g, s);
        for (int e = g->call_first[s]; g->has_calls[s] && e < g->call_first[s] + g->call_count[s]; e++) {
            int to = g->call_to.v[e];
            /* a tail call (the return state only finishes the rule) pushes no frame */
            int ret = g->accepting[to] && !g->has_bytes[to] && !g->has_calls[to] ? p : node_intern(r, to, p);
            int child = node_intern(r, g->rule_start[g->call_rule.v[e]], ret);
            g_ivec_push(&r->stack, child);
        }
        if (g->accepting[s]) {
            if (p < 0) accept = true;
            else g_ivec_push(&r->stack, p);
        }
    }
    si = &r->info[set];
    si->ready_off = r->ready_pool.n;
    si->ready_n = r->tmp.n;
    for (int i = 0; i < r->tmp.n; i++) g_ivec_push(&r->ready_pool, r->tmp.v[i]);
    si->accept = accept;
    si->closed = 1;
}

static int int_cmp(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* set x byte -> set, or -1 when no stack can take the byte (or more than MATCHER_MAX_STACKS would). */
static int set_step(di_grammar *g, g_runtime *r, int set, uint8_t byte) {
    int cls = g->byte_class[byte];
    set_info *si = &r->info[set];
    if (si->trans && si->trans[cls] != -2) return si->trans[cls];
    set_close(g, r, set);
    si = &r->info[set];
    g_ivec out = {0};
    for (int i = 0; i < si->ready_n; i++) {
        int nd = r->ready_pool.v[si->ready_off + i];
        ready(g, r->node_state.v[nd]);
        si = &r->info[set];
        int t = g->next[(size_t)r->node_state.v[nd] * (size_t)g->n_classes + (size_t)cls];
        if (t >= 0) g_ivec_push(&out, node_intern(r, t, r->node_parent.v[nd]));
    }
    int res = -1;
    if (out.n) {
        /* sort (insertion sort for the usual few stacks) + unique */
        if (out.n > 64) {
            qsort(out.v, (size_t)out.n, sizeof(int), int_cmp);
        } else {
            for (int i = 1; i < out.n; i++) {
                int x = out.v[i], j = i - 1;
                while (j >= 0 && out.v[j] > x) out.v[j + 1] = out.v[j], j--;
                out.v[j + 1] = x;
            }
        }
        int m = 1;
        for (int i = 1; i < out.n; i++)
            if (out.v[i] != out.v[m - 1]) out.v[m++] = out.v[i];
        res = m <= MATCHER_MAX_STACKS ? set_intern(r, out.v, m) : -1;
    }
    g_ivec_free(&out);
    si = &r->info[set];
    if (!si->trans) {
        si->trans = di_xmalloc((size_t)g->n_classes * sizeof(int32_t));
        for (int i = 0; i < g->n_classes; i++) si->trans[i] = -2;
    }
    si->trans[cls] = res;
    return res;
}

static void runtime_free(g_runtime *r) {
    if (!r) return;
    g_ivec_free(&r->node_state);
    g_ivec_free(&r->node_parent);
    free(r->slot_key);
    free(r->slot_val);
    int n = r->sets.off.n ? r->sets.off.n - 1 : 0;
    for (int i = 0; i < n; i++) {
        free(r->info[i].trans);
        free(r->info[i].mask);
    }
    g_st_free(&r->sets);
    free(r->info);
    free(r->canon_idx);
    free(r->canon_stamp);
    free(r->or_stamp);
    free(r->plain_rep_n);
    free(r->plain_rep);
    free(r->plain_rep_u);
    free(r->plain_seen);
    free(r->plain_idx);
    free(r->plain_idx_stamp);
    free(r->plain_dist);
    if (r->light) {
        for (int i = 0; i < r->fit_cap; i++) {
            free(r->light[i].mask);
            g_ivec_free(&r->light[i].bounds);
        }
        free(r->light);
    }
    g_ivec_free(&r->ready_pool);
    free(r->stamp);
    g_ivec_free(&r->stack);
    g_ivec_free(&r->tmp);
    free(r);
}

void di_grammar_free(di_grammar *gr) {
    if (!gr) return;
    for (int i = 0; i < gr->n_rules; i++) free(gr->rule_names[i]);
    free(gr->rule_names);
    free(gr->rule_start);
    g_grammar_free_tables(gr);
    runtime_free(gr->rt);
    free(gr);
}

void di_grammar_stats(const di_grammar *g, int64_t *n_nodes, int64_t *n_sets, int64_t *n_masks) {
    const g_runtime *r = g->rt;
    *n_nodes = r ? r->node_state.n : 0;
    *n_sets = r && r->sets.off.n ? r->sets.off.n - 1 : 0;
    *n_masks = r ? r->n_masks : 0;
}

/* ---- matcher ---- */

struct di_matcher {
    di_grammar *g;
    const di_token_trie *v;
    g_ivec hist; /* set id after each accepted token; hist.v[0] = start; -3 = after EOS */
};

enum { AFTER_EOS = -3 };

di_matcher *di_matcher_new(di_grammar *g, const di_token_trie *v) {
    g_runtime *r = rt_get(g);
    di_matcher *m = di_xcalloc(1, sizeof *m);
    m->g = g;
    m->v = v;
    int n0 = node_intern(r, g->rule_start[g->root_rule], -1);
    g_ivec_push(&m->hist, set_intern(r, &n0, 1));
    return m;
}

void di_matcher_free(di_matcher *m) {
    if (!m) return;
    g_ivec_free(&m->hist);
    free(m);
}

static int cur_set(const di_matcher *m) { return m->hist.v[m->hist.n - 1]; }

bool di_matcher_is_finished(const di_matcher *m) { return cur_set(m) == AFTER_EOS; }

bool di_matcher_can_end(di_matcher *m) {
    int s = cur_set(m);
    if (s == AFTER_EOS) return true;
    g_runtime *r = m->g->rt;
    set_close(m->g, r, s);
    return r->info[s].accept;
}

bool di_matcher_accept_bytes(di_matcher *m, const uint8_t *b, size_t n) {
    int s = cur_set(m);
    if (s == AFTER_EOS) return false;
    for (size_t i = 0; i < n && s >= 0; i++) s = set_step(m->g, m->g->rt, s, b[i]);
    if (s < 0) return false;
    g_ivec_push(&m->hist, s);
    return true;
}

bool di_matcher_accept_token(di_matcher *m, int32_t id) {
    if (id < 0 || id >= m->v->vocab || cur_set(m) == AFTER_EOS) return false;
    if (id == m->v->eos) {
        if (!di_matcher_can_end(m)) return false;
        g_ivec_push(&m->hist, AFTER_EOS);
        return true;
    }
    uint8_t buf[1024];
    size_t len;
    const uint8_t *b = di_trie_token_bytes(m->v, id, buf, sizeof buf, &len);
    if (!b) return false;
    return di_matcher_accept_bytes(m, b, len);
}

int di_matcher_rollback(di_matcher *m, int n) {
    int k = 0;
    while (k < n && m->hist.n > 1) m->hist.n--, k++;
    return k;
}

/* light: the state consumes bytes, calls nothing and is not final, so a walk through it needs no
 * stack (see trie_walk) */
static inline bool light_state(const di_grammar *g, int t) { return g->light[t]; }

typedef struct walk_stack {
    int32_t *node, *a, *b;
    int sp, cap;
} walk_stack;

static void ws_push(walk_stack *w, int node, int a, int b) {
    if (w->sp == w->cap) {
        w->cap = w->cap ? w->cap * 2 : 4096;
        w->node = di_xrealloc(w->node, (size_t)w->cap * sizeof(int32_t));
        w->a = di_xrealloc(w->a, (size_t)w->cap * sizeof(int32_t));
        w->b = di_xrealloc(w->b, (size_t)w->cap * sizeof(int32_t));
    }
    w->node[w->sp] = node, w->a[w->sp] = a, w->b[w->sp++] = b;
}

/* Depth-first walk of the trie below each pushed entry. A position is either an interned set
 * (a >= 0: set id) or, while the automaton is a single stack whose top state only consumes bytes
 * (no calls, not final), a "light" pair (a = -1 - DFA state, b = parent node) advanced by table
 * lookups alone. With bounds != NULL the walk is context-free: it stops where a light position
 * would turn into a set and records (trie node, -1 - state) there instead. With skip_chars > 0
 * (only for a light walk from the root, see plain_capacity) subtrees whose tokens are all plain and
 * at most skip_chars code points long are not entered: the caller has allowed them already. */
static void trie_walk(di_grammar *g, g_runtime *r, const di_token_trie *v, walk_stack *w, uint32_t *mask, g_ivec *bounds,
                      int skip_chars) {
    const int nc = g->n_classes;
    while (w->sp) {
        w->sp--;
        int nd = w->node[w->sp], a = w->a[w->sp], pb = w->b[w->sp];
        if (a < 0) ready(g, -1 - a);
        for (int c = v->child_off[nd]; c < v->child_off[nd + 1]; c++) {
            if (v->sub_chars[c] <= skip_chars) break; /* this and every later sibling: all plain, short */
            int na, nb = 0;
            bool leaf = v->child_off[c] == v->child_off[c + 1];
            if (a < 0) {
                int t = g->next[(size_t)(-1 - a) * (size_t)nc + g->byte_class[v->child_byte[c]]];
                if (t < 0) continue;
                if (light_state(g, t)) {
                    na = -1 - t, nb = pb;
                } else if (bounds) {
                    for (int k = v->tok_off[c]; k < v->tok_off[c + 1]; k++) mask[v->toks[k] / 32] |= 1u << (v->toks[k] % 32);
                    if (!leaf) g_ivec_push(bounds, c), g_ivec_push(bounds, t);
                    continue;
                } else {
                    int n1 = node_intern(r, t, pb);
                    na = set_intern(r, &n1, 1);
                }
            } else {
                na = set_step(g, r, a, v->child_byte[c]);
                if (na < 0) continue;
                int off = r->sets.off.v[na];
                if (r->sets.off.v[na + 1] - off == 1) {
                    int n1 = r->sets.pool.v[off], t = r->node_state.v[n1];
                    if (light_state(g, t)) na = -1 - t, nb = r->node_parent.v[n1];
                }
            }
            for (int k = v->tok_off[c]; k < v->tok_off[c + 1]; k++) mask[v->toks[k] / 32] |= 1u << (v->toks[k] % 32);
            if (!leaf) ws_push(w, c, na, nb);
        }
    }
}

#define LIGHT_CACHE_MAX 4096
#define SHARED_MAX 1024
#define CANON_MAX_STATES 64

/* Canonical form of what a light walk from DFA state t can see: breadth-first over light states up
 * to the longest token's depth, each row run-length encoded over the 256 bytes with targets as
 * (light state index | exit index | dead). Two states (of any grammars) with equal forms have
 * equal light walks, up to renaming the exits. Fills exits (exit index -> DFA state); returns
 * false when the form is too large to share. */
static bool light_canon(di_grammar *g, g_runtime *r, int t, int depth_max, g_ivec *key, g_ivec *exits) {
    key->n = exits->n = 0;
    r->canon_cur++;
    g_ivec q = {0}, qd = {0};
    g_ivec_push(&q, t), g_ivec_push(&qd, 0);
    r->canon_stamp[t] = r->canon_cur, r->canon_idx[t] = 0;
    bool ok = true;
    for (int h = 0; h < q.n && ok; h++) {
        int s = q.v[h], d = qd.v[h];
        if (d >= depth_max) { g_ivec_push(key, -7); continue; }
        ready(g, s);
        int prev = -9, run = 0;
        for (int b = 0; b <= 256; b++) {
            int code = -9;
            if (b < 256) {
                int n = g->next[(size_t)s * (size_t)g->n_classes + g->byte_class[b]];
                if (n < 0) code = -1;
                else if (light_state(g, n)) {
                    if (r->canon_stamp[n] != r->canon_cur) {
                        if (q.n >= CANON_MAX_STATES) { ok = false; break; }
                        r->canon_stamp[n] = r->canon_cur, r->canon_idx[n] = q.n;
                        g_ivec_push(&q, n), g_ivec_push(&qd, d + 1);
                    }
                    code = r->canon_idx[n];
                } else {
                    int k = 0;
                    while (k < exits->n && exits->v[k] != n) k++;
                    if (k == exits->n) g_ivec_push(exits, n);
                    code = -2 - k;
                }
            }
            if (code == prev) { run++; continue; }
            if (run) g_ivec_push(key, prev), g_ivec_push(key, run);
            prev = code, run = 1;
        }
        g_ivec_push(key, -8); /* end of row */
    }
    g_ivec_free(&q);
    g_ivec_free(&qd);
    return ok;
}

#define PLAIN_ALL (DI_TRIE_NOT_PLAIN - 1)

/* How many plain code points (token_trie.h) DFA state t surely takes: the length of the shortest
 * string of plain code points some byte prefix of which leads from t to a dead or non-light state
 * (t "fails" after that many code points). Then every plain token of at most that many code points
 * is in t's light mask and leaves no bound below it.
 *
 * Over the graph of boundary states (DFA states between code points; an edge is one plain code
 * point, followed byte by byte through one representative byte per (byte class, UTF-8 position)):
 * explore breadth-first from t up to PLAIN_HORIZON code points, mark the states that fail at their
 * next code point, and compute shortest distances to failure backwards (Dijkstra with one bucket per
 * distance, distances clamped at PLAIN_CAP: slices stop at DI_TRIE_SLICE_MAX code points). A state
 * from which no failing state is reachable at all has no bound (PLAIN_ALL: every plain token).
 * The exploration stops at a horizon of 2 * PLAIN_CAP + 2 code points; states there count as
 * PLAIN_CAP away from failure (a path through them is at least that long), so the distance of every
 * state within horizon - PLAIN_CAP of t is exact (or at least PLAIN_CAP), and those distances are
 * kept per state for later calls. After
 * PLAIN_BUDGET states the horizon is pulled in to the current depth, so one call's work is bounded;
 * t's distance is then only known up to the horizon, which is taken as its (safe) lower bound.
 * The budget is large on purpose: a key automaton (any string but hundreds of declared names) has
 * thousands of boundary states, and a budget that cuts it (2,048 before) leaves a low capacity, a
 * long trie walk, and a re-exploration at each later first visit; exploring it whole once costs
 * one slower call (up to tens of ms on the largest sample schema) but removes several from the
 * tail (sample p99 ~450 -> ~370 us). */
#define PLAIN_CAP(v) ((v)->max_plain < DI_TRIE_SLICE_MAX ? (v)->max_plain : DI_TRIE_SLICE_MAX)
#define PLAIN_BUDGET 131072

typedef struct plain_scratch {
    g_ivec state, depth, fail, dist; /* per explored boundary state, in discovery order */
    g_ivec efrom, eto;               /* edges between those indices */
    g_ivec todo, rev_off, rev;
} plain_scratch;

/* Plain successors of boundary state s (appended to out as DFA states); false when s fails. */
static bool plain_successors(di_grammar *g, g_runtime *r, int s, g_ivec *todo, g_ivec *out) {
    int stamp = ++r->plain_cur;
    todo->n = 0;
    g_ivec_push(todo, s * DI_TRIE_PLAIN_POSITIONS);
    while (todo->n) {
        int pair = todo->v[--todo->n], x = pair / DI_TRIE_PLAIN_POSITIONS, u = pair % DI_TRIE_PLAIN_POSITIONS;
        const uint8_t *rep = r->plain_rep + u * 256, *rep_u = r->plain_rep_u + u * 256;
        ready(g, x);
        const int32_t *row = g->next + (size_t)x * (size_t)g->n_classes; /* no expansion below */
        for (int k = 0; k < r->plain_rep_n[u]; k++) {
            int s2 = row[rep[k]], u2 = rep_u[k];
            if (s2 < 0 || !light_state(g, s2)) return false;
            int p2 = s2 * DI_TRIE_PLAIN_POSITIONS + u2;
            if (r->plain_seen[p2] == stamp) continue;
            r->plain_seen[p2] = stamp;
            g_ivec_push(u2 ? todo : out, u2 ? p2 : s2);
        }
    }
    return true;
}

static void plain_tables(const di_grammar *g, g_runtime *r) {
    r->plain_rep_n = di_xcalloc(DI_TRIE_PLAIN_POSITIONS, sizeof(int));
    r->plain_rep = di_xmalloc((size_t)DI_TRIE_PLAIN_POSITIONS * 256);
    r->plain_rep_u = di_xmalloc((size_t)DI_TRIE_PLAIN_POSITIONS * 256);
    for (int u = 0; u < DI_TRIE_PLAIN_POSITIONS; u++) {
        uint8_t seen[256 * DI_TRIE_PLAIN_POSITIONS] = {0}; /* class x next position */
        for (int b = 0; b < 256; b++) {
            int u2 = di_trie_plain_step(u, (uint8_t)b);
            if (u2 < 0 || seen[g->byte_class[b] * DI_TRIE_PLAIN_POSITIONS + u2]) continue;
            seen[g->byte_class[b] * DI_TRIE_PLAIN_POSITIONS + u2] = 1;
            r->plain_rep[u * 256 + r->plain_rep_n[u]] = g->byte_class[b];
            r->plain_rep_u[u * 256 + r->plain_rep_n[u]++] = (uint8_t)u2;
        }
    }
}

/* Shortest distances to failure over the explored graph (ps->dist), clamped at cap; a node from
 * which no failing node and no horizon leaf can be reached keeps PLAIN_ALL. */
static void plain_distances(plain_scratch *ps, int cap) {
    int n = ps->state.n;
    ps->rev_off.n = ps->rev.n = 0;
    for (int i = 0; i <= n; i++) g_ivec_push(&ps->rev_off, 0);
    for (int e = 0; e < ps->eto.n; e++) ps->rev_off.v[ps->eto.v[e] + 1]++;
    for (int i = 0; i < n; i++) ps->rev_off.v[i + 1] += ps->rev_off.v[i];
    for (int e = 0; e < ps->efrom.n; e++) g_ivec_push(&ps->rev, 0);
    g_ivec fill = {0};
    for (int i = 0; i < n; i++) g_ivec_push(&fill, ps->rev_off.v[i]);
    for (int e = 0; e < ps->efrom.n; e++) ps->rev.v[fill.v[ps->eto.v[e]]++] = ps->efrom.v[e];
    g_ivec_free(&fill);
    /* buckets as linked lists: head per distance, next per node (a node may sit in several
     * buckets after improvements; stale entries are skipped) */
    g_ivec head = {0}, link = {0}, who = {0};
    for (int d = 0; d <= cap; d++) g_ivec_push(&head, -1);
    for (int i = 0; i < n; i++) {
        if (ps->dist.v[i] <= cap) g_ivec_push(&who, i), g_ivec_push(&link, head.v[ps->dist.v[i]]), head.v[ps->dist.v[i]] = who.n - 1;
    }
    for (int d = 0; d <= cap; d++) {
        int nd = d < cap ? d + 1 : cap;
        while (head.v[d] >= 0) { /* popped one by one: bucket cap receives while it is drained */
            int it = head.v[d], i = who.v[it];
            head.v[d] = link.v[it];
            if (ps->dist.v[i] != d) continue;
            for (int k = ps->rev_off.v[i]; k < ps->rev_off.v[i + 1]; k++) {
                int p = ps->rev.v[k];
                if (ps->fail.v[p] < 0 || ps->dist.v[p] <= nd) continue; /* fixed (a leaf) or no better */
                ps->dist.v[p] = nd;
                g_ivec_push(&who, p), g_ivec_push(&link, head.v[nd]), head.v[nd] = who.n - 1;
            }
        }
    }
    g_ivec_free(&head);
    g_ivec_free(&link);
    g_ivec_free(&who);
}

static int plain_capacity(di_grammar *g, g_runtime *r, int t, const di_token_trie *v) {
    if (!r->plain_rep_n) plain_tables(g, r);
    if (r->plain_dist[t] >= 0) return r->plain_dist[t];
    int cap = PLAIN_CAP(v), horizon = 2 * cap + 2;
    plain_scratch ps = {0};
    g_ivec succ = {0};
    int stamp = ++r->plain_idx_cur;
    r->plain_idx_stamp[t] = stamp, r->plain_idx[t] = 0;
    g_ivec_push(&ps.state, t), g_ivec_push(&ps.depth, 0);
    for (int i = 0; i < ps.state.n; i++) {
        int s = ps.state.v[i], d = ps.depth.v[i];
        /* fail: 1 = fails next, 0 = explored, -1 = a leaf with a known distance */
        if (i > 0 && r->plain_dist[s] >= 0) { /* PLAIN_ALL when unbounded */
            g_ivec_push(&ps.fail, -1), g_ivec_push(&ps.dist, r->plain_dist[s]);
            continue;
        }
        if (d < horizon && i >= PLAIN_BUDGET) horizon = d; /* discovery order is by depth */
        if (d >= horizon) {
            g_ivec_push(&ps.fail, -1), g_ivec_push(&ps.dist, cap);
            continue;
        }
        succ.n = 0;
        bool ok = plain_successors(g, r, s, &ps.todo, &succ);
        g_ivec_push(&ps.fail, ok ? 0 : 1), g_ivec_push(&ps.dist, ok ? PLAIN_ALL : 0);
        if (!ok) continue;
        for (int k = 0; k < succ.n; k++) {
            int s2 = succ.v[k];
            if (r->plain_idx_stamp[s2] != stamp) {
                r->plain_idx_stamp[s2] = stamp, r->plain_idx[s2] = ps.state.n;
                g_ivec_push(&ps.state, s2), g_ivec_push(&ps.depth, d + 1);
            }
            g_ivec_push(&ps.efrom, i), g_ivec_push(&ps.eto, r->plain_idx[s2]);
        }
    }
    plain_distances(&ps, cap);
    for (int i = 0; i < ps.state.n; i++)
        if (ps.fail.v[i] >= 0 && ps.depth.v[i] <= horizon - cap) r->plain_dist[ps.state.v[i]] = (int16_t)ps.dist.v[i];
    int m = ps.dist.v[0] == PLAIN_ALL || ps.dist.v[0] < horizon ? ps.dist.v[0] : horizon; /* past the horizon: a lower bound */
    g_ivec *all[] = {&ps.state, &ps.depth, &ps.fail, &ps.dist, &ps.efrom, &ps.eto, &ps.todo,
                     &ps.rev_off, &ps.rev, &succ};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) g_ivec_free(all[k]);
    return m;
}

/* The context-free part of a light state's mask: tokens consumed by the top rule alone, plus the
 * trie nodes where the walk needs the stack below. Cached per DFA state in the grammar, and by
 * canonical form in the vocabulary (shared by every grammar using it). */
static light_entry *light_get(di_grammar *g, g_runtime *r, const di_token_trie *cv, int t, walk_stack *w) {
    di_token_trie *v = (di_token_trie *)cv; /* only the shared cache is written, under its mutex */
    light_entry *e = &r->light[t];
    if (e->mask && e->vocab == v) return e;
    if (r->n_light >= LIGHT_CACHE_MAX) return NULL;
    size_t words = ((size_t)v->vocab + 31) / 32;
    /* built aside: the walks below may create states and so move r->light */
    uint32_t *mask = di_xmalloc(words * 4);
    g_ivec bounds = {0};
    r->n_light++;
    g_ivec key = {0}, exits = {0};
    bool canon = light_canon(g, r, t, v->max_depth, &key, &exits);
    uint64_t h = canon ? g_hash_ints(key.v, key.n) : 0;
    bool hit = false;
    if (canon) {
        pthread_mutex_lock(&v->mu);
        for (int i = 0; i < v->n_shared && !hit; i++) {
            shared_light *sl = &v->shared[i];
            if (sl->hash != h || sl->key_n != key.n || memcmp(sl->key, key.v, (size_t)key.n * sizeof(int32_t))) continue;
            memcpy(mask, sl->mask, words * 4);
            for (int k = 0; k < sl->bounds.n; k += 2)
                g_ivec_push(&bounds, sl->bounds.v[k]), g_ivec_push(&bounds, exits.v[sl->bounds.v[k + 1]]);
            hit = true;
        }
        pthread_mutex_unlock(&v->mu);
    }
    if (!hit) {
        int m = plain_capacity(g, r, t, v);
        m = m >= v->max_plain ? PLAIN_ALL : m; /* else m <= PLAIN_CAP <= DI_TRIE_SLICE_MAX */
        if (m > 0) memcpy(mask, v->slice_mask + (m > DI_TRIE_SLICE_MAX ? 0 : (size_t)m * words), words * 4);
        else memset(mask, 0, words * 4);
        w->sp = 0;
        ws_push(w, 0, -1 - t, 0);
        trie_walk(g, r, v, w, mask, &bounds, m);
        pthread_mutex_lock(&v->mu);
        if (canon && v->n_shared < SHARED_MAX) {
            if (v->n_shared == v->cap_shared) {
                v->cap_shared = v->cap_shared ? v->cap_shared * 2 : 64;
                v->shared = di_xrealloc(v->shared, (size_t)v->cap_shared * sizeof(shared_light));
            }
            shared_light *sl = &v->shared[v->n_shared];
            memset(sl, 0, sizeof *sl);
            bool all_known = true;
            for (int k = 0; k < bounds.n && all_known; k += 2) {
                int x = 0;
                while (x < exits.n && exits.v[x] != bounds.v[k + 1]) x++;
                if (x == exits.n) all_known = false;
                g_ivec_push(&sl->bounds, bounds.v[k]);
                g_ivec_push(&sl->bounds, x);
            }
            if (all_known) {
                sl->hash = h;
                sl->key = di_xmalloc((size_t)(key.n ? key.n : 1) * sizeof(int32_t));
                for (int k = 0; k < key.n; k++) sl->key[k] = key.v[k];
                sl->key_n = key.n;
                sl->mask = di_xmalloc(words * 4);
                memcpy(sl->mask, mask, words * 4);
                v->n_shared++;
            } else {
                g_ivec_free(&sl->bounds);
            }
        }
        pthread_mutex_unlock(&v->mu);
    }
    g_ivec_free(&key);
    g_ivec_free(&exits);
    e = &r->light[t];
    free(e->mask);
    g_ivec_free(&e->bounds);
    e->mask = mask;
    e->bounds = bounds;
    e->vocab = v;
    return e;
}

static int cmp_pair_int(const void *a, const void *b) {
    const int *x = a, *y = b;
    return x[0] != y[0] ? (x[0] > y[0]) - (x[0] < y[0]) : (x[1] > y[1]) - (x[1] < y[1]);
}

/* The mask of a set is the union over its stacks (a token is allowed when some stack takes it), so
 * each stack is handled on its own: one whose top is a light state ORs in the state's cached
 * light mask and continues below the entry's bounds with its own parent; the other stacks are
 * walked together from the trie root. Continuations that start at the same trie node are merged
 * into one set, so no subtree is walked twice. */
static void mask_compute(di_grammar *g, g_runtime *r, const di_token_trie *v, int s, uint32_t *mask) {
    size_t words = ((size_t)v->vocab + 31) / 32;
    memset(mask, 0, words * 4);
    int stamp = ++r->or_cur;
    walk_stack w = {0};
    g_ivec rest = {0}, cont = {0}; /* cont: pairs (trie node, stack node) */
    int off = r->sets.off.v[s], n = r->sets.off.v[s + 1] - off;
    for (int i = 0; i < n; i++) {
        int nd = r->sets.pool.v[off + i], t = r->node_state.v[nd];
        light_entry *le = light_state(g, t) ? light_get(g, r, v, t, &w) : NULL;
        if (!le) {
            g_ivec_push(&rest, nd);
            continue;
        }
        if (r->or_stamp[t] != stamp) {
            r->or_stamp[t] = stamp;
            for (size_t k = 0; k < words; k++) mask[k] |= le->mask[k];
        }
        int parent = r->node_parent.v[nd];
        for (int k = 0; k < le->bounds.n; k += 2) {
            g_ivec_push(&cont, le->bounds.v[k]);
            g_ivec_push(&cont, node_intern(r, le->bounds.v[k + 1], parent));
        }
    }
    w.sp = 0;
    if (rest.n) ws_push(&w, 0, set_intern(r, rest.v, rest.n), 0);
    if (cont.n > 2) qsort(cont.v, (size_t)cont.n / 2, 2 * sizeof(int), cmp_pair_int);
    for (int i = 0; i < cont.n;) {
        int j = i;
        rest.n = 0;
        for (; j < cont.n && cont.v[j] == cont.v[i]; j += 2)
            if (!rest.n || rest.v[rest.n - 1] != cont.v[j + 1]) g_ivec_push(&rest, cont.v[j + 1]);
        ws_push(&w, cont.v[i], set_intern(r, rest.v, rest.n), 0);
        i = j;
    }
    trie_walk(g, r, v, &w, mask, NULL, 0);
    free(w.node);
    free(w.a);
    free(w.b);
    g_ivec_free(&rest);
    g_ivec_free(&cont);
}

void di_matcher_fill_mask(di_matcher *m, uint32_t *mask) {
    const di_token_trie *v = m->v;
    size_t words = ((size_t)v->vocab + 31) / 32;
    int s = cur_set(m);
    if (s == AFTER_EOS) {
        memset(mask, 0, words * 4);
        mask[v->eos / 32] |= 1u << (v->eos % 32);
        return;
    }
    di_grammar *g = m->g;
    g_runtime *r = g->rt;
    if (r->info[s].mask && r->info[s].mask_vocab == v) {
        memcpy(mask, r->info[s].mask, words * 4);
        return;
    }
    mask_compute(g, r, v, s, mask);
    set_close(g, r, s);
    if (r->info[s].accept) mask[v->eos / 32] |= 1u << (v->eos % 32);
    r->info[s].mask = di_xmalloc(words * 4);
    memcpy(r->info[s].mask, mask, words * 4);
    r->info[s].mask_vocab = v;
    r->n_masks++;
}

void di_matcher_fill_mask_reference(di_matcher *m, uint32_t *mask) {
    const di_token_trie *v = m->v;
    size_t words = ((size_t)v->vocab + 31) / 32;
    memset(mask, 0, words * 4);
    int s = cur_set(m);
    if (s == AFTER_EOS) {
        mask[v->eos / 32] |= 1u << (v->eos % 32);
        return;
    }
    walk_stack w = {0};
    ws_push(&w, 0, s, 0);
    trie_walk(m->g, m->g->rt, v, &w, mask, NULL, 0);
    free(w.node);
    free(w.a);
    free(w.b);
    if (di_matcher_can_end(m)) mask[v->eos / 32] |= 1u << (v->eos % 32);
}
