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

/* com.microsoft QLinearMul on equal shapes, bit-exact with ONNX Runtime 1.31 (MLAS qlmul.cpp; the readable
 * definition is vkinfer/reference/qlinear_mul.py):
 *     y = clamp(cvt(float32(float32((a - za) * (b - zb)) * ratio) + zc))
 * two float32 roundings (no FMA: -ffp-contract=off), cvt as CVTPS2DQ (round half to even; out of int32 range
 * gives INT32_MIN). A and b are logical values (int8 when is_signed), y the logical byte. Replaces a lookup in a
 * 65536-byte table per value: YOLOX-tiny's SiLU products (ddddocr_det, 74 QLinearMul) took 5.5 ms of a 32 ms
 * run through the table on one Zen 4 core. */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

__attribute__((target("avx512f,avx512bw"))) static size_t qmul_avx512(const uint8_t* a, const uint8_t* b,
                                                                     uint8_t* y, size_t n, int32_t is_signed,
                                                                     int32_t za, int32_t zb, float ratio, float zc,
                                                                     int32_t lo, int32_t hi)
{
    const __m512i vza = _mm512_set1_epi32(za), vzb = _mm512_set1_epi32(zb);
    const __m512i vlo = _mm512_set1_epi32(lo), vhi = _mm512_set1_epi32(hi);
    const __m512 vr = _mm512_set1_ps(ratio), vzc = _mm512_set1_ps(zc);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m128i ra = _mm_loadu_si128((const __m128i*)(const void*)(a + i));
        const __m128i rb = _mm_loadu_si128((const __m128i*)(const void*)(b + i));
        const __m512i va = is_signed ? _mm512_cvtepi8_epi32(ra) : _mm512_cvtepu8_epi32(ra);
        const __m512i vb = is_signed ? _mm512_cvtepi8_epi32(rb) : _mm512_cvtepu8_epi32(rb);
        const __m512i p = _mm512_mullo_epi32(_mm512_sub_epi32(va, vza), _mm512_sub_epi32(vb, vzb));
        const __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(p), vr), vzc);
        const __m512i r = _mm512_max_epi32(_mm512_min_epi32(_mm512_cvtps_epi32(v), vhi), vlo);
        _mm_storeu_si128((__m128i*)(void*)(y + i), _mm512_cvtepi32_epi8(r));
    }
    return i;
}

__attribute__((target("avx2"))) static size_t qmul_avx2(const uint8_t* a, const uint8_t* b, uint8_t* y, size_t n,
                                                        int32_t is_signed, int32_t za, int32_t zb, float ratio,
                                                        float zc, int32_t lo, int32_t hi)
{
    const __m256i vza = _mm256_set1_epi32(za), vzb = _mm256_set1_epi32(zb);
    const __m256i vlo = _mm256_set1_epi32(lo), vhi = _mm256_set1_epi32(hi);
    const __m256 vr = _mm256_set1_ps(ratio), vzc = _mm256_set1_ps(zc);
    /* byte 0 of each dword to the low 4 bytes of each 128-bit lane, then the two lanes' words together */
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                          0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i join = _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i ra = _mm_loadl_epi64((const __m128i*)(const void*)(a + i));
        const __m128i rb = _mm_loadl_epi64((const __m128i*)(const void*)(b + i));
        const __m256i va = is_signed ? _mm256_cvtepi8_epi32(ra) : _mm256_cvtepu8_epi32(ra);
        const __m256i vb = is_signed ? _mm256_cvtepi8_epi32(rb) : _mm256_cvtepu8_epi32(rb);
        const __m256i p = _mm256_mullo_epi32(_mm256_sub_epi32(va, vza), _mm256_sub_epi32(vb, vzb));
        const __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(p), vr), vzc);
        const __m256i r = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(v), vhi), vlo);
        const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(r, pick), join);
        _mm_storel_epi64((__m128i*)(void*)(y + i), _mm256_castsi256_si128(bytes));
    }
    return i;
}
#endif

vki_status vki_qlinear_mul(const uint8_t* a, const uint8_t* b, uint8_t* y, size_t n, int32_t is_signed, int32_t za,
                           int32_t zb, float ratio, float zc, int32_t lo, int32_t hi)
{
    if (!a || !b || !y) {
        vki_set_error("qlinear_mul: a, b and y must not be NULL");
        return VKI_EINVAL;
    }
    if (lo > hi || lo < -128 || hi > 255) {
        vki_set_error("qlinear_mul: bad clamp [%d, %d]", lo, hi);
        return VKI_EINVAL;
    }
    size_t i = 0;
#if defined(__x86_64__) || defined(_M_X64)
    /* VKINFER_CPU_ISA=scalar keeps the portable loop (the tests run both); avx2 skips the AVX-512 one. */
    static int isa = -1;
    if (isa < 0) {
        const char* forced = getenv("VKINFER_CPU_ISA");
        int scalar = forced && strcmp(forced, "scalar") == 0, avx2 = forced && strcmp(forced, "avx2") == 0;
        __builtin_cpu_init();
        isa = scalar ? 0
            : !avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") ? 2
            : __builtin_cpu_supports("avx2") ? 1 : 0;
    }
    if (isa == 2) i = qmul_avx512(a, b, y, n, is_signed, za, zb, ratio, zc, lo, hi);
    else if (isa == 1) i = qmul_avx2(a, b, y, n, is_signed, za, zb, ratio, zc, lo, hi);
#endif
    for (; i < n; i++) {
        int32_t va = is_signed ? (int32_t)(int8_t)a[i] : (int32_t)a[i];
        int32_t vb = is_signed ? (int32_t)(int8_t)b[i] : (int32_t)b[i];
        float v = (float)((va - za) * (vb - zb)) * ratio;
        v = v + zc;
        int32_t r = (v >= -2147483648.0f && v < 2147483648.0f) ? (int32_t)nearbyintf(v) : INT32_MIN;
        r = r < lo ? lo : r > hi ? hi : r;
        y[i] = (uint8_t)r;
    }
    return VKI_OK;
}
