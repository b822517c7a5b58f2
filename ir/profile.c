/* profile.c -- built-in device and cluster profiles for the cost model
 * ([cluster] device = NAME; each field may be overridden in [cluster]).
 *
 * GPU figures are the vendors' data-sheet peaks for the SXM parts (dense
 * tensor-core bf16/fp16, no sparsity) and their NVLink bandwidth per
 * direction; the network figure is one InfiniBand port per GPU (EDR 100,
 * HDR 200, NDR 400 Gb/s), except dgx2's 8 EDR ports shared by its 16 GPUs.
 * Latencies are typical message latencies, not measured; weight_bw (a
 * micro-batch's kernels going over their weights again) is 0 here, not
 * priced, and nnsc-aot profile fits it.  cpu-host's flops
 * is this project's measured 1-thread FMA peak (docs/performance.md, CPU
 * kernels: 175.2 GFLOP/s): one rank per core; its memory, bandwidth and
 * link figures are nominal (the shared-memory transport between ranks of
 * one host).  docs/plan-search.md lists them.
 *
 * a100-80g is calibrated instead: each figure is what published
 * measurements reach, not a peak, and none is fitted to a training run
 * (docs/plan-search.md, Calibration of a100-80g, compares its estimates
 * with Megatron-LM's published steps):
 *   flops_bf16 312e12  the data sheet's dense bf16 tensor-core peak (NVIDIA
 *                      A100 data sheet, SXM4 80GB);
 *   mm_eff     0.859   of it large GEMMs reach: 267.9 TFLOP/s, the "maximum
 *                      achievable matmul FLOPS" measured for A100 SXM bf16
 *                      (S. Bekman, Machine Learning Engineering,
 *                      compute/accelerator/README.md, MAMF table, CUDA 12.1);
 *   sms        108     SMs, over which a GEMM's 256 x 128 tiles run in waves
 *                      (NVIDIA, Matrix Multiplication Background User's
 *                      Guide, Wave Quantization; passes/cost.c);
 *   mem_bw     1.5e12  bytes/s streaming (memory-bound) kernels reach of the
 *                      2039 GB/s HBM2e peak: the middle of the 1.3-1.6 TB/s
 *                      that streaming microbenchmarks report (not verified
 *                      against a measurement of ours);
 *   link_bw    230e9   NVLink 3 (600 GB/s both directions, 300 per
 *                      direction per GPU): the all-reduce bus bandwidth
 *                      nccl-tests measure on one DGX A100, so a ring's
 *                      2(n-1)/n S bytes at it give NCCL's time;
 *   net_bw     23e9    one HDR 200 Gb/s (25 GB/s) port per GPU, 8 per DGX
 *                      A100 node: nccl-tests across nodes reach about 185 GB/s
 *                      of bus bandwidth per node, 23 per port (passes/cost.c
 *                      gives a group with k members on a node k ports);
 *   latencies  5 us    typical, not measured (under 1 % of the reference
 *                      runs' 50 MB messages). */
#include <string.h>

#include "ir.h"

static const ir_profile profiles[] = {
    /* name        flops    bf16     mem_bw   mem                 link_bw link_lat net_bw  net_lat per_node weight_bw mm_eff sms attention */
    {"cpu-host",   175.2e9, 175.2e9, 10e9,    8.0 * (1 << 30),    5e9,    10e-6,   5e9,    10e-6, 65536, 0, 0, 0, 0},
    {"v100-32g",   15.7e12, 125e12,  900e9,   32.0 * (1 << 30),   150e9,  5e-6,    12.5e9, 5e-6, 8, 0, 0, 0, 0},
    {"dgx2",       15.7e12, 125e12,  900e9,   32.0 * (1 << 30),   150e9,  5e-6,    6.25e9, 10e-6, 16, 0, 0, 0, 0},
    {"a100-80g",   19.5e12, 312e12,  1.5e12,  80.0 * (1 << 30),   230e9,  5e-6,    23e9,   5e-6, 8, 0, 0.859, 108, 0},
    {"h100-80g",   66.9e12, 989e12,  3350e9,  80.0 * (1 << 30),   450e9,  5e-6,    50e9,   5e-6, 8, 0, 0, 0, 0},
    {"h200-141g",  66.9e12, 989e12,  4800e9,  141.0 * (1 << 30),  450e9,  5e-6,    50e9,   5e-6, 8, 0, 0, 0, 0},
};

const ir_profile *ir_profile_find(const char *name)
{
    if (!strcmp(name, "cpu")) name = "cpu-host";   /* (the target's name, as specs wrote it before) */
    for (size_t i = 0; i < sizeof profiles / sizeof profiles[0]; i++)
        if (!strcmp(profiles[i].name, name)) return &profiles[i];
    return NULL;
}

const char *ir_profile_names(void)
{
    return "cpu (cpu-host), v100-32g, dgx2 (16 x V100 per node), a100-80g, h100-80g, h200-141g";
}
