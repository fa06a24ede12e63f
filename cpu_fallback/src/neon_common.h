/* NEON helpers shared by kernels_neon.c (ARMv7 and AArch64) and kernels_neon_dot.c (AArch64): a partial
 * store that never touches bytes past the row, the exact requantization of the contract (one float
 * multiply, clamp, round half to even, + y_zp, low byte), and the 8 x 8 igemm tiles' epilogue. Include after <arm_neon.h> and <string.h>, inside
 * the file's NEON guard. */
#ifndef VKINFER_CPU_NEON_COMMON_H
#define VKINFER_CPU_NEON_COMMON_H

static inline void store_partial_u8(uint8_t* p, uint8x8_t v, size_t n)
{
    if (n & 4) {
        const uint32_t t = vget_lane_u32(vreinterpret_u32_u8(v), 0);
        memcpy(p, &t, 4);
        p += 4;
        v = vext_u8(v, v, 4);
    }
    if (n & 2) {
        const uint16_t t = vget_lane_u16(vreinterpret_u16_u8(v), 0);
        memcpy(p, &t, 2);
        p += 2;
        v = vext_u8(v, v, 2);
    }
    if (n & 1)
        vst1_lane_u8(p, v, 0);
}

/* ------------------------------------------------------------------------------------------------
 * Requantization */

typedef struct {
    float32x4_t fmin, fmax;
#if defined(__aarch64__)
    int32x4_t y_zp;
#else
    float32x4_t magic; /* 1.5 * 2^23 */
    int32x4_t magic_minus_zp;
#endif
} rq_consts;

static inline rq_consts rq_init(const vki_qparams* q)
{
    rq_consts r;
    r.fmin = vdupq_n_f32(q->fmin);
    r.fmax = vdupq_n_f32(q->fmax);
#if defined(__aarch64__)
    r.y_zp = vdupq_n_s32(q->y_zp);
#else
    r.magic = vdupq_n_f32(12582912.0f);
    r.magic_minus_zp = vdupq_n_s32(0x4B400000 - q->y_zp);
#endif
    return r;
}

static inline int32x4_t requant4(int32x4_t acc, float32x4_t scale, const rq_consts* r)
{
    float32x4_t f = vmulq_f32(vcvtq_f32_s32(acc), scale);
    f = vmaxq_f32(f, r->fmin);
    f = vminq_f32(f, r->fmax);
#if defined(__aarch64__)
    return vaddq_s32(vcvtnq_s32_f32(f), r->y_zp); /* FCVTNS: nearest, ties to even */
#else
    /* |f| <= 383 after the clamp: f + 1.5*2^23 lies in [2^23, 2^24) where the float spacing is 1,
     * so the addition rounds f half to even (NEON always rounds to nearest) and the low mantissa
     * bits hold round(f) + 2^22, i.e. bits(sum) = 0x4B400000 + round(f). Subtracting
     * (0x4B400000 - y_zp) yields round(f) + y_zp with no float->int conversion. */
    return vsubq_s32(vreinterpretq_s32_f32(vaddq_f32(f, r->magic)), r->magic_minus_zp);
#endif
}

/* 8 accumulators -> 8 output bytes (low byte of each int32: plain, non-saturating narrows). */
static inline uint8x8_t requant8(int32x4_t lo, int32x4_t hi, float32x4_t slo, float32x4_t shi, const rq_consts* r)
{
    const int16x8_t v16 = vcombine_s16(vmovn_s32(requant4(lo, slo, r)), vmovn_s32(requant4(hi, shi, r)));
    return vreinterpret_u8_s8(vmovn_s16(v16));
}

/* The epilogue of the 8 x 8 igemm tiles (neon_a7x's int16 igemm and neon_dot's SDOT u8s8 igemm): requantize row i's
 * accumulators acc[2i] (columns 0-3) and acc[2i + 1] (columns 4-7) with the block's scale[8], and store the first
 * mr rows, nc bytes each, row i at c + i * c_stride. Rows >= mr must not be written: the caller's output may end
 * after row mr - 1. Inlined, the array stays in registers (constant indices only). */
static inline void store_tile8x8(const int32x4_t acc[16], const float* scale, const vki_qparams* q, uint8_t* c,
                                 size_t c_stride, size_t mr, size_t nc)
{
    const rq_consts r = rq_init(q);
    const float32x4_t sl = vld1q_f32(scale), sh = vld1q_f32(scale + 4);
    uint8x8_t y[8];
    y[0] = requant8(acc[0], acc[1], sl, sh, &r);
    y[1] = requant8(acc[2], acc[3], sl, sh, &r);
    y[2] = requant8(acc[4], acc[5], sl, sh, &r);
    y[3] = requant8(acc[6], acc[7], sl, sh, &r);
    y[4] = requant8(acc[8], acc[9], sl, sh, &r);
    y[5] = requant8(acc[10], acc[11], sl, sh, &r);
    y[6] = requant8(acc[12], acc[13], sl, sh, &r);
    y[7] = requant8(acc[14], acc[15], sl, sh, &r);
    if (nc == 8) {
        for (size_t i = 0; i < mr; i++, c += c_stride)
            vst1_u8(c, y[i]);
    } else {
        for (size_t i = 0; i < mr; i++, c += c_stride)
            store_partial_u8(c, y[i], nc);
    }
}

#endif
