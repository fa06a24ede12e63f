/* The native graph's TFLite 8-bit AVERAGE_POOL_2D (vkinfer/reference/tflite_average_pool.py), NHWC, canonical bytes.
 *
 * The numpy reference is the contract; every result here is bit-identical to it. Inner loops run over channels
 * (contiguous in NHWC) and are written for the auto-vectoriser (pool_common.h). */
#include <stdlib.h>
#include <string.h>

#include "pool_common.h"

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
