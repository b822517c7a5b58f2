/* main.c -- nnsc-aot: a model spec for one device in, one executable per
 * rank out.  The pipeline itself is frontend/driver.c. */
#include <malloc.h>
#include "frontend.h"

int main(int argc, char **argv)
{
#ifdef __GLIBC__
    /* the passes allocate and free arrays of megabytes per candidate plan (a
       search builds hundreds): keep them in the heap, not fresh mappings whose
       pages fault in zeroed at every allocation (the 96-layer search on 1024
       devices spent a sixth of its time so) */
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    mallopt(M_TOP_PAD, 64 << 20);
#endif
    fe_opts o;
    int rc = fe_cli(argc, argv, &o);
    if (rc == 0) rc = o.profile ? fe_profile(&o) : o.check_op ? fe_check_op(&o) : o.verify ? fe_verify(&o) : fe_compile(&o);
    else if (rc == 3) rc = 0;
    fe_opts_free(&o);
    return rc;
}
