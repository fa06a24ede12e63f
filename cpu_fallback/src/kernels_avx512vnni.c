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
#include "kernels_common.h"

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

/* The last n (1..7) bytes of a row of kc bytes, p pointing at them, in the low bytes of an xmm (zero above). */
static inline __m128i v5_load_tail(const uint8_t* p, size_t n, size_t kc)
{
    return _mm_cvtsi64_si128((long long)vki_load_tail64(p, n, kc));
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

/* ------------------------------------------------------------------------------------------------
 * u8s8 igemm (internal.h): VPDPBUSD multiplies 4 unsigned activation bytes by 4 signed weight bytes and
 * adds the four products to an int32 lane without intermediate saturation (the non-"S" form), so any
 * int8 (w - w_zp) is exact: 64 MACs per instruction against VPDPWSSD's 32, and half the weight bytes.
 * Tile MR=7 x NR=32 (two zmm per row, 14 accumulators): every MobileNet-class spatial size (112^2, 56^2,
 * 28^2, 14^2, 7^2) is a multiple of 7, so no rows are wasted; 14 independent chains cover VPDPBUSD's
 * latency at two per cycle, and each 4-k step costs 7 broadcasts + 2 weight loads for 14 VPDPBUSD.
 * Rows are computed for r < mr only (a compile-time row count per instantiation).
 */
#define V5Q_MR 7
#define V5Q_NR 32
#define V5Q_MR_NARROW 14 /* igemm_u8s8_narrow: 14 accumulators of 16 channels */

/* 4 activation bytes at p as one dword (n = 4), or the first n = 1..3 of them, zero above. */
static inline int32_t v5q_dword(const uint8_t* p, size_t n)
{
    uint32_t v;
    if (n >= 4) {
        memcpy(&v, p, 4);
        return (int32_t)v;
    }
    return (int32_t)(uint32_t)vki_load_partial64(p, n);
}

/* R rows (a[] holds AS pointers per tap) x NV zmm of 16 channels: the 7 x 32 tile (NV 2, AS 7), or the narrow
 * 14 x 16 one (NV 1, AS 14) for layers of at most 16 output channels per group, where the wide tile's second
 * vector would multiply zero weights: ResNet-8's 16-channel 3x3 layers ran at 177 GMAC/s on it. */
static inline __attribute__((always_inline)) void v5q_tile(const size_t R, const size_t NV, const size_t AS,
                                                           size_t nc, size_t kc, size_t ks,
                                                           const uint8_t* const* a, const void* w, uint8_t* c,
                                                           size_t c_stride, const vki_qparams* q)
{
    const int32_t* bias = (const int32_t*)w;
    const float* scale = (const float*)(bias + V5Q_NR);
    const int8_t* wt = (const int8_t*)(scale + V5Q_NR);
    __m512i acc[V5Q_MR_NARROW][V5Q_NR / 16];
    _Pragma("GCC unroll 8") for (size_t v = 0; v < NV; v++) {
        const __m512i b0 = _mm512_loadu_si512((const void*)(bias + 16 * v));
        _Pragma("GCC unroll 16") for (size_t r = 0; r < R; r++) acc[r][v] = b0;
    }
    for (size_t t = 0; t < ks; t++, a += AS) {
        const uint8_t* p[V5Q_MR_NARROW];
        _Pragma("GCC unroll 16") for (size_t r = 0; r < R; r++) p[r] = a[r];
        size_t k = 0;
        for (; k + 4 <= kc; k += 4, wt += 4 * V5Q_NR) {
            __m512i wv[V5Q_NR / 16]; /* not wv[NV]: GCC made that a stack array stored on every step */
            _Pragma("GCC unroll 8") for (size_t v = 0; v < NV; v++) wv[v] = _mm512_loadu_si512((const void*)(wt + 64 * v));
            _Pragma("GCC unroll 16") for (size_t r = 0; r < R; r++) {
                const __m512i x = _mm512_set1_epi32(v5q_dword(p[r] + k, 4));
                _Pragma("GCC unroll 8") for (size_t v = 0; v < NV; v++) acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], x, wv[v]);
            }
        }
        if (k < kc) { /* 1..3 k left: the missing bytes are zero here and their packed weights zero */
            __m512i wv[V5Q_NR / 16];
            _Pragma("GCC unroll 8") for (size_t v = 0; v < NV; v++) wv[v] = _mm512_loadu_si512((const void*)(wt + 64 * v));
            _Pragma("GCC unroll 16") for (size_t r = 0; r < R; r++) {
                const __m512i x = _mm512_set1_epi32(v5q_dword(p[r] + k, kc - k));
                _Pragma("GCC unroll 8") for (size_t v = 0; v < NV; v++) acc[r][v] = _mm512_dpbusd_epi32(acc[r][v], x, wv[v]);
            }
            wt += 4 * V5Q_NR;
        }
    }
    const __m512 vfmin = _mm512_set1_ps(q->fmin);
    const __m512 vfmax = _mm512_set1_ps(q->fmax);
    const __m512i vyzp = _mm512_set1_epi32(q->y_zp);
    _Pragma("GCC unroll 16") for (size_t r = 0; r < R; r++)
        _Pragma("GCC unroll 8") for (size_t v = 0; v < NV; v++) {
            const __m128i o = v5_pack16(v5_requant(acc[r][v], _mm512_loadu_ps(scale + 16 * v), vfmin, vfmax, vyzp));
            const size_t n0 = 16 * v;
            /* masked byte stores for the block's tail: a memcpy call per row cost ~7 ns */
            if (nc >= n0 + 16) _mm_storeu_si128((__m128i*)(void*)(c + r * c_stride + n0), o);
            else if (nc > n0) _mm_mask_storeu_epi8(c + r * c_stride + n0, (__mmask16)((1u << (nc - n0)) - 1u), o);
        }
}

#define V5Q_ROWS(NV)                                                                                         \
    switch (mr) {                                                                                            \
    case 1: v5q_tile(1, NV, V5Q_MR, nc, kc, ks, a, w, c, c_stride, q); break;                                \
    case 2: v5q_tile(2, NV, V5Q_MR, nc, kc, ks, a, w, c, c_stride, q); break;                                \
    case 3: v5q_tile(3, NV, V5Q_MR, nc, kc, ks, a, w, c, c_stride, q); break;                                \
    case 4: v5q_tile(4, NV, V5Q_MR, nc, kc, ks, a, w, c, c_stride, q); break;                                \
    case 5: v5q_tile(5, NV, V5Q_MR, nc, kc, ks, a, w, c, c_stride, q); break;                                \
    case 6: v5q_tile(6, NV, V5Q_MR, nc, kc, ks, a, w, c, c_stride, q); break;                                \
    default: v5q_tile(7, NV, V5Q_MR, nc, kc, ks, a, w, c, c_stride, q); break;                               \
    }

static void v5q_igemm(size_t mr, size_t nc, size_t kc, size_t ks, const uint8_t* const* a, const void* w,
                      uint8_t* c, size_t c_stride, const vki_qparams* q)
{
    /* A block's tail of at most 16 channels (48 = 32 + 16, 80, 112, 144, ...) runs one vector, not two over zero
     * weights: YOLOX-tiny's 48-channel layers (ddddocr_det, 1 thread, Zen 4) 3x3 0.438 -> 0.325 ms, 1x1 at
     * 104x104 0.232 -> 0.184 ms, bits unchanged (bench/ops.py --model, interleaved with ORT). */
    if (nc > 16) { V5Q_ROWS(2) }
    else { V5Q_ROWS(1) }
}

/* nc <= 16 (the variant's igemm_u8s8_narrow): up to 14 rows, a[] with 14 pointers per tap. */
static void v5q_igemm_narrow(size_t mr, size_t nc, size_t kc, size_t ks, const uint8_t* const* a, const void* w,
                             uint8_t* c, size_t c_stride, const vki_qparams* q)
{
    if (mr > 7) { /* 8..14 rows in one tile, 1..7 in a half-height one */
        switch (mr) {
        case 8: v5q_tile(8, 1, V5Q_MR_NARROW, nc, kc, ks, a, w, c, c_stride, q); break;
        case 9: v5q_tile(9, 1, V5Q_MR_NARROW, nc, kc, ks, a, w, c, c_stride, q); break;
        case 10: v5q_tile(10, 1, V5Q_MR_NARROW, nc, kc, ks, a, w, c, c_stride, q); break;
        case 11: v5q_tile(11, 1, V5Q_MR_NARROW, nc, kc, ks, a, w, c, c_stride, q); break;
        case 12: v5q_tile(12, 1, V5Q_MR_NARROW, nc, kc, ks, a, w, c, c_stride, q); break;
        case 13: v5q_tile(13, 1, V5Q_MR_NARROW, nc, kc, ks, a, w, c, c_stride, q); break;
        default: v5q_tile(14, 1, V5Q_MR_NARROW, nc, kc, ks, a, w, c, c_stride, q); break;
        }
        return;
    }
    switch (mr) {
    case 1: v5q_tile(1, 1, V5Q_MR_NARROW, nc, kc, ks, a, w, c, c_stride, q); break;
    case 2: v5q_tile(2, 1, V5Q_MR_NARROW, nc, kc, ks, a, w, c, c_stride, q); break;
    case 3: v5q_tile(3, 1, V5Q_MR_NARROW, nc, kc, ks, a, w, c, c_stride, q); break;
    case 4: v5q_tile(4, 1, V5Q_MR_NARROW, nc, kc, ks, a, w, c, c_stride, q); break;
    case 5: v5q_tile(5, 1, V5Q_MR_NARROW, nc, kc, ks, a, w, c, c_stride, q); break;
    case 6: v5q_tile(6, 1, V5Q_MR_NARROW, nc, kc, ks, a, w, c, c_stride, q); break;
    default: v5q_tile(7, 1, V5Q_MR_NARROW, nc, kc, ks, a, w, c, c_stride, q); break;
    }
}

/* ------------------------------------------------------------------------------------------------
 * u8s8 depthwise over a run of pixels: VPDPBUSD over groups of 4 taps. For 64 channels, four tap rows are
 * interleaved so that each dword lane holds one channel's 4 tap bytes (VPUNPCK{L,H}BW then {L,H}WD, which
 * work within 128-bit lanes); one VPDPBUSD then does 4 taps x 16 channels, where the int16 kernel above
 * needs 16 instructions' worth of widening per tap.
 * The interleave leaves channel c0 + 16L + 4j + i in dword 4L + i of vector j (L: 128-bit lane, j: the
 * unpack result 0..3), so the packing stores weights, bias and scale in that order, and VPACKUSDW +
 * VPACKUSWB (also within lanes) put the 64 results back in channel order.
 * Block per 64 channels: int32 bias'[64]; float scale[64]; int8 wt[ceil(ks/4)][4][64] (permuted as above;
 * zero for channels >= `channels` and taps >= ks). A missing tap of the last group reads tap 0's row
 * against weight 0.
 */
#define V5D_CB 64

/* How a block of n channels (64 but in the last block) is loaded. Masked byte loads cost: on the Zen 5 here a
 * 3x3 block of 64 channels took 11.8 ns per pixel with VMOVDQU8{k}{z} against 7.6 ns with plain loads (tests
 * in /tmp, 1e8 MACs, best of 9), so only a tail that is not a multiple of 16 channels is masked. A tail of 16
 * or 32 channels instead fills the vector with 4 or 2 pixels (their lanes are independent: the unpacks and
 * packs work within 128-bit lanes), doubling or quadrupling the work per instruction on layers of 32 or 16
 * channels and on the 16-channel tail of 144. */
enum { V5D_FULL, V5D_MASKED, V5D_PIX2, V5D_PIX4, V5D_C48 };

static int v5d_mode(size_t n)
{
    return n == 64 ? V5D_FULL : n == 32 ? V5D_PIX2 : n == 16 ? V5D_PIX4 : n == 48 ? V5D_C48 : V5D_MASKED;
}

/* Channel of dword d (lane d / 4) of vector j in a block of mode `mode`: in the pixel modes a lane's channel
 * comes from lane (d / 4) mod (channels per pixel / 16), so weights, bias and scale repeat per pixel slot. */
static size_t v5d_perm(int mode, size_t j, size_t d)
{
    const size_t lanes = mode == V5D_PIX2 ? 2 : mode == V5D_PIX4 ? 1 : 4;
    return 16 * (d / 4 % lanes) + 4 * j + d % 4;
}

/* Tap u of group g. 3x3 kernels group by kernel row, (ky, 0), (ky, 1), (ky, 2) and a fourth lane of weight 0
 * (its tap index is `ks`: packed as 0, loaded from the group's first tap), so that v5d_rows2 can give one
 * interleaved input row to two output rows; any other size groups taps 4g..4g+3 (past ks: weight 0). */
static inline size_t v5d_tap(size_t ks, size_t g, size_t u)
{
    if (ks == 9) return u < 3 ? 3 * g + u : ks;
    return 4 * g + u < ks ? 4 * g + u : ks;
}

static size_t v5d_pack(size_t channels, size_t ks, const int16_t* wt, const int32_t* bias, const float* scale,
                       void* out)
{
    const size_t groups = (ks + 3) / 4, nb = (channels + V5D_CB - 1) / V5D_CB;
    const size_t block = V5D_CB * 8 + groups * 4 * V5D_CB;
    if (!out) return nb * block;
    for (size_t b = 0; b < nb; b++) {
        uint8_t* blk = (uint8_t*)out + b * block;
        int32_t* pb = (int32_t*)(void*)blk;
        float* ps = (float*)(void*)(blk + V5D_CB * 4);
        int8_t* pw = (int8_t*)(blk + V5D_CB * 8);
        const size_t n = channels - b * V5D_CB < V5D_CB ? channels - b * V5D_CB : V5D_CB;
        const int mode = v5d_mode(n);
        for (size_t j = 0; j < 4; j++)
            for (size_t d = 0; d < 16; d++) {
                const size_t ch = b * V5D_CB + v5d_perm(mode, j, d);
                const int in = ch < channels;
                pb[16 * j + d] = in ? bias[ch] : 0;
                ps[16 * j + d] = in ? scale[ch] : 0.0f;
                for (size_t g = 0; g < groups; g++)
                    for (size_t u = 0; u < 4; u++) {
                        const size_t t = v5d_tap(ks, g, u);
                        pw[((g * 4 + j) * 16 + d) * 4 + u] = (int8_t)(in && t < ks ? wt[t * channels + ch] : 0);
                    }
            }
    }
    return nb * block;
}

/* Tap t's bytes [c0, c0 + n) for the pixel slots of one vector: p[k] are the tap pointers of slot k. */
static inline __attribute__((always_inline)) __m512i v5d_load(const int mode, const uint8_t* const* const* p,
                                                              size_t t, size_t c0, __mmask64 m)
{
    switch (mode) {
    case V5D_FULL: return _mm512_loadu_si512((const void*)(p[0][t] + c0));
    case V5D_PIX2:
        return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(const void*)(p[0][t] + c0))),
                                  _mm256_loadu_si256((const __m256i*)(const void*)(p[1][t] + c0)), 1);
    case V5D_PIX4: {
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i*)(const void*)(p[0][t] + c0)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i*)(const void*)(p[1][t] + c0)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i*)(const void*)(p[2][t] + c0)), 2);
        return _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i*)(const void*)(p[3][t] + c0)), 3);
    }
    case V5D_C48:
        return _mm512_inserti32x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i*)(const void*)(p[0][t] + c0))),
                                  _mm_loadu_si128((const __m128i*)(const void*)(p[0][t] + c0 + 32)), 2);
    default: return _mm512_maskz_loadu_epi8(m, p[0][t] + c0);
    }
}

/* The 64 result bytes to the `slots` pixels of the vector (slots <= its pixel count; y[k]: slot k's row). */
static inline __attribute__((always_inline)) void v5d_store(const int mode, uint8_t* const* y, size_t slots,
                                                            size_t c0, __mmask64 m, __m512i v)
{
    switch (mode) {
    case V5D_FULL: _mm512_storeu_si512((void*)(y[0] + c0), v); break;
    case V5D_PIX2:
        _mm256_storeu_si256((__m256i*)(void*)(y[0] + c0), _mm512_castsi512_si256(v));
        if (slots > 1) _mm256_storeu_si256((__m256i*)(void*)(y[1] + c0), _mm512_extracti64x4_epi64(v, 1));
        break;
    case V5D_PIX4:
        _mm_storeu_si128((__m128i*)(void*)(y[0] + c0), _mm512_castsi512_si128(v));
        if (slots > 1) _mm_storeu_si128((__m128i*)(void*)(y[1] + c0), _mm512_extracti32x4_epi32(v, 1));
        if (slots > 2) _mm_storeu_si128((__m128i*)(void*)(y[2] + c0), _mm512_extracti32x4_epi32(v, 2));
        if (slots > 3) _mm_storeu_si128((__m128i*)(void*)(y[3] + c0), _mm512_extracti32x4_epi32(v, 3));
        break;
    default: _mm512_mask_storeu_epi8(y[0] + c0, m, v); break;
    }
}

/* 64 channels as 4 vectors j = 0..3 in the interleave's order (channel c0 + 16L + 4j + i in dword 4L + i).
 * The helpers below spell the 4 vectors out: with loops over j GCC kept the quads in memory and the depthwise
 * ran 3x slower (62 -> 19 GMAC/s on 144 channels). */
typedef struct {
    __m512i v[4];
} v5d_quad;

static inline __attribute__((always_inline)) v5d_quad v5d_bias(const int32_t* pb)
{
    return (v5d_quad){{_mm512_loadu_si512((const void*)pb), _mm512_loadu_si512((const void*)(pb + 16)),
                       _mm512_loadu_si512((const void*)(pb + 32)), _mm512_loadu_si512((const void*)(pb + 48))}};
}

/* Four tap rows of 64 channels interleaved so that each dword holds one channel's 4 tap bytes. */
static inline __attribute__((always_inline)) v5d_quad v5d_interleave(__m512i x0, __m512i x1, __m512i x2,
                                                                     __m512i x3)
{
    const __m512i l01 = _mm512_unpacklo_epi8(x0, x1), h01 = _mm512_unpackhi_epi8(x0, x1);
    const __m512i l23 = _mm512_unpacklo_epi8(x2, x3), h23 = _mm512_unpackhi_epi8(x2, x3);
    return (v5d_quad){{_mm512_unpacklo_epi16(l01, l23), _mm512_unpackhi_epi16(l01, l23),
                       _mm512_unpacklo_epi16(h01, h23), _mm512_unpackhi_epi16(h01, h23)}};
}

/* acc += the interleaved taps x their packed group of weights wg (4 x 64 bytes). */
static inline __attribute__((always_inline)) v5d_quad v5d_dot(v5d_quad acc, v5d_quad x, const int8_t* wg)
{
    acc.v[0] = _mm512_dpbusd_epi32(acc.v[0], x.v[0], _mm512_loadu_si512((const void*)wg));
    acc.v[1] = _mm512_dpbusd_epi32(acc.v[1], x.v[1], _mm512_loadu_si512((const void*)(wg + 64)));
    acc.v[2] = _mm512_dpbusd_epi32(acc.v[2], x.v[2], _mm512_loadu_si512((const void*)(wg + 128)));
    acc.v[3] = _mm512_dpbusd_epi32(acc.v[3], x.v[3], _mm512_loadu_si512((const void*)(wg + 192)));
    return acc;
}

/* 64 accumulators to 64 output bytes in channel order: the low byte of each requantized result (the
 * contract), then unsigned packs that cannot saturate. */
static inline __attribute__((always_inline)) __m512i v5d_out(v5d_quad acc, const float* ps, __m512 vfmin,
                                                             __m512 vfmax, __m512i vyzp)
{
    const __m512i vff = _mm512_set1_epi32(0xff);
    const __m512i r0 = _mm512_and_si512(v5_requant(acc.v[0], _mm512_loadu_ps(ps), vfmin, vfmax, vyzp), vff);
    const __m512i r1 = _mm512_and_si512(v5_requant(acc.v[1], _mm512_loadu_ps(ps + 16), vfmin, vfmax, vyzp), vff);
    const __m512i r2 = _mm512_and_si512(v5_requant(acc.v[2], _mm512_loadu_ps(ps + 32), vfmin, vfmax, vyzp), vff);
    const __m512i r3 = _mm512_and_si512(v5_requant(acc.v[3], _mm512_loadu_ps(ps + 48), vfmin, vfmax, vyzp), vff);
    return _mm512_packus_epi16(_mm512_packus_epi32(r0, r1), _mm512_packus_epi32(r2, r3));
}

/* One block of channels over the run of pixels, `mode` a constant in each instantiation. */
static inline __attribute__((always_inline)) void v5d_block(const int mode, size_t pixels, const size_t ks,
                                                            const uint8_t* const* a, const uint8_t* blk,
                                                            uint8_t* y, size_t y_stride, size_t c0, size_t n,
                                                            const vki_qparams* q)
{
    const size_t groups = (ks + 3) / 4;
    const size_t slots = mode == V5D_PIX2 ? 2 : mode == V5D_PIX4 ? 4 : 1;
    const __m512 vfmin = _mm512_set1_ps(q->fmin);
    const __m512 vfmax = _mm512_set1_ps(q->fmax);
    const __m512i vyzp = _mm512_set1_epi32(q->y_zp);
    const int32_t* pb = (const int32_t*)(const void*)blk;
    const float* ps = (const float*)(const void*)(blk + V5D_CB * 4);
    const int8_t* pw = (const int8_t*)(blk + V5D_CB * 8);
    const __mmask64 m = n == V5D_CB ? ~(__mmask64)0 : (((__mmask64)1 << n) - 1);
    for (size_t px = 0; px < pixels; px += slots) {
        /* Slots past the run repeat its last pixel (read, never stored). */
        const uint8_t* const* ap[4];
        uint8_t* yp[4];
        for (size_t k = 0; k < slots; k++) {
            const size_t pk = px + k < pixels ? px + k : pixels - 1;
            ap[k] = a + pk * ks;
            yp[k] = y + pk * y_stride;
        }
        v5d_quad acc = v5d_bias(pb);
        for (size_t g = 0; g < groups; g++) {
            /* A tap past ks (weight 0) reads the group's first tap: any valid row does. */
            const size_t t0 = v5d_tap(ks, g, 0), t1 = v5d_tap(ks, g, 1), t2 = v5d_tap(ks, g, 2), t3 = v5d_tap(ks, g, 3);
            const __m512i x0 = v5d_load(mode, ap, t0, c0, m);
            const __m512i x1 = v5d_load(mode, ap, t1 < ks ? t1 : t0, c0, m);
            const __m512i x2 = v5d_load(mode, ap, t2 < ks ? t2 : t0, c0, m);
            const __m512i x3 = v5d_load(mode, ap, t3 < ks ? t3 : t0, c0, m);
            acc = v5d_dot(acc, v5d_interleave(x0, x1, x2, x3), pw + g * 4 * V5D_CB);
        }
        v5d_store(mode, yp, pixels - px < slots ? pixels - px : slots, c0, m, v5d_out(acc, ps, vfmin, vfmax, vyzp));
    }
}

static inline __attribute__((always_inline)) void v5d_run(size_t pixels, size_t channels, const size_t ks,
                                                          const uint8_t* const* a, const void* w, uint8_t* y,
                                                          size_t y_stride, const vki_qparams* q)
{
    const size_t block = V5D_CB * 8 + (ks + 3) / 4 * 4 * V5D_CB;
    for (size_t c0 = 0; c0 < channels; c0 += V5D_CB) {
        const uint8_t* blk = (const uint8_t*)w + c0 / V5D_CB * block;
        const size_t n = channels - c0 < V5D_CB ? channels - c0 : V5D_CB;
        switch (v5d_mode(n)) {
        case V5D_FULL: v5d_block(V5D_FULL, pixels, ks, a, blk, y, y_stride, c0, n, q); break;
        case V5D_PIX2: v5d_block(V5D_PIX2, pixels, ks, a, blk, y, y_stride, c0, n, q); break;
        case V5D_PIX4: v5d_block(V5D_PIX4, pixels, ks, a, blk, y, y_stride, c0, n, q); break;
        case V5D_C48: v5d_block(V5D_C48, pixels, ks, a, blk, y, y_stride, c0, n, q); break;
        default: v5d_block(V5D_MASKED, pixels, ks, a, blk, y, y_stride, c0, n, q); break;
        }
    }
}

/* Two output rows of a 3x3 stride-1 depthwise at once (vki_dwp2_fn): the row below's taps (ky, kx) are this
 * row's (ky + 1, kx), so 4 interleaved input rows serve both (each row's 3 taps and a copy of the first, the
 * 4th lane weighing 0): 4 interleaves instead of 6, and 8 loads of 64 channels instead of 12 (the 8 unpacks
 * of an interleave cost about 0.75 cycle each on Zen 5, as much as the rest of a pixel's work). */
static inline __attribute__((always_inline)) void v5d_block2(const int mode, size_t pixels, const uint8_t* const* a,
                                                             size_t a_row, const uint8_t* blk, uint8_t* y,
                                                             size_t y_stride, size_t y_row, size_t c0, size_t n,
                                                             const vki_qparams* q)
{
    const size_t slots = mode == V5D_PIX2 ? 2 : mode == V5D_PIX4 ? 4 : 1;
    const __m512 vfmin = _mm512_set1_ps(q->fmin);
    const __m512 vfmax = _mm512_set1_ps(q->fmax);
    const __m512i vyzp = _mm512_set1_epi32(q->y_zp);
    const int32_t* pb = (const int32_t*)(const void*)blk;
    const float* ps = (const float*)(const void*)(blk + V5D_CB * 4);
    const int8_t* pw = (const int8_t*)(blk + V5D_CB * 8);
    const __mmask64 m = n == V5D_CB ? ~(__mmask64)0 : (((__mmask64)1 << n) - 1);
    for (size_t px = 0; px < pixels; px += slots) {
        const uint8_t* const* ap0[4];
        const uint8_t* const* ap1[4];
        uint8_t* yp0[4];
        uint8_t* yp1[4];
        for (size_t k = 0; k < slots; k++) {
            const size_t pk = px + k < pixels ? px + k : pixels - 1;
            ap0[k] = a + pk * 9;
            ap1[k] = a + a_row + pk * 9;
            yp0[k] = y + pk * y_stride;
            yp1[k] = yp0[k] + y_row;
        }
        v5d_quad top = v5d_bias(pb), bottom = top;
        for (size_t i = 0; i < 4; i++) { /* input row i: the top row's kernel row i, the bottom row's i - 1 */
            const uint8_t* const* const* P = i < 3 ? ap0 : ap1;
            const size_t t = 3 * (i < 3 ? i : 2);
            const __m512i x0 = v5d_load(mode, P, t, c0, m);
            const v5d_quad x = v5d_interleave(x0, v5d_load(mode, P, t + 1, c0, m), v5d_load(mode, P, t + 2, c0, m), x0);
            if (i < 3) top = v5d_dot(top, x, pw + i * 4 * V5D_CB);
            if (i > 0) bottom = v5d_dot(bottom, x, pw + (i - 1) * 4 * V5D_CB);
        }
        const size_t live = pixels - px < slots ? pixels - px : slots;
        v5d_store(mode, yp0, live, c0, m, v5d_out(top, ps, vfmin, vfmax, vyzp));
        v5d_store(mode, yp1, live, c0, m, v5d_out(bottom, ps, vfmin, vfmax, vyzp));
    }
}

/* Each block form in a function of its own: with all of them inlined into one, GCC stopped unrolling the tap
 * loops (its growth limits) and the 32-channel form ran at 51 GMAC/s instead of 65. */
#define V5D_ROWS2_FORM(name, mode)                                                                               \
    static __attribute__((noinline)) void name(size_t pixels, const uint8_t* const* a, size_t a_row,            \
                                               const uint8_t* blk, uint8_t* y, size_t y_stride, size_t y_row,    \
                                               size_t c0, size_t n, const vki_qparams* q)                        \
    {                                                                                                            \
        v5d_block2(mode, pixels, a, a_row, blk, y, y_stride, y_row, c0, n, q);                                   \
    }
V5D_ROWS2_FORM(v5d_rows2_full, V5D_FULL)
V5D_ROWS2_FORM(v5d_rows2_c48, V5D_C48)
V5D_ROWS2_FORM(v5d_rows2_masked, V5D_MASKED)

/* Blocks of 2 or 4 pixels per vector go a row at a time: two rows at once measured 20% slower on 32 channels
 * (twice the pixel pointers and stores per vector for the same saving). */
#define V5D_ROWS1_FORM(name, mode)                                                                               \
    static __attribute__((noinline)) void name(size_t pixels, const uint8_t* const* a, size_t a_row,            \
                                               const uint8_t* blk, uint8_t* y, size_t y_stride, size_t y_row,    \
                                               size_t c0, size_t n, const vki_qparams* q)                        \
    {                                                                                                            \
        v5d_block(mode, pixels, 9, a, blk, y, y_stride, c0, n, q);                                               \
        v5d_block(mode, pixels, 9, a + a_row, blk, y + y_row, y_stride, c0, n, q);                               \
    }
V5D_ROWS1_FORM(v5d_rows2_pix2, V5D_PIX2)
V5D_ROWS1_FORM(v5d_rows2_pix4, V5D_PIX4)

static void v5d_rows2(size_t pixels, size_t channels, const uint8_t* const* a, size_t a_row, const void* w,
                      uint8_t* y, size_t y_stride, size_t y_row, const vki_qparams* q)
{
    const size_t block = V5D_CB * 8 + 3 * 4 * V5D_CB;
    for (size_t c0 = 0; c0 < channels; c0 += V5D_CB) {
        const uint8_t* blk = (const uint8_t*)w + c0 / V5D_CB * block;
        const size_t n = channels - c0 < V5D_CB ? channels - c0 : V5D_CB;
        switch (v5d_mode(n)) {
        case V5D_FULL: v5d_rows2_full(pixels, a, a_row, blk, y, y_stride, y_row, c0, n, q); break;
        case V5D_PIX2: v5d_rows2_pix2(pixels, a, a_row, blk, y, y_stride, y_row, c0, n, q); break;
        case V5D_PIX4: v5d_rows2_pix4(pixels, a, a_row, blk, y, y_stride, y_row, c0, n, q); break;
        case V5D_C48: v5d_rows2_c48(pixels, a, a_row, blk, y, y_stride, y_row, c0, n, q); break;
        default: v5d_rows2_masked(pixels, a, a_row, blk, y, y_stride, y_row, c0, n, q); break;
        }
    }
}

static void v5d_dw(size_t pixels, size_t channels, size_t ks, const uint8_t* const* a, const void* w, uint8_t* y,
                   size_t y_stride, const vki_qparams* q)
{
    /* ks as a constant for the common kernels: the group loop unrolls and the tap clamps fold. */
    if (ks == 9) v5d_run(pixels, channels, 9, a, w, y, y_stride, q);
    else if (ks == 25) v5d_run(pixels, channels, 25, a, w, y, y_stride, q);
    else v5d_run(pixels, channels, ks, a, w, y, y_stride, q);
}

const vki_isa vki_isa_avx512vnni = {
    .name = "avx512vnni",
    .available = v5_available,
    .mr = V5_MR,
    .nr = V5_NR,
    .kr = V5_KR,
    .igemm = v5_igemm,
    .igemm_u8s8 = v5q_igemm,
    .name_u8s8 = "avx512vnni-u8s8",
    .u8s8_mr = V5Q_MR,
    .u8s8_nr = V5Q_NR,
    .igemm_u8s8_narrow = v5q_igemm_narrow,
    .u8s8_mr_narrow = V5Q_MR_NARROW,
    .u8s8_wmin = -128,
    .u8s8_wmax = 127,
    .u8s8_xoff = 0,
    .dw_u8s8 = v5d_dw,
    .dw_u8s8_pack = v5d_pack,
    .dw_u8s8_rows2 = v5d_rows2,
    .cr = V5_CR,
    .dw9 = v5_dw9,
    .dw25 = v5_dw25,
    .dw_any = v5_dw_any,
};
