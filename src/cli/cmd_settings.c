/* `deepinfer settings [--markdown]`: prints the settings registry (docs/SETTINGS.md is its output). */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "forward/device.h"

bool di_cli_parse(di_settings *s, int argc, char **argv, int *n_positional) {
    di_err err = {0};
    if (di_settings_parse_args(s, argc, argv, 1, n_positional, &err)) {
        fprintf(stderr, "deepinfer %s: %s\n", argv[0], err.msg);
        return false;
    }
    const char *backend = di_cli_backend(s);
    if (strcmp(backend, "cpu") && strcmp(backend, "cuda") && strcmp(backend, "auto")) {
        fprintf(stderr, "deepinfer %s: unknown backend '%s' (--backend cpu|cuda|auto, "
                        "DEEPINFER_ACCELERATOR=cpu|nvidia)\n", argv[0], backend);
        return false;
    }
    return true;
}

const char *di_cli_backend(const di_settings *s) {
    /* --backend wins over DeepInfer's DEEPINFER_ACCELERATOR */
    if (di_settings_given(s, "backend") || !*s->accelerator) return s->backend;
    return !strcmp(s->accelerator, "nvidia") ? "cuda" : s->accelerator;
}

unsigned di_cli_backend_flags(const di_settings *s) {
    return (s->batch_invariant ? DI_BACKEND_BATCH_INVARIANT : 0) | (s->gpu_exact ? DI_BACKEND_EXACT : 0) |
           (s->enforce_eager ? DI_BACKEND_EAGER : 0) | (s->gpu_wgmma ? DI_BACKEND_WGMMA : 0) |
           (s->gpu_pdl ? DI_BACKEND_PDL : 0) | (s->gpu_blas_prefill ? DI_BACKEND_BLAS : 0);
}

di_status di_cli_select_backend(di_model *m, const char *backend, const di_settings *s, di_err *err) {
    if (s->gpu_dense_bf16 < 0)
        return di_errf(err, DI_EINVAL, "DEEPINFER_GPU_DENSE_BF16=%ld: rows must be >= 0 (0: no bf16 copies)",
                       (long)s->gpu_dense_bf16);
    m->dense16_rows = s->gpu_dense_bf16;
    return di_model_select_backend(m, backend, di_cli_backend_flags(s), err);
}

int di_cmd_settings(di_settings *s, int argc, char **argv) {
    int n_pos = 0;
    if (!di_cli_parse(s, argc, argv, &n_pos)) return 2;
    di_settings_print_markdown(stdout);
    return 0;
}
