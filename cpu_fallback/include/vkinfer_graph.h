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

/* ---- Operators (all 8-bit tensors canonical, see above) ----
 * Each is added by vki_graph_add_<op>(g, ...). The prototypes below are generated from the one operator list,
 * vkinfer_graph_ops.def, which documents each operator and its arguments. */

/* Flags or-ed into vki_graph_add_quantize's mode (see its entry). */
#define VKI_QUANT_REFUSE_NAN 4
#define VKI_QUANT_PACKED 8

/* The argument types of the list: C type (VKI_GRAPH_T_) and signature letter (VKI_GRAPH_S_). */
#define VKI_GRAPH_T_u32 uint32_t
#define VKI_GRAPH_T_i32 int32_t
#define VKI_GRAPH_T_u64 uint64_t
#define VKI_GRAPH_T_f32 float
#define VKI_GRAPH_T_ref vki_ref
#define VKI_GRAPH_T_p_u32 const uint32_t*
#define VKI_GRAPH_T_p_u64 const uint64_t*
#define VKI_GRAPH_T_p_i64 const int64_t*
#define VKI_GRAPH_T_p_i32 const int32_t*
#define VKI_GRAPH_T_p_u8 const uint8_t*
#define VKI_GRAPH_T_p_f32 const float*
#define VKI_GRAPH_T_p_ref const vki_ref*
#define VKI_GRAPH_T_pp_u8 const uint8_t* const*
#define VKI_GRAPH_T_p_conv_desc const vki_conv_desc*
#define VKI_GRAPH_S_u32 "I"
#define VKI_GRAPH_S_i32 "i"
#define VKI_GRAPH_S_u64 "Q"
#define VKI_GRAPH_S_f32 "f"
#define VKI_GRAPH_S_ref "R"
#define VKI_GRAPH_S_p_u32 "p"
#define VKI_GRAPH_S_p_u64 "p"
#define VKI_GRAPH_S_p_i64 "p"
#define VKI_GRAPH_S_p_i32 "p"
#define VKI_GRAPH_S_p_u8 "p"
#define VKI_GRAPH_S_p_f32 "p"
#define VKI_GRAPH_S_p_ref "p"
#define VKI_GRAPH_S_pp_u8 "p"
#define VKI_GRAPH_S_p_conv_desc "p"
/* One parameter ", type name" and one signature letter, from a (type, name) pair of the list. */
#define VKI_GRAPH_PARAM(type, name) , VKI_GRAPH_T_##type name
#define VKI_GRAPH_SIG(type, name) VKI_GRAPH_S_##type

/* VKI_GRAPH_EACH(m, (a), (b), ...) -> m (a) m (b) ...: up to 32 pairs. */
#define VKI_GRAPH_CAT_(a, b) a##b
#define VKI_GRAPH_CAT(a, b) VKI_GRAPH_CAT_(a, b)
#define VKI_GRAPH_COUNT_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, _17, _18, _19, _20, \
                         _21, _22, _23, _24, _25, _26, _27, _28, _29, _30, _31, _32, n, ...) n
#define VKI_GRAPH_COUNT(...) VKI_GRAPH_COUNT_(__VA_ARGS__, 32, 31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, \
                                              18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define VKI_GRAPH_EACH(m, ...) VKI_GRAPH_CAT(VKI_GRAPH_EACH_, VKI_GRAPH_COUNT(__VA_ARGS__))(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_1(m, a) m a
#define VKI_GRAPH_EACH_2(m, a, ...) m a VKI_GRAPH_EACH_1(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_3(m, a, ...) m a VKI_GRAPH_EACH_2(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_4(m, a, ...) m a VKI_GRAPH_EACH_3(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_5(m, a, ...) m a VKI_GRAPH_EACH_4(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_6(m, a, ...) m a VKI_GRAPH_EACH_5(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_7(m, a, ...) m a VKI_GRAPH_EACH_6(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_8(m, a, ...) m a VKI_GRAPH_EACH_7(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_9(m, a, ...) m a VKI_GRAPH_EACH_8(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_10(m, a, ...) m a VKI_GRAPH_EACH_9(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_11(m, a, ...) m a VKI_GRAPH_EACH_10(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_12(m, a, ...) m a VKI_GRAPH_EACH_11(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_13(m, a, ...) m a VKI_GRAPH_EACH_12(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_14(m, a, ...) m a VKI_GRAPH_EACH_13(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_15(m, a, ...) m a VKI_GRAPH_EACH_14(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_16(m, a, ...) m a VKI_GRAPH_EACH_15(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_17(m, a, ...) m a VKI_GRAPH_EACH_16(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_18(m, a, ...) m a VKI_GRAPH_EACH_17(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_19(m, a, ...) m a VKI_GRAPH_EACH_18(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_20(m, a, ...) m a VKI_GRAPH_EACH_19(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_21(m, a, ...) m a VKI_GRAPH_EACH_20(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_22(m, a, ...) m a VKI_GRAPH_EACH_21(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_23(m, a, ...) m a VKI_GRAPH_EACH_22(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_24(m, a, ...) m a VKI_GRAPH_EACH_23(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_25(m, a, ...) m a VKI_GRAPH_EACH_24(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_26(m, a, ...) m a VKI_GRAPH_EACH_25(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_27(m, a, ...) m a VKI_GRAPH_EACH_26(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_28(m, a, ...) m a VKI_GRAPH_EACH_27(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_29(m, a, ...) m a VKI_GRAPH_EACH_28(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_30(m, a, ...) m a VKI_GRAPH_EACH_29(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_31(m, a, ...) m a VKI_GRAPH_EACH_30(m, __VA_ARGS__)
#define VKI_GRAPH_EACH_32(m, a, ...) m a VKI_GRAPH_EACH_31(m, __VA_ARGS__)

#define VKI_GRAPH_OP(op, ...) \
    vki_status vki_graph_add_##op(vki_graph* g VKI_GRAPH_EACH(VKI_GRAPH_PARAM, __VA_ARGS__));
#include "vkinfer_graph_ops.def"
#undef VKI_GRAPH_OP

/* The operator table, in the list's order: name (the entry point is vki_graph_add_<name>), signature (one letter
 * per argument after the graph: I uint32_t, i int32_t, Q uint64_t, f float, p a pointer, R a vki_ref by value)
 * and the entry point itself. Bindings declare their calls from it (vkinfer/cpu/graph.py). */
typedef struct {
    const char* name;
    const char* signature;
    void (*entry)(void);
} vki_graph_op_info;
/* The table of `*count` operators (static storage). */
const vki_graph_op_info* vki_graph_op_table(uint32_t* count);
/* Operators from packed words, in order: per operator its index in the table, then one 64-bit word per argument
 * (a vki_ref three: ext, offset, bytes; a float the bits of a double, narrowed as C converts; a pointer its
 * address), each integer checked against its C type's range before the operator's add function runs with the
 * values (VKI_EINVAL naming the argument otherwise); `words` holds n_words int64 values, any alignment. The
 * operators before a failing one stay added. One call instead of a call of converted arguments per operator
 * (vkinfer/cpu/graph.py). */
vki_status vki_graph_packed_add(vki_graph* g, const void* words, uint64_t n_words);

#ifdef __cplusplus
}
#endif
#endif
