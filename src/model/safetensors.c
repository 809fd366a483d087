/* safetensors reader: the index, every shard header, read-only mmaps, and a name -> tensor map.
 *
 * How it works. A shard is `u64 LE header_len | JSON header | data`. The header is read with pread
 * (never the data), parsed with cJSON, and every entry is checked: known dtype, at most
 * DI_MAX_DIMS non-negative dims, data_offsets [begin, end] with begin <= end <= data section size,
 * end - begin == numel x dtype size, and no two tensors of a shard overlapping. The whole shard is
 * then mmapped PROT_READ / MAP_PRIVATE without MAP_POPULATE, so opening the 475 GiB release costs
 * only its ~10 MB of headers; pages are faulted in when the forward pass touches them.
 *
 * With `model.safetensors.index.json`, the weight_map decides which shards exist (file names must be
 * plain names inside the directory), and it must agree with the headers exactly: a tensor the index
 * places in a shard must be there, and a shard must hold no tensor the index does not place in it.
 * Without the index, a single `model.safetensors` is opened.
 *
 * Tensors live in one array; names are owned by the checkpoint; lookup is an open-addressing hash
 * table (FNV-1a, linear probing) sized to a power of two at least twice the tensor count. */
#include "model/safetensors.h"
#include "base/file.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_HEADER_BYTES ((uint64_t)256 << 20) /* the real shards' headers are < 1 MiB */
#define MAX_INDEX_BYTES ((long)256 << 20)

typedef struct {
    char *path;        /* dir/name */
    char *name;        /* file name as the index spells it */
    void *map;         /* whole file, PROT_READ */
    size_t map_bytes;
    uint64_t data_off; /* 8 + header_len */
} shard;

struct di_checkpoint {
    char *dir;
    shard *shards;
    int n_shards;
    di_tensor *tensors;
    size_t n_tensors, cap_tensors;
    size_t *table; /* slot -> tensor index + 1, 0 = empty */
    size_t table_mask;
};

static const struct { const char *name; size_t size; } k_dtypes[DI_DT_COUNT] = {
    [DI_DT_F32] = {"F32", 4},         [DI_DT_BF16] = {"BF16", 2},   [DI_DT_F16] = {"F16", 2},
    [DI_DT_F8_E4M3] = {"F8_E4M3", 1}, [DI_DT_F8_E8M0] = {"F8_E8M0", 1}, [DI_DT_I8] = {"I8", 1},
    [DI_DT_I32] = {"I32", 4},         [DI_DT_I64] = {"I64", 8},     [DI_DT_U8] = {"U8", 1},
};

const char *di_dtype_name(di_dtype t) { return (unsigned)t < DI_DT_COUNT ? k_dtypes[t].name : "?"; }
size_t di_dtype_size(di_dtype t) { return (unsigned)t < DI_DT_COUNT ? k_dtypes[t].size : 0; }

int di_dtype_parse(const char *s) {
    for (int i = 0; i < DI_DT_COUNT; i++)
        if (s && !strcmp(s, k_dtypes[i].name)) return i;
    return -1;
}

int64_t di_tensor_numel(const di_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* ---- name map ---- */

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static void build_table(di_checkpoint *ck) {
    size_t cap = 16;
    while (cap < 2 * ck->n_tensors) cap <<= 1;
    free(ck->table);
    ck->table = di_xcalloc(cap, sizeof *ck->table);
    ck->table_mask = cap - 1;
    for (size_t i = 0; i < ck->n_tensors; i++) {
        size_t s = hash_name(ck->tensors[i].name) & ck->table_mask;
        while (ck->table[s]) s = (s + 1) & ck->table_mask;
        ck->table[s] = i + 1;
    }
}

const di_tensor *di_checkpoint_find(const di_checkpoint *ck, const char *name) {
    if (!ck || !ck->table || !name) return NULL;
    size_t s = hash_name(name) & ck->table_mask;
    for (; ck->table[s]; s = (s + 1) & ck->table_mask) {
        const di_tensor *t = &ck->tensors[ck->table[s] - 1];
        if (!strcmp(t->name, name)) return t;
    }
    return NULL;
}

size_t di_checkpoint_count(const di_checkpoint *ck) { return ck ? ck->n_tensors : 0; }
const di_tensor *di_checkpoint_at(const di_checkpoint *ck, size_t i) {
    return ck && i < ck->n_tensors ? &ck->tensors[i] : NULL;
}
const char *di_checkpoint_dir(const di_checkpoint *ck) { return ck ? ck->dir : NULL; }

int di_checkpoint_shard_count(const di_checkpoint *ck) { return ck ? ck->n_shards : 0; }
const char *di_checkpoint_shard_name(const di_checkpoint *ck, int i) {
    return ck && i >= 0 && i < ck->n_shards ? ck->shards[i].name : NULL;
}

uint64_t di_checkpoint_total_bytes(const di_checkpoint *ck) {
    uint64_t n = 0;
    for (size_t i = 0; ck && i < ck->n_tensors; i++) n += ck->tensors[i].nbytes;
    return n;
}

void di_checkpoint_close(di_checkpoint *ck) {
    if (!ck) return;
    for (int i = 0; i < ck->n_shards; i++) {
        if (ck->shards[i].map) munmap(ck->shards[i].map, ck->shards[i].map_bytes);
        free(ck->shards[i].path);
        free(ck->shards[i].name);
    }
    for (size_t i = 0; i < ck->n_tensors; i++) free((char *)ck->tensors[i].name);
    free(ck->shards);
    free(ck->tensors);
    free(ck->table);
    free(ck->dir);
    free(ck);
}

/* ---- one shard ---- */

static char *read_header(int fd, const char *fname, uint64_t file_bytes, uint64_t *hlen_out, di_err *err) {
    unsigned char lenbuf[8];
    if (file_bytes < 8)
        return di_errf(err, DI_EFORMAT, "%s: %llu bytes, too short for the 8-byte header length", fname,
                       (unsigned long long)file_bytes), NULL;
    if (pread(fd, lenbuf, 8, 0) != 8) return di_errf(err, DI_EIO, "%s: cannot read", fname), NULL;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | lenbuf[i];
    if (hlen < 2 || hlen > file_bytes - 8 || hlen > MAX_HEADER_BYTES)
        return di_errf(err, DI_EFORMAT,
                       "%s: header length %llu is impossible (file is %llu bytes, header limit %llu)",
                       fname, (unsigned long long)hlen, (unsigned long long)file_bytes,
                       (unsigned long long)MAX_HEADER_BYTES), NULL;
    char *buf = di_xmalloc(hlen + 1);
    size_t got = 0;
    while (got < hlen) {
        ssize_t r = pread(fd, buf + got, hlen - got, 8 + got);
        if (r <= 0) {
            free(buf);
            return di_errf(err, DI_EIO, "%s: cannot read the %llu-byte header", fname,
                           (unsigned long long)hlen), NULL;
        }
        got += (size_t)r;
    }
    buf[hlen] = 0;
    *hlen_out = hlen;
    return buf;
}

static di_tensor *push_tensor(di_checkpoint *ck) {
    if (ck->n_tensors == ck->cap_tensors) {
        ck->cap_tensors = ck->cap_tensors ? 2 * ck->cap_tensors : 256;
        ck->tensors = di_xrealloc(ck->tensors, ck->cap_tensors * sizeof *ck->tensors);
    }
    di_tensor *t = &ck->tensors[ck->n_tensors++];
    memset(t, 0, sizeof *t);
    return t;
}

/* Parses one header entry into t (name already set); data_bytes = size of the data section. */
static di_status parse_entry(const cJSON *e, di_tensor *t, const char *fname, uint64_t data_bytes,
                             uint64_t *begin_out, di_err *err) {
    const char *nm = t->name;
    if (!cJSON_IsObject(e)) return di_errf(err, DI_EFORMAT, "%s: tensor %s: entry is not an object", fname, nm);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
        return di_errf(err, DI_EFORMAT, "%s: tensor %s: needs string dtype, array shape, 2 data_offsets",
                       fname, nm);
    int d = di_dtype_parse(dt->valuestring);
    if (d < 0) return di_errf(err, DI_EFORMAT, "%s: tensor %s: unknown dtype \"%s\"", fname, nm, dt->valuestring);
    t->dtype = (di_dtype)d;
    t->ndim = cJSON_GetArraySize(sh);
    if (t->ndim > DI_MAX_DIMS)
        return di_errf(err, DI_EFORMAT, "%s: tensor %s: %d dims, at most %d supported", fname, nm, t->ndim,
                       DI_MAX_DIMS);
    uint64_t numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        const cJSON *x = cJSON_GetArrayItem(sh, i);
        double v = cJSON_IsNumber(x) ? x->valuedouble : -1;
        if (v < 0 || v != (double)(int64_t)v || v > 9007199254740992.0)
            return di_errf(err, DI_EFORMAT, "%s: tensor %s: shape[%d] is not a non-negative integer", fname, nm, i);
        t->shape[i] = (int64_t)v;
        if (t->shape[i] && numel > UINT64_MAX / 16 / (uint64_t)t->shape[i])
            return di_errf(err, DI_EFORMAT, "%s: tensor %s: shape overflows", fname, nm);
        numel *= (uint64_t)t->shape[i];
    }
    double b = cJSON_IsNumber(cJSON_GetArrayItem(off, 0)) ? cJSON_GetArrayItem(off, 0)->valuedouble : -1;
    double en = cJSON_IsNumber(cJSON_GetArrayItem(off, 1)) ? cJSON_GetArrayItem(off, 1)->valuedouble : -1;
    if (b < 0 || en < b || b != (double)(uint64_t)b || en != (double)(uint64_t)en)
        return di_errf(err, DI_EFORMAT, "%s: tensor %s: bad data_offsets [%.17g, %.17g]", fname, nm, b, en);
    uint64_t begin = (uint64_t)b, end = (uint64_t)en;
    uint64_t want = numel * di_dtype_size(t->dtype);
    if (end - begin != want)
        return di_errf(err, DI_EFORMAT, "%s: tensor %s: data_offsets span %llu bytes, but %s x %llu elements "
                       "needs %llu", fname, nm, (unsigned long long)(end - begin), dt->valuestring,
                       (unsigned long long)numel, (unsigned long long)want);
    if (end > data_bytes)
        return di_errf(err, DI_EIO, "%s: tensor %s ends at data byte %llu but the data section has only %llu "
                       "bytes (file truncated?)", fname, nm, (unsigned long long)end,
                       (unsigned long long)data_bytes);
    t->nbytes = (size_t)want;
    *begin_out = begin;
    return DI_OK;
}

typedef struct { uint64_t begin, end; size_t idx; } span;

static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Safetensors tensors must not overlap; checked after sorting a shard's spans by offset. */
static di_status check_overlap(const di_checkpoint *ck, span *sp, size_t n, const char *fname, di_err *err) {
    qsort(sp, n, sizeof *sp, cmp_span);
    for (size_t i = 1; i < n; i++)
        if (sp[i].begin < sp[i - 1].end && sp[i].end > sp[i].begin && sp[i - 1].end > sp[i - 1].begin)
            return di_errf(err, DI_EFORMAT, "%s: tensors %s and %s overlap", fname, ck->tensors[sp[i - 1].idx].name,
                           ck->tensors[sp[i].idx].name);
    return DI_OK;
}

/* Parses the header JSON of shard `si`, appending its tensors; data pointers are set later. */
static di_status parse_header(di_checkpoint *ck, int si, const char *text, uint64_t data_bytes,
                              di_err *err) {
    const char *fname = ck->shards[si].name;
    cJSON *root = cJSON_Parse(text);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return di_errf(err, DI_EFORMAT, "%s: header is not a JSON object", fname);
    }
    uint64_t *begins = di_xmalloc(((size_t)cJSON_GetArraySize(root) + 1) * sizeof *begins);
    size_t first = ck->n_tensors;
    di_status st = DI_OK;
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (!e->string) continue;
        if (!strcmp(e->string, "__metadata__")) continue;
        di_tensor *t = push_tensor(ck);
        t->name = di_xstrdup(e->string);
        t->shard = si;
        if ((st = parse_entry(e, t, fname, data_bytes, &begins[ck->n_tensors - 1 - first], err))) break;
    }
    cJSON_Delete(root);
    if (st) {
        free(begins);
        return st;
    }
    size_t n = ck->n_tensors - first;
    span *sp = di_xmalloc(n * sizeof *sp);
    for (size_t i = 0; i < n; i++) {
        sp[i] = (span){begins[i], begins[i] + ck->tensors[first + i].nbytes, first + i};
        ck->tensors[first + i].data = (const char *)ck->shards[si].map + ck->shards[si].data_off + begins[i];
    }
    st = check_overlap(ck, sp, n, fname, err);
    free(sp);
    free(begins);
    return st;
}

/* Opens, header-parses and mmaps shard si (path and name already set). */
static di_status open_shard(di_checkpoint *ck, int si, di_err *err) {
    shard *s = &ck->shards[si];
    int fd = open(s->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return di_errf(err, DI_EIO, "%s: cannot open (%s)", s->path, strerror(errno));
    struct stat stt;
    if (fstat(fd, &stt) || !S_ISREG(stt.st_mode)) {
        close(fd);
        return di_errf(err, DI_EIO, "%s: not a regular file", s->path);
    }
    uint64_t fbytes = (uint64_t)stt.st_size, hlen = 0;
    char *text = read_header(fd, s->name, fbytes, &hlen, err);
    if (!text) {
        close(fd);
        return err ? err->status : DI_EFORMAT;
    }
    s->data_off = 8 + hlen;
    s->map_bytes = (size_t)fbytes;
    s->map = mmap(NULL, s->map_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (s->map == MAP_FAILED) {
        s->map = NULL;
        free(text);
        return di_errf(err, DI_ENOMEM, "%s: mmap of %llu bytes failed (%s)", s->path,
                       (unsigned long long)fbytes, strerror(errno));
    }
    di_status st = parse_header(ck, si, text, fbytes - s->data_off, err);
    free(text);
    return st;
}

static di_checkpoint *new_checkpoint(const char *dir) {
    di_checkpoint *ck = di_xcalloc(1, sizeof *ck);
    ck->dir = di_xstrdup(dir);
    return ck;
}

static char *join_path(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = di_xmalloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int add_shard(di_checkpoint *ck, const char *dir, const char *name) {
    for (int i = 0; i < ck->n_shards; i++)
        if (!strcmp(ck->shards[i].name, name)) return i;
    ck->shards = di_xrealloc(ck->shards, (size_t)(ck->n_shards + 1) * sizeof *ck->shards);
    shard *s = &ck->shards[ck->n_shards];
    memset(s, 0, sizeof *s);
    s->name = di_xstrdup(name);
    s->path = dir ? join_path(dir, name) : di_xstrdup(name);
    return ck->n_shards++;
}

/* Rejects duplicate names (within or across shards) once the table is built. */
static di_status check_duplicates(di_checkpoint *ck, di_err *err) {
    build_table(ck);
    for (size_t i = 0; i < ck->n_tensors; i++) {
        const di_tensor *t = di_checkpoint_find(ck, ck->tensors[i].name);
        if (t != &ck->tensors[i])
            return di_errf(err, DI_EFORMAT, "tensor %s appears twice (in %s and %s)", t->name,
                           ck->shards[t->shard].name, ck->shards[ck->tensors[i].shard].name);
    }
    return DI_OK;
}

di_status di_safetensors_open_file(di_checkpoint **out, const char *path, di_err *err) {
    *out = NULL;
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, (size_t)(slash - path)) : di_xstrdup(".");
    if (!dir) di_die("out of memory");
    di_checkpoint *ck = new_checkpoint(dir);
    free(dir);
    int si = add_shard(ck, NULL, path);
    free(ck->shards[si].name);
    ck->shards[si].name = di_xstrdup(path);
    di_status st = open_shard(ck, si, err);
    if (!st) st = check_duplicates(ck, err);
    if (st) {
        di_checkpoint_close(ck);
        return st;
    }
    *out = ck;
    return DI_OK;
}

/* Reads a whole small file (the index) into a NUL-terminated buffer. */
static char *slurp(const char *path, di_err *err) {
    char *buf = NULL;
    return di_read_file(path, (size_t)MAX_INDEX_BYTES, "index", &buf, NULL, err) ? NULL : buf;
}

static bool safe_file_name(const char *s) {
    return *s && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

/* Opens every shard the index names, then checks index and headers agree both ways. */
static di_status open_indexed(di_checkpoint *ck, const char *dir, const cJSON *wm, const char *iname,
                              di_err *err) {
    const cJSON *e;
    cJSON_ArrayForEach(e, wm) {
        if (!cJSON_IsString(e) || !safe_file_name(e->valuestring))
            return di_errf(err, DI_EFORMAT, "%s: weight_map[\"%s\"] is not a plain shard file name", iname,
                           e->string);
        add_shard(ck, dir, e->valuestring);
    }
    for (int i = 0; i < ck->n_shards; i++) {
        di_status st = open_shard(ck, i, err);
        if (st) return st;
    }
    di_status st = check_duplicates(ck, err);
    if (st) return st;
    size_t n_listed = 0;
    cJSON_ArrayForEach(e, wm) {
        n_listed++;
        const di_tensor *t = di_checkpoint_find(ck, e->string);
        if (!t || strcmp(ck->shards[t->shard].name, e->valuestring))
            return di_errf(err, DI_EFORMAT, "%s: tensor %s is listed in %s but %s", iname, e->string,
                           e->valuestring, t ? "lives in another shard" : "is absent from it");
    }
    if (n_listed != ck->n_tensors) {
        for (size_t i = 0; i < ck->n_tensors; i++)
            if (!cJSON_GetObjectItemCaseSensitive(wm, ck->tensors[i].name))
                return di_errf(err, DI_EFORMAT, "%s: holds tensor %s, which %s does not list",
                               ck->shards[ck->tensors[i].shard].name, ck->tensors[i].name, iname);
        return di_errf(err, DI_EFORMAT, "%s: weight_map lists a tensor twice", iname);
    }
    return DI_OK;
}

di_status di_checkpoint_open(di_checkpoint **out, const char *dir, di_err *err) {
    *out = NULL;
    const char *iname = "model.safetensors.index.json";
    char *ipath = join_path(dir, iname);
    di_checkpoint *ck = new_checkpoint(dir);
    di_status st = DI_OK;
    if (access(ipath, F_OK) == 0) {
        char *text = slurp(ipath, err);
        cJSON *root = text ? cJSON_Parse(text) : NULL;
        const cJSON *wm = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
        if (!text) st = err ? err->status : DI_EIO;
        else if (!cJSON_IsObject(wm))
            st = di_errf(err, DI_EFORMAT, "%s: %s", ipath, root ? "no weight_map object" : "not valid JSON");
        else
            st = open_indexed(ck, dir, wm, iname, err);
        cJSON_Delete(root);
        free(text);
    } else {
        int si = add_shard(ck, dir, "model.safetensors");
        if (access(ck->shards[si].path, F_OK))
            st = di_errf(err, DI_EIO, "%s: neither %s nor model.safetensors exists", dir, iname);
        else
            st = open_shard(ck, si, err);
        if (!st) st = check_duplicates(ck, err);
    }
    free(ipath);
    if (st) {
        di_checkpoint_close(ck);
        return st;
    }
    *out = ck;
    return DI_OK;
}

/* Writes "DTYPE [a, b]" into buf. */
static void describe(char *buf, size_t cap, di_dtype dtype, int ndim, const int64_t *shape) {
    int n = snprintf(buf, cap, "%s [", di_dtype_name(dtype));
    for (int i = 0; i < ndim && n > 0 && (size_t)n < cap; i++)
        n += snprintf(buf + n, cap - (size_t)n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (n > 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, "]");
}

di_status di_tensor_expect(const di_checkpoint *ck, const char *name, di_dtype dtype, int ndim,
                           const int64_t *shape, const di_tensor **out, di_err *err) {
    char want[160], got[160];
    describe(want, sizeof want, dtype, ndim, shape);
    if (out) *out = NULL;
    const di_tensor *t = di_checkpoint_find(ck, name);
    if (!t) return di_errf(err, DI_EFORMAT, "%s: missing from the checkpoint (expected %s)", name, want);
    bool same = t->dtype == dtype && t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) {
        describe(got, sizeof got, t->dtype, t->ndim, t->shape);
        return di_errf(err, DI_EFORMAT, "%s: expected %s, found %s", name, want, got);
    }
    if (out) *out = t;
    return DI_OK;
}
