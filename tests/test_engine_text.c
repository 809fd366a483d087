/* The engine with text: the demo model (random weights, the real V4.1 tokenizer) generated into a
 * temporary directory. Checks the rules that need a tokenizer: stop strings (cut from the text,
 * finish "stop"), stop token ids, the streaming callback (its pieces add up to the final text),
 * cancellation (the other request is unaffected), and chat requests through the template. */
#include <unistd.h>

#include "engine/engine_internal.h"
#include "fixture_util.h"
#include "model/demo_model.h"
#include "test_harness.h"

typedef struct stream {
    uint64_t id;
    char text[8192];
    size_t len;
    int events, finished;
} stream;

static void on_token(void *user, const di_token_event *ev) {
    stream *s = user;
    if (ev->request_id != s->id) return;
    s->events++;
    if (s->len + ev->text_len < sizeof s->text) {
        memcpy(s->text + s->len, ev->text, ev->text_len);
        s->len += ev->text_len;
    }
    s->finished += ev->finish != DI_FINISH_NONE;
}

static di_request sampled(const char *prompt, int max_tokens) {
    di_request q = {.prompt = prompt, .max_tokens = max_tokens, .ignore_eos = true, .has_seed = true};
    di_sampling_params_init(&q.sampling);
    q.sampling.temperature = 1.0f;
    q.sampling.seed = 7;
    return q;
}

static uint64_t submit(di_engine *e, const di_request *q) {
    uint64_t id = 0;
    char msg[512];
    CHECKF(di_engine_add_request(e, q, &id, msg, sizeof msg) == DI_OK, "%s", msg);
    return id;
}

int main(void) {
    char dir[] = "/tmp/deepinfer-engine-text-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char model_dir[4096];
    snprintf(model_dir, sizeof model_dir, "%s/demo", dir);
    di_err err = {0};
    if (di_demo_model_write(model_dir, &err)) {
        fprintf(stderr, "demo model: %s\n", err.msg);
        return 1;
    }
    di_engine_options o = {.model_dir = model_dir, .backend = test_backend()};
    di_engine *e = NULL;
    char msg[512];
    CHECKF(di_engine_create(&o, &e, msg, sizeof msg) == DI_OK, "%s", msg);
    if (!e) return TEST_SUMMARY();
    CHECK(di_engine_has_tokenizer(e));
    stream s = {0};
    di_engine_set_callback(e, on_token, &s);

    /* a free run, streamed */
    di_request q = sampled("The quick brown fox", 24);
    s.id = submit(e, &q);
    CHECK(di_engine_run(e, msg, sizeof msg) == DI_OK);
    di_result r;
    CHECK(di_engine_result(e, s.id, &r) == DI_OK);
    printf("free run: %d tokens, %zu bytes of text, finish %s\n", r.n_tokens, r.text_len, di_finish_reason_name(r.finish));
    CHECK(r.n_tokens == 24 && r.finish == DI_FINISH_LENGTH);
    CHECK(s.len == r.text_len && !memcmp(s.text, r.text, r.text_len));
    CHECK(s.events == 24 && s.finished == 1);
    char full[8192];
    size_t full_len = r.text_len < sizeof full - 1 ? r.text_len : sizeof full - 1;
    memcpy(full, r.text, full_len);
    full[full_len] = 0;
    int32_t third = r.token_ids[2];
    di_engine_release(e, s.id);

    /* the same request with a stop string taken from the middle of that output */
    if (full_len > 12) {
        char stop[8];
        memcpy(stop, full + full_len / 2, 4);
        stop[4] = 0;
        const char *stops[1] = {stop};
        q.stop = stops;
        q.n_stop = 1;
        memset(&s, 0, sizeof s);
        s.id = submit(e, &q);
        CHECK(di_engine_run(e, msg, sizeof msg) == DI_OK);
        di_engine_result(e, s.id, &r);
        const char *at = strstr(full, stop);
        size_t want = at ? (size_t)(at - full) : full_len;
        printf("stop string \"%s\": %zu bytes of text (expected %zu), finish %s\n", stop, r.text_len, want,
               di_finish_reason_name(r.finish));
        CHECK(r.finish == DI_FINISH_STOP && r.text_len == want && !memcmp(r.text, full, want));
        CHECK(s.len == r.text_len && !memcmp(s.text, r.text, r.text_len)); /* nothing past the stop streamed */
        di_engine_release(e, s.id);
        q.stop = NULL;
        q.n_stop = 0;
    }

    /* stop token ids: the run ends at the third token */
    q.stop_token_ids = &third;
    q.n_stop_token_ids = 1;
    uint64_t id = submit(e, &q);
    CHECK(di_engine_run(e, msg, sizeof msg) == DI_OK);
    di_engine_result(e, id, &r);
    CHECK(r.finish == DI_FINISH_STOP && r.n_tokens <= 3 && r.token_ids[r.n_tokens - 1] == third);
    di_engine_release(e, id);
    q.stop_token_ids = NULL;
    q.n_stop_token_ids = 0;

    /* cancellation: two requests, one cancelled after a step; the other equals its solo run */
    memset(&s, 0, sizeof s);
    uint64_t a = submit(e, &q);
    di_request q2 = sampled("Once upon a time", 16);
    uint64_t b = submit(e, &q2);
    int active = 0;
    CHECK(di_engine_step(e, &active, msg, sizeof msg) == DI_OK && active == 2);
    CHECK(di_engine_cancel(e, b) == DI_OK);
    CHECK(di_engine_run(e, msg, sizeof msg) == DI_OK);
    di_engine_result(e, b, &r);
    CHECK(r.finish == DI_FINISH_CANCELLED);
    di_engine_result(e, a, &r);
    CHECK(r.finish == DI_FINISH_LENGTH && r.text_len == full_len && !memcmp(r.text, full, full_len));
    di_engine_release(e, a);
    di_engine_release(e, b);

    /* a chat request through the V4.1 template */
    di_request c = {.chat_json = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}], \"thinking\": false}",
                    .max_tokens = 4};
    di_sampling_params_init(&c.sampling);
    id = submit(e, &c);
    CHECK(di_engine_run(e, msg, sizeof msg) == DI_OK);
    di_engine_result(e, id, &r);
    CHECK(r.prompt_tokens == 5 && (r.finish == DI_FINISH_LENGTH || r.finish == DI_FINISH_STOP));
    printf("chat request: %d prompt tokens (BOS <User> Hello <Assistant> </think>), finish %s\n", r.prompt_tokens,
           di_finish_reason_name(r.finish));
    di_engine_release(e, id);
    di_engine_free(e);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0);
    return TEST_SUMMARY();
}
