/* svg.c -- out/plan.svg: the plan drawn, for every build.
 *
 * Top to bottom, each part a group with an id (tests/plan.sh finds them):
 *   title     the model, the mesh, the largest arena and the most bytes
 *             one rank sends per step
 *   mesh      a box per pipeline stage (one without a pipeline): its
 *             devices as a grid, a row per data-parallel replica and a
 *             column per tensor-parallel rank, each cell coloured by its
 *             memory class; the forward ops (layers) the stage holds
 *   memory    per class of ranks with equal figures (drawn once, with the
 *             ranks as a device list and their count): the arena as a bar,
 *             persistent (params, grads, optimizer state) and the rest
 *             (activations, a pipeline's stash, buffers), from the memory
 *             plan plan.txt prints
 *   ops       op-trans and op-assign: per op its split (a chip per split:
 *             a dim's, the value's, replicated) and its devices; ops whose
 *             names differ only in numbers (the layers h.0.q .. h.95.q) and
 *             that are split alike are one row, "h.[0-95].q x96"; a
 *             backward op split like its forward op is counted, not listed
 *   comm      the collectives per step: per kind the bytes the busiest rank
 *             sends, then a row per collective (layers grouped alike):
 *             kind, tensor, how often, bytes, its groups
 *   timeline  a pipeline's step on the cost model, a row per stage and a
 *             box per task
 * Rows are capped (the rest counted; plan.txt lists everything), so the
 * file grows with the plan's distinct parts, not with devices x layers.
 *
 * Every label is monospace, so its width is known from its characters
 * (SV_EM per character, a non-ASCII character counted twice): the picture's
 * extents are tracked as it is drawn and the viewBox is computed from them,
 * so no text is clipped.  User strings (model, op, tensor, block and custom
 * kernel names) are cut to SV_MAXNAME characters, made valid UTF-8 without
 * control characters and escaped for XML.  Plain SVG 1.1, no scripts,
 * deterministic. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen.h"
#include "passes.h"

#define SV_EM 0.62          /* width of a monospace glyph per em, a little above DejaVu Sans Mono's 0.602 */
#define SV_FONT 12          /* body text size (px) */
#define SV_HEAD 14          /* section heading size */
#define SV_ROW 18           /* table row height */
#define SV_MAXNAME 60       /* characters of a user string drawn ("..." after a cut one) */
#define SV_MAXROWS 120      /* rows of the op table drawn, the rest counted */
#define SV_MAXCOMM 80       /* rows of the collectives drawn */
#define SV_MAXCLASS 24      /* memory classes drawn */
#define SV_MAXSTAGE 16      /* stage boxes drawn (more: the first 12 and the last 2) */
#define SV_BAR 360          /* a full memory bar (the largest arena), px */
#define SV_PIPEW 840        /* a pipeline step's width on the timeline, px */
#define SV_FONTS "DejaVu Sans Mono, Menlo, Consolas, Liberation Mono, monospace"

/* The picture being drawn: its elements and their extents. */
typedef struct sv_doc {
    ir_buf body;          /* the elements, in drawing order */
    double x0, y0;        /* the left-most and top-most point drawn */
    double x1, y1;        /* the right-most and lowest */
} sv_doc;

/* Strong colours (swatches, chips, bars), cycled by class. */
static const char *const sv_palette[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                         "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
#define SV_NPAL 10

/* The glyphs of clean text s: a UTF-8 lead byte counts 2 (a wide glyph at
 * most), continuation bytes 0. */
static int sv_glyphs(const char *s)
{
    int n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) n += *p < 0x80 ? 1 : *p >= 0xc0 ? 2 : 0;
    return n;
}

/* Width of clean text s at font size px. */
static double sv_width(const char *s, double size)
{
    return sv_glyphs(s) * SV_EM * size;
}

/* The length of the valid UTF-8 sequence at p (1..4), or 0 when it is
 * not one (a stray continuation byte, an overlong form, a surrogate, a
 * code point past U+10FFFF), as XML parsers judge it. */
static int sv_utf8_len(const unsigned char *p)
{
    unsigned c = p[0];
    int n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (!n) return 0;
    unsigned lo = 0x80, hi = 0xbf;   /* the second byte's range */
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
    if (p[1] < lo || p[1] > hi) return 0;
    for (int k = 2; k < n; k++)
        if (p[k] < 0x80 || p[k] > 0xbf) return 0;
    return n;
}

/* Append user string s to o as clean text: valid UTF-8, a control
 * character or a byte that is not UTF-8 made '?', cut after max glyphs
 * with "..." (the cut falls between characters). */
static void sv_clean(ir_buf *o, const char *s, int max)
{
    int g = 0;
    for (const unsigned char *p = (const unsigned char *)(s ? s : "?"); *p;) {
        int n = *p < 0x80 ? 1 : sv_utf8_len(p), w = n > 1 ? 2 : 1;
        if (g + w > max) {
            ir_bprintf(o, "...");
            return;
        }
        if (n == 0 || *p < 0x20 || *p == 0x7f) ir_bprintf(o, "?");
        else ir_bprintf(o, "%.*s", n, (const char *)p);
        g += w;
        p += n ? n : 1;
    }
}

/* A clean copy of user string s (sv_clean), malloc'd. */
static char *sv_dup(const char *s, int max)
{
    ir_buf o = {0};
    sv_clean(&o, s, max);
    if (!o.s) ir_bprintf(&o, "%s", "");
    return o.s;
}

/* Append clean text s to b, escaped for XML (text and attribute values). */
static void sv_esc(ir_buf *b, const char *s)
{
    while (*s) {
        size_t n = strcspn(s, "&<>\"'");
        if (n) ir_bprintf(b, "%.*s", (int)n, s);
        s += n;
        if (!*s) break;
        ir_bprintf(b, "%s", *s == '&' ? "&amp;" : *s == '<' ? "&lt;" : *s == '>' ? "&gt;" : *s == '"' ? "&quot;" : "&apos;");
        s++;
    }
}

/* Grow v's extents to hold the box (x, y) .. (x + w, y + h). */
static void sv_extend(sv_doc *v, double x, double y, double w, double h)
{
    if (x < v->x0) v->x0 = x;
    if (y < v->y0) v->y0 = y;
    if (x + w > v->x1) v->x1 = x + w;
    if (y + h > v->y1) v->y1 = y + h;
}

/* Text s (clean) with its baseline at y: anchor 's' start at x, 'm'
 * centred on x, 'e' ending at x; attrs: more attributes ("" for none). */
static void sv_text(sv_doc *v, double x, double y, double size, char anchor, const char *attrs, const char *s)
{
    double w = sv_width(s, size), a = anchor == 'm' ? x - w / 2 : anchor == 'e' ? x - w : x;
    sv_extend(v, a, y - size, w, size * 1.3);
    ir_bprintf(&v->body, "<text x=\"%.1f\" y=\"%.1f\"", x, y);
    if (size != SV_FONT) ir_bprintf(&v->body, " font-size=\"%g\"", size);
    if (anchor != 's') ir_bprintf(&v->body, " text-anchor=\"%s\"", anchor == 'm' ? "middle" : "end");
    ir_bprintf(&v->body, "%s%s>", *attrs ? " " : "", attrs);
    sv_esc(&v->body, s);
    ir_bprintf(&v->body, "</text>\n");
}

/* A rectangle; attrs: its fill and more ("fill=\"#eee\""). */
static void sv_rect(sv_doc *v, double x, double y, double w, double h, const char *attrs)
{
    sv_extend(v, x, y, w, h);
    ir_bprintf(&v->body, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" %s/>\n", x, y, w, h, attrs);
}

/* A hover text (clean) for the element just opened. */
static void sv_title(sv_doc *v, const char *s)
{
    ir_bprintf(&v->body, "<title>");
    sv_esc(&v->body, s);
    ir_bprintf(&v->body, "</title>");
}

/* A section's heading and its one-line explanation at *y; *y moves below. */
static void sv_heading(sv_doc *v, double *y, const char *head, const char *sub)
{
    *y += SV_HEAD + 14;
    sv_text(v, 12, *y, SV_HEAD, 's', "font-weight=\"bold\"", head);
    if (sub) {
        *y += SV_ROW;
        sv_text(v, 12, *y, SV_FONT, 's', "fill=\"#555\"", sub);
    }
    *y += 8;
}

/* A legend at (x, y): a swatch and its words per item, left to right;
 * items: n pairs of colour and words. */
static void sv_legend(sv_doc *v, double x, double y, const char *const (*items)[2], int n)
{
    for (int k = 0; k < n; k++) {
        char attr[48];
        snprintf(attr, sizeof attr, "rx=\"2\" fill=\"%s\"", items[k][0]);
        sv_rect(v, x, y - 9, 10, 10, attr);
        sv_text(v, x + 14, y, 11, 's', "fill=\"#333\"", items[k][1]);
        x += 14 + sv_width(items[k][1], 11) + 16;
    }
}

/* Bytes sent per step by rank p, all kinds. */
static int64_t sv_sent(const ir_prog *p)
{
    int64_t s = 0;
    for (int k = 0; k < IR_COMM_COUNT; k++) s += p->comm_bytes[k];
    return s;
}

/* A byte count in a unit (ir_bprint_bytes), as a string in buf. */
static const char *sv_bytes(char *buf, size_t n, double bytes)
{
    ir_buf b = {0};
    ir_bprint_bytes(&b, bytes);
    snprintf(buf, n, "%s", b.s);
    ir_buf_free(&b);
    return buf;
}

/* Append cg_devlist of v to o, cut after max characters with "...". */
static void sv_devs(ir_buf *o, const int *v, int n, int max)
{
    ir_buf t = {0};
    cg_devlist(&t, v, n);
    if (t.n > (size_t)max) ir_bprintf(o, "%.*s...", max, t.s);
    else ir_bprintf(o, "%s", t.s);
    ir_buf_free(&t);
}

/* ---------------------------------------------------------------- grouping */

/* A string map to group ids (open addressing, FNV-1a). */
typedef struct sv_map {
    int *slot;       /* per slot: a group id + 1, 0 empty */
    int cap;         /* slots, a power of two */
    char **key;      /* per group: its key (owned) */
    int n, ncap;     /* groups, and room for them in key */
} sv_map;

/* The hash of s. */
static unsigned sv_hash(const char *s)
{
    unsigned h = 2166136261u;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

/* The group of key k; a new one (id m->n) when k is new, *fresh then 1. */
static int sv_map_get(sv_map *m, const char *k, int *fresh)
{
    if (2 * (m->n + 1) > m->cap) {   /* grow: rehash every key */
        int cap = m->cap ? 2 * m->cap : 256;
        int *slot = ir_xcalloc((size_t)cap, sizeof *slot);
        for (int i = 0; i < m->n; i++) {
            unsigned h = sv_hash(m->key[i]) & (unsigned)(cap - 1);
            while (slot[h]) h = (h + 1) & (unsigned)(cap - 1);
            slot[h] = i + 1;
        }
        free(m->slot);
        m->slot = slot, m->cap = cap;
    }
    unsigned h = sv_hash(k) & (unsigned)(m->cap - 1);
    for (; m->slot[h]; h = (h + 1) & (unsigned)(m->cap - 1))
        if (!strcmp(m->key[m->slot[h] - 1], k)) return *fresh = 0, m->slot[h] - 1;
    if (m->n == m->ncap) {
        m->ncap = m->ncap ? 2 * m->ncap : 64;
        m->key = ir_xrealloc(m->key, sizeof *m->key * (size_t)m->ncap);
    }
    size_t len = strlen(k) + 1;
    m->key[m->n] = memcpy(ir_xmalloc(len), k, len);
    m->slot[h] = m->n + 1;
    *fresh = 1;
    return m->n++;
}

/* Free m's memory. */
static void sv_map_free(sv_map *m)
{
    for (int i = 0; i < m->n; i++) free(m->key[i]);
    free(m->slot);
    free(m->key);
}

/* Append name's shape to o: each run of 1 to 9 digits made '#' (a layer's
 * number: h.3.q and h.95.q have one shape). */
static void sv_shape(ir_buf *o, const char *name)
{
    for (const char *p = name; *p;) {
        size_t n = strspn(p, "0123456789");
        if (n && n <= 9) ir_bprintf(o, "#");
        else if (n) ir_bprintf(o, "%.*s", (int)n, p);
        else ir_bprintf(o, "%c", *p);
        p += n ? n : 1;
    }
}

/* Compare ints (qsort). */
static int sv_cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Append the values v (n, any order) to o as ascending ranges, "0-95",
 * "1,3,5-7"; past 4 ranges the first 3, "..." and the last. */
static void sv_ranges(ir_buf *o, int *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, sv_cmp_int);
    int nr = 0;
    for (int i = 0; i < n; i++)
        if (i == 0 || v[i] > v[i - 1] + 1) nr++;
    int r = 0;
    for (int i = 0; i < n;) {
        int j = i;
        while (j + 1 < n && v[j + 1] <= v[j] + 1) j++;
        if (nr <= 4 || r < 3 || r == nr - 1) {
            ir_bprintf(o, "%s%d", r ? "," : "", v[i]);
            if (v[j] > v[i]) ir_bprintf(o, "-%d", v[j]);
        } else if (r == 3) {
            ir_bprintf(o, ",...");
        }
        r++;
        i = j + 1;
    }
}

/* Append the pattern of names (n >= 1, one shape) to o: the numbers that
 * differ between them as ranges in brackets, "h.[0-95].q"; one name as is. */
static void sv_pattern(ir_buf *o, const char *const *names, int n)
{
    if (n == 1) {
        ir_bprintf(o, "%s", names[0]);
        return;
    }
    int *val = ir_xmalloc(sizeof(int) * (size_t)n);
    const char **at = ir_xmalloc(sizeof(char *) * (size_t)n);
    for (int k = 0; k < n; k++) at[k] = names[k];
    const char *p = names[0];
    while (*p) {
        size_t len = strspn(p, "0123456789");
        if (!len || len > 9) {   /* a character, or a long run of digits, alike in every name */
            size_t c = len ? len : 1;
            ir_bprintf(o, "%.*s", (int)c, p);
            for (int k = 0; k < n; k++) at[k] += c;
            p += c;
            continue;
        }
        int same = 1;
        for (int k = 0; k < n; k++) {
            size_t lk = strspn(at[k], "0123456789");
            val[k] = atoi(at[k]);
            same &= lk == len && !strncmp(at[k], p, len);
            at[k] += lk;
        }
        if (same) ir_bprintf(o, "%.*s", (int)len, p);
        else {
            ir_bprintf(o, "[");
            sv_ranges(o, val, n);
            ir_bprintf(o, "]");
        }
        p += len;
    }
    free(at);
    free(val);
}

/* ---------------------------------------------------------------- the title */

/* The title lines: model, devices and mesh, the largest arena and the most
 * bytes one rank sends per step. */
static void sv_head(sv_doc *v, const ir_dist *d, const ir_prog *progs, double *y)
{
    const ir_graph *g = d->g;
    char line[600], a[32], bb[32], cc[32];
    ir_buf t = {0};
    ir_bprintf(&v->body, "<g id=\"title\">\n");
    ir_bprintf(&t, "nnsc-aot plan: model ");
    sv_clean(&t, g->model ? g->model : "model", SV_MAXNAME);
    ir_bprintf(&t, " on %d device%s", d->ndev, d->ndev == 1 ? "" : "s");
    *y += 20;
    sv_text(v, 12, *y, 16, 's', "font-weight=\"bold\"", t.s);
    ir_buf_free(&t);
    int n = 0;
    if (d->stage_tp) {
        n = snprintf(line, sizeof line, "mesh: pp %d stages x %d devices, each stage its own dp x tp", d->mesh_pp,
                     d->ndev / d->mesh_pp);
    } else if (d->mesh_pp > 1)
        n = snprintf(line, sizeof line, "mesh: dp %d x tp %d x pp %d (device = i_pp * %d + i_dp * %d + i_tp)",
                     d->mesh_dp, d->mesh_tp, d->mesh_pp, d->mesh_dp * d->mesh_tp, d->mesh_tp);
    else
        n = snprintf(line, sizeof line, "mesh: dp %d x tp %d (device = i_dp * %d + i_tp)", d->mesh_dp, d->mesh_tp,
                     d->mesh_tp);
    snprintf(line + n, sizeof line - (size_t)n, "; policy %s, %lld micro-batch%s per step, optimizer %s%s",
             g->req.policy ? g->req.policy : "dp", (long long)g->train.micro_batches,
             g->train.micro_batches == 1 ? "" : "es", ir_ops[g->train.optimizer].name,
             g->train.bf16 ? ", bf16 matmuls" : "");
    *y += SV_ROW + 2;
    sv_text(v, 12, *y, SV_FONT, 's', "", line);
    int rmax = 0, cmax = 0;
    double params = 0;
    for (int r = 0; r < d->ndev; r++) {
        if (progs[r].arena > progs[rmax].arena) rmax = r;
        if (sv_sent(&progs[r]) > sv_sent(&progs[cmax])) cmax = r;
    }
    for (int i = 0; i < g->nt; i++)
        if (g->t[i].kind == IR_T_PARAM) params += (double)ir_numel(&g->t[i]);
    char *prof = sv_dup(g->prof.name, SV_MAXNAME);   /* (a profile file's path) */
    n = snprintf(line, sizeof line, "params %s in f32; memory per rank at most %s (rank %d) of %s per device (%s)%s",
                 sv_bytes(a, sizeof a, params * 4), sv_bytes(bb, sizeof bb, (double)progs[rmax].arena), rmax,
                 sv_bytes(cc, sizeof cc, g->prof.mem), prof,
                 (double)progs[rmax].arena > g->prof.mem ? ": DOES NOT FIT" : "");
    free(prof);
    snprintf(line + n, sizeof line - (size_t)n, "; sent per step at most %s (rank %d)",
             sv_bytes(a, sizeof a, (double)sv_sent(&progs[cmax])), cmax);
    *y += SV_ROW;
    sv_text(v, 12, *y, SV_FONT, 's', "", line);
    ir_bprintf(&v->body, "</g>\n");
}

/* ---------------------------------------------------------------- memory classes */

/* Ranks of one memory class: equal arena, persistent bytes and stash. */
typedef struct sv_class {
    int first;       /* its lowest rank */
    int n;           /* its ranks */
    int *rank;       /* them, ascending */
} sv_class;

/* A rank's memory figures, the key of its class. */
typedef struct sv_memkey {
    int64_t k[4];    /* arena, persistent, stash bytes, stash slots */
    int rank;        /* the rank */
} sv_memkey;

/* Do a and b have the same figures? */
static int sv_same_mem(const sv_memkey *a, const sv_memkey *b)
{
    return !memcmp(a->k, b->k, sizeof a->k);
}

/* Order ranks by their memory figures, then by rank (qsort). */
static int sv_cmp_mem(const void *pa, const void *pb)
{
    const sv_memkey *a = pa, *b = pb;
    for (int i = 0; i < 4; i++)
        if (a->k[i] != b->k[i]) return a->k[i] < b->k[i] ? -1 : 1;
    return a->rank - b->rank;
}

/* Order classes by their lowest rank (qsort). */
static int sv_cmp_class(const void *a, const void *b)
{
    return ((const sv_class *)a)->first - ((const sv_class *)b)->first;
}

/* The memory classes of the ranks, by lowest rank; *ncls gets their
 * number and cls_of[r] rank r's class.  The ranks live in one array,
 * *pool (free it and the result). */
static sv_class *sv_classes(const ir_dist *d, const ir_prog *progs, int *cls_of, int *ncls, int **pool)
{
    int n = d->ndev, *ord = ir_xmalloc(sizeof(int) * (size_t)n), nc = 0;
    sv_memkey *key = ir_xmalloc(sizeof *key * (size_t)n);
    for (int r = 0; r < n; r++)
        key[r] = (sv_memkey){{progs[r].arena, progs[r].persistent, progs[r].stash_bytes, progs[r].nslot}, r};
    qsort(key, (size_t)n, sizeof *key, sv_cmp_mem);
    for (int i = 0; i < n; i++) ord[i] = key[i].rank;
    sv_class *c = ir_xcalloc((size_t)n, sizeof *c);
    for (int i = 0; i < n;) {
        int j = i + 1;
        while (j < n && sv_same_mem(&key[i], &key[j])) j++;
        c[nc].first = ord[i], c[nc].n = j - i, c[nc].rank = ord + i;   /* ascending: rank breaks ties */
        nc++;
        i = j;
    }
    free(key);
    qsort(c, (size_t)nc, sizeof *c, sv_cmp_class);
    for (int k = 0; k < nc; k++)
        for (int i = 0; i < c[k].n; i++) cls_of[c[k].rank[i]] = k;
    *ncls = nc;
    *pool = ord;
    return c;
}

/* ---------------------------------------------------------------- the mesh */

/* The forward ops of virtual stage vs (or IR_STAGE_ALL): "tok_emb ..
 * h.11.res2 (218 forward ops)" into o; nothing when it has none. */
static void sv_stage_ops(ir_buf *o, const ir_dist *d, int vs)
{
    const ir_graph *g = d->g;
    int first = -1, last = -1, n = 0;
    for (int i = 0; i < g->nop; i++)
        if (g->op[i].phase == IR_PH_FWD && d->op_stage[i] == vs) {
            if (first < 0) first = i;
            last = i, n++;
        }
    if (n == 0) return;
    sv_clean(o, g->op[first].name, SV_MAXNAME / 2);
    if (n > 1) {
        ir_bprintf(o, " .. ");
        sv_clean(o, g->op[last].name, SV_MAXNAME / 2);
    }
    ir_bprintf(o, " (%d forward op%s)", n, n == 1 ? "" : "s");
}

/* One stage's box at (x, y): its title, its devices as a grid (a row per
 * i_dp, a column per i_tp, the middle of a long axis left out), each
 * cell coloured by its rank's memory class, its forward ops.  Returns its
 * width; *h gets its height.  Draws nothing when draw is 0 (measures). */
static double sv_stage_box(sv_doc *v, const ir_dist *d, const int *cls_of, int s, double x, double y, int draw,
                           double *h)
{
    int pp = d->mesh_pp, sd = d->ndev / pp, tp = d->stage_tp ? d->stage_tp[s] : d->mesh_tp, dp = sd / tp;
    int rows[8], cols[8], nr = 0, nc = 0;   /* the i_dp and i_tp drawn (8 at most); -1: "..." */
    for (int i = 0; i < dp; i++)
        if (dp <= 8 || i < 3 || i == dp - 1) rows[nr++] = i;
        else if (i == 3) rows[nr++] = -1;
    for (int i = 0; i < tp; i++)
        if (tp <= 8 || i < 5 || i == tp - 1) cols[nc++] = i;
        else if (i == 5) cols[nc++] = -1;
    char t[200], num[16];
    snprintf(num, sizeof num, "%d", d->ndev - 1);
    double cw = sv_width(num, 11) + 10, chh = 18, gx = x + 14 + sv_width("i_dp \\ i_tp", 10), gy = y + 42;
    if (pp > 1 && sd == 1) snprintf(t, sizeof t, "stage %d: device %d", s, s);
    else if (pp > 1) snprintf(t, sizeof t, "stage %d: devices %d-%d, dp %d x tp %d", s, s * sd, s * sd + sd - 1, dp, tp);
    else if (d->ndev > 1) snprintf(t, sizeof t, "devices 0-%d: dp %d x tp %d", d->ndev - 1, dp, tp);
    else snprintf(t, sizeof t, "device 0");
    double w = sv_width(t, SV_FONT) + 20, gw = gx - x + nc * cw + 12;
    if (gw > w) w = gw;
    /* the stage's forward ops, chunk by chunk */
    ir_buf ops[8] = {{0}};
    int nops = 0;
    for (int c = 0; pp > 1 && c < d->mesh_v && nops < 8; c++) {
        ir_buf *o = &ops[nops];
        if (d->mesh_v > 1) ir_bprintf(o, "chunk %d: ", c);
        size_t before = o->n;
        sv_stage_ops(o, d, c * pp + s);
        if (o->n == before) ir_buf_free(o);
        else nops++;
    }
    for (int k = 0; k < nops; k++)
        if (sv_width(ops[k].s, 11) + 20 > w) w = sv_width(ops[k].s, 11) + 20;
    *h = gy - y + nr * chh + 10 + nops * 15 + (nops ? 4 : 0);
    if (draw) {
        sv_rect(v, x, y, w, *h, "rx=\"6\" fill=\"#fafafa\" stroke=\"#999\"");
        sv_text(v, x + 10, y + 18, SV_FONT, 's', "font-weight=\"bold\"", t);
        sv_text(v, gx - 6, gy - 5, 10, 'e', "fill=\"#555\"", "i_dp \\ i_tp");
        for (int j = 0; j < nc; j++) {
            if (cols[j] < 0) snprintf(num, sizeof num, "..");
            else snprintf(num, sizeof num, "%d", cols[j]);
            sv_text(v, gx + j * cw + cw / 2, gy - 5, 10, 'm', "fill=\"#555\"", num);
        }
        for (int i = 0; i < nr; i++) {
            double cy = gy + i * chh;
            if (rows[i] < 0) snprintf(num, sizeof num, "..");
            else snprintf(num, sizeof num, "%d", rows[i]);
            sv_text(v, gx - 6, cy + 13, 10, 'e', "fill=\"#555\"", num);
            for (int j = 0; j < nc; j++) {
                double cx = gx + j * cw;
                if (rows[i] < 0 || cols[j] < 0) {
                    sv_text(v, cx + cw / 2, cy + 13, 11, 'm', "fill=\"#777\"", "..");
                    continue;
                }
                int dev = s * sd + rows[i] * tp + cols[j];
                char fill[80];
                snprintf(fill, sizeof fill, "fill=\"%s\" fill-opacity=\"0.35\" stroke=\"white\"",
                         sv_palette[cls_of[dev] % SV_NPAL]);
                sv_rect(v, cx, cy, cw, chh, fill);
                snprintf(num, sizeof num, "%d", dev);
                sv_text(v, cx + cw / 2, cy + 13, 11, 'm', "", num);
            }
        }
        for (int k = 0; k < nops; k++)
            sv_text(v, x + 10, gy + nr * chh + 18 + k * 15, 11, 's', "fill=\"#333\"", ops[k].s);
    }
    for (int k = 0; k < nops; k++) ir_buf_free(&ops[k]);
    return w;
}

/* The mesh: the stages' boxes in rows (at most SV_MAXSTAGE drawn), then
 * the ops on every device (interlaced). */
static void sv_mesh(sv_doc *v, const ir_dist *d, const int *cls_of, double *y)
{
    int pp = d->mesh_pp, drawn[SV_MAXSTAGE], nd = 0;
    for (int s = 0; s < pp; s++)
        if (pp <= SV_MAXSTAGE || s < SV_MAXSTAGE - 4 || s >= pp - 2) drawn[nd++] = s;
    ir_bprintf(&v->body, "<g id=\"mesh\">\n");
    sv_heading(v, y, pp > 1 ? "device mesh: a box per pipeline stage" : "device mesh",
               "a row per data-parallel replica (i_dp), a column per tensor-parallel rank (i_tp); a cell's colour: "
               "its memory class (below)");
    double x = 12, rowh = 0, h;
    for (int k = 0; k < nd; k++) {
        int s = drawn[k];
        if (k > 0 && drawn[k - 1] != s - 1) {   /* the stages left out */
            char t[80];
            snprintf(t, sizeof t, "... stages %d-%d", drawn[k - 1] + 1, s - 1);
            sv_text(v, x + 4, *y + 40, SV_FONT, 's', "fill=\"#555\"", t);
            x += sv_width(t, SV_FONT) + 20;
        }
        double w = sv_stage_box(v, d, cls_of, s, 0, 0, 0, &h);
        if (x > 12 && x + w > 1400) {   /* a new row of boxes */
            *y += rowh + 12;
            x = 12, rowh = 0;
        }
        sv_stage_box(v, d, cls_of, s, x, *y, 1, &h);
        x += w + 12;
        if (h > rowh) rowh = h;
    }
    *y += rowh;
    if (pp > 1) {
        ir_buf o = {0};
        sv_stage_ops(&o, d, IR_STAGE_ALL(d));
        if (o.s) {
            ir_buf t = {0};
            ir_bprintf(&t, "on every device, before and after the layers (interlaced): %s", o.s);
            *y += SV_ROW;
            sv_text(v, 12, *y, SV_FONT, 's', "", t.s);
            ir_buf_free(&t);
        }
        ir_buf_free(&o);
    }
    ir_bprintf(&v->body, "</g>\n");
}

/* ---------------------------------------------------------------- memory */

/* Memory per class of ranks: a swatch, the ranks, a bar of the arena
 * (persistent; a pipeline's stash; the rest), the figures. */
static void sv_memory(sv_doc *v, const ir_dist *d, const ir_prog *progs, const sv_class *c, int nc, double *y)
{
    ir_bprintf(&v->body, "<g id=\"memory\">\n");
    sv_heading(v, y, "memory per rank: the arena from the memory plan (plan.txt's figures)",
               "params, grads and optimizer state (persistent) + activations and buffers; ranks with equal figures "
               "drawn once");
    int64_t amax = 1;
    for (int r = 0; r < d->ndev; r++)
        if (progs[r].arena > amax) amax = progs[r].arena;
    /* the ranks' column: its widest entry */
    int show = nc <= SV_MAXCLASS ? nc : SV_MAXCLASS - 1;
    char **who = ir_xcalloc((size_t)show, sizeof *who);
    double ww = 0;
    for (int k = 0; k < show; k++) {
        ir_buf o = {0};
        ir_bprintf(&o, "rank%s ", c[k].n == 1 ? "" : "s");
        sv_devs(&o, c[k].rank, c[k].n, 48);
        if (c[k].n > 1) ir_bprintf(&o, " (%d)", c[k].n);
        who[k] = o.s;
        if (sv_width(o.s, SV_FONT) > ww) ww = sv_width(o.s, SV_FONT);
    }
    double bx = 12 + 18 + ww + 12;
    for (int k = 0; k < show; k++) {
        const ir_prog *p = &progs[c[k].first];
        char a[32], b2[32], s3[32], t[400], fill[40];
        *y += SV_ROW + 4;
        double ty = *y - 4;
        snprintf(fill, sizeof fill, "fill=\"%s\"", sv_palette[k % SV_NPAL]);
        sv_rect(v, 12, *y - 14, 12, 12, fill);
        sv_text(v, 12 + 18, ty, SV_FONT, 's', "", who[k]);
        int64_t pers = p->persistent, stash = p->stash_bytes * p->nslot, rest = p->arena - pers;
        if (rest < 0) rest = 0;
        if (stash > rest || stash < 0) stash = 0;
        double sc = SV_BAR / (double)amax, x = bx;
        ir_bprintf(&v->body, "<g>");
        snprintf(t, sizeof t, "rank %d: arena %lld bytes, persistent %lld, stash %lld", c[k].first,
                 (long long)p->arena, (long long)pers, (long long)stash);
        sv_title(v, t);
        sv_rect(v, x, *y - 15, pers * sc, 14, "fill=\"#4e79a7\"");
        x += pers * sc;
        if (stash) sv_rect(v, x, *y - 15, stash * sc, 14, "fill=\"#edc948\"");
        x += stash * sc;
        sv_rect(v, x, *y - 15, (rest - stash) * sc, 14, "fill=\"#59a14f\"");
        ir_bprintf(&v->body, "</g>\n");
        int n = snprintf(t, sizeof t, "%s persistent + %s", sv_bytes(a, sizeof a, (double)pers),
                         sv_bytes(b2, sizeof b2, (double)rest));
        if (stash)
            n += snprintf(t + n, sizeof t - (size_t)n, " (stash %d x %s)", p->nslot,
                          sv_bytes(s3, sizeof s3, (double)p->stash_bytes));
        snprintf(t + n, sizeof t - (size_t)n, " = %s arena, %.1f %% of the device%s", sv_bytes(a, sizeof a, (double)p->arena),
                 100.0 * (double)p->arena / d->g->prof.mem, (double)p->arena > d->g->prof.mem ? ": DOES NOT FIT" : "");
        sv_text(v, bx + SV_BAR + 10, ty, SV_FONT, 's', "", t);
    }
    if (show < nc) {
        int64_t lo = progs[c[show].first].arena, hi = lo;
        int nr = 0;
        for (int k = show; k < nc; k++) {
            int64_t a = progs[c[k].first].arena;
            lo = a < lo ? a : lo, hi = a > hi ? a : hi, nr += c[k].n;
        }
        char t[200], a[32], b2[32];
        snprintf(t, sizeof t, "... %d more classes of %d ranks, arenas %s to %s (plan.txt lists every rank)",
                 nc - show, nr, sv_bytes(a, sizeof a, (double)lo), sv_bytes(b2, sizeof b2, (double)hi));
        *y += SV_ROW + 4;
        sv_text(v, 12, *y - 4, SV_FONT, 's', "fill=\"#555\"", t);
    }
    static const char *const leg[][2] = {{"#4e79a7", "params, grads, optimizer state"},
                                         {"#59a14f", "activations and buffers"},
                                         {"#edc948", "pipeline stash"}};
    *y += SV_ROW + 4;
    sv_legend(v, bx, *y - 4, leg, d->pipe ? 3 : 2);
    for (int k = 0; k < show; k++) free(who[k]);
    free(who);
    ir_bprintf(&v->body, "</g>\n");
}

/* ---------------------------------------------------------------- ops */

/* One part of a split, as a chip: its text and colour. */
static void sv_split_part(const ir_op *o, const ir_trans *tr, int j, char *buf, size_t n, const char **fill)
{
    if (tr->id[j] == IR_VALUE) snprintf(buf, n, "value x%d", tr->n[j]), *fill = "#f28e2b";
    else if (tr->id[j] < 0) snprintf(buf, n, "replicated x%d", tr->n[j]), *fill = "#9a9a9a";
    else {
        ir_buf t = {0};
        sv_clean(&t, o->anno.idname[tr->id[j]], 12);
        snprintf(buf, n, "%s /%d", t.s ? t.s : "?", tr->n[j]), *fill = "#4e79a7";
        ir_buf_free(&t);
    }
}

/* Op i's split as text (its grouping key and the chips' words). */
static void sv_split_text(ir_buf *o, const ir_dist *d, int i)
{
    const ir_trans *tr = &d->trans[i];
    char part[64];
    const char *fill;
    if (tr->nsplit == 0) ir_bprintf(o, "whole");
    for (int j = 0; j < tr->nsplit; j++) {
        sv_split_part(&d->g->op[i], tr, j, part, sizeof part, &fill);
        ir_bprintf(o, "%s%s", j ? " * " : "", part);
    }
    if (tr->cosk) ir_bprintf(o, " (coshard %d)", tr->cosk);
}

/* Do ops a and b run on the same devices? */
static int sv_same_devs(const ir_dist *d, int a, int b)
{
    const ir_trans *x = &d->trans[a], *y = &d->trans[b];
    return x->nsub == y->nsub && !memcmp(d->ints + x->devs, d->ints + y->devs, sizeof(int) * (size_t)x->nsub);
}

/* A row of a grouped table: the members in order of appearance. */
typedef struct sv_row {
    int first, last;     /* its first and last member */
    int n;               /* members */
    int nset;            /* ops: changes of the members' devices plus one; comms: 1 while every
                            member's groups are the first's, else 2 */
} sv_row;

/* The names of a row's members (next: the member after each, -1 the last). */
static const char **sv_row_names(const sv_row *r, const int *next, const char *(*name)(const ir_dist *, int),
                                 const ir_dist *d)
{
    const char **v = ir_xmalloc(sizeof(char *) * (size_t)r->n);
    int k = 0;
    for (int i = r->first; i >= 0; i = next[i]) v[k++] = name(d, i);
    return v;
}

/* Op i's name (sv_row_names). */
static const char *sv_op_name(const ir_dist *d, int i)
{
    return d->g->op[i].name ? d->g->op[i].name : "?";
}

/* Group the ops into rows: per phase, ops alike but for the numbers in
 * their names (kind, split, shape of name) are one row, in order of their
 * first op; a backward op split like its forward op (the same split and
 * devices) is only counted (*nfollow).  next[op]: the row's next member.
 * Returns the rows (*nrow of them; free it). */
static sv_row *sv_op_rows(const ir_dist *d, int *next, int *nrow, int *nfollow)
{
    const ir_graph *g = d->g;
    sv_map map = {0};
    sv_row *row = NULL;
    ir_buf key = {0}, fw = {0};
    *nfollow = 0;
    for (int i = 0; i < g->nop; i++) {
        const ir_op *o = &g->op[i];
        next[i] = -1;
        key.n = 0;
        sv_split_text(&key, d, i);
        if (o->phase == IR_PH_BWD && o->fwd >= 0 && sv_same_devs(d, i, o->fwd)) {
            fw.n = 0;
            sv_split_text(&fw, d, o->fwd);
            if (!strcmp(fw.s, key.s)) {
                (*nfollow)++;
                continue;
            }
        }
        ir_bprintf(&key, "|%d|%s|", o->phase, ir_op_kind_name(g, o));
        sv_shape(&key, sv_op_name(d, i));
        int fresh, k = sv_map_get(&map, key.s, &fresh);
        if (fresh) {
            row = ir_xrealloc(row, sizeof *row * (size_t)map.n);
            row[k] = (sv_row){i, i, 1, 1};
        } else {
            next[row[k].last] = i;
            row[k].nset += !sv_same_devs(d, row[k].last, i);
            row[k].last = i, row[k].n++;
        }
    }
    *nrow = map.n;
    ir_buf_free(&key), ir_buf_free(&fw);
    sv_map_free(&map);
    return row;
}

/* Op i's split as chips from x on the row at y (a chip per split, "whole"
 * for none, the coshard after them); returns their width.  draw 0:
 * measures only. */
static double sv_chips(sv_doc *v, const ir_dist *d, int i, double x, double y, int draw)
{
    const ir_op *o = &d->g->op[i];
    const ir_trans *tr = &d->trans[i];
    char part[64], attr[48];
    const char *fill;
    double x0 = x;
    for (int j = 0; j < tr->nsplit; j++) {
        sv_split_part(o, tr, j, part, sizeof part, &fill);
        double w = sv_width(part, 11) + 10;
        if (draw) {
            snprintf(attr, sizeof attr, "rx=\"3\" fill=\"%s\"", fill);
            sv_rect(v, x, y + 2, w, SV_ROW - 4, attr);
            sv_text(v, x + 5, y + 13, 11, 's', "fill=\"white\"", part);
        }
        x += w + 4;
    }
    if (tr->nsplit == 0) {
        if (draw) sv_text(v, x + 5, y + 13, 11, 's', "fill=\"#777\"", "whole");
        x += sv_width("whole", 11) + 10;
    }
    if (tr->cosk) {
        snprintf(part, sizeof part, "coshard %d", tr->cosk);
        if (draw) sv_text(v, x, y + 13, 11, 's', "fill=\"#333\"", part);
        x += sv_width(part, 11) + 4;
    }
    return x - x0;
}

/* A row's name cell: the members' name pattern (sv_pattern), xN. */
static char *sv_row_pattern(const sv_row *r, const int *next, const char *(*name)(const ir_dist *, int),
                            const ir_dist *d)
{
    const char **nm = sv_row_names(r, next, name, d);
    ir_buf t = {0}, c = {0};
    sv_pattern(&t, nm, r->n);
    free(nm);
    sv_clean(&c, t.s, SV_MAXNAME);
    if (r->n > 1) ir_bprintf(&c, " x%d", r->n);
    ir_buf_free(&t);
    return c.s;
}

/* An op row's devices cell: its first op's devices, and when they change
 * along the row (layers on several stages) the last op's too. */
static char *sv_op_devs(const ir_dist *d, const sv_row *r)
{
    const ir_trans *f = &d->trans[r->first], *l = &d->trans[r->last];
    ir_buf o = {0};
    sv_devs(&o, d->ints + f->devs, f->nsub, 40);
    if (r->nset > 1) {
        ir_bprintf(&o, " .. ");
        sv_devs(&o, d->ints + l->devs, l->nsub, 40);
        ir_bprintf(&o, " (%d device sets)", r->nset);
    }
    return o.s;
}

/* The op table (sv_op_rows' rows, at most SV_MAXROWS): per phase its
 * rows, each the name pattern, kind, split chips and devices, the first
 * op's reason on hover; the chips' legend. */
static void sv_ops(sv_doc *v, const ir_dist *d, double *y)
{
    const ir_graph *g = d->g;
    int *next = ir_xmalloc(sizeof(int) * (size_t)(g->nop + 1)), nrow, nfollow;
    sv_row *row = sv_op_rows(d, next, &nrow, &nfollow);
    int show = nrow <= SV_MAXROWS ? nrow : SV_MAXROWS - 1;
    /* the cells (name, kind, devices) and the columns' widths */
    char **cell = ir_xcalloc((size_t)show * 3 + 1, sizeof *cell);
    double wn = sv_width("op", SV_FONT), wk = sv_width("kind", SV_FONT), wc = sv_width("split", SV_FONT);
    double wd = sv_width("devices", SV_FONT);
    for (int k = 0; k < show; k++) {
        cell[3 * k] = sv_row_pattern(&row[k], next, sv_op_name, d);
        cell[3 * k + 1] = sv_dup(ir_op_kind_name(g, &g->op[row[k].first]), 24);
        cell[3 * k + 2] = sv_op_devs(d, &row[k]);
        double cw = sv_chips(v, d, row[k].first, 0, 0, 0);
        wn = fmax(wn, sv_width(cell[3 * k], SV_FONT)), wk = fmax(wk, sv_width(cell[3 * k + 1], SV_FONT));
        wc = fmax(wc, cw), wd = fmax(wd, sv_width(cell[3 * k + 2], SV_FONT));
    }
    ir_bprintf(&v->body, "<g id=\"ops\">\n");
    char sub[300];
    snprintf(sub, sizeof sub,
             "ops named alike but for numbers (the layers) and split alike are one row, xN; %d backward op%s split "
             "like %s forward op, not listed",
             nfollow, nfollow == 1 ? "" : "s", nfollow == 1 ? "its" : "their");
    sv_heading(v, y, "op-trans and op-assign: how each op is split, on which devices", sub);
    double xn = 12, xk = xn + wn + 16, xc = xk + wk + 16, xd = xc + wc + 12;
    static const char *const phase[] = {"forward", "backward", "optimizer update"};
    int lastph = -1;
    *y += 4;
    sv_text(v, xn, *y + 12, 11, 's', "fill=\"#555\"", "op");
    sv_text(v, xk, *y + 12, 11, 's', "fill=\"#555\"", "kind");
    sv_text(v, xc, *y + 12, 11, 's', "fill=\"#555\"", "split");
    sv_text(v, xd, *y + 12, 11, 's', "fill=\"#555\"", "devices");
    *y += SV_ROW;
    for (int k = 0; k < show; k++) {
        const ir_op *o = &g->op[row[k].first];
        const ir_trans *tr = &d->trans[row[k].first];
        if (o->phase != lastph) {   /* a phase's first row: its name */
            lastph = o->phase;
            *y += 6;
            sv_text(v, xn, *y + 13, SV_FONT, 's', "font-style=\"italic\" fill=\"#333\"",
                    o->phase >= 0 && o->phase <= 2 ? phase[o->phase] : "?");
            *y += SV_ROW;
        }
        ir_bprintf(&v->body, "<g>");
        if (tr->why) {
            char *w = sv_dup(tr->why, 300);
            sv_title(v, w);
            free(w);
        }
        if (k % 2 == 0) sv_rect(v, 8, *y, xd - 8 + wd + 8, SV_ROW, "fill=\"#f3f3f3\"");
        sv_text(v, xn, *y + 13, SV_FONT, 's', "", cell[3 * k]);
        sv_text(v, xk, *y + 13, SV_FONT, 's', "fill=\"#333\"", cell[3 * k + 1]);
        sv_chips(v, d, row[k].first, xc, *y, 1);
        sv_text(v, xd, *y + 13, SV_FONT, 's', "", cell[3 * k + 2]);
        ir_bprintf(&v->body, "</g>\n");
        *y += SV_ROW;
    }
    if (show < nrow) {
        int n = 0;
        for (int k = show; k < nrow; k++) n += row[k].n;
        snprintf(sub, sizeof sub, "... %d more rows of %d ops (plan.txt lists every op)", nrow - show, n);
        sv_text(v, xn, *y + 13, SV_FONT, 's', "fill=\"#555\"", sub);
        *y += SV_ROW;
    }
    static const char *const leg[][2] = {{"#4e79a7", "a dim split: dim /parts"},
                                         {"#f28e2b", "value split: partial sums"},
                                         {"#9a9a9a", "replicated"}};
    *y += 6 + SV_ROW;
    sv_legend(v, xn, *y - 5, leg, 3);
    ir_bprintf(&v->body, "</g>\n");
    for (int k = 0; k < 3 * show; k++) free(cell[k]);
    free(cell), free(row), free(next);
}

/* ---------------------------------------------------------------- collectives */

/* The tensor name of comm line i (sv_row_names). */
static const char *sv_comm_name(const ir_dist *d, int i)
{
    const char *s = d->g->t[d->comm[i].tensor].name;
    return s ? s : "?";
}

/* Append a comm's group {members} to o. */
static void sv_group(ir_buf *o, const ir_dist *d, int i)
{
    ir_bprintf(o, "{");
    sv_devs(o, d->ints + d->grp[d->comm[i].group].devs, d->comm[i].n, 40);
    ir_bprintf(o, "}");
}

/* Per kind, the bytes the busiest rank sends per step, as a bar; kw: the
 * kind names' column. */
static void sv_comm_kinds(sv_doc *v, const ir_dist *d, const ir_prog *progs, double kw, double *y)
{
    int64_t kmax[IR_COMM_COUNT] = {0}, top = 1;
    int kwho[IR_COMM_COUNT] = {0}, any = 0;
    for (int r = 0; r < d->ndev; r++)
        for (int k = 0; k < IR_COMM_SLICE; k++)
            if (progs[r].comm_bytes[k] > kmax[k]) kmax[k] = progs[r].comm_bytes[k], kwho[k] = r;
    for (int k = 0; k < IR_COMM_SLICE; k++) top = kmax[k] > top ? kmax[k] : top;
    for (int k = 0; k < IR_COMM_SLICE; k++) {
        if (!kmax[k]) continue;
        char t[120], a[32], fill[40];
        any = 1;
        *y += SV_ROW;
        sv_text(v, 12, *y + 13, SV_FONT, 's', "", ir_comm_name((ir_commkind)k));
        snprintf(fill, sizeof fill, "fill=\"%s\"", sv_palette[k % SV_NPAL]);
        double w = 240.0 * (double)kmax[k] / (double)top;
        sv_rect(v, 12 + kw + 12, *y + 3, w < 1 ? 1 : w, 12, fill);
        snprintf(t, sizeof t, "%s per step (rank %d)", sv_bytes(a, sizeof a, (double)kmax[k]), kwho[k]);
        sv_text(v, 12 + kw + 12 + 250, *y + 13, SV_FONT, 's', "", t);
    }
    if (!any) {
        *y += SV_ROW;
        sv_text(v, 12, *y + 13, SV_FONT, 's', "fill=\"#555\"", "none: no rank sends anything");
    }
    *y += SV_ROW + 6;
}

/* Group the collectives into rows: plan.txt's lines (a comm in several
 * groups is one line, end[i] one past its last comm), lines of one kind,
 * section, size, bytes, group count, bucket role and shape of tensor name
 * one row (nset 2 where their groups differ).  Local comms are left out.
 * next[line]: the row's next line.  Returns the rows (*nrow; free it). */
static sv_row *sv_comm_rows(const ir_dist *d, int *next, int *end, int *nrow)
{
    sv_map map = {0};
    sv_row *row = NULL;
    ir_buf key = {0};
    for (int i = 0; i < d->ncomm;) {
        const ir_comm *c = &d->comm[i];
        int j = i + 1;
        while (j < d->ncomm && cg_same_but_group(c, &d->comm[j]) && cg_bucket_role(d, j) == cg_bucket_role(d, i)) j++;
        next[i] = -1, end[i] = j;
        if (c->kind < IR_COMM_SLICE) {   /* (the others are local: nothing moves) */
            key.n = 0;
            ir_bprintf(&key, "%d|%d|%d|%lld|%d|%d|", c->kind, c->sec, c->n, (long long)c->bytes, j - i,
                       cg_bucket_role(d, i));
            sv_shape(&key, sv_comm_name(d, i));
            int fresh, k = sv_map_get(&map, key.s, &fresh);
            if (fresh) {
                row = ir_xrealloc(row, sizeof *row * (size_t)map.n);
                row[k] = (sv_row){i, i, 1, 1};
            } else {
                int f = row[k].first;
                for (int q = 0; q < j - i && row[k].nset == 1; q++)
                    if (d->comm[f + q].group != d->comm[i + q].group) row[k].nset = 2;
                next[row[k].last] = i;
                row[k].last = i, row[k].n++;
            }
        }
        i = j;
    }
    *nrow = map.n;
    ir_buf_free(&key);
    sv_map_free(&map);
    return row;
}

/* A collective row's groups cell: those of its first line (when every
 * line has them), else the first line's first and the last line's last;
 * its gradient bucket. */
static char *sv_comm_groups(const ir_dist *d, const sv_row *r, const int *end)
{
    const ir_comm *c = &d->comm[r->first];
    ir_buf o = {0};
    char a[32];
    int ng = end[r->first] - r->first, other = r->nset > 1;
    int lastc = other ? end[r->last] - 1 : end[r->first] - 1;
    if (ng > 1 || other)
        ir_bprintf(&o, "%d group%s of %d%s: ", ng, ng == 1 ? "" : "s", c->n, other ? " per tensor" : "");
    sv_group(&o, d, r->first);
    if (lastc != r->first) {
        if (ng > 2 || other) ir_bprintf(&o, ", ...");
        ir_bprintf(&o, ", ");
        sv_group(&o, d, lastc);
    }
    if (c->bucket == r->first) {
        int nb = 0;
        for (int x = r->first; x >= 0; x = d->comm[x].bnext) nb++;
        ir_bprintf(&o, "; a gradient bucket of %d, one collective of %s", nb, sv_bytes(a, sizeof a, (double)c->bbytes));
    } else if (c->bucket >= 0) {
        ir_bprintf(&o, "; in a gradient bucket");
    }
    return o.s;
}

/* The collectives: per kind the bytes the busiest rank sends (sv_comm_kinds),
 * then sv_comm_rows' rows (at most SV_MAXCOMM): kind, tensor pattern, when,
 * bytes, groups, the reason on hover. */
static void sv_comm(sv_doc *v, const ir_dist *d, const ir_prog *progs, double *y)
{
    const ir_graph *g = d->g;
    ir_bprintf(&v->body, "<g id=\"comm\">\n");
    sv_heading(v, y, "collectives per step",
               "bytes: sent by the busiest member; tensors named alike but for numbers (the layers) are one row, xN");
    double kw = 0;
    for (int k = 0; k < IR_COMM_SLICE; k++) kw = fmax(kw, sv_width(ir_comm_name((ir_commkind)k), SV_FONT));
    sv_comm_kinds(v, d, progs, kw, y);
    int *next = ir_xmalloc(sizeof(int) * (size_t)(d->ncomm + 1)), *end = ir_xmalloc(sizeof(int) * (size_t)(d->ncomm + 1));
    int nrow;
    sv_row *row = sv_comm_rows(d, next, end, &nrow);
    int show = nrow <= SV_MAXCOMM ? nrow : SV_MAXCOMM - 1;
    char **cell = ir_xcalloc((size_t)show * 4 + 1, sizeof *cell);   /* tensor, when, bytes, groups */
    double cw[4] = {sv_width("tensor", SV_FONT), sv_width("when", SV_FONT), sv_width("bytes each", SV_FONT), 0};
    for (int k = 0; k < show; k++) {
        const ir_comm *c = &d->comm[row[k].first];
        ir_buf o = {0};
        char a[32];
        cell[4 * k] = sv_row_pattern(&row[k], next, sv_comm_name, d);
        if (c->sec == IR_SEC_MB) ir_bprintf(&o, "each micro-batch (%lld/step)", (long long)g->train.micro_batches);
        else ir_bprintf(&o, "once a step");
        cell[4 * k + 1] = o.s;
        cell[4 * k + 2] = sv_dup(sv_bytes(a, sizeof a, (double)c->bytes), 32);
        cell[4 * k + 3] = sv_comm_groups(d, &row[k], end);
        for (int q = 0; q < 4; q++) cw[q] = fmax(cw[q], sv_width(cell[4 * k + q], SV_FONT));
    }
    double x0 = 12, xt = x0 + kw + 16, xw = xt + cw[0] + 16, xb = xw + cw[1] + 16 + cw[2], xg = xb + 16;
    if (nrow) {
        sv_text(v, x0, *y + 12, 11, 's', "fill=\"#555\"", "kind");
        sv_text(v, xt, *y + 12, 11, 's', "fill=\"#555\"", "tensor");
        sv_text(v, xw, *y + 12, 11, 's', "fill=\"#555\"", "when");
        sv_text(v, xb, *y + 12, 11, 'e', "fill=\"#555\"", "bytes each");
        sv_text(v, xg, *y + 12, 11, 's', "fill=\"#555\"", "groups");
        *y += SV_ROW;
    }
    for (int k = 0; k < show; k++) {
        const ir_comm *c = &d->comm[row[k].first];
        char fill[40];
        ir_bprintf(&v->body, "<g>");
        if (c->why) {
            char *w = sv_dup(c->why, 300);
            sv_title(v, w);
            free(w);
        }
        if (k % 2 == 0) sv_rect(v, 8, *y, xg - 8 + cw[3] + 8, SV_ROW, "fill=\"#f3f3f3\"");
        snprintf(fill, sizeof fill, "fill=\"%s\"", sv_palette[c->kind % SV_NPAL]);
        sv_rect(v, x0, *y + 5, 4, SV_ROW - 10, fill);
        sv_text(v, x0 + 8, *y + 13, SV_FONT, 's', "", ir_comm_name(c->kind));
        sv_text(v, xt, *y + 13, SV_FONT, 's', "", cell[4 * k]);
        sv_text(v, xw, *y + 13, SV_FONT, 's', "fill=\"#333\"", cell[4 * k + 1]);
        sv_text(v, xb, *y + 13, SV_FONT, 'e', "", cell[4 * k + 2]);
        sv_text(v, xg, *y + 13, SV_FONT, 's', "fill=\"#333\"", cell[4 * k + 3]);
        ir_bprintf(&v->body, "</g>\n");
        *y += SV_ROW;
    }
    if (show < nrow) {
        char t[160];
        snprintf(t, sizeof t, "... %d more rows (plan.txt lists every collective)", nrow - show);
        sv_text(v, x0, *y + 13, SV_FONT, 's', "fill=\"#555\"", t);
        *y += SV_ROW;
    }
    ir_bprintf(&v->body, "</g>\n");
    for (int k = 0; k < 4 * show; k++) free(cell[k]);
    free(cell), free(row), free(next), free(end);
}

/* ---------------------------------------------------------------- the pipeline */

/* A pipeline's step on the cost model, one row per stage: each task a box
 * from its start to its end (F blue, B green, W orange, its name inside
 * where it fits), idle time blank, the time axis in GFLOP; the title
 * gives the schedule and the bubble next to its formula. */
static void sv_timeline(sv_doc *v, const ir_dist *d, double *y)
{
    const ir_pipe *p = d->pipe;
    int pp = p->pp, m = p->m, sd = d->ndev / pp, den;
    char sn[160], tn[24], t[400];
    static const char *fill[] = {"#4e79a7", "#59a14f", "#f28e2b"};
    cg_pipe_step step = cg_step_of(d);
    const double *cost = step.cost, *start = step.start, span = step.span;
    ir_bprintf(&v->body, "<g id=\"timeline\">\n");
    int n = snprintf(t, sizeof t, "pipeline: %d stages x %d device%s, schedule %s, %d micro-batches; bubble %.1f %%",
                     pp, sd, sd == 1 ? "" : "s", cg_sched_name(p, sn, sizeof sn), m, 100 * step.bubble);
    const char *f = cg_bubble_formula(p, &den);
    if (f) snprintf(t + n, sizeof t - (size_t)n, " (%s = %.1f %% for equal stages)", f, 100.0 * (pp - 1) / den);
    char sub[200];
    snprintf(sub, sizeof sub, "F forward, B backward%s; a box per task and micro-batch, from the FLOPs of its "
                              "stage's sub-ops (the cost model; transfers free)", p->split_w ? ", W weight gradients" : "");
    sv_heading(v, y, t, sub);
    double left = 0, row = 30, top = *y + 4;
    for (int s = 0; s < pp; s++) {   /* the labels' column: its widest */
        if (sd > 1) snprintf(t, sizeof t, "stage %d (%d-%d)", s, s * sd, s * sd + sd - 1);
        else snprintf(t, sizeof t, "stage %d (%d)", s, s * sd);
        if (sv_width(t, SV_FONT) > left) left = sv_width(t, SV_FONT);
    }
    left += 12 + 12;
    for (int s = 0; s < pp; s++) {
        double ry = top + s * row;
        if (sd > 1) snprintf(t, sizeof t, "stage %d (%d-%d)", s, s * sd, s * sd + sd - 1);
        else snprintf(t, sizeof t, "stage %d (%d)", s, s * sd);
        sv_text(v, 12, ry + row / 2 + 4, SV_FONT, 's', "", t);
        sv_rect(v, left, ry + 3, SV_PIPEW, row - 6, "fill=\"#f4f4f4\"");
        for (int k = p->task0[s]; k < p->task0[s + 1] && span > 0; k++) {
            const ir_task *tk = &p->task[k];
            double c = cost[PASS_PIPE_C(p, s, tk->chunk, tk->kind)], x0 = left + start[k] / span * SV_PIPEW;
            double w = c / span * SV_PIPEW;
            pass_pipe_task_name(p, tk, tn, sizeof tn);
            ir_bprintf(&v->body, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" "
                                 "stroke=\"white\" stroke-width=\"0.5\"%s><title>%s: %.3f GFLOP</title></rect>\n",
                       x0, ry + 3, w, row - 6, fill[tk->kind], tk->chunk % 2 ? " fill-opacity=\"0.7\"" : "", tn,
                       c / 1e9);
            sv_extend(v, x0, ry + 3, w, row - 6);
            if (w >= sv_width(tn, 11) + 4) sv_text(v, x0 + w / 2, ry + row / 2 + 4, 11, 'm', "fill=\"white\"", tn);
        }
    }
    double ya = top + pp * row + 8;
    ir_bprintf(&v->body, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n", left, ya,
               left + SV_PIPEW, ya);
    for (int q = 0; q <= 4; q++) {
        snprintf(t, sizeof t, "%.2f GFLOP", span * q / 4 / 1e9);
        sv_text(v, left + q * SV_PIPEW / 4.0, ya + 16, SV_FONT, 'm', "fill=\"#333\"", t);
    }
    *y = ya + 20;
    ir_bprintf(&v->body, "</g>\n");
    cg_step_free(&step);
}

/* plan.svg (codegen.h). */
void cg_plan_svg(const ir_dist *d, const ir_prog *progs, ir_buf *b)
{
    sv_doc v = {{0}, 1e30, 1e30, -1e30, -1e30};   /* (extents: nothing drawn yet) */
    int *cls_of = ir_xmalloc(sizeof(int) * (size_t)d->ndev), *pool, ncls;
    sv_class *cls = sv_classes(d, progs, cls_of, &ncls, &pool);
    double y = 0;
    sv_head(&v, d, progs, &y);
    sv_mesh(&v, d, cls_of, &y);
    sv_memory(&v, d, progs, cls, ncls, &y);
    sv_ops(&v, d, &y);
    sv_comm(&v, d, progs, &y);
    if (d->pipe) sv_timeline(&v, d, &y);
    /* the viewBox: what was drawn, with a margin */
    double x0 = floor(v.x0 - 12), y0 = floor(v.y0 - 12);
    int W = (int)ceil(v.x1 + 12 - x0), H = (int)ceil(v.y1 + 12 - y0);
    ir_bprintf(b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                  "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"%d %d %d %d\" "
                  "font-family=\"%s\" font-size=\"%d\">\n", W, H, (int)x0, (int)y0, W, H, SV_FONTS, SV_FONT);
    ir_bprintf(b, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n", (int)x0, (int)y0, W, H);
    ir_bprintf(b, "%s</svg>\n", v.body.s ? v.body.s : "");
    ir_buf_free(&v.body);
    free(cls);
    free(pool);
    free(cls_of);
}
