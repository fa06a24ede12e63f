/* The native graph's float32 -> 8-bit quantize: ONNX QuantizeLinear as ORT/MLAS computes it, TFLite QUANTIZE; its
 * input NCHW or flat, its output canonical bytes (NHWC) or the Vulkan packed layout.
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

#define VEC 16  /* elements per block where a loop gathers (table lookups) or interleaves */

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define LITTLE_ENDIAN_BYTES 1
#else
#define LITTLE_ENDIAN_BYTES 0
#endif

/* Pixels per tile of the NCHW -> NHWC move, pixels and values per parallel item (as ops/dequantize.c). */
#define TP 64
#define ITEM_PIXELS 4096
#define ITEM_VALUES 16384

typedef struct {
    int32_t mode;      /* 0: x / scale (ONNX), 1: x * recip (TFLite) */
    int32_t refuse_nan;
    uint32_t n, c;
    uint64_t hw;
    int32_t nchw;
    int32_t packed;    /* rows of c padded with zero bytes to `stride` (the Vulkan layout), raw bytes */
    uint32_t stride;   /* output bytes per row (pixel): c, or 4 * ceil(c / 4) packed */
    float s;           /* scale (mode 0) or float32(1 / scale) (mode 1) */
    float fmin, fmax;  /* qmin - zp, qmax - zp */
    int32_t off;       /* zp + 128 (int8): into the canonical domain; zp (raw int8 bytes) when packed */
} quant_t;

typedef struct {
    const quant_t* t;
    const uint8_t* x;  /* float32 values, any alignment */
    uint8_t* y;
    int nan;           /* set (relaxed atomic store) by any item that met a NaN */
} quant_job;

/* A NaN test on the bits (|x| above +inf's pattern), or-ed up inside the quantize loops: a float compare stays
 * scalar under -ftrapping-math, this vectorises. A separate pass over the span just quantized cost MobileNetV2's
 * 224x224x3 input 18 us of its 54 (Zen 5, 1 thread). */
static inline uint32_t nan_bits(uint32_t b) { return (b & 0x7FFFFFFFu) > 0x7F800000u; }

static void note_nan(quant_job* j, uint32_t any)
{
    if (j->t->refuse_nan && any) __atomic_store_n(&j->nan, 1, __ATOMIC_RELAXED);
}

/* y = clamp(rne(q), qmin - zp, qmax - zp) + zp, clamping first (integer bounds: the same). After the clamp
 * |q| <= 255, and q + 1.5 * 2^23 lies in [2^23, 2^24) where the float32 spacing is 1: that add rounds q half to
 * even (the default rounding mode; 1.5 * 2^23 is even), and the sum's bit pattern is 0x4B400000 + rne(q), whose
 * low byte is rne(q) mod 256. Adding off = zp (+ 128 for int8) to that byte gives the canonical output. No
 * subtraction or float -> int conversion: the loop is bound by its instruction count.
 * NaN fails both comparisons and becomes qmin, as ORT's vectorised kernel gives (numpy's reference refuses NaN;
 * TFLite mode refuses scales whose float32 reciprocal is infinite, the one way x * (1 / scale) is NaN for a
 * non-NaN x). */
static inline uint32_t quant1_u32(float q, float fmin, float fmax, int32_t off)
{
    q = q > fmin ? q : fmin;
    q = q < fmax ? q : fmax;
    float g = q + 0x1.8p23f;
    uint32_t bits;
    memcpy(&bits, &g, 4);
    return (bits + (uint32_t)off) & 0xFF;
}

/* float32 loads through memcpy: external buffers may have any alignment (the compiler still emits plain vector
 * loads). */
static inline uint32_t ld_u32(const uint8_t* p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline float as_f32(uint32_t b)
{
    float v;
    memcpy(&v, &b, 4);
    return v;
}

/* The loops below are compiled for x86-64-v4 and AVX2 beside the baseline, picked once at load (as ops/tflite_add.c's
 * rows): the division dominates, and SSE2 divides 4 lanes at a time. MobileNetV2's 224x224x3 input: 36 ->
 * 20 us, 11 us in the packed form (Zen 5, 1 thread). The bits are the same in every clone: IEEE division and
 * compares, no contraction. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)  /* ifunc resolvers run before the sanitizer runtime is up */
#define QUANT_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define QUANT_CLONES
#endif

/* n contiguous values at x (bytes) -> n bytes at y. One float32 division (MLAS divides, not a multiply by the
 * reciprocal) or multiply. Returns whether a value was NaN. */
#define QUANT_SPAN(NAME, OP)                                                                                  \
    QUANT_CLONES static uint32_t NAME(const quant_t* t, const uint8_t* restrict x, uint8_t* restrict y,       \
                                      size_t n)                                                               \
    {                                                                                                         \
        float s = t->s, fmin = t->fmin, fmax = t->fmax;                                                       \
        int32_t off = t->off;                                                                                 \
        uint32_t any = 0;                                                                                     \
        for (size_t i = 0; i < n; i++) {                                                                      \
            uint32_t b = ld_u32(x + 4 * i);                                                                   \
            any |= nan_bits(b);                                                                               \
            y[i] = (uint8_t)quant1_u32(as_f32(b) OP s, fmin, fmax, off);                                      \
        }                                                                                                     \
        return any;                                                                                           \
    }
QUANT_SPAN(quant_span_div, /)
QUANT_SPAN(quant_span_mul, *)

static uint32_t quant_span(const quant_t* t, const uint8_t* x, uint8_t* y, size_t n)
{
    return (t->mode == 0 ? quant_span_div : quant_span_mul)(t, x, y, n);
}

/* Elementwise: item i covers values [i * ITEM, ...). */
static void quant_flat_item(void* ctx, size_t item)
{
    quant_job* j = ctx;
    uint64_t total = (uint64_t)j->t->n * j->t->c * j->t->hw, i0 = (uint64_t)item * ITEM_VALUES;
    size_t m = total - i0 < ITEM_VALUES ? (size_t)(total - i0) : ITEM_VALUES;
    note_nan(j, quant_span(j->t, j->x + 4 * i0, j->y + i0, m));
}

/* Packed rows (not NCHW): n * hw rows of c values, each padded with zero bytes to the stride. */
static size_t rows_per_item(const quant_t* t) { return t->c >= ITEM_VALUES ? 1 : ITEM_VALUES / t->c; }
static void quant_rows_item(void* ctx, size_t item)
{
    quant_job* j = ctx;
    const quant_t* t = j->t;
    uint64_t rows = (uint64_t)t->n * t->hw, r0 = (uint64_t)item * rows_per_item(t);
    uint64_t r1 = r0 + rows_per_item(t) < rows ? r0 + rows_per_item(t) : rows;
    uint32_t any = 0;
    for (uint64_t r = r0; r < r1; r++) {
        uint8_t* d = j->y + r * t->stride;
        any |= quant_span(t, j->x + 4 * r * t->c, d, t->c);
        memset(d + t->c, 0, t->stride - t->c);
    }
    note_nan(j, any);
}

/* RGB images (c = 3), the usual model input: the three planes are quantized VEC pixels at a time and each
 * pixel's bytes leave as one 4-byte store. Unpacked (STRIDE 3), a store's 4th byte is rewritten by the next
 * pixel's, and the last pixels take byte stores, so nothing is written past the item's range; packed (STRIDE 4),
 * the word is the pixel with its zero pad. One loop per item: a per-tile call cost more than the interleave. */
#define QUANT_RGB(NAME, OP, STRIDE)                                                                           \
    QUANT_CLONES static uint32_t NAME(const quant_t* t, const uint8_t* restrict r, const uint8_t* restrict g,  \
                                      const uint8_t* restrict b, uint8_t* restrict d, size_t np)              \
    {                                                                                                         \
        float s = t->s, fmin = t->fmin, fmax = t->fmax;                                                       \
        int32_t off = t->off;                                                                                 \
        uint32_t any = 0;                                                                                     \
        size_t i = 0;                                                                                         \
        for (; i + VEC < np + (STRIDE == 4); i += VEC) { /* 3: a pixel follows the block, the 4th byte is its */ \
            uint32_t w[VEC];                                                                                  \
            for (size_t k = 0; k < VEC; k++) {                                                                \
                size_t o = 4 * (i + k);                                                                       \
                uint32_t br = ld_u32(r + o), bg = ld_u32(g + o), bb = ld_u32(b + o);                          \
                any |= nan_bits(br) | nan_bits(bg) | nan_bits(bb);                                            \
                w[k] = quant1_u32(as_f32(br) OP s, fmin, fmax, off) |                                         \
                       quant1_u32(as_f32(bg) OP s, fmin, fmax, off) << 8 |                                    \
                       quant1_u32(as_f32(bb) OP s, fmin, fmax, off) << 16;                                    \
            }                                                                                                 \
            for (size_t k = 0; k < VEC; k++) memcpy(d + STRIDE * (i + k), &w[k], 4);                          \
        }                                                                                                     \
        for (; i < np; i++) {                                                                                 \
            uint32_t br = ld_u32(r + 4 * i), bg = ld_u32(g + 4 * i), bb = ld_u32(b + 4 * i);                  \
            any |= nan_bits(br) | nan_bits(bg) | nan_bits(bb);                                                \
            uint32_t w = quant1_u32(as_f32(br) OP s, fmin, fmax, off) |                                       \
                         quant1_u32(as_f32(bg) OP s, fmin, fmax, off) << 8 |                                  \
                         quant1_u32(as_f32(bb) OP s, fmin, fmax, off) << 16;                                  \
            memcpy(d + STRIDE * i, &w, STRIDE);                                                               \
        }                                                                                                     \
        return any;                                                                                           \
    }
QUANT_RGB(quant_rgb_div, /, 3)
QUANT_RGB(quant_rgb_mul, *, 3)
QUANT_RGB(quant_rgb4_div, /, 4)
QUANT_RGB(quant_rgb4_mul, *, 4)

/* NCHW in, NHWC out (rows of `stride` bytes per pixel): image b, pixels [p * ITEM_PIXELS, ...). Each tile of TP
 * pixels is quantized channel by channel (contiguous reads, vectorised) into a small buffer, then interleaved
 * into the output pixels. */
static void quant_nchw_item(void* ctx, size_t item)
{
    quant_job* j = ctx;
    const quant_t* t = j->t;
    size_t per = (size_t)((t->hw + ITEM_PIXELS - 1) / ITEM_PIXELS), b = item / per, c = t->c, st = t->stride;
    uint64_t p0 = (uint64_t)(item % per) * ITEM_PIXELS, p1 = p0 + ITEM_PIXELS < t->hw ? p0 + ITEM_PIXELS : t->hw;
    const uint8_t* xb = j->x + (uint64_t)b * c * t->hw * 4;
    uint8_t* yb = j->y + (uint64_t)b * st * t->hw;
    if (c == 3 && LITTLE_ENDIAN_BYTES) {
        size_t plane = t->hw * 4;
        const uint8_t* r = xb + p0 * 4;
        uint32_t (*fn)(const quant_t*, const uint8_t*, const uint8_t*, const uint8_t*, uint8_t*, size_t) =
            st == 4 ? (t->mode == 0 ? quant_rgb4_div : quant_rgb4_mul) : (t->mode == 0 ? quant_rgb_div : quant_rgb_mul);
        note_nan(j, fn(t, r, r + plane, r + 2 * plane, yb + p0 * st, (size_t)(p1 - p0)));
        return;
    }
    enum { TC = 64 };  /* channels per tile: the buffer stays at 4 KiB */
    uint8_t buf[TC * TP];
    uint32_t any = 0;
    for (uint64_t p = p0; p < p1; p += TP) {
        size_t np = p1 - p < TP ? (size_t)(p1 - p) : TP;
        for (size_t c0 = 0; c0 < c; c0 += TC) {
            size_t nc = c - c0 < TC ? c - c0 : TC;
            for (size_t k = 0; k < nc; k++) any |= quant_span(t, xb + ((c0 + k) * t->hw + p) * 4, buf + k * TP, np);
            uint8_t* d = yb + p * st + c0;
            for (size_t i = 0; i < np; i++)
                for (size_t k = 0; k < nc; k++) d[i * st + k] = buf[k * TP + i];
        }
        if (st > c)
            for (size_t i = 0; i < np; i++) memset(yb + (p + i) * st + c, 0, st - c);
    }
    note_nan(j, any);
}

static vki_status quant_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const quant_t* t = p;
    quant_job j = {t, ptr[0], ptr[1], 0};
    uint64_t total = (uint64_t)t->n * t->c * t->hw;
    if (t->nchw) {
        size_t per = (size_t)((t->hw + ITEM_PIXELS - 1) / ITEM_PIXELS);
        vki_for_items(t->n * per, total, threads, quant_nchw_item, &j);
    } else if (t->packed) {
        uint64_t rows = (uint64_t)t->n * t->hw;
        vki_for_items((size_t)((rows + rows_per_item(t) - 1) / rows_per_item(t)), total, threads, quant_rows_item,
                      &j);
    } else {
        vki_for_items((size_t)((total + ITEM_VALUES - 1) / ITEM_VALUES), total, threads, quant_flat_item, &j);
    }
    if (__atomic_load_n(&j.nan, __ATOMIC_RELAXED)) {
        vki_set_error("quantize: the input holds NaN");
        return VKI_ENAN;
    }
    return VKI_OK;
}

vki_status vki_graph_add_quantize(vki_graph* g, int32_t mode, uint32_t n, uint32_t c, uint64_t hw, int32_t nchw,
                                  float scale, int32_t zp, int32_t is_signed, vki_ref x, vki_ref y)
{
    is_signed = is_signed != 0;
    const int32_t refuse_nan = (mode & VKI_QUANT_REFUSE_NAN) != 0, packed = (mode & VKI_QUANT_PACKED) != 0;
    mode &= ~(VKI_QUANT_REFUSE_NAN | VKI_QUANT_PACKED);
    if (mode != 0 && mode != 1) FAIL(VKI_EINVAL, "quantize: mode must be 0 (ONNX) or 1 (TFLite), got %d", mode);
    if (!n || !c || !hw) FAIL(VKI_EINVAL, "quantize: shape n=%u c=%u hw=%llu must be positive", n, c,
                              (unsigned long long)hw);
    if (vki_bad_scale(scale)) FAIL(VKI_EINVAL, "quantize: scale %g must be finite and > 0", (double)scale);
    if (vki_zp_bad(zp, is_signed)) FAIL(VKI_EINVAL, "quantize: zp %d is outside the %s range", zp,
                                    is_signed ? "int8" : "uint8");
    /* TFLite multiplies by the float32 reciprocal: an infinite one (scale < 2^-128) would turn 0 into NaN. */
    if (mode == 1 && !isfinite(1.0f / scale))
        FAIL(VKI_EINVAL, "quantize: scale %g has no finite float32 reciprocal (TFLite mode)", (double)scale);
    if (packed && c > UINT32_MAX - 3) FAIL(VKI_EINVAL, "quantize: c=%u too large to pack", c);
    uint32_t stride = packed ? 4 * ((c + 3) / 4) : c;
    uint64_t count = vki_mul2(vki_mul2(n, c), hw);
    uint64_t need[2] = {vki_mul2(count, 4), vki_mul2(vki_mul2(n, hw), stride)};
    vki_ref refs[2] = {x, y};
    if (x.bytes == need[0] && y.bytes == need[1] && count && vki_refs_overlap(x, y))
        FAIL(VKI_EINVAL, "quantize: x and y overlap");
    quant_t* t = malloc(sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "quantize: out of memory");
    int32_t lo = is_signed ? -128 : 0, hi = is_signed ? 127 : 255;
    /* TFLite multiplies by the float32 reciprocal, computed once as its kernel does. */
    *t = (quant_t){mode, refuse_nan, n, c, hw, nchw != 0, packed, stride, mode == 0 ? scale : 1.0f / scale,
                   (float)(lo - zp), (float)(hi - zp), zp + (packed ? 0 : 128 * is_signed)};
    return vki_graph_push(g, mode == 0 ? "quantize:onnx" : "quantize:tflite", quant_run, free, t, 2, refs, need);
}
