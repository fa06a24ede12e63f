/* The native graph's 8-bit unary table lookup: y[i] = table[x[i]] (every 8-bit unary operator, its table made
 * from the numpy reference by the lowering).
 *
 * With AVX-512 VBMI (Ice Lake, Zen 4 and later) 64 bytes per step: two VPERMI2B over the table's halves and a
 * blend on each byte's top bit. YOLOX-tiny's 80 SiLU tables (ddddocr_det, 1 Zen 4 core): 5.6 ms per run byte by
 * byte. Work items of LUT1_CHUNK bytes spread over the graph's threads. */
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

#define LUT1_CHUNK 65536

typedef struct {
    uint64_t n;
    uint8_t table[256];
} lut1_t;

typedef struct {
    const lut1_t* t;
    const uint8_t* x;
    uint8_t* y;
} lut1_job;

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>

__attribute__((target("avx512f,avx512bw,avx512vbmi"))) static size_t lut1_vbmi(const uint8_t* tb, const uint8_t* x,
                                                                               uint8_t* y, size_t n)
{
    const __m512i t0 = _mm512_loadu_si512((const void*)tb), t1 = _mm512_loadu_si512((const void*)(tb + 64));
    const __m512i t2 = _mm512_loadu_si512((const void*)(tb + 128)), t3 = _mm512_loadu_si512((const void*)(tb + 192));
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        const __m512i v = _mm512_loadu_si512((const void*)(x + i));
        const __m512i lo = _mm512_permutex2var_epi8(t0, v, t1); /* entries 0..127 by the low 7 bits */
        const __m512i hi = _mm512_permutex2var_epi8(t2, v, t3); /* entries 128..255 */
        _mm512_storeu_si512((void*)(y + i), _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi));
    }
    return i;
}

static int have_vbmi(void)
{
    static int have = -1;
    if (have < 0) {
        const char* forced = getenv("VKINFER_CPU_ISA"); /* "scalar" or "avx2": the byte loop (the tests run both) */
        __builtin_cpu_init();
        have = !(forced && (strcmp(forced, "scalar") == 0 || strcmp(forced, "avx2") == 0)) &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vbmi");
    }
    return have;
}
#endif

void vki_lut_bytes(const uint8_t* tb, const uint8_t* x, uint8_t* y, size_t n)
{
    size_t i = 0;
#if defined(__x86_64__) || defined(_M_X64)
    if (have_vbmi()) i = lut1_vbmi(tb, x, y, n);
#endif
    for (; i < n; i++) y[i] = tb[x[i]];
}

static void lut1_item(void* p, size_t item)
{
    const lut1_job* j = p;
    const uint64_t i0 = (uint64_t)item * LUT1_CHUNK, m = j->t->n - i0 < LUT1_CHUNK ? j->t->n - i0 : LUT1_CHUNK;
    vki_lut_bytes(j->t->table, j->x + i0, j->y + i0, (size_t)m);
}

static vki_status lut1_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const lut1_t* t = p;
    lut1_job j = {t, ptr[0], ptr[1]};
    vki_for_items((size_t)((t->n + LUT1_CHUNK - 1) / LUT1_CHUNK), t->n, threads, lut1_item, &j);
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
