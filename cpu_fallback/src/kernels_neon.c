/* ARM NEON microkernels (AArch64 and ARMv7 with NEON) for the contract in internal.h.
 *
 * Arithmetic: activations are widened with vsubl_u8(x, x_zp) (the uint16 wrap-around reinterpreted
 * as int16 is exactly x - x_zp in [-255, 255]) and multiplied by the int16 packed weights with
 * 16x16 -> 32-bit multiply-accumulates, so the int32 sums are exact.
 *
 * Requantization reproduces vki_requant_scalar bit for bit:
 *   vcvtq_f32_s32 (round to nearest, like the C conversion), one vmulq_f32 (never a fused
 *   multiply-add), clamp with vmaxq/vminq to [fmin, fmax], round half to even, add y_zp, and keep
 *   the low byte with non-saturating narrows (results lie in [-128, 255]).
 * ARMv7 NEON always runs flush-to-zero: a product that would be subnormal becomes +-0, which
 * rounds to the same integer 0 the scalar code gets, so this does not change any result.
 *
 * Variants:
 *   neon      MR=4 NR=8 KR=1, CR=8: tuned for in-order cores (Cortex-A53/A55/A7): 64-bit loads
 *             and multiply-accumulate by lane, QNNPACK-style. AArch64 and ARMv7.
 *   neon_a7x  MR=8 NR=8 KR=1, CR=8 (AArch64 only): 16 accumulators for wide out-of-order cores
 *             (Cortex-A7x/X, Neoverse), where the 32 vector registers allow twice the rows per
 *             weight load. Shares the depthwise kernels.
 */
#include "internal.h"

/* ARMv7: NEON is optional there, so a library meant to run on any ARMv7 must not be compiled with
 * -mfpu=neon as a whole (the compiler could then auto-vectorize the scalar code). With GCC this
 * file can enable NEON for itself only; neon_available() checks the CPU at run time. With
 * -mfpu=neon (or clang, which needs it) __ARM_NEON is already defined. */
#if defined(__arm__) && !defined(__aarch64__) && !defined(__ARM_NEON) && defined(__ARM_FP) && \
    defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("fpu=neon")
#define VKI_NEON_BY_PRAGMA 1
#endif

#if defined(__aarch64__) || defined(__ARM_NEON) || defined(VKI_NEON_BY_PRAGMA)

#include <arm_neon.h>
#include <string.h>

#include "kernels_common.h"

#if !defined(__aarch64__)
#include <sys/auxv.h>
#include <asm/hwcap.h>
#endif

/* Partial loads and stores build vectors from little-endian scalars (lane 0 = lowest byte). */
#if defined(__ARM_BIG_ENDIAN)
#error "kernels_neon.c assumes little-endian lane order"
#endif

static int neon_available(void)
{
#if defined(__aarch64__)
    return 1; /* Advanced SIMD is mandatory in AArch64 Linux ABIs */
#else
    return (getauxval(AT_HWCAP) & HWCAP_NEON) != 0;
#endif
}

/* ------------------------------------------------------------------------------------------------
 * Loads and stores of 1..7 bytes that never touch memory outside [p, p + n).
 * memcpy with constant sizes compiles to single (unaligned-capable) scalar loads/stores. */

static inline uint8x8_t load_partial_u8(const uint8_t* p, size_t n)
{
    return vcreate_u8(vki_load_partial64(p, n));
}

/* The last n (1..7) bytes ending at `end`, moved down to lanes 0..n-1. `row_len` is the number of
 * valid bytes before `end`: when it is >= 8, one 8-byte load ending at `end` stays inside the row
 * and a 64-bit shift drops the bytes already processed; otherwise fall back to scalar pieces. */
static inline uint8x8_t load_tail_u8(const uint8_t* end, size_t n, size_t row_len)
{
    if (row_len >= 8) {
        const uint64x1_t v = vreinterpret_u64_u8(vld1_u8(end - 8));
        return vreinterpret_u8_u64(vshl_u64(v, vdup_n_s64(-(int64_t)(8 * (8 - n)))));
    }
    return load_partial_u8(end - n, n);
}

#include "neon_common.h"

/* acc += w[4..7] * v[lane]: AArch64 has SMLAL2 by element on the high half of a q register; on
 * ARMv7 the high half is just the odd d register, so vget_high_s16 costs nothing. */
#if defined(__aarch64__)
#define MLAL_HIGH_LANE(acc, w, v, lane) vmlal_high_lane_s16((acc), (w), (v), (lane))
#define MLAL_HIGH(acc, w, x) vmlal_high_s16((acc), (w), (x))
#else
#define MLAL_HIGH_LANE(acc, w, v, lane) vmlal_lane_s16((acc), vget_high_s16(w), (v), (lane))
#define MLAL_HIGH(acc, w, x) vmlal_s16((acc), vget_high_s16(w), vget_high_s16(x))
#endif

static inline int16x8_t widen_sub(uint8x8_t x, uint8x8_t zp)
{
    return vreinterpretq_s16_u16(vsubl_u8(x, zp));
}

/* ------------------------------------------------------------------------------------------------
 * igemm 4x8 (in-order cores).
 *
 * For each k the 8 packed weights of the block are one int16x8 load; each of the 4 rows
 * contributes (a[k] - x_zp) through a multiply-accumulate by lane, so the activations are loaded 8
 * bytes (8 consecutive k) per row at a time with 64-bit loads, which an A53 dual-issues with the
 * arithmetic. 8 int32x4 accumulators + 4 activation vectors + weights fit ARMv7's 16 q registers. */

#define IGEMM4_STEP(half, lane)                                               \
    do {                                                                      \
        const int16x8_t vw = vld1q_s16(wp);                                   \
        wp += 8;                                                              \
        const int16x4_t vwl = vget_low_s16(vw);                               \
        acc0l = vmlal_lane_s16(acc0l, vwl, x0##half, lane);                   \
        acc0h = MLAL_HIGH_LANE(acc0h, vw, x0##half, lane);                    \
        acc1l = vmlal_lane_s16(acc1l, vwl, x1##half, lane);                   \
        acc1h = MLAL_HIGH_LANE(acc1h, vw, x1##half, lane);                    \
        acc2l = vmlal_lane_s16(acc2l, vwl, x2##half, lane);                   \
        acc2h = MLAL_HIGH_LANE(acc2h, vw, x2##half, lane);                    \
        acc3l = vmlal_lane_s16(acc3l, vwl, x3##half, lane);                   \
        acc3h = MLAL_HIGH_LANE(acc3h, vw, x3##half, lane);                    \
    } while (0)

static void igemm_4x8(size_t mr, size_t nc, size_t kc, size_t ks, const uint8_t* const* a, const void* w,
                      uint8_t* c, size_t c_stride, const vki_qparams* q)
{
    const int32_t* bias = (const int32_t*)w;
    const float* scale = (const float*)(bias + 8);
    const int16_t* wp = (const int16_t*)(scale + 8);
    const uint8x8_t vzp = vdup_n_u8((uint8_t)q->x_zp);

    int32x4_t acc0l = vld1q_s32(bias), acc0h = vld1q_s32(bias + 4);
    int32x4_t acc1l = acc0l, acc1h = acc0h;
    int32x4_t acc2l = acc0l, acc2h = acc0h;
    int32x4_t acc3l = acc0l, acc3h = acc0h;

    for (size_t t = 0; t < ks; t++, a += 4) {
        const uint8_t* a0 = a[0];
        const uint8_t* a1 = a[1];
        const uint8_t* a2 = a[2];
        const uint8_t* a3 = a[3];
        size_t k = kc;
        for (; k >= 8; k -= 8) {
            const int16x8_t x0 = widen_sub(vld1_u8(a0), vzp);
            const int16x8_t x1 = widen_sub(vld1_u8(a1), vzp);
            const int16x8_t x2 = widen_sub(vld1_u8(a2), vzp);
            const int16x8_t x3 = widen_sub(vld1_u8(a3), vzp);
            a0 += 8, a1 += 8, a2 += 8, a3 += 8;
            const int16x4_t x0l = vget_low_s16(x0), x0h = vget_high_s16(x0);
            const int16x4_t x1l = vget_low_s16(x1), x1h = vget_high_s16(x1);
            const int16x4_t x2l = vget_low_s16(x2), x2h = vget_high_s16(x2);
            const int16x4_t x3l = vget_low_s16(x3), x3h = vget_high_s16(x3);
            IGEMM4_STEP(l, 0);
            IGEMM4_STEP(l, 1);
            IGEMM4_STEP(l, 2);
            IGEMM4_STEP(l, 3);
            IGEMM4_STEP(h, 0);
            IGEMM4_STEP(h, 1);
            IGEMM4_STEP(h, 2);
            IGEMM4_STEP(h, 3);
        }
        if (k != 0) {
            /* 1..7 k left: load exactly those bytes; only the first k lanes (and k weight
             * vectors: KR=1 packs no k padding, the next tap follows) are used. */
            const int16x8_t x0 = widen_sub(load_tail_u8(a0 + k, k, kc), vzp);
            const int16x8_t x1 = widen_sub(load_tail_u8(a1 + k, k, kc), vzp);
            const int16x8_t x2 = widen_sub(load_tail_u8(a2 + k, k, kc), vzp);
            const int16x8_t x3 = widen_sub(load_tail_u8(a3 + k, k, kc), vzp);
            const int16x4_t x0l = vget_low_s16(x0), x0h = vget_high_s16(x0);
            const int16x4_t x1l = vget_low_s16(x1), x1h = vget_high_s16(x1);
            const int16x4_t x2l = vget_low_s16(x2), x2h = vget_high_s16(x2);
            const int16x4_t x3l = vget_low_s16(x3), x3h = vget_high_s16(x3);
            IGEMM4_STEP(l, 0);
            if (k >= 2) {
                IGEMM4_STEP(l, 1);
                if (k >= 3) {
                    IGEMM4_STEP(l, 2);
                    if (k >= 4) {
                        IGEMM4_STEP(l, 3);
                        if (k >= 5) {
                            IGEMM4_STEP(h, 0);
                            if (k >= 6) {
                                IGEMM4_STEP(h, 1);
                                if (k >= 7)
                                    IGEMM4_STEP(h, 2);
                            }
                        }
                    }
                }
            }
        }
    }

    const rq_consts r = rq_init(q);
    const float32x4_t sl = vld1q_f32(scale), sh = vld1q_f32(scale + 4);
    const uint8x8_t y0 = requant8(acc0l, acc0h, sl, sh, &r);
    const uint8x8_t y1 = requant8(acc1l, acc1h, sl, sh, &r);
    const uint8x8_t y2 = requant8(acc2l, acc2h, sl, sh, &r);
    const uint8x8_t y3 = requant8(acc3l, acc3h, sl, sh, &r);

    /* Rows >= mr must not be written: the caller's output may end after row mr - 1. */
    uint8_t* c0 = c;
    uint8_t* c1 = c0 + c_stride;
    uint8_t* c2 = c1 + c_stride;
    uint8_t* c3 = c2 + c_stride;
    if (nc == 8) {
        vst1_u8(c0, y0);
        if (mr > 1)
            vst1_u8(c1, y1);
        if (mr > 2)
            vst1_u8(c2, y2);
        if (mr > 3)
            vst1_u8(c3, y3);
    } else {
        store_partial_u8(c0, y0, nc);
        if (mr > 1)
            store_partial_u8(c1, y1, nc);
        if (mr > 2)
            store_partial_u8(c2, y2, nc);
        if (mr > 3)
            store_partial_u8(c3, y3, nc);
    }
}

#undef IGEMM4_STEP

/* ------------------------------------------------------------------------------------------------
 * igemm 8x8 (AArch64, wide out-of-order cores): the same scheme with 8 rows, 16 accumulators,
 * 8 activation vectors and the weights in 32 vector registers; each weight load now feeds 16
 * multiply-accumulates instead of 8 (16 accumulators + 8 activation vectors + weights = 26 of
 * the 32 registers, so nothing spills). */
#if defined(__aarch64__)

#define IGEMM8_STEP(half, lane)                                               \
    do {                                                                      \
        const int16x8_t vw = vld1q_s16(wp);                                   \
        wp += 8;                                                              \
        const int16x4_t vwl = vget_low_s16(vw);                               \
        acc0l = vmlal_lane_s16(acc0l, vwl, x0##half, lane);                   \
        acc0h = vmlal_high_lane_s16(acc0h, vw, x0##half, lane);               \
        acc1l = vmlal_lane_s16(acc1l, vwl, x1##half, lane);                   \
        acc1h = vmlal_high_lane_s16(acc1h, vw, x1##half, lane);               \
        acc2l = vmlal_lane_s16(acc2l, vwl, x2##half, lane);                   \
        acc2h = vmlal_high_lane_s16(acc2h, vw, x2##half, lane);               \
        acc3l = vmlal_lane_s16(acc3l, vwl, x3##half, lane);                   \
        acc3h = vmlal_high_lane_s16(acc3h, vw, x3##half, lane);               \
        acc4l = vmlal_lane_s16(acc4l, vwl, x4##half, lane);                   \
        acc4h = vmlal_high_lane_s16(acc4h, vw, x4##half, lane);               \
        acc5l = vmlal_lane_s16(acc5l, vwl, x5##half, lane);                   \
        acc5h = vmlal_high_lane_s16(acc5h, vw, x5##half, lane);               \
        acc6l = vmlal_lane_s16(acc6l, vwl, x6##half, lane);                   \
        acc6h = vmlal_high_lane_s16(acc6h, vw, x6##half, lane);               \
        acc7l = vmlal_lane_s16(acc7l, vwl, x7##half, lane);                   \
        acc7h = vmlal_high_lane_s16(acc7h, vw, x7##half, lane);               \
    } while (0)

#define IGEMM8_HALVES(x)                                                      \
    const int16x4_t x##l = vget_low_s16(x), x##h = vget_high_s16(x)

static void igemm_8x8(size_t mr, size_t nc, size_t kc, size_t ks, const uint8_t* const* a, const void* w,
                      uint8_t* c, size_t c_stride, const vki_qparams* q)
{
    const int32_t* bias = (const int32_t*)w;
    const float* scale = (const float*)(bias + 8);
    const int16_t* wp = (const int16_t*)(scale + 8);
    const uint8x8_t vzp = vdup_n_u8((uint8_t)q->x_zp);

    int32x4_t acc0l = vld1q_s32(bias), acc0h = vld1q_s32(bias + 4);
    int32x4_t acc1l = acc0l, acc1h = acc0h, acc2l = acc0l, acc2h = acc0h, acc3l = acc0l, acc3h = acc0h;
    int32x4_t acc4l = acc0l, acc4h = acc0h, acc5l = acc0l, acc5h = acc0h, acc6l = acc0l, acc6h = acc0h;
    int32x4_t acc7l = acc0l, acc7h = acc0h;

    for (size_t t = 0; t < ks; t++, a += 8) {
        const uint8_t* a0 = a[0];
        const uint8_t* a1 = a[1];
        const uint8_t* a2 = a[2];
        const uint8_t* a3 = a[3];
        const uint8_t* a4 = a[4];
        const uint8_t* a5 = a[5];
        const uint8_t* a6 = a[6];
        const uint8_t* a7 = a[7];
        size_t k = kc;
        for (; k >= 8; k -= 8) {
            const int16x8_t x0 = widen_sub(vld1_u8(a0), vzp);
            const int16x8_t x1 = widen_sub(vld1_u8(a1), vzp);
            const int16x8_t x2 = widen_sub(vld1_u8(a2), vzp);
            const int16x8_t x3 = widen_sub(vld1_u8(a3), vzp);
            const int16x8_t x4 = widen_sub(vld1_u8(a4), vzp);
            const int16x8_t x5 = widen_sub(vld1_u8(a5), vzp);
            const int16x8_t x6 = widen_sub(vld1_u8(a6), vzp);
            const int16x8_t x7 = widen_sub(vld1_u8(a7), vzp);
            a0 += 8, a1 += 8, a2 += 8, a3 += 8, a4 += 8, a5 += 8, a6 += 8, a7 += 8;
            IGEMM8_HALVES(x0);
            IGEMM8_HALVES(x1);
            IGEMM8_HALVES(x2);
            IGEMM8_HALVES(x3);
            IGEMM8_HALVES(x4);
            IGEMM8_HALVES(x5);
            IGEMM8_HALVES(x6);
            IGEMM8_HALVES(x7);
            IGEMM8_STEP(l, 0);
            IGEMM8_STEP(l, 1);
            IGEMM8_STEP(l, 2);
            IGEMM8_STEP(l, 3);
            IGEMM8_STEP(h, 0);
            IGEMM8_STEP(h, 1);
            IGEMM8_STEP(h, 2);
            IGEMM8_STEP(h, 3);
        }
        if (k != 0) {
            const int16x8_t x0 = widen_sub(load_tail_u8(a0 + k, k, kc), vzp);
            const int16x8_t x1 = widen_sub(load_tail_u8(a1 + k, k, kc), vzp);
            const int16x8_t x2 = widen_sub(load_tail_u8(a2 + k, k, kc), vzp);
            const int16x8_t x3 = widen_sub(load_tail_u8(a3 + k, k, kc), vzp);
            const int16x8_t x4 = widen_sub(load_tail_u8(a4 + k, k, kc), vzp);
            const int16x8_t x5 = widen_sub(load_tail_u8(a5 + k, k, kc), vzp);
            const int16x8_t x6 = widen_sub(load_tail_u8(a6 + k, k, kc), vzp);
            const int16x8_t x7 = widen_sub(load_tail_u8(a7 + k, k, kc), vzp);
            IGEMM8_HALVES(x0);
            IGEMM8_HALVES(x1);
            IGEMM8_HALVES(x2);
            IGEMM8_HALVES(x3);
            IGEMM8_HALVES(x4);
            IGEMM8_HALVES(x5);
            IGEMM8_HALVES(x6);
            IGEMM8_HALVES(x7);
            IGEMM8_STEP(l, 0);
            if (k >= 2) {
                IGEMM8_STEP(l, 1);
                if (k >= 3) {
                    IGEMM8_STEP(l, 2);
                    if (k >= 4) {
                        IGEMM8_STEP(l, 3);
                        if (k >= 5) {
                            IGEMM8_STEP(h, 0);
                            if (k >= 6) {
                                IGEMM8_STEP(h, 1);
                                if (k >= 7)
                                    IGEMM8_STEP(h, 2);
                            }
                        }
                    }
                }
            }
        }
    }

    const int32x4_t acc[16] = {acc0l, acc0h, acc1l, acc1h, acc2l, acc2h, acc3l, acc3h,
                               acc4l, acc4h, acc5l, acc5h, acc6l, acc6h, acc7l, acc7h};
    store_tile8x8(acc, scale, q, c, c_stride, mr, nc);
}

#undef IGEMM8_STEP
#undef IGEMM8_HALVES

#endif /* __aarch64__ */

/* ------------------------------------------------------------------------------------------------
 * Depthwise, one output pixel, all channels. Channels are processed 16 at a time (4 independent
 * accumulator chains hide the multiply-accumulate latency), then 8, then a 1..7 tail; for each
 * channel block the accumulators stay in registers across all taps. The packed layout pads the
 * weights to CP = round_up(channels, 8), so weight loads are always full vectors. `ks` is a
 * compile-time constant in dw9/dw25, so the tap loop is fully unrolled there. */

static inline void dw_body(size_t channels, size_t ks, const uint8_t* const* a, const void* w, uint8_t* y,
                           const vki_qparams* q)
{
    const size_t cp = (channels + 7) & ~(size_t)7;
    const int32_t* bias = (const int32_t*)w;
    const float* scale = (const float*)(bias + cp);
    const int16_t* wt = (const int16_t*)(scale + cp);
    const uint8x8_t vzp = vdup_n_u8((uint8_t)q->x_zp);
    const rq_consts r = rq_init(q);

    size_t c = 0;
    for (; c + 16 <= channels; c += 16) {
        int32x4_t acc0 = vld1q_s32(bias + c), acc1 = vld1q_s32(bias + c + 4);
        int32x4_t acc2 = vld1q_s32(bias + c + 8), acc3 = vld1q_s32(bias + c + 12);
        for (size_t t = 0; t < ks; t++) {
            const uint8x16_t xb = vld1q_u8(a[t] + c);
            const int16x8_t x0 = widen_sub(vget_low_u8(xb), vzp);
            const int16x8_t x1 = widen_sub(vget_high_u8(xb), vzp);
            const int16x8_t w0 = vld1q_s16(wt + t * cp + c);
            const int16x8_t w1 = vld1q_s16(wt + t * cp + c + 8);
            acc0 = vmlal_s16(acc0, vget_low_s16(x0), vget_low_s16(w0));
            acc1 = MLAL_HIGH(acc1, x0, w0);
            acc2 = vmlal_s16(acc2, vget_low_s16(x1), vget_low_s16(w1));
            acc3 = MLAL_HIGH(acc3, x1, w1);
        }
        const uint8x8_t y0 = requant8(acc0, acc1, vld1q_f32(scale + c), vld1q_f32(scale + c + 4), &r);
        const uint8x8_t y1 = requant8(acc2, acc3, vld1q_f32(scale + c + 8), vld1q_f32(scale + c + 12), &r);
        vst1q_u8(y + c, vcombine_u8(y0, y1));
    }
    for (; c + 8 <= channels; c += 8) {
        int32x4_t acc0 = vld1q_s32(bias + c), acc1 = vld1q_s32(bias + c + 4);
        for (size_t t = 0; t < ks; t++) {
            const int16x8_t x = widen_sub(vld1_u8(a[t] + c), vzp);
            const int16x8_t wv = vld1q_s16(wt + t * cp + c);
            acc0 = vmlal_s16(acc0, vget_low_s16(x), vget_low_s16(wv));
            acc1 = MLAL_HIGH(acc1, x, wv);
        }
        vst1_u8(y + c, requant8(acc0, acc1, vld1q_f32(scale + c), vld1q_f32(scale + c + 4), &r));
    }
    if (c < channels) {
        const size_t n = channels - c; /* 1..7; lanes >= n compute garbage that is not stored */
        int32x4_t acc0 = vld1q_s32(bias + c), acc1 = vld1q_s32(bias + c + 4);
        for (size_t t = 0; t < ks; t++) {
            const int16x8_t x = widen_sub(load_tail_u8(a[t] + channels, n, channels), vzp);
            const int16x8_t wv = vld1q_s16(wt + t * cp + c);
            acc0 = vmlal_s16(acc0, vget_low_s16(x), vget_low_s16(wv));
            acc1 = MLAL_HIGH(acc1, x, wv);
        }
        store_partial_u8(y + c, requant8(acc0, acc1, vld1q_f32(scale + c), vld1q_f32(scale + c + 4), &r), n);
    }
}

static void dw9(size_t channels, size_t ks, const uint8_t* const* a, const void* w, uint8_t* y, const vki_qparams* q)
{
    (void)ks;
    dw_body(channels, 9, a, w, y, q);
}

static void dw25(size_t channels, size_t ks, const uint8_t* const* a, const void* w, uint8_t* y, const vki_qparams* q)
{
    (void)ks;
    dw_body(channels, 25, a, w, y, q);
}

static void dw_any(size_t channels, size_t ks, const uint8_t* const* a, const void* w, uint8_t* y,
                   const vki_qparams* q)
{
    dw_body(channels, ks, a, w, y, q);
}

/* ------------------------------------------------------------------------------------------------ */

const vki_isa vki_isa_neon = {
    .name = "neon",
    .available = neon_available,
    .mr = 4,
    .nr = 8,
    .kr = 1,
    .igemm = igemm_4x8,
    .cr = 8,
    .dw9 = dw9,
    .dw25 = dw25,
    .dw_any = dw_any,
};

#if defined(__aarch64__)
const vki_isa vki_isa_neon_a7x = {
    .name = "neon_a7x",
    .available = neon_available,
    .mr = 8,
    .nr = 8,
    .kr = 1,
    .igemm = igemm_8x8,
    .cr = 8,
    .dw9 = dw9,
    .dw25 = dw25,
    .dw_any = dw_any,
};
#endif

#else /* no NEON: this translation unit defines nothing (ISO C forbids an empty one) */
typedef int vki_kernels_neon_unused;
#endif
