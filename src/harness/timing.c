/* GPU time by docs/BENCH.md's protocol, for `mlajit bench` and the tuner: a
 * CUDA graph of `calls` decode calls (call i with args[i % n_args], so each
 * captured call can read its own fresh indices), replayed `replays` times after
 * one untimed replay; the median replay over the calls. Driver calls go through
 * the runtime's driver table, as everything else in the harness does. */
#include <stdlib.h>

#include "common/alloc.h"
#include "common/error.h"
#include "harness/harness.h"
#include "runtime/runtime.h"

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

int mlajit_time_plan_graph(mlajit_context *ctx, const mlajit_plan *plan, const mlajit_decode_args *args, int n_args,
                           int calls, int replays, void *stream_in, double *us)
{
    if (!ctx || !plan || !args || n_args < 1 || calls < 1 || replays < 1 || !us)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "graph timing: ctx, plan, args and us must not be NULL; n_args, calls and replays >= 1");
    *us = 0.0;
    const mlajit_driver *drv = mlajit_context_driver(ctx);
    if (!drv)
        return mlajit_fail(MLAJIT_ERR_NO_DEVICE, "graph timing needs a GPU");
    int pushed = mlajit_context_enter(ctx);
    CUstream stream = stream_in;
    CUevent ev0 = NULL, ev1 = NULL;
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    float *samples = malloc((size_t)replays * sizeof *samples);
    int rc = samples ? MLAJIT_OK : mlajit_fail_oom("graph timing samples");
    CUresult r = MLAJIT_CU_SUCCESS;
    if (rc)
        goto done;
    if ((!stream_in && (r = drv->cuStreamCreate(&stream, MLAJIT_CU_STREAM_NON_BLOCKING))) ||
        (r = drv->cuEventCreate(&ev0, 0)) || (r = drv->cuEventCreate(&ev1, 0))) {
        rc = mlajit_cuda_fail(drv, r, "stream/event create");
        goto done;
    }
    if ((r = drv->cuStreamBeginCapture(stream, MLAJIT_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))) {
        rc = mlajit_cuda_fail(drv, r, "cuStreamBeginCapture");
        goto done;
    }
    for (int i = 0; i < calls && rc == MLAJIT_OK; i++)
        rc = mlajit_decode(plan, &args[i % n_args], stream);
    r = drv->cuStreamEndCapture(stream, &graph);
    if (rc)
        goto done;
    if (r || (r = drv->cuGraphInstantiateWithFlags(&exec, graph, 0))) {
        rc = mlajit_cuda_fail(drv, r, "graph capture/instantiate");
        goto done;
    }
    drv->cuGraphLaunch(exec, stream);
    if ((r = drv->cuStreamSynchronize(stream))) {
        rc = mlajit_cuda_fail(drv, r, "graph warm-up replay");
        goto done;
    }
    for (int i = 0; i < replays; i++) {
        drv->cuEventRecord(ev0, stream);
        drv->cuGraphLaunch(exec, stream);
        drv->cuEventRecord(ev1, stream);
        if ((r = drv->cuEventSynchronize(ev1))) {
            rc = mlajit_cuda_fail(drv, r, "graph replay");
            goto done;
        }
        drv->cuEventElapsedTime(&samples[i], ev0, ev1);
    }
    qsort(samples, (size_t)replays, sizeof *samples, cmp_float);
    float med = replays % 2 ? samples[replays / 2] : 0.5f * (samples[replays / 2 - 1] + samples[replays / 2]);
    *us = (double)med * 1e3 / calls;
done:
    if (exec) drv->cuGraphExecDestroy(exec);
    if (graph) drv->cuGraphDestroy(graph);
    if (ev0) drv->cuEventDestroy(ev0);
    if (ev1) drv->cuEventDestroy(ev1);
    if (stream && !stream_in) drv->cuStreamDestroy(stream);
    mlajit_context_leave(ctx, pushed);
    free(samples);
    return rc;
}
