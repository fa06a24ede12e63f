/* com.microsoft QLinearAdd on equal shapes, bit-exact with ONNX Runtime's AVX2 kernel
 * (vkinfer/reference/qlinear_add.py is the readable definition):
 *     y = clamp(cvt(fma(a, ra, fma(b, rb, fixed))))
 * fmaf() rounds once, like VFMADD, whether the compiler emits the instruction or calls libm. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "vkinfer_cpu.h"

vki_status vki_qlinear_add(const uint8_t* a, const uint8_t* b, uint8_t* y, size_t n, int32_t is_signed, float ra,
                           float rb, float fixed, int32_t lo, int32_t hi)
{
    if (!a || !b || !y) {
        vki_set_error("qlinear_add: a, b and y must not be NULL");
        return VKI_EINVAL;
    }
    if (lo > hi || lo < -128 || hi > 255) {
        vki_set_error("qlinear_add: bad clamp [%d, %d]", lo, hi);
        return VKI_EINVAL;
    }
    size_t i = 0;
#if defined(VKI_HAVE_AVX2) && (defined(__x86_64__) || defined(_M_X64))
    /* VKINFER_CPU_ISA=scalar keeps the portable loop (the tests run both). */
    const char* forced = getenv("VKINFER_CPU_ISA");
    if (vki_qadd_avx2fma_available() && !(forced && strcmp(forced, "scalar") == 0))
        i = vki_qadd_avx2fma(a, b, y, n, is_signed, ra, rb, fixed, lo, hi);
#endif
    for (; i < n; i++) {
        float va = is_signed ? (float)(int8_t)a[i] : (float)a[i];
        float vb = is_signed ? (float)(int8_t)b[i] : (float)b[i];
        float v = fmaf(va, ra, fmaf(vb, rb, fixed));
        /* CVTPS2DQ: round half to even; out of int32 range (or NaN) gives INT32_MIN. */
        int32_t r = (v >= -2147483648.0f && v < 2147483648.0f) ? (int32_t)nearbyintf(v) : INT32_MIN;
        r = r < lo ? lo : r > hi ? hi : r;
        y[i] = (uint8_t)r;
    }
    return VKI_OK;
}

vki_status vki_lut2(const uint8_t* a, const uint8_t* b, uint8_t* y, size_t n, size_t b_period, const uint8_t* table)
{
    if (!a || !b || !y || !table) {
        vki_set_error("lut2: a, b, y and table must not be NULL");
        return VKI_EINVAL;
    }
    if (b_period == 0) {
        for (size_t i = 0; i < n; i++) y[i] = table[((size_t)a[i] << 8) | b[i]];
        return VKI_OK;
    }
    for (size_t i = 0; i < n; i += b_period) {
        size_t m = n - i < b_period ? n - i : b_period;
        for (size_t j = 0; j < m; j++) y[i + j] = table[((size_t)a[i + j] << 8) | b[j]];
    }
    return VKI_OK;
}
