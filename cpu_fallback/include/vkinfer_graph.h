/* vkinfer's native graph: a fixed list of operators over one arena, run in one call per inference.
 *
 * The Python package compiles a CPU segment once (vkinfer/cpu/graph.py): it plans every intermediate
 * tensor's byte offset in the arena by lifetime (vkinfer/model/memory.py), then adds the operators in
 * order. `vki_graph_run` then runs them all with no return to Python in between.
 *
 * Tensors are byte ranges (vki_ref): in the arena, or in an external buffer bound per run (the model's
 * inputs and outputs, which the caller owns). Every add function checks that each range lies inside its
 * arena / external buffer and has exactly the size the operator reads or writes, so no run can touch
 * memory outside them.
 *
 * Conventions inside the graph:
 * - 8-bit tensors are stored in the canonical unsigned domain: uint8 as is, int8 XOR 0x80 (v + 128).
 *   Operators whose arithmetic depends on the signed value convert inside their loops; the convolution
 *   takes the canonical bytes with zero points shifted by 128 (no copy per layer).
 * - 4-D activations are NHWC. Edges convert (vki_graph_add_transpose, or the quantize/dequantize
 *   operators' built-in NCHW <-> NHWC moves).
 * - float tensors are float32.
 * One run at a time per graph (a mutex); the thread pool parallelises inside operators.
 */
#ifndef VKINFER_GRAPH_H
#define VKINFER_GRAPH_H

#include "vkinfer_cpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    uint32_t ext;     /* 0: the arena; k >= 1: external buffer k - 1 */
    uint32_t unused;
    uint64_t offset;  /* byte offset in it */
    uint64_t bytes;   /* byte size of the tensor */
} vki_ref;

typedef struct vki_graph vki_graph;

/* A graph with an arena of `arena_bytes` (allocated, 64-byte aligned, zeroed) and `n_ext` external
 * buffers of the given byte sizes. */
vki_status vki_graph_create(uint64_t arena_bytes, uint32_t n_ext, const uint64_t* ext_bytes, vki_graph** out);
void vki_graph_destroy(vki_graph* g);
/* Copy `bytes` bytes into the arena at `offset` (constant operands, written once after create). */
vki_status vki_graph_write(vki_graph* g, uint64_t offset, const void* data, uint64_t bytes);
/* Run every operator in order. ext[k] points at external buffer k (ext_bytes[k] bytes, any alignment);
 * threads 0: vki_default_threads(). */
vki_status vki_graph_run(vki_graph* g, void* const* ext, uint32_t threads);
uint32_t vki_graph_op_count(const vki_graph* g);
/* "conv:avx512vnni", "lut1", ... */
const char* vki_graph_op_name(const vki_graph* g, uint32_t i);
/* Profiling: when on, each run adds every operator's wall time (ns) to its counter. */
void vki_graph_set_profiling(vki_graph* g, int32_t on);
uint64_t vki_graph_op_ns(const vki_graph* g, uint32_t i);
/* Time spent in vki_graph_run outside the operators (ns, summed over profiled runs). */
uint64_t vki_graph_overhead_ns(const vki_graph* g);
void vki_graph_reset_profile(vki_graph* g);

/* ---- Operators (all 8-bit tensors canonical, see above) ---- */

/* Convolution (and GEMM as a 1x1 convolution): desc as vki_conv_create, x_zp canonical, y_zp/y_lo/y_hi
 * in the canonical domain too (int8 output: +128). x: n*h*w*c bytes, y: n*oh*ow*m bytes. */
vki_status vki_graph_add_conv(vki_graph* g, const vki_conv_desc* desc, vki_ref x, vki_ref y);

/* Generic permutation of a rank <= 6 array of `elem` (1 or 4) byte elements: y = transpose(x, perm)
 * (numpy semantics: y.shape[i] = shape[perm[i]]), with every byte XORed with `xor_byte` (elem 1 only:
 * 0x80 moves int8 into or out of the canonical domain). Also a plain copy (identity perm). */
vki_status vki_graph_add_transpose(vki_graph* g, uint32_t rank, const uint32_t* shape, const uint32_t* perm,
                                   uint32_t elem, uint32_t xor_byte, vki_ref x, vki_ref y);

/* Constant pad of a rank <= 6 byte array: y.shape[i] = pre[i] + shape[i] + post[i], new bytes = value. */
vki_status vki_graph_add_pad(vki_graph* g, uint32_t rank, const uint32_t* shape, const uint32_t* pre,
                             const uint32_t* post, uint32_t value, vki_ref x, vki_ref y);

/* Concatenation along the last axis of `rows` rows: input i gives widths[i] bytes per row, mapped through
 * tables[i] (256 bytes, copied) when tables[i] is not NULL. y: rows * sum(widths). */
vki_status vki_graph_add_concat(vki_graph* g, uint32_t n_in, uint64_t rows, const uint32_t* widths,
                                const uint8_t* const* tables, const vki_ref* xs, vki_ref y);

/* Byte gather (cpu_fallback/src/gather.c): y is n_rows rows of row_len bytes; row r (rows[5r..5r+4] = input,
 * lo, hi, start, stride; copied) takes bytes [lo, hi) from input `input` at start, start + stride, ... and
 * `fill` elsewhere (input == n_in: a row of fill). xs[i] is in_bytes[i] bytes; every run is range-checked. */
vki_status vki_graph_add_gather(vki_graph* g, uint32_t n_in, const uint64_t* in_bytes, uint64_t row_len,
                                uint64_t n_rows, const int64_t* rows, uint32_t fill, const vki_ref* xs, vki_ref y);

/* y[i] = table[x[i]] (256 bytes, copied), n elements. */
vki_status vki_graph_add_lut1(vki_graph* g, uint64_t n, const uint8_t* table, vki_ref x, vki_ref y);
/* y[i] = table[a[i] * 256 + b[i % b_period or i]] (65536 bytes, copied). b: n bytes, or b_period bytes. */
vki_status vki_graph_add_lut2(vki_graph* g, uint64_t n, uint64_t b_period, const uint8_t* table, vki_ref a,
                              vki_ref b, vki_ref y);
/* com.microsoft QLinearAdd with ONNX Runtime's arithmetic (vki_qlinear_add) on canonical bytes of
 * logical type int8 (is_signed) or uint8; lo/hi in the logical type's range. */
vki_status vki_graph_add_qadd(vki_graph* g, uint64_t n, int32_t is_signed, float ra, float rb, float fixed,
                              int32_t lo, int32_t hi, vki_ref a, vki_ref b, vki_ref y);

/* TFLite's 8-bit ADD with XNNPACK's fixed point (vkinfer/reference/tflite_add.py): zero points and bounds in the
 * canonical domain (int8: +128), multipliers and shift from tflite_add_params; b as in lut2. */
vki_status vki_graph_add_tflite_add(vki_graph* g, uint64_t n, uint64_t b_period, int32_t za, int32_t zb, int32_t ma,
                                    int32_t mb, int32_t shift, int32_t zy, int32_t lo, int32_t hi, vki_ref a,
                                    vki_ref b, vki_ref y);

/* ---- pool.c ---- */

/* Max pooling, NHWC, n x h x w x c -> n x oh x ow x c; taps outside the input are skipped; a window with no
 * input pixel (dilated taps that all miss) gives qmin (canonical 0), as vkinfer/reference/max_pool.py. */
vki_status vki_graph_add_maxpool(vki_graph* g, uint32_t n, uint32_t h, uint32_t w, uint32_t c, uint32_t oh,
                                 uint32_t ow, uint32_t kh, uint32_t kw, uint32_t sh, uint32_t sw, uint32_t dh,
                                 uint32_t dw, uint32_t pt, uint32_t pl, vki_ref x, vki_ref y);
/* com.microsoft QLinearGlobalAveragePool (vkinfer/reference/qlinear_global_average_pool.py), NHWC in,
 * n x c out. */
vki_status vki_graph_add_qgap(vki_graph* g, uint32_t n, uint32_t hw, uint32_t c, int32_t is_signed, float x_scale,
                              int32_t x_zp, float y_scale, int32_t y_zp, vki_ref x, vki_ref y);
/* com.microsoft QLinearAveragePool (vkinfer/reference/qlinear_average_pool.py), NHWC. Zero points in the
 * logical type's range. pb/pr (bottom/right pads) only decide ORT's switch to the global pool's integer path
 * (kernel == image and all four pads 0: then oh = ow = 1 and qgap's arithmetic and range check apply); oh/ow
 * carry ceil_mode. Windows are clipped to the image, count_include_pad counts kh * kw. */
vki_status vki_graph_add_qavgpool(vki_graph* g, uint32_t n, uint32_t h, uint32_t w, uint32_t c, uint32_t oh,
                                  uint32_t ow, uint32_t kh, uint32_t kw, uint32_t sh, uint32_t sw, uint32_t pt,
                                  uint32_t pl, uint32_t pb, uint32_t pr, int32_t count_include_pad, int32_t is_signed,
                                  float x_scale, int32_t x_zp, float y_scale, int32_t y_zp, vki_ref x, vki_ref y);
/* TFLite's 8-bit AVERAGE_POOL_2D (vkinfer/reference/tflite_average_pool.py), NHWC; lo/hi: the fused
 * activation's clamp in the logical type. */
vki_status vki_graph_add_tflite_avgpool(vki_graph* g, uint32_t n, uint32_t h, uint32_t w, uint32_t c, uint32_t oh,
                                        uint32_t ow, uint32_t kh, uint32_t kw, uint32_t sh, uint32_t sw, uint32_t pt,
                                        uint32_t pl, int32_t is_signed, int32_t lo, int32_t hi, vki_ref x,
                                        vki_ref y);

/* ---- quant.c ---- */

/* float32 -> canonical 8-bit, per tensor. mode 0: ONNX QuantizeLinear (x / scale, ORT/MLAS), mode 1: TFLite
 * QUANTIZE (x * float32(1 / scale); the reciprocal must be finite). nchw != 0: x is NCHW (n x c x hw floats) and
 * y is written NHWC; else elementwise over n * c * hw values in order. zp in the logical type's range. NaN inputs
 * give qmin, as ORT's vectorised kernel; with VKI_QUANT_REFUSE_NAN or-ed into mode, a run that meets a NaN
 * returns VKI_ENAN instead (the references refuse NaN: the session's check, fused into the one pass over the
 * input that quantizing makes anyway). float32 buffers may have any alignment.
 * With VKI_QUANT_PACKED or-ed into mode, y is the Vulkan device layout instead of the canonical one: rows of c
 * values (NCHW: the n * hw pixels; else n * hw rows of c consecutive values) each padded with zero bytes to
 * 4 * ceil(c / 4), raw bytes (int8 as two's complement); y then takes n * hw * 4 * ceil(c / 4) bytes. A CPU
 * quantize that feeds only a Vulkan segment writes straight into the device's input buffer so. */
#define VKI_QUANT_REFUSE_NAN 4
#define VKI_QUANT_PACKED 8
vki_status vki_graph_add_quantize(vki_graph* g, int32_t mode, uint32_t n, uint32_t c, uint64_t hw, int32_t nchw,
                                  float scale, int32_t zp, int32_t is_signed, vki_ref x, vki_ref y);
/* canonical 8-bit -> float32: (x - zp) * scale (one float32 multiply), per tensor: ONNX DequantizeLinear, also
 * TFLite's DEQUANTIZE (imported as DequantizeLinear). nchw != 0: x is NHWC and y is written NCHW (n x c x hw). */
vki_status vki_graph_add_dequantize(vki_graph* g, uint32_t n, uint32_t c, uint64_t hw, int32_t nchw, float scale,
                                    int32_t zp, int32_t is_signed, vki_ref x, vki_ref y);
/* TFLite's 8-bit SOFTMAX over rows of `cols` (vkinfer/reference/tflite_softmax.py); table: its 256 float32
 * exponentials (softmax_table, copied; finite, >= 0). x_signed does not change the result (only max - x enters);
 * y_zp in the output type's range. */
vki_status vki_graph_add_tflite_softmax(vki_graph* g, uint64_t rows, uint32_t cols, const float* table,
                                        int32_t x_signed, float y_scale, int32_t y_zp, int32_t y_signed, vki_ref x,
                                        vki_ref y);

#ifdef __cplusplus
}
#endif
#endif
