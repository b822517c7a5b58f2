/* fe_priv.h -- declarations shared by the frontend's own files (spec.c,
 * lower.c, expr.c, cli.c).  Not part of the frontend's interface: nothing
 * outside frontend/ includes it but its unit test (tests/test_frontend.c). */
#ifndef NNSC_FE_PRIV_H
#define NNSC_FE_PRIV_H

#include <stddef.h>
#include <stdint.h>

#include "frontend.h"

/* ---------------------------------------------------------------- spec.c */

/* A string -> int map (open addressing, linear probing); keys not copied:
 * each must outlive the map.  A zeroed fe_map is empty. */
typedef struct fe_map {
    const char **key;  /* slots; NULL: empty */
    int *val;          /* value of each slot */
    int cap;           /* number of slots, a power of two (0: none yet) */
    int n;             /* keys held */
} fe_map;

/* Value of key k, or -1. */
int fe_map_get(const fe_map *m, const char *k);
/* Set key k to v; grows at half full. */
void fe_map_put(fe_map *m, const char *k, int v);
/* Free the slots; the map is empty again. */
void fe_map_free(fe_map *m);

/* Report bad input in the value of kv (a key of sec).  A kv that came from
 * --set is reported as "<command line>: error: --set SEC.KEY=VAL: MESSAGE".
 * Returns 2. */
int fe_kv_error(const fe_spec *s, const fe_section *sec, const fe_kv *kv,
                const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* The header text of a section without brackets: "train", "param fc1.w". */
const char *fe_title(const fe_section *sec, char *buf, size_t bufsz);

/* 1 when s is a name: [A-Za-z_][A-Za-z0-9_.]* */
int fe_is_name(const char *s);

/* Text cut for quoting inside a message: at most about 60 bytes, "..."
 * appended when cut, never splitting a UTF-8 sequence. */
const char *fe_clip(const char *text, char *buf, size_t bufsz);

/* The index of the candidate closest to word, or -1 when none is close:
 * Damerau-Levenshtein distance (letters compared without case, two swapped
 * letters one edit) of at most 1 for 2-4 letters, 2 for 5-8, 3 for longer
 * words (a 1-letter word: only another case); ties go to the longer common
 * start, then to strcmp order.  Never word itself. */
int fe_closest(const char *word, const char *const *cand, int ncand);

/* "did you mean 'X'?" for fe_closest's candidate, written into buf; NULL
 * when none is close. */
const char *fe_suggest(const char *word, const char *const *cand, int ncand,
                       char *buf, size_t bufsz);

/* ---------------------------------------------------------------- expr.c */

/* A named size of [dims]. */
typedef struct fe_dim {
    const char *name;  /* the key in [dims] */
    int64_t val;       /* its value (>= 1) */
    int line;          /* line of its definition, 0 for --set */
} fe_dim;

/* The [dims] of a spec: in order, and by name. */
typedef struct fe_dims {
    fe_dim *d; int n, cap;     /* in [dims] order */
    fe_map idx;                /* name -> index into d */
} fe_dims;

/* Evaluate an integer expression over literals and dims->d[0..nvis) (the
 * dims defined so far; the others are defined later and only named in
 * hints).  The result must be >= 1.  Returns 0, or 1 with a message in err
 * and a hint (possibly empty) in hint. */
int fe_eval(const char *text, const fe_dims *dims, int nvis,
            int64_t *val, char *err, size_t errsz, char *hint, size_t hintsz);

/* A decimal integer (digits only) in [min, max].  Returns 0, or 1 with a
 * message in err. */
int fe_parse_int(const char *text, int64_t min, int64_t max, int64_t *val,
                 char *err, size_t errsz);

/* A decimal unsigned 64-bit integer (digits only). */
int fe_parse_u64(const char *text, uint64_t *val, char *err, size_t errsz);

/* A finite floating-point number (strtod syntax, the whole text). */
int fe_parse_float(const char *text, double *val, char *err, size_t errsz);

/* The [plan] lists into g->req.L (planspec.c): key kv of section sec;
 * 0, or 2 after a message at kv's line. */
int fe_plan_trans(const fe_spec *s, const fe_section *sec, const fe_kv *kv, ir_graph *g);
int fe_plan_coshard(const fe_spec *s, const fe_section *sec, const fe_kv *kv, ir_graph *g);
int fe_plan_stage(const fe_spec *s, const fe_section *sec, const fe_kv *kv, ir_graph *g);
int fe_plan_recompute(const fe_spec *s, const fe_section *sec, const fe_kv *kv, ir_graph *g);
int fe_plan_stage_tp(const fe_spec *s, const fe_section *sec, const fe_kv *kv, ir_graph *g);

#endif
