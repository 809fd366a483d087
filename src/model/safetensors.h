/* safetensors checkpoints: a directory with `model.safetensors.index.json` (or a single
 * `model.safetensors`), each shard a little-endian u64 header length, a JSON header, then raw data.
 * Shards are mmapped read-only and never read eagerly, so the 475 GiB release opens in seconds and
 * only the pages the forward pass touches are paged in. Every header is validated against the file
 * size (offsets inside the data section, sizes matching dtype x shape, no overlap past the end). */
#ifndef DI_MODEL_SAFETENSORS_H
#define DI_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include "base/error.h"

typedef enum di_dtype {
    DI_DT_F32,
    DI_DT_BF16,
    DI_DT_F16,
    DI_DT_F8_E4M3,
    DI_DT_F8_E8M0, /* raw exponent byte: value 2^(b-127) */
    DI_DT_I8,      /* routed experts: packed FP4 e2m1, low nibble first */
    DI_DT_I32,
    DI_DT_I64,
    DI_DT_U8,
    DI_DT_COUNT
} di_dtype;

const char *di_dtype_name(di_dtype t);
size_t di_dtype_size(di_dtype t);
/* Parses a safetensors dtype string ("F8_E4M3", ...); returns -1 if unknown. */
int di_dtype_parse(const char *s);

#define DI_MAX_DIMS 4

typedef struct di_tensor {
    const char *name;
    di_dtype dtype;
    int ndim;
    int64_t shape[DI_MAX_DIMS];
    const void *data; /* points into the mmapped shard */
    size_t nbytes;
    int shard;        /* index into the checkpoint's shard list */
} di_tensor;

typedef struct di_checkpoint di_checkpoint;

/* Opens a checkpoint directory: reads the index (or the single shard), every shard header, and
 * mmaps the shards. A tensor named by the index but absent from its shard, a shard that is missing
 * or truncated, a header that does not parse, an unknown dtype or a size mismatch is an error that
 * names the file and tensor. */
di_status di_checkpoint_open(di_checkpoint **out, const char *dir, di_err *err);
/* Opens one safetensors file directly (golden/debug fixtures). */
di_status di_safetensors_open_file(di_checkpoint **out, const char *path, di_err *err);
void di_checkpoint_close(di_checkpoint *ck);

const di_tensor *di_checkpoint_find(const di_checkpoint *ck, const char *name); /* NULL if absent */
size_t di_checkpoint_count(const di_checkpoint *ck);
const di_tensor *di_checkpoint_at(const di_checkpoint *ck, size_t i);
const char *di_checkpoint_dir(const di_checkpoint *ck);
/* Shards in the order they were opened (index order of first mention), and the sum of all tensor
 * byte sizes (the index's metadata.total_size for an official checkpoint). */
int di_checkpoint_shard_count(const di_checkpoint *ck);
const char *di_checkpoint_shard_name(const di_checkpoint *ck, int i);
uint64_t di_checkpoint_total_bytes(const di_checkpoint *ck);

/* Checks a tensor's dtype and shape; the error names the tensor, expected and found. */
di_status di_tensor_expect(const di_checkpoint *ck, const char *name, di_dtype dtype, int ndim,
                           const int64_t *shape, const di_tensor **out, di_err *err);
int64_t di_tensor_numel(const di_tensor *t);

#endif
