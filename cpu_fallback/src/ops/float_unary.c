/* The native graph's elementwise float32 unary operators (ONNX Relu, LeakyRelu, Clip, Neg, Abs, Sqrt) as ONNX
 * Runtime 1.31's CPU EP computes them (vkinfer/cpu/float_elementwise.py lowers to it): each is one IEEE operation
 * or a select, so signed zeros and NaN follow ORT's expressions (measured, tests/ops/test_float_elementwise.py):
 *   Relu       x < 0 ? 0 : x                      (-0 and NaN pass through)
 *   LeakyRelu  x >= 0 ? x : alpha * x             (alpha: the attribute)
 *   Clip       min(max(x, lo), hi) with std::max/std::min's operand order: max(x, lo) = x < lo ? lo : x,
 *              then min(r, hi) = hi < r ? hi : r  (NaN passes through; lo = alpha, hi = beta)
 *   Neg -x, Abs |x| (sign cleared), Sqrt (correctly rounded; negative -> NaN).
 * and the ops whose ORT kernels are longer float32 formulas, reproduced step by step with the same roundings
 * (vkinfer/model/host_float.py, reference/qlinear_sigmoid.py hold the numpy originals and say which steps MLAS's
 * FMA3 kernels fuse; fmaf is one rounding, a plain a * b + c two, the library being built -ffp-contract=off):
 *   HardSigmoid  t = alpha * x + beta (unfused), then t > 1 -> 1, then t < 0 -> 0
 *   HardSwish    x * HardSigmoid(x; float32(1/6), 0.5), each step rounded (ORT's kernel)
 *   Sigmoid      MLAS logistic: clamp to [-18, 18], p = v * A(v^2), q = B(v^2) (Horner, fused), max(p/q + 0.5, 0)
 *   Tanh         MLAS tanh: clamp to [-9, 9], p = v * P(v^2), q = Q(v^2) (Horner, fused), p / q
 *   Erf          MLAS erf: |x| < 0.921875 an odd polynomial (fused); above (clamped to 3.925) 1 - exp(-r(|x|))
 *                with MLAS's exp (two-part ln 2 reduction, 2^n built in the exponent); sign copied from x.
 * NaN gives x itself (ORT's, payloads aside) in all five.
 *   Exp          MLAS exp (host_eigen.mlas_exp): x clamped to [-103.972, 88.776], m = round(x / ln 2) by the
 *                1.5 * 2^23 trick, r = x - m ln 2 in two fused steps, a degree-6 polynomial (fused Horner), then
 *                p * 2^m rounded once: p times 2^m in double (exact: m in [-150, 128]) converted to float once, as
 *                the numpy does and as AVX-512F's vscalefps rounds (a subnormal result rounds once, not twice).
 *   Log          Eigen's plog_float (host_eigen.eigen_log: frexp, mantissa folded to [sqrt(1/2), sqrt(2)), a (3,3)
 *                rational in unfused steps, + e ln 2; 0 -> -inf, x < 0 or NaN -> the default quiet NaN, +inf ->
 *                +inf) on Eigen's whole packets, and the C library's logf on the tensor's last n % 4 elements
 *                (Eigen's scalar tail over ORT's single-threaded, 16-byte aligned output: host_eigen's
 *                eigen_elementwise), so the element's position in the tensor picks the function. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

typedef float uf32 __attribute__((aligned(1), may_alias));

enum { FU_RELU, FU_LEAKY_RELU, FU_CLIP, FU_NEG, FU_ABS, FU_SQRT, FU_HARD_SIGMOID, FU_HARD_SWISH, FU_SIGMOID, FU_TANH,
       FU_ERF, FU_EXP, FU_LOG, FU_COUNT };
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

/* Horner's rule with one fused multiply-add per step, highest coefficient first (reference/_float32.py horner32). */
static inline float fu_horner(float t, const float* c, int n)
{
    float p = c[0];
    for (int k = 1; k < n; k++) p = fmaf(p, t, c[k]);
    return p;
}

/* numpy's NaN-propagating min/max against a non-NaN bound (host_float's np.minimum/np.maximum). */
static inline float fu_min(float a, float b) { return a > b ? b : a; }
static inline float fu_max(float a, float b) { return a < b ? b : a; }

static inline float fu_hard_sigmoid(float v, float alpha, float beta)
{
    float t = v * alpha + beta;  /* two roundings: -ffp-contract=off */
    return fu_max(fu_min(t, 1.0f), 0.0f);
}

/* MLAS logistic's constants (qlinear_sigmoid.py _A, _B). */
static const float FU_SIG_A[5] = {4.37031012579801e-11f, 1.15627324459942e-07f, 6.08574864600143e-05f,
                                  8.51377133304701e-03f, 2.48287947061529e-01f};
static const float FU_SIG_B[6] = {6.10247389755681e-13f, 5.76102136993427e-09f, 6.29106785017040e-06f,
                                  1.70198817374094e-03f, 1.16817656904453e-01f, 9.93151921023180e-01f};

static inline float fu_sigmoid(float x)
{
    if (isnan(x)) return x;
    float v = fu_min(fu_max(x, -18.0f), 18.0f), v2 = v * v;
    float p = fu_horner(v2, FU_SIG_A, 5) * v, q = fu_horner(v2, FU_SIG_B, 6);
    return fu_max(p / q + 0.5f, 0.0f);
}

/* MLAS tanh's constants (host_float.py _TANH_P, _TANH_Q). */
static const float FU_TANH_P[7] = {-2.76076847742355e-16f, 2.00018790482477e-13f, -8.60467152213735e-11f,
                                   5.12229709037114e-08f, 1.48572235717979e-05f, 6.37261928875436e-04f,
                                   4.89352455891786e-03f};
static const float FU_TANH_Q[4] = {1.19825839466702e-06f, 1.18534705686654e-04f, 2.26843463243900e-03f,
                                   4.89352518554385e-03f};

static inline float fu_tanh(float x)
{
    if (isnan(x)) return x;
    float v = fu_min(fu_max(x, -9.0f), 9.0f), v2 = v * v;
    return fu_horner(v2, FU_TANH_P, 7) * v / fu_horner(v2, FU_TANH_Q, 4);
}

/* MLAS erf's constants (host_float.py _ERF_*, _EXP_*). */
static const float FU_ERF_SMALL[6] = {-5.99104969e-4f, 4.99339588e-3f, -2.67667342e-2f, 1.12818025e-1f,
                                      -3.76124859e-1f, 1.28379151e-1f};
static const float FU_ERF_BIG[7] = {1.72948930e-5f, -3.83208680e-4f, 3.88393435e-3f, -2.42545605e-2f,
                                    1.06777847e-1f, 6.34846687e-1f, 1.28717512e-1f};
static const float FU_EXP_P[7] = {1.38319808e-3f, 8.37550033e-3f, 4.16689515e-2f, 1.66664466e-1f, 4.99999851e-1f,
                                  1.0f, 1.0f};

static inline float fu_erf(float x)
{
    if (isnan(x)) return x;
    float a = fu_min(fabsf(x), 3.925f), out;
    if (a < 0.921875f) {
        out = fmaf(fu_horner(a * a, FU_ERF_SMALL, 6), a, a);
    } else {
        float r = fmaf(fu_horner(a, FU_ERF_BIG, 7), a, a);
        float e = fu_max(-r, -88.3762626647949f);
        float n = fmaf(1.44269504088896341f, e, 1.25829120e7f) - 1.25829120e7f;  /* round(e / ln 2) */
        float f = fmaf(n, -6.93145752e-1f, e);
        f = fmaf(n, -1.42860677e-6f, f);
        float y = fu_horner(f, FU_EXP_P, 7);
        uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;  /* 2^n: n in [-128, 0] here */
        float scale;
        memcpy(&scale, &bits, 4);
        out = 1.0f - y * scale;
    }
    return signbit(x) ? -out : out;
}

/* MLAS's exp constants (host_eigen.py _MLAS_*). */
static const float FU_MLAS_EXP_P[7] = {0x1.694000p-10f, 0x1.125edcp-7f, 0x1.555b5ap-5f, 0x1.555450p-3f,
                                       0x1.fffff6p-2f, 0x1.000000p+0f, 0x1.000000p+0f};

static inline float fu_exp(float x)
{
    if (isnan(x)) return x + x;  /* quiet, as numpy's arithmetic leaves it */
    float c = x > 0x1.631ae4p+6f ? 0x1.631ae4p+6f : x;  /* the constants: float32(MLAS's), hex */
    c = -0x1.9fe36ap+6f > c ? -0x1.9fe36ap+6f : c;
    float biased = fmaf(c, 0x1.715476p+0f, 0x1.8p+23f);
    float m = biased - 0x1.8p+23f;
    float r = fmaf(m, -0x1.62e4p-1f, c);
    r = fmaf(m, -0x1.7f7d1cp-20f, r);
    float p = fu_horner(r, FU_MLAS_EXP_P, 7);
    uint64_t bits = (uint64_t)((int64_t)m + 1023) << 52;  /* 2^m as a double: m in [-150, 128] */
    double scale;
    memcpy(&scale, &bits, 8);
    return (float)((double)p * scale);
}

/* Eigen's plog_float on one packet lane (host_eigen.eigen_log; ORT's x86-64 Eigen has no FMA: a * b + c is two
 * roundings, -ffp-contract=off). */
static inline float fu_log_packet(float x)
{
    if (x == 0.0f) return -INFINITY;
    if (x < 0.0f || isnan(x)) return NAN;  /* numpy's float32(nan): the default quiet NaN, positive */
    if (x == INFINITY) return x;
    int ex;
    float m = frexpf(x, &ex), e = (float)ex;
    int small = m < 0x1.6a09e6p-1f;  /* the constants: numpy's float32() of Eigen's, in hex */
    float v = (m - 1.0f) + (small ? m : 0.0f);
    e = e - (small ? 1.0f : 0.0f);
    float p = v * 0x1.75e392p-3f + 1.0f;
    p = v * p + 1.0f;
    p = v * p;
    float q = v * 0x1.9674d0p-5f + 0x1.32ce9ap-1f;
    q = v * q + 1.5f;
    q = v * q + 1.0f;
    return e * 0x1.62e430p-1f + p / q;
}

#define FU_LOOP(EXPR) for (uint64_t i = 0; i < m; i++) { float v = x[i]; y[i] = (EXPR); }

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)  /* ifunc resolvers run before the sanitizer runtime is up */
/* x86-64-v3 (AVX2 + FMA) so fmaf is one VFMADD, not a libm call; the bits are the same either way. */
__attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
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
    case FU_SQRT: FU_LOOP(sqrtf(v)); break;
    case FU_HARD_SIGMOID: FU_LOOP(fu_hard_sigmoid(v, alpha, beta)); break;
    case FU_HARD_SWISH: FU_LOOP(v * fu_hard_sigmoid(v, (float)(1.0 / 6.0), 0.5f)); break;
    case FU_SIGMOID: FU_LOOP(fu_sigmoid(v)); break;
    case FU_TANH: FU_LOOP(fu_tanh(v)); break;
    case FU_EXP: FU_LOOP(fu_exp(v)); break;
    case FU_LOG: FU_LOOP(fu_log_packet(v)); break;  /* the tail's logf: fu_item */
    default: FU_LOOP(fu_erf(v)); break;
    }
}

static void fu_item(void* ctx, size_t item)
{
    const fun_job* j = ctx;
    uint64_t i0 = (uint64_t)item * FU_ITEM, m = j->t->n - i0 < FU_ITEM ? j->t->n - i0 : FU_ITEM;
    fu_part(j->t->op, j->t->alpha, j->t->beta, (const uf32*)j->x + i0, (uf32*)j->y + i0, m);
    if (j->t->op == FU_LOG) {  /* Eigen's scalar path on the tensor's last n % 4 elements (FU_ITEM % 4 == 0) */
        uint64_t tail0 = j->t->n - j->t->n % 4;
        const uf32* x = (const uf32*)j->x;
        uf32* y = (uf32*)j->y;
        for (uint64_t i = tail0 > i0 ? tail0 : i0; i < i0 + m; i++) y[i] = logf(x[i]);
    }
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
