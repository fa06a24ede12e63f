/* com.microsoft QLinearAdd on equal shapes, bit-exact with ONNX Runtime's AVX2 kernel
 * (vkinfer/reference/qlinear_add.py is the readable definition):
 *     y = clamp(cvt(fma(a, ra, fma(b, rb, fixed))))
 * fmaf() rounds once, like VFMADD, whether the compiler emits the instruction or calls libm. */
#include <math.h>

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
    for (size_t i = 0; i < n; i++) {
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
