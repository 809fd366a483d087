/* Loading a model: config -> checkpoint -> validation -> weight binding -> derived constants.
 * Validation (model/tensor_list.c) has already checked every dtype and shape when binding runs, so
 * binding only looks tensors up; it still asserts what it relies on. */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/numerics.h"
#include "forward/model.h"
#include "forward/device.h"
#include "model/tensor_list.h"

typedef struct binder {
    const di_checkpoint *ck;
    di_err *err;
    di_status st; /* first failure; later binds become no-ops */
} binder;

static const di_tensor *find(binder *b, const char *name) {
    if (b->st) return NULL;
    const di_tensor *t = di_checkpoint_find(b->ck, name);
    if (!t) b->st = di_errf(b->err, DI_EFORMAT, "checkpoint: missing tensor '%s'", name);
    return t;
}

static const void *bind_raw(binder *b, const char *fmt, int layer) {
    char name[192];
    snprintf(name, sizeof name, fmt, layer);
    const di_tensor *t = find(b, name);
    return t ? t->data : NULL;
}

static float *bind_f32_copy(binder *b, const char *fmt, int layer, float *dst, int64_t n) {
    char name[192];
    snprintf(name, sizeof name, fmt, layer);
    const di_tensor *t = find(b, name);
    if (!t) return dst;
    if (di_tensor_numel(t) != n || t->dtype != DI_DT_F32) {
        b->st = di_errf(b->err, DI_EFORMAT, "%s: expected %lld F32 values", name, (long long)n);
        return dst;
    }
    if (!dst) dst = di_xmalloc(sizeof(float) * (size_t)n);
    memcpy(dst, t->data, sizeof(float) * (size_t)n);
    return dst;
}

/* Binds `<prefix>.weight` (and `<prefix>.scale` for FP8/FP4) as a matrix. */
static di_weight bind_weight(binder *b, const char *prefix_fmt, int layer) {
    di_weight w = {0};
    char prefix[160], name[192];
    snprintf(prefix, sizeof prefix, prefix_fmt, layer);
    snprintf(name, sizeof name, "%s.weight", prefix);
    const di_tensor *t = find(b, name);
    if (!t) return w;
    w.dtype = t->dtype;
    w.data = t->data;
    w.rows = t->shape[0];
    w.cols = t->ndim > 1 ? t->shape[1] : 1;
    if (t->dtype == DI_DT_I8) w.cols *= 2; /* two FP4 codes per byte */
    if (t->dtype == DI_DT_F8_E4M3 || t->dtype == DI_DT_I8) {
        snprintf(name, sizeof name, "%s.scale", prefix);
        const di_tensor *s = find(b, name);
        if (s) w.scale = s->data;
    }
    return w;
}


static void bind_attention(binder *b, di_model *m, di_layer *L, const char *p) {
    char fmt[96];
#define P(suffix) (snprintf(fmt, sizeof fmt, "%s%s", p, suffix), fmt)
    di_attn_weights *a = &L->attn;
    a->wq_a = bind_weight(b, P("attn.wq_a"), L->id);
    a->wq_b = bind_weight(b, P("attn.wq_b"), L->id);
    a->wkv = bind_weight(b, P("attn.wkv"), L->id);
    a->wo_b = bind_weight(b, P("attn.wo_b"), L->id);
    /* wo_a is a bf16 grouped einsum in the reference, which dequantises it once at convert time;
     * the BF16 linear reads the FP8 values times their scales, the same bf16 numbers, without a
     * copy (2.8 GB for the released model) */
    a->wo_a = bind_weight(b, P("attn.wo_a"), L->id);
    a->q_norm = bind_raw(b, P("attn.q_norm.weight"), L->id);
    a->kv_norm = bind_raw(b, P("attn.kv_norm.weight"), L->id);
    a->attn_sink = bind_f32_copy(b, P("attn.attn_sink"), L->id, NULL, m->cfg.num_attention_heads);
    if (L->is_kv_source) {
        a->cmp_wkv = bind_weight(b, P("attn.compressor.wkv"), L->id);
        if (L->ratio == 2) a->cmp_wgate = bind_weight(b, P("attn.compressor.wgate"), L->id);
        a->cmp_norm = bind_raw(b, P("attn.compressor.norm.weight"), L->id);
        a->idx_wk = bind_weight(b, P("attn.indexer.wk"), L->id);
        a->idx_k_norm = bind_raw(b, P("attn.indexer.k_norm.weight"), L->id);
    }
    if (L->is_index_source) {
        a->idx_wq_b = bind_weight(b, P("attn.indexer.wq_b"), L->id);
        a->idx_weights_proj = bind_weight(b, P("attn.indexer.weights_proj"), L->id);
    }
#undef P
}

static void bind_ffn(binder *b, di_layer *L, const char *p, int n_experts, int top_k) {
    char fmt[128];
    di_ffn_weights *f = &L->ffn;
    f->n_experts = n_experts;
    f->top_k = top_k;
    snprintf(fmt, sizeof fmt, "%sffn.gate", p);
    f->gate = bind_weight(b, fmt, L->id);
    snprintf(fmt, sizeof fmt, "%sffn.gate.bias", p);
    f->gate_bias = bind_f32_copy(b, fmt, L->id, NULL, n_experts);
    snprintf(fmt, sizeof fmt, "%sffn.gate.bias_vl", p);
    f->gate_bias_vl = bind_f32_copy(b, fmt, L->id, NULL, n_experts);
    f->w1 = di_xcalloc((size_t)n_experts, sizeof(di_weight));
    f->w2 = di_xcalloc((size_t)n_experts, sizeof(di_weight));
    f->w3 = di_xcalloc((size_t)n_experts, sizeof(di_weight));
    for (int e = 0; e < n_experts; e++) {
        char q[160];
        snprintf(q, sizeof q, "%sffn.experts.%d.w1", p, e);
        f->w1[e] = bind_weight(b, q, L->id);
        snprintf(q, sizeof q, "%sffn.experts.%d.w2", p, e);
        f->w2[e] = bind_weight(b, q, L->id);
        snprintf(q, sizeof q, "%sffn.experts.%d.w3", p, e);
        f->w3[e] = bind_weight(b, q, L->id);
    }
    snprintf(fmt, sizeof fmt, "%sffn.shared_experts.w1", p);
    f->sh_w1 = bind_weight(b, fmt, L->id);
    snprintf(fmt, sizeof fmt, "%sffn.shared_experts.w2", p);
    f->sh_w2 = bind_weight(b, fmt, L->id);
    snprintf(fmt, sizeof fmt, "%sffn.shared_experts.w3", p);
    f->sh_w3 = bind_weight(b, fmt, L->id);
}

static void bind_engram(binder *b, di_model *m, di_layer *L) {
    const di_config *c = &m->cfg;
    di_engram_weights *e = &L->engram;
    char name[128];
    snprintf(name, sizeof name, "layers.%d.engram.embed.weight", L->id);
    const di_tensor *t = find(b, name);
    if (t) {
        e->table = t->data;
        e->rows = t->shape[0];
    }
    snprintf(name, sizeof name, "layers.%d.engram.embed.scale", L->id);
    t = find(b, name);
    if (t) e->table_scale = t->data;
    e->wkv = bind_weight(b, "layers.%d.engram.wkv", L->id);
    const void *q = bind_raw(b, "layers.%d.engram.q_weight", L->id);
    const void *k = bind_raw(b, "layers.%d.engram.k_weight", L->id);
    if (b->st) return;
    const int64_t n = (int64_t)c->hc_mult * c->hidden_size;
    e->qk = di_xmalloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++)
        e->qk[i] = di_bf16_load((const uint8_t *)q + 2 * i) * di_bf16_load((const uint8_t *)k + 2 * i);
}

static void bind_layer(binder *b, di_model *m, int id) {
    const di_config *c = &m->cfg;
    di_layer *L = &m->layers[id];
    L->id = id;
    L->is_dspark = id >= c->num_hidden_layers;
    L->ratio = c->compress_ratios[id];
    L->is_kv_source = di_config_is_kv_source(c, id);
    L->is_index_source = di_config_is_index_source(c, id);
    L->is_candidate_source = id == c->candidate_source_layer_id;
    L->uses_candidates = L->is_index_source && id > c->candidate_source_layer_id;
    L->kv_owner = L->ratio ? di_config_kv_owner(c, id) : -1;
    L->index_owner = L->ratio ? di_config_index_owner(c, id) : -1;
    L->kv_slot = L->index_slot = -1;
    for (int i = 0; i < c->n_kv_sources; i++)
        if (c->kv_source_layer_ids[i] == L->kv_owner) L->kv_slot = i;
    for (int i = 0; i < c->n_index_sources; i++)
        if (c->index_source_layer_ids[i] == L->index_owner) L->index_slot = i;
    L->engram_slot = L->is_dspark ? -1 : di_config_engram_slot(c, id);

    char p[32];
    if (L->is_dspark) snprintf(p, sizeof p, "mtp.%d.", id - c->num_hidden_layers);
    else snprintf(p, sizeof p, "layers.%d.", id);
    char fmt[96];
    const int n_mix = c->hc_mult * (c->hc_mult + 2);
#define P(suffix) (snprintf(fmt, sizeof fmt, "%s%s", p, suffix), fmt)
    L->attn_norm = bind_raw(b, P("attn_norm.weight"), id);
    L->ffn_norm = bind_raw(b, P("ffn_norm.weight"), id);
    L->hc_attn_fn = bind_raw(b, P("hc_attn_fn"), id);
    L->hc_ffn_fn = bind_raw(b, P("hc_ffn_fn"), id);
    bind_f32_copy(b, P("hc_attn_base"), id, L->hc_attn_base, n_mix);
    bind_f32_copy(b, P("hc_ffn_base"), id, L->hc_ffn_base, n_mix);
    bind_f32_copy(b, P("hc_attn_scale"), id, L->hc_attn_scale, 3);
    bind_f32_copy(b, P("hc_ffn_scale"), id, L->hc_ffn_scale, 3);
#undef P
    bind_attention(b, m, L, p);
    if (L->is_dspark) bind_ffn(b, L, p, c->dspark_n_routed_experts, c->dspark_num_experts_per_tok);
    else bind_ffn(b, L, p, c->n_routed_experts, c->num_experts_per_tok);
    if (L->engram_slot >= 0) bind_engram(b, m, L);
}

static void bind_dspark(binder *b, di_model *m) {
    const int n = m->cfg.num_hidden_layers;
    (void)n;
    di_dspark_weights *d = &m->dspark;
    d->main_proj = bind_weight(b, "mtp.%d.main_proj", 0);
    d->main_norm = bind_raw(b, "mtp.%d.main_norm.weight", 0);
    const int last = m->cfg.num_nextn_predict_layers - 1;
    d->norm = bind_raw(b, "mtp.%d.norm.weight", last);
    d->markov_embed = bind_weight(b, "mtp.%d.markov_head.embed", last);
    d->markov_head = bind_weight(b, "mtp.%d.markov_head.head", last);
    d->conf_proj = bind_weight(b, "mtp.%d.confidence_head.proj", last);
}

/* RoPE frequencies exactly as the reference's precompute_freqs_cis builds them, in fp32. */
static void build_rope_freqs(di_model *m) {
    const di_config *c = &m->cfg;
    const int dim = c->qk_rope_head_dim;
    for (int kind = 0; kind < 2; kind++) {
        const float base = (float)(kind ? c->compress_rope_theta : c->rope_theta);
        float *f = m->rope_freq[kind];
        for (int i = 0; i < dim / 2; i++) f[i] = 1.0f / powf(base, (float)(2 * i) / (float)dim);
        if (!kind) continue;
        const double orig = c->original_max_position_embeddings;
        double corr_fast = dim * log(orig / (c->beta_fast * 2 * M_PI)) / (2 * log((double)base));
        double corr_slow = dim * log(orig / (c->beta_slow * 2 * M_PI)) / (2 * log((double)base));
        double low = floor(corr_fast), high = ceil(corr_slow);
        if (low < 0) low = 0;
        if (high > dim - 1) high = dim - 1;
        if (low == high) high += 0.001;
        for (int i = 0; i < dim / 2; i++) {
            float ramp = di_clampf(((float)i - (float)low) / (float)(high - low), 0.0f, 1.0f);
            float smooth = 1.0f - ramp;
            f[i] = f[i] / (float)c->rope_factor * (1.0f - smooth) + f[i] * smooth;
        }
    }
}

static di_status load_token_map(di_model *m, const char *dir, di_err *err) {
    char path[4096];
    struct stat st;
    snprintf(path, sizeof path, "%s/tokenizer_stub.json", dir);
    if (stat(path, &st) == 0) return di_engram_token_map_from_stub(path, &m->token_map, err);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    if (stat(path, &st) == 0) return di_engram_token_map_from_tokenizer(path, &m->token_map, err);
    return di_errf(err, DI_EIO, "%s: no tokenizer.json (needed for the Engram token map)", dir);
}

static di_status build_engram(di_model *m, const char *dir, di_err *err) {
    const di_config *c = &m->cfg;
    if (c->n_engram_layers == 0) return DI_OK;
    di_status st = di_engram_consts_init(&m->engram, c->engram_layer_ids, c->n_engram_layers,
                                         c->engram_max_ngram_size, c->engram_n_heads,
                                         c->engram_vocab_size, c->engram_compressed_vocab_size,
                                         c->engram_num_embeddings, err);
    if (st) return di_err_prefix(err, "%s/config.json: engram", dir);
    st = load_token_map(m, dir, err);
    if (st) return st;
    if (m->token_map.vocab_size != c->vocab_size)
        return di_errf(err, DI_EFORMAT, "%s: tokenizer has %d tokens, config vocab_size is %d", dir,
                       m->token_map.vocab_size, c->vocab_size);
    if (m->token_map.n_compressed != c->engram_compressed_vocab_size)
        return di_errf(err, DI_EFORMAT,
                       "%s: Engram token map has %d distinct keys, config engram_compressed_vocab_size "
                       "is %d (tokenizer does not match the model)",
                       dir, m->token_map.n_compressed, c->engram_compressed_vocab_size);
    m->engram_pad_id = di_engram_token_map_get(&m->token_map, c->engram_pad_token_id);
    return DI_OK;
}

static di_status check_forward_limits(const di_config *c, const char *path, di_err *err) {
    struct { const char *field; long value, max; } lim[] = {
        {"head_dim", c->head_dim, DI_FWD_MAX_HEAD_DIM},
        {"index_head_dim", c->index_head_dim, DI_FWD_MAX_HEAD_DIM},
        {"qk_rope_head_dim", c->qk_rope_head_dim, DI_FWD_MAX_ROPE_DIM},
        {"n_routed_experts", c->n_routed_experts, DI_FWD_MAX_EXPERTS},
        {"dspark_n_routed_experts", c->dspark_n_routed_experts, DI_FWD_MAX_EXPERTS},
        {"num_experts_per_tok", c->num_experts_per_tok, DI_FWD_MAX_TOPK_EXPERTS},
        {"dspark_num_experts_per_tok", c->dspark_num_experts_per_tok, DI_FWD_MAX_TOPK_EXPERTS},
        {"hc_mult", c->hc_mult, DI_FWD_MAX_HC},
        {"dspark_block_size", c->dspark_block_size, DI_FWD_MAX_DSPARK_BLOCK},
    };
    for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++)
        if (lim[i].value > lim[i].max)
            return di_errf(err, DI_EUNSUPPORTED, "%s: text_config.%s = %ld is beyond what this engine supports (%ld)",
                           path, lim[i].field, lim[i].value, lim[i].max);
    return DI_OK;
}

di_status di_model_load(di_model **out, const char *dir, di_err *err) {
    *out = NULL;
    di_model *m = di_xcalloc(1, sizeof *m);
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    di_status st = di_config_load(&m->cfg, path, err);
    if (!st) st = check_forward_limits(&m->cfg, path, err);
    if (!st) st = di_checkpoint_open(&m->ck, dir, err);
    if (!st) st = di_checkpoint_validate(m->ck, &m->cfg, err);
    if (st) {
        di_model_free(m);
        return st;
    }
    m->ops = &di_cpu_ops;
    m->n_layers = m->cfg.num_hidden_layers;
    m->n_total_layers = m->cfg.num_hidden_layers + m->cfg.num_nextn_predict_layers;
    m->layers = di_xcalloc((size_t)m->n_total_layers, sizeof(di_layer));
    binder b = {m->ck, err, DI_OK};
    m->embed = bind_raw(&b, "embed.weight", 0);
    m->head = bind_weight(&b, "head", 0);
    m->norm = bind_raw(&b, "norm.weight", 0);
    for (int i = 0; i < m->n_total_layers; i++) bind_layer(&b, m, i);
    if (m->cfg.num_nextn_predict_layers > 0) bind_dspark(&b, m);
    st = b.st;
    if (!st) {
        build_rope_freqs(m);
        di_rope_cache_init(m);
        st = build_engram(m, dir, err);
    }
    if (st) {
        di_model_free(m);
        return st;
    }
    *out = m;
    return DI_OK;
}

void di_model_free(di_model *m) {
    if (!m) return;
    if (m->dev_backend) m->dev_backend->detach(m);
    for (int i = 0; m->layers && i < m->n_total_layers; i++) {
        di_layer *L = &m->layers[i];
        free(L->attn.attn_sink);
        free(L->ffn.gate_bias);
        free(L->ffn.gate_bias_vl);
        free(L->ffn.w1);
        free(L->ffn.w2);
        free(L->ffn.w3);
        free(L->engram.qk);
    }
    free(m->layers);
    di_rope_cache_free(m);
    di_engram_token_map_free(&m->token_map);
    di_checkpoint_close(m->ck);
    free(m);
}
