/* The native graph's com.microsoft QLinearSoftmax (vkinfer/reference/qlinear_softmax.py) on canonical bytes.
 *
 * The numpy reference is the contract, and it is ONNX Runtime 1.31's arithmetic bit for bit: per row, with the
 * 256 float32 exponentials e(k) (k = row max - x; the table comes from the reference, index 255 - k),
 *     sum = e_0 + e_1 + ... sequentially in row order (float32; never reassociated: -ffp-contract=off and no
 *           fast-math, see the Makefile, and the vectorised loop below keeps each row in its own lane)
 *     v   = round_half_even((e_j * m) / sum) with m = floor(1 / y_scale)           (float32 multiply, divide)
 *     y   = min(v + y_zp, qmax)
 * The tensor is viewed as (outer, len, inner) in its CPU form: a row is `len` bytes `inner` apart, so a softmax
 * over any axis of the NHWC / row-major form needs no transpose. Canonical bytes (int8 XOR 0x80) keep order and
 * differences, so k, the only use of x, is the same on them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

/* -O3's vectoriser cost model at any -O level (why: graph_internal.h). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

#define QSM_LANES 64       /* rows of a strided slab handled together (inner > 1): one lane each */
#define QSM_ROWS_PER_ITEM 16 /* contiguous rows (inner == 1) per work item */

typedef struct {
    uint64_t outer, inner;
    uint32_t len;
    float y_mult;
    int32_t qmax_rel; /* qmax - y_zp: v >= 0 clamps only from above */
    int32_t off;      /* y_zp + 128 for int8: into the canonical domain */
    float table[256];
} qsm_t;

typedef struct {
    const qsm_t* t;
    const uint8_t* x;
    uint8_t* y;
    uint64_t lane_blocks; /* per outer index, when inner > 1 */
} qsm_job;

/* round_half_even(p) + off, clamped to qmax_rel + off; p is finite and >= 0 (see the add function). Values past
 * 1024 saturate anyway (qmax_rel <= 255), so they are capped first and the int conversion is defined. */
static inline uint8_t qsm_quant(float p, int32_t qmax_rel, int32_t off)
{
    float pc = p < 1024.0f ? p : 1024.0f;
    int32_t n = (int32_t)pc;
    float f = pc - (float)n; /* exact below 2^23 */
    n += (f > 0.5f) | ((f == 0.5f) & (n & 1));
    n = n < qmax_rel ? n : qmax_rel;
    return (uint8_t)(n + off);
}

/* One contiguous row of t->len bytes. */
static void qsm_row(const qsm_t* t, const uint8_t* restrict x, uint8_t* restrict y)
{
    uint32_t n = t->len;
    uint8_t mx = 0;
    for (uint32_t i = 0; i < n; i++) mx = mx > x[i] ? mx : x[i];
    const float* e = t->table + (255 - mx);
    float sum = 0.0f;
    for (uint32_t i = 0; i < n; i++) sum += e[x[i]]; /* sequential: ORT's order */
    float m = t->y_mult;
    for (uint32_t i = 0; i < n; i++) y[i] = qsm_quant((e[x[i]] * m) / sum, t->qmax_rel, t->off);
}

/* Rows (o, i0 .. i0 + w - 1) of a strided view: element a of row i at (o * len + a) * inner + i. Each lane keeps
 * its own sequential sum, so vectorising across lanes does not reorder any row's additions. */
static void qsm_lanes(const qsm_t* t, const uint8_t* restrict x, uint8_t* restrict y, uint32_t w)
{
    uint64_t inner = t->inner;
    uint32_t n = t->len;
    uint8_t mx[QSM_LANES];
    float sum[QSM_LANES];
    memset(mx, 0, sizeof mx);
    for (uint32_t a = 0; a < n; a++) {
        const uint8_t* xa = x + a * inner;
        for (uint32_t j = 0; j < w; j++) mx[j] = mx[j] > xa[j] ? mx[j] : xa[j];
    }
    for (uint32_t j = 0; j < w; j++) sum[j] = 0.0f;
    for (uint32_t a = 0; a < n; a++) {
        const uint8_t* xa = x + a * inner;
        for (uint32_t j = 0; j < w; j++) sum[j] += t->table[255 - mx[j] + xa[j]];
    }
    float m = t->y_mult;
    for (uint32_t a = 0; a < n; a++) {
        const uint8_t* xa = x + a * inner;
        uint8_t* ya = y + a * inner;
        for (uint32_t j = 0; j < w; j++)
            ya[j] = qsm_quant((t->table[255 - mx[j] + xa[j]] * m) / sum[j], t->qmax_rel, t->off);
    }
}

static void qsm_item(void* ctx, size_t item)
{
    const qsm_job* j = ctx;
    const qsm_t* t = j->t;
    if (t->inner == 1) {
        uint64_t r0 = (uint64_t)item * QSM_ROWS_PER_ITEM;
        uint64_t r1 = r0 + QSM_ROWS_PER_ITEM < t->outer ? r0 + QSM_ROWS_PER_ITEM : t->outer;
        for (uint64_t r = r0; r < r1; r++) qsm_row(t, j->x + r * t->len, j->y + r * t->len);
        return;
    }
    uint64_t o = (uint64_t)item / j->lane_blocks, i0 = (uint64_t)item % j->lane_blocks * QSM_LANES;
    uint32_t w = (uint32_t)(t->inner - i0 < QSM_LANES ? t->inner - i0 : QSM_LANES);
    uint64_t base = o * t->len * t->inner + i0;
    qsm_lanes(t, j->x + base, j->y + base, w);
}

static vki_status qsm_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const qsm_t* t = p;
    qsm_job j = {t, ptr[0], ptr[1], (t->inner + QSM_LANES - 1) / QSM_LANES};
    size_t items = t->inner == 1 ? (size_t)((t->outer + QSM_ROWS_PER_ITEM - 1) / QSM_ROWS_PER_ITEM)
                                 : (size_t)(t->outer * j.lane_blocks);
    vki_for_items(items, t->outer * t->len * t->inner * 4, threads, qsm_item, &j);
    return VKI_OK;
}

vki_status vki_graph_add_qlinear_softmax(vki_graph* g, uint64_t outer, uint32_t len, uint64_t inner,
                                         const float* table, float y_mult, int32_t y_zp, int32_t y_signed, vki_ref x,
                                         vki_ref y)
{
    y_signed = y_signed != 0;
    if (!outer || !len || !inner)
        FAIL(VKI_EINVAL, "qlinear_softmax: outer=%llu, len=%u and inner=%llu must be positive",
             (unsigned long long)outer, len, (unsigned long long)inner);
    if (!table) FAIL(VKI_EINVAL, "qlinear_softmax: table is NULL");
    for (int i = 0; i < 256; i++)
        if (!(isfinite(table[i]) && table[i] >= 0.0f))
            FAIL(VKI_EINVAL, "qlinear_softmax: table[%d] = %g must be finite and >= 0", i, (double)table[i]);
    if (!(table[255] > 0.0f)) FAIL(VKI_EINVAL, "qlinear_softmax: table[255] (a row's maximum) must be > 0");
    if (!(isfinite(y_mult) && y_mult >= 0.0f && y_mult == floorf(y_mult)))
        FAIL(VKI_EINVAL, "qlinear_softmax: y_mult %g must be a finite integer >= 0 (floor(1 / y_scale))",
             (double)y_mult);
    /* Every e * m must be finite (ORT's result is undefined past that; the reference refuses it too). */
    for (int i = 0; i < 256; i++)
        if (!isfinite(table[i] * y_mult))
            FAIL(VKI_EINVAL, "qlinear_softmax: table[%d] * y_mult overflows float32", i);
    if (vki_zp_bad(y_zp, y_signed))
        FAIL(VKI_EINVAL, "qlinear_softmax: y_zp %d is outside the %s range", y_zp, y_signed ? "int8" : "uint8");
    uint64_t count = vki_mul2(vki_mul2(outer, len), inner);
    uint64_t need[2] = {count, count};
    vki_ref refs[2] = {x, y};
    if (x.bytes == need[0] && y.bytes == need[1] && count && vki_refs_overlap(x, y))
        FAIL(VKI_EINVAL, "qlinear_softmax: x and y overlap");
    qsm_t* t = malloc(sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "qlinear_softmax: out of memory");
    t->outer = outer;
    t->inner = inner;
    t->len = len;
    t->y_mult = y_mult;
    t->qmax_rel = (y_signed ? 127 : 255) - y_zp;
    t->off = y_zp + 128 * y_signed;
    memcpy(t->table, table, sizeof t->table);
    return vki_graph_push(g, "qlinear_softmax", qsm_run, free, t, 2, refs, need);
}
