/* The native graph's float32 linear Resize, bilinear (2 axes) or trilinear (3 axes) over the innermost axes of
 * nc leading slices, with ONNX Runtime 1.31's arithmetic (UpsampleBilinear / UpsampleTrilinear; vkinfer/cpu/
 * float_resize.py lowers to it, vkinfer/model/resize.py `resize_linear` is the definition). The per-axis taps and
 * float32 weights are ORT's (computed once by the lowering, copied here): for output index o of an axis, i1, i2
 * and d1, d2. Each output is the sum over the 2^n corners, the outer axis first and the i1 side before i2, of
 * (weight product from the innermost axis outwards) * value, added left to right in float32:
 *     bilinear:  dx2*dy2*X11 + dx1*dy2*X21 + dx2*dy1*X12 + dx1*dy1*X22       (Xxy: x from in_x1/2, y from in_y1/2)
 *     trilinear: ((dx2*dy2)*dz2)*X111 + ((dx1*dy2)*dz2)*X211 + ... + ((dx1*dy1)*dz1)*X222
 * with one rounding per operation (the library is built -ffp-contract=off). An output whose original coordinate on
 * some axis lies outside the input (tf_crop_and_resize; the `outside` flag of the tap) is `extrapolation`.
 * dims (copied): n, inner, then per axis (outer to inner) input size, output size; `inner` values follow each
 * interpolated position (1, or bilinear NHWC's channels: ORT's NhwcUpsampleBilinear, the same arithmetic per
 * element). taps: per axis, per output index (i1, i2, outside); weights: per axis, per output index (d1, d2). */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

typedef float uf32 __attribute__((aligned(1), may_alias));

typedef struct {
    uint32_t n;
    uint64_t nc, inner, in[3], out[3], in_size, out_size;  /* sizes count `inner` values per position */
    uint32_t* taps[3];   /* per axis: 3 * out[a] entries (into `mem`) */
    float* w[3];         /* per axis: 2 * out[a] entries */
    float extrapolation;
    void* mem;
} frs_t;

typedef struct {
    const frs_t* q;
    const uint8_t* x;
    uint8_t* y;
} frs_job;

#define FRS_CHUNK 256 /* output columns whose weight products are formed at once (on the stack) */

/* Per output row and chunk of columns, the four weight products dx * dy (the expression's first multiply, the
 * same float operation as ORT's per element) are formed together, then each output sums its four terms. */
static void bilinear_slice(const frs_t* q, const uf32* x, uf32* y)
{
    const uint32_t *ty = q->taps[0], *tx = q->taps[1];
    const float *wy = q->w[0], *wx = q->w[1];
    const uint64_t k = q->inner, iw = q->in[1] * k, ow = q->out[1] * k, nx = q->out[1];
    float w11[FRS_CHUNK], w21[FRS_CHUNK], w12[FRS_CHUNK], w22[FRS_CHUNK];
    for (uint64_t oy = 0; oy < q->out[0]; oy++) {
        const uf32* r1 = x + ty[3 * oy] * iw;
        const uf32* r2 = x + ty[3 * oy + 1] * iw;
        const float dy1 = wy[2 * oy], dy2 = wy[2 * oy + 1];
        uf32* yr = y + oy * ow;
        if (ty[3 * oy + 2]) {
            for (uint64_t i = 0; i < ow; i++) yr[i] = q->extrapolation;
            continue;
        }
        for (uint64_t c0 = 0; c0 < nx; c0 += FRS_CHUNK) {
            const uint64_t n = nx - c0 < FRS_CHUNK ? nx - c0 : FRS_CHUNK;
            const float* wc = wx + 2 * c0;
            for (uint64_t i = 0; i < n; i++) {
                w11[i] = wc[2 * i + 1] * dy2;
                w21[i] = wc[2 * i] * dy2;
                w12[i] = wc[2 * i + 1] * dy1;
                w22[i] = wc[2 * i] * dy1;
            }
            const uint32_t* tc = tx + 3 * c0;
            if (k == 1) {
                for (uint64_t i = 0; i < n; i++) {
                    const uint32_t* t = tc + 3 * i;
                    float v = w11[i] * r1[t[0]];
                    v += w21[i] * r1[t[1]];
                    v += w12[i] * r2[t[0]];
                    v += w22[i] * r2[t[1]];
                    yr[c0 + i] = t[2] ? q->extrapolation : v;
                }
                continue;
            }
            for (uint64_t i = 0; i < n; i++) {
                uf32* yo = yr + (c0 + i) * k;
                const uint32_t* t = tc + 3 * i;
                if (t[2]) {
                    for (uint64_t c = 0; c < k; c++) yo[c] = q->extrapolation;
                    continue;
                }
                const uint64_t x1 = t[0] * k, x2 = t[1] * k;
                for (uint64_t c = 0; c < k; c++) {
                    float v = w11[i] * r1[x1 + c];
                    v += w21[i] * r1[x2 + c];
                    v += w12[i] * r2[x1 + c];
                    v += w22[i] * r2[x2 + c];
                    yo[c] = v;
                }
            }
        }
    }
}

static void trilinear_slice(const frs_t* q, const uf32* x, uf32* y)
{
    const uint32_t *tz = q->taps[0], *ty = q->taps[1], *tx = q->taps[2];
    const float *wz = q->w[0], *wy = q->w[1], *wx = q->w[2];
    const uint64_t ih = q->in[1], iw = q->in[2];
    uint64_t o = 0;
    for (uint64_t oz = 0; oz < q->out[0]; oz++) {
        const uf32* p[2] = {x + tz[3 * oz] * ih * iw, x + tz[3 * oz + 1] * ih * iw};
        const float dz[2] = {wz[2 * oz + 1], wz[2 * oz]};  /* the i1 plane takes d2, the i2 plane d1 */
        for (uint64_t oy = 0; oy < q->out[1]; oy++) {
            const uint64_t ry[2] = {ty[3 * oy] * iw, ty[3 * oy + 1] * iw};
            const float dy[2] = {wy[2 * oy + 1], wy[2 * oy]};
            for (uint64_t ox = 0; ox < q->out[2]; ox++, o++) {
                if (tz[3 * oz + 2] || ty[3 * oy + 2] || tx[3 * ox + 2]) {
                    y[o] = q->extrapolation;
                    continue;
                }
                const uint32_t cx[2] = {tx[3 * ox], tx[3 * ox + 1]};
                const float dx[2] = {wx[2 * ox + 1], wx[2 * ox]};
                float v = 0.0f;
                int first = 1;
                for (int a = 0; a < 2; a++)
                    for (int b = 0; b < 2; b++)
                        for (int c = 0; c < 2; c++) {
                            float t = dx[c] * dy[b] * dz[a] * p[a][ry[b] + cx[c]];
                            v = first ? t : v + t;  /* the first term starts the sum (no 0 + ...) */
                            first = 0;
                        }
                y[o] = v;
            }
        }
    }
}

static void frs_item(void* ctx, size_t s)
{
    const frs_job* j = ctx;
    const frs_t* q = j->q;
    const uf32* x = (const uf32*)j->x + (uint64_t)s * q->in_size;
    uf32* y = (uf32*)j->y + (uint64_t)s * q->out_size;
    if (q->n == 2) bilinear_slice(q, x, y);
    else trilinear_slice(q, x, y);
}

static vki_status frs_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const frs_t* q = p;
    frs_job j = {q, ptr[0], ptr[1]};
    vki_for_items(q->nc, q->nc * q->out_size * (q->n == 2 ? 8 : 24), threads, frs_item, &j);
    return VKI_OK;
}

static void frs_free(void* p)
{
    frs_t* q = p;
    free(q->mem);
    free(q);
}

vki_status vki_graph_add_float_resize(vki_graph* g, uint64_t nc, const uint32_t* dims, const uint32_t* taps,
                                      const float* weights, float extrapolation, vki_ref x, vki_ref y)
{
    if (!dims || !taps || !weights) FAIL(VKI_EINVAL, "float_resize: dims, taps and weights must not be NULL");
    uint32_t n = dims[0], inner = dims[1];
    if (n != 2 && n != 3) FAIL(VKI_EINVAL, "float_resize: %u interpolated axes (2 or 3)", n);
    if (!inner || (n == 3 && inner != 1))
        FAIL(VKI_EINVAL, "float_resize: %u values per position (positive; 1 for trilinear)", inner);
    if (!nc || nc > ((uint64_t)1 << 40)) FAIL(VKI_EINVAL, "float_resize: %llu slices", (unsigned long long)nc);
    frs_t q;
    memset(&q, 0, sizeof q);
    q.n = n;
    q.nc = nc;
    q.inner = inner;
    q.extrapolation = extrapolation;
    q.in_size = q.out_size = inner;
    uint64_t n_taps = 0;
    for (uint32_t a = 0; a < n; a++) {
        q.in[a] = dims[2 + 2 * a];
        q.out[a] = dims[3 + 2 * a];
        if (!q.in[a] || !q.out[a]) FAIL(VKI_EINVAL, "float_resize: axis %u: sizes must be positive", a);
        q.in_size *= q.in[a];
        q.out_size *= q.out[a];
        n_taps += q.out[a];
    }
    if (q.in_size > ((uint64_t)1 << 40) || q.out_size > ((uint64_t)1 << 40) ||
        nc > ((uint64_t)1 << 40) / q.in_size || nc > ((uint64_t)1 << 40) / q.out_size)
        FAIL(VKI_EINVAL, "float_resize: tensor too large");
    /* every tap index inside its axis (the flag 0 or 1) */
    const uint32_t* t = taps;
    for (uint32_t a = 0; a < n; a++)
        for (uint64_t o = 0; o < q.out[a]; o++, t += 3)
            if (t[0] >= q.in[a] || t[1] >= q.in[a] || t[2] > 1)
                FAIL(VKI_EINVAL, "float_resize: axis %u output %llu: taps (%u, %u, %u) outside the input of %llu", a,
                     (unsigned long long)o, t[0], t[1], t[2], (unsigned long long)q.in[a]);
    uint64_t need[2] = {nc * q.in_size * 4, nc * q.out_size * 4};
    if (x.bytes == need[0] && y.bytes == need[1] && vki_refs_overlap(x, y))
        FAIL(VKI_EINVAL, "float_resize: x and y overlap");
    q.mem = malloc(n_taps * (3 * sizeof(uint32_t) + 2 * sizeof(float)));
    frs_t* h = malloc(sizeof *h);
    if (!q.mem || !h) {
        free(q.mem);
        free(h);
        FAIL(VKI_ENOMEM, "float_resize: out of memory");
    }
    memcpy(q.mem, taps, n_taps * 3 * sizeof(uint32_t));
    float* wmem = (float*)((uint32_t*)q.mem + 3 * n_taps);
    memcpy(wmem, weights, n_taps * 2 * sizeof(float));
    uint64_t off = 0;
    for (uint32_t a = 0; a < n; a++) {
        q.taps[a] = (uint32_t*)q.mem + 3 * off;
        q.w[a] = wmem + 2 * off;
        off += q.out[a];
    }
    *h = q;
    vki_ref refs[2] = {x, y};
    return vki_graph_push(g, "float_resize", frs_run, frs_free, h, 2, refs, need);
}
