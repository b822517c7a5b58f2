/* check.h -- the tiny assertion harness of the C unit tests: one line per
 * check, and a closing line "N passed, M failed" (the exit status says the
 * same). */
#ifndef NNSC_CHECK_H
#define NNSC_CHECK_H

#include <stdarg.h>
#include <stdio.h>

static int check_pass, check_fail;

/* One check as a function (for tests that compute the condition first). */
static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3), unused));
static void check(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%s  ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    if (ok) check_pass++;
    else check_fail++;
}

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
