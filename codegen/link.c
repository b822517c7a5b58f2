/* link.c -- link a rank's object file with rtlib into an executable.
 *
 * The system C compiler driver does the linking (it knows the C runtime
 * start files and libc), started with posix_spawn, never through a shell:
 *
 *     $NNSC_CC -o EXE OBJ RTLIB -lm -lpthread -lrt -ldl
 *
 * where $NNSC_CC defaults to cc.  The result needs nothing but libc.
 *
 * Ranks of the cuda target link exactly the same way: rtlib opens the CUDA
 * driver (libcuda.so.1) and NCCL (libnccl.so.2) with dlopen when the rank
 * starts, so an executable has no DT_NEEDED entry for CUDA, NCCL or the
 * toolkit, and a host without them gets rtlib's clear message instead of
 * the loader's.  -ldl is for dlopen on C libraries before glibc 2.34; since
 * then dlopen is in libc and libdl.a is empty, so it changes nothing there.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "codegen.h"

extern char **environ;

/* Kernel names by RT_K_* id, from rtlib/rt_kernels.h. */
const char *const cg_kernel_names[RT_K_COUNT] = {
#define RT_K(name, nbuf, nint, nflt, out, rw, acc, ext) #name,
#include "rt_kernels.h"
#undef RT_K
};

/* The link command line, for messages. */
static void cg_print_cmd(char *const *argv) {
    for (int i = 0; argv[i]; i++) fprintf(stderr, "%s%s", i ? " " : "", argv[i]);
    fprintf(stderr, "\n");
}

/* path as an argument of the C compiler driver that can never be read as
 * an option: a relative path starting with '-' (a custom op's file named
 * "-oPWN.c" in the spec's folder) gets "./" in front; others are as they
 * are.  Returns path or buf (n bytes). */
static const char *cg_path_arg(const char *path, char *buf, size_t n)
{
    if (path[0] != '-') return path;
    snprintf(buf, n, "./%s", path);
    return buf;
}

/* Can the C compiler driver write path (a file under the user's -o)?  0,
 * or 1 after "cannot write PATH: REASON": checked before it runs, so that
 * the message names the path and the system's reason, not the linker's
 * command line.  (A file made here to find out is removed again.) */
static int cg_writable(const char *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666), made = fd >= 0;
    if (fd < 0 && errno == EEXIST) fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 && errno == ETXTBSY) return 0;   /* (a running rank: the linker replaces the file, not its bytes) */
    if (fd < 0) {
        fprintf(stderr, "nnsc-aot: error: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    close(fd);
    if (made) unlink(path);
    return 0;
}

/* Link obj into exe with rtlib; 0, or 1 after printing a message. */
int cg_link(const char *obj, const char *rtlib_path, const char *exe) {
    return cg_link_objs(&obj, 1, rtlib_path, exe);
}

/* Run argv (argv[0] the C compiler driver) and wait; 0, or 1 after printing
 * "<what> <target> failed" with the command line. */
static int cg_spawn(char **argv, const char *what, const char *target) {
    pid_t pid;
    int err = posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ);
    if (err) {
        fprintf(stderr, "nnsc-aot: cannot run the C compiler driver '%s': %s\n"
                        "  hint: install cc or set NNSC_CC to a C compiler driver\n",
                argv[0], strerror(err));
        return 1;
    }
    int status;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            fprintf(stderr, "nnsc-aot: waiting for '%s': %s\n", argv[0], strerror(errno));
            return 1;
        }
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
    if (WIFEXITED(status))
        fprintf(stderr, "nnsc-aot: %s %s failed (%s exited with status %d):\n  ", what, target, argv[0],
                WEXITSTATUS(status));
    else
        fprintf(stderr, "nnsc-aot: %s %s failed (%s killed by signal %d):\n  ", what, target, argv[0],
                WTERMSIG(status));
    cg_print_cmd(argv);
    return 1;
}

/* Link objs (object files, and linker flags "-Wl,..." that driver.c adds)
 * into exe with rtlib; 0, or 1 after printing a message. */
int cg_link_objs(const char *const *objs, int nobj, const char *rtlib_path, const char *exe) {
    const char *cc = getenv("NNSC_CC");
    if (!cc || !cc[0]) cc = "cc";
    if (access(rtlib_path, R_OK) != 0) {
        fprintf(stderr, "nnsc-aot: cannot read the runtime library %s: %s\n"
                        "  hint: build it (cmake --build build --target nnsc_rt) or set NNSC_RTLIB\n",
                rtlib_path, strerror(errno));
        return 1;
    }
    static const char *const tail[] = {
#ifdef NNSC_SANITIZE
        /* A sanitized build's rtlib calls into the sanitizer runtimes. */
        "-fsanitize=address,undefined",
#endif
        "-lm", "-lpthread", "-lrt", "-ldl", NULL,
    };
    if (cg_writable(exe)) return 1;
    int ntail = (int)(sizeof tail / sizeof *tail), na = 0;
    char **argv = ir_xmalloc(sizeof *argv * ((size_t)nobj + (size_t)ntail + 5));
    char (*paths)[PATH_MAX + 3] = ir_xmalloc(sizeof *paths * ((size_t)nobj + 2));
    argv[na++] = (char *)cc, argv[na++] = "-o";
    argv[na++] = (char *)cg_path_arg(exe, paths[0], sizeof paths[0]);
    for (int i = 0; i < nobj; i++)   /* (an entry "-Wl,..." is the driver's own linker flag, not a path) */
        argv[na++] = strncmp(objs[i], "-Wl,", 4) ? (char *)cg_path_arg(objs[i], paths[i + 1], sizeof paths[0])
                                                : (char *)objs[i];
    argv[na++] = (char *)cg_path_arg(rtlib_path, paths[nobj + 1], sizeof paths[0]);
    for (int i = 0; i < ntail; i++) argv[na++] = (char *)tail[i];
    int rc = cg_spawn(argv, "linking", exe);
    free(paths);
    free(argv);
    return rc;
}

/* Compile the C file src (a custom op's kernel) into obj for cpu, with
 * nnsc_custom.h on the include path; 0, or 2 after printing a message
 * (the compiler's own messages come first), or 1 when obj cannot be
 * written. */
int cg_compile_c(const char *src, const char *obj, const char *cpu) {
    const char *cc = getenv("NNSC_CC");
    if (!cc || !cc[0]) cc = "cc";
    char inc[PATH_MAX + 40], march[160];
    snprintf(inc, sizeof inc, "-I%s", cg_include_dir());
    snprintf(march, sizeof march, "-march=%s", cpu && cpu[0] ? cpu : "x86-64-v3");
    /* -ffp-contract=off: a kernel rounds the same way wherever it runs */
    char sa[PATH_MAX + 3], oa[PATH_MAX + 3];
    char *argv[] = {(char *)cc, "-std=gnu11", "-O2", march, "-ffp-contract=off", "-fno-strict-aliasing", inc,
                    "-c", (char *)cg_path_arg(src, sa, sizeof sa), "-o", (char *)cg_path_arg(obj, oa, sizeof oa),
                    NULL};
    if (cg_writable(obj)) return 1;
    return cg_spawn(argv, "compiling", src) ? 2 : 0;
}

/* The same into a shared object so (nnsc-aot check-op loads it); 0 or 2. */
int cg_compile_shared(const char *src, const char *so) {
    const char *cc = getenv("NNSC_CC");
    if (!cc || !cc[0]) cc = "cc";
    char inc[PATH_MAX + 40];
    snprintf(inc, sizeof inc, "-I%s", cg_include_dir());
    char sa[PATH_MAX + 3], oa[PATH_MAX + 3];
    char *argv[] = {(char *)cc, "-std=gnu11", "-O2", "-ffp-contract=off", "-fno-strict-aliasing", "-shared", "-fPIC",
                    inc, (char *)cg_path_arg(src, sa, sizeof sa), "-o", (char *)cg_path_arg(so, oa, sizeof oa), "-lm",
                    NULL};
    return cg_spawn(argv, "compiling", src) ? 2 : 0;
}

/* $env when set; else the first of the places beside the running compiler
 * that exists: bin/name (the build tree: build/ holds nnsc-aot and what it
 * needs), then ../inst (an installed tree: PREFIX/bin/nnsc-aot and
 * PREFIX/lib/nnsc-aot/..., `./build.sh install`); else bin/name (so the
 * message names where it was looked for), or name alone when the compiler's
 * own path is unknown.  The result is in path (PATH_MAX + 64 bytes). */
static const char *cg_beside_compiler(const char *env, const char *name, const char *inst, char *path) {
    const char *e = getenv(env);
    if (e && e[0]) return e;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return name;
    self[n] = 0;
    char *slash = strrchr(self, '/');
    if (!slash) return name;
    *slash = 0;   /* self: the compiler's folder */
    snprintf(path, PATH_MAX + 64, "%s/../%s", self, inst);
    char here[PATH_MAX + 64];
    snprintf(here, sizeof here, "%s/%s", self, name);
    if (access(here, F_OK) == 0 || access(path, F_OK) != 0) snprintf(path, PATH_MAX + 64, "%s", here);
    return path;
}

/* Where libnnsc_rt.a is: $NNSC_RTLIB, else beside the running compiler
 * (build/libnnsc_rt.a in the build tree, PREFIX/lib/nnsc-aot/libnnsc_rt.a
 * installed). */
const char *cg_rtlib_path(void) {
    static char path[PATH_MAX + 64];
    return cg_beside_compiler("NNSC_RTLIB", "libnnsc_rt.a", "lib/nnsc-aot/libnnsc_rt.a", path);
}

/* Where nnsc_custom.h is: $NNSC_INCLUDE, else beside the running compiler
 * (build/include, where the build copies rtlib/nnsc_custom.h, or
 * PREFIX/include/nnsc-aot installed). */
const char *cg_include_dir(void) {
    static char path[PATH_MAX + 64];
    return cg_beside_compiler("NNSC_INCLUDE", "include", "include/nnsc-aot", path);
}
