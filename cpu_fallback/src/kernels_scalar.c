/* Portable C kernels: the baseline every CPU runs, and the readable form of the contract. */
#include <string.h>

#include "internal.h"

#define MR 2
#define NR 4

/* int32 accumulation wraps modulo 2^32 like the reference, the shaders and the SIMD kernels (only
 * reachable with more than ~33000 taps x channels); in C signed overflow would be undefined. */
static inline int32_t wrap_add(int32_t a, int32_t b) { return (int32_t)((uint32_t)a + (uint32_t)b); }

static void igemm_scalar(size_t mr, size_t nc, size_t kc, size_t ks, const uint8_t* const* a, const void* w,
                         uint8_t* c, size_t c_stride, const vki_qparams* q)
{
    const int32_t* bias = (const int32_t*)w;
    const float* scale = (const float*)(bias + NR);
    const int16_t* wt = (const int16_t*)(scale + NR);
    int32_t acc[MR][NR];
    for (size_t i = 0; i < MR; i++)
        for (size_t n = 0; n < NR; n++) acc[i][n] = bias[n];
    for (size_t t = 0; t < ks; t++) {
        for (size_t k = 0; k < kc; k++) {
            const int16_t* wk = wt + (t * kc + k) * NR;  /* KR = 1: [ks][kc][NR] */
            for (size_t i = 0; i < mr; i++) {
                int32_t x = (int32_t)a[t * MR + i][k] - q->x_zp;
                for (size_t n = 0; n < NR; n++) acc[i][n] = wrap_add(acc[i][n], x * wk[n]);
            }
        }
    }
    for (size_t i = 0; i < mr; i++)
        for (size_t n = 0; n < nc; n++) c[i * c_stride + n] = (uint8_t)vki_requant_scalar(acc[i][n], scale[n], q);
}

static void dw_scalar(size_t channels, size_t ks, const uint8_t* const* a, const void* w, uint8_t* y,
                      const vki_qparams* q)
{
    size_t cp = (channels + 3) & ~(size_t)3;  /* CR = 4 */
    const int32_t* bias = (const int32_t*)w;
    const float* scale = (const float*)(bias + cp);
    const int16_t* wt = (const int16_t*)(scale + cp);
    for (size_t ch = 0; ch < channels; ch++) {
        int32_t acc = bias[ch];
        for (size_t t = 0; t < ks; t++) acc = wrap_add(acc, ((int32_t)a[t][ch] - q->x_zp) * wt[t * cp + ch]);
        y[ch] = (uint8_t)vki_requant_scalar(acc, scale[ch], q);
    }
}

static int always(void) { return 1; }

const vki_isa vki_isa_scalar = {
    .name = "scalar", .available = always, .mr = MR, .nr = NR, .kr = 1, .igemm = igemm_scalar,
    .cr = 4, .dw9 = dw_scalar, .dw25 = dw_scalar, .dw_any = dw_scalar,
};
