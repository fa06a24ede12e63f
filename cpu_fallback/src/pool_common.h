/* What the pooling operators of the native graph share (ops/maxpool.c, qgap.c, qavgpool.c, tflite_avgpool.c):
 * the window geometry and its checks, and the float32 -> byte rounding of the average pools. */
#ifndef VKINFER_POOL_COMMON_H
#define VKINFER_POOL_COMMON_H

#include <string.h>

#include "graph_internal.h"

/* -O3's vectoriser cost model at any -O level (why: graph_internal.h), for the rest of this header and of the
 * operator file that includes it: every pooling operator wants it. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

#define CBLK 256        /* channels per stack accumulator block */
/* Whether every one of `out` windows (start o * s - pad, taps start + k * d, k < kern) holds a position in
 * [0, in). Each output is checked: with dilation a middle window can fall between inputs. */
static inline int windows_nonempty(uint32_t in, uint32_t out, uint32_t kern, uint32_t s, uint32_t d, uint32_t pad)
{
    for (uint32_t o = 0; o < out; o++) {
        int64_t start = (int64_t)o * s - pad;
        int64_t k0 = start >= 0 ? 0 : (-start + d - 1) / d;  /* first tap at or after position 0 */
        if (k0 >= kern || start + k0 * (int64_t)d >= in) return 0;
    }
    return 1;
}

typedef struct {
    uint32_t n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl;
} geom_t;

/* Shared checks of the pooling add functions. Returns VKI_OK, or VKI_EINVAL with the error set. When a ref
 * has the wrong size it returns VKI_OK with *sizes_ok = 0: the caller pushes anyway so that vki_graph_push
 * reports the operand in its standard form (and the window scan below never runs on absurd sizes). Average
 * pools need a pixel in every window (require_pixels); max pool gives qmin for an empty one. */
static inline vki_status check_geom(const char* op, const geom_t* q, vki_ref x, vki_ref y, uint64_t need[2],
                                    int* sizes_ok, int require_pixels)
{
    if (!q->n || !q->h || !q->w || !q->c) FAIL(VKI_EINVAL, "%s: input shape %ux%ux%ux%u must be positive", op,
                                               q->n, q->h, q->w, q->c);
    if (!q->oh || !q->ow) FAIL(VKI_EINVAL, "%s: output size %ux%u must be positive", op, q->oh, q->ow);
    if (!q->kh || !q->kw) FAIL(VKI_EINVAL, "%s: kernel %ux%u must be positive", op, q->kh, q->kw);
    if (!q->sh || !q->sw) FAIL(VKI_EINVAL, "%s: strides %ux%u must be positive", op, q->sh, q->sw);
    if (!q->dh || !q->dw) FAIL(VKI_EINVAL, "%s: dilations %ux%u must be positive", op, q->dh, q->dw);
    need[0] = vki_mul4(q->n, q->h, q->w, q->c);
    need[1] = vki_mul4(q->n, q->oh, q->ow, q->c);
    *sizes_ok = x.bytes == need[0] && y.bytes == need[1] && need[0] && need[1];
    if (!*sizes_ok) return VKI_OK;
    if (vki_refs_overlap(x, y)) FAIL(VKI_EINVAL, "%s: x and y overlap", op);
    if (require_pixels && (!windows_nonempty(q->h, q->oh, q->kh, q->sh, q->dh, q->pt) ||
        !windows_nonempty(q->w, q->ow, q->kw, q->sw, q->dw, q->pl)))
        FAIL(VKI_EINVAL, "%s: a window of the %ux%u output (kernel %ux%u, strides %ux%u, dilations %ux%u, pads top "
             "%u left %u) holds no pixel of the %ux%u input", op, q->oh, q->ow, q->kh, q->kw, q->sh, q->sw, q->dh,
             q->dw, q->pt, q->pl, q->h, q->w);
    return VKI_OK;
}

/* A window [start, start + k) clipped to [0, in) (no dilation). */
static inline void clip_window(int64_t start, uint32_t k, uint32_t in, uint32_t* lo, uint32_t* hi)
{
    int64_t e = start + k;
    *lo = (uint32_t)(start < 0 ? 0 : start);
    *hi = (uint32_t)(e > (int64_t)in ? (int64_t)in : e);
}

/* (round_half_even(f) + off) mod 256 for |f| <= 255: f + 1.5 * 2^23 lies in [2^23, 2^24), where the float32
 * spacing is 1, so that add rounds f half to even (default rounding mode; 1.5 * 2^23 is even) and the sum's bit
 * pattern is 0x4B400000 + rne(f), whose low byte is rne(f) mod 256. Plain C that vectorises without SSE4.1's
 * ROUNDPS (nearbyintf would be a libm call) and without a float -> int conversion. */
static inline uint8_t rne_byte(float f, int32_t off)
{
    float g = f + 0x1.8p23f;
    uint32_t bits;
    memcpy(&bits, &g, 4);
    return (uint8_t)(bits + (uint32_t)off);
}

/* QLinearGlobalAveragePool's operator (ops/qgap.c) under operator name `op`: qavgpool takes it when its kernel
 * covers the image (ORT's switch). */
vki_status vki_graph_push_qgap(vki_graph* g, const char* op, uint32_t n, uint64_t hw, uint32_t c, int32_t is_signed,
                               float x_scale, int32_t x_zp, float y_scale, int32_t y_zp, vki_ref x, vki_ref y);

#endif
