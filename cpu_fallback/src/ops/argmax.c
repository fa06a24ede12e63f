/* The native graph's ArgMax / ArgMin (vkinfer/cpu/argmax.py lowers to it; the numpy definition is
 * vkinfer/reference/argmax.py) over canonical 8-bit bytes (int8 XOR 0x80: the unsigned byte order is the logical
 * order of int8 and uint8 alike) or float32, int64 indices out.
 *
 * ONNX Runtime 1.31's aggregators walk the axis from its first element and take the next value when it is greater
 * (ArgMin: smaller), or greater-or-equal (smaller-or-equal) with select_last_index: ties give the first (last)
 * index, a NaN first element stays, a later NaN is skipped, and of +0/-0 the first (last) wins. This loop makes
 * the same comparisons in the same order, so every index is ORT's (`mode` 0: first, 1: last). A rank-1 input
 * without select_last_index goes to Eigen's maxCoeff/minCoeff(&index) in ORT, where the first NaN wins, else the
 * first extreme (numpy's argmax; measured on lengths 1-69 and up to 4099): `mode` 2, the first rule plus "a NaN
 * replaces a number".
 *
 * The shape is given axis by axis (rank <= 6) with each axis' stride in x and in y (elements; the reduced axis'
 * y stride is ignored), so x may be in the 4-D NHWC form while y is row-major. When the last axis is kept and
 * contiguous in x and y, its elements are one inner run compared together. */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

#define AM_CHUNK 256 /* inner elements per work item */

typedef float af32 __attribute__((aligned(1), may_alias));
typedef int64_t ai64 __attribute__((aligned(1), may_alias));

typedef struct {
    uint32_t op, mode, is_f32;
    uint64_t inner, n_outer, n_red, red_stride, chunks;
    uint64_t* x_off; /* n_outer x offsets (elements) */
    uint64_t* y_off; /* n_outer y offsets (elements) */
} am_t;

typedef struct {
    const am_t* t;
    const uint8_t* x;
    uint8_t* y;
} am_job;

/* Whether v replaces the running acc (module comment). */
#define AM_TAKE(op, mode, v, acc) \
    ((op) == 0 ? ((mode) == 1 ? (v) >= (acc) : (v) > (acc)) : ((mode) == 1 ? (v) <= (acc) : (v) < (acc)))

/* One output with its axis at stride rs (no inner run): the walk, scalar. */
static int64_t am_walk_f32(const am_t* t, const af32* x, uint64_t rs)
{
    float acc = x[0];
    int64_t idx = 0;
    for (uint64_t r = 1; r < t->n_red; r++) {
        float v = x[r * rs];
        if (AM_TAKE(t->op, t->mode, v, acc) || (t->mode == 2 && v != v && acc == acc)) {
            acc = v;
            idx = (int64_t)r;
        }
    }
    return idx;
}

static int64_t am_walk_u8(const am_t* t, const uint8_t* x, uint64_t rs)
{
    if (rs == 1) {  /* bytes have no NaN: the extreme (a vectorised max/min), then its first (last) position; the
                     * walk's branches cost 1.16 ms on 21 x 16384 random bytes, this 0.05 */
        uint8_t e = x[0];
        if (t->op == 0) {
            for (uint64_t r = 1; r < t->n_red; r++) e = x[r] > e ? x[r] : e;
        } else {
            for (uint64_t r = 1; r < t->n_red; r++) e = x[r] < e ? x[r] : e;
        }
        if (t->mode == 1) {
            uint64_t r = t->n_red;
            while (x[r - 1] != e) r--;
            return (int64_t)(r - 1);
        }
        uint64_t r = 0;
        while (x[r] != e) r++;
        return (int64_t)r;
    }
    uint8_t acc = x[0];
    int64_t idx = 0;
    for (uint64_t r = 1; r < t->n_red; r++) {
        uint8_t v = x[r * rs];
        if (AM_TAKE(t->op, t->mode, v, acc)) {
            acc = v;
            idx = (int64_t)r;
        }
    }
    return idx;
}

/* An inner run of m outputs: 32-bit accumulators and indices (one lane width, so GCC vectorises the selects;
 * uint8 values with int64 indices did not: 21 x 16384 bytes 1.41 -> 0.2 ms). n_red < 2^31 (checked). */
static void am_item(void* ctx, size_t item)
{
    const am_job* jb = ctx;
    const am_t* t = jb->t;
    uint64_t o = item / t->chunks, c0 = (item % t->chunks) * AM_CHUNK;
    uint64_t m = t->inner - c0 < AM_CHUNK ? t->inner - c0 : AM_CHUNK;
    uint64_t xo = t->x_off[o] + c0, rs = t->red_stride;
    ai64* y = (ai64*)jb->y + t->y_off[o] + c0;
    if (t->inner == 1) {
        y[0] = t->is_f32 ? am_walk_f32(t, (const af32*)jb->x + xo, rs) : am_walk_u8(t, jb->x + xo, rs);
        return;
    }
    int32_t idx[AM_CHUNK];
    memset(idx, 0, m * sizeof idx[0]);
    if (t->is_f32) {
        const af32* x = (const af32*)jb->x + xo;
        float acc[AM_CHUNK];
        for (uint64_t j = 0; j < m; j++) acc[j] = x[j];
        for (uint64_t r = 1; r < t->n_red; r++) {
            const af32* xr = x + r * rs;
            int32_t ri = (int32_t)r;
            if (t->mode == 2) {
                for (uint64_t j = 0; j < m; j++) {
                    float v = xr[j];
                    int take = AM_TAKE(t->op, 0, v, acc[j]) | ((v != v) & (acc[j] == acc[j]));
                    acc[j] = take ? v : acc[j];
                    idx[j] = take ? ri : idx[j];
                }
            } else if (t->op == 0) {
                for (uint64_t j = 0; j < m; j++) {
                    float v = xr[j];
                    int take = t->mode ? v >= acc[j] : v > acc[j];
                    acc[j] = take ? v : acc[j];
                    idx[j] = take ? ri : idx[j];
                }
            } else {
                for (uint64_t j = 0; j < m; j++) {
                    float v = xr[j];
                    int take = t->mode ? v <= acc[j] : v < acc[j];
                    acc[j] = take ? v : acc[j];
                    idx[j] = take ? ri : idx[j];
                }
            }
        }
    } else {
        const uint8_t* x = jb->x + xo;
        int32_t acc[AM_CHUNK];
        for (uint64_t j = 0; j < m; j++) acc[j] = x[j];
        for (uint64_t r = 1; r < t->n_red; r++) {
            const uint8_t* xr = x + r * rs;
            int32_t ri = (int32_t)r;
            for (uint64_t j = 0; j < m; j++) {
                int32_t v = xr[j];
                int take = AM_TAKE(t->op, t->mode, v, acc[j]);
                acc[j] = take ? v : acc[j];
                idx[j] = take ? ri : idx[j];
            }
        }
    }
    for (uint64_t j = 0; j < m; j++) y[j] = idx[j];
}

static vki_status am_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const am_t* t = p;
    am_job j = {t, ptr[0], ptr[1]};
    vki_for_items((size_t)(t->n_outer * t->chunks), vki_mul2(vki_mul2(t->n_outer, t->inner), t->n_red), threads,
                  am_item, &j);
    return VKI_OK;
}

static void am_free(void* p)
{
    am_t* t = p;
    if (t) {
        free(t->x_off);
        free(t->y_off);
    }
    free(t);
}

/* Offsets of every index combination of the axes in `axes` (row-major over them) for the given strides. */
static void am_combos(uint32_t n_axes, const uint32_t* axes, const uint32_t* shape, const uint64_t* stride,
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

vki_status vki_graph_add_argmax(vki_graph* g, uint32_t op, uint32_t mode, uint32_t is_f32, uint32_t rank,
                                const uint32_t* shape, const uint64_t* x_strides, const uint64_t* y_strides,
                                uint32_t axis, vki_ref x, vki_ref y)
{
    if (op > 1) FAIL(VKI_EINVAL, "argmax: op must be 0 (ArgMax) or 1 (ArgMin)");
    if (mode > 2 || is_f32 > 1) FAIL(VKI_EINVAL, "argmax: mode must be 0..2 and is_f32 0 or 1");
    if (rank < 1 || rank > VKI_GRAPH_MAX_RANK || !shape || !x_strides || !y_strides)
        FAIL(VKI_EINVAL, "argmax: rank must be 1..%d with shape and strides", VKI_GRAPH_MAX_RANK);
    if (axis >= rank) FAIL(VKI_EINVAL, "argmax: axis %u is out of range for rank %u", axis, rank);
    if (vki_refs_overlap(x, y)) FAIL(VKI_EINVAL, "argmax: the input overlaps the output");
    uint64_t x_end = 1, y_end = 1, n_in = 1;
    uint32_t kept[VKI_GRAPH_MAX_RANK], nk = 0;
    for (uint32_t a = 0; a < rank; a++) {
        if (!shape[a]) FAIL(VKI_EINVAL, "argmax: axis %u is empty", a);
        if (x_strides[a] > (UINT64_C(1) << 40) || y_strides[a] > (UINT64_C(1) << 40))
            FAIL(VKI_EINVAL, "argmax: stride of axis %u too large", a);
        n_in = vki_mul2(n_in, shape[a]);
        x_end += x_strides[a] * (shape[a] - 1);
        if (a != axis) {
            kept[nk++] = a;
            y_end += y_strides[a] * (shape[a] - 1);
        }
    }
    if (!n_in || n_in > (UINT64_C(1) << 40)) FAIL(VKI_EINVAL, "argmax: input too large");
    if (shape[axis] > INT32_MAX) FAIL(VKI_EINVAL, "argmax: axis of %u elements (at most 2^31 - 1)", shape[axis]);
    am_t* t = calloc(1, sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "argmax: out of memory");
    t->op = op;
    t->mode = mode;
    t->is_f32 = is_f32;
    t->n_red = shape[axis];
    t->red_stride = x_strides[axis];
    t->inner = 1;
    uint32_t n_outer_axes = nk;
    if (nk && kept[nk - 1] == rank - 1 && x_strides[rank - 1] == 1 && y_strides[rank - 1] == 1) {
        t->inner = shape[rank - 1];
        n_outer_axes = nk - 1;
    }
    t->n_outer = 1;
    for (uint32_t i = 0; i < n_outer_axes; i++) t->n_outer *= shape[kept[i]];
    t->chunks = (t->inner + AM_CHUNK - 1) / AM_CHUNK;
    t->x_off = malloc(t->n_outer * sizeof(uint64_t));
    t->y_off = malloc(t->n_outer * sizeof(uint64_t));
    if (!t->x_off || !t->y_off) {
        am_free(t);
        FAIL(VKI_ENOMEM, "argmax: out of memory");
    }
    am_combos(n_outer_axes, kept, shape, x_strides, t->x_off);
    am_combos(n_outer_axes, kept, shape, y_strides, t->y_off);
    uint64_t need[2] = {vki_mul2(x_end, is_f32 ? 4 : 1), vki_mul2(y_end, 8)};
    vki_ref refs[2] = {x, y};
    return vki_graph_push(g, "argmax", am_run, am_free, t, 2, refs, need);
}
