/* The native graph's com.microsoft MatMulIntegerToFloat with a constant B (ONNX Runtime 1.31's arithmetic, vkinfer/
 * reference/matmul_integer_to_float.py): y[r, j] = (float)(int32 sum_k (a[r, k] - a_zp) (b[k, j] - b_zp[j]))
 * * scale[j], one float32 multiply (scale[j] is float32(a_scale * b_scale[j]), made by the caller), then + bias[j]
 * when bias is not NULL (a second rounding, as MLAS's scale-bias output processor). The sum wraps modulo 2^32 like
 * an int32 accumulator. a: rows x k canonical bytes; b: k x n canonical bytes (copied, stored transposed as
 * b - b_zp in int16); y: rows x n float32. A plain loop: it serves a classifier's last layer (a few rows). */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

typedef struct {
    uint64_t rows;
    uint32_t k, n;
    int32_t a_zp;
    int has_bias;
    int16_t* bt;   /* n x k: b[k, j] - b_zp[j] */
    float* scale;  /* n */
    float* bias;   /* n, or NULL */
} qmmf_t;

static void qmmf_free(void* p)
{
    qmmf_t* t = p;
    if (!t) return;
    free(t->bt);
    free(t->scale);
    free(t->bias);
    free(t);
}

static vki_status qmmf_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const qmmf_t* t = p;
    const uint8_t* a = ptr[0];
    uint8_t* y = ptr[1];  /* any alignment (an external buffer): stored with memcpy */
    for (uint64_t r = 0; r < t->rows; r++) {
        const uint8_t* ar = a + r * t->k;
        for (uint32_t j = 0; j < t->n; j++) {
            const int16_t* bj = t->bt + (uint64_t)j * t->k;
            uint32_t acc = 0;  /* unsigned: wraps modulo 2^32 without undefined behaviour */
            for (uint32_t i = 0; i < t->k; i++) acc += (uint32_t)(((int32_t)ar[i] - t->a_zp) * (int32_t)bj[i]);
            float v = (float)(int32_t)acc * t->scale[j];  /* -ffp-contract=off: never fused with the add */
            if (t->has_bias) v = v + t->bias[j];
            memcpy(y + (r * t->n + j) * sizeof v, &v, sizeof v);
        }
    }
    return VKI_OK;
}

vki_status vki_graph_add_qmatmul_f32(vki_graph* g, uint64_t rows, uint32_t k, uint32_t n, int32_t a_zp,
                                     const uint8_t* b, const uint32_t* b_zp, const float* scale, const float* bias,
                                     vki_ref a, vki_ref y)
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
    t->bt = malloc(b_elems * sizeof *t->bt);
    t->scale = malloc((size_t)n * sizeof *t->scale);
    t->bias = bias ? malloc((size_t)n * sizeof *t->bias) : NULL;
    if (!t->bt || !t->scale || (bias && !t->bias)) {
        qmmf_free(t);
        FAIL(VKI_ENOMEM, "qmatmul_f32: out of memory");
    }
    for (uint32_t j = 0; j < n; j++)
        for (uint32_t i = 0; i < k; i++)
            t->bt[(uint64_t)j * k + i] = (int16_t)((int32_t)b[(uint64_t)i * n + j] - (int32_t)b_zp[j]);
    memcpy(t->scale, scale, (size_t)n * sizeof *t->scale);
    if (bias) memcpy(t->bias, bias, (size_t)n * sizeof *t->bias);
    uint64_t need[2] = {a_bytes, y_bytes};
    vki_ref refs[2] = {a, y};
    return vki_graph_push(g, "qmatmul_f32", qmmf_run, qmmf_free, t, 2, refs, need);
}
