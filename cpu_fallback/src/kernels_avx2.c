/* AVX2 microkernels (compiled with -mavx2, no FMA, -ffp-contract=off).
 *
 * Products are formed exactly with VPMADDWD on int16 operands: (x - x_zp) and (w - w_zp) both lie in
 * [-255, 255], so each pair sum fits easily in int32 and nothing saturates. VPMADDUBSW is deliberately
 * not used: it saturates to int16, which would break bit-exactness.
 *
 * kernels_avx512vnni.c mirrors this file with wider vectors (except the depthwise main loop, where
 * it keeps the simpler widen-to-int32 form used here for groups of 8); keep the two in step.
 */
#include <immintrin.h>
#include <string.h>

#include "internal.h"

#define A2_MR 4
#define A2_NR 16 /* two ymm of int32 accumulators per row */
#define A2_KR 2  /* k pairs: one VPMADDWD consumes (a[k], a[k+1]) x (w[k], w[k+1]) */
#define A2_CR 16 /* dw weight padding: the dw kernel never reads past round_up(channels, 8) */

static int a2_available(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

/* ------------------------------------------------------------------------------------------------
 * Shared helpers
 */

/* p[0..n) for 1 <= n <= 7 in the low bytes of a 64-bit value (zero above), without touching any
 * byte outside: rows are exactly kc bytes long and ASan checks it. */
static inline uint64_t a2_load_partial(const uint8_t* p, size_t n)
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
 * When the row has at least 8 bytes, one 8-byte load ending at the row's end plus a shift is cheaper
 * than assembling bytes; it stays inside the row because p + n - 8 >= row start. */
static inline __m128i a2_load_tail(const uint8_t* p, size_t n, size_t kc)
{
    uint64_t v;
    if (kc >= 8) {
        memcpy(&v, p + n - 8, 8);
        v >>= 8 * (8 - n);
    } else {
        v = a2_load_partial(p, n);
    }
    return _mm_cvtsi64_si128((long long)v);
}

/* Exactly vki_requant_scalar on 8 lanes: one float multiply (no FMA), clamp, round half to even
 * (VCVTPS2DQ under the default MXCSR), add y_zp. The clamp order matches the scalar code; with
 * finite inputs and non-NaN bounds max/min agree with its comparisons. */
static inline __m256i a2_requant(__m256i acc, __m256 scale, __m256 fmin, __m256 fmax, __m256i yzp)
{
    __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), scale);
    f = _mm256_max_ps(f, fmin);
    f = _mm256_min_ps(f, fmax);
    return _mm256_add_epi32(_mm256_cvtps_epi32(f), yzp);
}

/* Low bytes of 16 int32 in [-128, 255] (v0: elements 0..7, v1: 8..15), in order. Signed saturation
 * to int16 is exact on that range; masking to 0..255 then makes the unsigned 8-bit pack exact too
 * (a direct saturating pack to u8 or s8 would clip one end of the range). */
static inline __m128i a2_pack16(__m256i v0, __m256i v1)
{
    __m256i h = _mm256_packs_epi32(v0, v1);                 /* [v0 0-3, v1 0-3 | v0 4-7, v1 4-7] */
    h = _mm256_and_si256(h, _mm256_set1_epi16(0xFF));
    h = _mm256_permute4x64_epi64(h, _MM_SHUFFLE(3, 1, 2, 0)); /* [v0 0-7 | v1 0-7] */
    return _mm_packus_epi16(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* Same for 8 int32 (one ymm): result in the low 8 bytes. */
static inline __m128i a2_pack8(__m256i v)
{
    __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    h = _mm_and_si128(h, _mm_set1_epi16(0xFF));
    return _mm_packus_epi16(h, h);
}

/* ------------------------------------------------------------------------------------------------
 * igemm: MR=4 rows x NR=16 channels, weights int16 [ks][ceil(kc/2)][16][2].
 */

/* 8 activations minus x_zp as int16, copied into both 128-bit lanes so that VPSHUFD (which cannot
 * cross lanes) can broadcast any of the four (a[k], a[k+1]) pairs to all 8 dword lanes. */
static inline __m256i a2_pairs8(__m128i bytes8, __m128i vxzp)
{
    const __m128i x = _mm_sub_epi16(_mm_cvtepu8_epi16(bytes8), vxzp);
    return _mm256_broadcastsi128_si256(x);
}

/* GCC reassociates chains of integer adds across the unrolled pairs into add trees, which needs
 * more live ymm than the 16 available and spills accumulators in the inner loop. An empty asm that
 * "modifies" the accumulators after each pair makes their values opaque and keeps one chain each. */
#define A2_PIN(A, B) __asm__("" : "+x"(A), "+x"(B))

/* One k pair J (0..3) of the current 8-k group for all four rows against the 16 channels at W.
 * A macro because VPSHUFD needs an immediate (an inline function would not compile at -O0). */
#define A2_STEP(J, W)                                                                                  \
    do {                                                                                               \
        const __m256i w0_ = _mm256_loadu_si256((const __m256i*)(const void*)(W));                      \
        const __m256i w1_ = _mm256_loadu_si256((const __m256i*)(const void*)((W) + 16));               \
        __m256i b_ = _mm256_shuffle_epi32(x0, (J) * 0x55);                                             \
        acc00 = _mm256_add_epi32(acc00, _mm256_madd_epi16(b_, w0_));                                   \
        acc01 = _mm256_add_epi32(acc01, _mm256_madd_epi16(b_, w1_));                                   \
        b_ = _mm256_shuffle_epi32(x1, (J) * 0x55);                                                     \
        acc10 = _mm256_add_epi32(acc10, _mm256_madd_epi16(b_, w0_));                                   \
        acc11 = _mm256_add_epi32(acc11, _mm256_madd_epi16(b_, w1_));                                   \
        b_ = _mm256_shuffle_epi32(x2, (J) * 0x55);                                                     \
        acc20 = _mm256_add_epi32(acc20, _mm256_madd_epi16(b_, w0_));                                   \
        acc21 = _mm256_add_epi32(acc21, _mm256_madd_epi16(b_, w1_));                                   \
        b_ = _mm256_shuffle_epi32(x3, (J) * 0x55);                                                     \
        acc30 = _mm256_add_epi32(acc30, _mm256_madd_epi16(b_, w0_));                                   \
        acc31 = _mm256_add_epi32(acc31, _mm256_madd_epi16(b_, w1_));                                   \
        A2_PIN(acc00, acc01);                                                                          \
        A2_PIN(acc10, acc11);                                                                          \
        A2_PIN(acc20, acc21);                                                                          \
        A2_PIN(acc30, acc31);                                                                          \
    } while (0)

/* Requantize row R's accumulators and store its nc bytes. */
#define A2_STORE_ROW(R, ACC0, ACC1)                                                                    \
    do {                                                                                               \
        const __m128i v_ = a2_pack16(a2_requant(ACC0, scale0, vfmin, vfmax, vyzp),                     \
                                     a2_requant(ACC1, scale1, vfmin, vfmax, vyzp));                    \
        uint8_t* row_ = c + (R) * c_stride;                                                            \
        if (nc == A2_NR) {                                                                             \
            _mm_storeu_si128((__m128i*)(void*)row_, v_);                                               \
        } else {                                                                                       \
            uint8_t buf_[16];                                                                          \
            _mm_storeu_si128((__m128i*)(void*)buf_, v_);                                               \
            memcpy(row_, buf_, nc);                                                                    \
        }                                                                                              \
    } while (0)

static void a2_igemm(size_t mr, size_t nc, size_t kc, size_t ks, const uint8_t* const* a, const void* w,
                     uint8_t* c, size_t c_stride, const vki_qparams* q)
{
    const int32_t* bias = (const int32_t*)w;
    const float* scale = (const float*)(bias + A2_NR);
    const int16_t* wt = (const int16_t*)(scale + A2_NR);

    /* The bias seeds the accumulators; rows >= mr are computed on a repeated valid row and dropped. */
    __m256i acc00 = _mm256_loadu_si256((const __m256i*)(const void*)bias);
    __m256i acc01 = _mm256_loadu_si256((const __m256i*)(const void*)(bias + 8));
    __m256i acc10 = acc00, acc11 = acc01, acc20 = acc00, acc21 = acc01, acc30 = acc00, acc31 = acc01;
    const __m128i vxzp = _mm_set1_epi16((int16_t)q->x_zp);

    for (size_t t = 0; t < ks; t++, a += A2_MR) {
        const uint8_t* p0 = a[0];
        const uint8_t* p1 = a[1];
        const uint8_t* p2 = a[2];
        const uint8_t* p3 = a[3];
        size_t k = kc;
        /* Main loop: 8 k (4 pairs) per iteration from one 8-byte load per row. */
        for (; k >= 8; k -= 8) {
            const __m256i x0 = a2_pairs8(_mm_loadl_epi64((const __m128i*)(const void*)p0), vxzp);
            const __m256i x1 = a2_pairs8(_mm_loadl_epi64((const __m128i*)(const void*)p1), vxzp);
            const __m256i x2 = a2_pairs8(_mm_loadl_epi64((const __m128i*)(const void*)p2), vxzp);
            const __m256i x3 = a2_pairs8(_mm_loadl_epi64((const __m128i*)(const void*)p3), vxzp);
            p0 += 8;
            p1 += 8;
            p2 += 8;
            p3 += 8;
            A2_STEP(0, wt);
            A2_STEP(1, wt + 32);
            A2_STEP(2, wt + 64);
            A2_STEP(3, wt + 96);
            wt += 4 * A2_NR * A2_KR;
        }
        /* Tail: 1..7 k, i.e. ceil(k/2) pairs. The bytes past the row's end are zero in the register,
         * and for odd k the packed weight of the missing k is zero, so the extra slot adds nothing. */
        if (k != 0) {
            const __m256i x0 = a2_pairs8(a2_load_tail(p0, k, kc), vxzp);
            const __m256i x1 = a2_pairs8(a2_load_tail(p1, k, kc), vxzp);
            const __m256i x2 = a2_pairs8(a2_load_tail(p2, k, kc), vxzp);
            const __m256i x3 = a2_pairs8(a2_load_tail(p3, k, kc), vxzp);
            A2_STEP(0, wt);
            if (k > 2) A2_STEP(1, wt + 32);
            if (k > 4) A2_STEP(2, wt + 64);
            if (k > 6) A2_STEP(3, wt + 96);
            wt += (k + 1) / 2 * A2_NR * A2_KR;
        }
    }

    const __m256 scale0 = _mm256_loadu_ps(scale);
    const __m256 scale1 = _mm256_loadu_ps(scale + 8);
    const __m256 vfmin = _mm256_set1_ps(q->fmin);
    const __m256 vfmax = _mm256_set1_ps(q->fmax);
    const __m256i vyzp = _mm256_set1_epi32(q->y_zp);
    A2_STORE_ROW(0, acc00, acc01);
    if (mr > 1) A2_STORE_ROW(1, acc10, acc11);
    if (mr > 2) A2_STORE_ROW(2, acc20, acc21);
    if (mr > 3) A2_STORE_ROW(3, acc30, acc31);
}

/* ------------------------------------------------------------------------------------------------
 * Depthwise: one output pixel, all channels; weights int16 [ks][cp].
 *
 * Main loop, 16 channels: taps go in pairs so that VPMADDWD does useful work in both halves of each
 * dword: interleaving the int16 activations of taps t and t+1 (and their weights) gives per channel
 * x_t * w_t + x_t1 * w_t1, exact in int32. Unpacking works within 128-bit lanes, so the two
 * accumulators hold channels [0-3 | 8-11] and [4-7 | 12-15]; one lane permute per block restores
 * channel order. Per 16 channels and tap this needs 3 loads (pointer, activations, weights) and half
 * the widening shuffles of the int32 form below; measured 10-25% faster than it on Zen 3.
 *
 * Groups of 8 and the tail: the activation goes to int32 lanes as (x - x_zp) (its low int16 is the
 * exact value, the high half only sign bits) and the weight is zero-extended to (w, 0), so VPMADDWD
 * computes (x - x_zp) * w + high * 0 per lane, already in channel order.
 */

static inline __m256i a2_dw_x16(const uint8_t* p, __m256i vxzp16)
{
    return _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i*)(const void*)p)), vxzp16);
}

static inline __m256i a2_dw_x8(const uint8_t* p, __m256i vxzp32)
{
    return _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(const void*)p)), vxzp32);
}

static inline __m256i a2_dw_w8(const int16_t* p)
{
    return _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(const void*)p));
}

/* Always inlined so that ks is a compile-time constant in dw9/dw25. */
static inline __attribute__((always_inline)) void a2_dw(size_t channels, size_t ks, const uint8_t* const* a,
                                                        const void* w, uint8_t* y, const vki_qparams* q)
{
    const size_t cp = (channels + A2_CR - 1) / A2_CR * A2_CR;
    const int32_t* bias = (const int32_t*)w;
    const float* scale = (const float*)(bias + cp);
    const int16_t* wt = (const int16_t*)(scale + cp);
    const __m256i vxzp = _mm256_set1_epi32(q->x_zp);
    const __m256i vxzp16 = _mm256_set1_epi16((int16_t)q->x_zp);
    const __m256 vfmin = _mm256_set1_ps(q->fmin);
    const __m256 vfmax = _mm256_set1_ps(q->fmax);
    const __m256i vyzp = _mm256_set1_epi32(q->y_zp);
    const __m256i zero = _mm256_setzero_si256();
    size_t ch = 0;

    for (; ch + 16 <= channels; ch += 16) {
        __m256i lo = zero, hi = zero;
        size_t t = 0;
        for (; t + 2 <= ks; t += 2) {
            const __m256i x0 = a2_dw_x16(a[t] + ch, vxzp16);
            const __m256i x1 = a2_dw_x16(a[t + 1] + ch, vxzp16);
            const __m256i w0 = _mm256_loadu_si256((const __m256i*)(const void*)(wt + t * cp + ch));
            const __m256i w1 = _mm256_loadu_si256((const __m256i*)(const void*)(wt + (t + 1) * cp + ch));
            lo = _mm256_add_epi32(lo,
                                  _mm256_madd_epi16(_mm256_unpacklo_epi16(x0, x1), _mm256_unpacklo_epi16(w0, w1)));
            hi = _mm256_add_epi32(hi,
                                  _mm256_madd_epi16(_mm256_unpackhi_epi16(x0, x1), _mm256_unpackhi_epi16(w0, w1)));
        }
        if (t < ks) { /* odd ks: the last tap pairs with a zero weight */
            const __m256i x0 = a2_dw_x16(a[t] + ch, vxzp16);
            const __m256i w0 = _mm256_loadu_si256((const __m256i*)(const void*)(wt + t * cp + ch));
            lo = _mm256_add_epi32(lo,
                                  _mm256_madd_epi16(_mm256_unpacklo_epi16(x0, x0), _mm256_unpacklo_epi16(w0, zero)));
            hi = _mm256_add_epi32(hi,
                                  _mm256_madd_epi16(_mm256_unpackhi_epi16(x0, x0), _mm256_unpackhi_epi16(w0, zero)));
        }
        const __m256i acc0 = _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20),
                                              _mm256_loadu_si256((const __m256i*)(const void*)(bias + ch)));
        const __m256i acc1 = _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x31),
                                              _mm256_loadu_si256((const __m256i*)(const void*)(bias + ch + 8)));
        const __m128i v = a2_pack16(a2_requant(acc0, _mm256_loadu_ps(scale + ch), vfmin, vfmax, vyzp),
                                    a2_requant(acc1, _mm256_loadu_ps(scale + ch + 8), vfmin, vfmax, vyzp));
        _mm_storeu_si128((__m128i*)(void*)(y + ch), v);
    }
    /* Then at most one group of 8 and a tail of 1..7 through a stack copy (never over-read a row).
     * Weights, biases and scales are padded to cp >= round_up(channels, 8), so they load in full. */
    for (; ch < channels; ch += 8) {
        const size_t n = channels - ch < 8 ? channels - ch : 8;
        __m256i acc = _mm256_loadu_si256((const __m256i*)(const void*)(bias + ch));
        if (n == 8) {
            for (size_t t = 0; t < ks; t++)
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(a2_dw_x8(a[t] + ch, vxzp), a2_dw_w8(wt + t * cp + ch)));
        } else {
            uint8_t buf[8] = {0};
            for (size_t t = 0; t < ks; t++) {
                memcpy(buf, a[t] + ch, n);
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(a2_dw_x8(buf, vxzp), a2_dw_w8(wt + t * cp + ch)));
            }
        }
        const __m128i v = a2_pack8(a2_requant(acc, _mm256_loadu_ps(scale + ch), vfmin, vfmax, vyzp));
        if (n == 8) {
            _mm_storel_epi64((__m128i*)(void*)(y + ch), v);
        } else {
            uint8_t out[16];
            _mm_storeu_si128((__m128i*)(void*)out, v);
            memcpy(y + ch, out, n);
        }
    }
}

static void a2_dw9(size_t channels, size_t ks, const uint8_t* const* a, const void* w, uint8_t* y,
                   const vki_qparams* q)
{
    (void)ks;
    a2_dw(channels, 9, a, w, y, q);
}

static void a2_dw25(size_t channels, size_t ks, const uint8_t* const* a, const void* w, uint8_t* y,
                    const vki_qparams* q)
{
    (void)ks;
    a2_dw(channels, 25, a, w, y, q);
}

static void a2_dw_any(size_t channels, size_t ks, const uint8_t* const* a, const void* w, uint8_t* y,
                      const vki_qparams* q)
{
    a2_dw(channels, ks, a, w, y, q);
}

const vki_isa vki_isa_avx2 = {
    .name = "avx2",
    .available = a2_available,
    .mr = A2_MR,
    .nr = A2_NR,
    .kr = A2_KR,
    .igemm = a2_igemm,
    .cr = A2_CR,
    .dw9 = a2_dw9,
    .dw25 = a2_dw25,
    .dw_any = a2_dw_any,
};
