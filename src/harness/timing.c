/* GPU time by docs/BENCH.md's protocol, for `mlajit bench` and the tuner: a
 * CUDA graph of `calls` decode calls (call i with args[i % n_args], so each
 * captured call can read its own fresh indices), replayed after one untimed
 * replay; the median replay over the calls. One capture serves any number of
 * timings (the tuner's short look, then its full one). Driver calls go through
 * the runtime's driver table, as everything else in the harness does. */
#include <stdlib.h>

#include "common/alloc.h"
#include "common/error.h"
#include "harness/harness.h"
#include "runtime/runtime.h"

struct mlajit_graph_timer {
    mlajit_context *ctx;
    const mlajit_driver *drv;
    CUstream stream;
    int own_stream, calls;
    CUevent ev0, ev1;
    CUgraph graph;
    CUgraphExec exec;
};

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

void mlajit_graph_timer_free(mlajit_graph_timer *t)
{
    if (!t)
        return;
    const mlajit_driver *drv = t->drv;
    int pushed = mlajit_context_enter(t->ctx);
    if (t->exec) drv->cuGraphExecDestroy(t->exec);
    if (t->graph) drv->cuGraphDestroy(t->graph);
    if (t->ev0) drv->cuEventDestroy(t->ev0);
    if (t->ev1) drv->cuEventDestroy(t->ev1);
    if (t->stream && t->own_stream) drv->cuStreamDestroy(t->stream);
    mlajit_context_leave(t->ctx, pushed);
    free(t);
}

int mlajit_graph_timer_create(mlajit_context *ctx, const mlajit_plan *plan, const mlajit_decode_args *args,
                              int n_args, int calls, void *stream, mlajit_graph_timer **out)
{
    if (!out)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "graph timing: out must not be NULL");
    *out = NULL;
    if (!ctx || !plan || !args || n_args < 1 || calls < 1)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "graph timing: ctx, plan and args must not be NULL; n_args and calls >= 1");
    const mlajit_driver *drv = mlajit_context_driver(ctx);
    if (!drv)
        return mlajit_fail(MLAJIT_ERR_NO_DEVICE, "graph timing needs a GPU");
    mlajit_graph_timer *t = mlajit_calloc(1, sizeof *t);
    if (!t)
        return mlajit_fail_oom("a graph timer");
    t->ctx = ctx;
    t->drv = drv;
    t->calls = calls;
    t->stream = stream;
    t->own_stream = stream == NULL;
    int pushed = mlajit_context_enter(ctx);
    int rc = MLAJIT_OK;
    CUresult r = MLAJIT_CU_SUCCESS;
    if ((t->own_stream && (r = drv->cuStreamCreate(&t->stream, MLAJIT_CU_STREAM_NON_BLOCKING))) ||
        (r = drv->cuEventCreate(&t->ev0, 0)) || (r = drv->cuEventCreate(&t->ev1, 0))) {
        rc = mlajit_cuda_fail(drv, r, "stream/event create");
        goto done;
    }
    if ((r = drv->cuStreamBeginCapture(t->stream, MLAJIT_CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))) {
        rc = mlajit_cuda_fail(drv, r, "cuStreamBeginCapture");
        goto done;
    }
    for (int i = 0; i < calls && rc == MLAJIT_OK; i++)
        rc = mlajit_decode(plan, &args[i % n_args], t->stream);
    r = drv->cuStreamEndCapture(t->stream, &t->graph);
    if (rc)
        goto done;
    if (r || (r = drv->cuGraphInstantiateWithFlags(&t->exec, t->graph, 0))) {
        rc = mlajit_cuda_fail(drv, r, "graph capture/instantiate");
        goto done;
    }
    drv->cuGraphLaunch(t->exec, t->stream); /* untimed: first touches, clocks up */
    if ((r = drv->cuStreamSynchronize(t->stream)))
        rc = mlajit_cuda_fail(drv, r, "graph warm-up replay");
done:
    mlajit_context_leave(ctx, pushed);
    if (rc)
        mlajit_graph_timer_free(t);
    else
        *out = t;
    return rc;
}

int mlajit_graph_timer_time(mlajit_graph_timer *t, int replays, double *us)
{
    if (!t || replays < 1 || !us)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "graph timing: timer and us must not be NULL; replays >= 1");
    *us = 0.0;
    const mlajit_driver *drv = t->drv;
    float *samples = mlajit_malloc((size_t)replays * sizeof *samples);
    if (!samples)
        return mlajit_fail_oom("graph timing samples");
    int pushed = mlajit_context_enter(t->ctx);
    int rc = MLAJIT_OK;
    for (int i = 0; i < replays; i++) {
        CUresult r;
        drv->cuEventRecord(t->ev0, t->stream);
        drv->cuGraphLaunch(t->exec, t->stream);
        drv->cuEventRecord(t->ev1, t->stream);
        if ((r = drv->cuEventSynchronize(t->ev1))) {
            rc = mlajit_cuda_fail(drv, r, "graph replay");
            break;
        }
        drv->cuEventElapsedTime(&samples[i], t->ev0, t->ev1);
    }
    if (rc == MLAJIT_OK) {
        qsort(samples, (size_t)replays, sizeof *samples, cmp_float);
        float med = replays % 2 ? samples[replays / 2] : 0.5f * (samples[replays / 2 - 1] + samples[replays / 2]);
        *us = (double)med * 1e3 / t->calls;
    }
    mlajit_context_leave(t->ctx, pushed);
    free(samples);
    return rc;
}

int mlajit_time_plan_graph(mlajit_context *ctx, const mlajit_plan *plan, const mlajit_decode_args *args, int n_args,
                           int calls, int replays, void *stream, double *us)
{
    if (!us || replays < 1)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "graph timing: us must not be NULL; replays >= 1");
    *us = 0.0;
    mlajit_graph_timer *t = NULL;
    int rc = mlajit_graph_timer_create(ctx, plan, args, n_args, calls, stream, &t);
    if (rc == MLAJIT_OK)
        rc = mlajit_graph_timer_time(t, replays, us);
    mlajit_graph_timer_free(t);
    return rc;
}
