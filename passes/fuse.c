/* fuse.c -- elementwise fusion.  (placeholder: fuses nothing yet) */
#include "passes.h"

int pass_fuse(ir_prog *progs, int nprogs)
{
    (void)progs;
    (void)nprogs;
    return 0;
}
