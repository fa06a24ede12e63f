/* The native graph's elementwise float32 binary operators with numpy broadcasting (ONNX Add, Sub, Mul, Div, Max,
 * Min, PRelu, Pow), as ONNX Runtime 1.31's CPU EP computes them (vkinfer/cpu/float_elementwise.py lowers to it).
 *
 * Add, Sub, Mul, Div: one IEEE float32 operation per element (-ffp-contract=off, cpu_fallback/Makefile), so any
 * evaluation order gives ORT's bits. PRelu: x < 0 ? x * slope : x (ORT's select: -0 and NaN pass through).
 * Pow: the C library's powf per element (FB_POW), as ORT's std::pow(float, float); where ORT's broadcaster has the
 * exponent as each span's scalar (FB_POW_SCALAR_EXP, chosen by the lowering: vkinfer/reference/float_pow.py),
 * an exponent of 2 is x * x and of 3 (x * x) * x, as ORT's PowImpl special-cases them.
 * Max, Min: ORT runs Eigen's max/min<PropagateNaN> over "spans" (its broadcaster's innermost merged dimension),
 * and Eigen's 4-lane packet and its scalar path part on equal operands: a packet returns the second operand
 * (max(+0, -0) = -0), the scalar path the first (+0); any NaN gives NaN on both. Which elements a packet takes
 * follows the output's 16-byte alignment (ORT allocates outputs 64-byte aligned): in a span starting at output
 * element o, elements before the first multiple of 4 and the tail after the last whole packet are scalar. When
 * input 0 is the scalar of a span, ORT computes input1.max(input0) (operands swapped). Measured against ORT 1.31
 * (tests/ops/test_float_elementwise.py: signed zeros in every broadcast pattern and span alignment). The
 * lowering passes the shapes already merged as ORT's broadcaster merges them (size-1 output dimensions dropped,
 * neighbours with the same broadcast pattern joined), so the innermost dimension here is ORT's span. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

/* float32 operands at any 4-byte-or-less alignment (external numpy buffers need not be 4-aligned). */
typedef float uf32 __attribute__((aligned(1), may_alias));

enum { FB_ADD, FB_SUB, FB_MUL, FB_DIV, FB_MAX, FB_MIN, FB_PRELU, FB_POW, FB_POW_SCALAR_EXP, FB_COUNT };
#define FB_RANK 6

typedef struct {
    uint32_t op, rank;
    uint64_t shape[FB_RANK], sa[FB_RANK], sb[FB_RANK];  /* output shape, element strides (0: broadcast) */
    uint64_t rows, len;                                /* spans and their length (the innermost dimension) */
} fbin_t;

/* Eigen's scalar path (first operand on equal) and packet path (second operand on equal); NaN in, NaN out. */
static inline float max_scalar(float x, float y) { return y != y ? y : (x < y ? y : x); }
static inline float max_packet(float x, float y) { return x != x ? x : (x > y ? x : y); }
static inline float min_scalar(float x, float y) { return y != y ? y : (y < x ? y : x); }
static inline float min_packet(float x, float y) { return x != x ? x : (x < y ? x : y); }

/* y[i] = f(x[i * ix], w[i * iw]) for i < m; ix, iw in {0, 1}. `packet`: Max/Min's packet semantics. */
#define FB_LOOP(EXPR)                                                                                          \
    do {                                                                                                       \
        if (ix && iw)                                                                                          \
            for (uint64_t i = 0; i < m; i++) { float x = xp[i], w = wp[i]; yp[i] = (EXPR); }                   \
        else if (ix) {                                                                                         \
            const float w = wp[0];                                                                             \
            for (uint64_t i = 0; i < m; i++) { float x = xp[i]; yp[i] = (EXPR); }                              \
        } else {                                                                                               \
            const float x = xp[0];                                                                             \
            for (uint64_t i = 0; i < m; i++) { float w = wp[i]; yp[i] = (EXPR); }                              \
        }                                                                                                      \
    } while (0)

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)  /* ifunc resolvers run before the sanitizer runtime is up */
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
static void fb_run_part(uint32_t op, int packet, const uf32* restrict xp, uint64_t ix, const uf32* restrict wp,
                        uint64_t iw, uf32* restrict yp, uint64_t m)
{
    switch (op) {
    case FB_ADD: FB_LOOP(x + w); break;
    case FB_SUB: FB_LOOP(x - w); break;
    case FB_MUL: FB_LOOP(x * w); break;
    case FB_DIV: FB_LOOP(x / w); break;
    case FB_PRELU: FB_LOOP(x < 0.0f ? x * w : x); break;
    case FB_POW: FB_LOOP(powf(x, w)); break;
    case FB_POW_SCALAR_EXP: FB_LOOP(w == 2.0f ? x * x : w == 3.0f ? x * x * x : powf(x, w)); break;
    case FB_MAX:
        if (packet) FB_LOOP(max_packet(x, w)); else FB_LOOP(max_scalar(x, w));
        break;
    default:
        if (packet) FB_LOOP(min_packet(x, w)); else FB_LOOP(min_scalar(x, w));
        break;
    }
}

typedef struct {
    const fbin_t* t;
    const uint8_t *a, *b;
    uint8_t* y;
} fbin_job;

/* One span: output elements [row * len, row * len + len). */
static void fb_row(void* ctx, size_t row)
{
    const fbin_job* j = ctx;
    const fbin_t* t = j->t;
    uint32_t last = t->rank - 1;
    uint64_t oa = 0, ob = 0, r = row;
    for (uint32_t d = last; d-- > 0;) {  /* the row's multi-index over the outer dimensions */
        uint64_t i = r % t->shape[d];
        r /= t->shape[d];
        oa += i * t->sa[d];
        ob += i * t->sb[d];
    }
    uint64_t o = (uint64_t)row * t->len, len = t->len, ia = t->sa[last], ib = t->sb[last];
    const uf32* pa = (const uf32*)j->a + oa;
    const uf32* pb = (const uf32*)j->b + ob;
    uf32* py = (uf32*)j->y + o;
    /* ORT swaps the operands of a span whose input 0 is a scalar (input0 broadcast along the span). */
    const uf32 *px = pa, *pw = pb;
    uint64_t ix = ia, iw = ib;
    if (t->op != FB_MAX && t->op != FB_MIN) {
        fb_run_part(t->op, 0, px, ix, pw, iw, py, len);
        return;
    }
    if ((!ia && ib) || len == 1) { /* a 1-element output: ORT's input-0-scalar path too */
        px = pb, pw = pa, ix = ib, iw = ia;
    }
    /* Eigen's linear traversal of the span: scalar up to the first 16-byte aligned output element, whole packets
     * of 4, scalar tail. */
    uint64_t head = (4 - o % 4) % 4;
    if (head > len) head = len;
    uint64_t body = (len - head) / 4 * 4;
    fb_run_part(t->op, 0, px, ix, pw, iw, py, head);
    fb_run_part(t->op, 1, px + head * ix, ix, pw + head * iw, iw, py + head, body);
    fb_run_part(t->op, 0, px + (head + body) * ix, ix, pw + (head + body) * iw, iw, py + head + body,
                len - head - body);
}

/* Work items of whole spans, at least FB_ITEM values each: a span per item cost an atomic claim and a multi-index
 * per span, and with short spans (an NHWC model's per-channel PReLU: spans of C = 10 values, 75,684 of them in
 * MTCNN's P-Net) two threads fought over the claims and ran slower than one (0.11 -> 0.37 ms on 2 Zen 4 cores). */
#define FB_ITEM 4096
static uint64_t fb_rows_per_item(const fbin_t* t) { return t->len >= FB_ITEM ? 1 : FB_ITEM / (t->len ? t->len : 1); }

static void fb_rows(void* ctx, size_t item)
{
    const fbin_job* j = ctx;
    const uint64_t per = fb_rows_per_item(j->t), r0 = (uint64_t)item * per;
    const uint64_t r1 = r0 + per < j->t->rows ? r0 + per : j->t->rows;
    for (uint64_t r = r0; r < r1; r++) fb_row(ctx, (size_t)r);
}

static vki_status fb_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const fbin_t* t = p;
    fbin_job j = {t, ptr[0], ptr[1], ptr[2]};
    const uint64_t per = fb_rows_per_item(t);
    vki_for_items((size_t)((t->rows + per - 1) / per), t->rows * t->len, threads, fb_rows, &j);
    return VKI_OK;
}

vki_status vki_graph_add_float_binary(vki_graph* g, uint32_t op, uint32_t rank, const uint32_t* shape,
                                      const uint32_t* a_shape, const uint32_t* b_shape, vki_ref a, vki_ref b,
                                      vki_ref y)
{
    if (op >= FB_COUNT) FAIL(VKI_EINVAL, "float_binary: unknown op %u", op);
    if (!rank || rank > FB_RANK) FAIL(VKI_EINVAL, "float_binary: rank %u must lie in [1, %d]", rank, FB_RANK);
    if (!shape || !a_shape || !b_shape) FAIL(VKI_EINVAL, "float_binary: shapes must not be NULL");
    fbin_t q = {.op = op, .rank = rank};
    uint64_t na = 1, nb = 1, ny = 1;
    for (uint32_t d = rank; d-- > 0;) {
        if (!shape[d]) FAIL(VKI_EINVAL, "float_binary: dimension %u of the output is 0", d);
        if ((a_shape[d] != shape[d] && a_shape[d] != 1) || (b_shape[d] != shape[d] && b_shape[d] != 1))
            FAIL(VKI_EINVAL, "float_binary: dimension %u: inputs %u and %u do not broadcast to %u", d, a_shape[d],
                 b_shape[d], shape[d]);
        q.shape[d] = shape[d];
        q.sa[d] = a_shape[d] == 1 ? 0 : na;
        q.sb[d] = b_shape[d] == 1 ? 0 : nb;
        na = vki_mul2(na, a_shape[d]);
        nb = vki_mul2(nb, b_shape[d]);
        ny = vki_mul2(ny, shape[d]);
    }
    if (!na || !nb || !ny) FAIL(VKI_EINVAL, "float_binary: the shapes' sizes overflow");
    q.len = shape[rank - 1];
    q.rows = ny / q.len;
    uint64_t need[3] = {vki_mul2(na, 4), vki_mul2(nb, 4), vki_mul2(ny, 4)};
    if ((a.bytes == need[0] && y.bytes == need[2] && vki_refs_overlap(a, y)) ||
        (b.bytes == need[1] && y.bytes == need[2] && vki_refs_overlap(b, y)))
        FAIL(VKI_EINVAL, "float_binary: an input and y overlap");
    fbin_t* t = malloc(sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "float_binary: out of memory");
    *t = q;
    vki_ref refs[3] = {a, b, y};
    return vki_graph_push(g, "float_binary", fb_run, free, t, 3, refs, need);
}
