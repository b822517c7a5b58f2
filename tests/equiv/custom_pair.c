/* custom_pair.c -- the kernels of tests/equiv/custom_pair.ini: pair(g, u) =
 * (silu(g) u, g u), two outputs, and its backward, which takes the gradients
 * of both: dg = dy1 u silu'(g) + dy2 u, du = dy1 silu(g) + dy2 g. */
#include <math.h>

#include "nnsc_custom.h"

NNSC_CUSTOM(pair)
{
    const float *g = c->in[0].data, *u = c->in[1].data;
    float *y1 = c->out[0].data, *y2 = c->out[1].data;
    for (int64_t k = 0; k < c->out[0].numel; k++) {
        float s = g[k] / (1.0f + expf(-g[k]));
        NNSC_PUT(c, y1[k], s * u[k]);
        NNSC_PUT(c, y2[k], g[k] * u[k]);
    }
}

/* silu'(g) = sig (1 + g (1 - sig)) */
NNSC_CUSTOM(pair_bwd)
{
    const float *dy1 = c->in[0].data, *dy2 = c->in[1].data, *g = c->in[2].data, *u = c->in[3].data;
    float *dg = c->out[0].data, *du = c->out[1].data;
    for (int64_t k = 0; k < c->out[0].numel; k++) {
        float sig = 1.0f / (1.0f + expf(-g[k]));
        NNSC_PUT(c, dg[k], dy1[k] * u[k] * sig * (1.0f + g[k] * (1.0f - sig)) + dy2[k] * u[k]);
        NNSC_PUT(c, du[k], dy1[k] * g[k] * sig + dy2[k] * g[k]);
    }
}
