/* The machine's int8 multiply-accumulate peak on one core: independent chains of the widest exact dot-product
 * instruction each ISA has, so kernels can be stated as a fraction of it (issue 12's "70% of the VNNI peak").
 * Built and run by bench/peak.py: `peak avx512vnni|avx2|avx2-int16 SECONDS`. Prints "<isa> <GOPS>" (2 ops per
 * MAC). 12 accumulators cover the instruction's latency (4-5 cycles) at 2 per cycle with room to spare. */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#define CHAINS(OP, T, ZERO, X, W)                                                                        \
    T a0 = ZERO, a1 = ZERO, a2 = ZERO, a3 = ZERO, a4 = ZERO, a5 = ZERO, a6 = ZERO, a7 = ZERO, a8 = ZERO, \
      a9 = ZERO, a10 = ZERO, a11 = ZERO;                                                                 \
    for (long i = 0; i < iters; i++) {                                                                   \
        a0 = OP(a0, X, W); a1 = OP(a1, X, W); a2 = OP(a2, X, W); a3 = OP(a3, X, W);                      \
        a4 = OP(a4, X, W); a5 = OP(a5, X, W); a6 = OP(a6, X, W); a7 = OP(a7, X, W);                      \
        a8 = OP(a8, X, W); a9 = OP(a9, X, W); a10 = OP(a10, X, W); a11 = OP(a11, X, W);                  \
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));              \
    }                                                                                                    \
    T s = a0;                                                                                            \
    s = ADD(s, a1); s = ADD(s, a2); s = ADD(s, a3); s = ADD(s, a4); s = ADD(s, a5); s = ADD(s, a6);      \
    s = ADD(s, a7); s = ADD(s, a8); s = ADD(s, a9); s = ADD(s, a10); s = ADD(s, a11);                    \
    { int v_; memcpy(&v_, &s, sizeof v_); sink = v_; }

static volatile int sink;

__attribute__((target("avx512f,avx512bw,avx512vnni"))) static double run_vnni512(long iters)
{
    const __m512i x = _mm512_set1_epi32(0x01020304), w = _mm512_set1_epi32(0x05060708);
#define ADD _mm512_add_epi32
    CHAINS(_mm512_dpbusd_epi32, __m512i, _mm512_setzero_si512(), x, w)
#undef ADD
    return 12.0 * 64 * (double)iters; /* MACs */
}

__attribute__((target("avx2"))) static __m256i madd16(__m256i acc, __m256i x, __m256i w)
{
    return _mm256_add_epi32(acc, _mm256_madd_epi16(x, w));
}

__attribute__((target("avx2"))) static double run_avx2_int16(long iters)
{
    const __m256i x = _mm256_set1_epi16(3), w = _mm256_set1_epi16(5);
#define ADD _mm256_add_epi32
    CHAINS(madd16, __m256i, _mm256_setzero_si256(), x, w)
#undef ADD
    return 12.0 * 16 * (double)iters;
}

int main(int argc, char** argv)
{
    const char* isa = argc > 1 ? argv[1] : "avx512vnni";
    const double seconds = argc > 2 ? atof(argv[2]) : 0.2;
    double (*fn)(long) = strcmp(isa, "avx512vnni") == 0 ? run_vnni512 : strcmp(isa, "avx2-int16") == 0 ? run_avx2_int16 : NULL;
    if (!fn) {
        fprintf(stderr, "unknown isa %s (avx512vnni, avx2-int16)\n", isa);
        return 2;
    }
    __builtin_cpu_init();
    if (fn == run_vnni512 && !__builtin_cpu_supports("avx512vnni")) {
        printf("%s unavailable\n", isa);
        return 0;
    }
    double best = 0;
    for (int rep = 0; rep < 7; rep++) { /* best of 7: the kernel's own speed on a shared machine */
        long iters = 1000;
        double t, macs;
        do {
            iters *= 2;
            double t0 = now();
            macs = fn(iters);
            t = now() - t0;
        } while (t < seconds / 7);
        if (2 * macs / t > best) best = 2 * macs / t;
    }
    printf("%s %.1f\n", isa, best * 1e-9);
    return 0;
}
