/* nvrtc.c -- compile the CUDA C kernel library to cubin with NVRTC.
 *
 * One NVRTC program per architecture, always with the same options:
 *
 *     --gpu-architecture=sm_XX  -default-device  --std=c++17
 *
 * and nothing else: no -G or -lineinfo (no debug or line tables, so no paths
 * in the image), no include paths (the library includes no header), nothing
 * from the environment.  So the same source gives byte-identical cubins,
 * which the rank executables embed.  NVRTC compiles straight to SASS (a
 * "real" sm_XX architecture), so the images need no JIT at load time.
 *
 * Every NVRTC call goes through cg_nvrtc_check (the CG_NVRTC_CHECK macro),
 * which formats file:line, the call and NVRTC's message into the caller's
 * error buffer.  When compilation fails the message also holds NVRTC's log
 * and, for each error the log places in the generated source, that line of
 * the source, so a kernel bug is shown where it is.
 *
 * Without the CUDA toolkit at build time (no NNSC_HAVE_NVRTC) the functions
 * exist and report "CUDA toolkit not found".
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef NNSC_HAVE_NVRTC
#include <nvrtc.h>
#endif

#include "cuda.h"

/* Most errors of one compilation whose source lines are quoted. */
#define CG_NVRTC_MAX_QUOTES 5

/* Append formatted text to the error buffer err[0 .. errsz), truncating. */
static void cg_errf(char *err, size_t errsz, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void cg_errf(char *err, size_t errsz, const char *fmt, ...)
{
    if (!err || !errsz)
        return;
    size_t n = strnlen(err, errsz - 1);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, errsz - n, fmt, ap);
    va_end(ap);
}

/* Free the images c[0 .. n) and clear them. */
void cg_cubin_free(cg_cubin *c, int n)
{
    for (int k = 0; c && k < n; k++) {
        free(c[k].data);
        free(c[k].log);
        memset(&c[k], 0, sizeof c[k]);
    }
}

/* An architecture name NVRTC is given: "sm_" then 2 or 3 digits and at most
 * one letter (sm_90a).  Anything else is refused before NVRTC sees it. */
static int cg_arch_ok(const char *a)
{
    if (!a || strncmp(a, "sm_", 3) != 0)
        return 0;
    const char *p = a + 3;
    int digits = 0;
    while (*p >= '0' && *p <= '9') {
        p++;
        digits++;
    }
    if (*p >= 'a' && *p <= 'z')
        p++;
    return digits >= 2 && digits <= 3 && *p == '\0';
}

/* Check cg_nvrtc_compile's arguments and name out[]'s architectures;
 * CG_NVRTC_OK, or CG_NVRTC_ERROR after a message (out[] cleared). */
static int cg_nvrtc_prepare(const char *src, const char *const *archs, int narch, cg_cubin *out,
                            char *err, size_t errsz)
{
    if (err && errsz)
        err[0] = '\0';
    if (!src || !archs || !out || narch < 1) {
        cg_errf(err, errsz, "%s:%d: cg_nvrtc_compile: no source, no architecture or no output",
                __FILE__, __LINE__);
        return CG_NVRTC_ERROR;
    }
    memset(out, 0, (size_t)narch * sizeof *out);
    for (int k = 0; k < narch; k++) {
        if (!cg_arch_ok(archs[k])) {
            cg_errf(err, errsz,
                    "bad GPU architecture '%s': expected sm_ and its compute capability, "
                    "e.g. sm_80 or sm_90",
                    archs[k] ? archs[k] : "(null)");
            cg_cubin_free(out, narch);
            return CG_NVRTC_ERROR;
        }
        snprintf(out[k].arch, sizeof out[k].arch, "%s", archs[k]);
    }
    return CG_NVRTC_OK;
}

#ifdef NNSC_HAVE_NVRTC

/* The one check for NVRTC calls: on failure, append "file:line: NVRTC: what
 * failed: NVRTC's message" to err.  Returns 1 on failure, else 0. */
static int cg_nvrtc_check(nvrtcResult r, const char *file, int line, const char *what, char *err,
                          size_t errsz)
{
    if (r == NVRTC_SUCCESS)
        return 0;
    cg_errf(err, errsz, "%s:%d: NVRTC: %s failed: %s", file, line, what, nvrtcGetErrorString(r));
    return 1;
}

/* Check an NVRTC call; the caller has err and errsz in scope. */
#define CG_NVRTC_CHECK(call, what) cg_nvrtc_check((call), __FILE__, __LINE__, (what), err, errsz)

/* Append line `line` (1-based) of src to err, or nothing if there is none. */
static void cg_quote_line(const char *src, long line, char *err, size_t errsz)
{
    const char *p = src;
    for (long k = 1; k < line && p; k++) {
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    if (!p || !*p)
        return;
    int len = (int)strcspn(p, "\n");
    cg_errf(err, errsz, "\n  %s:%ld: %.*s", CG_CUDA_SRC_NAME, line, len, p);
}

/* For the first errors of an NVRTC log ("nnsc_kernels.cu(LINE): error: ..."),
 * append the source lines they point at, each once, in log order. */
static void cg_quote_errors(const char *log, const char *src, char *err, size_t errsz)
{
    static const char pat[] = CG_CUDA_SRC_NAME "(";
    long seen[CG_NVRTC_MAX_QUOTES];
    int n = 0;
    for (const char *p = strstr(log, pat); p && n < CG_NVRTC_MAX_QUOTES; p = strstr(p, pat)) {
        p += sizeof pat - 1;
        char *end;
        long line = strtol(p, &end, 10);
        if (end == p || strncmp(end, "): error", 8) != 0)
            continue;   /* a warning, or not a location */
        int dup = 0;
        for (int k = 0; k < n; k++)
            dup |= seen[k] == line;
        if (dup)
            continue;
        if (!n)
            cg_errf(err, errsz, "\nat:");
        seen[n++] = line;
        cg_quote_line(src, line, err, errsz);
    }
}

/* The log of prog as a malloc'd string ("" when empty), or NULL after
 * appending the failure to err. */
static char *cg_nvrtc_log(nvrtcProgram prog, char *err, size_t errsz)
{
    size_t n = 0;
    if (CG_NVRTC_CHECK(nvrtcGetProgramLogSize(prog, &n), "nvrtcGetProgramLogSize"))
        return NULL;
    char *log = calloc(n + 1, 1);
    if (!log) {
        cg_errf(err, errsz, "%s:%d: out of memory for the NVRTC log (%zu bytes)", __FILE__,
                __LINE__, n + 1);
        return NULL;
    }
    if (n && CG_NVRTC_CHECK(nvrtcGetProgramLog(prog, log), "nvrtcGetProgramLog")) {
        free(log);
        return NULL;
    }
    /* drop trailing blank lines and the NUL NVRTC counts */
    size_t len = strlen(log);
    while (len && (log[len - 1] == '\n' || log[len - 1] == '\r'))
        log[--len] = '\0';
    return log;
}

/* The cubin of a compiled prog into out->data/size; 0, or 1 after a message. */
static int cg_nvrtc_cubin(nvrtcProgram prog, cg_cubin *out, char *err, size_t errsz)
{
    size_t n = 0;
    if (CG_NVRTC_CHECK(nvrtcGetCUBINSize(prog, &n), "nvrtcGetCUBINSize"))
        return 1;
    if (!n) {
        cg_errf(err, errsz, "%s:%d: NVRTC: nvrtcGetCUBINSize gave an empty cubin for %s",
                __FILE__, __LINE__, out->arch);
        return 1;
    }
    out->data = malloc(n);
    if (!out->data) {
        cg_errf(err, errsz, "%s:%d: out of memory for a cubin (%zu bytes)", __FILE__, __LINE__,
                n);
        return 1;
    }
    if (CG_NVRTC_CHECK(nvrtcGetCUBIN(prog, (char *)out->data), "nvrtcGetCUBIN"))
        return 1;
    out->size = n;
    return 0;
}

/* Compile src for one architecture into out (whose arch is set); 0, or 1
 * after a message.  out may hold partial results on failure (the caller
 * frees them). */
static int cg_nvrtc_one(const char *src, cg_cubin *out, char *err, size_t errsz)
{
    char archopt[48];
    snprintf(archopt, sizeof archopt, "--gpu-architecture=%s", out->arch);
    const char *opts[] = {archopt, "-default-device", "--std=c++17"};
    nvrtcProgram prog;
    if (CG_NVRTC_CHECK(nvrtcCreateProgram(&prog, src, CG_CUDA_SRC_NAME, 0, NULL, NULL),
                       "nvrtcCreateProgram"))
        return 1;
    nvrtcResult rc = nvrtcCompileProgram(prog, (int)(sizeof opts / sizeof opts[0]), opts);
    int failed = 0;
    char *log = cg_nvrtc_log(prog, err, errsz);
    if (!log) {
        failed = 1;
    } else if (rc != NVRTC_SUCCESS) {
        char what[96];
        snprintf(what, sizeof what, "compiling %s for %s (nvrtcCompileProgram)",
                 CG_CUDA_SRC_NAME, out->arch);
        CG_NVRTC_CHECK(rc, what);
        cg_errf(err, errsz, "\nNVRTC log:\n%s", log[0] ? log : "(empty)");
        cg_quote_errors(log, src, err, errsz);
        failed = 1;
    } else {
        failed = cg_nvrtc_cubin(prog, out, err, errsz);
    }
    out->log = log;
    if (CG_NVRTC_CHECK(nvrtcDestroyProgram(&prog), "nvrtcDestroyProgram"))
        failed = 1;
    return failed;
}

/* See cuda.h. */
int cg_nvrtc_compile(const char *src, const char *const *archs, int narch, cg_cubin *out,
                     char *err, size_t errsz)
{
    if (cg_nvrtc_prepare(src, archs, narch, out, err, errsz))
        return CG_NVRTC_ERROR;
    for (int k = 0; k < narch; k++)
        if (cg_nvrtc_one(src, &out[k], err, errsz)) {
            cg_cubin_free(out, narch);
            return CG_NVRTC_ERROR;
        }
    return CG_NVRTC_OK;
}

/* See cuda.h. */
int cg_nvrtc_version(int *major, int *minor)
{
    char err[256] = "";
    size_t errsz = sizeof err;
    if (CG_NVRTC_CHECK(nvrtcVersion(major, minor), "nvrtcVersion")) {
        fprintf(stderr, "%s\n", err);
        return CG_NVRTC_ERROR;
    }
    return CG_NVRTC_OK;
}

#else /* !NNSC_HAVE_NVRTC */

/* The message for a compiler built without NVRTC. */
static int cg_nvrtc_missing(char *err, size_t errsz)
{
    cg_errf(err, errsz,
            "CUDA toolkit not found: nnsc-aot was built without NVRTC\n"
            "  hint: install the CUDA toolkit, configure with -DNNSC_CUDA_HOME=DIR "
            "(default /usr/local/cuda) and rebuild");
    return CG_NVRTC_MISSING;
}

/* See cuda.h: without the toolkit, only the message. */
int cg_nvrtc_compile(const char *src, const char *const *archs, int narch, cg_cubin *out,
                     char *err, size_t errsz)
{
    if (cg_nvrtc_prepare(src, archs, narch, out, err, errsz))
        return CG_NVRTC_ERROR;
    cg_cubin_free(out, narch);
    return cg_nvrtc_missing(err, errsz);
}

/* See cuda.h. */
int cg_nvrtc_version(int *major, int *minor)
{
    *major = *minor = 0;
    return CG_NVRTC_MISSING;
}

#endif
