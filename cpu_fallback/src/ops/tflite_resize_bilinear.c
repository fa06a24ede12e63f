/* The native graph's TFLite 8-bit RESIZE_BILINEAR (XNNPACK's 11-bit integer interpolation,
 * vkinfer/reference/tflite_resize_bilinear.py), NHWC, canonical bytes.
 *
 * The host computes the taps of each output row and column (source indices i0, i1 and the 11-bit weight of i1,
 * float32 coordinates as XNNPACK's indirection does), so only integers run here:
 *     top = (tl << 11) + (tr - tl) * wx,  bottom = (bl << 11) + (br - bl) * wx
 *     y   = ((top << 11) + (bottom - top) * wy + 2^21) >> 22
 * The interpolation is linear with weights summing to 2^22, so on canonical bytes (int8 raw + 128) it gives the
 * canonical result exactly: the 128 * 2^22 offset passes through the shift unchanged. Every value stays in
 * [0, 255 * 2^22 + 2^21] (int32). */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

typedef struct {
    uint32_t n, h, w, c, oh, ow;
    uint32_t* ytaps;  /* 3 * oh: i0, i1, weight */
    uint32_t* xtaps;  /* 3 * ow */
} trb_t;

typedef struct {
    const trb_t* t;
    const uint8_t* x;
    uint8_t* y;
} trb_job;

static void trb_free(void* p)
{
    trb_t* t = p;
    if (!t) return;
    free(t->ytaps);
    free(t->xtaps);
    free(t);
}

static void trb_row(void* ctx, size_t item)
{
    const trb_job* j = ctx;
    const trb_t* t = j->t;
    size_t b = item / t->oh, oy = item % t->oh, c = t->c;
    const uint32_t* yt = t->ytaps + 3 * oy;
    const uint8_t* r0 = j->x + ((size_t)b * t->h + yt[0]) * t->w * c;
    const uint8_t* r1 = j->x + ((size_t)b * t->h + yt[1]) * t->w * c;
    const int32_t wy = (int32_t)yt[2];
    uint8_t* out = j->y + item * t->ow * c;
    for (size_t ox = 0; ox < t->ow; ox++) {
        const uint32_t* xt = t->xtaps + 3 * ox;
        const uint8_t* restrict tl = r0 + (size_t)xt[0] * c;
        const uint8_t* restrict tr = r0 + (size_t)xt[1] * c;
        const uint8_t* restrict bl = r1 + (size_t)xt[0] * c;
        const uint8_t* restrict br = r1 + (size_t)xt[1] * c;
        const int32_t wx = (int32_t)xt[2];
        uint8_t* restrict o = out + ox * c;
        for (size_t i = 0; i < c; i++) {
            int32_t top = ((int32_t)tl[i] << 11) + ((int32_t)tr[i] - (int32_t)tl[i]) * wx;
            int32_t bot = ((int32_t)bl[i] << 11) + ((int32_t)br[i] - (int32_t)bl[i]) * wx;
            int32_t acc = top * 2048 + (bot - top) * wy;
            o[i] = (uint8_t)((acc + (1 << 21)) >> 22);
        }
    }
}

static vki_status trb_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const trb_t* t = p;
    trb_job j = {t, ptr[0], ptr[1]};
    uint64_t work = (uint64_t)t->n * t->oh * t->ow * t->c * 4;
    vki_for_items((size_t)t->n * t->oh, work, threads, trb_row, &j);
    return VKI_OK;
}

static uint32_t* copy_taps(const uint32_t* taps, uint32_t count, uint32_t in_size)
{
    for (uint32_t i = 0; i < count; i++)
        if (taps[3 * i] >= in_size || taps[3 * i + 1] >= in_size || taps[3 * i + 2] > 2048) return NULL;
    uint32_t* out = malloc(3 * (size_t)count * sizeof *out);
    if (out) memcpy(out, taps, 3 * (size_t)count * sizeof *out);
    return out;
}

vki_status vki_graph_add_tflite_resize_bilinear(vki_graph* g, uint32_t n, uint32_t h, uint32_t w, uint32_t c,
                                                uint32_t oh, uint32_t ow, const uint32_t* ytaps,
                                                const uint32_t* xtaps, vki_ref x, vki_ref y)
{
    if (!n || !h || !w || !c || !oh || !ow || !ytaps || !xtaps)
        FAIL(VKI_EINVAL, "tflite_resize_bilinear: sizes must be positive and both tap tables given");
    trb_t* t = calloc(1, sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "tflite_resize_bilinear: out of memory");
    *t = (trb_t){n, h, w, c, oh, ow, copy_taps(ytaps, oh, h), copy_taps(xtaps, ow, w)};
    if (!t->ytaps || !t->xtaps) {
        trb_free(t);
        FAIL(VKI_EINVAL, "tflite_resize_bilinear: a tap leaves the input (index >= %u x %u) or weighs > 2048 "
             "(or out of memory)", h, w);
    }
    uint64_t need[2] = {vki_mul2(vki_mul2(n, (uint64_t)h * w), c), vki_mul2(vki_mul2(n, (uint64_t)oh * ow), c)};
    vki_ref refs[2] = {x, y};
    return vki_graph_push(g, "tflite_resize_bilinear", trb_run, trb_free, t, 2, refs, need);
}
