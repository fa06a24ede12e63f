/* The native graph's comparisons and logic ops (vkinfer/cpu/float_compare.py lowers to it; the numpy definition
 * is vkinfer/model/host_elementwise.py's kernels): ONNX Equal, Greater, GreaterOrEqual, Less, LessOrEqual on
 * float32, int32, int64 or byte operands, And, Or, Xor, Not on bool bytes, writing bool bytes 0 or 1 (numpy's and
 * ONNX Runtime's storage of bool). A quantized model carries them between quantized ops (DQ -> Greater -> Where),
 * so the whole chain runs in one native call.
 *
 * Numerics: one IEEE comparison per element, which is ONNX Runtime 1.31's (Eigen's `a > b` etc. over its
 * broadcaster's spans: the order does not matter): any comparison with a NaN operand is false, Equal(NaN, NaN)
 * included, and +0 == -0 (measured against ORT, tests/ops/test_float_compare.py). Byte operands compare unsigned:
 * uint8 and bool as stored, int8 in the graph's canonical form (int8 XOR 0x80, vkinfer_graph.h), which keeps the
 * order. The logic ops take any nonzero byte as true.
 *
 * y is contiguous over `shape` (rank 1-6); a and b are read at their own element strides per axis of y (0:
 * broadcast), which is numpy broadcasting with any storage order of each operand (8-bit tensors' 4-D NHWC form).
 * The lowering drops size-1 axes and merges neighbours that every operand walks alike (vkinfer/cpu/_axes.py), so
 * the last axis is a long run. Not reads a only (the lowering passes it as b too). */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

enum { FC_EQ, FC_GT, FC_GE, FC_LT, FC_LE, FC_AND, FC_OR, FC_XOR, FC_NOT, FC_COUNT };
enum { FC_F32, FC_U8, FC_I32, FC_I64, FC_KINDS };
#define FC_CHUNK 4096 /* elements of the last axis per work item */

/* Operands at any alignment (external numpy buffers need not be aligned to their element). */
typedef float fcf32 __attribute__((aligned(1), may_alias));
typedef int32_t fci32 __attribute__((aligned(1), may_alias));
typedef int64_t fci64 __attribute__((aligned(1), may_alias));

typedef struct {
    uint32_t op, kind, esz, rank;
    uint64_t shape[VKI_GRAPH_MAX_RANK];
    uint64_t st[2][VKI_GRAPH_MAX_RANK]; /* a, b element strides per axis */
    uint64_t n_rows, chunks;
} fc_t;

typedef struct {
    const fc_t* t;
    const uint8_t *a, *b;
    uint8_t* y;
} fc_job;

/* y[j] = EXPR(u = a[j * sa], v = b[j * sb]) for j < m, a contiguous loop where both strides are 1. */
#define FC_LOOP(T, EXPR)                                                                                       \
    do {                                                                                                       \
        const T* x = (const T*)pa;                                                                             \
        const T* w = (const T*)pb;                                                                             \
        if (sa == 1 && sb == 1)                                                                                \
            for (uint64_t j = 0; j < m; j++) { T u = x[j], v = w[j]; y[j] = (uint8_t)(EXPR); }                 \
        else                                                                                                   \
            for (uint64_t j = 0; j < m; j++) { T u = x[j * sa], v = w[j * sb]; y[j] = (uint8_t)(EXPR); }       \
    } while (0)

#define FC_COMPARE(T)                                                                                          \
    do {                                                                                                       \
        switch (op) {                                                                                          \
        case FC_EQ: FC_LOOP(T, u == v); break;                                                                 \
        case FC_GT: FC_LOOP(T, u > v); break;                                                                  \
        case FC_GE: FC_LOOP(T, u >= v); break;                                                                 \
        case FC_LT: FC_LOOP(T, u < v); break;                                                                  \
        default: FC_LOOP(T, u <= v); break;                                                                    \
        }                                                                                                      \
    } while (0)

static void fc_part(uint32_t op, uint32_t kind, const uint8_t* pa, uint64_t sa, const uint8_t* pb, uint64_t sb,
                    uint8_t* restrict y, uint64_t m)
{
    if (op >= FC_AND) {
        switch (op) {
        case FC_AND: FC_LOOP(uint8_t, (u != 0) & (v != 0)); break;
        case FC_OR: FC_LOOP(uint8_t, (u != 0) | (v != 0)); break;
        case FC_XOR: FC_LOOP(uint8_t, (u != 0) ^ (v != 0)); break;
        default: /* Not: a only */
            for (uint64_t j = 0; j < m; j++) y[j] = (uint8_t)(pa[j * sa] == 0);
            break;
        }
        return;
    }
    switch (kind) {
    case FC_F32: FC_COMPARE(fcf32); break;
    case FC_U8: FC_COMPARE(uint8_t); break;
    case FC_I32: FC_COMPARE(fci32); break;
    default: FC_COMPARE(fci64); break;
    }
}

static void fc_item(void* ctx, size_t item)
{
    const fc_job* jb = ctx;
    const fc_t* t = jb->t;
    uint32_t last = t->rank - 1;
    uint64_t row = item / t->chunks, c0 = (item % t->chunks) * FC_CHUNK, len = t->shape[last];
    uint64_t m = len - c0 < FC_CHUNK ? len - c0 : FC_CHUNK;
    uint64_t off[2] = {0, 0}, rem = row;
    for (int a = (int)last - 1; a >= 0; a--) { /* the row's multi-index over the outer axes */
        uint64_t i = rem % t->shape[a];
        rem /= t->shape[a];
        for (int k = 0; k < 2; k++) off[k] += i * t->st[k][a];
    }
    for (int k = 0; k < 2; k++) off[k] += c0 * t->st[k][last];
    fc_part(t->op, t->kind, jb->a + off[0] * t->esz, t->st[0][last], jb->b + off[1] * t->esz, t->st[1][last],
            jb->y + row * len + c0, m);
}

static vki_status fc_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const fc_t* t = p;
    fc_job j = {t, ptr[0], ptr[1], ptr[2]};
    vki_for_items((size_t)(t->n_rows * t->chunks), vki_mul2(t->n_rows, t->shape[t->rank - 1]), threads, fc_item, &j);
    return VKI_OK;
}

vki_status vki_graph_add_float_compare(vki_graph* g, uint32_t op, uint32_t kind, uint32_t rank, const uint32_t* shape,
                                       const uint64_t* a_strides, const uint64_t* b_strides, vki_ref a, vki_ref b,
                                       vki_ref y)
{
    static const uint32_t esz[FC_KINDS] = {4, 1, 4, 8};
    if (op >= FC_COUNT) FAIL(VKI_EINVAL, "float_compare: unknown op %u", op);
    if (kind >= FC_KINDS) FAIL(VKI_EINVAL, "float_compare: unknown operand kind %u", kind);
    if (op >= FC_AND && kind != FC_U8) FAIL(VKI_EINVAL, "float_compare: logic op %u takes bool bytes (kind 1)", op);
    if (rank < 1 || rank > VKI_GRAPH_MAX_RANK || !shape || !a_strides || !b_strides)
        FAIL(VKI_EINVAL, "float_compare: rank must be 1..%d with shape and strides", VKI_GRAPH_MAX_RANK);
    if (vki_refs_overlap(a, y) || vki_refs_overlap(b, y)) FAIL(VKI_EINVAL, "float_compare: an input overlaps y");
    fc_t* t = calloc(1, sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "float_compare: out of memory");
    const uint64_t* st[2] = {a_strides, b_strides};
    uint64_t end[2] = {1, 1}, n = 1;
    *t = (fc_t){.op = op, .kind = kind, .esz = esz[kind], .rank = rank};
    for (uint32_t d = 0; d < rank; d++) {
        if (!shape[d]) {
            free(t);
            FAIL(VKI_EINVAL, "float_compare: axis %u is empty", d);
        }
        t->shape[d] = shape[d];
        n = vki_mul2(n, shape[d]);
        for (int k = 0; k < 2; k++) {
            if (st[k][d] > (UINT64_C(1) << 40)) {
                free(t);
                FAIL(VKI_EINVAL, "float_compare: stride of axis %u too large", d);
            }
            t->st[k][d] = st[k][d];
            end[k] += st[k][d] * (shape[d] - 1);
        }
    }
    if (!n || n > (UINT64_C(1) << 40)) {
        free(t);
        FAIL(VKI_EINVAL, "float_compare: output too large");
    }
    t->n_rows = n / shape[rank - 1];
    t->chunks = (shape[rank - 1] + FC_CHUNK - 1) / FC_CHUNK;
    uint64_t need[3] = {end[0] * t->esz, end[1] * t->esz, n};
    vki_ref refs[3] = {a, b, y};
    return vki_graph_push(g, "float_compare", fc_run, free, t, 3, refs, need);
}
