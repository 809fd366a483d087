/* Checkpoint writer (see synthetic_checkpoint.h).
 *
 * How it works: the expected inventory is collected once (tensor_list.c), each tensor is assigned a
 * shard by its name with the release's layout (or shard 0 for a one-file checkpoint), and each shard
 * is written as `u64 header_len | JSON header (space-padded to a multiple of 8, as the reference
 * writer does) | data`. Tensors are laid out back to back in inventory order. Without a fill
 * callback the data part is only extended with ftruncate, never written: the file system keeps it as
 * a hole. With one, each tensor is filled into a reused zeroed buffer and written in turn. The index lists every tensor with its shard and
 * metadata.total_size. Text is produced with a small growable string buffer rather than a JSON tree,
 * which keeps the 96,085-entry index cheap. */
#include "model/synthetic_checkpoint.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/config.h"
#include "model/tensor_list.h"

typedef struct {
    char *buf;
    size_t len, cap;
} strbuf;

static void sb_printf(strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *sb, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(sb->buf + sb->len, sb->cap - sb->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < sb->cap - sb->len) {
            sb->len += (size_t)n;
            return;
        }
        sb->cap = sb->cap ? 2 * sb->cap + (size_t)n : 4096 + (size_t)n;
        sb->buf = di_xrealloc(sb->buf, sb->cap);
    }
}

typedef struct {
    di_tensor_spec *specs;
    int *shard_of;
    size_t n, cap;
    const di_config *cfg;
    bool one_file;
} inventory;

/* Shard numbering of the release: [vision] embed layers... head mtp... engram... */
static int shard_for(const di_config *c, const char *name) {
    int base = c->vision_num_hidden_layers > 0 ? 1 : 0;
    int L = c->num_hidden_layers, K = c->num_nextn_predict_layers;
    int layer = -1, k = -1;
    if (!strncmp(name, "vision.", 7) || !strncmp(name, "aligner.", 8)) return 0;
    if (!strcmp(name, "embed.weight") || !strncmp(name, "image_", 6)) return base;
    if (!strcmp(name, "head.weight") || !strcmp(name, "norm.weight")) return base + 1 + L;
    if (sscanf(name, "mtp.%d.", &k) == 1) return base + 2 + L + k;
    if (sscanf(name, "layers.%d.", &layer) == 1) {
        int slot = di_config_engram_slot(c, layer);
        char pre[48];
        snprintf(pre, sizeof pre, "layers.%d.engram.", layer);
        if (slot >= 0 && !strncmp(name, pre, strlen(pre))) return base + 2 + L + K + slot;
        return base + 1 + layer;
    }
    return base; /* not reached for inventory names */
}

static void collect(const di_tensor_spec *s, void *user) {
    inventory *inv = user;
    if (inv->n == inv->cap) {
        inv->cap = inv->cap ? 2 * inv->cap : 1024;
        inv->specs = di_xrealloc(inv->specs, inv->cap * sizeof *inv->specs);
        inv->shard_of = di_xrealloc(inv->shard_of, inv->cap * sizeof *inv->shard_of);
    }
    inv->specs[inv->n] = *s;
    inv->shard_of[inv->n] = inv->one_file ? 0 : shard_for(inv->cfg, s->name);
    inv->n++;
}

static uint64_t spec_bytes(const di_tensor_spec *s) {
    uint64_t n = di_dtype_size(s->dtype);
    for (int i = 0; i < s->ndim; i++) n *= (uint64_t)s->shape[i];
    return n;
}

static void shard_name(char *buf, size_t cap, int i, int n, bool one_file) {
    if (one_file) snprintf(buf, cap, "model.safetensors");
    else snprintf(buf, cap, "model-%05d-of-%05d.safetensors", i + 1, n);
}

static di_status write_all(int fd, const void *p, size_t n, const char *path, di_err *err) {
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w <= 0) return di_errf(err, DI_EIO, "%s: write failed (%s)", path, strerror(errno));
        c += w;
        n -= (size_t)w;
    }
    return DI_OK;
}

/* Writes the data of shard `si`, tensor by tensor, from the fill callback. */
static di_status write_shard_data(const inventory *inv, int si, int fd, const char *path,
                                  const di_checkpoint_write_opts *opts, di_err *err) {
    unsigned char *buf = NULL;
    size_t cap = 0;
    di_status st = DI_OK;
    for (size_t i = 0; i < inv->n && !st; i++) {
        if (inv->shard_of[i] != si) continue;
        const di_tensor_spec *s = &inv->specs[i];
        size_t n = (size_t)spec_bytes(s);
        if (n > cap) {
            cap = n;
            buf = di_xrealloc(buf, cap);
        }
        memset(buf, 0, n);
        st = opts->fill(s, buf, n, opts->user, err);
        if (st) di_err_prefix(err, "%s: tensor %s", path, s->name);
        else st = write_all(fd, buf, n, path, err);
    }
    free(buf);
    return st;
}

/* Writes shard `si`: header with back-to-back offsets, then the data (or a hole of its size). */
static di_status write_shard(const inventory *inv, int si, const char *path,
                             const di_checkpoint_write_opts *opts, di_err *err) {
    strbuf h = {0};
    uint64_t off = 0;
    sb_printf(&h, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (size_t i = 0; i < inv->n; i++) {
        if (inv->shard_of[i] != si) continue;
        const di_tensor_spec *s = &inv->specs[i];
        sb_printf(&h, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[", s->name, di_dtype_name(s->dtype));
        for (int d = 0; d < s->ndim; d++) sb_printf(&h, "%s%lld", d ? "," : "", (long long)s->shape[d]);
        uint64_t n = spec_bytes(s);
        sb_printf(&h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off, (unsigned long long)(off + n));
        off += n;
    }
    sb_printf(&h, "}");
    while (h.len % 8) sb_printf(&h, " ");
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h.len >> (8 * i));
    di_status st = DI_OK;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) st = di_errf(err, DI_EIO, "%s: cannot create (%s)", path, strerror(errno));
    if (!st) st = write_all(fd, len8, 8, path, err);
    if (!st) st = write_all(fd, h.buf, h.len, path, err);
    if (!st && opts->fill) st = write_shard_data(inv, si, fd, path, opts, err);
    else if (!st && ftruncate(fd, (off_t)(8 + h.len + off)))
        st = di_errf(err, DI_EIO, "%s: ftruncate to %llu bytes failed (%s)", path,
                     (unsigned long long)(8 + h.len + off), strerror(errno));
    if (fd >= 0 && close(fd) && !st) st = di_errf(err, DI_EIO, "%s: close failed", path);
    free(h.buf);
    return st;
}

static di_status write_text(const char *dir, const char *name, const char *text, size_t n, di_err *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return di_errf(err, DI_EIO, "%s: cannot create (%s)", path, strerror(errno));
    di_status st = write_all(fd, text, n, path, err);
    if (close(fd) && !st) st = di_errf(err, DI_EIO, "%s: close failed", path);
    return st;
}

static di_status write_index(const char *dir, const inventory *inv, int n_shards, di_err *err) {
    strbuf ix = {0};
    uint64_t total = 0;
    for (size_t i = 0; i < inv->n; i++) total += spec_bytes(&inv->specs[i]);
    sb_printf(&ix, "{\n  \"metadata\": {\"total_size\": %llu},\n  \"weight_map\": {", (unsigned long long)total);
    char sn[64];
    for (size_t i = 0; i < inv->n; i++) {
        shard_name(sn, sizeof sn, inv->shard_of[i], n_shards, inv->one_file);
        sb_printf(&ix, "%s\n    \"%s\": \"%s\"", i ? "," : "", inv->specs[i].name, sn);
    }
    sb_printf(&ix, "\n  }\n}\n");
    di_status st = write_text(dir, "model.safetensors.index.json", ix.buf, ix.len, err);
    free(ix.buf);
    return st;
}

di_status di_checkpoint_write(const char *dir, const char *config_json,
                              const di_checkpoint_write_opts *opts, int *n_shards, di_err *err) {
    di_config cfg;
    di_status st = di_config_parse(&cfg, config_json, "config.json", err);
    if (st) return st;
    inventory inv = {.cfg = &cfg, .one_file = opts->one_file};
    di_tensor_list_for_each(&cfg, collect, &inv);
    int n = opts->one_file ? 1
                           : (cfg.vision_num_hidden_layers > 0) + 2 + cfg.num_hidden_layers +
                                 cfg.num_nextn_predict_layers + cfg.n_engram_layers;
    st = write_text(dir, "config.json", config_json, strlen(config_json), err);
    char path[4096], sn[64];
    for (int si = 0; si < n && !st; si++) {
        shard_name(sn, sizeof sn, si, n, opts->one_file);
        snprintf(path, sizeof path, "%s/%s", dir, sn);
        st = write_shard(&inv, si, path, opts, err);
    }
    if (!st) st = write_index(dir, &inv, n, err);
    if (!st && n_shards) *n_shards = n;
    free(inv.specs);
    free(inv.shard_of);
    return st;
}

di_status di_synthetic_checkpoint_write(const char *dir, const char *config_json, int *n_shards,
                                        di_err *err) {
    const di_checkpoint_write_opts opts = {.one_file = false, .fill = NULL, .user = NULL};
    return di_checkpoint_write(dir, config_json, &opts, n_shards, err);
}
