/* spec.c -- read a model spec (INI) into an fe_spec.
 *
 * The file is read whole, checked to be UTF-8 text, split into raw lines
 * (kept for quoting in messages) and handed line by line to inih through
 * our own reader, which counts lines and opens sections.  inih splits
 * `key = value`, trims blanks and strips comments.  Then the --set
 * overrides are applied, and every section kind and key is checked against
 * the schema below.  Values are checked by lower.c.
 *
 * The format is documented in docs/model-spec.md.
 */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <ini.h>

#include "fe_priv.h"

#define FE_MAX_FILE  (64L << 20)  /* largest spec file accepted, bytes */
#define FE_QUOTE_MAX 200          /* longest quoted line in a message, bytes */
#define FE_CLIP_MAX  60           /* longest value quoted inside a message, bytes */

/* ---------------------------------------------------------------- string map */

/* FNV-1a hash of a string. */
static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

int fe_map_get(const fe_map *m, const char *k)
{
    if (!m->cap) return -1;
    for (size_t i = hash_str(k) & (size_t)(m->cap - 1);; i = (i + 1) & (size_t)(m->cap - 1)) {
        if (!m->key[i]) return -1;
        if (strcmp(m->key[i], k) == 0) return m->val[i];
    }
}

void fe_map_put(fe_map *m, const char *k, int v)
{
    if (2 * (m->n + 1) > m->cap) {
        IR_ASSERT(m->cap < (1 << 29));
        fe_map big = {NULL, NULL, m->cap ? 2 * m->cap : 64, 0};
        big.key = ir_xcalloc((size_t)big.cap, sizeof *big.key);
        big.val = ir_xcalloc((size_t)big.cap, sizeof *big.val);
        for (int i = 0; i < m->cap; i++)
            if (m->key[i]) fe_map_put(&big, m->key[i], m->val[i]);
        free(m->key);
        free(m->val);
        *m = big;
    }
    size_t i = hash_str(k) & (size_t)(m->cap - 1);
    while (m->key[i] && strcmp(m->key[i], k) != 0) i = (i + 1) & (size_t)(m->cap - 1);
    if (!m->key[i]) m->n++;
    m->key[i] = k;
    m->val[i] = v;
}

void fe_map_free(fe_map *m)
{
    free(m->key);
    free(m->val);
    memset(m, 0, sizeof *m);
}

/* ---------------------------------------------------------------- schema */

/* What one section kind may hold. */
typedef struct fe_schema {
    const char *kind;          /* first word of the header */
    int named;                 /* 1: written [kind NAME]; 0: [kind] */
    int user_keys;             /* 1: the keys are names the user picks ([dims]) */
    const char *keys[24];      /* allowed keys (NULL-terminated) */
    const char *required[4];   /* keys that must be present (NULL-terminated) */
} fe_schema;

static const fe_schema fe_schemas[] = {
    {"model", 0, 0, {"name", "seed"}, {NULL}},
    {"dims", 0, 1, {NULL}, {NULL}},
    {"input", 1, 0, {"shape", "dtype", "data", "batch_dim", "stream"}, {"shape"}},
    {"param", 1, 0, {"shape", "init", "dtype", "import", "import_transposed", "trainable"}, {"shape"}},
    {"op", 1, 0, {"kind", "in", "out", "heads", "kv_heads", "causal", "vocab", "eps", "theta", "shape", "attrs", "scale", "first", "alibi", "start", "stop", "groups", "bidirectional", "max_distance"}, {"kind", "in", "out"}},
    {"block", 1, 0, {"repeat", "in", "out"}, {"repeat", "in", "out"}},
    {"custom", 1, 0, {"annotation", "cpu", "cuda", "backward", "grad", "flops"}, {"annotation", "cpu"}},
    {"train", 0, 0, {"loss", "optimizer", "lr", "weight_decay", "beta1", "beta2", "eps", "steps",
                     "micro_batches", "data", "data_period", "eval_data", "eval_every", "eval_steps",
                     "lr_schedule", "warmup_steps", "min_lr", "grad_clip", "dtype", "storage", "recycle"}, {"loss"}},
    {"cluster", 0, 0, {"devices", "device", "flops", "flops_bf16", "mem_bw", "memory", "link_bw", "link_lat",
                       "net_bw", "net_lat", "per_node", "weight_bw", "attention"}, {NULL}},
    {"plan", 0, 0, {"policy", "dp", "tp", "pp", "trans", "stage", "schedule", "chunks", "order", "recompute", "coshard", "zero", "stage_tp",
              "balance", "fold_layers", "sequence_parallel", "grad_buckets", "per_op_trans", "accumulate", "coshard_rung"}, {NULL}},
};
#define FE_NSCHEMA ((int)(sizeof fe_schemas / sizeof fe_schemas[0]))

static const char fe_kinds_hint[] =
    "sections are [model] [dims] [input NAME] [param NAME] [op NAME] [block NAME] [custom NAME] [train] [cluster] [plan]";

/* The schema of a section kind, or NULL. */
static const fe_schema *schema_of(const char *kind)
{
    for (int i = 0; i < FE_NSCHEMA; i++)
        if (strcmp(fe_schemas[i].kind, kind) == 0) return &fe_schemas[i];
    return NULL;
}

/* ---------------------------------------------------------------- messages */

/* Print the offending line: trimmed, cut to FE_QUOTE_MAX bytes at a UTF-8
 * boundary, tabs shown as blanks. */
static void quote_line(const char *ln)
{
    while (*ln == ' ' || *ln == '\t') ln++;
    size_t n = strlen(ln);
    while (n > 0 && (ln[n - 1] == ' ' || ln[n - 1] == '\t')) n--;
    int cut = 0;
    if (n > FE_QUOTE_MAX) {
        n = FE_QUOTE_MAX;
        while (n > 0 && ((unsigned char)ln[n] & 0xC0) == 0x80) n--;
        cut = 1;
    }
    fputs("  ", stderr);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)ln[i];
        if (c == '\t') fputc(' ', stderr);
        else if (c < 0x20 || c == 0x7f) fprintf(stderr, "\\x%02x", c);
        else fputc(c, stderr);
    }
    fputs(cut ? "...\n" : "\n", stderr);
}

/* fe_error with a va_list. */
static int verror(const fe_spec *s, int line, const char *hint, const char *fmt, va_list ap)
{
    const char *file = s && s->file ? s->file : "?";
    fflush(stdout);
    if (line > 0) fprintf(stderr, "%s:%d: error: ", file, line);
    else if (line == 0) fputs("<command line>: error: ", stderr);
    else fprintf(stderr, "%s: error: ", file);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    if (line > 0 && s && s->lines && line <= s->nlines) quote_line(s->lines[line - 1]);
    if (hint) fprintf(stderr, "  hint: %s\n", hint);
    fflush(stderr);
    return 2;
}

/* Line > 0: FILE:LINE; line == 0: "<command line>" (a --set override or a
 * command-line option); line < 0: the file as a whole (FILE: error: ...). */
int fe_error(const fe_spec *s, int line, const char *hint, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verror(s, line, hint, fmt, ap);
    va_end(ap);
    return 2;
}

int fe_kv_error(const fe_spec *s, const fe_section *sec, const fe_kv *kv,
                const char *hint, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (kv->line != 0) return fe_error(s, kv->line, hint, "%s", msg);
    char title[256], clip[96];
    return fe_error(s, 0, hint, "--set %s.%s=%s: %s", fe_title(sec, title, sizeof title), kv->key,
                    fe_clip(kv->val, clip, sizeof clip), msg);
}

const char *fe_title(const fe_section *sec, char *buf, size_t bufsz)
{
    char clip[96];
    if (sec->name) snprintf(buf, bufsz, "%s %s", sec->kind, fe_clip(sec->name, clip, sizeof clip));
    else snprintf(buf, bufsz, "%s", sec->kind);
    return buf;
}

int fe_is_name(const char *s)
{
    if (!(isalpha((unsigned char)*s) || *s == '_')) return 0;
    for (s++; *s; s++)
        if (!(isalnum((unsigned char)*s) || *s == '_' || *s == '.')) return 0;
    return 1;
}

const char *fe_clip(const char *text, char *buf, size_t bufsz)
{
    size_t n = strlen(text);
    size_t max = bufsz > 4 ? bufsz - 4 : 0;
    if (max > FE_CLIP_MAX) max = FE_CLIP_MAX;
    if (n <= max) {
        snprintf(buf, bufsz, "%s", text);
        return buf;
    }
    n = max;
    while (n > 0 && ((unsigned char)text[n] & 0xC0) == 0x80) n--;
    snprintf(buf, bufsz, "%.*s...", (int)n, text);
    return buf;
}

/* Longest word fe_suggest compares; longer words and candidates are skipped. */
#define FE_SUGGEST_MAX 255

/* Damerau-Levenshtein distance of a and b in its "optimal string alignment"
 * form: the fewest insertions, deletions, replacements and swaps of two
 * adjacent letters ("stpes" -> "steps" is 1) that turn a into b, letters
 * compared without case.  Returns the distance, or limit + 1 as soon as it
 * must exceed limit (and for words longer than FE_SUGGEST_MAX). */
static int edit_distance(const char *a, const char *b, int limit)
{
    size_t na = strlen(a), nb = strlen(b);
    if (na > FE_SUGGEST_MAX || nb > FE_SUGGEST_MAX) return limit + 1;
    if ((na > nb ? na - nb : nb - na) > (size_t)limit) return limit + 1;
    /* three rows of the (na+1) x (nb+1) table: i-2, i-1, i */
    int rows[3][FE_SUGGEST_MAX + 1];
    int *two = rows[0], *prev = rows[1], *cur = rows[2];
    int prevlow = 0;   /* the smallest value of row i-1 */
    for (size_t j = 0; j <= nb; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= na; i++) {
        int ca = tolower((unsigned char)a[i - 1]), lowest = (int)i;
        cur[0] = (int)i;
        for (size_t j = 1; j <= nb; j++) {
            int cb = tolower((unsigned char)b[j - 1]);
            int d = prev[j - 1] + (ca != cb);                /* replace (or keep) */
            if (prev[j] + 1 < d) d = prev[j] + 1;            /* delete a[i-1] */
            if (cur[j - 1] + 1 < d) d = cur[j - 1] + 1;      /* insert b[j-1] */
            if (i > 1 && j > 1 && ca == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == cb && two[j - 2] + 1 < d)
                d = two[j - 2] + 1;                          /* swap two adjacent letters */
            cur[j] = d;
            if (d < lowest) lowest = d;
        }
        /* row i+1 is at least min(row i, row i-1 + 1): past limit from here on */
        if (lowest > limit && prevlow > limit) return limit + 1;
        prevlow = lowest;
        int *t = two;
        two = prev, prev = cur, cur = t;
    }
    return prev[nb];
}

/* The most edits fe_suggest accepts for a word of len letters: about one in
 * three or four letters, at most 3 (1 letter: only another case, "b" -> "B"). */
static int suggest_limit(size_t len)
{
    return len <= 1 ? 0 : len <= 4 ? 1 : len <= 8 ? 2 : 3;
}

/* Letters a and b share at their start, without case. */
static size_t common_prefix(const char *a, const char *b)
{
    size_t n = 0;
    while (a[n] && tolower((unsigned char)a[n]) == tolower((unsigned char)b[n])) n++;
    return n;
}

/* The closest candidate: the fewest edits (edit_distance, at most
 * suggest_limit of the word's length); among equally close ones the one
 * sharing the longest start with word, then the first in strcmp order, so
 * the answer does not depend on the order of cand.  A candidate equal to
 * word is never chosen. */
int fe_closest(const char *word, const char *const *cand, int ncand)
{
    int best = -1, bestd = 0;
    size_t bestp = 0;
    int limit = suggest_limit(strlen(word));
    for (int i = 0; i < ncand; i++) {
        if (strcmp(word, cand[i]) == 0) continue;
        int d = edit_distance(word, cand[i], limit);
        if (d > limit) continue;
        size_t p = common_prefix(word, cand[i]);
        if (best < 0 || d < bestd || (d == bestd && (p > bestp || (p == bestp && strcmp(cand[i], cand[best]) < 0)))) {
            best = i;
            bestd = d;
            bestp = p;
        }
    }
    return best;
}

const char *fe_suggest(const char *word, const char *const *cand, int ncand,
                       char *buf, size_t bufsz)
{
    int best = fe_closest(word, cand, ncand);
    if (best < 0) return NULL;
    char clip[96];
    snprintf(buf, bufsz, "did you mean '%s'?", fe_clip(cand[best], clip, sizeof clip));
    return buf;
}

/* ---------------------------------------------------------------- reading */

/* Read the whole file.  Returns 0, or 2 after a message. */
static int read_file(fe_spec *s, char **buf, size_t *len)
{
    FILE *f = fopen(s->file, "rb");
    if (!f)
        return fe_error(s, -1, "check the path of the model spec",
                        "cannot open the model spec: %s", strerror(errno));
    size_t cap = 4096, n = 0;
    char *b = ir_xmalloc(cap);
    for (;;) {
        if (n == cap) {
            if (cap >= (size_t)FE_MAX_FILE) {
                free(b);
                fclose(f);
                return fe_error(s, -1, NULL, "the model spec is larger than %ld MiB", FE_MAX_FILE >> 20);
            }
            cap *= 2;
            b = ir_xrealloc(b, cap);
        }
        size_t got = fread(b + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    int saved = errno;
    fclose(f);
    if (bad) {
        free(b);
        return fe_error(s, -1, NULL, "cannot read the model spec: %s", strerror(saved));
    }
    *buf = b;
    *len = n;
    return 0;
}

/* Length of the valid UTF-8 sequence at p (n bytes left), or 0. */
static int utf8_len(const unsigned char *p, size_t n)
{
    unsigned char c = p[0];
    int len;
    unsigned char lo = 0x80, hi = 0xBF;   /* range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;        /* no UTF-16 surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return 0;
    if (n < (size_t)len || p[1] < lo || p[1] > hi) return 0;
    for (int i = 2; i < len; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    return len;
}

/* A spec is UTF-8 text: no NUL, no control characters but tab and line
 * ends (LF or CR LF).  Returns 0, or 2 after a message. */
static int check_text(const fe_spec *s, const unsigned char *b, size_t n)
{
    static const char hint[] = "a model spec is a UTF-8 text file; is this the right file?";
    const unsigned char *nul = memchr(b, '\0', n);
    if (nul) {   /* binary: say so, whatever other bytes come first */
        int at = 1;
        for (const unsigned char *p = b; p < nul; p++) at += *p == '\n';
        return fe_error(s, at, hint, "binary data (NUL byte) in the model spec");
    }
    int line = 1;
    for (size_t i = 0; i < n;) {
        unsigned char c = b[i];
        if (c == '\n') { line++; i++; continue; }
        if (c == '\r' && i + 1 < n && b[i + 1] == '\n') { i++; continue; }
        if (c < 0x20 && c != '\t') return fe_error(s, line, hint, "control character 0x%02x in the model spec", c);
        if (c == 0x7f) return fe_error(s, line, hint, "control character 0x7f in the model spec");
        if (c < 0x80) { i++; continue; }
        int len = utf8_len(b + i, n - i);
        if (!len) return fe_error(s, line, hint, "invalid UTF-8 (byte 0x%02x) in the model spec", c);
        i += (size_t)len;
    }
    return 0;
}

/* Split text into s->lines (without line ends); returns the longest length. */
static size_t split_lines(fe_spec *s, const char *b, size_t n)
{
    int cap = 0;
    size_t longest = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && b[j] != '\n') j++;
        size_t len = j - i;
        if (len > 0 && b[i + len - 1] == '\r') len--;
        char *ln = ir_xmalloc(len + 1);
        memcpy(ln, b + i, len);
        ln[len] = '\0';
        *IR_PUSH(s->lines, s->nlines, cap) = ln;
        if (len > longest) longest = len;
        i = j + 1;
    }
    return longest;
}

/* State shared by the inih reader and handler. */
typedef struct fe_reader {
    fe_spec *s;        /* spec being filled */
    int next;          /* index of the next line to hand to inih */
    size_t off;        /* bytes of lines[next] already handed (long lines go in pieces) */
    int lineno;        /* 1-based line inih is working on */
    int cur;           /* section receiving keys, or -1 before the first header */
    int failed;        /* a message was printed; stop */
    fe_map secs;       /* section title ("kind" or "kind name", in titles) -> index in s->sec */
    char **titles; int ntitles, titlecap; /* the keys of secs (owned) */
    fe_map keys;       /* the current section's keys -> index in its kv (a section is read
                          once: emptied at each header) */
} fe_reader;

/* p past blanks (spaces and tabs). */
static const char *skip_blank(const char *p)
{
    while (*p == ' ' || *p == '\t') p++;
    return p;
}

/* The key of section [kind name] (name NULL: [kind]) in fe_reader.secs,
 * in buf (bufsz bytes; a longer title is cut, and then not looked up). */
static const char *sec_key(const char *kind, const char *name, char *buf, size_t bufsz)
{
    int n = snprintf(buf, bufsz, "%s%s%s", kind, name ? " " : "", name ? name : "");
    return n >= 0 && (size_t)n < bufsz ? buf : NULL;
}

/* The section [kind name] (name NULL: [kind]), or NULL: by the reader's
 * map of titles while the file is read (r not NULL), else by a scan. */
static fe_section *find_section(const fe_spec *s, const fe_reader *r, const char *kind, const char *name)
{
    char buf[512];
    const char *k = r ? sec_key(kind, name, buf, sizeof buf) : NULL;
    if (k) {
        int i = fe_map_get(&r->secs, k);
        return i < 0 ? NULL : &s->sec[i];
    }
    for (int i = 0; i < s->nsec; i++) {
        fe_section *x = &s->sec[i];
        if (strcmp(x->kind, kind) != 0) continue;
        if (!name && !x->name) return x;
        if (name && x->name && strcmp(name, x->name) == 0) return x;
    }
    return NULL;
}

/* Append an empty section; returns it. */
static fe_section *add_section(fe_spec *s, const char *kind, const char *name, int line)
{
    fe_section *x = IR_PUSH(s->sec, s->nsec, s->seccap);
    memset(x, 0, sizeof *x);
    x->kind = ir_xstrdup(kind);
    x->name = name ? ir_xstrdup(name) : NULL;
    x->line = line;
    return x;
}

/* Check KIND [NAME] (the words of a header or of a --set section) and find
 * or create the section.  line > 0: a header in the file (a duplicate is an
 * error); line == 0: --set (only unnamed sections are created).  Returns
 * the section index, or -1 after a message. */
static int open_section(fe_spec *s, fe_reader *r, const char *kind, const char *name, int line, const char *set)
{
    char hint[256], title[256], clip[96];
    const char *cand[FE_NSCHEMA];
    const fe_schema *sc = schema_of(kind);
    if (!sc) {
        for (int i = 0; i < FE_NSCHEMA; i++) cand[i] = fe_schemas[i].kind;
        const char *sug = fe_suggest(kind, cand, FE_NSCHEMA, hint, sizeof hint);
        if (sug) snprintf(hint + strlen(hint), sizeof hint - strlen(hint), " %s", fe_kinds_hint);
        if (set)
            fe_error(s, 0, sug ? hint : fe_kinds_hint, "--set %s: unknown section kind '%s'",
                     fe_clip(set, clip, sizeof clip), fe_clip(kind, title, sizeof title));
        else
            fe_error(s, line, sug ? hint : fe_kinds_hint, "unknown section kind '%s'",
                     fe_clip(kind, clip, sizeof clip));
        return -1;
    }
    const char *what = NULL;
    if (sc->named && !name) what = "needs a name";
    else if (!sc->named && name) what = "takes no name";
    else if (name && !fe_is_name(name)) what = "has a bad name";
    if (what) {
        if (sc->named && !name) snprintf(hint, sizeof hint, "write [%s NAME], e.g. [%s fc1]", kind, kind);
        else if (!sc->named) snprintf(hint, sizeof hint, "write [%s]", kind);
        else snprintf(hint, sizeof hint, "names are letters, digits, '_' and '.', starting with a letter or '_'");
        if (set)
            fe_error(s, 0, hint, "--set %s: section [%s] %s", fe_clip(set, clip, sizeof clip),
                     name ? fe_clip(name, title, sizeof title) : kind, what);
        else if (name && sc->named)
            fe_error(s, line, hint, "section [%s %s] %s", kind, fe_clip(name, clip, sizeof clip), what);
        else
            fe_error(s, line, hint, "section [%s] %s", kind, what);
        return -1;
    }
    fe_section *old = find_section(s, r, kind, name);
    if (set) {
        if (old) return (int)(old - s->sec);
        if (sc->named) {
            const char **names = ir_xmalloc(sizeof *names * (size_t)(s->nsec + 1));
            int n = 0;
            for (int i = 0; i < s->nsec; i++)
                if (strcmp(s->sec[i].kind, kind) == 0) names[n++] = s->sec[i].name;
            int near = fe_closest(name, names, n);
            if (near >= 0)
                snprintf(hint, sizeof hint, "did you mean [%.16s %.64s]? --set can change a named section that the spec has",
                         kind, fe_clip(names[near], clip, sizeof clip));
            free(names);
            fe_error(s, 0, near >= 0 ? hint : "--set can change a named section that the spec has, or add a key to it",
                     "--set %s: the spec has no section [%s %s]", fe_clip(set, clip, sizeof clip), kind,
                     fe_clip(name, title, sizeof title));
            return -1;
        }
        add_section(s, kind, NULL, 0);
        return s->nsec - 1;
    }
    if (old) {
        snprintf(hint, sizeof hint, "the first [%s] is at line %d; merge them or rename one",
                 fe_title(old, title, sizeof title), old->line);
        fe_error(s, line, hint, "section [%s] defined twice", fe_title(old, title, sizeof title));
        return -1;
    }
    add_section(s, kind, name, line);
    if (r) {   /* (a title too long for sec_key's buffer is found by the scan) */
        char buf[512];
        const char *k = sec_key(kind, name, buf, sizeof buf);
        char *t = ir_xstrdup(k ? k : "");
        *IR_PUSH(r->titles, r->ntitles, r->titlecap) = t;
        if (k) fe_map_put(&r->secs, t, s->nsec - 1);
    }
    return s->nsec - 1;
}

/* header := '[' KIND [NAME] ']' [';' COMMENT]     (blanks between the parts)
 * Returns 0, or 2 after a message. */
static int parse_header(fe_reader *r, const char *ln)
{
    fe_spec *s = r->s;
    const char *p = skip_blank(ln) + 1;
    const char *close = strchr(p, ']');
    if (!close)
        return fe_error(s, r->lineno, "write a header as [KIND] or [KIND NAME], e.g. [op fc1]",
                        "section header is missing ']'");
    const char *rest = skip_blank(close + 1);
    if (*rest && *rest != ';' && *rest != '#')
        return fe_error(s, r->lineno, "only a comment (; ...) may follow a section header",
                        "unexpected text after ']'");
    char *words[3] = {NULL, NULL, NULL};
    int nw = 0;
    for (const char *q = skip_blank(p); q < close && nw < 3; q = skip_blank(q)) {
        const char *e = q;
        while (e < close && *e != ' ' && *e != '\t') e++;
        size_t len = (size_t)(e - q);
        words[nw] = ir_xmalloc(len + 1);
        memcpy(words[nw], q, len);
        words[nw][len] = '\0';
        nw++;
        q = e;
    }
    int rc = 0;
    if (nw == 0)
        rc = fe_error(s, r->lineno, fe_kinds_hint, "empty section header");
    else if (nw == 3)
        rc = fe_error(s, r->lineno, "write a header as [KIND] or [KIND NAME]; names have no blanks",
                      "too many words in section header");
    else {
        fe_map_free(&r->keys);
        r->cur = open_section(s, r, words[0], words[1], r->lineno, NULL);
        if (r->cur < 0) rc = 2;
    }
    for (int i = 0; i < nw; i++) free(words[i]);
    return rc;
}

/* The inih reader: hand out the next line (or the next piece of a long one;
 * inih then grows its buffer and asks for the rest).  A header line opens
 * its section here, because inih calls the handler only for keys. */
static char *read_line(char *str, int num, void *stream)
{
    fe_reader *r = stream;
    if (r->failed || r->next >= r->s->nlines || num < 2) return NULL;
    const char *ln = r->s->lines[r->next];
    if (r->off == 0) {
        r->lineno = r->next + 1;
        if (*skip_blank(ln) == '[' && parse_header(r, ln)) {
            r->failed = 1;
            return NULL;
        }
    }
    size_t rest = strlen(ln + r->off);
    size_t room = (size_t)num - 1;     /* bytes that fit before the NUL */
    if (rest + 1 <= room) {            /* the rest of the line and its '\n' */
        memcpy(str, ln + r->off, rest);
        str[rest] = '\n';
        str[rest + 1] = '\0';
        r->next++;
        r->off = 0;
        return str;
    }
    /* a piece that fills the buffer exactly: inih reads on into a larger one */
    memcpy(str, ln + r->off, room);
    str[room] = '\0';
    r->off += room;
    return str;
}

/* The inih handler: one `key = value` of the current section. */
static int on_key(void *user, const char *section, const char *key, const char *val)
{
    fe_reader *r = user;
    fe_spec *s = r->s;
    char clip[96], title[256], hint[256];
    (void)section;   /* sections are tracked by read_line */
    const char *raw = s->lines[r->lineno - 1];
    const char *sep = raw + strcspn(raw, "=:");
    if (*sep == ':') {
        fe_error(s, r->lineno, "write key = value", "expected '=' after the key, found ':'");
        goto fail;
    }
    if (r->cur < 0) {
        fe_error(s, r->lineno, "put keys under a section header such as [train]",
                 "key '%s' outside any section", fe_clip(key, clip, sizeof clip));
        goto fail;
    }
    if (!*key) {
        fe_error(s, r->lineno, "write key = value", "missing key before '='");
        goto fail;
    }
    fe_section *sec = &s->sec[r->cur];
    int dup = fe_map_get(&r->keys, key);
    const fe_kv *old = dup >= 0 ? &sec->kv[dup] : NULL;
    if (old) {
        snprintf(hint, sizeof hint, "the first is at line %d; a key may appear once per section", old->line);
        fe_error(s, r->lineno, hint, "duplicate key '%s' in [%s]", fe_clip(key, clip, sizeof clip),
                 fe_title(sec, title, sizeof title));
        goto fail;
    }
    fe_kv *kv = IR_PUSH(sec->kv, sec->nkv, sec->kvcap);
    kv->key = ir_xstrdup(key);
    kv->val = ir_xstrdup(val);
    kv->line = r->lineno;
    fe_map_put(&r->keys, kv->key, sec->nkv - 1);
    return 1;
fail:
    r->failed = 1;
    return 0;
}

/* inih rejected line `line` without calling us: say why. */
static int syntax_error(const fe_spec *s, int line)
{
    const char *raw = s->lines[line - 1];
    if ((raw[0] == ' ' || raw[0] == '\t') && !strchr(raw, '=')) {
        /* indented text after a key: a continuation line in other INI dialects */
        for (int i = line - 2; i >= 0; i--) {
            const char *p = skip_blank(s->lines[i]);
            if (!*p || *p == ';' || *p == '#') continue;
            if (strchr(p, '=') && *p != '[')
                return fe_error(s, line, "write the whole value on one line (lines may be of any length)",
                                "continuation lines are not supported");
            break;
        }
    }
    return fe_error(s, line, "each line is [SECTION], key = value, a comment (; or #) or blank",
                    "expected 'key = value' or a [section] header");
}

/* Feed s->lines to inih.  Returns 0, or 2 after a message. */
static int read_ini(fe_spec *s, size_t longest)
{
    /* inih's run-time settings (this Debian build has them as globals): a heap
     * line buffer that grows to the longest line, no multi-line values, stop
     * at the first error.  Restored afterwards.  Globals: one parse at a
     * time (the plan search loads specs in several threads). */
    static pthread_mutex_t ini_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&ini_lock);
    int save_max = ini_max_line;
    bool save_stack = ini_use_stack, save_realloc = ini_allow_realloc;
    bool save_multi = ini_allow_multiline, save_stop = ini_stop_on_first_error;
    bool save_inline = ini_allow_inline_comments, save_novalue = ini_allow_no_value;
    char *save_prefix = ini_inline_comment_prefixes, *save_start = ini_start_comment_prefixes;
    static char inline_prefix[] = ";", start_prefix[] = ";#";
    ini_use_stack = false;
    ini_allow_realloc = true;
    ini_max_line = (int)(longest + 3 > 200 ? longest + 3 : 200);
    ini_allow_multiline = false;
    ini_stop_on_first_error = true;
    ini_allow_inline_comments = true;
    ini_allow_no_value = false;
    ini_inline_comment_prefixes = inline_prefix;
    ini_start_comment_prefixes = start_prefix;

    fe_reader r;
    memset(&r, 0, sizeof r);
    r.s = s;
    r.cur = -1;
    int rc = ini_parse_stream(read_line, &r, on_key, &r);
    fe_map_free(&r.secs);
    fe_map_free(&r.keys);
    for (int i = 0; i < r.ntitles; i++) free(r.titles[i]);
    free(r.titles);

    ini_max_line = save_max;
    ini_use_stack = save_stack;
    ini_allow_realloc = save_realloc;
    ini_allow_multiline = save_multi;
    ini_stop_on_first_error = save_stop;
    ini_allow_inline_comments = save_inline;
    ini_allow_no_value = save_novalue;
    ini_inline_comment_prefixes = save_prefix;
    ini_start_comment_prefixes = save_start;
    pthread_mutex_unlock(&ini_lock);

    if (r.failed) return 2;
    if (rc == -2) ir_die(__FILE__, __LINE__, "inih: out of memory");
    if (rc > 0 && rc <= s->nlines) return syntax_error(s, rc);
    if (rc != 0) return fe_error(s, -1, NULL, "cannot parse the model spec (inih error %d)", rc);
    return 0;
}

/* ---------------------------------------------------------------- --set */

/* A copy of [b, e) without surrounding blanks. */
static char *dup_trimmed(const char *b, const char *e)
{
    while (b < e && (*b == ' ' || *b == '\t')) b++;
    while (e > b && (e[-1] == ' ' || e[-1] == '\t')) e--;
    char *t = ir_xmalloc((size_t)(e - b) + 1);
    memcpy(t, b, (size_t)(e - b));
    t[e - b] = '\0';
    return t;
}

/* set := SECTION '.' KEY '=' VALUE     (SECTION is the header text, e.g.
 * "train" or "param fc1.w"; split at the last '.' before '=')
 * Replaces the key's value or adds the key; line 0 marks it.  Returns 0, or
 * 2 after a message. */
static int apply_set(fe_spec *s, const char *set)
{
    static const char form[] = "write --set SECTION.KEY=VALUE, e.g. --set train.steps=100 or --set \"param fc1.w.init=zeros\"";
    char clip[96];
    const char *eq = strchr(set, '=');
    const char *dot = NULL;
    for (const char *p = set; eq && p < eq; p++)
        if (*p == '.') dot = p;
    if (!eq || !dot)
        return fe_error(s, 0, form, "--set %s: expected SECTION.KEY=VALUE", fe_clip(set, clip, sizeof clip));
    char *sect = dup_trimmed(set, dot), *key = dup_trimmed(dot + 1, eq), *val = dup_trimmed(eq + 1, eq + strlen(eq));
    char *words[3] = {NULL, NULL, NULL};
    int nw = 0, rc = 0;
    char *sv = NULL;   /* (strtok_r: the plan search loads specs in several threads) */
    for (char *q = strtok_r(sect, " \t", &sv); q && nw < 3; q = strtok_r(NULL, " \t", &sv)) words[nw++] = q;
    if (nw == 0 || nw == 3 || !*key) {
        rc = fe_error(s, 0, form, "--set %s: expected SECTION.KEY=VALUE", fe_clip(set, clip, sizeof clip));
        goto out;
    }
    int si = open_section(s, NULL, words[0], words[1], 0, set);
    if (si < 0) {
        rc = 2;
        goto out;
    }
    fe_section *sec = &s->sec[si];
    for (int i = 0; i < sec->nkv; i++)
        if (strcmp(sec->kv[i].key, key) == 0) {
            free(sec->kv[i].val);
            sec->kv[i].val = val;
            sec->kv[i].line = 0;
            val = NULL;
            goto out;
        }
    fe_kv *kv = IR_PUSH(sec->kv, sec->nkv, sec->kvcap);
    kv->key = key;
    kv->val = val;
    kv->line = 0;
    key = val = NULL;
out:
    free(sect);
    free(key);
    free(val);
    return rc;
}

/* ---------------------------------------------------------------- schema check */

/* Every key known, required keys present.  (Whether the spec has [op]s
 * and a [train] is checked by lower.c, after the declarations.)  Returns 0,
 * or 2 after a message. */
static int check_schema(const fe_spec *s)
{
    char hint[512], title[256], clip[96];
    for (int i = 0; i < s->nsec; i++) {
        const fe_section *sec = &s->sec[i];
        const fe_schema *sc = schema_of(sec->kind);
        IR_ASSERT(sc);
        for (int k = 0; k < sec->nkv; k++) {
            const fe_kv *kv = &sec->kv[k];
            if (sc->user_keys) {
                if (!fe_is_name(kv->key))
                    return fe_kv_error(s, sec, kv, "names are letters, digits, '_' and '.', starting with a letter or '_'",
                                       "bad dim name '%s'", fe_clip(kv->key, clip, sizeof clip));
                continue;
            }
            int known = 0, n = 0;
            while (sc->keys[n]) known |= strcmp(sc->keys[n++], kv->key) == 0;
            if (known) continue;
            const char *sug = fe_suggest(kv->key, sc->keys, n, hint, sizeof hint);
            size_t used = sug ? strlen(hint) : 0;
            used += (size_t)snprintf(hint + used, sizeof hint - used, "%skeys of [%s%s]:", sug ? " " : "",
                                     sc->kind, sc->named ? " NAME" : "");
            for (int j = 0; j < n && used < sizeof hint; j++)
                used += (size_t)snprintf(hint + used, sizeof hint - used, " %s", sc->keys[j]);
            return fe_kv_error(s, sec, kv, hint, "unknown key '%s' in [%s]", fe_clip(kv->key, clip, sizeof clip),
                               fe_title(sec, title, sizeof title));
        }
        for (int k = 0; sc->required[k]; k++) {
            if (fe_get(sec, sc->required[k])) continue;
            snprintf(hint, sizeof hint, "add `%s = ...` to [%s]; see docs/model-spec.md", sc->required[k],
                     fe_title(sec, title, sizeof title));
            return fe_error(s, sec->line, hint, "missing key '%s' in [%s]%s", sc->required[k],
                            fe_title(sec, title, sizeof title), sec->line ? "" : " (a section made by --set)");
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- entry points */

/* On failure everything is freed again (fe_spec_free is then a no-op). */
int fe_parse(const char *path, const char *const *sets, int nset, fe_spec *s)
{
    memset(s, 0, sizeof *s);
    s->file = ir_xstrdup(path);
    char *buf = NULL;
    size_t len = 0;
    if (read_file(s, &buf, &len)) goto fail;
    size_t skip = len >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;   /* UTF-8 BOM */
    if (check_text(s, (const unsigned char *)buf + skip, len - skip)) goto fail;
    size_t longest = split_lines(s, buf + skip, len - skip);
    free(buf);
    buf = NULL;
    if (read_ini(s, longest)) goto fail;
    for (int i = 0; i < nset; i++)
        if (apply_set(s, sets[i])) goto fail;
    if (check_schema(s)) goto fail;
    return 0;
fail:
    free(buf);
    fe_spec_free(s);
    return 2;
}

void fe_spec_free(fe_spec *s)
{
    for (int i = 0; i < s->nsec; i++) {
        fe_section *sec = &s->sec[i];
        for (int k = 0; k < sec->nkv; k++) {
            free(sec->kv[k].key);
            free(sec->kv[k].val);
        }
        free(sec->kv);
        free(sec->kind);
        free(sec->name);
    }
    free(s->sec);
    for (int i = 0; i < s->nlines; i++) free(s->lines[i]);
    free(s->lines);
    free(s->file);
    memset(s, 0, sizeof *s);
}

const fe_kv *fe_get(const fe_section *sec, const char *key)
{
    for (int i = 0; i < sec->nkv; i++)
        if (strcmp(sec->kv[i].key, key) == 0) return &sec->kv[i];
    return NULL;
}
