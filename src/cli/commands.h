/* The `deepinfer` subcommands. Each takes the settings already filled from the environment and the
 * remaining argv (argv[0] is the subcommand name) and returns a process exit status. */
#ifndef DI_CLI_COMMANDS_H
#define DI_CLI_COMMANDS_H

#include "base/settings.h"
#include "forward/model.h"

typedef int (*di_command_fn)(di_settings *s, int argc, char **argv);

int di_cmd_generate(di_settings *s, int argc, char **argv);
int di_cmd_logits(di_settings *s, int argc, char **argv);
int di_cmd_tokenize(di_settings *s, int argc, char **argv);
int di_cmd_detokenize(di_settings *s, int argc, char **argv);
int di_cmd_render(di_settings *s, int argc, char **argv);
int di_cmd_settings(di_settings *s, int argc, char **argv);
int di_cmd_bench(di_settings *s, int argc, char **argv);
int di_cmd_grammar_check(di_settings *s, int argc, char **argv);
int di_cmd_inspect(di_settings *s, int argc, char **argv);

/* Parses flags of argv[1..] into s; prints the error and returns false on failure. */
bool di_cli_parse(di_settings *s, int argc, char **argv, int *n_positional);
/* The backend the user asked for: "cpu", "cuda" or "auto" (--backend, else DEEPINFER_ACCELERATOR). */
const char *di_cli_backend(const di_settings *s);
/* DI_BACKEND_* flags from DEEPINFER_BATCH_INVARIANT, DEEPINFER_GPU_EXACT, DEEPINFER_ENFORCE_EAGER,
 * DEEPINFER_GPU_WGMMA, DEEPINFER_GPU_PDL and DEEPINFER_GPU_BLAS_PREFILL (the CLI's and the model tests' one
 * mapping) */
unsigned di_cli_backend_flags(const di_settings *s);
/* di_model_select_backend with di_cli_backend_flags(s) and the model's other device settings
 * (DEEPINFER_GPU_DENSE_BF16) */
di_status di_cli_select_backend(di_model *m, const char *backend, const di_settings *s, di_err *err);
/* `deepinfer bench` on a device backend (cmd_bench_gpu.c) */
int di_cmd_bench_gpu(di_settings *s, const char *backend);
/* the median of v[0..n) (sorts v; -1 for n = 0): the device bench's step times */
double di_bench_median(double *v, int n);
/* The host sampling table of the device bench (cmd_bench_sampling.c): B rows of `vocab` logits a
 * step on the engine's sampler pool, for each of Bs[0..n_B). */
void di_bench_host_sampling(int32_t vocab, const int *Bs, int n_B);
/* --bench-batch: "" or "0" = the default sizes 1, 8, 32, 64, 128, 256; else a comma-separated list
 * of sizes 1..DI_BENCH_MAX_BATCH, returned ascending without repeats in out[0..*n) (at most
 * DI_BENCH_MAX_BATCH entries). A malformed list is DI_EINVAL naming the flag and the text. */
#define DI_BENCH_MAX_BATCH 256
di_status di_bench_parse_batches(const char *spec, int *out, int *n, di_err *err);
/* --bench-min-context above --bench-max-context is DI_EINVAL naming both flags */
di_status di_bench_check_contexts(int64_t min_context, int64_t max_context, di_err *err);
/* --bench-logprobs outside 0..20 is DI_EINVAL naming the flag */
di_status di_bench_check_logprobs(int64_t logprobs, di_err *err);

#endif
