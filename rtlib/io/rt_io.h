/* rt_io.h -- what a rank reads and writes: its manifest, safetensors
 * files, token data files and the data kernel.
 *
 *   manifest.c     the MANIFEST text -> rt_manifest
 *   safetensors.c  multi-rank safetensors writer and a validating reader
 *   data.c         token data files (llm.c layout), the data kernel */
#ifndef NNSC_RT_IO_H
#define NNSC_RT_IO_H

#include "comm/rt_comm.h"

/* ---- manifest.c */

/* Parse text into m.  Returns 0, or 1 after writing "line N: what" to err. */
int rt_manifest_parse(const char *text, rt_manifest *m, char *err, size_t errlen);
void rt_manifest_free(rt_manifest *m);

/* ---- safetensors.c */

/* What a file written by rt_st_write holds. */
enum {
    RT_ST_PARAMS = 1,   /* the params (`param` lines) */
    RT_ST_STATE = 2,    /* the optimizer state (`state` lines) */
};

/* Every rank calls: write the full logical tensors of `what` that the ranks
 * hold together into path, through tmp: rank 0 creates tmp at its full size,
 * each writer pwrite()s its boxes and fsyncs, rank 0 renames tmp to path and
 * fsyncs the directory.  meta: key, value, key, value, ..., NULL (the
 * __metadata__ object).  On failure anywhere every rank exits 1 and path is
 * untouched. */
void rt_st_write(rt_ctx *ctx, const char *path, const char *tmp, int what,
                 const char *const *meta);

/* One tensor of a safetensors file read by rt_st_open / rt_st_open_header. */
typedef struct rt_st_tensor {
    char *name;                 /* tensor name (decoded) */
    char dtype[8];              /* "F32", "I32", ... */
    int elem;                   /* bytes per element */
    int ndim;                   /* number of dimensions */
    int64_t shape[RT_MAXDIM];   /* shape */
    int64_t begin, end;         /* data_offsets, relative to the data section */
    const void *data;           /* points into the file's bytes (NULL: header only) */
} rt_st_tensor;

/* A safetensors file, validated: held in memory, or only its header with
 * the file kept open for rt_st_read_box. */
typedef struct rt_st_file {
    unsigned char *bytes;       /* the whole file, or (header only) its first 8 + header_len bytes */
    int64_t size;               /* the file's size */
    int64_t header_len;         /* JSON header length */
    rt_st_tensor *t; int nt;    /* tensors, in header order */
    char **meta; int nmeta;     /* __metadata__: key meta[2k], value meta[2k+1], k < nmeta */
    int fd;                     /* header only: the open file; else -1 */
} rt_st_file;

/* Read and validate a file.  Returns 0, or 1 with a message in err (and
 * nothing left to free).  Tensor data may be unaligned: read it with memcpy. */
int rt_st_open(const char *path, rt_st_file *f, char *err, size_t errlen);
/* Read the box [lo, hi) of tensor t (F32, BF16 or F16) of a header-only
 * file as f32 into dst (row-major, contiguous); transposed: t is 2-D and
 * holds the param transposed (lo, hi are in the param's layout).  0, or 1
 * with a message. */
int rt_st_read_box_f32(rt_ctx *ctx, const rt_st_file *f, const rt_st_tensor *t, const int64_t *lo,
                       const int64_t *hi, int transposed, float *dst, char *err, size_t errlen);
/* The same, reading only the header (validated against the file's size);
 * the file stays open for rt_st_read_box until rt_st_free. */
int rt_st_open_header(const char *path, rt_st_file *f, char *err, size_t errlen);
/* Read box [lo, hi) of tensor t (4-byte elements; t->ndim dims) of a file
 * opened with rt_st_open_header into dst, row-major, with pread()s of the
 * box's contiguous runs.  ctx (may be NULL) gets heartbeats.  Returns 0, or
 * 1 with a message in err. */
int rt_st_read_box(rt_ctx *ctx, const rt_st_file *f, const rt_st_tensor *t, const int64_t *lo,
                   const int64_t *hi, void *dst, char *err, size_t errlen);
/* Validate a malloc'ed file image (takes ownership of bytes, freed on failure). */
int rt_st_parse(unsigned char *bytes, int64_t size, rt_st_file *f, char *err, size_t errlen);
/* The tensor called name, or NULL. */
const rt_st_tensor *rt_st_find(const rt_st_file *f, const char *name);
/* The __metadata__ value of key, or NULL. */
const char *rt_st_meta(const rt_st_file *f, const char *key);
void rt_st_free(rt_st_file *f);

/* ---- data.c: token files (llm.c layout) */

#define RT_TOK_MAGIC 20240520   /* header[0] of a token file */
#define RT_TOK_VERSION 1        /* header[1] */
#define RT_TOK_HEADER 1024      /* header bytes: 256 little-endian int32 */

/* Open and check the token files of the stream inputs (rt_init, after the
 * communicator): headers, and every token id below the vocabulary (the
 * ranks share the reading and agree); exits 2 with a message naming the
 * file when one is bad. */
void rt_data_open(rt_ctx *ctx);
/* Close them (rt_finish). */
void rt_data_close(rt_ctx *ctx);
/* Box [lo, hi) of stream input `in` for batch `step` (step < 0: evaluation
 * batch -1-step) into dst (i32, the box row-major).  ref = 1: read token by
 * token (the reference). */
void rt_data_stream(rt_ctx *ctx, const rt_input *in, int64_t step, const int64_t *lo,
                    const int64_t *hi, int32_t *dst, int ref);
/* Rows in the training (eval = 0) or evaluation (eval = 1) token sequence. */
int64_t rt_data_rows(const rt_ctx *ctx, int eval);
/* rt_k_data's fast path: i as for rt_k_data. */
void rt_data_box(rt_ctx *ctx, void *dst, const int64_t *i);

#endif
