/* The native graph's concatenation along the last axis, each input optionally mapped through a 256-byte table
 * (the requantization of a QLinearConcat input). */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

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

/* Rows in work items of about CONCAT_ITEM_BYTES of output over the graph's threads, tables through the shared
 * byte lookup: YOLOX-tiny's 18 requantizing concats (ddddocr_det) took 1.37 ms per run on one thread either way
 * before (a byte loop, one thread). */
#define CONCAT_ITEM_BYTES 65536

typedef struct {
    const concat_t* t;
    uint8_t* const* ptr;
    uint64_t rows_per_item;
} concat_job;

static void concat_item(void* p, size_t item)
{
    const concat_job* j = p;
    const concat_t* t = j->t;
    const uint64_t r0 = (uint64_t)item * j->rows_per_item;
    const uint64_t r1 = r0 + j->rows_per_item < t->rows ? r0 + j->rows_per_item : t->rows;
    uint8_t* y = j->ptr[t->n_in];
    uint64_t col = 0;
    for (uint32_t i = 0; i < t->n_in; i++) {
        const uint8_t* x = j->ptr[i];
        const uint32_t w = t->widths[i];
        const uint8_t* tb = t->has_table[i] ? t->tables + 256 * (size_t)i : NULL;
        for (uint64_t r = r0; r < r1; r++) {
            uint8_t* d = y + r * t->out_w + col;
            const uint8_t* s = x + r * w;
            if (tb) vki_lut_bytes(tb, s, d, w);
            else memcpy(d, s, w);
        }
        col += w;
    }
}

static vki_status concat_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const concat_t* t = p;
    if (!t->rows || !t->out_w) return VKI_OK;
    concat_job j = {t, ptr, t->out_w >= CONCAT_ITEM_BYTES ? 1 : CONCAT_ITEM_BYTES / t->out_w};
    vki_for_items((size_t)((t->rows + j.rows_per_item - 1) / j.rows_per_item), t->rows * t->out_w, threads,
                  concat_item, &j);
    return VKI_OK;
}

vki_status vki_graph_add_concat(vki_graph* g, uint32_t n_in, uint64_t rows, const uint32_t* widths,
                                const uint8_t* const* tables, const vki_ref* xs, vki_ref y)
{
    if (n_in < 1 || n_in >= VKI_GRAPH_MAX_REFS || !widths || !xs)
        FAIL(VKI_EINVAL, "concat: 1 to %d inputs", VKI_GRAPH_MAX_REFS - 1);
    concat_t* t = calloc(1, sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "concat: out of memory");
    t->n_in = n_in;
    t->rows = rows;
    t->widths = malloc(n_in * sizeof *t->widths);
    t->tables = calloc(n_in, 256);
    t->has_table = calloc(n_in, 1);
    /* On the heap: up to VKI_GRAPH_MAX_REFS operands. */
    vki_ref* refs = malloc((n_in + 1) * sizeof *refs);
    uint64_t* need = malloc((n_in + 1) * sizeof *need);
    if (!t->widths || !t->tables || !t->has_table || !refs || !need) {
        free(refs);
        free(need);
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
    vki_status st = vki_graph_push(g, "concat", concat_run, concat_free, t, n_in + 1, refs, need);
    free(refs);
    free(need);
    return st;
}
