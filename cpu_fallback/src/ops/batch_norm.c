/* The native graph's inference BatchNormalization on float32 NCHW (vkinfer/cpu/batch_normalization.py lowers to
 * it): y = x * scale[c] + bias[c], a multiply and an add each rounded (-ffp-contract=off), with ORT's per-channel
 * scale = (1 / sqrt(var + eps)) * gamma and bias = beta - mean * scale folded by the lowering in float32
 * (vkinfer/model/host_float.py, the reference ORT 1.31's batch_norm.h matches). */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

typedef float uf32 __attribute__((aligned(1), may_alias));

typedef struct {
    uint32_t n, c;
    uint64_t hw;
    float* sb;  /* c scales, then c biases */
} bn_t;

typedef struct {
    const bn_t* t;
    const uint8_t* x;
    uint8_t* y;
} bn_job;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)  /* ifunc resolvers run before the sanitizer runtime is up */
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
static void bn_plane(const uf32* restrict x, uf32* restrict y, uint64_t m, float s, float b)
{
    for (uint64_t i = 0; i < m; i++) y[i] = x[i] * s + b;
}

static void bn_item(void* ctx, size_t plane)
{
    const bn_job* j = ctx;
    const bn_t* t = j->t;
    size_t c = plane % t->c;
    uint64_t o = (uint64_t)plane * t->hw;
    bn_plane((const uf32*)j->x + o, (uf32*)j->y + o, t->hw, t->sb[c], t->sb[t->c + c]);
}

static vki_status bn_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const bn_t* t = p;
    bn_job j = {t, ptr[0], ptr[1]};
    vki_for_items((size_t)t->n * t->c, (uint64_t)t->n * t->c * t->hw, threads, bn_item, &j);
    return VKI_OK;
}

static void bn_free(void* p)
{
    bn_t* t = p;
    if (t) free(t->sb);
    free(t);
}

vki_status vki_graph_add_batch_norm(vki_graph* g, uint32_t n, uint32_t c, uint64_t hw, const float* scale,
                                    const float* bias, vki_ref x, vki_ref y)
{
    if (!n || !c || !hw) FAIL(VKI_EINVAL, "batch_norm: shape n=%u c=%u hw=%llu must be positive", n, c,
                              (unsigned long long)hw);
    if (!scale || !bias) FAIL(VKI_EINVAL, "batch_norm: scale and bias must not be NULL");
    uint64_t count = vki_mul2(vki_mul2(n, c), hw);
    uint64_t need[2] = {vki_mul2(count, 4), vki_mul2(count, 4)};
    if (x.bytes == need[0] && y.bytes == need[1] && vki_refs_overlap(x, y))
        FAIL(VKI_EINVAL, "batch_norm: x and y overlap");
    bn_t* t = malloc(sizeof *t);
    float* sb = malloc(2 * (size_t)c * sizeof *sb);
    if (!t || !sb) {
        free(t);
        free(sb);
        FAIL(VKI_ENOMEM, "batch_norm: out of memory");
    }
    memcpy(sb, scale, (size_t)c * sizeof *sb);
    memcpy(sb + c, bias, (size_t)c * sizeof *sb);
    *t = (bn_t){n, c, hw, sb};
    vki_ref refs[2] = {x, y};
    return vki_graph_push(g, "batch_norm", bn_run, bn_free, t, 2, refs, need);
}
