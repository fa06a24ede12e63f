/* AVX2 microkernels (compiled with -mavx2, no FMA, -ffp-contract=off).
 *
 * Products are formed exactly with VPMADDWD on int16 operands: (x - x_zp) and (w - w_zp) both lie in
 * [-255, 255], so each pair sum fits easily in int32 and nothing saturates. VPMADDUBSW saturates to
 * int16, so it is used only where it provably cannot: the u8s8 igemm (a2q_*), which conv.c selects
 * for layers whose every (w - w_zp) lies in [-64, 64] (internal.h), where each u8 x s8 pair sum is at
 * most 255 * 128 = 32640 in magnitude. All other layers keep the int16 form.
 *
 * kernels_avx512vnni.c mirrors this file with wider vectors (except the depthwise main loop, where
 * it keeps the simpler widen-to-int32 form used here for groups of 8); keep the two in step. The
 * igemm here now also has shape-specialised variants (nc <= 8, mr 1/2) and widens activations into
 * a ring buffer ahead of the multiply-adds, which the VNNI file does not have yet: VPDPWSSD fuses
 * the add, so its trade-offs differ.
 */
#include <immintrin.h>
#include <string.h>

#include "internal.h"
#include "kernels_common.h"

#define A2_MR 4
#define A2_NR 16 /* two ymm of int32 accumulators per row */
#define A2_KR 2  /* k pairs: one VPMADDWD consumes (a[k], a[k+1]) x (w[k], w[k+1]) */
#define A2_CR 16 /* dw weight padding: the dw kernel never reads past round_up(channels, 8) */

static int a2_available(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2");
}

/* ------------------------------------------------------------------------------------------------
 * Shared helpers
 */

/* The last n (1..7) bytes of a row of kc bytes, p pointing at them, in the low bytes of an xmm (zero above). */
static inline __m128i a2_load_tail(const uint8_t* p, size_t n, size_t kc)
{
    return _mm_cvtsi64_si128((long long)vki_load_tail64(p, n, kc));
}

/* Exactly vki_requant_scalar on 8 lanes: one float multiply (no FMA), clamp, round half to even
 * (VCVTPS2DQ under the default MXCSR), add y_zp. The clamp order matches the scalar code; with
 * finite inputs and non-NaN bounds max/min agree with its comparisons. */
static inline __m256i a2_requant(__m256i acc, __m256 scale, __m256 fmin, __m256 fmax, __m256i yzp)
{
    __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(acc), scale);
    f = _mm256_max_ps(f, fmin);
    f = _mm256_min_ps(f, fmax);
    return _mm256_add_epi32(_mm256_cvtps_epi32(f), yzp);
}

/* Low bytes of 16 int32 in [-128, 255] (v0: elements 0..7, v1: 8..15), in order. Signed saturation
 * to int16 is exact on that range; masking to 0..255 then makes the unsigned 8-bit pack exact too
 * (a direct saturating pack to u8 or s8 would clip one end of the range). */
static inline __m128i a2_pack16(__m256i v0, __m256i v1)
{
    __m256i h = _mm256_packs_epi32(v0, v1);                 /* [v0 0-3, v1 0-3 | v0 4-7, v1 4-7] */
    h = _mm256_and_si256(h, _mm256_set1_epi16(0xFF));
    h = _mm256_permute4x64_epi64(h, _MM_SHUFFLE(3, 1, 2, 0)); /* [v0 0-7 | v1 0-7] */
    return _mm_packus_epi16(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

/* Same for 8 int32 (one ymm): result in the low 8 bytes. */
static inline __m128i a2_pack8(__m256i v)
{
    __m128i h = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    h = _mm_and_si128(h, _mm_set1_epi16(0xFF));
    return _mm_packus_epi16(h, h);
}

/* ------------------------------------------------------------------------------------------------
 * QLinearAdd (vkinfer/reference/qlinear_add.py; the scalar loop in qadd.c is the readable form):
 * y = clamp(cvt(fma(a, ra, fma(b, rb, fixed)))), 8 elements per step. VFMADD rounds once, as fmaf does;
 * VCVTPS2DQ rounds half to even under the default MXCSR and gives INT32_MIN for NaN or out of range,
 * as the scalar code does; the clamp and the byte pack are then exact. This one function is compiled
 * for FMA too (a target attribute), and only called when the CPU has it.
 */
int vki_qadd_avx2fma_available(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

__attribute__((target("avx2,fma"))) size_t vki_qadd_avx2fma(const uint8_t* a, const uint8_t* b, uint8_t* y,
                                                            size_t n, int32_t is_signed, float ra, float rb,
                                                            float fixed, int32_t lo, int32_t hi)
{
    const __m256 vra = _mm256_set1_ps(ra), vrb = _mm256_set1_ps(rb), vfixed = _mm256_set1_ps(fixed);
    const __m256i vlo = _mm256_set1_epi32(lo), vhi = _mm256_set1_epi32(hi);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128i a8 = _mm_loadl_epi64((const __m128i*)(a + i));
        __m128i b8 = _mm_loadl_epi64((const __m128i*)(b + i));
        __m256i ai = is_signed ? _mm256_cvtepi8_epi32(a8) : _mm256_cvtepu8_epi32(a8);
        __m256i bi = is_signed ? _mm256_cvtepi8_epi32(b8) : _mm256_cvtepu8_epi32(b8);
        __m256 v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ai), vra,
                                   _mm256_fmadd_ps(_mm256_cvtepi32_ps(bi), vrb, vfixed));
        __m256i r = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(v), vlo), vhi);
        _mm_storel_epi64((__m128i*)(y + i), a2_pack8(r));
    }
    return i;
}

/* ------------------------------------------------------------------------------------------------
 * igemm: MR=4 rows x NR=16 channels, weights int16 [ks][ceil(kc/2)][16][2].
 *
 * a2_igemm dispatches on (mr, nc, kc) to compile-time specialisations: only rows that are distinct
 * (1, 2 or 4; rows >= mr repeat a valid row) and only the 8-channel halves that hold outputs
 * (nc <= 8: half the VPMADDWD/VPADDD, one requantization per row) are computed. All read the same
 * packed layout; the nc <= 8 variants simply use the first 16 int16 of each 32-int16 pair row.
 */

/* Activations are widened to int16 (x - x_zp) into a small ring buffer on the stack, 16 k per step
 * (per row: one 16-byte load, VPMOVZXBW, VPSUBW, one 32-byte store), and each (a[k], a[k+1]) pair
 * is then broadcast to all 8 dword lanes straight from memory with VBROADCASTSS, which on Zen and
 * Intel cores is a pure load (no vector ALU uop): per pair and row the loop then spends only the
 * VPMADDWD + VPADDD per 8 channels that the products need.
 *
 * The widening runs A2_AHEAD steps ahead of the multiply-adds, across taps, so the broadcasts never
 * wait on the stores just made (the previous form widened a 256-k chunk, or a whole short tap, and
 * read it back at once: each chunk and each tap started with a store-to-load round trip, and short
 * rows took a register form with a VPSHUFD per pair and row instead). Measured on Zen 5 at -mavx2,
 * 4x16 tiles, MAC/ns, old -> new: kc 16: 48 -> 54, kc 32: 59 -> 71, kc 64: 79 -> 82, kc 960: 96 ->
 * 100, ks 9 x kc 32: 73 -> 97. (Its own ceiling: an asm loop of just this pair step, weights and
 * broadcasts from L1, reaches ~98.) */
#define A2_RING 8  /* steps in the ring (a power of two): 4 rows x 256 B of stack */
#define A2_AHEAD 2 /* steps widened ahead of the one being multiplied */

/* n (1..15) bytes of a row at p, zero above, without reading outside the row: `before_end` row bytes
 * lie before p + n. */
static inline __m128i a2_load_upto16(const uint8_t* p, size_t n, size_t before_end)
{
    if (n >= 8) {
        const __m128i lo = _mm_loadl_epi64((const __m128i*)(const void*)p);
        return n == 8 ? lo : _mm_unpacklo_epi64(lo, a2_load_tail(p + 8, n - 8, before_end));
    }
    return a2_load_tail(p, n, before_end);
}

/* GCC reassociates chains of integer adds across the unrolled pairs into add trees, which needs
 * more live ymm than the 16 available and spills accumulators in the inner loop. An empty asm that
 * "modifies" the accumulators after each pair makes their values opaque and keeps one chain each. */
#define A2_PIN(A) __asm__("" : "+x"(A))

/* Pair (a[2j], a[2j+1]) of row R (as one int32) of the current step in all 8 dword lanes. */
#define A2_BCAST(R, J) \
    _mm256_castps_si256(_mm256_broadcast_ss((const float*)(const void*)(xs + (R) * A2_RING * 16 + 2 * (J))))

/* Row R's share of one pair: one broadcast, one or two VPMADDWD + VPADDD. */
#define A2_ROW(R, J, ACC0, ACC1)                                                                       \
    do {                                                                                               \
        const __m256i b_ = A2_BCAST(R, J);                                                             \
        ACC0 = _mm256_add_epi32(ACC0, _mm256_madd_epi16(b_, w0_));                                     \
        A2_PIN(ACC0);                                                                                  \
        if (HALVES > 1) {                                                                              \
            ACC1 = _mm256_add_epi32(ACC1, _mm256_madd_epi16(b_, w1_));                                 \
            A2_PIN(ACC1);                                                                              \
        }                                                                                              \
    } while (0)

/* Pair J of the current step for ROWS rows against the 16 (HALVES == 2) or first 8 channels at W.
 * Named accumulators (not an array, which GCC keeps in memory) and compile-time ROWS/HALVES: the
 * dead rows and halves disappear. */
#define A2_PAIR(J, W)                                                                                  \
    do {                                                                                               \
        const __m256i w0_ = _mm256_loadu_si256((const __m256i*)(const void*)(W));                      \
        const __m256i w1_ = HALVES > 1 ? _mm256_loadu_si256((const __m256i*)(const void*)((W) + 16)) : w0_; \
        A2_ROW(0, J, acc00, acc01);                                                                    \
        if (ROWS > 1) A2_ROW(1, J, acc10, acc11);                                                      \
        if (ROWS > 2) A2_ROW(2, J, acc20, acc21);                                                      \
        if (ROWS > 3) A2_ROW(3, J, acc30, acc31);                                                      \
    } while (0)

/* Widen step `ps` (tap pt, bytes pk.. of each row) into its ring slot, then advance. Slots past the
 * row's end (last step of a tap) hold -x_zp and only ever meet zero weights (k >= kc). */
#define A2_WIDEN_STEP()                                                                                \
    do {                                                                                               \
        const size_t n_ = kc - pk < 16 ? kc - pk : 16;                                                 \
        int16_t* d_ = &xb[0][(ps % A2_RING) * 16];                                                     \
        const uint8_t* const* ar_ = a + pt * A2_MR;                                                    \
        if (n_ == 16) { /* the test outside the row loop: GCC then unrolls it without branches */      \
            for (int r_ = 0; r_ < ROWS; r_++)                                                          \
                _mm256_store_si256(                                                                    \
                    (__m256i*)(void*)(d_ + r_ * A2_RING * 16),                                         \
                    _mm256_sub_epi16(                                                                  \
                        _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i*)(const void*)(ar_[r_] + pk))), \
                        vxzp));                                                                        \
        } else {                                                                                       \
            for (int r_ = 0; r_ < ROWS; r_++)                                                          \
                _mm256_store_si256(                                                                    \
                    (__m256i*)(void*)(d_ + r_ * A2_RING * 16),                                         \
                    _mm256_sub_epi16(_mm256_cvtepu8_epi16(a2_load_upto16(ar_[r_] + pk, n_, pk + n_)), vxzp)); \
        }                                                                                              \
        pk += 16;                                                                                      \
        if (pk >= kc) pk = 0, pt++;                                                                    \
        ps++;                                                                                          \
    } while (0)

/* Requantize row R's accumulators and store its nc bytes (HALVES == 1: nc <= 8, one ymm). */
#define A2_STORE_ROW(R, ACC0, ACC1)                                                                    \
    do {                                                                                               \
        uint8_t* row_ = c + (R) * c_stride;                                                            \
        if (HALVES > 1) {                                                                              \
            const __m128i v_ = a2_pack16(a2_requant(ACC0, scale0, vfmin, vfmax, vyzp),                 \
                                         a2_requant(ACC1, scale1, vfmin, vfmax, vyzp));                \
            if (nc == A2_NR) {                                                                         \
                _mm_storeu_si128((__m128i*)(void*)row_, v_);                                           \
            } else {                                                                                   \
                uint8_t buf_[16];                                                                      \
                _mm_storeu_si128((__m128i*)(void*)buf_, v_);                                           \
                memcpy(row_, buf_, nc);                                                                \
            }                                                                                          \
        } else {                                                                                       \
            const __m128i v_ = a2_pack8(a2_requant(ACC0, scale0, vfmin, vfmax, vyzp));                 \
            if (nc == 8) {                                                                             \
                _mm_storel_epi64((__m128i*)(void*)row_, v_);                                           \
            } else {                                                                                   \
                uint8_t buf_[16];                                                                      \
                _mm_storeu_si128((__m128i*)(void*)buf_, v_);                                           \
                memcpy(row_, buf_, nc);                                                                \
            }                                                                                          \
        }                                                                                              \
    } while (0)

/* Requantize and store rows < mr of the accumulator tile acc00..acc31 (for ROWS == 4 and mr == 3,
 * row 3 is a repeat); shared by the int16 and the u8 x s8 kernels. */
#define A2_STORE_TILE()                                                                                \
    do {                                                                                               \
        const __m256 vfmin = _mm256_set1_ps(q->fmin);                                                  \
        const __m256 vfmax = _mm256_set1_ps(q->fmax);                                                  \
        const __m256i vyzp = _mm256_set1_epi32(q->y_zp);                                               \
        const __m256 scale0 = _mm256_loadu_ps(scale);                                                  \
        const __m256 scale1 = HALVES > 1 ? _mm256_loadu_ps(scale + 8) : scale0;                        \
        A2_STORE_ROW(0, acc00, acc01);                                                                 \
        if (ROWS > 1) A2_STORE_ROW(1, acc10, acc11);                                                   \
        if (ROWS > 2 && mr > 2) A2_STORE_ROW(2, acc20, acc21);                                         \
        if (ROWS > 3 && mr > 3) A2_STORE_ROW(3, acc30, acc31);                                         \
    } while (0)

/* ROWS (1, 2 or 4) distinct rows, HALVES (1: nc <= 8, only channels 0..7 computed; 2: all 16).
 * Always inlined into the fixed instances below so that both are constants. The steps run over all
 * taps in one sequence (ceil(kc / 16) per tap; the last one of a tap may be partial), the weights
 * pointer simply advancing through [ks][ceil(kc/2)][16][2]. */
static inline __attribute__((always_inline)) void a2_igemm_t(size_t mr, size_t nc, size_t kc, size_t ks,
                                                             const uint8_t* const* a, const void* w, uint8_t* c,
                                                             size_t c_stride, const vki_qparams* q, const int ROWS,
                                                             const int HALVES)
{
    const int32_t* bias = (const int32_t*)w;
    const float* scale = (const float*)(bias + A2_NR);
    const int16_t* wt = (const int16_t*)(scale + A2_NR);
    _Alignas(32) int16_t xb[4][A2_RING * 16];
    const __m256i vxzp = _mm256_set1_epi16((int16_t)q->x_zp);

    /* The bias seeds the accumulators. */
    __m256i acc00 = _mm256_loadu_si256((const __m256i*)(const void*)bias);
    __m256i acc01 = HALVES > 1 ? _mm256_loadu_si256((const __m256i*)(const void*)(bias + 8)) : acc00;
    __m256i acc10 = acc00, acc11 = acc01, acc20 = acc00, acc21 = acc01, acc30 = acc00, acc31 = acc01;

    const size_t steps = ks * ((kc + 15) / 16);
    size_t ps = 0, pt = 0, pk = 0; /* next step to widen: its tap and first byte */
    for (size_t i = 0; i < A2_AHEAD && ps < steps; i++) A2_WIDEN_STEP();
    size_t ck = 0; /* first byte of the step being multiplied, within its tap */
    for (size_t s = 0; s < steps; s++) {
        if (ps < steps) A2_WIDEN_STEP();
        const int16_t* xs = &xb[0][(s % A2_RING) * 16];
        if (kc - ck >= 16) {
            A2_PAIR(0, wt);
            A2_PAIR(1, wt + 32);
            A2_PAIR(2, wt + 64);
            A2_PAIR(3, wt + 96);
            A2_PAIR(4, wt + 128);
            A2_PAIR(5, wt + 160);
            A2_PAIR(6, wt + 192);
            A2_PAIR(7, wt + 224);
            wt += 8 * A2_NR * A2_KR;
        } else { /* a tap's last 1..15 k: ceil(n/2) pairs (its weights end there); for odd n the last
                  * pair's second slot holds -x_zp against a zero weight */
            const size_t np = (kc - ck + 1) / 2;
            for (size_t j = 0; j < np; j++) {
                A2_PAIR(j, wt);
                wt += A2_NR * A2_KR;
            }
        }
        ck += 16;
        if (ck >= kc) ck = 0;
    }

    A2_STORE_TILE();
}

/* noinline keeps a2_igemm a tiny dispatcher that tail-jumps (inlining the instances gave it their
 * frames and callee-saved pushes on every call). */
#define A2_INSTANCE(NAME, ROWS, HALVES)                                                                \
    static __attribute__((noinline)) void NAME(size_t mr, size_t nc, size_t kc, size_t ks,             \
                                               const uint8_t* const* a, const void* w, uint8_t* c,     \
                                               size_t c_stride, const vki_qparams* q)                  \
    {                                                                                                  \
        a2_igemm_t(mr, nc, kc, ks, a, w, c, c_stride, q, ROWS, HALVES);                                \
    }
A2_INSTANCE(a2_igemm_4x16, 4, 2)
A2_INSTANCE(a2_igemm_4x8, 4, 1)
A2_INSTANCE(a2_igemm_2x16, 2, 2)
A2_INSTANCE(a2_igemm_2x8, 2, 1)
A2_INSTANCE(a2_igemm_1x16, 1, 2)
A2_INSTANCE(a2_igemm_1x8, 1, 1)

/* Dispatch on the tile shape: only distinct rows (mr 1, 2; mr 3 runs 4 with one repeat) and only
 * the 8-channel half(s) that hold outputs are computed; packed weights stay [..][16][2] either way. */
static void a2_igemm(size_t mr, size_t nc, size_t kc, size_t ks, const uint8_t* const* a, const void* w,
                     uint8_t* c, size_t c_stride, const vki_qparams* q)
{
    if (mr > 2) {
        if (nc > 8) a2_igemm_4x16(mr, nc, kc, ks, a, w, c, c_stride, q);
        else a2_igemm_4x8(mr, nc, kc, ks, a, w, c, c_stride, q);
    } else if (mr == 2) {
        if (nc > 8) a2_igemm_2x16(mr, nc, kc, ks, a, w, c, c_stride, q);
        else a2_igemm_2x8(mr, nc, kc, ks, a, w, c, c_stride, q);
    } else {
        if (nc > 8) a2_igemm_1x16(mr, nc, kc, ks, a, w, c, c_stride, q);
        else a2_igemm_1x8(mr, nc, kc, ks, a, w, c, c_stride, q);
    }
}

/* ------------------------------------------------------------------------------------------------
 * u8s8 igemm for 7-bit weights (internal.h, VKI_U8S8_WMAX): MR=4 x NR=16, weights int8
 * [ks][ceil(kc/4)][16][4], bias already holding -x_zp * sum(w - w_zp).
 *
 * Per 4 k and row: one VPBROADCASTD of the row's 4 raw activation bytes straight from memory (a
 * load-port uop: no widening, no x_zp subtraction), then per 8 channels VPMADDUBSW (u8 x s8 pairs
 * to int16: |a0 w0 + a1 w1| <= 255 * 128 = 32640, never saturates), VPMADDWD with ones (adjacent
 * int16 to int32, exact) and VPADDD. The int16 results are never added to each other. Against the
 * int16 form this halves the weight bytes and the VPADDDs per MAC and drops the widening pass.
 */

/* 4 bytes of a row in all 8 dword lanes. */
static inline __m256i a2q_bcast(const uint8_t* p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* The last n (1..3) bytes of a row (p points at them), zero above, in all 8 dword lanes; with kc >= 4
 * one 4-byte load ending at the row's end stays inside the row. */
static inline __m256i a2q_bcast_tail(const uint8_t* p, size_t n, size_t kc)
{
    uint32_t v;
    if (kc >= 4) {
        memcpy(&v, p + n - 4, 4);
        v >>= 8 * (4 - n);
    } else {
        v = (uint32_t)vki_load_partial64(p, n);
    }
    return _mm256_set1_epi32((int32_t)v);
}

#define A2Q_ROW(B, ACC0, ACC1)                                                                         \
    do {                                                                                               \
        const __m256i b_ = (B);                                                                        \
        ACC0 = _mm256_add_epi32(ACC0, _mm256_madd_epi16(_mm256_maddubs_epi16(b_, w0_), ones));         \
        A2_PIN(ACC0);                                                                                  \
        if (HALVES > 1) {                                                                              \
            ACC1 = _mm256_add_epi32(ACC1, _mm256_madd_epi16(_mm256_maddubs_epi16(b_, w1_), ones));     \
            A2_PIN(ACC1);                                                                              \
        }                                                                                              \
    } while (0)

/* One k quad at byte offset K of every row, weights at W (16 channels x 4 k = 64 bytes). */
#define A2Q_QUAD(K, W)                                                                                 \
    do {                                                                                               \
        const __m256i w0_ = _mm256_loadu_si256((const __m256i*)(const void*)(W));                      \
        const __m256i w1_ = HALVES > 1 ? _mm256_loadu_si256((const __m256i*)(const void*)((W) + 32)) : w0_; \
        A2Q_ROW(a2q_bcast(p0 + (K)), acc00, acc01);                                                    \
        if (ROWS > 1) A2Q_ROW(a2q_bcast(p1 + (K)), acc10, acc11);                                      \
        if (ROWS > 2) A2Q_ROW(a2q_bcast(p2 + (K)), acc20, acc21);                                      \
        if (ROWS > 3) A2Q_ROW(a2q_bcast(p3 + (K)), acc30, acc31);                                      \
    } while (0)

static inline __attribute__((always_inline)) void a2q_igemm_t(size_t mr, size_t nc, size_t kc, size_t ks,
                                                              const uint8_t* const* a, const void* w, uint8_t* c,
                                                              size_t c_stride, const vki_qparams* q, const int ROWS,
                                                              const int HALVES)
{
    const int32_t* bias = (const int32_t*)w;
    const float* scale = (const float*)(bias + A2_NR);
    const int8_t* wt = (const int8_t*)(scale + A2_NR);
    const __m256i ones = _mm256_set1_epi16(1);

    __m256i acc00 = _mm256_loadu_si256((const __m256i*)(const void*)bias);
    __m256i acc01 = HALVES > 1 ? _mm256_loadu_si256((const __m256i*)(const void*)(bias + 8)) : acc00;
    __m256i acc10 = acc00, acc11 = acc01, acc20 = acc00, acc21 = acc01, acc30 = acc00, acc31 = acc01;

    const size_t kq = kc & ~(size_t)3, kt = kc & 3;
    for (size_t t = 0; t < ks; t++, a += A2_MR) {
        const uint8_t* p0 = a[0];
        const uint8_t* p1 = a[ROWS > 1 ? 1 : 0];
        const uint8_t* p2 = a[ROWS > 2 ? 2 : 0];
        const uint8_t* p3 = a[ROWS > 3 ? 3 : 0];
        size_t k = 0;
        for (; k + 8 <= kq; k += 8) {
            A2Q_QUAD(k, wt);
            A2Q_QUAD(k + 4, wt + 64);
            wt += 2 * A2_NR * VKI_U8S8_KR;
        }
        if (k < kq) {
            A2Q_QUAD(k, wt);
            wt += A2_NR * VKI_U8S8_KR;
        }
        if (kt) { /* 1..3 k: bytes past the row's end are zero in the register and meet zero weights */
            const __m256i w0_ = _mm256_loadu_si256((const __m256i*)(const void*)wt);
            const __m256i w1_ = HALVES > 1 ? _mm256_loadu_si256((const __m256i*)(const void*)(wt + 32)) : w0_;
            A2Q_ROW(a2q_bcast_tail(p0 + kq, kt, kc), acc00, acc01);
            if (ROWS > 1) A2Q_ROW(a2q_bcast_tail(p1 + kq, kt, kc), acc10, acc11);
            if (ROWS > 2) A2Q_ROW(a2q_bcast_tail(p2 + kq, kt, kc), acc20, acc21);
            if (ROWS > 3) A2Q_ROW(a2q_bcast_tail(p3 + kq, kt, kc), acc30, acc31);
            wt += A2_NR * VKI_U8S8_KR;
        }
    }

    A2_STORE_TILE();
}

#define A2Q_INSTANCE(NAME, ROWS, HALVES)                                                               \
    static __attribute__((noinline)) void NAME(size_t mr, size_t nc, size_t kc, size_t ks,             \
                                               const uint8_t* const* a, const void* w, uint8_t* c,     \
                                               size_t c_stride, const vki_qparams* q)                  \
    {                                                                                                  \
        a2q_igemm_t(mr, nc, kc, ks, a, w, c, c_stride, q, ROWS, HALVES);                               \
    }
A2Q_INSTANCE(a2q_igemm_4x16, 4, 2)
A2Q_INSTANCE(a2q_igemm_4x8, 4, 1)
A2Q_INSTANCE(a2q_igemm_2x16, 2, 2)
A2Q_INSTANCE(a2q_igemm_2x8, 2, 1)
A2Q_INSTANCE(a2q_igemm_1x16, 1, 2)
A2Q_INSTANCE(a2q_igemm_1x8, 1, 1)

static void a2q_igemm(size_t mr, size_t nc, size_t kc, size_t ks, const uint8_t* const* a, const void* w,
                      uint8_t* c, size_t c_stride, const vki_qparams* q)
{
    if (mr > 2) {
        if (nc > 8) a2q_igemm_4x16(mr, nc, kc, ks, a, w, c, c_stride, q);
        else a2q_igemm_4x8(mr, nc, kc, ks, a, w, c, c_stride, q);
    } else if (mr == 2) {
        if (nc > 8) a2q_igemm_2x16(mr, nc, kc, ks, a, w, c, c_stride, q);
        else a2q_igemm_2x8(mr, nc, kc, ks, a, w, c, c_stride, q);
    } else {
        if (nc > 8) a2q_igemm_1x16(mr, nc, kc, ks, a, w, c, c_stride, q);
        else a2q_igemm_1x8(mr, nc, kc, ks, a, w, c, c_stride, q);
    }
}

/* ------------------------------------------------------------------------------------------------
 * Depthwise: one output pixel, all channels; weights int16 [ks][cp].
 *
 * Main loop, 16 channels: taps go in pairs so that VPMADDWD does useful work in both halves of each
 * dword: interleaving the int16 activations of taps t and t+1 (and their weights) gives per channel
 * x_t * w_t + x_t1 * w_t1, exact in int32. Unpacking works within 128-bit lanes, so the two
 * accumulators hold channels [0-3 | 8-11] and [4-7 | 12-15]; one lane permute per block restores
 * channel order. Per 16 channels and tap this needs 3 loads (pointer, activations, weights) and half
 * the widening shuffles of the int32 form below; measured 10-25% faster than it on Zen 3.
 *
 * Groups of 8 and the tail: the activation goes to int32 lanes as (x - x_zp) (its low int16 is the
 * exact value, the high half only sign bits) and the weight is zero-extended to (w, 0), so VPMADDWD
 * computes (x - x_zp) * w + high * 0 per lane, already in channel order.
 */

static inline __m256i a2_dw_x16(const uint8_t* p, __m256i vxzp16)
{
    return _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i*)(const void*)p)), vxzp16);
}

static inline __m256i a2_dw_x8(const uint8_t* p, __m256i vxzp32)
{
    return _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(const void*)p)), vxzp32);
}

static inline __m256i a2_dw_w8(const int16_t* p)
{
    return _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)(const void*)p));
}

/* Always inlined so that ks is a compile-time constant in dw9/dw25. */
static inline __attribute__((always_inline)) void a2_dw(size_t channels, size_t ks, const uint8_t* const* a,
                                                        const void* w, uint8_t* y, const vki_qparams* q)
{
    const size_t cp = (channels + A2_CR - 1) / A2_CR * A2_CR;
    const int32_t* bias = (const int32_t*)w;
    const float* scale = (const float*)(bias + cp);
    const int16_t* wt = (const int16_t*)(scale + cp);
    const __m256i vxzp = _mm256_set1_epi32(q->x_zp);
    const __m256i vxzp16 = _mm256_set1_epi16((int16_t)q->x_zp);
    const __m256 vfmin = _mm256_set1_ps(q->fmin);
    const __m256 vfmax = _mm256_set1_ps(q->fmax);
    const __m256i vyzp = _mm256_set1_epi32(q->y_zp);
    const __m256i zero = _mm256_setzero_si256();
    size_t ch = 0;

    for (; ch + 16 <= channels; ch += 16) {
        __m256i lo = zero, hi = zero;
        size_t t = 0;
        /* Unrolled by 4 pairs (GCC otherwise keeps a loop around them): dw9's pairs unroll fully.
         * x86_kernel_check bench, Zen 5 -mavx2, A/B interleaved, MAC/ns: ks 9 x 144 ch 14.0 -> 17.1,
         * 9 x 960 14.3 -> 18.0, 9 x 32 12.2 -> 13.9, 25 x 96 17.8 -> 20.1. A full unroll of dw25's
         * 12 pairs was slower (28 -> 21 in another run). */
#pragma GCC unroll 4
        for (; t + 2 <= ks; t += 2) {
            const __m256i x0 = a2_dw_x16(a[t] + ch, vxzp16);
            const __m256i x1 = a2_dw_x16(a[t + 1] + ch, vxzp16);
            const __m256i w0 = _mm256_loadu_si256((const __m256i*)(const void*)(wt + t * cp + ch));
            const __m256i w1 = _mm256_loadu_si256((const __m256i*)(const void*)(wt + (t + 1) * cp + ch));
            lo = _mm256_add_epi32(lo,
                                  _mm256_madd_epi16(_mm256_unpacklo_epi16(x0, x1), _mm256_unpacklo_epi16(w0, w1)));
            hi = _mm256_add_epi32(hi,
                                  _mm256_madd_epi16(_mm256_unpackhi_epi16(x0, x1), _mm256_unpackhi_epi16(w0, w1)));
        }
        if (t < ks) { /* odd ks: the last tap pairs with a zero weight */
            const __m256i x0 = a2_dw_x16(a[t] + ch, vxzp16);
            const __m256i w0 = _mm256_loadu_si256((const __m256i*)(const void*)(wt + t * cp + ch));
            lo = _mm256_add_epi32(lo,
                                  _mm256_madd_epi16(_mm256_unpacklo_epi16(x0, x0), _mm256_unpacklo_epi16(w0, zero)));
            hi = _mm256_add_epi32(hi,
                                  _mm256_madd_epi16(_mm256_unpackhi_epi16(x0, x0), _mm256_unpackhi_epi16(w0, zero)));
        }
        const __m256i acc0 = _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20),
                                              _mm256_loadu_si256((const __m256i*)(const void*)(bias + ch)));
        const __m256i acc1 = _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x31),
                                              _mm256_loadu_si256((const __m256i*)(const void*)(bias + ch + 8)));
        const __m128i v = a2_pack16(a2_requant(acc0, _mm256_loadu_ps(scale + ch), vfmin, vfmax, vyzp),
                                    a2_requant(acc1, _mm256_loadu_ps(scale + ch + 8), vfmin, vfmax, vyzp));
        _mm_storeu_si128((__m128i*)(void*)(y + ch), v);
    }
    /* Then at most one group of 8 and a tail of 1..7 through a stack copy (never over-read a row).
     * Weights, biases and scales are padded to cp >= round_up(channels, 8), so they load in full. */
    for (; ch < channels; ch += 8) {
        const size_t n = channels - ch < 8 ? channels - ch : 8;
        __m256i acc = _mm256_loadu_si256((const __m256i*)(const void*)(bias + ch));
        if (n == 8) {
            for (size_t t = 0; t < ks; t++)
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(a2_dw_x8(a[t] + ch, vxzp), a2_dw_w8(wt + t * cp + ch)));
        } else {
            uint8_t buf[8] = {0};
            for (size_t t = 0; t < ks; t++) {
                memcpy(buf, a[t] + ch, n);
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(a2_dw_x8(buf, vxzp), a2_dw_w8(wt + t * cp + ch)));
            }
        }
        const __m128i v = a2_pack8(a2_requant(acc, _mm256_loadu_ps(scale + ch), vfmin, vfmax, vyzp));
        if (n == 8) {
            _mm_storel_epi64((__m128i*)(void*)(y + ch), v);
        } else {
            uint8_t out[16];
            _mm_storeu_si128((__m128i*)(void*)out, v);
            memcpy(y + ch, out, n);
        }
    }
}

static void a2_dw9(size_t channels, size_t ks, const uint8_t* const* a, const void* w, uint8_t* y,
                   const vki_qparams* q)
{
    (void)ks;
    a2_dw(channels, 9, a, w, y, q);
}

static void a2_dw25(size_t channels, size_t ks, const uint8_t* const* a, const void* w, uint8_t* y,
                    const vki_qparams* q)
{
    (void)ks;
    a2_dw(channels, 25, a, w, y, q);
}

static void a2_dw_any(size_t channels, size_t ks, const uint8_t* const* a, const void* w, uint8_t* y,
                      const vki_qparams* q)
{
    a2_dw(channels, ks, a, w, y, q);
}

const vki_isa vki_isa_avx2 = {
    .name = "avx2",
    .available = a2_available,
    .mr = A2_MR,
    .nr = A2_NR,
    .kr = A2_KR,
    .igemm = a2_igemm,
    .igemm_u8s8 = a2q_igemm,
    .name_u8s8 = "avx2-u8s8",
    .u8s8_wmin = -VKI_U8S8_WMAX,
    .u8s8_wmax = VKI_U8S8_WMAX,
    .cr = A2_CR,
    .dw9 = a2_dw9,
    .dw25 = a2_dw25,
    .dw_any = a2_dw_any,
};
