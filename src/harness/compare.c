/* SPEC.md's numerical bar, and the bf16 <-> float helpers. */
#include <math.h>
#include <string.h>

#include "harness/harness.h"

#define OUT_ABS_TOL 1e-3
#define OUT_REL_TOL (1.0 / 128.0) /* 2^-7 */
#define OUT_MIN_COSINE 0.99999
#define LSE_ABS_TOL 1e-5
#define LSE_REL_TOL 1.2e-4

float mlajit_bf16_to_float(uint16_t v)
{
    uint32_t u = (uint32_t)v << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t mlajit_float_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((u >> 16) | 0x0040u); /* NaN: keep sign and payload top, force quiet */
    u += 0x7FFFu + ((u >> 16) & 1u);           /* round to nearest even */
    return (uint16_t)(u >> 16);
}

void mlajit_compare(const float *out, const float *ref_out, size_t n_out, const float *lse, const float *ref_lse,
                    size_t n_lse, mlajit_compare_result *r)
{
    memset(r, 0, sizeof *r);

    double dot = 0.0, norm_out = 0.0, norm_ref = 0.0;
    int any_nan = 0;
    for (size_t k = 0; k < n_out && out && ref_out; k++) {
        const double a = out[k], e = ref_out[k];
        const double err = fabs(a - e);
        if (!(err <= OUT_ABS_TOL + OUT_REL_TOL * fabs(e)))
            r->out_violations++; /* the negated test counts NaN too */
        if (isnan(err))
            any_nan = 1;
        else if (err > r->out_max_abs_err)
            r->out_max_abs_err = err;
        dot += a * e;
        norm_out += a * a;
        norm_ref += e * e;
    }
    if (any_nan)
        r->out_max_abs_err = NAN;
    if (norm_out == 0.0 && norm_ref == 0.0)
        r->out_cosine = 1.0; /* two zero vectors agree */
    else if (norm_out == 0.0 || norm_ref == 0.0)
        r->out_cosine = 0.0;
    else
        r->out_cosine = dot / (sqrt(norm_out) * sqrt(norm_ref)); /* NaN when an input was */

    for (size_t k = 0; k < n_lse && lse && ref_lse; k++) {
        const double a = lse[k], e = ref_lse[k];
        if (isnan(a) || isnan(e)) {
            r->lse_violations++;
        } else if (isinf(a) || isinf(e)) {
            if (a != e)
                r->lse_violations++; /* an infinity in one place only, or of the other sign */
        } else {
            const double err = fabs(a - e);
            if (err > r->lse_max_abs_err)
                r->lse_max_abs_err = err;
            if (!(err <= LSE_ABS_TOL + LSE_REL_TOL * fabs(e)))
                r->lse_violations++;
        }
    }
    r->pass = r->out_violations == 0 && r->lse_violations == 0 && r->out_cosine >= OUT_MIN_COSINE;
}
