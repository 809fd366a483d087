/* `deepinfer settings [--markdown]`: prints the settings registry (docs/SETTINGS.md is its output). */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"

bool di_cli_parse(di_settings *s, int argc, char **argv, int *n_positional) {
    di_err err = {0};
    if (di_settings_parse_args(s, argc, argv, 1, n_positional, &err)) {
        fprintf(stderr, "deepinfer %s: %s\n", argv[0], err.msg);
        return false;
    }
    /* --backend wins over DeepInfer's DEEPINFER_ACCELERATOR */
    const char *backend = di_settings_given(s, "backend") || !*s->accelerator ? s->backend : s->accelerator;
    if (strcmp(backend, "cpu") != 0) {
        fprintf(stderr, "deepinfer %s: backend '%s' is not available in this build (only 'cpu'; the CUDA "
                        "backend's forward pass is not wired in yet)\n", argv[0], backend);
        return false;
    }
    return true;
}

int di_cmd_settings(di_settings *s, int argc, char **argv) {
    int n_pos = 0;
    if (!di_cli_parse(s, argc, argv, &n_pos)) return 2;
    di_settings_print_markdown(stdout);
    return 0;
}
