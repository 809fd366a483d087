/* Grammar builder (see grammar.h), Thompson NFAs with epsilon closures and byte classes
 * (grammar_nfa.h), and complete byte DFAs for boolean operations on terminal expressions. The
 * compiled grammar (per-rule DFAs, built lazily) is in grammar_compile.c. */
#include "constrain/grammar_nfa.h"

#include <stdlib.h>
#include <string.h>

void g_ivec_push(g_ivec *a, int x) {
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 16;
        a->v = di_xrealloc(a->v, (size_t)a->cap * sizeof(int));
    }
    a->v[a->n++] = x;
}

void g_ivec_free(g_ivec *a) {
    free(a->v);
    memset(a, 0, sizeof *a);
}

void g_builder_init(g_builder *g) { memset(g, 0, sizeof *g); }

void g_builder_free(g_builder *g) {
    free(g->nodes);
    g_ivec_free(&g->kids);
    free(g->sets);
    free(g->set_slots);
    for (int i = 0; i < g->n_rules; i++) free(g->rule_names[i]);
    free(g->rule_names);
    free(g->rule_body);
    for (int i = 0; i < g->n_autos; i++) {
        free(g->autos[i].accept);
        g_ivec_free(&g->autos[i].from);
        g_ivec_free(&g->autos[i].set);
        g_ivec_free(&g->autos[i].to);
    }
    free(g->autos);
    memset(g, 0, sizeof *g);
}

static int new_node(g_builder *g, int kind, int a, int b, int c) {
    if (g->n_nodes == g->cap_nodes) {
        g->cap_nodes = g->cap_nodes ? g->cap_nodes * 2 : 256;
        g->nodes = di_xrealloc(g->nodes, (size_t)g->cap_nodes * sizeof(g_node));
    }
    g->nodes[g->n_nodes] = (g_node){kind, a, b, c};
    return g->n_nodes++;
}

int g_empty(g_builder *g) { return new_node(g, G_EMPTY, 0, 0, 0); }
int g_none(g_builder *g) { return new_node(g, G_NONE, 0, 0, 0); }

static uint64_t set_hash(const uint8_t set[32]) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < 32; i++) h = (h ^ set[i]) * 1099511628211ull;
    return h ^ (h >> 31);
}

/* Byte sets are interned (a schema builds the same JSON character classes over and over), so the
 * byte-class computation and the DFA rows see each distinct set once. */
static int set_intern(g_builder *g, const uint8_t set[32]) {
    if ((g->n_sets + 1) * 2 > g->n_set_slots) {
        int ns = g->n_set_slots ? g->n_set_slots * 2 : 256;
        int *sl = di_xmalloc((size_t)ns * sizeof(int));
        for (int i = 0; i < ns; i++) sl[i] = -1;
        for (int k = 0; k < g->n_sets; k++) {
            int j = (int)(set_hash(g->sets[k]) & (uint64_t)(ns - 1));
            while (sl[j] >= 0) j = (j + 1) & (ns - 1);
            sl[j] = k;
        }
        free(g->set_slots);
        g->set_slots = sl;
        g->n_set_slots = ns;
    }
    int j = (int)(set_hash(set) & (uint64_t)(g->n_set_slots - 1));
    while (g->set_slots[j] >= 0) {
        if (!memcmp(g->sets[g->set_slots[j]], set, 32)) return g->set_slots[j];
        j = (j + 1) & (g->n_set_slots - 1);
    }
    if (g->n_sets == g->cap_sets) {
        g->cap_sets = g->cap_sets ? g->cap_sets * 2 : 64;
        g->sets = di_xrealloc(g->sets, (size_t)g->cap_sets * 32);
    }
    memcpy(g->sets[g->n_sets], set, 32);
    g->set_slots[j] = g->n_sets;
    return g->n_sets++;
}

int g_bytes(g_builder *g, const uint8_t set[32]) {
    bool any = false;
    for (int i = 0; i < 32; i++) any |= set[i] != 0;
    if (!any) return g_none(g);
    return new_node(g, G_BYTES, set_intern(g, set), 0, 0);
}

int g_byte_range(g_builder *g, int lo, int hi) {
    uint8_t s[32] = {0};
    for (int b = lo; b <= hi; b++) s[b >> 3] |= (uint8_t)(1u << (b & 7));
    return g_bytes(g, s);
}

int g_lit(g_builder *g, const char *s, size_t n) {
    if (n == 0) return g_empty(g);
    if (n == 1) return g_byte_range(g, (uint8_t)s[0], (uint8_t)s[0]);
    int *k = di_xmalloc(n * sizeof(int));
    for (size_t i = 0; i < n; i++) k[i] = g_byte_range(g, (uint8_t)s[i], (uint8_t)s[i]);
    int r = g_seq(g, k, (int)n);
    free(k);
    return r;
}

int g_lits(g_builder *g, const char *s) { return g_lit(g, s, strlen(s)); }

static int list_node(g_builder *g, int kind, const int *kids, int n) {
    if (n == 0) return kind == G_SEQ ? g_empty(g) : g_none(g);
    if (n == 1) return kids[0];
    int off = g->kids.n;
    for (int i = 0; i < n; i++) g_ivec_push(&g->kids, kids[i]);
    return new_node(g, kind, off, n, 0);
}

int g_seq(g_builder *g, const int *kids, int n) { return list_node(g, G_SEQ, kids, n); }
int g_alt(g_builder *g, const int *kids, int n) { return list_node(g, G_ALT, kids, n); }
int g_seq2(g_builder *g, int a, int b) { return g_seq(g, (int[]){a, b}, 2); }
int g_seq3(g_builder *g, int a, int b, int c) { return g_seq(g, (int[]){a, b, c}, 3); }
int g_alt2(g_builder *g, int a, int b) { return g_alt(g, (int[]){a, b}, 2); }

int g_repeat(g_builder *g, int child, int min, int max) {
    if (max == 0) return g_empty(g);
    if (min == 1 && max == 1) return child;
    return new_node(g, G_REPEAT, child, min, max);
}

int g_opt(g_builder *g, int child) { return g_repeat(g, child, 0, 1); }
int g_star(g_builder *g, int child) { return g_repeat(g, child, 0, -1); }
int g_ref(g_builder *g, int rule) { return new_node(g, G_RULE, rule, 0, 0); }

int g_rule_new(g_builder *g, const char *name) {
    if (g->n_rules == g->cap_rules) {
        g->cap_rules = g->cap_rules ? g->cap_rules * 2 : 32;
        g->rule_names = di_xrealloc(g->rule_names, (size_t)g->cap_rules * sizeof(char *));
        g->rule_body = di_xrealloc(g->rule_body, (size_t)g->cap_rules * sizeof(int));
    }
    g->rule_names[g->n_rules] = di_xstrdup(name ? name : "");
    g->rule_body[g->n_rules] = -1;
    return g->n_rules++;
}

void g_rule_set(g_builder *g, int rule, int body) { g->rule_body[rule] = body; }

int g_rule_find(const g_builder *g, const char *name) {
    for (int i = 0; i < g->n_rules; i++)
        if (!strcmp(g->rule_names[i], name)) return i;
    return -1;
}

/* ---- UTF-8 classes ---- */

int g_utf8_decode(const uint8_t *s, size_t avail, uint32_t *cp) {
    uint32_t c = s[0];
    int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if ((size_t)len > avail) len = 1;
    if (len == 2) c = ((c & 0x1F) << 6) | (s[1] & 0x3F);
    if (len == 3) c = ((c & 0x0F) << 12) | ((s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    if (len == 4) c = ((c & 0x07) << 18) | ((s[1] & 0x3F) << 12) | ((s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    *cp = c;
    return len;
}

int g_hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int g_utf8_encode(uint32_t cp, char *buf) {
    if (cp < 0x80) { buf[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        buf[0] = (char)(0xC0 | (cp >> 6));
        buf[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        buf[0] = (char)(0xE0 | (cp >> 12));
        buf[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        buf[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    buf[0] = (char)(0xF0 | (cp >> 18));
    buf[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    buf[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    buf[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* [lo, hi] with the same encoded length n: split until every byte position is an independent range
 * (the standard utf8-ranges construction), appending one byte-range sequence per piece to alts. */
static void utf8_split(g_builder *g, uint32_t lo, uint32_t hi, int n, g_ivec *alts) {
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                utf8_split(g, lo, lo | m, n, alts);
                utf8_split(g, (lo | m) + 1, hi, n, alts);
                return;
            }
            if ((hi & m) != m) {
                utf8_split(g, lo, (hi & ~m) - 1, n, alts);
                utf8_split(g, hi & ~m, hi, n, alts);
                return;
            }
        }
    }
    char a[4], b[4];
    g_utf8_encode(lo, a);
    g_utf8_encode(hi, b);
    int k[4];
    for (int i = 0; i < n; i++) k[i] = g_byte_range(g, (uint8_t)a[i], (uint8_t)b[i]);
    g_ivec_push(alts, g_seq(g, k, n));
}

static int cmp_u32pair(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

int g_utf8_class(g_builder *g, const uint32_t *ranges, int n_ranges) {
    uint32_t *r = di_xmalloc((size_t)(n_ranges + 1) * 2 * sizeof(uint32_t));
    memcpy(r, ranges, (size_t)n_ranges * 2 * sizeof(uint32_t));
    if (n_ranges > 1) qsort(r, (size_t)n_ranges, 2 * sizeof(uint32_t), cmp_u32pair);
    g_ivec alts = {0};
    uint8_t ascii[32] = {0};
    bool any_ascii = false;
    int i = 0;
    while (i < n_ranges) {
        uint32_t lo = r[2 * i], hi = r[2 * i + 1];
        i++;
        while (i < n_ranges && r[2 * i] <= hi + 1) {
            if (r[2 * i + 1] > hi) hi = r[2 * i + 1];
            i++;
        }
        if (hi > 0x10FFFF) hi = 0x10FFFF;
        if (lo > hi) continue;
        /* pieces by encoded length, skipping surrogates */
        static const uint32_t bounds[][2] = {{0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF},
                                             {0x10000, 0x10FFFF}};
        static const int lens[] = {1, 2, 3, 3, 4};
        for (int k = 0; k < 5; k++) {
            uint32_t a = lo > bounds[k][0] ? lo : bounds[k][0];
            uint32_t b = hi < bounds[k][1] ? hi : bounds[k][1];
            if (a > b) continue;
            if (lens[k] == 1) {
                for (uint32_t c = a; c <= b; c++) ascii[c >> 3] |= (uint8_t)(1u << (c & 7));
                any_ascii = true;
            } else {
                utf8_split(g, a, b, lens[k], &alts);
            }
        }
    }
    if (any_ascii) g_ivec_push(&alts, g_bytes(g, ascii));
    int res = g_alt(g, alts.v, alts.n);
    g_ivec_free(&alts);
    free(r);
    return res;
}

/* ---- NFA ---- */

static int nfa_state(nfa *a) {
    if (a->n >= DI_G_MAX_NFA_STATES) {
        a->overflow = true;
        return 0;
    }
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 1024;
        a->head = di_xrealloc(a->head, (size_t)a->cap * sizeof(int));
    }
    a->head[a->n] = -1;
    return a->n++;
}

static void nfa_edge_add(nfa *a, int from, int type, int label, int to) {
    if (a->overflow) return;
    if (a->ne == a->ce) {
        a->ce = a->ce ? a->ce * 2 : 2048;
        a->e = di_xrealloc(a->e, (size_t)a->ce * sizeof(nfa_edge));
    }
    a->e[a->ne] = (nfa_edge){type, label, to, a->head[from]};
    a->head[from] = a->ne++;
}

/* Builds node between fresh states; returns via *s, *t. */
void g_nfa_build(const g_builder *g, nfa *a, int node, int *s, int *t) {
    const g_node *nd = &g->nodes[node];
    if (a->overflow) { *s = *t = 0; return; }
    switch (nd->kind) {
    case G_EMPTY:
        *s = *t = nfa_state(a);
        return;
    case G_NONE:
        *s = nfa_state(a);
        *t = nfa_state(a);
        return;
    case G_BYTES:
    case G_RULE:
        *s = nfa_state(a);
        *t = nfa_state(a);
        nfa_edge_add(a, *s, nd->kind == G_BYTES ? E_BYTES : E_RULE, nd->a, *t);
        return;
    case G_SEQ: {
        int cs, ct;
        g_nfa_build(g, a, g->kids.v[nd->a], s, &ct);
        for (int i = 1; i < nd->b; i++) {
            int ns, nt;
            g_nfa_build(g, a, g->kids.v[nd->a + i], &ns, &nt);
            nfa_edge_add(a, ct, E_EPS, 0, ns);
            ct = nt;
        }
        (void)cs;
        *t = ct;
        return;
    }
    case G_ALT:
        *s = nfa_state(a);
        *t = nfa_state(a);
        for (int i = 0; i < nd->b; i++) {
            int ns, nt;
            g_nfa_build(g, a, g->kids.v[nd->a + i], &ns, &nt);
            nfa_edge_add(a, *s, E_EPS, 0, ns);
            nfa_edge_add(a, nt, E_EPS, 0, *t);
        }
        return;
    case G_AUTO: {
        const g_auto *au = &g->autos[nd->a];
        int base = a->n;
        for (int i = 0; i < au->n_states; i++) nfa_state(a);
        if (a->overflow) { *s = *t = 0; return; }
        *s = nfa_state(a);
        *t = nfa_state(a);
        nfa_edge_add(a, *s, E_EPS, 0, base);
        for (int i = 0; i < au->from.n; i++) nfa_edge_add(a, base + au->from.v[i], E_BYTES, au->set.v[i], base + au->to.v[i]);
        for (int i = 0; i < au->n_states; i++)
            if (au->accept[i]) nfa_edge_add(a, base + i, E_EPS, 0, *t);
        return;
    }
    case G_REPEAT: {
        int cur = nfa_state(a);
        *s = cur;
        for (int i = 0; i < nd->b && !a->overflow; i++) {
            int ns, nt;
            g_nfa_build(g, a, nd->a, &ns, &nt);
            nfa_edge_add(a, cur, E_EPS, 0, ns);
            cur = nt;
        }
        if (nd->c < 0) {
            int loop = nfa_state(a), ns, nt;
            nfa_edge_add(a, cur, E_EPS, 0, loop);
            g_nfa_build(g, a, nd->a, &ns, &nt);
            nfa_edge_add(a, loop, E_EPS, 0, ns);
            nfa_edge_add(a, nt, E_EPS, 0, loop);
            *t = loop;
        } else {
            int end = nfa_state(a);
            nfa_edge_add(a, cur, E_EPS, 0, end);
            for (int i = nd->b; i < nd->c && !a->overflow; i++) {
                int ns, nt;
                g_nfa_build(g, a, nd->a, &ns, &nt);
                nfa_edge_add(a, cur, E_EPS, 0, ns);
                nfa_edge_add(a, nt, E_EPS, 0, end);
                cur = nt;
            }
            *t = end;
        }
        return;
    }
    }
    di_die("grammar: bad node kind %d", nd->kind);
}

/* ---- subset construction ---- */

uint64_t g_hash_ints(const int *v, int n) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < n; i++) {
        h ^= (uint64_t)(uint32_t)v[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

static void st_rehash(g_set_table *t) {
    int ns = t->n_slots ? t->n_slots * 2 : 1024;
    int *sl = di_xmalloc((size_t)ns * sizeof(int));
    for (int i = 0; i < ns; i++) sl[i] = -1;
    for (int k = 0; k + 1 < t->off.n; k++) {
        uint64_t h = g_hash_ints(t->pool.v + t->off.v[k], t->off.v[k + 1] - t->off.v[k]);
        int j = (int)(h & (uint64_t)(ns - 1));
        while (sl[j] >= 0) j = (j + 1) & (ns - 1);
        sl[j] = k;
    }
    free(t->slots);
    t->slots = sl;
    t->n_slots = ns;
}

/* Returns the index of set v (sorted, unique), adding it if new (*added = true). */
int g_st_intern(g_set_table *t, const int *v, int n, bool *added) {
    if (t->off.n == 0) g_ivec_push(&t->off, 0);
    int count = t->off.n - 1;
    if ((count + 1) * 2 > t->n_slots) st_rehash(t);
    uint64_t h = g_hash_ints(v, n);
    int j = (int)(h & (uint64_t)(t->n_slots - 1));
    while (t->slots[j] >= 0) {
        int k = t->slots[j];
        int len = t->off.v[k + 1] - t->off.v[k];
        if (len == n && !memcmp(t->pool.v + t->off.v[k], v, (size_t)n * sizeof(int))) {
            *added = false;
            return k;
        }
        j = (j + 1) & (t->n_slots - 1);
    }
    for (int i = 0; i < n; i++) g_ivec_push(&t->pool, v[i]);
    g_ivec_push(&t->off, t->pool.n);
    t->slots[j] = count;
    *added = true;
    return count;
}

void g_st_free(g_set_table *t) {
    g_ivec_free(&t->pool);
    g_ivec_free(&t->off);
    free(t->slots);
    memset(t, 0, sizeof *t);
}

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return x < y ? -1 : x > y;
}


/* Epsilon closure of seeds (in tmp) -> sorted unique set in out. */
void g_eps_closure(dfa_ctx *c, const int *seeds, int n, g_ivec *out) {
    c->stamp++;
    out->n = 0;
    c->stack.n = 0;
    for (int i = 0; i < n; i++)
        if (c->mark[seeds[i]] != c->stamp) {
            c->mark[seeds[i]] = c->stamp;
            g_ivec_push(&c->stack, seeds[i]);
        }
    while (c->stack.n) {
        int s = c->stack.v[--c->stack.n];
        c->work++;
        g_ivec_push(out, s);
        for (int e = c->a->head[s]; e >= 0; e = c->a->e[e].next)
            if (c->a->e[e].type == E_EPS && c->mark[c->a->e[e].to] != c->stamp) {
                c->mark[c->a->e[e].to] = c->stamp;
                g_ivec_push(&c->stack, c->a->e[e].to);
            }
    }
    if (out->n > 1) qsort(out->v, (size_t)out->n, sizeof(int), cmp_int);
}

void g_compute_classes(dfa_ctx *c) {
    const g_builder *g = c->g;
    memset(c->byte_class, 0, 256);
    int n = 1;
    int map[512];
    uint8_t single_done[256] = {0};
    for (int s = 0; s < g->n_sets; s++) {
        /* most sets are single bytes (literals), many repeated: refine by each byte once */
        int count = 0, only = -1;
        for (int k = 0; k < 32 && count < 2; k++)
            for (int bit = 0; bit < 8; bit++)
                if ((g->sets[s][k] >> bit) & 1) count++, only = k * 8 + bit;
        if (count == 1) {
            if (single_done[only]) continue;
            single_done[only] = 1;
        }
        if (s > 0 && !memcmp(g->sets[s], g->sets[s - 1], 32)) continue;
        for (int i = 0; i < 2 * n; i++) map[i] = -1;
        int nn = 0;
        uint8_t nc[256];
        for (int b = 0; b < 256; b++) {
            int in = (g->sets[s][b >> 3] >> (b & 7)) & 1;
            int key = c->byte_class[b] * 2 + in;
            if (map[key] < 0) map[key] = nn++;
            nc[b] = (uint8_t)map[key];
        }
        memcpy(c->byte_class, nc, 256);
        n = nn;
    }
    c->n_classes = n;
    c->set_classes = di_xcalloc((size_t)(g->n_sets ? g->n_sets : 1), sizeof(g_ivec));
    for (int s = 0; s < g->n_sets; s++) {
        int count = 0, only = -1;
        for (int k = 0; k < 32 && count < 2; k++)
            if (g->sets[s][k])
                for (int bit = 0; bit < 8; bit++)
                    if ((g->sets[s][k] >> bit) & 1) count++, only = k * 8 + bit;
        if (count == 1) { /* a single byte: one class */
            g_ivec_push(&c->set_classes[s], c->byte_class[only]);
            continue;
        }
        uint8_t seen[256] = {0};
        for (int b = 0; b < 256; b++)
            if ((g->sets[s][b >> 3] >> (b & 7)) & 1 && !seen[c->byte_class[b]]) {
                seen[c->byte_class[b]] = 1;
                g_ivec_push(&c->set_classes[s], c->byte_class[b]);
            }
    }
}

/* ---- byte DFAs for boolean operations ---- */

void g_dfa_free(g_dfa *d) {
    free(d->next);
    free(d->accept);
    memset(d, 0, sizeof *d);
}

static int dfa_add_state(g_dfa *d, int *cap) {
    if (d->n == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        d->next = di_xrealloc(d->next, (size_t)*cap * 256 * sizeof(int32_t));
        d->accept = di_xrealloc(d->accept, (size_t)*cap);
    }
    for (int b = 0; b < 256; b++) d->next[(size_t)d->n * 256 + b] = -1;
    d->accept[d->n] = 0;
    return d->n++;
}

di_status g_node_dfa(const g_builder *g, int node, g_dfa *out, di_err *err) {
    memset(out, 0, sizeof *out);
    nfa a = {0};
    int s, t;
    g_nfa_build(g, &a, node, &s, &t);
    if (a.overflow) {
        free(a.head), free(a.e);
        return di_errf(err, DI_EUNSUPPORTED, "unsupported: expression too large for an automaton operation");
    }
    for (int i = 0; i < a.ne; i++)
        if (a.e[i].type == E_RULE) {
            free(a.head), free(a.e);
            return di_errf(err, DI_EINTERNAL, "automaton operation on an expression with rule calls");
        }
    dfa_ctx c = {.g = g, .a = &a};
    c.mark = di_xcalloc((size_t)a.n, sizeof(int));
    g_set_table tab = {0};
    g_ivec cur = {0};
    g_ivec buckets[256];
    memset(buckets, 0, sizeof buckets);
    bool added;
    int cap = 0;
    g_eps_closure(&c, &s, 1, &cur);
    g_st_intern(&tab, cur.v, cur.n, &added);
    dfa_add_state(out, &cap);
    di_status st = DI_OK;
    for (int k = 0; k < tab.off.n - 1; k++) {
        if (k >= DI_G_MAX_OP_STATES || c.work > DI_G_MAX_CLOSURE_WORK / 4) {
            st = di_errf(err, DI_EUNSUPPORTED, "unsupported: automaton operation too large");
            break;
        }
        int len = tab.off.v[k + 1] - tab.off.v[k];
        int *set = di_xmalloc((size_t)(len ? len : 1) * sizeof(int));
        memcpy(set, tab.pool.v + tab.off.v[k], (size_t)len * sizeof(int));
        for (int b = 0; b < 256; b++) buckets[b].n = 0;
        for (int i = 0; i < len; i++) {
            if (set[i] == t) out->accept[k] = 1;
            for (int e = a.head[set[i]]; e >= 0; e = a.e[e].next) {
                if (a.e[e].type != E_BYTES) continue;
                const uint8_t *bs = g->sets[a.e[e].label];
                for (int b = 0; b < 256; b++)
                    if ((bs[b >> 3] >> (b & 7)) & 1) g_ivec_push(&buckets[b], a.e[e].to);
            }
        }
        free(set);
        for (int b = 0; b < 256; b++) {
            if (!buckets[b].n) continue;
            /* byte sets are mostly ranges: a byte with the same targets as the one before it
             * goes to the same state (targets are pushed in the same edge order) */
            if (b > 0 && buckets[b].n == buckets[b - 1].n &&
                !memcmp(buckets[b].v, buckets[b - 1].v, (size_t)buckets[b].n * sizeof(int))) {
                out->next[(size_t)k * 256 + b] = out->next[(size_t)k * 256 + b - 1];
                continue;
            }
            g_eps_closure(&c, buckets[b].v, buckets[b].n, &cur);
            int id = g_st_intern(&tab, cur.v, cur.n, &added);
            if (added) dfa_add_state(out, &cap);
            out->next[(size_t)k * 256 + b] = id;
        }
    }
    for (int b = 0; b < 256; b++) g_ivec_free(&buckets[b]);
    g_ivec_free(&cur);
    g_ivec_free(&c.stack);
    g_st_free(&tab);
    free(c.mark);
    free(a.head);
    free(a.e);
    if (st) g_dfa_free(out);
    return st;
}

di_status g_dfa_product(const g_dfa *a, const g_dfa *b, bool and_not, g_dfa *out, di_err *err) {
    memset(out, 0, sizeof *out);
    /* pairs (x, y) with y = -1 for b's dead state; x is never dead */
    g_set_table tab = {0};
    bool added;
    int cap = 0;
    int p0[2] = {0, 0};
    g_st_intern(&tab, p0, 2, &added);
    dfa_add_state(out, &cap);
    di_status st = DI_OK;
    for (int k = 0; k < tab.off.n - 1; k++) {
        if (k >= DI_G_MAX_OP_STATES) {
            st = di_errf(err, DI_EUNSUPPORTED, "unsupported: automaton operation over %d states", DI_G_MAX_OP_STATES);
            break;
        }
        int x = tab.pool.v[tab.off.v[k]], y = tab.pool.v[tab.off.v[k] + 1];
        bool bacc = y >= 0 && b->accept[y];
        out->accept[k] = a->accept[x] && (and_not ? !bacc : bacc);
        for (int c = 0; c < 256; c++) {
            int nx = a->next[(size_t)x * 256 + c];
            int ny = y >= 0 ? b->next[(size_t)y * 256 + c] : -1;
            if (nx < 0 || (!and_not && ny < 0)) continue;
            int pr[2] = {nx, ny};
            int id = g_st_intern(&tab, pr, 2, &added);
            if (added) dfa_add_state(out, &cap);
            out->next[(size_t)k * 256 + c] = id;
        }
    }
    g_st_free(&tab);
    if (st) {
        g_dfa_free(out);
        return st;
    }
    /* prune states that cannot reach an accepting state (backward fixed point) */
    uint8_t *live = di_xcalloc((size_t)out->n, 1);
    for (int i = 0; i < out->n; i++) live[i] = out->accept[i];
    bool changed = true;
    while (changed) {
        changed = false;
        for (int i = 0; i < out->n; i++) {
            if (live[i]) continue;
            for (int c = 0; c < 256; c++) {
                int n = out->next[(size_t)i * 256 + c];
                if (n >= 0 && live[n]) { live[i] = 1; changed = true; break; }
            }
        }
    }
    for (int i = 0; i < out->n; i++)
        for (int c = 0; c < 256; c++) {
            int n = out->next[(size_t)i * 256 + c];
            if (n >= 0 && !live[n]) out->next[(size_t)i * 256 + c] = -1;
        }
    free(live);
    return DI_OK;
}

bool g_dfa_empty(const g_dfa *d) {
    if (!d->n) return true;
    for (int i = 0; i < d->n; i++) /* after pruning, a live start means non-empty */
        if (d->accept[i]) {
            if (d->accept[0]) return false;
            for (int c = 0; c < 256; c++)
                if (d->next[c] >= 0) return false;
            return true;
        }
    return true;
}

bool g_dfa_match(const g_dfa *d, const uint8_t *s, size_t n) {
    int x = 0;
    for (size_t i = 0; i < n && x >= 0; i++) x = d->next[(size_t)x * 256 + s[i]];
    return x >= 0 && d->accept[x];
}

int g_dfa_node(g_builder *g, const g_dfa *d) {
    if (g->n_autos == g->cap_autos) {
        g->cap_autos = g->cap_autos ? g->cap_autos * 2 : 8;
        g->autos = di_xrealloc(g->autos, (size_t)g->cap_autos * sizeof(g_auto));
    }
    g_auto *au = &g->autos[g->n_autos];
    memset(au, 0, sizeof *au);
    au->n_states = d->n;
    au->accept = di_xmalloc((size_t)(d->n ? d->n : 1));
    memcpy(au->accept, d->accept, (size_t)d->n);
    for (int s = 0; s < d->n; s++) {
        /* group bytes by target */
        uint8_t done[256] = {0};
        for (int b = 0; b < 256; b++) {
            int t = d->next[(size_t)s * 256 + b];
            if (t < 0 || done[b]) continue;
            uint8_t set[32] = {0};
            for (int c = b; c < 256; c++)
                if (d->next[(size_t)s * 256 + c] == t) set[c >> 3] |= (uint8_t)(1u << (c & 7)), done[c] = 1;
            int node = g_bytes(g, set); /* registers the set; the node itself is unused */
            au = &g->autos[g->n_autos];
            g_ivec_push(&au->from, s);
            g_ivec_push(&au->set, g->nodes[node].a);
            g_ivec_push(&au->to, t);
        }
    }
    return new_node(g, G_AUTO, g->n_autos++, 0, 0);
}
