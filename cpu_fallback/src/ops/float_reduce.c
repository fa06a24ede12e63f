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
 * - Eigen's redux of each contiguous row (`init_first` = 3: the reduced axes innermost, ORT's FastReduceKR and
 *   its aggall for sums; every op): the same 4-lane order per row, f = + for sums, except that row o begins
 *   o * W floats past ORT's 16-byte aligned buffer, so its first (-o * W) % 4 elements are Eigen's unaligned
 *   head, folded in after the lanes and before the tail; a row with no whole aligned packet folds in order from
 *   its first element; ReduceMean then divides once by (float)W (reference/float_reduce.py eigen_rows).
 *
 * - ORT's FastReduceKRK (`init_first` = 4, shape K R K). Sums: MLAS's M = 1 SGEMM against a vector of ones, one
 *   math::MatMul(1, N, K) per outer block: the reduced rows in groups of 4, then one of 2, then 1, each group
 *   t = ((r0 + r1) + r2) + r3, then y = t + y from y = +0 (reference/float_reduce.py mlas_m1_sum). Max/Min:
 *   Eigen's rowwise maxCoeff assigned to the block's output row: outputs in whole 16-byte aligned packets fold
 *   p = r0, then p = f(p, f(f(r[i], r[i+1]), f(r[i+2], r[i+3]))) for i = 1, 5, ... below (K - 1) & ~3, then the
 *   rest one by one; the row's unaligned head and tail fold in order from r0 (eigen_krk).
 * - ORT's FastReduceRKR (`init_first` = 5, shape R K R): per kept index, each contiguous run of the last axis
 *   reduced as in the fourth order (its head by the run's start); sums add them from 0.0f, Max/Min start from the
 *   first run's first element and take a run's result when greater (smaller).
 *
 * Max keeps acc unless v > acc (Min: v < acc), so a NaN first element stays and a later NaN is skipped, and of
 * +0/-0 the first one wins, as in ORT's update `v > acc ? v : acc`. The shape given is ORT's merged fast shape
 * (rank <= 6, alternating kept/reduced axes, `reduce_mask` bit i set for a reduced axis); the output is the kept
 * axes in order. Which reductions take which order, and which ones vkinfer does not reproduce (refused: the host
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
    uint64_t seg;      /* init_first 5: the contiguous run of the last (reduced) axis */
    uint64_t* outer_off; /* n_outer input offsets (elements) */
    uint64_t* red_off;   /* n_red input offsets, row-major order of the reduced indices */
} fr_t;

typedef struct {
    const fr_t* t;
    const uint8_t* x;
    uint8_t* y;
} fr_job;

/* Eigen's scalar_sum_op / std::max(a, b) / std::min(a, b): the first operand kept on ties and a NaN second one. */
static inline float fr_f(uint32_t op, float a, float b)
{
    if (op <= FR_MEAN) return a + b;
    return op == FR_MAX ? (a < b ? b : a) : (b < a ? b : a);
}

/* Eigen's 4-lane redux of the n floats at x whose first `head` are the unaligned head (the module comment's
 * third and fourth orders; head 0 for ORT's aggall). */
static float fr_eigen(uint32_t op, const uf32* x, uint64_t n, uint64_t head)
{
    uint64_t h = head < n ? head : n;
    uint64_t full = (n - h) / 4 * 4, packets = full / 4, i;
    float res;
    if (!full) {
        res = x[0];
        for (i = 1; i < n; i++) res = fr_f(op, res, x[i]);
        return res;
    }
    const uf32* p = x + h;
    float r0[4], r1[4];
    for (int l = 0; l < 4; l++) r0[l] = p[l];
    if (packets > 1) {
        uint64_t pairs = packets / 2 * 2;
        for (int l = 0; l < 4; l++) r1[l] = p[4 + l];
        for (i = 2; i < pairs; i += 2)
            for (int l = 0; l < 4; l++) {
                r0[l] = fr_f(op, r0[l], p[4 * i + l]);
                r1[l] = fr_f(op, r1[l], p[4 * i + 4 + l]);
            }
        for (int l = 0; l < 4; l++) r0[l] = fr_f(op, r0[l], r1[l]);
        if (packets > pairs)
            for (int l = 0; l < 4; l++) r0[l] = fr_f(op, r0[l], p[4 * pairs + l]);
    }
    res = fr_f(op, fr_f(op, r0[0], r0[2]), fr_f(op, r0[1], r0[3]));
    for (i = 0; i < h; i++) res = fr_f(op, res, x[i]);
    for (i = h + full; i < n; i++) res = fr_f(op, res, x[i]);
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
        y[0] = fr_eigen(t->op, x, t->n_red, 0);
        return;
    }
    if (t->init_first == 3) {  /* one contiguous row per output (inner = 1): row o starts at o * n_red */
        uint64_t head = (4 - (t->outer_off[o] & 3)) & 3;
        float r = fr_eigen(t->op, x, t->n_red, head);
        y[0] = t->op == FR_MEAN ? r / (float)t->n_red : r;
        return;
    }
    if (t->init_first == 5) {  /* R K R: output o folds its runs' Eigen redux (red_off[i * seg] apart) */
        uint32_t op = t->op == FR_MEAN ? FR_SUM : t->op;
        float acc = op == FR_SUM ? 0.0f : x0[0];  /* Max/Min: from the first run's first element */
        for (uint64_t i = 0; i < t->n_red / t->seg; i++) {
            uint64_t start = t->outer_off[o] + t->red_off[i * t->seg];
            float v = fr_eigen(op, (const uf32*)jb->x + start, t->seg, (4 - (start & 3)) & 3);
            acc = op == FR_SUM ? acc + v : op == FR_MAX ? (v > acc ? v : acc) : (v < acc ? v : acc);
        }
        y[0] = t->op == FR_MEAN ? acc / (float)t->n_red : acc;
        return;
    }
    if (t->init_first == 4 && t->op >= FR_MAX) {  /* K R K: Eigen's rowwise redux into the block's output row */
        uint64_t h = (4 - ((o * t->inner) & 3)) & 3, k = t->n_red, k4 = (k - 1) & ~(uint64_t)3;
        if (h > t->inner) h = t->inner;
        uint64_t pk_end = h + (t->inner - h) / 4 * 4;  /* outputs [h, pk_end) are whole aligned packets */
        const uint64_t* ro = t->red_off;
        for (uint64_t j = 0; j < m; j++) {
            const uf32* c = x + j;
            float p = c[ro[0]];
            uint64_t i = 1;
            if (c0 + j >= h && c0 + j < pk_end)
                for (; i < k4; i += 4)
                    p = fr_f(t->op, p, fr_f(t->op, fr_f(t->op, c[ro[i]], c[ro[i + 1]]),
                                            fr_f(t->op, c[ro[i + 2]], c[ro[i + 3]])));
            for (; i < k; i++) p = fr_f(t->op, p, c[ro[i]]);
            y[j] = p;
        }
        return;
    }
    if (t->init_first == 4) {  /* MLAS's M = 1 kernel's groups of rows */
        for (uint64_t r = 0; r < t->n_red;) {
            uint64_t g = t->n_red - r >= 4 ? 4 : t->n_red - r >= 2 ? 2 : 1;
            const uf32* xr = x + t->red_off[r];
            for (uint64_t j = 0; j < m; j++) {
                float s = xr[j];
                for (uint64_t i = 1; i < g; i++) s = s + x[t->red_off[r + i] + j];
                y[j] = r ? s + y[j] : s + 0.0f;
            }
            r += g;
        }
        if (t->op == FR_MEAN) {
            float n = (float)t->n_red;
            for (uint64_t j = 0; j < m; j++) y[j] = y[j] / n;
        }
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
    if (init_first > 5) FAIL(VKI_EINVAL, "float_reduce: init_first must be 0..5");
    if (init_first == 4 && (rank != 3 || reduce_mask != 2))
        FAIL(VKI_EINVAL, "float_reduce: init_first 4 (FastReduceKRK) needs the merged shape K R K");
    if (init_first == 5 && (rank != 3 || reduce_mask != 5))
        FAIL(VKI_EINVAL, "float_reduce: init_first 5 (FastReduceRKR) needs the merged shape R K R");
    if (init_first == 2 && (op < FR_MAX || reduce_mask != (UINT32_C(1) << rank) - 1))
        FAIL(VKI_EINVAL, "float_reduce: init_first 2 (Eigen's reduce-all) is for Max/Min over every axis");
    if (init_first == 3 && reduce_mask + (reduce_mask & (0u - reduce_mask)) != UINT32_C(1) << rank)
        FAIL(VKI_EINVAL, "float_reduce: init_first 3 (Eigen's row redux) needs the reduced axes innermost");
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
    t->seg = shape[rank - 1];
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
