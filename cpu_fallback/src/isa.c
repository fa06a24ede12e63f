/* The list of ISA variants compiled in (best last), run-time selection, and error reporting. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "vkinfer_cpu.h"

/* One list that the operator, the C tests and the Python tests/benchmarks all iterate. */
static const vki_isa* const ISAS[] = {
    &vki_isa_scalar,
#ifdef VKI_HAVE_AVX2
    &vki_isa_avx2,
#endif
#ifdef VKI_HAVE_AVX512VNNI
    &vki_isa_avx512vnni,
#endif
#ifdef VKI_HAVE_NEON
    &vki_isa_neon,
#endif
#if defined(VKI_HAVE_NEON) && defined(__aarch64__)
    &vki_isa_neon_a7x,  /* wider tile for out-of-order cores (Cortex-A7x); AArch64 only */
    &vki_isa_neon_dot,  /* ARMv8.2 dot product (SDOT u8s8 igemm), where HWCAP_ASIMDDP says so */
#endif
};
#define NISA ((int32_t)(sizeof(ISAS) / sizeof(ISAS[0])))

static _Thread_local char last_error[512];

void vki_set_error(const char* fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
}

const char* vki_last_error(void) { return last_error; }

int32_t vki_isa_count(void) { return NISA; }

const vki_isa* vki_isa_get(int32_t index) { return index >= 0 && index < NISA ? ISAS[index] : NULL; }

const char* vki_isa_name(int32_t index)
{
    const vki_isa* isa = vki_isa_get(index);
    return isa ? isa->name : NULL;
}

int32_t vki_isa_available(int32_t index)
{
    const vki_isa* isa = vki_isa_get(index);
    return isa && isa->available() ? 1 : 0;
}

int32_t vki_isa_default(void)
{
    const char* forced = getenv("VKINFER_CPU_ISA");
    if (forced && *forced) {
        for (int32_t i = 0; i < NISA; i++)
            if (strcmp(ISAS[i]->name, forced) == 0) {
                if (vki_isa_available(i)) return i;
                vki_set_error("VKINFER_CPU_ISA=%s: this CPU cannot run that variant", forced);
                return -1;
            }
        vki_set_error("VKINFER_CPU_ISA=%s is not a variant of this build", forced);
        return -1;
    }
    for (int32_t i = NISA - 1; i >= 0; i--)
        if (vki_isa_available(i)) return i;
    return 0;
}
