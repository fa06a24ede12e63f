/* The native graph's float32 Clip whose bounds are tensors computed at run time (ONNX Clip-11+ with a min or max
 * input that is not a constant: log-mel's Clip(x, ReduceMax(x) - 80)), as ONNX Runtime 1.31's CPU EP computes it
 * (vkinfer/cpu/float_elementwise.py lowers to it; constant bounds take float_unary's Clip):
 *   r = x < lo ? lo : x;  y = hi < r ? hi : r   (Eigen's cwiseMax then cwiseMin: std::max/std::min operand order)
 * so NaN in x passes through, a NaN bound is no bound, +0/-0 ties keep x, and lo > hi gives hi
 * (vkinfer/reference/float_activations.py, measured in tests/ops/test_float_elementwise.py). `flags` bit 0: lo is
 * read from the lo tensor (one float), else `lo_c`; bit 1: hi likewise. An unused bound tensor may be any one-float
 * buffer (the lowering passes the other bound). */
#include <stdlib.h>

#include "graph_internal.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

typedef float uf32 __attribute__((aligned(1), may_alias));

#define FC_ITEM 16384  /* values per parallel item */

typedef struct {
    uint64_t n;
    uint32_t flags;
    float lo, hi;
} fclip_t;

typedef struct {
    const fclip_t* t;
    const uint8_t* x;
    uint8_t* y;
    float lo, hi;
} fclip_job;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)  /* ifunc resolvers run before the sanitizer runtime is up */
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
static void fc_part(const uf32* restrict x, uf32* restrict y, uint64_t m, float lo, float hi)
{
    for (uint64_t i = 0; i < m; i++) {
        float r = x[i] < lo ? lo : x[i];
        y[i] = hi < r ? hi : r;
    }
}

static void fc_item(void* ctx, size_t item)
{
    const fclip_job* j = ctx;
    uint64_t i0 = (uint64_t)item * FC_ITEM, m = j->t->n - i0 < FC_ITEM ? j->t->n - i0 : FC_ITEM;
    fc_part((const uf32*)j->x + i0, (uf32*)j->y + i0, m, j->lo, j->hi);
}

static vki_status fc_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const fclip_t* t = p;
    fclip_job j = {t, ptr[0], ptr[3], t->lo, t->hi};
    if (t->flags & 1) j.lo = *(const uf32*)ptr[1];
    if (t->flags & 2) j.hi = *(const uf32*)ptr[2];
    vki_for_items((size_t)((t->n + FC_ITEM - 1) / FC_ITEM), t->n, threads, fc_item, &j);
    return VKI_OK;
}

vki_status vki_graph_add_float_clip(vki_graph* g, uint64_t n, uint32_t flags, float lo_c, float hi_c, vki_ref x,
                                    vki_ref lo, vki_ref hi, vki_ref y)
{
    if (!n) FAIL(VKI_EINVAL, "float_clip: n must be positive");
    if (!flags || flags > 3) FAIL(VKI_EINVAL, "float_clip: flags must be 1..3 (which bounds are tensors)");
    uint64_t need[4] = {vki_mul2(n, 4), 4, 4, vki_mul2(n, 4)};
    if (x.bytes == need[0] && y.bytes == need[3] && vki_refs_overlap(x, y))
        FAIL(VKI_EINVAL, "float_clip: x and y overlap");
    if ((lo.bytes == 4 && y.bytes == need[3] && vki_refs_overlap(lo, y)) ||
        (hi.bytes == 4 && y.bytes == need[3] && vki_refs_overlap(hi, y)))
        FAIL(VKI_EINVAL, "float_clip: a bound and y overlap");
    fclip_t* t = malloc(sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "float_clip: out of memory");
    *t = (fclip_t){n, flags, lo_c, hi_c};
    vki_ref refs[4] = {x, lo, hi, y};
    return vki_graph_push(g, "float_clip", fc_run, free, t, 4, refs, need);
}
