/* custom_norm.c -- the kernels of tests/equiv/custom_norm.ini: rownorm (an RMS norm without
 * weights over the last dim, which must stay whole: `^`) and sqsum (the sum of squares over
 * the last dim, a reduction: `+`, so a split gives partial sums), each with its backward. */
#include <math.h>

#include "nnsc_custom.h"

#define EPS 1e-6f

/* y = h / sqrt(mean(h^2) + eps) over the last dim */
NNSC_CUSTOM(rownorm)
{
    const nnsc_tensor *h = &c->in[0];
    int64_t n = h->shape[h->ndim - 1], rows = h->numel / n;
    for (int64_t r = 0; r < rows; r++) {
        const float *x = h->data + r * n;
        float *y = c->out[0].data + r * n, ss = 0;
        for (int64_t k = 0; k < n; k++) ss += x[k] * x[k];
        float rs = 1.0f / sqrtf(ss / (float)n + EPS);
        for (int64_t k = 0; k < n; k++) NNSC_PUT(c, y[k], x[k] * rs);
    }
}

/* dh = rs (dy - y mean(dy y)), y = h rs; inputs dy, h */
NNSC_CUSTOM(rownorm_bwd)
{
    const nnsc_tensor *h = &c->in[1];
    int64_t n = h->shape[h->ndim - 1], rows = h->numel / n;
    for (int64_t r = 0; r < rows; r++) {
        const float *x = h->data + r * n, *dy = c->in[0].data + r * n;
        float *dh = c->out[0].data + r * n, ss = 0, dot = 0;
        for (int64_t k = 0; k < n; k++) ss += x[k] * x[k];
        float rs = 1.0f / sqrtf(ss / (float)n + EPS);
        for (int64_t k = 0; k < n; k++) dot += dy[k] * x[k] * rs;
        dot /= (float)n;
        for (int64_t k = 0; k < n; k++) NNSC_PUT(c, dh[k], rs * (dy[k] - x[k] * rs * dot));
    }
}

/* s = a * sum of p^2 over the last dim; a = the op's first attr (1 when not given) */
NNSC_CUSTOM(sqsum)
{
    const nnsc_tensor *p = &c->in[0];
    int64_t n = p->shape[p->ndim - 1], rows = p->numel / n;
    float a = c->attr[0] != 0 ? c->attr[0] : 1.0f;
    for (int64_t r = 0; r < rows; r++) {
        float s = 0;
        for (int64_t k = 0; k < n; k++) s += p->data[r * n + k] * p->data[r * n + k];
        NNSC_PUT(c, c->out[0].data[r], a * s);
    }
}

/* dp = 2 a p ds (ds broadcast over the last dim); inputs ds, p; a: the forward's attr */
NNSC_CUSTOM(sqsum_bwd)
{
    const nnsc_tensor *p = &c->in[1];
    int64_t n = p->shape[p->ndim - 1], rows = p->numel / n;
    float a = c->attr[0] != 0 ? c->attr[0] : 1.0f;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < n; k++)
            NNSC_PUT(c, c->out[0].data[r * n + k], 2.0f * a * p->data[r * n + k] * c->in[0].data[r]);
}
