/* The native graph's float32 AveragePool (1 to 3 spatial axes, NC...) with ONNX Runtime 1.31's CPU bits
 * (vkinfer/cpu/float_average_pool.py lowers to it; vkinfer/reference/float_average_pool.py is the definition, which
 * says which loop ORT runs for which node). The loops part in their summation order, so in rounding and signed zeros:
 *   - LOOP_* (ORT's own loops: opset >= 19, dilations, ceil_mode with count_include_pad; and MLAS's generic
 *     kernel): m = +0, then every tap inside the input in
 *     row-major order; divided by the tap count (COUNT), by the product of the kernel sides (KERNEL: MLAS's
 *     count_include_pad), or by the product over axes of 1 + (end - start - 1) / dilation with
 *     end = min(start + kernel * dilation, size + tail pad) (CLIPPED: ORT's own loop's count_include_pad); no tap: +0.
 *   - GLOBAL (MLAS, kernel = image, strides 1, no pads): 4 lanes from +0, lane l sums x[4i + l]; the lanes fold as
 *     (l0 + l2) + (l1 + l3), then the last size % 4 values one by one; / (float)size.
 *   - VECTOR_* (MLAS, 2-D/3-D, last stride <= 2, kernel sides <= 32): per output row, each column sums its window's
 *     rows (2-D: from the first row's value; 3-D: from +0, plane by plane, row by row) into a row buffer with +0 in
 *     the pads and 3 more on the right; each output sums its kw buffer entries from the first (padding included);
 *     divided by the product of the kernel sides (INCLUDE), or by max(1, columns inside * rows inside) (EXCLUDE),
 *     both exact in float.
 * Every division is one IEEE float division. dims (copied): nd, kind, then for each of the nd axes: size, out,
 * kernel, stride, dilation, head pad, tail pad. */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

typedef float uf32 __attribute__((aligned(1), may_alias));

enum { AP_LOOP_COUNT, AP_LOOP_KERNEL, AP_LOOP_CLIPPED, AP_GLOBAL, AP_VECTOR_INCLUDE, AP_VECTOR_EXCLUDE,
       AP_KINDS };
#define AP_BUF 2048     /* MLAS_POOL_REDUCTION_BUFFER_STACK */
#define AP_BUF_PAD 3    /* its over-read padding */

typedef struct {
    uint32_t nd, kind;
    int64_t sz[3], out[3], k[3], s[3], d[3], ph[3], pt[3];  /* axes padded to 3 at the front with 1s / 0s */
    uint64_t nc, in_size, out_size;
} fap_t;

typedef struct {
    const fap_t* q;
    const uint8_t* x;
    uint8_t* y;
} fap_job;

static void loop_channel(const fap_t* q, const uf32* x, uf32* y)
{
    uint64_t o = 0;
    for (int64_t o0 = 0; o0 < q->out[0]; o0++)
        for (int64_t o1 = 0; o1 < q->out[1]; o1++)
            for (int64_t o2 = 0; o2 < q->out[2]; o2++, o++) {
                int64_t st[3] = {o0 * q->s[0] - q->ph[0], o1 * q->s[1] - q->ph[1], o2 * q->s[2] - q->ph[2]};
                float m = 0.0f;
                int64_t count = 0;
                for (int64_t a = 0; a < q->k[0]; a++) {
                    int64_t i0 = st[0] + a * q->d[0];
                    if (i0 < 0 || i0 >= q->sz[0]) continue;
                    for (int64_t b = 0; b < q->k[1]; b++) {
                        int64_t i1 = st[1] + b * q->d[1];
                        if (i1 < 0 || i1 >= q->sz[1]) continue;
                        const uf32* row = x + ((uint64_t)i0 * q->sz[1] + (uint64_t)i1) * q->sz[2];
                        for (int64_t c = 0; c < q->k[2]; c++) {
                            int64_t i2 = st[2] + c * q->d[2];
                            if (i2 < 0 || i2 >= q->sz[2]) continue;
                            m += row[i2];
                            count++;
                        }
                    }
                }
                if (count) {
                    int64_t div = count;
                    if (q->kind == AP_LOOP_KERNEL) {
                        div = q->k[0] * q->k[1] * q->k[2];
                    } else if (q->kind == AP_LOOP_CLIPPED) {
                        div = 1;
                        for (int i = 0; i < 3; i++) {
                            int64_t en = st[i] + q->k[i] * q->d[i], lim = q->sz[i] + q->pt[i];
                            if (en > lim) en = lim;
                            div *= 1 + (en - st[i] - 1) / q->d[i];
                        }
                    }
                    m = m / (float)div;
                }
                y[o] = m;
            }
}

static void global_channel(const fap_t* q, const uf32* x, uf32* y)
{
    uint64_t n = q->in_size, i = 0;
    float r[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (; n - i >= 4; i += 4)
        for (int l = 0; l < 4; l++) r[l] += x[i + l];
    float m = (r[0] + r[2]) + (r[1] + r[3]);
    for (; i < n; i++) m += x[i];
    y[0] = m / (float)n;
}

/* Each column's sum, and each output's, keeps MLAS's order; the loops run along rows (contiguous, vectorised by the
 * compiler) instead of MLAS's 4-column vectors, which changes no operand order. */
static void vector_channel(const fap_t* q, const uf32* x, uf32* y)
{
    float buf[AP_BUF], acc[AP_BUF], hcount[AP_BUF];
    const int64_t w = q->sz[2], pl = q->ph[2], pr = q->pt[2], kw = q->k[2], sw = q->s[2], ow = q->out[2];
    const int three = q->nd == 3;
    float* row = buf + pl;
    for (int64_t i = 0; i < pl; i++) buf[i] = 0.0f;
    for (int64_t i = 0; i < pr + AP_BUF_PAD; i++) row[w + i] = 0.0f;
    const float kernel_size = (float)(q->k[0] * q->k[1] * q->k[2]);
    for (int64_t ox = 0; ox < ow; ox++) {  /* the columns inside the input per output (exclude pad) */
        const int64_t j = ox * sw;
        const int64_t hi = j + kw < pl + w ? j + kw : pl + w, lo = j > pl ? j : pl;
        hcount[ox] = (float)(hi - lo);
    }
    uf32* yo = y;
    for (int64_t o0 = 0; o0 < q->out[0]; o0++) {
        int64_t s0 = o0 * q->s[0] - q->ph[0], e0 = s0 + q->k[0];
        int64_t a0 = s0 < 0 || s0 >= q->sz[0] ? 0 : s0, b0 = e0 > q->sz[0] ? q->sz[0] : e0;  /* MLAS's clip */
        for (int64_t o1 = 0; o1 < q->out[1]; o1++) {
            int64_t s1 = o1 * q->s[1] - q->ph[1], e1 = s1 + q->k[1];
            int64_t a1 = s1 < 0 || s1 >= q->sz[1] ? 0 : s1, b1 = e1 > q->sz[1] ? q->sz[1] : e1;
            if (three) {  /* from +0, plane by plane, row by row */
                for (int64_t c = 0; c < w; c++) row[c] = 0.0f;
                for (int64_t i0 = a0; i0 < b0; i0++)
                    for (int64_t i1 = a1; i1 < b1; i1++) {
                        const uf32* xr = x + ((uint64_t)i0 * q->sz[1] + (uint64_t)i1) * w;
                        for (int64_t c = 0; c < w; c++) row[c] += xr[c];
                    }
            } else {  /* from the first row's value */
                const uf32* x0 = x + (uint64_t)a1 * w;
                for (int64_t c = 0; c < w; c++) row[c] = x0[c];
                for (int64_t i1 = a1 + 1; i1 < b1; i1++) {
                    const uf32* xr = x + (uint64_t)i1 * w;
                    for (int64_t c = 0; c < w; c++) row[c] += xr[c];
                }
            }
            if (sw == 1) {
                for (int64_t ox = 0; ox < ow; ox++) acc[ox] = buf[ox];
                for (int64_t t = 1; t < kw; t++)
                    for (int64_t ox = 0; ox < ow; ox++) acc[ox] += buf[ox + t];
            } else {
                for (int64_t ox = 0; ox < ow; ox++) acc[ox] = buf[ox * sw];
                for (int64_t t = 1; t < kw; t++)
                    for (int64_t ox = 0; ox < ow; ox++) acc[ox] += buf[ox * sw + t];
            }
            if (q->kind == AP_VECTOR_EXCLUDE) {
                const float rows = (float)((b0 - a0) * (b1 - a1));
                for (int64_t ox = 0; ox < ow; ox++) {
                    float div = hcount[ox] * rows;
                    div = div >= 1.0f ? div : 1.0f;  /* MLAS: max(divisor, 1) */
                    yo[ox] = acc[ox] / div;
                }
            } else {
                for (int64_t ox = 0; ox < ow; ox++) yo[ox] = acc[ox] / kernel_size;
            }
            yo += ow;
        }
    }
}

static void fap_item(void* ctx, size_t ch)
{
    const fap_job* j = ctx;
    const fap_t* q = j->q;
    const uf32* x = (const uf32*)j->x + (uint64_t)ch * q->in_size;
    uf32* y = (uf32*)j->y + (uint64_t)ch * q->out_size;
    if (q->kind == AP_GLOBAL) global_channel(q, x, y);
    else if (q->kind == AP_VECTOR_INCLUDE || q->kind == AP_VECTOR_EXCLUDE) vector_channel(q, x, y);
    else loop_channel(q, x, y);
}

static vki_status fap_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const fap_t* q = p;
    fap_job j = {q, ptr[0], ptr[1]};
    uint64_t work = q->nc * q->out_size * (uint64_t)(q->k[0] * q->k[1] * q->k[2]);
    vki_for_items(q->nc, work, threads, fap_item, &j);
    return VKI_OK;
}

vki_status vki_graph_add_float_avgpool(vki_graph* g, uint64_t nc, const uint32_t* dims, vki_ref x, vki_ref y)
{
    if (!dims) FAIL(VKI_EINVAL, "float_avgpool: dims is NULL");
    fap_t q;
    memset(&q, 0, sizeof q);
    q.nd = dims[0];
    q.kind = dims[1];
    q.nc = nc;
    if (q.nd < 1 || q.nd > 3) FAIL(VKI_EINVAL, "float_avgpool: %u spatial axes (1 to 3)", q.nd);
    if (q.kind >= AP_KINDS) FAIL(VKI_EINVAL, "float_avgpool: loop kind %u is not one of 0..%d", q.kind, AP_KINDS - 1);
    if (!nc) FAIL(VKI_EINVAL, "float_avgpool: no channels");
    q.in_size = q.out_size = 1;
    for (uint32_t i = 0; i < 3; i++) {
        uint32_t a = i + q.nd - 3;  /* the axis in dims, when i >= 3 - nd */
        if (i + q.nd < 3) {
            q.sz[i] = q.out[i] = q.k[i] = q.s[i] = q.d[i] = 1;
            continue;
        }
        const uint32_t* v = dims + 2 + 7 * a;
        q.sz[i] = v[0], q.out[i] = v[1], q.k[i] = v[2], q.s[i] = v[3], q.d[i] = v[4], q.ph[i] = v[5], q.pt[i] = v[6];
        if (!v[0] || !v[1] || !v[2] || !v[3] || !v[4])
            FAIL(VKI_EINVAL, "float_avgpool: axis %u: size, output, kernel, stride and dilation must be positive", a);
        if (v[2] > 4096 || v[4] > 4096 || v[5] > (1u << 24) || v[6] > (1u << 24))
            FAIL(VKI_EINVAL, "float_avgpool: axis %u: kernel %u, dilation %u or pads (%u, %u) too large", a, v[2], v[4],
                 v[5], v[6]);
        /* every window starts before the end of the input (ORT's output sizes guarantee it) */
        if ((uint64_t)(v[1] - 1) * v[3] >= (uint64_t)v[0] + v[5])
            FAIL(VKI_EINVAL, "float_avgpool: axis %u: output %u has a window starting past the input %u", a, v[1], v[0]);
        q.in_size *= v[0];
        q.out_size *= v[1];
    }
    if (q.in_size > ((uint64_t)1 << 40) || q.out_size > ((uint64_t)1 << 40))
        FAIL(VKI_EINVAL, "float_avgpool: spatial sizes too large");
    if (q.kind == AP_GLOBAL) {
        for (int i = 0; i < 3; i++)
            if (q.k[i] != q.sz[i] || q.s[i] != 1 || q.ph[i] || q.pt[i] || q.out[i] != 1)
                FAIL(VKI_EINVAL, "float_avgpool: the global loop needs kernel = input, strides 1, no pads");
    }
    if (q.kind == AP_VECTOR_INCLUDE || q.kind == AP_VECTOR_EXCLUDE) {
        if (q.nd < 2) FAIL(VKI_EINVAL, "float_avgpool: the vector loop takes 2 or 3 spatial axes");
        for (int i = 0; i < 3; i++) {
            if (q.d[i] != 1 || q.k[i] > 32 || q.ph[i] >= q.k[i] || q.pt[i] >= q.k[i])
                FAIL(VKI_EINVAL, "float_avgpool: the vector loop needs dilation 1, kernel sides <= 32, pads < kernel");
        }
        if (q.s[2] > 2) FAIL(VKI_EINVAL, "float_avgpool: the vector loop needs a last stride <= 2");
        uint64_t filled = (uint64_t)q.ph[2] + q.sz[2] + q.pt[2] + AP_BUF_PAD;
        if (filled > AP_BUF || (uint64_t)(q.out[2] - 1) * q.s[2] + q.k[2] > filled)
            FAIL(VKI_EINVAL, "float_avgpool: the padded row does not fit MLAS's %d-float buffer", AP_BUF);
    }
    uint64_t need[2] = {nc * q.in_size * 4, nc * q.out_size * 4};
    if (nc > ((uint64_t)1 << 40) / q.in_size || nc > ((uint64_t)1 << 40) / q.out_size)
        FAIL(VKI_EINVAL, "float_avgpool: tensor too large");
    if (x.bytes == need[0] && y.bytes == need[1] && vki_refs_overlap(x, y))
        FAIL(VKI_EINVAL, "float_avgpool: x and y overlap");
    fap_t* t = malloc(sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "float_avgpool: out of memory");
    *t = q;
    vki_ref refs[2] = {x, y};
    return vki_graph_push(g, "float_avgpool", fap_run, free, t, 2, refs, need);
}
