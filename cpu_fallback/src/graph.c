/* The native graph's runtime: a fixed list of operators over one arena (vkinfer_graph.h), their run loop and
 * thread dispatch, and the operator table. The operators are ops/<op>.c, one file each, listed once in
 * vkinfer_graph_ops.def. One vki_graph_run per inference replaces a Python step per node: that step (ctypes
 * marshalling, a new array, an XOR copy of int8 inputs) cost 15-45 us per node, more than many small layers take
 * to compute. */
#define _DEFAULT_SOURCE /* mmap's MAP_ANONYMOUS with -std=c11 */
#include <pthread.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "graph_internal.h"
#include "threadpool.h"


typedef struct {
    char name[VKI_GRAPH_NAME_LEN];
    vki_op_run_fn run;
    vki_op_free_fn free_fn;
    void* params;
    uint32_t n_refs;
    vki_ref* refs;
    uint64_t ns;
} op_t;

struct vki_graph {
    uint8_t* arena;
    uint64_t arena_bytes;
    size_t arena_mapped;  /* bytes mapped by arena_alloc (0: from aligned_alloc) */
    uint32_t n_ext;
    uint64_t* ext_bytes;
    op_t* ops;
    uint32_t n_ops, cap_ops;
    uint8_t** ptrs;   /* scratch: resolved operand addresses, max refs of any op */
    uint32_t max_refs;
    int32_t profiling;
    uint64_t overhead_ns;
    pthread_mutex_t lock;
};

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Arenas of at least this many bytes are anonymous mappings: zero pages the kernel provides untouched, where
 * aligned_alloc + memset touched every byte at creation (a legal 1 GiB-input convolution's 2 GiB arena: 2.1 GB of
 * resident memory per session before any run, fuzz regression memory/onnx-libfuzzer-e4986fdbbe). Page-aligned, so
 * 64-byte aligned as the operators expect. */
#define ARENA_MAP_BYTES ((size_t)1 << 20)

static uint8_t* arena_alloc(size_t bytes, size_t* mapped)
{
    *mapped = 0;
    if (bytes >= ARENA_MAP_BYTES) {
        void* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) return NULL;
        *mapped = bytes;
        return p;
    }
    uint8_t* p = aligned_alloc(64, bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

static void arena_free(uint8_t* arena, size_t mapped)
{
    if (mapped) munmap(arena, mapped);
    else free(arena);
}

vki_status vki_graph_create(uint64_t arena_bytes, uint32_t n_ext, const uint64_t* ext_bytes, vki_graph** out)
{
    if (!out) FAIL(VKI_EINVAL, "graph: out is NULL");
    *out = NULL;
    if (n_ext && !ext_bytes) FAIL(VKI_EINVAL, "graph: ext_bytes is NULL");
    if (arena_bytes > (UINT64_C(1) << 40)) FAIL(VKI_EINVAL, "graph: arena of %llu bytes is too large",
                                               (unsigned long long)arena_bytes);
    vki_graph* g = calloc(1, sizeof *g);
    if (!g) FAIL(VKI_ENOMEM, "graph: out of memory");
    size_t ab = (size_t)((arena_bytes + 63) / 64 * 64);
    g->arena = ab ? arena_alloc(ab, &g->arena_mapped) : NULL;
    g->ext_bytes = n_ext ? malloc(n_ext * sizeof *g->ext_bytes) : NULL;
    if ((ab && !g->arena) || (n_ext && !g->ext_bytes)) {
        if (g->arena) arena_free(g->arena, g->arena_mapped);
        free(g->ext_bytes);
        free(g);
        FAIL(VKI_ENOMEM, "graph: cannot allocate an arena of %llu bytes", (unsigned long long)arena_bytes);
    }
    if (n_ext) memcpy(g->ext_bytes, ext_bytes, n_ext * sizeof *g->ext_bytes);
    g->arena_bytes = arena_bytes;
    g->n_ext = n_ext;
    pthread_mutex_init(&g->lock, NULL);
    *out = g;
    return VKI_OK;
}

void vki_graph_destroy(vki_graph* g)
{
    if (!g) return;
    for (uint32_t i = 0; i < g->n_ops; i++) {
        if (g->ops[i].free_fn) g->ops[i].free_fn(g->ops[i].params);
        free(g->ops[i].refs);
    }
    free(g->ops);
    free(g->ptrs);
    if (g->arena) arena_free(g->arena, g->arena_mapped);
    free(g->ext_bytes);
    pthread_mutex_destroy(&g->lock);
    free(g);
}

vki_status vki_graph_write(vki_graph* g, uint64_t offset, const void* data, uint64_t bytes)
{
    if (!g || (bytes && !data)) FAIL(VKI_EINVAL, "graph write: NULL argument");
    if (offset > g->arena_bytes || bytes > g->arena_bytes - offset)
        FAIL(VKI_EINVAL, "graph write: %llu bytes at offset %llu outside the %llu-byte arena",
             (unsigned long long)bytes, (unsigned long long)offset, (unsigned long long)g->arena_bytes);
    if (bytes) memcpy(g->arena + offset, data, bytes);
    return VKI_OK;
}

vki_status vki_graph_push(vki_graph* g, const char* name, vki_op_run_fn run, vki_op_free_fn free_fn, void* params,
                          uint32_t n_refs, const vki_ref* refs, const uint64_t* need)
{
    vki_status st = VKI_OK;
    if (!g || !run || n_refs > VKI_GRAPH_MAX_REFS || (n_refs && (!refs || !need))) {
        vki_set_error("graph: bad operator %s", name ? name : "?");
        st = VKI_EINVAL;
        goto fail;
    }
    for (uint32_t i = 0; i < n_refs; i++) {
        const vki_ref* r = &refs[i];
        uint64_t cap;
        if (r->ext == 0) {
            cap = g->arena_bytes;
        } else if (r->ext <= g->n_ext) {
            cap = g->ext_bytes[r->ext - 1];
        } else {
            vki_set_error("%s: operand %u names external buffer %u of %u", name, i, r->ext - 1, g->n_ext);
            st = VKI_EINVAL;
            goto fail;
        }
        if (r->bytes != need[i] || r->offset > cap || r->bytes > cap - r->offset) {
            vki_set_error("%s: operand %u is %llu bytes at offset %llu of a %llu-byte %s, the operator needs %llu",
                          name, i, (unsigned long long)r->bytes, (unsigned long long)r->offset,
                          (unsigned long long)cap, r->ext ? "external buffer" : "arena", (unsigned long long)need[i]);
            st = VKI_EINVAL;
            goto fail;
        }
        if (need[i] == 0) {
            vki_set_error("%s: operand %u is empty", name, i);
            st = VKI_EINVAL;
            goto fail;
        }
    }
    if (g->n_ops == g->cap_ops) {
        uint32_t cap = g->cap_ops ? 2 * g->cap_ops : 16;
        op_t* ops = realloc(g->ops, cap * sizeof *ops);
        if (!ops) {
            vki_set_error("graph: out of memory");
            st = VKI_ENOMEM;
            goto fail;
        }
        g->ops = ops;
        g->cap_ops = cap;
    }
    if (n_refs > g->max_refs) {
        uint8_t** p = realloc(g->ptrs, n_refs * sizeof *p);
        if (!p) {
            vki_set_error("graph: out of memory");
            st = VKI_ENOMEM;
            goto fail;
        }
        g->ptrs = p;
        g->max_refs = n_refs;
    }
    op_t* op = &g->ops[g->n_ops];
    memset(op, 0, sizeof *op);
    op->refs = n_refs ? malloc(n_refs * sizeof *op->refs) : NULL;
    if (n_refs && !op->refs) {
        vki_set_error("graph: out of memory");
        st = VKI_ENOMEM;
        goto fail;
    }
    if (n_refs) memcpy(op->refs, refs, n_refs * sizeof *refs);
    snprintf(op->name, sizeof op->name, "%s", name);
    op->run = run;
    op->free_fn = free_fn;
    op->params = params;
    op->n_refs = n_refs;
    g->n_ops++;
    return VKI_OK;
fail:
    if (free_fn) free_fn(params);
    return st;
}

vki_status vki_graph_run(vki_graph* g, void* const* ext, uint32_t threads)
{
    if (!g) FAIL(VKI_EINVAL, "graph: NULL");
    if (g->n_ext && !ext) FAIL(VKI_EINVAL, "graph: external buffers are NULL");
    for (uint32_t k = 0; k < g->n_ext; k++)
        if (!ext[k]) FAIL(VKI_EINVAL, "graph: external buffer %u is NULL", k);
    if (threads == 0) threads = vki_default_threads();
    vki_status st = VKI_OK;
    pthread_mutex_lock(&g->lock);
    vki_pool_wake(threads);
    uint64_t t0 = g->profiling ? now_ns() : 0, in_ops = 0;
    for (uint32_t i = 0; i < g->n_ops && st == VKI_OK; i++) {
        op_t* op = &g->ops[i];
        for (uint32_t j = 0; j < op->n_refs; j++) {
            const vki_ref* r = &op->refs[j];
            g->ptrs[j] = (r->ext ? (uint8_t*)ext[r->ext - 1] : g->arena) + r->offset;
        }
        if (g->profiling) {
            uint64_t a = now_ns();
            st = op->run(op->params, g->ptrs, threads);
            uint64_t d = now_ns() - a;
            op->ns += d;
            in_ops += d;
        } else {
            st = op->run(op->params, g->ptrs, threads);
        }
    }
    if (g->profiling) g->overhead_ns += now_ns() - t0 - in_ops;
    pthread_mutex_unlock(&g->lock);
    return st;
}

uint32_t vki_graph_op_count(const vki_graph* g) { return g ? g->n_ops : 0; }
const char* vki_graph_op_name(const vki_graph* g, uint32_t i) { return g && i < g->n_ops ? g->ops[i].name : ""; }
void vki_graph_set_profiling(vki_graph* g, int32_t on) { if (g) g->profiling = on != 0; }
uint64_t vki_graph_op_ns(const vki_graph* g, uint32_t i) { return g && i < g->n_ops ? g->ops[i].ns : 0; }
uint64_t vki_graph_overhead_ns(const vki_graph* g) { return g ? g->overhead_ns : 0; }
void vki_graph_reset_profile(vki_graph* g)
{
    if (!g) return;
    pthread_mutex_lock(&g->lock);
    for (uint32_t i = 0; i < g->n_ops; i++) g->ops[i].ns = 0;
    g->overhead_ns = 0;
    pthread_mutex_unlock(&g->lock);
}

void vki_for_items(size_t n_items, uint64_t work, uint32_t threads, void (*fn)(void*, size_t), void* ctx)
{
    if (threads > 1 && n_items > 1 && work >= VKI_PAR_MIN_WORK) {
        vki_parallel_for(n_items, threads, fn, ctx);
    } else {
        for (size_t i = 0; i < n_items; i++) fn(ctx, i);
    }
}

/* The operator table, from the one list. Each entry names its add function, so a listed operator without its
 * ops/<op>.c is an undefined symbol: the static drivers fail to link, the shared library to load (ctypes binds
 * every symbol at load). */
#define VKI_GRAPH_OP(op, ...) \
    {#op, "" VKI_GRAPH_EACH(VKI_GRAPH_SIG, __VA_ARGS__), (void (*)(void))vki_graph_add_##op},
static const vki_graph_op_info op_table[] = {
#include "vkinfer_graph_ops.def"
};
#undef VKI_GRAPH_OP

const vki_graph_op_info* vki_graph_op_table(uint32_t* count)
{
    if (count) *count = (uint32_t)(sizeof op_table / sizeof op_table[0]);
    return op_table;
}

/* ---- vki_graph_packed_add: operators from one array of 64-bit words (vkinfer_graph.h) ----
 * One decoder per operator, written by the preprocessor from the same list: each argument is read from its
 * word(s) and checked against its C type's range exactly as the Python binding checks a ctypes argument
 * (vkinfer/cpu/__init__.py `checked`: ctypes itself narrows silently), then the operator's own add function runs
 * with the same values a direct call passes, so it checks its ranges and buffers as always. Pointers cross as
 * addresses (the caller keeps what they point at alive, as for a direct call); a float is a double's bits,
 * narrowed with the C conversion ctypes uses for a float argument. Measured on a 20k-node QLinearAdd chain: one
 * ctypes call of 17 converted and range-checked arguments per node cost 22.5 us; packed, 6.6 us. */
#define VKI_PK_SCALAR(ctype, lo, hi, name)                                                           \
    ctype name;                                                                                     \
    {                                                                                               \
        int64_t v_ = pk_word(pk_w_, pk_k_++);                                                       \
        if (v_ < (lo) || v_ > (hi)) FAIL(VKI_EINVAL, "packed %s: argument %s = %lld does not fit its type", \
                                         pk_op_, #name, (long long)v_);                               \
        name = (ctype)v_;                                                                           \
    }
#define VKI_PK_RD_u32(name) VKI_PK_SCALAR(uint32_t, 0, (int64_t)UINT32_MAX, name)
#define VKI_PK_RD_i32(name) VKI_PK_SCALAR(int32_t, (int64_t)INT32_MIN, (int64_t)INT32_MAX, name)
#define VKI_PK_RD_u64(name)                                                                         \
    uint64_t name;                                                                                  \
    {                                                                                               \
        int64_t v_ = pk_word(pk_w_, pk_k_++);                                                       \
        if (v_ < 0) FAIL(VKI_EINVAL, "packed %s: argument %s = %lld does not fit its type", pk_op_, #name, \
                         (long long)v_);                                                            \
        name = (uint64_t)v_;                                                                        \
    }
#define VKI_PK_RD_f32(name)                                                                         \
    float name;                                                                                     \
    {                                                                                               \
        double d_;                                                                                  \
        memcpy(&d_, pk_w_ + 8 * pk_k_++, sizeof d_);                                                    \
        name = (float)d_;                                                                           \
    }
#define VKI_PK_RD_ref(name)                                                                         \
    vki_ref name;                                                                                   \
    {                                                                                               \
        VKI_PK_RD_u32(ext_)                                                                         \
        VKI_PK_RD_u64(offset_)                                                                      \
        VKI_PK_RD_u64(bytes_)                                                                       \
        name.ext = ext_;                                                                            \
        name.unused = 0;                                                                            \
        name.offset = offset_;                                                                      \
        name.bytes = bytes_;                                                                        \
    }
#define VKI_PK_PTR(type, name) \
    VKI_GRAPH_T_##type name = (VKI_GRAPH_T_##type)(uintptr_t)(uint64_t)pk_word(pk_w_, pk_k_++);
#define VKI_PK_RD_p_u32(name) VKI_PK_PTR(p_u32, name)
#define VKI_PK_RD_p_u64(name) VKI_PK_PTR(p_u64, name)
#define VKI_PK_RD_p_i64(name) VKI_PK_PTR(p_i64, name)
#define VKI_PK_RD_p_i32(name) VKI_PK_PTR(p_i32, name)
#define VKI_PK_RD_p_u8(name) VKI_PK_PTR(p_u8, name)
#define VKI_PK_RD_p_f32(name) VKI_PK_PTR(p_f32, name)
#define VKI_PK_RD_p_ref(name) VKI_PK_PTR(p_ref, name)
#define VKI_PK_RD_pp_u8(name) VKI_PK_PTR(pp_u8, name)
#define VKI_PK_RD_p_conv_desc(name) VKI_PK_PTR(p_conv_desc, name)
#define VKI_PK_DECODE(type, name) VKI_PK_RD_##type(name)
#define VKI_PK_ARG(type, name) , name
/* Words per argument: a ref is three (ext, offset, bytes), everything else one. */
#define VKI_PK_WORDS(type, name) + VKI_PK_N_##type
#define VKI_PK_N_u32 1
#define VKI_PK_N_i32 1
#define VKI_PK_N_u64 1
#define VKI_PK_N_f32 1
#define VKI_PK_N_ref 3
#define VKI_PK_N_p_u32 1
#define VKI_PK_N_p_u64 1
#define VKI_PK_N_p_i64 1
#define VKI_PK_N_p_i32 1
#define VKI_PK_N_p_u8 1
#define VKI_PK_N_p_f32 1
#define VKI_PK_N_p_ref 1
#define VKI_PK_N_pp_u8 1
#define VKI_PK_N_p_conv_desc 1

typedef vki_status (*pk_fn)(vki_graph* g, const unsigned char* w);

/* Word i of packed bytes (any alignment: Python bytes are passed as they are). */
static inline int64_t pk_word(const unsigned char* w, size_t i)
{
    int64_t v;
    memcpy(&v, w + 8 * i, sizeof v);
    return v;
}

#define VKI_GRAPH_OP(op, ...)                                                                       \
    static vki_status pk_##op(vki_graph* pk_g_, const unsigned char* pk_w_)                               \
    {                                                                                               \
        static const char pk_op_[] = #op;                                                           \
        size_t pk_k_ = 0;                                                                           \
        VKI_GRAPH_EACH(VKI_PK_DECODE, __VA_ARGS__)                                                  \
        (void)pk_k_;                                                                                \
        return vki_graph_add_##op(pk_g_ VKI_GRAPH_EACH(VKI_PK_ARG, __VA_ARGS__));                   \
    }
#include "vkinfer_graph_ops.def"
#undef VKI_GRAPH_OP

#define VKI_GRAPH_OP(op, ...) {pk_##op, 0 VKI_GRAPH_EACH(VKI_PK_WORDS, __VA_ARGS__)},
static const struct {
    pk_fn fn;
    uint32_t words;
} pk_table[] = {
#include "vkinfer_graph_ops.def"
};
#undef VKI_GRAPH_OP

vki_status vki_graph_packed_add(vki_graph* g, const void* words, uint64_t n_words)
{
    const unsigned char* w = (const unsigned char*)words;
    const uint64_t count = sizeof pk_table / sizeof pk_table[0];
    if (!g) FAIL(VKI_EINVAL, "packed operators: no graph");
    if (!words && n_words) FAIL(VKI_EINVAL, "packed operators: no words");
    uint64_t at = 0;
    while (at < n_words) {
        int64_t op = pk_word(w, at);
        if (op < 0 || (uint64_t)op >= count)
            FAIL(VKI_EINVAL, "packed operators: word %llu names no operator (%lld; the table has %llu)",
                 (unsigned long long)at, (long long)op, (unsigned long long)count);
        if (n_words - at - 1 < pk_table[op].words)
            FAIL(VKI_EINVAL, "packed operators: operator %s at word %llu needs %u words, %llu left",
                 op_table[op].name, (unsigned long long)at, pk_table[op].words,
                 (unsigned long long)(n_words - at - 1));
        vki_status s = pk_table[op].fn(g, w + 8 * (at + 1));
        if (s != VKI_OK) return s;
        at += 1 + (uint64_t)pk_table[op].words;
    }
    return VKI_OK;
}
