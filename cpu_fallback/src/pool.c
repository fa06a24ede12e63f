/* Pooling operators of the native graph (vkinfer_graph.h): max pool, com.microsoft QLinearGlobalAveragePool
 * and QLinearAveragePool with ONNX Runtime's arithmetic, TFLite's 8-bit AVERAGE_POOL_2D. NHWC, canonical bytes.
 *
 * The numpy references in vkinfer/reference/ are the contract; every result here is bit-identical to them.
 * Inner loops run over channels (contiguous in NHWC) and are written for the auto-vectoriser: plain loops over
 * restrict pointers or local arrays, float32 operations that are exact in any vector width. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"
#include "threadpool.h"

/* GCC's -O2 vectoriser uses its "very cheap" cost model, which skips any loop needing a scalar epilogue or a
 * runtime alias check: every loop over a runtime channel count. Hand-blocked loops were not a way out (GCC 12
 * unrolled the fixed inner block and then vectorised only the outer loop, leaving channel counts under 256
 * scalar: max pool 6x slower). -O3's cost model for these files whatever the build's -O level (the Makefile
 * passes -O3 for them; the cross-compiled drivers build every file at -O2); -ffp-contract=off still applies. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

#define FAIL(code, ...) do { vki_set_error(__VA_ARGS__); return code; } while (0)
#define CBLK 256        /* channels per stack accumulator block */
/* Whether every one of `out` windows (start o * s - pad, taps start + k * d, k < kern) holds a position in
 * [0, in). Each output is checked: with dilation a middle window can fall between inputs. */
static int windows_nonempty(uint32_t in, uint32_t out, uint32_t kern, uint32_t s, uint32_t d, uint32_t pad)
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
static vki_status check_geom(const char* op, const geom_t* q, vki_ref x, vki_ref y, uint64_t need[2], int* sizes_ok,
                             int require_pixels)
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

static int bad_scale(float s) { return !(isfinite(s) && s > 0.0f); }

/* A window [start, start + k) clipped to [0, in) (no dilation). */
static inline void clip_window(int64_t start, uint32_t k, uint32_t in, uint32_t* lo, uint32_t* hi)
{
    int64_t e = start + k;
    *lo = (uint32_t)(start < 0 ? 0 : start);
    *hi = (uint32_t)(e > (int64_t)in ? (int64_t)in : e);
}

/* ---- max pool ---- */

typedef struct {
    geom_t q;
    const uint8_t* x;
    uint8_t* y;
} pool_job;

static inline void max_into(uint8_t* restrict d, const uint8_t* restrict s, size_t c)
{
    for (size_t i = 0; i < c; i++) d[i] = d[i] > s[i] ? d[i] : s[i];
}

/* One output row. The canonical domain keeps int8's order, so the max of canonical bytes is the canonical
 * max; taps outside the input are skipped (ORT: padding never contributes). A window whose dilated taps all
 * miss the input (possible with dilation and pads) gives qmin, canonical 0, as the reference's qmin padding. */
static void maxpool_row(void* ctx, size_t item)
{
    const pool_job* j = ctx;
    const geom_t* q = &j->q;
    size_t b = item / q->oh, oy = item % q->oh, c = q->c;
    const uint8_t* xb = j->x + b * q->h * q->w * c;
    uint8_t* yrow = j->y + item * q->ow * c;
    int64_t iy0 = (int64_t)oy * q->sh - q->pt;
    uint8_t acc[CBLK];  /* one channel block of the window's max, stored once */
    for (size_t ox = 0; ox < q->ow; ox++) {
        int64_t ix0 = (int64_t)ox * q->sw - q->pl;
        for (size_t c0 = 0; c0 < c; c0 += CBLK) {
            size_t nc = c - c0 < CBLK ? c - c0 : CBLK;
            memset(acc, 0, nc);  /* canonical qmin: the result of a window with no input pixel */
            for (uint32_t ky = 0; ky < q->kh; ky++) {
                int64_t iy = iy0 + (int64_t)ky * q->dh;
                if (iy < 0) continue;
                if (iy >= q->h) break;
                for (uint32_t kx = 0; kx < q->kw; kx++) {
                    int64_t ix = ix0 + (int64_t)kx * q->dw;
                    if (ix < 0) continue;
                    if (ix >= q->w) break;
                    max_into(acc, xb + ((size_t)iy * q->w + (size_t)ix) * c + c0, nc);
                }
            }
            memcpy(yrow + ox * c + c0, acc, nc);
        }
    }
}

static vki_status maxpool_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    pool_job j = {*(const geom_t*)p, ptr[0], ptr[1]};
    const geom_t* q = &j.q;
    uint64_t work = (uint64_t)q->n * q->oh * q->ow * q->c * q->kh * q->kw;
    vki_for_items((size_t)q->n * q->oh, work, threads, maxpool_row, &j);
    return VKI_OK;
}

vki_status vki_graph_add_maxpool(vki_graph* g, uint32_t n, uint32_t h, uint32_t w, uint32_t c, uint32_t oh,
                                 uint32_t ow, uint32_t kh, uint32_t kw, uint32_t sh, uint32_t sw, uint32_t dh,
                                 uint32_t dw, uint32_t pt, uint32_t pl, vki_ref x, vki_ref y)
{
    geom_t q = {n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl};
    uint64_t need[2];
    int ok;
    vki_status st = check_geom("maxpool", &q, x, y, need, &ok, 0);
    if (st != VKI_OK) return st;
    vki_ref refs[2] = {x, y};
    geom_t* t = NULL;
    if (ok) {
        t = malloc(sizeof *t);
        if (!t) FAIL(VKI_ENOMEM, "maxpool: out of memory");
        *t = q;
    }
    return vki_graph_push(g, "maxpool", maxpool_run, free, t, 2, refs, need);
}

/* ---- QLinearGlobalAveragePool ---- */

typedef struct {
    uint32_t n, c;
    uint64_t hw;
    uint32_t zc;      /* x zero point in the canonical domain: sum(canonical) - zc * hw = sum(x) - x_zp * hw */
    float m;          /* x_scale / (y_scale * hw), float32 as ORT computes it */
    float fmin, fmax; /* qmin - y_zp, qmax - y_zp */
    int32_t off;      /* y_zp + 128 (int8): back to the canonical domain */
} qgap_t;

typedef struct {
    const qgap_t* t;
    const uint8_t* x;
    uint8_t* y;
} qgap_job;

static void sum16_into(uint16_t* restrict acc, const uint8_t* restrict s, size_t c)
{
    for (size_t i = 0; i < c; i++) acc[i] = (uint16_t)(acc[i] + s[i]);
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

/* ORT (MLAS) requantizes the int32 sum: y = clamp(rne(float(acc) * m), qmin - y_zp, qmax - y_zp) + y_zp. The
 * bounds are integers, so clamping before rounding is the same; the clamped value is small enough for rne_byte.
 * acc wraps modulo 2^32 like ORT's int32 accumulator (and the reference's astype(int32)). */
static void qgap_finish(const qgap_t* t, const uint32_t* restrict acc, uint8_t* restrict y, size_t c)
{
    uint32_t bias = (uint32_t)((uint64_t)t->zc * t->hw);
    float m = t->m, fmin = t->fmin, fmax = t->fmax;
    int32_t off = t->off;
    for (size_t i = 0; i < c; i++) {
        float f = (float)(int32_t)(acc[i] - bias) * m;
        f = f > fmin ? f : fmin;
        f = f < fmax ? f : fmax;
        y[i] = rne_byte(f, off);
    }
}

/* One item: image b, channels [cb * CBLK, ...). */
static void qgap_item(void* ctx, size_t item)
{
    const qgap_job* j = ctx;
    const qgap_t* t = j->t;
    size_t nb = (t->c + CBLK - 1) / CBLK, b = item / nb, c0 = item % nb * CBLK;
    size_t nc = t->c - c0 < CBLK ? t->c - c0 : CBLK;
    uint32_t acc[CBLK];
    uint16_t part[CBLK];
    memset(acc, 0, sizeof acc);
    const uint8_t* x = j->x + b * t->hw * t->c + c0;
    /* 16-bit partial sums of up to 257 pixels (255 * 257 = 65535): twice the bytes per vector add. */
    for (uint64_t p0 = 0; p0 < t->hw; p0 += 257) {
        uint64_t p1 = t->hw - p0 < 257 ? t->hw : p0 + 257;
        memset(part, 0, nc * sizeof *part);
        for (uint64_t p = p0; p < p1; p++) sum16_into(part, x + p * t->c, nc);
        for (size_t i = 0; i < nc; i++) acc[i] += part[i];
    }
    qgap_finish(t, acc, j->y + b * t->c + c0, nc);
}

static vki_status qgap_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const qgap_t* t = p;
    qgap_job j = {t, ptr[0], ptr[1]};
    size_t items = (size_t)t->n * ((t->c + CBLK - 1) / CBLK);
    vki_for_items(items, (uint64_t)t->n * t->hw * t->c, threads, qgap_item, &j);
    return VKI_OK;
}

static int zp_bad(int32_t zp, int32_t is_signed) { return is_signed ? zp < -128 || zp > 127 : zp < 0 || zp > 255; }

/* The global pool under operator name `op` (qavgpool takes this path when its kernel covers the image). */
static vki_status add_qgap(vki_graph* g, const char* op, uint32_t n, uint64_t hw, uint32_t c, int32_t is_signed,
                           float x_scale, int32_t x_zp, float y_scale, int32_t y_zp, vki_ref x, vki_ref y)
{
    is_signed = is_signed != 0;
    if (!n || !hw || !c) FAIL(VKI_EINVAL, "%s: shape n=%u hw=%llu c=%u must be positive", op, n,
                              (unsigned long long)hw, c);
    if (bad_scale(x_scale)) FAIL(VKI_EINVAL, "%s: x_scale %g must be finite and > 0", op, (double)x_scale);
    if (bad_scale(y_scale)) FAIL(VKI_EINVAL, "%s: y_scale %g must be finite and > 0", op, (double)y_scale);
    if (zp_bad(x_zp, is_signed)) FAIL(VKI_EINVAL, "%s: x_zp %d is outside the %s range", op, x_zp,
                                      is_signed ? "int8" : "uint8");
    if (zp_bad(y_zp, is_signed)) FAIL(VKI_EINVAL, "%s: y_zp %d is outside the %s range", op, y_zp,
                                      is_signed ? "int8" : "uint8");
    /* ORT's own limits (qlgavgpool.cpp), with the same float32 expression. */
    float m = x_scale / (y_scale * (float)hw);
    if (hw >= (UINT64_C(1) << 24) || !(m >= 0x1p-32f && m < 256.0f))
        FAIL(VKI_EINVAL, "%s: multiplier x_scale / (y_scale * image_size) = %g or image_size %llu is outside ORT's "
             "range (image_size < 2^24, 2^-32 <= multiplier < 256)", op, (double)m, (unsigned long long)hw);
    uint64_t need[2] = {vki_mul2(vki_mul2(n, hw), c), vki_mul2(n, c)};
    vki_ref refs[2] = {x, y};
    if (x.bytes == need[0] && y.bytes == need[1] && vki_refs_overlap(x, y)) FAIL(VKI_EINVAL, "%s: x and y overlap", op);
    qgap_t* t = malloc(sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "%s: out of memory", op);
    int32_t lo = is_signed ? -128 : 0, hi = is_signed ? 127 : 255;
    *t = (qgap_t){n, c, hw, (uint32_t)(x_zp + 128 * is_signed), m, (float)(lo - y_zp), (float)(hi - y_zp),
                  y_zp + 128 * is_signed};
    return vki_graph_push(g, op, qgap_run, free, t, 2, refs, need);
}

vki_status vki_graph_add_qgap(vki_graph* g, uint32_t n, uint32_t hw, uint32_t c, int32_t is_signed, float x_scale,
                              int32_t x_zp, float y_scale, int32_t y_zp, vki_ref x, vki_ref y)
{
    return add_qgap(g, "qgap", n, hw, c, is_signed, x_scale, x_zp, y_scale, y_zp, x, y);
}

/* ---- QLinearAveragePool (ORT's float arithmetic) ---- */

typedef struct {
    geom_t q;
    int32_t count_include_pad;
    int32_t zc;          /* canonical x zero point: x - x_zp = canonical - zc */
    float x_scale, y_scale, yzf;
    float fmin, fmax;    /* qmin, qmax (logical) */
    int32_t off;         /* 128 for int8: back to the canonical domain */
} qavg_t;

typedef struct {
    const qavg_t* t;
    const uint8_t* x;
    uint8_t* y;
} qavg_job;

/* acc += float32(x_scale * float32(x - x_zp)): ORT dequantizes each input, then sums in float32. */
static void add_dequant(float* restrict acc, const uint8_t* restrict s, size_t c, int32_t zc, float xs)
{
    for (size_t i = 0; i < c; i++) acc[i] += xs * (float)((int32_t)s[i] - zc);
}

/* v = (acc / count) / y_scale + y_zp in float32, then x86 CVTPS2DQ (NaN or out of int32 range -> INT32_MIN, which
 * the clamp turns into qmin), clamp to [qmin, qmax]. */
static void qavg_finish(const qavg_t* t, const float* restrict acc, float cnt, uint8_t* restrict y, size_t c)
{
    float ys = t->y_scale, yzf = t->yzf, fmin = t->fmin, fmax = t->fmax;
    int32_t off = t->off;
    for (size_t i = 0; i < c; i++) {
        float v = acc[i] / cnt / ys + yzf;
        v = v < 2147483648.0f ? v : fmin;  /* also NaN */
        v = v > fmin ? v : fmin;
        v = v < fmax ? v : fmax;
        y[i] = rne_byte(v, off);
    }
}

static void qavg_row(void* ctx, size_t item)
{
    const qavg_job* j = ctx;
    const qavg_t* t = j->t;
    const geom_t* q = &t->q;
    size_t b = item / q->oh, oy = item % q->oh, c = q->c;
    const uint8_t* xb = j->x + b * q->h * q->w * c;
    uint8_t* yrow = j->y + item * q->ow * c;
    uint32_t y0, y1, x0, x1;
    clip_window((int64_t)oy * q->sh - q->pt, q->kh, q->h, &y0, &y1);
    float acc[CBLK];
    for (size_t ox = 0; ox < q->ow; ox++) {
        clip_window((int64_t)ox * q->sw - q->pl, q->kw, q->w, &x0, &x1);
        uint64_t count = t->count_include_pad ? (uint64_t)q->kh * q->kw : (uint64_t)(y1 - y0) * (x1 - x0);
        float cnt = (float)count;
        for (size_t c0 = 0; c0 < c; c0 += CBLK) {
            size_t nc = c - c0 < CBLK ? c - c0 : CBLK;
            for (size_t i = 0; i < nc; i++) acc[i] = 0.0f;
            /* Row-major window order, as ORT's sequential float32 sum. */
            for (uint32_t iy = y0; iy < y1; iy++)
                for (uint32_t ix = x0; ix < x1; ix++)
                    add_dequant(acc, xb + ((size_t)iy * q->w + ix) * c + c0, nc, t->zc, t->x_scale);
            qavg_finish(t, acc, cnt, yrow + ox * c + c0, nc);
        }
    }
}

static vki_status qavg_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const qavg_t* t = p;
    const geom_t* q = &t->q;
    qavg_job j = {t, ptr[0], ptr[1]};
    uint64_t work = (uint64_t)q->n * q->oh * q->ow * q->c * q->kh * q->kw * 4;  /* float ops cost more */
    vki_for_items((size_t)q->n * q->oh, work, threads, qavg_row, &j);
    return VKI_OK;
}

vki_status vki_graph_add_qavgpool(vki_graph* g, uint32_t n, uint32_t h, uint32_t w, uint32_t c, uint32_t oh,
                                  uint32_t ow, uint32_t kh, uint32_t kw, uint32_t sh, uint32_t sw, uint32_t pt,
                                  uint32_t pl, uint32_t pb, uint32_t pr, int32_t count_include_pad, int32_t is_signed,
                                  float x_scale, int32_t x_zp, float y_scale, int32_t y_zp, vki_ref x, vki_ref y)
{
    is_signed = is_signed != 0;
    if (count_include_pad != 0 && count_include_pad != 1)
        FAIL(VKI_EINVAL, "qavgpool: count_include_pad must be 0 or 1, got %d", count_include_pad);
    if (bad_scale(x_scale)) FAIL(VKI_EINVAL, "qavgpool: x_scale %g must be finite and > 0", (double)x_scale);
    if (bad_scale(y_scale)) FAIL(VKI_EINVAL, "qavgpool: y_scale %g must be finite and > 0", (double)y_scale);
    if (zp_bad(x_zp, is_signed)) FAIL(VKI_EINVAL, "qavgpool: x_zp %d is outside the %s range", x_zp,
                                      is_signed ? "int8" : "uint8");
    if (zp_bad(y_zp, is_signed)) FAIL(VKI_EINVAL, "qavgpool: y_zp %d is outside the %s range", y_zp,
                                      is_signed ? "int8" : "uint8");
    geom_t q = {n, h, w, c, oh, ow, kh, kw, sh, sw, 1, 1, pt, pl};
    uint64_t need[2];
    int ok;
    vki_status st = check_geom("qavgpool", &q, x, y, need, &ok, 1);
    if (st != VKI_OK) return st;
    /* ORT (qlinear_pool.cc) switches to QLinearGlobalAveragePool when the kernel is the image and no pad is set,
     * whatever the strides: its integer sum and multiplier (and range check) then apply. */
    if (kh == h && kw == w && !pt && !pl && !pb && !pr) {
        if (oh != 1 || ow != 1) FAIL(VKI_EINVAL, "qavgpool: a kernel covering the %ux%u image gives a 1x1 output, "
                                     "not %ux%u", h, w, oh, ow);
        return add_qgap(g, "qavgpool", n, (uint64_t)h * w, c, is_signed, x_scale, x_zp, y_scale, y_zp, x, y);
    }
    vki_ref refs[2] = {x, y};
    qavg_t* t = NULL;
    if (ok) {
        t = malloc(sizeof *t);
        if (!t) FAIL(VKI_ENOMEM, "qavgpool: out of memory");
        *t = (qavg_t){q, count_include_pad, x_zp + 128 * is_signed, x_scale, y_scale, (float)y_zp,
                      is_signed ? -128.0f : 0.0f, is_signed ? 127.0f : 255.0f, 128 * is_signed};
    }
    return vki_graph_push(g, "qavgpool", qavg_run, free, t, 2, refs, need);
}

/* ---- TFLite AVERAGE_POOL_2D (integer) ---- */

typedef struct {
    geom_t q;
    int32_t is_signed, lo, hi;  /* clamp in the logical type */
    int32_t float_div;          /* every window count < 2^16: the float32 quotient truncates exactly */
} tfavg_t;

typedef struct {
    const tfavg_t* t;
    const uint8_t* x;
    uint8_t* y;
} tfavg_job;

static void isum_into(int32_t* restrict acc, const uint8_t* restrict s, size_t c)
{
    for (size_t i = 0; i < c; i++) acc[i] += s[i];
}

/* TFLite: q = (acc + n/2) / n for acc > 0, else (acc - n/2) / n, C division truncating toward zero (round half
 * away from zero). With |acc +- n/2| < 2^24 and n < 2^16 the float32 quotient of those exact integers truncates
 * to the same integer: |q| <= 256, so its rounding error (<= 2^-17) is below the 1/n a non-integer quotient
 * keeps from the next integer, and an integer quotient is exact. That loop vectorises; integer division does
 * not. */
static void tfavg_finish(const tfavg_t* t, int32_t* restrict acc, int32_t cnt, uint8_t* restrict y, size_t c)
{
    int32_t half = cnt / 2, bias = t->is_signed ? 128 * cnt : 0, off = t->is_signed ? 128 : 0;
    if (t->float_div) {
        float fc = (float)cnt;
        int32_t lo = t->lo, hi = t->hi;
        for (size_t i = 0; i < c; i++) {
            int32_t a = acc[i] - bias;
            a = a > 0 ? a + half : a - half;
            int32_t r = (int32_t)((float)a / fc);
            r = r < lo ? lo : r;
            r = r > hi ? hi : r;
            y[i] = (uint8_t)(r + off);
        }
    } else {
        for (size_t i = 0; i < c; i++) {
            int32_t a = acc[i] - bias;
            int32_t r = a > 0 ? (a + half) / cnt : (a - half) / cnt;
            r = r < t->lo ? t->lo : r;
            r = r > t->hi ? t->hi : r;
            y[i] = (uint8_t)(r + off);
        }
    }
}

static void tfavg_row(void* ctx, size_t item)
{
    const tfavg_job* j = ctx;
    const tfavg_t* t = j->t;
    const geom_t* q = &t->q;
    size_t b = item / q->oh, oy = item % q->oh, c = q->c;
    const uint8_t* xb = j->x + b * q->h * q->w * c;
    uint8_t* yrow = j->y + item * q->ow * c;
    uint32_t y0, y1, x0, x1;
    clip_window((int64_t)oy * q->sh - q->pt, q->kh, q->h, &y0, &y1);
    int32_t acc[CBLK];
    for (size_t ox = 0; ox < q->ow; ox++) {
        clip_window((int64_t)ox * q->sw - q->pl, q->kw, q->w, &x0, &x1);
        int32_t cnt = (int32_t)((y1 - y0) * (x1 - x0));
        for (size_t c0 = 0; c0 < c; c0 += CBLK) {
            size_t nc = c - c0 < CBLK ? c - c0 : CBLK;
            memset(acc, 0, nc * sizeof *acc);
            for (uint32_t iy = y0; iy < y1; iy++)
                for (uint32_t ix = x0; ix < x1; ix++) isum_into(acc, xb + ((size_t)iy * q->w + ix) * c + c0, nc);
            tfavg_finish(t, acc, cnt, yrow + ox * c + c0, nc);
        }
    }
}

static vki_status tfavg_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const tfavg_t* t = p;
    const geom_t* q = &t->q;
    tfavg_job j = {t, ptr[0], ptr[1]};
    uint64_t work = (uint64_t)q->n * q->oh * q->ow * q->c * q->kh * q->kw;
    vki_for_items((size_t)q->n * q->oh, work, threads, tfavg_row, &j);
    return VKI_OK;
}

vki_status vki_graph_add_tflite_avgpool(vki_graph* g, uint32_t n, uint32_t h, uint32_t w, uint32_t c, uint32_t oh,
                                        uint32_t ow, uint32_t kh, uint32_t kw, uint32_t sh, uint32_t sw, uint32_t pt,
                                        uint32_t pl, int32_t is_signed, int32_t lo, int32_t hi, vki_ref x, vki_ref y)
{
    is_signed = is_signed != 0;
    int32_t qlo = is_signed ? -128 : 0, qhi = is_signed ? 127 : 255;
    if (lo > hi || lo < qlo || hi > qhi)
        FAIL(VKI_EINVAL, "tflite_avgpool: activation bounds [%d, %d] must lie inside the %s range [%d, %d]", lo, hi,
             is_signed ? "int8" : "uint8", qlo, qhi);
    geom_t q = {n, h, w, c, oh, ow, kh, kw, sh, sw, 1, 1, pt, pl};
    uint64_t need[2];
    int ok;
    vki_status st = check_geom("tflite_avgpool", &q, x, y, need, &ok, 1);
    if (st != VKI_OK) return st;
    /* The int32 window sum (255 per pixel, plus half the count) must not overflow. */
    uint64_t max_cnt = (uint64_t)(kh < h ? kh : h) * (kw < w ? kw : w);
    if (max_cnt > (UINT64_C(1) << 23))
        FAIL(VKI_EINVAL, "tflite_avgpool: windows of up to %llu pixels exceed 2^23 (int32 sums)",
             (unsigned long long)max_cnt);
    vki_ref refs[2] = {x, y};
    tfavg_t* t = NULL;
    if (ok) {
        t = malloc(sizeof *t);
        if (!t) FAIL(VKI_ENOMEM, "tflite_avgpool: out of memory");
        *t = (tfavg_t){q, is_signed, lo, hi, max_cnt < (UINT64_C(1) << 16)};
    }
    return vki_graph_push(g, "tflite_avgpool", tfavg_run, free, t, 2, refs, need);
}
