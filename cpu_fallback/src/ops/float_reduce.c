/* The native graph's float32 ReduceSum / ReduceMean / ReduceMax / ReduceMin (vkinfer/cpu/float_reduce.py lowers
 * to it) in the two orders ONNX Runtime 1.31's CPU kernels use where they are plain loops (reduction_ops.cc):
 *
 * - its generic loop (NoTransposeReduce1Loop): each output accumulates its reduced elements one by one in
 *   row-major order of the reduced indices, a sum starting from 0.0f (so 0 + -0 = +0), a max/min from the first
 *   element, then a mean divides once by (float)count;
 * - its RK fast path (reduced rows, then kept columns): the first row copied, then each row added in turn
 *   (`init_first`: the same order without the leading 0.0f + ...).
 *
 * - Eigen's reduce-all maxCoeff()/minCoeff() (ORT's aggall, every axis reduced: `init_first` = 2, Max/Min only),
 *   4-lane SSE over a 16-byte aligned buffer: packets 0, 2, 4, ... and 1, 3, 5, ... in two accumulators, merged,
 *   one more packet if one is left, the lanes folded as f(f(l0, l2), f(l1, l3)), then the size % 4 tail one by
 *   one; f = std::max(a, b) = a < b ? b : a (Min: b < a ? b : a), the first operand kept on ties and on a NaN
 *   second operand (probed against ORT: vkinfer/reference/float_reduce.py eigen_redux).
 *
 * Max keeps acc unless v > acc (Min: v < acc), so a NaN first element stays and a later NaN is skipped, and of
 * +0/-0 the first one wins, as in ORT's update `v > acc ? v : acc`. The shape given is ORT's merged fast shape
 * (rank <= 6, alternating kept/reduced axes, `reduce_mask` bit i set for a reduced axis); the output is the kept
 * axes in order. Which reductions take which order, and which ones ORT hands to Eigen or MLAS (refused: the host
 * runs them), is decided by the lowering. float32 buffers may have any alignment. */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

typedef float uf32 __attribute__((aligned(1), may_alias));

enum { FR_SUM, FR_MEAN, FR_MAX, FR_MIN };
#define FR_CHUNK 256 /* output elements per work item */

typedef struct {
    uint32_t op, init_first;
    uint64_t inner;    /* trailing kept elements (1 when the last axis is reduced) */
    uint64_t n_outer;  /* outputs / inner */
    uint64_t n_red;    /* reduced elements per output */
    uint64_t chunks;   /* work items per outer index */
    uint64_t* outer_off; /* n_outer input offsets (elements) */
    uint64_t* red_off;   /* n_red input offsets, row-major order of the reduced indices */
} fr_t;

typedef struct {
    const fr_t* t;
    const uint8_t* x;
    uint8_t* y;
} fr_job;

static inline float fr_f(uint32_t op, float a, float b)
{
    return op == FR_MAX ? (a < b ? b : a) : (b < a ? b : a);
}

/* Eigen's 4-lane redux of n floats (the module comment's third order). */
static float fr_eigen(uint32_t op, const uf32* x, uint64_t n)
{
    uint64_t full = n / 4 * 4, packets = full / 4, i;
    float res;
    if (!full) {
        res = x[0];
        for (i = 1; i < n; i++) res = fr_f(op, res, x[i]);
        return res;
    }
    float r0[4], r1[4];
    for (int l = 0; l < 4; l++) r0[l] = x[l];
    if (packets > 1) {
        uint64_t pairs = packets / 2 * 2;
        for (int l = 0; l < 4; l++) r1[l] = x[4 + l];
        for (i = 2; i < pairs; i += 2)
            for (int l = 0; l < 4; l++) {
                r0[l] = fr_f(op, r0[l], x[4 * i + l]);
                r1[l] = fr_f(op, r1[l], x[4 * i + 4 + l]);
            }
        for (int l = 0; l < 4; l++) r0[l] = fr_f(op, r0[l], r1[l]);
        if (packets > pairs)
            for (int l = 0; l < 4; l++) r0[l] = fr_f(op, r0[l], x[4 * pairs + l]);
    }
    res = fr_f(op, fr_f(op, r0[0], r0[2]), fr_f(op, r0[1], r0[3]));
    for (i = full; i < n; i++) res = fr_f(op, res, x[i]);
    return res;
}

static void fr_item(void* ctx, size_t item)
{
    const fr_job* jb = ctx;
    const fr_t* t = jb->t;
    uint64_t o = item / t->chunks, c0 = (item % t->chunks) * FR_CHUNK;
    uint64_t m = t->inner - c0 < FR_CHUNK ? t->inner - c0 : FR_CHUNK;
    const uf32* x = (const uf32*)jb->x + t->outer_off[o] + c0;
    uf32* y = (uf32*)jb->y + o * t->inner + c0;
    const uf32* x0 = x + t->red_off[0];
    if (t->init_first == 2) {  /* every element, contiguous: red_off[r] = r */
        y[0] = fr_eigen(t->op, x, t->n_red);
        return;
    }
    if ((t->op == FR_SUM || t->op == FR_MEAN) && !t->init_first) {
        for (uint64_t j = 0; j < m; j++) y[j] = 0.0f + x0[j];
    } else {
        for (uint64_t j = 0; j < m; j++) y[j] = x0[j];
    }
    for (uint64_t r = 1; r < t->n_red; r++) {
        const uf32* xr = x + t->red_off[r];
        switch (t->op) {
        case FR_SUM:
        case FR_MEAN:
            for (uint64_t j = 0; j < m; j++) y[j] = y[j] + xr[j];
            break;
        case FR_MAX:
            for (uint64_t j = 0; j < m; j++) y[j] = xr[j] > y[j] ? xr[j] : y[j];
            break;
        default:
            for (uint64_t j = 0; j < m; j++) y[j] = xr[j] < y[j] ? xr[j] : y[j];
            break;
        }
    }
    if (t->op == FR_MEAN) {
        float n = (float)t->n_red;
        for (uint64_t j = 0; j < m; j++) y[j] = y[j] / n;
    }
}

static vki_status fr_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const fr_t* t = p;
    fr_job j = {t, ptr[0], ptr[1]};
    size_t items = (size_t)(t->n_outer * t->chunks);
    vki_for_items(items, vki_mul2(vki_mul2(t->n_outer, t->inner), t->n_red), threads, fr_item, &j);
    return VKI_OK;
}

static void fr_free(void* p)
{
    fr_t* t = p;
    if (t) {
        free(t->outer_off);
        free(t->red_off);
    }
    free(t);
}

/* Offsets of every index combination of the axes in `axes` (row-major over them), given the input strides. */
static void combos(uint32_t n_axes, const uint32_t* axes, const uint32_t* shape, const uint64_t* stride,
                   uint64_t* out)
{
    uint64_t idx[VKI_GRAPH_MAX_RANK] = {0};
    uint64_t k = 0, off = 0;
    for (;;) {
        out[k++] = off;
        int a = (int)n_axes - 1;
        for (; a >= 0; a--) {
            uint32_t ax = axes[a];
            off += stride[ax];
            if (++idx[a] < shape[ax]) break;
            off -= stride[ax] * shape[ax];
            idx[a] = 0;
        }
        if (a < 0) return;
    }
}

vki_status vki_graph_add_float_reduce(vki_graph* g, uint32_t op, uint32_t rank, const uint32_t* shape,
                                      uint32_t reduce_mask, uint32_t init_first, vki_ref x, vki_ref y)
{
    if (op > FR_MIN) FAIL(VKI_EINVAL, "float_reduce: op must be 0..3 (sum, mean, max, min)");
    if (rank < 1 || rank > VKI_GRAPH_MAX_RANK || !shape) FAIL(VKI_EINVAL, "float_reduce: rank must be 1..%d",
                                                              VKI_GRAPH_MAX_RANK);
    if (!reduce_mask || reduce_mask >> rank) FAIL(VKI_EINVAL, "float_reduce: reduce_mask must name 1..rank axes");
    if (init_first > 2) FAIL(VKI_EINVAL, "float_reduce: init_first must be 0, 1 or 2");
    if (init_first == 2 && (op < FR_MAX || reduce_mask != (UINT32_C(1) << rank) - 1))
        FAIL(VKI_EINVAL, "float_reduce: init_first 2 (Eigen's reduce-all) is for Max/Min over every axis");
    if (vki_refs_overlap(x, y)) FAIL(VKI_EINVAL, "float_reduce: the input overlaps the output");
    uint64_t stride[VKI_GRAPH_MAX_RANK], count = 1;
    uint32_t kept[VKI_GRAPH_MAX_RANK], red[VKI_GRAPH_MAX_RANK], nk = 0, nr = 0;
    for (int a = (int)rank - 1; a >= 0; a--) {
        if (!shape[a]) FAIL(VKI_EINVAL, "float_reduce: axis %d is empty", a);
        stride[a] = count;
        count = vki_mul2(count, shape[a]);
    }
    if (!count || count > (UINT64_C(1) << 40)) FAIL(VKI_EINVAL, "float_reduce: input too large");
    for (uint32_t a = 0; a < rank; a++) {
        if ((reduce_mask >> a) & 1) red[nr++] = a;
        else kept[nk++] = a;
    }
    fr_t* t = calloc(1, sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "float_reduce: out of memory");
    t->op = op;
    t->init_first = init_first;
    t->inner = 1;
    uint32_t n_outer_axes = nk;
    if (nk && kept[nk - 1] == rank - 1) {  /* the last axis kept: its elements are the contiguous inner run */
        t->inner = shape[rank - 1];
        n_outer_axes = nk - 1;
    }
    t->n_outer = 1;
    for (uint32_t i = 0; i < n_outer_axes; i++) t->n_outer *= shape[kept[i]];
    t->n_red = 1;
    for (uint32_t i = 0; i < nr; i++) t->n_red *= shape[red[i]];
    t->chunks = (t->inner + FR_CHUNK - 1) / FR_CHUNK;
    t->outer_off = malloc(t->n_outer * sizeof(uint64_t));
    t->red_off = malloc(t->n_red * sizeof(uint64_t));
    if (!t->outer_off || !t->red_off) {
        fr_free(t);
        FAIL(VKI_ENOMEM, "float_reduce: out of memory");
    }
    combos(n_outer_axes, kept, shape, stride, t->outer_off);
    combos(nr, red, shape, stride, t->red_off);
    uint64_t need[2] = {vki_mul2(count, 4), vki_mul2(vki_mul2(t->n_outer, t->inner), 4)};
    vki_ref refs[2] = {x, y};
    return vki_graph_push(g, "float_reduce", fr_run, fr_free, t, 2, refs, need);
}
