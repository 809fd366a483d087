/* The bundled demonstration model (see demo_model.h): config, random weights, tokenizer files.
 *
 * How it works. The config is the v41-tiny fixture's architecture with the real vocabulary; its
 * engram_num_embeddings are derived by di_engram_consts_init, as the loader will check them.
 * Variants for tests (di_demo_model_write_dims) change hidden_size and moe_intermediate_size alone:
 * every tensor's shape and fan-in follow from the config, so the same rules draw their weights. The
 * weights are written through the shared checkpoint writer (synthetic_checkpoint.c) as one
 * `model.safetensors`, with `demo_fill` producing each tensor's bytes in inventory order.
 *
 * Values follow the fixture's recipe (tests/data/v41-tiny/README.md, "Weight statistics"): linear
 * weights N(0, gain^2/fan_in) with the fixture's gains, norms around the listed means with a 10%
 * spread, embeddings std 1, head std 2/sqrt(hidden), and so on (table `k_rules`). FP8 weights get a
 * random power of two in {1/2, 1, 2} per 32x32 block before quantisation to e4m3 with the block's
 * e8m0 scale (the smallest power of two that keeps the block within +-448); FP4 experts hold uniform
 * e2m1 codes with per-32 scales 2^round(log2(gain/sqrt(fan_in)/2.93)) times such a factor (2.93 is the
 * RMS of the e2m1 grid); Engram tables are N(0, 0.5^2) times a power of two per 32 values, quantised
 * per row and 32 columns. A weight's scale tensor follows it in the inventory, so the scale computed
 * with the weight is kept until its turn comes.
 *
 * Determinism: every tensor has its own xoshiro256** stream seeded (splitmix64) from a fixed seed
 * and the FNV-1a hash of its name, so the bytes do not depend on order or platform. Normals are the
 * sum of four 16-bit uniforms, centred and scaled (Irwin-Hall, close to normal, bounded at +-3.46
 * sigma): only integer and correctly rounded IEEE arithmetic, no libm transcendentals, so every
 * machine produces the same files. */
#include "model/demo_model.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/numerics.h"
#include "model/engram_consts.h"
#include "model/synthetic_checkpoint.h"

/* No fused multiply-add: a contracted a + b * c rounds once instead of twice, which would change
 * bytes between compilers. GCC does not contract in ISO C mode (-std=c11) and ignores the pragma. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define DEMO_SEED 0x64656d6f41ull /* "demoA" */
#define DEMO_DIRNAME "demo-v1"    /* cache subdirectory; pairs with DI_DEMO_MODEL_VERSION */

/* ---------------------------------------------------------------------------------------------
 * Config */

/* The fixture's config with the real vocabulary, special ids and a longer context. The two %d
 * receive hidden_size and moe_intermediate_size (64 and 96 in the demo model itself), %s the
 * engram_num_embeddings list. */
static const char k_config_template[] =
    "{\n"
    "  \"architectures\": [\"DeepseekV41ForCausalLM\"],\n"
    "  \"model_type\": \"deepseek_v41\",\n"
    "  \"dtype\": \"bfloat16\",\n"
    "  \"deepinfer_demo_model\": \"" DI_DEMO_MODEL_VERSION
    ": random weights, real V4.1 layout and tokenizer; not a trained model\",\n"
    "  \"bos_token_id\": 0,\n"
    "  \"eos_token_id\": 1,\n"
    "  \"pad_token_id\": 2,\n"
    "  \"image_token_id\": 129264,\n"
    "  \"quantization_config\": {\"quant_method\": \"fp8\", \"activation_scheme\": \"dynamic\",\n"
    "    \"weight_block_size\": [32, 32], \"scale_fmt\": \"ue8m0\", \"expert_dtype\": \"fp4\"},\n"
    "  \"text_config\": {\n"
    "    \"model_type\": \"deepseek_v41_text\",\n"
    "    \"vocab_size\": 129280,\n"
    "    \"hidden_size\": %d,\n"
    "    \"moe_intermediate_size\": %d,\n"
    "    \"num_hidden_layers\": 12,\n"
    "    \"num_attention_heads\": 4,\n"
    "    \"num_key_value_heads\": 1,\n"
    "    \"head_dim\": 64,\n"
    "    \"qk_rope_head_dim\": 16,\n"
    "    \"q_lora_rank\": 96,\n"
    "    \"o_lora_rank\": 48,\n"
    "    \"o_groups\": 2,\n"
    "    \"hidden_act\": \"silu\",\n"
    "    \"swiglu_limit\": 0.94,\n"
    "    \"rms_norm_eps\": 1e-20,\n"
    "    \"attention_bias\": false,\n"
    "    \"attention_dropout\": 0.0,\n"
    "    \"initializer_range\": 0.02,\n"
    "    \"use_cache\": true,\n"
    "    \"tie_word_embeddings\": false,\n"
    "    \"max_position_embeddings\": 65536,\n"
    "    \"rope_theta\": 10000,\n"
    "    \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 8, \"beta_fast\": 32, \"beta_slow\": 1,\n"
    "      \"original_max_position_embeddings\": 32},\n"
    "    \"n_routed_experts\": 16,\n"
    "    \"n_shared_experts\": 1,\n"
    "    \"num_experts_per_tok\": 4,\n"
    "    \"scoring_func\": \"sqrtsoftplus\",\n"
    "    \"topk_method\": \"noaux_tc\",\n"
    "    \"norm_topk_prob\": true,\n"
    "    \"routed_scaling_factor\": 1.5,\n"
    "    \"sliding_window\": 16,\n"
    "    \"compress_ratios\": [0, 0, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0, 0],\n"
    "    \"compress_rope_theta\": 160000,\n"
    "    \"kv_source_layer_ids\": [2, 4, 6],\n"
    "    \"index_source_layer_ids\": [2, 4, 6, 8, 10],\n"
    "    \"index_n_heads\": 8,\n"
    "    \"index_head_dim\": 32,\n"
    "    \"index_topk\": 8,\n"
    "    \"candidate_source_layer_id\": 6,\n"
    "    \"candidate_topk_blocks\": 3,\n"
    "    \"candidate_block_size\": 4,\n"
    "    \"hc_mult\": 4,\n"
    "    \"hc_sinkhorn_iters\": 20,\n"
    "    \"hc_eps\": 1e-06,\n"
    "    \"engram_layer_ids\": [1, 4],\n"
    "    \"engram_num_embeddings\": [%s],\n"
    "    \"engram_max_ngram_size\": 4,\n"
    "    \"engram_vocab_size\": 1000,\n"
    "    \"engram_n_heads\": 4,\n"
    "    \"engram_head_dim\": 32,\n"
    "    \"engram_pad_token_id\": 2,\n"
    "    \"engram_compressed_vocab_size\": 99092,\n"
    "    \"num_nextn_predict_layers\": 3,\n"
    "    \"dspark_block_size\": 5,\n"
    "    \"dspark_noise_token_id\": 128799,\n"
    "    \"dspark_target_layer_ids\": [9, 10, 11],\n"
    "    \"dspark_markov_rank\": 32,\n"
    "    \"dspark_n_routed_experts\": 8,\n"
    "    \"dspark_num_experts_per_tok\": 2\n"
    "  },\n"
    "  \"vision_config\": {\"model_type\": \"deepseek_v41_vision\", \"num_hidden_layers\": 0,\n"
    "    \"hidden_size\": 1024, \"num_attention_heads\": 16, \"intermediate_size\": 2816,\n"
    "    \"patch_size\": 14, \"rope_theta\": 10000, \"downsample_ratio\": 3, \"max_image_tokens\": 1024,\n"
    "    \"min_pixels\": 295936, \"max_wh_ratio\": null}\n"
    "}\n";

/* Engram settings of the template (the loader derives the same constants from the config). */
static const int k_engram_layers[2] = {1, 4};
enum { ENGRAM_MAX_NGRAM = 4, ENGRAM_HEADS = 4, ENGRAM_VOCAB = 1000, COMPRESSED_VOCAB = 99092 };

static bool dims_valid(const di_demo_model_dims *d) {
    return d->hidden_size > 0 && d->hidden_size % 32 == 0 && d->hidden_size <= 1 << 16 &&
           d->moe_intermediate_size > 0 && d->moe_intermediate_size % 32 == 0 && d->moe_intermediate_size <= 1 << 16;
}

di_status di_demo_model_config_json_dims(const di_demo_model_dims *dims, char **out, di_err *err) {
    *out = NULL;
    if (!dims_valid(dims))
        return di_errf(err, DI_EINVAL, "demo model config: hidden_size %d / moe_intermediate_size %d: each must "
                       "be a positive multiple of 32 (at most 65536)", dims->hidden_size, dims->moe_intermediate_size);
    di_engram_consts ec;
    di_status st = di_engram_consts_init(&ec, k_engram_layers, 2, ENGRAM_MAX_NGRAM, ENGRAM_HEADS,
                                         ENGRAM_VOCAB, COMPRESSED_VOCAB, NULL, err);
    if (st) return di_err_prefix(err, "demo model config");
    char rows[64];
    snprintf(rows, sizeof rows, "%lld, %lld", (long long)ec.layer[0].num_rows,
             (long long)ec.layer[1].num_rows);
    size_t cap = sizeof k_config_template + sizeof rows + 16; /* + the two widths' digits */
    *out = di_xmalloc(cap);
    snprintf(*out, cap, k_config_template, dims->hidden_size, dims->moe_intermediate_size, rows);
    return DI_OK;
}

di_status di_demo_model_config_json(char **out, di_err *err) {
    return di_demo_model_config_json_dims(&DI_DEMO_MODEL_DIMS, out, err);
}

/* ---------------------------------------------------------------------------------------------
 * Random numbers */

typedef struct {
    uint64_t s[4];
} rng;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* One stream per (tensor name, purpose). */
static void rng_seed(rng *r, const char *name, const char *purpose) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (const char *p = name; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    h = (h ^ '#') * 0x100000001b3ull;
    for (const char *p = purpose; *p; p++) h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    h ^= DEMO_SEED;
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&h);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(rng *r) { /* xoshiro256** */
    uint64_t *s = r->s, result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

static double rng_uniform(rng *r) { return (double)(rng_next(r) >> 11) * 0x1p-53; } /* [0, 1) */

/* Approximately N(0, 1): four 16-bit uniforms summed, centred, scaled to unit variance. */
static double rng_normal(rng *r) {
    static const double var4 = 4.0 * (65536.0 * 65536.0 - 1.0) / 12.0; /* of the sum */
    uint64_t x = rng_next(r);
    double sum = (double)(x & 0xffff) + (double)((x >> 16) & 0xffff) + (double)((x >> 32) & 0xffff) +
                 (double)(x >> 48);
    return (sum - 2.0 * 65535.0) / sqrt(var4);
}

/* 1/2, 1 or 2, equally likely (up to a 2^-64 bias). */
static float rng_pow2_factor(rng *r) {
    static const float f[3] = {0.5f, 1.0f, 2.0f};
    return f[rng_next(r) % 3];
}

/* ---------------------------------------------------------------------------------------------
 * Number formats */

/* e4m3 bits of a value already on the e4m3 grid with |q| <= 448. */
static uint8_t e4m3_bits(float q) {
    uint8_t sign = signbit(q) ? 0x80 : 0;
    float a = fabsf(q);
    if (a == 0.0f) return sign;
    int e;
    float m = frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    uint8_t b;
    if (e - 1 < -6) b = (uint8_t)(a * 512.0f); /* subnormal: a = k * 2^-9 */
    else b = (uint8_t)(((e - 1 + 7) << 3) | (int)((2.0f * m - 1.0f) * 8.0f));
    b |= sign;
    assert(di_e4m3_to_f32(b) == q);
    return b;
}

/* e8m0 byte of a power of two. */
static uint8_t e8m0_bits(float pow2) {
    int e;
    frexpf(pow2, &e); /* pow2 = 0.5 * 2^e */
    assert(e - 1 + 127 >= 1 && e - 1 + 127 <= 254);
    return (uint8_t)(e - 1 + 127);
}

/* 2^round(log2(x)) for x > 0, without log2: round up when the mantissa is at least 1/sqrt(2). */
static float pow2_round(double x) {
    int e;
    double m = frexp(x, &e); /* x = m * 2^e, m in [0.5, 1) */
    return ldexpf(1.0f, m * m >= 0.5 ? e : e - 1);
}

/* Quantises vals [n] (one block, gathered by the caller) to e4m3 codes [n] with one scale: the
 * smallest power of two that maps the block's amax into +-448. Returns the scale. */
static float quant_e4m3_group(const float *vals, int n, uint8_t *codes) {
    float amax = 0.0f;
    for (int i = 0; i < n; i++) amax = fmaxf(amax, fabsf(vals[i]));
    float scale = amax > 0.0f ? di_pow2_ceil(amax / 448.0f) : 1.0f;
    for (int i = 0; i < n; i++)
        codes[i] = e4m3_bits(di_clampf(di_e4m3_rne(vals[i] / scale), -448.0f, 448.0f));
    return scale;
}

/* ---------------------------------------------------------------------------------------------
 * Generation rules */

typedef enum {
    R_GAIN,    /* N(0, (a / sqrt(fan_in))^2), fan_in = last dim */
    R_STD,     /* N(b, a^2) */
    R_NORM,    /* N(a, (a * b)^2): norm weights, mean a with relative spread b */
    R_UNIFORM, /* U(a, b) */
} rule_kind;

typedef struct {
    const char *key; /* name without layers.N. / mtp.K. / experts.E. / .weight */
    rule_kind kind;
    double a, b;
} rule;

/* The fixture's recipe (tests/data/v41-tiny/README.md, "Weight statistics"). */
static const rule k_rules[] = {
    {"embed", R_STD, 1.0, 0.0},
    {"head", R_GAIN, 2.0, 0.0},
    {"norm", R_NORM, 1.0, 0.1},
    {"attn_norm", R_NORM, 0.025, 0.1},
    {"ffn_norm", R_NORM, 0.2, 0.1},
    {"hc_attn_fn", R_GAIN, 1.0, 0.0},
    {"hc_ffn_fn", R_GAIN, 1.0, 0.0},
    {"hc_attn_base", R_STD, 0.5, 0.0},
    {"hc_ffn_base", R_STD, 0.5, 0.0},
    {"hc_attn_scale", R_UNIFORM, 0.3, 1.0},
    {"hc_ffn_scale", R_UNIFORM, 0.3, 1.0},
    {"attn.attn_sink", R_STD, 1.0, 1.0},
    {"attn.wq_a", R_GAIN, 1.6, 0.0},
    {"attn.q_norm", R_NORM, 0.97, 0.1},
    {"attn.wq_b", R_GAIN, 0.95, 0.0},
    {"attn.wkv", R_GAIN, 1.8, 0.0},
    {"attn.kv_norm", R_NORM, 0.4, 0.1},
    {"attn.wo_a", R_GAIN, 1.6, 0.0},
    {"attn.wo_b", R_GAIN, 0.2, 0.0},
    {"attn.compressor.wkv", R_GAIN, 1.8, 0.0},
    {"attn.compressor.wgate", R_GAIN, 40.0, 0.0},
    {"attn.compressor.norm", R_NORM, 0.6, 0.1},
    {"attn.indexer.wk", R_GAIN, 1.0, 0.0},
    {"attn.indexer.k_norm", R_NORM, 0.5, 0.1},
    {"attn.indexer.wq_b", R_GAIN, 1.0, 0.0},
    {"attn.indexer.weights_proj", R_GAIN, 1.0, 0.0},
    {"ffn.gate", R_GAIN, 2.9, 0.0},
    {"ffn.gate.bias", R_STD, 0.08, 0.0},
    {"ffn.gate.bias_vl", R_STD, 0.08, 0.0},
    {"ffn.experts.w1", R_GAIN, 1.5, 0.0},
    {"ffn.experts.w2", R_GAIN, 0.6, 0.0},
    {"ffn.experts.w3", R_GAIN, 1.5, 0.0},
    {"ffn.shared_experts.w1", R_GAIN, 1.5, 0.0},
    {"ffn.shared_experts.w2", R_GAIN, 0.6, 0.0},
    {"ffn.shared_experts.w3", R_GAIN, 1.5, 0.0},
    {"engram.embed", R_STD, 0.5, 0.0},
    {"engram.wkv", R_GAIN, 0.2, 0.0},
    {"engram.q_weight", R_NORM, 1.0, 0.3},
    {"engram.k_weight", R_NORM, 1.0, 0.3},
    {"main_proj", R_GAIN, 1.0, 0.0},
    {"main_norm", R_NORM, 1.0, 0.1},
    {"markov_head.embed", R_STD, 1.0, 0.0},
    {"markov_head.head", R_GAIN, 0.5, 0.0},
    {"confidence_head.proj", R_GAIN, 1.0, 0.0},
};

/* Rule key of a tensor name: drops "layers.N." / "mtp.K.", "experts.E." and ".weight"/".scale". */
static void rule_key(const char *name, char *key, size_t cap) {
    int skip = 0, n = 0;
    sscanf(name, "layers.%*d.%n", &skip);
    if (!skip) sscanf(name, "mtp.%*d.%n", &skip);
    snprintf(key, cap, "%s", name + skip);
    char *x = strstr(key, "ffn.experts.");
    if (x) sscanf(x, "ffn.experts.%*d.%n", &n);
    if (n) memmove(x + 12, x + n, strlen(x + n) + 1);
    size_t len = strlen(key);
    if (len > 7 && !strcmp(key + len - 7, ".weight")) key[len - 7] = '\0';
    else if (len > 6 && !strcmp(key + len - 6, ".scale")) key[len - 6] = '\0';
}

static const rule *find_rule(const char *key) {
    for (size_t i = 0; i < sizeof k_rules / sizeof k_rules[0]; i++)
        if (!strcmp(k_rules[i].key, key)) return &k_rules[i];
    return NULL;
}

/* Fills vals [n] (a tensor whose last dim is fan_in) by the rule. */
static void rule_values(const rule *ru, rng *r, int64_t fan_in, float *vals, size_t n) {
    double std = ru->kind == R_GAIN ? ru->a / sqrt((double)fan_in) : ru->a;
    for (size_t i = 0; i < n; i++) {
        double v;
        switch (ru->kind) {
        case R_GAIN: v = std * rng_normal(r); break;
        case R_STD: v = ru->b + std * rng_normal(r); break;
        case R_NORM: v = ru->a + ru->a * ru->b * rng_normal(r); break;
        default: v = ru->a + (ru->b - ru->a) * rng_uniform(r); break;
        }
        vals[i] = (float)v;
    }
}

/* ---------------------------------------------------------------------------------------------
 * Filling tensors */

typedef struct {
    float *vals;           /* scratch [numel] */
    size_t vals_cap;
    char pending[160];     /* name of the weight whose scale is kept */
    uint8_t *scale;        /* e8m0 [scale numel] of `pending` */
    size_t scale_bytes, scale_cap;
} demo_ctx;

static float *ctx_vals(demo_ctx *c, size_t n) {
    if (n > c->vals_cap) {
        c->vals_cap = n;
        c->vals = di_xrealloc(c->vals, n * sizeof(float));
    }
    return c->vals;
}

static uint8_t *ctx_scale(demo_ctx *c, const char *weight_name, size_t n) {
    if (n > c->scale_cap) {
        c->scale_cap = n;
        c->scale = di_xrealloc(c->scale, n);
    }
    snprintf(c->pending, sizeof c->pending, "%s", weight_name);
    c->scale_bytes = n;
    return c->scale;
}

/* FP8 linear [out, in]: per 32x32 block a random factor, then e4m3 with the block's e8m0 scale. */
static void fill_fp8_linear(demo_ctx *c, const rule *ru, const di_tensor_spec *s, uint8_t *codes) {
    const int64_t out = s->shape[0], in = s->shape[1], bo = (out + 31) / 32, bi = (in + 31) / 32;
    float *w = ctx_vals(c, (size_t)(out * in)); /* [out, in] */
    rng r, rb;
    rng_seed(&r, s->name, "values");
    rng_seed(&rb, s->name, "blocks");
    rule_values(ru, &r, in, w, (size_t)(out * in));
    uint8_t *sc = ctx_scale(c, s->name, (size_t)(bo * bi)); /* [bo, bi] */
    float blk[32 * 32];
    uint8_t q[32 * 32];
    for (int64_t i = 0; i < bo; i++)
        for (int64_t j = 0; j < bi; j++) {
            const float f = rng_pow2_factor(&rb);
            int n = 0;
            for (int64_t y = i * 32; y < out && y < i * 32 + 32; y++)
                for (int64_t x = j * 32; x < in && x < j * 32 + 32; x++) blk[n++] = w[y * in + x] * f;
            sc[i * bi + j] = e8m0_bits(quant_e4m3_group(blk, n, q));
            n = 0;
            for (int64_t y = i * 32; y < out && y < i * 32 + 32; y++)
                for (int64_t x = j * 32; x < in && x < j * 32 + 32; x++) codes[y * in + x] = q[n++];
        }
}

/* Engram table [rows, dim]: per 32 values of a row a random factor, e4m3 with one scale each. */
static void fill_engram_table(demo_ctx *c, const rule *ru, const di_tensor_spec *s, uint8_t *codes) {
    const int64_t rows = s->shape[0], dim = s->shape[1], groups = (dim + 31) / 32;
    float *w = ctx_vals(c, (size_t)(rows * dim));
    rng r, rb;
    rng_seed(&r, s->name, "values");
    rng_seed(&rb, s->name, "blocks");
    rule_values(ru, &r, dim, w, (size_t)(rows * dim));
    uint8_t *sc = ctx_scale(c, s->name, (size_t)(rows * groups)); /* [rows, groups] */
    for (int64_t y = 0; y < rows; y++)
        for (int64_t g = 0; g < groups; g++) {
            const int64_t x0 = g * 32, n = dim - x0 < 32 ? dim - x0 : 32;
            float *v = w + y * dim + x0;
            const float f = rng_pow2_factor(&rb);
            for (int64_t k = 0; k < n; k++) v[k] *= f;
            sc[y * groups + g] = e8m0_bits(quant_e4m3_group(v, (int)n, codes + y * dim + x0));
        }
}

/* FP4 expert I8 [out, in/2]: uniform random codes; scales [out, in/32] around the gain's level. */
static void fill_fp4_linear(demo_ctx *c, const rule *ru, const di_tensor_spec *s, uint8_t *codes) {
    const int64_t out = s->shape[0], in = 2 * s->shape[1], groups = (in + 31) / 32;
    rng r, rb;
    rng_seed(&r, s->name, "codes");
    rng_seed(&rb, s->name, "blocks");
    const size_t n = (size_t)(out * s->shape[1]);
    for (size_t i = 0; i < n; i += 8) {
        uint64_t x = rng_next(&r);
        for (size_t k = 0; k < 8 && i + k < n; k++) codes[i + k] = (uint8_t)(x >> (8 * k));
    }
    const float level = pow2_round(ru->a / sqrt((double)in) / 2.93);
    uint8_t *sc = ctx_scale(c, s->name, (size_t)(out * groups));
    for (int64_t i = 0; i < out * groups; i++) sc[i] = e8m0_bits(level * rng_pow2_factor(&rb));
}

/* A scale tensor: the one computed with its weight, which the inventory lists just before it. */
static di_status fill_scale(demo_ctx *c, const di_tensor_spec *s, uint8_t *data, size_t n_bytes,
                            di_err *err) {
    const size_t base = strlen(s->name) - strlen(".scale");
    if (strncmp(c->pending, s->name, base) || strcmp(c->pending + base, ".weight") ||
        c->scale_bytes != n_bytes)
        return di_errf(err, DI_EINTERNAL, "scale does not follow its weight (last weight: %s)",
                       c->pending[0] ? c->pending : "none");
    memcpy(data, c->scale, n_bytes);
    c->pending[0] = '\0';
    return DI_OK;
}

static di_status demo_fill(const di_tensor_spec *s, void *data, size_t n_bytes, void *user,
                           di_err *err) {
    demo_ctx *c = user;
    if (s->dtype == DI_DT_F8_E8M0) return fill_scale(c, s, data, n_bytes, err);
    char key[160];
    rule_key(s->name, key, sizeof key);
    const rule *ru = find_rule(key);
    if (!ru) return di_errf(err, DI_EINTERNAL, "no generation rule (key \"%s\")", key);
    const size_t n = n_bytes / di_dtype_size(s->dtype);
    const int64_t fan_in = s->shape[s->ndim - 1];
    rng r;
    rng_seed(&r, s->name, "values");
    switch (s->dtype) {
    case DI_DT_BF16: {
        float *v = ctx_vals(c, n);
        rule_values(ru, &r, fan_in, v, n);
        uint16_t *o = data;
        for (size_t i = 0; i < n; i++) o[i] = di_f32_to_bf16(v[i]);
        return DI_OK;
    }
    case DI_DT_F32:
        rule_values(ru, &r, fan_in, data, n);
        return DI_OK;
    case DI_DT_F8_E4M3:
        if (s->ndim != 2) break;
        if (!strcmp(key, "engram.embed")) fill_engram_table(c, ru, s, data);
        else fill_fp8_linear(c, ru, s, data);
        return DI_OK;
    case DI_DT_I8:
        if (s->ndim != 2) break;
        fill_fp4_linear(c, ru, s, data);
        return DI_OK;
    default: break;
    }
    return di_errf(err, DI_EINTERNAL, "no generator for dtype %s with %d dims",
                   di_dtype_name(s->dtype), s->ndim);
}

/* ---------------------------------------------------------------------------------------------
 * Files */

#define PATH_CAP 4096
#define DIR_MAX 3968 /* longest directory accepted, so "dir/name" and "dir.tmp-XXXXXX" fit PATH_CAP */

/* out = dir + sep + name; false when it does not fit (never, for a dir of at most DIR_MAX). */
static bool path_join(char *out, const char *dir, const char *sep, const char *name) {
    int n = snprintf(out, PATH_CAP, "%s%s%s", dir, sep, name);
    return n >= 0 && n < PATH_CAP;
}

static di_status write_file(const char *dir, const char *name, const void *data, size_t n,
                            di_err *err) {
    char path[PATH_CAP];
    if (!path_join(path, dir, "/", name)) return di_errf(err, DI_ERANGE, "%s: path too long", dir);
    FILE *f = fopen(path, "wb");
    if (!f) return di_errf(err, DI_EIO, "%s: cannot create (%s)", path, strerror(errno));
    size_t w = fwrite(data, 1, n, f);
    int bad = w != n;
    bad |= fclose(f) != 0;
    if (bad) return di_errf(err, DI_EIO, "%s: write failed", path);
    return DI_OK;
}

static const char k_stamp_text[] =
    DI_DEMO_MODEL_VERSION "\n"
    "This directory is deepinfer's demonstration model: a tiny DeepSeek-V4.1 (hidden 64, 12 layers +\n"
    "3 DSpark blocks) with RANDOM weights, the real V4.1 tensor layout and the real tokenizer. It was\n"
    "generated by deepinfer (src/model/demo_model.c) and may be deleted; it is regenerated on use.\n";

/* The stamp of a variant with other widths: its own version line (never DI_DEMO_MODEL_VERSION, so it
 * is never taken for the cached demo model; its "deepinfer-demo-" prefix lets di_demo_model_ensure
 * replace it like an outdated demo model). */
static void variant_stamp(const di_demo_model_dims *dims, char *out, size_t cap) {
    snprintf(out, cap,
             DI_DEMO_MODEL_VERSION "-hidden%d-inter%d\n"
             "This directory is a variant of deepinfer's demonstration model (hidden %d, moe_intermediate %d)\n"
             "with RANDOM weights, written by deepinfer (src/model/demo_model.c) for tests. It may be deleted.\n",
             dims->hidden_size, dims->moe_intermediate_size, dims->hidden_size, dims->moe_intermediate_size);
}

di_status di_demo_model_write(const char *dir, di_err *err) {
    return di_demo_model_write_dims(dir, &DI_DEMO_MODEL_DIMS, err);
}

di_status di_demo_model_write_dims(const char *dir, const di_demo_model_dims *dims, di_err *err) {
    if (strlen(dir) > DIR_MAX) return di_errf(err, DI_ERANGE, "demo model: directory path too long");
    if (mkdir(dir, 0755) && errno != EEXIST)
        return di_errf(err, DI_EIO, "%s: cannot create directory (%s)", dir, strerror(errno));
    char path[PATH_CAP];
    path_join(path, dir, "/", DI_DEMO_MODEL_STAMP);
    if (unlink(path) && errno != ENOENT)
        return di_errf(err, DI_EIO, "%s: cannot remove (%s)", path, strerror(errno));
    di_numerics_init();
    char *config = NULL;
    di_status st = di_demo_model_config_json_dims(dims, &config, err);
    demo_ctx ctx = {0};
    const di_checkpoint_write_opts opts = {.one_file = true, .fill = demo_fill, .user = &ctx};
    if (!st) st = di_checkpoint_write(dir, config, &opts, NULL, err);
    free(ctx.vals);
    free(ctx.scale);
    free(config);
    size_t n = 0;
    const unsigned char *p = NULL;
    if (!st) {
        p = di_demo_asset_tokenizer_json(&n);
        st = write_file(dir, "tokenizer.json", p, n, err);
    }
    if (!st) {
        p = di_demo_asset_tokenizer_config_json(&n);
        st = write_file(dir, "tokenizer_config.json", p, n, err);
    }
    const bool standard = dims->hidden_size == DI_DEMO_MODEL_DIMS.hidden_size &&
                          dims->moe_intermediate_size == DI_DEMO_MODEL_DIMS.moe_intermediate_size;
    char stamp[512];
    const char *stamp_text = k_stamp_text;
    if (!standard) {
        variant_stamp(dims, stamp, sizeof stamp);
        stamp_text = stamp;
    }
    if (!st) st = write_file(dir, DI_DEMO_MODEL_STAMP, stamp_text, strlen(stamp_text), err);
    if (st) return di_err_prefix(err, "demo model");
    return DI_OK;
}

/* ---------------------------------------------------------------------------------------------
 * The cache */

/* Every file a demo model directory holds; the only names ever removed from one. */
static const char *const k_files[] = {
    "config.json",    "model.safetensors",     "model.safetensors.index.json",
    "tokenizer.json", "tokenizer_config.json", DI_DEMO_MODEL_STAMP,
};
enum { N_FILES = sizeof k_files / sizeof k_files[0] };

/* Version line of the stamp in dir, or "" (none / unreadable). */
static void read_stamp(const char *dir, char *line, size_t cap) {
    char path[PATH_CAP];
    line[0] = '\0';
    if (!path_join(path, dir, "/", DI_DEMO_MODEL_STAMP)) return;
    FILE *f = fopen(path, "rb");
    if (!f) return;
    if (!fgets(line, (int)cap, f)) line[0] = '\0';
    fclose(f);
    line[strcspn(line, "\n")] = '\0';
}

bool di_demo_model_is_current(const char *dir) {
    char line[128];
    read_stamp(dir, line, sizeof line);
    return !strcmp(line, DI_DEMO_MODEL_VERSION);
}

di_status di_demo_model_default_dir(const char *xdg_cache_home, const char *home, char *out,
                                    size_t cap, di_err *err) {
    int n;
    if (xdg_cache_home && xdg_cache_home[0] == '/') /* the XDG spec ignores relative paths */
        n = snprintf(out, cap, "%s/deepinfer/%s", xdg_cache_home, DEMO_DIRNAME);
    else if (home && home[0])
        n = snprintf(out, cap, "%s/.cache/deepinfer/%s", home, DEMO_DIRNAME);
    else
        return di_errf(err, DI_EINVAL,
                       "demo model: no cache directory (neither XDG_CACHE_HOME nor HOME is set; "
                       "pass --demo-model-dir)");
    if (n < 0 || (size_t)n >= cap) return di_errf(err, DI_ERANGE, "demo model: cache path too long");
    return DI_OK;
}

/* mkdir -p of every directory above `path`. */
static di_status make_parents(const char *path, di_err *err) {
    char buf[PATH_CAP];
    path_join(buf, path, "", "");
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) && errno != EEXIST)
            return di_errf(err, DI_EIO, "%s: cannot create directory (%s)", buf, strerror(errno));
        *p = '/';
    }
    return DI_OK;
}

/* Removes the demo files of dir and dir itself if that leaves it empty. */
static void remove_model_dir(const char *dir) {
    char path[PATH_CAP];
    for (int i = 0; i < N_FILES; i++)
        if (path_join(path, dir, "/", k_files[i])) unlink(path);
    rmdir(dir);
}

/* fsync of every file, then of the directory, so the rename publishes complete data. */
static di_status sync_model_dir(const char *dir, di_err *err) {
    char path[PATH_CAP];
    for (int i = 0; i <= N_FILES; i++) {
        if (!path_join(path, dir, i < N_FILES ? "/" : "", i < N_FILES ? k_files[i] : ""))
            return di_errf(err, DI_ERANGE, "%s: path too long", dir);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return di_errf(err, DI_EIO, "%s: cannot open (%s)", path, strerror(errno));
        int bad = fsync(fd) != 0;
        close(fd);
        if (bad) return di_errf(err, DI_EIO, "%s: fsync failed (%s)", path, strerror(errno));
    }
    return DI_OK;
}

/* An existing cache_dir may be replaced if it is empty or holds a demo model (any version). */
static bool replaceable(const char *dir) {
    char line[128];
    read_stamp(dir, line, sizeof line);
    if (!strncmp(line, "deepinfer-demo-", 15)) return true;
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT;
    struct dirent *e;
    bool empty = true;
    while (empty && (e = readdir(d)))
        empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    closedir(d);
    return empty;
}

/* Moves the finished tmp directory to cache_dir, replacing an outdated model there. */
static di_status install(const char *tmp, const char *cache_dir, bool *installed, di_err *err) {
    *installed = false;
    for (int attempt = 0; attempt < 3; attempt++) {
        if (!rename(tmp, cache_dir)) {
            *installed = true;
            return DI_OK;
        }
        if (errno != ENOTEMPTY && errno != EEXIST)
            return di_errf(err, DI_EIO, "%s: cannot rename to %s (%s)", tmp, cache_dir, strerror(errno));
        if (di_demo_model_is_current(cache_dir)) return DI_OK; /* another process won the race */
        if (!replaceable(cache_dir))
            return di_errf(err, DI_EIO, "%s exists and is not a deepinfer demo model; remove it or "
                           "choose another --demo-model-dir", cache_dir);
        char old[PATH_CAP], pid[32];
        snprintf(pid, sizeof pid, "%ld", (long)getpid());
        if (path_join(old, cache_dir, ".old-", pid) && !rename(cache_dir, old)) remove_model_dir(old);
    }
    return di_errf(err, DI_EIO, "%s: could not be replaced", cache_dir);
}

/* fsync of the directory holding `path`, so its new entry survives a crash (best effort: the
 * model is complete either way). */
static void sync_parent(const char *path) {
    char parent[PATH_CAP];
    path_join(parent, path, "", "");
    char *slash = strrchr(parent, '/');
    if (slash && slash != parent) *slash = '\0';
    else strcpy(parent, slash ? "/" : ".");
    int fd = open(parent, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

di_status di_demo_model_ensure(const char *cache_dir, char *dir_out, size_t cap, bool *generated,
                               di_err *err) {
    if (generated) *generated = false;
    if (!cache_dir || !cache_dir[0])
        return di_errf(err, DI_EINVAL, "demo model: empty cache directory");
    if (strlen(cache_dir) + 1 > cap || strlen(cache_dir) > DIR_MAX)
        return di_errf(err, DI_ERANGE, "demo model: cache path too long");
    char dir[PATH_CAP]; /* cache_dir without trailing slashes: the temp copy must be its sibling */
    path_join(dir, cache_dir, "", "");
    for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/'; n--) dir[n - 1] = '\0';
    if (!strcmp(dir, "/")) return di_errf(err, DI_EINVAL, "demo model: cache directory is \"/\"");
    snprintf(dir_out, cap, "%s", dir);
    if (di_demo_model_is_current(dir)) return DI_OK;
    if (!replaceable(dir))
        return di_errf(err, DI_EIO, "%s exists and is not a deepinfer demo model; remove it or "
                       "choose another --demo-model-dir", dir);
    di_status st = make_parents(dir, err);
    if (st) return st;
    char tmp[PATH_CAP];
    path_join(tmp, dir, ".tmp-", "XXXXXX");
    if (!mkdtemp(tmp)) return di_errf(err, DI_EIO, "%s: cannot create (%s)", tmp, strerror(errno));
    bool installed = false;
    st = di_demo_model_write(tmp, err);
    if (!st) st = sync_model_dir(tmp, err);
    if (!st) st = install(tmp, dir, &installed, err);
    if (installed) sync_parent(dir);
    else remove_model_dir(tmp);
    if (generated) *generated = installed;
    return st;
}
