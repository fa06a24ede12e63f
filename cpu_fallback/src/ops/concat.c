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
