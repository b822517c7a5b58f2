/* custom_norm.cu -- the device kernels of tests/equiv/custom_norm.ini: custom_norm.c's
 * formulas with one row per thread of a grid-stride loop over the rows (NNSC_FOR), which
 * keeps each row's sums in one thread's order.  No #include (docs/custom-ops.md). */
#define EPS 1e-6f

/* the rows of tensor t: its elements over its last extent */
#define ROWS(t) ((t)->numel / (t)->shape[(t)->ndim - 1])

/* y = h / sqrt(mean(h^2) + eps) over the last dim */
NNSC_CUSTOM_CUDA(rownorm)
{
    const nnsc_tensor *h = &c->in[0];
    i64 n = h->shape[h->ndim - 1];
    NNSC_FOR(r, ROWS(h)) {
        const float *x = h->data + r * n;
        float *y = c->out[0].data + r * n, ss = 0;
        for (i64 k = 0; k < n; k++) ss += x[k] * x[k];
        float rs = 1.0f / sqrtf(ss / (float)n + EPS);
        for (i64 k = 0; k < n; k++) NNSC_PUT(c, y[k], x[k] * rs);
    }
}

/* dh = rs (dy - y mean(dy y)), y = h rs; inputs dy, h */
NNSC_CUSTOM_CUDA(rownorm_bwd)
{
    const nnsc_tensor *h = &c->in[1];
    i64 n = h->shape[h->ndim - 1];
    NNSC_FOR(r, ROWS(h)) {
        const float *x = h->data + r * n, *dy = c->in[0].data + r * n;
        float *dh = c->out[0].data + r * n, ss = 0, dot = 0;
        for (i64 k = 0; k < n; k++) ss += x[k] * x[k];
        float rs = 1.0f / sqrtf(ss / (float)n + EPS);
        for (i64 k = 0; k < n; k++) dot += dy[k] * x[k] * rs;
        dot /= (float)n;
        for (i64 k = 0; k < n; k++) NNSC_PUT(c, dh[k], rs * (dy[k] - x[k] * rs * dot));
    }
}

/* s = a * sum of p^2 over the last dim; a = the op's first attr (1 when not given) */
NNSC_CUSTOM_CUDA(sqsum)
{
    const nnsc_tensor *p = &c->in[0];
    i64 n = p->shape[p->ndim - 1];
    float a = c->attr[0] != 0 ? c->attr[0] : 1.0f;
    NNSC_FOR(r, ROWS(p)) {
        float s = 0;
        for (i64 k = 0; k < n; k++) s += p->data[r * n + k] * p->data[r * n + k];
        NNSC_PUT(c, c->out[0].data[r], a * s);
    }
}

/* dp = 2 a p ds (ds broadcast over the last dim); inputs ds, p; a: the forward's attr */
NNSC_CUSTOM_CUDA(sqsum_bwd)
{
    const nnsc_tensor *p = &c->in[1];
    i64 n = p->shape[p->ndim - 1];
    float a = c->attr[0] != 0 ? c->attr[0] : 1.0f;
    NNSC_FOR(r, ROWS(p))
        for (i64 k = 0; k < n; k++)
            NNSC_PUT(c, c->out[0].data[r * n + k], 2.0f * a * p->data[r * n + k] * c->in[0].data[r]);
}
