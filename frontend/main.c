/* main.c -- nnsc-aot: a model spec for one device in, one executable per
 * rank out.  The pipeline itself is frontend/driver.c. */
#include "frontend.h"

int main(int argc, char **argv)
{
    fe_opts o;
    int rc = fe_cli(argc, argv, &o);
    if (rc == 0) rc = o.profile ? fe_profile(&o) : o.check_op ? fe_check_op(&o) : o.verify ? fe_verify(&o) : fe_compile(&o);
    else if (rc == 3) rc = 0;
    fe_opts_free(&o);
    return rc;
}
