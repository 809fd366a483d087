/* `deepinfer` entry point: reads the settings registry from the environment, then dispatches to a
 * subcommand (src/cli/cmd_*.c). */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"

typedef struct {
    const char *name;
    di_command_fn fn;
    const char *summary;
} command;

static const command k_commands[] = {
    {"generate", di_cmd_generate, "run requests (JSONL file) or stream one prompt (-p) through the engine"},
    {"logits", di_cmd_logits, "run ids through the model, write float32 logits of every position"},
    {"inspect", di_cmd_inspect, "load and validate a checkpoint, print its configuration"},
    {"tokenize", di_cmd_tokenize, "text on stdin -> JSON array of token ids"},
    {"detokenize", di_cmd_detokenize, "JSON array of ids on stdin -> text"},
    {"render", di_cmd_render, "OpenAI-style chat request JSON on stdin -> prompt token ids"},
    {"grammar-check", di_cmd_grammar_check, "check candidate strings against a regex / EBNF / JSON schema"},
    {"bench", di_cmd_bench, "engine benchmark: prefill/decode tokens/s by batch size"},
    {"settings", di_cmd_settings, "list every flag and DEEPINFER_* variable"},
};

static void usage(FILE *f) {
    fprintf(f, "deepinfer %s - inference engine for DeepSeek-V4.1-Flash\n\nusage: deepinfer COMMAND "
               "[options]\n\ncommands:\n", DI_VERSION_STRING);
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        fprintf(f, "  %-11s %s\n", k_commands[i].name, k_commands[i].summary);
    fprintf(f, "\n`deepinfer settings` lists the options.\n");
}

/* DeepInfer's knobs that name features this build does not have yet: say so rather than ignore. */
static void warn_unimplemented(const di_settings *s) {
    if (s->use_nextn_decode)
        fprintf(stderr, "deepinfer: warning: DEEPINFER_USE_NEXTN_DECODE ignored: DSpark speculative decoding is "
                        "not implemented yet\n");
    if (s->enable_mtp_varlen)
        fprintf(stderr, "deepinfer: warning: DEEPINFER_ENABLE_MTP_VARLEN ignored: speculative decoding is not "
                        "implemented yet\n");
    if (s->yoco_prefill_keep_tokens > 0)
        fprintf(stderr, "deepinfer: warning: DEEPINFER_YOCO_PREFILL_KEEP_TOKENS=%ld ignored: decoder SWA bounded "
                        "replay is not implemented yet; prefill runs the exact reference path\n",
                s->yoco_prefill_keep_tokens);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("deepinfer %s\n", DI_VERSION_STRING);
        return 0;
    }
    di_settings s;
    di_err err = {0};
    if (di_settings_init(&s, &err)) {
        fprintf(stderr, "deepinfer: %s\n", err.msg);
        return 2;
    }
    warn_unimplemented(&s);
    int rc = -1;
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++) {
        if (!strcmp(argv[1], k_commands[i].name)) {
            rc = k_commands[i].fn(&s, argc - 1, argv + 1);
            break;
        }
    }
    if (rc < 0) {
        fprintf(stderr, "deepinfer: unknown command '%s'\n\n", argv[1]);
        usage(stderr);
        rc = 2;
    }
    di_settings_free(&s);
    return rc;
}
