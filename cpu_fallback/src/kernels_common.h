/* Scalar helpers every ISA's microkernels share (kernels_avx2.c, kernels_avx512vnni.c, kernels_neon.c,
 * kernels_neon_dot.c): partial row loads that never touch a byte outside the row. Rows are exactly kc bytes
 * long and ASan checks it; memcpy with constant sizes compiles to single unaligned-capable scalar loads. */
#ifndef VKINFER_CPU_KERNELS_COMMON_H
#define VKINFER_CPU_KERNELS_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* p[0..n) for 0 <= n <= 7 in the low bytes of a 64-bit value (zero above). */
static inline uint64_t vki_load_partial64(const uint8_t* p, size_t n)
{
    uint64_t v = 0;
    size_t o = 0;
    if (n & 4) {
        uint32_t x;
        memcpy(&x, p, 4);
        v = x;
        o = 4;
    }
    if (n & 2) {
        uint16_t x;
        memcpy(&x, p + o, 2);
        v |= (uint64_t)x << (8 * o);
        o += 2;
    }
    if (n & 1) v |= (uint64_t)p[o] << (8 * o);
    return v;
}

/* The last n (1..7) bytes of a row of kc bytes, p pointing at them, in the low bytes (zero above). With at
 * least 8 bytes in the row, one 8-byte load ending at the row's end plus a shift is cheaper than assembling
 * bytes, and it stays inside the row because p + n - 8 >= row start. */
static inline uint64_t vki_load_tail64(const uint8_t* p, size_t n, size_t kc)
{
    if (kc >= 8) {
        uint64_t v;
        memcpy(&v, p + n - 8, 8);
        return v >> (8 * (8 - n));
    }
    return vki_load_partial64(p, n);
}

#endif
