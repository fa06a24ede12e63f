/* How operator files (ops/<op>.c, one per operator of vkinfer_graph_ops.def) add themselves to a native graph
 * (graph.c: the runtime). */
#ifndef VKINFER_GRAPH_INTERNAL_H
#define VKINFER_GRAPH_INTERNAL_H

#include "internal.h"
#include "vkinfer_graph.h"

/* Operands of one operator (its inputs and output): each operator's list is allocated to its own length, so the
 * bound only keeps counts sane; a Concat of any input count ORT runs (64 or more were refused) fits. */
#define VKI_GRAPH_MAX_REFS 65536
#define VKI_GRAPH_NAME_LEN 48  /* bytes of an operator's name, with its NUL ("conv:avx512vnni") */
#define VKI_GRAPH_MAX_RANK 6   /* transpose and pad */

/* Vectorisation. GCC's -O2 vectoriser uses its "very cheap" cost model, which skips any loop needing a scalar
 * epilogue or a runtime alias check: every loop over a runtime channel count. Hand-blocked loops were not a way out
 * (GCC 12 unrolled the fixed inner block and then vectorised only the outer loop, leaving channel counts under 256
 * scalar: max pool 6x slower). So cpu_fallback/Makefile compiles the runtime and the operators at -O3, and the
 * pooling and float-edge operators also ask for -O3's cost model with a pragma at their top, for the builds that
 * use another -O level (the cross-compiled drivers build every file at -O2); -ffp-contract=off still applies. */

/* Set the error and return `code` from an add function. */
#define FAIL(code, ...) do { vki_set_error(__VA_ARGS__); return code; } while (0)

/* An operator's body: ptr[i] is the resolved address of its i-th operand (in the order given to
 * vki_graph_push); params is what the add function allocated. Returns VKI_OK (or a status with the error
 * set, e.g. from vki_conv_run). */
typedef vki_status (*vki_op_run_fn)(void* params, uint8_t* const* ptr, uint32_t threads);
typedef void (*vki_op_free_fn)(void* params);

/* Append an operator. Checks each ref against its buffer and against need[i] (the exact byte size the
 * operator touches); on failure frees params with free_fn and returns VKI_EINVAL naming `name`. `name` is
 * copied. The graph owns params from here on. */
vki_status vki_graph_push(vki_graph* g, const char* name, vki_op_run_fn run, vki_op_free_fn free_fn, void* params,
                          uint32_t n_refs, const vki_ref* refs, const uint64_t* need);

/* Overflow-checked product helpers for the add functions' size computations (0 on overflow past 2^62). */
static inline uint64_t vki_mul2(uint64_t a, uint64_t b)
{
    if (a && b > (UINT64_C(1) << 62) / a) return 0;
    return a * b;
}
static inline uint64_t vki_mul4(uint64_t a, uint64_t b, uint64_t c, uint64_t d)
{
    return vki_mul2(vki_mul2(a, b), vki_mul2(c, d));
}

/* Below this many element operations an operator stays on the calling thread: waking the pool costs a few
 * microseconds, about what 100k simple byte operations take. */
#define VKI_PAR_MIN_WORK (UINT64_C(1) << 17)

/* y[i] = table[x[i]] for n bytes (ops/lut1.c: AVX-512 VBMI where the CPU has it; x == y allowed). */
void vki_lut_bytes(const uint8_t* table, const uint8_t* x, uint8_t* y, size_t n);

/* fn(ctx, i) for i < n_items: on the thread pool when the work is worth waking it, else inline. */
void vki_for_items(size_t n_items, uint64_t work, uint32_t threads, void (*fn)(void*, size_t), void* ctx);

/* Argument checks shared by the quantized operators. */
static inline int vki_bad_scale(float s) { return !(isfinite(s) && s > 0.0f); }
static inline int vki_zp_bad(int32_t zp, int32_t is_signed)
{
    return is_signed ? zp < -128 || zp > 127 : zp < 0 || zp > 255;
}

/* Whether two ranges share a byte (operators whose loops read x while writing y refuse that). */
static inline int vki_refs_overlap(vki_ref a, vki_ref b)
{
    if (a.ext != b.ext) return 0;
    return a.offset >= b.offset ? a.offset - b.offset < b.bytes : b.offset - a.offset < a.bytes;
}

#endif
