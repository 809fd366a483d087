/* Synthetic checkpoints: the full tensor inventory of a config (tensor_list.h), written in the
 * official shard layout with real safetensors headers and sparse data regions. The files have the
 * checkpoint's apparent size (475 GiB for the released config) while the disk holds only the headers,
 * so loader tests and GPU benchmarks can bind every tensor in its real shape without the weights. */
#ifndef DI_MODEL_SYNTHETIC_CHECKPOINT_H
#define DI_MODEL_SYNTHETIC_CHECKPOINT_H

#include "base/error.h"

/* Writes config.json (the given text, verbatim), model.safetensors.index.json and the shards into
 * the existing directory `dir`. Layout, as in the release (model-spec §5.1): [vision], embed +
 * image_*, one shard per backbone layer, head + norm, one per DSpark block, one per Engram layer (its
 * table and the other Engram tensors); 48 shards for the released config. Data regions are holes
 * (ftruncate), so every weight reads as zero bytes. *n_shards (if non-NULL) receives the count. */
di_status di_synthetic_checkpoint_write(const char *dir, const char *config_json, int *n_shards,
                                        di_err *err);

#endif
