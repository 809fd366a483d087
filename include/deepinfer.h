/* deepinfer public C API: an inference engine for DeepSeek-V4.1-Flash.
 *
 * One engine owns a model and a scheduler: add requests (text, chat messages or token ids, each
 * with its own sampling parameters), step or run to completion, get tokens through a streaming
 * callback and results at the end. Errors are a status plus a message. All symbols are `di_`. */
#ifndef DEEPINFER_H
#define DEEPINFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DI_VERSION_STRING "0.1.0"

typedef enum di_status {
    DI_OK = 0,
    DI_EINVAL = 1,     /* bad argument or malformed input (config, request, JSON) */
    DI_EIO = 2,        /* file missing, unreadable, truncated */
    DI_EFORMAT = 3,    /* file readable but its content violates the format (safetensors, tokenizer) */
    DI_ENOMEM = 4,     /* a memory budget or allocation could not be met */
    DI_EUNSUPPORTED = 5,
    DI_ERANGE = 6,     /* an id, length or position out of range */
    DI_EINTERNAL = 7,
} di_status;

const char *di_status_name(di_status s);

/* ===================================================================================== sampling */

#define DI_MAX_LOGPROBS 20

typedef struct di_logit_bias {
    int32_t token_id;
    float bias; /* finite; several entries for one id add up */
} di_logit_bias;

typedef enum di_logprobs_mode {
    DI_LOGPROBS_RAW = 0,       /* log_softmax of the model's logits (vLLM's default) */
    DI_LOGPROBS_PROCESSED = 1, /* log of the distribution actually sampled from */
} di_logprobs_mode;

/* Per-request sampling (docs/SAMPLING.md). di_sampling_params_init gives the OpenAI defaults. */
typedef struct di_sampling_params {
    float temperature;        /* >= 0; 0 = greedy */
    int32_t top_k;            /* >= 0; 0 = off */
    float top_p;              /* (0, 1]; 1 = off */
    float min_p;              /* [0, 1]; 0 = off */
    float repetition_penalty; /* > 0; 1 = off */
    float presence_penalty;   /* [-2, 2]; 0 = off */
    float frequency_penalty;  /* [-2, 2]; 0 = off */
    const di_logit_bias *logit_bias; /* [n_logit_bias], borrowed */
    int32_t n_logit_bias;
    int32_t logprobs;         /* 0..DI_MAX_LOGPROBS top entries per token; 0 = off */
    di_logprobs_mode logprobs_mode;
    uint64_t seed;            /* randomness is keyed by (seed, position): batch-independent */
} di_sampling_params;

void di_sampling_params_init(di_sampling_params *p);

typedef struct di_token_logprob {
    int32_t token_id;
    float logprob;
} di_token_logprob;

/* ======================================================================================= engine */

typedef struct di_engine di_engine;

typedef struct di_engine_options {
    const char *model_dir;     /* HF checkpoint directory (config.json, safetensors, tokenizer.json) */
    int64_t kv_budget_bytes;   /* memory for per-sequence state: rings + paged KV (0 = 1 GiB) */
    int max_num_seqs;          /* sequences running at once (0 = 64) */
    int max_batch_tokens;      /* tokens per step, decode + prefill chunks (0 = 2048) */
    int max_prefill_chunk;     /* prefill tokens of one sequence per step (0 = max_batch_tokens) */
    uint64_t seed;             /* default seed of requests that give none, mixed with their id */
    const char *backend;       /* "cpu" (NULL/""), "cuda" (error if unavailable), "auto" */
    bool batch_invariant;      /* device backends: logits independent of the batch (CPU: always) */
    bool exact;                /* device backends: the CPU's exact GEMM block sums (CPU: always) */
    bool eager;                /* device backends: no CUDA graphs (every kernel launched directly) */
    bool no_wgmma;             /* CUDA: prefill-sized quantised GEMMs on the mma.sync tiles instead of wgmma */
    bool no_pdl;               /* CUDA: plain edges in the captured graphs instead of programmatic ones */
    bool no_blas;              /* CUDA: prefill-sized FP8 linears on the wgmma kernel, not cuBLAS's BF16 GEMM */
    int dense_bf16_rows;       /* CUDA: > 0 keeps the dense FP8 matrices also as bf16 (13.0 GB for V4.1-Flash)
                                  and runs their calls of at least this many rows on cuBLAS over the copies */
    bool host_sampling;        /* device backends: every sampled row's logits to the host's sampler
                                  threads instead of sampling where they are (the same tokens and
                                  logprobs; for checking) */
} di_engine_options;

typedef struct di_request {
    /* exactly one prompt form */
    const char *prompt;             /* text, tokenised without special tokens (needs tokenizer.json) */
    const char *chat_json;          /* OpenAI-style chat request {"messages": [...], "tools", ...} */
    const int32_t *prompt_ids;      /* [n_prompt_ids] token ids */
    int n_prompt_ids;
    int max_tokens;                 /* tokens to generate at most (0 = 16) */
    di_sampling_params sampling;
    bool has_seed;                  /* false: the engine derives a seed from its own and the id */
    const char *const *stop;        /* [n_stop] stop strings (not part of the output) */
    int n_stop;
    const int32_t *stop_token_ids;  /* [n_stop_token_ids] */
    int n_stop_token_ids;
    bool ignore_eos;
    /* structured output (docs/STRUCTURED_OUTPUT.md): at most one; NULL / false = none. Tokens are
     * masked so the output follows the constraint; EOS only where the output is complete. An
     * output cut by max_tokens or a stop string finishes as such ("length" / "stop"). */
    const char *regex;              /* the whole output matches this regex */
    const char *grammar_ebnf;       /* GBNF / xgrammar EBNF, start rule `root` */
    const char *json_schema;        /* JSON schema text (response_format json_schema) */
    bool json_object;               /* any JSON object (response_format json_object) */
} di_request;

typedef enum di_finish_reason {
    DI_FINISH_NONE = 0,     /* still running */
    DI_FINISH_STOP,         /* EOS, a stop token or a stop string */
    DI_FINISH_LENGTH,       /* max_tokens reached */
    DI_FINISH_CANCELLED,
    DI_FINISH_ERROR,        /* the request failed on its own (message in di_result.error) */
} di_finish_reason;

const char *di_finish_reason_name(di_finish_reason r); /* "stop", "length", ... */

/* One generated token, as the streaming callback sees it. */
typedef struct di_token_event {
    uint64_t request_id;
    int32_t token_id;
    const char *text;        /* new text that became final with this token (may be empty) */
    size_t text_len;
    float logprob;           /* when logprobs were asked for */
    const di_token_logprob *top;
    int n_top;
    di_finish_reason finish; /* != DI_FINISH_NONE on the request's last event */
} di_token_event;

typedef void (*di_token_callback)(void *user, const di_token_event *ev);

typedef struct di_result {
    uint64_t request_id;
    di_finish_reason finish;
    const int32_t *token_ids;       /* [n_tokens] generated ids */
    int n_tokens;
    const char *text;               /* generated text, NULL without a tokenizer */
    size_t text_len;
    int prompt_tokens;
    const float *logprobs;          /* [n_tokens] when asked for, else NULL */
    const di_token_logprob *top_logprobs; /* [n_tokens * n_top] */
    int n_top;
    const char *error;              /* message when finish == DI_FINISH_ERROR */
} di_result;

typedef struct di_engine_stats {
    int64_t steps, prefill_tokens, decode_tokens, preemptions;
    double prefill_seconds, decode_seconds, plan_seconds;
    double mask_seconds;            /* structured-output masks, computed while a device runs the step */
    double sample_seconds;          /* sampling the rows whose logits reach the host (host threads) */
    int64_t kv_bytes_in_use, kv_budget_bytes;
    int64_t seq_fixed_bytes;        /* rings + pair state of one sequence */
    double kv_bytes_per_token;      /* paged state per context token */
    int running, waiting, finished;
} di_engine_stats;

/* Errors: every call returns a status; when errbuf is given it receives a message naming the
 * field, file or request at fault. */
di_status di_engine_create(const di_engine_options *opt, di_engine **out, char *errbuf, size_t errcap);
void di_engine_free(di_engine *e);
void di_engine_set_callback(di_engine *e, di_token_callback cb, void *user);
bool di_engine_has_tokenizer(const di_engine *e);
/* Queues a request. A request that is wrong in itself (empty or oversized prompt, bad sampling
 * parameters, unknown ids) is refused here with DI_EINVAL / DI_ERANGE; nothing else is affected. */
di_status di_engine_add_request(di_engine *e, const di_request *req, uint64_t *id_out, char *errbuf,
                                size_t errcap);
di_status di_engine_cancel(di_engine *e, uint64_t request_id);
/* One scheduler step: plan a batch, run it, sample, commit. *active = requests not yet finished. */
di_status di_engine_step(di_engine *e, int *active, char *errbuf, size_t errcap);
/* Steps until every queued request has finished. */
di_status di_engine_run(di_engine *e, char *errbuf, size_t errcap);
/* The result of a request (valid until di_engine_free or di_engine_release). */
di_status di_engine_result(const di_engine *e, uint64_t request_id, di_result *out);
void di_engine_release(di_engine *e, uint64_t request_id);
void di_engine_get_stats(const di_engine *e, di_engine_stats *out);
/* Bytes of weights the model's text path holds (what a decode step reads at most). */
int64_t di_engine_model_bytes(const di_engine *e);

#ifdef __cplusplus
}
#endif
#endif
