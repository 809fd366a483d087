/* Backend selection (see device.h). The CUDA backend is linked in only by the -DDI_CUDA=ON build,
 * which defines DI_WITH_CUDA for this file. */
#include "forward/device.h"

#include <stdlib.h>
#include <string.h>

#ifdef DI_WITH_CUDA
const di_device_backend *di_cuda_backend_probe(const char **why);
#endif

const di_device_backend *di_cuda_backend(const char **why) {
#ifdef DI_WITH_CUDA
    return di_cuda_backend_probe(why);
#else
    if (why) *why = "this build has no CUDA backend (build with `make cuda`, -DDI_CUDA=ON)";
    return NULL;
#endif
}

di_status di_model_select_backend(di_model *m, const char *name, unsigned flags, di_err *err) {
    if (!name || !*name || !strcmp(name, "cpu")) return DI_OK;
    const bool want_cuda = !strcmp(name, "cuda") || !strcmp(name, "nvidia");
    if (!want_cuda && strcmp(name, "auto") != 0)
        return di_errf(err, DI_EINVAL, "unknown backend '%s' (cpu, cuda or auto; DEEPINFER_ACCELERATOR: "
                       "cpu or nvidia)", name);
    if (m->dev_backend) return DI_OK;
    const char *why = "";
    const di_device_backend *be = di_cuda_backend(&why);
    if (!be) {
        if (want_cuda) return di_errf(err, DI_EUNSUPPORTED, "backend cuda: %s", why);
        return DI_OK; /* auto: the CPU */
    }
    m->batch_invariant = (flags & DI_BACKEND_BATCH_INVARIANT) != 0;
    m->exact_gemm = (flags & DI_BACKEND_EXACT) != 0;
    m->wgmma_gemm = (flags & DI_BACKEND_WGMMA) != 0;
    m->device_graphs = (flags & DI_BACKEND_EAGER) == 0;
    m->device_pdl = (flags & DI_BACKEND_PDL) != 0;
    m->blas_gemm = (flags & DI_BACKEND_BLAS) != 0;
    m->dev_backend = be;
    di_status st = be->attach(m, err);
    if (st) {
        m->dev_backend = NULL;
        return di_err_prefix(err, "backend %s", be->name);
    }
    return DI_OK;
}

void *di_model_result_alloc(const di_model *m, size_t bytes) {
    const di_device_backend *be = m->dev_backend;
    return be && be->host_alloc ? be->host_alloc(bytes) : malloc(bytes ? bytes : 1);
}
void di_model_result_free(const di_model *m, void *p) {
    const di_device_backend *be = m->dev_backend;
    if (!p) return;
    if (be && be->host_free) be->host_free(p);
    else free(p);
}

const char *di_model_backend_name(const di_model *m) { return m->dev_backend ? m->dev_backend->name : "cpu"; }
