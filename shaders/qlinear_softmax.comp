#version 450
// com.microsoft QLinearSoftmax with ONNX Runtime's bits (vkinfer/reference/qlinear_softmax.py). Per row:
//     sum = e_0 + e_1 + ...   sequentially, float32      (e = the reference's table, index 255 - (max - x))
//     v   = round_half_even(fl32(fl32(e * m) / sum))  with m = floor(1 / y_scale)
//     y   = min(v + y_zp, qmax)
// Vulkan does not promise float32 division to be correctly rounded, nor denormals to survive, so every float
// operation here is emulated on the float32 bit patterns with integer arithmetic (all operands are >= 0, which
// keeps the emulation short): the bits equal the CPU's by construction.
// The tensor is read as (OUTER, LEN, INNER) in storage order: element a of row r = (o, i) has storage index
// (o * LEN + a) * INNER + i, stored packed (rows of WIDTH bytes padded to C4 words; vkinfer/layout.py).
//   MODE 0: one invocation per row: its maximum (canonical: int8 XOR 0x80) and float32 sum into S.
//   MODE 1: one invocation per output word: each of its bytes from S, the table and m (padding bytes 0).
layout(local_size_x = 64) in;
layout(constant_id = 0) const int OUTER = 1;
layout(constant_id = 1) const int LEN = 1;
layout(constant_id = 2) const int INNER = 1;
layout(constant_id = 3) const int WIDTH = 1;   // bytes per packed row
layout(constant_id = 4) const int C4 = 1;      // words per packed row
layout(constant_id = 5) const int WORDS = 1;   // words in the tensor
layout(constant_id = 6) const bool SIGNED = false;
layout(constant_id = 7) const int MODE = 0;

layout(std430, binding = 0) readonly buffer X_ { uint X[]; };
layout(std430, binding = 1) readonly buffer T_ { uint T[]; };  // 256 float32 bit patterns
layout(std430, binding = 2) buffer S_ { uint S[]; };           // per row: max (canonical), sum bits
layout(std430, binding = 3) writeonly buffer Y_ { uint Y[]; };
layout(push_constant) uniform P { int y_mult; int y_zp; } pc;  // y_mult: float32 bits of m

#extension GL_GOOGLE_include_directive : require
#include "qcommon.glsl"

// Canonical byte (order-preserving unsigned) at storage index L.
uint load_canonical(int L)
{
    int row = L / WIDTH, col = L - row * WIDTH;
    uint b = (X[row * C4 + (col >> 2)] >> uint(8 * (col & 3))) & 0xffu;
    return SIGNED ? b ^ 0x80u : b;
}

// Mantissa with the implicit bit, exponent field (1 for denormals): value = m * 2^(e - 150).
void unpack_f32(uint u, out uint m, out int e)
{
    e = int(u >> 23);
    m = u & 0x7fffffu;
    if (e != 0) m |= 0x800000u; else e = 1;
}

// fl32(a + b) for a, b >= 0 (zeros and denormals included), round to nearest even.
uint fadd(uint a, uint b)
{
    if (a < b) { uint t = a; a = b; b = t; }  // non-negative floats order as their bit patterns
    if (b == 0u) return a;
    uint ma, mb;
    int ea, eb;
    unpack_f32(a, ma, ea);
    unpack_f32(b, mb, eb);
    ma <<= 6; mb <<= 6;  // 6 guard bits, the lowest of which ends up sticky
    int d = ea - eb;
    if (d >= 31) {
        mb = 1u;
    } else if (d > 0) {
        uint sticky = (mb & ((1u << uint(d)) - 1u)) != 0u ? 1u : 0u;
        mb = (mb >> uint(d)) | sticky;
    }
    uint m = ma + mb;
    int e = ea;
    if (m >= (1u << 30)) { m = (m >> 1) | (m & 1u); e += 1; }
    uint r = m & 63u;
    m >>= 6;
    if (r > 32u || (r == 32u && (m & 1u) == 1u)) m += 1u;
    if (m >= (1u << 24)) { m >>= 1; e += 1; }
    if (m < (1u << 23)) return m;  // still denormal (e == 1)
    if (e >= 255) return 0x7f800000u;
    return (uint(e) << 23) | (m & 0x7fffffu);
}

// Normalised mantissa in [2^23, 2^24) and exponent of a > 0.
void unpack_norm(uint u, out uint m, out int e)
{
    unpack_f32(u, m, e);
    while (m < 0x800000u) { m <<= 1; e -= 1; }
}

// fl32(a * b) for a, b >= 0; results below the normal range are returned as 0 (only ever divided by a sum
// >= 1 and rounded to an integer, where they give 0 either way).
uint fmul(uint a, uint b)
{
    if (a == 0u || b == 0u) return 0u;
    uint ma, mb;
    int ea, eb;
    unpack_norm(a, ma, ea);
    unpack_norm(b, mb, eb);
    uint hi, lo;
    umulExtended(ma, mb, hi, lo);  // P = ma * mb in [2^46, 2^48)
    uint m, r, half_;
    int e;
    if (hi >= (1u << 15)) {  // P >= 2^47: keep the top 24 of 48 bits
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

// round_half_even(fl32(a / b)) for a >= 0 and a normal b >= 1, capped at 1024 (every v past it saturates).
int div_round(uint a, uint b)
{
    if (a == 0u) return 0;
    uint ma, mb;
    int ea, eb;
    unpack_norm(a, ma, ea);
    unpack_norm(b, mb, eb);
    uint s = ma >= mb ? 0u : 1u;
    uint rem = (ma << s) - mb;  // the quotient's leading bit is 1
    uint q = 1u;
    for (int k = 0; k < 24; k++) {  // q = floor((ma << s) * 2^24 / mb), 25 bits
        rem <<= 1;
        q <<= 1;
        if (rem >= mb) { rem -= mb; q |= 1u; }
    }
    uint m = q >> 1;
    if ((q & 1u) == 1u && (rem != 0u || (m & 1u) == 1u)) m += 1u;
    int e = ea - eb - int(s) + 127;  // fl32(a / b) = m * 2^(e - 150)
    if (m >= (1u << 24)) { m >>= 1; e += 1; }
    int sh = 150 - e;
    if (sh <= 0) return 1024;
    if (sh >= 25) return 0;  // below 0.5
    return int(min(shr_rne(m, sh), 1024u));
}

void main()
{
    int id = int(gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u);
    if (MODE == 0) {
        if (id >= OUTER * INNER) return;
        int o = id / INNER, i = id - (id / INNER) * INNER;
        int base = o * LEN * INNER + i;
        uint mx = 0u;
        for (int a = 0; a < LEN; a++) mx = max(mx, load_canonical(base + a * INNER));
        uint sum = 0u;
        for (int a = 0; a < LEN; a++) sum = fadd(sum, T[255u - mx + load_canonical(base + a * INNER)]);
        S[2 * id] = mx;
        S[2 * id + 1] = sum;
        return;
    }
    if (id >= WORDS) return;
    int prow = id / C4, col0 = (id - prow * C4) * 4;
    int qmax_rel = (SIGNED ? 127 : 255) - pc.y_zp;
    uint y = 0u;
    for (int j = 0; j < 4; j++) {
        int col = col0 + j;
        if (col >= WIDTH) break;
        int L = prow * WIDTH + col;
        int o = L / (LEN * INNER), rest = L - o * (LEN * INNER);
        int r = o * INNER + (rest - (rest / INNER) * INNER);
        uint c = load_canonical(L);
        uint e = T[255u - S[2 * r] + c];
        int v = min(div_round(fmul(e, uint(pc.y_mult)), S[2 * r + 1]), qmax_rel) + pc.y_zp;
        y |= (uint(v) & 0xffu) << uint(8 * j);
    }
    Y[id] = y;
}
