/* check.h -- the tiny assertion harness of the C unit tests: one line per
 * check, and a closing line "N passed, M failed" (the exit status says the
 * same). */
#ifndef NNSC_CHECK_H
#define NNSC_CHECK_H

#include <stdio.h>

static int check_pass, check_fail;

#define CHECK(cond, ...)                                              \
    do {                                                              \
        if (cond) {                                                   \
            check_pass++;                                             \
            printf("ok    ");                                         \
        } else {                                                      \
            check_fail++;                                             \
            printf("FAIL  %s:%d: (%s) ", __FILE__, __LINE__, #cond);  \
        }                                                             \
        printf(__VA_ARGS__);                                          \
        printf("\n");                                                 \
    } while (0)

static inline int check_done(void)
{
    printf("%d passed, %d failed\n", check_pass, check_fail);
    return check_fail ? 1 : 0;
}

#endif
