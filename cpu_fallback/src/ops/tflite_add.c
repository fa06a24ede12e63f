/* The native graph's TFLite ADD (XNNPACK's fixed point, vkinfer/reference/tflite_add.py) on canonical bytes. */
#include <stdlib.h>

#include "graph_internal.h"

typedef struct {
    uint64_t n, b_period;
    int32_t za, zb, ma, mb, shift, zy, lo, hi;  /* zero points and bounds in the canonical domain */
} tadd_t;

/* Pure integer arithmetic, so the canonical domain only shifts the zero points (a - za is unchanged).
 * |acc| <= 2 * 255 * 2^21 + 2^29 < 2^31: int32 is exact. The loop needs a 32-bit vector multiply, which
 * SSE2 lacks: an AVX2 clone (chosen at load time) vectorises it, 10 MobileNetV2 residual adds 232 -> 40 us; an
 * AVX-512 one (x86-64-v4) halves that again where the CPU has it: ResNet-8's three adds 5.4 -> 2.6 us (Zen 5). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)  /* ifunc resolvers run before the sanitizer runtime is up */
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
static void tadd_rows(const uint8_t* a, const uint8_t* b, uint8_t* y, uint64_t m, int32_t za, int32_t zb, int32_t ma,
                      int32_t mb, int32_t shift, int32_t zy, int32_t lo, int32_t hi)
{
    const int32_t round = (int32_t)1 << (shift - 1);
    for (uint64_t j = 0; j < m; j++) {
        int32_t acc = ((int32_t)a[j] - za) * ma + ((int32_t)b[j] - zb) * mb + round;
        acc = (acc >> shift) + zy;
        acc = acc < lo ? lo : acc > hi ? hi : acc;
        y[j] = (uint8_t)acc;
    }
}

static vki_status tadd_run(void* p, uint8_t* const* ptr, uint32_t threads)
{
    const tadd_t* t = p;
    uint64_t period = t->b_period ? t->b_period : t->n;
    for (uint64_t i0 = 0; i0 < t->n; i0 += period) {
        uint64_t m = t->n - i0 < period ? t->n - i0 : period;
        tadd_rows(ptr[0] + i0, t->b_period ? ptr[1] : ptr[1] + i0, ptr[2] + i0, m, t->za, t->zb, t->ma, t->mb,
                  t->shift, t->zy, t->lo, t->hi);
    }
    return VKI_OK;
}

vki_status vki_graph_add_tflite_add(vki_graph* g, uint64_t n, uint64_t b_period, int32_t za, int32_t zb, int32_t ma,
                                    int32_t mb, int32_t shift, int32_t zy, int32_t lo, int32_t hi, vki_ref a,
                                    vki_ref b, vki_ref y)
{
    if (b_period > n || (b_period && n % b_period)) FAIL(VKI_EINVAL, "tflite_add: b_period must divide n");
    if (za < 0 || za > 255 || zb < 0 || zb > 255 || zy < 0 || zy > 255 || lo < 0 || hi > 255 || lo > hi)
        FAIL(VKI_EINVAL, "tflite_add: zero points and bounds must be canonical bytes (lo <= hi)");
    if (shift < 1 || shift > 30 || ma < 0 || mb < 0 || ma > (1 << 21) || mb > (1 << 21))
        FAIL(VKI_EINVAL, "tflite_add: multipliers must lie in [0, 2^21] and shift in [1, 30]");
    tadd_t* t = malloc(sizeof *t);
    if (!t) FAIL(VKI_ENOMEM, "tflite_add: out of memory");
    *t = (tadd_t){n, b_period, za, zb, ma, mb, shift, zy, lo, hi};
    uint64_t need[3] = {n, b_period ? b_period : n, n};
    vki_ref refs[3] = {a, b, y};
    return vki_graph_push(g, "tflite_add", tadd_run, free, t, 3, refs, need);
}
