/* The native graph's TFLite 8-bit SOFTMAX (vkinfer/reference/tflite_softmax.py) on canonical bytes.
 *
 * The numpy reference is the contract; every result is bit-identical to it. Inner loops are written for the
 * auto-vectoriser (plain loops over restrict pointers). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

/* -O3's vectoriser cost model at any -O level (why: graph_internal.h). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

#define VEC 16  /* elements per block of the table gather and the requantization */

typedef struct {
    uint64_t rows;
    uint32_t cols;
    int32_t y_signed;
    float y_scale;
    int32_t qmax_rel;  /* qmax - y_zp: a non-negative q clamps only from above */
    int32_t off;       /* y_zp + 128 (int8 output): into the canonical domain */
    uint8_t bad;       /* canonical output where p is NaN, infinite or >= 2^63 (see softmax_row) */
    float table[256];
} softmax_t;

typedef struct {
    const softmax_t* t;
    const uint8_t* x;
    uint8_t* y;
} softmax_job;

#define SOFTMAX_ROWS_PER_ITEM 16

static uint8_t max_u8(const uint8_t* restrict x, size_t n)
{
    uint8_t r = 0;
    for (size_t i = 0; i < n; i++) r = r > x[i] ? r : x[i];
    return r;
}

/* One row (vkinfer/reference/tflite_softmax.py). The canonical domain keeps the order and the differences of
 * int8 values, so max - x_j (the only use of x) is the same on canonical bytes: e_j = table[255 - max + x_j].
 * The sum is sequential float32 in index order, as TFLite's loop (no reassociation). Then per element, with
 * p = e_j * inv >= 0 (or NaN when inv is infinite):
 *   uint8 output: q = (int)(p + 0.5f), a float32 add then truncation;
 *   int8 output:  q = round half away from zero of p, computed exactly as trunc(p) + (p - trunc(p) >= 0.5)
 *                 (the reference's floor(float64(p) + 0.5): float32's p + 0.5f could round up).
 * Where p (or p + 0.5f) is NaN, infinite or >= 2^63 (only for absurd y_scale: inv infinite or huge), the
 * reference's int64 cast gives INT64_MIN (x86 numpy), and adding y_zp wraps: qmin when y_zp >= 0, qmax when
 * y_zp < 0; t->bad holds that byte. Otherwise q >= 0 >= qmin - y_zp, so only qmax clamps; values are capped at
 * 1024 first so the int32 conversion is defined. */
static void softmax_row(const softmax_t* t, const uint8_t* restrict x, uint8_t* restrict y)
{
    size_t n = t->cols;
    const float* e = t->table + (255 - max_u8(x, n));
    float sum = 0.0f;
    for (size_t i = 0; i < n; i++) sum += e[x[i]];
    float inv = 1.0f / (sum * t->y_scale);
    int32_t qmax = t->qmax_rel, off = t->off;
    uint8_t badv = t->bad;
    float ev[VEC];
    if (t->y_signed) {
        for (size_t i0 = 0; i0 < n; i0 += VEC) {
            size_t m = n - i0 < VEC ? n - i0 : VEC;
            for (size_t j = 0; j < m; j++) ev[j] = e[x[i0 + j]];
            for (size_t j = m; j < VEC; j++) ev[j] = 0.0f;
            uint8_t out[VEC];
            for (size_t j = 0; j < VEC; j++) {
                float p = ev[j] * inv;
                int bad = !(p < 0x1p63f);
                float pc = p < 1024.0f ? p : 1024.0f;
                int32_t q = (int32_t)pc;
                q += (pc - (float)q) >= 0.5f;
                q = q < qmax ? q : qmax;
                out[j] = bad ? badv : (uint8_t)(q + off);
            }
            memcpy(y + i0, out, m);
        }
    } else {
        for (size_t i0 = 0; i0 < n; i0 += VEC) {
            size_t m = n - i0 < VEC ? n - i0 : VEC;
            for (size_t j = 0; j < m; j++) ev[j] = e[x[i0 + j]];
            for (size_t j = m; j < VEC; j++) ev[j] = 0.0f;
            uint8_t out[VEC];
            for (size_t j = 0; j < VEC; j++) {
                float h = ev[j] * inv + 0.5f;
                int bad = !(h < 0x1p63f);
                float hc = h < 1024.0f ? h : 1024.0f;
                int32_t q = (int32_t)hc;
                q = q < qmax ? q : qmax;
                out[j] = bad ? badv : (uint8_t)(q + off);
            }
            memcpy(y + i0, out, m);
        }
    }
}

static void softmax_item(void* ctx, size_t item)
{
    const softmax_job* j = ctx;
    const softmax_t* t = j->t;
    uint64_t r0 = (uint64_t)item * SOFTMAX_ROWS_PER_ITEM;
    uint64_t r1 = r0 + SOFTMAX_ROWS_PER_ITEM < t->rows ? r0 + SOFTMAX_ROWS_PER_ITEM : t->rows;
    for (uint64_t r = r0; r < r1; r++) softmax_row(t, j->x + r * t->cols, j->y + r * t->cols);
}

static vki_status softmax_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const softmax_t* t = p;
    softmax_job j = {t, ptr[0], ptr[1]};
    size_t items = (size_t)((t->rows + SOFTMAX_ROWS_PER_ITEM - 1) / SOFTMAX_ROWS_PER_ITEM);
    vki_for_items(items, t->rows * t->cols * 4, threads, softmax_item, &j);
    return VKI_OK;
}

vki_status vki_graph_add_tflite_softmax(vki_graph* g, uint64_t rows, uint32_t cols, const float* table,
                                        int32_t x_signed, float y_scale, int32_t y_zp, int32_t y_signed, vki_ref x,
                                        vki_ref y)
{
    /* x_signed does not enter the arithmetic: only max - x_j does, the same on canonical bytes. */
    y_signed = y_signed != 0;
    if (!rows || !cols) FAIL(VKI_EINVAL, "tflite_softmax: rows=%llu and cols=%u must be positive",
                             (unsigned long long)rows, cols);
    if (!table) FAIL(VKI_EINVAL, "tflite_softmax: table is NULL");
    for (int i = 0; i < 256; i++)
        if (!(isfinite(table[i]) && table[i] >= 0.0f))
            FAIL(VKI_EINVAL, "tflite_softmax: table[%d] = %g must be finite and >= 0", i, (double)table[i]);
    if (vki_bad_scale(y_scale)) FAIL(VKI_EINVAL, "tflite_softmax: y_scale %g must be finite and > 0", (double)y_scale);
    if (vki_zp_bad(y_zp, y_signed)) FAIL(VKI_EINVAL, "tflite_softmax: y_zp %d is outside the %s range", y_zp,
                                     y_signed ? "int8" : "uint8");
    uint64_t count = vki_mul2(rows, cols);
    uint64_t need[2] = {count, count};
    vki_ref refs[2] = {x, y};
    if (x.bytes == need[0] && y.bytes == need[1] && count && vki_refs_overlap(x, y))
        FAIL(VKI_EINVAL, "tflite_softmax: x and y overlap");
    softmax_t* t = malloc(sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "tflite_softmax: out of memory");
    t->rows = rows;
    t->cols = cols;
    t->y_signed = y_signed;
    t->y_scale = y_scale;
    t->qmax_rel = (y_signed ? 127 : 255) - y_zp;
    t->off = y_zp + 128 * y_signed;
    t->bad = y_zp < 0 ? 255 : 0;  /* canonical qmax or qmin */
    memcpy(t->table, table, sizeof t->table);
    return vki_graph_push(g, "tflite_softmax", softmax_run, free, t, 2, refs, need);
}
