/* The native graph's com.microsoft MatMulIntegerToFloat with a constant B (ONNX Runtime 1.31's arithmetic, vkinfer/
 * reference/matmul_integer_to_float.py), and QGemm with a float output (reference/qgemm.py: c, an int32 per column,
 * starts each sum, as ORT's QGemm accumulates into its C): y[r, j] = (float)(int32 (c[j] +) sum_k (a[r, k] - a_zp)
 * (b[k, j] - b_zp[j]))
 * * scale[j], one float32 multiply (scale[j] is float32(a_scale * b_scale[j]), made by the caller), then + bias[j]
 * when bias is not NULL (a second rounding, as MLAS's scale-bias output processor). The sum wraps modulo 2^32 like
 * an int32 accumulator. a: rows x k canonical bytes; b: k x n canonical bytes (copied); y: rows x n float32.
 *
 * Three bodies, chosen when the operator is added from the variant the graph's other operators run
 * (vki_isa_default(): $VKINFER_CPU_ISA, else the best this CPU runs), so every one is testable here and the name
 * says which ran ("qmatmul_f32:avx512vnni"):
 *   avx512vnni  VPDPWSSD on int16 pairs (a - a_zp) x (b - b_zp): tiles of 4 rows by 64 columns (16 zmm);
 *   avx2        VPMADDWD + VPADDD on the same pairs: tiles of 4 rows by 16 columns (8 ymm);
 *   the loop    (scalar, NEON variants) on B transposed.
 * Both vector bodies form the exact int32 sums modulo 2^32 (each pair product is at most 2 * 255^2, and VPDPWSSD
 * and VPADDD wrap), convert with VCVTDQ2PS (round to nearest even, C's int -> float under the default rounding
 * mode) and multiply, then add, as separate float32 operations (no FMA): the loop's bits. They are compiled with
 * target attributes and only chosen when that variant runs (its availability check passed), as kernels_avx2.c's
 * QLinearAdd body is. Work items: up to 4 rows by up to 64 columns, over the graph's threads. */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define QMMF_X86 1
#endif

enum { QMMF_LOOP, QMMF_AVX2, QMMF_AVX512 };

typedef struct {
    uint64_t rows;
    uint32_t k, n;
    int32_t a_zp;
    int has_bias, body;
    int16_t* bt;   /* the loop: n x k, b[k, j] - b_zp[j] */
    int16_t* wp;   /* vector bodies: [ceil(n / 16)][kp][16][2] pairs (b - b_zp), zero padded; kp = ceil(k / 2) */
    int16_t* a16;  /* vector bodies: rows x 2 kp, a - a_zp (made at each run), zero padded */
    uint32_t kp, nblk;
    float* scale;  /* n (vector bodies: padded to 16 nblk) */
    float* bias;   /* the same, or NULL */
    int32_t* c;    /* the same: each column's int32 start (zeros without c) */
} qmmf_t;

typedef struct {
    const qmmf_t* t;
    uint8_t* y;
} qmmf_job;

static void qmmf_free(void* p)
{
    qmmf_t* t = p;
    if (!t) return;
    free(t->bt);
    free(t->wp);
    free(t->a16);
    free(t->scale);
    free(t->bias);
    free(t->c);
    free(t);
}

#ifdef QMMF_X86
/* mr (1..4) rows of pairs a (row stride as, 2 kp int16 each) by nb (1..4) blocks of 16 columns from block blk, into
 * y (row stride ys bytes): 16 zmm accumulators at most, each B vector loaded once for the mr rows (one row at a
 * time re-read all of B from L2 per row: 32 x 1024 x 512 took 1.6x ORT's time). */
static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vnni"))) void
qmmf_v5_tile(const qmmf_t* t, const int16_t* a, size_t as, const int mr, size_t blk, const int nb, uint8_t* y,
             size_t ys)
{
    const size_t kp = t->kp, stride = kp * 32;
    const int16_t* w = t->wp + blk * stride;
    __m512i acc[4][4];
    for (int i = 0; i < mr; i++)
        for (int b = 0; b < nb; b++) acc[i][b] = _mm512_loadu_si512(t->c + (blk + b) * 16);
    for (size_t p = 0; p < kp; p++) {
        __m512i av[4];
        for (int i = 0; i < mr; i++) {
            int32_t pair;
            memcpy(&pair, a + i * as + 2 * p, sizeof pair);
            av[i] = _mm512_set1_epi32(pair);
        }
        for (int b = 0; b < nb; b++) {
            const __m512i wv = _mm512_load_si512(w + b * stride + p * 32);
            for (int i = 0; i < mr; i++) acc[i][b] = _mm512_dpwssd_epi32(acc[i][b], av[i], wv);
        }
    }
    for (int b = 0; b < nb; b++) {
        const size_t c0 = (blk + b) * 16, nc = t->n - c0 < 16 ? t->n - c0 : 16;
        const __m512 sc = _mm512_loadu_ps(t->scale + c0);
        const __m512 bi = t->has_bias ? _mm512_loadu_ps(t->bias + c0) : _mm512_setzero_ps();
        for (int i = 0; i < mr; i++) {
            __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[i][b]), sc);
            if (t->has_bias) f = _mm512_add_ps(f, bi);
            _mm512_mask_storeu_ps(y + i * ys + c0 * 4, (__mmask16)((1u << nc) - 1), f);
        }
    }
}

#define QMMF_V5(MR)                                                                                                \
    switch (nb) {                                                                                                  \
    case 1: qmmf_v5_tile(t, a, as, MR, blk, 1, y, ys); break;                                                     \
    case 2: qmmf_v5_tile(t, a, as, MR, blk, 2, y, ys); break;                                                     \
    case 3: qmmf_v5_tile(t, a, as, MR, blk, 3, y, ys); break;                                                     \
    default: qmmf_v5_tile(t, a, as, MR, blk, 4, y, ys); break;                                                    \
    }

__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void qmmf_v5(const qmmf_t* t, const int16_t* a,
                                                                           size_t as, size_t mr, size_t blk,
                                                                           size_t nb, uint8_t* y, size_t ys)
{
    switch (mr) {
    case 1: QMMF_V5(1) break;
    case 2: QMMF_V5(2) break;
    case 3: QMMF_V5(3) break;
    default: QMMF_V5(4) break;
    }
}
#undef QMMF_V5

/* AVX2: mr (1..4) rows by one block of 16 columns (two ymm per row: 8 accumulators), block by block. */
static inline __attribute__((always_inline, target("avx2"))) void qmmf_a2_tile(const qmmf_t* t, const int16_t* a,
                                                                               size_t as, const int mr, size_t blk,
                                                                               uint8_t* y, size_t ys)
{
    const size_t kp = t->kp;
    const int16_t* w = t->wp + blk * kp * 32;
    __m256i acc[4][2];
    for (int i = 0; i < mr; i++) {
        acc[i][0] = _mm256_loadu_si256((const __m256i*)(t->c + blk * 16));
        acc[i][1] = _mm256_loadu_si256((const __m256i*)(t->c + blk * 16 + 8));
    }
    for (size_t p = 0; p < kp; p++) {
        const __m256i w0 = _mm256_load_si256((const __m256i*)(w + p * 32));
        const __m256i w1 = _mm256_load_si256((const __m256i*)(w + p * 32 + 16));
        for (int i = 0; i < mr; i++) {
            int32_t pair;
            memcpy(&pair, a + i * as + 2 * p, sizeof pair);
            const __m256i av = _mm256_set1_epi32(pair);
            acc[i][0] = _mm256_add_epi32(acc[i][0], _mm256_madd_epi16(av, w0));
            acc[i][1] = _mm256_add_epi32(acc[i][1], _mm256_madd_epi16(av, w1));
        }
    }
    const size_t c0 = blk * 16, nc = t->n - c0 < 16 ? t->n - c0 : 16;
    for (int i = 0; i < mr; i++) {
        float out[16];
        for (int h = 0; h < 2; h++) {
            __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(acc[i][h]), _mm256_loadu_ps(t->scale + c0 + 8 * h));
            if (t->has_bias) f = _mm256_add_ps(f, _mm256_loadu_ps(t->bias + c0 + 8 * h));
            _mm256_storeu_ps(out + 8 * h, f);
        }
        memcpy(y + i * ys + c0 * 4, out, nc * 4);
    }
}

__attribute__((target("avx2"))) static void qmmf_a2(const qmmf_t* t, const int16_t* a, size_t as, size_t mr,
                                                    size_t blk, size_t nb, uint8_t* y, size_t ys)
{
    for (size_t b = blk; b < blk + nb; b++) switch (mr) {
        case 1: qmmf_a2_tile(t, a, as, 1, b, y, ys); break;
        case 2: qmmf_a2_tile(t, a, as, 2, b, y, ys); break;
        case 3: qmmf_a2_tile(t, a, as, 3, b, y, ys); break;
        default: qmmf_a2_tile(t, a, as, 4, b, y, ys); break;
        }
}
#endif

/* Work item: up to 4 rows by up to 64 columns; consecutive items share the columns (B's 64-column slice stays in
 * cache while every row group passes). */
static void qmmf_item(void* p, size_t item)
{
    const qmmf_job* j = p;
    const qmmf_t* t = j->t;
    const size_t rgroups = (t->rows + 3) / 4, r = (item % rgroups) * 4, blk = (item / rgroups) * 4;
    const size_t nb = t->nblk - blk < 4 ? t->nblk - blk : 4, mr = t->rows - r < 4 ? t->rows - r : 4;
    const size_t as = 2 * t->kp, ys = (size_t)t->n * 4;
    const int16_t* a = t->a16 + r * as;
    uint8_t* y = j->y + r * ys;
#ifdef QMMF_X86
    if (t->body == QMMF_AVX512) qmmf_v5(t, a, as, mr, blk, nb, y, ys);
    else qmmf_a2(t, a, as, mr, blk, nb, y, ys);
#else
    (void)a, (void)y, (void)nb, (void)mr;
#endif
}

static vki_status qmmf_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const qmmf_t* t = p;
    const uint8_t* a = ptr[0];
    uint8_t* y = ptr[1];  /* any alignment (an external buffer): stored with memcpy / unaligned stores */
    if (t->body != QMMF_LOOP) {
        for (uint64_t r = 0; r < t->rows; r++) {  /* a - a_zp as int16, the pairs the bodies broadcast */
            const uint8_t* ar = a + r * t->k;
            int16_t* o = t->a16 + r * 2 * t->kp;
            for (uint32_t i = 0; i < t->k; i++) o[i] = (int16_t)((int32_t)ar[i] - t->a_zp);
        }
        qmmf_job j = {t, y};
        vki_for_items((t->rows + 3) / 4 * ((t->nblk + 3) / 4), t->rows * t->k * t->n, threads, qmmf_item, &j);
        return VKI_OK;
    }
    for (uint64_t r = 0; r < t->rows; r++) {
        const uint8_t* ar = a + r * t->k;
        for (uint32_t j = 0; j < t->n; j++) {
            const int16_t* bj = t->bt + (uint64_t)j * t->k;
            uint32_t acc = (uint32_t)t->c[j];  /* unsigned: wraps modulo 2^32 without undefined behaviour */
            for (uint32_t i = 0; i < t->k; i++) acc += (uint32_t)(((int32_t)ar[i] - t->a_zp) * (int32_t)bj[i]);
            float v = (float)(int32_t)acc * t->scale[j];  /* -ffp-contract=off: never fused with the add */
            if (t->has_bias) v = v + t->bias[j];
            memcpy(y + (r * t->n + j) * sizeof v, &v, sizeof v);
        }
    }
    return VKI_OK;
}

/* The body the graph's variant selects (QMMF_LOOP off x86 or for the scalar variant). */
static int qmmf_body(void)
{
    const int32_t index = vki_isa_default();
    const vki_isa* isa = index >= 0 ? vki_isa_get(index) : NULL;
    if (!isa) return QMMF_LOOP;
    if (strcmp(isa->name, "avx512vnni") == 0) return QMMF_AVX512;
    if (strcmp(isa->name, "avx2") == 0) return QMMF_AVX2;
    return QMMF_LOOP;
}

vki_status vki_graph_add_qmatmul_f32(vki_graph* g, uint64_t rows, uint32_t k, uint32_t n, int32_t a_zp,
                                     const uint8_t* b, const uint32_t* b_zp, const float* scale, const float* bias,
                                     const int32_t* c, vki_ref a, vki_ref y)
{
    if (!b || !b_zp || !scale) FAIL(VKI_EINVAL, "qmatmul_f32: b, b_zp and scale must not be NULL");
    if (!rows || !k || !n) FAIL(VKI_EINVAL, "qmatmul_f32: rows, k and n must be positive");
    if (a_zp < 0 || a_zp > 255) FAIL(VKI_EINVAL, "qmatmul_f32: a_zp %d is not a canonical byte", a_zp);
    uint64_t a_bytes = vki_mul2(rows, k), y_bytes = vki_mul4(rows, n, 4, 1), b_elems = vki_mul2(k, n);
    if (!a_bytes || !y_bytes || !b_elems) FAIL(VKI_EINVAL, "qmatmul_f32: sizes overflow");
    for (uint32_t j = 0; j < n; j++)
        if (b_zp[j] > 255) FAIL(VKI_EINVAL, "qmatmul_f32: b_zp[%u] = %u is not a canonical byte", j, b_zp[j]);
    qmmf_t* t = calloc(1, sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "qmatmul_f32: out of memory");
    t->rows = rows;
    t->k = k;
    t->n = n;
    t->a_zp = a_zp;
    t->has_bias = bias != NULL;
    t->body = qmmf_body();
    t->kp = (k + 1) / 2;
    t->nblk = (n + 15) / 16;
    const size_t ncols = t->body == QMMF_LOOP ? n : (size_t)t->nblk * 16;  /* padded for whole-vector loads */
    const uint64_t a16 = vki_mul2(rows, 2 * (uint64_t)t->kp), wp = vki_mul2(t->nblk, (uint64_t)t->kp * 32);
    if (t->body != QMMF_LOOP && (!a16 || a16 > (UINT64_C(1) << 40) || !wp || wp > (UINT64_C(1) << 40))) {
        free(t);
        FAIL(VKI_EINVAL, "qmatmul_f32: rows x k past 2^40");
    }
    if (t->body == QMMF_LOOP) {
        t->bt = malloc(b_elems * sizeof *t->bt);
    } else {
        t->wp = aligned_alloc(64, wp * sizeof *t->wp);  /* a multiple of 64 bytes: 32 int16 per pair row */
        t->a16 = malloc(a16 * sizeof *t->a16);
    }
    t->scale = calloc(ncols, sizeof *t->scale);
    t->bias = bias ? calloc(ncols, sizeof *t->bias) : NULL;
    t->c = calloc(ncols, sizeof *t->c);
    if ((t->body == QMMF_LOOP ? !t->bt : !t->wp || !t->a16) || !t->scale || (bias && !t->bias) || !t->c) {
        qmmf_free(t);
        FAIL(VKI_ENOMEM, "qmatmul_f32: out of memory");
    }
    if (t->body == QMMF_LOOP) {
        for (uint32_t j = 0; j < n; j++)
            for (uint32_t i = 0; i < k; i++)
                t->bt[(uint64_t)j * k + i] = (int16_t)((int32_t)b[(uint64_t)i * n + j] - (int32_t)b_zp[j]);
    } else {
        memset(t->wp, 0, wp * sizeof *t->wp);
        for (uint32_t i = 0; i < k; i++)
            for (uint32_t j = 0; j < n; j++)
                t->wp[((uint64_t)(j / 16) * t->kp + i / 2) * 32 + (j % 16) * 2 + i % 2] =
                    (int16_t)((int32_t)b[(uint64_t)i * n + j] - (int32_t)b_zp[j]);
        for (uint64_t r = 0; r < rows; r++) t->a16[r * 2 * t->kp + 2 * t->kp - 1] = 0;  /* odd k: the pad pair half */
    }
    memcpy(t->scale, scale, (size_t)n * sizeof *t->scale);
    if (bias) memcpy(t->bias, bias, (size_t)n * sizeof *t->bias);
    if (c) memcpy(t->c, c, (size_t)n * sizeof *t->c);
    uint64_t need[2] = {a_bytes, y_bytes};
    vki_ref refs[2] = {a, y};
    static const char* const names[] = {"qmatmul_f32", "qmatmul_f32:avx2", "qmatmul_f32:avx512vnni"};
    return vki_graph_push(g, names[t->body], qmmf_run, qmmf_free, t, 2, refs, need);
}
