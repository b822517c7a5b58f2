/* rt_internal.h -- every layer of rtlib, for its tests (tests/test_rt_*.c)
 * and the test doubles (tests/mock).  rtlib's own files include their
 * layer's header instead (base/rt_base.h < cpu/rt_cpu.h < comm/rt_comm.h <
 * io/rt_io.h < cuda/rt_cuda.h < train/rt_train.h, each including the one
 * before it).  Generated rank programs never include it: their whole
 * interface is rt.h.
 */
#ifndef NNSC_RT_INTERNAL_H
#define NNSC_RT_INTERNAL_H

#include "train/rt_train.h"

#endif
