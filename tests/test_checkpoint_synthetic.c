/* The loader against the released config on a synthetic checkpoint: the full V4.1 inventory in the
 * 48-shard release layout, real headers, sparse data. All 96,085 tensors must bind with their names,
 * dtypes and shapes; the byte total must equal the release's metadata.total_size. Also the tiny
 * config sharded the same way (19 shards), which exercises the index path on a second config. */
#include <cjson/cJSON.h>
#include <time.h>

#include "model/synthetic_checkpoint.h"
#include "model/tensor_list.h"
#include "test_checkpoint_util.h"
#include "test_harness.h"

#define RELEASED_CONFIG "tests/data/v41-flash-config/config.json"

typedef struct {
    const di_checkpoint *ck;
    size_t n_specs, n_bound, n_vision;
    char first_bad[160];
} bind_check;

/* Each expected spec must be found with exactly its dtype and shape. */
static void check_bind(const di_tensor_spec *s, void *user) {
    bind_check *b = user;
    b->n_specs++;
    b->n_vision += s->is_vision != 0;
    const di_tensor *t = di_checkpoint_find(b->ck, s->name);
    int ok = t && t->dtype == s->dtype && t->ndim == s->ndim && !strcmp(t->name, s->name);
    for (int i = 0; ok && i < s->ndim; i++) ok = t->shape[i] == s->shape[i];
    if (ok) b->n_bound++;
    else if (!b->first_bad[0]) snprintf(b->first_bad, sizeof b->first_bad, "%s", s->name);
}

static void expect_tensor(const di_checkpoint *ck, const char *name, di_dtype dt, int64_t d0, int64_t d1,
                          const char *shard) {
    int64_t shape[2] = {d0, d1};
    di_err err = {0};
    const di_tensor *t = NULL;
    CHECKF(!di_tensor_expect(ck, name, dt, d1 ? 2 : 1, shape, &t, &err), "%s", err.msg);
    if (t && shard) CHECKF(!strcmp(di_checkpoint_shard_name(ck, t->shard), shard), "%s in %s", name,
                           di_checkpoint_shard_name(ck, t->shard));
}

/* Drops `name` from the header of `shard` (data left as is, sparse) and from the index. */
static void drop_tensor(const char *dir, const char *shard, const char *name) {
    char p[512];
    tu_path(p, sizeof p, dir, shard);
    FILE *f = fopen(p, "rb");
    unsigned char len8[8];
    CHECK(f && fread(len8, 1, 8, f) == 8);
    uint64_t hl = 0, total = 0;
    for (int i = 7; i >= 0; i--) hl = (hl << 8) | len8[i];
    char *text = calloc(1, hl + 1);
    CHECK(fread(text, 1, hl, f) == hl);
    fseek(f, 0, SEEK_END);
    total = (uint64_t)ftell(f);
    fclose(f);
    cJSON *hdr = cJSON_Parse(text);
    cJSON_DeleteItemFromObject(hdr, name);
    char *out = cJSON_PrintUnformatted(hdr);
    size_t nl = strlen(out);
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)nl >> (8 * i));
    f = fopen(p, "wb");
    fwrite(len8, 1, 8, f);
    fwrite(out, 1, nl, f);
    fclose(f);
    CHECK(!truncate(p, (off_t)(8 + nl + (total - 8 - hl))));
    free(out);
    free(text);
    cJSON_Delete(hdr);
    tu_path(p, sizeof p, dir, "model.safetensors.index.json");
    text = tu_read(p, NULL);
    cJSON *ix = cJSON_Parse(text);
    cJSON *wm = cJSON_GetObjectItem(ix, "weight_map");
    cJSON_DeleteItemFromObject(wm, name);
    out = cJSON_PrintUnformatted(ix);
    tu_write(p, out, strlen(out));
    free(out);
    free(text);
    cJSON_Delete(ix);
}

/* Removes a whole shard and its index entries. */
static void drop_shard(const char *dir, const char *shard) {
    char p[512];
    tu_path(p, sizeof p, dir, shard);
    unlink(p);
    tu_path(p, sizeof p, dir, "model.safetensors.index.json");
    char *text = tu_read(p, NULL);
    cJSON *ix = cJSON_Parse(text);
    cJSON *wm = cJSON_GetObjectItem(ix, "weight_map");
    for (cJSON *e = wm->child, *next; e; e = next) {
        next = e->next;
        if (!strcmp(e->valuestring, shard)) cJSON_DeleteItemFromObject(wm, e->string);
    }
    char *out = cJSON_PrintUnformatted(ix);
    tu_write(p, out, strlen(out));
    free(out);
    free(text);
    cJSON_Delete(ix);
}

/* A text engine may drop the vision tower (shard 1); a partial tower is an error naming a tensor. */
static void test_vision_optional(const char *dir, const di_config *cfg) {
    di_err err = {0};
    di_checkpoint *ck = NULL;
    drop_tensor(dir, "model-00001-of-00048.safetensors", "aligner.w2.bias");
    CHECKF(!di_checkpoint_open(&ck, dir, &err), "%s", err.msg);
    CHECK(di_checkpoint_validate(ck, cfg, &err) == DI_EFORMAT);
    CHECKF(!strcmp(err.msg, "aligner.w2.bias: missing from the checkpoint, which holds 262 of the 263 "
                   "vision tower / aligner tensors (expected all or none)"), "%s", err.msg);
    di_checkpoint_close(ck);
    drop_shard(dir, "model-00001-of-00048.safetensors");
    CHECKF(!di_checkpoint_open(&ck, dir, &err), "%s", err.msg);
    CHECK(di_checkpoint_count(ck) == 96085 - 263 && di_checkpoint_shard_count(ck) == 47);
    CHECKF(!di_checkpoint_validate(ck, cfg, &err), "%s", err.msg);
    di_checkpoint_close(ck);
}

static void test_released(void) {
    char *cfg_text = tu_read(RELEASED_CONFIG, NULL);
    CHECK(cfg_text != NULL);
    if (!cfg_text) return;
    char dir[256];
    CHECK(!tu_mkdtemp(dir, sizeof dir, "synth"));
    clock_t t0 = clock();
    di_err err = {0};
    int n_shards = 0;
    di_status st = di_synthetic_checkpoint_write(dir, cfg_text, &n_shards, &err);
    CHECKF(!st, "%s", err.msg);
    CHECK(n_shards == 48);
    unsigned long long disk = tu_disk_bytes(dir);
    CHECKF(disk < 300ull << 20, "synthetic checkpoint uses %llu bytes of disk", disk);

    di_config cfg;
    char cpath[512];
    tu_path(cpath, sizeof cpath, dir, "config.json");
    CHECKF(!(st = di_config_load(&cfg, cpath, &err)), "%s", err.msg);
    CHECK(di_tensor_list_count(&cfg) == 96085);
    di_checkpoint *ck = NULL;
    CHECKF(!(st = di_checkpoint_open(&ck, dir, &err)), "%s", err.msg);
    if (ck) {
        CHECK(di_checkpoint_count(ck) == 96085);
        CHECK(di_checkpoint_shard_count(ck) == 48);
        CHECKF(di_checkpoint_total_bytes(ck) == 510286023000ull, "%llu",
               (unsigned long long)di_checkpoint_total_bytes(ck));
        CHECKF(!di_checkpoint_validate(ck, &cfg, &err), "%s", err.msg);
        bind_check b = {ck, 0, 0, 0, {0}};
        di_tensor_list_for_each(&cfg, check_bind, &b);
        CHECKF(b.n_specs == 96085 && b.n_bound == 96085, "%zu of %zu bound; first bad %s", b.n_bound,
               b.n_specs, b.first_bad);
        CHECK(b.n_vision == 263 + 3);
        expect_tensor(ck, "layers.2.attn.wkv.weight", DI_DT_F8_E4M3, 512, 5120, "model-00005-of-00048.safetensors");
        expect_tensor(ck, "layers.2.attn.compressor.wgate.weight", DI_DT_BF16, 512, 5120, NULL);
        expect_tensor(ck, "layers.36.attn.indexer.wq_b.scale", DI_DT_F8_E8M0, 128, 40, NULL);
        expect_tensor(ck, "layers.39.ffn.experts.383.w2.weight", DI_DT_I8, 5120, 1152,
                      "model-00042-of-00048.safetensors");
        expect_tensor(ck, "layers.39.ffn.experts.383.w2.scale", DI_DT_F8_E8M0, 5120, 72, NULL);
        expect_tensor(ck, "layers.1.engram.embed.weight", DI_DT_F8_E4M3, 384006168, 256,
                      "model-00047-of-00048.safetensors");
        expect_tensor(ck, "layers.14.engram.embed.scale", DI_DT_F8_E8M0, 384016682, 8,
                      "model-00048-of-00048.safetensors");
        expect_tensor(ck, "layers.14.engram.wkv.weight", DI_DT_F8_E4M3, 25600, 6144, NULL);
        expect_tensor(ck, "mtp.0.main_proj.weight", DI_DT_F8_E4M3, 5120, 15360, "model-00044-of-00048.safetensors");
        expect_tensor(ck, "mtp.2.ffn.experts.127.w1.weight", DI_DT_I8, 2304, 2560, NULL);
        expect_tensor(ck, "mtp.2.confidence_head.proj.weight", DI_DT_BF16, 1, 5376, NULL);
        expect_tensor(ck, "head.weight", DI_DT_BF16, 129280, 5120, "model-00043-of-00048.safetensors");
        expect_tensor(ck, "image_newline", DI_DT_BF16, 5120, 0, "model-00002-of-00048.safetensors");
        expect_tensor(ck, "vision.blocks.31.mlp.w1.weight", DI_DT_BF16, 5632, 1024, "model-00001-of-00048.safetensors");
        expect_tensor(ck, "aligner.w1.weight", DI_DT_BF16, 5120, 9216, NULL);
        CHECK(di_checkpoint_find(ck, "layers.3.attn.compressor.wkv.weight") == NULL);
        CHECK(di_checkpoint_find(ck, "layers.20.attn.compressor.wgate.weight") == NULL);
        /* Lazy mmap: the last byte of the 101 GB table is a hole and reads as zero. */
        const di_tensor *tab = di_checkpoint_find(ck, "layers.14.engram.embed.weight");
        CHECK(tab && ((const unsigned char *)tab->data)[tab->nbytes - 1] == 0);
    }
    di_checkpoint_close(ck);
    test_vision_optional(dir, &cfg);
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    printf("released config: 48 shards written, opened and validated in %.2f s CPU, %.1f MB on disk\n", secs,
           disk / 1e6);
    tu_rm_rf(dir);
    free(cfg_text);
}

static void test_tiny_sharded(void) {
    char *cfg_text = tu_read(DI_TINY_FIXTURE_DIR "/config.json", NULL);
    CHECK(cfg_text != NULL);
    if (!cfg_text) return;
    char dir[256];
    CHECK(!tu_mkdtemp(dir, sizeof dir, "synth_tiny"));
    di_err err = {0};
    int n_shards = 0;
    CHECKF(!di_synthetic_checkpoint_write(dir, cfg_text, &n_shards, &err), "%s", err.msg);
    CHECK(n_shards == 19);
    di_config cfg;
    CHECK(!di_config_parse(&cfg, cfg_text, "tiny", &err));
    di_checkpoint *ck = NULL;
    CHECKF(!di_checkpoint_open(&ck, dir, &err), "%s", err.msg);
    if (ck) {
        CHECK(di_checkpoint_count(ck) == 1797);
        CHECK(di_checkpoint_total_bytes(ck) == 5325722);
        CHECKF(!di_checkpoint_validate(ck, &cfg, &err), "%s", err.msg);
    }
    di_checkpoint_close(ck);
    tu_rm_rf(dir);
    free(cfg_text);
}

int main(void) {
    test_released();
    test_tiny_sharded();
    return TEST_SUMMARY();
}
