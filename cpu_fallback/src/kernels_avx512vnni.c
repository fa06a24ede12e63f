/* AVX-512 VNNI microkernels (compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni, no FMA use,
 * -ffp-contract=off).
 *
 * A line-for-line mirror of kernels_avx2.c with 512-bit vectors: VPDPWSSD (int16 pairs -> int32,
 * exact and non-saturating) replaces VPMADDWD + VPADDD, and VPMOVDB (truncation to the low byte)
 * replaces the pack sequence. Only a small set of AVX-512 intrinsics is used, each with lane-local
 * semantics, because tests/x86_kernel_check.c also runs this file through a scalar emulation of
 * exactly that set on machines without AVX-512: using a new AVX-512 intrinsic here requires adding
 * it to that emulation (the emulated build fails to compile otherwise).
 */
#include <immintrin.h>
#include <string.h>

#include "internal.h"

#define V5_MR 4
#define V5_NR 32 /* two zmm of int32 accumulators per row */
#define V5_KR 2  /* k pairs: one VPDPWSSD consumes (a[k], a[k+1]) x (w[k], w[k+1]) */
#define V5_CR 16 /* dw weight padding: the dw kernel never reads past round_up(channels, 16) */

static int v5_available(void)
{
    __builtin_cpu_init();
    /* libgcc reports these only when the OS also saves the AVX-512 state (XCR0). */
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
}

/* ------------------------------------------------------------------------------------------------
 * Shared helpers
 */

/* p[0..n) for 1 <= n <= 7 in the low bytes of a 64-bit value (zero above), without touching any
 * byte outside: rows are exactly kc bytes long. */
static inline uint64_t v5_load_partial(const uint8_t* p, size_t n)
{
    uint64_t v = 0;
    size_t o = 0;
    if (n & 4) {
        uint32_t x;
        memcpy(&x, p, 4);
        v = x;
        o = 4;
    }
    if (n & 2) {
        uint16_t x;
        memcpy(&x, p + o, 2);
        v |= (uint64_t)x << (8 * o);
        o += 2;
    }
    if (n & 1) v |= (uint64_t)p[o] << (8 * o);
    return v;
}

/* The last n (1..7) bytes of a row, p pointing at them, in the low bytes of an xmm (zero above).
 * With at least 8 bytes in the row, one 8-byte load ending at the row's end plus a shift stays
 * inside the row because p + n - 8 >= row start. */
static inline __m128i v5_load_tail(const uint8_t* p, size_t n, size_t kc)
{
    uint64_t v;
    if (kc >= 8) {
        memcpy(&v, p + n - 8, 8);
        v >>= 8 * (8 - n);
    } else {
        v = v5_load_partial(p, n);
    }
    return _mm_cvtsi64_si128((long long)v);
}

/* Exactly vki_requant_scalar on 16 lanes: one float multiply, clamp, round half to even
 * (VCVTPS2DQ with the default MXCSR rounding; no embedded rounding override), add y_zp. */
static inline __m512i v5_requant(__m512i acc, __m512 scale, __m512 fmin, __m512 fmax, __m512i yzp)
{
    __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), scale);
    f = _mm512_max_ps(f, fmin);
    f = _mm512_min_ps(f, fmax);
    return _mm512_add_epi32(_mm512_cvtps_epi32(f), yzp);
}

/* Low bytes of 16 int32 in order: VPMOVDB truncates (it is the non-saturating form, unlike
 * VPMOVSDB/VPMOVUSDB), which is exactly the contract's "store the low byte". */
static inline __m128i v5_pack16(__m512i v) { return _mm512_cvtepi32_epi8(v); }

/* ------------------------------------------------------------------------------------------------
 * igemm: MR=4 rows x NR=32 channels, weights int16 [ks][ceil(kc/2)][32][2].
 */

/* 8 activations minus x_zp as int16, copied into all four 128-bit lanes so that VPSHUFD (which
 * works within lanes) can broadcast any of the four (a[k], a[k+1]) pairs to all 16 dword lanes. */
static inline __m512i v5_pairs8(__m128i bytes8, __m128i vxzp)
{
    const __m128i x = _mm_sub_epi16(_mm_cvtepu8_epi16(bytes8), vxzp);
    return _mm512_broadcast_i32x4(x);
}

/* One k pair J (0..3) of the current 8-k group for all four rows against the 32 channels at W
 * (W[0..31]: channels 0..15 as (k, k+1) pairs, W[32..63]: channels 16..31). A macro because VPSHUFD
 * needs an immediate. */
#define V5_STEP(J, W)                                                                                  \
    do {                                                                                               \
        const __m512i w0_ = _mm512_loadu_si512((const void*)(W));                                      \
        const __m512i w1_ = _mm512_loadu_si512((const void*)((W) + 32));                              \
        __m512i b_ = _mm512_shuffle_epi32(x0, (_MM_PERM_ENUM)((J) * 0x55));                            \
        acc00 = _mm512_dpwssd_epi32(acc00, b_, w0_);                                                   \
        acc01 = _mm512_dpwssd_epi32(acc01, b_, w1_);                                                   \
        b_ = _mm512_shuffle_epi32(x1, (_MM_PERM_ENUM)((J) * 0x55));                                    \
        acc10 = _mm512_dpwssd_epi32(acc10, b_, w0_);                                                   \
        acc11 = _mm512_dpwssd_epi32(acc11, b_, w1_);                                                   \
        b_ = _mm512_shuffle_epi32(x2, (_MM_PERM_ENUM)((J) * 0x55));                                    \
        acc20 = _mm512_dpwssd_epi32(acc20, b_, w0_);                                                   \
        acc21 = _mm512_dpwssd_epi32(acc21, b_, w1_);                                                   \
        b_ = _mm512_shuffle_epi32(x3, (_MM_PERM_ENUM)((J) * 0x55));                                    \
        acc30 = _mm512_dpwssd_epi32(acc30, b_, w0_);                                                   \
        acc31 = _mm512_dpwssd_epi32(acc31, b_, w1_);                                                   \
    } while (0)

/* Requantize row R's accumulators and store its nc bytes. */
#define V5_STORE_ROW(R, ACC0, ACC1)                                                                    \
    do {                                                                                               \
        const __m128i v0_ = v5_pack16(v5_requant(ACC0, scale0, vfmin, vfmax, vyzp));                   \
        const __m128i v1_ = v5_pack16(v5_requant(ACC1, scale1, vfmin, vfmax, vyzp));                   \
        uint8_t* row_ = c + (R) * c_stride;                                                            \
        if (nc == V5_NR) {                                                                             \
            _mm_storeu_si128((__m128i*)(void*)row_, v0_);                                              \
            _mm_storeu_si128((__m128i*)(void*)(row_ + 16), v1_);                                       \
        } else { /* masked byte stores: a memcpy call per row cost ~7 ns (8 channels at 56x56: 1.6x) */ \
            const uint32_t m_ = (uint32_t)((1ull << nc) - 1u);                                         \
            _mm_mask_storeu_epi8(row_, (__mmask16)(m_ & 0xffffu), v0_);                                \
            _mm_mask_storeu_epi8(row_ + 16, (__mmask16)(m_ >> 16), v1_);                               \
        }                                                                                              \
    } while (0)

static void v5_igemm(size_t mr, size_t nc, size_t kc, size_t ks, const uint8_t* const* a, const void* w,
                     uint8_t* c, size_t c_stride, const vki_qparams* q)
{
    const int32_t* bias = (const int32_t*)w;
    const float* scale = (const float*)(bias + V5_NR);
    const int16_t* wt = (const int16_t*)(scale + V5_NR);

    /* The bias seeds the accumulators; rows >= mr are computed on a repeated valid row and dropped. */
    __m512i acc00 = _mm512_loadu_si512((const void*)bias);
    __m512i acc01 = _mm512_loadu_si512((const void*)(bias + 16));
    __m512i acc10 = acc00, acc11 = acc01, acc20 = acc00, acc21 = acc01, acc30 = acc00, acc31 = acc01;
    const __m128i vxzp = _mm_set1_epi16((int16_t)q->x_zp);

    for (size_t t = 0; t < ks; t++, a += V5_MR) {
        const uint8_t* p0 = a[0];
        const uint8_t* p1 = a[1];
        const uint8_t* p2 = a[2];
        const uint8_t* p3 = a[3];
        size_t k = kc;
        /* Main loop: 8 k (4 pairs) per iteration from one 8-byte load per row. */
        for (; k >= 8; k -= 8) {
            const __m512i x0 = v5_pairs8(_mm_loadl_epi64((const __m128i*)(const void*)p0), vxzp);
            const __m512i x1 = v5_pairs8(_mm_loadl_epi64((const __m128i*)(const void*)p1), vxzp);
            const __m512i x2 = v5_pairs8(_mm_loadl_epi64((const __m128i*)(const void*)p2), vxzp);
            const __m512i x3 = v5_pairs8(_mm_loadl_epi64((const __m128i*)(const void*)p3), vxzp);
            p0 += 8;
            p1 += 8;
            p2 += 8;
            p3 += 8;
            V5_STEP(0, wt);
            V5_STEP(1, wt + 64);
            V5_STEP(2, wt + 128);
            V5_STEP(3, wt + 192);
            wt += 4 * V5_NR * V5_KR;
        }
        /* Tail: 1..7 k, i.e. ceil(k/2) pairs. Bytes past the row's end are zero in the register, and
         * for odd k the packed weight of the missing k is zero, so the extra slot adds nothing. */
        if (k != 0) {
            const __m512i x0 = v5_pairs8(v5_load_tail(p0, k, kc), vxzp);
            const __m512i x1 = v5_pairs8(v5_load_tail(p1, k, kc), vxzp);
            const __m512i x2 = v5_pairs8(v5_load_tail(p2, k, kc), vxzp);
            const __m512i x3 = v5_pairs8(v5_load_tail(p3, k, kc), vxzp);
            V5_STEP(0, wt);
            if (k > 2) V5_STEP(1, wt + 64);
            if (k > 4) V5_STEP(2, wt + 128);
            if (k > 6) V5_STEP(3, wt + 192);
            wt += (k + 1) / 2 * V5_NR * V5_KR;
        }
    }

    const __m512 scale0 = _mm512_loadu_ps(scale);
    const __m512 scale1 = _mm512_loadu_ps(scale + 16);
    const __m512 vfmin = _mm512_set1_ps(q->fmin);
    const __m512 vfmax = _mm512_set1_ps(q->fmax);
    const __m512i vyzp = _mm512_set1_epi32(q->y_zp);
    V5_STORE_ROW(0, acc00, acc01);
    if (mr > 1) V5_STORE_ROW(1, acc10, acc11);
    if (mr > 2) V5_STORE_ROW(2, acc20, acc21);
    if (mr > 3) V5_STORE_ROW(3, acc30, acc31);
}

/* ------------------------------------------------------------------------------------------------
 * Depthwise: one output pixel, all channels; weights int16 [ks][cp].
 *
 * Exact 17-bit products without lane shuffles: the activation goes to int32 lanes as (x - x_zp)
 * (its low int16 is the exact value, the high half only sign bits) and the weight is zero-extended
 * to (w, 0), so VPDPWSSD adds (x - x_zp) * w + high * 0 per lane, in channel order.
 */

static inline __m512i v5_dw_x16(const uint8_t* p, __m512i vxzp32)
{
    return _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i*)(const void*)p)), vxzp32);
}

static inline __m512i v5_dw_w16(const int16_t* p)
{
    return _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(const void*)p));
}

/* Always inlined so that ks is a compile-time constant in dw9/dw25 (tap loop unrolled). */
static inline __attribute__((always_inline)) void v5_dw(size_t channels, size_t ks, const uint8_t* const* a,
                                                        const void* w, uint8_t* y, const vki_qparams* q)
{
    const size_t cp = (channels + V5_CR - 1) / V5_CR * V5_CR;
    const int32_t* bias = (const int32_t*)w;
    const float* scale = (const float*)(bias + cp);
    const int16_t* wt = (const int16_t*)(scale + cp);
    const __m512i vxzp = _mm512_set1_epi32(q->x_zp);
    const __m512 vfmin = _mm512_set1_ps(q->fmin);
    const __m512 vfmax = _mm512_set1_ps(q->fmax);
    const __m512i vyzp = _mm512_set1_epi32(q->y_zp);
    size_t ch = 0;

    /* 32 channels per iteration: two independent accumulator chains. */
    for (; ch + 32 <= channels; ch += 32) {
        __m512i acc0 = _mm512_loadu_si512((const void*)(bias + ch));
        __m512i acc1 = _mm512_loadu_si512((const void*)(bias + ch + 16));
        for (size_t t = 0; t < ks; t++) {
            const uint8_t* p = a[t] + ch;
            const int16_t* wp = wt + t * cp + ch;
            acc0 = _mm512_dpwssd_epi32(acc0, v5_dw_x16(p, vxzp), v5_dw_w16(wp));
            acc1 = _mm512_dpwssd_epi32(acc1, v5_dw_x16(p + 16, vxzp), v5_dw_w16(wp + 16));
        }
        const __m128i v0 = v5_pack16(v5_requant(acc0, _mm512_loadu_ps(scale + ch), vfmin, vfmax, vyzp));
        const __m128i v1 = v5_pack16(v5_requant(acc1, _mm512_loadu_ps(scale + ch + 16), vfmin, vfmax, vyzp));
        _mm_storeu_si128((__m128i*)(void*)(y + ch), v0);
        _mm_storeu_si128((__m128i*)(void*)(y + ch + 16), v1);
    }
    /* Then at most one group of 16 and a tail of 1..15 through a stack copy (never over-read a row).
     * Weights, biases and scales are padded to cp >= round_up(channels, 16), so they load in full. */
    for (; ch < channels; ch += 16) {
        const size_t n = channels - ch < 16 ? channels - ch : 16;
        __m512i acc = _mm512_loadu_si512((const void*)(bias + ch));
        if (n == 16) {
            for (size_t t = 0; t < ks; t++)
                acc = _mm512_dpwssd_epi32(acc, v5_dw_x16(a[t] + ch, vxzp), v5_dw_w16(wt + t * cp + ch));
        } else {
            /* Masked loads (fault-suppressing: never touch bytes past the row), not a memcpy per tap: an
             * 8-channel 48x48 layer took 71 ns per pixel that way against 15 ns for 16 channels. */
            const __mmask16 m = (__mmask16)((1u << n) - 1u);
            for (size_t t = 0; t < ks; t++) {
                const __m512i x = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, a[t] + ch)), vxzp);
                acc = _mm512_dpwssd_epi32(acc, x, v5_dw_w16(wt + t * cp + ch));
            }
        }
        const __m128i v = v5_pack16(v5_requant(acc, _mm512_loadu_ps(scale + ch), vfmin, vfmax, vyzp));
        if (n == 16)
            _mm_storeu_si128((__m128i*)(void*)(y + ch), v);
        else
            _mm_mask_storeu_epi8(y + ch, (__mmask16)((1u << n) - 1u), v);
    }
}

static void v5_dw9(size_t channels, size_t ks, const uint8_t* const* a, const void* w, uint8_t* y,
                   const vki_qparams* q)
{
    (void)ks;
    v5_dw(channels, 9, a, w, y, q);
}

static void v5_dw25(size_t channels, size_t ks, const uint8_t* const* a, const void* w, uint8_t* y,
                    const vki_qparams* q)
{
    (void)ks;
    v5_dw(channels, 25, a, w, y, q);
}

static void v5_dw_any(size_t channels, size_t ks, const uint8_t* const* a, const void* w, uint8_t* y,
                      const vki_qparams* q)
{
    v5_dw(channels, ks, a, w, y, q);
}

const vki_isa vki_isa_avx512vnni = {
    .name = "avx512vnni",
    .available = v5_available,
    .mr = V5_MR,
    .nr = V5_NR,
    .kr = V5_KR,
    .igemm = v5_igemm,
    .cr = V5_CR,
    .dw9 = v5_dw9,
    .dw25 = v5_dw25,
    .dw_any = v5_dw_any,
};
