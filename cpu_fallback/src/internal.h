/* Internal contract between the operator (conv.c) and the per-ISA microkernels.
 *
 * Microkernels compute exact int32 sums of (x - x_zp) * (w - w_zp) with 16-bit operands:
 * weights are packed once as int16 (w - w_zp), so no zero-point folding is needed, and
 * activations are widened and have x_zp subtracted in the kernel. Then they requantize with
 * vki_requant semantics and store the low byte. (Exception: the optional u8s8 igemm for 7-bit
 * weights, described at vki_isa below, packs int8 weights and folds x_zp into the bias.)
 *
 * RULES for every kernel:
 * - Never read past the end of an activation row: a row pointer gives exactly kc (igemm) or
 *   `channels` (dw) valid bytes. Handle tails with partial loads (ASan runs the tests).
 * - Weights blocks MAY be read in full (they are padded with zeros to the block size).
 * - Results must be bit-identical to vki_requant_scalar() on every element.
 */
#ifndef VKINFER_CPU_INTERNAL_H
#define VKINFER_CPU_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int32_t x_zp;  /* canonical unsigned domain */
    int32_t y_zp;
    float fmin;    /* (float)(y_lo - y_zp) */
    float fmax;    /* (float)(y_hi - y_zp) */
} vki_qparams;

/* The exact requantization of one accumulator (reference for every SIMD version):
 * clamping before rounding equals clamping after it, because the bounds are integers. */
static inline int32_t vki_requant_scalar(int32_t acc, float scale, const vki_qparams* q)
{
    float f = (float)acc * scale;  /* compiled with -ffp-contract=off: one rounding */
    f = f < q->fmin ? q->fmin : f;
    f = f > q->fmax ? q->fmax : f;
    return (int32_t)nearbyintf(f) + q->y_zp;  /* default rounding mode: half to even */
}

/* igemm: mr x nc outputs (mr <= MR, nc <= NR) of a convolution tile through an indirection buffer.
 *   a[t * MR + i]  row pointer of output row i for tap t (t < ks, i < MR); rows i >= mr repeat a
 *                  valid row, and each points at kc bytes (padding taps point at a row of x_zp).
 *   w              packed block for NR output channels:
 *                    int32 bias[NR]; float scale[NR];
 *                    int16 wt[ks][ceil(kc / KR)][NR][KR]   (w - w_zp; zero for k >= kc or n >= nc)
 *   c              output row i at c + i * c_stride; write exactly nc bytes per row, mr rows.
 */
typedef void (*vki_igemm_fn)(size_t mr, size_t nc, size_t kc, size_t ks, const uint8_t* const* a, const void* w,
                             uint8_t* c, size_t c_stride, const vki_qparams* q);

/* dw: one output pixel of a depthwise convolution (multiplier 1) over all channels.
 *   a[t]  pointer to `channels` bytes of the input pixel for tap t (t < ks; padding -> x_zp row)
 *   w     int32 bias[CP]; float scale[CP]; int16 wt[ks][CP]   with CP = channels rounded up to CR,
 *         wt = w - w_zp, zero padded
 *   y     `channels` output bytes
 */
typedef void (*vki_dw_fn)(size_t channels, size_t ks, const uint8_t* const* a, const void* w, uint8_t* y,
                          const vki_qparams* q);

/* Optional u8 x s8 igemm (same signature; its own tile u8s8_mr x u8s8_nr, 0 meaning mr / nr): for layers
 * whose every (w - w_zp) lies in [u8s8_wmin, u8s8_wmax], the variant's exact range (AVX2's VPMADDUBSW:
 * [-64, 64], 7-bit weights such as onnxruntime's reduce_range=True; VPDPBUSD and SDOT: the full int8 range).
 *   w   int32 bias'[NR]; float scale[NR]; int8 wt[ks][ceil(kc / 4)][NR][4]   (w - w_zp; zero padded)
 *       with bias' = bias - (x_zp - u8s8_xoff) * sum_{t,k} (w - w_zp)  (wrapping int32: modulo 2^32)
 * and the kernel sums (x - u8s8_xoff) * (w - w_zp) on the raw activation bytes (q->x_zp is not used):
 * padding taps read x_zp rows, whose (x_zp - xoff) * w cancel against the correction, so the result is
 * the same int32. u8s8_xoff is 0 where the instruction multiplies unsigned bytes (x86), 128 where it
 * wants signed ones (NEON SDOT on x ^ 0x80).
 * Exactness of AVX2's VPMADDUBSW: it forms a0 * w0 + a1 * w1 with int16 saturation; with a in [0, 255]
 * and |w| <= 64 that is at most 255 * 128 = 32640 in magnitude, so it never saturates. */
#define VKI_U8S8_WMAX 64  /* AVX2's bound (kept as the default of a variant that leaves the range 0) */
#define VKI_U8S8_KR 4

/* Optional u8s8 depthwise over a run of output pixels (weights in the same [u8s8_wmin, u8s8_wmax], the
 * same bias correction and activation offset as the u8s8 igemm):
 *   a[p * ks + t]  tap t of pixel p (`channels` valid bytes; padding taps point at a row of x_zp)
 *   w              the block written by the variant's dw_u8s8_pack (its own layout)
 *   y + p * y_stride  pixel p's `channels` output bytes
 * dw_u8s8_pack(channels, ks, wt, bias, scale, out): wt[ks][channels] = (w - w_zp), bias already corrected,
 * scale per channel; writes the block at out (64-byte aligned) and returns its size; out NULL: size only. */
typedef void (*vki_dwp_fn)(size_t pixels, size_t channels, size_t ks, const uint8_t* const* a, const void* w,
                           uint8_t* y, size_t y_stride, const vki_qparams* q);
typedef size_t (*vki_dwp_pack_fn)(size_t channels, size_t ks, const int16_t* wt, const int32_t* bias,
                                  const float* scale, void* out);
/* Optional: two output rows of a 3x3 (ks 9) depthwise with vertical stride and dilation 1, on the same
 * packed block: pixel p of the top row has taps a[p * 9 + t] and output y + p * y_stride; the row below has
 * taps a[a_row + p * 9 + t] (whose kernel rows 0 and 1 are the top row's 1 and 2: the kernel may read them
 * from either) and output y + y_row + p * y_stride. */
typedef void (*vki_dwp2_fn)(size_t pixels, size_t channels, const uint8_t* const* a, size_t a_row, const void* w,
                            uint8_t* y, size_t y_stride, size_t y_row, const vki_qparams* q);

typedef struct {
    const char* name;
    int (*available)(void);
    uint32_t mr, nr, kr;  /* igemm tile and k-grouping of packed weights (kr: 1 or 2) */
    vki_igemm_fn igemm;
    vki_igemm_fn igemm_u8s8;   /* NULL: no u8s8 path; packing: see VKI_U8S8_KR above */
    const char* name_u8s8;     /* what vki_conv_kernel() reports for layers on igemm_u8s8 / dw_u8s8 */
    uint32_t u8s8_mr, u8s8_nr; /* igemm_u8s8's tile (0: mr, nr) */
    /* Optional: a u8s8 igemm for layers of at most 16 output channels per group, on the same packed block
     * (u8s8_nr columns, the ones past 16 unused), with u8s8_mr_narrow rows: a[] holds that many pointers
     * per tap. NULL: such layers take igemm_u8s8. */
    vki_igemm_fn igemm_u8s8_narrow;
    uint32_t u8s8_mr_narrow;
    int32_t u8s8_wmin, u8s8_wmax;  /* exact weight range of the u8s8 kernels (both 0: +-VKI_U8S8_WMAX) */
    int32_t u8s8_xoff;         /* activation offset the u8s8 kernels subtract (0 or 128) */
    vki_dwp_fn dw_u8s8;        /* NULL: depthwise always on the int16 kernels below */
    vki_dwp_pack_fn dw_u8s8_pack;
    vki_dwp2_fn dw_u8s8_rows2; /* NULL: rows one at a time */
    uint32_t cr;          /* depthwise channel padding of packed weights */
    vki_dw_fn dw9;        /* ks == 9  (3x3): unipass */
    vki_dw_fn dw25;       /* ks == 25 (5x5): unipass */
    vki_dw_fn dw_any;     /* any ks */
} vki_isa;

/* Variants, defined in kernels_<name>.c; the list in isa.c says which exist on this architecture. */
extern const vki_isa vki_isa_scalar;
#if defined(__x86_64__) || defined(_M_X64)
extern const vki_isa vki_isa_avx2;
/* QLinearAdd's vector body (kernels_avx2.c): the first multiple-of-8 elements, returns how many it did. */
int vki_qadd_avx2fma_available(void);
size_t vki_qadd_avx2fma(const uint8_t* a, const uint8_t* b, uint8_t* y, size_t n, int32_t is_signed, float ra,
                        float rb, float fixed, int32_t lo, int32_t hi);
extern const vki_isa vki_isa_avx512vnni;
#endif
#if defined(__aarch64__) || defined(__arm__)
extern const vki_isa vki_isa_neon;
#endif
#if defined(__aarch64__)
extern const vki_isa vki_isa_neon_a7x;
extern const vki_isa vki_isa_neon_dot; /* kernels_neon_dot.c: ARMv8.2 SDOT */
#endif

const vki_isa* vki_isa_get(int32_t index);
void vki_set_error(const char* fmt, ...);

#endif
