/* The native graph's 8-bit unary table lookup: y[i] = table[x[i]] (every 8-bit unary operator, its table made
 * from the numpy reference by the lowering). */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

typedef struct {
    uint64_t n;
    uint8_t table[256];
} lut1_t;

static vki_status lut1_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const lut1_t* t = p;
    const uint8_t* x = ptr[0];
    uint8_t* y = ptr[1];
    const uint8_t* tb = t->table;
    for (uint64_t i = 0; i < t->n; i++) y[i] = tb[x[i]];
    return VKI_OK;
}

vki_status vki_graph_add_lut1(vki_graph* g, uint64_t n, const uint8_t* table, vki_ref x, vki_ref y)
{
    if (!table) FAIL(VKI_EINVAL, "lut1: table is NULL");
    lut1_t* t = malloc(sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "lut1: out of memory");
    t->n = n;
    memcpy(t->table, table, sizeof t->table);
    uint64_t need[2] = {n, n};
    vki_ref refs[2] = {x, y};
    return vki_graph_push(g, "lut1", lut1_run, free, t, 2, refs, need);
}
