/* conv_driver: checks the CPU fallback's convolution against test vectors computed by the numpy
 * reference (tests/support/cpu_vectors.py writes them), for every ISA variant this CPU can run and for 1, 2
 * and 3 threads, and checks that bad arguments are rejected with a message instead of a crash.
 *
 * Why one file: it is one test program (also built under ASan/UBSan, TSan and for AArch64/ARMv7 under
 * qemu) whose vector reader, case runners and refusal checks share one case table.
 *
 * Usage: conv_driver VECTORS [-k SUBSTRING]     (-k: only cases whose name contains SUBSTRING)
 *
 * Vector file format, version 1. Every integer is little-endian; floats are IEEE-754 binary32 bit
 * patterns stored like u32. Nothing is padded or aligned.
 *   header:  char magic[8] = "VKICONV\0"; u32 version = 1; u32 case_count
 *   case_count times:
 *     u32 name_len (1..255); name_len bytes of the case name (no terminating NUL)
 *     u32 n, h, w, c, m, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, groups   (vki_conv_desc's order)
 *     i32 w_signed, x_zp, y_zp, y_lo, y_hi      (x_zp already in the canonical unsigned domain)
 *     u32 oh, ow                                (expected output size)
 *     u8  weights[m * (c / groups) * kh * kw]   (ONNX layout M, C/group, kH, kW; raw bytes)
 *     i32 w_zp[m]; i32 bias[m]; f32 scale[m]
 *     u8  x[n * h * w * c]                      (NHWC, canonical unsigned domain)
 *     u8  y[n * oh * ow * m]                    (NHWC, expected output: low byte of each result)
 *   The file ends right after the last case.
 *
 * For each case and each available variant index i (desc.isa = i), for threads 1, 2, 3: create,
 * check vki_conv_isa() and vki_conv_output_shape(), run, run again with the same x pointer (the
 * cached indirection buffer is reused), then run with another buffer holding the same data (the
 * indirection buffer must be rebuilt). Each case also runs once with desc.isa = -1 and threads = 0,
 * which must pick vki_isa_default() (reported as isa "default", threads 0). The output buffer is
 * poisoned with a different byte before every run, so an output the kernel forgets to write shows up.
 * The description and its weight/zero-point/bias/scale arrays are clobbered and freed right after
 * create, so a library that keeps pointers into them fails.
 *
 * Error paths (before the cases): NULL desc or out, groups not dividing c or m, zero stride, dilation
 * or kernel size, kernel larger than the padded input, NULL arrays, zero points, clamp bounds or
 * scales out of range, isa -2 or past the list (unavailable variants must give VKI_EUNSUPPORTED),
 * NULL arguments to run, $VKINFER_CPU_ISA / $VKINFER_CPU_THREADS, and vki_last_error() being per
 * thread. Each must return an error status with a non-empty vki_last_error() and not crash; the
 * messages are printed as "rejected ..." lines.
 *
 * Out-of-bounds accesses: under AddressSanitizer x and y are malloc'ed with exactly their size.
 * Without it (the static AArch64/ARMv7 drivers run under qemu, where NEON kernels are tested), every
 * buffer sits against an inaccessible guard page: the first x/y end at the guard (over-reads and
 * over-writes past the end fault), the rebuild run's x/y start right after one (accesses before the
 * start fault). An end-guarded buffer of odd size starts at an odd address, so kernels cannot rely
 * on aligned activations, which callers do not promise.
 *
 * Each created convolution's vki_conv_kernel() is checked too: "avx2-u8s8" exactly when the variant is
 * avx2, the layer is not depthwise and every (w - w_zp) lies in [-64, 64] (else the variant's name),
 * and the runs per kernel family are printed as "kernels: NAME=COUNT ...".
 *
 * Output: "variants: <names run>", one "FAIL ..." line per failed check, and last
 * "cpu driver: N passed, M failed" where N and M count (case, isa, threads) runs plus one entry per
 * error-path check (named "error: ..."). Exit status 1 if M > 0 or no case was read.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS and sysconf() with -std=c11 */

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "vkinfer_cpu.h"

#if defined(__SANITIZE_ADDRESS__)
#define DRIVER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DRIVER_ASAN 1
#endif
#endif
#ifndef DRIVER_ASAN
#define DRIVER_ASAN 0
#endif

#define MAX_BYTES ((uint64_t)1 << 30) /* no tensor in a test file comes near this: a bigger one is corruption */

static unsigned g_passed, g_failed;

/* What is running now, for the crash message: without ASan (the qemu runs) a fault in a kernel would
 * otherwise kill the driver without naming the case. */
static char g_current[400] = "start-up";

static void on_fatal(int sig)
{
    static const char pre[] = "CRASH (fatal signal) during ";
    /* Only async-signal-safe calls here; stdout is line buffered, so earlier lines are already out. */
    ssize_t r = write(1, pre, sizeof pre - 1);
    r = write(1, g_current, strlen(g_current));
    r = write(1, "\n", 1);
    (void)r;
    signal(sig, SIG_DFL);
    raise(sig);
}

static void set_current(const char* fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_current, sizeof g_current, fmt, ap);
    va_end(ap);
}

/* ---------------------------------------------------------------- buffers with guards */

typedef struct {
    uint8_t* p;   /* the buffer handed to the library */
    void* map;    /* mmap'ed region (guarded mode), else NULL */
    size_t map_len;
} tbuf;

/* A buffer of exactly `size` bytes. guard_front: the buffer starts right after a PROT_NONE page;
 * otherwise it ends right before one. */
static uint8_t* buf_alloc(tbuf* b, size_t size, int guard_front)
{
    memset(b, 0, sizeof *b);
    if (DRIVER_ASAN) {
        /* ASan's redzones catch accesses on both sides; mmap'ed memory would not be checked. */
        b->p = malloc(size);
    } else {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        size_t data = (size + page - 1) / page * page;
        if (data == 0)
            data = page;
        b->map_len = data + page;
        b->map = mmap(NULL, b->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (b->map == MAP_FAILED) {
            b->map = NULL;
            return NULL;
        }
        uint8_t* base = b->map;
        if (guard_front) {
            mprotect(base, page, PROT_NONE);
            b->p = base + page;
        } else {
            mprotect(base + data, page, PROT_NONE);
            b->p = base + data - size;
        }
    }
    if (!b->p) {
        fprintf(stderr, "conv_driver: out of memory (%zu bytes)\n", size);
        exit(2);
    }
    return b->p;
}

static void buf_free(tbuf* b)
{
    if (b->map)
        munmap(b->map, b->map_len);
    else
        free(b->p);
    memset(b, 0, sizeof *b);
}

/* ---------------------------------------------------------------- vector file */

typedef struct {
    char name[256];
    vki_conv_desc d; /* pointers below; isa set per run */
    uint8_t* weights;
    int32_t* w_zp;
    int32_t* bias;
    float* scale;
    uint8_t* x;
    size_t x_size;
    uint8_t* y;
    size_t y_size;
    uint32_t oh, ow;
} tcase;

typedef struct {
    const uint8_t* p;
    size_t left;
    int bad;
} reader;

static const uint8_t* take(reader* r, size_t n)
{
    if (r->bad || n > r->left) {
        r->bad = 1;
        return NULL;
    }
    const uint8_t* p = r->p;
    r->p += n;
    r->left -= n;
    return p;
}

/* Decoded byte by byte so the driver is correct whatever the host's byte order. */
static uint32_t get_u32(reader* r)
{
    const uint8_t* p = take(r, 4);
    return p ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24 : 0;
}

static int32_t get_i32(reader* r)
{
    uint32_t u = get_u32(r);
    int32_t v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* Product of counts, 0 if it overflows or exceeds MAX_BYTES (the caller treats 0 as corrupt). */
static uint64_t checked_mul(int k, ...)
{
    va_list ap;
    va_start(ap, k);
    uint64_t p = 1;
    for (int i = 0; i < k; i++) {
        uint64_t v = va_arg(ap, uint64_t);
        if (v != 0 && p > MAX_BYTES / v)
            p = 0;
        p *= v;
    }
    va_end(ap);
    return p <= MAX_BYTES ? p : 0;
}

static void* xmalloc(size_t n)
{
    void* p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "conv_driver: out of memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}

static void free_case(tcase* t)
{
    free(t->weights);
    free(t->w_zp);
    free(t->bias);
    free(t->scale);
    free(t->x);
    free(t->y);
}

/* Parse one case; returns 0 and prints why on a malformed one. */
static int read_case(reader* r, tcase* t, unsigned index)
{
    memset(t, 0, sizeof *t);
    uint32_t name_len = get_u32(r);
    const uint8_t* name = take(r, name_len);
    if (!name || name_len == 0 || name_len >= sizeof t->name) {
        fprintf(stderr, "conv_driver: case %u: bad name length %u\n", index, name_len);
        return 0;
    }
    memcpy(t->name, name, name_len);
    t->name[name_len] = 0;
    vki_conv_desc* d = &t->d;
    uint32_t* u[] = {&d->n, &d->h, &d->w, &d->c, &d->m, &d->kh, &d->kw, &d->sh,
                     &d->sw, &d->dh, &d->dw, &d->pt, &d->pl, &d->pb, &d->pr, &d->groups};
    for (size_t i = 0; i < sizeof u / sizeof u[0]; i++)
        *u[i] = get_u32(r);
    d->w_signed = get_i32(r);
    d->x_zp = get_i32(r);
    d->y_zp = get_i32(r);
    d->y_lo = get_i32(r);
    d->y_hi = get_i32(r);
    t->oh = get_u32(r);
    t->ow = get_u32(r);
    if (r->bad || d->groups == 0 || d->c % d->groups != 0) {
        fprintf(stderr, "conv_driver: case %u (%s): truncated header or bad groups\n", index, t->name);
        return 0;
    }
    uint64_t wn = checked_mul(4, (uint64_t)d->m, (uint64_t)(d->c / d->groups), (uint64_t)d->kh, (uint64_t)d->kw);
    uint64_t mn = checked_mul(2, (uint64_t)d->m, (uint64_t)4);
    uint64_t xn = checked_mul(4, (uint64_t)d->n, (uint64_t)d->h, (uint64_t)d->w, (uint64_t)d->c);
    uint64_t yn = checked_mul(4, (uint64_t)d->n, (uint64_t)t->oh, (uint64_t)t->ow, (uint64_t)d->m);
    if (!wn || !mn || !xn || !yn) {
        fprintf(stderr, "conv_driver: case %u (%s): empty or oversized tensor\n", index, t->name);
        return 0;
    }
    const uint8_t* pw = take(r, wn);
    const uint8_t* pzp = take(r, mn);
    const uint8_t* pb = take(r, mn);
    const uint8_t* ps = take(r, mn);
    const uint8_t* px = take(r, xn);
    const uint8_t* py = take(r, yn);
    if (r->bad) {
        fprintf(stderr, "conv_driver: case %u (%s): file truncated\n", index, t->name);
        return 0;
    }
    t->weights = xmalloc(wn);
    memcpy(t->weights, pw, wn);
    t->w_zp = xmalloc(mn);
    t->bias = xmalloc(mn);
    t->scale = xmalloc(mn);
    for (uint32_t i = 0; i < d->m; i++) {
        reader s = {pzp + 4 * i, 4, 0}, b = {pb + 4 * i, 4, 0}, f = {ps + 4 * i, 4, 0};
        t->w_zp[i] = get_i32(&s);
        t->bias[i] = get_i32(&b);
        uint32_t bits = get_u32(&f);
        memcpy(&t->scale[i], &bits, sizeof bits);
    }
    t->x_size = (size_t)xn;
    t->x = xmalloc(xn);
    memcpy(t->x, px, xn);
    t->y_size = (size_t)yn;
    t->y = xmalloc(yn);
    memcpy(t->y, py, yn);
    d->weights = t->weights;
    d->w_zp = t->w_zp;
    d->bias = t->bias;
    d->scale = t->scale;
    return 1;
}

static uint8_t* read_file(const char* path, size_t* size)
{
    FILE* f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return NULL;
    }
    size_t cap = 1 << 20, n = 0;
    uint8_t* buf = xmalloc(cap);
    for (;;) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        cap *= 2;
        uint8_t* nb = realloc(buf, cap);
        if (!nb) {
            fprintf(stderr, "conv_driver: out of memory reading %s\n", path);
            exit(2);
        }
        buf = nb;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        perror(path);
        free(buf);
        return NULL;
    }
    *size = n;
    return buf;
}

/* ---------------------------------------------------------------- numeric runs */

typedef struct {
    const tcase* t;
    const char* isa;
    uint32_t threads;
    int failed;
} run_ctx;

static void fail(run_ctx* c, const char* fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL case=%s isa=%s threads=%u: ", c->t->name, c->isa, c->threads);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
    c->failed = 1;
}

/* Compares an output with the expected one; on a mismatch names the first bad element. */
static void check_output(run_ctx* c, const char* what, const uint8_t* y)
{
    const tcase* t = c->t;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < t->y_size; i++) {
        if (y[i] != t->y[i]) {
            if (!bad)
                first = i;
            bad++;
        }
    }
    if (!bad)
        return;
    size_t m = t->d.m, ch = first % m, px = first / m;
    size_t ox = px % t->ow, oy = px / t->ow % t->oh, b = px / t->ow / t->oh;
    fail(c, "%s: %zu of %zu output bytes differ; first at [n=%zu oh=%zu ow=%zu m=%zu]: got 0x%02x want 0x%02x", what,
         bad, t->y_size, b, oy, ox, ch, y[first], t->y[first]);
}

static void check_run(run_ctx* c, const char* what, vki_conv* conv, const uint8_t* x, uint8_t* y, uint8_t poison)
{
    memset(y, poison, c->t->y_size);
    vki_status st = vki_conv_run(conv, x, y, c->threads);
    if (st != VKI_OK) {
        fail(c, "%s: vki_conv_run returned %d (%s)", what, (int)st, vki_last_error());
        return;
    }
    check_output(c, what, y);
}

/* Kernel families the runs went through (vki_conv_kernel), printed as "kernels: NAME=COUNT ...". */
static struct {
    char name[32];
    unsigned runs;
} g_kernels[16];

static void count_kernel(const char* name)
{
    for (size_t i = 0; i < sizeof g_kernels / sizeof g_kernels[0]; i++) {
        if (!g_kernels[i].name[0]) snprintf(g_kernels[i].name, sizeof g_kernels[i].name, "%s", name);
        if (strcmp(g_kernels[i].name, name) == 0) {
            g_kernels[i].runs++;
            return;
        }
    }
}

/* Which variants have u8s8 kernels, for which weights and layer kinds: written here from the kernel files'
 * comments, independently of the library's own tables, so a variant that silently stopped taking (or
 * wrongly took) its fast path fails. */
static const struct {
    const char* isa;
    int32_t wmin, wmax;  /* every (w - w_zp) in [wmin, wmax] */
    int gemm, dw;        /* 1: the u8s8 kernel exists for non-depthwise / depthwise layers */
} U8S8[] = {
    {"avx2", -64, 64, 1, 0},
    {"avx512vnni", -128, 127, 1, 1},
    {"neon_dot", -128, 127, 1, 1},
};

/* vki_conv_kernel: the u8s8 form ("<variant>-u8s8") exactly when U8S8 lists the variant for this kind of
 * layer and every (w - w_zp) lies in its range (unless $VKINFER_CPU_U8S8=0); else the variant's own name. */
static void check_kernel(run_ctx* c, const vki_conv* conv, const char* isa)
{
    const tcase* t = c->t;
    const char* got = vki_conv_kernel(conv);
    if (!got || !isa) {
        fail(c, "vki_conv_kernel is NULL");
        return;
    }
    count_kernel(got);
    const vki_conv_desc* d = &t->d;
    const int depthwise = d->groups == d->c && d->groups == d->m;
    int listed = 0;
    int32_t wmin = 0, wmax = -1;
    for (size_t i = 0; i < sizeof U8S8 / sizeof U8S8[0]; i++)
        if (strcmp(U8S8[i].isa, isa) == 0 && (depthwise ? U8S8[i].dw : U8S8[i].gemm))
            listed = 1, wmin = U8S8[i].wmin, wmax = U8S8[i].wmax;
    size_t per_m = (size_t)(d->c / d->groups) * d->kh * d->kw;
    int in_range = listed;
    for (size_t i = 0; i < (size_t)d->m * per_m && in_range; i++) {
        int32_t v = (d->w_signed ? (int32_t)(int8_t)t->weights[i] : (int32_t)t->weights[i]) - t->w_zp[i / per_m];
        in_range = v >= wmin && v <= wmax;
    }
    const char* off = getenv("VKINFER_CPU_U8S8");
    int eligible = in_range && !(off && strcmp(off, "0") == 0);
    char fast[64];
    snprintf(fast, sizeof fast, "%s-u8s8", isa);
    const char* want = eligible ? fast : isa;
    if (strcmp(got, want) != 0)
        fail(c, "vki_conv_kernel is \"%s\", expected \"%s\" (variant %s, %s, weights in its u8s8 range: %s)", got,
             want, isa, depthwise ? "depthwise" : "igemm", in_range ? "yes" : "no");
}

/* One (case, isa, threads) run. isa = -1 checks the default variant. */
static void run_one(const tcase* t, int32_t isa, uint32_t threads, tbuf* xa, tbuf* xb, tbuf* ya, tbuf* yb)
{
    run_ctx c = {t, isa >= 0 ? vki_isa_name(isa) : "default", threads, 0};
    set_current("case=%s isa=%s threads=%u", t->name, c.isa, threads);
    /* create() packs what it needs ("once", says the header): the description and its arrays are
     * temporary copies, clobbered and freed before any run, so a library that kept pointers into
     * them computes garbage (and ASan reports a use after free). */
    size_t m = t->d.m, wbytes = (size_t)m * (t->d.c / t->d.groups) * t->d.kh * t->d.kw;
    vki_conv_desc d = t->d;
    d.isa = isa;
    uint8_t* weights = memcpy(xmalloc(wbytes), t->weights, wbytes);
    int32_t* w_zp = memcpy(xmalloc(m * 4), t->w_zp, m * 4);
    int32_t* bias = memcpy(xmalloc(m * 4), t->bias, m * 4);
    float* scale = memcpy(xmalloc(m * 4), t->scale, m * 4);
    d.weights = weights, d.w_zp = w_zp, d.bias = bias, d.scale = scale;
    vki_conv* conv = NULL;
    vki_status st = vki_conv_create(&d, &conv);
    memset(&d, 0xEE, sizeof d);
    memset(weights, 0xEE, wbytes);
    memset(w_zp, 0xEE, m * 4);
    memset(bias, 0xEE, m * 4);
    memset(scale, 0xEE, m * 4);
    free(weights);
    free(w_zp);
    free(bias);
    free(scale);
    if (st != VKI_OK || !conv) {
        fail(&c, "vki_conv_create returned %d (%s)", (int)st, vki_last_error());
        goto done;
    }
    int32_t want_isa = isa >= 0 ? isa : vki_isa_default();
    const char* got = vki_conv_isa(conv);
    const char* want = want_isa >= 0 ? vki_isa_name(want_isa) : NULL;
    if (!got || !want || strcmp(got, want) != 0)
        fail(&c, "vki_conv_isa is \"%s\", expected \"%s\"", got ? got : "(null)", want ? want : "(no default)");
    check_kernel(&c, conv, want);
    uint32_t oh = 0, ow = 0;
    vki_conv_output_shape(conv, &oh, &ow);
    if (oh != t->oh || ow != t->ow) {
        fail(&c, "output shape %ux%u, expected %ux%u", oh, ow, t->oh, t->ow);
        goto done; /* a run would write a differently sized output */
    }
    /* Each run gets different poison so that every output byte must be written by that run. */
    check_run(&c, "first run", conv, xa->p, ya->p, 0xA5);
    check_run(&c, "second run, same x (indirection reuse)", conv, xa->p, ya->p, 0x5A);
    check_run(&c, "run with another x buffer (indirection rebuild)", conv, xb->p, yb->p, 0xC3);
    if (memcmp(xa->p, t->x, t->x_size) != 0 || memcmp(xb->p, t->x, t->x_size) != 0)
        fail(&c, "the input was modified");
done:
    vki_conv_destroy(conv);
    if (c.failed)
        g_failed++;
    else
        g_passed++;
}

static void run_case(const tcase* t, const int32_t* variants, int nvariants)
{
    tbuf xa, xb, ya, yb;
    memcpy(buf_alloc(&xa, t->x_size, 0), t->x, t->x_size);
    memcpy(buf_alloc(&xb, t->x_size, 1), t->x, t->x_size);
    buf_alloc(&ya, t->y_size, 0);
    buf_alloc(&yb, t->y_size, 1);
    static const uint32_t threads[] = {1, 2, 3};
    for (int v = 0; v < nvariants; v++)
        for (size_t k = 0; k < sizeof threads / sizeof threads[0]; k++)
            run_one(t, variants[v], threads[k], &xa, &xb, &ya, &yb);
    run_one(t, -1, 0, &xa, &xb, &ya, &yb);
    buf_free(&xa);
    buf_free(&xb);
    buf_free(&ya);
    buf_free(&yb);
}

/* ---------------------------------------------------------------- error paths */

/* A small valid convolution that each error check breaks in one way. */
enum { EC = 4, EM = 4, EK = 3, EH = 5, EW = 5 };
static uint8_t e_weights[EM * EC * EK * EK];
static int32_t e_wzp[EM], e_bias[EM];
static float e_scale[EM] = {0.5f, 0.25f, 1.0f, 0.125f};
static uint8_t e_x[EH * EW * EC];

static vki_conv_desc base_desc(void)
{
    vki_conv_desc d;
    memset(&d, 0, sizeof d);
    d.n = 1, d.h = EH, d.w = EW, d.c = EC, d.m = EM, d.kh = EK, d.kw = EK;
    d.sh = d.sw = d.dh = d.dw = 1;
    d.pt = d.pl = d.pb = d.pr = 1;
    d.groups = 1;
    d.weights = e_weights, d.w_signed = 1, d.w_zp = e_wzp, d.bias = e_bias, d.scale = e_scale;
    d.x_zp = 128, d.y_zp = 0, d.y_lo = -128, d.y_hi = 127, d.isa = -1;
    return d;
}

static void error_result(const char* what, const char* isa, int ok, const char* detail)
{
    if (ok) {
        g_passed++;
        return;
    }
    g_failed++;
    printf("FAIL case=error: %s isa=%s threads=0: %s\n", what, isa, detail);
    fflush(stdout);
}

/* The call failed (status st): it must say why. `want` is the required status, or -1 for any
 * error status. */
static int explain_failure(const char* what, vki_status st, int want, char* detail, size_t n)
{
    const char* msg = vki_last_error();
    if (st == VKI_OK) {
        snprintf(detail, n, "returned VKI_OK");
        return 0;
    }
    if (want >= 0 && (int)st != want) {
        snprintf(detail, n, "returned %d, expected %d (message: %s)", (int)st, want, msg ? msg : "(null)");
        return 0;
    }
    if (!msg || !msg[0]) {
        snprintf(detail, n, "returned %d but vki_last_error() is empty", (int)st);
        return 0;
    }
    printf("rejected %-44s -> %d: %s\n", what, (int)st, msg);
    return 1;
}

/* Expect vki_conv_create to reject d (desc NULL when use_null_desc). */
static void expect_create_error(const char* what, const vki_conv_desc* d, int want)
{
    char detail[512] = "";
    vki_conv* conv = NULL;
    vki_status st = vki_conv_create(d, &conv);
    int ok = explain_failure(what, st, want, detail, sizeof detail);
    if (conv) {
        /* A failed create must not hand out an object (and a successful one is freed here). */
        if (ok)
            snprintf(detail, sizeof detail, "failed but set *out");
        ok = 0;
        vki_conv_destroy(conv);
    }
    error_result(what, d && d->isa >= 0 && d->isa < vki_isa_count() ? vki_isa_name(d->isa) : "default", ok,
                 detail);
}

typedef struct {
    char msg[512];
} thread_msg;

/* Fails a create on another thread: the main thread's vki_last_error() must not change. */
static void* other_thread_error(void* arg)
{
    thread_msg* out = arg;
    vki_conv_desc d = base_desc();
    d.sh = 0;
    vki_conv* conv = NULL;
    if (vki_conv_create(&d, &conv) == VKI_OK)
        vki_conv_destroy(conv);
    const char* m = vki_last_error();
    snprintf(out->msg, sizeof out->msg, "%s", m ? m : "");
    return NULL;
}

/* $VKINFER_CPU_ISA and $VKINFER_CPU_THREADS are read on each call (the header's contract); the
 * caller's values are restored afterwards so the numeric runs see the environment they were given. */
static void env_checks(void)
{
    char detail[512];
    const char* saved_isa = getenv("VKINFER_CPU_ISA");
    const char* saved_threads = getenv("VKINFER_CPU_THREADS");
    char isa_copy[256] = "", threads_copy[64] = "";
    if (saved_isa)
        snprintf(isa_copy, sizeof isa_copy, "%s", saved_isa);
    if (saved_threads)
        snprintf(threads_copy, sizeof threads_copy, "%s", saved_threads);

    for (int32_t i = 0; i < vki_isa_count(); i++) {
        if (!vki_isa_available(i))
            continue;
        setenv("VKINFER_CPU_ISA", vki_isa_name(i), 1);
        int32_t got = vki_isa_default();
        snprintf(detail, sizeof detail, "vki_isa_default() = %d, expected %d", (int)got, (int)i);
        error_result("VKINFER_CPU_ISA names a variant", vki_isa_name(i), got == i, detail);
    }
    setenv("VKINFER_CPU_ISA", "no-such-variant", 1);
    {
        int32_t got = vki_isa_default();
        const char* msg = vki_last_error();
        snprintf(detail, sizeof detail, "vki_isa_default() = %d with an empty message", (int)got);
        error_result("VKINFER_CPU_ISA unknown: default -1", "default", got == -1 && msg && msg[0], detail);
        vki_conv_desc d = base_desc();
        vki_conv* conv = NULL;
        vki_status st = vki_conv_create(&d, &conv);
        int ok = explain_failure("isa -1 with VKINFER_CPU_ISA unknown", st, -1, detail, sizeof detail);
        if (conv) {
            snprintf(detail, sizeof detail, "created an object");
            ok = 0;
            vki_conv_destroy(conv);
        }
        error_result("isa -1 with VKINFER_CPU_ISA unknown", "default", ok, detail);
    }
    setenv("VKINFER_CPU_THREADS", "3", 1);
    snprintf(detail, sizeof detail, "vki_default_threads() = %u with VKINFER_CPU_THREADS=3", vki_default_threads());
    error_result("VKINFER_CPU_THREADS=3", "default", vki_default_threads() == 3, detail);

    if (saved_isa)
        setenv("VKINFER_CPU_ISA", isa_copy, 1);
    else
        unsetenv("VKINFER_CPU_ISA");
    if (saved_threads)
        setenv("VKINFER_CPU_THREADS", threads_copy, 1);
    else
        unsetenv("VKINFER_CPU_THREADS");
}

static void error_paths(void)
{
    for (size_t i = 0; i < sizeof e_weights; i++)
        e_weights[i] = (uint8_t)(i * 37 + 11);
    for (size_t i = 0; i < sizeof e_x; i++)
        e_x[i] = (uint8_t)(i * 53 + 7);
    vki_conv_desc d;
    char detail[512];

    /* The base description must work, or every rejection below would prove nothing. */
    {
        vki_conv* conv = NULL;
        d = base_desc();
        vki_status st = vki_conv_create(&d, &conv);
        uint8_t y[EH * EW * EM];
        if (st == VKI_OK)
            st = vki_conv_run(conv, e_x, y, 1);
        snprintf(detail, sizeof detail, "the valid base convolution failed: %d (%s)", (int)st, vki_last_error());
        error_result("valid base convolution", "default", st == VKI_OK && conv, detail);
        vki_conv_destroy(conv);
    }

    expect_create_error("NULL desc", NULL, VKI_EINVAL);
    d = base_desc();
    {
        vki_status st = vki_conv_create(&d, NULL);
        int ok = explain_failure("NULL out pointer", st, VKI_EINVAL, detail, sizeof detail);
        error_result("NULL out pointer", "default", ok, detail);
    }
#define BAD(what, change)                                                                                      \
    do {                                                                                                       \
        d = base_desc();                                                                                       \
        change;                                                                                                \
        expect_create_error(what, &d, VKI_EINVAL);                                                             \
    } while (0)
    BAD("groups not dividing c", (d.groups = 3, d.m = 6));
    BAD("groups not dividing m", (d.groups = 2, d.m = 3));
    BAD("groups = 0", d.groups = 0);
    BAD("stride h = 0", d.sh = 0);
    BAD("stride w = 0", d.sw = 0);
    BAD("dilation h = 0", d.dh = 0);
    BAD("dilation w = 0", d.dw = 0);
    BAD("kernel height 0", d.kh = 0);
    BAD("kernel larger than padded input (h)", (d.kh = 8, d.pt = 1, d.pb = 1));
    BAD("kernel larger than padded input (w)", (d.kw = 6, d.pl = 0, d.pr = 0));
    BAD("dilated kernel larger than padded input", (d.dh = 4, d.pt = 0, d.pb = 1));
    BAD("NULL weights", d.weights = NULL);
    BAD("NULL w_zp", d.w_zp = NULL);
    BAD("NULL bias", d.bias = NULL);
    BAD("NULL scale", d.scale = NULL);
    BAD("x_zp = 256", d.x_zp = 256);
    BAD("x_zp = -1", d.x_zp = -1);
    BAD("y_lo > y_hi", (d.y_lo = 10, d.y_hi = 9, d.y_zp = 9));
    BAD("y_hi = 256", (d.y_lo = 0, d.y_hi = 256));
    BAD("y_lo = -129", d.y_lo = -129);
    {
        static const int32_t zp_s8[EM] = {0, 128, 0, 0}; /* out of int8's range */
        static const int32_t zp_u8[EM] = {0, 0, -1, 0};  /* out of uint8's range */
        static const float nan_scale[EM] = {0.5f, NAN, 1.0f, 1.0f};
        static const float neg_scale[EM] = {0.5f, 1.0f, -1.0f, 1.0f};
        static const float inf_scale[EM] = {INFINITY, 1.0f, 1.0f, 1.0f};
        BAD("int8 w_zp = 128", d.w_zp = zp_s8);
        BAD("uint8 w_zp = -1", (d.w_signed = 0, d.w_zp = zp_u8));
        BAD("NaN scale", d.scale = nan_scale);
        BAD("negative scale", d.scale = neg_scale);
        BAD("infinite scale", d.scale = inf_scale);
    }
    /* An index past the list is a bad argument; "unsupported" is accepted too. */
    BAD("isa = -2", d.isa = -2);
    d = base_desc();
    d.isa = vki_isa_count();
    {
        vki_conv* conv = NULL;
        vki_status st = vki_conv_create(&d, &conv);
        int ok = explain_failure("isa index = vki_isa_count()", st, -1, detail, sizeof detail);
        if (conv) {
            snprintf(detail, sizeof detail, "out-of-range isa created an object");
            ok = 0;
            vki_conv_destroy(conv);
        }
        error_result("isa index = vki_isa_count()", "out-of-range", ok, detail);
    }
    for (int32_t i = 0; i < vki_isa_count(); i++) {
        if (vki_isa_available(i))
            continue;
        char what[96];
        snprintf(what, sizeof what, "unavailable isa %s", vki_isa_name(i));
        d = base_desc();
        d.isa = i;
        expect_create_error(what, &d, VKI_EUNSUPPORTED);
    }
    env_checks();
    {
        int ok = vki_isa_available(-1) == 0 && vki_isa_available(vki_isa_count()) == 0;
        (void)vki_isa_name(-1); /* must not crash; the result is unspecified */
        (void)vki_isa_name(vki_isa_count());
        error_result("vki_isa_available out of range", "out-of-range", ok, "returned nonzero");
        ok = vki_default_threads() >= 1;
        error_result("vki_default_threads >= 1", "default", ok, "returned 0");
    }

    /* Run-time arguments. */
    {
        vki_conv* conv = NULL;
        d = base_desc();
        uint8_t y[EH * EW * EM];
        vki_status st = vki_conv_create(&d, &conv);
        if (st != VKI_OK) {
            error_result("run argument checks", "default", 0, "could not create the base convolution");
        } else {
            st = vki_conv_run(NULL, e_x, y, 1);
            error_result("run with NULL conv", "default",
                         explain_failure("run with NULL conv", st, VKI_EINVAL, detail, sizeof detail),
                         detail);
            st = vki_conv_run(conv, NULL, y, 1);
            error_result("run with NULL x", "default",
                         explain_failure("run with NULL x", st, VKI_EINVAL, detail, sizeof detail),
                         detail);
            st = vki_conv_run(conv, e_x, NULL, 1);
            error_result("run with NULL y", "default",
                         explain_failure("run with NULL y", st, VKI_EINVAL, detail, sizeof detail),
                         detail);
            /* After rejected runs the object still works. */
            st = vki_conv_run(conv, e_x, y, 2);
            snprintf(detail, sizeof detail, "returned %d (%s)", (int)st, vki_last_error());
            error_result("run after rejected runs", "default", st == VKI_OK, detail);
        }
        vki_conv_destroy(conv);
        vki_conv_destroy(NULL); /* like free(NULL) */
    }

    /* vki_last_error() is per thread: another thread's failure must not replace ours. */
    {
        vki_conv* conv = NULL;
        vki_status st = vki_conv_create(NULL, &conv);
        char mine[512];
        snprintf(mine, sizeof mine, "%s", vki_last_error() ? vki_last_error() : "");
        thread_msg other = {""};
        pthread_t th;
        int ok = st != VKI_OK && pthread_create(&th, NULL, other_thread_error, &other) == 0;
        if (ok) {
            pthread_join(th, NULL);
            const char* now = vki_last_error();
            /* Only meaningful when the two failures have different messages. */
            ok = strcmp(mine, other.msg) == 0 || (now && strcmp(now, mine) == 0);
        }
        snprintf(detail, sizeof detail, "main thread's message \"%.200s\" became \"%.200s\"", mine, vki_last_error());
        error_result("vki_last_error is per thread", "default", ok, detail);
    }
#undef BAD
}

/* ---------------------------------------------------------------- main */

int main(int argc, char** argv)
{
    const char* path = NULL;
    const char* filter = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-k") == 0 && i + 1 < argc)
            filter = argv[++i];
        else if (!path)
            path = argv[i];
        else
            path = NULL, i = argc;
    }
    if (!path) {
        fprintf(stderr, "usage: %s VECTORS [-k SUBSTRING]\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!DRIVER_ASAN) {
        /* ASan reports faults itself, with a stack trace; keep its handlers there. */
        signal(SIGSEGV, on_fatal);
        signal(SIGBUS, on_fatal);
        signal(SIGILL, on_fatal);
        signal(SIGFPE, on_fatal);
    }

    int32_t count = vki_isa_count();
    int32_t variants[64];
    int nvariants = 0;
    printf("variants:");
    for (int32_t i = 0; i < count && nvariants < 64; i++) {
        if (vki_isa_available(i) == 1) {
            variants[nvariants++] = i;
            printf(" %s", vki_isa_name(i));
        }
    }
    printf("\nunavailable variants:");
    for (int32_t i = 0; i < count; i++)
        if (vki_isa_available(i) != 1)
            printf(" %s", vki_isa_name(i));
    int32_t def = vki_isa_default();
    printf("\ndefault variant: %s, default threads: %u\n", def >= 0 ? vki_isa_name(def) : "(none)",
           vki_default_threads());

    set_current("error-path checks");
    error_paths();

    size_t size = 0;
    uint8_t* file = read_file(path, &size);
    unsigned read_cases = 0, ran_cases = 0;
    if (file) {
        reader r = {file, size, 0};
        const uint8_t* magic = take(&r, 8);
        uint32_t version = get_u32(&r), ncases = get_u32(&r);
        if (!magic || memcmp(magic, "VKICONV\0", 8) != 0 || version != 1) {
            fprintf(stderr, "conv_driver: %s is not a version 1 vector file\n", path);
        } else {
            for (uint32_t i = 0; i < ncases; i++) {
                tcase t;
                if (!read_case(&r, &t, i)) {
                    free_case(&t);
                    g_failed++; /* a corrupt file must not pass */
                    break;
                }
                read_cases++;
                if (!filter || strstr(t.name, filter)) {
                    run_case(&t, variants, nvariants);
                    ran_cases++;
                }
                free_case(&t);
            }
            if (read_cases == ncases && r.left != 0) {
                fprintf(stderr, "conv_driver: %zu unexpected bytes after the last case\n", r.left);
                g_failed++;
            }
        }
        free(file);
    }
    printf("cases: %u read, %u run\n", read_cases, ran_cases);
    printf("kernels:");
    for (size_t i = 0; i < sizeof g_kernels / sizeof g_kernels[0] && g_kernels[i].name[0]; i++)
        printf(" %s=%u", g_kernels[i].name, g_kernels[i].runs);
    printf("\n");
    printf("cpu driver: %u passed, %u failed\n", g_passed, g_failed);
    return g_failed > 0 || ran_cases == 0 || nvariants == 0 ? 1 : 0;
}
