/* auth.c -- what the ranks of a job prove to each other with: the job's
 * secret, SHA-256 (FIPS 180-4), HMAC-SHA-256 (RFC 2104), fresh random bytes
 * and a constant-time comparison.
 *
 * The secret comes from $NNSC_SECRET (out/launch makes one per run from
 * /dev/urandom), else from the file $NNSC_SECRET_FILE, which must be a
 * regular file of this user that its group and others cannot read.  The
 * transports (comm/comm_shm.c, comm/net.c) use it as the HMAC key over
 * nonces of both sides; the secret itself never goes on the wire or into
 * shared memory.
 *
 * Written from the standards (tests/test_rt_net.c checks the NIST and RFC
 * 4231 vectors).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/rt_base.h"

/* ---- SHA-256 (FIPS 180-4, section 6.2) */

/* The round constants: the first 32 bits of the fractional parts of the
 * cube roots of the first 64 primes (section 4.2.2). */
static const uint32_t sha_k[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

/* Rotate right. */
static uint32_t sha_rotr(uint32_t x, int n)
{
    return x >> n | x << (32 - n);
}

/* One 64-byte block into the state h (the hash computation of 6.2.2). */
static void sha_block(uint32_t h[8], const unsigned char *p)
{
    uint32_t w[64];
    for (int t = 0; t < 16; t++)
        w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 | (uint32_t)p[4 * t + 2] << 8 |
               (uint32_t)p[4 * t + 3];
    for (int t = 16; t < 64; t++) {
        uint32_t s0 = sha_rotr(w[t - 15], 7) ^ sha_rotr(w[t - 15], 18) ^ w[t - 15] >> 3;
        uint32_t s1 = sha_rotr(w[t - 2], 17) ^ sha_rotr(w[t - 2], 19) ^ w[t - 2] >> 10;
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int t = 0; t < 64; t++) {
        uint32_t t1 = k + (sha_rotr(e, 6) ^ sha_rotr(e, 11) ^ sha_rotr(e, 25)) + ((e & f) ^ (~e & g)) +
                      sha_k[t] + w[t];
        uint32_t t2 = (sha_rotr(a, 2) ^ sha_rotr(a, 13) ^ sha_rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += k;
}

void rt_sha256_init(rt_sha256_state *s)
{
    /* the first 32 bits of the fractional parts of the square roots of the
       first 8 primes (5.3.3) */
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(s->h, h0, sizeof h0);
    s->len = 0;
    s->nbuf = 0;
}

void rt_sha256_update(rt_sha256_state *s, const void *data, size_t n)
{
    const unsigned char *p = data;
    s->len += n;
    if (s->nbuf) {   /* fill the partial block first */
        size_t take = 64 - s->nbuf < n ? 64 - s->nbuf : n;
        memcpy(s->buf + s->nbuf, p, take);
        s->nbuf += take;
        p += take;
        n -= take;
        if (s->nbuf < 64)
            return;
        sha_block(s->h, s->buf);
        s->nbuf = 0;
    }
    for (; n >= 64; p += 64, n -= 64)
        sha_block(s->h, p);
    memcpy(s->buf, p, n);
    s->nbuf = n;
}

void rt_sha256_final(rt_sha256_state *s, unsigned char out[RT_SHA256_LEN])
{
    /* padding (5.1.1): a 1 bit, zeros to 56 mod 64 bytes, the length in bits (big-endian) */
    uint64_t bits = s->len * 8;
    unsigned char pad[72] = {0x80};
    size_t npad = (s->nbuf < 56 ? 56 : 120) - s->nbuf;
    for (int k = 0; k < 8; k++)
        pad[npad + (size_t)k] = (unsigned char)(bits >> (56 - 8 * k));
    rt_sha256_update(s, pad, npad + 8);
    for (int k = 0; k < 8; k++)
        for (int j = 0; j < 4; j++)
            out[4 * k + j] = (unsigned char)(s->h[k] >> (24 - 8 * j));
    memset(s, 0, sizeof *s);
}

void rt_sha256(const void *data, size_t n, unsigned char out[RT_SHA256_LEN])
{
    rt_sha256_state s;
    rt_sha256_init(&s);
    rt_sha256_update(&s, data, n);
    rt_sha256_final(&s, out);
}

/* ---- HMAC-SHA-256 (RFC 2104: H(K ^ opad || H(K ^ ipad || text)), B = 64) */

void rt_hmac_init(rt_hmac_state *h, const void *key, size_t klen)
{
    unsigned char k0[64] = {0}, pad[64];
    if (klen > 64)   /* a key longer than the block is hashed first */
        rt_sha256(key, klen, k0);
    else if (klen)
        memcpy(k0, key, klen);
    for (int j = 0; j < 64; j++)
        pad[j] = k0[j] ^ 0x36;
    rt_sha256_init(&h->inner);
    rt_sha256_update(&h->inner, pad, 64);
    for (int j = 0; j < 64; j++)
        pad[j] = k0[j] ^ 0x5c;
    rt_sha256_init(&h->outer);
    rt_sha256_update(&h->outer, pad, 64);
    memset(k0, 0, sizeof k0);
    memset(pad, 0, sizeof pad);
}

void rt_hmac_update(rt_hmac_state *h, const void *data, size_t n)
{
    rt_sha256_update(&h->inner, data, n);
}

void rt_hmac_final(rt_hmac_state *h, unsigned char out[RT_SHA256_LEN])
{
    unsigned char in[RT_SHA256_LEN];
    rt_sha256_final(&h->inner, in);
    rt_sha256_update(&h->outer, in, sizeof in);
    rt_sha256_final(&h->outer, out);
    memset(in, 0, sizeof in);
}

void rt_hmac_sha256(const void *key, size_t klen, const void *data, size_t n,
                    unsigned char out[RT_SHA256_LEN])
{
    rt_hmac_state h;
    rt_hmac_init(&h, key, klen);
    rt_hmac_update(&h, data, n);
    rt_hmac_final(&h, out);
}

int rt_ct_equal(const void *a, const void *b, size_t n)
{
    const volatile unsigned char *x = a, *y = b;
    unsigned char d = 0;
    for (size_t k = 0; k < n; k++)   /* every byte, whatever differs first */
        d |= x[k] ^ y[k];
    return d == 0;
}

/* ---- randomness and the secret */

void rt_random(rt_ctx *ctx, void *buf, size_t n)
{
    unsigned char *p = buf;
    while (n > 0) {
        ssize_t r = getrandom(p, n, 0);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            rt_fatal(ctx, 1, "getrandom failed: %s (no source of random nonces)", strerror(errno));
        p += r;
        n -= (size_t)r;
    }
}

/* The hint every secret message ends with. */
#define RT_SECRET_HINT                                                                             \
    "  hint: export NNSC_SECRET=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \\n') once for the "    \
    "job, the same for every rank (out/launch makes one by itself), or point NNSC_SECRET_FILE "    \
    "at a file only you can read (chmod 600)"

/* The secret from the file at path into s; exits 2 when the file is not fit. */
static void rt_secret_file(rt_ctx *ctx, const char *path, rt_secret *s)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        rt_fatal(ctx, 2, "NNSC_SECRET_FILE %s: %s" RT_SECRET_HINT, path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        rt_fatal(ctx, 2, "NNSC_SECRET_FILE %s is not a regular file" RT_SECRET_HINT, path);
    }
    if (st.st_uid != geteuid()) {
        close(fd);
        rt_fatal(ctx, 2, "NNSC_SECRET_FILE %s belongs to uid %d, not to this user (uid %d): a job "
                 "secret must be your own file" RT_SECRET_HINT, path, (int)st.st_uid, (int)geteuid());
    }
    if (st.st_mode & 077) {
        close(fd);
        rt_fatal(ctx, 2, "NNSC_SECRET_FILE %s can be read by its group or others (mode %04o): a "
                 "job secret must be readable only by you  hint: chmod 600 %s", path,
                 (unsigned)(st.st_mode & 07777), path);
    }
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, s->key + n, sizeof s->key - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            rt_fatal(ctx, 2, "NNSC_SECRET_FILE %s: %s", path, strerror(e));
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n == sizeof s->key) {
            close(fd);
            rt_fatal(ctx, 2, "NNSC_SECRET_FILE %s is longer than %d bytes: a job secret is a short "
                     "random string" RT_SECRET_HINT, path, RT_SECRET_MAX - 1);
        }
    }
    close(fd);
    while (n > 0 && (s->key[n - 1] == '\n' || s->key[n - 1] == '\r'))   /* echo's newline */
        n--;
    s->len = n;
    snprintf(s->from, sizeof s->from, "NNSC_SECRET_FILE");
}

int rt_job_secret(rt_ctx *ctx, rt_secret *s)
{
    memset(s, 0, sizeof *s);
    const char *v = getenv("NNSC_SECRET"), *f = getenv("NNSC_SECRET_FILE");
    if (v && *v) {
        size_t n = strlen(v);
        if (n >= sizeof s->key)
            rt_fatal(ctx, 2, "NNSC_SECRET is longer than %d bytes: a job secret is a short random "
                     "string" RT_SECRET_HINT, RT_SECRET_MAX - 1);
        memcpy(s->key, v, n);
        s->len = n;
        snprintf(s->from, sizeof s->from, "NNSC_SECRET");
    } else if (f && *f) {
        rt_secret_file(ctx, f, s);
    } else {
        return 0;
    }
    if (s->len < RT_SECRET_MIN)
        rt_fatal(ctx, 2, "the job secret in %s has %zu bytes: at least %d are needed (a random "
                 "string that nobody can guess)" RT_SECRET_HINT, s->from, s->len, RT_SECRET_MIN);
    return 1;
}

void rt_secret_wipe(rt_secret *s)
{
    volatile unsigned char *p = (volatile unsigned char *)s->key;
    for (size_t k = 0; k < sizeof s->key; k++)
        p[k] = 0;
    s->len = 0;
}
