/* custom_swiglu.cu -- the device kernels of tests/equiv/custom.ini ([custom swiglu] and
 * [custom swiglu_bwd], cuda = this file): the same formulas as custom_swiglu.c, one element
 * per thread of a grid-stride loop (NNSC_FOR).  Compiled by NVRTC into the build's kernel
 * library; no #include (nnsc-aot supplies nnsc_call, NNSC_PUT, NNSC_FOR, docs/custom-ops.md). */

/* y = silu(g) u */
NNSC_CUSTOM_CUDA(swiglu)
{
    const float *g = c->in[0].data, *u = c->in[1].data;
    float *y = c->out[0].data;
    NNSC_FOR(k, c->out[0].numel) {
        float s = g[k] / (1.0f + expf(-g[k]));
        NNSC_PUT(c, y[k], s * u[k]);
    }
}

/* dg = dy u silu'(g), silu'(g) = sig (1 + g (1 - sig)); du = dy silu(g) */
NNSC_CUSTOM_CUDA(swiglu_bwd)
{
    const float *dy = c->in[0].data, *g = c->in[1].data, *u = c->in[2].data;
    float *dg = c->out[0].data, *du = c->out[1].data;
    NNSC_FOR(k, c->out[0].numel) {
        float sig = 1.0f / (1.0f + expf(-g[k]));
        NNSC_PUT(c, dg[k], dy[k] * u[k] * sig * (1.0f + g[k] * (1.0f - sig)));
        NNSC_PUT(c, du[k], dy[k] * g[k] * sig);
    }
}
