/* test_cuda.c -- the CUDA kernel library (codegen/cuda.c) and its NVRTC
 * compilation (codegen/nvrtc.c), without a GPU.
 *
 * The source: it covers rt_kernels.h exactly (an f32 entry point nnsc_<name>
 * for every kernel but the host-side ones, plus the bf16 / f16 tensor-core
 * matmuls), includes no header, and keeps its lines short.
 *
 * With NVRTC: the source compiles for sm_80 and sm_90 without a warning;
 * each image is a CUDA ELF for its architecture whose entry functions are
 * exactly the expected ones; no absolute path is in an image; compiling
 * again gives byte-identical images; a broken source fails with NVRTC's log
 * and the offending line quoted; bad architectures are refused.  Without
 * NVRTC (a build without the CUDA toolkit) those checks print SKIP and count
 * as skipped, never as passed, and the compile call must say "CUDA toolkit
 * not found".  Nothing here runs on a GPU.
 *
 * Prints one line per check and "N passed, M failed" (", K skipped" when
 * some were skipped); exits 1 if any check failed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codegen.h"
#include "cuda.h"
#include "rt_ew.h"

static int check_skip;   /* checks skipped (no NVRTC) */

/* The rtlib kernels that stay on the host: no CUDA entry point. */
static const char *const host_side[] = {
    "init_param", "data", "allreduce", "allreduce_bf16", "allgather", "reducescatter",
    "reducescatter_bf16", "broadcast", "sendrecv", "alltoall", "p2p", "mark", "custom",
};

/* The rtlib kernels whose CUDA code is generated per build, not part of the
 * library: ew (fused chains, one nnsc_ew_<id> per distinct chain). */
static const char *const generated[] = {"ew"};

/* The tensor-core variants, beyond one f32 entry point per device kernel. */
static const char *const tc_entries[] = {"nnsc_matmul_tc_bf16", "nnsc_matmul_tc_f16"};

/* Architectures the CUDA target compiles for by default. */
static const char *const archs[] = {"sm_80", "sm_90"};
#define NARCH 2

/* Checks that need NVRTC: the version, test_compile (1 + 5 per arch),
 * test_deterministic (1 + 1 per arch), test_broken (5), test_bad_arch (3). */
#define NVRTC_CHECKS (1 + 1 + 5 * NARCH + 1 + NARCH + 5 + 3)

/* ------------------------------------------------------- expected names */

/* Whether rtlib kernel `name` runs on the host. */
static int is_host_side(const char *name)
{
    for (size_t k = 0; k < sizeof host_side / sizeof host_side[0]; k++)
        if (!strcmp(host_side[k], name))
            return 1;
    return 0;
}

/* Whether rtlib kernel `name` gets generated code, not a library entry. */
static int is_generated(const char *name)
{
    for (size_t k = 0; k < sizeof generated / sizeof generated[0]; k++)
        if (!strcmp(generated[k], name))
            return 1;
    return 0;
}

/* The expected entry point names, derived from rt_kernels.h (not from
 * cuda.c's table): nnsc_<name> per device kernel, then the variants.
 * Returns how many were written to names[] (each malloc'd). */
static int expected_entries(char **names, int cap)
{
    int n = 0;
    for (int k = 0; k < RT_K_COUNT && n < cap; k++) {
        if (is_host_side(cg_kernel_names[k]) || is_generated(cg_kernel_names[k]))
            continue;
        size_t len = strlen(cg_kernel_names[k]) + 6;
        names[n] = malloc(len);
        snprintf(names[n++], len, "nnsc_%s", cg_kernel_names[k]);
    }
    for (size_t k = 0; k < sizeof tc_entries / sizeof tc_entries[0] && n < cap; k++) {
        names[n] = malloc(strlen(tc_entries[k]) + 1);
        strcpy(names[n++], tc_entries[k]);
    }
    return n;
}

/* ------------------------------------------------------------ the source */

/* The source's coverage of rt_kernels.h and its form. */
static void test_source(const char *src, char **want, int nwant)
{
    CHECK(!strncmp(src, "/* " CG_CUDA_SRC_NAME, strlen("/* " CG_CUDA_SRC_NAME)),
          "the source starts with its name (%zu bytes)", strlen(src));
    CHECK(!strstr(src, "#include"), "the source includes no header (NVRTC built-ins only)");

    int longest = 0, lineno = 0, at = 0;
    for (const char *p = src; *p;) {
        int len = (int)strcspn(p, "\n");
        lineno++;
        if (len > longest) {
            longest = len;
            at = lineno;
        }
        p += len + (p[len] == '\n');
    }
    CHECK(longest <= 92, "source lines are at most 92 columns (longest: %d, line %d)", longest,
          at);

    int missing = 0, wrong = 0, host_with_entry = 0;
    for (int k = 0; k < RT_K_COUNT; k++) {
        const cg_cuda_entry *e = cg_cuda_entry_of(k);
        if (is_host_side(cg_kernel_names[k]) || is_generated(cg_kernel_names[k])) {
            host_with_entry += e != NULL;
            continue;
        }
        if (!e) {
            printf("      no CUDA entry point for rt kernel %s\n", cg_kernel_names[k]);
            missing++;
            continue;
        }
        char name[64];
        snprintf(name, sizeof name, "nnsc_%s", cg_kernel_names[k]);
        if (strcmp(e->symbol, name) || strcmp(e->inputs, "f32")) {
            printf("      rt kernel %s: entry %s (%s)\n", cg_kernel_names[k], e->symbol,
                   e->inputs);
            wrong++;
        }
    }
    CHECK(!missing && !wrong, "every device-side rt kernel has its f32 entry nnsc_<name>");
    CHECK(!host_with_entry, "host-side kernels (init_param, data, collectives) and ew have none");

    int undeclared = 0, dup = 0, unexpected = 0;
    for (int k = 0; k < cg_cuda_nentries; k++) {
        char decl[80];
        snprintf(decl, sizeof decl, "NNSC_KERNEL(%s,", cg_cuda_entries[k].symbol);
        if (!strstr(src, decl)) {
            printf("      %s is not declared in the source\n", cg_cuda_entries[k].symbol);
            undeclared++;
        }
        for (int j = 0; j < k; j++)
            dup += !strcmp(cg_cuda_entries[j].symbol, cg_cuda_entries[k].symbol);
        int known = 0;
        for (int j = 0; j < nwant; j++)
            known |= !strcmp(want[j], cg_cuda_entries[k].symbol);
        unexpected += !known;
    }
    CHECK(cg_cuda_nentries == nwant && !undeclared && !dup && !unexpected,
          "the entry table lists the %d expected entry points, each declared once (%d listed)",
          nwant, cg_cuda_nentries);
}

/* -------------------------------------------------------- cubin (ELF64) */

/* A little-endian field of the image, 0 past its end. */
static uint64_t rd(const unsigned char *d, size_t size, size_t off, int bytes)
{
    uint64_t v = 0;
    if (off > size || (size_t)bytes > size - off)
        return 0;
    for (int k = bytes - 1; k >= 0; k--)
        v = v << 8 | d[off + (size_t)k];
    return v;
}

/* The NUL-terminated string at off in the image, or "" if it runs past the end. */
static const char *str_at(const unsigned char *d, size_t size, size_t off)
{
    if (off >= size || !memchr(d + off, '\0', size - off))
        return "";
    return (const char *)d + off;
}

/* What one cubin holds: its entry functions and its section names. */
typedef struct elf_info {
    int ok;               /* the image parsed as an ELF64 little-endian CUDA object */
    unsigned machine;     /* e_machine (EM_CUDA = 190) */
    unsigned sm;          /* the architecture in e_flags (80 for sm_80) */
    char **entries;       /* names of global functions marked as kernel entries */
    int nentries;         /* how many */
    char **sections;      /* every section name */
    int nsections;        /* how many */
} elf_info;

/* Free what elf_parse allocated. */
static void elf_free(elf_info *e)
{
    for (int k = 0; k < e->nentries; k++)
        free(e->entries[k]);
    for (int k = 0; k < e->nsections; k++)
        free(e->sections[k]);
    free(e->entries);
    free(e->sections);
    memset(e, 0, sizeof *e);
}

/* Parse the section headers and the symbol table of a cubin, checking every
 * offset against the size.  Kernel entries are the symbols of type FUNC,
 * binding GLOBAL, with the CUDA entry flag (0x10) in st_other. */
static void elf_parse(const unsigned char *d, size_t size, elf_info *e)
{
    memset(e, 0, sizeof *e);
    if (size < 64 || memcmp(d, "\177ELF", 4) || d[4] != 2 || d[5] != 1)
        return;
    e->machine = (unsigned)rd(d, size, 18, 2);
    uint64_t flags = rd(d, size, 48, 4);
    /* the SM number: bits 8..15 in the current ABI (version >= 8), bits 0..7 before */
    e->sm = d[8] >= 8 ? (unsigned)(flags >> 8 & 0xff) : (unsigned)(flags & 0xff);
    uint64_t shoff = rd(d, size, 0x28, 8);
    unsigned shentsize = (unsigned)rd(d, size, 0x3a, 2), shnum = (unsigned)rd(d, size, 0x3c, 2);
    unsigned shstrndx = (unsigned)rd(d, size, 0x3e, 2);
    if (shentsize < 64 || shstrndx >= shnum || shoff > size ||
        (uint64_t)shnum * shentsize > size - shoff)
        return;
#define SH(k, off, bytes) rd(d, size, shoff + (uint64_t)(k) * shentsize + (off), (bytes))
    uint64_t shstr = SH(shstrndx, 24, 8);
    e->sections = calloc(shnum, sizeof *e->sections);
    unsigned symtab = shnum;
    for (unsigned k = 0; k < shnum; k++) {
        e->sections[e->nsections++] = strdup(str_at(d, size, shstr + SH(k, 0, 4)));
        if (SH(k, 4, 4) == 2)   /* SHT_SYMTAB */
            symtab = k;
    }
    if (symtab == shnum)
        return;
    uint64_t symoff = SH(symtab, 24, 8), symsize = SH(symtab, 32, 8);
    unsigned strndx = (unsigned)SH(symtab, 40, 4);
    if (strndx >= shnum || symoff > size || symsize > size - symoff)
        return;
    uint64_t stroff = SH(strndx, 24, 8);
#undef SH
    e->entries = calloc(symsize / 24 + 1, sizeof *e->entries);
    for (uint64_t s = symoff; s + 24 <= symoff + symsize; s += 24) {
        unsigned info = d[s + 4], other = d[s + 5];
        if ((info & 0xf) == 2 && (info >> 4) == 1 && (other & 0x10))
            e->entries[e->nentries++] = strdup(str_at(d, size, stroff + rd(d, size, s, 4)));
    }
    e->ok = 1;
}

/* Whether names[0 .. n) holds s. */
static int has(char **names, int n, const char *s)
{
    for (int k = 0; k < n; k++)
        if (!strcmp(names[k], s))
            return 1;
    return 0;
}

/* The first absolute path-like text in an image ("/usr/", "/home/", ...), or NULL. */
static const char *find_path(const unsigned char *d, size_t size)
{
    static const char *const roots[] = {"/usr/", "/home/", "/tmp/", "/work/", "/opt/", "/root/"};
    for (size_t r = 0; r < sizeof roots / sizeof roots[0]; r++) {
        size_t n = strlen(roots[r]);
        for (size_t k = 0; k + n <= size; k++)
            if (!memcmp(d + k, roots[r], n))
                return roots[r];
    }
    return NULL;
}

/* -------------------------------------------------------------- NVRTC */

/* The library for sm_80 and sm_90: clean logs, the right ELF, the entries. */
static void test_compile(const char *src, char **want, int nwant, cg_cubin *img)
{
    char err[16384];
    int rc = cg_nvrtc_compile(src, archs, NARCH, img, err, sizeof err);
    CHECK(rc == CG_NVRTC_OK, "the library compiles for sm_80 and sm_90%s%s", rc ? ": " : "",
          rc ? err : "");
    if (rc != CG_NVRTC_OK)
        return;
    for (int a = 0; a < NARCH; a++) {
        cg_cubin *c = &img[a];
        unsigned sm = (unsigned)atoi(archs[a] + 3);
        CHECK(!strcmp(c->arch, archs[a]) && c->data && c->size > 1024,
              "%s: a cubin of %zu bytes", archs[a], c->size);
        CHECK(c->log && !c->log[0], "%s: NVRTC's log is empty (no warnings)%s%s", archs[a],
              c->log && c->log[0] ? ":\n" : "", c->log ? c->log : "");
        elf_info e;
        elf_parse(c->data, c->size, &e);
        CHECK(e.ok && e.machine == 190 && e.sm == sm,
              "%s: an ELF64 CUDA image (machine %u) for SM %u", archs[a], e.machine, e.sm);
        int missing = 0, noinfo = 0;
        for (int k = 0; k < nwant; k++) {
            char sec[96];
            snprintf(sec, sizeof sec, ".nv.info.%s", want[k]);
            if (!has(e.entries, e.nentries, want[k])) {
                printf("      %s: no entry function %s\n", archs[a], want[k]);
                missing++;
            } else if (!has(e.sections, e.nsections, sec)) {
                printf("      %s: no section %s\n", archs[a], sec);
                noinfo++;
            }
        }
        CHECK(!missing && !noinfo && e.nentries == nwant,
              "%s: entry functions are exactly the %d expected (%d found)", archs[a], nwant,
              e.nentries);
        const char *path = find_path(c->data, c->size);
        CHECK(!path, "%s: no absolute path in the image%s%s", archs[a], path ? ": " : "",
              path ? path : "");
        elf_free(&e);
    }
}

/* A build with fused chains: cg_cuda_build_source adds one nnsc_ew_<id>
 * per distinct chain (every op kind and operand kind appears), and the
 * result compiles cleanly with exactly those extra entries. */
static void test_fused(int have_nvrtc)
{
    ir_prog p[2];
    ir_prog_init(&p[0], 0, 2);
    ir_prog_init(&p[1], 1, 2);
    /* chain 0: r0 = b0 + row b1; b2 = gelu(r0); b3 += relu(b2) */
    static const int64_t c0[] = {RT_EW_ADD, RT_EW_REG + 0, RT_EW_MEM + 0, RT_EW_ROW + 1,
                                 RT_EW_GELU, RT_EW_MEM + 2, RT_EW_REG + 0, 0,
                                 RT_EW_RELU, RT_EW_ACC + 3, RT_EW_MEM + 2, 0};
    /* chain 1: r1 = b0 * gelu'(b1); b2 = (b1 > 0 ? r1 : 0); b0 = copy r1; r2 = b0 * b1 */
    static const int64_t c1[] = {RT_EW_GELU_BWD, RT_EW_REG + 1, RT_EW_MEM + 0, RT_EW_MEM + 1,
                                 RT_EW_RELU_BWD, RT_EW_MEM + 2, RT_EW_REG + 1, RT_EW_MEM + 1,
                                 RT_EW_COPY, RT_EW_MEM + 0, RT_EW_REG + 1, 0,
                                 RT_EW_MUL, RT_EW_ACC + 2, RT_EW_MEM + 0, RT_EW_MEM + 1};
    const int64_t *ch[2] = {c0, c1};
    int nops[2] = {3, 4}, nbuf[2] = {4, 3};
    /* rank 0 has chain 0 twice, rank 1 chain 0 then chain 1: two ids */
    for (int r = 0; r < 2; r++)
        for (int x = 0; x < 2; x++) {
            int c = r == 1 && x == 1;
            pg_instr *in = ir_prog_add(&p[r], IR_SEC_MB, RT_K_ew, c ? "chain1" : "chain0");
            for (int b = 0; b < nbuf[c]; b++) pg_buf(in, 64 * b);
            pg_i(in, c);
            pg_i(in, 16);
            pg_i(in, 4);
            pg_i(in, nops[c]);
            for (int k = 0; k < 4 * nops[c]; k++) pg_i(in, ch[c][k]);
        }
    for (int r = 0; r < 2; r++) {
        p[r].arena = 4096;
        ir_prog_verify(&p[r]);
    }
    ir_buf src = {0};
    cg_cuda_build_source(&src, p, 2);
    CHECK(strstr(src.s, "NNSC_KERNEL(nnsc_ew_0,") && strstr(src.s, "NNSC_KERNEL(nnsc_ew_1,") &&
              !strstr(src.s, "nnsc_ew_2"),
          "the build source has one generated kernel per distinct chain (nnsc_ew_0, nnsc_ew_1)");
    CHECK(strstr(src.s, "b1[k % N]") && strstr(src.s, "b3[k] = b3[k] + v") &&
              strstr(src.s, "nnsc_ewf_GELU_BWD(b0[k], b1[k])"),
          "row broadcasts, accumulation and gelu' appear as the ops say");
    if (!have_nvrtc) {
        check_skip += 2 * NARCH;
        printf("SKIP  the fused kernels compile (%d checks): built without NVRTC\n", 2 * NARCH);
    } else {
        cg_cubin img[NARCH];
        memset(img, 0, sizeof img);
        char err[16384];
        int rc = cg_nvrtc_compile(src.s, archs, NARCH, img, err, sizeof err);
        for (int a = 0; a < NARCH; a++) {
            CHECK(rc == CG_NVRTC_OK && img[a].log && !img[a].log[0],
                  "%s: the build source with fused chains compiles cleanly%s%s", archs[a],
                  rc ? ": " : "", rc ? err : "");
            elf_info e = {0};
            if (rc == CG_NVRTC_OK) elf_parse(img[a].data, img[a].size, &e);
            CHECK(e.ok && has(e.entries, e.nentries, "nnsc_ew_0") &&
                      has(e.entries, e.nentries, "nnsc_ew_1"),
                  "%s: the cubin has entries nnsc_ew_0 and nnsc_ew_1", archs[a]);
            elf_free(&e);
        }
        cg_cubin_free(img, NARCH);
    }
    ir_buf_free(&src);
    ir_prog_free(&p[0]);
    ir_prog_free(&p[1]);
}

/* Compiling again gives the same bytes. */
static void test_deterministic(const char *src, const cg_cubin *img)
{
    cg_cubin again[NARCH];
    char err[4096];
    int rc = cg_nvrtc_compile(src, archs, NARCH, again, err, sizeof err);
    CHECK(rc == CG_NVRTC_OK, "a second compilation succeeds%s%s", rc ? ": " : "", rc ? err : "");
    if (rc != CG_NVRTC_OK)
        return;
    for (int a = 0; a < NARCH; a++)
        CHECK(img[a].size == again[a].size && !memcmp(img[a].data, again[a].data, img[a].size),
              "%s: byte-identical cubin on the second compilation", archs[a]);
    cg_cubin_free(again, NARCH);
}

/* A broken source: NVRTC's error, its log and the offending line, file:line of the call. */
static void test_broken(void)
{
    static const char broken[] =
        "typedef long long i64;\n"
        "extern \"C\" __global__ void nnsc_broken(float *y)\n"
        "{ y[threadIdx.x] = undeclared_thing + 1.0f; }\n";
    cg_cubin out[NARCH];
    char err[8192];
    int rc = cg_nvrtc_compile(broken, archs, NARCH, out, err, sizeof err);
    printf("      message:\n%s\n", err);
    CHECK(rc == CG_NVRTC_ERROR, "a broken source fails (rc %d)", rc);
    CHECK(strstr(err, "nvrtc.c:") && strstr(err, "NVRTC_ERROR_COMPILATION") &&
              strstr(err, "for sm_80"),
          "the message names the call (file:line), NVRTC's error and the architecture");
    CHECK(strstr(err, CG_CUDA_SRC_NAME "(3): error") && strstr(err, "undeclared_thing"),
          "the message holds NVRTC's log, pointing at " CG_CUDA_SRC_NAME " line 3");
    CHECK(strstr(err, CG_CUDA_SRC_NAME ":3: { y[threadIdx.x] = undeclared_thing"),
          "the message quotes line 3 of the generated source");
    CHECK(!out[0].data && !out[1].data && !out[0].log, "nothing is left to free after a failure");
}

/* Architecture names: refused before NVRTC when malformed, by NVRTC when unknown. */
static void test_bad_arch(const char *src)
{
    cg_cubin out[1];
    char err[4096];
    const char *bad[] = {"sm_8"};
    int rc = cg_nvrtc_compile(src, bad, 1, out, err, sizeof err);
    CHECK(rc == CG_NVRTC_ERROR && strstr(err, "bad GPU architecture 'sm_8'"),
          "a malformed architecture is refused: %s", err);
    const char *unknown[] = {"sm_10"};
    rc = cg_nvrtc_compile(src, unknown, 1, out, err, sizeof err);
    CHECK(rc == CG_NVRTC_ERROR && strstr(err, "NVRTC") && strstr(err, "sm_10"),
          "an architecture NVRTC does not know fails with NVRTC's message");
    printf("      message: %s\n", err);
    rc = cg_nvrtc_compile(src, archs, 0, out, err, sizeof err);
    CHECK(rc == CG_NVRTC_ERROR, "no architecture at all is an error: %s", err);
}

/* Without NVRTC: the one message, and every NVRTC check skipped. */
static void test_missing(const char *src, int nskip)
{
    cg_cubin out[NARCH];
    char err[1024];
    int rc = cg_nvrtc_compile(src, archs, NARCH, out, err, sizeof err);
    CHECK(rc == CG_NVRTC_MISSING && strstr(err, "CUDA toolkit not found"),
          "without NVRTC, compiling says: %s", err);
    printf("SKIP  NVRTC not available (built without the CUDA toolkit): %d checks skipped\n",
           nskip);
    check_skip += nskip;
}

int main(void)
{
    char *want[64];
    int nwant = expected_entries(want, 64);
    ir_buf src = {0};
    cg_cuda_source(&src);
    test_source(src.s, want, nwant);

    int major = 0, minor = 0;
    int v = cg_nvrtc_version(&major, &minor);
    test_fused(v == CG_NVRTC_OK);
    if (v == CG_NVRTC_MISSING) {
        test_missing(src.s, NVRTC_CHECKS);
    } else {
        CHECK(v == CG_NVRTC_OK, "NVRTC %d.%d answers", major, minor);
        cg_cubin img[NARCH];
        memset(img, 0, sizeof img);
        test_compile(src.s, want, nwant, img);
        if (img[0].data)
            test_deterministic(src.s, img);
        cg_cubin_free(img, NARCH);
        test_broken();
        test_bad_arch(src.s);
    }

    ir_buf_free(&src);
    for (int k = 0; k < nwant; k++)
        free(want[k]);
    printf("%d passed, %d failed", check_pass, check_fail);
    if (check_skip)
        printf(", %d skipped", check_skip);
    printf("\n");
    return check_fail ? 1 : 0;
}
