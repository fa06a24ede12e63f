/* Standalone check of the x86 SIMD microkernels (kernels_avx2.c, kernels_avx512vnni.c) against a
 * scalar model of the contract in src/internal.h: builds packed weight blocks and indirection rows
 * by hand (independent of conv.c), runs a kernel and compares every output byte with
 * vki_requant_scalar applied to an exact scalar dot product.
 *
 * Why one file: it is a standalone test program built with each ISA's flags by one compiler call; its
 * checks share the hand-built packing helpers, and a split would only add a private header between them.
 *
 * Build and run (AVX2 natively, AVX-512 VNNI through the scalar emulation below):
 *   gcc -O2 -std=c11 -ffp-contract=off -mavx2 -fsanitize=address,undefined -I cpu_fallback/src \
 *       cpu_fallback/tests/x86_kernel_check.c cpu_fallback/src/kernels_avx2.c -lm && ./a.out
 * On a CPU with AVX-512 VNNI, also test the real VNNI kernel: add -DVKI_X86_CHECK_AVX512_NATIVE and
 * link an object of kernels_avx512vnni.c compiled (separately) with its own -mavx512* flags.
 * Arguments: [seed] [bench]. Exit status 1 on any mismatch.
 *
 * Why an emulation: the VNNI kernel cannot execute on CPUs without AVX-512, but its logic (tails,
 * pointer arithmetic, packing, requantization order) can. The kernel file is included here with
 * its AVX-512 intrinsics renamed to scalar functions written from the instruction definitions;
 * emu_self_check() first compares each of them with its AVX2 counterpart on each 256-bit half.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"

/* ------------------------------------------------------------------------------------------------
 * Random numbers (deterministic per seed) and bookkeeping.
 */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t rnd(void)
{
    /* xorshift64*: fast, good enough for test data. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

static size_t rndu(size_t n) { return (size_t)(rnd() % n); }

static int32_t rndi(int32_t lo, int32_t hi)
{
    return (int32_t)((int64_t)lo + (int64_t)(rnd() % (uint64_t)((int64_t)hi - lo + 1)));
}

static float rnd_unit(void) { return (float)(rnd() >> 40) / (float)(1u << 24); } /* [0, 1) */

static long n_pass, n_fail;

static void* xmalloc(size_t n)
{
    void* p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

/* A value of (x - x_zp) or (w - w_zp)'s operands: mostly uniform, sometimes the extremes that make
 * products largest (exactness of 17-bit products and pair sums). */
static uint8_t rnd_act(int mode)
{
    switch (mode) {
    case 0: return 0;
    case 1: return 255;
    case 2: return (uint8_t)(rnd() & 1 ? 255 : 0);
    default: return (uint8_t)rnd();
    }
}

static int16_t rnd_wt(int mode)
{
    switch (mode) {
    case 0: return (int16_t)(rnd() & 1 ? 255 : -255);
    case 1: return (int16_t)((rnd() & 1 ? 255 : -255) * (int)(rnd() & 1));
    default: return (int16_t)rndi(-255, 255);
    }
}

/* Output parameters: uint8 and int8 full ranges, and random narrower clamps (e.g. fused ReLU/ReLU6),
 * with y_zp sometimes outside [y_lo, y_hi] (fmin > 0 or fmax < 0). */
static vki_qparams rnd_qparams(void)
{
    vki_qparams q;
    int32_t lo, hi, zp;
    switch (rndu(4)) {
    case 0: lo = 0, hi = 255, zp = rndi(0, 255); break;
    case 1: lo = -128, hi = 127, zp = rndi(-128, 127); break;
    case 2:
        lo = rndi(-128, 255), hi = rndi(-128, 255), zp = rndi(-128, 255);
        if (lo > hi) {
            int32_t t = lo;
            lo = hi, hi = t;
        }
        break;
    default: zp = rndi(-128, 255), lo = zp, hi = zp + rndi(0, 255 - zp); break;
    }
    q.x_zp = rndi(0, 255);
    if (rndu(8) == 0) q.x_zp = rndu(2) ? 0 : 255;
    q.y_zp = zp;
    q.fmin = (float)(lo - zp);
    q.fmax = (float)(hi - zp);
    return q;
}

/* bias and scale of one output channel, given the channel's dot products over the rows (without
 * bias), chosen so that every requantization regime occurs: ordinary values, exact halves (ties to
 * even), saturation at both ends, scale 0, and accumulators beyond 2^24 where int->float rounds. */
static void rnd_bias_scale(const int32_t* dots, size_t rows, int32_t* bias, float* scale)
{
    int64_t mx = 1;
    for (size_t i = 0; i < rows; i++) mx = llabs((int64_t)dots[i]) > mx ? llabs((int64_t)dots[i]) : mx;
    switch (rndu(7)) {
    case 0: /* ordinary: spread the accumulators over roughly +-200 */
        *bias = rndi(-100000, 100000);
        *scale = 200.0f / (float)(mx + 100000) * (0.5f + 2.0f * rnd_unit());
        break;
    case 1: /* ties: a small accumulator for row 0 and a power-of-two scale makes x.5 common */
        *bias = -dots[0] + rndi(-600, 600);
        *scale = ldexpf(1.0f, -rndi(1, 3));
        break;
    case 2: /* saturation */
        *bias = rndi(-1000, 1000);
        *scale = 1.0f + 1000.0f * rnd_unit();
        break;
    case 3: *bias = rndi(-1000000, 1000000), *scale = 0.0f; break;
    case 4: /* large accumulators: int32 -> float conversion rounds (> 2^24) */
        *bias = rndi(-(1 << 30), 1 << 30);
        *scale = ldexpf(1.0f + rnd_unit(), -rndi(22, 24));
        break;
    case 5: /* a random mantissa */
        *bias = rndi(-5000, 5000);
        *scale = ldexpf(1.0f + rnd_unit(), -rndi(4, 16));
        break;
    default: /* large accumulator exactly on ties: (odd multiple of 2^(e-1)) * 2^-e */
        *bias = -dots[0] + (2 * rndi(-300, 300) + 1) * (1 << 20);
        *scale = ldexpf(1.0f, -21);
        break;
    }
}

/* Bias/scale slots of padded channels are never meant to reach an output: fill them with garbage
 * (including NaN) so that a kernel that stored them would be caught. */
static void garbage_bias_scale(int32_t* bias, float* scale)
{
    uint32_t bits = (uint32_t)rnd();
    *bias = (int32_t)bits;
    bits = (uint32_t)rnd() | 0x7F800001u; /* a NaN */
    memcpy(scale, &bits, 4);
}

/* ------------------------------------------------------------------------------------------------
 * igemm check
 */

/* u8s8: the 7-bit-weight kernel (isa->igemm_u8s8): weights in [-VKI_U8S8_WMAX, VKI_U8S8_WMAX] (the
 * extremes often, as they make VPMADDUBSW's pair sums largest), packed int8 with KR = VKI_U8S8_KR, and
 * the bias slot holding bias - x_zp * sum(w - w_zp); the expected result is the same exact int32. */
static void u8s8_range(const vki_isa* isa, int32_t* lo, int32_t* hi)
{
    *lo = isa->u8s8_wmin, *hi = isa->u8s8_wmax;
    if (*lo == 0 && *hi == 0) *lo = -VKI_U8S8_WMAX, *hi = VKI_U8S8_WMAX;
}

static int16_t rnd_wt7(const vki_isa* isa, int mode)
{
    int32_t lo, hi;
    u8s8_range(isa, &lo, &hi);
    switch (mode) {
    case 0: return (int16_t)(rnd() & 1 ? hi : lo);
    case 1: return (int16_t)((rnd() & 1 ? hi : lo) * (int)(rnd() & 1));
    case 2: return (int16_t)hi; /* all positive: with a = 255 every pair is largest (AVX2: +32640) */
    case 3: return (int16_t)lo;
    default: return (int16_t)rndi(lo, hi);
    }
}

static int check_igemm_kind(const vki_isa* isa, const char* label, size_t mr, size_t nc, size_t kc, size_t ks,
                            int u8s8)
{
    /* u8s8: 1 the u8s8 igemm, 2 its narrow form (at most 16 channels, u8s8_mr_narrow rows, same block) */
    const int narrow = u8s8 == 2;
    const size_t MR = narrow ? isa->u8s8_mr_narrow : u8s8 && isa->u8s8_mr ? isa->u8s8_mr : isa->mr;
    const size_t NR = u8s8 && isa->u8s8_nr ? isa->u8s8_nr : isa->nr;
    const size_t KR = u8s8 ? VKI_U8S8_KR : isa->kr, kcg = (kc + KR - 1) / KR;
    if (mr > MR) mr = MR;
    if (nc > NR) nc = NR;
    if (narrow && nc > 16) nc = 16;
    const size_t wbytes = u8s8 ? 1 : sizeof(int16_t);
    const vki_qparams q = rnd_qparams();

    /* Rows: each exactly kc bytes (ASan catches over-reads); some are the shared zero-point row that
     * padding taps use; rows >= mr repeat a valid row as the operator does. */
    uint8_t* zrow = xmalloc(kc);
    memset(zrow, q.x_zp, kc);
    const uint8_t** a = xmalloc(ks * MR * sizeof(*a));
    uint8_t** owned = xmalloc(ks * MR * sizeof(*owned));
    size_t nowned = 0;
    const int amode = (int)rndu(6);
    for (size_t t = 0; t < ks; t++) {
        for (size_t i = 0; i < mr; i++) {
            if (rndu(5) == 0) {
                a[t * MR + i] = zrow;
            } else {
                uint8_t* r = xmalloc(kc);
                for (size_t k = 0; k < kc; k++) r[k] = rnd_act(amode);
                a[t * MR + i] = owned[nowned++] = r;
            }
        }
        for (size_t i = mr; i < MR; i++) a[t * MR + i] = a[t * MR + rndu(mr)];
    }

    /* Unpacked weights wv[t][k][n] (w - w_zp), zero for n >= nc. */
    int16_t* wv = xmalloc(ks * kc * NR * sizeof(int16_t));
    const int wmode = (int)rndu(u8s8 ? 6 : 5);
    for (size_t i = 0; i < ks * kc * NR; i++) wv[i] = (i % NR) < nc ? (u8s8 ? rnd_wt7(isa, wmode) : rnd_wt(wmode)) : 0;

    /* Exact dot products, checked to stay in int32 together with any bias used below. */
    int32_t* dots = xmalloc(MR * NR * sizeof(int32_t));
    for (size_t i = 0; i < MR; i++) {
        for (size_t n = 0; n < NR; n++) {
            int64_t s = 0;
            for (size_t t = 0; t < ks; t++)
                for (size_t k = 0; k < kc; k++)
                    s += ((int64_t)a[t * MR + i][k] - q.x_zp) * wv[(t * kc + k) * NR + n];
            dots[n * MR + i] = (int32_t)s;
        }
    }

    /* The packed block, allocated at its exact size: kernels may read all of it but nothing more. */
    const size_t block_bytes = NR * 8 + ks * kcg * NR * KR * wbytes;
    uint8_t* block = xmalloc(block_bytes);
    int32_t* bias = (int32_t*)block;
    float* scale = (float*)(bias + NR);
    int16_t* wt = (int16_t*)(scale + NR);
    int8_t* wt8 = (int8_t*)(scale + NR);
    for (size_t n = 0; n < NR; n++) {
        if (n < nc) {
            int32_t dn[16];
            for (size_t i = 0; i < mr; i++) dn[i] = dots[n * MR + i];
            rnd_bias_scale(dn, mr, &bias[n], &scale[n]);
        } else {
            garbage_bias_scale(&bias[n], &scale[n]);
        }
    }
    for (size_t t = 0; t < ks; t++)
        for (size_t kg = 0; kg < kcg; kg++)
            for (size_t n = 0; n < NR; n++)
                for (size_t j = 0; j < KR; j++) {
                    const size_t k = kg * KR + j;
                    const int16_t v = k < kc ? wv[(t * kc + k) * NR + n] : 0;
                    if (u8s8) wt8[((t * kcg + kg) * NR + n) * KR + j] = (int8_t)v;
                    else wt[((t * kcg + kg) * NR + n) * KR + j] = v;
                }
    /* u8s8 kernels read the bias with the x_zp correction folded in (conv.c does this at packing);
     * the expected results below use the original bias, kept in bias0. */
    int32_t bias0[64];
    for (size_t n = 0; n < NR; n++) {
        bias0[n] = bias[n];
        if (u8s8 && n < nc) {
            int64_t wsum = 0;
            for (size_t t = 0; t < ks; t++)
                for (size_t k = 0; k < kc; k++) wsum += wv[(t * kc + k) * NR + n];
            bias[n] = (int32_t)(uint32_t)((uint64_t)(uint32_t)bias[n] -
                                          (uint64_t)((int64_t)(q.x_zp - isa->u8s8_xoff) * wsum));
        }
    }

    /* Output: exactly up to the last byte of row mr-1; the gaps between rows hold a sentinel. */
    const size_t c_stride = nc + rndu(5);
    const size_t c_bytes = (mr - 1) * c_stride + nc;
    uint8_t* c = xmalloc(c_bytes);
    uint8_t* sentinel = xmalloc(c_bytes);
    for (size_t i = 0; i < c_bytes; i++) sentinel[i] = c[i] = (uint8_t)rnd();

    (narrow ? isa->igemm_u8s8_narrow : u8s8 ? isa->igemm_u8s8 : isa->igemm)(mr, nc, kc, ks, a, block, c, c_stride, &q);

    int bad = 0;
    for (size_t i = 0; i < mr; i++) {
        for (size_t n = 0; n < nc; n++) {
            const int64_t acc = (int64_t)bias0[n] + dots[n * MR + i];
            if (acc < INT32_MIN || acc > INT32_MAX) {
                fprintf(stderr, "test bug: accumulator overflow\n");
                exit(2);
            }
            const uint8_t want = (uint8_t)vki_requant_scalar((int32_t)acc, scale[n], &q);
            const uint8_t got = c[i * c_stride + n];
            if (got != want) {
                if (bad < 5)
                    fprintf(stderr,
                            "MISMATCH %s igemm%s mr=%zu nc=%zu kc=%zu ks=%zu row=%zu ch=%zu: got %u want %u "
                            "(acc=%lld scale=%a x_zp=%d y_zp=%d fmin=%g fmax=%g)\n",
                            label, narrow ? "-u8s8-narrow" : u8s8 ? "-u8s8" : "", mr, nc, kc, ks, i, n, got, want, (long long)acc, (double)scale[n], q.x_zp,
                            q.y_zp, (double)q.fmin, (double)q.fmax);
                bad++;
            }
        }
        for (size_t n = nc; n < c_stride && i + 1 < mr; n++) {
            if (c[i * c_stride + n] != sentinel[i * c_stride + n]) {
                if (bad < 5)
                    fprintf(stderr, "MISMATCH %s igemm mr=%zu nc=%zu kc=%zu ks=%zu: wrote row %zu byte %zu\n",
                            label, mr, nc, kc, ks, i, n);
                bad++;
            }
        }
    }

    for (size_t i = 0; i < nowned; i++) free(owned[i]);
    free(owned);
    free(zrow);
    free(a);
    free(wv);
    free(dots);
    free(block);
    free(c);
    free(sentinel);
    if (bad) n_fail++;
    else n_pass++;
    return bad == 0;
}

static int check_igemm(const vki_isa* isa, const char* label, size_t mr, size_t nc, size_t kc, size_t ks)
{
    int ok = check_igemm_kind(isa, label, mr, nc, kc, ks, 0);
    if (isa->igemm_u8s8) ok &= check_igemm_kind(isa, label, mr, nc, kc, ks, 1);
    return ok;
}

/* ------------------------------------------------------------------------------------------------
 * Depthwise check
 */

static int check_dw(const vki_isa* isa, const char* label, const char* fname, vki_dw_fn fn, size_t channels,
                    size_t ks)
{
    const size_t cp = (channels + isa->cr - 1) / isa->cr * isa->cr;
    const vki_qparams q = rnd_qparams();

    uint8_t* zrow = xmalloc(channels);
    memset(zrow, q.x_zp, channels);
    const uint8_t** a = xmalloc(ks * sizeof(*a));
    uint8_t** owned = xmalloc(ks * sizeof(*owned));
    size_t nowned = 0;
    const int amode = (int)rndu(6);
    for (size_t t = 0; t < ks; t++) {
        if (rndu(4) == 0) {
            a[t] = zrow;
        } else {
            uint8_t* r = xmalloc(channels);
            for (size_t ch = 0; ch < channels; ch++) r[ch] = rnd_act(amode);
            a[t] = owned[nowned++] = r;
        }
    }

    /* Block at its exact size: bias[cp], scale[cp], wt[ks][cp] (zero past channels). */
    uint8_t* block = xmalloc(cp * 8 + ks * cp * sizeof(int16_t));
    int32_t* bias = (int32_t*)block;
    float* scale = (float*)(bias + cp);
    int16_t* wt = (int16_t*)(scale + cp);
    const int wmode = (int)rndu(5);
    for (size_t t = 0; t < ks; t++)
        for (size_t ch = 0; ch < cp; ch++) wt[t * cp + ch] = ch < channels ? rnd_wt(wmode) : 0;
    int32_t* dots = xmalloc(channels * sizeof(int32_t));
    for (size_t ch = 0; ch < cp; ch++) {
        if (ch < channels) {
            int32_t s = 0;
            for (size_t t = 0; t < ks; t++) s += ((int32_t)a[t][ch] - q.x_zp) * wt[t * cp + ch];
            dots[ch] = s;
            rnd_bias_scale(&dots[ch], 1, &bias[ch], &scale[ch]);
        } else {
            garbage_bias_scale(&bias[ch], &scale[ch]);
        }
    }

    uint8_t* y = xmalloc(channels);
    memset(y, 0xA5, channels);
    fn(channels, ks, a, block, y, &q);

    int bad = 0;
    for (size_t ch = 0; ch < channels; ch++) {
        const int64_t acc = (int64_t)bias[ch] + dots[ch];
        if (acc < INT32_MIN || acc > INT32_MAX) {
            fprintf(stderr, "test bug: accumulator overflow\n");
            exit(2);
        }
        const uint8_t want = (uint8_t)vki_requant_scalar((int32_t)acc, scale[ch], &q);
        if (y[ch] != want) {
            if (bad < 5)
                fprintf(stderr, "MISMATCH %s %s channels=%zu ks=%zu ch=%zu: got %u want %u (acc=%lld scale=%a)\n",
                        label, fname, channels, ks, ch, y[ch], want, (long long)acc, (double)scale[ch]);
            bad++;
        }
    }

    for (size_t i = 0; i < nowned; i++) free(owned[i]);
    free(owned);
    free(zrow);
    free(a);
    free(block);
    free(dots);
    free(y);
    if (bad) n_fail++;
    else n_pass++;
    return bad == 0;
}

/* The u8s8 depthwise kernel over a run of pixels: weights in the variant's range, packed by the variant's
 * own packer from plain arrays (bias corrected here as conv.c does), outputs at a stride with sentinels
 * between pixels. */
static int check_dw_u8s8(const vki_isa* isa, const char* label, size_t pixels, size_t channels, size_t ks)
{
    const vki_qparams q = rnd_qparams();
    uint8_t* zrow = xmalloc(channels);
    memset(zrow, q.x_zp, channels);
    const uint8_t** a = xmalloc(pixels * ks * sizeof(*a));
    uint8_t** owned = xmalloc(pixels * ks * sizeof(*owned));
    size_t nowned = 0;
    const int amode = (int)rndu(6);
    for (size_t i = 0; i < pixels * ks; i++) {
        if (rndu(4) == 0) {
            a[i] = zrow;
        } else {
            uint8_t* r = xmalloc(channels);
            for (size_t ch = 0; ch < channels; ch++) r[ch] = rnd_act(amode);
            a[i] = owned[nowned++] = r;
        }
    }
    int16_t* wt = xmalloc(ks * channels * sizeof(int16_t));
    int32_t* bias = xmalloc(channels * sizeof(int32_t));
    int32_t* bias1 = xmalloc(channels * sizeof(int32_t));
    float* scale = xmalloc(channels * sizeof(float));
    int32_t* dots = xmalloc(pixels * channels * sizeof(int32_t));
    const int wmode = (int)rndu(5);
    for (size_t i = 0; i < ks * channels; i++) wt[i] = rnd_wt7(isa, wmode);
    for (size_t ch = 0; ch < channels; ch++) {
        int64_t wsum = 0;
        for (size_t t = 0; t < ks; t++) wsum += wt[t * channels + ch];
        for (size_t p = 0; p < pixels; p++) {
            int32_t s = 0;
            for (size_t t = 0; t < ks; t++) s += ((int32_t)a[p * ks + t][ch] - q.x_zp) * wt[t * channels + ch];
            dots[p * channels + ch] = s;
        }
        rnd_bias_scale(&dots[ch], 1, &bias[ch], &scale[ch]);
        bias1[ch] = (int32_t)(uint32_t)((uint64_t)(uint32_t)bias[ch] -
                                        (uint64_t)((int64_t)(q.x_zp - isa->u8s8_xoff) * wsum));
    }
    const size_t bytes = isa->dw_u8s8_pack(channels, ks, wt, bias1, scale, NULL);
    uint8_t* block = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!block) exit(2);
    memset(block, 0xEE, (bytes + 63) / 64 * 64);
    if (isa->dw_u8s8_pack(channels, ks, wt, bias1, scale, block) != bytes) {
        fprintf(stderr, "%s dw_u8s8_pack: sizes differ\n", label);
        exit(2);
    }
    const size_t y_stride = channels + rndu(5);
    const size_t y_bytes = (pixels - 1) * y_stride + channels;
    uint8_t* y = xmalloc(y_bytes);
    uint8_t* sentinel = xmalloc(y_bytes);
    for (size_t i = 0; i < y_bytes; i++) sentinel[i] = y[i] = (uint8_t)rnd();
    isa->dw_u8s8(pixels, channels, ks, a, block, y, y_stride, &q);
    int bad = 0;
    for (size_t p = 0; p < pixels; p++) {
        for (size_t ch = 0; ch < channels; ch++) {
            const int64_t acc = (int64_t)bias[ch] + dots[p * channels + ch];
            if (acc < INT32_MIN || acc > INT32_MAX) {
                fprintf(stderr, "test bug: accumulator overflow\n");
                exit(2);
            }
            const uint8_t want = (uint8_t)vki_requant_scalar((int32_t)acc, scale[ch], &q);
            if (y[p * y_stride + ch] != want) {
                if (bad < 5)
                    fprintf(stderr, "MISMATCH %s dw_u8s8 pixels=%zu channels=%zu ks=%zu p=%zu ch=%zu: got %u want %u\n",
                            label, pixels, channels, ks, p, ch, y[p * y_stride + ch], want);
                bad++;
            }
        }
        for (size_t i = channels; i < y_stride && p + 1 < pixels; i++)
            if (y[p * y_stride + i] != sentinel[p * y_stride + i]) {
                if (bad < 5) fprintf(stderr, "MISMATCH %s dw_u8s8: wrote pixel %zu byte %zu\n", label, p, i);
                bad++;
            }
    }
    for (size_t i = 0; i < nowned; i++) free(owned[i]);
    free(owned), free(zrow), free(a), free(wt), free(bias), free(bias1), free(scale), free(dots), free(block);
    free(y), free(sentinel);
    if (bad) n_fail++;
    else n_pass++;
    return bad == 0;
}

/* The two-row 3x3 depthwise kernel: input rows 0..3 of `pixels` + 2 columns (cells randomly padding, i.e. the
 * x_zp row, the same cell for both output rows), output row j's taps are (ky + j, p + kx), its pointers a
 * a_row entries after the top row's; outputs at a stride with sentinels, the second row y_row bytes on. */
static int check_dw_rows2(const vki_isa* isa, const char* label, size_t pixels, size_t channels)
{
    const vki_qparams q = rnd_qparams();
    const size_t cols = pixels + 2, amode = rndu(6);
    uint8_t* zrow = xmalloc(channels);
    memset(zrow, q.x_zp, channels);
    uint8_t* img = xmalloc(4 * cols * channels);
    const uint8_t** cell = xmalloc(4 * cols * sizeof(*cell));
    for (size_t i = 0; i < 4 * cols; i++) {
        for (size_t ch = 0; ch < channels; ch++) img[i * channels + ch] = rnd_act((int)amode);
        cell[i] = rndu(5) == 0 ? zrow : img + i * channels;
    }
    const size_t a_row = pixels * 9 + rndu(3);
    const uint8_t** a = xmalloc((a_row + pixels * 9) * sizeof(*a));
    for (size_t i = 0; i < a_row + pixels * 9; i++) a[i] = zrow;
    for (size_t j = 0; j < 2; j++)
        for (size_t p = 0; p < pixels; p++)
            for (size_t t = 0; t < 9; t++) a[j * a_row + p * 9 + t] = cell[(t / 3 + j) * cols + p + t % 3];
    int16_t* wt = xmalloc(9 * channels * sizeof(int16_t));
    int32_t* bias = xmalloc(channels * sizeof(int32_t));
    int32_t* bias1 = xmalloc(channels * sizeof(int32_t));
    float* scale = xmalloc(channels * sizeof(float));
    int32_t* dots = xmalloc(2 * pixels * channels * sizeof(int32_t));
    const int wmode = (int)rndu(5);
    for (size_t i = 0; i < 9 * channels; i++) wt[i] = rnd_wt7(isa, wmode);
    for (size_t ch = 0; ch < channels; ch++) {
        int64_t wsum = 0;
        for (size_t t = 0; t < 9; t++) wsum += wt[t * channels + ch];
        for (size_t j = 0; j < 2; j++)
            for (size_t p = 0; p < pixels; p++) {
                int32_t acc = 0;
                for (size_t t = 0; t < 9; t++)
                    acc += ((int32_t)a[j * a_row + p * 9 + t][ch] - q.x_zp) * wt[t * channels + ch];
                dots[(j * pixels + p) * channels + ch] = acc;
            }
        rnd_bias_scale(&dots[ch], 1, &bias[ch], &scale[ch]);
        bias1[ch] = (int32_t)(uint32_t)((uint64_t)(uint32_t)bias[ch] -
                                        (uint64_t)((int64_t)(q.x_zp - isa->u8s8_xoff) * wsum));
    }
    const size_t bytes = isa->dw_u8s8_pack(channels, 9, wt, bias1, scale, NULL);
    uint8_t* block = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!block) exit(2);
    memset(block, 0xEE, (bytes + 63) / 64 * 64);
    isa->dw_u8s8_pack(channels, 9, wt, bias1, scale, block);
    const size_t y_stride = channels + rndu(5), y_row = (pixels - 1) * y_stride + channels + rndu(7);
    const size_t y_bytes = y_row + (pixels - 1) * y_stride + channels;
    uint8_t* y = xmalloc(y_bytes);
    uint8_t* sentinel = xmalloc(y_bytes);
    for (size_t i = 0; i < y_bytes; i++) sentinel[i] = y[i] = (uint8_t)rnd();
    isa->dw_u8s8_rows2(pixels, channels, a, a_row, block, y, y_stride, y_row, &q);
    int bad = 0;
    uint8_t* want = xmalloc(y_bytes);
    memcpy(want, sentinel, y_bytes);
    for (size_t j = 0; j < 2; j++)
        for (size_t p = 0; p < pixels; p++)
            for (size_t ch = 0; ch < channels; ch++) {
                const int64_t acc = (int64_t)bias[ch] + dots[(j * pixels + p) * channels + ch];
                want[j * y_row + p * y_stride + ch] = (uint8_t)vki_requant_scalar((int32_t)acc, scale[ch], &q);
            }
    for (size_t i = 0; i < y_bytes; i++)
        if (y[i] != want[i]) {
            if (bad < 5)
                fprintf(stderr, "MISMATCH %s dw_u8s8_rows2 pixels=%zu channels=%zu byte %zu: got %u want %u\n", label,
                        pixels, channels, i, y[i], want[i]);
            bad++;
        }
    free(zrow), free(img), free(cell), free(a), free(wt), free(bias), free(bias1), free(scale), free(dots);
    free(block), free(y), free(sentinel), free(want);
    if (bad) n_fail++;
    else n_pass++;
    return bad == 0;
}

/* ------------------------------------------------------------------------------------------------
 * One ISA variant: a grid of edge cases, then random cases.
 */

static void check_isa(const vki_isa* isa, const char* label, size_t random_cases)
{
    /* kc: tails 1..7, the short/long kernel split (32/33 in avx2), and its 256-k widening chunks
     * (255..257, 263, 264, 520: a chunk boundary followed by an odd or partial tail). */
    static const size_t kcs[] = {1,  2,  3,  4,  5,  6,  7,   8,   9,   10,  15,  16,  17,  23, 24,
                                 31, 32, 33, 63, 64, 65, 70, 135, 255, 256, 257, 263, 264, 520};
    static const size_t kss[] = {1, 9, 25, 7};
    static const size_t chs[] = {1,  2,  7,  8,  9,  15, 16, 17, 24, 31, 32,  33,
                                 40, 47, 48, 49, 63, 64, 65, 70, 96, 144, 151};
    const long fail0 = n_fail;

    if (isa->kr != 2 && isa->kr != 1) {
        fprintf(stderr, "%s: unexpected kr %u\n", label, isa->kr);
        n_fail++;
        return;
    }
    for (size_t ik = 0; ik < sizeof(kcs) / sizeof(kcs[0]); ik++)
        for (size_t is = 0; is < sizeof(kss) / sizeof(kss[0]); is++)
            for (size_t mr = 1; mr <= isa->mr; mr++) {
                check_igemm(isa, label, mr, isa->nr, kcs[ik], kss[is]);
                check_igemm(isa, label, mr, isa->nr / 2, kcs[ik], kss[is]); /* half-block kernels */
                check_igemm(isa, label, mr, 1 + rndu(isa->nr), kcs[ik], kss[is]);
            }
    for (size_t i = 0; i < random_cases; i++)
        check_igemm(isa, label, 1 + rndu(isa->mr), 1 + rndu(isa->nr), 1 + rndu(rndu(4) ? 70 : 600), kss[rndu(4)]);
    if (isa->igemm_u8s8 && (isa->u8s8_mr || isa->u8s8_nr)) { /* the u8s8 kernel's own tile edges */
        const size_t umr = isa->u8s8_mr ? isa->u8s8_mr : isa->mr, unr = isa->u8s8_nr ? isa->u8s8_nr : isa->nr;
        for (size_t ik = 0; ik < sizeof(kcs) / sizeof(kcs[0]); ik++)
            for (size_t mr = 1; mr <= umr; mr++) {
                check_igemm_kind(isa, label, mr, unr, kcs[ik], kss[ik % 4], 1);
                check_igemm_kind(isa, label, mr, 1 + rndu(unr), kcs[ik], kss[(ik + 1) % 4], 1);
            }
        for (size_t i = 0; i < random_cases; i++)
            check_igemm_kind(isa, label, 1 + rndu(umr), 1 + rndu(unr), 1 + rndu(rndu(4) ? 70 : 600), kss[rndu(4)], 1);
        /* K beyond 2^16 (ks * kc = 66,560): sums of extreme products must not wrap or saturate */
        check_igemm_kind(isa, label, umr, unr, 520, 128, 1);
    }
    if (isa->igemm_u8s8_narrow) { /* the narrow tile: every row count, 16 channels and fewer */
        for (size_t ik = 0; ik < sizeof(kcs) / sizeof(kcs[0]); ik++)
            for (size_t mr = 1; mr <= isa->u8s8_mr_narrow; mr++) {
                check_igemm_kind(isa, label, mr, 16, kcs[ik], kss[ik % 4], 2);
                check_igemm_kind(isa, label, mr, 1 + rndu(16), kcs[ik], kss[(ik + 1) % 4], 2);
            }
        for (size_t i = 0; i < random_cases; i++)
            check_igemm_kind(isa, label, 1 + rndu(isa->u8s8_mr_narrow), 1 + rndu(16), 1 + rndu(rndu(4) ? 70 : 600),
                             kss[rndu(4)], 2);
        check_igemm_kind(isa, label, isa->u8s8_mr_narrow, 16, 520, 128, 2);
    }
    if (isa->dw_u8s8) {
        static const size_t dks[] = {1, 2, 3, 4, 5, 8, 9, 25, 13};
        for (size_t ic = 0; ic < sizeof(chs) / sizeof(chs[0]); ic++)
            for (size_t ik = 0; ik < sizeof(dks) / sizeof(dks[0]); ik++)
                check_dw_u8s8(isa, label, 1 + rndu(4), chs[ic], dks[ik]);
        /* a full block then each tail form (16 and 32: pixels share a vector; 48: two loads; other: masked) */
        static const size_t tails[] = {80, 96, 112, 128, 160, 200, 208, 240};
        for (size_t i = 0; i < sizeof(tails) / sizeof(tails[0]); i++)
            for (size_t px = 1; px <= 6; px++) check_dw_u8s8(isa, label, px, tails[i], i % 2 ? 9 : 25);
        for (size_t i = 0; i < random_cases / 2; i++)
            check_dw_u8s8(isa, label, 1 + rndu(20), 1 + rndu(rndu(4) ? 200 : 1000), dks[rndu(9)]);
        if (isa->dw_u8s8_rows2) {
            for (size_t ic = 0; ic < sizeof(chs) / sizeof(chs[0]); ic++)
                check_dw_rows2(isa, label, 1 + rndu(6), chs[ic]);
            static const size_t tails2[] = {80, 96, 112, 128, 160, 208};
            for (size_t i = 0; i < sizeof(tails2) / sizeof(tails2[0]); i++)
                for (size_t px = 1; px <= 6; px++) check_dw_rows2(isa, label, px, tails2[i]);
            for (size_t i = 0; i < random_cases / 4; i++) check_dw_rows2(isa, label, 1 + rndu(20), 1 + rndu(300));
        }
    }

    for (size_t ic = 0; ic < sizeof(chs) / sizeof(chs[0]); ic++) {
        check_dw(isa, label, "dw9", isa->dw9, chs[ic], 9);
        check_dw(isa, label, "dw25", isa->dw25, chs[ic], 25);
        check_dw(isa, label, "dw_any", isa->dw_any, chs[ic], 4);
        check_dw(isa, label, "dw_any", isa->dw_any, chs[ic], 9);
        check_dw(isa, label, "dw_any", isa->dw_any, chs[ic], 1);
    }
    for (size_t i = 0; i < random_cases / 2; i++) {
        const size_t ch = 1 + rndu(70);
        switch (rndu(3)) {
        case 0: check_dw(isa, label, "dw9", isa->dw9, ch, 9); break;
        case 1: check_dw(isa, label, "dw25", isa->dw25, ch, 25); break;
        default: check_dw(isa, label, "dw_any", isa->dw_any, ch, 1 + rndu(30)); break;
        }
    }
    printf("%s: %s\n", label, n_fail == fail0 ? "ok" : "FAILED");
}

/* ------------------------------------------------------------------------------------------------
 * Scalar emulation of the AVX-512 intrinsics kernels_avx512vnni.c uses, from the instruction
 * definitions (Intel SDM pseudo-code), all lane-local or element-wise.
 */
#ifndef VKI_X86_CHECK_NO_EMU

typedef union {
    int32_t i32[16];
    int16_t i16[32];
    uint16_t u16[32];
    uint8_t u8[64];
    float f32[16];
} emu_v512;

static emu_v512 emu_loadu(const void* p)
{
    emu_v512 r;
    memcpy(&r, p, 64);
    return r;
}

static emu_v512 emu_set1_epi32(int v)
{
    emu_v512 r;
    for (int i = 0; i < 16; i++) r.i32[i] = v;
    return r;
}

static emu_v512 emu_set1_ps(float v)
{
    emu_v512 r;
    for (int i = 0; i < 16; i++) r.f32[i] = v;
    return r;
}

/* Whole-vector moves between widths (VINSERTI32X4/64X4, VEXTRACTI32X4/64X4, the casts): byte copies. A cast
 * up leaves the upper bytes undefined; here they are zero. */
static emu_v512 emu_castsi128_si512(__m128i x)
{
    emu_v512 r;
    memset(&r, 0, sizeof r);
    memcpy(r.u8, &x, 16);
    return r;
}

static emu_v512 emu_castsi256_si512(__m256i x)
{
    emu_v512 r;
    memset(&r, 0, sizeof r);
    memcpy(r.u8, &x, 32);
    return r;
}

static emu_v512 emu_inserti32x4(emu_v512 a, __m128i x, int lane)
{
    memcpy(&a.u8[16 * (lane & 3)], &x, 16);
    return a;
}

static emu_v512 emu_inserti64x4(emu_v512 a, __m256i x, int half)
{
    memcpy(&a.u8[32 * (half & 1)], &x, 32);
    return a;
}

static __m128i emu_extracti32x4(emu_v512 a, int lane)
{
    __m128i r;
    memcpy(&r, &a.u8[16 * (lane & 3)], 16);
    return r;
}

static __m256i emu_extracti64x4(emu_v512 a, int half)
{
    __m256i r;
    memcpy(&r, &a.u8[32 * (half & 1)], 32);
    return r;
}

static void emu_storeu(void* p, emu_v512 a) { memcpy(p, &a, 64); }

/* VBROADCASTI32X4: the 128-bit source in each of the four lanes. */
static emu_v512 emu_broadcast_i32x4(__m128i x)
{
    emu_v512 r;
    for (int l = 0; l < 4; l++) memcpy(&r.u8[16 * l], &x, 16);
    return r;
}

/* VPSHUFD: within each 128-bit lane, dword j = source dword ((imm >> 2j) & 3) of the same lane. */
static emu_v512 emu_shuffle_epi32(emu_v512 a, int imm)
{
    emu_v512 r;
    for (int l = 0; l < 4; l++)
        for (int j = 0; j < 4; j++) r.i32[4 * l + j] = a.i32[4 * l + ((imm >> (2 * j)) & 3)];
    return r;
}

/* VPDPWSSD: src + a.w[2j] * b.w[2j] + a.w[2j+1] * b.w[2j+1], signed words, wrapping (no saturation). */
static emu_v512 emu_dpwssd_epi32(emu_v512 src, emu_v512 a, emu_v512 b)
{
    emu_v512 r;
    for (int j = 0; j < 16; j++) {
        const uint32_t p0 = (uint32_t)((int32_t)a.i16[2 * j] * (int32_t)b.i16[2 * j]);
        const uint32_t p1 = (uint32_t)((int32_t)a.i16[2 * j + 1] * (int32_t)b.i16[2 * j + 1]);
        r.i32[j] = (int32_t)((uint32_t)src.i32[j] + p0 + p1);
    }
    return r;
}

static emu_v512 emu_add_epi32(emu_v512 a, emu_v512 b)
{
    emu_v512 r;
    for (int i = 0; i < 16; i++) r.i32[i] = (int32_t)((uint32_t)a.i32[i] + (uint32_t)b.i32[i]);
    return r;
}

static emu_v512 emu_sub_epi32(emu_v512 a, emu_v512 b)
{
    emu_v512 r;
    for (int i = 0; i < 16; i++) r.i32[i] = (int32_t)((uint32_t)a.i32[i] - (uint32_t)b.i32[i]);
    return r;
}

static emu_v512 emu_cvtepi32_ps(emu_v512 a)
{
    emu_v512 r;
    for (int i = 0; i < 16; i++) r.f32[i] = (float)a.i32[i]; /* current rounding mode: to nearest even */
    return r;
}

static emu_v512 emu_mul_ps(emu_v512 a, emu_v512 b)
{
    emu_v512 r;
    for (int i = 0; i < 16; i++) r.f32[i] = a.f32[i] * b.f32[i];
    return r;
}

/* VMAXPS/VMINPS: the first operand if it compares greater (less), else the second (so the second
 * operand on equality and on NaN). */
static emu_v512 emu_max_ps(emu_v512 a, emu_v512 b)
{
    emu_v512 r;
    for (int i = 0; i < 16; i++) r.f32[i] = a.f32[i] > b.f32[i] ? a.f32[i] : b.f32[i];
    return r;
}

static emu_v512 emu_min_ps(emu_v512 a, emu_v512 b)
{
    emu_v512 r;
    for (int i = 0; i < 16; i++) r.f32[i] = a.f32[i] < b.f32[i] ? a.f32[i] : b.f32[i];
    return r;
}

/* VCVTPS2DQ: current rounding mode; NaN and out-of-range give the integer indefinite 0x80000000. */
static emu_v512 emu_cvtps_epi32(emu_v512 a)
{
    emu_v512 r;
    for (int i = 0; i < 16; i++) {
        const float f = nearbyintf(a.f32[i]);
        r.i32[i] = (f >= -2147483648.0f && f < 2147483648.0f) ? (int32_t)f : INT32_MIN;
    }
    return r;
}

/* VPMOVDB: truncate each dword to its low byte. */
static __m128i emu_cvtepi32_epi8(emu_v512 a)
{
    uint8_t b[16];
    for (int i = 0; i < 16; i++) b[i] = (uint8_t)a.i32[i];
    return _mm_loadu_si128((const __m128i*)(const void*)b);
}

/* VPMOVZXBD zmm, xmm/m128 and VPMOVZXWD zmm, ymm/m256: zero extension, element order kept. */
static emu_v512 emu_cvtepu8_epi32(__m128i x)
{
    uint8_t b[16];
    emu_v512 r;
    _mm_storeu_si128((__m128i*)(void*)b, x);
    for (int i = 0; i < 16; i++) r.i32[i] = b[i];
    return r;
}

static emu_v512 emu_cvtepu16_epi32(__m256i x)
{
    uint16_t h[16];
    emu_v512 r;
    _mm256_storeu_si256((__m256i*)(void*)h, x);
    for (int i = 0; i < 16; i++) r.i32[i] = h[i];
    return r;
}

/* VMOVDQU8 xmm{k}{z}, m128 and VMOVDQU8 m128{k}, xmm: only the bytes whose mask bit is set are read or written
 * (the hardware suppresses faults on the others, so these touch nothing else: ASan sees the same accesses). */
static __m128i emu_maskz_loadu_epi8(uint32_t m, const void* p)
{
    uint8_t b[16] = {0};
    for (int i = 0; i < 16; i++)
        if (m >> i & 1u) b[i] = ((const uint8_t*)p)[i];
    return _mm_loadu_si128((const __m128i*)(const void*)b);
}

static void emu_mask_storeu_epi8(void* p, uint32_t m, __m128i v)
{
    uint8_t b[16];
    _mm_storeu_si128((__m128i*)(void*)b, v);
    for (int i = 0; i < 16; i++)
        if (m >> i & 1u) ((uint8_t*)p)[i] = b[i];
}

/* VPDPBUSD: src + sum of four (unsigned byte of a) * (signed byte of b) per dword, wrapping, no saturation. */
static emu_v512 emu_dpbusd_epi32(emu_v512 src, emu_v512 a, emu_v512 b)
{
    emu_v512 r;
    for (int j = 0; j < 16; j++) {
        uint32_t s = (uint32_t)src.i32[j];
        for (int u = 0; u < 4; u++) s += (uint32_t)((int32_t)a.u8[4 * j + u] * (int32_t)(int8_t)b.u8[4 * j + u]);
        r.i32[j] = (int32_t)s;
    }
    return r;
}

/* VPUNPCK{L,H}{BW,WD}: within each 128-bit lane, interleave the low (high) halves' elements of a and b. */
static emu_v512 emu_unpack(emu_v512 a, emu_v512 b, int bytes, int high)
{
    emu_v512 r;
    for (int l = 0; l < 4; l++)
        for (int e = 0; e < 8 / bytes; e++) {
            const int src = 16 * l + (high ? 8 : 0) + e * bytes;
            memcpy(&r.u8[16 * l + 2 * e * bytes], &a.u8[src], (size_t)bytes);
            memcpy(&r.u8[16 * l + (2 * e + 1) * bytes], &b.u8[src], (size_t)bytes);
        }
    return r;
}
static emu_v512 emu_unpacklo_epi8(emu_v512 a, emu_v512 b) { return emu_unpack(a, b, 1, 0); }
static emu_v512 emu_unpackhi_epi8(emu_v512 a, emu_v512 b) { return emu_unpack(a, b, 1, 1); }
static emu_v512 emu_unpacklo_epi16(emu_v512 a, emu_v512 b) { return emu_unpack(a, b, 2, 0); }
static emu_v512 emu_unpackhi_epi16(emu_v512 a, emu_v512 b) { return emu_unpack(a, b, 2, 1); }

/* VPACKUSDW / VPACKUSWB: within each 128-bit lane, a's elements then b's, narrowed with unsigned saturation. */
static emu_v512 emu_packus_epi32(emu_v512 a, emu_v512 b)
{
    emu_v512 r;
    for (int l = 0; l < 4; l++)
        for (int e = 0; e < 8; e++) {
            const int32_t v = e < 4 ? a.i32[4 * l + e] : b.i32[4 * l + e - 4];
            r.i16[8 * l + e] = (int16_t)(uint16_t)(v < 0 ? 0 : v > 65535 ? 65535 : v);
        }
    return r;
}

static emu_v512 emu_packus_epi16(emu_v512 a, emu_v512 b)
{
    emu_v512 r;
    for (int l = 0; l < 4; l++)
        for (int e = 0; e < 16; e++) {
            const int32_t v = e < 8 ? a.i16[8 * l + e] : b.i16[8 * l + e - 8];
            r.u8[16 * l + e] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    return r;
}

static emu_v512 emu_and_si512(emu_v512 a, emu_v512 b)
{
    emu_v512 r;
    for (int i = 0; i < 64; i++) r.u8[i] = a.u8[i] & b.u8[i];
    return r;
}

/* VMOVDQU8 zmm{k}{z}, m512 and VMOVDQU8 m512{k}, zmm: only bytes whose mask bit is set are touched. */
static emu_v512 emu_maskz_loadu_epi8_512(uint64_t m, const void* p)
{
    emu_v512 r;
    for (int i = 0; i < 64; i++) r.u8[i] = (m >> i & 1u) ? ((const uint8_t*)p)[i] : 0;
    return r;
}

static void emu_mask_storeu_epi8_512(void* p, uint64_t m, emu_v512 v)
{
    for (int i = 0; i < 64; i++)
        if (m >> i & 1u) ((uint8_t*)p)[i] = v.u8[i];
}

/* Each emulated operation against the AVX2 instruction that does the same on 256 bits (applied to
 * both halves), on random data including float edge values: guards against an emulation that
 * shares a misreading of the instruction set with the kernel. VPMOVDB and VPDPWSSD have no exact
 * AVX2 twin; they are checked against scalar truncation and VPMADDWD + VPADDD respectively. */
static int emu_self_check(void)
{
    int bad = 0;
    for (int iter = 0; iter < 2000; iter++) {
        emu_v512 a, b, s;
        for (int i = 0; i < 64; i++) a.u8[i] = (uint8_t)rnd(), b.u8[i] = (uint8_t)rnd(), s.u8[i] = (uint8_t)rnd();
        /* float inputs: moderate values incl. exact halves, and equal/zero pairs for max/min */
        emu_v512 fa, fb;
        for (int i = 0; i < 16; i++) {
            fa.f32[i] = (float)rndi(-1000, 1000) * ldexpf(1.0f, -rndi(0, 3)) + (rndu(4) ? rnd_unit() : 0.0f);
            fb.f32[i] = rndu(3) ? (float)rndi(-300, 300) : (rndu(2) ? fa.f32[i] : -0.0f);
        }
        for (int h = 0; h < 2; h++) {
            __m256i ya, yb, ys;
            __m256 yfa, yfb;
            memcpy(&ya, &a.u8[32 * h], 32);
            memcpy(&yb, &b.u8[32 * h], 32);
            memcpy(&ys, &s.u8[32 * h], 32);
            memcpy(&yfa, &fa.f32[8 * h], 32);
            memcpy(&yfb, &fb.f32[8 * h], 32);
            __m256i want[12];
            emu_v512 got[12];
            want[0] = _mm256_shuffle_epi32(ya, 0x00), got[0] = emu_shuffle_epi32(a, 0x00);
            want[1] = _mm256_shuffle_epi32(ya, 0x55), got[1] = emu_shuffle_epi32(a, 0x55);
            want[2] = _mm256_shuffle_epi32(ya, 0xAA), got[2] = emu_shuffle_epi32(a, 0xAA);
            want[3] = _mm256_shuffle_epi32(ya, 0xFF), got[3] = emu_shuffle_epi32(a, 0xFF);
            want[4] = _mm256_add_epi32(ys, _mm256_madd_epi16(ya, yb)), got[4] = emu_dpwssd_epi32(s, a, b);
            want[5] = _mm256_add_epi32(ya, yb), got[5] = emu_add_epi32(a, b);
            want[6] = _mm256_sub_epi32(ya, yb), got[6] = emu_sub_epi32(a, b);
            want[7] = _mm256_castps_si256(_mm256_cvtepi32_ps(ya)), got[7] = emu_cvtepi32_ps(a);
            want[8] = _mm256_castps_si256(_mm256_mul_ps(yfa, yfb)), got[8] = emu_mul_ps(fa, fb);
            want[9] = _mm256_castps_si256(_mm256_max_ps(yfa, yfb)), got[9] = emu_max_ps(fa, fb);
            want[10] = _mm256_castps_si256(_mm256_min_ps(yfa, yfb)), got[10] = emu_min_ps(fa, fb);
            want[11] = _mm256_cvtps_epi32(yfa), got[11] = emu_cvtps_epi32(fa);
            for (int k = 0; k < 12; k++) bad += memcmp(&want[k], &got[k].u8[32 * h], 32) != 0;
            {   /* the lane-local byte/word moves and packs have exact AVX2 twins on each 256-bit half */
                __m256i w2[7];
                emu_v512 g2[7];
                w2[0] = _mm256_unpacklo_epi8(ya, yb), g2[0] = emu_unpacklo_epi8(a, b);
                w2[1] = _mm256_unpackhi_epi8(ya, yb), g2[1] = emu_unpackhi_epi8(a, b);
                w2[2] = _mm256_unpacklo_epi16(ya, yb), g2[2] = emu_unpacklo_epi16(a, b);
                w2[3] = _mm256_unpackhi_epi16(ya, yb), g2[3] = emu_unpackhi_epi16(a, b);
                w2[4] = _mm256_packus_epi32(ya, yb), g2[4] = emu_packus_epi32(a, b);
                w2[5] = _mm256_packus_epi16(ya, yb), g2[5] = emu_packus_epi16(a, b);
                w2[6] = _mm256_and_si256(ya, yb), g2[6] = emu_and_si512(a, b);
                for (int k = 0; k < 7; k++) bad += memcmp(&w2[k], &g2[k].u8[32 * h], 32) != 0;
                /* VPDPBUSD: widen to int16 (u8 and s8), VPMADDWD pair sums, then adjacent dword sums
                 * (VPHADDD works per lane: VPERMQ 0xD8 restores the order) */
                const __m256i p0 = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(ya)),
                                                     _mm256_cvtepi8_epi16(_mm256_castsi256_si128(yb)));
                const __m256i p1 = _mm256_madd_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(ya, 1)),
                                                     _mm256_cvtepi8_epi16(_mm256_extracti128_si256(yb, 1)));
                const __m256i q4 = _mm256_add_epi32(ys, _mm256_permute4x64_epi64(_mm256_hadd_epi32(p0, p1), 0xD8));
                const emu_v512 gq = emu_dpbusd_epi32(s, a, b);
                bad += memcmp(&q4, &gq.u8[32 * h], 32) != 0;
            }

            /* widening: the AVX2 forms take 8 elements per 256 bits */
            const __m128i xa = _mm_loadu_si128((const __m128i*)(const void*)a.u8);
            const __m256i ya16 = _mm256_loadu_si256((const __m256i*)(const void*)a.u8);
            emu_v512 z8 = emu_cvtepu8_epi32(xa), z16 = emu_cvtepu16_epi32(ya16);
            __m256i w8 = _mm256_cvtepu8_epi32(h ? _mm_srli_si128(xa, 8) : xa);
            __m256i w16 = _mm256_cvtepu16_epi32(h ? _mm256_extracti128_si256(ya16, 1) : _mm256_castsi256_si128(ya16));
            bad += memcmp(&w8, &z8.u8[32 * h], 32) != 0;
            bad += memcmp(&w16, &z16.u8[32 * h], 32) != 0;
            /* broadcast: both halves equal _mm256_broadcastsi128_si256 */
            emu_v512 bc = emu_broadcast_i32x4(xa);
            __m256i ybc = _mm256_broadcastsi128_si256(xa);
            bad += memcmp(&ybc, &bc.u8[32 * h], 32) != 0;
        }
        {
            const uint64_t m = rnd();
            uint8_t st[64];
            memcpy(st, b.u8, 64);
            const emu_v512 l = emu_maskz_loadu_epi8_512(m, a.u8);
            emu_mask_storeu_epi8_512(st, m, a);
            for (int i = 0; i < 64; i++) {
                bad += l.u8[i] != ((m >> i & 1u) ? a.u8[i] : 0);
                bad += st[i] != ((m >> i & 1u) ? a.u8[i] : b.u8[i]);
            }
        }
        {
            const uint32_t m = (uint32_t)rnd() & 0xffffu;
            uint8_t lb[16], sb[16];
            memcpy(sb, b.u8, 16);
            _mm_storeu_si128((__m128i*)(void*)lb, emu_maskz_loadu_epi8(m, a.u8));
            emu_mask_storeu_epi8(sb, m, _mm_loadu_si128((const __m128i*)(const void*)a.u8));
            for (int i = 0; i < 16; i++) {
                bad += lb[i] != ((m >> i & 1u) ? a.u8[i] : 0);
                bad += sb[i] != ((m >> i & 1u) ? a.u8[i] : b.u8[i]);
            }
        }
        __m128i t = emu_cvtepi32_epi8(a);
        uint8_t tb[16];
        _mm_storeu_si128((__m128i*)(void*)tb, t);
        for (int i = 0; i < 16; i++) bad += tb[i] != (uint8_t)(a.i32[i] & 0xFF);
    }
    if (bad) fprintf(stderr, "AVX-512 emulation self-check: %d mismatches\n", bad);
    return bad == 0;
}

/* Rename the intrinsics and the types, then compile the kernel file here. <immintrin.h> was included
 * above, so its include in the kernel file is a no-op and the real declarations stay untouched. */
#define __m512i emu_v512
#define __m512 emu_v512
#undef _mm512_loadu_si512
#undef _mm512_loadu_ps
#undef _mm512_set1_epi32
#undef _mm512_set1_ps
#undef _mm512_broadcast_i32x4
#undef _mm512_shuffle_epi32
#undef _mm512_dpwssd_epi32
#undef _mm512_add_epi32
#undef _mm512_sub_epi32
#undef _mm512_cvtepi32_ps
#undef _mm512_mul_ps
#undef _mm512_max_ps
#undef _mm512_min_ps
#undef _mm512_cvtps_epi32
#undef _mm512_cvtepi32_epi8
#undef _mm512_cvtepu8_epi32
#undef _mm512_cvtepu16_epi32
#undef _mm_maskz_loadu_epi8
#undef _mm_mask_storeu_epi8
#define _mm_maskz_loadu_epi8(m, p) emu_maskz_loadu_epi8((uint32_t)(m), p)
#define _mm_mask_storeu_epi8(p, m, v) emu_mask_storeu_epi8(p, (uint32_t)(m), v)
#define _mm512_loadu_si512(p) emu_loadu(p)
#undef _mm512_dpbusd_epi32
#undef _mm512_unpacklo_epi8
#undef _mm512_unpackhi_epi8
#undef _mm512_unpacklo_epi16
#undef _mm512_unpackhi_epi16
#undef _mm512_packus_epi32
#undef _mm512_packus_epi16
#undef _mm512_and_si512
#undef _mm512_maskz_loadu_epi8
#undef _mm512_mask_storeu_epi8
#define _mm512_dpbusd_epi32 emu_dpbusd_epi32
#define _mm512_unpacklo_epi8 emu_unpacklo_epi8
#define _mm512_unpackhi_epi8 emu_unpackhi_epi8
#define _mm512_unpacklo_epi16 emu_unpacklo_epi16
#define _mm512_unpackhi_epi16 emu_unpackhi_epi16
#define _mm512_packus_epi32 emu_packus_epi32
#define _mm512_packus_epi16 emu_packus_epi16
#define _mm512_and_si512 emu_and_si512
#define _mm512_maskz_loadu_epi8(m, p) emu_maskz_loadu_epi8_512((uint64_t)(m), p)
#define _mm512_mask_storeu_epi8(p, m, v) emu_mask_storeu_epi8_512(p, (uint64_t)(m), v)
#define _mm512_loadu_ps(p) emu_loadu(p)
#define _mm512_set1_epi32 emu_set1_epi32
#define _mm512_set1_ps emu_set1_ps
#define _mm512_broadcast_i32x4 emu_broadcast_i32x4
#define _mm512_shuffle_epi32(a, imm) emu_shuffle_epi32(a, (int)(imm))
#define _mm512_dpwssd_epi32 emu_dpwssd_epi32
#define _mm512_add_epi32 emu_add_epi32
#define _mm512_sub_epi32 emu_sub_epi32
#define _mm512_cvtepi32_ps emu_cvtepi32_ps
#define _mm512_mul_ps emu_mul_ps
#define _mm512_max_ps emu_max_ps
#define _mm512_min_ps emu_min_ps
#define _mm512_cvtps_epi32 emu_cvtps_epi32
#define _mm512_cvtepi32_epi8 emu_cvtepi32_epi8
#define _mm512_cvtepu8_epi32 emu_cvtepu8_epi32
#define _mm512_cvtepu16_epi32 emu_cvtepu16_epi32
#undef _mm512_castsi128_si512
#undef _mm512_castsi256_si512
#undef _mm512_inserti32x4
#undef _mm512_inserti64x4
#undef _mm512_castsi512_si128
#undef _mm512_castsi512_si256
#undef _mm512_extracti32x4_epi32
#undef _mm512_extracti64x4_epi64
#undef _mm512_storeu_si512
#define _mm512_castsi128_si512 emu_castsi128_si512
#define _mm512_castsi256_si512 emu_castsi256_si512
#define _mm512_inserti32x4(a, x, i) emu_inserti32x4(a, x, (int)(i))
#define _mm512_inserti64x4(a, x, i) emu_inserti64x4(a, x, (int)(i))
#define _mm512_castsi512_si128(a) emu_extracti32x4(a, 0)
#define _mm512_castsi512_si256(a) emu_extracti64x4(a, 0)
#define _mm512_extracti32x4_epi32(a, i) emu_extracti32x4(a, (int)(i))
#define _mm512_extracti64x4_epi64(a, i) emu_extracti64x4(a, (int)(i))
#define _mm512_storeu_si512(p, a) emu_storeu(p, a)
#define vki_isa_avx512vnni vki_isa_avx512vnni_emu
#include "kernels_avx512vnni.c"
#undef vki_isa_avx512vnni
#undef __m512i
#undef __m512

#endif /* VKI_X86_CHECK_NO_EMU */

/* ------------------------------------------------------------------------------------------------
 * Optional timing of the real kernels (argument "bench"): MAC throughput of igemm and dw.
 */

static double now_s(void)
{
    struct timespec ts;
    timespec_get(&ts, TIME_UTC); /* C11; good enough for a rough throughput figure */
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void bench_isa(const vki_isa* isa)
{
    const vki_qparams q = {.x_zp = 3, .y_zp = 5, .fmin = -133.0f, .fmax = 250.0f};
    static const size_t shapes[][2] = {{1, 256}, {1, 64}, {9, 32}, {9, 3}, {1, 960}, {1, 16}, {1, 24}, {1, 32}, {3, 9}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        const size_t ks = shapes[s][0], kc = shapes[s][1], MR = isa->mr, NR = isa->nr;
        const size_t UMR = isa->u8s8_mr ? isa->u8s8_mr : MR, UNR = isa->u8s8_nr ? isa->u8s8_nr : NR;
        size_t AR = UMR > MR ? UMR : MR;
        if (isa->u8s8_mr_narrow > AR) AR = isa->u8s8_mr_narrow;
        const size_t kcg = (kc + isa->kr - 1) / isa->kr;
        uint8_t* rows = xmalloc(ks * AR * kc);
        const uint8_t** a = xmalloc(ks * AR * sizeof(*a));
        for (size_t i = 0; i < ks * AR * kc; i++) rows[i] = (uint8_t)rnd();
        for (size_t i = 0; i < ks * AR; i++) a[i] = rows + i * kc;
        const size_t bbytes = (NR > UNR ? NR : UNR) * 8 + ks * (kcg + 4) * (NR > UNR ? NR : UNR) * 4 * 2;
        uint8_t* block = xmalloc(bbytes);
        memset(block, 0, bbytes);
        uint8_t c[16 * 64];
        /* best of several short runs: this machine is shared, and the best run is the kernel's own */
        const size_t iters = (size_t)(3e7 / (double)(ks * kc * MR * NR)) + 1;
        double dt = 1e30;
        for (int rep = 0; rep < 9; rep++) {
            const double t0 = now_s();
            for (size_t it = 0; it < iters; it++) isa->igemm(MR, NR, kc, ks, a, block, c, NR, &q);
            dt = fmin(dt, now_s() - t0);
        }
        printf("  %s igemm ks=%zu kc=%-4zu %6.2f GMAC/s\n", isa->name, ks, kc,
               (double)(iters * ks * kc * MR * NR) / dt * 1e-9);
        if (isa->igemm_u8s8) { /* the int8 block is smaller than the int16 one allocated above */
            dt = 1e30;
            for (int rep = 0; rep < 9; rep++) {
                const double t0 = now_s();
                for (size_t it = 0; it < iters; it++) isa->igemm_u8s8(UMR, UNR, kc, ks, a, block, c, UNR, &q);
                dt = fmin(dt, now_s() - t0);
            }
            printf("  %s igemm ks=%zu kc=%-4zu %6.2f GMAC/s\n", isa->name_u8s8, ks, kc,
                   (double)(iters * ks * kc * UMR * UNR) / dt * 1e-9);
            if (isa->igemm_u8s8_narrow && isa->u8s8_mr_narrow <= AR) { /* 16 channels: wide tile vs narrow */
                const size_t NM = isa->u8s8_mr_narrow;
                double dw = 1e30, dn = 1e30;
                for (int rep = 0; rep < 9; rep++) {
                    double t0 = now_s();
                    for (size_t it = 0; it < 2 * iters; it++) isa->igemm_u8s8(UMR, 16, kc, ks, a, block, c, 16, &q);
                    dw = fmin(dw, now_s() - t0);
                    t0 = now_s();
                    for (size_t it = 0; it < iters; it++) isa->igemm_u8s8_narrow(NM, 16, kc, ks, a, block, c, 16, &q);
                    dn = fmin(dn, now_s() - t0);
                }
                printf("  %s 16 channels ks=%zu kc=%-4zu wide %6.2f narrow %6.2f GMAC/s\n", isa->name_u8s8, ks, kc,
                       (double)(2 * iters * ks * kc * UMR * 16) / dw * 1e-9,
                       (double)(iters * ks * kc * NM * 16) / dn * 1e-9);
            }
        }
        free(rows);
        free(a);
        free(block);
    }
    static const size_t dws[][2] = {{9, 144}, {9, 32}, {25, 96}, {9, 960}};
    for (size_t s = 0; s < sizeof(dws) / sizeof(dws[0]); s++) {
        const size_t ks = dws[s][0], ch = dws[s][1], cp = (ch + isa->cr - 1) / isa->cr * isa->cr;
        uint8_t* rows = xmalloc(ks * ch);
        const uint8_t** a = xmalloc(ks * sizeof(*a));
        for (size_t i = 0; i < ks * ch; i++) rows[i] = (uint8_t)rnd();
        for (size_t i = 0; i < ks; i++) a[i] = rows + i * ch;
        uint8_t* block = xmalloc(cp * 8 + ks * cp * 2);
        memset(block, 0, cp * 8 + ks * cp * 2);
        uint8_t* y = xmalloc(ch);
        vki_dw_fn fn = ks == 9 ? isa->dw9 : ks == 25 ? isa->dw25 : isa->dw_any;
        const size_t iters = (size_t)(1e7 / (double)(ks * ch)) + 1;
        double dt = 1e30;
        for (int rep = 0; rep < 9; rep++) {
            const double t0 = now_s();
            for (size_t it = 0; it < iters; it++) fn(ch, ks, a, block, y, &q);
            dt = fmin(dt, now_s() - t0);
        }
        printf("  %s dw ks=%zu ch=%-4zu %6.2f GMAC/s\n", isa->name, ks, ch, (double)(iters * ks * ch) / dt * 1e-9);
        if (isa->dw_u8s8) { /* 16 pixels per call, as conv.c runs it; every pixel reads the same rows */
            int16_t* wv = xmalloc(ks * ch * sizeof(int16_t));
            int32_t* bv = xmalloc(ch * sizeof(int32_t));
            float* sv = xmalloc(ch * sizeof(float));
            for (size_t i = 0; i < ks * ch; i++) wv[i] = (int16_t)rndi(-100, 100);
            for (size_t i = 0; i < ch; i++) bv[i] = rndi(-1000, 1000), sv[i] = 0.01f;
            uint8_t* pk = aligned_alloc(64, (isa->dw_u8s8_pack(ch, ks, wv, bv, sv, NULL) + 63) / 64 * 64);
            isa->dw_u8s8_pack(ch, ks, wv, bv, sv, pk);
            const uint8_t** a16 = xmalloc(16 * ks * sizeof(*a16));
            for (size_t i = 0; i < 16 * ks; i++) a16[i] = a[i % ks];
            uint8_t* y16 = xmalloc(16 * ch);
            const size_t it16 = iters / 16 + 1;
            dt = 1e30;
            for (int rep = 0; rep < 9; rep++) {
                const double t0 = now_s();
                for (size_t it = 0; it < it16; it++) isa->dw_u8s8(16, ch, ks, a16, pk, y16, ch, &q);
                dt = fmin(dt, now_s() - t0);
            }
            printf("  %s dw ks=%zu ch=%-4zu %6.2f GMAC/s\n", isa->name_u8s8, ks, ch,
                   (double)(it16 * 16 * ks * ch) / dt * 1e-9);
            if (isa->dw_u8s8_rows2 && ks == 9) { /* two rows of 16 pixels per call */
                uint8_t* y32 = xmalloc(32 * ch);
                const size_t it32 = iters / 32 + 1;
                dt = 1e30;
                for (int rep = 0; rep < 9; rep++) {
                    const double t0 = now_s();
                    for (size_t it = 0; it < it32; it++)
                        isa->dw_u8s8_rows2(16, ch, a16, 0, pk, y32, ch, 16 * ch, &q);
                    dt = fmin(dt, now_s() - t0);
                }
                printf("  %s dw rows2 ks=%zu ch=%-4zu %6.2f GMAC/s\n", isa->name_u8s8, ks, ch,
                       (double)(it32 * 32 * ks * ch) / dt * 1e-9);
                dt = 1e30;
                for (int rep = 0; rep < 9; rep++) {
                    const double t0 = now_s();
                    for (size_t it = 0; it < it32; it++) {
                        isa->dw_u8s8(16, ch, ks, a16, pk, y32, ch, &q);
                        isa->dw_u8s8(16, ch, ks, a16, pk, y32 + 16 * ch, ch, &q);
                    }
                    dt = fmin(dt, now_s() - t0);
                }
                printf("  %s dw 2x1row ks=%zu ch=%-4zu %6.2f GMAC/s\n", isa->name_u8s8, ks, ch,
                       (double)(it32 * 32 * ks * ch) / dt * 1e-9);
                free(y32);
            }
            free(wv), free(bv), free(sv), free(pk), free(a16), free(y16);
        }
        free(rows);
        free(a);
        free(block);
        free(y);
    }
}

/* ------------------------------------------------------------------------------------------------ */

int main(int argc, char** argv)
{
    int bench = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "bench") == 0) bench = 1;
        else rng_state = strtoull(argv[i], NULL, 0) | 1;
    }
    printf("seed 0x%llx\n", (unsigned long long)rng_state);

    if (vki_isa_avx2.available()) {
        check_isa(&vki_isa_avx2, "avx2", 1000);
        if (bench) bench_isa(&vki_isa_avx2);
    } else {
        printf("avx2: not available on this CPU, skipped\n");
    }

#ifndef VKI_X86_CHECK_NO_EMU
    /* The emulation itself compares against AVX2 instructions. Random cases per variant: 1000 (500 emulated)
     * after the edge grid, which covers every tail; 3000 took 9 s of the suite under ASan, 1000 take 3 s. */
    if (vki_isa_avx2.available()) {
        if (emu_self_check()) n_pass++;
        else n_fail++;
        check_isa(&vki_isa_avx512vnni_emu, "avx512vnni (emulated)", 500);
    }
#endif

#ifdef VKI_X86_CHECK_AVX512_NATIVE
    if (vki_isa_avx512vnni.available()) {
        check_isa(&vki_isa_avx512vnni, "avx512vnni", 1000);
        if (bench) bench_isa(&vki_isa_avx512vnni);
    } else {
        printf("avx512vnni: not available on this CPU, skipped\n");
    }
#endif

    printf("x86 kernels: %ld passed, %ld failed\n", n_pass, n_fail);
    return n_fail ? 1 : 0;
}
