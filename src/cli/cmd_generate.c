/* `deepinfer generate`: the engine from the command line (docs/GENERATE.md).
 *
 *   deepinfer generate [--model DIR] --input requests.jsonl [--output results.jsonl]
 *   deepinfer generate [--model DIR] -p "text" [--chat] [--max-tokens N] [--temperature T] ...
 *
 * Batch mode reads every line first (so the progress bar knows the total), then feeds the engine a
 * window of requests at a time (twice max-num-seqs not yet finished), steps it, and writes each
 * result as soon as it and every line before it are done, so results come out in input order and
 * memory holds only the window plus finished results waiting behind a slower earlier line. A bad
 * line gets an error result and never stops the others. Exit status: 0 all lines succeeded, 3 some
 * failed, 1 the run itself failed (model, input, output, engine), 2 usage.
 *
 * Prompt mode streams one completion to stdout through the engine's token callback.
 *
 * Only the public API (deepinfer.h) drives the engine; options come from the settings registry. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "cli/cmd_generate_progress.h"
#include "cli/cmd_generate_request.h"
#include "cli/cmd_generate_result.h"
#include "cli/commands.h"
#include "model/demo_model.h"

enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_PARTIAL = 3 };

static const char k_usage[] =
    "usage: deepinfer generate [--model DIR] --input requests.jsonl [--output results.jsonl]\n"
    "       deepinfer generate [--model DIR] -p TEXT [--chat] [--max-tokens N] [--temperature T]\n"
    "                          [--top-p P] [--top-k K] [--seed S]\n"
    "engine: --kv-budget BYTES[K|M|G] --max-num-seqs N --max-batch-tokens N --max-prefill-chunk N\n"
    "Without --model (or DEEPINFER_HF_MODEL_DIR) a random-weight demonstration model runs.\n"
    "Formats and exit codes: docs/GENERATE.md; all options: deepinfer settings.\n";

/* ------------------------------------------------------------------------------------- options */

/* "512M", "1.5G", "1048576": bytes, with binary K/M/G/T suffixes (an optional "B" or "iB" after). */
static bool parse_bytes(const char *text, int64_t *out) {
    char *end;
    errno = 0;
    double x = strtod(text, &end);
    if (end == text || errno || !isfinite(x) || x < 0) return false;
    static const char units[] = "KMGT";
    const char *u = *end ? strchr(units, *end & ~0x20) : NULL;
    if (*end && !u) return false;
    if (u) {
        x *= pow(1024.0, (double)(u - units + 1));
        end++;
        if (!strcmp(end, "iB") || !strcmp(end, "B")) end += strlen(end);
    }
    if (*end || x >= 0x1p62 || x != floor(x)) return false;
    *out = (int64_t)x;
    return true;
}

static bool int_option(const char *flag, long v, int *out) {
    if (v < 0 || v > INT_MAX) {
        fprintf(stderr, "deepinfer generate: %s %ld: must be in [0, %d]\n", flag, v, INT_MAX);
        return false;
    }
    *out = (int)v;
    return true;
}

/* Engine flags -> options (model_dir is filled once the model is resolved). */
static bool engine_options(const di_settings *s, di_engine_options *o) {
    *o = (di_engine_options){.seed = (uint64_t)s->seed};
    if (!parse_bytes(s->kv_budget, &o->kv_budget_bytes)) {
        fprintf(stderr, "deepinfer generate: --kv-budget '%s': expected bytes, e.g. 1073741824, 512M or 2G\n",
                s->kv_budget);
        return false;
    }
    return int_option("--max-num-seqs", s->max_num_seqs, &o->max_num_seqs) &&
           int_option("--max-batch-tokens", s->max_batch_tokens, &o->max_batch_tokens) &&
           int_option("--max-prefill-chunk", s->max_prefill_chunk, &o->max_prefill_chunk) &&
           int_option("DEEPINFER_GPU_DENSE_BF16", s->gpu_dense_bf16, &o->dense_bf16_rows);
}

/* Sampling flags -> the request every line starts from (a line's own fields win). Flags that were
 * not given leave the OpenAI defaults of di_sampling_params_init. */
static bool request_defaults(const di_settings *s, di_request *q) {
    *q = (di_request){0};
    di_sampling_params_init(&q->sampling);
    const char *bad = NULL;
    if (s->max_tokens < 0 || s->max_tokens > INT_MAX) bad = "--max-tokens must be >= 0 (0 = 16)";
    else if (!(s->temperature >= 0) || !isfinite(s->temperature)) bad = "--temperature must be >= 0 (0 = greedy)";
    else if (!(s->top_p > 0 && s->top_p <= 1)) bad = "--top-p must be in (0, 1]";
    else if (s->top_k < 0 || s->top_k > INT32_MAX) bad = "--top-k must be >= 0 (0 = off)";
    else if (s->seed < 0) bad = "--seed must be >= 0";
    if (bad) {
        fprintf(stderr, "deepinfer generate: %s\n", bad);
        return false;
    }
    q->max_tokens = (int)s->max_tokens;
    if (di_settings_given(s, "temperature")) q->sampling.temperature = (float)s->temperature;
    if (di_settings_given(s, "top_p")) q->sampling.top_p = (float)s->top_p;
    if (di_settings_given(s, "top_k")) q->sampling.top_k = (int32_t)s->top_k;
    return true;
}

/* The model directory: --model / DEEPINFER_HF_MODEL_DIR, else the demo model (generated into its
 * cache on first use, with a notice that its weights are random). */
static di_status resolve_model_dir(const di_settings *s, char *out, size_t cap, di_err *err) {
    if (*s->model_dir) {
        if (strlen(s->model_dir) >= cap) return di_errf(err, DI_ERANGE, "--model: path too long");
        snprintf(out, cap, "%s", s->model_dir);
        return DI_OK;
    }
    char cache[4096];
    if (*s->demo_model_dir) snprintf(cache, sizeof cache, "%s", s->demo_model_dir);
    else if (di_demo_model_default_dir(s->xdg_cache_home, s->home, cache, sizeof cache, err)) return err->status;
    fprintf(stderr, "%s\n", DI_DEMO_MODEL_NOTICE);
    bool generated = false;
    if (di_demo_model_ensure(cache, out, cap, &generated, err)) return err->status;
    if (generated) fprintf(stderr, "generated the demonstration model into %s\n", out);
    return DI_OK;
}

static di_engine *open_engine(const di_settings *s, const di_engine_options *opt) {
    char dir[4096], msg[1024];
    di_err err = {0};
    if (resolve_model_dir(s, dir, sizeof dir, &err)) {
        fprintf(stderr, "deepinfer generate: %s\n", err.msg);
        return NULL;
    }
    di_engine_options o = *opt;
    o.model_dir = dir;
    o.backend = di_cli_backend(s);
    o.batch_invariant = s->batch_invariant;
    o.exact = s->gpu_exact;
    o.eager = s->enforce_eager;
    o.host_sampling = s->host_sampling;
    o.no_wgmma = !s->gpu_wgmma;
    o.no_pdl = !s->gpu_pdl;
    o.no_blas = !s->gpu_blas_prefill;
    di_engine *e = NULL;
    if (di_engine_create(&o, &e, msg, sizeof msg)) {
        fprintf(stderr, "deepinfer generate: %s\n", msg);
        return NULL;
    }
    return e;
}

/* ------------------------------------------------------------------------------------- summary */

static void print_summary(di_engine *e, int ok, int failed, double seconds) {
    di_engine_stats st;
    di_engine_get_stats(e, &st);
    char dur[32];
    di_progress_format_duration(seconds, dur, sizeof dur);
    const double step_s = st.prefill_seconds + st.decode_seconds + st.plan_seconds;
    fprintf(stderr, "generate: %d requests ok, %d failed, %s\n", ok, failed, dur);
    fprintf(stderr, "  prefill %10lld tokens %10.1f tokens/s\n", (long long)st.prefill_tokens,
            st.prefill_seconds > 0 ? (double)st.prefill_tokens / st.prefill_seconds : 0.0);
    fprintf(stderr, "  decode  %10lld tokens %10.1f tokens/s\n", (long long)st.decode_tokens,
            st.decode_seconds > 0 ? (double)st.decode_tokens / st.decode_seconds : 0.0);
    fprintf(stderr, "  steps   %10lld        mean %.3f ms (planning %.3f ms), %lld preemptions\n",
            (long long)st.steps, st.steps ? 1e3 * step_s / (double)st.steps : 0.0,
            st.steps ? 1e3 * st.plan_seconds / (double)st.steps : 0.0, (long long)st.preemptions);
    if (st.mask_seconds > 0)
        fprintf(stderr, "  masks   %10.3f ms per step (structured output; overlapped with a device's forward)\n",
                st.steps ? 1e3 * st.mask_seconds / (double)st.steps : 0.0);
    if (st.sample_seconds > 0)
        fprintf(stderr, "  sampling %9.3f ms per step (on the host: the rows whose logits leave the device)\n",
                st.steps ? 1e3 * st.sample_seconds / (double)st.steps : 0.0);
    fprintf(stderr, "  KV memory: %lld bytes fixed per sequence + %.1f bytes per context token (budget %lld bytes)\n",
            (long long)st.seq_fixed_bytes, st.kv_bytes_per_token, (long long)st.kv_budget_bytes);
}

/* --------------------------------------------------------------------------------- prompt mode */

typedef struct stream_state {
    bool failed;
    int64_t tokens;
} stream_state;

static void stream_token(void *user, const di_token_event *ev) {
    stream_state *st = user;
    if (ev->token_id >= 0) st->tokens++;
    if (ev->text_len) fwrite(ev->text, 1, ev->text_len, stdout);
    fflush(stdout);
    if (ev->finish == DI_FINISH_ERROR) st->failed = true;
}

/* {"messages": [{"role": "user", "content": text}]} */
static char *single_user_chat(const char *text) {
    cJSON *root = cJSON_CreateObject(), *msgs = cJSON_AddArrayToObject(root, "messages");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", "user");
    cJSON_AddStringToObject(m, "content", text);
    cJSON_AddItemToArray(msgs, m);
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

static int run_prompt(const di_settings *s, const di_engine_options *opt, const di_request *defaults) {
    di_engine *e = open_engine(s, opt);
    if (!e) return EXIT_FAIL;
    di_request q = *defaults;
    char *chat = s->chat ? single_user_chat(s->prompt) : NULL;
    if (chat) q.chat_json = chat;
    else q.prompt = s->prompt;
    if (di_settings_given(s, "seed")) {
        q.sampling.seed = (uint64_t)s->seed;
        q.has_seed = true;
    }
    stream_state st = {0};
    di_engine_set_callback(e, stream_token, &st);
    char msg[1024];
    uint64_t id;
    int rc = EXIT_OK;
    const double t0 = di_seconds_now();
    if (di_engine_add_request(e, &q, &id, msg, sizeof msg) || di_engine_run(e, msg, sizeof msg)) {
        fprintf(stderr, "deepinfer generate: %s\n", msg);
        rc = EXIT_FAIL;
    } else {
        di_result r;
        di_engine_result(e, id, &r);
        fputc('\n', stdout);
        if (r.finish == DI_FINISH_ERROR || st.failed) {
            fprintf(stderr, "deepinfer generate: %s\n", r.error ? r.error : "the request failed");
            rc = EXIT_FAIL;
        }
        if (s->verbose) print_summary(e, rc == EXIT_OK, rc != EXIT_OK, di_seconds_now() - t0);
    }
    if (fflush(stdout)) rc = EXIT_FAIL;
    cJSON_free(chat);
    di_engine_free(e);
    return rc;
}

/* ---------------------------------------------------------------------------------- batch mode */

typedef enum { SLOT_PENDING, SLOT_QUEUED, SLOT_DONE } slot_state;

typedef struct slot {
    int line_no;           /* 1-based, for messages */
    const char *text;      /* the line in the input buffer */
    size_t len;
    slot_state state;
    di_gen_request gr;     /* valid while queued */
    uint64_t engine_id;
    char *json;            /* the result line once done (error lines are made at once) */
} slot;

typedef struct batch {
    const di_settings *s;
    di_engine *e;
    di_request defaults;
    char *input;           /* the whole input file */
    slot *slots;
    int n_slots, head, next; /* head: first not yet written; next: first not yet admitted */
    int active, window;    /* engine requests not finished; most at once */
    int ok, failed;
    int64_t generated_tokens;
    FILE *out;
    di_progress progress;
} batch;

static void count_token(void *user, const di_token_event *ev) {
    batch *b = user;
    if (ev->token_id >= 0) b->generated_tokens++;
}

static char *read_all(const char *path, size_t *n_out, di_err *err) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        di_errf(err, DI_EIO, "--input %s: %s", path, strerror(errno));
        return NULL;
    }
    size_t n = 0, cap = 1 << 16;
    char *buf = di_xmalloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n - 1 == 0) buf = di_xrealloc(buf, cap *= 2);
    }
    bool bad = ferror(f);
    if (f != stdin) fclose(f);
    if (bad) {
        free(buf);
        di_errf(err, DI_EIO, "--input %s: read error", path);
        return NULL;
    }
    buf[n] = 0;
    *n_out = n;
    return buf;
}

/* One slot per non-blank line (blank lines are not requests and get no result). */
static void split_lines(batch *b, size_t n) {
    int cap = 64, line_no = 0;
    b->slots = di_xmalloc(sizeof(slot) * (size_t)cap);
    for (size_t at = 0; at < n;) {
        const char *p = b->input + at, *nl = memchr(p, '\n', n - at);
        size_t len = nl ? (size_t)(nl - p) : n - at;
        at += len + (nl != NULL);
        line_no++;
        size_t k = 0;
        while (k < len && (p[k] == ' ' || p[k] == '\t' || p[k] == '\r')) k++;
        if (k == len) continue;
        if (b->n_slots == cap) b->slots = di_xrealloc(b->slots, sizeof(slot) * (size_t)(cap *= 2));
        b->slots[b->n_slots++] = (slot){.line_no = line_no, .text = p, .len = len};
    }
}

static void slot_fail(batch *b, slot *sl, const cJSON *id, const char *type, const char *fmt, const char *msg) {
    char full[1400];
    snprintf(full, sizeof full, fmt, sl->line_no, msg);
    sl->json = di_gen_error_json(id, full, type);
    sl->state = SLOT_DONE;
    b->failed++;
}

/* Parses and queues lines until `window` requests are unfinished in the engine. */
static void admit(batch *b) {
    while (b->next < b->n_slots && b->active < b->window) {
        slot *sl = &b->slots[b->next++];
        di_err err = {0};
        char msg[1024];
        if (di_gen_request_parse(sl->text, sl->len, &b->defaults, &sl->gr, &err)) {
            slot_fail(b, sl, sl->gr.id, "invalid_request_error", "line %d: %s", err.msg);
            di_gen_request_free(&sl->gr);
            continue;
        }
        if (di_engine_add_request(b->e, &sl->gr.req, &sl->engine_id, msg, sizeof msg)) {
            slot_fail(b, sl, sl->gr.id, "invalid_request_error", "line %d: %s", msg);
            di_gen_request_free(&sl->gr);
            continue;
        }
        sl->state = SLOT_QUEUED;
        b->active++;
    }
}

/* A queued slot whose request finished: its result line, then the engine and the slot let go. */
static bool collect(batch *b, slot *sl) {
    di_result r;
    if (di_engine_result(b->e, sl->engine_id, &r) || r.finish == DI_FINISH_NONE) return false;
    if (r.finish == DI_FINISH_ERROR) {
        slot_fail(b, sl, sl->gr.id, "server_error", "line %d: %s", r.error ? r.error : "the request failed");
    } else {
        cJSON *line_id = sl->gr.id ? NULL : cJSON_CreateNumber(sl->line_no);
        sl->json = di_gen_result_json(sl->gr.id ? sl->gr.id : line_id, &sl->gr, &r);
        cJSON_Delete(line_id);
        sl->state = SLOT_DONE;
        b->ok++;
    }
    di_engine_release(b->e, sl->engine_id);
    di_gen_request_free(&sl->gr);
    return true;
}

/* Writes the results at the head that are done, in input order. */
static void flush_head(batch *b) {
    bool wrote = false;
    while (b->head < b->next) {
        slot *sl = &b->slots[b->head];
        if (sl->state == SLOT_QUEUED && !collect(b, sl)) break;
        fputs(sl->json, b->out);
        fputc('\n', b->out);
        cJSON_free(sl->json);
        sl->json = NULL;
        b->head++;
        wrote = true;
    }
    if (wrote) fflush(b->out);
}

/* The engine failed as a whole: every line not yet written gets an error result. */
static void fail_rest(batch *b, const char *msg) {
    for (int i = b->head; i < b->n_slots; i++) {
        slot *sl = &b->slots[i];
        if (sl->state == SLOT_DONE) continue;
        if (sl->state == SLOT_PENDING) { /* parse only for the id */
            di_err err = {0};
            di_gen_request_parse(sl->text, sl->len, &b->defaults, &sl->gr, &err);
        }
        slot_fail(b, sl, sl->gr.id, "server_error", "line %d: not run: %s", msg);
        di_gen_request_free(&sl->gr);
    }
    b->next = b->n_slots;
    flush_head(b);
}

static int run_loop(batch *b) {
    char msg[1024];
    for (;;) {
        admit(b);
        flush_head(b);
        di_progress_update(&b->progress, b->head, b->failed, b->generated_tokens, false);
        if (b->head == b->n_slots) return EXIT_OK;
        if (b->active == 0) { /* cannot happen: whatever is not written is queued or admittable */
            fail_rest(b, "internal error: no request in flight");
            return EXIT_FAIL;
        }
        /* collect() only looks at the head, so track finishing through the step's count */
        if (di_engine_step(b->e, &b->active, msg, sizeof msg)) {
            fprintf(stderr, "deepinfer generate: engine: %s\n", msg);
            fail_rest(b, msg);
            return EXIT_FAIL;
        }
    }
}

static int run_batch(const di_settings *s, const di_engine_options *opt, const di_request *defaults) {
    batch b = {.s = s, .defaults = *defaults};
    di_err err = {0};
    size_t n = 0;
    if (!(b.input = read_all(s->input, &n, &err))) {
        fprintf(stderr, "deepinfer generate: %s\n", err.msg);
        return EXIT_FAIL;
    }
    split_lines(&b, n);
    const bool to_stdout = !*s->output || !strcmp(s->output, "-");
    b.out = to_stdout ? stdout : fopen(s->output, "w");
    int rc = EXIT_FAIL;
    if (!b.out) {
        fprintf(stderr, "deepinfer generate: --output %s: %s\n", s->output, strerror(errno));
        goto done;
    }
    if (!(b.e = open_engine(s, opt))) goto done;
    di_engine_set_callback(b.e, count_token, &b);
    b.window = 2 * (s->max_num_seqs > 0 ? (int)s->max_num_seqs : 64);
    di_progress_init(&b.progress, stderr, b.n_slots);
    rc = run_loop(&b);
    di_progress_end(&b.progress);
    print_summary(b.e, b.ok, b.failed, di_seconds_now() - b.progress.t0_s);
    if (rc == EXIT_OK && b.failed) rc = EXIT_PARTIAL;
    if (ferror(b.out) || (to_stdout ? fflush(b.out) : fclose(b.out))) {
        fprintf(stderr, "deepinfer generate: --output %s: write failed\n", to_stdout ? "stdout" : s->output);
        rc = EXIT_FAIL;
    }
    b.out = NULL;
done:
    if (b.out && !to_stdout) fclose(b.out);
    for (int i = 0; i < b.n_slots; i++) {
        di_gen_request_free(&b.slots[i].gr);
        cJSON_free(b.slots[i].json);
    }
    free(b.slots);
    free(b.input);
    di_engine_free(b.e);
    return rc;
}

/* ------------------------------------------------------------------------------------- command */

int di_cmd_generate(di_settings *s, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) break;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(k_usage, stdout);
            return EXIT_OK;
        }
        if (!strcmp(argv[i], "-p")) argv[i] = "--prompt"; /* the registry knows long flags only */
    }
    int n_pos = 0;
    if (!di_cli_parse(s, argc, argv, &n_pos)) return EXIT_USAGE;
    const bool has_prompt = di_settings_given(s, "prompt"), has_input = *s->input != 0;
    const char *usage_error = n_pos ? "unexpected argument" : has_prompt && has_input ? "give -p or --input, not both"
                              : !has_prompt && !has_input ? "give --input FILE or -p TEXT" : NULL;
    if (!usage_error && s->chat && !has_prompt) usage_error = "--chat goes with -p";
    if (usage_error) {
        fprintf(stderr, "deepinfer generate: %s%s%s\n%s", usage_error, n_pos ? " " : "", n_pos ? argv[1] : "",
                k_usage);
        return EXIT_USAGE;
    }
    di_request defaults;
    di_engine_options opt;
    if (!request_defaults(s, &defaults) || !engine_options(s, &opt)) return EXIT_USAGE;
    return has_prompt ? run_prompt(s, &opt, &defaults) : run_batch(s, &opt, &defaults);
}
