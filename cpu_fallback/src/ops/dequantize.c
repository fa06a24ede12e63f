/* The native graph's 8-bit -> float32 dequantize (ONNX DequantizeLinear, which TFLite's DEQUANTIZE is imported
 * as): a 256-entry table of the exact values, NHWC in and NCHW or flat out.
 *
 * The numpy reference is the contract; every result is bit-identical to it. Inner loops are written for the
 * auto-vectoriser (plain loops over restrict pointers). */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

/* -O3's vectoriser cost model at any -O level (why: graph_internal.h). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

/* Pixels per tile of the NHWC -> NCHW move, pixels and values per parallel item (as ops/quantize.c). */
#define TP 64
#define ITEM_PIXELS 4096
#define ITEM_VALUES 16384

typedef struct {
    uint32_t n, c;
    uint64_t hw;
    int32_t nchw;
    float lut[256];  /* canonical byte -> float32(x - zp) * scale: the exact values, 256 of them */
} dequant_t;

typedef struct {
    const dequant_t* t;
    const uint8_t* x;
    uint8_t* y;  /* float32 values, any alignment */
} dequant_job;

static void dequant_flat_item(void* ctx, size_t item)
{
    const dequant_job* j = ctx;
    const float* lut = j->t->lut;
    uint64_t total = (uint64_t)j->t->n * j->t->c * j->t->hw, i0 = (uint64_t)item * ITEM_VALUES;
    size_t m = total - i0 < ITEM_VALUES ? (size_t)(total - i0) : ITEM_VALUES;
    const uint8_t* restrict x = j->x + i0;
    uint8_t* restrict y = j->y + 4 * i0;
    /* Four values a pass: the one-value loop ran at 1.3 or 2.2 cycles a value depending on where the linker put it
     * (mtcnn_onet's dequantize 23 -> 38 us when an unrelated file grew by 112 bytes). */
    size_t i = 0;
    for (; i + 4 <= m; i += 4) {
        uint32_t v0, v1, v2, v3;
        memcpy(&v0, &lut[x[i]], 4);
        memcpy(&v1, &lut[x[i + 1]], 4);
        memcpy(&v2, &lut[x[i + 2]], 4);
        memcpy(&v3, &lut[x[i + 3]], 4);
        memcpy(y + 4 * i, &v0, 4);
        memcpy(y + 4 * i + 4, &v1, 4);
        memcpy(y + 4 * i + 8, &v2, 4);
        memcpy(y + 4 * i + 12, &v3, 4);
    }
    for (; i < m; i++) memcpy(y + 4 * i, &lut[x[i]], 4);
}

/* NHWC in, NCHW out: image b, pixels [p * ITEM_PIXELS, ...), in tiles of TP pixels so that the strided reads
 * of one channel revisit cache lines the previous channel loaded. */
static void dequant_nchw_item(void* ctx, size_t item)
{
    const dequant_job* j = ctx;
    const dequant_t* t = j->t;
    const float* lut = t->lut;
    size_t per = (size_t)((t->hw + ITEM_PIXELS - 1) / ITEM_PIXELS), b = item / per, c = t->c;
    uint64_t p0 = (uint64_t)(item % per) * ITEM_PIXELS, p1 = p0 + ITEM_PIXELS < t->hw ? p0 + ITEM_PIXELS : t->hw;
    const uint8_t* xb = j->x + (uint64_t)b * c * t->hw;
    uint8_t* yb = j->y + (uint64_t)b * c * t->hw * 4;
    for (uint64_t p = p0; p < p1; p += TP) {
        size_t np = p1 - p < TP ? (size_t)(p1 - p) : TP;
        for (size_t k = 0; k < c; k++) {
            const uint8_t* s = xb + p * c + k;
            uint8_t* d = yb + (k * t->hw + p) * 4;
            size_t i = 0;
            for (; i + 4 <= np; i += 4) {  /* by 4: see dequant_flat_item */
                uint32_t v0, v1, v2, v3;
                memcpy(&v0, &lut[s[i * c]], 4);
                memcpy(&v1, &lut[s[(i + 1) * c]], 4);
                memcpy(&v2, &lut[s[(i + 2) * c]], 4);
                memcpy(&v3, &lut[s[(i + 3) * c]], 4);
                memcpy(d + 4 * i, &v0, 4);
                memcpy(d + 4 * i + 4, &v1, 4);
                memcpy(d + 4 * i + 8, &v2, 4);
                memcpy(d + 4 * i + 12, &v3, 4);
            }
            for (; i < np; i++) memcpy(d + 4 * i, &lut[s[i * c]], 4);
        }
    }
}

static vki_status dequant_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const dequant_t* t = p;
    dequant_job j = {t, ptr[0], ptr[1]};
    uint64_t total = (uint64_t)t->n * t->c * t->hw;
    if (t->nchw) {
        size_t per = (size_t)((t->hw + ITEM_PIXELS - 1) / ITEM_PIXELS);
        vki_for_items(t->n * per, total, threads, dequant_nchw_item, &j);
    } else {
        vki_for_items((size_t)((total + ITEM_VALUES - 1) / ITEM_VALUES), total, threads, dequant_flat_item, &j);
    }
    return VKI_OK;
}

vki_status vki_graph_add_dequantize(vki_graph* g, uint32_t n, uint32_t c, uint64_t hw, int32_t nchw, float scale,
                                    int32_t zp, int32_t is_signed, vki_ref x, vki_ref y)
{
    is_signed = is_signed != 0;
    if (!n || !c || !hw) FAIL(VKI_EINVAL, "dequantize: shape n=%u c=%u hw=%llu must be positive", n, c,
                              (unsigned long long)hw);
    if (vki_bad_scale(scale)) FAIL(VKI_EINVAL, "dequantize: scale %g must be finite and > 0", (double)scale);
    if (vki_zp_bad(zp, is_signed)) FAIL(VKI_EINVAL, "dequantize: zp %d is outside the %s range", zp,
                                    is_signed ? "int8" : "uint8");
    uint64_t count = vki_mul2(vki_mul2(n, c), hw);
    uint64_t need[2] = {count, vki_mul2(count, 4)};
    vki_ref refs[2] = {x, y};
    if (x.bytes == need[0] && y.bytes == need[1] && count && vki_refs_overlap(x, y))
        FAIL(VKI_EINVAL, "dequantize: x and y overlap");
    dequant_t* t = malloc(sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "dequantize: out of memory");
    t->n = n;
    t->c = c;
    t->hw = hw;
    t->nchw = nchw != 0;
    /* canonical v holds x = v - 128 (int8) or v: x - zp = v - (zp + 128 * is_signed); one float32 multiply. */
    for (int v = 0; v < 256; v++) t->lut[v] = (float)(v - zp - 128 * is_signed) * scale;
    return vki_graph_push(g, "dequantize", dequant_run, free, t, 2, refs, need);
}
