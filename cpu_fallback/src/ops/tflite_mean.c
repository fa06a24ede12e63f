/* The native graph's TFLite 8-bit MEAN over any axes (XNNPACK's arithmetic, vkinfer/reference/tflite_mean.py)
 * on canonical bytes.
 *
 * x is walked once in its storage order; each element's sum goes to the output element given by the per-axis
 * output strides (0 on a reduced axis), so any axes set and any pair of storage orders (x's form, y's form) is
 * one loop. Integer sums are exact in any order; only the final float32 steps are XNNPACK's:
 *     y = clamp(nearbyintf((float)sum * m + bias), qmin, qmax)
 * with sum over raw values (canonical int8 bytes are raw + 128, so count * 128 comes off), two float32 roundings
 * (the build has -ffp-contract=off: no fused multiply-add) and ties to even (the default rounding mode). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

#define MEAN_MAX_RANK 6

typedef struct {
    uint32_t rank;
    uint64_t shape[MEAN_MAX_RANK];
    uint64_t ostride[MEAN_MAX_RANK];
    uint64_t n_in, n_out;
    uint32_t count;
    int32_t is_signed;
    float m, bias;
} tmean_t;

static vki_status tmean_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    (void)threads;
    const tmean_t* t = p;
    int32_t* acc = calloc(t->n_out ? t->n_out : 1, sizeof *acc);
    if (!acc) FAIL(VKI_ENOMEM, "tflite_mean: out of memory");
    const uint8_t* x = ptr[0];
    uint8_t* y = ptr[1];
    uint32_t r = t->rank;
    uint64_t inner = t->shape[r - 1], istride = t->ostride[r - 1];
    uint64_t idx[MEAN_MAX_RANK] = {0};
    uint64_t base = 0;  /* output offset of the current row (axes 0 .. r-2) */
    for (uint64_t i0 = 0; i0 < t->n_in; i0 += inner) {
        const uint8_t* row = x + i0;
        if (istride == 0) {
            int32_t s = 0;
            for (uint64_t j = 0; j < inner; j++) s += row[j];
            acc[base] += s;
        } else {
            int32_t* a = acc + base;
            for (uint64_t j = 0; j < inner; j++) a[j * istride] += row[j];
        }
        for (int k = (int)r - 2; k >= 0; k--) {  /* odometer over the outer axes */
            base += t->ostride[k];
            if (++idx[k] < t->shape[k]) break;
            base -= t->ostride[k] * t->shape[k];
            idx[k] = 0;
        }
    }
    const int32_t off = t->is_signed ? 128 : 0;
    const int32_t raw_off = off * (int32_t)t->count;
    const float qmin = t->is_signed ? -128.0f : 0.0f, qmax = t->is_signed ? 127.0f : 255.0f;
    for (uint64_t i = 0; i < t->n_out; i++) {
        float v = (float)(acc[i] - raw_off) * t->m;
        v = v + t->bias;
        float q = nearbyintf(v);
        q = q < qmin ? qmin : q > qmax ? qmax : q;
        y[i] = (uint8_t)((int32_t)q + off);
    }
    free(acc);
    return VKI_OK;
}

vki_status vki_graph_add_tflite_mean(vki_graph* g, uint32_t rank, const uint32_t* shape, const uint64_t* ostride,
                                     uint64_t n_out, uint32_t count, int32_t is_signed, float m, float bias, vki_ref x,
                                     vki_ref y)
{
    if (rank < 1 || rank > MEAN_MAX_RANK || !shape || !ostride)
        FAIL(VKI_EINVAL, "tflite_mean: rank must be 1..%d with shape and ostride given", MEAN_MAX_RANK);
    if (!(m > 0.0f) || !isfinite(m) || !isfinite(bias))
        FAIL(VKI_EINVAL, "tflite_mean: the multiplier must be finite and positive, the bias finite");
    if (count < 1 || (uint64_t)count * 255u >= (1u << 31))
        FAIL(VKI_EINVAL, "tflite_mean: count must be 1 .. 2^31 / 255 (a 32-bit sum)");
    if (n_out < 1) FAIL(VKI_EINVAL, "tflite_mean: n_out must be positive");
    tmean_t* t = calloc(1, sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "tflite_mean: out of memory");
    t->rank = rank;
    t->n_in = 1;
    uint64_t reduced = 1;
    for (uint32_t i = 0; i < rank; i++) {
        if (shape[i] < 1) {
            free(t);
            FAIL(VKI_EINVAL, "tflite_mean: shape[%u] is 0", i);
        }
        t->shape[i] = shape[i];
        t->ostride[i] = shape[i] == 1 ? 0 : ostride[i];  /* a size-1 axis moves nothing */
        t->n_in = vki_mul2(t->n_in, shape[i]);
        if (t->ostride[i] == 0) reduced *= shape[i];
        /* the last index along axis i must stay inside y */
        else if ((shape[i] - 1) > (n_out - 1) / t->ostride[i]) {
            free(t);
            FAIL(VKI_EINVAL, "tflite_mean: ostride[%u] = %llu leaves the %llu outputs", i,
                 (unsigned long long)ostride[i], (unsigned long long)n_out);
        }
    }
    if (reduced != count || t->n_in / count != n_out) {
        free(t);
        FAIL(VKI_EINVAL, "tflite_mean: count %u and n_out %llu do not match the reduced axes of the shape", count,
             (unsigned long long)n_out);
    }
    uint64_t maxoff = 0;
    for (uint32_t i = 0; i < rank; i++) maxoff += t->ostride[i] * (t->shape[i] - 1);
    if (maxoff >= n_out) {
        free(t);
        FAIL(VKI_EINVAL, "tflite_mean: the output strides reach past the %llu outputs", (unsigned long long)n_out);
    }
    t->n_out = n_out;
    t->count = count;
    t->is_signed = is_signed ? 1 : 0;
    t->m = m;
    t->bias = bias;
    uint64_t need[2] = {t->n_in, n_out};
    vki_ref refs[2] = {x, y};
    return vki_graph_push(g, "tflite_mean", tmean_run, free, t, 2, refs, need);
}
