/* custom_swiglu.c -- the kernels of tests/equiv/custom.ini's [custom swiglu] and
 * [custom swiglu_bwd]: LLaMA's gate y = silu(g) * u, silu(g) = g / (1 + exp(-g)). */
#include <math.h>

#include "nnsc_custom.h"

NNSC_CUSTOM(swiglu)
{
    const float *g = c->in[0].data, *u = c->in[1].data;
    float *y = c->out[0].data;
    for (int64_t k = 0; k < c->out[0].numel; k++) {
        float s = g[k] / (1.0f + expf(-g[k]));
        NNSC_PUT(c, y[k], s * u[k]);
    }
}

/* dg = dy u silu'(g), silu'(g) = sig (1 + g (1 - sig)); du = dy silu(g) */
NNSC_CUSTOM(swiglu_bwd)
{
    const float *dy = c->in[0].data, *g = c->in[1].data, *u = c->in[2].data;
    float *dg = c->out[0].data, *du = c->out[1].data;
    for (int64_t k = 0; k < c->out[0].numel; k++) {
        float sig = 1.0f / (1.0f + expf(-g[k]));
        NNSC_PUT(c, dg[k], dy[k] * u[k] * sig * (1.0f + g[k] * (1.0f - sig)));
        NNSC_PUT(c, du[k], dy[k] * g[k] * sig);
    }
}
