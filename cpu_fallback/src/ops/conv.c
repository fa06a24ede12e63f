/* The convolution operator of the native graph (and GEMM as a 1x1 convolution): a prepared vki_conv
 * (conv.c, the kernels' driver, also the library's non-graph API) run on two graph operands. Its name reports the
 * kernel family ("conv:avx512vnni"). */
#include <stdio.h>

#include "graph_internal.h"

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
    char name[VKI_GRAPH_NAME_LEN];
    snprintf(name, sizeof name, "conv:%s", vki_conv_kernel(cv));
    return vki_graph_push(g, name, conv_run, conv_free, cv, 2, refs, need);
}
