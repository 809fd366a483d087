/* The expected V4.1 tensor inventory (model-spec §5.2), derived from the config alone, and
 * checkpoint validation against it.
 *
 * How it works: `di_tensor_list_for_each` walks the model in a fixed order (globals, backbone layers,
 * DSpark blocks, vision) and emits one di_tensor_spec per tensor. The per-block part is shared by
 * backbone layers and draft blocks; the schedule decides the optional parts (compressor and index
 * keys on KV sources, `wgate` only on ratio-2 KV sources, indexer queries on index sources, Engram on
 * Engram layers). Linear layers go through `emit_fp8` (F8_E4M3 + 32x32-block F8_E8M0 scales) or
 * `emit_fp4` (I8-packed e2m1, two codes per byte, + 1x32 F8_E8M0 scales); routed experts use FP4 when
 * `quantization_config.expert_dtype` is "fp4" and FP8 otherwise (convert.py --expert-dtype fp8).
 *
 * For the released config this yields 96,085 tensors and 510,286,023,000 bytes, the official index's
 * count and metadata.total_size; tests pin both. Validation walks the same list: each expected tensor
 * must be present with its dtype and shape (di_tensor_expect names it, expected and found). Vision
 * tensors may be left out (a text engine never reads them) but are checked when present, in two
 * all-or-none groups: the tower + aligner (`vision.*`, `aligner.*`, shard 1 of the release) and the
 * `image_*` rows (shard 2, next to embed.weight). Any checkpoint tensor the list did not claim is
 * reported by name. */
#include "model/tensor_list.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const di_config *cfg;
    di_tensor_spec_fn fn;
    void *user;
    const char *prefix; /* "layers.N." / "mtp.K." / "" */
    int is_vision;
} emitter;

static void emit(emitter *e, di_dtype dt, int ndim, int64_t d0, int64_t d1, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static void emit(emitter *e, di_dtype dt, int ndim, int64_t d0, int64_t d1, const char *fmt, ...) {
    di_tensor_spec s;
    memset(&s, 0, sizeof s);
    int n = snprintf(s.name, sizeof s.name, "%s", e->prefix);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s.name + n, sizeof s.name - (size_t)n, fmt, ap);
    va_end(ap);
    s.dtype = dt;
    s.ndim = ndim;
    s.shape[0] = d0;
    s.shape[1] = d1;
    s.is_vision = e->is_vision;
    e->fn(&s, e->user);
}

static int64_t ceil32(int64_t x) { return (x + 31) / 32; }

/* FP8 linear `name` ([out, in]) with its 32x32 block scales. */
static void emit_fp8(emitter *e, const char *name, int64_t out, int64_t in) {
    emit(e, DI_DT_F8_E4M3, 2, out, in, "%s.weight", name);
    emit(e, DI_DT_F8_E8M0, 2, ceil32(out), ceil32(in), "%s.scale", name);
}

/* FP4 linear: I8 [out, in/2] (low nibble = even element) with 1x32 scales [out, in/32]. */
static void emit_fp4(emitter *e, const char *name, int64_t out, int64_t in) {
    emit(e, DI_DT_I8, 2, out, in / 2, "%s.weight", name);
    emit(e, DI_DT_F8_E8M0, 2, out, ceil32(in), "%s.scale", name);
}

static void emit_bf16(emitter *e, const char *name, int64_t d0, int64_t d1) {
    emit(e, DI_DT_BF16, d1 ? 2 : 1, d0, d1, "%s", name);
}

static void emit_f32(emitter *e, const char *name, int64_t d0, int64_t d1) {
    emit(e, DI_DT_F32, d1 ? 2 : 1, d0, d1, "%s", name);
}

/* Norms, mHC parameters and the attention every block has (21 tensors). */
static void emit_block_attention(emitter *e) {
    const di_config *c = e->cfg;
    int64_t D = c->hidden_size, H = c->num_attention_heads, Dh = c->head_dim, G = c->o_groups;
    int64_t mix = (int64_t)(2 + c->hc_mult) * c->hc_mult; /* pre, post, and the hc x hc comb */
    emit_bf16(e, "attn_norm.weight", D, 0);
    emit_bf16(e, "ffn_norm.weight", D, 0);
    const char *sub[2] = {"attn", "ffn"};
    for (int i = 0; i < 2; i++) {
        emit(e, DI_DT_F32, 2, mix, (int64_t)c->hc_mult * D, "hc_%s_fn", sub[i]);
        emit(e, DI_DT_F32, 1, mix, 0, "hc_%s_base", sub[i]);
        emit(e, DI_DT_F32, 1, 3, 0, "hc_%s_scale", sub[i]);
    }
    emit_f32(e, "attn.attn_sink", H, 0);
    emit_fp8(e, "attn.wq_a", c->q_lora_rank, D);
    emit_bf16(e, "attn.q_norm.weight", c->q_lora_rank, 0);
    emit_fp8(e, "attn.wq_b", H * Dh, c->q_lora_rank);
    emit_fp8(e, "attn.wkv", Dh, D);
    emit_bf16(e, "attn.kv_norm.weight", Dh, 0);
    emit_fp8(e, "attn.wo_a", G * c->o_lora_rank, H * Dh / G);
    emit_fp8(e, "attn.wo_b", D, G * c->o_lora_rank);
}

/* Compressor and index keys on KV sources; indexer queries on index sources. */
static void emit_layer_sources(emitter *e, int layer) {
    const di_config *c = e->cfg;
    int64_t D = c->hidden_size, Dh = c->head_dim, Di = c->index_head_dim;
    if (di_config_is_kv_source(c, layer)) {
        emit_bf16(e, "attn.compressor.wkv.weight", Dh, D);
        if (di_config_compress_ratio(c, layer) == 2) emit_bf16(e, "attn.compressor.wgate.weight", Dh, D);
        emit_bf16(e, "attn.compressor.norm.weight", Dh, 0);
        emit_bf16(e, "attn.indexer.wk.weight", Di, Dh);
        emit_bf16(e, "attn.indexer.k_norm.weight", Di, 0);
    }
    if (di_config_is_index_source(c, layer)) {
        emit_fp8(e, "attn.indexer.wq_b", (int64_t)c->index_n_heads * Di, c->q_lora_rank);
        emit_bf16(e, "attn.indexer.weights_proj.weight", c->index_n_heads, D);
    }
}

/* Router, routed experts (n_experts x 6 tensors) and the shared expert (9 + 6n tensors). */
static void emit_block_moe(emitter *e, int n_experts) {
    const di_config *c = e->cfg;
    int64_t D = c->hidden_size, I = c->moe_intermediate_size, Is = I * c->n_shared_experts;
    emit_bf16(e, "ffn.gate.weight", n_experts, D);
    emit_f32(e, "ffn.gate.bias", n_experts, 0);
    emit_f32(e, "ffn.gate.bias_vl", n_experts, 0);
    void (*lin)(emitter *, const char *, int64_t, int64_t) = c->expert_fp4 ? emit_fp4 : emit_fp8;
    char name[64];
    for (int x = 0; x < n_experts; x++) {
        snprintf(name, sizeof name, "ffn.experts.%d.w1", x);
        lin(e, name, I, D);
        snprintf(name, sizeof name, "ffn.experts.%d.w2", x);
        lin(e, name, D, I);
        snprintf(name, sizeof name, "ffn.experts.%d.w3", x);
        lin(e, name, I, D);
    }
    emit_fp8(e, "ffn.shared_experts.w1", Is, D);
    emit_fp8(e, "ffn.shared_experts.w2", D, Is);
    emit_fp8(e, "ffn.shared_experts.w3", Is, D);
}

/* Engram module of one Engram layer (6 tensors). */
static void emit_engram(emitter *e, int slot) {
    const di_config *c = e->cfg;
    int64_t D = c->hidden_size, rows = c->engram_num_embeddings[slot], Ed = c->engram_head_dim;
    int64_t cols = (int64_t)(c->engram_max_ngram_size - 1) * c->engram_n_heads; /* hashed rows per token */
    emit(e, DI_DT_F8_E4M3, 2, rows, Ed, "engram.embed.weight");
    emit(e, DI_DT_F8_E8M0, 2, rows, ceil32(Ed), "engram.embed.scale");
    emit_fp8(e, "engram.wkv", (int64_t)(c->hc_mult + 1) * D, cols * Ed); /* hc_mult keys + 1 value */
    emit_bf16(e, "engram.q_weight", c->hc_mult, D);
    emit_bf16(e, "engram.k_weight", c->hc_mult, D);
}

/* DSpark stage tensors: main_proj/main_norm on the first block; head parts on the last. */
static void emit_dspark_extras(emitter *e, int k) {
    const di_config *c = e->cfg;
    int64_t D = c->hidden_size, R = c->dspark_markov_rank;
    if (k == 0) {
        emit_fp8(e, "main_proj", D, (int64_t)c->n_dspark_targets * D);
        emit_bf16(e, "main_norm.weight", D, 0);
    }
    if (k == c->num_nextn_predict_layers - 1) {
        emit_bf16(e, "norm.weight", D, 0);
        emit_bf16(e, "markov_head.embed.weight", c->vocab_size, R);
        emit_bf16(e, "markov_head.head.weight", c->vocab_size, R);
        emit_bf16(e, "confidence_head.proj.weight", 1, D + R);
    }
}

static void emit_vision(emitter *e) {
    const di_config *c = e->cfg;
    int64_t D = c->hidden_size, V = c->vision_hidden_size, I = c->vision_intermediate_size;
    int64_t P = c->vision_patch_size, R = c->vision_downsample_ratio;
    char p[64];
    e->is_vision = 1;
    e->prefix = p;
    for (int b = 0; b < c->vision_num_hidden_layers; b++) {
        snprintf(p, sizeof p, "vision.blocks.%d.", b);
        emit_bf16(e, "attn.wqkv.weight", 3 * V, V);
        emit_bf16(e, "attn.wqkv.bias", 3 * V, 0);
        emit_bf16(e, "attn.wo.weight", V, V);
        emit_bf16(e, "attn.wo.bias", V, 0);
        emit_bf16(e, "mlp.w1.weight", 2 * I, V); /* gate and up fused */
        emit_bf16(e, "mlp.w2.weight", V, I);
        emit_bf16(e, "norm1.weight", V, 0);
        emit_bf16(e, "norm2.weight", V, 0);
    }
    e->prefix = "";
    emit_bf16(e, "vision.norm.weight", V, 0);
    emit_bf16(e, "vision.patch_embed.proj.weight", V, 3 * P * P);
    emit_bf16(e, "vision.patch_embed.proj.bias", V, 0);
    emit_bf16(e, "aligner.w1.weight", D, V * R * R); /* after the R x R pixel unshuffle */
    emit_bf16(e, "aligner.w1.bias", D, 0);
    emit_bf16(e, "aligner.w2.weight", D, D);
    emit_bf16(e, "aligner.w2.bias", D, 0);
}

void di_tensor_list_for_each(const di_config *cfg, di_tensor_spec_fn fn, void *user) {
    emitter e = {cfg, fn, user, "", 0};
    int64_t D = cfg->hidden_size;
    bool vision = cfg->vision_num_hidden_layers > 0;
    emit_bf16(&e, "embed.weight", cfg->vocab_size, D);
    emit_bf16(&e, "norm.weight", D, 0);
    emit_bf16(&e, "head.weight", cfg->vocab_size, D);
    if (vision) {
        e.is_vision = 1;
        emit_bf16(&e, "image_start", D, 0);
        emit_bf16(&e, "image_end", D, 0);
        emit_bf16(&e, "image_newline", D, 0);
        e.is_vision = 0;
    }
    char p[64];
    e.prefix = p;
    for (int l = 0; l < cfg->num_hidden_layers; l++) {
        snprintf(p, sizeof p, "layers.%d.", l);
        emit_block_attention(&e);
        emit_layer_sources(&e, l);
        emit_block_moe(&e, cfg->n_routed_experts);
        int slot = di_config_engram_slot(cfg, l);
        if (slot >= 0) emit_engram(&e, slot);
    }
    for (int k = 0; k < cfg->num_nextn_predict_layers; k++) {
        snprintf(p, sizeof p, "mtp.%d.", k);
        emit_block_attention(&e);
        emit_block_moe(&e, cfg->dspark_n_routed_experts);
        emit_dspark_extras(&e, k);
    }
    e.prefix = "";
    if (vision) emit_vision(&e);
}

static void count_one(const di_tensor_spec *s, void *user) {
    (void)s;
    (*(size_t *)user)++;
}

size_t di_tensor_list_count(const di_config *cfg) {
    size_t n = 0;
    di_tensor_list_for_each(cfg, count_one, &n);
    return n;
}

typedef struct {
    const di_checkpoint *ck;
    di_err *err;
    di_status st;
    unsigned char *claimed; /* per checkpoint tensor: matched by an expected spec */
    /* vision groups: [0] the tower and aligner, [1] the image_* embeddings; each all or none */
    size_t n_vision[2], n_vision_present[2];
    char first_missing_vision[2][160];
} validator;

static void validate_one(const di_tensor_spec *s, void *user) {
    validator *v = user;
    if (v->st != DI_OK) return;
    const di_tensor *t = di_checkpoint_find(v->ck, s->name);
    if (s->is_vision) {
        int g = !strncmp(s->name, "image_", 6);
        v->n_vision[g]++;
        if (!t) {
            if (!v->first_missing_vision[g][0]) snprintf(v->first_missing_vision[g], 160, "%s", s->name);
            return;
        }
        v->n_vision_present[g]++;
    }
    v->st = di_tensor_expect(v->ck, s->name, s->dtype, s->ndim, s->shape, &t, v->err);
    if (t) v->claimed[t - di_checkpoint_at(v->ck, 0)] = 1;
}

di_status di_checkpoint_validate(const di_checkpoint *ck, const di_config *cfg, di_err *err) {
    size_t n = di_checkpoint_count(ck);
    validator v = {.ck = ck, .err = err, .st = DI_OK, .claimed = di_xcalloc(n ? n : 1, 1)};
    di_tensor_list_for_each(cfg, validate_one, &v);
    for (int g = 0; g < 2 && v.st == DI_OK; g++)
        if (v.n_vision_present[g] && v.n_vision_present[g] < v.n_vision[g])
            v.st = di_errf(err, DI_EFORMAT, "%s: missing from the checkpoint, which holds %zu of the %zu %s "
                           "tensors (expected all or none)", v.first_missing_vision[g], v.n_vision_present[g],
                           v.n_vision[g], g ? "image_*" : "vision tower / aligner");
    for (size_t i = 0; v.st == DI_OK && i < n; i++)
        if (!v.claimed[i]) {
            const di_tensor *t = di_checkpoint_at(ck, i);
            v.st = di_errf(err, DI_EFORMAT, "%s: unexpected tensor (not in the V4.1 inventory for this "
                           "config.json)", t->name);
        }
    free(v.claimed);
    return v.st;
}
