/* The native graph's constant pad of a rank <= 6 byte array. */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

typedef struct {
    uint32_t rank;
    uint8_t value;
    uint64_t ishape[VKI_GRAPH_MAX_RANK], oshape[VKI_GRAPH_MAX_RANK], pre[VKI_GRAPH_MAX_RANK];
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
    uint64_t idx[VKI_GRAPH_MAX_RANK] = {0};
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
    if (rank < 1 || rank > VKI_GRAPH_MAX_RANK || !shape || !pre || !post)
        FAIL(VKI_EINVAL, "pad: rank must be 1..%d", VKI_GRAPH_MAX_RANK);
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
