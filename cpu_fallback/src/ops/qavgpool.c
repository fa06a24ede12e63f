/* The native graph's com.microsoft QLinearAveragePool with ONNX Runtime's float arithmetic
 * (vkinfer/reference/qlinear_average_pool.py; a kernel covering the image takes ops/qgap.c), NHWC, canonical bytes.
 *
 * The numpy reference is the contract; every result here is bit-identical to it. Inner loops run over channels
 * (contiguous in NHWC) and are written for the auto-vectoriser (pool_common.h). */
#include <stdlib.h>
#include <string.h>

#include "pool_common.h"

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
    if (vki_bad_scale(x_scale)) FAIL(VKI_EINVAL, "qavgpool: x_scale %g must be finite and > 0", (double)x_scale);
    if (vki_bad_scale(y_scale)) FAIL(VKI_EINVAL, "qavgpool: y_scale %g must be finite and > 0", (double)y_scale);
    if (vki_zp_bad(x_zp, is_signed)) FAIL(VKI_EINVAL, "qavgpool: x_zp %d is outside the %s range", x_zp,
                                      is_signed ? "int8" : "uint8");
    if (vki_zp_bad(y_zp, is_signed)) FAIL(VKI_EINVAL, "qavgpool: y_zp %d is outside the %s range", y_zp,
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
        return vki_graph_push_qgap(g, "qavgpool", n, (uint64_t)h * w, c, is_signed, x_scale, x_zp, y_scale, y_zp, x, y);
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
