/* The native graph's QLinearMatMul of two activations (attention's Q x K^T and P x V), batched with numpy
 * broadcast batch axes: exact int32 accumulation (wrapping modulo 2^32, as the reference) of
 * (a - a_zp) * (b - b_zp), requantized by vki_requant_scalar (ORT's float32 multiplier, one product, ties to even).
 * Every operand is read and written at byte strides, so any device form (4-D NHWC) works without a copy. */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

#define QMM_MAX_BATCH 4
#define QMM_ROWS 32 /* rows of A per work item: B's packed panel (K x N int16) is made once per item */

typedef struct {
    uint32_t nb, m, k, n, batch_rank;
    uint64_t batch[QMM_MAX_BATCH];
    uint64_t bs[QMM_MAX_BATCH][3];  /* per batch axis: a, b, y strides */
    uint64_t am, ak, bk, bn, ym, yn;
    int32_t a_zp, b_zp;             /* canonical domain */
    float scale;
    vki_qparams q;
    int32_t lo, hi;
} qmm_t;

typedef struct {
    const qmm_t* t;
    uint8_t* const* ptr;
    _Atomic int failed;
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

static vki_status qmm_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const qmm_t* t = p;
    if (!t->nb || !t->m || !t->n) return VKI_OK;
    qmm_job j = {t, ptr, 0};
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
    t->q = (vki_qparams){0, y_zp, (float)(lo - y_zp), (float)(hi - y_zp)};
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
    return vki_graph_push(g, "qmatmul", qmm_run, free, t, 3, refs, need);
}
