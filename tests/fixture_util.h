/* Shared helpers of the fixture tests: loading golden tensors and comparing logits with the
 * statistics the fixture README uses (mean / p99 / max abs difference, argmax agreement). */
#ifndef DI_TEST_FIXTURE_UTIL_H
#define DI_TEST_FIXTURE_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/numerics.h"
#include "base/settings.h"
#include "cli/commands.h"
#include "forward/device.h"
#include "model/safetensors.h"

/* The settings the model tests honour, read once through the registry, as the CLI reads them:
 * DEEPINFER_ACCELERATOR=nvidia selects the GPU (device runs: tools/cuda/device_model_run.sh; CI
 * runs the tests on the CPU reference), DEEPINFER_BATCH_INVARIANT, DEEPINFER_GPU_EXACT,
 * DEEPINFER_GPU_WGMMA, DEEPINFER_ENFORCE_EAGER and DEEPINFER_GPU_PDL as for the CLI (the same
 * di_cli_backend_flags). A malformed value stops the test
 * with the registry's message. DI_TEST_BACKEND=cuda|cpu, for tests only, overrides the backend. */
static inline const di_settings *test_settings(void) {
    static di_settings s;
    static bool read;
    if (!read) {
        di_err err = {0};
        if (di_settings_init(&s, &err)) {
            fprintf(stderr, "test settings: %s\n", err.msg);
            exit(2);
        }
        read = true;
    }
    return &s;
}
static inline const char *test_backend(void) {
    const char *t = getenv("DI_TEST_BACKEND");
    if (t && *t) return t;
    return !strcmp(test_settings()->accelerator, "nvidia") ? "cuda" : "cpu";
}
static inline bool test_enforce_eager(void) { return test_settings()->enforce_eager; }
static inline di_status test_use_backend(di_model *m, di_err *err) {
    return di_cli_select_backend(m, test_backend(), test_settings(), err);
}

typedef struct logit_stats {
    double mean_abs, p99_abs, max_abs;
    int rows, argmax_agree;
} logit_stats;

static inline int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static inline int argmax_f(const float *x, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int)best;
}

/* a, b: [rows, V] */
static inline logit_stats compare_logits(const float *a, const float *b, int rows, int64_t V) {
    logit_stats s = {0};
    s.rows = rows;
    size_t n = (size_t)rows * V;
    double *d = malloc(sizeof(double) * n);
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        d[i] = fabs((double)a[i] - (double)b[i]);
        sum += d[i];
        if (d[i] > s.max_abs) s.max_abs = d[i];
    }
    qsort(d, n, sizeof(double), cmp_double);
    s.mean_abs = sum / (double)n;
    s.p99_abs = d[(size_t)(0.99 * (double)(n - 1))];
    for (int r = 0; r < rows; r++) s.argmax_agree += argmax_f(a + r * V, V) == argmax_f(b + r * V, V);
    free(d);
    return s;
}

/* Reads a tensor of a golden file as float (F32 or BF16) or int32 (I32); NULL if absent. */
static inline float *golden_f32(const di_checkpoint *g, const char *name, int64_t *numel) {
    const di_tensor *t = di_checkpoint_find(g, name);
    if (!t) return NULL;
    int64_t n = di_tensor_numel(t);
    float *out = malloc(sizeof(float) * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        const uint8_t *p = (const uint8_t *)t->data;
        switch (t->dtype) {
        case DI_DT_F32: out[i] = di_f32_load(p + 4 * i); break;
        case DI_DT_BF16: out[i] = di_bf16_load(p + 2 * i); break;
        case DI_DT_I32: { int32_t v; memcpy(&v, p + 4 * i, 4); out[i] = (float)v; break; }
        case DI_DT_I64: { int64_t v; memcpy(&v, p + 8 * i, 8); out[i] = (float)v; break; }
        default: out[i] = NAN;
        }
    }
    if (numel) *numel = n;
    return out;
}

static inline int32_t *golden_i32(const di_checkpoint *g, const char *name, int64_t *numel) {
    const di_tensor *t = di_checkpoint_find(g, name);
    if (!t || t->dtype != DI_DT_I32) return NULL;
    int64_t n = di_tensor_numel(t);
    int32_t *out = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    memcpy(out, t->data, sizeof(int32_t) * (size_t)n);
    if (numel) *numel = n;
    return out;
}

#endif
