#version 450
// TFLite's 8-bit MEAN over any axes with XNNPACK's bits (vkinfer/reference/tflite_mean.py):
//     y = clamp(round_half_even(fl32(fl32(fl32(sum) * m) + bias)), qmin, qmax)
// sum: the exact int32 sum of the raw values (n * 255 < 2^31, checked on the host); m, bias: float32 from the
// host (their bit patterns in push constants). Vulkan does not fix float rounding modes and may contract the
// multiply-add, so every float32 step is emulated on bit patterns with integer arithmetic: the bits equal the
// CPU's by construction. Products below the normal range are flushed to 0: added to the float32 bias and
// rounded to an integer, they give the same result (|bias| >= 1/4 has a half-ulp far above 2^-126; a smaller
// |bias| plus such a product rounds to 0 either way).
//
// Addressing: each logical axis has a byte stride in x's packed form (rows padded to whole words;
// vkinfer/layout.py). One invocation writes one word of y: each of its bytes' y index is decomposed over y's
// non-unit storage axes (K0..K5 outer to inner, KS: their x byte strides) into x's base byte, from which the
// reduced axes (R0..R5, RS: x byte strides, adjacent ones merged on the host) are summed.
// VEC: y's row is x's row byte for byte (a kept channel axis, e.g. MobileNet's mean over H and W), so the four
// bytes of a y word come from one x word at every reduced position: RS are then in words.
layout(local_size_x = 64) in;
layout(constant_id = 0) const int K0 = 1;
layout(constant_id = 1) const int K1 = 1;
layout(constant_id = 2) const int K2 = 1;
layout(constant_id = 3) const int K3 = 1;
layout(constant_id = 4) const int K4 = 1;
layout(constant_id = 5) const int K5 = 1;
layout(constant_id = 6) const int KS0 = 0;
layout(constant_id = 7) const int KS1 = 0;
layout(constant_id = 8) const int KS2 = 0;
layout(constant_id = 9) const int KS3 = 0;
layout(constant_id = 10) const int KS4 = 0;
layout(constant_id = 11) const int KS5 = 0;
layout(constant_id = 12) const int R0 = 1;
layout(constant_id = 13) const int R1 = 1;
layout(constant_id = 14) const int R2 = 1;
layout(constant_id = 15) const int R3 = 1;
layout(constant_id = 16) const int R4 = 1;
layout(constant_id = 17) const int R5 = 1;
layout(constant_id = 18) const int RS0 = 0;
layout(constant_id = 19) const int RS1 = 0;
layout(constant_id = 20) const int RS2 = 0;
layout(constant_id = 21) const int RS3 = 0;
layout(constant_id = 22) const int RS4 = 0;
layout(constant_id = 23) const int RS5 = 0;
layout(constant_id = 24) const int WIDTH = 1;   // y's row width (values)
layout(constant_id = 25) const int C4 = 1;      // y's words per row
layout(constant_id = 26) const int WORDS = 1;   // y's words
layout(constant_id = 27) const bool SIGNED = false;
layout(constant_id = 28) const bool VEC = false;

layout(std430, binding = 0) readonly buffer X_ { uint X[]; };
layout(std430, binding = 1) writeonly buffer Y_ { uint Y[]; };
layout(push_constant) uniform P { int m; int bias; int lo; int hi; } pc;  // m, bias: float32 bit patterns

#extension GL_GOOGLE_include_directive : require
#include "qcommon.glsl"

// Mantissa with the implicit bit, exponent field (1 for denormals): value = m * 2^(e - 150).
void unpack_f32(uint u, out uint m, out int e)
{
    e = int(u >> 23);
    m = u & 0x7fffffu;
    if (e != 0) m |= 0x800000u; else e = 1;
}

void unpack_norm(uint u, out uint m, out int e)
{
    unpack_f32(u, m, e);
    while (m < 0x800000u) { m <<= 1; e -= 1; }
}

// fl32(a) for 0 < a < 2^32.
uint i2f(uint a)
{
    int msb = findMSB(a);
    int e = 127 + msb;
    uint m;
    if (msb > 23) {
        m = shr_rne(a, msb - 23);
        if (m >= (1u << 24)) { m >>= 1; e += 1; }
    } else {
        m = a << uint(23 - msb);
    }
    return (uint(e) << 23) | (m & 0x7fffffu);
}

// fl32(a * b) for finite a, b > 0; results below the normal range flushed to 0 (see the header).
uint fmul(uint a, uint b)
{
    uint ma, mb;
    int ea, eb;
    unpack_norm(a, ma, ea);
    unpack_norm(b, mb, eb);
    uint hi, lo;
    umulExtended(ma, mb, hi, lo);  // in [2^46, 2^48)
    uint m, r, half_;
    int e;
    if (hi >= (1u << 15)) {
        m = (hi << 8) | (lo >> 24); r = lo & 0xffffffu; half_ = 1u << 23; e = ea + eb - 126;
    } else {
        m = (hi << 9) | (lo >> 23); r = lo & 0x7fffffu; half_ = 1u << 22; e = ea + eb - 127;
    }
    if (r > half_ || (r == half_ && (m & 1u) == 1u)) m += 1u;
    if (m >= (1u << 24)) { m >>= 1; e += 1; }
    if (e <= 0) return 0u;
    if (e >= 255) return 0x7f800000u;
    return (uint(e) << 23) | (m & 0x7fffffu);
}

// Rounds (m >> 6) * 2^(e - 150) half to even: m carries 6 guard bits, the lowest sticky.
uint round_guarded(uint m, int e)
{
    uint r = m & 63u;
    m >>= 6;
    if (r > 32u || (r == 32u && (m & 1u) == 1u)) m += 1u;
    if (m >= (1u << 24)) { m >>= 1; e += 1; }
    if (m < (1u << 23)) return m;  // denormal (e == 1)
    if (e >= 255) return 0x7f800000u;
    return (uint(e) << 23) | (m & 0x7fffffu);
}

// fl32(a + b) (add) or fl32(a - b) (!add) for magnitudes a >= b >= 0, round to nearest even. Subtraction: with
// the exponents 2 or more apart at most one bit cancels, and the sticky bit keeps the exact difference on the
// same side of every rounding boundary; closer exponents lose no bit at all.
uint fadd_mag(uint a, uint b, bool add)
{
    if (b == 0u) return a;
    uint ma, mb;
    int ea, eb;
    unpack_f32(a, ma, ea);
    unpack_f32(b, mb, eb);
    ma <<= 6; mb <<= 6;
    int d = ea - eb;
    if (d >= 31) {
        mb = 1u;
    } else if (d > 0) {
        uint sticky = (mb & ((1u << uint(d)) - 1u)) != 0u ? 1u : 0u;
        mb = (mb >> uint(d)) | sticky;
    }
    int e = ea;
    uint m;
    if (add) {
        m = ma + mb;
        if (m >= (1u << 30)) { m = (m >> 1) | (m & 1u); e += 1; }
    } else {
        m = ma - mb;
        if (m == 0u) return 0u;
        while (m < (1u << 29) && e > 1) { m <<= 1; e -= 1; }
    }
    return round_guarded(m, e);
}

// fl32(a + b) for signed finite bit patterns.
uint fadd_signed(uint a, uint b)
{
    uint sa = a & 0x80000000u, sb = b & 0x80000000u;
    uint ua = a & 0x7fffffffu, ub = b & 0x7fffffffu;
    if (ua < ub) { uint t = ua; ua = ub; ub = t; t = sa; sa = sb; sb = t; }
    if (sa == sb) return sa | fadd_mag(ua, ub, true);
    if (ua == ub) return 0u;
    return sa | fadd_mag(ua, ub, false);
}

// round_half_even of a float32 bit pattern, magnitudes capped at 1024 (every clamp range is narrower).
int rint_capped(uint f)
{
    uint a = f & 0x7fffffffu;
    if (a == 0u) return 0;
    uint m;
    int e;
    unpack_f32(a, m, e);
    int sh = 150 - e;
    int mag = sh <= 0 ? 1024 : sh >= 25 ? 0 : int(min(shr_rne(m, sh), 1024u));
    return (f >> 31) != 0u ? -mag : mag;
}

int requant(int s)
{
    uint p = 0u;
    if (s != 0) p = fmul(i2f(uint(abs(s))), uint(pc.m)) | (s < 0 ? 0x80000000u : 0u);
    return clamp(rint_capped(fadd_signed(p, uint(pc.bias))), pc.lo, pc.hi);
}

// x's byte (VEC: word) offset of y's value at y index L (decomposed over K, innermost K5).
int base_of(int L)
{
    int b = 0, c;
    c = L % K5; L /= K5; b += c * KS5;
    c = L % K4; L /= K4; b += c * KS4;
    c = L % K3; L /= K3; b += c * KS3;
    c = L % K2; L /= K2; b += c * KS2;
    c = L % K1; L /= K1; b += c * KS1;
    return b + L * KS0;
}

int load_byte(int addr)
{
    uint v = (X[addr >> 2] >> uint(8 * (addr & 3))) & 0xffu;
    return SIGNED ? int(v << 24) >> 24 : int(v);
}

// The innermost reduced loop takes UNROLL positions an iteration, written out (not a loop): Mesa's llvmpipe ends
// every loop of an invocation once all of them together reach 65535 iterations, silently (vulkan/_loops.py), so
// the positions an invocation can sum are ~UNROLL times that budget; the lowering refuses a node past it.
#define UNROLL 16
#define UNROLLED(F) F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7) F(8) F(9) F(10) F(11) F(12) F(13) F(14) F(15)

void main()
{
    int id = int(gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u);
    if (id >= WORDS) return;
    int row = id / C4, col0 = (id - row * C4) * 4;
    ivec4 acc = ivec4(0);
    if (VEC) {
        int b = base_of(row * WIDTH + col0) >> 2;
        for (int i0 = 0; i0 < R0; i0++)
        for (int i1 = 0; i1 < R1; i1++)
        for (int i2 = 0; i2 < R2; i2++)
        for (int i3 = 0; i3 < R3; i3++)
        for (int i4 = 0; i4 < R4; i4++) {
            int o = b + i0 * RS0 + i1 * RS1 + i2 * RS2 + i3 * RS3 + i4 * RS4, i5 = 0;
#define VADD(u) acc += unpack8(X[o + (i5 + u) * RS5], SIGNED);
            for (; i5 <= R5 - UNROLL; i5 += UNROLL) { UNROLLED(VADD) }
            for (; i5 < R5; i5++) VADD(0)
        }
    } else {
        for (int j = 0; j < 4; j++) {
            if (col0 + j >= WIDTH) break;
            int b = base_of(row * WIDTH + col0 + j), s = 0;
            for (int i0 = 0; i0 < R0; i0++)
            for (int i1 = 0; i1 < R1; i1++)
            for (int i2 = 0; i2 < R2; i2++)
            for (int i3 = 0; i3 < R3; i3++)
            for (int i4 = 0; i4 < R4; i4++) {
                int o = b + i0 * RS0 + i1 * RS1 + i2 * RS2 + i3 * RS3 + i4 * RS4, i5 = 0;
#define BADD(u) s += load_byte(o + (i5 + u) * RS5);
                for (; i5 <= R5 - UNROLL; i5 += UNROLL) { UNROLLED(BADD) }
                for (; i5 < R5; i5++) BADD(0)
            }
            acc[j] = s;
        }
    }
    ivec4 q = ivec4(0);
    for (int j = 0; j < 4; j++)
        if (col0 + j < WIDTH) q[j] = requant(acc[j]);
    Y[id] = pack8(q);
}
