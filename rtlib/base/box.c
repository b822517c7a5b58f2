/* box.c -- boxes of row-major tensors (the unit every layer moves: a
 * param's part, a slice, a checkpoint read) and the name hash.
 */
#include <string.h>

#include "base/rt_base.h"

uint64_t rt_fnv1a64(const char *s)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

int64_t rt_box_numel(int ndim, const int64_t *lo, const int64_t *hi)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= hi[d] - lo[d];
    return n;
}

int64_t rt_shape_numel(int ndim, const int64_t *shape)
{
    int64_t n = 1;
    for (int d = 0; d < ndim; d++)
        n *= shape[d];
    return n;
}

void rt_box_iter_init(rt_box_iter *it, int ndim, const int64_t *shape, const int64_t *lo,
                      const int64_t *hi)
{
    memset(it, 0, sizeof *it);
    it->ndim = ndim;
    int64_t stride = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        it->stride[d] = stride;
        stride *= shape[d];
        it->lo[d] = lo[d];
        it->hi[d] = hi[d];
    }
    /* merge trailing dims the box covers fully, plus the first partial one */
    int cut = ndim;
    it->run = 1;
    while (cut > 0) {
        cut--;
        it->run *= hi[cut] - lo[cut];
        if (hi[cut] - lo[cut] != shape[cut])
            break;
    }
    it->cut = cut;
    for (int d = 0; d < ndim; d++)
        it->idx[d] = lo[d];
}

int rt_box_iter_next(rt_box_iter *it)
{
    if (it->state == 2)
        return 0;
    if (it->state == 0) {
        it->state = 1;
    } else {
        it->pos += it->run;
        int d = it->cut - 1;
        for (; d >= 0; d--) {           /* odometer over the stepped dims */
            if (++it->idx[d] < it->hi[d])
                break;
            it->idx[d] = it->lo[d];
        }
        if (d < 0) {
            it->state = 2;
            return 0;
        }
    }
    int64_t start = 0;
    for (int d = 0; d < it->ndim; d++)
        start += (d < it->cut ? it->idx[d] : (d == it->cut ? it->lo[d] : 0)) * it->stride[d];
    it->start = start;
    return 1;
}
