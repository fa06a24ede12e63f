/* The native graph's float32 MaxPool (2-D, NCHW) with ONNX Runtime 1.31's CPU bits (vkinfer/cpu/float_max_pool.py
 * lowers to it).
 *
 * ORT picks one of four loops, and they part on signed zeros, NaN and -inf because each takes the maximum with
 * another operand order (vkinfer/reference notes; measured in tests/ops/test_float_max_pool.py):
 *   - MLAS's generic kernel (horizontal stride > 2, a kernel side > 32, or a row too wide for its stack buffer):
 *     m = lowest float; for every tap inside the image, in row-major order, m = x > m ? x : m (std::max(m, x)).
 *     NaN never enters; a window of -inf gives -FLT_MAX.
 *   - dilation > 1 (MaxPool-8's own loop, ORT 1.31): the same fold but from the window's first tap inside the image
 *     (measured: a NaN first tap stays NaN, a window of -inf gives -inf); a window without such a tap, lowest.
 *   - MLAS's global kernel (kernel = image, strides 1, no pads): 4 lanes of lowest, lane l takes
 *     x[4i + l] by SSE's max (r > x ? r : x: NaN and ties take x), the lanes fold as max(max(l0, l2), max(l1, l3)),
 *     the remaining hw % 4 values by std::max.
 *   - MLAS's vector kernel (horizontal stride <= 2, kernel sides <= 32): per output row, each column first folds
 *     its window's rows (SSE max from the first row on, for the columns in whole groups of 4 from column 0;
 *     std::max for the last w % 4 columns), into a row buffer padded with lowest on both sides (pads, and 3 more on
 *     the right); then each output folds its kw buffer entries by SSE max from the first. Padding is lowest here.
 * Windows are clipped to the image before the loops (rows) exactly as MLAS clips them. */
#include <float.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif

typedef float uf32 __attribute__((aligned(1), may_alias));

#define MLAS_BUF 2048      /* MLAS_POOL_REDUCTION_BUFFER_STACK */
#define MLAS_BUF_PAD 3     /* MLAS_POOL_REDUCTION_BUFFER_PADDING: one vector's over-read */

enum { KIND_LOOP, KIND_GLOBAL, KIND_VECTOR, KIND_DILATED };

typedef struct {
    uint32_t nc, h, w, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, kind;
} fmp_t;

typedef struct {
    const fmp_t* q;
    const uint8_t* x;
    uint8_t* y;
} fmp_job;

static inline float sse_max(float r, float x) { return r > x ? r : x; }   /* _mm_max_ps(r, x) per lane */
static inline float std_max(float r, float x) { return r < x ? x : r; }   /* std::max(r, x) */

static void loop_channel(const fmp_t* q, const uf32* x, uf32* y)
{
    for (uint32_t oy = 0; oy < q->oh; oy++) {
        int64_t iy0 = (int64_t)oy * q->sh - q->pt;
        for (uint32_t ox = 0; ox < q->ow; ox++) {
            int64_t ix0 = (int64_t)ox * q->sw - q->pl;
            float m = -FLT_MAX;
            int first = q->kind == KIND_DILATED;  /* MaxPool-8's loop starts from the first tap in the image */
            for (uint32_t ky = 0; ky < q->kh; ky++) {
                int64_t iy = iy0 + (int64_t)ky * q->dh;
                if (iy < 0 || iy >= q->h) continue;
                for (uint32_t kx = 0; kx < q->kw; kx++) {
                    int64_t ix = ix0 + (int64_t)kx * q->dw;
                    if (ix < 0 || ix >= q->w) continue;
                    float v = x[iy * q->w + ix];
                    m = first ? v : std_max(m, v);
                    first = 0;
                }
            }
            y[(uint64_t)oy * q->ow + ox] = m;
        }
    }
}

static void global_channel(const fmp_t* q, const uf32* x, uf32* y)
{
    uint64_t n = (uint64_t)q->h * q->w, i = 0;
    float r[4] = {-FLT_MAX, -FLT_MAX, -FLT_MAX, -FLT_MAX};
    for (; n - i >= 4; i += 4)
        for (int l = 0; l < 4; l++) r[l] = sse_max(r[l], x[i + l]);
    float m = sse_max(sse_max(r[0], r[2]), sse_max(r[1], r[3]));
    for (; i < n; i++) m = std_max(m, x[i]);
    y[0] = m;
}

static void vector_channel(const fmp_t* q, const uf32* x, uf32* y)
{
    float buf[MLAS_BUF];
    uint32_t w = q->w, full = w / 4 * 4;
    float* row = buf + q->pl;
    for (uint32_t i = 0; i < q->pl; i++) buf[i] = -FLT_MAX;
    for (uint32_t i = 0; i < q->pr + MLAS_BUF_PAD; i++) row[w + i] = -FLT_MAX;
    for (uint32_t oy = 0; oy < q->oh; oy++) {
        int64_t s = (int64_t)oy * q->sh - q->pt, e = s + q->kh;
        uint32_t r0 = s < 0 || s >= q->h ? 0 : (uint32_t)s;  /* MLAS: a start before the image wraps to 0 */
        uint32_t r1 = e > q->h ? q->h : (uint32_t)e;
        const uf32* x0 = x + (uint64_t)r0 * w;
        for (uint32_t c = 0; c < full; c++) {
            float m = x0[c];
            for (uint32_t r = r0 + 1; r < r1; r++) m = sse_max(m, x[(uint64_t)r * w + c]);
            row[c] = m;
        }
        for (uint32_t c = full; c < w; c++) {
            float m = x0[c];
            for (uint32_t r = r0 + 1; r < r1; r++) m = std_max(m, x[(uint64_t)r * w + c]);
            row[c] = m;
        }
        uf32* yr = y + (uint64_t)oy * q->ow;
        for (uint32_t ox = 0; ox < q->ow; ox++) {
            const float* b = buf + (uint64_t)ox * q->sw;
            float m = b[0];
            for (uint32_t k = 1; k < q->kw; k++) m = sse_max(m, b[k]);
            yr[ox] = m;
        }
    }
}

static void fmp_item(void* ctx, size_t ch)
{
    const fmp_job* j = ctx;
    const fmp_t* q = j->q;
    const uf32* x = (const uf32*)j->x + (uint64_t)ch * q->h * q->w;
    uf32* y = (uf32*)j->y + (uint64_t)ch * q->oh * q->ow;
    if (q->kind == KIND_GLOBAL) global_channel(q, x, y);
    else if (q->kind == KIND_VECTOR) vector_channel(q, x, y);
    else loop_channel(q, x, y);
}

static vki_status fmp_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const fmp_t* q = p;
    fmp_job j = {q, ptr[0], ptr[1]};
    uint64_t work = (uint64_t)q->nc * q->oh * q->ow * q->kh * q->kw;
    vki_for_items(q->nc, work, threads, fmp_item, &j);
    return VKI_OK;
}

vki_status vki_graph_add_float_maxpool(vki_graph* g, uint32_t nc, uint32_t h, uint32_t w, uint32_t oh, uint32_t ow,
                                       uint32_t kh, uint32_t kw, uint32_t sh, uint32_t sw, uint32_t dh, uint32_t dw,
                                       uint32_t pt, uint32_t pl, uint32_t pb, uint32_t pr, vki_ref x, vki_ref y)
{
    fmp_t q = {nc, h, w, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, KIND_LOOP};
    if (!nc || !h || !w || !oh || !ow) FAIL(VKI_EINVAL, "float_maxpool: shapes %ux%ux%u -> %ux%u must be positive",
                                            nc, h, w, oh, ow);
    if (!kh || !kw || !sh || !sw || !dh || !dw)
        FAIL(VKI_EINVAL, "float_maxpool: kernel, strides and dilations must be positive");
    if (pt >= kh || pb >= kh || pl >= kw || pr >= kw)
        FAIL(VKI_EINVAL, "float_maxpool: pads (%u, %u, %u, %u) must be smaller than the kernel %ux%u", pt, pl, pb, pr,
             kh, kw);
    /* Every window must start inside the image or its head padding (ORT's output sizes guarantee it; MLAS's vector
     * kernel would read a whole column otherwise) and reach the image (pads < kernel). */
    if ((uint64_t)(oh - 1) * sh >= (uint64_t)h + pt || (uint64_t)(ow - 1) * sw >= (uint64_t)w + pl)
        FAIL(VKI_EINVAL, "float_maxpool: output %ux%u has a window starting past the %ux%u input", oh, ow, h, w);
    if ((uint64_t)(ow - 1) * sw + (uint64_t)(kw - 1) * dw + 1 > (uint64_t)pl + w + pr + sw - 1)
        FAIL(VKI_EINVAL, "float_maxpool: output width %u runs past the padded input", ow);
    if (dh > 1 || dw > 1) {
        q.kind = KIND_DILATED;
    } else {
        uint64_t room = MLAS_BUF - MLAS_BUF_PAD;
        room = room >= pl ? room - pl : 0;
        room = room >= pr ? room - pr : 0;
        if (kh == h && kw == w && sh == 1 && sw == 1 && !pt && !pl && !pb && !pr) q.kind = KIND_GLOBAL;
        else if (sw <= 2 && kh <= 32 && kw <= 32 && room >= w) q.kind = KIND_VECTOR;
    }
    uint64_t need[2] = {vki_mul4(nc, h, w, 4), vki_mul4(nc, oh, ow, 4)};
    if (x.bytes == need[0] && y.bytes == need[1] && vki_refs_overlap(x, y))
        FAIL(VKI_EINVAL, "float_maxpool: x and y overlap");
    fmp_t* t = malloc(sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "float_maxpool: out of memory");
    *t = q;
    vki_ref refs[2] = {x, y};
    return vki_graph_push(g, "float_maxpool", fmp_run, free, t, 2, refs, need);
}
