/* The native graph's Where (vkinfer/cpu/where.py lowers to it; the numpy definition is vkinfer/reference/where.py):
 * out = cond ? x : y element by element, cond bool bytes (any nonzero byte is true), x, y and out elements of
 * `elem` bytes (1: canonical 8-bit bytes, 4: float32), copied bit for bit (a NaN payload survives), except that
 * float32 -0 taken from x (`zero` 1) or from y (`zero` 2) becomes +0: ONNX Runtime's Where merges c ? x : 0 and
 * c ? 0 : y by testing one of them against 0 (vkinfer/reference/where.py says which one, as measured).
 *
 * out is contiguous over `shape` (rank 1..6, in out's storage order); cond, x and y are read at their own element
 * strides per axis of out (0: broadcast), which is numpy broadcasting with any storage order of each operand (the
 * 4-D NHWC form of 8-bit tensors, host-layout bool and float32). The lowering merges neighbouring axes that every
 * operand walks alike (vkinfer/reference/float_minmax.py's merged-broadcast idea), so the last axis is a long run. */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

#define WH_CHUNK 4096 /* elements of the last axis per work item */

typedef uint32_t wu32 __attribute__((aligned(1), may_alias)); /* float32 bits */

typedef struct {
    uint32_t elem, rank, zero;
    uint64_t shape[VKI_GRAPH_MAX_RANK];
    uint64_t st[3][VKI_GRAPH_MAX_RANK]; /* cond, x, y element strides per axis */
    uint64_t n_rows, chunks;
} wh_t;

typedef struct {
    const wh_t* t;
    const uint8_t *c, *x, *y;
    uint8_t* out;
} wh_job;

static void wh_item(void* ctx, size_t item)
{
    const wh_job* jb = ctx;
    const wh_t* t = jb->t;
    uint32_t last = t->rank - 1;
    uint64_t row = item / t->chunks, c0 = (item % t->chunks) * WH_CHUNK, len = t->shape[last];
    uint64_t m = len - c0 < WH_CHUNK ? len - c0 : WH_CHUNK;
    uint64_t off[3] = {0, 0, 0}, rem = row;
    for (int a = (int)last - 1; a >= 0; a--) {
        uint64_t i = rem % t->shape[a];
        rem /= t->shape[a];
        for (int k = 0; k < 3; k++) off[k] += i * t->st[k][a];
    }
    for (int k = 0; k < 3; k++) off[k] += c0 * t->st[k][last];
    uint64_t sc = t->st[0][last], sx = t->st[1][last], sy = t->st[2][last], o = row * len + c0;
    const uint8_t* c = jb->c + off[0];
    /* Branchless selects (a mask from the condition byte): a conditional load would keep GCC from vectorising;
     * measured 1.13 -> 0.06 ms for 344k bytes (21 x 16384, contiguous). */
    if (t->elem == 4) {
        const wu32* x = (const wu32*)jb->x + off[1];
        const wu32* y = (const wu32*)jb->y + off[2];
        wu32* out = (wu32*)jb->out + o;
        uint32_t zx = t->zero == 1, zy = t->zero == 2;
        if (sc == 1 && sx == 1 && sy == 1) {
            for (uint64_t j = 0; j < m; j++) {
                uint32_t k = -(uint32_t)(c[j] != 0), a = x[j], b = y[j];
                a = (zx && !(a << 1)) ? 0 : a; /* -0 (or +0) from x: +0 */
                b = (zy && !(b << 1)) ? 0 : b;
                out[j] = (a & k) | (b & ~k);
            }
        } else {
            for (uint64_t j = 0; j < m; j++) {
                uint32_t k = -(uint32_t)(c[j * sc] != 0), a = x[j * sx], b = y[j * sy];
                a = (zx && !(a << 1)) ? 0 : a;
                b = (zy && !(b << 1)) ? 0 : b;
                out[j] = (a & k) | (b & ~k);
            }
        }
    } else {
        const uint8_t* x = jb->x + off[1];
        const uint8_t* y = jb->y + off[2];
        uint8_t* out = jb->out + o;
        if (sc == 1 && sx == 1 && sy == 1) {
            for (uint64_t j = 0; j < m; j++) {
                uint8_t k = (uint8_t)-(c[j] != 0);
                out[j] = (uint8_t)((x[j] & k) | (y[j] & ~k));
            }
        } else {
            for (uint64_t j = 0; j < m; j++) {
                uint8_t k = (uint8_t)-(c[j * sc] != 0);
                out[j] = (uint8_t)((x[j * sx] & k) | (y[j * sy] & ~k));
            }
        }
    }
}

static vki_status wh_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const wh_t* t = p;
    wh_job j = {t, ptr[0], ptr[1], ptr[2], ptr[3]};
    vki_for_items((size_t)(t->n_rows * t->chunks), vki_mul2(t->n_rows, t->shape[t->rank - 1]), threads, wh_item,
                  &j);
    return VKI_OK;
}

vki_status vki_graph_add_where(vki_graph* g, uint32_t elem, uint32_t zero, uint32_t rank, const uint32_t* shape,
                               const uint64_t* c_strides, const uint64_t* x_strides, const uint64_t* y_strides,
                               vki_ref c, vki_ref x, vki_ref y, vki_ref out)
{
    if (elem != 1 && elem != 4) FAIL(VKI_EINVAL, "where: elem must be 1 (8-bit) or 4 (float32)");
    if (zero > 2 || (zero && elem != 4)) FAIL(VKI_EINVAL, "where: zero must be 0, or 1/2 for float32");
    if (rank < 1 || rank > VKI_GRAPH_MAX_RANK || !shape || !c_strides || !x_strides || !y_strides)
        FAIL(VKI_EINVAL, "where: rank must be 1..%d with shape and strides", VKI_GRAPH_MAX_RANK);
    if (vki_refs_overlap(c, out) || vki_refs_overlap(x, out) || vki_refs_overlap(y, out))
        FAIL(VKI_EINVAL, "where: an input overlaps the output");
    wh_t* t = calloc(1, sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "where: out of memory");
    const uint64_t* st[3] = {c_strides, x_strides, y_strides};
    uint64_t end[3] = {1, 1, 1}, n = 1;
    t->elem = elem;
    t->zero = zero;
    t->rank = rank;
    for (uint32_t a = 0; a < rank; a++) {
        if (!shape[a]) {
            free(t);
            FAIL(VKI_EINVAL, "where: axis %u is empty", a);
        }
        t->shape[a] = shape[a];
        n = vki_mul2(n, shape[a]);
        for (int k = 0; k < 3; k++) {
            if (st[k][a] > (UINT64_C(1) << 40)) {
                free(t);
                FAIL(VKI_EINVAL, "where: stride of axis %u too large", a);
            }
            t->st[k][a] = st[k][a];
            end[k] += st[k][a] * (shape[a] - 1);
        }
    }
    if (!n || n > (UINT64_C(1) << 40)) {
        free(t);
        FAIL(VKI_EINVAL, "where: output too large");
    }
    t->n_rows = n / shape[rank - 1];
    t->chunks = (shape[rank - 1] + WH_CHUNK - 1) / WH_CHUNK;
    uint64_t need[4] = {end[0], end[1] * elem, end[2] * elem, n * elem};
    vki_ref refs[4] = {c, x, y, out};
    return vki_graph_push(g, "where", wh_run, free, t, 4, refs, need);
}
