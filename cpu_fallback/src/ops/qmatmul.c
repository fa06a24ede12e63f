/* The native graph's QLinearMatMul of two activations (attention's Q x K^T and P x V), batched with numpy
 * broadcast batch axes. Why one file past 800 lines: one operator whose four paths (loop, blocked, interleaved,
 * direct) share its plan (qmm_t), operand walk and packing; split, they would need a private header for qmm_t alone.
 * Exact int32 accumulation (wrapping modulo 2^32, as the reference) of
 * (a - a_zp) * (b - b_zp), requantized by vki_requant_scalar (ORT's float32 multiplier, one product, ties to even).
 * Every operand is read and written at byte strides, so any device form (4-D NHWC) works without a copy.
 *
 * The blocked path (the variant vki_isa_default() picks: $VKINFER_CPU_ISA, else the best this CPU runs): each
 * distinct B (k x n at its strides) is packed at run time into the convolution's igemm weight layout (internal.h:
 * a 1x1 convolution whose weights are B^T with bias 0, zero point folded as conv.c's pack_igemm does) and A's rows
 * are the igemm's indirection pointers, so every ISA runs its tuned tile. Canonical bytes make signedness moot:
 * (a - a_zp) and (b - b_zp) are the same integers for int8 (stored ^ 0x80) and uint8 operands. A B goes to the
 * u8s8 kernel (int8 weights, a_zp folded into the per-column bias modulo 2^32) when every (b - b_zp) of it lies
 * in the variant's exact u8s8 range, checked on the data at each run; else to the int16 kernel, which takes any
 * (b - b_zp) in [-255, 255]. Both wrap modulo 2^32 as the loop does. A's rows are copied to a contiguous chunk
 * where a_k != 1 (NHWC attention: heads interleaved), output rows go through a row buffer where y_n != 1.
 * The interleaved path (one batch axis, innermost in A, B and Y: the NHWC form of [1, heads, m, k] operands) splits
 * B and each chunk of A's rows into per-batch contiguous blocks and interleaves the results into Y's rows (SSE2 /
 * NEON at 4 heads, a byte loop otherwise). B's full column blocks are packed with SSE2 where the variant's
 * layout allows (x86: NR a multiple of 16, KR 4 for u8s8, 2 for int16).
 * The direct path (m <= QMM_DIRECT_M on the AVX2 and AVX-512 variants, target attributes) reads B unpacked: at a
 * few rows packing B cost more than the product.
 * The loop stays for k == 0, k past 2^24 and a forced variant this CPU lacks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define QMM_DIRECT 1  /* the small-m path's AVX2 / AVX-512 bodies (target attributes) */
#endif

#define QMM_MAX_BATCH 4
#define QMM_ROWS 32  /* rows of A per work item of the loop: B's panel (K x N int16) is made once per item */
#define QMM_CHUNK 56 /* rows per work item of the blocked path: a multiple of every tile's MR (2, 4, 7, 8, 14) */
#define QMM_MAX_MR 16
#define QMM_MAX_NR 64
/* Rows up to which the direct path runs (no packing of B): at 8 rows it no longer wins (4 x 8 x 400 x 400, 1 thread,
 * AVX-512: contiguous 115 us direct vs 83 packed; heads-interleaved 103 vs 116). */
#define QMM_DIRECT_M 4
#define QMM_DIRECT_MR 4     /* rows per pass of the direct path's bodies (their accumulators) */
#define QMM_DIRECT_COLS 256 /* columns per work item of the direct path (a multiple of 32) */

typedef struct {
    uint32_t nb, m, k, n, batch_rank;
    uint64_t batch[QMM_MAX_BATCH];
    uint64_t bs[QMM_MAX_BATCH][3];  /* per batch axis: a, b, y strides */
    uint64_t am, ak, bk, bn, ym, yn;
    int32_t a_zp, b_zp;             /* canonical domain */
    float scale;
    vki_qparams q;                  /* x_zp = a_zp: the int16 kernels subtract it */
    int32_t lo, hi;
    /* The blocked path (isa NULL: the loop). */
    const vki_isa* isa;
    int u8s8;                       /* the variant has a u8s8 igemm and $VKINFER_CPU_U8S8 is not "0" */
    int32_t wmin, wmax;             /* its exact weight range */
    uint32_t nbb;                   /* distinct B matrices (batches over B's non-broadcast axes) */
    size_t nr16, kr16, bytes16;     /* int16 layout: columns and k-grouping per block, bytes per block */
    size_t nr8, bytes8;             /* u8s8 layout (KR = VKI_U8S8_KR) */
    size_t slot;                    /* bytes per packed B: the larger layout, a multiple of 64 */
    uint8_t* packed;                /* nbb slots, made at the first run (a graph runs one at a time) */
    uint8_t* kind;                  /* per slot: 1 when packed for the u8s8 kernel */
    /* Batch-interleaved operands (qmm_plan sets ilv = nb): one batch axis, innermost in memory in A, B and Y
     * (NHWC attention: the heads), so a row of each is nb interleaved rows. */
    uint32_t ilv;
    uint8_t* plain;                 /* B split into nb contiguous k x n matrices (ilv), made at each run */
    int direct;                     /* the direct path's body: 0 none, 1 AVX2, 2 AVX-512 VNNI */
    int ssse3;                      /* the CPU has SSSE3 (qmm_split's PSHUFB body) */
} qmm_t;

typedef struct {
    const qmm_t* t;
    uint8_t* const* ptr;
    _Atomic int failed;
    size_t chunk;  /* rows per work item of the blocked and interleaved paths */
    int per_head;  /* interleaved, several threads: each pack item splits its own head of B first */
} qmm_job;

static void qmm_item(void* p, size_t item)
{
    qmm_job* j = p;
    const qmm_t* t = j->t;
    const uint64_t blocks = (t->m + QMM_ROWS - 1) / QMM_ROWS;
    uint64_t bi = item / blocks, r0 = (item % blocks) * QMM_ROWS;
    uint64_t r1 = r0 + QMM_ROWS < t->m ? r0 + QMM_ROWS : t->m;
    uint64_t oa = 0, ob = 0, oy = 0, rest = bi;
    for (int d = (int)t->batch_rank - 1; d >= 0; d--) {
        uint64_t i = rest % t->batch[d];
        rest /= t->batch[d];
        oa += i * t->bs[d][0];
        ob += i * t->bs[d][1];
        oy += i * t->bs[d][2];
    }
    const uint8_t* a = j->ptr[0] + oa;
    const uint8_t* b = j->ptr[1] + ob;
    uint8_t* y = j->ptr[2] + oy;
    int16_t* panel = malloc((size_t)t->k * t->n * sizeof *panel + 1);
    uint32_t* acc = malloc((size_t)t->n * sizeof *acc + 1);
    if (!panel || !acc) {
        free(panel);
        free(acc);
        j->failed = 1;
        return;
    }
    for (uint32_t kk = 0; kk < t->k; kk++)
        for (uint32_t c = 0; c < t->n; c++)
            panel[(size_t)kk * t->n + c] = (int16_t)((int32_t)b[kk * t->bk + c * t->bn] - t->b_zp);
    for (uint64_t r = r0; r < r1; r++) {
        memset(acc, 0, (size_t)t->n * sizeof *acc);
        const uint8_t* ar = a + r * t->am;
        for (uint32_t kk = 0; kk < t->k; kk++) {
            const int32_t av = (int32_t)ar[kk * t->ak] - t->a_zp;
            const int16_t* pr = panel + (size_t)kk * t->n;
            /* uint32 sums: the int32 accumulator wraps modulo 2^32 as the reference's does, without UB */
            for (uint32_t c = 0; c < t->n; c++) acc[c] += (uint32_t)(av * (int32_t)pr[c]);
        }
        uint8_t* yr = y + r * t->ym;
        for (uint32_t c = 0; c < t->n; c++)
            yr[c * t->yn] = (uint8_t)vki_requant_scalar((int32_t)acc[c], t->scale, &t->q);
    }
    free(panel);
    free(acc);
}

static size_t qmm_round(size_t v, size_t m) { return (v + m - 1) / m * m; }

/* Byte offsets of batch bi's a, b, y, and the index of its B among the distinct ones (B's broadcast axes skipped). */
static void qmm_offsets(const qmm_t* t, uint64_t bi, uint64_t* oa, uint64_t* ob, uint64_t* oy, uint64_t* jb)
{
    uint64_t rest = bi, mult = 1;
    *oa = *ob = *oy = *jb = 0;
    for (int d = (int)t->batch_rank - 1; d >= 0; d--) {
        uint64_t i = rest % t->batch[d];
        rest /= t->batch[d];
        *oa += i * t->bs[d][0];
        *ob += i * t->bs[d][1];
        *oy += i * t->bs[d][2];
        if (t->bs[d][1]) {
            *jb += i * mult;
            mult *= t->batch[d];
        }
    }
}

/* B's offset for distinct index jb (the inverse of qmm_offsets' jb). */
static uint64_t qmm_b_offset(const qmm_t* t, uint64_t jb)
{
    uint64_t ob = 0;
    for (int d = (int)t->batch_rank - 1; d >= 0; d--)
        if (t->bs[d][1]) {
            ob += (jb % t->batch[d]) * t->bs[d][1];
            jb /= t->batch[d];
        }
    return ob;
}

/* One KR group of B's rows (k0 .. k0 + KR - 1, all below k) for one block of nc columns: w[(cn * KR) + km] =
 * b - b_zp, the byte range in *lo / *hi and the column sums (modulo 2^32) in sum[cn]. Inlined with constant KR
 * and BN so the compiler vectorizes it: the packing loop with divisions per element took half the node's time
 * (yoloseg's P x V, 1 thread). */
static inline __attribute__((always_inline)) void qmm_pack_group(void* dst, int wide, const uint8_t* b, size_t bk,
                                                                 const size_t kr, const size_t bn, size_t nc,
                                                                 int32_t zp, uint8_t* lo, uint8_t* hi,
                                                                 uint32_t* sum)
{
    uint8_t mn = *lo, mx = *hi;
    /* Columns outer, the KR rows inner: each column's KR weights are one contiguous store. */
    for (size_t cn = 0; cn < nc; cn++) {
        uint32_t s = 0;
        for (size_t km = 0; km < kr; km++) {
            const uint8_t x = b[km * bk + cn * bn];
            const int32_t v = (int32_t)x - zp;
            if (wide) {
                ((int16_t*)dst)[cn * kr + km] = (int16_t)v;
            } else {
                mn = x < mn ? x : mn;
                mx = x > mx ? x : mx;
                ((int8_t*)dst)[cn * kr + km] = (int8_t)v;
                s += (uint32_t)v;
            }
        }
        if (!wide) sum[cn] += s;
    }
    *lo = mn, *hi = mx;
}

#define QMM_PACK_FN(NAME, WIDE, KR)                                                                                \
    static void NAME(void* dst, const uint8_t* b, size_t bk, size_t bn, size_t nc, int32_t zp, uint8_t* lo,        \
                     uint8_t* hi, uint32_t* sum)                                                                   \
    {                                                                                                              \
        if (bn == 1) qmm_pack_group(dst, WIDE, b, bk, KR, 1, nc, zp, lo, hi, sum);                                 \
        else if (bn == 4) qmm_pack_group(dst, WIDE, b, bk, KR, 4, nc, zp, lo, hi, sum);                            \
        else qmm_pack_group(dst, WIDE, b, bk, KR, bn, nc, zp, lo, hi, sum);                                        \
    }
QMM_PACK_FN(qmm_pack16_k1, 1, 1)
QMM_PACK_FN(qmm_pack16_k2, 1, 2)
QMM_PACK_FN(qmm_pack8_k4, 0, 4)
typedef void (*qmm_pack_fn)(void*, const uint8_t*, size_t, size_t, size_t, int32_t, uint8_t*, uint8_t*, uint32_t*);

#if defined(__SSE2__)
/* SSE2 packing of one full block (nr a multiple of 16 columns, B's columns contiguous) over its kfull rows, 16
 * columns at a time: the auto-vectorised qmm_pack_group widened every byte to int32 for the column sums and took
 * 0.3 ns per byte of B (196 us of a 4 x 400 x 400 P at m = 1, 1 thread). u8s8: w[kk / 4][c][kk % 4] = b - b_zp
 * (int8, exact where it fits: checked by the caller on the byte range), the raw byte range in *lo / *hi, and
 * sum[c] += sum_k (b - b_zp) modulo 2^32, as the raw byte sums (uint16 lanes, flushed every 256 rows) less
 * kfull * b_zp. */
static void qmm_pack8_sse2(uint8_t* w, const uint8_t* b, size_t bk, size_t nr, size_t kfull, int32_t zp,
                           uint8_t* lo, uint8_t* hi, uint32_t* sum)
{
    const __m128i z = _mm_setzero_si128(), vzp = _mm_set1_epi8((char)zp);
    __m128i mn = _mm_set1_epi8((char)*lo), mx = _mm_set1_epi8((char)*hi);
    for (size_t c0 = 0; c0 < nr; c0 += 16) {
        uint32_t raw[16] = {0};
        __m128i s0 = z, s1 = z;
        size_t rows = 0;
        for (size_t kk = 0; kk < kfull; kk += 4) {
            const uint8_t* r = b + kk * bk + c0;
            const __m128i v0 = _mm_loadu_si128((const __m128i*)r);
            const __m128i v1 = _mm_loadu_si128((const __m128i*)(r + bk));
            const __m128i v2 = _mm_loadu_si128((const __m128i*)(r + 2 * bk));
            const __m128i v3 = _mm_loadu_si128((const __m128i*)(r + 3 * bk));
            mn = _mm_min_epu8(mn, _mm_min_epu8(_mm_min_epu8(v0, v1), _mm_min_epu8(v2, v3)));
            mx = _mm_max_epu8(mx, _mm_max_epu8(_mm_max_epu8(v0, v1), _mm_max_epu8(v2, v3)));
            s0 = _mm_add_epi16(s0, _mm_add_epi16(_mm_add_epi16(_mm_unpacklo_epi8(v0, z), _mm_unpacklo_epi8(v1, z)),
                                                 _mm_add_epi16(_mm_unpacklo_epi8(v2, z), _mm_unpacklo_epi8(v3, z))));
            s1 = _mm_add_epi16(s1, _mm_add_epi16(_mm_add_epi16(_mm_unpackhi_epi8(v0, z), _mm_unpackhi_epi8(v1, z)),
                                                 _mm_add_epi16(_mm_unpackhi_epi8(v2, z), _mm_unpackhi_epi8(v3, z))));
            rows += 4;
            if (rows == 256 || kk + 4 >= kfull) {  /* 256 * 255 fits a uint16 lane */
                uint16_t l[16];
                _mm_storeu_si128((__m128i*)l, s0);
                _mm_storeu_si128((__m128i*)(l + 8), s1);
                for (int c = 0; c < 16; c++) raw[c] += l[c];
                s0 = s1 = z, rows = 0;
            }
            const __m128i w0 = _mm_sub_epi8(v0, vzp), w1 = _mm_sub_epi8(v1, vzp);
            const __m128i w2 = _mm_sub_epi8(v2, vzp), w3 = _mm_sub_epi8(v3, vzp);
            const __m128i a0 = _mm_unpacklo_epi8(w0, w1), a1 = _mm_unpackhi_epi8(w0, w1);
            const __m128i b0 = _mm_unpacklo_epi8(w2, w3), b1 = _mm_unpackhi_epi8(w2, w3);
            uint8_t* o = w + ((kk / 4) * nr + c0) * 4;
            _mm_storeu_si128((__m128i*)o, _mm_unpacklo_epi16(a0, b0));
            _mm_storeu_si128((__m128i*)(o + 16), _mm_unpackhi_epi16(a0, b0));
            _mm_storeu_si128((__m128i*)(o + 32), _mm_unpacklo_epi16(a1, b1));
            _mm_storeu_si128((__m128i*)(o + 48), _mm_unpackhi_epi16(a1, b1));
        }
        for (int c = 0; c < 16; c++) sum[c0 + c] += raw[c] - (uint32_t)kfull * (uint32_t)zp;
    }
    uint8_t l[16], h[16];
    _mm_storeu_si128((__m128i*)l, mn);
    _mm_storeu_si128((__m128i*)h, mx);
    for (int c = 0; c < 16; c++) {
        *lo = l[c] < *lo ? l[c] : *lo;
        *hi = h[c] > *hi ? h[c] : *hi;
    }
}

/* The int16 layout with KR = 2 (AVX2, AVX-512): w[kk / 2][c][kk % 2] = b - b_zp over kfull rows. */
static void qmm_pack16_sse2(uint8_t* w, const uint8_t* b, size_t bk, size_t nr, size_t kfull, int32_t zp)
{
    const __m128i z = _mm_setzero_si128(), vzp = _mm_set1_epi16((short)zp);
    for (size_t kk = 0; kk < kfull; kk += 2)
        for (size_t c0 = 0; c0 < nr; c0 += 16) {
            const uint8_t* r = b + kk * bk + c0;
            const __m128i v0 = _mm_loadu_si128((const __m128i*)r), v1 = _mm_loadu_si128((const __m128i*)(r + bk));
            const __m128i l0 = _mm_sub_epi16(_mm_unpacklo_epi8(v0, z), vzp);
            const __m128i h0 = _mm_sub_epi16(_mm_unpackhi_epi8(v0, z), vzp);
            const __m128i l1 = _mm_sub_epi16(_mm_unpacklo_epi8(v1, z), vzp);
            const __m128i h1 = _mm_sub_epi16(_mm_unpackhi_epi8(v1, z), vzp);
            uint8_t* o = w + ((kk / 2) * nr + c0) * 4;
            _mm_storeu_si128((__m128i*)o, _mm_unpacklo_epi16(l0, l1));
            _mm_storeu_si128((__m128i*)(o + 16), _mm_unpackhi_epi16(l0, l1));
            _mm_storeu_si128((__m128i*)(o + 32), _mm_unpacklo_epi16(h0, h1));
            _mm_storeu_si128((__m128i*)(o + 48), _mm_unpackhi_epi16(h0, h1));
        }
}
#endif

/* Pack B into a slot for one layout: u8s8 (int8, KR = VKI_U8S8_KR, per-column bias folding a_zp) or int16 (the
 * variant's KR, bias 0). The u8s8 form returns 0 as soon as a block's bytes leave the exact range. Layout as
 * conv.c's pack_igemm with ks = 1, kc = k: per NR columns int32 bias[NR]; float scale[NR]; w[ceil(k / KR)][NR][KR]
 * (b - b_zp, zero padded). */
static int qmm_pack(const qmm_t* t, const uint8_t* b, size_t b_k, size_t b_n, uint8_t* slot, int u8s8)
{
    const size_t nr = u8s8 ? t->nr8 : t->nr16, kr = u8s8 ? VKI_U8S8_KR : t->kr16, esz = u8s8 ? 1 : 2;
    const size_t bytes = u8s8 ? t->bytes8 : t->bytes16, nblocks = (t->n + nr - 1) / nr, kfull = t->k / kr * kr;
    const qmm_pack_fn fn = u8s8 ? qmm_pack8_k4 : kr == 2 ? qmm_pack16_k2 : kr == 1 ? qmm_pack16_k1 : NULL;
    const int32_t zp = t->b_zp;
    uint32_t sum[QMM_MAX_NR];
    for (size_t blk = 0; blk < nblocks; blk++) {
        uint8_t* out = slot + blk * bytes;
        const size_t n0 = blk * nr, nc = t->n - n0 < nr ? t->n - n0 : nr;
        uint8_t lo = 255, hi = 0;
        memset(sum, 0, sizeof sum);
        uint8_t* w = out + nr * 8;
        const uint8_t* bb = b + n0 * b_n;
        size_t kk = 0;
#if defined(__SSE2__)
        if (b_n == 1 && nc == nr && nr % 16 == 0 && (u8s8 || kr == 2)) {
            if (u8s8) qmm_pack8_sse2(w, bb, b_k, nr, kfull, zp, &lo, &hi, sum);
            else qmm_pack16_sse2(w, bb, b_k, nr, kfull, zp);
            kk = kfull;  /* every byte of the first kfull rows written: zero the rest only */
        }
#endif
        memset(out, 0, nr * 4);
        memset(w + kk * nr * esz, 0, bytes - nr * 8 - kk * nr * esz);
        float* scale = (float*)(out + nr * 4);
        for (size_t c = 0; c < nr; c++) scale[c] = t->scale;
        if (fn)
            for (; kk < kfull; kk += kr) fn(w + kk * nr * esz, bb + kk * b_k, b_k, b_n, nc, zp, &lo, &hi, sum);
        for (; kk < t->k; kk++)  /* the last partial group (and any other KR) */
            for (size_t cn = 0; cn < nc; cn++) {
                const uint8_t x = bb[kk * b_k + cn * b_n];
                const int32_t v = (int32_t)x - zp;
                const size_t at = ((kk / kr) * nr + cn) * kr + kk % kr;
                lo = x < lo ? x : lo;
                hi = x > hi ? x : hi;
                if (u8s8) ((int8_t*)w)[at] = (int8_t)v, sum[cn] += (uint32_t)v;
                else ((int16_t*)w)[at] = (int16_t)v;
            }
        if (!u8s8) continue;
        if ((int32_t)lo - zp < t->wmin || (int32_t)hi - zp > t->wmax) return 0;
        /* bias' = 0 - (a_zp - xoff) * sum_k (b - b_zp), modulo 2^32: conv.c's u8s8_bias with bias 0 */
        int32_t* bias = (int32_t*)out;
        const uint32_t xz = (uint32_t)(t->a_zp - t->isa->u8s8_xoff);
        for (size_t cn = 0; cn < nc; cn++) bias[cn] = (int32_t)(0u - xz * sum[cn]);
    }
    return 1;
}

/* Pack distinct B number jb into its slot: for the u8s8 kernel where every (b - b_zp) fits its range (tried
 * first; most attention operands fit, e.g. softmax probabilities), else for the int16 kernel. */
/* Head h of len groups of nb interleaved bytes: dst[e] = src[e * nb + h] (SSE2 at 4 heads: one lane of qmm_split's
 * shifts and packs). */
static void qmm_head(const uint8_t* src, size_t len, uint32_t nb, uint32_t h, uint8_t* dst)
{
    size_t e = 0;
#if defined(__SSE2__)
    if (nb == 4) {
        const __m128i lo = _mm_set1_epi32(0xFF);
        const __m128i sh = _mm_cvtsi32_si128((int)(8 * h));
        for (; e + 16 <= len; e += 16) {
            const __m128i v0 = _mm_and_si128(_mm_srl_epi32(_mm_loadu_si128((const __m128i*)(src + 4 * e)), sh), lo);
            const __m128i v1 = _mm_and_si128(_mm_srl_epi32(_mm_loadu_si128((const __m128i*)(src + 4 * e + 16)), sh), lo);
            const __m128i v2 = _mm_and_si128(_mm_srl_epi32(_mm_loadu_si128((const __m128i*)(src + 4 * e + 32)), sh), lo);
            const __m128i v3 = _mm_and_si128(_mm_srl_epi32(_mm_loadu_si128((const __m128i*)(src + 4 * e + 48)), sh), lo);
            _mm_storeu_si128((__m128i*)(dst + e), _mm_packus_epi16(_mm_packs_epi32(v0, v1), _mm_packs_epi32(v2, v3)));
        }
    }
#endif
    for (; e < len; e++) dst[e] = src[e * nb + h];
}

static void qmm_pack_item(void* p, size_t jb)
{
    qmm_job* j = p;
    const qmm_t* t = j->t;
    /* Several threads: this head's rows split here, then packed on the same core (a split phase over k-ranges
     * left each head's rows in both cores' caches: yoloseg's P x V took 453 us on 2 threads, 266 on 1). */
    if (t->ilv && j->per_head)
        for (size_t kk = 0; kk < t->k; kk++)
            qmm_head(j->ptr[1] + kk * t->bk, t->n, t->ilv, (uint32_t)jb, t->plain + (jb * t->k + kk) * t->n);
    /* interleaved: B's rows were split into t->plain (contiguous k x n per batch) */
    const uint8_t* b = t->ilv ? t->plain + jb * t->k * t->n : j->ptr[1] + qmm_b_offset(t, jb);
    const size_t bk = t->ilv ? t->n : t->bk, bn = t->ilv ? 1 : t->bn;
    uint8_t* slot = t->packed + jb * t->slot;
    const int u8s8 = t->u8s8 && qmm_pack(t, b, bk, bn, slot, 1);
    if (!u8s8) qmm_pack(t, b, bk, bn, slot, 0);
    t->kind[jb] = (uint8_t)u8s8;
}

#ifdef QMM_DIRECT
/* qmm_split at 4 heads with SSSE3 (where the CPU has it, t->ssse3): PSHUFB gathers each head's 4 bytes, a 4 x 4
 * transpose of dwords makes the rows; 20 instructions per 64 bytes where SSE2's shifts and packs take 52 (the B
 * split: a 4 x 8 x 400 x 400 P x V, 1 thread, 115 -> 97 us). Returns the bytes done per row. */
__attribute__((target("ssse3"))) static size_t qmm_split4_ssse3(const uint8_t* src, size_t len, uint8_t* dst,
                                                                size_t ds)
{
    const __m128i sh = _mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    size_t e = 0;
    for (; e + 16 <= len; e += 16) {
        const __m128i v0 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)(src + 4 * e)), sh);
        const __m128i v1 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)(src + 4 * e + 16)), sh);
        const __m128i v2 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)(src + 4 * e + 32)), sh);
        const __m128i v3 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)(src + 4 * e + 48)), sh);
        const __m128i t0 = _mm_unpacklo_epi32(v0, v1), t1 = _mm_unpacklo_epi32(v2, v3);
        const __m128i t2 = _mm_unpackhi_epi32(v0, v1), t3 = _mm_unpackhi_epi32(v2, v3);
        _mm_storeu_si128((__m128i*)(dst + e), _mm_unpacklo_epi64(t0, t1));
        _mm_storeu_si128((__m128i*)(dst + ds + e), _mm_unpackhi_epi64(t0, t1));
        _mm_storeu_si128((__m128i*)(dst + 2 * ds + e), _mm_unpacklo_epi64(t2, t3));
        _mm_storeu_si128((__m128i*)(dst + 3 * ds + e), _mm_unpackhi_epi64(t2, t3));
    }
    return e;
}
#endif

/* Split len groups of nb interleaved bytes (src[e * nb + i]) into nb rows dst[i * ds + e]. nb = 4 (4 heads) with
 * SSSE3 (ssse3 set) / SSE2 / NEON: the byte-by-byte loop was a third of yoloseg's interleaved P x V (1 thread). */
static void qmm_split(const uint8_t* src, size_t len, uint32_t nb, uint8_t* dst, size_t ds, int ssse3)
{
    size_t e = 0;
#ifdef QMM_DIRECT
    if (nb == 4 && ssse3) e = qmm_split4_ssse3(src, len, dst, ds);
#else
    (void)ssse3;
#endif
#if defined(__SSE2__)
    if (nb == 4) {
        const __m128i lo = _mm_set1_epi32(0xFF);
        for (; e + 16 <= len; e += 16) {
            const __m128i v0 = _mm_loadu_si128((const __m128i*)(src + 4 * e));
            const __m128i v1 = _mm_loadu_si128((const __m128i*)(src + 4 * e + 16));
            const __m128i v2 = _mm_loadu_si128((const __m128i*)(src + 4 * e + 32));
            const __m128i v3 = _mm_loadu_si128((const __m128i*)(src + 4 * e + 48));
#define QMM_LANE(I)                                                                                                \
    _mm_storeu_si128((__m128i*)(dst + (I) * ds + e),                                                              \
                     _mm_packus_epi16(_mm_packs_epi32(_mm_and_si128(_mm_srli_epi32(v0, 8 * (I)), lo),              \
                                                      _mm_and_si128(_mm_srli_epi32(v1, 8 * (I)), lo)),             \
                                      _mm_packs_epi32(_mm_and_si128(_mm_srli_epi32(v2, 8 * (I)), lo),              \
                                                      _mm_and_si128(_mm_srli_epi32(v3, 8 * (I)), lo))))
            QMM_LANE(0);
            QMM_LANE(1);
            QMM_LANE(2);
            QMM_LANE(3);
#undef QMM_LANE
        }
    }
#elif defined(__ARM_NEON)
    if (nb == 4)
        for (; e + 16 <= len; e += 16) {
            const uint8x16x4_t v = vld4q_u8(src + 4 * e);
            vst1q_u8(dst + e, v.val[0]);
            vst1q_u8(dst + ds + e, v.val[1]);
            vst1q_u8(dst + 2 * ds + e, v.val[2]);
            vst1q_u8(dst + 3 * ds + e, v.val[3]);
        }
#endif
    for (; e < len; e++)
        for (uint32_t i = 0; i < nb; i++) dst[i * ds + e] = src[e * nb + i];
}

/* The inverse: nb rows src[i * ss + e] interleaved into dst[e * nb + i]. */
static void qmm_join(const uint8_t* src, size_t ss, size_t len, uint32_t nb, uint8_t* dst)
{
    size_t e = 0;
#if defined(__SSE2__)
    if (nb == 4)
        for (; e + 16 <= len; e += 16) {
            const __m128i a = _mm_loadu_si128((const __m128i*)(src + e));
            const __m128i b = _mm_loadu_si128((const __m128i*)(src + ss + e));
            const __m128i c = _mm_loadu_si128((const __m128i*)(src + 2 * ss + e));
            const __m128i d = _mm_loadu_si128((const __m128i*)(src + 3 * ss + e));
            const __m128i ab0 = _mm_unpacklo_epi8(a, b), ab1 = _mm_unpackhi_epi8(a, b);
            const __m128i cd0 = _mm_unpacklo_epi8(c, d), cd1 = _mm_unpackhi_epi8(c, d);
            _mm_storeu_si128((__m128i*)(dst + 4 * e), _mm_unpacklo_epi16(ab0, cd0));
            _mm_storeu_si128((__m128i*)(dst + 4 * e + 16), _mm_unpackhi_epi16(ab0, cd0));
            _mm_storeu_si128((__m128i*)(dst + 4 * e + 32), _mm_unpacklo_epi16(ab1, cd1));
            _mm_storeu_si128((__m128i*)(dst + 4 * e + 48), _mm_unpackhi_epi16(ab1, cd1));
        }
#elif defined(__ARM_NEON)
    if (nb == 4)
        for (; e + 16 <= len; e += 16) {
            const uint8x16x4_t v = {{vld1q_u8(src + e), vld1q_u8(src + ss + e), vld1q_u8(src + 2 * ss + e),
                                     vld1q_u8(src + 3 * ss + e)}};
            vst4q_u8(dst + 4 * e, v);
        }
#endif
    for (; e < len; e++)
        for (uint32_t i = 0; i < nb; i++) dst[e * nb + i] = src[i * ss + e];
}

/* nrows rows of A (contiguous at stride am) times packed B number jb into c (row stride cs): MR-row tiles, each
 * over every NR block, with the kernel B was packed for. */
static void qmm_tiles(const qmm_t* t, uint64_t jb, const uint8_t* a, size_t am, size_t nrows, uint8_t* c, size_t cs)
{
    const vki_isa* isa = t->isa;
    const int u8s8 = t->kind[jb];
    const int narrow = u8s8 && isa->igemm_u8s8_narrow && isa->u8s8_mr_narrow && t->n <= 16;
    const size_t mr = narrow ? isa->u8s8_mr_narrow : u8s8 && isa->u8s8_mr ? isa->u8s8_mr : isa->mr;
    const size_t nr = u8s8 ? t->nr8 : t->nr16, bytes = u8s8 ? t->bytes8 : t->bytes16;
    const vki_igemm_fn fn = narrow ? isa->igemm_u8s8_narrow : u8s8 ? isa->igemm_u8s8 : isa->igemm;
    const uint8_t* w = t->packed + jb * t->slot;
    const uint8_t* ap[QMM_MAX_MR];
    for (size_t r = 0; r < nrows; r += mr) {
        const size_t nrow = nrows - r < mr ? nrows - r : mr;
        for (size_t i = 0; i < mr; i++) ap[i] = a + (r + (i < nrow ? i : nrow - 1)) * am;
        for (size_t n0 = 0, blk = 0; n0 < t->n; n0 += nr, blk++)
            fn(nrow, t->n - n0 < nr ? t->n - n0 : nr, t->k, 1, ap, w + blk * bytes, c + r * cs + n0, cs, &t->q);
    }
}

/* Interleaved operands: B's rows kk in [item * QMM_ROWS, ...) split into t->plain (nb contiguous k x n). */
static void qmm_split_b_item(void* p, size_t item)
{
    qmm_job* j = p;
    const qmm_t* t = j->t;
    const size_t k0 = item * QMM_ROWS, k1 = k0 + QMM_ROWS < t->k ? k0 + QMM_ROWS : t->k;
    for (size_t kk = k0; kk < k1; kk++)
        qmm_split(j->ptr[1] + kk * t->bk, t->n, t->ilv, t->plain + kk * t->n, (size_t)t->k * t->n, t->ssse3);
}

/* Interleaved operands: j->chunk rows of every batch. A's rows are split into nb contiguous blocks, each batch
 * runs its tiles into a block of a row buffer, and the blocks are interleaved into Y's rows. */
static void qmm_ilv_item(void* p, size_t item)
{
    qmm_job* j = p;
    const qmm_t* t = j->t;
    const size_t r0 = item * j->chunk, r1 = r0 + j->chunk < t->m ? r0 + j->chunk : t->m, nrows = r1 - r0;
    const size_t nb = t->ilv, k = t->k, n = t->n;
    uint8_t* rows = malloc(nb * nrows * k);
    uint8_t* out = malloc(nb * nrows * n);
    if (!rows || !out) {
        free(rows);
        free(out);
        j->failed = 1;
        return;
    }
    for (size_t r = r0; r < r1; r++)
        qmm_split(j->ptr[0] + r * t->am, k, t->ilv, rows + (r - r0) * k, nrows * k, t->ssse3);
    for (size_t bi = 0; bi < nb; bi++) qmm_tiles(t, bi, rows + bi * nrows * k, k, nrows, out + bi * nrows * n, n);
    for (size_t r = r0; r < r1; r++) qmm_join(out + (r - r0) * n, nrows * n, n, t->ilv, j->ptr[2] + r * t->ym);
    free(rows);
    free(out);
}

/* j->chunk rows of one batch through its packed B: MR-row tiles, each over every NR block. */
static void qmm_block_item(void* p, size_t item)
{
    qmm_job* j = p;
    const qmm_t* t = j->t;
    const vki_isa* isa = t->isa;
    const uint64_t chunks = (t->m + j->chunk - 1) / j->chunk;
    const uint64_t bi = item / chunks, r0 = (item % chunks) * j->chunk;
    const uint64_t r1 = r0 + j->chunk < t->m ? r0 + j->chunk : t->m;
    uint64_t oa, ob, oy, jb;
    qmm_offsets(t, bi, &oa, &ob, &oy, &jb);
    const int u8s8 = t->kind[jb];
    const int narrow = u8s8 && isa->igemm_u8s8_narrow && isa->u8s8_mr_narrow && t->n <= 16;
    const size_t mr = narrow ? isa->u8s8_mr_narrow : u8s8 && isa->u8s8_mr ? isa->u8s8_mr : isa->mr;
    const size_t nr = u8s8 ? t->nr8 : t->nr16, bytes = u8s8 ? t->bytes8 : t->bytes16;
    const vki_igemm_fn fn = narrow ? isa->igemm_u8s8_narrow : u8s8 ? isa->igemm_u8s8 : isa->igemm;
    const uint8_t* w = t->packed + jb * t->slot;
    const uint8_t* a = j->ptr[0] + oa + r0 * t->am;
    uint8_t* y = j->ptr[2] + oy;
    size_t am = t->am;
    uint8_t *rows = NULL, *tmp = NULL;
    if (t->ak != 1) {  /* A's rows contiguous for the kernels */
        rows = malloc((size_t)(r1 - r0) * t->k);
        if (!rows) goto oom;
        for (uint64_t r = r0; r < r1; r++)
            for (uint32_t kk = 0; kk < t->k; kk++) rows[(r - r0) * t->k + kk] = a[(r - r0) * t->am + kk * t->ak];
        a = rows, am = t->k;
    }
    if (t->yn != 1 && !(tmp = malloc(mr * t->n))) goto oom;
    const uint8_t* ap[QMM_MAX_MR];
    for (uint64_t r = r0; r < r1; r += mr) {
        const size_t nrow = r1 - r < mr ? (size_t)(r1 - r) : mr;
        for (size_t i = 0; i < mr; i++) ap[i] = a + (r - r0 + (i < nrow ? i : nrow - 1)) * am;
        uint8_t* c = tmp ? tmp : y + r * t->ym;
        const size_t cs = tmp ? t->n : t->ym;
        for (size_t n0 = 0, blk = 0; n0 < t->n; n0 += nr, blk++)
            fn(nrow, t->n - n0 < nr ? t->n - n0 : nr, t->k, 1, ap, w + blk * bytes, c + n0, cs, &t->q);
        if (tmp)
            for (size_t i = 0; i < nrow; i++) {
                uint8_t* yr = y + (r + i) * t->ym;
                for (uint32_t cc = 0; cc < t->n; cc++) yr[cc * t->yn] = tmp[i * t->n + cc];
            }
    }
    free(rows);
    free(tmp);
    return;
oom:
    free(rows);
    j->failed = 1;
}

#ifdef QMM_DIRECT
/* The direct path (m <= QMM_DIRECT_M, x86): B is read as it lies, never packed; the packing cost a byte of B per
 * output row (4 x 1 x 400 x 400 P: 64 us contiguous, 96 us heads-interleaved, ORT 50). A group is one batch (B's
 * columns contiguous, bn = yn = 1) or, interleaved at g = 2 or 4 heads, every batch: its W = n g columns are
 * contiguous in B's and Y's rows and column c belongs to head c % g. Each row's A becomes a pattern of int32 pairs
 * pat[p][j] = (a'(h, 2p), a'(h, 2p + 1)), a' = a - a_zp, head h = j % g (g divides 4, so lane j of every 4 aligned
 * columns is head j % g), the odd k's last pair (a', 0); B's rows 2p, 2p + 1 become int16 (b - b_zp) pairs
 * (VPMOVZXBW, VPUNPCKL/HWD: lane L of 128 bits holds columns 8L..8L+3 (low) and 8L+4..8L+7 (high)), summed by
 * VPDPWSSD / VPMADDWD + VPADDD: each pair product is at most 2 * 255^2 and the sums wrap modulo 2^32, the loop's
 * int32; requantized by vki_requant_scalar. */
static void qmm_direct_pattern(const qmm_t* t, const uint8_t* a, uint32_t g, int32_t* pat)
{
    const size_t kp = (t->k + 1) / 2;
    for (size_t p = 0; p < kp; p++)
        for (uint32_t j = 0; j < 4; j++) {
            const size_t h = j % g;  /* A's heads at byte stride 1 (interleaved); g = 1: h = 0 */
            const int32_t lo = (int32_t)a[2 * p * t->ak + h] - t->a_zp;
            const int32_t hi = 2 * p + 1 < t->k ? (int32_t)a[(2 * p + 1) * t->ak + h] - t->a_zp : 0;
            pat[p * 4 + j] = (int32_t)((uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16);
        }
}

/* Requantize columns [0, nc) of one row's strip into y: lo[4L + j] is column 8L + j, hi[4L + j] column 8L + 4 + j. */
static inline void qmm_direct_store(const qmm_t* t, const int32_t* lo, const int32_t* hi, size_t nc, uint8_t* y)
{
    for (size_t c = 0; c < nc; c++) {
        const size_t l = c / 8, j = c % 8;
        y[c] = (uint8_t)vki_requant_scalar(j < 4 ? lo[4 * l + j] : hi[4 * l + j - 4], t->scale, &t->q);
    }
}

/* The columns past the last whole strip, [c, c1), copied to tb (k rows of sw bytes, zero padded): one more strip
 * reads them there, never past B's last byte. */
static void qmm_direct_tail_copy(const qmm_t* t, const uint8_t* b, size_t c, size_t c1, size_t sw, uint8_t* tb)
{
    memset(tb, 0, t->k * sw);
    for (size_t kk = 0; kk < t->k; kk++) memcpy(tb + kk * sw, b + kk * t->bk + c, c1 - c);
}

/* One strip of 32 columns at b (row stride bk) for mr rows: VPDPWSSD into lo / hi, then requantized (nc columns). */
static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vnni"))) void
qmm_direct_v5_strip(const qmm_t* t, const int32_t* pat, const int mr, const uint8_t* b, size_t bk, size_t nc,
                    uint8_t* const* yr, size_t c)
{
    const size_t kp = (t->k + 1) / 2;
    const __m512i bz = _mm512_set1_epi16((short)t->b_zp);
    __m512i lo[4], hi[4];
    for (int i = 0; i < mr; i++) lo[i] = hi[i] = _mm512_setzero_si512();
    for (size_t p = 0; p < kp; p++) {
        const uint8_t* r = b + 2 * p * bk;
        const __m512i v = _mm512_sub_epi16(_mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i*)r)), bz);
        const __m512i u = 2 * p + 1 < t->k
                              ? _mm512_sub_epi16(_mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i*)(r + bk))), bz)
                              : _mm512_setzero_si512();
        const __m512i pl = _mm512_unpacklo_epi16(v, u), ph = _mm512_unpackhi_epi16(v, u);
        for (int i = 0; i < mr; i++) {
            const __m512i av = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i*)(pat + (i * kp + p) * 4)));
            lo[i] = _mm512_dpwssd_epi32(lo[i], pl, av);
            hi[i] = _mm512_dpwssd_epi32(hi[i], ph, av);
        }
    }
    for (int i = 0; i < mr; i++) {
        int32_t l[16], h[16];
        _mm512_storeu_si512(l, lo[i]);
        _mm512_storeu_si512(h, hi[i]);
        qmm_direct_store(t, l, h, nc, yr[i] + c);
    }
}

static inline __attribute__((always_inline, target("avx512f,avx512bw,avx512vnni"))) void
qmm_direct_v5_rows(const qmm_t* t, const int32_t* pat, const int mr, const uint8_t* b, size_t c, size_t c1,
                   uint8_t* const* yr, uint8_t* tb)
{
    for (; c + 32 <= c1; c += 32) qmm_direct_v5_strip(t, pat, mr, b + c, t->bk, 32, yr, c);
    if (c < c1) {
        qmm_direct_tail_copy(t, b, c, c1, 32, tb);
        qmm_direct_v5_strip(t, pat, mr, tb, 32, c1 - c, yr, c);
    }
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) static void qmm_direct_v5(const qmm_t* t, const int32_t* pat,
                                                                                 size_t mr, const uint8_t* b,
                                                                                 size_t c, size_t c1,
                                                                                 uint8_t* const* yr, uint8_t* tb)
{
    switch (mr) {
    case 1: qmm_direct_v5_rows(t, pat, 1, b, c, c1, yr, tb); break;
    case 2: qmm_direct_v5_rows(t, pat, 2, b, c, c1, yr, tb); break;
    case 3: qmm_direct_v5_rows(t, pat, 3, b, c, c1, yr, tb); break;
    default: qmm_direct_v5_rows(t, pat, 4, b, c, c1, yr, tb); break;
    }
}

/* AVX2: strips of 16 columns, VPMADDWD + VPADDD. */
static inline __attribute__((always_inline, target("avx2"))) void
qmm_direct_a2_strip(const qmm_t* t, const int32_t* pat, const int mr, const uint8_t* b, size_t bk, size_t nc,
                    uint8_t* const* yr, size_t c)
{
    const size_t kp = (t->k + 1) / 2;
    const __m256i bz = _mm256_set1_epi16((short)t->b_zp);
    __m256i lo[4], hi[4];
    for (int i = 0; i < mr; i++) lo[i] = hi[i] = _mm256_setzero_si256();
    for (size_t p = 0; p < kp; p++) {
        const uint8_t* r = b + 2 * p * bk;
        const __m256i v = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i*)r)), bz);
        const __m256i u = 2 * p + 1 < t->k
                              ? _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i*)(r + bk))), bz)
                              : _mm256_setzero_si256();
        const __m256i pl = _mm256_unpacklo_epi16(v, u), ph = _mm256_unpackhi_epi16(v, u);
        for (int i = 0; i < mr; i++) {
            const __m256i av = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i*)(pat + (i * kp + p) * 4)));
            lo[i] = _mm256_add_epi32(lo[i], _mm256_madd_epi16(pl, av));
            hi[i] = _mm256_add_epi32(hi[i], _mm256_madd_epi16(ph, av));
        }
    }
    for (int i = 0; i < mr; i++) {
        int32_t l[8], h[8];
        _mm256_storeu_si256((__m256i*)l, lo[i]);
        _mm256_storeu_si256((__m256i*)h, hi[i]);
        qmm_direct_store(t, l, h, nc, yr[i] + c);
    }
}

static inline __attribute__((always_inline, target("avx2"))) void qmm_direct_a2_rows(const qmm_t* t,
                                                                                     const int32_t* pat, const int mr,
                                                                                     const uint8_t* b, size_t c,
                                                                                     size_t c1, uint8_t* const* yr,
                                                                                     uint8_t* tb)
{
    for (; c + 16 <= c1; c += 16) qmm_direct_a2_strip(t, pat, mr, b + c, t->bk, 16, yr, c);
    if (c < c1) {
        qmm_direct_tail_copy(t, b, c, c1, 16, tb);
        qmm_direct_a2_strip(t, pat, mr, tb, 16, c1 - c, yr, c);
    }
}

__attribute__((target("avx2"))) static void qmm_direct_a2(const qmm_t* t, const int32_t* pat, size_t mr,
                                                          const uint8_t* b, size_t c, size_t c1, uint8_t* const* yr,
                                                          uint8_t* tb)
{
    switch (mr) {
    case 1: qmm_direct_a2_rows(t, pat, 1, b, c, c1, yr, tb); break;
    case 2: qmm_direct_a2_rows(t, pat, 2, b, c, c1, yr, tb); break;
    case 3: qmm_direct_a2_rows(t, pat, 3, b, c, c1, yr, tb); break;
    default: qmm_direct_a2_rows(t, pat, 4, b, c, c1, yr, tb); break;
    }
}

/* Work item: one group's columns [QMM_DIRECT_COLS i, ...) for every row. */
static void qmm_direct_item(void* p, size_t item)
{
    qmm_job* j = p;
    const qmm_t* t = j->t;
    const uint32_t g = t->ilv ? t->ilv : 1;
    const size_t w = (size_t)t->n * g, per = (w + QMM_DIRECT_COLS - 1) / QMM_DIRECT_COLS, kp = (t->k + 1) / 2;
    const size_t c0 = (item % per) * QMM_DIRECT_COLS, c1 = c0 + QMM_DIRECT_COLS < w ? c0 + QMM_DIRECT_COLS : w;
    uint64_t oa = 0, ob = 0, oy = 0, jb = 0;
    if (!t->ilv) qmm_offsets(t, item / per, &oa, &ob, &oy, &jb);
    int32_t* pat = malloc(QMM_DIRECT_MR * kp * 4 * sizeof *pat);
    uint8_t* tb = malloc((size_t)t->k * 32);  /* the tail strip's copy */
    if (!pat || !tb) {
        free(pat);
        free(tb);
        j->failed = 1;
        return;
    }
    for (size_t r0 = 0; r0 < t->m; r0 += QMM_DIRECT_MR) {
        const size_t mr = t->m - r0 < QMM_DIRECT_MR ? t->m - r0 : QMM_DIRECT_MR;
        uint8_t* yr[QMM_DIRECT_MR];
        for (size_t i = 0; i < mr; i++) {
            qmm_direct_pattern(t, j->ptr[0] + oa + (r0 + i) * t->am, g, pat + i * kp * 4);
            yr[i] = j->ptr[2] + oy + (r0 + i) * t->ym;
        }
        if (t->direct == 2) qmm_direct_v5(t, pat, mr, j->ptr[1] + ob, c0, c1, yr, tb);
        else qmm_direct_a2(t, pat, mr, j->ptr[1] + ob, c0, c1, yr, tb);
    }
    free(pat);
    free(tb);
}
#endif

static vki_status qmm_run_blocked(qmm_t* t, uint8_t* const* ptr, uint32_t threads)
{
    if (!t->packed) {  /* the graph runs one at a time, so the first run makes the slots */
        t->packed = aligned_alloc(64, t->slot * t->nbb);
        t->kind = malloc(t->nbb);
        if (!t->packed || !t->kind) {
            free(t->packed), free(t->kind);
            t->packed = NULL, t->kind = NULL;
            FAIL(VKI_ENOMEM, "qmatmul: out of memory for %u packed B of %zu bytes", t->nbb, t->slot);
        }
    }
    if (t->ilv && !t->plain && !(t->plain = malloc((size_t)t->ilv * t->k * t->n)))
        FAIL(VKI_ENOMEM, "qmatmul: out of memory for B split in %u batches", t->ilv);
    qmm_job j = {t, ptr, 0, QMM_CHUNK, 0};
    /* Under 2 items per thread: half chunks (28 rows: still whole tiles of 4, 7 and 14 rows), so that 2 threads
     * share a 64-row P x V as 28 + 8 / 28 rather than 56 / 8. */
    if (threads > 1 && (t->ilv ? 1 : (uint64_t)t->nb) * ((t->m + QMM_CHUNK - 1) / QMM_CHUNK) < 2 * (uint64_t)threads)
        j.chunk = QMM_CHUNK / 2;
    j.per_head = t->ilv && threads > 1 && (uint64_t)t->nbb * t->k * t->n >= VKI_PAR_MIN_WORK;
    if (t->ilv && !j.per_head)
        vki_for_items((t->k + QMM_ROWS - 1) / QMM_ROWS, (uint64_t)t->nbb * t->k * t->n, threads, qmm_split_b_item, &j);
    vki_for_items(t->nbb, (uint64_t)t->nbb * t->k * t->n, threads, qmm_pack_item, &j);
    if (t->ilv) {
        vki_for_items((t->m + j.chunk - 1) / j.chunk, (uint64_t)t->nb * t->m * t->n * (t->k + 1), threads,
                      qmm_ilv_item, &j);
        if (j.failed) FAIL(VKI_ENOMEM, "qmatmul: out of memory");
        return VKI_OK;
    }
    const size_t chunks = (t->m + j.chunk - 1) / j.chunk;
    vki_for_items((size_t)t->nb * chunks, (uint64_t)t->nb * t->m * t->n * (t->k + 1), threads, qmm_block_item, &j);
    if (j.failed) FAIL(VKI_ENOMEM, "qmatmul: out of memory");
    return VKI_OK;
}

static void qmm_free(void* p)
{
    qmm_t* t = p;
    free(t->packed);
    free(t->kind);
    free(t->plain);
    free(t);
}

/* Choose the blocked path's variant and layouts (t->isa stays NULL where the loop runs). */
static void qmm_plan(qmm_t* t)
{
    const int32_t index = vki_isa_default();
    const vki_isa* isa = index >= 0 ? vki_isa_get(index) : NULL;
    if (!isa || !isa->igemm || !t->k || t->k > (UINT32_C(1) << 24) || isa->mr > QMM_MAX_MR || isa->nr > QMM_MAX_NR || isa->u8s8_nr > QMM_MAX_NR ||
        isa->u8s8_mr > QMM_MAX_MR || isa->u8s8_mr_narrow > QMM_MAX_MR)
        return;
    const char* env = getenv("VKINFER_CPU_U8S8");
    t->u8s8 = isa->igemm_u8s8 && !(env && strcmp(env, "0") == 0);
    t->wmin = isa->u8s8_wmin, t->wmax = isa->u8s8_wmax;
    if (t->wmin == 0 && t->wmax == 0) t->wmin = -VKI_U8S8_WMAX, t->wmax = VKI_U8S8_WMAX;
    t->nr16 = isa->nr, t->kr16 = isa->kr;
    t->bytes16 = qmm_round(t->nr16 * 8 + qmm_round(t->k, t->kr16) * t->nr16 * 2, 64);
    t->nr8 = isa->u8s8_nr ? isa->u8s8_nr : isa->nr;
    t->bytes8 = qmm_round(t->nr8 * 8 + qmm_round(t->k, VKI_U8S8_KR) * t->nr8, 64);
    const size_t s16 = (t->n + t->nr16 - 1) / t->nr16 * t->bytes16, s8 = (t->n + t->nr8 - 1) / t->nr8 * t->bytes8;
    t->slot = t->u8s8 && s8 > s16 ? s8 : s16;
    uint64_t nbb = 1;
    for (uint32_t d = 0; d < t->batch_rank; d++)
        if (t->bs[d][1]) nbb *= t->batch[d];
    t->nbb = (uint32_t)nbb;
    t->isa = isa;
    /* Heads innermost in A, B and Y (the NHWC form of [1, heads, m, k] x [1, heads, k, n]): the interleaved path.
     * The per-batch path scattered Y and gathered A and B byte by byte at stride nb: yoloseg's attention (4 heads,
     * 1 thread) Q x K^T 676 -> 289 us, P x V 703 -> 413 us (ORT: 385, 552). */
    if (t->batch_rank == 1 && t->nb >= 2 && t->nb <= 64 && t->bs[0][0] == 1 && t->bs[0][1] == 1 &&
        t->bs[0][2] == 1 && t->ak == t->nb && t->bn == t->nb && t->yn == t->nb)
        t->ilv = t->nb;
#ifdef QMM_DIRECT
    /* The scalar variant keeps the baseline (SSE2) split, so that forcing it tests that body too. */
    __builtin_cpu_init();
    t->ssse3 = __builtin_cpu_supports("ssse3") && strcmp(isa->name, "scalar") != 0;
    /* A few rows: the direct path (B's columns contiguous per group; heads interleaved at 2 or 4). */
    const int v5 = strcmp(isa->name, "avx512vnni") == 0, a2 = strcmp(isa->name, "avx2") == 0;
    if (t->m <= QMM_DIRECT_M && t->k <= 65536 && (v5 || a2) &&
        (t->ilv ? t->ilv == 2 || t->ilv == 4 : t->bn == 1 && t->yn == 1))
        t->direct = v5 ? 2 : 1;
#endif
}

static vki_status qmm_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    qmm_t* t = p;
    if (!t->nb || !t->m || !t->n) return VKI_OK;
#ifdef QMM_DIRECT
    if (t->direct) {
        qmm_job j = {t, ptr, 0, QMM_CHUNK, 0};
        const size_t w = (size_t)t->n * (t->ilv ? t->ilv : 1), groups = t->ilv ? 1 : t->nb;
        vki_for_items(groups * ((w + QMM_DIRECT_COLS - 1) / QMM_DIRECT_COLS), (uint64_t)t->nb * t->m * t->n * t->k,
                      threads, qmm_direct_item, &j);
        if (j.failed) FAIL(VKI_ENOMEM, "qmatmul: out of memory");
        return VKI_OK;
    }
#endif
    if (t->isa) return qmm_run_blocked(t, ptr, threads);
    qmm_job j = {t, ptr, 0, QMM_CHUNK, 0};
    size_t items = (size_t)t->nb * ((t->m + QMM_ROWS - 1) / QMM_ROWS);
    vki_for_items(items, (uint64_t)t->nb * t->m * t->n * (t->k + 1), threads, qmm_item, &j);
    if (j.failed) FAIL(VKI_ENOMEM, "qmatmul: out of memory");
    return VKI_OK;
}

/* The last byte + 1 an operand touches: 1 + sum (dim - 1) * stride over its axes (0 when a dimension is 0). */
static uint64_t extent(const qmm_t* t, int which, uint64_t d0, uint64_t s0, uint64_t d1, uint64_t s1)
{
    if (!d0 || !d1 || !t->nb) return 0;
    uint64_t e = (d0 - 1) * s0 + (d1 - 1) * s1;
    for (uint32_t d = 0; d < t->batch_rank; d++) e += (t->batch[d] - 1) * t->bs[d][which];
    return e + 1;
}

vki_status vki_graph_add_qmatmul(vki_graph* g, uint32_t batch_rank, const uint32_t* batch, const uint64_t* strides,
                                 uint32_t m, uint32_t k, uint32_t n, int32_t a_zp, int32_t b_zp, float scale,
                                 int32_t y_zp, int32_t lo, int32_t hi, vki_ref a, vki_ref b, vki_ref y)
{
    if (batch_rank > QMM_MAX_BATCH || (batch_rank && !batch) || !strides)
        FAIL(VKI_EINVAL, "qmatmul: at most %d batch axes, with strides", QMM_MAX_BATCH);
    if (a_zp < 0 || a_zp > 255 || b_zp < 0 || b_zp > 255 || y_zp < 0 || y_zp > 255)
        FAIL(VKI_EINVAL, "qmatmul: zero points must be canonical bytes");
    if (lo < 0 || hi > 255 || lo > hi) FAIL(VKI_EINVAL, "qmatmul: bad clamp [%d, %d]", lo, hi);
    if (!(scale >= 0.0f) || vki_mul2(k, n) > (UINT64_C(1) << 31))
        FAIL(VKI_EINVAL, "qmatmul: bad scale or K x N past 2^31");
    qmm_t* t = calloc(1, sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "qmatmul: out of memory");
    *t = (qmm_t){.m = m, .k = k, .n = n, .batch_rank = batch_rank, .a_zp = a_zp, .b_zp = b_zp, .scale = scale,
                 .lo = lo, .hi = hi};
    t->q = (vki_qparams){a_zp, y_zp, (float)(lo - y_zp), (float)(hi - y_zp)};
    t->am = strides[0];
    t->ak = strides[1];
    t->bk = strides[2];
    t->bn = strides[3];
    t->ym = strides[4];
    t->yn = strides[5];
    uint64_t nb = 1;
    for (uint32_t d = 0; d < batch_rank; d++) {
        t->batch[d] = batch[d];
        nb = vki_mul2(nb, batch[d]);
        for (int w = 0; w < 3; w++) t->bs[d][w] = strides[6 + 3 * d + w];
    }
    for (uint32_t d = 0; d < 6 + 3 * batch_rank; d++)
        if (strides[d] > (UINT64_C(1) << 40)) {
            free(t);
            FAIL(VKI_EINVAL, "qmatmul: stride %u past 2^40", d);
        }
    t->nb = (uint32_t)nb;
    if (nb > UINT32_MAX) {
        free(t);
        FAIL(VKI_EINVAL, "qmatmul: too many batches");
    }
    uint64_t need[3] = {k ? extent(t, 0, m, t->am, k, t->ak) : 0, k ? extent(t, 1, k, t->bk, n, t->bn) : 0,
                        extent(t, 2, m, t->ym, n, t->yn)};
    vki_ref refs[3] = {a, b, y};
    qmm_plan(t);
    char name[VKI_GRAPH_NAME_LEN];  /* "qmatmul:avx512vnni": the blocked path's variant ("qmatmul": the loop) */
    snprintf(name, sizeof name, t->isa ? "qmatmul:%s" : "qmatmul", t->isa ? t->isa->name : "");
    return vki_graph_push(g, name, qmm_run, qmm_free, t, 3, refs, need);
}
