/* The native graph's com.microsoft QLinearAdd (ORT's float arithmetic, vki_qlinear_add in qadd.c, the library's
 * non-graph API too) on canonical bytes. */
#include <stdlib.h>

#include "graph_internal.h"

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
