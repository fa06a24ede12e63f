/* The native graph: a fixed list of operators over one arena (vkinfer_graph.h), and the data-movement
 * and table operators (transpose, pad, concat, lut1, lut2, qadd, conv). One vki_graph_run per inference
 * replaces a Python step per node: that step (ctypes marshalling, a new array, an XOR copy of int8
 * inputs) cost 15-45 us per node, more than many small layers take to compute. */
#include <pthread.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "graph_internal.h"
#include "threadpool.h"

#define FAIL(code, ...) do { vki_set_error(__VA_ARGS__); return code; } while (0)
#define NAME_MAX_LEN 48

typedef struct {
    char name[NAME_MAX_LEN];
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
    g->arena = ab ? aligned_alloc(64, ab) : NULL;
    g->ext_bytes = n_ext ? malloc(n_ext * sizeof *g->ext_bytes) : NULL;
    if ((ab && !g->arena) || (n_ext && !g->ext_bytes)) {
        free(g->arena);
        free(g->ext_bytes);
        free(g);
        FAIL(VKI_ENOMEM, "graph: cannot allocate an arena of %llu bytes", (unsigned long long)arena_bytes);
    }
    if (ab) memset(g->arena, 0, ab);
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
    free(g->arena);
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

/* ---- conv ---- */

static vki_status conv_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    return vki_conv_run((vki_conv*)p, ptr[0], ptr[1], threads);
}
static void conv_free(void* p) { vki_conv_destroy((vki_conv*)p); }

vki_status vki_graph_add_conv(vki_graph* g, const vki_conv_desc* desc, vki_ref x, vki_ref y)
{
    vki_conv* cv = NULL;
    vki_status st = vki_conv_create(desc, &cv);
    if (st != VKI_OK) return st;
    uint32_t oh, ow;
    vki_conv_output_shape(cv, &oh, &ow);
    uint64_t need[2] = {vki_mul4(desc->n, desc->h, desc->w, desc->c), vki_mul4(desc->n, oh, ow, desc->m)};
    vki_ref refs[2] = {x, y};
    char name[NAME_MAX_LEN];
    snprintf(name, sizeof name, "conv:%s", vki_conv_kernel(cv));
    return vki_graph_push(g, name, conv_run, conv_free, cv, 2, refs, need);
}

/* ---- transpose ---- */

#define MAX_RANK 6

typedef struct {
    uint32_t rank, elem;
    uint8_t xor_byte;
    uint64_t oshape[MAX_RANK];  /* output shape */
    uint64_t istride[MAX_RANK]; /* input element stride for each output axis */
    uint64_t count;
    uint64_t tile_rows, tile_cols;  /* nonzero: a batch of (rows x cols) -> (cols x rows) byte transposes */
} transpose_t;

/* Batched 2-D transposes (NCHW <-> NHWC after merging axes that move together) run in 32 x 32 tiles, so both
 * sides stream through cache lines; anything else walks the output rows with a strided gather. */
#define TILE 32
static void transpose2d_u8(const uint8_t* x, uint8_t* y, uint64_t rows, uint64_t cols, uint8_t xb)
{
    /* y (cols x rows) = x (rows x cols) transposed */
    for (uint64_t r0 = 0; r0 < rows; r0 += TILE) {
        uint64_t r1 = r0 + TILE < rows ? r0 + TILE : rows;
        for (uint64_t c0 = 0; c0 < cols; c0 += TILE) {
            uint64_t c1 = c0 + TILE < cols ? c0 + TILE : cols;
            for (uint64_t c = c0; c < c1; c++)
                for (uint64_t r = r0; r < r1; r++) y[c * rows + r] = x[r * cols + c] ^ xb;
        }
    }
}

static vki_status transpose_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const transpose_t* t = p;
    const uint8_t* x = ptr[0];
    uint8_t* y = ptr[1];
    uint32_t r = t->rank;
    if (t->elem == 1 && t->tile_rows) {
        uint64_t plane = t->tile_rows * t->tile_cols;
        for (uint64_t b = 0; b < t->count / plane; b++)
            transpose2d_u8(x + b * plane, y + b * plane, t->tile_rows, t->tile_cols, t->xor_byte);
        return VKI_OK;
    }
    uint64_t idx[MAX_RANK] = {0};
    uint64_t inner = t->oshape[r - 1], is = t->istride[r - 1], outer = t->count / inner;
    for (uint64_t o = 0; o < outer; o++) {
        uint64_t base = 0;
        for (uint32_t a = 0; a + 1 < r; a++) base += idx[a] * t->istride[a];
        if (t->elem == 1) {
            const uint8_t* src = x + base;
            uint8_t* dst = y + o * inner;
            if (is == 1) {
                if (t->xor_byte) {
                    for (uint64_t i = 0; i < inner; i++) dst[i] = src[i] ^ t->xor_byte;
                } else {
                    memcpy(dst, src, inner);
                }
            } else {
                uint8_t xb = t->xor_byte;
                for (uint64_t i = 0; i < inner; i++) dst[i] = src[i * is] ^ xb;
            }
        } else {
            for (uint64_t i = 0; i < inner; i++) memcpy(y + (o * inner + i) * 4, x + (base + i * is) * 4, 4);
        }
        for (int a = (int)r - 2; a >= 0; a--) {
            if (++idx[a] < t->oshape[a]) break;
            idx[a] = 0;
        }
    }
    return VKI_OK;
}

vki_status vki_graph_add_transpose(vki_graph* g, uint32_t rank, const uint32_t* shape, const uint32_t* perm,
                                   uint32_t elem, uint32_t xor_byte, vki_ref x, vki_ref y)
{
    if (rank < 1 || rank > MAX_RANK || !shape || !perm) FAIL(VKI_EINVAL, "transpose: rank must be 1..%d", MAX_RANK);
    if (elem != 1 && elem != 4) FAIL(VKI_EINVAL, "transpose: element size must be 1 or 4");
    if (xor_byte > 255 || (xor_byte && elem != 1)) FAIL(VKI_EINVAL, "transpose: bad xor byte");
    transpose_t* t = calloc(1, sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "transpose: out of memory");
    uint64_t st[MAX_RANK];
    uint64_t count = 1;
    for (int a = (int)rank - 1; a >= 0; a--) {
        st[a] = count;
        count = vki_mul2(count, shape[a]);
    }
    uint32_t seen = 0;
    for (uint32_t a = 0; a < rank; a++) {
        if (perm[a] >= rank || (seen >> perm[a]) & 1) {
            free(t);
            FAIL(VKI_EINVAL, "transpose: perm is not a permutation of 0..%u", rank - 1);
        }
        seen |= 1u << perm[a];
        t->oshape[a] = shape[perm[a]];
        t->istride[a] = st[perm[a]];
    }
    t->rank = rank;
    t->elem = elem;
    t->xor_byte = (uint8_t)xor_byte;
    t->count = count;
    /* Merge output axes whose input axes are adjacent and in order (drop size-1 axes): what is left of an
     * NCHW <-> NHWC move is (batch, A, B) -> (batch, B, A). */
    uint64_t ms[MAX_RANK], mst[MAX_RANK];
    uint32_t mr = 0;
    for (uint32_t a = 0; a < rank; a++) {
        if (t->oshape[a] == 1) continue;
        if (mr && mst[mr - 1] == t->istride[a] * t->oshape[a]) {
            ms[mr - 1] *= t->oshape[a];
            mst[mr - 1] = t->istride[a];
        } else {
            ms[mr] = t->oshape[a];
            mst[mr] = t->istride[a];
            mr++;
        }
    }
    /* (batch?, A, B) with input strides (A * B, 1, A): output row of A elements reads input column of stride B */
    if (elem == 1 && mr >= 2 && mr <= 3 && mst[mr - 1] != 1 && mst[mr - 2] == 1 && mst[mr - 1] == ms[mr - 2] &&
        (mr == 2 || mst[0] == ms[1] * ms[2])) {
        t->tile_rows = ms[mr - 1];  /* input rows */
        t->tile_cols = ms[mr - 2];  /* input cols */
    }
    /* The generic walk runs over the merged axes: a copy (or an int8 XOR) is one long row, not one per pixel
     * (a 96x96x3 input took 26 us as 9216 rows of 3 bytes). */
    if (!t->tile_rows) {
        if (mr == 0) {
            ms[0] = 1;
            mst[0] = 1;
            mr = 1;
        }
        t->rank = mr;
        for (uint32_t a = 0; a < mr; a++) {
            t->oshape[a] = ms[a];
            t->istride[a] = mst[a];
        }
    }
    uint64_t need[2] = {vki_mul2(count, elem), vki_mul2(count, elem)};
    vki_ref refs[2] = {x, y};
    return vki_graph_push(g, "transpose", transpose_run, free, t, 2, refs, need);
}

/* ---- pad ---- */

typedef struct {
    uint32_t rank;
    uint8_t value;
    uint64_t ishape[MAX_RANK], oshape[MAX_RANK], pre[MAX_RANK];
    uint64_t icount, ocount;
} pad_t;

static vki_status pad_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const pad_t* t = p;
    const uint8_t* x = ptr[0];
    uint8_t* y = ptr[1];
    uint32_t r = t->rank;
    memset(y, t->value, t->ocount);
    uint64_t inner = t->ishape[r - 1], outer = t->icount / inner;
    uint64_t idx[MAX_RANK] = {0};
    for (uint64_t o = 0; o < outer; o++) {
        uint64_t off = 0;
        for (uint32_t a = 0; a < r; a++) off = off * t->oshape[a] + (a + 1 < r ? idx[a] : 0) + t->pre[a];
        memcpy(y + off, x + o * inner, inner);
        for (int a = (int)r - 2; a >= 0; a--) {
            if (++idx[a] < t->ishape[a]) break;
            idx[a] = 0;
        }
    }
    return VKI_OK;
}

vki_status vki_graph_add_pad(vki_graph* g, uint32_t rank, const uint32_t* shape, const uint32_t* pre,
                             const uint32_t* post, uint32_t value, vki_ref x, vki_ref y)
{
    if (rank < 1 || rank > MAX_RANK || !shape || !pre || !post) FAIL(VKI_EINVAL, "pad: rank must be 1..%d", MAX_RANK);
    if (value > 255) FAIL(VKI_EINVAL, "pad: value must be a byte");
    pad_t* t = calloc(1, sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "pad: out of memory");
    t->rank = rank;
    t->value = (uint8_t)value;
    t->icount = t->ocount = 1;
    for (uint32_t a = 0; a < rank; a++) {
        t->ishape[a] = shape[a];
        t->pre[a] = pre[a];
        t->oshape[a] = (uint64_t)shape[a] + pre[a] + post[a];
        t->icount = vki_mul2(t->icount, t->ishape[a]);
        t->ocount = vki_mul2(t->ocount, t->oshape[a]);
    }
    uint64_t need[2] = {t->icount, t->ocount};
    vki_ref refs[2] = {x, y};
    return vki_graph_push(g, "pad", pad_run, free, t, 2, refs, need);
}

/* ---- concat ---- */

typedef struct {
    uint32_t n_in;
    uint64_t rows, out_w;
    uint32_t* widths;
    uint8_t* tables;   /* n_in x 256 */
    uint8_t* has_table;
} concat_t;

static void concat_free(void* p)
{
    concat_t* t = p;
    if (!t) return;
    free(t->widths);
    free(t->tables);
    free(t->has_table);
    free(t);
}

static vki_status concat_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const concat_t* t = p;
    uint8_t* y = ptr[t->n_in];
    uint64_t col = 0;
    for (uint32_t i = 0; i < t->n_in; i++) {
        const uint8_t* x = ptr[i];
        uint32_t w = t->widths[i];
        const uint8_t* tb = t->has_table[i] ? t->tables + 256 * (size_t)i : NULL;
        for (uint64_t r = 0; r < t->rows; r++) {
            uint8_t* d = y + r * t->out_w + col;
            const uint8_t* s = x + r * w;
            if (tb) {
                for (uint32_t j = 0; j < w; j++) d[j] = tb[s[j]];
            } else {
                memcpy(d, s, w);
            }
        }
        col += w;
    }
    return VKI_OK;
}

vki_status vki_graph_add_concat(vki_graph* g, uint32_t n_in, uint64_t rows, const uint32_t* widths,
                                const uint8_t* const* tables, const vki_ref* xs, vki_ref y)
{
    if (n_in < 1 || n_in + 1 > VKI_GRAPH_MAX_REFS || !widths || !xs)
        FAIL(VKI_EINVAL, "concat: 1 to %d inputs", VKI_GRAPH_MAX_REFS - 1);
    concat_t* t = calloc(1, sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "concat: out of memory");
    t->n_in = n_in;
    t->rows = rows;
    t->widths = malloc(n_in * sizeof *t->widths);
    t->tables = calloc(n_in, 256);
    t->has_table = calloc(n_in, 1);
    vki_ref refs[VKI_GRAPH_MAX_REFS];
    uint64_t need[VKI_GRAPH_MAX_REFS];
    if (!t->widths || !t->tables || !t->has_table) {
        concat_free(t);
        FAIL(VKI_ENOMEM, "concat: out of memory");
    }
    for (uint32_t i = 0; i < n_in; i++) {
        t->widths[i] = widths[i];
        t->out_w += widths[i];
        if (tables && tables[i]) {
            memcpy(t->tables + 256 * (size_t)i, tables[i], 256);
            t->has_table[i] = 1;
        }
        refs[i] = xs[i];
        need[i] = vki_mul2(rows, widths[i]);
    }
    refs[n_in] = y;
    need[n_in] = vki_mul2(rows, t->out_w);
    return vki_graph_push(g, "concat", concat_run, concat_free, t, n_in + 1, refs, need);
}

/* ---- tables ---- */

typedef struct {
    uint64_t n, b_period;
    uint8_t* table;
} lut_t;

static void lut_free(void* p)
{
    lut_t* t = p;
    if (t) free(t->table);
    free(t);
}

static vki_status lut1_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const lut_t* t = p;
    const uint8_t* x = ptr[0];
    uint8_t* y = ptr[1];
    const uint8_t* tb = t->table;
    for (uint64_t i = 0; i < t->n; i++) y[i] = tb[x[i]];
    return VKI_OK;
}

static lut_t* lut_new(uint64_t n, uint64_t b_period, const uint8_t* table, size_t size)
{
    lut_t* t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->table = malloc(size);
    if (!t->table) {
        free(t);
        return NULL;
    }
    memcpy(t->table, table, size);
    t->n = n;
    t->b_period = b_period;
    return t;
}

vki_status vki_graph_add_lut1(vki_graph* g, uint64_t n, const uint8_t* table, vki_ref x, vki_ref y)
{
    if (!table) FAIL(VKI_EINVAL, "lut1: table is NULL");
    lut_t* t = lut_new(n, 0, table, 256);
    if (!t) FAIL(VKI_ENOMEM, "lut1: out of memory");
    uint64_t need[2] = {n, n};
    vki_ref refs[2] = {x, y};
    return vki_graph_push(g, "lut1", lut1_run, lut_free, t, 2, refs, need);
}

static vki_status lut2_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const lut_t* t = p;
    return vki_lut2(ptr[0], ptr[1], ptr[2], t->n, t->b_period, t->table);
}

vki_status vki_graph_add_lut2(vki_graph* g, uint64_t n, uint64_t b_period, const uint8_t* table, vki_ref a,
                              vki_ref b, vki_ref y)
{
    if (!table) FAIL(VKI_EINVAL, "lut2: table is NULL");
    if (b_period > n || (b_period && n % b_period)) FAIL(VKI_EINVAL, "lut2: b_period must divide n");
    lut_t* t = lut_new(n, b_period, table, 65536);
    if (!t) FAIL(VKI_ENOMEM, "lut2: out of memory");
    uint64_t need[3] = {n, b_period ? b_period : n, n};
    vki_ref refs[3] = {a, b, y};
    return vki_graph_push(g, "lut2", lut2_run, lut_free, t, 3, refs, need);
}

/* ---- QLinearAdd (ORT's float arithmetic) on canonical bytes ---- */

typedef struct {
    uint64_t n;
    int32_t is_signed, lo, hi;
    float ra, rb, fixed;
} qadd_t;

/* Signed operands are moved back from the canonical domain in cache-sized chunks (XOR 0x80), added with
 * ORT's arithmetic, and the result moved back: three passes over 4 KiB that stay in L1. The chunks are
 * also the work items on several threads; a chunk's work is counted as 8 bytes' worth per value (two
 * conversions, two FMAs and a rounding per value: 75K values took 12.5 us on one Zen 5 core). */
#define QADD_CHUNK 4096
typedef struct {
    const qadd_t* t;
    uint8_t* const* ptr;
    _Atomic int failed;
} qadd_job;

static void xor80(uint8_t* dst, const uint8_t* src, size_t m)
{
    for (size_t k = 0; k < m; k++) dst[k] = src[k] ^ 0x80;
}

static void qadd_item(void* p, size_t item)
{
    qadd_job* j = p;
    const qadd_t* t = j->t;
    uint8_t* const* ptr = j->ptr;
    const uint64_t i = (uint64_t)item * QADD_CHUNK;
    const size_t m = t->n - i < QADD_CHUNK ? (size_t)(t->n - i) : QADD_CHUNK;
    vki_status st;
    if (!t->is_signed) {
        st = vki_qlinear_add(ptr[0] + i, ptr[1] + i, ptr[2] + i, m, 0, t->ra, t->rb, t->fixed, t->lo, t->hi);
    } else {
        static _Thread_local uint8_t a[QADD_CHUNK], b[QADD_CHUNK];  /* per thread: items run concurrently */
        xor80(a, ptr[0] + i, m);
        xor80(b, ptr[1] + i, m);
        st = vki_qlinear_add(a, b, ptr[2] + i, m, 1, t->ra, t->rb, t->fixed, t->lo, t->hi);
        for (size_t k = 0; k < m; k++) ptr[2][i + k] ^= 0x80;
    }
    if (st != VKI_OK) j->failed = 1;
}

static vki_status qadd_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const qadd_t* t = p;
    qadd_job j = {t, ptr, 0};
    vki_for_items((size_t)((t->n + QADD_CHUNK - 1) / QADD_CHUNK), t->n * 8, threads, qadd_item, &j);
    if (j.failed) FAIL(VKI_EINVAL, "qadd: bad arguments");
    return VKI_OK;
}

vki_status vki_graph_add_qadd(vki_graph* g, uint64_t n, int32_t is_signed, float ra, float rb, float fixed,
                              int32_t lo, int32_t hi, vki_ref a, vki_ref b, vki_ref y)
{
    int32_t qlo = is_signed ? -128 : 0, qhi = is_signed ? 127 : 255;
    if (lo > hi || lo < qlo || hi > qhi) FAIL(VKI_EINVAL, "qadd: bad clamp [%d, %d]", lo, hi);
    qadd_t* t = malloc(sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "qadd: out of memory");
    *t = (qadd_t){n, is_signed != 0, lo, hi, ra, rb, fixed};
    uint64_t need[3] = {n, n, n};
    vki_ref refs[3] = {a, b, y};
    return vki_graph_push(g, "qadd", qadd_run, free, t, 3, refs, need);
}

/* ---- TFLite ADD (XNNPACK's fixed point, vkinfer/reference/tflite_add.py) on canonical bytes ---- */

typedef struct {
    uint64_t n, b_period;
    int32_t za, zb, ma, mb, shift, zy, lo, hi;  /* zero points and bounds in the canonical domain */
} tadd_t;

/* Pure integer arithmetic, so the canonical domain only shifts the zero points (a - za is unchanged).
 * |acc| <= 2 * 255 * 2^21 + 2^29 < 2^31: int32 is exact. The loop needs a 32-bit vector multiply, which
 * SSE2 lacks: an AVX2 clone (chosen at load time) vectorises it, 10 MobileNetV2 residual adds 232 -> 40 us; an
 * AVX-512 one (x86-64-v4) halves that again where the CPU has it: ResNet-8's three adds 5.4 -> 2.6 us (Zen 5). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)  /* ifunc resolvers run before the sanitizer runtime is up */
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
static void tadd_rows(const uint8_t* a, const uint8_t* b, uint8_t* y, uint64_t m, int32_t za, int32_t zb, int32_t ma,
                      int32_t mb, int32_t shift, int32_t zy, int32_t lo, int32_t hi)
{
    const int32_t round = (int32_t)1 << (shift - 1);
    for (uint64_t j = 0; j < m; j++) {
        int32_t acc = ((int32_t)a[j] - za) * ma + ((int32_t)b[j] - zb) * mb + round;
        acc = (acc >> shift) + zy;
        acc = acc < lo ? lo : acc > hi ? hi : acc;
        y[j] = (uint8_t)acc;
    }
}

static vki_status tadd_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const tadd_t* t = p;
    uint64_t period = t->b_period ? t->b_period : t->n;
    for (uint64_t i0 = 0; i0 < t->n; i0 += period) {
        uint64_t m = t->n - i0 < period ? t->n - i0 : period;
        tadd_rows(ptr[0] + i0, t->b_period ? ptr[1] : ptr[1] + i0, ptr[2] + i0, m, t->za, t->zb, t->ma, t->mb,
                  t->shift, t->zy, t->lo, t->hi);
    }
    return VKI_OK;
}

vki_status vki_graph_add_tflite_add(vki_graph* g, uint64_t n, uint64_t b_period, int32_t za, int32_t zb, int32_t ma,
                                    int32_t mb, int32_t shift, int32_t zy, int32_t lo, int32_t hi, vki_ref a,
                                    vki_ref b, vki_ref y)
{
    if (b_period > n || (b_period && n % b_period)) FAIL(VKI_EINVAL, "tflite_add: b_period must divide n");
    if (za < 0 || za > 255 || zb < 0 || zb > 255 || zy < 0 || zy > 255 || lo < 0 || hi > 255 || lo > hi)
        FAIL(VKI_EINVAL, "tflite_add: zero points and bounds must be canonical bytes (lo <= hi)");
    if (shift < 1 || shift > 30 || ma < 0 || mb < 0 || ma > (1 << 21) || mb > (1 << 21))
        FAIL(VKI_EINVAL, "tflite_add: multipliers must lie in [0, 2^21] and shift in [1, 30]");
    tadd_t* t = malloc(sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "tflite_add: out of memory");
    *t = (tadd_t){n, b_period, za, zb, ma, mb, shift, zy, lo, hi};
    uint64_t need[3] = {n, b_period ? b_period : n, n};
    vki_ref refs[3] = {a, b, y};
    return vki_graph_push(g, "tflite_add", tadd_run, free, t, 3, refs, need);
}
