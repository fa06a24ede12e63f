/* The native graph's com.microsoft QLinearGlobalAveragePool with ONNX Runtime's arithmetic
 * (vkinfer/reference/qlinear_global_average_pool.py), NHWC, canonical bytes.
 *
 * The numpy reference is the contract; every result here is bit-identical to it. Inner loops run over channels
 * (contiguous in NHWC) and are written for the auto-vectoriser (pool_common.h). */
#include <stdlib.h>
#include <string.h>

#include "pool_common.h"

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

/* The global pool under operator name `op` (qavgpool takes this path when its kernel covers the image). */
vki_status vki_graph_push_qgap(vki_graph* g, const char* op, uint32_t n, uint64_t hw, uint32_t c, int32_t is_signed,
                                float x_scale, int32_t x_zp, float y_scale, int32_t y_zp, vki_ref x, vki_ref y)
{
    is_signed = is_signed != 0;
    if (!n || !hw || !c) FAIL(VKI_EINVAL, "%s: shape n=%u hw=%llu c=%u must be positive", op, n,
                              (unsigned long long)hw, c);
    if (vki_bad_scale(x_scale)) FAIL(VKI_EINVAL, "%s: x_scale %g must be finite and > 0", op, (double)x_scale);
    if (vki_bad_scale(y_scale)) FAIL(VKI_EINVAL, "%s: y_scale %g must be finite and > 0", op, (double)y_scale);
    if (vki_zp_bad(x_zp, is_signed)) FAIL(VKI_EINVAL, "%s: x_zp %d is outside the %s range", op, x_zp,
                                      is_signed ? "int8" : "uint8");
    if (vki_zp_bad(y_zp, is_signed)) FAIL(VKI_EINVAL, "%s: y_zp %d is outside the %s range", op, y_zp,
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
    return vki_graph_push_qgap(g, "qgap", n, hw, c, is_signed, x_scale, x_zp, y_scale, y_zp, x, y);
}
