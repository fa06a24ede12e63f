#version 450
// Elementwise 8-bit ops as table lookups, bit-exact by construction: the host fills the table by
// running the numpy reference (vkinfer/reference/) on every possible input, so the shader does no
// arithmetic that a driver could round differently.
//   BINARY = false: y = T[x]          (QLinearLeakyRelu, QLinearSigmoid: 256-byte table)
//   BINARY = true:  y = T[x * 256 + z] (QLinearAdd, QLinearMul: 64 KiB table; z of equal shape, or
//                   Z_ROW: one row of channels broadcast over every row, as a per-channel bias)
//   GENERAL: any numpy broadcast (vkinfer/vulkan/qlinear_lut.py): each output byte's element index, unravelled
//   over the output's form dimensions D0..D5, reads X and Z at their own byte strides (0 where broadcast)
// Bytes index the table raw (int8 as two's complement). Tensors are packed 4 bytes per word with
// each row of C channels padded to C4 words; padding bytes are written as 0.
layout(local_size_x = 64) in;
layout(constant_id = 0) const int WORDS = 1;   // words in the tensor
layout(constant_id = 1) const int C4 = 1;      // words per row (pixel)
layout(constant_id = 2) const int C = 1;       // real channels per row
layout(constant_id = 3) const bool BINARY = false;
layout(constant_id = 4) const bool Z_ROW = false;  // Z is one row (C4 words) broadcast over every row
layout(constant_id = 5) const bool GENERAL = false;
layout(constant_id = 6) const int D0 = 1;   // the output's form dimensions, outermost first (unused: 1)
layout(constant_id = 7) const int D1 = 1;
layout(constant_id = 8) const int D2 = 1;
layout(constant_id = 9) const int D3 = 1;
layout(constant_id = 10) const int D4 = 1;
layout(constant_id = 11) const int D5 = 1;
layout(constant_id = 12) const int XS0 = 0;  // X's byte stride per output form dimension (packed form)
layout(constant_id = 13) const int XS1 = 0;
layout(constant_id = 14) const int XS2 = 0;
layout(constant_id = 15) const int XS3 = 0;
layout(constant_id = 16) const int XS4 = 0;
layout(constant_id = 17) const int XS5 = 0;
layout(constant_id = 18) const int ZS0 = 0;  // Z's
layout(constant_id = 19) const int ZS1 = 0;
layout(constant_id = 20) const int ZS2 = 0;
layout(constant_id = 21) const int ZS3 = 0;
layout(constant_id = 22) const int ZS4 = 0;
layout(constant_id = 23) const int ZS5 = 0;

layout(std430, binding = 0) readonly buffer X_ { uint X[]; };
layout(std430, binding = 1) readonly buffer Z_ { uint Z[]; };  // second operand (bound to X when unary)
layout(std430, binding = 2) readonly buffer T_ { uint T[]; };
layout(std430, binding = 3) writeonly buffer Y_ { uint Y[]; };

uint lookup(uint i) { return (T[i >> 2] >> ((i & 3u) * 8u)) & 0xffu; }
uint x_byte(int o) { return (X[o >> 2] >> uint(8 * (o & 3))) & 0xffu; }
uint z_byte(int o) { return (Z[o >> 2] >> uint(8 * (o & 3))) & 0xffu; }

// Element e of the output (unpadded form order) -> (X offset, Z offset) in bytes.
ivec2 offsets(int e)
{
    int i5 = e % D5; e /= D5;
    int i4 = e % D4; e /= D4;
    int i3 = e % D3; e /= D3;
    int i2 = e % D2; e /= D2;
    int i1 = e % D1; e /= D1;
    int i0 = e;
    return ivec2(i0 * XS0 + i1 * XS1 + i2 * XS2 + i3 * XS3 + i4 * XS4 + i5 * XS5,
                 i0 * ZS0 + i1 * ZS1 + i2 * ZS2 + i3 * ZS3 + i4 * ZS4 + i5 * ZS5);
}

void main()
{
    int i = int(gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u);
    if (i >= WORDS) return;
    int ch0 = (i - (i / C4) * C4) * 4;
    if (GENERAL) {
        int e0 = (i / C4) * C + ch0;
        uint y = 0u;
        for (int j = 0; j < 4; j++) {
            if (ch0 + j >= C) break;
            ivec2 o = offsets(e0 + j);
            y |= lookup((x_byte(o.x) << 8) | z_byte(o.y)) << uint(8 * j);
        }
        Y[i] = y;
        return;
    }
    uint x = X[i];
    uint z = BINARY ? Z[Z_ROW ? i - (i / C4) * C4 : i] : 0u;
    uint y = 0u;
    for (int j = 0; j < 4; j++) {
        if (ch0 + j >= C) break;
        uint a = (x >> uint(8 * j)) & 0xffu;
        uint idx = BINARY ? (a << 8) | ((z >> uint(8 * j)) & 0xffu) : a;
        y |= lookup(idx) << uint(8 * j);
    }
    Y[i] = y;
}
