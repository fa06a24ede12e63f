/* vkinfer CPU fallback: quantized convolution (and GEMM as 1x1 convolution) in C.
 *
 * Numerics are vkinfer's contract (bit-identical to ONNX Runtime's QLinearConv):
 *   acc = bias[m] + sum (x - x_zp) * (w - w_zp[m])          int32
 *   y   = clamp(round_half_even((float)acc * scale[m]) + y_zp, y_lo, y_hi)
 * with one float32 multiply (no FMA contraction, no double).
 *
 * Data layout: activations are NHWC bytes. Inputs are in the canonical unsigned domain: int8
 * activations are passed XOR 0x80 (i.e. +128) with x_zp + 128. Outputs are written as the low byte
 * of the int32 result, so int8 and uint8 outputs need no conversion.
 *
 * Every entry point checks its own preconditions and returns a vki_status; vki_last_error()
 * describes the last failure on the calling thread.
 */
#ifndef VKINFER_CPU_H
#define VKINFER_CPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    VKI_OK = 0,
    VKI_EINVAL = 1,       /* a bad argument (message in vki_last_error) */
    VKI_ENOMEM = 2,       /* allocation failed */
    VKI_EUNSUPPORTED = 3, /* the requested ISA variant cannot run on this CPU */
    VKI_ENAN = 4          /* a graph input holds NaN where an operator refuses it (quantize with VKI_QUANT_REFUSE_NAN) */
} vki_status;

typedef struct {
    uint32_t n, h, w, c;          /* input, NHWC */
    uint32_t m, kh, kw;           /* output channels, kernel size */
    uint32_t sh, sw, dh, dw;      /* strides, dilations (>= 1) */
    uint32_t pt, pl, pb, pr;      /* padding: top, left, bottom, right */
    uint32_t groups;              /* divides c and m */
    const uint8_t* weights;       /* m x (c/groups) x kh x kw raw bytes (ONNX layout) */
    int32_t w_signed;             /* 1: weights are int8, 0: uint8 */
    const int32_t* w_zp;          /* m weight zero points, in the weights' own type's range */
    const int32_t* bias;          /* m int32 biases */
    const float* scale;           /* m requantization multipliers (float32, finite, >= 0) */
    int32_t x_zp;                 /* input zero point, canonical unsigned domain [0, 255] */
    int32_t y_zp, y_lo, y_hi;     /* output zero point and clamp (y_lo <= y_zp.. in [-128, 255]) */
    int32_t isa;                  /* index into the ISA variant list, or -1 for the best available */
} vki_conv_desc;

typedef struct vki_conv vki_conv;

/* Prepare a convolution: packs the weights for the chosen ISA once. */
vki_status vki_conv_create(const vki_conv_desc* desc, vki_conv** out);
/* Output size of a prepared convolution. */
void vki_conv_output_shape(const vki_conv* conv, uint32_t* oh, uint32_t* ow);
/* Run on x (n*h*w*c bytes) into y (n*oh*ow*m bytes) with `threads` threads (0: the default). The
 * indirection buffer is built on the first run and rebuilt only when x's address changes. */
vki_status vki_conv_run(vki_conv* conv, const uint8_t* x, uint8_t* y, uint32_t threads);
void vki_conv_destroy(vki_conv* conv);
/* A layer whose whole indirection buffer (one pointer per tap of every output pixel) would pass `bound` bytes
 * (default 64 MiB) runs by tiles of output pixels instead, one buffer of `tile_bytes` (default 16 MiB, at least one
 * pixel's pointers) filled per tile at every run: the same bits. Read when a convolution is created; 0 restores a
 * default. For tests (small layers on the tiled path); not for tuning. */
void vki_conv_set_tiling(uint64_t bound, uint64_t tile_bytes);
/* Output pixels per tile of a tiled convolution; 0 for one whose indirection is built whole. */
uint64_t vki_conv_tile_pixels(const vki_conv* conv);
/* Name of the variant a prepared convolution uses. */
const char* vki_conv_isa(const vki_conv* conv);
/* Name of the kernel family it runs: the variant's name, or a faster exact form the weights allow,
 * e.g. "avx2-u8s8" (u8 x s8 products, VPMADDUBSW) when every (w - w_zp) lies in [-64, 64] (7-bit
 * weights, such as onnxruntime's reduce_range=True gives). $VKINFER_CPU_U8S8=0 at create time turns
 * that form off. Depthwise layers report the variant's name. */
const char* vki_conv_kernel(const vki_conv* conv);

/* ISA variants compiled into this library, in order of preference (best last). */
int32_t vki_isa_count(void);
const char* vki_isa_name(int32_t index);
int32_t vki_isa_available(int32_t index); /* 1 if this CPU can run it */
/* Index of the variant used for isa = -1: $VKINFER_CPU_ISA names one, else the best available.
 * Returns -1 (and sets the error) if $VKINFER_CPU_ISA names an unknown or unavailable variant. */
int32_t vki_isa_default(void);

/* Thread counts accepted by vki_set_default_threads and $VKINFER_CPU_THREADS. */
#define VKI_MAX_THREADS 1024
/* The thread count vki_conv_run uses for threads = 0: $VKINFER_CPU_THREADS when it is a whole
 * number in [1, VKI_MAX_THREADS] (read on each call), else vki_get_default_threads(). */
uint32_t vki_default_threads(void);
/* The library does not count cores: its default is 1 until the embedder sets one. The Python
 * package (vkinfer.cpu) sets it once on load from its policy: the CPUs the process may run on,
 * within the fastest cluster, capped by the cgroup CPU quota. VKI_EINVAL outside [1, VKI_MAX_THREADS]. */
vki_status vki_set_default_threads(uint32_t threads);
uint32_t vki_get_default_threads(void);

const char* vki_last_error(void);

/* com.microsoft QLinearAdd on two tensors of n elements (same shape), ONNX Runtime's arithmetic:
 * y = clamp(cvt(fmaf(a, ra, fmaf(b, rb, fixed)))) with ra = a_scale / c_scale, rb = b_scale / c_scale,
 * fixed = c_zp - fmaf(ra, a_zp, rb * b_zp) (all float32), cvt rounding half to even. */
vki_status vki_qlinear_add(const uint8_t* a, const uint8_t* b, uint8_t* y, size_t n, int32_t is_signed, float ra,
                           float rb, float fixed, int32_t lo, int32_t hi);

/* com.microsoft QLinearMul on equal shapes (logical values; ORT 1.31's arithmetic: see qadd.c). */
vki_status vki_qlinear_mul(const uint8_t* a, const uint8_t* b, uint8_t* y, size_t n, int32_t is_signed, int32_t za,
                           int32_t zb, float ratio, float zc, int32_t lo, int32_t hi);

/* Elementwise 8-bit op by table lookup: y[i] = table[a[i] * 256 + b[i]] (table: 65536 bytes, built by the
 * caller from the numpy reference on every pair, so the result is the reference's by construction).
 * `b_period` > 0 reads b[i % b_period] (one row of channels broadcast over all rows). */
vki_status vki_lut2(const uint8_t* a, const uint8_t* b, uint8_t* y, size_t n, size_t b_period, const uint8_t* table);

/* The CPU arena's memory plan (src/plan.c): vkinfer/model/memory.py's plan_offsets, offset for offset. Tensor i
 * of size[i] >= 0 bytes lives from step first[i] to last[i] (inclusive); name_order lists the tensors' indices in
 * increasing name order (a permutation of 0..n-1: it breaks the sorts' ties). On VKI_OK with *done = 1: offsets[i]
 * and the arena's size *arena. *done = 0 (VKI_OK, reason in vki_last_error) where the plan is left to the Python
 * planner: a sum past int64, a negative size, first > last, steps spanning over 8n + 1024, an index past 2^25
 * entries. VKI_EINVAL for a bad argument (align < 1, n >= 2^32 - 1, an order that is not a permutation). */
vki_status vki_plan_offsets(uint64_t n, const int64_t* size, const int64_t* first, const int64_t* last,
                            const int64_t* name_order, int64_t align, int64_t* offsets, int64_t* arena, int32_t* done);
/* vki_plan_offsets' name_order: the indices of n names sorted as Python sorts str (stably), the names given as
 * `bytes` bytes of n NUL-terminated UTF-8 strings (surrogates as their 3-byte forms), none holding a NUL. */
vki_status vki_plan_name_order(const char* names, uint64_t bytes, uint64_t n, int64_t* order);

#ifdef __cplusplus
}
#endif
#endif
