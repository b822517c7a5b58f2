/* frontend.h -- the model spec (INI) to the logical Graph, and the command line.
 *
 *   spec.c     read the INI file with inih (own line-counting reader), apply
 *              --set overrides, check every section and key
 *   lower.c    evaluate [dims], declare inputs/params, unroll [block]s, add
 *              ops in dependency order (shapes inferred by ir_add_op), fill
 *              g->train and g->req
 *   main.c     the driver: nnsc-aot compile / verify
 *   verify.c   nnsc-aot verify
 *
 * Bad input is reported as
 *     FILE:LINE: error: WHAT
 *       LINE TEXT (the offending line, when there is one)
 *       hint: WHAT WOULD BE RIGHT
 * and the caller exits with status 2.
 */
#ifndef NNSC_FRONTEND_H
#define NNSC_FRONTEND_H

#include "ir.h"

/* One `key = value` of a section. */
typedef struct fe_kv {
    char *key;    /* key, trimmed */
    char *val;    /* value, trimmed, comments removed */
    int line;     /* line in the file, or 0 for a --set override */
} fe_kv;

/* One [section] of the spec. */
typedef struct fe_section {
    char *kind;   /* first word of the header: model dims input param op block train cluster plan */
    char *name;   /* second word (input/param/op/block), or NULL */
    int line;     /* line of the header */
    fe_kv *kv; int nkv, kvcap;
} fe_section;

/* The parsed spec, before lowering. */
typedef struct fe_spec {
    char *file;                 /* path as given */
    fe_section *sec; int nsec, seccap;
    char **lines; int nlines;   /* raw lines, for quoting in messages (1-based via line-1) */
} fe_spec;

/* Report bad input at file:line (line 0: no line) and return 2.
 * hint may be NULL. */
int fe_error(const fe_spec *s, int line, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Read and check the spec; apply overrides ("section.key=value", where
 * section is the header text, e.g. "train" or "param fc1.w").  Returns 0, or
 * 2 after printing a message. */
int fe_parse(const char *path, const char *const *sets, int nset, fe_spec *s);
void fe_spec_free(fe_spec *s);
/* Value of key in section, or NULL. */
const fe_kv *fe_get(const fe_section *sec, const char *key);

/* Build the forward Graph from a parsed spec.  Returns 0, or 2 after
 * printing a message. */
int fe_lower(const fe_spec *s, ir_graph *g);

/* fe_parse + fe_lower. */
int fe_load(const char *path, const char *const *sets, int nset, ir_graph *g);

#endif
