/* AArch64 NEON microkernels with the ARMv8.2 dot-product instructions (SDOT), variant "neon_dot".
 *
 * Only this file is compiled with the dot-product extension (the pragma below), and
 * neon_dot_available() checks HWCAP_ASIMDDP at run time, so the library still runs on ARMv8.0 cores
 * (Cortex-A53, A72), where vki_isa_default() then picks neon_a7x.
 *
 * igemm (int16 weights) and the int16 depthwise kernels are neon_a7x's, called through small wrappers:
 * a function pointer in a const struct of another translation unit is not a constant expression in C.
 * dw_u8s8 (depthwise layers whose weights fit int8) is SDOT over groups of 4 taps, described below.
 *
 * igemm_u8s8 (internal.h): SDOT multiplies 4 signed activation bytes by 4 signed weight bytes and adds the
 * four products to an int32 lane, without saturation (wrapping). Activations enter as x ^ 0x80 = x - 128
 * (u8s8_xoff = 128), weights as int8 (w - w_zp) over the full int8 range: every product is exact and the
 * int32 sums wrap modulo 2^32 like the bias correction conv.c folds in, so the final int32 equals the exact
 * sum bias + sum (x - x_zp) * (w - w_zp) whenever that fits int32 (which conv.c's contract guarantees).
 *
 * Tile MR=8 x NR=8 (chosen by instruction count; qemu timings say nothing about real cores):
 *   registers: 16 int32x4 accumulators + 8 activation vectors (16 bytes = 4 k-groups of one row each)
 *              + 2 weight vectors + 2 constants = 28 of the 32, nothing spills;
 *   per 16 k:  8 activation loads + 8 EORs + 8 weight loads (2 per 4-k group) for 64 SDOTs,
 *              i.e. 0.25 loads per SDOT.
 *   6x16 would need 24 + 6 + 4 = 34 registers (0.23 loads per SDOT, but spills or a serialised weight
 *   stream), 4x16 needs 5 loads per 16 SDOTs (0.31), and 8x16 (32 accumulators) does not fit at all.
 *   16 independent accumulator chains also cover SDOT's latency on two vector pipes, and NR=8 wastes no
 *   lanes on the 8-multiple channel counts of MobileNet-class models (8, 24, 40, ...), where NR=16 computes
 *   up to 33% padding. Same MR/NR as neon_a7x, so both paths tile the output alike.
 */
#if defined(__aarch64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("dotprod"))), apply_to = function)
#define VKI_DOT_CLANG_PUSHED 1
#else
#pragma GCC target("arch=armv8.2-a+dotprod")
#endif

#include "internal.h"

#include <arm_neon.h>
#include <string.h>

#include "kernels_common.h"

#if defined(__linux__)
#include <sys/auxv.h>
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif

#if defined(__ARM_BIG_ENDIAN)
#error "kernels_neon_dot.c assumes little-endian lane order"
#endif

extern const vki_isa vki_isa_neon_a7x;
extern const vki_isa vki_isa_neon_dot;

static int neon_dot_available(void)
{
#if defined(__linux__)
    return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#else
    return 0; /* no portable run-time check here: never selected */
#endif
}

/* ------------------------------------------------------------------------------------------------
 * The int16 kernels of neon_a7x (MR=8 NR=8 KR=1, CR=8). */

static void igemm_i16(size_t mr, size_t nc, size_t kc, size_t ks, const uint8_t* const* a, const void* w,
                      uint8_t* c, size_t c_stride, const vki_qparams* q)
{
    vki_isa_neon_a7x.igemm(mr, nc, kc, ks, a, w, c, c_stride, q);
}

static void dw9(size_t channels, size_t ks, const uint8_t* const* a, const void* w, uint8_t* y, const vki_qparams* q)
{
    vki_isa_neon_a7x.dw9(channels, ks, a, w, y, q);
}

static void dw25(size_t channels, size_t ks, const uint8_t* const* a, const void* w, uint8_t* y, const vki_qparams* q)
{
    vki_isa_neon_a7x.dw25(channels, ks, a, w, y, q);
}

static void dw_any(size_t channels, size_t ks, const uint8_t* const* a, const void* w, uint8_t* y,
                   const vki_qparams* q)
{
    vki_isa_neon_a7x.dw_any(channels, ks, a, w, y, q);
}

/* ------------------------------------------------------------------------------------------------
 * Partial loads and stores that never touch memory outside the valid bytes. */

/* n = 1..15 bytes at p into lanes 0..n-1 (zero above), by 8/4/2/1-byte scalar loads. */
static inline uint8x16_t load_partial16(const uint8_t* p, size_t n)
{
    uint64_t lo = 0;
    if (n & 8) {
        memcpy(&lo, p, 8);
        p += 8;
    }
    const uint64_t v = vki_load_partial64(p, n & 7);
    return (n & 8) ? vcombine_u8(vcreate_u8(lo), vcreate_u8(v)) : vcombine_u8(vcreate_u8(v), vcreate_u8(0));
}

/* store_partial_u8 and the requantization (requant4/requant8, exactly as kernels_neon.c's AArch64 path):
 * neon_common.h. */
#include "neon_common.h"

/* ------------------------------------------------------------------------------------------------
 * igemm_u8s8 8x8.
 *   w: int32 bias'[8]; float scale[8]; int8 wt[ks][ceil(kc / 4)][8][4]
 * One 4-k group of the block is 32 weight bytes: w0 = channels 0..3 (4 k each), w1 = channels 4..7.
 * vdotq_laneq_s32(acc, w0, x, g) adds, for each of the 4 channels, the dot product of its 4 weight
 * bytes with the row's bytes 4g..4g+3. */

#define DOT8_STEP(g)                                                          \
    do {                                                                      \
        const int8x16_t w0 = vld1q_s8(wp);                                    \
        const int8x16_t w1 = vld1q_s8(wp + 16);                               \
        wp += 32;                                                             \
        acc0l = vdotq_laneq_s32(acc0l, w0, x0, g);                            \
        acc0h = vdotq_laneq_s32(acc0h, w1, x0, g);                            \
        acc1l = vdotq_laneq_s32(acc1l, w0, x1, g);                            \
        acc1h = vdotq_laneq_s32(acc1h, w1, x1, g);                            \
        acc2l = vdotq_laneq_s32(acc2l, w0, x2, g);                            \
        acc2h = vdotq_laneq_s32(acc2h, w1, x2, g);                            \
        acc3l = vdotq_laneq_s32(acc3l, w0, x3, g);                            \
        acc3h = vdotq_laneq_s32(acc3h, w1, x3, g);                            \
        acc4l = vdotq_laneq_s32(acc4l, w0, x4, g);                            \
        acc4h = vdotq_laneq_s32(acc4h, w1, x4, g);                            \
        acc5l = vdotq_laneq_s32(acc5l, w0, x5, g);                            \
        acc5h = vdotq_laneq_s32(acc5h, w1, x5, g);                            \
        acc6l = vdotq_laneq_s32(acc6l, w0, x6, g);                            \
        acc6h = vdotq_laneq_s32(acc6h, w1, x6, g);                            \
        acc7l = vdotq_laneq_s32(acc7l, w0, x7, g);                            \
        acc7h = vdotq_laneq_s32(acc7h, w1, x7, g);                            \
    } while (0)

/* 16 bytes of a row at p, as signed x - 128. */
#define DOT_LOAD16(p) vreinterpretq_s8_u8(veorq_u8(vld1q_u8(p), vsign))

/* The last n (1..15) bytes of a row ending at `end`, in lanes 0..n-1, as signed x - 128 (lanes >= n are
 * junk that only meets zero weights or no SDOT at all). Rows of at least 16 bytes: one 16-byte load ending
 * at `end` (inside the row) and a TBL that moves bytes 16-n..15 down to 0..n-1 (`shift` = lane + 16 - n;
 * out-of-range indices give 0). Shorter rows: scalar pieces. */
#define DOT_TAIL(end)                                                                                          \
    vreinterpretq_s8_u8(veorq_u8(long_rows ? vqtbl1q_u8(vld1q_u8((end) - 16), shift) : load_partial16((end) - k, k), \
                                 vsign))

/* GCC's pre-allocation scheduler hoists all 8 weight loads of a 16-k step ahead of the SDOTs: 16 + 8 + 8 + 1
 * live vectors, one over the 32, and an accumulator went to the stack (15 q-register spill loads/stores in
 * the function with GCC 12 -O2, 0 without that pass; counted with objdump). The out-of-order cores this
 * variant targets do that hoisting themselves. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-schedule-insns")))
#endif
static void igemm_u8s8_8x8(size_t mr, size_t nc, size_t kc, size_t ks, const uint8_t* const* a, const void* w,
                           uint8_t* c, size_t c_stride, const vki_qparams* q)
{
    const int32_t* bias = (const int32_t*)w;
    const float* scale = (const float*)(bias + 8);
    const int8_t* wp = (const int8_t*)(scale + 8);
    const uint8x16_t vsign = vdupq_n_u8(0x80);
    static const uint8_t iota[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    const size_t tail = kc % 16;
    const int long_rows = kc >= 16;
    const uint8x16_t shift = vaddq_u8(vld1q_u8(iota), vdupq_n_u8((uint8_t)(16 - tail)));

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
        for (; k >= 16; k -= 16) {
            const int8x16_t x0 = DOT_LOAD16(a0);
            const int8x16_t x1 = DOT_LOAD16(a1);
            const int8x16_t x2 = DOT_LOAD16(a2);
            const int8x16_t x3 = DOT_LOAD16(a3);
            const int8x16_t x4 = DOT_LOAD16(a4);
            const int8x16_t x5 = DOT_LOAD16(a5);
            const int8x16_t x6 = DOT_LOAD16(a6);
            const int8x16_t x7 = DOT_LOAD16(a7);
            a0 += 16, a1 += 16, a2 += 16, a3 += 16, a4 += 16, a5 += 16, a6 += 16, a7 += 16;
            DOT8_STEP(0);
            DOT8_STEP(1);
            DOT8_STEP(2);
            DOT8_STEP(3);
        }
        if (k != 0) {
            /* k = tail = 1..15 bytes left: ceil(k / 4) groups; the packed weights of the last group are
             * zero for k >= kc, and the next tap's weights follow. */
            const int8x16_t x0 = DOT_TAIL(a0 + k);
            const int8x16_t x1 = DOT_TAIL(a1 + k);
            const int8x16_t x2 = DOT_TAIL(a2 + k);
            const int8x16_t x3 = DOT_TAIL(a3 + k);
            const int8x16_t x4 = DOT_TAIL(a4 + k);
            const int8x16_t x5 = DOT_TAIL(a5 + k);
            const int8x16_t x6 = DOT_TAIL(a6 + k);
            const int8x16_t x7 = DOT_TAIL(a7 + k);
            DOT8_STEP(0);
            if (k > 4) {
                DOT8_STEP(1);
                if (k > 8) {
                    DOT8_STEP(2);
                    if (k > 12)
                        DOT8_STEP(3);
                }
            }
        }
    }

    const int32x4_t acc[16] = {acc0l, acc0h, acc1l, acc1h, acc2l, acc2h, acc3l, acc3h,
                               acc4l, acc4h, acc5l, acc5h, acc6l, acc6h, acc7l, acc7h};
    store_tile8x8(acc, scale, q, c, c_stride, mr, nc);
}

#undef DOT8_STEP
#undef DOT_LOAD16
#undef DOT_TAIL

/* ------------------------------------------------------------------------------------------------
 * u8s8 depthwise over a run of pixels (internal.h): SDOT over groups of 4 taps. For 16 channels, the rows
 * of 4 taps are interleaved so that each 32-bit lane holds one channel's 4 tap bytes: ZIP1/ZIP2 of bytes
 * (taps 0,1 and 2,3) then ZIP1/ZIP2 of halfwords; NEON's zips span the whole register, so the 4 results
 * hold channels 0-3, 4-7, 8-11 and 12-15 in order, and the plain (non-lane) SDOT multiplies them by the
 * packed weights. Per 4 taps x 16 channels: 4 row loads + 8 zips + 4 EORs + 4 weight loads + 4 SDOTs
 * (24 instructions), where the int16 kernel spends 4 loads + 8 widening subtracts + 8 weight loads +
 * 16 SMLALs (36).
 * Block per 16 channels: int32 bias'[16]; float scale[16]; int8 wt[ceil(ks / 4)][16][4] (zero for channels
 * >= `channels` and taps >= ks). A missing tap of the last group reads tap 0's row against weight 0.
 * Channel tails (1..15): rows of at least 16 bytes are read with one 16-byte load ending at the row's end
 * and a TBL that moves the last n bytes down; shorter rows by scalar pieces; stores by pieces. */
#define DWD_CB 16

static size_t dwd_pack(size_t channels, size_t ks, const int16_t* wt, const int32_t* bias, const float* scale,
                       void* out)
{
    const size_t groups = (ks + 3) / 4, nb = (channels + DWD_CB - 1) / DWD_CB;
    const size_t block = DWD_CB * 8 + groups * 4 * DWD_CB;
    if (!out)
        return nb * block;
    for (size_t b = 0; b < nb; b++) {
        uint8_t* blk = (uint8_t*)out + b * block;
        int32_t* pb = (int32_t*)(void*)blk;
        float* ps = (float*)(void*)(blk + DWD_CB * 4);
        int8_t* pw = (int8_t*)(blk + DWD_CB * 8);
        for (size_t d = 0; d < DWD_CB; d++) {
            const size_t ch = b * DWD_CB + d;
            const int in = ch < channels;
            pb[d] = in ? bias[ch] : 0;
            ps[d] = in ? scale[ch] : 0.0f;
            for (size_t g = 0; g < groups; g++)
                for (size_t u = 0; u < 4; u++) {
                    const size_t t = 4 * g + u;
                    pw[(g * DWD_CB + d) * 4 + u] = (int8_t)(in && t < ks ? wt[t * channels + ch] : 0);
                }
        }
    }
    return nb * block;
}

/* Up to 16 bytes of v to p: n = 1..15 by pieces. */
static inline void store_partial16(uint8_t* p, uint8x16_t v, size_t n)
{
    uint8x8_t lo = vget_low_u8(v);
    if (n & 8) {
        vst1_u8(p, lo);
        p += 8;
        lo = vget_high_u8(v);
    }
    store_partial_u8(p, lo, n & 7);
}

/* One 16-channel block of `pixels` pixels; n = valid channels of the block (1..16), c0 its first channel. */
static inline __attribute__((always_inline)) void dwd_block(size_t pixels, size_t channels, const size_t ks,
                                                            size_t c0, size_t n, const uint8_t* const* a,
                                                            const uint8_t* blk, uint8_t* y, size_t y_stride,
                                                            const rq_consts* r)
{
    const size_t groups = (ks + 3) / 4;
    const int32_t* pb = (const int32_t*)(const void*)blk;
    const float* ps = (const float*)(const void*)(blk + DWD_CB * 4);
    const int8_t* pw = (const int8_t*)(blk + DWD_CB * 8);
    const uint8x16_t vsign = vdupq_n_u8(0x80);
    static const uint8_t iota[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    const uint8x16_t shift = vaddq_u8(vld1q_u8(iota), vdupq_n_u8((uint8_t)(16 - n)));
    const int full = n == DWD_CB, long_rows = channels >= DWD_CB;
    /* Row bytes of channels c0..c0+n-1 (lanes >= n: junk against zero weights, results not stored). */
#define DWD_LOAD(row)                                                                                   \
    (full ? vld1q_u8((row) + c0)                                                                        \
          : long_rows ? vqtbl1q_u8(vld1q_u8((row) + channels - DWD_CB), shift) : load_partial16((row) + c0, n))
    for (size_t px = 0; px < pixels; px++, a += ks, y += y_stride) {
        int32x4_t acc0 = vld1q_s32(pb), acc1 = vld1q_s32(pb + 4);
        int32x4_t acc2 = vld1q_s32(pb + 8), acc3 = vld1q_s32(pb + 12);
        for (size_t g = 0; g < groups; g++) {
            const size_t t = 4 * g;
            const uint8x16_t x0 = DWD_LOAD(a[t]);
            const uint8x16_t x1 = DWD_LOAD(a[t + 1 < ks ? t + 1 : 0]);
            const uint8x16_t x2 = DWD_LOAD(a[t + 2 < ks ? t + 2 : 0]);
            const uint8x16_t x3 = DWD_LOAD(a[t + 3 < ks ? t + 3 : 0]);
            const uint16x8_t l01 = vreinterpretq_u16_u8(vzip1q_u8(x0, x1));
            const uint16x8_t h01 = vreinterpretq_u16_u8(vzip2q_u8(x0, x1));
            const uint16x8_t l23 = vreinterpretq_u16_u8(vzip1q_u8(x2, x3));
            const uint16x8_t h23 = vreinterpretq_u16_u8(vzip2q_u8(x2, x3));
            const int8x16_t q0 = vreinterpretq_s8_u8(veorq_u8(vreinterpretq_u8_u16(vzip1q_u16(l01, l23)), vsign));
            const int8x16_t q1 = vreinterpretq_s8_u8(veorq_u8(vreinterpretq_u8_u16(vzip2q_u16(l01, l23)), vsign));
            const int8x16_t q2 = vreinterpretq_s8_u8(veorq_u8(vreinterpretq_u8_u16(vzip1q_u16(h01, h23)), vsign));
            const int8x16_t q3 = vreinterpretq_s8_u8(veorq_u8(vreinterpretq_u8_u16(vzip2q_u16(h01, h23)), vsign));
            const int8_t* wg = pw + g * 4 * DWD_CB;
            acc0 = vdotq_s32(acc0, q0, vld1q_s8(wg));
            acc1 = vdotq_s32(acc1, q1, vld1q_s8(wg + 16));
            acc2 = vdotq_s32(acc2, q2, vld1q_s8(wg + 32));
            acc3 = vdotq_s32(acc3, q3, vld1q_s8(wg + 48));
        }
        const uint8x16_t out = vcombine_u8(requant8(acc0, acc1, vld1q_f32(ps), vld1q_f32(ps + 4), r),
                                           requant8(acc2, acc3, vld1q_f32(ps + 8), vld1q_f32(ps + 12), r));
        if (full)
            vst1q_u8(y + c0, out);
        else
            store_partial16(y + c0, out, n);
    }
#undef DWD_LOAD
}

static inline __attribute__((always_inline)) void dwd_run(size_t pixels, size_t channels, const size_t ks,
                                                          const uint8_t* const* a, const void* w, uint8_t* y,
                                                          size_t y_stride, const vki_qparams* q)
{
    const size_t block = DWD_CB * 8 + (ks + 3) / 4 * 4 * DWD_CB;
    const rq_consts r = rq_init(q);
    size_t c0 = 0;
    /* Full blocks first (n = 16 is a constant there), then the tail block. */
    for (; c0 + DWD_CB <= channels; c0 += DWD_CB)
        dwd_block(pixels, channels, ks, c0, DWD_CB, a, (const uint8_t*)w + c0 / DWD_CB * block, y, y_stride, &r);
    if (c0 < channels)
        dwd_block(pixels, channels, ks, c0, channels - c0, a, (const uint8_t*)w + c0 / DWD_CB * block, y, y_stride,
                  &r);
}

static void dwd_dw(size_t pixels, size_t channels, size_t ks, const uint8_t* const* a, const void* w, uint8_t* y,
                   size_t y_stride, const vki_qparams* q)
{
    /* ks as a constant for the common kernels: the group loop unrolls and the tap clamps fold. */
    if (ks == 9)
        dwd_run(pixels, channels, 9, a, w, y, y_stride, q);
    else if (ks == 25)
        dwd_run(pixels, channels, 25, a, w, y, y_stride, q);
    else
        dwd_run(pixels, channels, ks, a, w, y, y_stride, q);
}

/* ------------------------------------------------------------------------------------------------ */

const vki_isa vki_isa_neon_dot = {
    .name = "neon_dot",
    .available = neon_dot_available,
    .mr = 8,
    .nr = 8,
    .kr = 1,
    .igemm = igemm_i16,
    .igemm_u8s8 = igemm_u8s8_8x8,
    .name_u8s8 = "neon_dot-u8s8",
    .u8s8_mr = 8,
    .u8s8_nr = 8,
    .u8s8_wmin = -128,
    .u8s8_wmax = 127,
    .u8s8_xoff = 128,
    .dw_u8s8 = dwd_dw,
    .dw_u8s8_pack = dwd_pack,
    .cr = 8,
    .dw9 = dw9,
    .dw25 = dw25,
    .dw_any = dw_any,
};

#if defined(VKI_DOT_CLANG_PUSHED)
#pragma clang attribute pop
#endif

#else /* not AArch64: this translation unit defines nothing (ISO C forbids an empty one) */
typedef int vki_kernels_neon_dot_unused;
#endif
