/* The native graph's float32 layer normalisation over `rows` contiguous rows of n floats (vkinfer/cpu/
 * layer_normalization.py lowers to it), bit for bit the numpy definitions in vkinfer/reference/layer_normalization.py:
 *
 * - mode 0, ONNX LayerNormalization as ONNX Runtime 1.31 runs a row whose scale/bias are n floats: rows shorter than
 *   8 by ORT's scalar Welford loop (float32, unfused), longer ones as MLAS's AVX2 kernel does (float64 mean summed
 *   in 4 lanes; variance in 8 float32 lanes of fused multiply-adds, its tail's first 4 products unfused, the rest
 *   fused; y = fma((x - mean) * inv, scale, bias)). The lanes are emulated in portable C and every fused operation
 *   is fmaf() (the library is compiled with -ffp-contract=off, so nothing else fuses), so every machine gives
 *   the AVX2 machine's bits.
 * - mode 1, ORT's generic broadcast path (ComputeJobGeneric): float64 sums in order, y = (float)(((x - mean) / den)
 *   * scale + bias), bias 0.0 when absent; scale/bias already broadcast to n floats per row.
 * - mode 2, vkinfer:LayerNormChain: ReduceMean -> Sub -> Pow 2 -> ReduceMean -> Add(eps) -> Sqrt -> Div
 *   [-> Mul(gamma) -> Add(beta)] as vkinfer runs the ops one by one: each mean ReduceMean's order over the last
 *   axes (ORT's FastReduceKR, ops/float_reduce.c's init_first 3: Eigen's 4-lane sum of the row, its unaligned head
 *   (-row * n) % 4 by the row's start, then one division by (float)n), d * d rounded, then one
 *   IEEE operation per element; flags bit 0: eps + var (else var + eps), bit 1: gamma * y, bit 2: beta + y (the
 *   node's operand order). scale = gamma, bias = beta (NULL: absent).
 *
 * Scale and bias are n floats, copied. x and y may have any alignment and must not overlap. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

typedef float uf32 __attribute__((aligned(1), may_alias));

enum { LN_ORT, LN_DOUBLE, LN_CHAIN };
#define LN_AVX2_MIN 8 /* MLAS declines shorter rows: ORT's Welford loop runs them */

typedef struct {
    uint32_t mode, flags;
    uint64_t rows, n;
    float eps;
    float* scale; /* n floats, or NULL */
    float* bias;  /* n floats, or NULL */
} ln_t;

typedef struct {
    const ln_t* t;
    const uint8_t* x;
    uint8_t* y;
} ln_job;

static void ln_welford(const ln_t* t, const uf32* x, uf32* y)
{
    uint64_t n = t->n;
    float mean = 0.0f, m2 = 0.0f;
    for (uint64_t h = 0; h < n; h++) {
        float d = x[h] - mean;
        mean = mean + d / (float)(h + 1);
        m2 = m2 + d * (x[h] - mean);
    }
    float den = sqrtf(m2 / (float)n + t->eps);
    for (uint64_t h = 0; h < n; h++) {
        float v = (x[h] - mean) / den * t->scale[h];
        y[h] = t->bias ? v + t->bias[h] : v;
    }
}

static void ln_avx2(const ln_t* t, const uf32* x, uf32* y)
{
    uint64_t n = t->n, i;
    double acc[4] = {0.0, 0.0, 0.0, 0.0};
    for (i = 0; i + 4 <= n; i += 4)
        for (int l = 0; l < 4; l++) acc[l] += (double)x[i + l];
    double dsum = (acc[0] + acc[2]) + (acc[1] + acc[3]);
    for (; i < n; i++) dsum += (double)x[i];
    float mean = (float)(dsum / (double)n);
    float v[8] = {0};
    for (i = 0; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) {
            float d = x[i + l] - mean;
            v[l] = fmaf(d, d, v[l]);
        }
    float var = ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
    uint64_t unfused = i + (n - i) / 4 * 4; /* the compiler's 4-wide epilogue: products rounded, then added */
    for (; i < n; i++) {
        float d = x[i] - mean;
        var = i < unfused ? var + d * d : fmaf(d, d, var);
    }
    float inv = 1.0f / sqrtf(var / (float)n + t->eps);
    for (uint64_t h = 0; h < n; h++) {
        float u = (x[h] - mean) * inv;
        y[h] = t->bias ? fmaf(u, t->scale[h], t->bias[h]) : u * t->scale[h];
    }
}

static void ln_double(const ln_t* t, const uf32* x, uf32* y)
{
    uint64_t n = t->n;
    double mean = 0.0, msq = 0.0;
    for (uint64_t h = 0; h < n; h++) {
        double v = (double)x[h];
        mean += v;
        msq += v * v;
    }
    mean /= (double)n;
    double den = sqrt(msq / (double)n - mean * mean + (double)t->eps);
    for (uint64_t h = 0; h < n; h++) {
        double b = t->bias ? (double)t->bias[h] : 0.0;
        y[h] = (float)((((double)x[h] - mean) / den) * (double)t->scale[h] + b);
    }
}

/* Element i of the row (sq: (x[i] - mean)^2, the Pow's output). */
static inline float ln_val(const uf32* x, uint64_t i, int sq, float mean)
{
    float d = x[i] - mean;
    return sq ? d * d : x[i];
}

/* Eigen's 4-lane sum of a row whose first `head` values are unaligned (float_reduce.c's fr_eigen for sums). */
static float ln_eigen_sum(const uf32* x, uint64_t n, uint64_t head, int sq, float mean)
{
    uint64_t h = head < n ? head : n, full = (n - h) / 4 * 4, packets = full / 4, i;
    float res;
    if (!full) {
        res = ln_val(x, 0, sq, mean);
        for (i = 1; i < n; i++) res = res + ln_val(x, i, sq, mean);
        return res;
    }
    float r0[4], r1[4];
    for (int l = 0; l < 4; l++) r0[l] = ln_val(x, h + l, sq, mean);
    if (packets > 1) {
        uint64_t pairs = packets / 2 * 2;
        for (int l = 0; l < 4; l++) r1[l] = ln_val(x, h + 4 + l, sq, mean);
        for (i = 2; i < pairs; i += 2)
            for (int l = 0; l < 4; l++) {
                r0[l] = r0[l] + ln_val(x, h + 4 * i + l, sq, mean);
                r1[l] = r1[l] + ln_val(x, h + 4 * i + 4 + l, sq, mean);
            }
        for (int l = 0; l < 4; l++) r0[l] = r0[l] + r1[l];
        if (packets > pairs)
            for (int l = 0; l < 4; l++) r0[l] = r0[l] + ln_val(x, h + 4 * pairs + l, sq, mean);
    }
    res = (r0[0] + r0[2]) + (r0[1] + r0[3]);
    for (i = 0; i < h; i++) res = res + ln_val(x, i, sq, mean);
    for (i = h + full; i < n; i++) res = res + ln_val(x, i, sq, mean);
    return res;
}

static void ln_chain(const ln_t* t, const uf32* x, uf32* y, uint64_t row)
{
    uint64_t n = t->n, head = (4 - ((row * n) & 3)) & 3;
    float mean = ln_eigen_sum(x, n, head, 0, 0.0f) / (float)n;
    float var = ln_eigen_sum(x, n, head, 1, mean) / (float)n;
    float std = sqrtf((t->flags & 1) ? t->eps + var : var + t->eps);
    for (uint64_t h = 0; h < n; h++) {
        float v = (x[h] - mean) / std;
        if (t->scale) v = (t->flags & 2) ? t->scale[h] * v : v * t->scale[h];
        if (t->bias) v = (t->flags & 4) ? t->bias[h] + v : v + t->bias[h];
        y[h] = v;
    }
}

static void ln_item(void* ctx, size_t row)
{
    const ln_job* j = ctx;
    const ln_t* t = j->t;
    const uf32* x = (const uf32*)j->x + row * t->n;
    uf32* y = (uf32*)j->y + row * t->n;
    switch (t->mode) {
    case LN_ORT:
        if (t->n < LN_AVX2_MIN) ln_welford(t, x, y);
        else ln_avx2(t, x, y);
        break;
    case LN_DOUBLE:
        ln_double(t, x, y);
        break;
    default:
        ln_chain(t, x, y, row);
        break;
    }
}

static vki_status ln_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const ln_t* t = p;
    ln_job j = {t, ptr[0], ptr[1]};
    vki_for_items((size_t)t->rows, vki_mul2(vki_mul2(t->rows, t->n), 8), threads, ln_item, &j);
    return VKI_OK;
}

static void ln_free(void* p)
{
    ln_t* t = p;
    if (t) {
        free(t->scale);
        free(t->bias);
    }
    free(t);
}

static float* ln_copy(const float* v, uint64_t n)
{
    float* c = malloc(n * sizeof(float));
    if (c) memcpy(c, v, n * sizeof(float));
    return c;
}

vki_status vki_graph_add_layer_norm(vki_graph* g, uint32_t mode, uint64_t rows, uint64_t n, float eps,
                                    const float* scale, const float* bias, uint32_t flags, vki_ref x, vki_ref y)
{
    if (mode > LN_CHAIN) FAIL(VKI_EINVAL, "layer_norm: mode must be 0..2 (ORT's row, ORT's float64 path, chain)");
    if (!rows || !n) FAIL(VKI_EINVAL, "layer_norm: rows and n must be positive");
    if (flags > 7 || (mode != LN_CHAIN && flags)) FAIL(VKI_EINVAL, "layer_norm: flags are the chain's bits 0..2");
    if (mode != LN_CHAIN && !scale) FAIL(VKI_EINVAL, "layer_norm: LayerNormalization needs its scale");
    uint64_t count = vki_mul2(rows, n);
    if (!count || count > (UINT64_C(1) << 40) || n > (UINT64_C(1) << 32))
        FAIL(VKI_EINVAL, "layer_norm: input too large");
    if (vki_refs_overlap(x, y)) FAIL(VKI_EINVAL, "layer_norm: the input overlaps the output");
    ln_t* t = calloc(1, sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "layer_norm: out of memory");
    t->mode = mode;
    t->flags = flags;
    t->rows = rows;
    t->n = n;
    t->eps = eps;
    t->scale = scale ? ln_copy(scale, n) : NULL;
    t->bias = bias ? ln_copy(bias, n) : NULL;
    if ((scale && !t->scale) || (bias && !t->bias)) {
        ln_free(t);
        FAIL(VKI_ENOMEM, "layer_norm: out of memory");
    }
    uint64_t need[2] = {vki_mul2(count, 4), vki_mul2(count, 4)};
    vki_ref refs[2] = {x, y};
    return vki_graph_push(g, "layer_norm", ln_run, ln_free, t, 2, refs, need);
}
