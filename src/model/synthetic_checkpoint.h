/* Checkpoint writer: the full tensor inventory of a config (tensor_list.h) as safetensors files with
 * real headers, either in the official shard layout or as one file. Data come from a fill callback
 * (the demo model, demo_model.c) or are left as sparse holes: such synthetic checkpoints have the
 * real apparent size (475 GiB for the released config) while the disk holds only the headers, so
 * loader tests and GPU benchmarks can bind every tensor in its real shape without the weights. */
#ifndef DI_MODEL_SYNTHETIC_CHECKPOINT_H
#define DI_MODEL_SYNTHETIC_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>

#include "base/error.h"
#include "model/tensor_list.h"

/* Fills the data of one tensor: `data` holds n_bytes (= numel x dtype size) zeroed bytes. */
typedef di_status (*di_tensor_fill_fn)(const di_tensor_spec *spec, void *data, size_t n_bytes,
                                       void *user, di_err *err);

typedef struct di_checkpoint_write_opts {
    bool one_file;          /* every tensor in `model.safetensors` (else the release's shards) */
    di_tensor_fill_fn fill; /* NULL: data regions are file-system holes (read as zero bytes) */
    void *user;             /* passed to fill */
} di_checkpoint_write_opts;

/* Writes config.json (the given text, verbatim), model.safetensors.index.json and the safetensors
 * file(s) for the config's full inventory into the existing directory `dir`. Tensors are laid out
 * back to back in inventory order; with `fill`, each tensor's bytes come from it (in that order).
 * *n_shards (if non-NULL) receives the number of safetensors files. */
di_status di_checkpoint_write(const char *dir, const char *config_json,
                              const di_checkpoint_write_opts *opts, int *n_shards, di_err *err);

/* di_checkpoint_write in the release's shard layout with holes. Layout, as in the release
 * (model-spec §5.1): [vision], embed + image_*, one shard per backbone layer, head + norm, one per
 * DSpark block, one per Engram layer (its table and the other Engram tensors); 48 shards for the
 * released config. Data regions are holes (ftruncate), so every weight reads as zero bytes. */
di_status di_synthetic_checkpoint_write(const char *dir, const char *config_json, int *n_shards,
                                        di_err *err);

#endif
