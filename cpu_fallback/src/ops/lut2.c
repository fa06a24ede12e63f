/* The native graph's 8-bit binary table lookup: y[i] = table[a[i] * 256 + b[i]] (vki_lut2 in qadd.c, the
 * library's non-graph API too), b optionally one broadcast row. */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

typedef struct {
    uint64_t n, b_period;
    uint8_t table[65536];
} lut2_t;

static vki_status lut2_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const lut2_t* t = p;
    return vki_lut2(ptr[0], ptr[1], ptr[2], t->n, t->b_period, t->table);
}

vki_status vki_graph_add_lut2(vki_graph* g, uint64_t n, uint64_t b_period, const uint8_t* table, vki_ref a,
                              vki_ref b, vki_ref y)
{
    if (!table) FAIL(VKI_EINVAL, "lut2: table is NULL");
    if (b_period > n || (b_period && n % b_period)) FAIL(VKI_EINVAL, "lut2: b_period must divide n");
    lut2_t* t = malloc(sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "lut2: out of memory");
    t->n = n;
    t->b_period = b_period;
    memcpy(t->table, table, sizeof t->table);
    uint64_t need[3] = {n, b_period ? b_period : n, n};
    vki_ref refs[3] = {a, b, y};
    return vki_graph_push(g, "lut2", lut2_run, free, t, 3, refs, need);
}
