/* The native graph's TFLite int8 BATCH_MATMUL as its builtin kernel runs it (b's zero point nonzero; with 0 litert
 * delegates to XNNPACK, whose float32 requantization is the qmatmul operator's), vkinfer/reference/
 * tflite_batch_matmul.py, on canonical bytes, batched over numpy-broadcast batch axes, every operand at byte
 * strides in its CPU form (adj_x / adj_y are swapped strides; 4-D NHWC needs no copy):
 *     acc = sum_k (a[.., m, k] - a_zp) * (b[.., k, n] - b_zp)            exact int32 (|acc| < 2^31 checked)
 *     v   = RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(acc, q), -shift)    (gemmlowp's two roundings)
 *     y   = clamp(v + y_zp) in the canonical domain
 * Only shift <= 0 (a multiplier below 1) is taken: the reference refuses the others. */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

#define TBM_MAX_BATCH 4

typedef struct {
    uint32_t nb, m, k, n, batch_rank;
    uint64_t batch[TBM_MAX_BATCH];
    uint64_t bs[TBM_MAX_BATCH][3]; /* per batch axis: a, b, y strides */
    uint64_t am, ak, bk, bn, ym, yn;
    int32_t a_zp, b_zp, y_zp;      /* canonical domain */
    int32_t q, shift;
} tbm_t;

typedef struct {
    const tbm_t* t;
    uint8_t* const* ptr;
    _Atomic int failed;
} tbm_job;

static int32_t tbm_requant(const tbm_t* t, int32_t acc)
{
    int64_t ab = (int64_t)acc * t->q;
    int64_t nudge = ab >= 0 ? (INT64_C(1) << 30) : 1 - (INT64_C(1) << 30);
    int64_t hi = (ab + nudge) / (INT64_C(1) << 31);  /* C division truncates toward zero, as gemmlowp's */
    int e = -t->shift;
    int64_t mask = ((int64_t)1 << e) - 1, rem = hi & mask, thr = (mask >> 1) + (hi < 0);
    int64_t v = (hi >> e) + (rem > thr) + t->y_zp;
    return (int32_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

static void tbm_item(void* p, size_t item)
{
    tbm_job* j = p;
    const tbm_t* t = j->t;
    uint64_t oa = 0, ob = 0, oy = 0, rest = item;
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
    int32_t* acc = malloc((size_t)t->n * sizeof *acc + 1);
    if (!panel || !acc) {
        free(panel);
        free(acc);
        j->failed = 1;
        return;
    }
    for (uint32_t kk = 0; kk < t->k; kk++)
        for (uint32_t c = 0; c < t->n; c++)
            panel[(size_t)kk * t->n + c] = (int16_t)((int32_t)b[kk * t->bk + c * t->bn] - t->b_zp);
    for (uint64_t r = 0; r < t->m; r++) {
        memset(acc, 0, (size_t)t->n * sizeof *acc);
        const uint8_t* ar = a + r * t->am;
        for (uint32_t kk = 0; kk < t->k; kk++) {
            const int32_t av = (int32_t)ar[kk * t->ak] - t->a_zp;
            const int16_t* pr = panel + (size_t)kk * t->n;
            for (uint32_t c = 0; c < t->n; c++) acc[c] += av * (int32_t)pr[c];  /* |sum| < 2^31: checked */
        }
        uint8_t* yr = y + r * t->ym;
        for (uint32_t c = 0; c < t->n; c++) yr[c * t->yn] = (uint8_t)tbm_requant(t, acc[c]);
    }
    free(panel);
    free(acc);
}

static vki_status tbm_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const tbm_t* t = p;
    tbm_job j = {t, ptr, 0};
    vki_for_items(t->nb, (uint64_t)t->nb * t->m * t->n * (t->k + 1), threads, tbm_item, &j);
    if (j.failed) FAIL(VKI_ENOMEM, "tflite_batch_matmul: out of memory");
    return VKI_OK;
}

static uint64_t tbm_extent(const tbm_t* t, int which, uint64_t d0, uint64_t s0, uint64_t d1, uint64_t s1)
{
    uint64_t e = (d0 - 1) * s0 + (d1 - 1) * s1;
    for (uint32_t d = 0; d < t->batch_rank; d++) e += (t->batch[d] - 1) * t->bs[d][which];
    return e + 1;
}

vki_status vki_graph_add_tflite_batch_matmul(vki_graph* g, uint32_t batch_rank, const uint32_t* batch,
                                             const uint64_t* strides, uint32_t m, uint32_t k, uint32_t n,
                                             int32_t a_zp, int32_t b_zp, int32_t y_zp, int32_t q, int32_t shift,
                                             vki_ref a, vki_ref b, vki_ref y)
{
    if (batch_rank > TBM_MAX_BATCH || (batch_rank && !batch) || !strides)
        FAIL(VKI_EINVAL, "tflite_batch_matmul: at most %d batch axes, with strides", TBM_MAX_BATCH);
    if (!m || !k || !n) FAIL(VKI_EINVAL, "tflite_batch_matmul: m, k and n must be positive");
    if (a_zp < 0 || a_zp > 255 || b_zp < 0 || b_zp > 255 || y_zp < 0 || y_zp > 255)
        FAIL(VKI_EINVAL, "tflite_batch_matmul: zero points must be canonical bytes");
    if (q < (1 << 30) || shift > 0 || shift < -31)
        FAIL(VKI_EINVAL, "tflite_batch_matmul: multiplier %d must lie in [2^30, 2^31) and shift %d in [-31, 0]", q,
             shift);
    /* every |(a - a_zp)(b - b_zp)| <= 255 * 255, so k of them stay below 2^31 */
    if ((uint64_t)k * 255 * 255 >= (UINT64_C(1) << 31) || vki_mul2(k, n) > (UINT64_C(1) << 31))
        FAIL(VKI_EINVAL, "tflite_batch_matmul: K = %u may overflow the int32 accumulator", k);
    tbm_t* t = calloc(1, sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "tflite_batch_matmul: out of memory");
    *t = (tbm_t){.m = m, .k = k, .n = n, .batch_rank = batch_rank, .a_zp = a_zp, .b_zp = b_zp, .y_zp = y_zp,
                 .q = q, .shift = shift};
    t->am = strides[0];
    t->ak = strides[1];
    t->bk = strides[2];
    t->bn = strides[3];
    t->ym = strides[4];
    t->yn = strides[5];
    uint64_t nb = 1;
    for (uint32_t d = 0; d < batch_rank; d++) {
        t->batch[d] = batch[d] ? batch[d] : 1;
        nb = vki_mul2(nb, t->batch[d]);
        for (int w = 0; w < 3; w++) t->bs[d][w] = strides[6 + 3 * d + w];
    }
    for (uint32_t d = 0; d < 6 + 3 * batch_rank; d++)
        if (strides[d] > (UINT64_C(1) << 40)) {
            free(t);
            FAIL(VKI_EINVAL, "tflite_batch_matmul: stride %u past 2^40", d);
        }
    if (nb > UINT32_MAX) {
        free(t);
        FAIL(VKI_EINVAL, "tflite_batch_matmul: too many batches");
    }
    t->nb = (uint32_t)nb;
    uint64_t need[3] = {tbm_extent(t, 0, m, t->am, k, t->ak), tbm_extent(t, 1, k, t->bk, n, t->bn),
                        tbm_extent(t, 2, m, t->ym, n, t->yn)};
    vki_ref refs[3] = {a, b, y};
    return vki_graph_push(g, "tflite_batch_matmul", tbm_run, free, t, 3, refs, need);
}
