/* Placeholder: replaced by the forward pass (issue 2). */
#include <stdio.h>

#include "cli/commands.h"

int di_cmd_logits(di_settings *s, int argc, char **argv) {
    fprintf(stderr, "deepinfer logits: not built yet\n");
    return 2;
}
