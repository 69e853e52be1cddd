/* What one decode call does, for the benchmark's throughput columns, and how
 * close a measured time comes to the H200's ceilings (docs/BENCH.md). One place
 * for every layout: the counts come from the layout's descriptor (d_qk, d_v,
 * bytes per token), so a named model and a custom layout are counted alike. */
#include "common/error.h"
#include "harness/harness.h"

int mlajit_work_count(const mlajit_model_desc *m, int h_q, int b, int s_q, int topk, int extra_topk, mlajit_work *w)
{
    if (!w)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT, "work: w must not be NULL");
    *w = (mlajit_work){0};
    if (!m || h_q < 1 || b < 0 || s_q < 0 || topk < 0 || extra_topk < 0)
        return mlajit_fail(MLAJIT_ERR_INVALID_ARGUMENT,
                           "work: a descriptor, h_q >= 1 and b, s_q, topk, extra_topk >= 0 are needed");
    /* in doubles: the products reach 1e13 and more, past int */
    const double rows = (double)b * s_q, cand = rows * ((double)topk + extra_topk);
    w->flop = 2.0 * h_q * cand * (m->d_qk + m->d_v);
    w->kv_bytes = cand * m->bytes_per_token;
    w->q_bytes = rows * h_q * m->d_qk * 2.0;             /* bf16 */
    w->out_bytes = rows * h_q * (m->d_v * 2.0 + 4.0);    /* bf16 out and the fp32 lse */
    return MLAJIT_OK;
}

double mlajit_work_bytes(const mlajit_work *w) { return w->kv_bytes + w->q_bytes + w->out_bytes; }

double mlajit_ceiling_us(double flop, double bytes, int *memory_bound)
{
    const double compute_us = flop / MLAJIT_H200_BF16_FLOPS * 1e6;
    const double memory_us = bytes / MLAJIT_H200_HBM_BYTES_PER_S * 1e6;
    if (memory_bound)
        *memory_bound = memory_us >= compute_us;
    return memory_us >= compute_us ? memory_us : compute_us;
}
