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
 * one host).  docs/plan-search.md lists them. */
#include <string.h>

#include "ir.h"

static const ir_profile profiles[] = {
    /* name        flops    bf16     mem_bw   mem                 link_bw link_lat net_bw  net_lat per_node weight_bw */
    {"cpu-host",   175.2e9, 175.2e9, 10e9,    8.0 * (1 << 30),    5e9,    10e-6,   5e9,    10e-6, 65536, 0},
    {"v100-32g",   15.7e12, 125e12,  900e9,   32.0 * (1 << 30),   150e9,  5e-6,    12.5e9, 5e-6, 8, 0},
    {"dgx2",       15.7e12, 125e12,  900e9,   32.0 * (1 << 30),   150e9,  5e-6,    6.25e9, 10e-6, 16, 0},
    {"a100-80g",   19.5e12, 312e12,  2039e9,  80.0 * (1 << 30),   300e9,  5e-6,    25e9,   5e-6, 8, 0},
    {"h100-80g",   66.9e12, 989e12,  3350e9,  80.0 * (1 << 30),   450e9,  5e-6,    50e9,   5e-6, 8, 0},
    {"h200-141g",  66.9e12, 989e12,  4800e9,  141.0 * (1 << 30),  450e9,  5e-6,    50e9,   5e-6, 8, 0},
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
