/* mlajit fuzz: random decode calls over the whole envelope (harness/fuzz.h),
 * each run through the library and checked.
 *
 * On a GPU every call is planned, launched and compared with the fp64 reference
 * under SPEC.md's bar. The calls run in a worker process that the fuzzer restarts
 * after a CUDA fault (which leaves a CUDA context unusable) or a crash, so one
 * bad call never ends the run; every call's result comes back over a pipe.
 *
 * --cpu-only generates and NVRTC-compiles each drawn spec for four arch families
 * and validates the call's arguments, without launching; it also builds the case
 * and runs the reference on it. It finds codegen and compile failures, envelope
 * disagreements and harness bugs on a machine without a GPU.
 *
 * Whatever the mode, the envelope query (mlajit_envelope_check) must agree with
 * the library: a call it accepts must compile and launch, one it rejects must be
 * refused by the planner too, with a reason.
 *
 * A failure is shrunk (smaller b, s_q, topk while it still fails the same way),
 * written as a case directory in the golden cases' format with the reference's
 * expected output, and printed with the command lines that replay it. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "codegen/codegen.h"
#include "common/error.h"
#include "harness/fuzz.h"
#include "harness/harness.h"
#include "mlajit.h"

/* The arch families --cpu-only compiles every spec for. */
static const char *const cpu_arches[] = {"sm_80", "sm_90a", "sm_100a", "sm_120a"};
#define CPU_ARCH_COUNT 4

enum fail_kind {
    FAIL_NONE = 0,
    FAIL_SETUP,          /* the fuzzer could not build the call's case */
    FAIL_REJECTED_RAN,   /* the envelope rejected the call, the library ran it */
    FAIL_NO_REASON,      /* the envelope rejected the call without a message */
    FAIL_ACCEPTED_ERROR, /* the envelope accepted the call, the library refused or failed it */
    FAIL_ARGS_REJECTED,  /* valid decode arguments were rejected */
    FAIL_NUMERIC,        /* out or lse outside SPEC.md's bar */
    FAIL_REFERENCE,      /* the reference failed or produced NaN */
    FAIL_ROUND_TRIP,     /* the case did not survive save + load */
    FAIL_CUDA_FAULT,     /* a CUDA error: the context is lost */
    FAIL_CRASH           /* the worker process died */
};

static const char *fail_name(int kind)
{
    switch (kind) {
    case FAIL_SETUP: return "fuzzer setup";
    case FAIL_REJECTED_RAN: return "envelope rejected it but the library ran it";
    case FAIL_NO_REASON: return "envelope rejected it without a reason";
    case FAIL_ACCEPTED_ERROR: return "envelope accepted it but the library failed";
    case FAIL_ARGS_REJECTED: return "valid decode arguments rejected";
    case FAIL_NUMERIC: return "outside SPEC.md's numerical bar";
    case FAIL_REFERENCE: return "reference failed";
    case FAIL_ROUND_TRIP: return "case save/load round trip";
    case FAIL_CUDA_FAULT: return "CUDA fault";
    case FAIL_CRASH: return "crash";
    default: return "none";
    }
}

typedef struct fuzz_options {
    int seconds;
    uint64_t seed;
    int cpu_only;
    int64_t only_call; /* --call N, else -1 */
    const char *out_dir;
    int tuned_grid; /* --tuned-grid */
    const char *model_name; /* --model M, else NULL */
    mlajit_model model;
} fuzz_options;

static unsigned draw_flags(const fuzz_options *o, unsigned flags)
{
    return flags | (o->tuned_grid ? MLAJIT_FUZZ_TUNED_GRID : 0) |
           (o->model_name ? (unsigned)o->model << MLAJIT_FUZZ_MODEL_SHIFT : 0);
}

/* the redraw line's options besides the seed and call */
static void print_redraw_options(const fuzz_options *o)
{
    if (o->tuned_grid) printf(" --tuned-grid");
    if (o->model_name) printf(" --model %s", mlajit_model_describe(o->model)->name);
}

typedef struct call_outcome {
    int kind;
    int rejected;     /* the envelope rejected it (for at least one arch in --cpu-only) */
    int compiled;     /* kernels compiled for it */
    int context_lost; /* a CUDA fault: the worker must be replaced */
    char arch[MLAJIT_ARCH_LEN];
    char message[1200];
} call_outcome;

/* What a worker sends back per call. */
typedef struct call_record {
    int64_t number;
    int kind, rejected, compiled, heavy;
} call_record;

typedef struct fuzz_counts {
    int64_t calls, passed, failed, rejected, compiled, heavy;
} fuzz_counts;

static void count(fuzz_counts *n, const call_record *r)
{
    n->calls++;
    n->compiled += r->compiled;
    n->heavy += r->heavy;
    if (r->kind) n->failed++;
    else n->passed++;
    if (r->rejected) n->rejected++;
}

static void outcome_fail(call_outcome *o, int kind, const char *arch, const char *fmt, const char *detail)
{
    if (o->kind)
        return; /* keep the first */
    o->kind = kind;
    snprintf(o->arch, sizeof o->arch, "%s", arch ? arch : "");
    snprintf(o->message, sizeof o->message, fmt, detail);
}

/* ---- the checks of one call on the GPU -------------------------------------- */

static void gpu_check_call(mlajit_context *ctx, const char *arch, const mlajit_fuzz_call *call, mlajit_case *c,
                           call_outcome *o)
{
    memset(o, 0, sizeof *o);
    mlajit_kernel_spec spec = call->spec;
    snprintf(spec.arch, sizeof spec.arch, "%s", arch);
    char reason[1024];
    int env = mlajit_envelope_check(&spec, &call->shape);
    snprintf(reason, sizeof reason, "%s", mlajit_last_error());
    if (env && !reason[0])
        outcome_fail(o, FAIL_NO_REASON, arch, "status %s", mlajit_status_string(env));

    mlajit_gpu_run_options opts;
    mlajit_fuzz_run_options(call, &opts);
    opts.arch = arch;
    mlajit_gpu_result res;
    int rc = mlajit_case_run_gpu(ctx, c, &opts, &res);
    if (rc == MLAJIT_OK && !res.report.cache_hit)
        o->compiled = 1;
    if (env) {
        o->rejected = 1;
        if (rc == MLAJIT_OK)
            outcome_fail(o, FAIL_REJECTED_RAN, arch, "envelope: %s", reason);
        mlajit_gpu_result_free(&res);
        return;
    }
    if (rc) {
        o->context_lost = rc == MLAJIT_ERR_CUDA;
        outcome_fail(o, rc == MLAJIT_ERR_CUDA ? FAIL_CUDA_FAULT : FAIL_ACCEPTED_ERROR, arch, "%s", mlajit_last_error());
        return;
    }
    if (!c->expected_out && mlajit_case_compute_expected(c)) {
        outcome_fail(o, FAIL_REFERENCE, arch, "%s", mlajit_last_error());
        mlajit_gpu_result_free(&res);
        return;
    }
    size_t n_lse = (size_t)c->b * c->s_q * c->h_q;
    mlajit_compare_result r;
    mlajit_compare(res.out, c->expected_out, n_lse * mlajit_case_desc(c)->d_v, res.lse, c->expected_lse,
                   n_lse, &r);
    if (!r.pass) {
        char detail[400];
        snprintf(detail, sizeof detail,
                 "%s (%d splits): max|err| %.3e, cosine %.7f, %lld out violations, lse max|err| %.3e, %lld lse "
                 "violations",
                 res.report.spec, res.num_splits, r.out_max_abs_err, r.out_cosine, (long long)r.out_violations,
                 r.lse_max_abs_err, (long long)r.lse_violations);
        outcome_fail(o, FAIL_NUMERIC, arch, "%s", detail);
    }
    mlajit_gpu_result_free(&res);
}

/* ---- the checks of one call without a GPU ------------------------------------ */

typedef struct arch_job {
    mlajit_context *ctx;
    const mlajit_fuzz_call *call;
    const mlajit_case *c;
    const char *arch;
    call_outcome outcome;
} arch_job;

/* Host arguments laid out as the GPU run would lay them out (padded rows, lse
 * strides), for argument validation only: nothing is read. */
static void host_args_for(const mlajit_fuzz_call *call, const mlajit_case *c, void *out, float *lse,
                          mlajit_decode_args *a)
{
    const mlajit_model_desc *m = mlajit_case_desc(c);
    mlajit_case_host_args(c, a);
    int pad = call->pad_strides ? 8 : 0;
    int64_t q_row = m->d_qk + pad, out_row = m->d_v + pad, idx_row = c->topk + pad, eidx_row = c->extra_topk + pad;
    a->q_stride_h = q_row;
    a->q_stride_s = c->h_q * q_row;
    a->q_stride_b = c->s_q * c->h_q * q_row;
    a->indices_stride_s = idx_row;
    a->indices_stride_b = c->s_q * idx_row;
    if (c->has_extra) {
        a->extra_indices_stride_s = eidx_row;
        a->extra_indices_stride_b = c->s_q * eidx_row;
    }
    a->out = out;
    a->out_stride_h = out_row;
    a->out_stride_s = c->h_q * out_row;
    a->out_stride_b = c->s_q * c->h_q * out_row;
    a->lse = lse;
    if (call->lse_head_major) {
        a->lse_stride_s = 1;
        a->lse_stride_h = c->s_q;
        a->lse_stride_b = (int64_t)c->h_q * c->s_q;
    } else {
        a->lse_stride_b = a->lse_stride_s = a->lse_stride_h = 0;
    }
}

static void *cpu_check_arch(void *arg)
{
    arch_job *j = arg;
    call_outcome *o = &j->outcome;
    const mlajit_fuzz_call *call = j->call;
    mlajit_kernel_spec spec = call->spec;
    snprintf(spec.arch, sizeof spec.arch, "%s", j->arch);
    char reason[1024];
    int env = mlajit_envelope_check(&spec, &call->shape);
    snprintf(reason, sizeof reason, "%s", mlajit_last_error());
    if (env && !reason[0])
        outcome_fail(o, FAIL_NO_REASON, j->arch, "status %s", mlajit_status_string(env));

    mlajit_plan *plan = NULL;
    int rc = mlajit_plan_create(j->ctx, &spec, &call->shape, &plan);
    if (env) {
        o->rejected = 1;
        if (rc == MLAJIT_OK)
            outcome_fail(o, FAIL_REJECTED_RAN, j->arch, "the planner compiled it; envelope: %s", reason);
        mlajit_plan_destroy(plan);
        return NULL;
    }
    if (rc) {
        outcome_fail(o, FAIL_ACCEPTED_ERROR, j->arch, "%s", mlajit_last_error());
        return NULL;
    }
    o->compiled = !mlajit_plan_report(plan)->cache_hit;
    if (j->c) {
        /* 16-byte aligned stand-ins for out and lse: validation only reads the pointers */
        static _Alignas(16) unsigned char out_stub[16], lse_stub[16];
        mlajit_decode_args a = MLAJIT_DECODE_ARGS_INIT;
        host_args_for(call, j->c, out_stub, (float *)lse_stub, &a);
        a.workspace = mlajit_plan_workspace_size(plan) ? (void *)(uintptr_t)0x10000 : NULL;
        a.workspace_size = mlajit_plan_workspace_size(plan);
        rc = mlajit_decode(plan, &a, NULL);
        if (rc != MLAJIT_ERR_NO_DEVICE)
            outcome_fail(o, FAIL_ARGS_REJECTED, j->arch, "mlajit_decode without a device: %s",
                         rc ? mlajit_last_error() : "returned MLAJIT_OK");
    }
    mlajit_plan_destroy(plan);
    return NULL;
}

/* The reference must be defined everywhere: never NaN, lse +inf exactly where
 * out is 0 for lack of candidates. */
static void check_reference(const mlajit_case *c, call_outcome *o)
{
    const int d_v = mlajit_case_desc(c)->d_v;
    size_t n_lse = (size_t)c->b * c->s_q * c->h_q;
    char where[160];
    for (size_t r = 0; r < n_lse; r++) {
        float lse = c->expected_lse[r];
        const float *out = c->expected_out + r * d_v;
        int bad = isnan(lse) || lse == -INFINITY;
        for (int k = 0; k < d_v && !bad; k++)
            bad = !isfinite(out[k]) || (lse == INFINITY && out[k] != 0.0f);
        if (bad) {
            snprintf(where, sizeof where, "row %zu (b %zu, s %zu, head %zu): lse %g, out[0] %g", r,
                     r / ((size_t)c->s_q * c->h_q), r / c->h_q % (c->s_q ? (size_t)c->s_q : 1), r % c->h_q,
                     (double)lse, (double)out[0]);
            outcome_fail(o, FAIL_REFERENCE, "", "non-finite or inconsistent reference at %s", where);
            return;
        }
    }
}

static int same_bytes(const void *a, const void *b, size_t n)
{
    if (!a || !b)
        return a == b;
    return memcmp(a, b, n) == 0;
}

/* Save the case, load it back, and compare every array. Small caches only. */
static void check_round_trip(const mlajit_case *c, const char *tmp_root, call_outcome *o)
{
    const int64_t kv_bytes = c->kv.num_pages * c->kv.page_stride +
                             (c->has_extra ? c->extra_kv.num_pages * c->extra_kv.page_stride : 0);
    if (kv_bytes > (8 << 20))
        return;
    char dir[1200];
    snprintf(dir, sizeof dir, "%s/round-trip", tmp_root);
    mlajit_case back;
    if (mlajit_case_save(dir, c) || mlajit_case_load(dir, &back)) {
        outcome_fail(o, FAIL_ROUND_TRIP, "", "%s", mlajit_last_error());
        return;
    }
    const mlajit_model_desc *m = mlajit_case_desc(c);
    size_t rows = (size_t)c->b * c->s_q, n_lse = rows * c->h_q;
    const char *differs = NULL;
    if (back.model != c->model || back.b != c->b || back.s_q != c->s_q || back.h_q != c->h_q ||
        back.topk != c->topk || back.extra_topk != c->extra_topk || back.has_extra != c->has_extra ||
        back.sm_scale != c->sm_scale || back.seed != c->seed)
        differs = "the header numbers";
    else if (back.kv.page_stride != c->kv.page_stride || back.kv.num_pages != c->kv.num_pages ||
             !same_bytes(back.kv.bytes, c->kv.bytes, (size_t)(c->kv.num_pages * c->kv.page_stride)))
        differs = "kv";
    else if (!same_bytes(back.q, c->q, n_lse * m->d_qk * 2))
        differs = "q";
    else if (!same_bytes(back.indices, c->indices, rows * c->topk * 4))
        differs = "indices";
    else if (!same_bytes(back.topk_length, c->topk_length, (size_t)c->b * 4))
        differs = "topk_length";
    else if (!same_bytes(back.attn_sink, c->attn_sink, (size_t)c->h_q * 4))
        differs = "attn_sink";
    else if (c->has_extra && (!same_bytes(back.extra_indices, c->extra_indices, rows * c->extra_topk * 4) ||
                              !same_bytes(back.extra_topk_length, c->extra_topk_length, (size_t)c->b * 4) ||
                              !same_bytes(back.extra_kv.bytes, c->extra_kv.bytes,
                                          (size_t)(c->extra_kv.num_pages * c->extra_kv.page_stride))))
        differs = "the extra cache or its indices";
    else if (!same_bytes(back.expected_out, c->expected_out, n_lse * m->d_v * 4) ||
             !same_bytes(back.expected_lse, c->expected_lse, n_lse * 4))
        differs = "expected out / lse";
    if (differs)
        outcome_fail(o, FAIL_ROUND_TRIP, "", "%s changed in save + load", differs);
    mlajit_case_free(&back);
}

static void cpu_check_call(mlajit_context *ctx, const mlajit_fuzz_call *call, mlajit_case *c, int have_case,
                           const char *tmp_root, call_outcome *o)
{
    memset(o, 0, sizeof *o);
    arch_job jobs[CPU_ARCH_COUNT];
    pthread_t threads[CPU_ARCH_COUNT];
    int started[CPU_ARCH_COUNT] = {0};
    for (int a = 0; a < CPU_ARCH_COUNT; a++) {
        jobs[a] = (arch_job){.ctx = ctx, .call = call, .c = have_case ? c : NULL, .arch = cpu_arches[a]};
        started[a] = pthread_create(&threads[a], NULL, cpu_check_arch, &jobs[a]) == 0;
        if (!started[a])
            cpu_check_arch(&jobs[a]);
    }
    /* The reference runs while NVRTC compiles. */
    call_outcome ref = {0};
    if (have_case) {
        if (mlajit_case_compute_expected(c))
            outcome_fail(&ref, FAIL_REFERENCE, "", "%s", mlajit_last_error());
        else
            check_reference(c, &ref);
        if (!ref.kind)
            check_round_trip(c, tmp_root, &ref);
    }
    for (int a = 0; a < CPU_ARCH_COUNT; a++) {
        if (started[a])
            pthread_join(threads[a], NULL);
        o->compiled += jobs[a].outcome.compiled;
        o->rejected |= jobs[a].outcome.rejected;
        if (jobs[a].outcome.kind && !o->kind) {
            o->kind = jobs[a].outcome.kind;
            memcpy(o->arch, jobs[a].outcome.arch, sizeof o->arch);
            memcpy(o->message, jobs[a].outcome.message, sizeof o->message);
        }
    }
    if (ref.kind && !o->kind) {
        o->kind = ref.kind;
        memcpy(o->message, ref.message, sizeof o->message);
    }
}

/* ---- failures: shrink, save, print the replay lines -------------------------- */

static void set_geometry(mlajit_fuzz_call *call, int b, int s_q, int topk, int extra_topk)
{
    call->shape.batch = call->synth.b = b;
    call->shape.s_q = call->synth.s_q = s_q;
    call->shape.topk = call->synth.topk = topk;
    call->shape.extra_topk = call->synth.extra_topk = extra_topk;
}

/* Try smaller calls while they fail the same way; returns the smallest found
 * (in *call) with its case in *c. Stops when the context is lost. */
static void gpu_shrink(mlajit_context *ctx, const char *arch, mlajit_fuzz_call *call, mlajit_case *c,
                       call_outcome *o)
{
    for (int attempts = 0, progress = 1; progress && attempts < 40 && !o->context_lost;) {
        progress = 0;
        const mlajit_decode_shape s = call->shape;
        const int tries[][4] = {
            {1, s.s_q, s.topk, s.extra_topk},
            {s.batch / 2, s.s_q, s.topk, s.extra_topk},
            {s.batch, 1, s.topk, s.extra_topk},
            {s.batch, s.s_q / 2, s.topk, s.extra_topk},
            {s.batch, s.s_q, s.topk / 2, s.extra_topk ? (s.extra_topk + 1) / 2 : 0},
            {s.batch, s.s_q, s.topk, s.extra_topk / 2},
            {s.batch, s.s_q, s.topk / 2, s.extra_topk},
        };
        for (size_t t = 0; t < sizeof tries / sizeof tries[0] && !progress; t++) {
            const int *g = tries[t];
            if (g[0] < 1 || g[1] < 1 || g[2] < 1 || (s.extra_topk && g[3] < 1))
                continue;
            if (g[0] == s.batch && g[1] == s.s_q && g[2] == s.topk && g[3] == s.extra_topk)
                continue;
            mlajit_fuzz_call smaller = *call;
            set_geometry(&smaller, g[0], g[1], g[2], g[3]);
            mlajit_case sc;
            attempts++;
            if (mlajit_fuzz_make_case(&smaller, &sc))
                continue;
            call_outcome so;
            gpu_check_call(ctx, arch, &smaller, &sc, &so);
            if (so.kind == o->kind) {
                mlajit_case_free(c);
                *c = sc;
                *call = smaller;
                *o = so;
                progress = 1;
            } else {
                mlajit_case_free(&sc);
                if (so.context_lost)
                    o->context_lost = 1;
            }
        }
    }
}

static void print_failure(const fuzz_options *opts, const mlajit_fuzz_call *drawn, const mlajit_fuzz_call *call,
                          mlajit_case *c, int have_case, const call_outcome *o)
{
    char desc[600];
    mlajit_fuzz_describe(drawn, desc, sizeof desc);
    printf("FAIL call %lld (seed %llu)%s%s: %s: %s\n", (long long)drawn->number, (unsigned long long)opts->seed,
           o->arch[0] ? " on " : "", o->arch, fail_name(o->kind), o->message);
    printf("  drawn:  %s\n", desc);
    if (call->shape.batch != drawn->shape.batch || call->shape.s_q != drawn->shape.s_q ||
        call->shape.topk != drawn->shape.topk || call->shape.extra_topk != drawn->shape.extra_topk)
        printf("  shrunk: b %d s_q %d topk %d extra_topk %d still fails the same way\n", call->shape.batch,
               call->shape.s_q, call->shape.topk, call->shape.extra_topk);
    if (have_case) {
        char dir[1200];
        snprintf(dir, sizeof dir, "%s/seed%llu-call%lld", opts->out_dir, (unsigned long long)opts->seed,
                 (long long)drawn->number);
        int rc = c->expected_out ? MLAJIT_OK : mlajit_case_compute_expected(c);
        if (rc == MLAJIT_OK)
            rc = mlajit_case_save(dir, c);
        if (rc) {
            printf("  case:   not written: %s\n", mlajit_last_error());
        } else {
            printf("  replay: mlajit run-case");
            if (call->spec.variant != MLAJIT_VARIANT_AUTO) printf(" --variant %s", mlajit_variant_name(call->spec.variant));
            if (call->spec.tile) printf(" --tile %d", call->spec.tile);
            if (call->spec.heads_per_cta) printf(" --heads-per-cta %d", call->spec.heads_per_cta);
            if (call->shape.num_splits) printf(" --splits %d", call->shape.num_splits);
            if (call->lse_head_major) printf(" --lse-head-major");
            if (call->pad_strides) printf(" --pad-strides");
            printf(" %s\n", dir);
        }
    }
    if (opts->cpu_only && o->arch[0]) {
        const mlajit_kernel_spec *s = &call->spec;
        printf("  compile: mlajit compile --%s %s --heads %d --page %d",
               mlajit_spec_desc(s)->model == MLAJIT_MODEL_CUSTOM ? "layout" : "model", mlajit_spec_desc(s)->name,
               s->h_q, s->page_size);
        if (s->extra_page_size) printf(" --extra-page %d", s->extra_page_size);
        if (s->features) {
            printf(" --features ");
            const char *sep = "";
            if (s->features & MLAJIT_FEATURE_SINK) { printf("%ssink", sep); sep = ","; }
            if (s->features & MLAJIT_FEATURE_TOPK_LENGTH) { printf("%stopk-length", sep); sep = ","; }
            if (s->features & MLAJIT_FEATURE_EXTRA_TOPK_LENGTH) printf("%sextra-topk-length", sep);
        }
        if (s->variant != MLAJIT_VARIANT_AUTO) printf(" --variant %s", mlajit_variant_name(s->variant));
        if (s->tile) printf(" --tile %d", s->tile);
        if (s->heads_per_cta) printf(" --heads-per-cta %d", s->heads_per_cta);
        printf(" --arch %s\n", o->arch);
    }
    printf("  redraw: mlajit fuzz%s", opts->cpu_only ? " --cpu-only" : "");
    print_redraw_options(opts);
    printf(" --seed %llu --call %lld\n", (unsigned long long)opts->seed, (long long)drawn->number);
    fflush(stdout);
}

/* ---- progress --------------------------------------------------------------- */

static void print_progress(const char *label, const fuzz_counts *n, double elapsed_s)
{
    printf("fuzz: %s%.0f s: %lld calls (%lld heavy), %lld kernels compiled, %lld rejected by the envelope "
           "(and the library), %lld failed\n",
           label, elapsed_s, (long long)n->calls, (long long)n->heavy, (long long)n->compiled,
           (long long)n->rejected, (long long)n->failed);
    fflush(stdout);
}

static int stop_now(const fuzz_options *o, int64_t call, double deadline)
{
    if (o->only_call >= 0)
        return call > o->only_call;
    return mlajit_now_ms() >= deadline;
}

/* ---- --cpu-only: one process, four compile threads per call ------------------- */

static int fuzz_cpu(const fuzz_options *opts, const char *tmp_root, fuzz_counts *n)
{
    mlajit_context_options co = {.struct_size = sizeof co,
                                 .flags = MLAJIT_CONTEXT_NO_DEVICE | MLAJIT_CONTEXT_NO_DISK_CACHE};
    mlajit_context *ctx;
    int rc = mlajit_context_create(&co, &ctx);
    if (rc)
        return cli_error(rc, "fuzz");
    const double t0 = mlajit_now_ms(), deadline = t0 + opts->seconds * 1000.0;
    double last_print = t0;
    for (int64_t k = opts->only_call >= 0 ? opts->only_call : 0; !stop_now(opts, k, deadline); k++) {
        mlajit_fuzz_call call;
        mlajit_fuzz_draw(opts->seed, k, draw_flags(opts, 0), &call);
        mlajit_case c;
        call_outcome o;
        int have_case = mlajit_fuzz_make_case(&call, &c) == MLAJIT_OK;
        char setup_error[1024] = "";
        if (!have_case)
            snprintf(setup_error, sizeof setup_error, "%s", mlajit_last_error());
        cpu_check_call(ctx, &call, &c, have_case, tmp_root, &o);
        if (!have_case && !o.kind)
            outcome_fail(&o, FAIL_SETUP, "", "%s", setup_error);
        if (o.kind)
            print_failure(opts, &call, &call, &c, have_case, &o);
        if (have_case)
            mlajit_case_free(&c);
        call_record r = {k, o.kind, o.rejected, o.compiled, call.heavy};
        count(n, &r);
        if (mlajit_now_ms() - last_print > 10000.0) {
            last_print = mlajit_now_ms();
            print_progress("", n, (last_print - t0) / 1000.0);
        }
    }
    mlajit_context_destroy(ctx);
    return CLI_OK;
}

/* ---- GPU: a worker process runs calls, the parent keeps it going --------------- */

enum { WORKER_DONE = 0, WORKER_SETUP = 10, WORKER_NO_DEVICE = 11, WORKER_CONTEXT_LOST = 12 };

/* A worker keeps every kernel it compiled loaded (nearly every call compiles a
 * new one), so it hands over to a fresh one after this many calls. */
#define WORKER_CALLS 256

static int gpu_worker(const fuzz_options *opts, const char *cache_dir, int64_t first, double deadline, int fd)
{
    /* The run's own cache: a restarted worker finds what its predecessor built. */
    mlajit_context_options co = {.struct_size = sizeof co, .cache_dir = cache_dir};
    mlajit_context *ctx;
    if (mlajit_context_create(&co, &ctx)) {
        fprintf(stderr, "mlajit: fuzz: %s\n", mlajit_last_error());
        return WORKER_SETUP;
    }
    mlajit_context_info info = MLAJIT_CONTEXT_INFO_INIT;
    mlajit_context_get_info(ctx, &info);
    if (!info.has_device) {
        fprintf(stderr, "mlajit: fuzz: no GPU (no CUDA driver or device); use --cpu-only on this machine\n");
        mlajit_context_destroy(ctx);
        return WORKER_NO_DEVICE;
    }
    for (int64_t k = first; !stop_now(opts, k, deadline) && k < first + WORKER_CALLS; k++) {
        mlajit_fuzz_call drawn, call;
        mlajit_fuzz_draw(opts->seed, k, draw_flags(opts, MLAJIT_FUZZ_ALLOW_HEAVY), &drawn);
        call = drawn;
        mlajit_case c;
        call_outcome o = {0};
        int have_case = mlajit_fuzz_make_case(&call, &c) == MLAJIT_OK;
        if (have_case)
            gpu_check_call(ctx, info.device_arch, &call, &c, &o);
        else
            outcome_fail(&o, FAIL_SETUP, "", "%s", mlajit_last_error());
        call_record r = {k, o.kind, o.rejected, o.compiled, drawn.heavy};
        if (o.kind) {
            if (have_case && o.kind != FAIL_SETUP)
                gpu_shrink(ctx, info.device_arch, &call, &c, &o);
            print_failure(opts, &drawn, &call, &c, have_case, &o);
        }
        if (have_case)
            mlajit_case_free(&c);
        if (write(fd, &r, sizeof r) != (ssize_t)sizeof r)
            return WORKER_SETUP;
        if (o.context_lost)
            return WORKER_CONTEXT_LOST; /* the CUDA context is unusable: exit without touching it */
    }
    mlajit_context_destroy(ctx);
    return WORKER_DONE;
}

static int fuzz_gpu(const fuzz_options *opts, const char *cache_dir, fuzz_counts *n)
{
    const double t0 = mlajit_now_ms(), deadline = t0 + opts->seconds * 1000.0;
    double last_print = t0;
    int64_t next = opts->only_call >= 0 ? opts->only_call : 0;
    while (!stop_now(opts, next, deadline)) {
        int fds[2];
        if (pipe(fds) != 0) {
            fprintf(stderr, "mlajit: fuzz: pipe: %s\n", strerror(errno));
            return CLI_FAIL;
        }
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "mlajit: fuzz: fork: %s\n", strerror(errno));
            return CLI_FAIL;
        }
        if (pid == 0) {
            close(fds[0]);
            int code = gpu_worker(opts, cache_dir, next, deadline, fds[1]);
            fflush(stdout);
            _exit(code);
        }
        close(fds[1]);
        call_record r;
        ssize_t got;
        while ((got = read(fds[0], &r, sizeof r)) == (ssize_t)sizeof r) {
            count(n, &r);
            next = r.number + 1;
            if (mlajit_now_ms() - last_print > 10000.0) {
                last_print = mlajit_now_ms();
                print_progress("", n, (last_print - t0) / 1000.0);
            }
        }
        close(fds[0]);
        int status = 0;
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        if (WIFEXITED(status) && WEXITSTATUS(status) == WORKER_NO_DEVICE)
            return CLI_FAIL;
        if (WIFEXITED(status) && WEXITSTATUS(status) == WORKER_SETUP)
            return CLI_FAIL;
        if (WIFSIGNALED(status)) {
            /* the call in flight took the worker down: count it, go on after it */
            call_record crash = {next, FAIL_CRASH, 0, 0, 0};
            count(n, &crash);
            printf("FAIL call %lld (seed %llu): %s: the worker died of signal %d\n", (long long)next,
                   (unsigned long long)opts->seed, fail_name(FAIL_CRASH), WTERMSIG(status));
            printf("  redraw: mlajit fuzz");
            print_redraw_options(opts);
            printf(" --seed %llu --call %lld\n", (unsigned long long)opts->seed, (long long)next);
            next++;
        }
    }
    return CLI_OK;
}

/* ---- the command ------------------------------------------------------------- */

static void remove_tree(const char *dir)
{
    if (!dir[0])
        return;
    pid_t pid = fork();
    if (pid == 0) {
        execlp("rm", "rm", "-rf", "--", dir, (char *)NULL);
        _exit(127);
    }
    int status;
    if (pid > 0)
        waitpid(pid, &status, 0);
}

static const char fuzz_usage[] =
    "usage: mlajit fuzz [--seconds N] [--seed S] [--cpu-only] [--call N] [--tuned-grid] [--model M] [--out DIR]\n"
    "  random decode calls over the whole envelope against the fp64 reference; a failing call\n"
    "  is shrunk and saved as a case directory under DIR with its run-case replay line\n"
    "  --seconds N  how long, 1..604800 (default 60)\n"
    "  --seed S     the run's seed, 0..2^64-1 (default: from the clock; printed)\n"
    "  --call N     redraw call N of the seed's run only\n"
    "  --cpu-only   no GPU: generate and NVRTC-compile each call's kernel for sm_80, sm_90a,\n"
    "               sm_100a and sm_120a, and round-trip its case directory\n"
    "  --tuned-grid every call on a spec of the tuner's production grid (V3.2 / DSV4, heads\n"
    "               8-128, pages 64 / 256, auto, no features), its shape drawn as ever: with\n"
    "               tuned tactics on (MLAJIT_PACKS, the cache) plans carry them to random shapes\n"
    "  --model M    every call on model M (" MLAJIT_MODEL_NAMES ")\n"
    "  --out DIR    where failing cases go (default fuzz-failures)\n"
    "exit status: 0 every call passed, 1 one failed, 2 bad arguments (docs/fuzzing.md)\n";

int cli_fuzz(int argc, char **argv)
{
    fuzz_options opts = {.seconds = 60, .only_call = -1, .out_dir = "fuzz-failures"};
    int seeded = 0;
    const cli_option options[] = {
        {"--seconds", CLI_INT, &opts.seconds, .lo = 1, .hi = 7 * 86400},
        {"--seed", CLI_UINT64, &opts.seed, .given = &seeded},
        {"--cpu-only", CLI_FLAG, .target = &opts.cpu_only},
        {"--call", CLI_INT64, &opts.only_call, .lo = 0, .hi = INT64_MAX},
        {"--out", CLI_STRING, .target = &opts.out_dir},
        {"--tuned-grid", CLI_FLAG, .target = &opts.tuned_grid},
        {"--model", CLI_STRING, .target = &opts.model_name},
    };
    const cli_command cmd = {"fuzz", fuzz_usage, options, sizeof options / sizeof options[0], 0, 0, NULL};
    int n_operands, parsed = cli_parse(&cmd, argc, argv, &n_operands);
    if (parsed != CLI_PARSED)
        return parsed;
    if (opts.model_name && mlajit_model_from_name(opts.model_name, &opts.model) != MLAJIT_OK)
        return cli_usage_error(&cmd, "--model: %s", mlajit_last_error());
    if (opts.model_name && opts.tuned_grid)
        return cli_usage_error(&cmd, "--model and --tuned-grid: the grid draws its own models (v32, dsv4)");
    if (!seeded) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        opts.seed = (uint64_t)ts.tv_sec * 1000003u ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid();
        opts.seed %= 1000000000u; /* short enough to type back */
    }
    /* a scratch directory: the run's kernel cache (GPU) or round-trip cases (CPU) */
    char tmp_root[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(tmp_root, sizeof tmp_root, "%s/mlajit-fuzz-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(tmp_root)) {
        fprintf(stderr, "mlajit: fuzz: cannot create a scratch directory %s: %s\n", tmp_root, strerror(errno));
        return CLI_FAIL;
    }
    if (opts.only_call >= 0)
        printf("fuzz: seed %llu, call %lld only%s\n", (unsigned long long)opts.seed, (long long)opts.only_call,
               opts.cpu_only ? ", no GPU: generate + NVRTC for sm_80, sm_90a, sm_100a, sm_120a" : "");
    else
        printf("fuzz: seed %llu, %d s%s%s%s; failing cases go to %s/\n", (unsigned long long)opts.seed, opts.seconds,
               opts.cpu_only ? ", no GPU: generate + NVRTC for sm_80, sm_90a, sm_100a, sm_120a" : " on the GPU",
               opts.model_name ? ", model " : "", opts.model_name ? mlajit_model_describe(opts.model)->name : "",
               opts.out_dir);
    fflush(stdout);
    fuzz_counts n = {0};
    const double t0 = mlajit_now_ms();
    int rc = opts.cpu_only ? fuzz_cpu(&opts, tmp_root, &n) : fuzz_gpu(&opts, tmp_root, &n);
    remove_tree(tmp_root);
    if (rc != CLI_OK)
        return rc;
    print_progress("done in ", &n, (mlajit_now_ms() - t0) / 1000.0);
    printf("fuzz: %lld passed, %lld failed (seed %llu)\n", (long long)n.passed, (long long)n.failed,
           (unsigned long long)opts.seed);
    return n.failed ? CLI_FAIL : CLI_OK;
}
