/* The native graph's float32 cubic Resize (2-D, or NCHW 4-D with scales 1, 1, h, w: nc slices of h x w) with ONNX
 * Runtime 1.31's ResizeBiCubic arithmetic (vkinfer/cpu/float_resize_cubic.py lowers to it; vkinfer/model/
 * resize_cubic.py is the definition). The taps and coefficients are ORT's, computed once by the lowering and copied
 * here: per output row oy the 4 clamped input rows, an `outside` flag, Keys' 4 coefficients cy and their sum sy
 * (1 unless exclude_outside); per output column the 4 clamped input columns, the flag, and the 4 normalized
 * coefficients wx = cx / sx. An output is, in float32 and this order, with one rounding per operation (the library
 * is built -ffp-contract=off):
 *     res = +0;  for k in 0..3:  r = +0; for j in 0..3: r += wx[j] * X[row_k][col_j];   res += (r * cy[k]) / sy
 * or the extrapolation value where the row or the column is outside (tf_crop_and_resize).
 * dims (copied): h, w, oh, ow. taps: oh rows of (4 rows, outside) then ow columns of (4 columns, outside);
 * weights: oh rows of (cy0..cy3, sy) then ow columns of (wx0..wx3). */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

typedef float uf32 __attribute__((aligned(1), may_alias));

typedef struct {
    uint64_t nc, h, w, oh, ow;
    float extrapolation;
    uint32_t* taps;  /* 5 * (oh + ow) */
    float* wts;      /* 5 * oh + 4 * ow */
} frc_t;

typedef struct {
    const frc_t* q;
    const uint8_t* x;
    uint8_t* y;
} frc_job;

static void frc_item(void* ctx, size_t s)
{
    const frc_job* j = ctx;
    const frc_t* q = j->q;
    const uf32* x = (const uf32*)j->x + (uint64_t)s * q->h * q->w;
    uf32* y = (uf32*)j->y + (uint64_t)s * q->oh * q->ow;
    const uint32_t *ty = q->taps, *tx = q->taps + 5 * q->oh;
    const float *wy = q->wts, *wx = q->wts + 5 * q->oh;
    for (uint64_t oy = 0; oy < q->oh; oy++) {
        const uint32_t* ry = ty + 5 * oy;
        const float* cy = wy + 5 * oy;
        uf32* yr = y + oy * q->ow;
        for (uint64_t ox = 0; ox < q->ow; ox++) {
            const uint32_t* cx = tx + 5 * ox;
            if (ry[4] || cx[4]) {
                yr[ox] = q->extrapolation;
                continue;
            }
            const float* w = wx + 4 * ox;
            float res = 0.0f;
            for (int k = 0; k < 4; k++) {
                const uf32* row = x + (uint64_t)ry[k] * q->w;
                float r = 0.0f;
                for (int i = 0; i < 4; i++) r += w[i] * row[cx[i]];
                res += (r * cy[k]) / cy[4];
            }
            yr[ox] = res;
        }
    }
}

static vki_status frc_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const frc_t* q = p;
    frc_job j = {q, ptr[0], ptr[1]};
    vki_for_items(q->nc, q->nc * q->oh * q->ow * 40, threads, frc_item, &j);
    return VKI_OK;
}

static void frc_free(void* p)
{
    frc_t* q = p;
    free(q->taps);
    free(q->wts);
    free(q);
}

vki_status vki_graph_add_float_resize_cubic(vki_graph* g, uint64_t nc, const uint32_t* dims, const uint32_t* taps,
                                            const float* weights, float extrapolation, vki_ref x, vki_ref y)
{
    if (!dims || !taps || !weights) FAIL(VKI_EINVAL, "float_resize_cubic: dims, taps and weights must not be NULL");
    frc_t q = {nc, dims[0], dims[1], dims[2], dims[3], extrapolation, NULL, NULL};
    if (!nc || !q.h || !q.w || !q.oh || !q.ow) FAIL(VKI_EINVAL, "float_resize_cubic: sizes must be positive");
    const uint64_t lim = (uint64_t)1 << 40;
    if (nc > lim / (q.h * q.w) || nc > lim / (q.oh * q.ow)) FAIL(VKI_EINVAL, "float_resize_cubic: tensor too large");
    for (uint64_t i = 0; i < q.oh + q.ow; i++) {
        const uint32_t* t = taps + 5 * i;
        uint64_t n = i < q.oh ? q.h : q.w;
        if (t[0] >= n || t[1] >= n || t[2] >= n || t[3] >= n || t[4] > 1)
            FAIL(VKI_EINVAL, "float_resize_cubic: tap set %llu (%u, %u, %u, %u, %u) outside the input of %llu",
                 (unsigned long long)i, t[0], t[1], t[2], t[3], t[4], (unsigned long long)n);
    }
    uint64_t need[2] = {nc * q.h * q.w * 4, nc * q.oh * q.ow * 4};
    if (x.bytes == need[0] && y.bytes == need[1] && vki_refs_overlap(x, y))
        FAIL(VKI_EINVAL, "float_resize_cubic: x and y overlap");
    q.taps = malloc(5 * (q.oh + q.ow) * sizeof(uint32_t));
    q.wts = malloc((5 * q.oh + 4 * q.ow) * sizeof(float));
    frc_t* h = malloc(sizeof *h);
    if (!q.taps || !q.wts || !h) {
        free(q.taps);
        free(q.wts);
        free(h);
        FAIL(VKI_ENOMEM, "float_resize_cubic: out of memory");
    }
    memcpy(q.taps, taps, 5 * (q.oh + q.ow) * sizeof(uint32_t));
    memcpy(q.wts, weights, (5 * q.oh + 4 * q.ow) * sizeof(float));
    *h = q;
    vki_ref refs[2] = {x, y};
    return vki_graph_push(g, "float_resize_cubic", frc_run, frc_free, h, 2, refs, need);
}
