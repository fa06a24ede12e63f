/* The native graph's elementwise float32 unary operators (ONNX Relu, LeakyRelu, Clip, Neg, Abs, Sqrt) as ONNX
 * Runtime 1.31's CPU EP computes them (vkinfer/cpu/float_elementwise.py lowers to it): each is one IEEE operation
 * or a select, so signed zeros and NaN follow ORT's expressions (measured, tests/ops/test_float_elementwise.py):
 *   Relu       x < 0 ? 0 : x                      (-0 and NaN pass through)
 *   LeakyRelu  x >= 0 ? x : alpha * x             (alpha: the attribute)
 *   Clip       min(max(x, lo), hi) with std::max/std::min's operand order: max(x, lo) = x < lo ? lo : x,
 *              then min(r, hi) = hi < r ? hi : r  (NaN passes through; lo = alpha, hi = beta)
 *   Neg -x, Abs |x| (sign cleared), Sqrt (correctly rounded; negative -> NaN). */
#include <math.h>
#include <stdlib.h>

#include "graph_internal.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

typedef float uf32 __attribute__((aligned(1), may_alias));

enum { FU_RELU, FU_LEAKY_RELU, FU_CLIP, FU_NEG, FU_ABS, FU_SQRT, FU_COUNT };
#define FU_ITEM 16384  /* values per parallel item */

typedef struct {
    uint32_t op;
    uint64_t n;
    float alpha, beta;
} fun_t;

typedef struct {
    const fun_t* t;
    const uint8_t* x;
    uint8_t* y;
} fun_job;

#define FU_LOOP(EXPR) for (uint64_t i = 0; i < m; i++) { float v = x[i]; y[i] = (EXPR); }

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)  /* ifunc resolvers run before the sanitizer runtime is up */
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
static void fu_part(uint32_t op, float alpha, float beta, const uf32* restrict x, uf32* restrict y, uint64_t m)
{
    switch (op) {
    case FU_RELU: FU_LOOP(v < 0.0f ? 0.0f : v); break;
    case FU_LEAKY_RELU: FU_LOOP(v >= 0.0f ? v : alpha * v); break;
    case FU_CLIP:
        for (uint64_t i = 0; i < m; i++) {
            float r = x[i] < alpha ? alpha : x[i];
            y[i] = beta < r ? beta : r;
        }
        break;
    case FU_NEG: FU_LOOP(-v); break;
    case FU_ABS: FU_LOOP(fabsf(v)); break;
    default: FU_LOOP(sqrtf(v)); break;
    }
}

static void fu_item(void* ctx, size_t item)
{
    const fun_job* j = ctx;
    uint64_t i0 = (uint64_t)item * FU_ITEM, m = j->t->n - i0 < FU_ITEM ? j->t->n - i0 : FU_ITEM;
    fu_part(j->t->op, j->t->alpha, j->t->beta, (const uf32*)j->x + i0, (uf32*)j->y + i0, m);
}

static vki_status fu_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const fun_t* t = p;
    fun_job j = {t, ptr[0], ptr[1]};
    vki_for_items((size_t)((t->n + FU_ITEM - 1) / FU_ITEM), t->n, threads, fu_item, &j);
    return VKI_OK;
}

vki_status vki_graph_add_float_unary(vki_graph* g, uint32_t op, uint64_t n, float alpha, float beta, vki_ref x,
                                     vki_ref y)
{
    if (op >= FU_COUNT) FAIL(VKI_EINVAL, "float_unary: unknown op %u", op);
    if (!n) FAIL(VKI_EINVAL, "float_unary: n must be positive");
    if (op == FU_CLIP && (isnan(alpha) || isnan(beta)))
        FAIL(VKI_EINVAL, "float_unary: Clip bounds must not be NaN");
    uint64_t need[2] = {vki_mul2(n, 4), vki_mul2(n, 4)};
    if (x.bytes == need[0] && y.bytes == need[1] && vki_refs_overlap(x, y))
        FAIL(VKI_EINVAL, "float_unary: x and y overlap");
    fun_t* t = malloc(sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "float_unary: out of memory");
    *t = (fun_t){op, n, alpha, beta};
    vki_ref refs[2] = {x, y};
    return vki_graph_push(g, "float_unary", fu_run, free, t, 2, refs, need);
}
