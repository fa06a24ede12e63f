/* vkinfer:QDQConvTranspose (vkinfer/reference/float_conv_transpose.py is the definition): DequantizeLinear(x) ->
 * float32 ConvTranspose -> QuantizeLinear with ONNX Runtime 1.31's CPU bits, for non-overlapping kernels
 * ((k - 1) * d < s on both axes, so each output gets at most one tap) and at most 128 channels per group:
 *   xf = (float)(x - x_zp) * x_scale; per tap, v = FMA chain from +0 over the group's channels in order (MLAS
 *   SGEMM's order for one K block); y = (0 + v) + bias[m] (Col2im into a zeroed Y, then the bias);
 *   q = nearbyint(clamp(y / y_scale, lo - zp, hi - zp)) + zp (MLAS's QuantizeLinear: one division).
 * dims (16): n, h, w, c, m, group, kh, kw, sh, sw, dh, dw, pad_top, pad_left, oh, ow.
 * weights: per group, per chunk of FC_COLS of the group's (kh, kw, m') columns, per channel FC_COLS floats
 * (zero-padded; vkinfer/cpu/float_conv_transpose.py packs them). bias: m floats. Both copied.
 * x: NHWC canonical bytes (n, h, w, c); y: NHWC canonical bytes (n, oh, ow, m). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")  /* as ops/lstm.c: the tile's fmaf loop is vectorised */
#endif

#define FC_COLS 64  /* output columns per tile: 4 rows x 64 floats stay in 16 AVX-512 registers */
#define FC_ROWS 4   /* input pixels sharing one pass over the weights */
#define FC_MAX_C 128

typedef struct {
    uint32_t n, h, wd, c, m, group, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow;
    uint32_t cg, mg, cols, chunks;
    float xf[256];  /* dequantized value of each canonical byte */
    float y_scale, qlo, qhi;
    int32_t y_zp, y_flip;
    float* w;
    float* bias;
    uint8_t* yb;  /* quantize(0 + bias[m]): what positions no tap reaches hold */
    const uint8_t* x;
    uint8_t* y;
} fct_t;

/* acc[r][0..64) = the FMA chain from +0 over k < kn of a[r][k] * b[k][0..64). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)  /* ifunc resolvers run before the sanitizer runtime is up */
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
static void fct_tile(uint32_t rows, const float (*a)[FC_MAX_C], const float* b, uint32_t kn,
                     float (*acc)[FC_COLS])
{
    float s[FC_ROWS][FC_COLS];
    for (uint32_t r = 0; r < FC_ROWS; r++)
        for (uint32_t j = 0; j < FC_COLS; j++) s[r][j] = 0.0f;
    for (uint32_t k = 0; k < kn; k++) {
        const float* bk = b + (uint64_t)k * FC_COLS;
        for (uint32_t r = 0; r < FC_ROWS; r++) {
            float av = a[r][k];
            for (uint32_t j = 0; j < FC_COLS; j++) s[r][j] = fmaf(av, bk[j], s[r][j]);
        }
    }
    for (uint32_t r = 0; r < rows; r++)
        for (uint32_t j = 0; j < FC_COLS; j++) acc[r][j] = s[r][j];
}

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

/* The tile and the quantization of a chunk in one tap, with AVX-512F intrinsics: 16 accumulators in registers, the
 * same FMA chain per output as fct_tile (VFMADD231PS rounds once, as fmaf), 16 outputs quantized per step as
 * fct_quant (VADDPS twice, VDIVPS, VMAXPS/VMINPS with the NaN going to the bound, VCVTPS2DQ rounding to even).
 * The 128 -> 128 channel 2x2 stride-2 layer of YOLO11-seg's mask head (80x80, 1 Zen 4 core): 60 -> 8.3 ms. */
__attribute__((target("avx512f"))) static void fct_tile512(uint32_t rows, const float (*a)[FC_MAX_C],
                                                           const float* b, uint32_t kn, float (*acc)[FC_COLS])
{
    __m512 s00 = _mm512_setzero_ps(), s01 = s00, s02 = s00, s03 = s00, s10 = s00, s11 = s00, s12 = s00, s13 = s00;
    __m512 s20 = s00, s21 = s00, s22 = s00, s23 = s00, s30 = s00, s31 = s00, s32 = s00, s33 = s00;
    for (uint32_t k = 0; k < kn; k++) {
        const float* bk = b + (uint64_t)k * FC_COLS;
        const __m512 b0 = _mm512_loadu_ps(bk), b1 = _mm512_loadu_ps(bk + 16), b2 = _mm512_loadu_ps(bk + 32),
                     b3 = _mm512_loadu_ps(bk + 48);
        __m512 v = _mm512_set1_ps(a[0][k]);
        s00 = _mm512_fmadd_ps(v, b0, s00), s01 = _mm512_fmadd_ps(v, b1, s01);
        s02 = _mm512_fmadd_ps(v, b2, s02), s03 = _mm512_fmadd_ps(v, b3, s03);
        v = _mm512_set1_ps(a[1][k]);
        s10 = _mm512_fmadd_ps(v, b0, s10), s11 = _mm512_fmadd_ps(v, b1, s11);
        s12 = _mm512_fmadd_ps(v, b2, s12), s13 = _mm512_fmadd_ps(v, b3, s13);
        v = _mm512_set1_ps(a[2][k]);
        s20 = _mm512_fmadd_ps(v, b0, s20), s21 = _mm512_fmadd_ps(v, b1, s21);
        s22 = _mm512_fmadd_ps(v, b2, s22), s23 = _mm512_fmadd_ps(v, b3, s23);
        v = _mm512_set1_ps(a[3][k]);
        s30 = _mm512_fmadd_ps(v, b0, s30), s31 = _mm512_fmadd_ps(v, b1, s31);
        s32 = _mm512_fmadd_ps(v, b2, s32), s33 = _mm512_fmadd_ps(v, b3, s33);
    }
    const __m512 all[FC_ROWS][4] = {{s00, s01, s02, s03}, {s10, s11, s12, s13}, {s20, s21, s22, s23},
                                    {s30, s31, s32, s33}};
    for (uint32_t r = 0; r < rows; r++)
        for (int v = 0; v < 4; v++) _mm512_storeu_ps(acc[r] + 16 * v, all[r][v]);
}

/* 64 outputs of channels ch0.. (one tap, consecutive channels) quantized into y. */
__attribute__((target("avx512f,avx512bw"))) static void fct_quant64(const float* v, const float* bias,
                                                                    uint8_t* y, float y_scale, float qlo, float qhi,
                                                                    int32_t add)
{
    const __m512 zero = _mm512_setzero_ps(), ys = _mm512_set1_ps(y_scale), lo = _mm512_set1_ps(qlo),
                 hi = _mm512_set1_ps(qhi);
    const __m512i off = _mm512_set1_epi32(add);
    for (int i = 0; i < FC_COLS; i += 16) {
        __m512 q = _mm512_add_ps(_mm512_add_ps(zero, _mm512_loadu_ps(v + i)), _mm512_loadu_ps(bias + i));
        q = _mm512_min_ps(_mm512_max_ps(_mm512_div_ps(q, ys), lo), hi);
        _mm_storeu_si128((__m128i*)(void*)(y + i), _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(q), off)));
    }
}

static int fct_avx512(void)
{
    static int have = -1;
    if (have < 0) {
        const char* forced = getenv("VKINFER_CPU_ISA"); /* "scalar" or "avx2": the portable loops (tests run both) */
        __builtin_cpu_init();
        have = !(forced && (strcmp(forced, "scalar") == 0 || strcmp(forced, "avx2") == 0)) &&
               __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    }
    return have;
}
#endif

static uint8_t fct_quant(const fct_t* t, float v, uint32_t ch)
{
    float y = (0.0f + v) + t->bias[ch];
    float q = y / t->y_scale;
    q = fminf(fmaxf(q, t->qlo), t->qhi);
    return (uint8_t)((int32_t)nearbyintf(q) + t->y_zp + t->y_flip);
}

/* Output rows [r0, r1) reached from input row ih (the band of rows its taps can write, the first band grown to
 * row 0 and the last to oh): items write disjoint rows. */
static void fct_band(const fct_t* t, uint32_t ih, int64_t* r0, int64_t* r1)
{
    int64_t a = ih == 0 ? 0 : (int64_t)ih * t->sh - t->pt;
    int64_t b = ih + 1 == t->h ? (int64_t)t->oh : ((int64_t)ih + 1) * t->sh - t->pt;
    *r0 = a < 0 ? 0 : a > t->oh ? t->oh : a;
    *r1 = b < *r0 ? *r0 : b > t->oh ? t->oh : b;
}

static void fct_item(void* ctx, size_t item)
{
    const fct_t* t = ctx;
    uint32_t nb = (uint32_t)(item / t->h), ih = (uint32_t)(item % t->h);
    int64_t r0, r1;
    fct_band(t, ih, &r0, &r1);
    /* Positions no tap reaches hold quantize(0 + bias). */
    for (int64_t r = r0; r < r1; r++)
        for (uint32_t ow = 0; ow < t->ow; ow++) {
            uint8_t* yp = t->y + (((uint64_t)nb * t->oh + (uint64_t)r) * t->ow + ow) * t->m;
            memcpy(yp, t->yb, t->m);
        }
    float a[FC_ROWS][FC_MAX_C];
    float acc[FC_ROWS][FC_COLS];
    for (uint32_t iw0 = 0; iw0 < t->wd; iw0 += FC_ROWS) {
        uint32_t rows = t->wd - iw0 < FC_ROWS ? t->wd - iw0 : FC_ROWS;
        for (uint32_t g = 0; g < t->group; g++) {
            for (uint32_t r = 0; r < FC_ROWS; r++) {
                const uint8_t* xp = t->x + (((uint64_t)nb * t->h + ih) * t->wd + iw0 + (r < rows ? r : 0)) * t->c +
                                    (uint64_t)g * t->cg;
                for (uint32_t k = 0; k < t->cg; k++) a[r][k] = t->xf[xp[k]];
            }
            for (uint32_t ck = 0; ck < t->chunks; ck++) {
                const float* wp = t->w + ((uint64_t)g * t->chunks + ck) * t->cg * FC_COLS;
#if defined(__x86_64__) || defined(_M_X64)
                const int wide = fct_avx512();
                if (wide) fct_tile512(rows, (const float (*)[FC_MAX_C])a, wp, t->cg, acc);
                else fct_tile(rows, (const float (*)[FC_MAX_C])a, wp, t->cg, acc);
                /* A chunk inside one tap writes 64 consecutive channels of each of its pixels. */
                const uint32_t c0 = ck * FC_COLS, tap0 = c0 / t->mg;
                if (wide && c0 + FC_COLS <= t->cols && (c0 + FC_COLS - 1) / t->mg == tap0) {
                    int64_t oh = (int64_t)ih * t->sh + (int64_t)(tap0 / t->kw) * t->dh - t->pt;
                    if (oh < r0 || oh >= r1) continue;
                    const uint32_t ch0 = g * t->mg + c0 % t->mg;
                    for (uint32_t r = 0; r < rows; r++) {
                        int64_t ow = (int64_t)(iw0 + r) * t->sw + (int64_t)(tap0 % t->kw) * t->dw - t->pl;
                        if (ow < 0 || ow >= t->ow) continue;
                        fct_quant64(acc[r], t->bias + ch0,
                                    t->y + (((uint64_t)nb * t->oh + (uint64_t)oh) * t->ow + (uint64_t)ow) * t->m + ch0,
                                    t->y_scale, t->qlo, t->qhi, t->y_zp + t->y_flip);
                    }
                    continue;
                }
#else
                fct_tile(rows, (const float (*)[FC_MAX_C])a, wp, t->cg, acc);
#endif
                for (uint32_t j = 0; j < FC_COLS && ck * FC_COLS + j < t->cols; j++) {
                    uint32_t col = ck * FC_COLS + j, tap = col / t->mg, mm = col % t->mg;
                    int64_t oh = (int64_t)ih * t->sh + (int64_t)(tap / t->kw) * t->dh - t->pt;
                    if (oh < r0 || oh >= r1) continue;
                    uint32_t ch = g * t->mg + mm;
                    for (uint32_t r = 0; r < rows; r++) {
                        int64_t ow = (int64_t)(iw0 + r) * t->sw + (int64_t)(tap % t->kw) * t->dw - t->pl;
                        if (ow < 0 || ow >= t->ow) continue;
                        t->y[(((uint64_t)nb * t->oh + (uint64_t)oh) * t->ow + (uint64_t)ow) * t->m + ch] =
                            fct_quant(t, acc[r][j], ch);
                    }
                }
            }
        }
    }
}

static vki_status fct_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    fct_t* t = p;
    t->x = ptr[0];
    t->y = ptr[1];
    uint64_t work = (uint64_t)t->n * t->h * t->wd * t->c * t->cols;
    vki_for_items((size_t)t->n * t->h, work, threads, fct_item, t);
    return VKI_OK;
}

static void fct_free(void* p)
{
    fct_t* t = p;
    if (!t) return;
    free(t->w);
    free(t->bias);
    free(t->yb);
    free(t);
}

vki_status vki_graph_add_float_conv_transpose(vki_graph* g, const uint32_t* dims, const float* weights,
                                              const float* bias, float x_scale, int32_t x_zp, int32_t x_signed,
                                              float y_scale, int32_t y_zp, int32_t y_signed, vki_ref x, vki_ref y)
{
    if (!dims || !weights || !bias) FAIL(VKI_EINVAL, "float_conv_transpose: dims, weights and bias are required");
    fct_t tmp;
    memset(&tmp, 0, sizeof tmp);
    for (int i = 0; i < 16; i++)
        if (i != 12 && i != 13 && !dims[i]) FAIL(VKI_EINVAL, "float_conv_transpose: dims[%d] must be positive", i);
    tmp.n = dims[0], tmp.h = dims[1], tmp.wd = dims[2], tmp.c = dims[3], tmp.m = dims[4], tmp.group = dims[5];
    tmp.kh = dims[6], tmp.kw = dims[7], tmp.sh = dims[8], tmp.sw = dims[9], tmp.dh = dims[10], tmp.dw = dims[11];
    tmp.pt = dims[12], tmp.pl = dims[13], tmp.oh = dims[14], tmp.ow = dims[15];
    if (tmp.c % tmp.group || tmp.m % tmp.group)
        FAIL(VKI_EINVAL, "float_conv_transpose: group %u must divide c %u and m %u", tmp.group, tmp.c, tmp.m);
    tmp.cg = tmp.c / tmp.group;
    tmp.mg = tmp.m / tmp.group;
    if (tmp.cg > FC_MAX_C) FAIL(VKI_EINVAL, "float_conv_transpose: %u channels per group (at most %d)", tmp.cg, FC_MAX_C);
    if ((uint64_t)(tmp.kh - 1) * tmp.dh >= tmp.sh || (uint64_t)(tmp.kw - 1) * tmp.dw >= tmp.sw)
        FAIL(VKI_EINVAL, "float_conv_transpose: the kernel overlaps itself ((k - 1) * d must be < s)");
    if (tmp.kh > 65536 || tmp.kw > 65536 || tmp.sh > 65536 || tmp.sw > 65536 || tmp.pt > 65536 || tmp.pl > 65536)
        FAIL(VKI_EINVAL, "float_conv_transpose: kernel, stride or pad too large");
    if (vki_bad_scale(x_scale) || vki_bad_scale(y_scale)) FAIL(VKI_EINVAL, "float_conv_transpose: bad scale");
    if (vki_zp_bad(x_zp, x_signed) || vki_zp_bad(y_zp, y_signed))
        FAIL(VKI_EINVAL, "float_conv_transpose: zero point out of range");
    uint64_t cols = vki_mul2(vki_mul2(tmp.kh, tmp.kw), tmp.mg);
    if (!cols || cols > UINT32_MAX / 2) FAIL(VKI_EINVAL, "float_conv_transpose: sizes too large");
    tmp.cols = (uint32_t)cols;
    tmp.chunks = (tmp.cols + FC_COLS - 1) / FC_COLS;
    uint64_t w_floats = vki_mul4(tmp.group, tmp.chunks, tmp.cg, FC_COLS);
    uint64_t need[2] = {vki_mul4(tmp.n, tmp.h, tmp.wd, tmp.c), vki_mul4(tmp.n, tmp.oh, tmp.ow, tmp.m)};
    if (!need[0] || !need[1] || !w_floats || w_floats > (UINT64_C(1) << 40))
        FAIL(VKI_EINVAL, "float_conv_transpose: sizes too large");
    if (vki_refs_overlap(x, y)) FAIL(VKI_EINVAL, "float_conv_transpose: x and y must not overlap");
    for (int b = 0; b < 256; b++) {
        int32_t v = x_signed ? b - 128 : b;  /* canonical byte -> logical value */
        tmp.xf[b] = (float)(v - x_zp) * x_scale;
    }
    int32_t lo = y_signed ? -128 : 0, hi = y_signed ? 127 : 255;
    tmp.qlo = (float)(lo - y_zp);
    tmp.qhi = (float)(hi - y_zp);
    tmp.y_scale = y_scale;
    tmp.y_zp = y_zp;
    tmp.y_flip = y_signed ? 128 : 0;
    fct_t* t = malloc(sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "float_conv_transpose: out of memory");
    *t = tmp;
    t->w = malloc(w_floats * 4);
    t->bias = malloc((size_t)tmp.m * 4);
    t->yb = malloc(tmp.m);
    if (!t->w || !t->bias || !t->yb) {
        fct_free(t);
        FAIL(VKI_ENOMEM, "float_conv_transpose: out of memory");
    }
    memcpy(t->w, weights, w_floats * 4);
    memcpy(t->bias, bias, (size_t)tmp.m * 4);
    for (uint32_t ch = 0; ch < tmp.m; ch++) t->yb[ch] = fct_quant(t, 0.0f, ch);
    vki_ref refs[2] = {x, y};
    return vki_graph_push(g, "float_conv_transpose", fct_run, fct_free, t, 2, refs, need);
}
