/* float32 MatMul, Gemm and Conv (vkinfer/reference/float_matmul.py and float_conv.py are the definition) with
 * ONNX Runtime 1.31's bits: MLAS SGEMM's summation order. Per output (m, n):
 *   y = C * beta (beta 1: C; no C or beta 0: nothing, "zero mode")
 *   K in blocks of `kb`: acc = fmaf chain from +0 over the block's k in order;
 *                        y = zero mode ? acc * alpha : fmaf(acc, alpha, y)
 * or, kb 0 (MLAS's M = 1 AVX kernel, alpha 1): k in groups of 4 then one of 2 then 1, each group
 * t = ((a0 * b0 + a1 * b1) + a2 * b2) + a3 * b3 rounded step by step, y = t + y (y starts at +0 in zero mode).
 * Conv (mode 1): per image and group, A = the group's filters (mg x K), B = the im2col panel of x (K x oh*ow, zero
 * padding, rows in (channel, kh, kw) order), then y + bias[m] when there is a bias.
 * dims (p_u64, 40): mode, M, N, K, kb, flags (bit 0 transA, bit 1 transB, bit 2 B is `w`, bit 3 C present, bit 4
 * bias present), batch shape[4], A batch strides[4], B batch strides[4] (elements, 0: broadcast), C strides (row,
 * column; elements, 0: broadcast), C elements, A elements, B elements, w elements, y elements; conv: n, c, h, w,
 * group, kh, kw, sh, sw, dh, dw, pad_top, pad_left, oh, ow.
 * w (copied): the constant B as K x N row-major, or the conv filters (group * M * K). bias (copied): group * M floats.
 * a: A (batch, M, K) or (batch, K, M) with transA; conv: x NCHW. b: B (batch, K, N) or (batch, N, K) with transB
 * (unused with w: any buffer). c: C (unused without: any buffer). y: (batch, M, N) contiguous; conv: NCHW.
 * Every output's chain is the same whatever the tile or thread, so the AVX-512 tile (16 accumulators, VFMADD231PS
 * rounds once, as fmaf) and the portable loops give the same bits (VKINFER_CPU_ISA=scalar forces the latter). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")  /* as ops/lstm.c: the tile's fmaf loop is vectorised */
#endif

#define FG_COLS 64  /* output columns per panel: 4 rows x 64 floats stay in 16 AVX-512 registers */
#define FG_ROWS 4   /* rows sharing one pass over the panel */
#define FG_MB 64    /* rows per work item */
#define FG_NDIMS 40
#define FG_STACK_K 128 /* K blocks up to this many rows pack into a stack panel */

/* External buffers may sit at any address (a model's input at an odd one): every operand access is unaligned. */
typedef float uf32 __attribute__((aligned(1), may_alias));

enum { FG_TA = 1, FG_TB = 2, FG_W = 4, FG_C = 8, FG_BIAS = 16 };

typedef struct {
    uint32_t conv, m, n, k, kb, flags;
    uint64_t bs[4], as[4], bst[4];
    uint64_t csm, csn;
    float alpha, beta;
    float* w;
    float* bias;
    uint32_t cn, cc, ch, cw, group, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow;
    uint64_t batches, chunks, rblocks, cpi, groups; /* cpi: chunks per work item; groups: items per row block */
    const uf32* a;
    const uf32* b;
    const uf32* c;
    uf32* y;
    volatile int oom;
} fg_t;

/* acc[r][0..64) = the fmaf chain from +0 over k < kn of a[r][k] * p[k][0..64). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)  /* ifunc resolvers run before the sanitizer runtime is up */
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
static void fg_tile(const uf32* const* a, const float* p, uint32_t kn, float (*acc)[FG_COLS])
{
    float s[FG_ROWS][FG_COLS];
    for (uint32_t r = 0; r < FG_ROWS; r++)
        for (uint32_t j = 0; j < FG_COLS; j++) s[r][j] = 0.0f;
    for (uint32_t k = 0; k < kn; k++) {
        const float* pk = p + (uint64_t)k * FG_COLS;
        for (uint32_t r = 0; r < FG_ROWS; r++) {
            float av = a[r][k];
            for (uint32_t j = 0; j < FG_COLS; j++) s[r][j] = fmaf(av, pk[j], s[r][j]);
        }
    }
    for (uint32_t r = 0; r < FG_ROWS; r++)
        for (uint32_t j = 0; j < FG_COLS; j++) acc[r][j] = s[r][j];
}

/* y[j] = zero mode ? acc[j] * alpha : fmaf(acc[j], alpha, y[j]) for j < cols (a K block's result into Y). Cloned
 * per ISA so that fmaf is one instruction, not a libm call (the 64 -> 64 channel 3x3 convolution at 56x56, one
 * thread: 20 -> 8 ms with the packing fix, the rest here). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
static void fg_combine(uf32* y, const float* acc, uint32_t cols, float alpha, int zero)
{
    if (zero)
        for (uint32_t j = 0; j < cols; j++) y[j] = acc[j] * alpha;
    else
        for (uint32_t j = 0; j < cols; j++) y[j] = fmaf(acc[j], alpha, y[j]);
}

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

/* fg_tile with AVX-512F intrinsics: the same chain per output, 16 accumulators in registers. */
__attribute__((target("avx512f"))) static void fg_tile512(const uf32* const* a, const float* p, uint32_t kn,
                                                         float (*acc)[FG_COLS])
{
    __m512 s00 = _mm512_setzero_ps(), s01 = s00, s02 = s00, s03 = s00, s10 = s00, s11 = s00, s12 = s00, s13 = s00;
    __m512 s20 = s00, s21 = s00, s22 = s00, s23 = s00, s30 = s00, s31 = s00, s32 = s00, s33 = s00;
    const uf32 *a0 = a[0], *a1 = a[1], *a2 = a[2], *a3 = a[3];
    for (uint32_t k = 0; k < kn; k++) {
        const float* pk = p + (uint64_t)k * FG_COLS;
        const __m512 b0 = _mm512_loadu_ps(pk), b1 = _mm512_loadu_ps(pk + 16), b2 = _mm512_loadu_ps(pk + 32),
                     b3 = _mm512_loadu_ps(pk + 48);
        __m512 v = _mm512_set1_ps(a0[k]);
        s00 = _mm512_fmadd_ps(v, b0, s00), s01 = _mm512_fmadd_ps(v, b1, s01);
        s02 = _mm512_fmadd_ps(v, b2, s02), s03 = _mm512_fmadd_ps(v, b3, s03);
        v = _mm512_set1_ps(a1[k]);
        s10 = _mm512_fmadd_ps(v, b0, s10), s11 = _mm512_fmadd_ps(v, b1, s11);
        s12 = _mm512_fmadd_ps(v, b2, s12), s13 = _mm512_fmadd_ps(v, b3, s13);
        v = _mm512_set1_ps(a2[k]);
        s20 = _mm512_fmadd_ps(v, b0, s20), s21 = _mm512_fmadd_ps(v, b1, s21);
        s22 = _mm512_fmadd_ps(v, b2, s22), s23 = _mm512_fmadd_ps(v, b3, s23);
        v = _mm512_set1_ps(a3[k]);
        s30 = _mm512_fmadd_ps(v, b0, s30), s31 = _mm512_fmadd_ps(v, b1, s31);
        s32 = _mm512_fmadd_ps(v, b2, s32), s33 = _mm512_fmadd_ps(v, b3, s33);
    }
    const __m512 all[FG_ROWS][4] = {{s00, s01, s02, s03}, {s10, s11, s12, s13}, {s20, s21, s22, s23},
                                    {s30, s31, s32, s33}};
    for (uint32_t r = 0; r < FG_ROWS; r++)
        for (int v = 0; v < 4; v++) _mm512_storeu_ps(acc[r] + 16 * v, all[r][v]);
}

static int fg_avx512(void)
{
    static int have = -1;
    if (have < 0) {
        const char* forced = getenv("VKINFER_CPU_ISA"); /* "scalar" or "avx2": the portable loops (tests run both) */
        __builtin_cpu_init();
        have = !(forced && (strcmp(forced, "scalar") == 0 || strcmp(forced, "avx2") == 0)) &&
               __builtin_cpu_supports("avx512f");
    }
    return have;
}
#endif

/* MLAS's M = 1 kernel over one row: y[j] (in/out, +0 in zero mode) += groups of 4, then 2, then 1 k's (products and
 * sums rounded one by one: the library is built with -ffp-contract=off, so no clone fuses them). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
static void fg_m1(const uf32* a, const float* p, uint32_t kn, float* y)
{
    uint32_t k = 0;
    for (; k + 4 <= kn; k += 4) {
        const float *p0 = p + (uint64_t)k * FG_COLS, *p1 = p0 + FG_COLS, *p2 = p1 + FG_COLS, *p3 = p2 + FG_COLS;
        for (uint32_t j = 0; j < FG_COLS; j++) {
            float t = a[k] * p0[j] + a[k + 1] * p1[j];
            t = t + a[k + 2] * p2[j];
            t = t + a[k + 3] * p3[j];
            y[j] = t + y[j];
        }
    }
    if (kn - k >= 2) {
        const float *p0 = p + (uint64_t)k * FG_COLS, *p1 = p0 + FG_COLS;
        for (uint32_t j = 0; j < FG_COLS; j++) y[j] = (a[k] * p0[j] + a[k + 1] * p1[j]) + y[j];
        k += 2;
    }
    if (kn - k == 1) {
        const float* p0 = p + (uint64_t)k * FG_COLS;
        for (uint32_t j = 0; j < FG_COLS; j++) y[j] = a[k] * p0[j] + y[j];
    }
}

/* The panel p[kk][j] = B(k0 + kk, j0 + j) for kk < kn, j < cols, zero beyond. */
static void fg_pack(const fg_t* t, const uf32* B, uint64_t bks, uint64_t bns, uint64_t img, uint32_t g,
                    uint32_t k0, uint32_t kn, uint32_t j0, uint32_t cols, float* p)
{
    if (!t->conv) {
        for (uint32_t kk = 0; kk < kn; kk++) {
            float* pk = p + (uint64_t)kk * FG_COLS;
            const uf32* bk = B + (uint64_t)(k0 + kk) * bks + (uint64_t)j0 * bns;
            if (bns == 1) memcpy(pk, bk, (size_t)cols * 4);
            else
                for (uint32_t j = 0; j < cols; j++) pk[j] = bk[(uint64_t)j * bns];
            for (uint32_t j = cols; j < FG_COLS; j++) pk[j] = 0.0f;
        }
        return;
    }
    const uint32_t taps = t->kh * t->kw, cg = t->cc / t->group;
    const uint32_t oy0 = j0 / t->ow, ox0 = j0 % t->ow;
    for (uint32_t kk = 0; kk < kn; kk++) {
        float* pk = p + (uint64_t)kk * FG_COLS;
        uint32_t kg = k0 + kk, ci = kg / taps, tap = kg % taps, i = tap / t->kw, jj = tap % t->kw;
        const uf32* xc = t->a + ((img * t->cc + (uint64_t)g * cg + ci) * t->ch) * t->cw;
        const int64_t dy = (int64_t)i * t->dh - t->pt, dx = (int64_t)jj * t->dw - t->pl;
        uint32_t oy = oy0, ox = ox0, j = 0;
        while (j < cols) { /* one output row's run of positions: the input row is fixed, ix steps by sw */
            uint32_t run = t->ow - ox < cols - j ? t->ow - ox : cols - j;
            int64_t iy = (int64_t)oy * t->sh + dy, ix = (int64_t)ox * t->sw + dx;
            if (iy < 0 || iy >= t->ch) {
                for (uint32_t r = 0; r < run; r++) pk[j + r] = 0.0f;
            } else {
                const uf32* xr = xc + (uint64_t)iy * t->cw;
                if (ix >= 0 && ix + (int64_t)(run - 1) * t->sw < t->cw) { /* the whole run inside the row */
                    const uf32* xs = xr + ix;
                    if (t->sw == 1) memcpy(pk + j, (const void*)xs, (size_t)run * 4);
                    else
                        for (uint32_t r = 0; r < run; r++) pk[j + r] = xs[(uint64_t)r * t->sw];
                } else {
                    for (uint32_t r = 0; r < run; r++, ix += t->sw) pk[j + r] = ix >= 0 && ix < t->cw ? xr[ix] : 0.0f;
                }
            }
            j += run, ox = 0, oy++;
        }
        for (; j < FG_COLS; j++) pk[j] = 0.0f;
    }
}

static void fg_chunk(fg_t* t, uint64_t bi, uint64_t rb, uint64_t ck)
{
    const uint32_t j0 = (uint32_t)ck * FG_COLS, cols = t->n - j0 < FG_COLS ? t->n - j0 : FG_COLS;
    const uint32_t m0 = (uint32_t)rb * FG_MB, rows = t->m - m0 < FG_MB ? t->m - m0 : FG_MB;
    const uf32* A;
    const uf32* B = NULL;
    uint64_t ars = t->k, aks = 1, bks = t->n, bns = 1, img = 0;
    uint32_t g = 0;
    if (t->conv) {
        img = bi / t->group, g = (uint32_t)(bi % t->group);
        A = (const uf32*)(t->w + (uint64_t)g * t->m * t->k);
    } else {
        uint64_t rem = bi, aoff = 0, boff = 0;
        for (int d = 3; d >= 0; d--) {
            uint64_t idx = rem % t->bs[d];
            rem /= t->bs[d];
            aoff += idx * t->as[d], boff += idx * t->bst[d];
        }
        A = t->a + aoff;
        if (t->flags & FG_TA) ars = 1, aks = t->m;
        if (t->flags & FG_W) B = (const uf32*)t->w;
        else {
            B = t->b + boff;
            if (t->flags & FG_TB) bks = 1, bns = t->k;
        }
    }
    uf32* Y = t->y + bi * (uint64_t)t->m * t->n;
    const uint32_t kb = t->kb ? t->kb : t->k;
    /* K blocks up to 128 (the common case) take a 32 KB panel on the stack: a malloc per item cost a third of a
     * depthwise convolution's time (32 channels of 112x112, one thread: 2.5 -> 1.6 ms with the packing fixes). */
    float stack_panel[FG_STACK_K * FG_COLS];
    float* p = kb <= FG_STACK_K ? stack_panel : malloc((size_t)kb * FG_COLS * sizeof(float));
    if (!p) {
        t->oom = 1;
        return;
    }
    int zero = 1;
    if (t->flags & FG_C) {
        zero = 0;
        for (uint32_t r = 0; r < rows; r++)
            for (uint32_t j = 0; j < cols; j++) {
                float v = t->c[(uint64_t)(m0 + r) * t->csm + (uint64_t)(j0 + j) * t->csn];
                Y[(uint64_t)(m0 + r) * t->n + j0 + j] = t->beta == 1.0f ? v : v * t->beta;
            }
    }
    float acc[FG_ROWS][FG_COLS];
    for (uint32_t k0 = 0; k0 < t->k; k0 += kb) {
        const uint32_t kn = t->k - k0 < kb ? t->k - k0 : kb;
        fg_pack(t, B, bks, bns, img, g, k0, kn, j0, cols, p);
        if (!t->kb) { /* M = 1 (one row), the whole K */
            float yv[FG_COLS];
            for (uint32_t j = 0; j < FG_COLS; j++) yv[j] = zero || j >= cols ? 0.0f : Y[j0 + j];
            fg_m1(A + k0, p, kn, yv); /* the one row, contiguous (the M = 1 kernel takes no transA) */
            for (uint32_t j = 0; j < cols; j++) Y[j0 + j] = yv[j];
        } else {
            for (uint32_t r0 = 0; r0 < rows; r0 += FG_ROWS) {
                const uint32_t rr = rows - r0 < FG_ROWS ? rows - r0 : FG_ROWS;
                const uf32* arow[FG_ROWS];
                float* tmp = NULL;
                if (aks == 1) {
                    for (uint32_t r = 0; r < FG_ROWS; r++)
                        arow[r] = A + (uint64_t)(m0 + r0 + (r < rr ? r : 0)) * ars + k0;
                } else { /* transA: gather the rows' K block */
                    tmp = malloc((size_t)FG_ROWS * kn * sizeof(float));
                    if (!tmp) {
                        t->oom = 1;
                        if (p != stack_panel) free(p);
                        return;
                    }
                    for (uint32_t r = 0; r < FG_ROWS; r++) {
                        const uf32* ar = A + (uint64_t)(m0 + r0 + (r < rr ? r : 0)) * ars;
                        for (uint32_t kk = 0; kk < kn; kk++) tmp[(uint64_t)r * kn + kk] = ar[(uint64_t)(k0 + kk) * aks];
                        arow[r] = (const uf32*)(tmp + (uint64_t)r * kn);
                    }
                }
#if defined(__x86_64__) || defined(_M_X64)
                if (fg_avx512()) fg_tile512(arow, p, kn, acc);
                else fg_tile(arow, p, kn, acc);
#else
                fg_tile(arow, p, kn, acc);
#endif
                free(tmp);
                for (uint32_t r = 0; r < rr; r++)
                    fg_combine(Y + (uint64_t)(m0 + r0 + r) * t->n + j0, acc[r], cols, t->alpha, zero);
            }
        }
        zero = 0;
    }
    if (t->conv && (t->flags & FG_BIAS))
        for (uint32_t r = 0; r < rows; r++) {
            const float bv = t->bias[(uint64_t)g * t->m + m0 + r];
            uf32* yr = Y + (uint64_t)(m0 + r) * t->n + j0;
            for (uint32_t j = 0; j < cols; j++) yr[j] = yr[j] + bv;
        }
    if (p != stack_panel) free(p);
}

/* A work item: `cpi` consecutive column chunks of one row block (one chunk is little work for a depthwise
 * convolution's single row of 9 taps: 32 channels of 112x112, one thread, 1.6 -> 1.3 ms with 113 chunks per item). */
static void fg_item(void* ctx, size_t item)
{
    fg_t* t = ctx;
    const uint64_t gi = item % t->groups, rest = item / t->groups;
    const uint64_t rb = rest % t->rblocks, bi = rest / t->rblocks;
    for (uint64_t ck = gi * t->cpi; ck < t->chunks && ck < (gi + 1) * t->cpi; ck++) fg_chunk(t, bi, rb, ck);
}

static vki_status fg_run(void* params, uint8_t* const* ptr, uint32_t threads)
{
    fg_t* t = params;
    t->a = (const uf32*)(const void*)ptr[0];
    t->b = (const uf32*)(const void*)ptr[1];
    t->c = (const uf32*)(const void*)ptr[2];
    t->y = (uf32*)(void*)ptr[3];
    t->oom = 0;
    uint64_t items = t->batches * t->rblocks * t->groups;
    uint64_t work = t->batches * (uint64_t)t->m * t->n * (t->k ? t->k : 1);
    vki_for_items((size_t)items, work, threads, fg_item, t);
    if (t->oom) FAIL(VKI_ENOMEM, "float_gemm: out of memory for a panel");
    return VKI_OK;
}

static void fg_free(void* params)
{
    fg_t* t = params;
    if (!t) return;
    free(t->w);
    free(t->bias);
    free(t);
}

vki_status vki_graph_add_float_gemm(vki_graph* g, const uint64_t* dims, float alpha, float beta, const float* w,
                                    const float* bias, vki_ref a, vki_ref b, vki_ref c, vki_ref y)
{
    if (!dims || !w || !bias) FAIL(VKI_EINVAL, "float_gemm: dims, w and bias are required");
    for (int i = 0; i < FG_NDIMS; i++)
        if (dims[i] > UINT32_MAX && !(i >= 10 && i <= 24))
            FAIL(VKI_EINVAL, "float_gemm: dims[%d] too large", i);
    fg_t tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.conv = (uint32_t)dims[0], tmp.m = (uint32_t)dims[1], tmp.n = (uint32_t)dims[2], tmp.k = (uint32_t)dims[3];
    tmp.kb = (uint32_t)dims[4], tmp.flags = (uint32_t)dims[5];
    tmp.alpha = alpha, tmp.beta = beta;
    if (tmp.conv > 1 || tmp.flags > 31) FAIL(VKI_EINVAL, "float_gemm: bad mode or flags");
    if (!tmp.m || !tmp.n || !tmp.k) FAIL(VKI_EINVAL, "float_gemm: M, N and K must be positive");
    if (tmp.kb > 4096) FAIL(VKI_EINVAL, "float_gemm: K block %u past 4096", tmp.kb);
    if (!tmp.kb && tmp.m != 1) FAIL(VKI_EINVAL, "float_gemm: the M = 1 kernel (kb 0) takes one row");
    if (!tmp.kb && (tmp.flags & (FG_TA | FG_TB))) FAIL(VKI_EINVAL, "float_gemm: the M = 1 kernel takes no transpose");
    uint64_t need[4];
    uint64_t w_elems = dims[23], y_elems = dims[24];
    tmp.batches = 1;
    if (!tmp.conv) {
        for (int d = 0; d < 4; d++) {
            tmp.bs[d] = dims[6 + d], tmp.as[d] = dims[10 + d], tmp.bst[d] = dims[14 + d];
            if (!tmp.bs[d]) FAIL(VKI_EINVAL, "float_gemm: batch dimension %d is 0", d);
            tmp.batches = vki_mul2(tmp.batches, tmp.bs[d]);
        }
        tmp.csm = dims[18], tmp.csn = dims[19];
        /* The farthest element each operand's strides reach, + 1, must be its size. */
        uint64_t a_last = 0, b_last = 0;
        for (int d = 0; d < 4; d++) {
            a_last += (tmp.bs[d] - 1) * tmp.as[d];
            b_last += (tmp.bs[d] - 1) * tmp.bst[d];
        }
        if (dims[21] != a_last + (uint64_t)tmp.m * tmp.k) FAIL(VKI_EINVAL, "float_gemm: A's size does not match");
        need[0] = vki_mul2(dims[21], 4);
        if (tmp.flags & FG_W) {
            if (w_elems != (uint64_t)tmp.k * tmp.n) FAIL(VKI_EINVAL, "float_gemm: w must hold K x N floats");
            need[1] = b.bytes;
        } else {
            if (dims[22] != b_last + (uint64_t)tmp.k * tmp.n) FAIL(VKI_EINVAL, "float_gemm: B's size does not match");
            need[1] = vki_mul2(dims[22], 4);
            w_elems = 0;
        }
        if (tmp.flags & FG_C) {
            if (tmp.batches != 1) FAIL(VKI_EINVAL, "float_gemm: C takes no batch");
            if (dims[20] != (tmp.m - 1) * tmp.csm + (tmp.n - 1) * tmp.csn + 1)
                FAIL(VKI_EINVAL, "float_gemm: C's size does not match its strides");
            need[2] = vki_mul2(dims[20], 4);
        } else {
            need[2] = c.bytes;
        }
        if (tmp.flags & FG_BIAS) FAIL(VKI_EINVAL, "float_gemm: a bias is for convolutions");
    } else {
        tmp.cn = (uint32_t)dims[25], tmp.cc = (uint32_t)dims[26], tmp.ch = (uint32_t)dims[27];
        tmp.cw = (uint32_t)dims[28], tmp.group = (uint32_t)dims[29], tmp.kh = (uint32_t)dims[30];
        tmp.kw = (uint32_t)dims[31], tmp.sh = (uint32_t)dims[32], tmp.sw = (uint32_t)dims[33];
        tmp.dh = (uint32_t)dims[34], tmp.dw = (uint32_t)dims[35], tmp.pt = (uint32_t)dims[36];
        tmp.pl = (uint32_t)dims[37], tmp.oh = (uint32_t)dims[38], tmp.ow = (uint32_t)dims[39];
        if (!tmp.cn || !tmp.cc || !tmp.ch || !tmp.cw || !tmp.group || !tmp.kh || !tmp.kw || !tmp.sh || !tmp.sw ||
            !tmp.dh || !tmp.dw || !tmp.oh || !tmp.ow)
            FAIL(VKI_EINVAL, "float_gemm: conv sizes must be positive");
        if (tmp.cc % tmp.group) FAIL(VKI_EINVAL, "float_gemm: group %u does not divide %u channels", tmp.group, tmp.cc);
        if (tmp.flags & (FG_TA | FG_TB | FG_W | FG_C))
            FAIL(VKI_EINVAL, "float_gemm: a convolution takes no transpose, w-as-B or C flags");
        if (tmp.kh > 65536 || tmp.kw > 65536 || tmp.sh > 65536 || tmp.sw > 65536 || tmp.dh > 65536 ||
            tmp.dw > 65536 || tmp.pt > 65536 || tmp.pl > 65536)
            FAIL(VKI_EINVAL, "float_gemm: kernel, stride, dilation or pad too large");
        if ((uint64_t)tmp.oh * tmp.ow != tmp.n) FAIL(VKI_EINVAL, "float_gemm: N must be oh * ow");
        if ((uint64_t)(tmp.cc / tmp.group) * tmp.kh * tmp.kw != tmp.k) FAIL(VKI_EINVAL, "float_gemm: K must be c/group*kh*kw");
        /* (taps outside the input read as 0: fg_pack checks every position, so any oh/ow is memory-safe) */
        tmp.batches = vki_mul2(tmp.cn, tmp.group);
        if (w_elems != vki_mul2(vki_mul2(tmp.group, tmp.m), tmp.k)) FAIL(VKI_EINVAL, "float_gemm: w must hold group*M*K floats");
        need[0] = vki_mul2(vki_mul4(tmp.cn, tmp.cc, tmp.ch, tmp.cw), 4);
        need[1] = b.bytes;
        need[2] = c.bytes;
    }
    if (!tmp.batches || y_elems != vki_mul2(tmp.batches, (uint64_t)tmp.m * tmp.n) || !need[0])
        FAIL(VKI_EINVAL, "float_gemm: y's size does not match");
    need[3] = vki_mul2(y_elems, 4);
    if (!need[3] || w_elems > (UINT64_C(1) << 40)) FAIL(VKI_EINVAL, "float_gemm: sizes too large");
    if (vki_refs_overlap(a, y) || (!tmp.conv && !(tmp.flags & FG_W) && vki_refs_overlap(b, y)) ||
        ((tmp.flags & FG_C) && vki_refs_overlap(c, y)))
        FAIL(VKI_EINVAL, "float_gemm: an input overlaps y");
    tmp.chunks = (tmp.n + FG_COLS - 1) / FG_COLS;
    tmp.rblocks = (tmp.m + FG_MB - 1) / FG_MB;
    {
        const uint64_t per_chunk = (uint64_t)(tmp.m < FG_MB ? tmp.m : FG_MB) * tmp.k * FG_COLS; /* multiply-adds */
        tmp.cpi = (UINT64_C(65536) + per_chunk - 1) / per_chunk;
        if (tmp.cpi > tmp.chunks) tmp.cpi = tmp.chunks;
        tmp.groups = (tmp.chunks + tmp.cpi - 1) / tmp.cpi;
    }
    fg_t* t = malloc(sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "float_gemm: out of memory");
    *t = tmp;
    uint64_t nbias = tmp.conv && (tmp.flags & FG_BIAS) ? (uint64_t)tmp.group * tmp.m : 0;
    t->w = w_elems ? malloc(w_elems * 4) : NULL;
    t->bias = nbias ? malloc(nbias * 4) : NULL;
    if ((w_elems && !t->w) || (nbias && !t->bias)) {
        fg_free(t);
        FAIL(VKI_ENOMEM, "float_gemm: out of memory");
    }
    if (w_elems) memcpy(t->w, w, w_elems * 4);
    if (nbias) memcpy(t->bias, bias, nbias * 4);
    vki_ref refs[4] = {a, b, c, y};
    return vki_graph_push(g, "float_gemm", fg_run, fg_free, t, 4, refs, need);
}
