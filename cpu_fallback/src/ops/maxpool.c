/* The native graph's max pool (vkinfer/reference/max_pool.py), NHWC, canonical bytes.
 *
 * The numpy reference is the contract; every result here is bit-identical to it. Inner loops run over channels
 * (contiguous in NHWC) and are written for the auto-vectoriser (pool_common.h). */
#include <stdlib.h>
#include <string.h>

#include "pool_common.h"

typedef struct {
    geom_t q;
    const uint8_t* x;
    uint8_t* y;
} pool_job;

static inline void max_into(uint8_t* restrict d, const uint8_t* restrict s, size_t c)
{
    for (size_t i = 0; i < c; i++) d[i] = d[i] > s[i] ? d[i] : s[i];
}

/* One output row. The canonical domain keeps int8's order, so the max of canonical bytes is the canonical
 * max; taps outside the input are skipped (ORT: padding never contributes). A window whose dilated taps all
 * miss the input (possible with dilation and pads) gives qmin, canonical 0, as the reference's qmin padding. */
static void maxpool_row(void* ctx, size_t item)
{
    const pool_job* j = ctx;
    const geom_t* q = &j->q;
    size_t b = item / q->oh, oy = item % q->oh, c = q->c;
    const uint8_t* xb = j->x + b * q->h * q->w * c;
    uint8_t* yrow = j->y + item * q->ow * c;
    int64_t iy0 = (int64_t)oy * q->sh - q->pt;
    uint8_t acc[CBLK];  /* one channel block of the window's max, stored once */
    for (size_t ox = 0; ox < q->ow; ox++) {
        int64_t ix0 = (int64_t)ox * q->sw - q->pl;
        for (size_t c0 = 0; c0 < c; c0 += CBLK) {
            size_t nc = c - c0 < CBLK ? c - c0 : CBLK;
            memset(acc, 0, nc);  /* canonical qmin: the result of a window with no input pixel */
            for (uint32_t ky = 0; ky < q->kh; ky++) {
                int64_t iy = iy0 + (int64_t)ky * q->dh;
                if (iy < 0) continue;
                if (iy >= q->h) break;
                for (uint32_t kx = 0; kx < q->kw; kx++) {
                    int64_t ix = ix0 + (int64_t)kx * q->dw;
                    if (ix < 0) continue;
                    if (ix >= q->w) break;
                    max_into(acc, xb + ((size_t)iy * q->w + (size_t)ix) * c + c0, nc);
                }
            }
            memcpy(yrow + ox * c + c0, acc, nc);
        }
    }
}

static vki_status maxpool_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    pool_job j = {*(const geom_t*)p, ptr[0], ptr[1]};
    const geom_t* q = &j.q;
    uint64_t work = (uint64_t)q->n * q->oh * q->ow * q->c * q->kh * q->kw;
    vki_for_items((size_t)q->n * q->oh, work, threads, maxpool_row, &j);
    return VKI_OK;
}

vki_status vki_graph_add_maxpool(vki_graph* g, uint32_t n, uint32_t h, uint32_t w, uint32_t c, uint32_t oh,
                                 uint32_t ow, uint32_t kh, uint32_t kw, uint32_t sh, uint32_t sw, uint32_t dh,
                                 uint32_t dw, uint32_t pt, uint32_t pl, vki_ref x, vki_ref y)
{
    geom_t q = {n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl};
    uint64_t need[2];
    int ok;
    vki_status st = check_geom("maxpool", &q, x, y, need, &ok, 0);
    if (st != VKI_OK) return st;
    vki_ref refs[2] = {x, y};
    geom_t* t = NULL;
    if (ok) {
        t = malloc(sizeof *t);
        if (!t) FAIL(VKI_ENOMEM, "maxpool: out of memory");
        *t = q;
    }
    return vki_graph_push(g, "maxpool", maxpool_run, free, t, 2, refs, need);
}
