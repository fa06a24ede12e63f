/* The native graph's float32 Softmax and LogSoftmax (vkinfer/cpu/float_softmax.py lowers to it) with ONNX Runtime
 * 1.31's bits as its AVX-512F MLAS kernels compute them (vkinfer/reference/float_softmax.py is the numpy original
 * and says why each step is so; measured equal to ORT bit for bit on an AVX-512F machine, tests/ops/
 * test_float_softmax.py). Per row of `len` elements, `inner` apart (the tensor viewed as (outer, len, inner)):
 *
 *   max   16 lanes from -FLT_MAX (lane = index % 16; with len >= 64 four accumulators over blocks of 64, merged
 *         max(max(a0, a1), max(a2, a3))), folded 16 -> 8 -> 4 -> 2 -> 1, then the len % 16 tail one by one;
 *         every max is vmaxps's a > b ? a : b;
 *   e     v = max(-103.972084, x + (-max)) (the same select), m = round(v / ln 2) by the 1.5 * 2^23 trick, the
 *         two-part ln 2 reduction and MLAS's degree-6 polynomial by fused multiply-adds, then p * 2^m rounded
 *         once (vscalefps: exact in double, one rounding to float);
 *   sum   the e accumulated in 16 lanes (the tail's lanes only where present), lanes i and i + 8 added, then
 *         ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7));
 *   y     Softmax: e * (1 / sum); LogSoftmax: (x + (-max)) - logf(sum), logf the C library's (as ORT calls it).
 *
 * ORT on a CPU without AVX-512F runs 8-lane FMA3 kernels (other sums, e below 2^-126 flushed to 0): vkinfer gives
 * the AVX-512F bits on every machine. fmaf is one rounding (a VFMADD in the x86-64-v3/v4 clones, libm's
 * correctly rounded fmaf otherwise), the library being built -ffp-contract=off. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

typedef float uf32 __attribute__((aligned(1), may_alias));

#define FS_LANES 16
#define FS_ITEM 16384 /* elements per parallel item (whole rows) */

typedef struct {
    uint64_t outer, inner, rows, rows_per_item;
    uint32_t len, log;
} fsm_t;

typedef struct {
    const fsm_t* t;
    const uint8_t* x;
    uint8_t* y;
} fsm_job;

static const float FS_POLY[7] = {0x1.694000p-10f, 0x1.125edcp-7f, 0x1.555b5ap-5f, 0x1.555450p-3f,
                                 0x1.fffff6p-2f, 0x1.000000p+0f, 0x1.000000p+0f};

static inline float fs_max(float a, float b) { return a > b ? a : b; }

/* MLAS's SumExp element on v = x + (-max). Branch-free so that the compiler vectorises it: m is read from the
 * biased sum's bits (bias + m, an integer in bias's binade, ulp 1); a NaN v makes p NaN whatever the scale. */
static inline float fs_exp(float v)
{
    const float lower = -103.9720840454f, bias = 12582912.0f;
    v = fs_max(lower, v);
    float biased = fmaf(v, 1.44269504088896341f, bias);
    float m = biased - bias;
    float r = fmaf(m, -6.93145752e-1f, v);
    r = fmaf(m, -1.42860677e-6f, r);
    float p = fmaf(FS_POLY[0], r, FS_POLY[1]); /* Horner, unrolled so that the lanes vectorise */
    p = fmaf(p, r, FS_POLY[2]);
    p = fmaf(p, r, FS_POLY[3]);
    p = fmaf(p, r, FS_POLY[4]);
    p = fmaf(p, r, FS_POLY[5]);
    p = fmaf(p, r, FS_POLY[6]);
    uint32_t bb;
    memcpy(&bb, &biased, 4);
    uint64_t sb = (uint64_t)((int64_t)(int32_t)(bb - 0x4B400000u) + 1023) << 52; /* 2^m as a double, m >= -150 */
    double scale;
    memcpy(&scale, &sb, 8);
    return (float)((double)p * scale); /* vscalefps: p * 2^m rounded once (exact in double, then to float) */
}

static inline __attribute__((always_inline)) float fs_row_max(const uf32* x, uint64_t s, uint64_t d)
{
    uint64_t i = 0;
    float m = -FLT_MAX;
    if (d >= FS_LANES) {
        float acc[4][FS_LANES];
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < FS_LANES; l++) acc[k][l] = -FLT_MAX;
        if (d >= 4 * FS_LANES) {
            for (; d - i >= 4 * FS_LANES; i += 4 * FS_LANES)
                for (int k = 0; k < 4; k++)
                    for (int l = 0; l < FS_LANES; l++)
                        acc[k][l] = fs_max(acc[k][l], x[(i + (uint64_t)(k * FS_LANES + l)) * s]);
            for (int l = 0; l < FS_LANES; l++)
                acc[0][l] = fs_max(fs_max(acc[0][l], acc[1][l]), fs_max(acc[2][l], acc[3][l]));
        }
        for (; d - i >= FS_LANES; i += FS_LANES)
            for (int l = 0; l < FS_LANES; l++) acc[0][l] = fs_max(acc[0][l], x[(i + (uint64_t)l) * s]);
        float t8[8], t4[4];
        for (int l = 0; l < 8; l++) t8[l] = fs_max(acc[0][l], acc[0][l + 8]);
        for (int l = 0; l < 4; l++) t4[l] = fs_max(t8[l], t8[l + 4]);
        m = fs_max(fs_max(t4[0], t4[2]), fs_max(t4[1], t4[3]));
    }
    for (; i < d; i++) m = fs_max(m, x[i * s]);
    return m;
}

static inline __attribute__((always_inline)) void fs_row_impl(const uf32* x, uf32* y, uint64_t s, uint64_t d,
                                                             uint32_t log)
{
    const float neg_max = -fs_row_max(x, s, d);
    float acc[FS_LANES] = {0}, e[FS_LANES];
    uint64_t i = 0;
    for (; d - i >= FS_LANES; i += FS_LANES) {
        for (int l = 0; l < FS_LANES; l++) e[l] = fs_exp(x[(i + (uint64_t)l) * s] + neg_max);
        for (int l = 0; l < FS_LANES; l++) acc[l] = acc[l] + e[l];
        if (!log)
            for (int l = 0; l < FS_LANES; l++) y[(i + (uint64_t)l) * s] = e[l];
    }
    for (int l = 0; i + (uint64_t)l < d; l++) {
        float t = fs_exp(x[(i + (uint64_t)l) * s] + neg_max);
        if (!log) y[(i + (uint64_t)l) * s] = t;
        acc[l] = acc[l] + t;
    }
    float a[8];
    for (int l = 0; l < 8; l++) a[l] = acc[l + 8] + acc[l];
    const float sum = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
    if (log) {
        const float lg = logf(sum);
        for (uint64_t k = 0; k < d; k++) y[k * s] = (x[k * s] + neg_max) - lg;
    } else {
        const float scale = 1.0f / sum;
        for (uint64_t k = 0; k < d; k++) y[k * s] = y[k * s] * scale;
    }
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)  /* ifunc resolvers run before the sanitizer runtime is up */
/* x86-64-v3/v4 so fmaf is one VFMADD, not a libm call; the bits are the same either way. */
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#endif
static void fs_row(const uf32* x, uf32* y, uint64_t s, uint64_t d, uint32_t log)
{
    if (s == 1) /* contiguous rows (the last axis): a copy the compiler vectorises */
        fs_row_impl(x, y, 1, d, log);
    else
        fs_row_impl(x, y, s, d, log);
}

static void fs_item(void* ctx, size_t item)
{
    const fsm_job* j = ctx;
    const fsm_t* t = j->t;
    uint64_t r0 = (uint64_t)item * t->rows_per_item;
    uint64_t r1 = r0 + t->rows_per_item < t->rows ? r0 + t->rows_per_item : t->rows;
    for (uint64_t r = r0; r < r1; r++) {
        uint64_t o = r / t->inner, c = r % t->inner, off = o * t->len * t->inner + c;
        fs_row((const uf32*)j->x + off, (uf32*)j->y + off, t->inner, t->len, t->log);
    }
}

static vki_status fs_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const fsm_t* t = p;
    fsm_job j = {t, ptr[0], ptr[1]};
    size_t items = (size_t)((t->rows + t->rows_per_item - 1) / t->rows_per_item);
    vki_for_items(items, vki_mul2(t->rows, t->len) * 8, threads, fs_item, &j);
    return VKI_OK;
}

vki_status vki_graph_add_float_softmax(vki_graph* g, uint64_t outer, uint32_t len, uint64_t inner, uint32_t log,
                                       vki_ref x, vki_ref y)
{
    if (!outer || !len || !inner) FAIL(VKI_EINVAL, "float_softmax: outer, len and inner must be positive");
    if (log > 1) FAIL(VKI_EINVAL, "float_softmax: log must be 0 (Softmax) or 1 (LogSoftmax)");
    uint64_t rows = vki_mul2(outer, inner), n = vki_mul2(rows, len);
    if (!rows || !n || n > (UINT64_C(1) << 40)) FAIL(VKI_EINVAL, "float_softmax: the tensor is too large");
    uint64_t need[2] = {vki_mul2(n, 4), vki_mul2(n, 4)};
    if (vki_refs_overlap(x, y)) FAIL(VKI_EINVAL, "float_softmax: x and y overlap");
    fsm_t* t = malloc(sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "float_softmax: out of memory");
    *t = (fsm_t){.outer = outer, .inner = inner, .rows = rows, .len = len, .log = log,
                 .rows_per_item = len >= FS_ITEM ? 1 : FS_ITEM / len};
    vki_ref refs[2] = {x, y};
    return vki_graph_push(g, "float_softmax", fs_run, free, t, 2, refs, need);
}
