/* The expected tensor inventory of a V4.1 checkpoint, derived from the config alone (model-spec
 * §5.2): every name with its dtype and shape. It drives checkpoint validation (wrong dtype/shape or
 * missing tensor is an error naming it) and the synthetic-checkpoint tools. For the released config
 * it lists exactly 96,085 tensors. */
#ifndef DI_MODEL_TENSOR_LIST_H
#define DI_MODEL_TENSOR_LIST_H

#include "model/config.h"
#include "model/safetensors.h"

typedef struct di_tensor_spec {
    char name[160];
    di_dtype dtype;
    int ndim;
    int64_t shape[DI_MAX_DIMS];
    int is_vision; /* vision tower / aligner / image_* rows: may be skipped by a text engine */
} di_tensor_spec;

typedef void (*di_tensor_spec_fn)(const di_tensor_spec *spec, void *user);

/* Calls fn once per expected tensor, in a fixed order (globals, layers, mtp, vision). */
void di_tensor_list_for_each(const di_config *cfg, di_tensor_spec_fn fn, void *user);
size_t di_tensor_list_count(const di_config *cfg);

/* Checks that every expected tensor is present with its dtype and shape, and that the checkpoint
 * holds no tensor the config does not expect. Text-only: vision tensors are checked when present;
 * the vision tower + aligner, and the image_* rows, must each be complete or absent. */
di_status di_checkpoint_validate(const di_checkpoint *ck, const di_config *cfg, di_err *err);

#endif
