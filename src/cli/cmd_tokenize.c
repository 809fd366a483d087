/* Placeholder until the tokenizer lands (issue 3): the commands exist and say so. */
#include <stdio.h>

#include "cli/commands.h"

static int not_yet(const char *name) {
    fprintf(stderr, "deepinfer %s: the tokenizer is not built yet\n", name);
    return 2;
}
int di_cmd_tokenize(di_settings *s, int argc, char **argv) { return not_yet(argv[0]); }
int di_cmd_detokenize(di_settings *s, int argc, char **argv) { return not_yet(argv[0]); }
int di_cmd_render(di_settings *s, int argc, char **argv) { return not_yet(argv[0]); }
