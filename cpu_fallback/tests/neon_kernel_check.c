/* Standalone unit test of the NEON microkernels (kernels_neon.c) against a scalar reference:
 * exact int64-checked sums of (x - x_zp) * w16 requantized with vki_requant_scalar, low byte kept.
 * It does not use the operator (conv.c): it builds packed blocks per the layouts in internal.h.
 *
 * Why one file: it is one static test program cross-built for AArch64 and ARMv7 and run under qemu; its
 * kernel checks share the guard-page allocator and the block packers.
 *
 * Memory discipline is checked strictly: by default every activation row, weight block and output
 * buffer is placed against a PROT_NONE guard page (alternately right before one and right after
 * one), so any read or write outside the valid bytes faults, also under qemu-user. Build with
 * -DNEON_CHECK_MALLOC to use plain malloc of the exact sizes instead (e.g. for ASan builds).
 *
 * Usage: neon_check [seed] [iterations] [required variants, comma separated]
 * A variant the CPU cannot run is skipped with "<name>: not available on this CPU, skipped", unless it is
 * listed as required: then the check fails (e.g. "neon,neon_a7x,neon_dot" under qemu-aarch64 -cpu max).
 */
#define _DEFAULT_SOURCE /* mmap's MAP_ANONYMOUS with -std=c11 */
#include "internal.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !defined(NEON_CHECK_MALLOC)
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>
#endif

/* Declared here too: internal.h declares vki_isa_neon only when __ARM_NEON is defined, while an
 * ARMv7 build may compile kernels_neon.c with NEON enabled by pragma (no -mfpu=neon). */
extern const vki_isa vki_isa_neon;
#if defined(__aarch64__)
extern const vki_isa vki_isa_neon_a7x; /* second variant, AArch64 only */
extern const vki_isa vki_isa_neon_dot; /* ARMv8.2 dot product (kernels_neon_dot.c), AArch64 only */
#endif

/* ------------------------------------------------------------------------------------------------
 * Deterministic PRNG (xorshift64*) so a failing case can be replayed from the seed. */

static uint64_t rng_state;

static uint64_t rng_next(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

static uint32_t rnd(uint32_t n) /* uniform-ish in [0, n) */
{
    return (uint32_t)((rng_next() >> 32) % n);
}

static int32_t rnd_range(int32_t lo, int32_t hi) /* inclusive */
{
    return lo + (int32_t)rnd((uint32_t)(hi - lo + 1));
}

/* ------------------------------------------------------------------------------------------------
 * Guarded allocations: all live allocations of one test case are released by free_all(). */

typedef struct {
    void* base;
    size_t len;
} alloc_rec;

static alloc_rec allocs[512];
static size_t nallocs;

static void* galloc(size_t n)
{
    if (nallocs == sizeof allocs / sizeof allocs[0]) {
        fprintf(stderr, "too many allocations\n");
        exit(2);
    }
#if defined(NEON_CHECK_MALLOC)
    void* p = malloc(n ? n : 1);
    if (!p) {
        perror("malloc");
        exit(2);
    }
    allocs[nallocs].base = p;
    allocs[nallocs].len = n;
    nallocs++;
    return p;
#else
    static size_t page;
    if (!page)
        page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t data_pages = (n + page - 1) / page + (n == 0);
    const size_t len = (data_pages + 1) * page;
    uint8_t* base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    allocs[nallocs].base = base;
    allocs[nallocs].len = len;
    nallocs++;
    /* Alternate: buffer ends at a guard page (catches over-reads, the common bug), or starts right
     * after one (catches reads before the start). The packed blocks' sizes are multiples of 16, so
     * they stay aligned in both placements. */
    if (rnd(4) != 0) {
        if (mprotect(base + data_pages * page, page, PROT_NONE) != 0) {
            perror("mprotect");
            exit(2);
        }
        return base + data_pages * page - n;
    }
    if (mprotect(base, page, PROT_NONE) != 0) {
        perror("mprotect");
        exit(2);
    }
    return base + page;
#endif
}

#if !defined(NEON_CHECK_MALLOC)
/* The case being run, for the fault report (a guard-page hit means an out-of-bounds access). */
static char current_case[256];

static void on_fault(int sig, siginfo_t* info, void* ctx)
{
    (void)ctx;
    fprintf(stderr, "FAULT (signal %d) at address %p: out-of-bounds access in %s\n", sig, info->si_addr,
            current_case);
    printf("neon kernels: 0 passed, 1 failed (fault)\n");
    fflush(stdout);
    _exit(1);
}

static void install_fault_handler(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGBUS, &sa, NULL);
}
#define SET_CASE(...) snprintf(current_case, sizeof current_case, __VA_ARGS__)
#else
#define SET_CASE(...) ((void)0)
#endif

static void free_all(void)
{
    for (size_t i = 0; i < nallocs; i++) {
#if defined(NEON_CHECK_MALLOC)
        free(allocs[i].base);
#else
        munmap(allocs[i].base, allocs[i].len);
#endif
    }
    nallocs = 0;
}

/* ------------------------------------------------------------------------------------------------
 * Random parameters */

static long n_ties, n_clamped, n_checked;

static vki_qparams random_qparams(void)
{
    vki_qparams q;
    const int32_t lo = rnd(2) ? 0 : -128; /* uint8 or int8 output domain */
    const int32_t hi = lo + 255;
    q.x_zp = rnd(8) == 0 ? (rnd(2) ? 0 : 255) : rnd_range(0, 255);
    q.y_zp = rnd_range(lo, hi);
    int32_t y_lo = lo, y_hi = hi;
    if (rnd(2)) { /* a narrower clamp, e.g. a fused ReLU/ReLU6 */
        y_lo = rnd_range(lo, q.y_zp);
        y_hi = rnd_range(q.y_zp, hi);
    }
    q.fmin = (float)(y_lo - q.y_zp);
    q.fmax = (float)(y_hi - q.y_zp);
    return q;
}

/* A scale that maps accumulators of magnitude ~`mag` onto a few hundred output steps, drawn from
 * powers of two (exact products: frequent ties), random mantissas, zero and subnormals. */
static float random_scale(int64_t mag)
{
    int bits = 0;
    while (mag > 0) {
        bits++;
        mag >>= 1;
    }
    const int e = bits - 7 + rnd_range(-1, 4); /* scale ~ 2^-e: max |acc| -> 2^-2..2^4 x 128 */
    switch (rnd(16)) {
    case 0:
        return 0.0f;
    case 1:
        return ldexpf(1.0f + (float)rnd(1000) / 1000.0f, -140); /* subnormal */
    case 2:
        return 1.0f;
    case 3:
    case 4:
    case 5:
    case 6:
    case 7:
        return ldexpf(1.0f, -e);
    case 8:
        return ldexpf(1.5f, -e); /* still exact for small products: ties at quarter steps */
    default:
        return ldexpf(1.0f + (float)(rng_next() >> 41) / (float)(1u << 23), -e);
    }
}

static int16_t random_weight(int mode)
{
    switch (mode) {
    case 0:
        return (int16_t)rnd_range(-255, 255);
    case 1:
        return (int16_t)rnd_range(-4, 4);
    default:
        return rnd(2) ? 255 : -255;
    }
}

static uint8_t random_act(int mode)
{
    switch (mode) {
    case 0:
        return (uint8_t)rnd(256);
    case 1:
        return (uint8_t)rnd_range(120, 136);
    default:
        return rnd(2) ? 255 : 0;
    }
}

static uint8_t* random_row(size_t n, int mode)
{
    uint8_t* p = galloc(n);
    for (size_t i = 0; i < n; i++)
        p[i] = random_act(mode);
    return p;
}

static uint8_t* zp_row(size_t n, int32_t x_zp)
{
    uint8_t* p = galloc(n);
    memset(p, x_zp, n);
    return p;
}

/* Reference for one output element; also collects coverage statistics. */
static uint8_t ref_requant(int64_t acc64, float scale, const vki_qparams* q)
{
    if (acc64 < INT32_MIN || acc64 > INT32_MAX) {
        fprintf(stderr, "test bug: accumulator overflow\n");
        exit(2);
    }
    const int32_t acc = (int32_t)acc64;
    const float f = (float)acc * scale;
    if (f < q->fmin || f > q->fmax)
        n_clamped++;
    else if (f - floorf(f) == 0.5f)
        n_ties++;
    n_checked++;
    return (uint8_t)(vki_requant_scalar(acc, scale, q) & 0xFF);
}

static int report_mismatch(const char* what, const char* isa, uint64_t seed, long iter)
{
    fprintf(stderr, "MISMATCH in %s (%s), seed %llu, iteration %ld\n", what, isa, (unsigned long long)seed, iter);
    return 1;
}

/* ------------------------------------------------------------------------------------------------
 * igemm */

/* One igemm call with the given shape and data modes; returns 0 on success. `force_scale` >= 0
 * replaces the random scales (directed rounding tests). */
static int check_igemm(const vki_isa* isa, size_t mr, size_t nc, size_t kc, size_t ks, int wmode, int amode,
                       const vki_qparams* q, int32_t bias_base, float force_scale)
{
    const size_t MR = isa->mr, NR = isa->nr, KR = isa->kr;
    const size_t kg = (kc + KR - 1) / KR;

    /* Activation rows: a small pool of distinct random rows plus one row of x_zp (padding). */
    uint8_t* pool[6];
    const size_t npool = 1 + rnd(6);
    for (size_t i = 0; i < npool; i++)
        pool[i] = random_row(kc, amode);
    uint8_t* zrow = zp_row(kc, q->x_zp);
    const uint8_t** a = malloc(ks * MR * sizeof *a);
    for (size_t t = 0; t < ks; t++) {
        for (size_t i = 0; i < mr; i++)
            a[t * MR + i] = rnd(4) == 0 ? zrow : pool[rnd((uint32_t)npool)];
        for (size_t i = mr; i < MR; i++)
            a[t * MR + i] = a[t * MR + rnd((uint32_t)mr)]; /* repeats a valid row */
    }

    /* Packed weights: int32 bias[NR]; float scale[NR]; int16 wt[ks][kg][NR][KR]. */
    const size_t wbytes = NR * 4 + NR * 4 + ks * kg * NR * KR * 2;
    uint8_t* wblock = galloc(wbytes);
    int32_t* bias = (int32_t*)wblock;
    float* scale = (float*)(wblock + NR * 4);
    int16_t* wt = (int16_t*)(wblock + NR * 8);
    memset(wblock, 0, wbytes);
    for (size_t n = 0; n < nc; n++)
        bias[n] = bias_base + (rnd(4) == 0 ? 0 : rnd_range(-(1 << 20), 1 << 20)) * (bias_base == 0);
    for (size_t t = 0; t < ks; t++)
        for (size_t k = 0; k < kc; k++)
            for (size_t n = 0; n < nc; n++)
                wt[((t * kg + k / KR) * NR + n) * KR + k % KR] = random_weight(wmode);

    /* Reference accumulators. */
    int64_t* acc = malloc(MR * NR * sizeof *acc);
    for (size_t i = 0; i < mr; i++)
        for (size_t n = 0; n < nc; n++) {
            int64_t s = bias[n];
            for (size_t t = 0; t < ks; t++)
                for (size_t k = 0; k < kc; k++)
                    s += (int64_t)((int32_t)a[t * MR + i][k] - q->x_zp) *
                         wt[((t * kg + k / KR) * NR + n) * KR + k % KR];
            acc[i * NR + n] = s;
        }
    for (size_t n = 0; n < nc; n++) {
        int64_t mag = 0;
        for (size_t i = 0; i < mr; i++)
            mag = llabs(acc[i * NR + n]) > mag ? llabs(acc[i * NR + n]) : mag;
        scale[n] = force_scale >= 0 ? force_scale : random_scale(mag);
    }
    /* Padding channels n >= nc keep zero weights; give them junk bias/scale anyway: the kernel may
     * compute those lanes but must not store them. */
    for (size_t n = nc; n < NR; n++) {
        bias[n] = (int32_t)rng_next();
        scale[n] = 1.0f;
    }

    /* Output: exactly the bytes the kernel may write, framed by guard pages; the gaps between rows
     * are filled with a pattern that must survive. */
    const size_t c_stride = nc + rnd(9);
    const size_t cbytes = (mr - 1) * c_stride + nc;
    uint8_t* c = galloc(cbytes);
    uint8_t* pattern = malloc(cbytes);
    for (size_t i = 0; i < cbytes; i++)
        c[i] = pattern[i] = (uint8_t)rng_next();

    SET_CASE("igemm %s mr=%zu nc=%zu kc=%zu ks=%zu c_stride=%zu", isa->name, mr, nc, kc, ks, c_stride);
    isa->igemm(mr, nc, kc, ks, a, wblock, c, c_stride, q);

    int bad = 0;
    for (size_t i = 0; i < cbytes && !bad; i++) {
        const size_t row = i / c_stride, col = i % c_stride;
        uint8_t want;
        if (col < nc)
            want = ref_requant(acc[row * NR + col], scale[col], q);
        else
            want = pattern[i];
        if (c[i] != want) {
            fprintf(stderr,
                    "igemm %s: mr=%zu nc=%zu kc=%zu ks=%zu stride=%zu row=%zu col=%zu: got %u want %u "
                    "(acc=%lld scale=%a x_zp=%d y_zp=%d fmin=%g fmax=%g)\n",
                    isa->name, mr, nc, kc, ks, c_stride, row, col, c[i], want,
                    col < nc ? (long long)acc[row * NR + col] : 0LL, col < nc ? (double)scale[col] : 0.0, q->x_zp,
                    q->y_zp, (double)q->fmin, (double)q->fmax);
            bad = 1;
        }
    }
    free(pattern);
    free(acc);
    free(a);
    free_all();
    return bad;
}

/* ------------------------------------------------------------------------------------------------
 * igemm_u8s8 (internal.h): int8 weights (w - w_zp) in the variant's [u8s8_wmin, u8s8_wmax], packed
 * int32 bias'[NR]; float scale[NR]; int8 wt[ks][ceil(kc / 4)][NR][4], with the bias correction conv.c
 * folds in: bias' = bias - (x_zp - u8s8_xoff) * sum(w) modulo 2^32. The reference is the exact
 * bias + sum (x - x_zp) * (w - w_zp) (int64, then checked to fit int32), so the check covers the
 * folding and the kernel's wrapping int32 sums together. */

static void u8s8_range(const vki_isa* isa, int32_t* lo, int32_t* hi)
{
    *lo = isa->u8s8_wmin, *hi = isa->u8s8_wmax;
    if (*lo == 0 && *hi == 0)
        *lo = -VKI_U8S8_WMAX, *hi = VKI_U8S8_WMAX;
}

/* Weights in [lo, hi]: uniform, small, only the two extremes, or half extremes. */
static int8_t random_weight8(int mode, int32_t lo, int32_t hi)
{
    switch (mode) {
    case 0:
        return (int8_t)rnd_range(lo, hi);
    case 1:
        return (int8_t)rnd_range(-4, 4);
    case 2:
        return (int8_t)(rnd(2) ? hi : lo);
    default:
        return (int8_t)(rnd(2) ? rnd_range(lo, hi) : rnd(2) ? hi : lo);
    }
}

/* bias_mode: 0 random small, 1 = bias_base (directed sweeps), 2 anywhere such that every exact sum of the
 * channel still fits int32 (large biases, so the kernel's int32 sums wrap). */
static int check_igemm_u8s8(const vki_isa* isa, size_t mr, size_t nc, size_t kc, size_t ks, int wmode, int amode,
                            const vki_qparams* q, int bias_mode, int32_t bias_base, float force_scale)
{
    const size_t MR = isa->u8s8_mr ? isa->u8s8_mr : isa->mr, NR = isa->u8s8_nr ? isa->u8s8_nr : isa->nr;
    const size_t KR = VKI_U8S8_KR, kg = (kc + KR - 1) / KR;
    int32_t wlo, whi;
    u8s8_range(isa, &wlo, &whi);

    uint8_t* pool[6];
    const size_t npool = 1 + rnd(6);
    for (size_t i = 0; i < npool; i++)
        pool[i] = random_row(kc, amode);
    uint8_t* zrow = zp_row(kc, q->x_zp);
    const uint8_t** a = malloc(ks * MR * sizeof *a);
    for (size_t t = 0; t < ks; t++) {
        for (size_t i = 0; i < mr; i++)
            a[t * MR + i] = rnd(4) == 0 ? zrow : pool[rnd((uint32_t)npool)];
        for (size_t i = mr; i < MR; i++)
            a[t * MR + i] = a[t * MR + rnd((uint32_t)mr)]; /* repeats a valid row */
    }

    const size_t wbytes = NR * 8 + ks * kg * NR * KR;
    uint8_t* wblock = galloc(wbytes);
    memset(wblock, 0, wbytes);
    int32_t* bias = (int32_t*)wblock;
    float* scale = (float*)(wblock + NR * 4);
    int8_t* wt = (int8_t*)(wblock + NR * 8);
    for (size_t t = 0; t < ks; t++)
        for (size_t k = 0; k < kc; k++)
            for (size_t n = 0; n < nc; n++)
                wt[((t * kg + k / KR) * NR + n) * KR + k % KR] = random_weight8(wmode, wlo, whi);

    /* Exact sums without bias, then the bias, then the packed bias'. */
    int64_t* acc = malloc(MR * NR * sizeof *acc);
    for (size_t n = 0; n < nc; n++) {
        int64_t smin = INT64_MAX, smax = INT64_MIN, wsum = 0;
        for (size_t t = 0; t < ks; t++)
            for (size_t k = 0; k < kc; k++)
                wsum += wt[((t * kg + k / KR) * NR + n) * KR + k % KR];
        for (size_t i = 0; i < mr; i++) {
            int64_t s = 0;
            for (size_t t = 0; t < ks; t++) {
                const uint8_t* row = a[t * MR + i];
                const int8_t* wk = wt + t * kg * NR * KR + n * KR;
                for (size_t k = 0; k < kc; k++)
                    s += (int64_t)((int32_t)row[k] - q->x_zp) * wk[(k / KR) * NR * KR + k % KR];
            }
            acc[i * NR + n] = s;
            smin = s < smin ? s : smin;
            smax = s > smax ? s : smax;
        }
        int64_t b;
        if (bias_mode == 1) {
            b = bias_base;
        } else if (bias_mode == 2) {
            int64_t lo = (int64_t)INT32_MIN - smin, hi = (int64_t)INT32_MAX - smax; /* lo <= hi: |s| < 2^31 */
            lo = lo < INT32_MIN ? INT32_MIN : lo;
            hi = hi > INT32_MAX ? INT32_MAX : hi;
            b = lo + (int64_t)(rng_next() % (uint64_t)(hi - lo + 1));
            if (rnd(4) == 0)
                b = rnd(2) ? lo : hi; /* a sum lands exactly on INT32_MIN or INT32_MAX */
        } else {
            b = rnd(4) == 0 ? 0 : rnd_range(-(1 << 20), 1 << 20);
        }
        if (b < INT32_MIN || b > INT32_MAX) {
            fprintf(stderr, "test bug: bias out of int32 range\n");
            exit(2);
        }
        for (size_t i = 0; i < mr; i++)
            acc[i * NR + n] += b;
        bias[n] = (int32_t)(uint32_t)((uint64_t)(uint32_t)(int32_t)b -
                                      (uint64_t)((int64_t)(q->x_zp - isa->u8s8_xoff) * wsum));
    }
    for (size_t n = 0; n < nc; n++) {
        int64_t mag = 0;
        for (size_t i = 0; i < mr; i++)
            mag = llabs(acc[i * NR + n]) > mag ? llabs(acc[i * NR + n]) : mag;
        scale[n] = force_scale >= 0 ? force_scale : random_scale(mag);
    }
    for (size_t n = nc; n < NR; n++) {
        bias[n] = (int32_t)rng_next();
        scale[n] = 1.0f;
    }

    const size_t c_stride = nc + rnd(9);
    const size_t cbytes = (mr - 1) * c_stride + nc;
    uint8_t* c = galloc(cbytes);
    uint8_t* pattern = malloc(cbytes);
    for (size_t i = 0; i < cbytes; i++)
        c[i] = pattern[i] = (uint8_t)rng_next();

    SET_CASE("igemm_u8s8 %s mr=%zu nc=%zu kc=%zu ks=%zu c_stride=%zu", isa->name, mr, nc, kc, ks, c_stride);
    isa->igemm_u8s8(mr, nc, kc, ks, a, wblock, c, c_stride, q);

    int bad = 0;
    for (size_t i = 0; i < cbytes && !bad; i++) {
        const size_t row = i / c_stride, col = i % c_stride;
        const uint8_t want = col < nc ? ref_requant(acc[row * NR + col], scale[col], q) : pattern[i];
        if (c[i] != want) {
            fprintf(stderr,
                    "igemm_u8s8 %s: mr=%zu nc=%zu kc=%zu ks=%zu stride=%zu row=%zu col=%zu: got %u want %u "
                    "(acc=%lld scale=%a x_zp=%d y_zp=%d fmin=%g fmax=%g)\n",
                    isa->name, mr, nc, kc, ks, c_stride, row, col, c[i], want,
                    col < nc ? (long long)acc[row * NR + col] : 0LL, col < nc ? (double)scale[col] : 0.0, q->x_zp,
                    q->y_zp, (double)q->fmin, (double)q->fmax);
            bad = 1;
        }
    }
    free(pattern);
    free(acc);
    free(a);
    free_all();
    return bad;
}

/* ------------------------------------------------------------------------------------------------
 * depthwise */

static int check_dw(const vki_isa* isa, vki_dw_fn fn, const char* fname, size_t channels, size_t ks, int wmode,
                    int amode, const vki_qparams* q)
{
    const size_t CR = isa->cr;
    const size_t cp = (channels + CR - 1) / CR * CR;

    uint8_t* pool[6];
    const size_t npool = 1 + rnd(6);
    for (size_t i = 0; i < npool; i++)
        pool[i] = random_row(channels, amode);
    uint8_t* zrow = zp_row(channels, q->x_zp);
    const uint8_t** a = malloc(ks * sizeof *a);
    for (size_t t = 0; t < ks; t++)
        a[t] = rnd(4) == 0 ? zrow : pool[rnd((uint32_t)npool)];

    /* int32 bias[cp]; float scale[cp]; int16 wt[ks][cp], zero padded. */
    const size_t wbytes = cp * 8 + ks * cp * 2;
    uint8_t* wblock = galloc(wbytes);
    memset(wblock, 0, wbytes);
    int32_t* bias = (int32_t*)wblock;
    float* scale = (float*)(wblock + cp * 4);
    int16_t* wt = (int16_t*)(wblock + cp * 8);
    for (size_t ch = 0; ch < channels; ch++)
        bias[ch] = rnd(4) == 0 ? 0 : rnd_range(-(1 << 20), 1 << 20);
    for (size_t t = 0; t < ks; t++)
        for (size_t ch = 0; ch < channels; ch++)
            wt[t * cp + ch] = random_weight(wmode);

    int64_t* acc = malloc(channels * sizeof *acc);
    for (size_t ch = 0; ch < channels; ch++) {
        int64_t s = bias[ch];
        for (size_t t = 0; t < ks; t++)
            s += (int64_t)((int32_t)a[t][ch] - q->x_zp) * wt[t * cp + ch];
        acc[ch] = s;
        scale[ch] = random_scale(llabs(s));
    }

    uint8_t* y = galloc(channels);
    memset(y, 0xA5, channels);
    SET_CASE("%s %s channels=%zu ks=%zu", fname, isa->name, channels, ks);
    fn(channels, ks, a, wblock, y, q);

    int bad = 0;
    for (size_t ch = 0; ch < channels && !bad; ch++) {
        const uint8_t want = ref_requant(acc[ch], scale[ch], q);
        if (y[ch] != want) {
            fprintf(stderr,
                    "%s %s: channels=%zu ks=%zu ch=%zu: got %u want %u (acc=%lld scale=%a x_zp=%d y_zp=%d "
                    "fmin=%g fmax=%g)\n",
                    fname, isa->name, channels, ks, ch, y[ch], want, (long long)acc[ch], (double)scale[ch], q->x_zp,
                    q->y_zp, (double)q->fmin, (double)q->fmax);
            bad = 1;
        }
    }
    free(acc);
    free(a);
    free_all();
    return bad;
}

/* ------------------------------------------------------------------------------------------------
 * dw_u8s8 (internal.h): depthwise over a run of pixels, a[p * ks + t], y + p * y_stride, with the block
 * the variant's own dw_u8s8_pack writes from wt[ks][channels] = (w - w_zp), bias' (corrected as conv.c
 * does) and scale. Reference: the exact bias + sum (x - x_zp) * (w - w_zp). */
static int check_dw_u8s8(const vki_isa* isa, size_t pixels, size_t channels, size_t ks, int wmode, int amode,
                         const vki_qparams* q)
{
    int32_t wlo, whi;
    u8s8_range(isa, &wlo, &whi);
    uint8_t* pool[6];
    const size_t npool = 1 + rnd(6);
    for (size_t i = 0; i < npool; i++)
        pool[i] = random_row(channels, amode);
    uint8_t* zrow = zp_row(channels, q->x_zp);
    const uint8_t** a = malloc(pixels * ks * sizeof *a);
    for (size_t i = 0; i < pixels * ks; i++)
        a[i] = rnd(4) == 0 ? zrow : pool[rnd((uint32_t)npool)];

    int16_t* wt = malloc(ks * channels * sizeof *wt);
    int32_t* bias = malloc(channels * sizeof *bias);
    int32_t* bias1 = malloc(channels * sizeof *bias1);
    float* scale = malloc(channels * sizeof *scale);
    int64_t* acc = malloc(pixels * channels * sizeof *acc);
    for (size_t i = 0; i < ks * channels; i++)
        wt[i] = random_weight8(wmode, wlo, whi);
    for (size_t ch = 0; ch < channels; ch++) {
        int64_t wsum = 0, mag = 0;
        for (size_t t = 0; t < ks; t++)
            wsum += wt[t * channels + ch];
        bias[ch] = rnd(4) == 0 ? 0 : rnd_range(-(1 << 20), 1 << 20);
        bias1[ch] = (int32_t)(uint32_t)((uint64_t)(uint32_t)bias[ch] -
                                        (uint64_t)((int64_t)(q->x_zp - isa->u8s8_xoff) * wsum));
        for (size_t p = 0; p < pixels; p++) {
            int64_t sum = bias[ch];
            for (size_t t = 0; t < ks; t++)
                sum += (int64_t)((int32_t)a[p * ks + t][ch] - q->x_zp) * wt[t * channels + ch];
            acc[p * channels + ch] = sum;
            mag = llabs(sum) > mag ? llabs(sum) : mag;
        }
        scale[ch] = random_scale(mag);
    }

    const size_t bytes = isa->dw_u8s8_pack(channels, ks, wt, bias1, scale, NULL);
    uint8_t* block = galloc(bytes);
    memset(block, 0xCD, bytes); /* conv.c zeroes it; the packer must write every byte the kernel uses */
    int bad = isa->dw_u8s8_pack(channels, ks, wt, bias1, scale, block) != bytes;
    if (bad)
        fprintf(stderr, "dw_u8s8_pack %s: the two calls return different sizes\n", isa->name);

    const size_t y_stride = channels + rnd(9);
    const size_t ybytes = (pixels - 1) * y_stride + channels;
    uint8_t* y = galloc(ybytes);
    uint8_t* pattern = malloc(ybytes);
    for (size_t i = 0; i < ybytes; i++)
        y[i] = pattern[i] = (uint8_t)rng_next();
    SET_CASE("dw_u8s8 %s pixels=%zu channels=%zu ks=%zu y_stride=%zu", isa->name, pixels, channels, ks, y_stride);
    if (!bad)
        isa->dw_u8s8(pixels, channels, ks, a, block, y, y_stride, q);

    for (size_t i = 0; i < ybytes && !bad; i++) {
        const size_t p = i / y_stride, ch = i % y_stride;
        const uint8_t want = ch < channels ? ref_requant(acc[p * channels + ch], scale[ch], q) : pattern[i];
        if (y[i] != want) {
            fprintf(stderr,
                    "dw_u8s8 %s: pixels=%zu channels=%zu ks=%zu stride=%zu p=%zu ch=%zu: got %u want %u "
                    "(acc=%lld scale=%a x_zp=%d y_zp=%d fmin=%g fmax=%g)\n",
                    isa->name, pixels, channels, ks, y_stride, p, ch, y[i], want,
                    ch < channels ? (long long)acc[p * channels + ch] : 0LL, ch < channels ? (double)scale[ch] : 0.0,
                    q->x_zp, q->y_zp, (double)q->fmin, (double)q->fmax);
            bad = 1;
        }
    }
    free(pattern);
    free(acc);
    free(scale);
    free(bias1);
    free(bias);
    free(wt);
    free(a);
    free_all();
    return bad;
}

/* ------------------------------------------------------------------------------------------------ */

int main(int argc, char** argv)
{
    const uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 0) : 20240611u;
    const long iters = argc > 2 ? strtol(argv[2], NULL, 0) : 2000;
    rng_state = seed ? seed : 1;
#if !defined(NEON_CHECK_MALLOC)
    install_fault_handler();
#endif

    const char* required = argc > 3 ? argv[3] : "";
    const vki_isa* isas[] = {
        &vki_isa_neon,
#if defined(__aarch64__)
        &vki_isa_neon_a7x,
        &vki_isa_neon_dot,
#endif
    };
    long passed = 0, failed = 0;
    const size_t igemm_ks[] = {1, 9, 25, 7};

    /* Every required name must be a variant of this build. */
    for (const char* r = required; *r;) {
        const size_t len = strcspn(r, ",");
        int known = 0;
        for (size_t v = 0; v < sizeof isas / sizeof isas[0]; v++)
            known |= strlen(isas[v]->name) == len && strncmp(isas[v]->name, r, len) == 0;
        if (len && !known) {
            fprintf(stderr, "required variant %.*s is not in this build\n", (int)len, r);
            failed++;
        }
        r += len + (r[len] == ',');
    }

    for (size_t v = 0; v < sizeof isas / sizeof isas[0]; v++) {
        const vki_isa* isa = isas[v];
        if (!isa->available()) {
            const size_t len = strlen(isa->name);
            int req = 0;
            for (const char* r = required; *r;) {
                const size_t l = strcspn(r, ",");
                req |= l == len && strncmp(r, isa->name, len) == 0;
                r += l + (r[l] == ',');
            }
            printf("%s: not available on this CPU, skipped\n", isa->name);
            if (req) {
                fprintf(stderr, "%s is required but this CPU cannot run it\n", isa->name);
                failed++;
            }
            continue;
        }
        printf("%s: mr=%u nr=%u kr=%u cr=%u", isa->name, isa->mr, isa->nr, isa->kr, isa->cr);
        if (isa->igemm_u8s8)
            printf(" u8s8: %s mr=%u nr=%u w=[%d, %d] xoff=%d%s", isa->name_u8s8, isa->u8s8_mr, isa->u8s8_nr,
                   isa->u8s8_wmin, isa->u8s8_wmax, isa->u8s8_xoff, isa->dw_u8s8 ? " dw" : "");
        printf("\n");

        /* Directed rounding sweep: kc=1, ks=1, x_zp=0, weights in [-4, 4], so acc = bias + x * w is
         * small and the power-of-two-ish scales make many products exact halves (ties), across the
         * whole clamp range as the bias sweeps. */
        {
            const float scales[] = {0.5f, 0.25f, 0.75f, 1.5f, 1.0f, 0.125f};
            for (size_t s = 0; s < sizeof scales / sizeof scales[0]; s++)
                for (int32_t b = -1200; b <= 1200; b += 37) {
                    vki_qparams q = random_qparams();
                    q.x_zp = 0;
                    int bad = check_igemm(isa, isa->mr, isa->nr, 1, 1, 1, 0, &q, b, scales[s]);
                    bad ? failed++ : passed++;
                    if (bad && failed < 10)
                        report_mismatch("igemm rounding sweep", isa->name, seed, (long)b);
                }
        }

        for (long it = 0; it < iters; it++) {
            const size_t kc = 1 + rnd(70);
            const size_t ks = igemm_ks[rnd(4)];
            const size_t mr = 1 + rnd(isa->mr);
            const size_t nc = rnd(3) == 0 ? isa->nr : 1 + rnd(isa->nr);
            const vki_qparams q = random_qparams();
            const int wmode = (int)rnd(3), amode = (int)rnd(3);
            const int bad = check_igemm(isa, mr, nc, kc, ks, wmode, amode, &q, 0, -1.0f);
            bad ? failed++ : passed++;
            if (bad && failed < 10)
                report_mismatch("igemm", isa->name, seed, it);
        }

        if (isa->igemm_u8s8) {
            const size_t MR = isa->u8s8_mr ? isa->u8s8_mr : isa->mr, NR = isa->u8s8_nr ? isa->u8s8_nr : isa->nr;
            /* Directed rounding sweep, as above, through the bias correction. */
            const float scales[] = {0.5f, 0.25f, 0.75f, 1.5f, 1.0f, 0.125f};
            for (size_t s = 0; s < sizeof scales / sizeof scales[0]; s++)
                for (int32_t b = -1200; b <= 1200; b += 37) {
                    const vki_qparams q = random_qparams();
                    const int bad = check_igemm_u8s8(isa, MR, NR, 1 + rnd(5), 1, 1, 0, &q, 1, b, scales[s]);
                    bad ? failed++ : passed++;
                    if (bad && failed < 10)
                        report_mismatch("igemm_u8s8 rounding sweep", isa->name, seed, (long)b);
                }
            /* Accumulator range: ks * kc > 2^16 with extreme data (|sum| up to 255 * 128 * 65700 < 2^31) and
             * biases that put sums at INT32_MIN / INT32_MAX. */
            const size_t big_ks[] = {1, 9, 25};
            for (long it = 0; it < 12; it++) {
                const size_t ks = big_ks[it % 3];
                const size_t kc = (65537 + ks - 1) / ks + rnd((uint32_t)((65700 - 65537) / ks + 1));
                vki_qparams q = random_qparams();
                if (it % 2)
                    q.x_zp = it % 4 == 1 ? 0 : 255;
                const size_t mr = 1 + rnd((uint32_t)MR), nc = rnd(2) ? NR : 1 + rnd((uint32_t)NR);
                const int bad = check_igemm_u8s8(isa, mr, nc, kc, ks, 2 + (int)rnd(2), it < 6 ? 2 : (int)rnd(3), &q,
                                                 2, 0, -1.0f);
                bad ? failed++ : passed++;
                if (bad && failed < 10)
                    report_mismatch("igemm_u8s8 large K", isa->name, seed, it);
            }
            const size_t u8s8_ks[] = {1, 3, 9, 25, 7};
            for (long it = 0; it < iters; it++) {
                const size_t ks = u8s8_ks[rnd(5)];
                const size_t kc = 1 + (ks <= 3 && rnd(2) ? rnd(600) : rnd(80));
                const size_t mr = 1 + rnd((uint32_t)MR);
                const size_t nc = rnd(3) == 0 ? NR : 1 + rnd((uint32_t)NR);
                vki_qparams q = random_qparams();
                if (rnd(4) == 0)
                    q.x_zp = rnd(2) ? 0 : 255;
                const int bad = check_igemm_u8s8(isa, mr, nc, kc, ks, (int)rnd(4), (int)rnd(3), &q, rnd(4) == 0 ? 2 : 0,
                                                 0, -1.0f);
                bad ? failed++ : passed++;
                if (bad && failed < 10)
                    report_mismatch("igemm_u8s8", isa->name, seed, it);
            }
        }

        if (isa->dw_u8s8) {
            const size_t dks[] = {9, 25, 9, 25, 1, 2, 3, 4, 5, 7, 8, 13};
            for (long it = 0; it < iters; it++) {
                const size_t ks = dks[rnd(12)];
                const size_t channels = 1 + (rnd(4) ? rnd(70) : rnd(300));
                const size_t pixels = 1 + (rnd(2) ? rnd(4) : rnd(20));
                vki_qparams q = random_qparams();
                if (rnd(4) == 0)
                    q.x_zp = rnd(2) ? 0 : 255;
                const int bad = check_dw_u8s8(isa, pixels, channels, ks, (int)rnd(4), (int)rnd(3), &q);
                bad ? failed++ : passed++;
                if (bad && failed < 10)
                    report_mismatch("dw_u8s8", isa->name, seed, it);
            }
        }

        for (long it = 0; it < iters; it++) {
            const size_t channels = 1 + rnd(70);
            const vki_qparams q = random_qparams();
            const int wmode = (int)rnd(3), amode = (int)rnd(3);
            int bad;
            switch (rnd(5)) {
            case 0:
                bad = check_dw(isa, isa->dw9, "dw9", channels, 9, wmode, amode, &q);
                break;
            case 1:
                bad = check_dw(isa, isa->dw25, "dw25", channels, 25, wmode, amode, &q);
                break;
            case 2:
                bad = check_dw(isa, isa->dw_any, "dw_any", channels, 4, wmode, amode, &q);
                break;
            case 3:
                bad = check_dw(isa, isa->dw_any, "dw_any", channels, rnd(2) ? 9 : 25, wmode, amode, &q);
                break;
            default:
                bad = check_dw(isa, isa->dw_any, "dw_any", channels, 1 + rnd(30), wmode, amode, &q);
                break;
            }
            bad ? failed++ : passed++;
            if (bad && failed < 10)
                report_mismatch("dw", isa->name, seed, it);
        }
    }

    printf("coverage: %ld outputs checked, %ld exact ties, %ld clamped\n", n_checked, n_ties, n_clamped);
    printf("neon kernels: %ld passed, %ld failed\n", passed, failed);
    return failed != 0;
}
