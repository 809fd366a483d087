/* Backend selection (forward/device.h): names, errors, and what a build without a usable device
 * does. In the CPU build (CI) "cuda" is a clear DI_EUNSUPPORTED error and "auto" stays on the CPU;
 * where the CUDA backend and a GPU exist, "cuda" and "auto" attach it. Unknown names are DI_EINVAL
 * naming the choices. The model stays usable on the CPU after a refused selection. */
#include <string.h>

#include "forward/device.h"
#include "forward/run.h"
#include "test_harness.h"
#include "fixture_util.h"

int main(void) {
    di_err err = {0};
    di_model *m = NULL;
    if (di_model_load(&m, DI_TINY_FIXTURE_DIR, &err)) {
        fprintf(stderr, "setup: %s\n", err.msg);
        return 1;
    }
    const char *why = NULL;
    const bool have_gpu = di_cuda_backend(&why) != NULL;
    printf("CUDA backend: %s\n", have_gpu ? "available" : why);
    CHECK(!have_gpu || why == NULL || *why);

    CHECK(di_model_select_backend(m, "bogus", false, &err) == DI_EINVAL);
    CHECKF(strstr(err.msg, "cpu, cuda or auto") != NULL, "%s", err.msg);
    CHECK(di_model_select_backend(m, "cpu", false, &err) == DI_OK);
    CHECK(di_model_select_backend(m, NULL, false, &err) == DI_OK);
    CHECK(!strcmp(di_model_backend_name(m), "cpu"));
    if (!have_gpu) {
        err.msg[0] = 0;
        CHECK(di_model_select_backend(m, "cuda", false, &err) == DI_EUNSUPPORTED);
        CHECKF(strstr(err.msg, "backend cuda") != NULL, "%s", err.msg);
        CHECK(di_model_select_backend(m, "nvidia", false, &err) == DI_EUNSUPPORTED);
        CHECK(di_model_select_backend(m, "auto", false, &err) == DI_OK);
        CHECK(!strcmp(di_model_backend_name(m), "cpu"));
    } else {
        CHECK(di_model_select_backend(m, "auto", DI_BACKEND_BATCH_INVARIANT, &err) == DI_OK);
        CHECK(!strcmp(di_model_backend_name(m), "cuda"));
        CHECK(m->batch_invariant);
    }
    /* the model still runs after the refused selections */
    const int32_t ids[4] = {0, 17, 42, 99};
    float *logits = malloc(sizeof(float) * 4 * (size_t)m->cfg.vocab_size);
    CHECKF(di_run_ids(m, ids, 4, 4, NULL, logits, NULL, NULL, NULL, &err) == DI_OK, "%s", err.msg);
    CHECK(isfinite(logits[0]));
    free(logits);
    di_model_free(m);
    return TEST_SUMMARY();
}
